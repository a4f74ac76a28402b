"""A loopback fake of the providers' batch APIs (and their synchronous chat endpoints).

Speaks enough of OpenAI's Files + Batch API (``/v1/files``, ``/v1/batches``) and Anthropic's
Message Batches (``/v1/messages/batches``) for the real SDKs, plus ``/v1/chat/completions`` and
``/v1/messages``, so a synchronous run and a batch run can be pointed at the same endpoint (the
endpoint is part of the cache key). Every request is answered "Fake answer to: {prompt}", like
``fake_provider.py``. Controls (attributes, set by a test; read when a batch is created):

- ``polls``: a batch reports finished on its ``polls``-th status check (default 1);
- ``expire_next``: that many next batches expire: OpenAI ``expired`` with every request in the
  error file as ``batch_expired``; Anthropic ``ended`` with every result ``expired``;
- ``fail_match``: requests whose prompt contains it are errored (a partial failure);
- ``filter_match``: requests whose prompt contains it get a provider block (content_filter /
  refusal stop reason);
- ``hold``: while True no batch finishes, however often it is polled;
- ``reject_key``: every request gets a 401.

``stop()`` and ``start(port)`` restart the server on the same port with every file and batch
kept (a provider outage mid-poll). Counters: ``count(kind)`` for kinds ``chat``, ``upload``,
``create``, ``retrieve``, ``results``; ``submitted_ids()`` lists every custom_id ever submitted.

From another process: ``python tests/fake_batch.py --port 0 --polls 2`` prints the base URL.
"""

from __future__ import annotations

import argparse
import email.parser
import email.policy
import json
import re
import sys
import time

from fake_server import JSONHandler, LoopbackFake, last_user_text, serve_until_killed


