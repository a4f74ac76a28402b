"""The suite's interval rules, in one place, and a few small helpers of the report and the release.

Every interval the report, the comparisons and the audit print comes from a function here, and
``docs/statistics.md`` names each method. The rules:

* **A refusal rate** ``k`` of ``n`` rows (one sample a prompt: the report's rates per set and
  category): Clopper-Pearson's exact interval (:func:`clopper_pearson_arrays`), at least 95% at
  every rate where Wilson's falls to 0.92 at small ``n x rate``; widened to the worst-case bounds
  when any row has no verdict (:func:`rate_bounds`).
* **A single proportion** ``k`` of ``n`` elsewhere (audit figures over the audited items, cards):
  Wilson's score interval (:func:`proportion`).
* **A weighted (stratified) share**, e.g. an audit figure weighted back to the run by stratum:
  Wilson's interval on the design's effective sample size (:func:`stratified_share`). The
  variance is the stratified (linearised) one, with each stratum's rate taken as
  ``(k + 1/2) / (n + 1)`` so a stratum with no error seen, or a single item, never claims zero
  variance; a figure over a domain (recall over the human refusals, a rate over the
  human-confirmed safe prompts) adds the uncertainty of the domain's share in each stratum.
  A full census of every stratum is exact (width 0, flagged ``census``).
* **A rate over repeated samples**: the prompt is the unit. Clopper-Pearson's interval on the
  effective sample size of the prompt-clustered (linearised) variance, scaled for that
  variance's degrees of freedom (Korn & Graubard), between the number of prompts (every sample
  of a prompt alike) and the number of rows (samples independent) (:func:`cluster_share`).
  Nothing varying gives the prompt count, never width 0.
* **A mean of prompts' refusal shares** (the prompt is the unit, however many samples each side
  has; ``--compare`` uses the exact conditional interval instead): Wilson's interval on the effective size of the shares' variance,
  between the prompt count and the count of independent samples (:func:`prompt_share`).
* **A difference of two proportions**: Newcombe's hybrid score method (square-and-add of each
  side's interval, with the pairs' correlation when paired) (:func:`newcombe_difference`), fed
  by whichever of the rules above each side obeys (for two runs' prompt shares,
  :func:`prompt_paired_difference`); for a judge against humans on the same items
  (the judge card's rate bias), Tango's paired score interval (:func:`paired_score_difference`).
* **Cohen's kappa**: a (stratified) bootstrap over items; where no disagreement is seen, widened to
  the agreement's own interval carried through kappa, so a perfect judge on 450 items is not
  [1, 1] (:func:`kappa`).
* **Ranks**: percentiles of the rank over draws (:func:`rank_interval`).
* **A rate with too many rows without a verdict** (more than :data:`NO_VERDICT_SHARE`; a row failed
  with an error is a row without a verdict): no point rate; its worst-case bounds, each the outer
  limit of its Clopper-Pearson interval (:func:`rate_bounds`; :func:`difference_bounds` for a
  comparison).

Each result is an :class:`Estimate`: value, interval, method and flags (:data:`FLAGS`) that say
where an edge was met. Only numpy is needed; scipy is imported where a p-value needs it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from orbench.scoring.parsing import normalise_for_dedup

#: Fewer scored prompts than this in a cell: its rate is shown greyed, with its n (heatmap).
MIN_CELL_N = 10
#: Above this share of a cell's rows without a verdict (unparsed, refused by the judge, or failed with an
#: error), the cell gets no point rate, only its worst-case bounds (:func:`rate_bounds`): the share past which the stages already warn
#: (``orbench.run.outcomes.WARN_SHARE``); at or below it the bounds lie within 5 points of the rate.
NO_VERDICT_SHARE = 0.05
# The 97.5% quantile of the standard normal distribution: a two-sided 95% interval.
Z95 = 1.959963984540054
#: Pseudo-count added to each side of a stratum's rate in the variance (a stratum of k of n is
#: taken at (k + 1/2) / (n + 1)): no stratum claims zero variance from having seen no error.
PSEUDO = 0.5
BOOTSTRAP, SEED = 2000, 20240530

# Flags an Estimate may carry (CSV column ``*_flag``, joined by ';'; marked in report.html by
# orbench.analysis.html_kit.flag_marks).
CENSUS = "census"                  # every stratum fully audited: the figure is exact
NONE_SEEN = "none_seen"            # 0 of n or n of n: the interval is the bound that count allows
SINGLE_ITEM = "single_item_stratum"  # a stratum had one item: its variance is the add-half one
NO_VARIATION = "no_variation"      # every unit alike: the interval uses the unit count
CLAMPED = "clamped"                # the point estimate fell outside [0, 1] and was clamped
DROPPED = "dropped_draws"          # some bootstrap / parametric draws were undefined and left out
PARTIAL = "partial"                # strata with no usable item: worst-case bounds for them
FLOORED = "floored"                # a bootstrap that could not vary, widened to the agreement's interval
NOT_COMPUTABLE = "not_computable"  # nothing to estimate from; value and interval are empty
BOUNDS_ONLY = "bounds_only"        # too many rows without a verdict: no point rate, only its bounds
WIDENED_MISSING = "widened_missing"  # some (5% or fewer) rows without a verdict: the interval covers their every value
FLAGS = {
    CENSUS: "every stratum fully audited: exact",
    NONE_SEEN: "none seen (0 of n or n of n): the interval is the bound that count allows",
    SINGLE_ITEM: "a stratum with one item: its variance taken from the add-half rate",
    NO_VARIATION: "nothing varies: the interval counts each unit (prompt) once",
    CLAMPED: "the estimate fell outside [0, 1] and was clamped",
    DROPPED: "some draws were undefined and left out",
    PARTIAL: "some strata have no usable item: the interval allows any value there",
    FLOORED: "no disagreement seen: the bootstrap could not vary; widened to the agreement's interval",
    NOT_COMPUTABLE: "not computable",
    BOUNDS_ONLY: "more than 5% of the rows have no verdict (errors included): no rate, only its bounds (every "
                 "such row counted as answered, then as refused), each the outer limit of its Clopper-Pearson interval",
    WIDENED_MISSING: "some rows (5% or fewer) have no verdict: the rate is over the decided rows, its interval "
                     "widened to the worst-case bounds (every such row counted as answered, then as refused)",
}


@dataclass(frozen=True)
class Estimate:
    """A figure with its 95% interval, the method that made it and the edges it met."""

    value: float
    low: float
    high: float
    method: str
    flags: tuple[str, ...] = ()
    n: float = math.nan       # units behind the figure (items, prompts, pairs)
    n_eff: float = math.nan   # the effective sample size the interval used, where one applies
    note: str = ""

    @property
    def ci(self) -> list[float]:
        return [self.low, self.high]

    @property
    def flag(self) -> str:
        """The flags joined by ';' ('' when none)."""
        return ";".join(self.flags)

    def flagged(self, *flags: str, note: str = "") -> Estimate:
        """The same estimate with more flags (and a note appended)."""
        new = tuple(dict.fromkeys(self.flags + tuple(f for f in flags if f)))
        return replace(self, flags=new, note="; ".join(x for x in (self.note, note) if x))

    def columns(self, prefix: str) -> dict:
        """``{prefix: value, prefix_ci_low, prefix_ci_high, prefix_method, prefix_flag}``."""
        return {prefix: self.value, f"{prefix}_ci_low": self.low, f"{prefix}_ci_high": self.high,
                f"{prefix}_method": self.method, f"{prefix}_flag": self.flag}

    def as_dict(self) -> dict:
        """A JSON-ready dict (NaN stays NaN; the caller turns it into null)."""
        return {"value": self.value, "ci": self.ci, "method": self.method, "flags": list(self.flags),
                "n": self.n, "n_eff": self.n_eff, "note": self.note}


def not_computable(method: str, why: str, n: float = 0) -> Estimate:
    """An empty estimate that says why."""
    return Estimate(math.nan, math.nan, math.nan, method, (NOT_COMPUTABLE,), n=n, note=f"not computable: {why}")


# ---------------------------------------------------------------- one proportion

def wilson_arrays(k, n, z: float = Z95) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score limits for arrays of ``k`` of ``n`` (floats allowed); NaN where ``n <= 0``.

    The limits are exactly 0 at ``k = 0`` and exactly 1 at ``k = n``.
    """
    k, n = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = k / n
        denom = 1 + z * z / n
        centre = (p + z * z / (2 * n)) / denom
        half = z * np.sqrt(np.maximum(p * (1 - p), 0) / n + z * z / (4 * n * n)) / denom
        low = np.where(k <= 0, 0.0, np.clip(centre - half, 0, 1))
        high = np.where(k >= n, 1.0, np.clip(centre + half, 0, 1))
    bad = ~(n > 0)
    return np.where(bad, np.nan, low), np.where(bad, np.nan, high)


