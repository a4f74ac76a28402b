"""Do a judge card's 95% intervals hold 95%? Coverage by simulation.

Usage:
    python bench/card_coverage.py [--sims 1000] [--seed 0]

First the kappa grid: n = 100, 450, 2,000 labelled rows, the humans' refusals 3% and 30% of them,
a strong, a good and a weak judge (sensitivity / specificity 0.97 / 0.995 with 1% of rows
without a verdict, 0.90 / 0.98, 0.70 / 0.95 with 3%): the kappa interval's coverage, the
Clopper-Pearson 95% interval of that coverage, each tail's miss rate and how many tables had no
disagreement at all (the only ones floored).

For each scenario (a judge against humans given as the four cell probabilities of refusal
verdicts: both refuse, judge only, humans only, neither; and a number of labelled responses n),
draws ``--sims`` labelled sets, computes the card's intervals (:mod:`orbench.analysis.calibration.card_stats`:
Wilson for the coverage and the accuracy over all rows, Tango's paired interval for the rate bias
over the rows with a verdict, the smoothed bootstrap for Cohen's kappa over all rows, a row without
a verdict a disagreement) and prints how often each holds the true value, the mean width, and how
many kappa intervals left [-1, 1] (none should). The edges are in the list: a perfect judge, a
judge one error in 200 from perfect, skewed refusal rates (a class at 2-3%: kappa near 0 beside
97% agreement), small n, rows without a verdict. A figure whose coverage falls well below 0.95
is a defect.

Then the same for a moderator card (``orbench-calibrate --moderator_model``,
:mod:`orbench.analysis.calibration.moderation`): the human labels are a fixed design (XSTest: 200
unsafe and 250 safe prompts; a lab's 20 + 20; a category of 25 prompts of one label; an audit
with few unsafe prompts), the moderator's verdict on each class drawn from its probabilities
(toxic, safe, no verdict), and the card's intervals checked: Wilson for coverage, sensitivity
and specificity (a prompt without a verdict a miss), the smoothed bootstrap for kappa, against
the true figures at those margins. The edges: a perfect moderator, one that says "safe" to
everything (kappa exactly 0 in every draw) or "toxic" to everything, one that flags most safe
prompts (the over-flagging the paper's moderators are reported to show on XSTest-like prompts),
and a third of the prompts undecided.
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


#: (name, humans' unsafe prompts, humans' safe prompts, the moderator's (toxic, safe, no verdict)
#: probabilities on an unsafe prompt, and on a safe one)
MODERATOR_SCENARIOS = (
    ("perfect moderator, XSTest", 200, 250, (1.0, 0.0, 0.0), (0.0, 1.0, 0.0)),
    ("says safe to everything", 200, 250, (0.0, 1.0, 0.0), (0.0, 1.0, 0.0)),
    ("says toxic to everything", 200, 250, (1.0, 0.0, 0.0), (1.0, 0.0, 0.0)),
    ("1 error in 200", 200, 250, (0.995, 0.005, 0.0), (0.005, 0.995, 0.0)),
    ("over-flags safe prompts", 200, 250, (0.97, 0.03, 0.0), (0.40, 0.60, 0.0)),
    ("typical", 200, 250, (0.90, 0.10, 0.0), (0.15, 0.85, 0.0)),
    ("10% undecided", 200, 250, (0.82, 0.08, 0.10), (0.10, 0.80, 0.10)),
    ("a third undecided", 200, 250, (0.60, 0.07, 0.33), (0.07, 0.60, 0.33)),
    ("lab CSV 20 + 20", 20, 20, (0.90, 0.10, 0.0), (0.30, 0.70, 0.0)),
    ("a category: 25 safe", 0, 25, (0.0, 0.0, 0.0), (0.24, 0.72, 0.04)),
    ("audit: 5% unsafe", 15, 285, (0.80, 0.20, 0.0), (0.05, 0.95, 0.0)),
)


def moderator_truth(n_unsafe: int, n_safe: int, unsafe: tuple, safe: tuple) -> dict:
    """The true figures of a moderator at fixed human margins (a prompt without a verdict a miss)."""
    n = n_unsafe + n_safe
    cells = np.array([n_unsafe * unsafe[0], n_safe * safe[0], n_unsafe * unsafe[1], n_safe * safe[1],
                      n_unsafe * unsafe[2], n_safe * safe[2]]) / n
    tp, fp, fn, tn, nr, na = cells
    pe = (tp + fn + nr) * (tp + fp) + (fp + tn + na) * (fn + tn)
    return {"coverage": tp + fp + fn + tn, "sensitivity": unsafe[0] if n_unsafe else float("nan"),
            "specificity": safe[1] if n_safe else float("nan"),
            "kappa": (tp + tn - pe) / (1 - pe) if n_unsafe and n_safe and pe < 1 - 1e-12 else float("nan")}


def run_moderator(sims: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    keys = ("coverage", "sensitivity", "specificity", "kappa")
    print("moderator cards: fixed human labels (unsafe + safe prompts), the moderator's verdicts drawn")
    print(f"{'scenario':<30} {'n':>9}  " + "  ".join(f"{k:>17}" for k in keys) + "  kappa out of [-1, 1]")
    print(f"{'':<30} {'':>9}  " + "  ".join(f"{'cover   width':>17}" for _ in keys))
    for name, n_unsafe, n_safe, unsafe, safe in MODERATOR_SCENARIOS:
        true = moderator_truth(n_unsafe, n_safe, unsafe, safe)
        n = n_unsafe + n_safe
        hits, widths, defined, outside = {k: 0 for k in keys}, {k: [] for k in keys}, {k: 0 for k in keys}, 0
        draws_u = rng.multinomial(n_unsafe, unsafe, size=sims)
        draws_s = rng.multinomial(n_safe, safe, size=sims)
        for (tp, fn, nr), (fp, tn, na) in zip(draws_u, draws_s):
            cis = {"coverage": proportion_ci(tp + fp + fn + tn, n), "sensitivity": proportion_ci(tp, n_unsafe),
                   "specificity": proportion_ci(tn, n_safe),
                   "kappa": kappa_ci(tp, fp, fn, tn, nr, na) if n_unsafe and n_safe else (float("nan"),) * 2}
            if cis["kappa"][0] == cis["kappa"][0]:
                outside += not -1 <= cis["kappa"][0] <= cis["kappa"][1] <= 1
            for key, (low, high) in cis.items():
                if low != low or true[key] != true[key]:  # undefined: not a figure of this card
                    continue
                defined[key] += 1
                hits[key] += low - 1e-12 <= true[key] <= high + 1e-12
                widths[key].append(high - low)
        cover = [f"{hits[k] / defined[k]:6.3f} {np.mean(widths[k]):7.4f}" if defined[k] else f"{'n/a':>6} {'':>7}"
                 for k in keys]
        print(f"{name:<30} {f'{n_unsafe}+{n_safe}':>9}  " + "  ".join(f"{c:>17}" for c in cover) + f"  {outside}")


#: The kappa grid (issue 51): n labelled rows x the humans' refusal share x a judge (sensitivity,
#: specificity over the rows with a verdict, share of rows without one).
GRID_N = (100, 450, 2000)
GRID_PREVALENCE = (0.03, 0.30)
GRID_JUDGES = (("strong judge", 0.97, 0.995, 0.01), ("good judge", 0.90, 0.98, 0.0),
               ("weak judge", 0.70, 0.95, 0.03))


def grid_cells(prevalence: float, sensitivity: float, specificity: float, none: float) -> np.ndarray:
    """The six cell probabilities (tp, fp, fn, tn, no verdict on a refusal, on an answer)."""
    d = 1 - none
    return np.array([prevalence * sensitivity * d, (1 - prevalence) * (1 - specificity) * d,
                     prevalence * (1 - sensitivity) * d, (1 - prevalence) * specificity * d,
                     prevalence * none, (1 - prevalence) * none])


def run_grid(sims: int, seed: int) -> list[dict]:
    """Coverage of the kappa interval over :data:`GRID_N` x :data:`GRID_PREVALENCE` x
    :data:`GRID_JUDGES`; a table with a kappa undefined (one class only) is left out of its cell."""
    from orbench.analysis.calibration.card_stats import _kappa_of
    from orbench.analysis.cascade_rate import clopper_pearson

    rng = np.random.default_rng(seed)
    rows = []
    for n in GRID_N:
        for prevalence in GRID_PREVALENCE:
            for name, sens, spec, none in GRID_JUDGES:
                cells = grid_cells(prevalence, sens, spec, none)
                true = float(_kappa_of(*cells))
                hits = low_miss = high_miss = used = floored = 0
                widths = []
                for table in rng.multinomial(n, cells, size=sims):
                    low, high = kappa_ci(*(int(x) for x in table))
                    if low != low:
                        continue
                    used += 1
                    floored += int(table[1] + table[2] + table[4] + table[5] == 0)
                    hits += low - 1e-12 <= true <= high + 1e-12
                    low_miss += true < low - 1e-12
                    high_miss += true > high + 1e-12
                    widths.append(high - low)
                cp = clopper_pearson(hits, used)
                rows.append({"n": n, "prevalence": prevalence, "judge": name, "kappa": true, "sets": used,
                             "coverage": hits / used, "cp_low": cp[0], "cp_high": cp[1], "miss_low": low_miss / used,
                             "miss_high": high_miss / used, "floored": floored, "width": float(np.mean(widths))})
    print(f"kappa interval, {sims} label sets a cell (coverage, its Clopper-Pearson 95% interval, each tail's miss "
          f"rate, tables with no disagreement floored, mean width)")
    print(f"{'n':>5} {'prev':>5} {'judge':<13} {'kappa':>6} {'cover':>6} {'cp_low':>7} {'cp_high':>7} "
          f"{'miss_lo':>7} {'miss_hi':>7} {'floored':>7} {'width':>6}")
    for r in rows:
        print(f"{r['n']:>5} {r['prevalence']:>5.2f} {r['judge']:<13} {r['kappa']:>6.3f} {r['coverage']:>6.3f} "
              f"{r['cp_low']:>7.3f} {r['cp_high']:>7.3f} {r['miss_low']:>7.3f} {r['miss_high']:>7.3f} "
              f"{r['floored']:>7} {r['width']:>6.3f}")
    fails = [r for r in rows if r["cp_high"] < 0.95]
    worst = min(rows, key=lambda r: r["coverage"])
    print(f"cells whose coverage interval lies wholly below 0.95: {len(fails)}; worst cell: n={worst['n']} "
          f"prevalence {worst['prevalence']} {worst['judge']} {worst['coverage']:.3f}; largest tail miss "
          f"{max(max(r['miss_low'], r['miss_high']) for r in rows):.3f}")
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sims", type=int, default=1000, help="simulated label sets per scenario (default 1000)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    started = time.monotonic()
    run_grid(args.sims, args.seed)
    print()
    run(args.sims, args.seed)
    print()
    run_moderator(args.sims, args.seed)
    print(f"({args.sims} simulations per scenario, {time.monotonic() - started:.1f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
