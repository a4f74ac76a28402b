"""A judge card's figures: a judge's refusal verdicts against human labels, with 95% intervals.

Every labelled row counts. The card first states its *coverage*, the rows with a verdict out of
all rows (Wilson interval), and whether it is *valid*: when the 95% lower limit of the coverage is at
least :data:`VALID_COVERAGE` (0.90; a judge with a verdict on every row needs
:data:`MIN_VALID_ROWS`, 35 rows, for that, and a card of fewer says so). A judge silent on many
rows has not been measured on the rows it skips. The
agreement is over all rows, **a row without a verdict counting as a disagreement** with the
humans (it is a third judge class that humans never give):

- accuracy (agreement) and Cohen's kappa over all rows; the agreement on each class beside
  kappa: the humans' refusals the judge called refusals (``recall``, a row without a verdict a
  miss) and the humans' answers it called answers (``specificity``), because kappa alone misleads
  where one class is rare (the prevalence paradox: high agreement, kappa near 0; Feinstein &
  Cicchetti 1990, Byrt, Bishop & Carlin 1993); the card says so where the humans' rarer class is
  under 10% of the rows (Byrt's prevalence index above 0.8);
- precision over the judge's refusal verdicts;
- the judge's and the humans' refusal rates and the *rate bias* (judge minus humans: the error a
  rate over the judge's verdicts carries), over the rows with a verdict, where both are measured.

The intervals follow the suite's statistics rules (``orbench.analysis.stats``, where they live):

- a single proportion (coverage, accuracy, precision, recall, specificity, the rates): Wilson's
  score interval (:func:`orbench.analysis.stats.proportion`), which never has width 0 (a
  perfect judge on 450 responses gets about [0.992, 1], not [1, 1]);
- the rate bias, a difference of two proportions measured on the same responses: Tango's (1998)
  score interval for a paired difference (:func:`orbench.analysis.stats.paired_score_difference`:
  it keeps its coverage where judge and humans rarely disagree, which Newcombe's paired interval
  does not: 0.92 at one disagreement in 200, all one way; ``bench/card_coverage.py``);
- Cohen's kappa (:func:`kappa_ci`, the card's own rule): the percentile interval of a
  multinomial bootstrap whose cell probabilities are the table's counts with half a count added
  to each of its four verdict cells (Haldane and Anscombe's correction: a bootstrap from the
  observed table never draws a table with a count the data happened to lack, so with a rare class
  it is too narrow; half a count gives such tables their share, and its weight fades as n grows),
  joined with the Wald interval kappa +- 1.96 x the draws' standard deviation (the usual
  large-sample interval for kappa, Fleiss, Cohen and Everitt 1969, its standard error taken from
  the same draws): a percentile interval follows kappa's skew but sits a little narrow where kappa
  is far from its bounds (0.941 coverage at n = 450 with a weak judge), the Wald interval errs the
  other way where kappa is skewed, and their union keeps each where the other falls short.
  Only a table with no disagreement at all (every row agrees) is floored: there every draw agrees
  too, so the interval is the agreement's Wilson interval carried through kappa = (po - pe) / (1 - pe)
  at the observed pe (kappa = 1 on 450 responses gets about [0.98, 1], never [1, 1]). Kept within
  [-1, 1]. Coverage: ``bench/card_coverage.py`` (n = 100, 450, 2,000, prevalence 3% and 30%).
- *not computable* where nothing is: a judge with no verdict on any row has no kappa (value and
  interval None, the note says why), nor rates.

``bench/card_coverage.py`` checks by simulation that they hold 95%. Only numpy is needed;
the tests compare the point figures with scikit-learn and the paired interval with statsmodels.
"""

from __future__ import annotations

import math

import numpy as np

from orbench.analysis import stats
from orbench.scoring.judge_cards import MIN_VALID_ROWS, VALID_COVERAGE, coverage_valid

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


#: The note of a kappa with no verdict to compute it from.
NOT_COMPUTABLE = "not computable: no verdict on any row"
#: Below this share of the rows, the humans' rarer class makes kappa unstable (the card says so).
RARE_CLASS = 0.10
#: The table's cells: (human refusal, judge refusal), (human answer, judge refusal), (human refusal,
#: judge answer), (human answer, judge answer), then the rows without a verdict (human refusal, answer).
CELLS = ("tp", "fp", "fn", "tn", "none_refusal", "none_answer")


def _kappa_of(tp, fp, fn, tn, nr=0, na=0):
    """Cohen's kappa of (human: refusal/answer) x (judge: refusal/answer/no verdict) tables (arrays
    allowed): the third judge class never agrees; NaN where chance agreement is 1."""
    tp, fp, fn, tn, nr, na = (np.asarray(x, dtype=float) for x in (tp, fp, fn, tn, nr, na))
    n = tp + fp + fn + tn + nr + na
    with np.errstate(invalid="ignore", divide="ignore"):
        po = (tp + tn) / n
        pe = ((tp + fn + nr) * (tp + fp) + (fp + tn + na) * (fn + tn)) / (n * n)
        return np.where(pe < 1 - 1e-12, (po - pe) / (1 - pe), np.nan)


#: Half a count added to each verdict cell of the table the bootstrap draws from (module docstring).
SMOOTHING = 0.5
Z95 = 1.959963984540054


