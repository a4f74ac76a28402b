"""``orbench-serve MODEL``: a self-hosted model's server in the foreground (``orbench.llm.serve``), its
address printed and written to a file, for a chain of stages that share one server through ``--base_url``."""

from __future__ import annotations

import contextlib
import shlex
import socket
import sys
import threading
from pathlib import Path

from orbench.llm import serve as engine_lifecycle
from orbench.llm.errors import UsageError
from orbench.llm.models import parse_model, slug
from orbench.run.cli import ArgumentParser, entry_point, positive_float
from orbench.run.serving import sigterm_as_interrupt


def build_parser():
    parser = ArgumentParser(
        prog="orbench-serve",
        description="Start a self-hosted model's server in the foreground and print its address, for stages "
                    "that share one server through --base_url; Ctrl-C (or SIGTERM) stops it and every process "
                    "it started.",
        epilog="exit status: 0 stopped by Ctrl-C or SIGTERM, 2 the server did not start (the command and the "
               "last lines of its log are shown).")
    parser.add_argument("model", help="vllm/<hf-id>, sglang/<hf-id> or llamacpp/<path>.gguf")
    parser.add_argument("--serve_args", default=None, metavar="'ARGS'", help="the server's own arguments, shell-quoted")
    parser.add_argument("--serve_timeout", type=positive_float, default=engine_lifecycle.DEFAULT_SERVE_TIMEOUT,
                        help=f"seconds to wait for the server to answer (default: {engine_lifecycle.DEFAULT_SERVE_TIMEOUT:g})")
    parser.add_argument("--host", default="127.0.0.1",
                        help="the address to listen on (default: 127.0.0.1; 0.0.0.0 for other machines)")
    parser.add_argument("--address_file", default=None, metavar="FILE",
                        help="where to write the address (default: ./<model>.address); removed when it stops")
    return parser


def published(base_url: str, host: str) -> str:
    """The address other machines reach: a server listening on every interface (0.0.0.0) is
    checked on loopback, but its address names this machine (a stage on another node of a cluster
    would otherwise send to its own loopback)."""
    if host == "0.0.0.0":
        return base_url.replace("://127.0.0.1:", f"://{socket.getfqdn()}:", 1)
    return base_url


def main(argv=None) -> int:
    """``orbench-serve MODEL``: see :func:`build_parser`."""
    @entry_point
    def run(argv) -> int:
        args = build_parser().parse_args(argv)
        spec = parse_model(args.model)
        name = slug(spec.model)
        address_file = Path(args.address_file or f"{name}.address")
        server = engine_lifecycle.Server(spec, Path(f"{name}.server.log").resolve(),
                              shlex.split(args.serve_args) if args.serve_args else [], args.serve_timeout,
                              host=args.host)
        stopped = threading.Event()
        with sigterm_as_interrupt():
            try:
                server.start()
                address = published(server.base_url, args.host)
                address_file.write_text(address + "\n", encoding="utf-8")
                print(address, flush=True)
                print(f"serving {spec} (log {server.log_path}); pass --base_url {address}; "
                      f"Ctrl-C stops it", file=sys.stderr, flush=True)
                while not stopped.wait(1.0):
                    if server.process is None or server.process.poll() is not None:
                        raise UsageError(f"the server stopped by itself; the last lines of {server.log_path}:\n"
                                         f"{engine_lifecycle.last_lines(server.log_path)}")
            except KeyboardInterrupt:
                print("stopping the server", file=sys.stderr)
            finally:
                server.stop()
                with contextlib.suppress(OSError):
                    address_file.unlink()
        return 0

    return run(argv)


if __name__ == "__main__":
    sys.exit(main())
