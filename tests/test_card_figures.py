"""A judge or moderator card's validity and kappa interval (issue 51): validity on the coverage's
95% lower limit, kappa floored only where nothing disagrees, "not computable" where nothing is."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom

from orbench.analysis.calibration import moderation
from orbench.analysis.calibration.card_stats import _kappa_of, figures, kappa_ci
from orbench.scoring.judge_cards import coverage_text

Z = 1.959963984540054


def wilson_low(k, n):
    p, z2 = k / n, Z * Z
    return ((p + z2 / (2 * n)) - Z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))) / (1 + z2 / n)


@pytest.mark.parametrize("n, decided, valid", [(35, 35, True), (34, 34, False), (20, 19, False), (450, 440, True),
                                               (450, 420, True), (450, 415, False)])
def test_a_card_is_valid_when_its_coverage_lower_limit_reaches_090(n, decided, valid):
    human = [True, False] * (n // 2) + [True] * (n % 2)
    judge = [h if i < decided else None for i, h in enumerate(human)]
    cov = figures(human, judge)["coverage"]
    assert cov["ci"][0] == pytest.approx(wilson_low(decided, n))
    assert (wilson_low(decided, n) >= 0.90) == valid  # the rule, from Wilson's formula
    assert cov["valid"] is valid
    assert ("note" in cov) == (n < 35)
    text = coverage_text({"n": n, "verdicts": decided, "coverage": cov})
    assert ("NOT VALID" in text) == (not valid)
    if n == 34:
        assert "a card of fewer than 35 rows cannot be valid" in text


def test_nineteen_of_twenty_is_not_valid():
    cov = figures([True] * 10 + [False] * 10, [True] * 10 + [False] * 9 + [None])["coverage"]
    assert cov["value"] == 0.95 and cov["ci"][0] == pytest.approx(0.7639, abs=1e-4) and cov["valid"] is False


def test_a_judge_that_answers_nothing_has_no_kappa():
    card = figures([True] * 5 + [False] * 5, [None] * 10)
    assert card["kappa"] == {"value": None, "ci": [None, None], "note": "not computable: no verdict on any row"}
    assert card["judge_rate"]["value"] is None and card["coverage"]["valid"] is False
    mod = moderation.figures([True] * 5 + [False] * 5, [None] * 10)
    assert mod["kappa"] == {"value": None, "ci": [None, None], "note": "not computable: no verdict on any row"}


def test_kappa_is_floored_only_where_nothing_disagrees():
    # no disagreement: the agreement's Wilson limit carried through kappa at pe = 0.5
    low, high = kappa_ci(225, 0, 0, 225)
    assert high == 1.0 and low == pytest.approx((wilson_low(450, 450) - 0.5) / 0.5)
    # disagreement: the bootstrap alone, narrower than that carried agreement interval
    tp, fp, fn, tn = 570, 28, 30, 1372
    n = tp + fp + fn + tn
    pe = ((tp + fn) * (tp + fp) + (fp + tn) * (fn + tn)) / n ** 2
    carried_low = (wilson_low(tp + tn, n) - pe) / (1 - pe)
    low, high = kappa_ci(tp, fp, fn, tn)
    kappa = float(_kappa_of(tp, fp, fn, tn))
    assert carried_low < low < kappa < high < 1


def test_kappa_interval_coverage_on_a_fixed_slice():
    """300 label sets of 450 rows, refusals 30%, a judge right on 90% of refusals and 98% of answers:
    the count of intervals holding the true kappa is within the central 99.8% of Binomial(300, 0.95)."""
    cells = np.array([0.3 * 0.9, 0.7 * 0.02, 0.3 * 0.1, 0.7 * 0.98, 0.0, 0.0])
    true = float(_kappa_of(*cells))
    rng = np.random.default_rng(51)
    hits = 0
    for table in rng.multinomial(450, cells, size=300):
        low, high = kappa_ci(*(int(x) for x in table))
        hits += low <= true <= high
    assert binom.ppf(0.001, 300, 0.95) <= hits <= binom.ppf(0.999, 300, 0.95)