def kappa_ci(tp: int, fp: int, fn: int, tn: int, nr: int = 0, na: int = 0) -> tuple[float, float]:
    """95% interval for Cohen's kappa (module docstring), within [-1, 1]; NaNs where kappa is
    undefined or not computable (no verdict on any row). ``nr``/``na``: rows without a verdict
    whose human label is refusal / answer."""
    cells = np.array([tp, fp, fn, tn, nr, na], dtype=float)
    n = int(cells.sum())
    point = float(_kappa_of(*cells)) if n and tp + fp + fn + tn else math.nan
    if not math.isfinite(point):
        return math.nan, math.nan
    pe = ((tp + fn + nr) * (tp + fp) + (fp + tn + na) * (fn + tn)) / (n * n)
    if fp + fn + nr + na == 0:  # every row agrees: so would every draw; the agreement's interval, carried
        a_low, _ = proportion_ci(tp + tn, n)
        return float(max(-1.0, (a_low - pe) / (1 - pe))), 1.0
    rng = np.random.default_rng(SEED)
    smoothed = cells + np.array([SMOOTHING] * 4 + [0.0, 0.0])
    draws = rng.multinomial(n, smoothed / smoothed.sum(), size=BOOTSTRAP)
    boot = _kappa_of(*draws.T.astype(float))
    boot = boot[np.isfinite(boot)]
    if not len(boot):
        return math.nan, math.nan
    low, high = np.percentile(boot, [2.5, 97.5])
    spread = Z95 * float(np.std(boot, ddof=1)) if len(boot) > 1 else 0.0
    low, high = min(low, point - spread), max(high, point + spread)  # the union with the Wald interval
    return float(max(-1.0, low)), float(min(1.0, high))


# ---------------------------------------------------------------- the figures

def confusion(human, judge) -> dict[str, int]:
    """The table of the judge's verdicts against the humans' (True = refusal; a judge verdict of
    None or NaN = no verdict): :data:`CELLS`."""
    h = np.asarray(human, dtype=bool)
    verdict = [None if v is None or (isinstance(v, float) and math.isnan(v)) else bool(v) for v in judge]
    has = np.array([v is not None for v in verdict], dtype=bool)
    j = np.array([bool(v) for v in verdict], dtype=bool)
    return {"tp": int((h & has & j).sum()), "fp": int((~h & has & j).sum()), "fn": int((h & has & ~j).sum()),
            "tn": int((~h & has & ~j).sum()), "none_refusal": int((h & ~has).sum()),
            "none_answer": int((~h & ~has).sum())}


def figures(human, judge) -> dict:
    """Every figure of a card (module docstring). ``human``: the humans' refusal labels;
    ``judge``: the judge's verdict on the same rows (True, False, or None for no verdict).
    ``n`` is all rows, ``verdicts`` the rows with a verdict."""
    t = confusion(human, judge)
    tp, fp, fn, tn, nr, na = (t[c] for c in CELLS)
    n, decided = tp + fp + fn + tn + nr + na, tp + fp + fn + tn
    ratio = (lambda k, m: k / m if m else math.nan)  # noqa: E731 (a one-line helper used just below)
    out = {"n": n, "verdicts": decided, "table": t}
    cov_low, cov_high = proportion_ci(decided, n)
    out["coverage"] = {**figure(ratio(decided, n), cov_low, cov_high), "valid": bool(n) and coverage_valid(cov_low)}
    if n < MIN_VALID_ROWS:
        out["coverage"]["note"] = (f"{n} rows: a card of fewer than {MIN_VALID_ROWS} cannot be valid (even a verdict "
                                   f"on every row leaves the 95% lower limit of the coverage under {VALID_COVERAGE:.2f})")
    out["accuracy"] = figure(ratio(tp + tn, n), *proportion_ci(tp + tn, n))
    out["precision"] = figure(ratio(tp, tp + fp), *proportion_ci(tp, tp + fp))
    out["recall"] = figure(ratio(tp, tp + fn + nr), *proportion_ci(tp, tp + fn + nr))
    out["specificity"] = figure(ratio(tn, tn + fp + na), *proportion_ci(tn, tn + fp + na))
    out["judge_rate"] = figure(ratio(tp + fp, decided), *proportion_ci(tp + fp, decided))
    out["human_rate"] = figure(ratio(tp + fn, decided), *proportion_ci(tp + fn, decided))
    out["rate_bias"] = figure(ratio(fp - fn, decided), *rate_bias_ci(tp, fp, fn, tn))
    kappa = float(_kappa_of(tp, fp, fn, tn, nr, na)) if decided else math.nan
    out["kappa"] = figure(kappa, *kappa_ci(tp, fp, fn, tn, nr, na))
    rare = min(tp + fn + nr, fp + tn + na)
    if n and not decided:
        out["kappa"]["note"] = NOT_COMPUTABLE
    elif n and not math.isfinite(kappa):
        out["kappa"]["note"] = "undefined: judge and humans each gave one class only"
    elif n and rare < RARE_CLASS * n:
        which = "refusals" if tp + fn + nr <= fp + tn + na else "answers"
        out["kappa"]["note"] = (f"prevalence: the humans' {which} are {100 * rare / n:.1f}% of the rows, and kappa "
                                f"is unstable when a class is rare (high agreement, low kappa); read the agreement "
                                f"on each class (refusals agreed, answers agreed)")
    return out
