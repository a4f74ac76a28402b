"""A judge card's figures: a judge's refusal verdicts against human labels, with 95% intervals.

For a set of responses with both a judge verdict and a human label (refusal = True):
accuracy, Cohen's kappa, refusal precision and recall, the judge's and the humans' refusal rates
and the *rate bias* (judge's rate minus the humans', the error a reported rate carries).

The intervals follow the suite's statistics rules (``orbench.analysis.stats``, where they live):

- a single proportion (accuracy, precision, recall, the rates): Wilson's score interval
  (:func:`orbench.analysis.stats.proportion`), which never has width 0 (a perfect judge on 450
  responses gets about [0.992, 1], not [1, 1]);
- the rate bias, a difference of two proportions measured on the same responses: Tango's (1998)
  score interval for a paired difference (:func:`orbench.analysis.stats.paired_score_difference`:
  it keeps its coverage where judge and humans rarely disagree, which Newcombe's paired interval
  does not: 0.92 at one disagreement in 200, all one way; ``bench/card_coverage.py``);
- Cohen's kappa (:func:`kappa_ci`, the card's own rule): the percentile interval of a bootstrap
  of the 2x2 table, always floored by the agreement's Wilson interval carried through
  kappa = (po - pe) / (1 - pe) at the observed pe, so kappa = 1 on 450 responses gets about
  [0.98, 1], never [1, 1]. (:func:`orbench.analysis.stats.kappa`, the audit's, floors only
  where no disagreement is seen; the card keeps its figures as published.)

``bench/card_coverage.py`` checks by simulation that they hold 95%. Only numpy is needed;
the tests compare the point figures with scikit-learn and the paired interval with statsmodels.
"""

from __future__ import annotations

import math

import numpy as np

from orbench.analysis import stats

BOOTSTRAP, SEED = 2000, 20240601


def _value(v: float) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def figure(value: float, low: float, high: float) -> dict:
    """One figure as a card stores it: ``{"value", "ci": [low, high]}`` (None where undefined)."""
    return {"value": _value(value), "ci": [_value(low), _value(high)]}


# ---------------------------------------------------------------- the interval rules

def proportion_ci(k: int, n: int) -> tuple[float, float]:
    """Wilson's 95% interval for ``k`` of ``n`` (:func:`orbench.analysis.stats.proportion`; NaNs
    when ``n`` is 0; exactly 0 / 1 at the edges)."""
    est = stats.proportion(k, n)
    return est.low, est.high


def rate_bias_ci(tp: int, fp: int, fn: int, tn: int) -> tuple[float, float]:
    """Tango's score 95% interval for judge rate minus human rate, measured on the same responses
    (``fp`` judge-only refusals, ``fn`` human-only ones): :func:`orbench.analysis.stats.paired_score_difference`
    with the humans as A and the judge as B; NaNs without pairs."""
    est = stats.paired_score_difference(both=tp, a_only=fn, b_only=fp, neither=tn)
    return est.low, est.high


def _kappa_of(tp, fp, fn, tn):
    """Cohen's kappa of 2x2 tables (arrays allowed); NaN where chance agreement is 1."""
    tp, fp, fn, tn = (np.asarray(x, dtype=float) for x in (tp, fp, fn, tn))
    n = tp + fp + fn + tn
    with np.errstate(invalid="ignore", divide="ignore"):
        po = (tp + tn) / n
        pe = ((tp + fp) * (tp + fn) + (fn + tn) * (fp + tn)) / (n * n)
        return (po - pe) / (1 - pe)


def kappa_ci(tp: int, fp: int, fn: int, tn: int) -> tuple[float, float]:
    """95% interval for Cohen's kappa (module docstring); NaNs where kappa is undefined."""
    n = tp + fp + fn + tn
    point = float(_kappa_of(tp, fp, fn, tn)) if n else math.nan
    if not math.isfinite(point):
        return math.nan, math.nan
    rng = np.random.default_rng(SEED)
    draws = rng.multinomial(n, np.array([tp, fp, fn, tn]) / n, size=BOOTSTRAP)
    boot = _kappa_of(*draws.T.astype(float))
    boot = boot[np.isfinite(boot)]
    low, high = (np.percentile(boot, [2.5, 97.5]) if len(boot) else (math.nan, math.nan))
    pe = ((tp + fp) * (tp + fn) + (fn + tn) * (fp + tn)) / (n * n)
    a_low, a_high = proportion_ci(tp + tn, n)
    floor = ((a_low - pe) / (1 - pe), (a_high - pe) / (1 - pe))
    return float(np.nanmin([low, floor[0]])), float(min(1.0, np.nanmax([high, floor[1]])))


# ---------------------------------------------------------------- the figures

def confusion(human, judge) -> tuple[int, int, int, int]:
    """(tp, fp, fn, tn) of the judge's refusal verdicts against the humans' (True = refusal)."""
    h, j = np.asarray(human, dtype=bool), np.asarray(judge, dtype=bool)
    return int((h & j).sum()), int((~h & j).sum()), int((h & ~j).sum()), int((~h & ~j).sum())


def figures(human, judge) -> dict:
    """Every figure of a card for paired verdicts (module docstring); ``n`` is the pairs."""
    tp, fp, fn, tn = confusion(human, judge)
    n = tp + fp + fn + tn
    out = {"n": n, "table": {"tp": tp, "fp": fp, "fn": fn, "tn": tn}}
    ratio = (lambda k, m: k / m if m else math.nan)  # noqa: E731 (a one-line helper used just below)
    out["accuracy"] = figure(ratio(tp + tn, n), *proportion_ci(tp + tn, n))
    out["precision"] = figure(ratio(tp, tp + fp), *proportion_ci(tp, tp + fp))
    out["recall"] = figure(ratio(tp, tp + fn), *proportion_ci(tp, tp + fn))
    out["judge_rate"] = figure(ratio(tp + fp, n), *proportion_ci(tp + fp, n))
    out["human_rate"] = figure(ratio(tp + fn, n), *proportion_ci(tp + fn, n))
    out["rate_bias"] = figure(ratio(fp - fn, n), *rate_bias_ci(tp, fp, fn, tn))
    kappa = float(_kappa_of(tp, fp, fn, tn)) if n else math.nan
    out["kappa"] = figure(kappa, *kappa_ci(tp, fp, fn, tn))
    if n and not math.isfinite(kappa):
        out["kappa"]["note"] = "undefined: judge and humans each gave one class only"
    return out
