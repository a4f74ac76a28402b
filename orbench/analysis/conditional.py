"""The exact conditional comparison of two runs on the same prompts, whatever their samples per prompt.

Premise (the null hypothesis): on each prompt, run A's and run B's samples are independent draws
with the *same* refusal probability ``p_i`` (which may differ from prompt to prompt, as the
prompts' own difficulty does). Given a prompt's pooled refusals ``t_i = k_ai + k_bi`` over its
``n_ai + n_bi`` samples, every way of placing those refusals among the samples is then equally
likely, so B's share ``k_bi`` is hypergeometric (``n_ai + n_bi`` samples, ``t_i`` refusals,
``n_bi`` drawn), whatever ``p_i`` is. The statistic is B's refusals summed over the prompts,
``T = sum k_bi``; its exact null distribution is the convolution of the prompts' hypergeometric
distributions (prompts whose refusals cannot move, ``t_i = 0`` or every sample refused, add a
constant). This is the exact test of a common odds ratio of 1 across 2x2 tables (Birch 1964;
R's ``mantelhaen.test(exact = TRUE)``); with one sample on each side it is McNemar's exact test
(a discordant prompt's one refusal falls on B's side with chance 1/2).

Two-sided p-value: twice the smaller one-sided tail, at most 1 (``p_greater = P(T >= t)`` is the
one-sided p for "B refuses more", ``p_less = P(T <= t)`` for "A refuses more"). The 95% interval
inverted from exactly this test is the one on the common odds ratio ``psi`` (B's odds over A's on
the same prompt): under ``psi`` the prompts' shares follow Fisher's noncentral hypergeometric
distribution, so ``P_psi(T = t) is proportional to P_1(T = t) psi^t``; the limits are the ``psi``
whose upper (lower) tail at the observed ``T`` is 2.5% (the interval excludes 1 exactly when the
two-sided p is below 0.05). The rate difference's interval is the difference the odds ratio's
limits imply given each prompt's pooled refusals: ``d(psi) = mean_i (E_psi[k_bi] / n_bi -
(t_i - E_psi[k_bi]) / n_ai)``, which is 0 at ``psi = 1`` and increases with ``psi``, so it
excludes 0 exactly when the test rejects. It is conditional on the prompts' pooled refusals:
with no prompt whose refusals could fall on either side there is nothing to compare and no
interval. Only numpy is needed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

ALPHA = 0.05


@dataclass(frozen=True)
class Conditional:
    """The exact conditional test and its inverted intervals (see the module docstring)."""

    statistic: int        # T: B's refusals over the compared prompts
    p_value: float        # two-sided: twice the smaller tail, at most 1
    p_midp: float         # the same with half the observed point's probability in each tail
    p_greater: float      # P(T >= observed): one-sided, B refuses more
    p_less: float         # P(T <= observed): one-sided, A refuses more
    odds_ratio: float     # the conditional maximum-likelihood common odds ratio (0 or inf at an edge)
    or_low: float
    or_high: float
    diff_low: float       # the rate difference at the odds ratio's limits, given the pooled refusals
    diff_high: float
    varying: int          # prompts whose refusals could fall on either side


def _types(ka, na, kb, nb):
    """The prompts whose refusals could move, grouped by (n_a, n_b, t): arrays and their counts."""
    ka, na, kb, nb = (np.asarray(x, dtype=np.int64) for x in (ka, na, kb, nb))
    t = ka + kb
    move = (t > 0) & (t < na + nb)
    keys, counts = np.unique(np.stack([na[move], nb[move], t[move]], axis=1), axis=0, return_counts=True)
    return keys.reshape(-1, 3), counts, int(kb[move].sum()), int(move.sum())


@lru_cache(maxsize=4096)
def _hypergeom(n_a: int, n_b: int, t: int) -> tuple[int, np.ndarray]:
    """B's refusals of a prompt under the null: (smallest value, probabilities from it on)."""
    lo, hi = max(0, t - n_a), min(t, n_b)
    x = np.arange(lo, hi + 1)
    logc = np.array([math.lgamma(n_b + 1) - math.lgamma(v + 1) - math.lgamma(n_b - v + 1)
                     + math.lgamma(n_a + 1) - math.lgamma(t - v + 1) - math.lgamma(n_a - t + v + 1) for v in x])
    w = np.exp(logc - logc.max())
    w /= w.sum()
    w.setflags(write=False)  # cached: shared by every caller
    return lo, w


def _trim(lo: int, pmf: np.ndarray) -> tuple[int, np.ndarray]:
    """Drop the tails below 1e-300 of the peak (beyond what a double holds beside it), renormalised."""
    keep = np.flatnonzero(pmf > 1e-300 * pmf.max())
    pmf = pmf[keep[0]:keep[-1] + 1]
    return lo + int(keep[0]), pmf / pmf.sum()


def _power(pmf: np.ndarray, times: int) -> tuple[int, np.ndarray]:
    """The distribution of the sum of ``times`` independent draws of ``pmf`` (binary powers):
    (shift of its first value from ``times`` x the first value of ``pmf``, probabilities)."""
    out, base, shift, base_shift = np.ones(1), pmf, 0, 0
    while times:
        if times & 1:
            shift, out = _trim(shift + base_shift, np.convolve(out, base))
        times >>= 1
        if times:
            base_shift, base = _trim(2 * base_shift, np.convolve(base, base))
    return shift, out


