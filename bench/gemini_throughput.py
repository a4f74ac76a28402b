"""Throughput of the native Gemini provider (google-genai over the shared transport) in stage 4.

Starts ``tests/fake_gemini.py`` in this process with a fixed reply latency, runs N prompts through
``alignment_checker/check_alignment.py --model gemini/gemini-2.5-flash`` in process, with the
cache off, and prints requests per second beside the ideal rate (concurrency / latency), then
the same for ``openai/gpt-4o`` against ``tests/fake_provider.py`` for comparison. Figures, not
pass/fail.

    python bench/gemini_throughput.py                      # 1000 rows, concurrency 32, 200 ms
    python bench/gemini_throughput.py --rows 300 --concurrency 8 --latency 0.1
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import pandas as pd  # noqa: E402 (needs the sys.path set-up above)
from fake_gemini import FakeGemini  # noqa: E402 (needs the sys.path set-up above)
from fake_provider import FakeProvider  # noqa: E402 (needs the sys.path set-up above)
from throughput import print_rate, print_settings  # noqa: E402 (bench/throughput.py, beside this script)

from orbench.stages.check_alignment import main as check_alignment  # noqa: E402 (needs the sys.path set-up above)


def run(model: str, rows: int, concurrency: int, folder: Path) -> float:
    """Seconds for one stage-4 run of ``rows`` prompts (cache off)."""
    source = folder / "in.csv"
    pd.DataFrame({"prompt": [f"question number {i}" for i in range(rows)]}).to_csv(source, index=False)
    output = folder / f"{model.replace('/', '_')}.csv"
    started = time.monotonic()
    with contextlib.redirect_stdout(io.StringIO()):  # the output path the script prints
        code = check_alignment([f"--model={model}", f"--input_file={source}", f"--output_file={output}",
                                f"--concurrency={concurrency}", "--no_cache", "--quiet"])
    elapsed = time.monotonic() - started
    if code != 0:
        raise SystemExit(f"{model}: exit {code}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency", type=float, default=0.2)
    args = parser.parse_args()
    gemini = FakeGemini().start()
    gemini.add_rule(text="Sure, here is an answer to: {prompt}", delay=args.latency)
    openai = FakeProvider(default_delay=args.latency).start()
    os.environ.update({"GEMINI_API_KEY": "bench-key-000000", "OPENAI_API_KEY": "sk-bench-000000000",
                       "GEMINI_BASE_URL": gemini.url, "OPENAI_BASE_URL": openai.openai_url})
    ideal = print_settings(args.rows, args.concurrency, args.latency)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for model in ("gemini/gemini-2.5-flash", "openai/gpt-4o"):
                print_rate(model, run(model, args.rows, args.concurrency, Path(tmp)), args.rows, ideal)
    finally:
        gemini.stop()
        openai.stop()


if __name__ == "__main__":
    main()
