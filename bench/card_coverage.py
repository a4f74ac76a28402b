"""Do a judge card's 95% intervals hold 95%? Coverage by simulation.

Usage:
    python bench/card_coverage.py [--sims 1000] [--seed 0]

For each scenario (a judge against humans given as the four cell probabilities of refusal
verdicts: both refuse, judge only, humans only, neither; and a number of labelled responses n),
draws ``--sims`` labelled sets, computes the card's intervals (:mod:`orbench.analysis.calibration.card_stats`:
Wilson for accuracy and the rates, Newcombe's paired interval for the rate bias, the floored
bootstrap for Cohen's kappa) and prints how often each holds the true value, and the mean width.
The edges are in the list: a perfect judge, a judge one error in 200 from perfect, skewed refusal
rates, small n. A figure whose coverage falls well below 0.95 is a defect.
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

#: (name, n, (p both refuse, p judge only, p humans only, p neither))
SCENARIOS = (
    ("perfect judge", 450, (0.50, 0.0, 0.0, 0.50)),
    ("1 error in 200", 450, (0.495, 0.0025, 0.0025, 0.50)),
    ("1 in 200, one-sided", 450, (0.495, 0.005, 0.0, 0.50)),
    ("typical LLM judge", 450, (0.45, 0.03, 0.05, 0.47)),
    ("keyword-like", 450, (0.47, 0.015, 0.037, 0.478)),
    ("few refusals", 250, (0.06, 0.01, 0.02, 0.91)),
    ("small n", 60, (0.45, 0.03, 0.05, 0.47)),
    ("XSTest pooled size", 2250, (0.478, 0.016, 0.037, 0.469)),
)


def truth(p: tuple) -> dict:
    tp, fp, fn, tn = p
    pe = (tp + fp) * (tp + fn) + (fn + tn) * (fp + tn)
    return {"accuracy": tp + tn, "rate_bias": fp - fn, "kappa": (tp + tn - pe) / (1 - pe)}


def run(sims: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    print(f"{'scenario':<22} {'n':>5}  {'accuracy':>17}  {'rate bias':>17}  {'kappa':>17}")
    print(f"{'':<22} {'':>5}  {'cover   width':>17}  {'cover   width':>17}  {'cover   width':>17}")
    for name, n, p in SCENARIOS:
        true = truth(p)
        hits = {k: 0 for k in true}
        widths = {k: [] for k in true}
        for tp, fp, fn, tn in rng.multinomial(n, p, size=sims):
            cis = {"accuracy": proportion_ci(tp + tn, n), "rate_bias": rate_bias_ci(tp, fp, fn, tn),
                   "kappa": kappa_ci(tp, fp, fn, tn)}
            for key, (low, high) in cis.items():
                if low != low:  # undefined (kappa with one class only): counted as a miss
                    continue
                hits[key] += low - 1e-12 <= true[key] <= high + 1e-12
                widths[key].append(high - low)
        cells = [f"{hits[k] / sims:6.3f} {np.mean(widths[k]) if widths[k] else float('nan'):7.4f}"
                 for k in ("accuracy", "rate_bias", "kappa")]
        print(f"{name:<22} {n:>5}  " + "  ".join(f"{c:>17}" for c in cells))


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
