"""The cascade's rate: prediction-powered inference over the rows the keyword matcher decided.

Stage 5 ``--cascade`` lets the keyword matcher decide the responses it is sure of and sends the
rest to the judge; it also sends a random share of the sure rows to the judge (the *check
sample*, :data:`orbench.scoring.cascade.CHECK_SHARE`). The quantity of interest is the rate the
judge would give on every row. Prediction-powered inference (PPI; Angelopoulos, Bates, Fannjiang,
Jordan and Zrnic, "Prediction-powered inference", Science 382, 2023) estimates it as

    rate = mean over every row of g  +  mean over the checked rows of (judge - matcher)

where ``g`` is the row's cascade verdict (the matcher's on a sure row, the judge's on the others)
and the second term, the *rectifier*, is measured on sure rows drawn at random: it is zero in
expectation only if the matcher agrees with the judge, and is estimated, never assumed.
:func:`ppi_mean` is the paper's mean estimator (no power tuning, ``lambda = 1``), checked against
the authors' ``ppi_py`` in ``tests/test_cascade_rate.py`` and ``bench/cascade_ppi.py``.

The cascade's own rate (:func:`cascade_rate`) splits the rectifier by the direction of the sure
classes, because each direction can be wrong one way only: a sure refusal the judge calls an
answer lowers the rate, a sure answer the judge calls a refusal raises it. Per direction ``h`` with
``N_h`` of the ``N`` rows and ``k_h`` disagreements among ``n_h`` checked rows:

    rate = mean(g) - (N_refusal / N) * k_refusal / n_refusal + (N_answer / N) * k_answer / n_answer

The interval: PPI's is ``rate +- z * sqrt(var(g) / N + var(rectifier) / n)``; written as
``sqrt((z se_g)^2 + (z se_rect)^2)`` it is the square-root-of-sums combination of the parts'
own intervals (MOVER: Zou and Donner 2008; Newcombe's difference interval is the same
construction). Here the parts' intervals are the usual interval of the cascade's verdicts (Wilson,
or prompt-clustered with repeated samples: the report's) and, for each direction's disagreement
share, the exact Clopper-Pearson 95% interval, which does not shrink to nothing when the sample
shows no disagreement: 0 of ``n`` checked still bounds the share by ``1 - 0.025^(1/n)`` (about
3.7 / n), and that bound, weighted by the direction's share of rows, widens the side of the
interval its errors would move. A direction with sure rows and none checked has the worst case,
a share in [0, 1].

Premises: the checked rows are a random sample of the sure rows (a hash of the row key and a seed
decides, independent of the response's content); a checked row whose judge gave no verdict is
left out of the sample (missing at random, as the report treats rows without a verdict); the
rows are independent (with repeated samples the cascade-verdict part is clustered by prompt, the
disagreement share is not). ``bench/cascade_ppi.py`` measures the coverage where these hold and
where the disagreements are rare.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from orbench.analysis import stats

Z95 = 1.959963984540054


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) two-sided interval for a share of ``k`` in ``n``, the report's
    own (:func:`orbench.analysis.stats.clopper_pearson_arrays`); ``n = 0`` (no row checked) gives
    ``(0, 1)``, the worst case."""
    if n <= 0:
        return 0.0, 1.0
    low, high = stats.clopper_pearson_arrays(k, n, alpha=1.0 - level)
    return float(low), float(high)


def ppi_mean(y, yhat, yhat_unlabeled, z: float = Z95) -> tuple[float, float, float]:
    """Prediction-powered estimate of a mean and its interval, as in Angelopoulos et al. (2023)
    with ``lambda = 1``: ``y`` the true labels of the labelled rows, ``yhat`` the predictions on
    them, ``yhat_unlabeled`` the predictions on the unlabelled rows. Returns (estimate, low, high)."""
    y, yhat, yu = (np.asarray(a, dtype=float) for a in (y, yhat, yhat_unlabeled))
    rect = y - yhat
    est = yu.mean() + rect.mean()
    se = math.sqrt(yu.var() / len(yu) + rect.var() / len(rect))
    return est, est - z * se, est + z * se


