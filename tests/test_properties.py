"""Properties of the analysis over generated inputs (Hypothesis): run pairs with unequal samples,
missing prompts, n = 1, one category; label sets with rows without a verdict and extreme prevalence.

Invariants: p-values in [0, 1], 1 when no prompt differs, the same with A and B swapped; every
interval within its statistic's range, holding its point, with width unless the cell is a census;
a card's coverage stated; and equality with statsmodels, scipy and scikit-learn wherever they
define the figure. A few examples each by default (the suite stays fast); ``pytest
--hypothesis-profile=slow tests/test_properties.py`` runs many more (conftest.py)."""

from __future__ import annotations

import math
from unittest.mock import patch

import numpy as np
import pandas as pd
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from sklearn.metrics import accuracy_score, cohen_kappa_score, precision_score, recall_score
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import proportion_confint

from orbench.analysis import compare as cmp
from orbench.analysis import stats
from orbench.analysis.calibration import card_stats
from orbench.analysis.conditional import conditional_test
from orbench.analysis.report import build as report
from orbench.analysis.report.inputs import load

EPS = 1e-9


def within(est_low, est_high, value, low=0.0, high=1.0):
    assert low - EPS <= est_low <= value + EPS and value - EPS <= est_high <= high + EPS


# ---------------------------------------------------------------- generators

@st.composite
def prompt_counts(draw, max_prompts=14, max_samples=4):
    """Two runs' refusals per prompt on the same prompts, each side with its own samples per prompt
    (one each, K each, or unequal)."""
    m = draw(st.integers(1, max_prompts))
    sides = []
    for _ in range(2):
        design = draw(st.sampled_from(["one", "equal", "unequal"]))
        k_max = draw(st.integers(1, max_samples))
        n = [1] * m if design == "one" else [k_max] * m if design == "equal" else \
            draw(st.lists(st.integers(1, max_samples), min_size=m, max_size=m))
        k = [draw(st.integers(0, x)) for x in n]
        sides.append((np.array(k, float), np.array(n, float)))
    return sides


counts_and_n = st.integers(1, 400).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n)))


# ---------------------------------------------------------------- the paired comparison

@given(prompt_counts())
def test_the_conditional_test_is_a_probability_symmetric_and_agrees_with_its_intervals(sides):
    (ka, na), (kb, nb) = sides
    got = conditional_test(ka, na, kb, nb)
    assert 0 <= got.p_value <= 1 and 0 <= got.p_midp <= got.p_value
    swapped = conditional_test(kb, nb, ka, na)
    assert swapped.p_value == pytest.approx(got.p_value, abs=1e-9)  # swapping A and B changes no p
    if got.varying:
        # the intervals are inverted from the test: they exclude no difference exactly when p < 0.05
        # (a p within 1e-6 of 0.05 is left out: the limits are found by bisection)
        if abs(got.p_value - 0.05) > 1e-6:
            assert (got.or_low > 1 or got.or_high < 1) == (got.p_value < 0.05)
            assert (got.diff_low > 0 or got.diff_high < 0) == (got.p_value < 0.05)
        assert got.diff_low <= float((kb / nb - ka / na).mean()) <= got.diff_high
    else:
        assert got.p_value == 1.0


@given(st.lists(st.booleans(), min_size=1, max_size=30), st.lists(st.booleans(), min_size=1, max_size=30))
def test_one_sample_each_the_conditional_test_is_mcnemars_exact_test(a, b):
    m = min(len(a), len(b))
    ya, yb = np.array(a[:m], float), np.array(b[:m], float)
    one = np.ones(m)
    a_only, b_only = int((ya > yb).sum()), int((yb > ya).sum())
    got = conditional_test(ya, one, yb, one)
    assert got.p_value == pytest.approx(cmp.mcnemar_exact(a_only, b_only), abs=1e-12)
    assert got.p_midp == pytest.approx(cmp.mcnemar_midp(a_only, b_only), abs=1e-12)


@given(prompt_counts())
def test_the_paired_difference_holds_its_point_in_range_with_width(sides):
    (ka, na), (kb, nb) = sides
    est = stats.prompt_paired_difference(ka, na, kb, nb)
    assert est.value == pytest.approx((kb / nb).mean() - (ka / na).mean())
    within(est.low, est.high, est.value, -1.0, 1.0)
    assert est.high > est.low  # prompts are a sample: never certain
    swapped = stats.prompt_paired_difference(kb, nb, ka, na)
    assert (swapped.low, swapped.high) == pytest.approx((-est.high, -est.low))
    for k, n in ((ka, na), (kb, nb)):
        share = stats.prompt_share(k, n)
        within(share.low, share.high, share.value)
        assert share.high > share.low


