"""A loopback fake provider that enforces a rate limit the way OpenAI and Anthropic document it.

It speaks OpenAI chat completions (``/v1/chat/completions``) and Anthropic messages
(``/v1/messages``), and admits a request only when two token buckets cover it: requests
(capacity ``rpm``, refilled at ``rpm`` per ``window`` seconds) and tokens (capacity ``tpm``;
a request costs its prompt characters / 4 plus its ``max_tokens``, counted before generation).
Otherwise it answers 429. ``window`` is the length of the provider's "minute": tests and the
bench shrink it to a few seconds so a run at the limit takes seconds.

Header styles (``style``): ``openai`` (``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``
with resets like ``"1s"`` / ``"20ms"``, and ``retry-after`` + ``retry-after-ms`` on a 429),
``anthropic`` (``anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,
remaining,reset}`` with RFC 3339 resets, whole-second ``retry-after`` on a 429) and ``none``
(a bare 429, no header at all). ``burst`` (0..1] shrinks the buckets' capacity to that share
of the limit while the headers still report the full limit (enforcement "over short periods").
``share`` makes another job on the same key take that share of the refill (the headers still
report the full limit): :meth:`set_share` mid-run halves what is left for the test's client.

    python tests/fake_ratelimit.py --rpm 600 --tpm 0 --window 6 --style openai --latency 0.2
"""

from __future__ import annotations

import argparse
import json
import math
import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from fake_provider import serve_in_thread, serve_until_killed


def _openai_duration(seconds: float) -> str:
    """A reset as OpenAI writes it: ``"20ms"``, ``"1.5s"``, ``"6m0s"``."""
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))}ms"
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}m{rest:.3g}s" if minutes else f"{rest:.3g}s"


class _Bucket:
    def __init__(self, limit: float, window: float, burst: float):
        self.limit, self.window = limit, window
        self.capacity = limit * burst
        self.level = self.capacity
        self.at = time.monotonic()

    @property
    def rate(self) -> float:
        return self.limit / self.window

    def refill(self, now: float, share: float) -> None:
        self.level = min(self.capacity, self.level + self.rate * (1 - share) * (now - self.at))
        self.at = now

    def remaining(self) -> int:
        """As the headers say it: out of the whole limit (a burst cap is not shown)."""
        return max(0, int(self.level + self.limit - self.capacity))

    def reset_in(self) -> float:
        return (self.capacity - self.level) / self.rate

    def wait_for(self, cost: float, share: float) -> float:
        return max(0.0, (min(cost, self.capacity) - self.level) / (self.rate * (1 - share)))


