"""Where the premises of --shard and the replicas' routing break, by simulation (prints figures).

1. Shards (``orbench.run.shards.shard_of``): a hash spreads distinct keys like a fair N-sided die, so
   each shard gets n/N rows +- sqrt(n (1/N)(1 - 1/N)). Checked on the bundled sets' prompts and on
   80,359 synthetic prompts (OR-Bench-80K's size); then where the premise breaks: one prompt
   repeated over a large share of the rows (rows with one key go to one shard).
2. Replicas (``orbench.llm.replicas``, least loaded): premise, replicas of like speed. A discrete-event
   simulation of R replicas, each answering a request in an exponential time of mean ``1/speed``
   whatever its load (continuous batching well below its limit), with ``c`` rows per replica in flight;
   least loaded against round robin, with equal speeds and with one replica 3x slower (the premise broken).

    python bench/scale_out.py [--seed 1]
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from orbench.run.shards import shard_of  # noqa: E402 (after the sys.path line above)

DATA = Path(__file__).resolve().parents[1] / "orbench" / "data"


def shard_sizes(keys: list[str], count: int) -> list[int]:
    sizes = [0] * count
    for key in keys:
        sizes[shard_of([key], count) - 1] += 1
    return sizes


def shards_table(seed: int) -> None:
    rng = random.Random(seed)
    bundled = [p for name in ("or-bench-hard-1k.csv", "or-bench-toxic.csv", "xstest-safe.csv", "xstest-unsafe.csv")
               for p in pd.read_csv(DATA / name, dtype=str, keep_default_na=False)["prompt"]]
    synthetic = [f"prompt {rng.getrandbits(64):016x} about topic {i}" for i in range(80_359)]
    heavy = synthetic[:72_323] + ["the same prompt"] * 8_036  # one prompt on 10% of the rows
    print("1. shard sizes: rows per shard, against n/N and the binomial sd")
    print(f"{'input':<34}{'rows':>8}{'N':>4}{'min':>8}{'max':>8}{'n/N':>10}{'sd':>8}{'max dev/sd':>12}")
    for name, keys in (("bundled sets (Hard-1K, Toxic, XSTest)", bundled), ("80,359 distinct prompts", synthetic),
                       ("80,359 rows, one prompt on 10%", heavy)):
        for count in (4, 8, 16):
            sizes = shard_sizes(keys, count)
            mean = len(keys) / count
            sd = math.sqrt(len(keys) * (1 / count) * (1 - 1 / count))
            dev = max(abs(s - mean) for s in sizes) / sd
            print(f"{name[:33]:<34}{len(keys):>8}{count:>4}{min(sizes):>8}{max(sizes):>8}{mean:>10.1f}{sd:>8.1f}{dev:>12.1f}")
    print("(rows of one key are asked once: the requests per shard are those of its distinct prompts, so the last\n"
          " input's rows are uneven but its requests are spread as evenly as the distinct prompts')")


def simulate(speeds: list[float], per_replica: int, requests: int, policy: str, rng: random.Random) -> tuple[float, list[int]]:
    """Seconds until ``requests`` are answered, and how many each replica answered."""
    in_flight = [0] * len(speeds)
    answered = [0] * len(speeds)
    events: list[tuple[float, int]] = []
    now, sent, turn = 0.0, 0, 0

    def send() -> None:
        nonlocal sent, turn
        if policy == "least loaded":
            replica = min(range(len(speeds)), key=lambda r: (in_flight[r], r))
        else:
            replica, turn = turn % len(speeds), turn + 1
        in_flight[replica] += 1
        sent += 1
        heapq.heappush(events, (now + rng.expovariate(speeds[replica]), replica))

    while sent < min(requests, per_replica * len(speeds)):
        send()
    while events:
        now, replica = heapq.heappop(events)
        in_flight[replica] -= 1
        answered[replica] += 1
        if sent < requests:
            send()
    return now, answered


def replicas_table(seed: int) -> None:
    print("\n2. replicas: time to answer 4,000 requests (mean of 20 runs; time unit = one request's mean time "
          "at speed 1), 16 rows in flight per replica")
    print(f"{'speeds':<22}{'policy':<15}{'time':>8}{'answered per replica (run 1)':>34}")
    for speeds in ([1.0, 1.0, 1.0], [1.0, 1.0, 1 / 3]):
        for policy in ("least loaded", "round robin"):
            rng = random.Random(seed)
            runs = [simulate(speeds, 16, 4000, policy, rng) for _ in range(20)]
            mean = sum(t for t, _ in runs) / len(runs)
            label = ", ".join(f"{s:.2f}" for s in speeds)
            print(f"{label:<22}{policy:<15}{mean:>8.1f}{str(runs[0][1]):>34}")
    total = 16 * (1.0 + 1.0 + 1 / 3)
    print(f"(the bound for speeds 1, 1, 1/3: 4000 / (16 x (1 + 1 + 1/3)) = {4000 / total:.1f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    shards_table(args.seed)
    replicas_table(args.seed)


if __name__ == "__main__":
    main()