def null_distribution(keys: np.ndarray, counts: np.ndarray, theta: float = 0.0) -> tuple[int, np.ndarray]:
    """The exact distribution of T over the varying prompts under the common odds ratio
    ``exp(theta)`` (0: the null): (smallest value, probabilities); tails below 1e-300 of the peak
    are left out (they underflow a double anyway)."""
    lo, pmf = 0, np.ones(1)
    for (n_a, n_b, t), c in zip(keys, counts):
        low, part = _hypergeom(int(n_a), int(n_b), int(t))
        if theta:
            part = _tilted(np.log(np.maximum(part, 1e-300)), theta)
        shift, powered = _power(part, int(c))
        lo, pmf = _trim(lo + low * int(c) + shift, np.convolve(pmf, powered))
    return lo, pmf


def _around(keys, counts, lo, pmf, observed, theta) -> tuple[int, np.ndarray]:
    """The distribution at ``theta`` (taken as given in ``lo, pmf``), widened to hold the observed
    T where it fell in a tail that underflowed."""
    if observed < lo:
        pmf, lo = np.concatenate([np.zeros(lo - observed), pmf]), observed
    if observed >= lo + len(pmf):
        pmf = np.concatenate([pmf, np.zeros(observed - lo - len(pmf) + 1)])
    return lo, pmf


def _tilted(logf: np.ndarray, theta: float) -> np.ndarray:
    """The null distribution tilted by ``psi = exp(theta)`` (noncentral), normalised."""
    v = logf + theta * np.arange(len(logf))
    v = np.exp(v - v.max())
    return v / v.sum()


def _solve(f, target: float) -> float:
    """The theta where the increasing function ``f`` meets ``target`` (bisection on a widening
    bracket, to 1e-9: the odds ratio to a relative 1e-9)."""
    lo, hi = -1.0, 1.0
    while f(lo) > target and lo > -700:
        lo *= 2
    while f(hi) < target and hi < 700:
        hi *= 2
    while hi - lo > 1e-9:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) < target else (lo, mid)
    return (lo + hi) / 2


def _expected_b(keys: np.ndarray, theta: float) -> np.ndarray:
    """Per prompt type: B's expected refusals under the common odds ratio ``exp(theta)``."""
    out = np.empty(len(keys))
    for i, (n_a, n_b, t) in enumerate(keys):
        lo, part = _hypergeom(int(n_a), int(n_b), int(t))
        w = _tilted(np.log(np.maximum(part, 1e-300)), theta)
        out[i] = lo + float((np.arange(len(w)) * w).sum())
    return out


def conditional_test(ka, na, kb, nb, alpha: float = ALPHA) -> Conditional:
    """The exact conditional comparison of B against A over paired prompts (module docstring):
    per prompt ``ka`` of ``na`` samples refused by A, ``kb`` of ``nb`` by B."""
    m = len(np.asarray(ka))
    keys, counts, observed, varying = _types(ka, na, kb, nb)
    if varying == 0:
        return Conditional(0, 1.0, 1.0, 1.0, 1.0, math.nan, 0.0, math.inf, math.nan, math.nan, 0)
    lo, pmf = _around(keys, counts, *null_distribution(keys, counts), observed, 0.0)
    i = observed - lo
    less, greater = float(pmf[:i + 1].sum()), float(pmf[i:].sum())
    p = min(1.0, 2 * min(less, greater))
    mid = min(1.0, 2 * min(less, greater) - float(pmf[i]))
    least = int((counts * np.maximum(0, keys[:, 2] - keys[:, 0])).sum())  # T's own range
    most = int((counts * np.minimum(keys[:, 2], keys[:, 1])).sum())
    base = 0.0
    if min(less, greater) < 1e-12:
        # far in the null's tail: the limits lie where the null distribution has underflowed, so
        # take the distribution afresh at the odds ratio that expects (about) the observed T
        target = min(max(observed, least + 0.5), most - 0.5)
        base = _solve(lambda th: float((counts * _expected_b(keys, th)).sum()), target)
        lo, pmf = _around(keys, counts, *null_distribution(keys, counts, base), observed, base)
        i = observed - lo
    with np.errstate(divide="ignore"):
        logf = np.log(pmf)
    logf = np.maximum(logf, np.log(np.finfo(float).tiny))  # a tail that underflowed stays finite

    def upper(theta):  # P_theta(T >= observed): increases with theta
        return float(_tilted(logf, theta - base)[i:].sum())

    def lower_complement(theta):  # 1 - P_theta(T <= observed) = P_theta(T > observed): increases
        return float(_tilted(logf, theta - base)[i + 1:].sum())

    def mean(theta):
        w = _tilted(logf, theta - base)
        return float((np.arange(len(w)) * w).sum())

    t_low = -math.inf if observed == least else _solve(upper, alpha / 2)
    t_high = math.inf if observed == most else _solve(lower_complement, 1 - alpha / 2)
    t_hat = -math.inf if observed == least else math.inf if observed == most else _solve(mean, float(i))
    weights = counts * (1 / keys[:, 1] + 1 / keys[:, 0])
    shift = float((counts * keys[:, 2] / keys[:, 0]).sum())

    def diff(theta):
        if theta == -math.inf:
            eb = np.maximum(0, keys[:, 2] - keys[:, 0]).astype(float)
        elif theta == math.inf:
            eb = np.minimum(keys[:, 2], keys[:, 1]).astype(float)
        else:
            eb = _expected_b(keys, theta)
        return (float((weights * eb).sum()) - shift) / m

    ka_, na_, kb_, nb_ = (np.asarray(x, dtype=float) for x in (ka, na, kb, nb))
    d_obs = float((kb_ / nb_ - ka_ / na_).mean())
    d_low, d_high = diff(t_low), diff(t_high)
    return Conditional(observed, p, mid, greater, less, math.exp(t_hat) if math.isfinite(t_hat) else
                       (0.0 if t_hat < 0 else math.inf), math.exp(t_low) if math.isfinite(t_low) else 0.0,
                       math.exp(t_high) if math.isfinite(t_high) else math.inf,
                       min(d_low, d_obs), max(d_high, d_obs), varying)
