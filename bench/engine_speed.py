"""Tokens per second of the embedded engine: llama-cpp-python (the old, compiled one) beside xllamacpp.

Both run the bundled SmolLM2-135M Q4_1 GGUF at temperature 0, each in a process of its own (the
old engine in another virtual environment's interpreter, ``--old_python``), and print one table:

- ``1 x 128``: one request of at most 128 new tokens, at 1 and 2 threads;
- ``8 x 64``: eight requests of at most 64 new tokens, sent at once. llama-cpp-python answers one
  at a time (the project's old provider queued them); xllamacpp decodes them together in its
  parallel slots (4, as the local provider loads it).

Tokens/s is generated tokens over the wall time of the request(s), prompt included, so both
engines are timed alike. Figures, not pass/fail: on a busy machine they are low and noisy.

    python bench/engine_speed.py --old_python /work/venv-old/bin/python
    python bench/engine_speed.py                       # the new engine alone

The old engine: ``python -m venv /work/venv-old && CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON
-DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DLLAVA_BUILD=OFF" /work/venv-old/bin/pip install
llama-cpp-python==0.3.36`` (the build the README used to compile).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PROMPT = "Write a long story about a dragon who learns to bake bread."
PROMPTS = [f"Tell me a long story about {w}." for w in
           ("cats", "the sea", "bread", "trains", "music", "rain", "chess", "maths")]

# Each engine's measurement, run as ``python -c`` in that engine's interpreter; prints one JSON line.
OLD = r"""
import json, sys, time
import llama_cpp
path, threads, prompt, prompts = sys.argv[1], int(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
llama = llama_cpp.Llama(model_path=path, n_ctx=4096, n_threads=threads, n_threads_batch=threads, seed=1234, verbose=False)
def ask(text, n):
    r = llama.create_chat_completion(messages=[{"role": "user", "content": text}], temperature=0, max_tokens=n)
    return r["usage"]["completion_tokens"]
ask("Hi", 4)  # warm-up: both engines' first decode pays one-off costs
t = time.perf_counter(); n = ask(prompt, 128); one = n / (time.perf_counter() - t)
t = time.perf_counter(); n = sum(ask(p, 64) for p in prompts); many = n / (time.perf_counter() - t)
print(json.dumps({"version": llama_cpp.__version__, "one": one, "many": many}))
"""

NEW = r"""
import json, sys, time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
import xllamacpp
from orbench.llm.providers.local import DEFAULT_N_CTX, DEFAULT_PARALLEL, engine_params, start_server
path, threads, prompt, prompts = sys.argv[1], int(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
server = start_server(engine_params(Path(path), n_ctx=DEFAULT_N_CTX, n_parallel=DEFAULT_PARALLEL, threads=threads))
def ask(text, n):
    r = server.handle_chat_completions({"messages": [{"role": "user", "content": text}], "temperature": 0,
                                        "max_tokens": n, "seed": 1234})
    return r["usage"]["completion_tokens"]
ask("Hi", 4)
t = time.perf_counter(); n = ask(prompt, 128); one = n / (time.perf_counter() - t)
t = time.perf_counter()
with ThreadPoolExecutor(len(prompts)) as pool:
    n = sum(pool.map(lambda p: ask(p, 64), prompts))
many = n / (time.perf_counter() - t)
print(json.dumps({"version": xllamacpp.__version__, "one": one, "many": many}))
"""


def measure(python: str, code: str, model: Path, threads: int) -> dict:
    """One engine's figures at ``threads`` threads, from a fresh process."""
    result = subprocess.run([python, "-c", code, str(model), str(threads), PROMPT, json.dumps(PROMPTS)],
                            capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    if result.returncode != 0:
        raise SystemExit(f"{python}: {result.stderr.strip()[-1000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old_python", help="an interpreter with llama-cpp-python installed (omit: new engine only)")
    parser.add_argument("--threads", default="1,2", help="thread counts to try (default: 1,2)")
    args = parser.parse_args()
    from orbench.llm.providers.local import bundled_model_path

    model = bundled_model_path()
    engines = [("xllamacpp", sys.executable, NEW)]
    if args.old_python:
        engines.insert(0, ("llama-cpp-python", args.old_python, OLD))
    rows = []
    for threads in [int(t) for t in args.threads.split(",")]:
        for name, python, code in engines:
            figures = measure(python, code, model, threads)
            rows.append((f"{name} {figures['version']}", threads, figures["one"], figures["many"]))
    print(f"{'engine':<32} {'threads':>7} {'1 x 128 tok/s':>14} {'8 x 64 tok/s':>13}")
    for name, threads, one, many in rows:
        print(f"{name:<32} {threads:>7} {one:>14.1f} {many:>13.1f}")


if __name__ == "__main__":
    main()
