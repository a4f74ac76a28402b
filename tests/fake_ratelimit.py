"""A loopback fake provider that enforces limits the ways providers and gateways do.

It speaks OpenAI chat completions (``/v1/chat/completions``), Anthropic messages
(``/v1/messages``) and Gemini (``/v1beta/models/{model}:generateContent``), and decides each
request by its :class:`Shape`:

- **Overload** first: ``overload_only`` answers every request, ``overload_every`` every n-th,
  with 503 (529 for Anthropic) "overloaded", before any limit is counted.
- **Random 429s** (``random_429``): that share of the requests, drawn at random whatever the
  rate (a gateway that throttles at random, a provider that answers overload with 429), gets a
  429 at once asking for a wait drawn from 0 to ``random_retry`` seconds (``retry-after-ms``, and
  ``retry-after`` in whole seconds rounded up).
- **The first requests refused** (``refuse_first``): that many get a 429 at once asking for
  ``random_retry`` seconds, whatever the limits.
- **A cap on requests in flight** (``cap``): a request beyond it gets a bare 429 at once.
- **Rate limits**: requests (``rpm``) and tokens (``tpm``, a request costs its prompt
  characters / 4 plus its ``max_tokens``, counted before generation) per ``window`` seconds, as
  token buckets (capacity ``burst`` x the limit: a per-minute limit enforced over shorter
  periods when ``burst`` < 1; the headers still report the whole limit), as ``fixed`` windows
  (counts reset every ``window`` seconds) or as ``sliding`` windows (a log of the last
  ``window`` seconds' admissions, as a gateway's Redis limiter keeps it: a request is admitted
  when the log's count leaves room for it). ``share_after`` admissions in, another job on the key
  takes ``share`` of the refill (the headers do not say so); with ``lift_after``, that job holds
  ``share`` from the start and ends that many admissions in (the limit doubles, say).
- **A queue** (``queue`` > 0, nginx's ``limit_req`` with a burst): requests are admitted one per
  ``window / rpm`` seconds; one that comes early waits its turn at the server (its answer comes
  that much later) while no more than ``queue`` turns are ahead of it, else it gets a 429.

Headers (``style``): ``openai`` (``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``,
``retry-after`` and ``retry-after-ms`` on a 429), ``anthropic`` (``anthropic-ratelimit-*`` with
RFC 3339 resets, whole-second ``retry-after``), ``openrouter`` (``X-RateLimit-Limit``,
``-Remaining`` and ``-Reset`` of the requests' budget, the reset a Unix time in milliseconds, as
OpenRouter sends them), ``gemini`` (no header; a Gemini 429's body says
when a request's worth is free in a ``google.rpc.RetryInfo`` detail, ``"retryDelay": "1.234s"``,
as Gemini's quota errors do) or ``none`` (bare 429s). What they say can be bent:
``reset="next"`` makes the reset mean "until one more request's worth is free" instead of
"until the budget is full again"; ``claim`` multiplies the reported limit and remaining (a limit
that promises more than is given); ``remaining_only`` sends the remaining count alone (and
``retry-after`` on a 429). ``retry`` sets a 429's ``retry-after`` whatever the style: ``exact``
(the whole seconds until a request's worth is free), ``flat`` (60, whatever the limit, as some
gateways send it), ``date`` (an HTTP date, the moment a request's worth is free, rounded up to
the second), ``auto`` (as the style sends it). A shape that runs faster than the real one it
models (the benches' shapes, 20x) says so in ``seconds`` (real seconds one of its own stands
for): a ``retry-after``'s whole seconds and ``flat``'s minute are real ones, sent in the shape's
seconds (``"0.05"``, ``"3"``), so a wait is not rounded up to 20 real seconds. An HTTP date
stays whole seconds of the server's clock. Latency is ``latency`` seconds, varied by
+-``jitter`` of it; a 429 or an overload answer takes ``refuse_latency`` seconds (a gateway
that asks the provider first).

    python tests/fake_ratelimit.py --rpm 150 --window 3 --burst 0.0167 --reset next --latency 0.05
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import re
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from fake_provider import serve_in_thread, serve_until_killed

_GEMINI = re.compile(r"^/v1beta/models/(?P<model>[^:/]+):generateContent$")


@dataclass
class Shape:
    """How the server limits; see the module docstring."""

    rpm: float = 0
    tpm: float = 0
    window: float = 60.0
    fixed: bool = False
    sliding: bool = False
    burst: float = 1.0
    style: str = "openai"
    reset: str = "full"
    claim: float = 1.0
    remaining_only: bool = False
    cap: int = 0
    overload_every: int = 0
    overload_only: bool = False
    latency: float = 0.0
    jitter: float = 0.0
    share: float = 0.0
    share_after: int = 0
    seed: int = 0
    retry: str = "auto"
    refuse_latency: float = 0.0
    queue: float = 0.0
    lift_after: int = 0
    random_429: float = 0.0
    random_retry: float = 1.0
    refuse_first: int = 0
    seconds: float = 1.0  # real seconds one of the shape's stands for (the benches' SCALE)


def _openai_duration(seconds: float) -> str:
    """A reset as OpenAI writes it: ``"20ms"``, ``"1.5s"``, ``"6m0s"``."""
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))}ms"
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}m{rest:.3g}s" if minutes else f"{rest:.3g}s"


class _Bucket:
    """A token bucket: ``limit`` per ``window`` seconds, holding ``burst`` x ``limit``."""

    def __init__(self, limit: float, window: float, burst: float, now: float):
        self.limit, self.window = limit, window
        self.capacity = limit * burst
        self.level, self.at, self.share = self.capacity, now, 0.0

    @property
    def rate(self) -> float:
        return self.limit / self.window

    def update(self, now: float) -> None:
        self.level = min(self.capacity, self.level + self.rate * (1 - self.share) * (now - self.at))
        self.at = now

    def wait_for(self, cost: float) -> float:
        return max(0.0, (min(cost, self.capacity) - self.level) / (self.rate * (1 - self.share)))

    def take(self, cost: float) -> None:
        self.level -= cost

    def remaining(self) -> float:
        """As the headers say it: out of the whole limit (a burst cap is not shown)."""
        return max(0.0, self.level + self.limit - self.capacity)

    def reset_in(self, cost: float, meaning: str) -> float:
        if meaning == "next":
            return cost / self.rate
        return (self.capacity - self.level) / self.rate


class _Window:
    """A fixed window: ``limit`` per window, the count starting again every ``window`` seconds."""

    def __init__(self, limit: float, window: float, burst: float, now: float):
        self.limit, self.window, self.start, self.used, self.share = limit, window, now, 0.0, 0.0
        self.now = now

    def update(self, now: float) -> None:
        self.now = now
        if now >= self.start + self.window:
            self.start += self.window * math.floor((now - self.start) / self.window)
            self.used = 0.0

    def wait_for(self, cost: float) -> float:
        return 0.0 if self.used + cost <= self.limit else self.start + self.window - self.now

    def take(self, cost: float) -> None:
        self.used += cost

    def remaining(self) -> float:
        return max(0.0, self.limit - self.used)

    def reset_in(self, cost: float, meaning: str) -> float:
        return max(0.0, self.start + self.window - self.now)


class _Sliding:
    """A sliding window log: at most ``limit`` admitted over any ``window`` seconds."""

    def __init__(self, limit: float, window: float, burst: float, now: float):
        self.limit, self.window, self.share = limit, window, 0.0
        self.log: deque[tuple[float, float]] = deque()  # (admitted at, cost)
        self.used, self.now = 0.0, now

    def update(self, now: float) -> None:
        self.now = now
        while self.log and self.log[0][0] <= now - self.window:
            self.used -= self.log.popleft()[1]

    def wait_for(self, cost: float) -> float:
        """Seconds until enough of the log has aged out to admit ``cost``."""
        over = self.used + cost - self.limit
        for at, spent in self.log:
            if over <= 0:
                break
            over -= spent
            if over <= 0:
                return max(1e-3, at + self.window - self.now)
        return 0.0 if self.used + cost <= self.limit else self.window

    def take(self, cost: float) -> None:
        self.log.append((self.now, cost))
        self.used += cost

    def remaining(self) -> float:
        return max(0.0, self.limit - self.used)

    def reset_in(self, cost: float, meaning: str) -> float:
        if meaning == "next":
            return self.wait_for(cost)
        return max(0.0, self.log[-1][0] + self.window - self.now) if self.log else 0.0


class FakeRateLimited:
    """The server and its limits; ``start()`` binds 127.0.0.1 on a free port."""

    def __init__(self, shape: Shape | None = None, **fields):
        self.shape = shape or Shape(**fields)
        self._lock = threading.Lock()
        self._random = random.Random(self.shape.seed)
        now = time.monotonic()
        kind = _Sliding if self.shape.sliding else _Window if self.shape.fixed else _Bucket
        self.limits = {name: kind(limit, self.shape.window, self.shape.burst, now)
                       for name, limit in (("requests", self.shape.rpm), ("tokens", self.shape.tpm)) if limit}
        self.ok = self.rejected = self.capped = self.overloaded = 0
        self.received = self.in_flight = self.max_in_flight = 0
        self.admitted: list[float] = []
        self.order: list[str] = []  # the first 8 characters of each request's prompt, as received
        self.shared_since: float | None = None
        self._server: ThreadingHTTPServer | None = None
        self.queue_free = now  # the queue (``queue``): when the next request's turn comes
        if self.shape.lift_after and self.shape.share:  # another job on the key from the start
            self._share(self.shape.share, now)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self, port: int = 0) -> FakeRateLimited:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = serve_in_thread(_Server(("127.0.0.1", port), handler))
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def set_share(self, share: float) -> None:
        """Let another job on the same key take ``share`` of the refill from now on."""
        with self._lock:
            self._share(share, time.monotonic())

    def _share(self, share: float, now: float) -> None:
        for limit in self.limits.values():
            limit.update(now)
            limit.share = share
        self.shared_since = now

    def decide(self, costs: dict[str, float]) -> tuple[str, dict, float]:
        """``ok``, ``overloaded``, ``capped`` or ``limited``, the headers to send, and (limited)
        the seconds until the request's worth is free."""
        shape = self.shape
        with self._lock:
            self.received += 1
            if shape.overload_only or (shape.overload_every and self.received % shape.overload_every == 0):
                self.overloaded += 1
                return "overloaded", {}, 0.0
            if self.received <= shape.refuse_first or (
                    shape.random_429 and self._random.random() < shape.random_429):
                self.rejected += 1
                wait = self._random.uniform(0, shape.random_retry)
                return "limited", {"retry-after-ms": str(round(wait * 1000)),
                                   "retry-after": self._whole(wait, least=0)}, wait
            if shape.cap and self.in_flight >= shape.cap:
                self.capped += 1
                return "capped", {}, 0.0
            now = time.monotonic()
            delay = 0.0
            if shape.queue:  # a queue in front of the limit (nginx's limit_req with a burst)
                gap = shape.window / shape.rpm
                turn = max(now, self.queue_free)
                if turn - now > shape.queue * gap:
                    self.rejected += 1
                    return "limited", self._headers(costs, turn - now - shape.queue * gap), turn - now
                self.queue_free, delay = turn + gap, turn - now
            else:
                for limit in self.limits.values():
                    limit.update(now)
                wait = max((limit.wait_for(costs[name]) for name, limit in self.limits.items()), default=0.0)
                if wait > 0:
                    self.rejected += 1
                    return "limited", self._headers(costs, wait), wait
                for name, limit in self.limits.items():
                    limit.take(costs[name])
            self.ok += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self.admitted.append(now)
            if shape.share_after and self.ok == shape.share_after:  # another job starts
                self._share(shape.share, now)
            if shape.lift_after and self.ok == shape.lift_after:  # ... or ends
                self._share(0.0, now)
            return "ok", self._headers(costs, 0.0), delay

    def done(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def latency(self) -> float:
        with self._lock:
            spread = self._random.uniform(-1, 1) * self.shape.jitter
        return max(0.0, self.shape.latency * (1 + spread))

    def _whole(self, wait: float, least: int = 1) -> str:
        """``wait`` as a ``retry-after`` of whole seconds says it: whole real seconds rounded up
        (at least ``least``), written in the shape's seconds (``"0.05"`` at the benches' scale)."""
        real = max(least, math.ceil(wait * self.shape.seconds))
        return f"{real / self.shape.seconds:g}"

    def _headers(self, costs: dict, wait: float) -> dict:
        shape, headers = self.shape, {}
        if wait > 0 and shape.retry in ("exact", "flat"):
            headers["retry-after"] = self._whole(wait) if shape.retry == "exact" else f"{60 / shape.seconds:g}"
        if wait > 0 and shape.retry == "date":  # an HTTP date (RFC 9110), whole seconds
            moment = datetime.fromtimestamp(math.ceil(time.time() + wait), tz=timezone.utc)
            headers["retry-after"] = moment.strftime("%a, %d %b %Y %H:%M:%S GMT")
        if shape.style in ("none", "gemini"):
            return headers
        for name, limit in self.limits.items():
            reset = limit.reset_in(costs[name], shape.reset)
            if shape.style == "openrouter":  # one budget, requests: its reset a Unix time in ms
                if name == "requests":
                    headers.update({"X-RateLimit-Limit": str(int(limit.limit * shape.claim)),
                                    "X-RateLimit-Remaining": str(int(limit.remaining() * shape.claim)),
                                    "X-RateLimit-Reset": str(math.ceil((time.time() + reset) * 1000))})
                continue
            kinds = [name] if name == "requests" or shape.style == "openai" else \
                ["tokens", "input-tokens", "output-tokens"]
            for kind in kinds:
                if shape.style == "openai":
                    pre, post = "x-ratelimit-", f"-{kind}"
                    stamp = _openai_duration(reset)
                else:
                    pre, post = f"anthropic-ratelimit-{kind}-", ""
                    full = datetime.fromtimestamp(time.time() + reset, tz=timezone.utc)
                    stamp = full.isoformat(timespec="milliseconds").replace("+00:00", "Z")
                headers[f"{pre}remaining{post}"] = str(int(limit.remaining() * shape.claim))
                if not shape.remaining_only:
                    headers[f"{pre}limit{post}"] = str(int(limit.limit * shape.claim))
                    headers[f"{pre}reset{post}"] = stamp
        if wait > 0 and shape.retry == "auto":
            headers["retry-after"] = self._whole(wait)
            if shape.style == "openai":
                headers["retry-after-ms"] = str(max(1, math.ceil(wait * 1000)))
        return headers

    def stats(self) -> dict:
        with self._lock:
            return {"ok": self.ok, "rejected": self.rejected, "capped": self.capped,
                    "overloaded": self.overloaded, "max_in_flight": self.max_in_flight,
                    "first": self.admitted[:1], "last": self.admitted[-1:],
                    "shared_since": self.shared_since, "now": time.monotonic()}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512  # the listen backlog; the default 5 refuses bursts of connections

    def handle_error(self, request, client_address) -> None:
        # A client that hung up mid-reply (a run that stopped) is not news; anything else is.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def _request(path: str, body: dict) -> tuple[str, str, int, str]:
    """``(protocol, model, prompt characters, last prompt)`` of a request body."""
    gemini = _GEMINI.match(path)
    if gemini:
        texts = [p.get("text", "") for c in body.get("contents", []) for p in c.get("parts", [])]
        system = body.get("systemInstruction") or body.get("system_instruction") or {}
        chars = sum(map(len, texts)) + sum(len(p.get("text", "")) for p in system.get("parts", []))
        return "gemini", gemini.group("model"), chars, texts[-1] if texts else ""
    messages = body.get("messages", [])
    chars = sum(len(str(m.get("content", ""))) for m in messages) + len(str(body.get("system") or ""))
    protocol = "anthropic" if path.rstrip("/").endswith("/messages") else "openai"
    return protocol, body.get("model", ""), chars, str(messages[-1].get("content", "")) if messages else ""


def _gemini_quota_error(wait: float) -> dict:
    """Gemini's answer to a spent per-minute quota: the wait only in the body."""
    delay = f"{wait:.3f}s"
    return {"error": {"code": 429, "status": "RESOURCE_EXHAUSTED",
                      "message": f"You exceeded your current quota. Please retry in {delay}.",
                      "details": [{"@type": "type.googleapis.com/google.rpc.QuotaFailure",
                                   "violations": [{"quotaId": "GenerateRequestsPerMinutePerProjectPerModel"}]},
                                  {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay}]}}


def _max_tokens(body: dict) -> int:
    config = body.get("generationConfig") or body.get("generation_config") or {}
    return (body.get("max_tokens") or body.get("max_completion_tokens") or config.get("maxOutputTokens")
            or config.get("max_output_tokens") or 0)


_ERRORS = {  # (protocol, outcome) -> (status, body)
    ("openai", "limited"): (429, {"error": {"message": "Rate limit reached; please try again later.",
                                            "type": "requests", "code": "rate_limit_exceeded"}}),
    ("openai", "capped"): (429, {"error": {"message": "Too many concurrent requests.", "type": "requests",
                                           "code": "rate_limit_exceeded"}}),
    ("openai", "overloaded"): (503, {"error": {"message": "The engine is currently overloaded, please try "
                                                          "again later.", "type": "server_error"}}),
    ("anthropic", "limited"): (429, {"type": "error", "error": {"type": "rate_limit_error",
                                                                "message": "Rate limit reached."}}),
    ("anthropic", "capped"): (429, {"type": "error", "error": {"type": "rate_limit_error",
                                                               "message": "Too many concurrent requests."}}),
    ("anthropic", "overloaded"): (529, {"type": "error", "error": {"type": "overloaded_error",
                                                                   "message": "Overloaded"}}),
    ("gemini", "limited"): (429, {"error": {"code": 429, "message": "Resource has been exhausted.",
                                            "status": "RESOURCE_EXHAUSTED"}}),
    ("gemini", "capped"): (429, {"error": {"code": 429, "message": "Too many concurrent requests.",
                                           "status": "RESOURCE_EXHAUSTED"}}),
    ("gemini", "overloaded"): (503, {"error": {"code": 503, "message": "The model is overloaded. Please "
                                                                       "try again later.",
                                               "status": "UNAVAILABLE"}}),
}


def _answer(protocol: str, model: str, text: str, prompt_tokens: int) -> dict:
    if protocol == "anthropic":
        return {"id": "msg_1", "type": "message", "role": "assistant", "model": model,
                "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": None,
                "usage": {"input_tokens": prompt_tokens, "output_tokens": len(text.split())}}
    if protocol == "gemini":
        return {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP",
                                "index": 0}],
                "usageMetadata": {"promptTokenCount": prompt_tokens, "candidatesTokenCount": len(text.split()),
                                  "totalTokenCount": prompt_tokens + len(text.split())},
                "modelVersion": model}
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 1, "total_tokens": prompt_tokens + 1}}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    fake: FakeRateLimited

    def log_message(self, *args) -> None:
        pass

    def _json(self, status: int, payload: dict, headers: dict) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._json(200, self.fake.stats(), {})

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.loads(raw or b"{}")
        protocol, model, chars, prompt = _request(self.path.split("?")[0], body)
        self.fake.order.append(prompt[:8])
        max_tokens = _max_tokens(body)
        costs = {"requests": 1, "tokens": math.ceil(chars / 4) + max_tokens}
        outcome, headers, wait = self.fake.decide(costs)
        if outcome != "ok" and self.fake.shape.refuse_latency:
            time.sleep(self.fake.shape.refuse_latency)
        if outcome != "ok":
            status, payload = _ERRORS[(protocol, outcome)]
            if outcome == "limited" and protocol == "gemini" and self.fake.shape.style == "gemini":
                payload = _gemini_quota_error(wait)
            return self._json(status, payload, headers)
        try:
            time.sleep(wait + self.fake.latency())  # ``wait``: its turn in the queue
        finally:
            self.fake.done()  # no longer in flight once the answer is ready to go
        self._json(200, _answer(protocol, model, f"Fake answer to: {prompt}", costs["tokens"] - max_tokens),
                   headers)


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve the rate-limited fake on 127.0.0.1 until killed.")
    parser.add_argument("--port", type=int, default=0)
    for f in dataclasses.fields(Shape):
        kind = {"float": float, "int": int, "str": str}.get(str(f.type))
        if str(f.type) == "bool":
            parser.add_argument(f"--{f.name}", action="store_true")
        else:
            parser.add_argument(f"--{f.name}", type=kind, default=f.default)
    args = vars(parser.parse_args())
    port = args.pop("port")
    serve_until_killed(FakeRateLimited(Shape(**args)).start(port))


if __name__ == "__main__":
    main()