class FakeBatch(LoopbackFake):
    """The batch server's state and controls; thread-safe. ``start()`` binds 127.0.0.1."""

    def __init__(self, default_text: str = "Fake answer to: {prompt}"):
        super().__init__()
        self.handler = _Handler
        self.default_text = default_text
        self.polls = 1
        self.expire_next = 0
        self.fail_match: str | None = None
        self.filter_match: str | None = None
        self.hold = False
        self.reject_key = False
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict] = {}  # OpenAI, by id
        self.message_batches: dict[str, dict] = {}  # Anthropic, by id
        self.log: list[tuple[str, str]] = []  # (kind, path)
        self._ids = 0

    # -- control ---------------------------------------------------------------
    @property
    def url(self) -> str:
        return self.root

    @property
    def openai_url(self) -> str:
        return self.url + "/v1"

    def count(self, kind: str) -> int:
        with self._lock:
            return sum(1 for k, _ in self.log if k == kind)

    def submitted_ids(self) -> list[str]:
        """Every custom_id of every batch created, in order (duplicates kept)."""
        with self._lock:
            ids = [i for b in self.batches.values() for i in b["custom_ids"]]
            return ids + [i for b in self.message_batches.values() for i in b["custom_ids"]]

    def _new_id(self, prefix: str) -> str:
        with self._lock:
            self._ids += 1
            return f"{prefix}{self._ids:06d}"

    def _expires(self) -> bool:
        """Whether the batch being created is to expire (one of the next ``expire_next``)."""
        with self._lock:
            expire = self.expire_next > 0
            self.expire_next -= 1 if expire else 0
        return expire

    def _created(self, batches: dict, batch: dict) -> tuple[int, dict]:
        """Keep the new ``batch`` in ``batches`` (by id); the create call's reply."""
        with self._lock:
            batches[batch["id"]] = batch
        return 200, self._public(batch)

    @staticmethod
    def _polled(batches: dict, batch_id: str) -> dict | None:
        """The batch ``batch_id`` of ``batches`` with this status check counted, or None if there is
        none; called with the lock held."""
        batch = batches.get(batch_id)
        if batch is not None:
            batch["_seen"] += 1
        return batch

    # -- answering -------------------------------------------------------------
    def answer_openai(self, body: dict, number: int) -> tuple[int, dict]:
        """(status, body) for one chat-completions request."""
        prompt = last_user_text(body.get("messages", []))
        if self.fail_match and self.fail_match in prompt:
            return 500, {"error": {"message": "fake per-request failure", "type": "server_error",
                                   "code": "server_error"}}
        blocked = bool(self.filter_match and self.filter_match in prompt)
        text = self.default_text.replace("{prompt}", prompt)
        usage_in, usage_out = len(prompt.split()) + 1, len(text.split())
        return 200, {
            "id": f"chatcmpl-{number}", "object": "chat.completion", "created": 0,
            "model": body.get("model", ""),
            "choices": [{"index": 0, "finish_reason": "content_filter" if blocked else "stop",
                         "logprobs": None,
                         "message": {"role": "assistant", "content": None if blocked else text}}],
            "usage": {"prompt_tokens": usage_in, "completion_tokens": usage_out,
                      "total_tokens": usage_in + usage_out},
        }

    def answer_anthropic(self, body: dict, number: int) -> tuple[int, dict]:
        """(status, body) for one messages request."""
        prompt = last_user_text(body.get("messages", []))
        if self.fail_match and self.fail_match in prompt:
            return 500, {"type": "error", "error": {"type": "api_error",
                                                    "message": "fake per-request failure"}}
        blocked = bool(self.filter_match and self.filter_match in prompt)
        text = self.default_text.replace("{prompt}", prompt)
        return 200, {
            "id": f"msg_{number}", "type": "message", "role": "assistant",
            "model": body.get("model", ""),
            "content": [{"type": "text", "text": "" if blocked else text}],
            "stop_reason": "refusal" if blocked else "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": len(prompt.split()) + 1, "output_tokens": len(text.split())},
        }

    # -- OpenAI batches --------------------------------------------------------
    def create_batch(self, body: dict) -> tuple[int, dict]:
        data = self.files.get(body.get("input_file_id", ""))
        if data is None:
            return 404, {"error": {"message": "no such file", "type": "invalid_request_error"}}
        lines = [json.loads(line) for line in data.decode().splitlines() if line.strip()]
        batch_id = self._new_id("batch_")
        expire = self._expires()
        out, err = [], []
        for n, line in enumerate(lines, 1):
            if expire:
                err.append({"id": f"req_{n}", "custom_id": line["custom_id"], "response": None,
                            "error": {"code": "batch_expired", "message": "not completed in time"}})
                continue
            status, reply = self.answer_openai(line["body"], n)
            item = {"id": f"req_{n}", "custom_id": line["custom_id"],
                    "response": {"status_code": status, "request_id": f"r{n}", "body": reply},
                    "error": None}
            (out if status == 200 else err).append(item)
        batch = {"id": batch_id, "object": "batch", "endpoint": body.get("endpoint"),
                 "input_file_id": body["input_file_id"], "completion_window": "24h",
                 "created_at": int(time.time()), "status": "validating", "errors": None,
                 "output_file_id": None, "error_file_id": None,
                 "request_counts": {"total": len(lines), "completed": 0, "failed": 0},
                 "custom_ids": [line["custom_id"] for line in lines],
                 "_out": out, "_err": err, "_expire": expire, "_polls": self.polls, "_seen": 0}
        return self._created(self.batches, batch)

    def retrieve_batch(self, batch_id: str) -> tuple[int, dict]:
        with self._lock:
            batch = self._polled(self.batches, batch_id)
            if batch is None:
                return 404, {"error": {"message": "no such batch", "type": "invalid_request_error"}}
            if batch["status"] in ("validating", "in_progress") and not self.hold:
                if batch["_seen"] >= batch["_polls"]:
                    self._finish(batch)
                else:
                    batch["status"] = "in_progress"
            return 200, self._public(batch)

    def _finish(self, batch: dict) -> None:
        batch["status"] = "expired" if batch["_expire"] else "completed"
        for kind, items in (("output_file_id", batch["_out"]), ("error_file_id", batch["_err"])):
            if items:
                self._ids += 1
                file_id = f"file-out{self._ids:06d}"
                self.files[file_id] = "".join(json.dumps(i) + "\n" for i in items).encode()
                batch[kind] = file_id
        batch["request_counts"] = {"total": len(batch["custom_ids"]),
                                   "completed": len(batch["_out"]),
                                   "failed": 0 if batch["_expire"] else len(batch["_err"])}

    @staticmethod
    def _public(batch: dict) -> dict:
        return {k: v for k, v in batch.items() if not k.startswith("_") and k != "custom_ids"}

    # -- Anthropic message batches --------------------------------------------
    def create_message_batch(self, body: dict, base: str) -> tuple[int, dict]:
        batch_id = self._new_id("msgbatch_")
        expire = self._expires()
        results = []
        for n, item in enumerate(body.get("requests", []), 1):
            if expire:
                result = {"type": "expired"}
            else:
                status, reply = self.answer_anthropic(item["params"], n)
                result = ({"type": "succeeded", "message": reply} if status == 200 else
                          {"type": "errored", "error": reply})
            results.append({"custom_id": item["custom_id"], "result": result})
        now = "2026-01-01T00:00:00Z"
        batch = {"id": batch_id, "type": "message_batch", "processing_status": "in_progress",
                 "created_at": now, "expires_at": "2026-01-02T00:00:00Z", "ended_at": None,
                 "archived_at": None, "cancel_initiated_at": None, "results_url": None,
                 "request_counts": {"processing": len(results), "succeeded": 0, "errored": 0,
                                    "canceled": 0, "expired": 0},
                 "custom_ids": [r["custom_id"] for r in results], "_results": results,
                 "_polls": self.polls, "_seen": 0, "_base": base}
        return self._created(self.message_batches, batch)

    def retrieve_message_batch(self, batch_id: str) -> tuple[int, dict]:
        with self._lock:
            batch = self._polled(self.message_batches, batch_id)
            if batch is None:
                return 404, {"type": "error", "error": {"type": "not_found_error",
                                                        "message": "no such batch"}}
            if batch["processing_status"] == "in_progress" and not self.hold \
                    and batch["_seen"] >= batch["_polls"]:
                batch["processing_status"] = "ended"
                batch["ended_at"] = "2026-01-01T01:00:00Z"
                batch["results_url"] = f"{batch['_base']}/v1/messages/batches/{batch_id}/results"
                counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
                for r in batch["_results"]:
                    counts[r["result"]["type"]] += 1
                batch["request_counts"] = counts
            return 200, self._public(batch)