@dataclass(frozen=True)
class CascadeRate:
    """A cascade's rate (module docstring) and what it rests on."""

    value: float
    low: float
    high: float
    rows: int  # rows with a cascade verdict
    sure: int  # of them, decided by the keyword matcher
    checked: int  # sure rows the judge also gave a verdict on (the check sample)
    disagreements: int  # checked rows where the judge's verdict differs from the matcher's
    #: Per direction ("refusal", "answer"): (sure rows, checked, disagreements, share low, share high).
    parts: dict


def direction_parts(sure_verdict, check) -> dict:
    """Per direction of the sure classes: (sure rows, checked rows, disagreements, Clopper-Pearson
    limits of the disagreement share). ``sure_verdict``: 1 (sure refusal), 0 (sure answer) or NaN
    (not sure); ``check``: the judge's verdict on a checked sure row, NaN elsewhere."""
    f, y = np.asarray(sure_verdict, dtype=float), np.asarray(check, dtype=float)
    out = {}
    for name, value in (("refusal", 1.0), ("answer", 0.0)):
        mine = f == value
        checked = mine & ~np.isnan(y)
        k = int((y[checked] != value).sum())
        n = int(checked.sum())
        out[name] = (int(mine.sum()), n, k, *clopper_pearson(k, n))
    return out


def cascade_rate(g, sure_verdict, check, base: tuple[float, float] | None = None) -> CascadeRate:
    """The cascade's rate over one group's rows with a cascade verdict (module docstring).

    ``g``: each row's cascade verdict (1/0); ``sure_verdict``: the matcher's verdict on a sure row
    (1/0), NaN on a row the judge decided; ``check``: the judge's verdict on a checked sure row,
    NaN elsewhere. ``base``: the interval of ``mean(g)`` (default Wilson's)."""
    from orbench.analysis.stats import wilson_interval

    g = np.asarray(g, dtype=float)
    n_rows = len(g)
    if n_rows == 0:
        return CascadeRate(math.nan, math.nan, math.nan, 0, 0, 0, 0, {})
    mean_g = float(g.mean())
    lo_g, hi_g = base if base is not None else wilson_interval(int(g.sum()), n_rows)
    parts = direction_parts(sure_verdict, check)
    value, down, up = mean_g, [mean_g - lo_g], [hi_g - mean_g]
    for name, (size, n, k, d_lo, d_hi) in parts.items():
        if not size:
            continue
        w = size / n_rows
        d = k / n if n else 0.0  # none checked: the matcher's verdicts as they are, the share in [0, 1]
        sign = -1.0 if name == "refusal" else 1.0  # a sure refusal the judge calls an answer lowers the rate
        value += sign * w * d
        (down if sign < 0 else up).append(w * (d_hi - d))
        (up if sign < 0 else down).append(w * (d - d_lo))
    low = value - math.sqrt(sum(x * x for x in down))
    high = value + math.sqrt(sum(x * x for x in up))
    return CascadeRate(min(1.0, max(0.0, value)), max(0.0, low), min(1.0, high), n_rows,
                       sum(p[0] for p in parts.values()), sum(p[1] for p in parts.values()),
                       sum(p[2] for p in parts.values()), parts)


def widen_bounds(low: float, high: float, n_rows: int, parts: dict) -> tuple[float, float]:
    """Worst-case bounds of a cascade group (too many rows without a verdict) widened by each
    direction's outer limit of its disagreement share (weighted by its share of rows)."""
    if n_rows <= 0:
        return low, high
    for name, (size, _n, _k, _lo, d_hi) in parts.items():
        if name == "refusal":
            low -= size / n_rows * d_hi
        else:
            high += size / n_rows * d_hi
    return max(0.0, low), min(1.0, high)
