"""Run llama-cpp-python's OpenAI-compatible server (llama.cpp's server for Python) with plain weights.

The same server as ``python -m llama_cpp.server`` (every flag of it works here), loaded the way
the suite's in-process local model is: with llama.cpp's ``use_extra_bufts = false``, so no AMX
or repacked weight buffers are used. The server has no flag for that setting, and on Intel CPUs
with AMX (Sapphire Rapids and later) its AMX path crashes on the first request. ``--model``
defaults to the bundled SmolLM2-135M GGUF (the ``local`` extra). Needs the ``server`` extra.

Example (then point any stage at it, as docs/endpoints.md says)::

    python scripts/llama_server.py --host 127.0.0.1 --port 8080 --model_alias smollm2
    python alignment_checker/check_alignment.py --model openai-compatible/smollm2 \
        --base_url http://127.0.0.1:8080/v1 --matcher smollm --input_file or-bench-hard-1k --limit 5
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orbench.llm.providers.local import _plain_weights, bundled_model_path


def main() -> None:
    """Start the server in this process (it runs until interrupted)."""
    try:
        import llama_cpp
        import llama_cpp.server
    except ImportError as exc:
        sys.exit(f"error: the server needs the 'server' extra ({exc.name} is not installed): "
                 f"pip install -e '.[server]'")
    if "--model" not in sys.argv[1:]:
        sys.argv[1:1] = ["--model", str(bundled_model_path())]
    with _plain_weights(llama_cpp):
        runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