class FakeRateLimited:
    """The server and its buckets; ``start()`` binds 127.0.0.1 on a free port."""

    def __init__(self, *, rpm: float = 0, tpm: float = 0, window: float = 60.0, style: str = "openai",
                 latency: float = 0.0, burst: float = 1.0, share: float = 0.0,
                 share_after: int | None = None):
        self.style, self.latency, self.share = style, latency, 0.0 if share_after else share
        self.share_after, self.later_share = share_after, share
        self.window, self.burst = window, burst
        self._lock = threading.Lock()
        self.buckets = {}
        self.set_limits(rpm, tpm)
        self.ok = 0
        self.rejected = 0
        self.admitted: list[float] = []
        self.shared_since: float | None = None
        self._server: ThreadingHTTPServer | None = None

    def set_limits(self, rpm: float, tpm: float) -> None:
        """Change the limits (the buckets start full)."""
        with self._lock:
            self.rpm, self.tpm = rpm, tpm
            self.buckets = {}
            if rpm:
                self.buckets["requests"] = _Bucket(rpm, self.window, self.burst)
            if tpm:
                self.buckets["tokens"] = _Bucket(tpm, self.window, self.burst)

    def set_share(self, share: float) -> None:
        """Let another job on the same key take ``share`` of the refill from now on."""
        with self._lock:
            now = time.monotonic()
            for bucket in self.buckets.values():
                bucket.refill(now, self.share)
            self.share = share

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

    def admit(self, costs: dict[str, float]) -> tuple[bool, dict, float]:
        """Take ``costs`` from the buckets or refuse; the headers to send and the wait if refused."""
        with self._lock:
            now = time.monotonic()
            for bucket in self.buckets.values():
                bucket.refill(now, self.share)
            wait = max((b.wait_for(costs[k], self.share) for k, b in self.buckets.items()), default=0.0)
            ok = wait <= 0
            if ok:
                for name, bucket in self.buckets.items():
                    bucket.level -= costs[name]
                self.ok += 1
                self.admitted.append(now)
                if self.share_after and self.ok == self.share_after:  # another job starts
                    for bucket in self.buckets.values():
                        bucket.refill(now, self.share)
                    self.share = self.later_share
                    self.shared_since = now
            else:
                self.rejected += 1
            return ok, self._headers(ok, wait), wait

    def _headers(self, ok: bool, wait: float) -> dict:
        headers: dict[str, str] = {}
        if self.style == "openai":
            for name, bucket in self.buckets.items():
                headers[f"x-ratelimit-limit-{name}"] = str(int(bucket.limit))
                headers[f"x-ratelimit-remaining-{name}"] = str(bucket.remaining())
                headers[f"x-ratelimit-reset-{name}"] = _openai_duration(bucket.reset_in())
            if not ok:
                headers["retry-after-ms"] = str(max(1, math.ceil(wait * 1000)))
                headers["retry-after"] = str(max(1, math.ceil(wait)))
        elif self.style == "anthropic":
            wall = time.time()
            for name, bucket in self.buckets.items():
                full = datetime.fromtimestamp(wall + bucket.reset_in(), tz=timezone.utc)
                stamp = full.isoformat(timespec="milliseconds").replace("+00:00", "Z")
                kinds = [name] if name == "requests" else ["tokens", "input-tokens", "output-tokens"]
                for kind in kinds:
                    headers[f"anthropic-ratelimit-{kind}-limit"] = str(int(bucket.limit))
                    headers[f"anthropic-ratelimit-{kind}-remaining"] = str(bucket.remaining())
                    headers[f"anthropic-ratelimit-{kind}-reset"] = stamp
            if not ok:
                headers["retry-after"] = str(max(1, math.ceil(wait)))
        return headers


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512  # the listen backlog; the default 5 refuses bursts of connections


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
        fake = self.fake
        with fake._lock:
            stats = {"ok": fake.ok, "rejected": fake.rejected, "first": fake.admitted[:1],
                     "last": fake.admitted[-1:], "shared_since": fake.shared_since,
                     "now": time.monotonic()}
        self._json(200, stats, {})

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.loads(raw or b"{}")
        anthropic = self.path.rstrip("/").endswith("/messages")
        messages = body.get("messages", [])
        chars = sum(len(str(m.get("content", ""))) for m in messages) + len(str(body.get("system") or ""))
        max_tokens = body.get("max_tokens") or body.get("max_completion_tokens") or 0
        costs = {"requests": 1, "tokens": math.ceil(chars / 4) + max_tokens}
        ok, headers, _ = self.fake.admit(costs)
        if not ok:
            error = {"message": "Rate limit reached; please try again later.",
                     "type": "rate_limit_error" if anthropic else "requests", "code": "rate_limit_exceeded"}
            return self._json(429, {"type": "error", "error": error} if anthropic else {"error": error},
                              headers)
        if self.fake.latency:
            time.sleep(self.fake.latency)
        prompt = str(messages[-1].get("content", "")) if messages else ""
        text = f"Fake answer to: {prompt}"
        model = body.get("model", "")
        if anthropic:
            payload = {"id": "msg_1", "type": "message", "role": "assistant", "model": model,
                       "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
                       "stop_sequence": None, "usage": {"input_tokens": costs["tokens"] - max_tokens,
                                                        "output_tokens": len(text.split())}}
        else:
            payload = {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": model,
                       "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                                    "message": {"role": "assistant", "content": text}}],
                       "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
        self._json(200, payload, headers)


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve the rate-limited fake on 127.0.0.1 until killed.")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--rpm", type=float, default=0, help="requests per window (0: no limit)")
    parser.add_argument("--tpm", type=float, default=0, help="tokens per window (0: no limit)")
    parser.add_argument("--window", type=float, default=60.0, help="the window in seconds (default: 60)")
    parser.add_argument("--style", choices=("openai", "anthropic", "none"), default="openai")
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--burst", type=float, default=1.0, help="bucket capacity as a share of the limit")
    parser.add_argument("--share", type=float, default=0.0, help="share of the refill another job takes")
    parser.add_argument("--share_after", type=int, default=None,
                        help="the other job starts after this many admitted requests")
    args = parser.parse_args()
    fake = FakeRateLimited(rpm=args.rpm, tpm=args.tpm, window=args.window, style=args.style,
                           latency=args.latency, burst=args.burst, share=args.share,
                           share_after=args.share_after).start(args.port)
    serve_until_killed(fake)


if __name__ == "__main__":
    main()
