"""Throughput of the stage runner + client against the loopback fake provider.

Starts ``tests/fake_provider.py`` in its own process with a fixed reply latency, then runs 2,000
rows through (1) the runner and ``Client`` in process and (2) the alignment checker script as a
subprocess (when it exists), with the cache off, and prints requests per second, the ideal rate
(concurrency / latency) and the ratio. Figures, not pass/fail.

    python bench/throughput.py                      # 2000 rows, concurrency 32, 200 ms
    python bench/throughput.py --rows 500 --concurrency 8 --latency 0.1

``--code`` compares checkouts on the alignment checker alone (stage 4, a subprocess each, the
checkouts taken in turn ``--repeat`` times so that a busy machine's drift falls on all alike),
printing each run's own seconds (the summary line's, interpreter start-up left out), the
medians, and each checkout's throughput as a share of the first's::

    git archive 6fec1c3 | tar -x -C /tmp/old    # the client before the pacer's rework
    python bench/throughput.py --rows 500 --latency 0.1 --code /tmp/old . --repeat 5
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402 (needs the sys.path set-up above)

from orbench.llm.clients import Client, Request  # noqa: E402 (needs the sys.path set-up above)
from orbench.llm.models import parse_model  # noqa: E402 (needs the sys.path set-up above)
from orbench.run.stage import Stage, run_stage  # noqa: E402 (needs the sys.path set-up above)


def print_settings(rows: int, concurrency: int, latency: float) -> float:
    """Print the run's settings and the ideal rate (concurrency / latency, requests per second); return that rate."""
    ideal = concurrency / latency
    print(f"{rows} rows, concurrency {concurrency}, latency {latency * 1000:.0f} ms, ideal {ideal:.1f} req/s")
    return ideal


def print_rate(name: str, seconds: float, rows: int, ideal: float) -> None:
    """One result line: ``rows`` done in ``seconds``, as requests per second and as a ratio of the ideal rate."""
    rate = rows / seconds
    print(f"{name:32s} {seconds:7.2f} s  {rate:7.1f} req/s  ratio {rate / ideal:.3f}")


def start_fake(latency: float) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fake_provider.py"),
                             "--delay", str(latency)], stdout=subprocess.PIPE, text=True)
    url = proc.stdout.readline().strip()
    return proc, url


def bench_in_process(table: pd.DataFrame, concurrency: int, out: Path) -> float:
    client = Client(cache=None, concurrency=concurrency)
    spec = parse_model("openai/bench-model")
    client.prepare(spec)

    stage = Stage("bench", needs=["prompt"], adds=["response"],
                  requests=lambda settings, row: [Request.user(spec, row["prompt"])],
                  decide=lambda settings, row, answers: {"response": answers[0].text})
    started = time.perf_counter()
    result = run_stage(stage, table, out, concurrency=concurrency, client=client)
    elapsed = time.perf_counter() - started
    assert result.errors == 0 and client.stats.sent == len(table), (result, client.stats)
    return elapsed


def bench_script(input_csv: Path, concurrency: int, out: Path, env: dict,
                 code: Path = ROOT) -> tuple[float, float | None] | None:
    """(wall-clock seconds including interpreter start-up, the runner's own seconds) or None;
    ``code``: the checkout whose alignment checker runs."""
    script = code / "alignment_checker" / "check_alignment.py"
    env = {**env, "PYTHONPATH": str(code)}
    if not script.exists():
        return None
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, str(script), "--model", "openai/bench-model",
                           "--input_file", str(input_csv), "--output_file", str(out),
                           "--concurrency", str(concurrency), "--no_cache"],
                          env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        print(proc.stderr[-2000:], file=sys.stderr)
        raise SystemExit("alignment checker failed")
    # The summary line ends with the runner's own time, which leaves out interpreter start-up.
    match = re.search(r"\| ([0-9.]+)s\s*$", proc.stderr.strip().splitlines()[-1]
                      if "|" in proc.stderr else "")
    return elapsed, float(match.group(1)) if match else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2000, help="rows to run (default: 2000)")
    parser.add_argument("--concurrency", type=int, default=32, help="rows in flight (default: 32)")
    parser.add_argument("--latency", type=float, default=0.2, help="fake reply latency in seconds (default: 0.2)")
    parser.add_argument("--code", nargs="+", default=None, metavar="DIR",
                        help="compare these checkouts' alignment checkers (the first is the reference)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each checkout with --code (default: 1)")
    args = parser.parse_args()
    if args.code:
        return compare(args)

    proc, url = start_fake(args.latency)
    env = dict(os.environ, OPENAI_API_KEY="sk-bench-not-a-key", OPENAI_BASE_URL=url + "/v1",
               PYTHONPATH=str(ROOT))
    os.environ.update(OPENAI_API_KEY=env["OPENAI_API_KEY"], OPENAI_BASE_URL=env["OPENAI_BASE_URL"])
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            table = pd.DataFrame({"prompt": [f"benchmark prompt number {i}" for i in range(args.rows)],
                                  "category": "harmful"})
            input_csv = tmp / "bench_input.csv"
            table.to_csv(input_csv, index=False)
            ideal = print_settings(args.rows, args.concurrency, args.latency)
            runs = [("runner + client (in process)", bench_in_process(table, args.concurrency, tmp / "a.csv"))]
            script = bench_script(input_csv, args.concurrency, tmp / "b.csv", env)
            if script is None:
                print("alignment checker: skipped (script not present)")
            else:
                runs.append(("alignment checker, wall clock", script[0]))
                if script[1]:
                    runs.append(("alignment checker, rows only", script[1]))
            for name, elapsed in runs:
                print_rate(name, elapsed, args.rows, ideal)
    finally:
        proc.terminate()
        proc.wait()


def compare(args) -> None:
    """``--code``: the alignment checker of each checkout, in turn, ``--repeat`` times."""
    codes = [Path(c).resolve() for c in args.code]
    proc, url = start_fake(args.latency)
    env = dict(os.environ, OPENAI_API_KEY="sk-bench-not-a-key", OPENAI_BASE_URL=url + "/v1")
    seconds: dict[Path, list[float]] = {c: [] for c in codes}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            input_csv = Path(tmp) / "bench_input.csv"
            pd.DataFrame({"prompt": [f"benchmark prompt number {i}" for i in range(args.rows)],
                          "category": "harmful"}).to_csv(input_csv, index=False)
            print_settings(args.rows, args.concurrency, args.latency)
            for turn in range(args.repeat):
                for n, code in enumerate(codes):
                    wall, own = bench_script(input_csv, args.concurrency, Path(tmp) / f"o{turn}{n}.csv", env, code)
                    seconds[code].append(own or wall)
                    print(f"run {turn + 1}: {code}: {own or wall:.2f} s", flush=True)
    finally:
        proc.terminate()
        proc.wait()
    reference = statistics.median(seconds[codes[0]])
    for code in codes:
        median = statistics.median(seconds[code])
        print(f"{str(code):40s} median {median:6.2f} s  throughput {reference / median:.3f} of the first's")


if __name__ == "__main__":
    main()