class _Handler(JSONHandler):
    fake: FakeBatch

    def _note(self, kind: str) -> None:
        with self.fake._lock:
            self.fake.log.append((kind, self.path))

    def _rejected(self) -> bool:
        if self.fake.reject_key:
            self.json(401, {"error": {"message": "invalid api key", "type": "authentication_error",
                                       "code": "invalid_api_key"}})
            return True
        return False

    def do_GET(self) -> None:
        if self._rejected():
            return
        path = self.path.split("?", 1)[0].rstrip("/")
        fake = self.fake
        if m := re.fullmatch(r"/v1/files/([^/]+)/content", path):
            self._note("content")
            data = fake.files.get(m.group(1))
            if data is None:
                return self.json(404, {"error": {"message": "no such file", "type": "not_found"}})
            return self.send(200, data, content_type="application/octet-stream")
        if path == "/v1/batches":
            self._note("list")
            with fake._lock:
                data = [fake._public(b) for b in reversed(list(fake.batches.values()))]
            return self.json(200, {"object": "list", "data": data, "has_more": False,
                                    "first_id": data[0]["id"] if data else None,
                                    "last_id": data[-1]["id"] if data else None})
        if m := re.fullmatch(r"/v1/batches/([^/]+)", path):
            self._note("retrieve")
            return self.json(*fake.retrieve_batch(m.group(1)))
        if m := re.fullmatch(r"/v1/messages/batches/([^/]+)/results", path):
            self._note("results")
            batch = fake.message_batches.get(m.group(1))
            if batch is None or batch["processing_status"] != "ended":
                return self.json(404, {"type": "error", "error": {"type": "not_found_error",
                                                                   "message": "no results"}})
            data = "".join(json.dumps(r) + "\n" for r in batch["_results"]).encode()
            return self.send(200, data, content_type="application/binary")
        if m := re.fullmatch(r"/v1/messages/batches/([^/]+)", path):
            self._note("retrieve")
            return self.json(*fake.retrieve_message_batch(m.group(1)))
        self.json(404, {"error": {"message": f"not found: {path}", "type": "not_found"}})

    def do_POST(self) -> None:
        raw = self.body_bytes()
        if self._rejected():
            return
        path = self.path.split("?", 1)[0].rstrip("/")
        fake = self.fake
        if path == "/v1/files":
            self._note("upload")
            return self._upload(raw)
        body = json.loads(raw or b"{}")
        if path == "/v1/batches":
            self._note("create")
            return self.json(*fake.create_batch(body))
        if path == "/v1/messages/batches":
            self._note("create")
            host = self.headers.get("Host") or f"127.0.0.1:{fake.port}"
            return self.json(*fake.create_message_batch(body, f"http://{host}"))
        if path == "/v1/chat/completions":
            self._note("chat")
            return self.json(*fake.answer_openai(body, len(fake.log)))
        if path == "/v1/messages":
            self._note("chat")
            return self.json(*fake.answer_anthropic(body, len(fake.log)))
        self.json(404, {"error": {"message": f"not found: {path}", "type": "not_found"}})

    def _upload(self, raw: bytes) -> None:
        head = f"Content-Type: {self.headers.get('Content-Type')}\r\n\r\n".encode()
        message = email.parser.BytesParser(policy=email.policy.default).parsebytes(head + raw)
        fields, data, name = {}, None, "input.jsonl"
        for part in message.iter_parts():
            if part.get_filename() is not None:
                data, name = part.get_payload(decode=True), part.get_filename()
            else:
                fields[part.get_param("name", header="content-disposition")] = part.get_content()
        if data is None or fields.get("purpose") != "batch":
            return self.json(400, {"error": {"message": "need a file and purpose=batch",
                                              "type": "invalid_request_error"}})
        file_id = self.fake._new_id("file-")
        with self.fake._lock:
            self.fake.files[file_id] = data
        self.json(200, {"id": file_id, "object": "file", "bytes": len(data), "created_at": 0,
                         "filename": name, "purpose": "batch", "status": "processed"})


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve the fake batch APIs on 127.0.0.1 until killed.")
    parser.add_argument("--port", type=int, default=0, help="port (default: any free port)")
    parser.add_argument("--polls", type=int, default=1, help="status checks before a batch ends")
    args = parser.parse_args()
    fake = FakeBatch()
    fake.polls = args.polls
    serve_until_killed(fake.start(args.port))


if __name__ == "__main__":
    sys.exit(main())
