"""What the loopback fake servers share: a threaded HTTP server on 127.0.0.1, a handler that sends
JSON (or any body, optionally trickled), the chat request's last user text, and the command-line
mode (print the URL, serve until killed).

A fake is a :class:`LoopbackFake` subclass with a ``handler`` class (a :class:`JSONHandler`
subclass); ``start(port)`` serves it in a daemon thread, each handler reaching the fake through
its ``fake`` attribute; ``stop()`` also drops kept-alive connections, as an outage does.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class LoopbackServer(ThreadingHTTPServer):
    """Daemon threads, a deep listen backlog, its open connections tracked, client hang-ups quiet."""

    daemon_threads = True
    allow_reuse_address = True  # restart on the same port at once
    request_queue_size = 512  # the default 5 drops bursts of connections

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.open_sockets: set = set()

    def process_request(self, request, client_address) -> None:
        self.open_sockets.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request) -> None:
        self.open_sockets.discard(request)
        super().shutdown_request(request)

    def drop_connections(self) -> None:
        for sock in list(self.open_sockets):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def handle_error(self, request, client_address) -> None:
        pass  # a client that hung up (a test's dropped or cancelled request) is not news


class JSONHandler(BaseHTTPRequestHandler):
    """Keep-alive HTTP/1.1, no Nagle delay, no access log; ``send`` and ``json`` write replies."""

    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes; without TCP_NODELAY, Nagle's algorithm and the
    # client's delayed ACK add ~40 ms to every reply.
    disable_nagle_algorithm = True
    fake = None  # set per fake by LoopbackFake.start

    def log_message(self, *args) -> None:  # keep test output quiet
        pass

    def body_bytes(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def send(self, status: int, body: bytes, headers: dict | None = None, trickle: float = 0.0,
             content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if not trickle:
            self.wfile.write(body)
            return
        # A slow server: the body in small pieces spread over ``trickle`` seconds.
        pieces = max(1, min(len(body), 40))
        size = -(-len(body) // pieces)
        try:
            for start in range(0, len(body), size):
                self.wfile.write(body[start:start + size])
                self.wfile.flush()
                time.sleep(trickle / pieces)
        except OSError:
            self.close_connection = True  # the client gave up waiting

    def json(self, status: int, payload, headers: dict | None = None, trickle: float = 0.0) -> None:
        self.send(status, json.dumps(payload).encode(), headers, trickle)


class LoopbackFake:
    """A fake's server life (``start(port)``, ``stop()``, ``root``, ``port``) and its rule book:
    ``add_rule(**fields)`` makes a ``rule_type`` (a dataclass with ``times``, how many requests it
    answers, None for all); :meth:`pick` gives the first rule that still answers and matches."""

    handler: type[JSONHandler] = JSONHandler
    rule_type: type = dict

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._server: LoopbackServer | None = None
        self.rules: list = []

    def add_rule(self, **kwargs):
        rule = self.rule_type(**kwargs)
        with self._lock:
            self.rules.append(rule)
        return rule

    def pick(self, matches, default):
        """The first rule with ``matches(rule)`` true and answers left (one is used up), else ``default``."""
        with self._lock:
            for rule in self.rules:
                if (rule.times is None or rule.times > 0) and matches(rule):
                    if rule.times is not None:
                        rule.times -= 1
                    return rule
        return default

    def start(self, port: int = 0):
        handler = type("Handler", (self.handler,), {"fake": self})
        self._server = serve_in_thread(LoopbackServer(("127.0.0.1", port), handler))
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.drop_connections()  # kept-alive connections die too, as in an outage
            self._server.server_close()
            self._server = None

    @property
    def port(self) -> int:
        assert self._server is not None, "server not started"
        return self._server.server_address[1]

    @property
    def root(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"


def last_user_text(messages: list) -> str:
    """The text of the last user message of a chat request (string or content parts)."""
    for message in reversed(messages or []):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return "".join(part.get("text", "") for part in content if isinstance(part, dict))
            return str(content)
    return ""


def serve_in_thread(server: ThreadingHTTPServer) -> ThreadingHTTPServer:
    """Run ``server`` in a daemon thread; ``shutdown()`` then waits at most one 20 ms poll."""
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    return server


def serve_until_killed(fake) -> None:
    """A fake's command-line mode: print its URL, serve until Ctrl-C or a kill, then stop it."""
    print(fake.url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        fake.stop()
