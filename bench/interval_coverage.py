"""Coverage of the audit's interval families by simulation: does a 95% interval hold 95%?

The rates, the clustered rates, the comparisons and the bounds are checked by
``bench/calibration_grid.py`` (issue 51's grid: 20 to 1,000 prompts, rates 0.01 to 0.3, samples
1 to 10, verdicts missing); this script keeps the audit's families, which the grid does not draw.
For each family (``docs/statistics.md`` names the methods) and each n in {10, 20, 40} (items per
stratum, or items), many data sets are drawn from a known truth over a grid of true rates; the
share of intervals holding the truth is the coverage. Weighted (audit) families are drawn without
replacement from finite strata of unequal sizes, as an audit draws from a run. Prints, per family
and n, the average coverage over the grid, its minimum and the mean width; the goal is an average
of 93-97%.

Families: ``wilson`` (one proportion), ``stratified`` (a share over the whole run, e.g. the
humans' refusal share), ``stratified_domain_recall`` and ``stratified_domain_safe`` (a share over
a domain: a verdict's recall over the human refusals; a model's rate over the prompts humans call
safe, 90% / 20% safe strata), ``kappa`` (the floored bootstrap), ``rogan_gladen`` (a rate
corrected with Se/Sp from a separate audit).

Usage::

    python bench/interval_coverage.py [--reps 1000] [--families wilson,stratified]

Exit status: 0 after printing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orbench.analysis import stats  # noqa: E402 (needs the sys.path set-up above)
from orbench.analysis.audit import agreement as audit_stats  # noqa: E402 (needs the sys.path set-up above)

NS = (10, 20, 40)
RATES = (0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.65, 0.8, 0.9, 0.95, 0.98)


def covered(low, high, truth) -> np.ndarray:
    return (np.asarray(low) <= truth + 1e-12) & (truth - 1e-12 <= np.asarray(high))


def fam_wilson(rng, n, p, reps):
    k = rng.binomial(n, p, reps)
    low, high = stats.wilson_arrays(k, np.full(reps, n))
    return covered(low, high, p), high - low


def _draw_strata(rng, pops, reps, n):
    """Per stratum: a population of (z, y) counts; draws without replacement -> (d, s) per replicate."""
    N = np.array([sum(c) for c in pops], float)
    d = np.zeros((reps, len(pops)))
    s = np.zeros((reps, len(pops)))
    for h, colors in enumerate(pops):  # colors: counts of (z=1,y=1), (z=1,y=0), (z=0)
        x = rng.multivariate_hypergeometric(np.array(colors), min(n, int(N[h])), size=reps)
        d[:, h], s[:, h] = x[:, 0] + x[:, 1], x[:, 0]
    return N, np.minimum(n, N), d, s


def _strat_cover(N, n, d, s, truth, known=False, value_known=False):
    R, R_adj, var = stats.stratified_core(np.broadcast_to(N, d.shape), np.broadcast_to(n, d.shape), d, s, known,
                                          value_known)
    low, high, _ = stats.wilson_effective(R, R_adj, var)
    ok = np.isfinite(R)
    return covered(low[ok], high[ok], truth), (high - low)[ok]


def fam_stratified(rng, n, p, reps):
    # four strata of unequal size; the humans' refusal share is high where the machine says refusal
    sizes = (300, 1600, 120, 900)
    shares = (min(0.99, 0.5 + p / 2), p / 3, min(0.99, 0.5 + p / 2), p / 3)
    pops = [(round(N * q), 0, N - round(N * q)) for N, q in zip(sizes, shares)]
    truth = sum(c[0] for c in pops) / sum(sizes)
    pops = [(c[0], c[2], 0) for c in pops]  # every item in the domain; y = human refusal
    N, nn, d, s = _draw_strata(rng, pops, reps, n)
    return _strat_cover(N, nn, d, s, truth)


def fam_recall(rng, n, p, reps):
    # strata by the machine's verdict; domain = human refusals; y = machine refusal (= the stratum)
    sizes, miss = (400, 1600, 200, 900), (1 - p) / 4  # p = recall-ish: refusals the machine catches
    refusal_share = (0.95, miss, 0.9, miss)
    pops = []
    for h, (N, q) in enumerate(zip(sizes, refusal_share)):
        pos = round(N * q)
        pops.append((pos, 0, N - pos) if h % 2 == 0 else (0, pos, N - pos))
    truth = sum(c[0] for c in pops) / sum(c[0] + c[1] for c in pops)
    N, nn, d, s = _draw_strata(rng, pops, reps, n)
    return _strat_cover(N, nn, d, s, truth, value_known=True)  # strata by the verdict: y is the stratum's


def fam_safe(rng, n, p, reps):
    # two categories, 90% / 20% safe; the model refuses p of the safe ones in the first, 3p/2 in the second
    sizes, safe, refuse = (700, 700), (0.9, 0.2), (p, min(1.0, 1.5 * p))
    pops = []
    for N, a, b in zip(sizes, safe, refuse):
        z = round(N * a)
        pops.append((round(z * b), z - round(z * b), N - z))
    truth = sum(c[0] for c in pops) / sum(c[0] + c[1] for c in pops)
    N, nn, d, s = _draw_strata(rng, pops, reps, n)
    return _strat_cover(N, nn, d, s, truth)


def fam_kappa(rng, n, p, reps):
    # a judge against humans: humans say refusal with prob p, the judge agrees with prob 0.9
    acc = 0.9
    truth = ((acc - (p * (p * acc + (1 - p) * (1 - acc)) + (1 - p) * ((1 - p) * acc + p * (1 - acc))))
             / (1 - (p * (p * acc + (1 - p) * (1 - acc)) + (1 - p) * ((1 - p) * acc + p * (1 - acc)))))
    ok, width = [], []
    for _ in range(reps):
        h = rng.random(n) < p
        j = np.where(rng.random(n) < acc, h, ~h)
        est = stats.kappa(h.astype(int), j.astype(int), [0, 1], draws=1000)
        if np.isfinite(est.value):
            ok.append(est.low <= truth <= est.high)
            width.append(est.high - est.low)
    return np.array(ok), np.array(width)


def fam_rogan_gladen(rng, n, p, reps):
    # a measured rate over 1,000 rows; Se 0.9 and Sp 0.95 from a separate audit of n items per class
    se, sp, rows = 0.9, 0.95, 1000
    measured_p = p * se + (1 - p) * (1 - sp)
    ok, width = [], []
    for _ in range(reps):
        m = rng.binomial(rows, measured_p) / rows
        kse, ksp = rng.binomial(n, se), rng.binomial(n, sp)
        se_est, sp_est = stats.proportion(kse, n), stats.proportion(ksp, n)
        est = audit_stats.rogan_gladen(m, rows, {"value": se_est.value, "n_eff": n}, {"value": sp_est.value, "n_eff": n},
                                       draws=1000, seed=int(rng.integers(1 << 30)))
        if np.isfinite(est.value):
            ok.append(est.low <= p <= est.high)
            width.append(est.high - est.low)
    return np.array(ok), np.array(width)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=1000, help="data sets per (family, n, rate) (default: 1000)")
    parser.add_argument("--families", default=None, help="comma-separated subset of the families")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    slow = max(50, args.reps // 5)
    families = {
        "wilson": (fam_wilson, args.reps),
        "stratified": (fam_stratified, args.reps),
        "stratified_domain_recall": (fam_recall, args.reps),
        "stratified_domain_safe": (fam_safe, args.reps),
        "kappa": (fam_kappa, slow),
        "rogan_gladen": (fam_rogan_gladen, slow),
    }
    if args.families:
        wanted = args.families.split(",")
        families = {f: v for f, v in families.items() if f.split(" ")[0] in wanted}
    rng = np.random.default_rng(args.seed)
    print(f"95% intervals: coverage over true rates {', '.join(str(r) for r in RATES)}")
    print(f"{'family':40s} {'n':>3s} {'reps':>5s} {'mean cover':>10s} {'min cover':>9s} {'mean width':>10s} {'time':>6s}")
    for name, (fn, reps) in families.items():
        for n in NS:
            t0 = time.perf_counter()
            covers, widths = [], []
            for p in RATES:
                ok, width = fn(rng, n, p, reps)
                covers.append(float(np.mean(ok)))
                widths.append(float(np.mean(width)))
            print(f"{name:40s} {n:3d} {reps:5d} {np.mean(covers):10.3f} {np.min(covers):9.3f} {np.mean(widths):10.3f} "
                  f"{time.perf_counter() - t0:5.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
