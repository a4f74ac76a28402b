"""How often two models are ranked the wrong way round when each is measured on its own sample of
prompts, against when both are measured on the same sample (the leaderboard's like-with-like rule,
orbench.analysis.leaderboard.entries). Prints a table; no pass/fail.

Model: a set of 1,319 prompts, each with a difficulty; a model refuses prompt i with probability
sigmoid(a + d_i), d_i ~ Normal(0, s). The premise of the rule is that prompts differ (s > 0): then
a sample's rate depends on which prompts it drew, and two entries on different samples differ by
their prompts as well as by their models. Where prompts do not differ (s = 0) the premise breaks
and different samples cost nothing; the table shows both. Both models share the prompts'
difficulties (the same prompts are hard for every model), as OR-Bench's Hard-1K was built to be.

    python bench/rank_samples.py [--reps 4000] [--seed 0]
"""

from __future__ import annotations

import argparse

import numpy as np

N_SET = 1319


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def wrong_order(rng, spread: float, gap: float, n: int, reps: int) -> tuple[float, float]:
    """(P wrong order on different samples, P wrong order on one shared sample): model B's true
    rate on the set is higher than A's by about ``gap``; ties count half."""
    d = rng.normal(0, spread, N_SET)
    a, b = sigmoid(-1.0 + d), sigmoid(-1.0 + gap * 4 + d)  # gap*4: about ``gap`` on the rate scale near 0.27
    true_a, true_b = a.mean(), b.mean()
    assert true_b > true_a
    diff_wrong = same_wrong = 0.0
    for _ in range(reps):
        sa, sb = rng.choice(N_SET, n, replace=False), rng.choice(N_SET, n, replace=False)
        ra, rb = rng.random(n) < a[sa], rng.random(n) < b[sb]
        diff_wrong += (ra.mean() > rb.mean()) + 0.5 * (ra.mean() == rb.mean())
        ra2, rb2 = rng.random(n) < a[sa], rng.random(n) < b[sa]
        same_wrong += (ra2.mean() > rb2.mean()) + 0.5 * (ra2.mean() == rb2.mean())
    return diff_wrong / reps, same_wrong / reps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    print(f"{'prompt spread s':>15} {'gap':>5} {'n':>4}  {'wrong, different samples':>25} {'wrong, same sample':>19}")
    for spread in (0.0, 1.0, 2.0, 3.0):
        for gap in (0.05, 0.10):
            for n in (20, 40):
                diff, same = wrong_order(rng, spread, gap, n, args.reps)
                print(f"{spread:>15.1f} {gap:>5.2f} {n:>4}  {diff:>25.3f} {same:>19.3f}")


if __name__ == "__main__":
    main()
