"""A loopback fake LLM provider: a real HTTP server speaking OpenAI chat completions and Anthropic messages.

Tests point the real SDK clients at it by base URL; nothing in ``orbench`` knows it exists.
It answers by rules a test sets (reply text, delay, status code, ``Retry-After``, malformed body,
content filter, refusal stop reason, dropped connection, and the faults below), and logs every
request so a test can count and inspect them.

Faults a rule can add: ``empty_choices`` (a 200 with ``choices: []``), ``null_content`` (a 200
whose message content is null, no refusal), ``html`` (an error status with an HTML page as its
body, as a proxy sends), ``trickle`` (the body sent a few bytes at a time over that many
seconds), ``surrogate`` (a lone ``\\ud800`` JSON escape appended to the reply text),
``refusal`` (Anthropic: stop reason ``refusal``; OpenAI: a ``message.refusal`` with null content),
``reasoning`` (behave as OpenAI does for GPT-5 / o-series models: 400 ``unsupported_parameter``
for ``max_tokens`` and 400 ``unsupported_value`` for a temperature other than 1),
``reported_model`` (the model id the reply names, e.g. a dated snapshot) and
``reasoning_tokens`` (reported in the usage), ``hold`` (no answer until :meth:`FakeProvider.release`
or the next test: a run that must be caught part-way, with no timing involved).

In-process use (pytest fixture ``fake`` in ``conftest.py``)::

    fake.add_rule(match="capital", text="Paris")
    fake.add_rule(status=429, retry_after="0", times=1)   # first request only

From another process (benchmarks, shell)::

    python tests/fake_provider.py --port 0 --delay 0.2     # prints the base URL, serves until killed

and the same rules over HTTP: ``POST /_control/rules`` (a JSON list of rule objects),
``GET /_control/requests``, ``POST /_control/reset``.

Reply text may use ``{prompt}`` (the last user message), ``{model}`` and ``{n}`` (request number).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from dataclasses import asdict, dataclass, fields

from fake_server import JSONHandler, LoopbackFake, last_user_text, serve_in_thread, serve_until_killed

__all__ = ["FakeProvider", "Rule", "serve_in_thread", "serve_until_killed"]


@dataclass
class Rule:
    """How to answer requests that match. ``match`` is a substring of the prompt (or system text)."""

    match: str | None = None
    model: str | None = None
    text: str | None = None
    delay: float = 0.0
    status: int = 200
    retry_after: str | None = None
    error_code: str | None = None
    error_message: str | None = None
    malformed: bool = False
    content_filter: bool = False
    refusal: bool = False
    drop: bool = False
    empty_choices: bool = False
    null_content: bool = False
    html: bool = False
    trickle: float = 0.0
    surrogate: bool = False
    reasoning: bool = False
    reported_model: str | None = None
    reasoning_tokens: int = 0
    times: int | None = None  # how many requests this rule answers; None = unlimited
    finish_reason: str | None = None  # e.g. "length" (OpenAI) / "max_tokens" (Anthropic): a cut-off reply
    hold: bool = False  # no answer until release() (or the next test)

    def matches(self, prompt: str, system: str, model: str) -> bool:
        if self.times is not None and self.times <= 0:
            return False
        if self.model is not None and self.model != model:
            return False
        return self.match is None or self.match in prompt or self.match in system


class FakeProvider(LoopbackFake):
    """The server plus its rules and request log. Thread-safe; start() binds 127.0.0.1 on a free port."""

    def __init__(self, default_text: str = "Fake answer to: {prompt}", default_delay: float = 0.0):
        super().__init__()
        self.handler, self.rule_type = _Handler, Rule
        self.released = threading.Event()
        self.default_text = default_text
        self.default_delay = default_delay
        self.requests: list[dict] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.epoch = 0

    # -- control -------------------------------------------------------------
    def reset(self) -> None:
        self.release()
        with self._lock:
            self.rules.clear()
            self.requests.clear()
            self.max_in_flight = 0

    def release(self) -> None:
        """Let every held request go (answered 503) and drop the rules; the log stays."""
        with self._lock:
            self.rules.clear()
            self.released.set()
            self.released = threading.Event()

    def new_epoch(self) -> None:
        """Start a new test: a fresh URL (``/e<N>`` prefix) and an empty log and rule list.

        A request that reaches the server late from an earlier test's client still carries the
        old prefix: it is answered 410 and neither logged nor matched against rules, so it can
        never show up in this test's counts or use up its rules.
        """
        with self._lock:
            self.epoch += 1
        self.reset()

    def count(self, path_suffix: str | None = None) -> int:
        with self._lock:
            return sum(1 for r in self.requests if path_suffix is None or r["path"].endswith(path_suffix))

    @property
    def url(self) -> str:
        return f"{self.root}/e{self.epoch}"

    @property
    def openai_url(self) -> str:
        return self.url + "/v1"

    # -- answering -------------------------------------------------------------
    def _pick(self, prompt: str, system: str, model: str) -> Rule:
        return self.pick(lambda rule: rule.matches(prompt, system, model),
                         Rule(text=self.default_text, delay=self.default_delay))


class _Handler(JSONHandler):
    fake: FakeProvider

    def do_GET(self) -> None:
        if self.path == "/_control/requests":
            with self.fake._lock:
                self.json(200, list(self.fake.requests))
        else:
            self.json(404, {"error": {"message": "not found", "type": "not_found"}})

    def do_POST(self) -> None:
        raw = self.body_bytes()
        if self.path.startswith("/_control/"):
            return self._control(raw)
        epoch, sep, rest = self.path[2:].partition("/") if self.path.startswith("/e") else ("", "", "")
        if sep and epoch.isdigit():
            if int(epoch) != self.fake.epoch:  # a straggler from an earlier test
                return self.json(410, {"error": {"message": "stale test epoch", "type": "gone"}})
            self.path = "/" + rest
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            return self.json(400, {"error": {"message": "bad json", "type": "invalid_request_error"}})
        anthropic = self.path.rstrip("/").endswith("/messages")
        prompt = last_user_text(body.get("messages", []))
        system = body.get("system") or ""
        if not anthropic:
            system = " ".join(m.get("content", "") for m in body.get("messages", [])
                              if m.get("role") == "system")
        model = body.get("model", "")
        self._body = body
        with self.fake._lock:
            self.fake.requests.append({"path": self.path, "body": body, "at": time.monotonic(),
                                       "headers": {k.lower(): v for k, v in self.headers.items()}})
            number = len(self.fake.requests)
        rule = self.fake._pick(prompt, system, model)
        if rule.hold:
            held = self.fake.released
            held.wait(60)
            return self.json(503, {"error": {"message": "released", "type": "released"}})
        with self.fake._lock:
            self.fake.in_flight += 1
            self.fake.max_in_flight = max(self.fake.max_in_flight, self.fake.in_flight)
        try:
            self._answer(rule, anthropic, prompt, model, number)
        finally:
            with self.fake._lock:
                self.fake.in_flight -= 1

    def _answer(self, rule: Rule, anthropic: bool, prompt: str, model: str, number: int) -> None:
        if rule.delay:
            time.sleep(rule.delay)
        if rule.drop:
            self.close_connection = True
            self.connection.shutdown(2)
            return
        if rule.reasoning and not anthropic:
            problem = self._reasoning_problem()
            if problem is not None:
                code, param, message = problem
                return self.json(400, {"error": {"message": message, "type": "invalid_request_error",
                                                  "param": param, "code": code}})
        if rule.status != 200:
            headers = {"Retry-After": rule.retry_after} if rule.retry_after is not None else {}
            if rule.html:
                page = (f"<html><head><title>{rule.status} Bad Gateway</title></head><body><center>"
                        f"<h1>{rule.status} Bad Gateway</h1></center><hr><center>nginx</center>"
                        f"</body></html>").encode()
                return self.send(rule.status, page, headers, content_type="text/html")
            kind = "error" if anthropic else (rule.error_code or "api_error")
            error = {"message": rule.error_message or f"fake error {rule.status}",
                     "type": rule.error_code or kind, "code": rule.error_code}
            payload = {"type": "error", "error": error} if anthropic else {"error": error}
            return self.json(rule.status, payload, headers)
        if rule.malformed:
            return self.send(200, b'{"id": "broken", "choices": [')
        text = (rule.text if rule.text is not None else self.fake.default_text)
        text = text.replace("{prompt}", prompt).replace("{model}", model).replace("{n}", str(number))
        if rule.surrogate:
            text += "\ud800"  # json.dumps writes it as the escape \\ud800: valid JSON, invalid UTF-16
        usage_in, usage_out = len(prompt.split()) + 1, len(text.split())
        named = rule.reported_model or model
        if anthropic:
            stop = "refusal" if rule.refusal else (rule.finish_reason or "end_turn")
            return self.json(200, {
                "id": f"msg_{number}", "type": "message", "role": "assistant", "model": named,
                "content": [{"type": "text", "text": "" if rule.refusal else text}],
                "stop_reason": stop, "stop_sequence": None,
                "usage": {"input_tokens": usage_in, "output_tokens": usage_out},
            }, trickle=rule.trickle)
        finish = "content_filter" if rule.content_filter else (rule.finish_reason or "stop")
        message = {"role": "assistant",
                   "content": None if (rule.content_filter or rule.null_content or rule.refusal) else text}
        if rule.refusal:
            message["refusal"] = text
        usage = {"prompt_tokens": usage_in, "completion_tokens": usage_out,
                 "total_tokens": usage_in + usage_out}
        if rule.reasoning_tokens:
            usage["completion_tokens_details"] = {"reasoning_tokens": rule.reasoning_tokens}
        choices = [] if rule.empty_choices else [
            {"index": 0, "finish_reason": finish, "logprobs": None, "message": message}]
        return self.json(200, {
            "id": f"chatcmpl-{number}", "object": "chat.completion", "created": 0, "model": named,
            "choices": choices, "usage": usage,
        }, trickle=rule.trickle)

    def _reasoning_problem(self) -> tuple[str, str, str] | None:
        """What OpenAI says to a GPT-5 / o-series request with classic parameters, or None."""
        body = self._body
        if "max_tokens" in body:
            return ("unsupported_parameter", "max_tokens",
                    "Unsupported parameter: 'max_tokens' is not supported with this model. "
                    "Use 'max_completion_tokens' instead.")
        if "temperature" in body and body["temperature"] != 1:
            return ("unsupported_value", "temperature",
                    f"Unsupported value: 'temperature' does not support {body['temperature']} with "
                    f"this model. Only the default (1) value is supported.")
        return None

    def _control(self, raw: bytes) -> None:
        if self.path == "/_control/reset":
            self.fake.reset()
        elif self.path == "/_control/rules":
            allowed = {f.name for f in fields(Rule)}
            for item in json.loads(raw or b"[]"):
                self.fake.add_rule(**{k: v for k, v in item.items() if k in allowed})
        else:
            return self.json(404, {"error": "unknown control path"})
        with self.fake._lock:
            self.json(200, {"rules": [asdict(r) for r in self.fake.rules]})


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve the fake provider on 127.0.0.1 until killed.")
    parser.add_argument("--port", type=int, default=0, help="port (default: any free port)")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each default reply")
    parser.add_argument("--text", default="Fake answer to: {prompt}", help="default reply text")
    args = parser.parse_args()
    serve_until_killed(FakeProvider(default_text=args.text, default_delay=args.delay).start(args.port))


if __name__ == "__main__":
    sys.exit(main())
