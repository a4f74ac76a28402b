"""llama.cpp's OpenAI-compatible server on a GGUF file, as a process of its own (``llamacpp/<path>.gguf``
with ``--serve``; ``local/`` runs the same engine in process instead).

``python -m orbench.llm.llama_server --model FILE.gguf --port PORT`` serves the file with the server
of the prebuilt ``xllamacpp`` wheel until it gets SIGTERM or Ctrl-C. It is what ``orbench.llm.serve``
starts for a ``llamacpp/`` model; it can also be started by hand and reached with ``--base_url``.
Extra-buffer weight repacking (llama.cpp's AMX/"extra buffer types" path) is off, as for the
in-process engine: the suite must run on every x86-64 host, and that path crashes on some CPUs.
Its CPU threads are ``--threads``, else ``ORBENCH_LOCAL_THREADS``, else the physical cores
(``orbench.llm.providers.local.engine_threads``, as for the in-process engine).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m orbench.llm.llama_server",
                                     description="Serve a GGUF model with llama.cpp's server (xllamacpp).")
    parser.add_argument("--model", required=True, help="the .gguf file")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ctx_size", type=int, default=4096, help="context length in tokens (default: 4096)")
    parser.add_argument("--parallel", type=int, default=4, help="requests decoded together (default: 4)")
    parser.add_argument("--chat_template", default=None, help="a chat template name or Jinja text "
                                                              "(default: the one in the GGUF file)")
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU threads (default: ORBENCH_LOCAL_THREADS if set, else the physical cores, as llama.cpp)")
    args = parser.parse_args(argv)
    from orbench.llm.errors import UsageError
    from orbench.llm.providers.local import engine_threads

    if args.threads is not None and args.threads < 1:
        print(f"error: --threads must be at least 1, not {args.threads}", file=sys.stderr)
        return 2
    try:  # the in-process engine's setting (docs/local_model.md), so a shared machine sets it once
        threads = args.threads or engine_threads()
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        import xllamacpp
    except ImportError:
        print("error: llamacpp/ with --serve needs the xllamacpp wheel: pip install xllamacpp", file=sys.stderr)
        return 2
    params = xllamacpp.CommonParams()
    params.model.path = args.model
    params.hostnames = [args.host]
    params.port = args.port
    params.n_ctx = args.ctx_size * args.parallel  # llama.cpp's server splits n_ctx over its slots
    params.n_parallel = args.parallel
    params.no_extra_bufts = True
    params.cpuparams.n_threads = params.cpuparams_batch.n_threads = threads
    if args.chat_template:
        params.chat_template = args.chat_template
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    server = xllamacpp.Server(params)  # serves from its own threads until deleted
    print(f"serving {args.model} at {server.listening_address}/v1", flush=True)
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    del server
    return 0


if __name__ == "__main__":
    sys.exit(main())
