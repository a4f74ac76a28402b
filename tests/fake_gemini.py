"""A loopback fake of the Gemini REST API: ``POST /v1beta/models/{model}:generateContent``, and
batch mode with inline requests (``POST /v1beta/models/{model}:batchGenerateContent``,
``GET /v1beta/batches/{id}``).

Tests point the real ``google-genai`` SDK at it (``GEMINI_BASE_URL``); nothing in ``orbench``
knows it exists. It records every request (path, JSON body, API key header) and answers by rules
a test sets: reply text, a prompt block (``block_reason``), a candidate finish reason
(``finish``: ``SAFETY``, ``MAX_TOKENS``, ...), thinking tokens, no candidates, an error status
(429, 500, 401, 403, 400 with an invalid-key message), for ``times`` requests or for ever.

    fake = FakeGemini().start()
    fake.add_rule(match="ASK-BLOCK", block_reason="SAFETY")
    fake.add_rule(status=429, times=1)
    ... GEMINI_BASE_URL=fake.url ...
    fake.requests  # [{"path", "model", "body", "key"}, ...]

Batch jobs answer each inline request by the same rules and echo its ``metadata``; a job ends
on its ``polls``-th status check (attribute, default 1), as ``JOB_STATE_SUCCEEDED``, or as
``end_state`` if a test sets it (e.g. ``BATCH_STATE_EXPIRED``). ``batches`` holds every job.

Standalone (benchmarks): ``python tests/fake_gemini.py`` prints its URL and serves until killed.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass

from fake_server import JSONHandler, LoopbackFake, serve_until_killed

_PATH = re.compile(r"^/v1beta/models/(?P<model>[^:/]+):(?P<method>generateContent|batchGenerateContent)$")
_BATCH = re.compile(r"^/v1beta/batches/(?P<id>[^:/]+)$")
_STATUS_NAMES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
                 404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}


@dataclass
class Rule:
    """How to answer requests whose last user text contains ``match`` (None: every request)."""

    match: str | None = None
    text: str = "Fake Gemini answer to: {prompt}"
    finish: str = "STOP"
    block_reason: str | None = None
    status: int = 200
    message: str | None = None
    thoughts: int = 0
    no_candidates: bool = False
    delay: float = 0.0  # seconds before answering (benchmarks)
    times: int | None = None


class FakeGemini(LoopbackFake):
    """The server; ``requests`` lists what it received, in order."""

    def __init__(self, model_version: str = "gemini-fake-001"):
        super().__init__()
        self.handler, self.rule_type = _Handler, Rule
        self.model_version = model_version
        self.requests: list[dict] = []
        self.batches: dict[str, dict] = {}
        self.polls = 1
        self.end_state = "BATCH_STATE_SUCCEEDED"

    @property
    def url(self) -> str:
        return self.root + "/"

    def reset(self) -> None:
        with self._lock:
            self.rules.clear()
            self.requests.clear()
            self.batches.clear()
            self.polls, self.end_state = 1, "BATCH_STATE_SUCCEEDED"

    def _pick(self, prompt: str) -> Rule:
        return self.pick(lambda rule: rule.match is None or rule.match in prompt, Rule())

    def _reply(self, rule: Rule, prompt: str) -> dict:
        usage = {"promptTokenCount": max(1, len(prompt.split())), "totalTokenCount": 0}
        reply: dict = {"modelVersion": self.model_version, "responseId": "fake", "usageMetadata": usage}
        if rule.block_reason:
            reply["promptFeedback"] = {"blockReason": rule.block_reason}
            return reply
        if rule.no_candidates:
            reply["candidates"] = []
            return reply
        text = rule.text.format(prompt=prompt)
        parts = [{"text": "thinking it over", "thought": True}] if rule.thoughts else []
        if text:
            parts.append({"text": text})
        candidate: dict = {"finishReason": rule.finish, "index": 0}
        if parts:
            candidate["content"] = {"role": "model", "parts": parts}
        reply["candidates"] = [candidate]
        usage["candidatesTokenCount"] = len(text.split())
        if rule.thoughts:
            usage["thoughtsTokenCount"] = rule.thoughts
        return reply

    def _create_batch(self, model: str, body: dict) -> dict:
        items = body["batch"]["inputConfig"]["requests"]["requests"]
        name = f"batches/fake{len(self.batches) + 1}"
        job = {"name": name, "model": model, "items": items, "checks": 0, "polls": self.polls,
               "end_state": self.end_state, "display_name": body["batch"].get("displayName")}
        with self._lock:
            self.batches[name.split("/")[1]] = job
        return {"name": name, "metadata": {"@type": "type.googleapis.com/google.ai.generativelanguage."
                                                    "v1main.GenerateContentBatch", "model": f"models/{model}",
                                           "name": name, "state": "BATCH_STATE_PENDING"}}

    def _poll_batch(self, job: dict) -> dict:
        job["checks"] += 1
        metadata = {"@type": "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatch",
                    "model": f"models/{job['model']}", "name": job["name"], "state": "BATCH_STATE_RUNNING"}
        if job["checks"] < job["polls"]:
            return {"name": job["name"], "metadata": metadata}
        metadata["state"] = job["end_state"]
        if job["end_state"] == "BATCH_STATE_SUCCEEDED":
            answers = []
            for item in job["items"]:
                prompt = _prompt(item["request"])
                rule = self._pick(prompt)
                entry = {"metadata": item.get("metadata")}
                if rule.status != 200:
                    entry["error"] = {"code": rule.status, "message": rule.message or f"fake error {rule.status}"}
                else:
                    entry["response"] = self._reply(rule, prompt)
                answers.append(entry)
            metadata["output"] = {"inlinedResponses": {"inlinedResponses": answers}}
        return {"name": job["name"], "metadata": metadata, "done": True}


class _Handler(JSONHandler):
    fake: FakeGemini

    def do_POST(self) -> None:
        raw = self.body_bytes()
        path = self.path.split("?")[0]
        found = _PATH.match(path)
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = None
        key = self.headers.get("x-goog-api-key")
        with self.fake._lock:
            self.fake.requests.append({"path": path, "model": found and found["model"],
                                       "body": body, "key": key})
        if not found or body is None:
            return self.json(404, _error(404, f"no route {path}"))
        if found["method"] == "batchGenerateContent":
            return self.json(200, self.fake._create_batch(found["model"], body))
        prompt = _prompt(body)
        rule = self.fake._pick(prompt)
        if rule.delay:
            time.sleep(rule.delay)
        if rule.status != 200:
            message = rule.message or f"fake error {rule.status}"
            return self.json(rule.status, _error(rule.status, message))
        self.json(200, self.fake._reply(rule, prompt))

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        with self.fake._lock:
            self.fake.requests.append({"path": path, "model": None, "body": None,
                                       "key": self.headers.get("x-goog-api-key")})
        found = _BATCH.match(path)
        job = self.fake.batches.get(found["id"]) if found else None
        if job is None:
            return self.json(404, _error(404, f"no batch {path}"))
        self.json(200, self.fake._poll_batch(job))


def _prompt(body: dict) -> str:
    for content in reversed(body.get("contents") or []):
        if content.get("role", "user") == "user":
            return "".join(p.get("text", "") for p in content.get("parts") or [])
    return ""


def _error(status: int, message: str) -> dict:
    return {"error": {"code": status, "message": message,
                      "status": _STATUS_NAMES.get(status, "UNKNOWN")}}


def main() -> None:
    serve_until_killed(FakeGemini().start())


if __name__ == "__main__":
    main()
