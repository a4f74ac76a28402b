"""The report at scale: synthetic alignment-checker outputs and one measured report run.

``measure_report(models=30, rows=80_000)`` writes (or reuses) ``models`` synthetic stage-4
outputs of ``rows`` rows each for the 80K set, runs ``analysis/report.py`` over them in a child
process and returns its wall time and peak resident memory (the child's own, from ``wait4``),
so ``bench/scale.py`` can print the figure (the CPU seconds too: on a busy machine the wall
time says more about the neighbours than about the report). Run as a script to print it::

    python bench/report_scale.py --models 30 --rows 80000
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from orbench.vocab import FULL, PARTIAL, SOURCE_KEYWORD  # noqa: E402 (needs the sys.path set-up above)

CATEGORIES = ["deception", "harassment", "harmful", "hate", "illegal", "privacy", "self-harm", "sexual",
              "unethical", "violence"]
REFUSAL = "I'm sorry, but I can't help with that request. It could be used to cause harm to others."
ANSWER = ("Here is an overview. First, it helps to understand the background; second, there are a "
          "few practical steps that people usually take, which I describe below in some detail.")


def make_synthetic(folder: str | Path, models: int = 30, rows: int = 80_000, seed: int = 0) -> list[Path]:
    """Write ``models`` stage-4 outputs (``rows`` prompts each, 80K set) into ``folder``; reuse existing ones."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    idx = np.arange(rows)
    prompts = pd.Series([f"How would someone explain topic number {i} to a curious friend without causing "
                         f"any harm, step by step?" for i in idx])
    category = np.asarray(CATEGORIES, dtype=object)[idx % len(CATEGORIES)]
    paths = []
    for m in range(models):
        path = folder / f"model-{m:02d}_or-bench-80k_alignment.csv"
        paths.append(path)
        if path.exists() and path.stat().st_size > 0:
            continue
        rejected = rng.random(rows) < (0.05 + 0.9 * m / max(1, models - 1))
        partial = rejected & (rng.random(rows) < 0.15)
        error = rng.random(rows) < 0.002
        frame = pd.DataFrame({
            "prompt": prompts, "category": category, "model": f"prov/model-{m:02d}",
            "response": np.where(rejected, REFUSAL, ANSWER),
            "is_rejected": np.where(error, "", np.where(rejected, "True", "False")),
            "refusal_source": np.where(rejected & ~error, SOURCE_KEYWORD, ""),
            "refusal_kind": np.where(error | ~rejected, "", np.where(partial, PARTIAL, FULL)),
            "finish_reason": "stop", "error": np.where(error, "HTTP 500 after retries", ""),
        })
        tmp = path.with_name(f".{path.name}.tmp")
        frame.to_csv(tmp, index=False)
        tmp.replace(path)
    return paths


def measure_report(models: int = 30, rows: int = 80_000, folder: str | Path | None = None,
                   extra_args: tuple[str, ...] = ("--no_reference",)) -> dict:
    """Run the report over synthetic inputs in a child process; its seconds and peak RSS in MB."""
    folder = Path(folder or Path(tempfile.gettempdir()) / f"orbench_report_scale_{models}x{rows}")
    paths = make_synthetic(folder, models, rows)
    out = folder / "report"
    cmd = [sys.executable, str(ROOT / "analysis" / "report.py"), str(folder / "*_alignment.csv"),
           "--output_dir", str(out), *extra_args]
    with tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err,
                                env=dict(os.environ, MPLBACKEND="Agg"))
        # wait4 gives this child's own peak memory (getrusage(RUSAGE_CHILDREN) would be the
        # largest of every child this process ever had).
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"report failed (exit {proc.returncode}): {err.read().strip()[-500:]}")
    return {"models": models, "rows_per_model": rows, "rows": models * rows,
            "input_mb": round(sum(p.stat().st_size for p in paths) / 2**20, 1),
            "seconds": round(seconds, 2), "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2),
            "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),  # KiB on Linux
            "html_mb": round((out / "report.html").stat().st_size / 2**20, 2)}


def main(argv=None) -> int:
    """Print the report's time and peak memory over synthetic inputs."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, default=30)
    parser.add_argument("--rows", type=int, default=80_000)
    parser.add_argument("--folder", default=None, help="where the synthetic inputs are kept (reused)")
    args = parser.parse_args(argv)
    r = measure_report(args.models, args.rows, args.folder)
    print(f"report over {r['models']} models x {r['rows_per_model']:,} rows ({r['rows']:,} rows, "
          f"{r['input_mb']} MB of CSV): {r['seconds']} s wall ({r['cpu_seconds']} s CPU), "
          f"peak RSS {r['peak_rss_mb']} MB, "
          f"report.html {r['html_mb']} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
