"""Runs at a provider's rate limit: achieved / allowed rate, 429s per success, error rows.

Starts ``tests/fake_ratelimit.py`` (a loopback server that enforces requests and tokens per
"minute" with 429s, in OpenAI's, Anthropic's or no header style) in its own process for each
scenario, runs the rows through the stage runner and ``Client`` in process with the cache off
and no ``--rpm``, and prints one line per scenario beside the goals (>= 0.90 of the allowed
rate, <= 0.05 429s per success, <= 0.2 with no headers, 0 error rows).

Time is scaled down: the provider's "minute" is ``--window`` seconds (default 3), so 3,000 RPM
becomes 150 requests per 3 s (50 req/s) and a scenario takes seconds. The server's budgets start
full, as a provider's do; the allowed time counts that: ``(rows - bucket) / refill rate`` (and,
when another job takes half the key mid-run, the rows after that at half the rate). The ratio
printed is allowed time / wall time, for the rows that succeeded.

    python bench/rate_limits.py                      # every scenario, this checkout
    python bench/rate_limits.py --code /work/main    # the same with another checkout's orbench
    python bench/rate_limits.py --only rpm-c32 --rows 600
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "Please explain, briefly and plainly, how a household smoke detector works. Row {i:05d}."


@dataclass
class Scenario:
    name: str
    style: str = "openai"
    rpm: float = 0          # requests per window
    tpm: float = 0          # tokens per window
    concurrency: int = 32
    max_tokens: int = 100
    share_after: int | None = None  # another job takes half the key after this many requests
    burst: float = 1.0
    rows: int | None = None


def scenarios(window: float) -> list[Scenario]:
    """The issue's cases at 3,000 RPM and 1.2M TPM (per ``window`` seconds)."""
    rpm = 3000 * window / 60
    tpm = 1_200_000 * window / 60
    found = [Scenario(f"rpm-c{c}", rpm=rpm, concurrency=c) for c in (4, 8, 16, 32, 64)]
    found += [
        Scenario("tpm-c32", tpm=tpm, max_tokens=1000, rows=600),
        Scenario("tpm-c64", tpm=tpm, max_tokens=1000, concurrency=64, rows=600),
        Scenario("anthropic-rpm-c32", style="anthropic", rpm=rpm),
        Scenario("anthropic-tpm-c64", style="anthropic", tpm=tpm, max_tokens=1000, concurrency=64, rows=600),
        Scenario("halves-mid-run-c32", rpm=rpm, share_after=500),
        # "enforced over short periods": the budget holds a second's worth, the headers the minute's
        Scenario("per-second-rpm-c32", rpm=rpm, burst=1 / 60),
        Scenario("no-headers-c32", style="none", rpm=rpm),
        Scenario("no-headers-c64", style="none", rpm=rpm, concurrency=64),
    ]
    return found


def cost_of(max_tokens: int) -> int:
    return math.ceil(len(PROMPT.format(i=0)) / 4) + max_tokens


def allowed_seconds(s: Scenario, rows: int, window: float) -> float:
    """The least time the server's budget allows for ``rows`` (see the module docstring)."""
    if s.rpm:
        rate, bucket = s.rpm / window, s.rpm * s.burst
    else:
        per = cost_of(s.max_tokens)
        rate, bucket = s.tpm / window / per, s.tpm * s.burst / per
    if s.share_after is None or rows <= s.share_after:
        return max(0.0, rows - bucket) / rate
    first = max(0.0, s.share_after - bucket) / rate
    return first + (rows - s.share_after) / (rate / 2)


def start_fake(s: Scenario, window: float, latency: float) -> tuple[subprocess.Popen, str]:
    argv = [sys.executable, str(ROOT / "tests" / "fake_ratelimit.py"), "--window", str(window),
            "--style", s.style, "--latency", str(latency), "--rpm", str(s.rpm), "--tpm", str(s.tpm),
            "--burst", str(s.burst)]
    if s.share_after:
        argv += ["--share", "0.5", "--share_after", str(s.share_after)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    return proc, proc.stdout.readline().strip()


def run_one(s: Scenario, rows: int, window: float, latency: float) -> dict:
    import pandas as pd

    from orbench.clients import Client, Request
    from orbench.models import parse_model
    from orbench.stage import Stage, run_stage

    proc, url = start_fake(s, window, latency)
    try:
        os.environ.update(OPENAI_API_KEY="sk-bench-not-a-key", ANTHROPIC_API_KEY="sk-ant-bench-not-a-key",
                          OPENAI_BASE_URL=url + "/v1", ANTHROPIC_BASE_URL=url)
        spec = parse_model("anthropic/bench-model" if s.style == "anthropic" else "openai/bench-model")
        client = Client(cache=None, concurrency=s.concurrency)
        client.prepare(spec)

        stage = Stage("bench", needs=["prompt"], adds=["response"],
                      requests=lambda settings, row: [Request.user(spec, row["prompt"], max_tokens=s.max_tokens)],
                      decide=lambda settings, row, answers: {"response": answers[0].text})
        table = pd.DataFrame({"prompt": [PROMPT.format(i=i) for i in range(rows)]})
        with tempfile.TemporaryDirectory() as tmp:
            started = time.perf_counter()
            result = run_stage(stage, table, Path(tmp) / "out.csv", concurrency=s.concurrency,
                               client=client, quiet=True)
            wall = time.perf_counter() - started
        with urllib.request.urlopen(url + "/_stats") as reply:
            stats = json.load(reply)
    finally:
        proc.terminate()
        proc.wait()
    ideal = allowed_seconds(s, rows - result.errors, window)  # the rows it did get through
    return {"scenario": s.name, "rows": rows, "errors": result.errors, "ok": stats["ok"],
            "429": stats["rejected"], "wall": wall, "ratio": ideal / wall if wall else 0.0,
            "per_success": stats["rejected"] / max(1, stats["ok"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1000, help="rows per RPM scenario (default: 1000)")
    parser.add_argument("--window", type=float, default=3.0, help="seconds in the provider's minute (default: 3)")
    parser.add_argument("--latency", type=float, default=0.05, help="fake reply latency (default: 0.05 s)")
    parser.add_argument("--code", default=str(ROOT), help="the checkout whose orbench runs (default: this one)")
    parser.add_argument("--only", default=None, help="comma-separated scenario names")
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(args.code).resolve()))
    os.environ["ORBENCH_CACHE_DIR"] = tempfile.mkdtemp(prefix="orbench-bench-cache-")
    chosen = scenarios(args.window)
    if args.only:
        names = set(args.only.split(","))
        chosen = [s for s in chosen if s.name in names]
    print(f"orbench from {args.code}; a provider minute = {args.window:g} s; reply latency "
          f"{args.latency * 1000:.0f} ms; allowed = 3,000 RPM or 1.2M TPM scaled")
    print(f"{'scenario':22s} {'rows':>5s} {'wall s':>7s} {'rate/allowed':>12s} {'429s':>6s} "
          f"{'429/success':>11s} {'error rows':>10s}   goal")
    figures = []
    for s in chosen:
        rows = s.rows or args.rows
        row = run_one(s, rows, args.window, args.latency)
        figures.append(row)
        cap = 0.2 if s.style == "none" else 0.05
        print(f"{s.name:22s} {rows:5d} {row['wall']:7.1f} {row['ratio']:12.2f} {row['429']:6d} "
              f"{row['per_success']:11.3f} {row['errors']:10d}   >=0.90, <={cap}, 0", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