def wilson_interval(k: float, n: float, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval for ``k`` successes out of ``n``; ``(nan, nan)`` when ``n == 0``."""
    low, high = wilson_arrays(k, n, z)
    return float(low), float(high)


def proportion(k: float, n: float) -> Estimate:
    """``k`` of ``n`` with Wilson's interval; flagged ``none_seen`` at 0 of n and n of n."""
    if not n or n <= 0:
        return not_computable("wilson", "no item", 0)
    low, high = wilson_interval(k, n)
    return Estimate(k / n, low, high, "wilson", (NONE_SEEN,) if k in (0, n) else (), n=n, n_eff=n)


def _log_beta(a, b):
    lg = np.vectorize(math.lgamma, otypes=[float])
    return lg(a) + lg(b) - lg(a + b)


def _beta_fraction(a, b, x):
    """The continued fraction of the regularised incomplete beta function (modified Lentz's method,
    as in Numerical Recipes' ``betacf``), element-wise, iterated until every element has converged."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1, a - 1
    c = np.ones_like(x)
    d = 1 - qab * x / qap
    d = 1 / np.where(np.abs(d) < tiny, tiny, d)
    h = d.copy()
    for m in range(1, 100_000):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1 + aa * d
            d = 1 / np.where(np.abs(d) < tiny, tiny, d)
            c = 1 + aa / c
            c = np.where(np.abs(c) < tiny, tiny, c)
            step = d * c
            h = h * step
        if np.all(np.abs(step - 1) < 1e-14):
            break
    return h


def beta_cdf(x, a, b):
    """The regularised incomplete beta function ``I_x(a, b)`` (the Beta(a, b) distribution function)
    for arrays, numpy only (``scipy.special.betainc`` gives the same; the tests compare them)."""
    x, a, b = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (x, a, b)))
    out = np.where(x <= 0, 0.0, 1.0)
    inner = (x > 0) & (x < 1)
    if inner.any():
        x, a, b = x[inner], a[inner], b[inner]
        front = np.exp(a * np.log(x) + b * np.log1p(-x) - _log_beta(a, b))
        direct = x < (a + 1) / (a + b + 2)  # where the fraction converges fast; else by symmetry
        value = np.empty_like(x)
        if direct.any():
            value[direct] = front[direct] * _beta_fraction(a[direct], b[direct], x[direct]) / a[direct]
        flip = ~direct
        if flip.any():
            value[flip] = 1 - front[flip] * _beta_fraction(b[flip], a[flip], 1 - x[flip]) / b[flip]
        out[inner] = np.clip(value, 0, 1)
    return out


def beta_quantile(q: float, a, b) -> np.ndarray:
    """The ``q`` quantile of Beta(a, b) for arrays of ``a`` and ``b``: scipy's ``betaincinv`` where
    scipy is installed (the ``stats`` extra), else bisection on :func:`beta_cdf` (numpy only; the
    tests check the two agree)."""
    a, b = np.broadcast_arrays(np.asarray(a, dtype=float), np.asarray(b, dtype=float))
    try:
        from scipy.special import betaincinv
    except ImportError:
        return _beta_bisection(q, a, b)
    return np.asarray(betaincinv(a, b, q), dtype=float)


def _beta_bisection(q: float, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    lo, hi = np.zeros(a.shape), np.ones(a.shape)
    for _ in range(60):
        mid = (lo + hi) / 2
        below = beta_cdf(mid, a, b) < q
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return (lo + hi) / 2


def t_quantile(q: float, df) -> np.ndarray:
    """The ``q`` quantile (q > 1/2) of Student's t with ``df`` degrees of freedom, from the Beta
    quantile: ``x = I^-1_{2(1-q)}(df/2, 1/2)``, ``t = sqrt(df (1 - x) / x)``."""
    df = np.asarray(df, dtype=float)
    x = beta_quantile(2 * (1 - q), df / 2, np.full(df.shape, 0.5))
    return np.sqrt(df * (1 - x) / x)


def clopper_pearson_arrays(k, n, alpha: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Clopper-Pearson's exact limits for arrays of ``k`` of ``n`` (floats allowed: an effective
    count): the Beta(k, n - k + 1) and Beta(k + 1, n - k) quantiles at alpha/2 and 1 - alpha/2;
    exactly 0 at ``k = 0`` and 1 at ``k = n``; NaN where ``n <= 0``. Each limit's miss rate is at
    most alpha/2 at every true rate (the binomial tails themselves), where Wilson's can exceed it
    at small rates."""
    if np.ndim(k) == 0 and np.ndim(n) == 0 and n > 0:  # one count: no array bookkeeping
        k, n = float(k), float(n)
        low = 0.0 if k <= 0 else float(beta_quantile(alpha / 2, k, n - k + 1))
        high = 1.0 if k >= n else float(beta_quantile(1 - alpha / 2, k + 1, n - k))
        return np.float64(low), np.float64(high)
    k, n = np.broadcast_arrays(np.asarray(k, dtype=float), np.asarray(n, dtype=float))
    low, high = np.zeros(k.shape), np.ones(k.shape)
    ok = n > 0
    some = ok & (k > 0)
    if some.any():
        low[some] = beta_quantile(alpha / 2, k[some], n[some] - k[some] + 1)
    under = ok & (k < n)
    if under.any():
        high[under] = beta_quantile(1 - alpha / 2, k[under] + 1, n[under] - k[under])
    return np.where(ok, low, np.nan), np.where(ok, high, np.nan)


def rate_bounds(k, n, none) -> tuple[np.ndarray, np.ndarray]:
    """Worst-case bounds of a refusal rate with ``none`` of its rows without a verdict (``k``
    refusals among ``n`` rows with one; arrays allowed; an error row is a row without a verdict):
    the rate with every row without a verdict counted as answered, then as refused (Manski's
    bounds for an outcome missing not at random), each widened to the outer limit of its
    Clopper-Pearson interval, so the pair covers the rate at 95% or more whatever the missing
    verdicts are and whatever the rate (each outer limit misses by at most 2.5%: Horowitz &
    Manski 2000; Wilson's limits miss more often at low rates). NaN where there is no row."""
    k, n, none = (np.asarray(x, dtype=float) for x in (k, n, none))
    low, _ = clopper_pearson_arrays(k, n + none)
    _, high = clopper_pearson_arrays(k + none, n + none)
    return low, high


def cluster_limits(k, n) -> tuple[float, float]:
    """The limits of :func:`cluster_share` (Clopper-Pearson's at the prompt-clustered effective
    size): the bounds' outer limits with repeated samples."""
    est = cluster_share(k, n)
    return est.low, est.high


def difference_bounds(ka, ua, na, kb, ub, nb) -> tuple[float, float]:
    """Worst-case 95% bounds of ``rate_b - rate_a`` over paired prompts when verdicts are missing:
    per prompt ``k`` refusals among ``n`` decided rows and ``u`` rows without a verdict (errors
    included) on each side. The lower bound fills B's missing rows as answers and A's as
    refusals, the upper the reverse (Manski); each filled rate's outer Clopper-Pearson limit
    (prompt-clustered with repeated samples) is combined by square-and-add with the two sides
    taken as uncorrelated (Newcombe's MOVER; paired runs' positive correlation would only narrow
    it). NaN when a side has no row."""
    ka, ua, na, kb, ub, nb = (np.asarray(x, dtype=float) for x in (ka, ua, na, kb, ub, nb))
    ra, rb = na + ua, nb + ub
    if ra.sum() == 0 or rb.sum() == 0:
        return math.nan, math.nan

    def side(k, r):  # the filled rate and its two Clopper-Pearson limits
        rate = float(k.sum() / r.sum())
        if (r > 1).any():
            keep = r > 0
            low, high = cluster_limits(k[keep], r[keep])
        else:
            low, high = (float(v) for v in clopper_pearson_arrays(k.sum(), r.sum()))
        return rate, low, high

    a_low, a_low_l, _ = side(ka, ra)
    a_high, _, a_high_u = side(ka + ua, ra)
    b_low, b_low_l, _ = side(kb, rb)
    b_high, _, b_high_u = side(kb + ub, rb)
    low = b_low - a_high - math.hypot(b_low - b_low_l, a_high_u - a_high)
    high = b_high - a_low + math.hypot(b_high_u - b_high, a_low - a_low_l)
    return max(-1.0, low), min(1.0, high)


# ---------------------------------------------------------------- weighted (stratified) shares

def _per_stratum(strata, population, *columns) -> tuple[np.ndarray, ...]:
    """Per stratum: its population, its item count and the sum of each column."""
    keys, codes = np.unique(np.asarray(strata).astype(str), return_inverse=True)
    width = len(keys)
    pop = np.zeros(width)
    pop[codes] = np.asarray(population, dtype=float)
    sums = [np.bincount(codes, weights=np.asarray(c, dtype=float), minlength=width) for c in columns]
    return (pop, np.bincount(codes, minlength=width).astype(float), *sums)


def stratified_core(N, n, d, s, domain_known: bool = False,
                    value_known: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The stratified domain share and its variance from per-stratum counts (last axis = strata).

    ``N`` stratum populations, ``n`` items used, ``d`` of them in the domain, ``s`` the sum of
    the share over the domain items. Returns ``(R, R_adj, var)``: the estimate, the same with
    the add-half stratum rates (the variance's own centre) and the linearised variance with the
    finite-population correction. ``domain_known``: the domain is a function of the stratum
    (e.g. precision when strata are the machine's verdict), so its shares carry no error;
    ``value_known``: the value is (recall, specificity: the machine's verdict is the stratum's),
    so only the domain's shares are uncertain.
    Works on any leading axes (simulations pass a matrix of draws).
    """
    N, n, d, s = (np.asarray(x, dtype=float) for x in (N, n, d, s))
    W = N / N.sum(axis=-1, keepdims=True)
    fpc = 1 - np.minimum(n / np.where(N > 0, N, 1), 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(n > 0, d / np.where(n > 0, n, 1), 0)
        dom = (W * share).sum(axis=-1, keepdims=True)
        rate = np.where(d > 0, s / np.where(d > 0, d, 1), 0)
        D = W * share / dom
        R = (D * rate).sum(axis=-1)
        r_adj = (s + PSEUDO) / (d + 2 * PSEUDO)
        # a stratum whose items are all in (or all out of) the domain: Wilson's own pseudo-count
        # (z^2 / 2 a side), so "none of 40 is a refusal" bounds the hidden share near Wilson's ~9%
        pure = (d == 0) | (d == n)
        z_adj = np.where(pure, (d + Z95 ** 2 / 2) / (n + Z95 ** 2), (d + PSEUDO) / (n + 2 * PSEUDO))
        within = 0 if value_known else np.where(d > 0, D ** 2 * r_adj * (1 - r_adj) / np.where(d > 0, d, 1), 0)
        # how far the stratum's rate is from the whole: its own where seen, the add-half one (1/2)
        # where the domain has no item in it yet (the domain may still be there)
        spread = np.where(d > 0, rate, r_adj) - R[..., None]
        across = 0 if domain_known else np.where(
            n > 0, (W * spread / dom) ** 2 * z_adj * (1 - z_adj) / np.where(n > 0, n, 1), 0)
        var = (fpc * (within + across)).sum(axis=-1)
        R_adj = (D * r_adj).sum(axis=-1)
    return R, R_adj, var


def wilson_effective(R, R_adj, var) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Wilson limits at ``R`` on the effective sample size ``R_adj (1 - R_adj) / var``."""
    R, R_adj, var = (np.asarray(x, dtype=float) for x in (R, R_adj, var))
    with np.errstate(invalid="ignore", divide="ignore"):
        n_eff = R_adj * (1 - R_adj) / var
    with np.errstate(invalid="ignore"):
        low, high = wilson_arrays(R * n_eff, n_eff)
    exact = var == 0
    return np.where(exact, R, low), np.where(exact, R, high), n_eff


def stratified_share(y, strata, population, *, domain=None, domain_known: bool = False, value_known: bool = False,
                     uncovered: float = 0.0, run_n: float | None = None) -> Estimate:
    """A share weighted back to the population by stratum, with its 95% interval (see the module).

    ``y``: each item's value in [0, 1] (1/0 for a yes/no figure; a prompt's refusal share with
    repeated samples); ``strata``: each item's stratum; ``population``: the size of each item's
    stratum; ``domain``: 1 for the items the share is over (default all), e.g. the human
    refusals for a recall. ``uncovered``: rows of strata that have no usable item, bounded in
    the worst case (flag ``partial``). ``run_n``: add the variance of a rate over that many
    units (the rate's own sampling error, for a corrected rate shown beside a measured one).
    ``domain_known`` / ``value_known``: see :func:`stratified_core`.
    """
    y = np.asarray(y, dtype=float)
    z = np.ones(len(y)) if domain is None else np.asarray(domain, dtype=float)
    method = "stratified_wilson"
    if len(y) == 0 or z.sum() == 0:
        return not_computable(method, "no item in the domain")
    N, n, d, s = _per_stratum(strata, population, z, z * y)
    R, R_adj, var = (float(v) for v in stratified_core(N, n, d, s, domain_known or domain is None, value_known))
    flags = []
    if var == 0 and not run_n:
        flags.append(CENSUS)
    if run_n:
        var += R_adj * (1 - R_adj) / run_n
    low, high, n_eff = (float(v) for v in wilson_effective(R, R_adj, var))
    if R in (0.0, 1.0):
        flags.append(NONE_SEEN)
    if np.any((d == 1) & (n < N)):
        flags.append(SINGLE_ITEM)
    est = Estimate(R, low, high, method, tuple(flags), n=float(z.sum()), n_eff=n_eff)
    return widen_uncovered(est, uncovered, float((N * np.where(n > 0, d / np.maximum(n, 1), 0)).sum()),
                           float(N.sum()))


def widen_uncovered(est: Estimate, uncovered: float, domain_rows: float, covered_rows: float) -> Estimate:
    """Worst-case bounds for strata with no usable item (Manski): they may hold any share."""
    if not uncovered or uncovered <= 0 or not math.isfinite(est.value):
        return est
    m = uncovered / (covered_rows + uncovered)
    b = domain_rows / (covered_rows + uncovered)
    low, high = est.low * b / (b + m), (est.high * b + m) / (b + m)
    return replace(est, low=low, high=high).flagged(
        PARTIAL, note=f"{100 * m:.1f}% of the rows are in strata with no usable item")


# ---------------------------------------------------------------- repeated samples: prompts as units

def cluster_parts(k, n) -> tuple[float, float, float, float, float]:
    """Rate over all samples, its linearised variance with prompts as clusters, and the bounds of
    the effective size: ``(R, var, floor, ceiling, prompts)``."""
    k, n = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    m, total = len(k), float(n.sum())
    R = float(k.sum() / total)
    var = float(m / (m - 1) * ((k - R * n) ** 2).sum() / total ** 2) if m > 1 else math.inf
    return R, var, float(total ** 2 / (n ** 2).sum()), total, float(m)


def cluster_share(k, n) -> Estimate:
    """A rate over repeated samples (``k`` refusals of ``n`` samples per prompt), prompt as the unit.

    Clopper-Pearson's interval at an effective size (Korn & Graubard 1998): ``R (1 - R) / var``,
    ``var`` the prompt-clustered linearised variance, kept at most the row count (samples
    independent), then scaled by ``(z / t_df)^2`` for the variance's own uncertainty, with ``df``
    one less than the prompts that show the rarer outcome at all (a prompt that never refused
    adds nothing to the variance of a rare rate: with j prompts refusing, the variance rests on
    about j - 1 degrees of freedom), and never below the prompt count (``(sum n)^2 / sum n^2``
    with unequal sample counts): a prompt's share lies in [0, 1], so its variance is at most
    ``R (1 - R)``, every sample of a prompt alike, and the prompt count is the smallest size the
    data allow. With nothing varying (every prompt at 0, or at 1) the prompt count is used: flag
    ``no_variation``. A single prompt has no between-prompt variance to measure: its samples count
    as one. (Wilson's interval on the unscaled size, the method before, held 0.886 at 10 samples,
    rate 0.01, 100 prompts: a single prompt refusing once made the variance look tiny.)
    """
    method = "cluster_clopper_pearson"
    k, n = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    if len(k) == 0 or float(np.sum(n)) == 0:
        return not_computable(method, "no prompt")
    R, var, floor, ceiling, m = cluster_parts(k, n)
    flags: tuple[str, ...] = ()
    if R in (0.0, 1.0) or m < 2:
        n_eff = floor
        flags = (NO_VARIATION, NONE_SEEN) if R in (0.0, 1.0) else ()
    else:  # every prompt at the same share between 0 and 1 (var 0): the samples look independent
        n_eff = min(R * (1 - R) / var, ceiling) if var > 0 else ceiling
        minority = min(int((k > 0).sum()), int((k < n).sum()))
        n_eff = max(floor, n_eff * (Z95 / float(t_quantile(0.975, max(1, minority - 1)))) ** 2)
    low, high = (float(v) for v in clopper_pearson_arrays(R * n_eff, n_eff))
    return Estimate(R, low, high, method, flags, n=m, n_eff=n_eff)


# ---------------------------------------------------------------- differences

def newcombe_difference(pa: float, la: float, ua: float, pb: float, lb: float, ub: float,
                        phi: float = 0.0) -> tuple[float, float]:
    """Newcombe's square-and-add interval for ``pb - pa`` from each side's interval and the
    correlation ``phi`` of the two estimates (0 for independent samples; Newcombe 1998, method 10)."""
    d = pb - pa
    low = d - math.sqrt(max(0.0, (pb - lb) ** 2 - 2 * phi * (pb - lb) * (ua - pa) + (ua - pa) ** 2))
    high = d + math.sqrt(max(0.0, (ub - pb) ** 2 - 2 * phi * (ub - pb) * (pa - la) + (pa - la) ** 2))
    return max(-1.0, low), min(1.0, high)


def paired_difference(both: int, a_only: int, b_only: int, neither: int) -> Estimate:
    """``p_b - p_a`` of two paired yes/no verdicts with Newcombe's paired interval (method 10).

    ``both``/``neither``: pairs where both / neither say yes; ``a_only``/``b_only``: the
    discordant pairs. Each side's Wilson interval, combined with Newcombe's corrected
    correlation (``ad - bc`` less ``n/2`` when above it, 0 between 0 and ``n/2``). No
    discordant pair still gives a real width (flag ``none_seen``).
    """
    n = both + a_only + b_only + neither
    if n == 0:
        return not_computable("newcombe_paired", "no pair")
    pa, pb = (both + a_only) / n, (both + b_only) / n
    la, ua = wilson_interval(both + a_only, n)
    lb, ub = wilson_interval(both + b_only, n)
    margins = (both + a_only) * (b_only + neither) * (both + b_only) * (a_only + neither)
    phi = 0.0
    if margins > 0:
        cross = both * neither - a_only * b_only
        cross = cross - n / 2 if cross > n / 2 else (cross if cross < 0 else 0.0)
        phi = cross / math.sqrt(margins)
    low, high = newcombe_difference(pa, la, ua, pb, lb, ub, phi)
    return Estimate(pb - pa, low, high, "newcombe_paired", (NONE_SEEN,) if a_only == b_only == 0 else (), n=n)


def _tango_score(a_only: int, b_only: int, n: int, delta: float) -> float:
    """Tango's score statistic for ``p_b - p_a == delta`` (``b_only`` and ``a_only`` the discordant
    pairs among ``n``), with the ``a_only`` share at its restricted maximum-likelihood estimate."""
    b, c = b_only, a_only
    a2, b2, c2 = 2 * n, -b - c + (2 * n - b + c) * delta, -c * delta * (1 - delta)
    q = (math.sqrt(max(0.0, b2 * b2 - 4 * a2 * c2)) - b2) / (2 * a2)
    var = n * (2 * q + delta * (1 - delta))
    if var <= 0:
        return 0.0 if b - c - n * delta == 0 else math.copysign(math.inf, b - c - n * delta)
    return (b - c - n * delta) / math.sqrt(var)


def paired_score_difference(both: int, a_only: int, b_only: int, neither: int, z: float = Z95) -> Estimate:
    """``p_b - p_a`` of two paired yes/no verdicts with Tango's (1998) score interval: the deltas
    where the score statistic lies within +-z (bisection). Unlike Newcombe's paired interval it
    keeps its coverage where the two rarely disagree, and all one way (a judge against humans:
    the judge card's rate bias); with no disagreement seen it is about +-z^2/n, never width 0."""
    n = both + a_only + b_only + neither
    if n == 0:
        return not_computable("tango_paired", "no pair")
    d = (b_only - a_only) / n

    def root(lo: float, hi: float, target: float) -> float:
        for _ in range(80):  # the statistic decreases in delta
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if _tango_score(a_only, b_only, n, mid) > target else (lo, mid)
        return (lo + hi) / 2

    low = -1.0 if _tango_score(a_only, b_only, n, -1 + 1e-12) < z else root(-1 + 1e-12, d, z)
    high = 1.0 if _tango_score(a_only, b_only, n, 1 - 1e-12) > -z else root(d, 1 - 1e-12, -z)
    return Estimate(d, low, high, "tango_paired", (NONE_SEEN,) if a_only == b_only == 0 else (), n=n)


def prompt_share(k, n) -> Estimate:
    """The mean of the prompts' refusal shares ``k / n``, each prompt counted once whatever its
    number of samples: the figure a comparison whose unit is the prompt compares.

    The sample mean of the shares, with Wilson's interval on ``n_eff = R (1 - R) / var``, ``var``
    the shares' sample variance over the prompt count (the usual variance of a mean of i.i.d.
    units), kept between the prompt count (every sample of a prompt alike) and ``m^2 / sum(1/n)``
    (every sample independent: ``var = sum R (1 - R) / n_i / m^2``). With equal samples per prompt
    it is :func:`cluster_share` exactly; with one sample per prompt, Wilson's interval on the prompts.
    Nothing varying (every share 0, or every share 1) gives the prompt count (flag ``no_variation``).
    """
    method = "prompt_wilson"
    k, n = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    if len(k) == 0 or not (n > 0).all():
        return not_computable(method, "no prompt")
    s = k / n
    m = len(s)
    R = float(s.mean())
    ceiling = float(m * m / (1 / n).sum())
    flags: tuple[str, ...] = ()
    if R in (0.0, 1.0) or m < 2:
        n_eff = float(m)
        flags = (NO_VARIATION, NONE_SEEN) if R in (0.0, 1.0) else ()
    else:
        var = float(((s - R) ** 2).sum() / (m * (m - 1)))
        n_eff = min(max(R * (1 - R) / var, m), ceiling) if var > 0 else ceiling
    low, high = wilson_interval(R * n_eff, n_eff)
    return Estimate(R, low, high, method, flags, n=m, n_eff=n_eff)


def prompt_paired_difference(ka, na, kb, nb) -> Estimate:
    """``R_b - R_a`` of two models' mean refusal shares over the same prompts (:func:`prompt_share`),
    the prompt as the unit whatever each side's samples (one each, K against one, unequal counts).

    Each side's :func:`prompt_share` interval combined by Newcombe's square-and-add with the
    correlation of the two sides' per-prompt shares: the MOVER of Zou & Donner (2008) for a
    difference of two correlated estimates, which is Newcombe's (1998) method 10 when both
    sides are single yes/no verdicts (without his small-sample correction of the correlation).
    The correlation is 0 when a side does not vary.
    """
    ka, na, kb, nb = (np.asarray(x, dtype=float) for x in (ka, na, kb, nb))
    if len(ka) == 0:
        return not_computable("prompt_newcombe", "no prompt")
    a, b = prompt_share(ka, na), prompt_share(kb, nb)
    ua, ub = ka / na - a.value, kb / nb - b.value
    norm = math.sqrt(float((ua ** 2).sum() * (ub ** 2).sum()))
    phi = float((ua * ub).sum() / norm) if norm > 0 else 0.0
    low, high = newcombe_difference(a.value, a.low, a.high, b.value, b.low, b.high, phi)
    flags = tuple(dict.fromkeys(f for f in a.flags + b.flags if f == NO_VARIATION))
    return Estimate(b.value - a.value, low, high, "prompt_newcombe", flags, n=len(ka))


def stratified_paired_difference(a, b, strata, population) -> Estimate:
    """``share(b) - share(a)`` for two yes/no values of the same audited items, weighted by stratum
    (e.g. a judge's refusal rate minus the humans': its bias). Each side's :func:`stratified_share`
    interval, combined by Newcombe's square-and-add with the correlation of the two weighted shares."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    ea, eb = stratified_share(a, strata, population), stratified_share(b, strata, population)
    if NOT_COMPUTABLE in ea.flags:
        return not_computable("stratified_newcombe", "no item")
    N, n, sa, sb, sab, saa, sbb = _per_stratum(strata, population, a, b, a * b, a * a, b * b)
    W = N / N.sum()
    with np.errstate(invalid="ignore", divide="ignore"):
        cov = np.where(n > 1, (sab - sa * sb / n) / (n - 1), 0)
        va = np.where(n > 1, (saa - sa * sa / n) / (n - 1), 0)
        vb = np.where(n > 1, (sbb - sb * sb / n) / (n - 1), 0)
        fpc = 1 - np.minimum(n / N, 1)
        c = (W ** 2 * fpc * cov / n).sum()
        norm = math.sqrt(float((W ** 2 * fpc * va / n).sum() * (W ** 2 * fpc * vb / n).sum()))
    phi = float(c / norm) if norm > 0 else 0.0
    low, high = newcombe_difference(ea.value, ea.low, ea.high, eb.value, eb.low, eb.high, phi)
    if ea.low == ea.high == ea.value and eb.low == eb.high == eb.value:
        low = high = eb.value - ea.value
    flags = (CENSUS,) if CENSUS in ea.flags and CENSUS in eb.flags else ()
    return Estimate(eb.value - ea.value, low, high, "stratified_newcombe", flags, n=len(a))


def balanced_accuracy(toxic: Estimate, hard: Estimate) -> Estimate:
    """``(toxic rate + 1 - hard rate) / 2`` of two independent sets: Newcombe's square-and-add of
    the two rates' intervals (whichever rule each obeys), shifted and halved."""
    if not (math.isfinite(toxic.value) and math.isfinite(hard.value)):
        return not_computable("newcombe_independent", "a set has no rate")
    low, high = newcombe_difference(hard.value, hard.low, hard.high, toxic.value, toxic.low, toxic.high)
    diff = toxic.value - hard.value
    return Estimate((1 + diff) / 2, (1 + low) / 2, (1 + high) / 2, "newcombe_independent")


def balanced_accuracy_interval(toxic_k: int, toxic_n: int, hard_k: int, hard_n: int,
                               z: float = Z95) -> tuple[float, float, float]:
    """Balanced accuracy ``(toxic rate + 1 - hard rate) / 2`` with a 95% interval; NaNs if a set is empty.

    The two sets are independent samples, so the interval is Newcombe's hybrid score interval
    for the difference of two proportions (his method 10: each side's Wilson interval, combined
    by square-and-add), shifted and halved: BA = (1 + (p_toxic - p_hard)) / 2.
    """
    if toxic_n <= 0 or hard_n <= 0:
        return (math.nan, math.nan, math.nan)
    est = balanced_accuracy(proportion(toxic_k, toxic_n), proportion(hard_k, hard_n))
    return (est.value, est.low, est.high)


def discordant_odds_ratio(a_only: int, b_only: int) -> Estimate:
    """The paired (conditional) odds ratio ``b_only / a_only`` with the transformed Wilson interval.

    Wilson's interval for ``b_only / (a_only + b_only)`` mapped through ``p / (1 - p)``
    (Fagerland, Lydersen & Laake 2014's recommended interval); ``inf`` bounds where a side is 0.
    """
    n = a_only + b_only
    if n == 0:
        return not_computable("transformed_wilson", "no discordant pair")
    low, high = wilson_interval(b_only, n)
    odds = lambda p: math.inf if p >= 1 else p / (1 - p)  # noqa: E731 (a one-line helper used just below)
    return Estimate(odds(b_only / n), odds(low), odds(high), "transformed_wilson",
                    (NONE_SEEN,) if 0 in (a_only, b_only) else (), n=n)


# ---------------------------------------------------------------- kappa

def _kappa_of_tables(table: np.ndarray) -> np.ndarray:
    """Cohen's kappa of (..., L, L) tables of proportions (NaN where chance agreement is 1)."""
    po = np.trace(table, axis1=-2, axis2=-1)
    pe = np.einsum("...i,...i->...", table.sum(axis=-1), table.sum(axis=-2))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(pe < 1 - 1e-12, (po - pe) / (1 - pe), np.nan)


def resample_counts(strata: np.ndarray, draws: int = BOOTSTRAP, seed: int = SEED) -> np.ndarray:
    """A (draws x items) matrix: how often each item is drawn in each resample within its stratum."""
    rng = np.random.default_rng(seed)
    strata = np.asarray(strata).astype(str)
    out = np.zeros((draws, len(strata)), dtype=float)
    for s in np.unique(strata):
        idx = np.flatnonzero(strata == s)
        m = len(idx)
        picks = (np.arange(draws)[:, None] * m + rng.integers(0, m, size=(draws, m))).ravel()
        out[:, idx] = np.bincount(picks, minlength=draws * m).reshape(draws, m)
    return out


def kappa(a, b, labels: Sequence | None = None, strata=None, population=None,
          draws: int = BOOTSTRAP, seed: int = SEED) -> Estimate:
    """Cohen's kappa of two raters (or a machine against humans) with its 95% interval.

    Unweighted, or weighted back to the run by stratum when ``strata`` and ``population`` are
    given. The interval is the percentile interval of a bootstrap over items (within strata).
    Where the items show no disagreement (or no draw is usable) the bootstrap cannot vary, so
    the interval is widened to cover the agreement's own interval (:func:`proportion`, or
    :func:`stratified_share`) carried through ``kappa = (po - pe) / (1 - pe)`` at the observed
    ``pe`` (flag ``floored``): a perfect judge on 450 items is not [1, 1].
    """
    a, b = np.asarray(a), np.asarray(b)
    labels = list(labels) if labels is not None else sorted(set(a.tolist()) | set(b.tolist()))
    code = {lab: i for i, lab in enumerate(labels)}
    L, n = len(labels), len(a)
    if n < 1:
        return not_computable("bootstrap_kappa", "no item")
    weighted = strata is not None
    w = np.ones(n) if not weighted else _item_weights(strata, population)
    cells = np.array([code[x] for x in a]) * L + np.array([code[x] for x in b])
    onehot = (cells[:, None] == np.arange(L * L)[None, :]).astype(float)
    point = float(_kappa_of_tables((w @ onehot).reshape(L, L) / w.sum()))
    if not math.isfinite(point):
        return not_computable("bootstrap_kappa", "one label only: chance agreement is 1", n)
    counts = resample_counts(np.asarray(strata) if weighted else np.zeros(n, int), draws, seed) * w
    boot = _kappa_of_tables((counts @ onehot).reshape(draws, L, L) / counts.sum(axis=1)[:, None, None])
    ok = np.isfinite(boot)
    same = (a == b).astype(float)
    agree = stratified_share(same, strata, population) if weighted else proportion(same.sum(), n)
    table = (w @ onehot).reshape(L, L) / w.sum()
    pe = float(np.einsum("i,i->", table.sum(axis=1), table.sum(axis=0)))
    floor = [(agree.low - pe) / (1 - pe), (agree.high - pe) / (1 - pe)]
    low, high = (float(np.percentile(boot[ok], 2.5)), float(np.percentile(boot[ok], 97.5))) if ok.any() \
        else (math.nan, math.nan)
    flags = [DROPPED] if not ok.all() else []
    if same.all() or not high > low:  # no disagreement seen (or no usable draw): the bootstrap cannot vary
        flags.append(FLOORED)
        low, high = np.nanmin([low, floor[0]]), np.nanmax([high, floor[1]])
    note = f"{int((~ok).sum())} of {draws} draws had one label only" if not ok.all() else ""
    method = "stratified_bootstrap_kappa" if weighted else "bootstrap_kappa"
    # kappa's range is [-1, 1]; the floor, carried at the observed pe, could leave it
    return Estimate(point, max(-1.0, float(low)), min(1.0, float(high)), method, tuple(flags), n=n, note=note)


def _item_weights(strata, population) -> np.ndarray:
    """Each item's weight: its stratum's population over the items of that stratum used here."""
    strata = np.asarray(strata).astype(str)
    _, inverse, counts = np.unique(strata, return_inverse=True, return_counts=True)
    return np.asarray(population, dtype=float) / counts[inverse]


# ---------------------------------------------------------------- ranks, p-value columns

def rank_interval(scores: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Per column of a (draws x rows) score matrix (higher is better): the percentile interval of
    the row's rank (1 = best; ties share the best rank) over the draws."""
    scores = np.asarray(scores, dtype=float)
    ranks = (scores[:, None, :] > scores[:, :, None]).sum(axis=2) + 1
    tail = (1 - level) / 2
    low = np.quantile(ranks, tail, axis=0, method="inverted_cdf")
    high = np.quantile(ranks, 1 - tail, axis=0, method="inverted_cdf")
    return low.astype(int), high.astype(int)


def is_p_column(name: str) -> bool:
    """Whether a column holds p-values (``p_value``, ``p_*``): written at full precision."""
    return name == "p_value" or name.startswith("p_")


def round_for_csv(frame: pd.DataFrame, digits: int = 6) -> pd.DataFrame:
    """``frame`` with float columns rounded to ``digits``, except p-value columns (full precision:
    a p of 1.8e-33 must not be written as 0)."""
    keep = [c for c in frame.columns if is_p_column(str(c))]
    out = frame.round(digits)
    for c in keep:
        out[c] = frame[c]
    return out


# ---------------------------------------------------------------- small helpers (report, release)

def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation (ties get their average rank); ``nan`` if undefined.

    Undefined means fewer than 2 pairs, or one side constant.
    """
    if len(x) != len(y):
        raise ValueError("x and y must have the same length")
    if len(x) < 2:
        return math.nan
    rx = pd.Series(list(x), dtype=float).rank(method="average").to_numpy()
    ry = pd.Series(list(y), dtype=float).rank(method="average").to_numpy()
    dx, dy = rx - rx.mean(), ry - ry.mean()
    norm = math.sqrt(float((dx * dx).sum()) * float((dy * dy).sum()))
    if norm == 0:
        return math.nan
    return float((dx * dy).sum() / norm)


def quadratic_fit(x: Sequence[float], y: Sequence[float]) -> np.ndarray | None:
    """``np.polyfit(x, y, 2)`` when at least 3 distinct x values exist, else ``None``."""
    if len(set(float(v) for v in x)) < 3:
        return None
    return np.polyfit(np.asarray(x, dtype=float), np.asarray(y, dtype=float), 2)


def tokens(text: str) -> frozenset[str]:
    """The set of word tokens of a normalised prompt (letters and digits; apostrophes kept inside words)."""
    return frozenset(re.findall(r"[^\W_]+(?:'[^\W_]+)*", normalise_for_dedup(text)))
