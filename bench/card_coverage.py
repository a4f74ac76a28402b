"""Do a judge card's 95% intervals hold 95%? Coverage by simulation.

Usage:
    python bench/card_coverage.py [--sims 1000] [--seed 0]

For each scenario (a judge against humans given as the four cell probabilities of refusal
verdicts: both refuse, judge only, humans only, neither; and a number of labelled responses n),
draws ``--sims`` labelled sets, computes the card's intervals (:mod:`orbench.analysis.calibration.card_stats`:
Wilson for the coverage and the accuracy over all rows, Tango's paired interval for the rate bias
over the rows with a verdict, the floored bootstrap for Cohen's kappa over all rows, a row without
a verdict a disagreement) and prints how often each holds the true value, the mean width, and how
many kappa intervals left [-1, 1] (none should). The edges are in the list: a perfect judge, a
judge one error in 200 from perfect, skewed refusal rates (a class at 2-3%: kappa near 0 beside
97% agreement), small n, rows without a verdict. A figure whose coverage falls well below 0.95
is a defect.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orbench.analysis.calibration.card_stats import kappa_ci, proportion_ci, rate_bias_ci  # noqa: E402 (needs the sys.path set-up above)

#: (name, n, (p both refuse, p judge only, p humans only, p neither[, p no verdict: humans refuse,
#: p no verdict: humans answer]))
SCENARIOS = (
    ("perfect judge", 450, (0.50, 0.0, 0.0, 0.50)),
    ("1 error in 200", 450, (0.495, 0.0025, 0.0025, 0.50)),
    ("1 in 200, one-sided", 450, (0.495, 0.005, 0.0, 0.50)),
    ("typical LLM judge", 450, (0.45, 0.03, 0.05, 0.47)),
    ("keyword-like", 450, (0.47, 0.015, 0.037, 0.478)),
    ("few refusals", 250, (0.06, 0.01, 0.02, 0.91)),
    ("refusals 3%, judge says none", 450, (0.0, 0.0, 0.03, 0.97)),
    ("refusals 2%, judge finds half", 450, (0.01, 0.005, 0.01, 0.975)),
    ("small n", 60, (0.45, 0.03, 0.05, 0.47)),
    ("XSTest pooled size", 2250, (0.478, 0.016, 0.037, 0.469)),
    ("4% without a verdict", 450, (0.44, 0.03, 0.04, 0.45, 0.02, 0.02)),
    ("a third without a verdict", 50, (0.30, 0.0, 0.0, 0.36, 0.14, 0.20)),
)


def truth(p: tuple) -> dict:
    tp, fp, fn, tn, nr, na = (*p, 0.0, 0.0)[:6]
    pe = (tp + fn + nr) * (tp + fp) + (fp + tn + na) * (fn + tn)
    decided = tp + fp + fn + tn
    return {"coverage": decided, "accuracy": tp + tn, "rate_bias": (fp - fn) / decided,
            "kappa": (tp + tn - pe) / (1 - pe)}


def run(sims: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    keys = ("coverage", "accuracy", "rate_bias", "kappa")
    print(f"{'scenario':<30} {'n':>5}  " + "  ".join(f"{k:>17}" for k in keys) + "  kappa out of [-1, 1]")
    print(f"{'':<30} {'':>5}  " + "  ".join(f"{'cover   width':>17}" for _ in keys))
    for name, n, p in SCENARIOS:
        cells = np.array((*p, 0.0, 0.0)[:6])
        true = truth(tuple(cells))
        hits = {k: 0 for k in keys}
        widths = {k: [] for k in keys}
        outside = 0
        for tp, fp, fn, tn, nr, na in rng.multinomial(n, cells, size=sims):
            decided = tp + fp + fn + tn
            cis = {"coverage": proportion_ci(decided, n), "accuracy": proportion_ci(tp + tn, n),
                   "rate_bias": rate_bias_ci(tp, fp, fn, tn), "kappa": kappa_ci(tp, fp, fn, tn, nr, na)}
            outside += not (-1 <= cis["kappa"][0] <= cis["kappa"][1] <= 1) if cis["kappa"][0] == cis["kappa"][0] else 0
            for key, (low, high) in cis.items():
                if low != low:  # undefined (kappa with one class only): counted as a miss
                    continue
                hits[key] += low - 1e-12 <= true[key] <= high + 1e-12
                widths[key].append(high - low)
        cover = [f"{hits[k] / sims:6.3f} {np.mean(widths[k]) if widths[k] else float('nan'):7.4f}" for k in keys]
        print(f"{name:<30} {n:>5}  " + "  ".join(f"{c:>17}" for c in cover) + f"  {outside}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sims", type=int, default=1000, help="simulated label sets per scenario (default 1000)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    started = time.monotonic()
    run(args.sims, args.seed)
    print(f"({args.sims} simulations per scenario, {time.monotonic() - started:.1f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