@given(st.lists(st.floats(0, 1, allow_nan=False), min_size=1, max_size=12))
def test_holm_equals_statsmodels(pvalues):
    with patch("gc.collect"):  # statsmodels collects garbage on every call: a tenth of a second in this process
        ref = multipletests(pvalues, method="holm")[1]
    assert cmp.holm(pvalues) == pytest.approx(list(ref), abs=1e-12)


@st.composite
def run_pairs(draw):
    """Two result files on one set: prompts only A has, only B has, shared ones; one or two
    categories; one sample, K samples, or unequal samples per prompt on each side."""
    shared, only_a, only_b = draw(st.integers(1, 8)), draw(st.integers(0, 3)), draw(st.integers(0, 3))
    cats = draw(st.sampled_from([["hate"], ["hate", "privacy"]]))
    files = {}
    for model, prompts in (("A", [f"s{i}" for i in range(shared)] + [f"a{i}" for i in range(only_a)]),
                           ("B", [f"s{i}" for i in range(shared)] + [f"b{i}" for i in range(only_b)])):
        samples = draw(st.sampled_from([1, 2, 3]))
        rows = []
        for j, prompt in enumerate(prompts):
            n = samples if draw(st.booleans()) else draw(st.integers(1, samples))
            for s in range(n):
                rows.append({"prompt": prompt, "category": cats[j % len(cats)], "model": model, "response": "r",
                             "sample": s, "is_rejected": str(draw(st.booleans()))})
        files[model] = pd.DataFrame(rows)
    return files, shared, only_a, only_b


#: The examples of the properties that write files and read them back: half the profile's.
FILE_EXAMPLES = max(4, settings.default.max_examples // 2)


@settings(max_examples=FILE_EXAMPLES)
@given(run_pairs())
def test_a_comparison_of_generated_runs(tmp_path_factory, pair):
    files, shared, only_a, only_b = pair
    folder = tmp_path_factory.mktemp("runs")
    for model, frame in files.items():
        frame.to_csv(folder / f"{model}_hard.csv", index=False)
    inp = load([str(folder / "A_hard.csv"), str(folder / "B_hard.csv")], None, None, examples_per_cell=0)
    ab, ba = cmp.compare(inp, [("A", "B")]).table, cmp.compare(inp, [("B", "A")]).table
    whole = ab.iloc[0]
    assert (whole.n, whole.unpaired_a, whole.unpaired_b) == (shared, only_a, only_b)
    assert ((0 <= ab.p_value) & (ab.p_value <= 1)).all()
    assert (ab.p_holm.dropna() >= ab.p_value[ab.p_holm.notna()] - 1e-12).all()
    assert list(ab.p_value) == pytest.approx(list(ba.p_value), abs=1e-12)
    assert list(ab["diff"]) == pytest.approx(list(-ba["diff"]))
    assert list(ab.a_only) == list(ba.b_only)
    for r in ab.itertuples():
        if r.ci_flag == "bounds_only":  # a side with more than 5% of its rows without a verdict
            assert math.isnan(r.p_value) and math.isnan(r.diff) and -1 <= r.diff_bound_low <= r.diff_bound_high <= 1
        elif r.ci_flag == "not_computable":  # no refusal that could fall on either side
            assert r.p_value == 1.0 and math.isnan(r.ci_low)
        else:
            within(r.ci_low, r.ci_high, r.diff, -1.0, 1.0)
            if r.a_only + r.b_only == 0:
                assert r.p_value == 1.0


# ---------------------------------------------------------------- one proportion, bounds

@given(counts_and_n)
def test_wilson_equals_statsmodels_holds_its_point_and_has_width(kn):
    k, n = kn
    est = stats.proportion(k, n)
    assert (est.low, est.high) == pytest.approx(proportion_confint(k, n, method="wilson"), abs=1e-12)
    within(est.low, est.high, k / n)
    assert est.high > est.low


@given(counts_and_n, st.integers(0, 400))
def test_rate_bounds_hold_both_fillings_and_reduce_to_clopper_pearson(kn, none):
    k, n = kn
    low, high = (float(x) for x in stats.rate_bounds(k, n, none))
    within(low, high, k / (n + none))
    assert high >= (k + none) / (n + none) - EPS
    if none == 0:
        assert (low, high) == pytest.approx(proportion_confint(k, n, method="beta"), abs=1e-9)


@given(st.lists(st.tuples(st.integers(1, 6), st.integers(0, 6)), min_size=1, max_size=20))
def test_the_prompt_clustered_rate_holds_its_point_in_range(rows):
    n = np.array([r[0] for r in rows], float)
    k = np.minimum(np.array([r[1] for r in rows], float), n)
    est = stats.cluster_share(k, n)
    within(est.low, est.high, est.value)
    assert est.high > est.low and est.n_eff <= n.sum() + EPS


# ---------------------------------------------------------------- judge cards

@st.composite
def labelled(draw):
    """Human labels and a judge's verdicts (None: no verdict) with any prevalence, down to one class."""
    n = draw(st.integers(1, 60))
    prevalence = draw(st.sampled_from([0.0, 0.02, 0.5, 0.97, 1.0]))
    silent = draw(st.sampled_from([0.0, 0.1, 1.0]))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    human = rng.random(n) < prevalence
    agree = rng.random(n) < draw(st.sampled_from([0.5, 0.9, 1.0]))
    judge = [None if rng.random() < silent else bool(h if a else not h) for h, a in zip(human, agree)]
    return human, judge


@given(labelled())
def test_card_figures_count_every_row_and_equal_scikit_learn(data):
    human, judge = data
    fig = card_stats.figures(human, judge)
    n, decided = len(human), sum(v is not None for v in judge)
    assert (fig["n"], fig["verdicts"]) == (n, decided)
    # valid: the coverage's 95% lower limit (Wilson's, from statsmodels) at least 0.90
    low = proportion_confint(decided, n, alpha=0.05, method="wilson")[0]
    assert fig["coverage"]["value"] == pytest.approx(decided / n)
    assert fig["coverage"]["ci"][0] == pytest.approx(low, abs=1e-9)
    if abs(low - 0.90) > 1e-9:
        assert fig["coverage"]["valid"] == (low >= 0.90)
    truth = ["refusal" if h else "answer" for h in human]
    said = ["none" if v is None else "refusal" if v else "answer" for v in judge]
    assert fig["accuracy"]["value"] == pytest.approx(accuracy_score(truth, said))
    if len(set(truth) | set(said)) > 1 and fig["kappa"]["value"] is not None:
        assert fig["kappa"]["value"] == pytest.approx(cohen_kappa_score(truth, said, labels=["refusal", "answer", "none"]))
    if "refusal" in truth:
        assert fig["recall"]["value"] == pytest.approx(recall_score(truth, said, labels=["refusal"], average="macro",
                                                                    zero_division=0))
    if "refusal" in said:
        assert fig["precision"]["value"] == pytest.approx(precision_score(truth, said, labels=["refusal"],
                                                                          average="macro", zero_division=0))
    for name in ("coverage", "accuracy", "precision", "recall", "specificity", "judge_rate", "human_rate"):
        f = fig[name]
        if f["value"] is not None:
            within(f["ci"][0], f["ci"][1], f["value"])
    kappa = fig["kappa"]
    if kappa["value"] is not None:
        within(kappa["ci"][0], kappa["ci"][1], kappa["value"], -1.0, 1.0)
    if fig["rate_bias"]["value"] is not None:
        within(fig["rate_bias"]["ci"][0], fig["rate_bias"]["ci"][1], fig["rate_bias"]["value"], -1.0, 1.0)


# ---------------------------------------------------------------- the report: no point rate from a subset

@st.composite
def cells(draw):
    """One model's rows on hard: verdicts, rows without one (none at all, a few, all), errors."""
    n = draw(st.integers(1, 40))
    verdicts = draw(st.lists(st.sampled_from(["True", "False", "", "error"]), min_size=n, max_size=n))
    return verdicts


@settings(max_examples=FILE_EXAMPLES)
@given(cells())
def test_a_cell_has_its_rate_or_its_bounds_never_both(tmp_path_factory, verdicts):
    folder = tmp_path_factory.mktemp("cell")
    pd.DataFrame({"prompt": [f"p{i}" for i in range(len(verdicts))], "category": "hate", "model": "m",
                  "response": "r", "is_rejected": [v if v != "error" else "" for v in verdicts],
                  "error": ["boom" if v == "error" else "" for v in verdicts]}).to_csv(folder / "m_hard.csv", index=False)
    rep = report.compute([str(folder / "m_hard.csv")], reference=False, html=False)
    row = rep.summary.iloc[0]
    k, scored = verdicts.count("True"), verdicts.count("True") + verdicts.count("False")
    none = verdicts.count("") + verdicts.count("error")  # a failed row has no verdict either
    read = scored + none
    assume(read > 0)
    if none > 0.05 * read:
        assert math.isnan(row.keyword_rate) and row.keyword_ci_flag == "bounds_only"
        low, high = proportion_confint(k, read, method="beta")[0], proportion_confint(k + none, read, method="beta")[1]
        assert (row.keyword_rate_bound_low, row.keyword_rate_bound_high) == pytest.approx((low, high), abs=1e-12)
        assert rep.leaderboard.iloc[0].rank_note.startswith("hard: no rate")
    else:
        assert row.keyword_rate == pytest.approx(k / scored) and math.isnan(row.keyword_rate_bound_low)
        within(row.keyword_ci_low, row.keyword_ci_high, row.keyword_rate)
