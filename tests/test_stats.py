"""The interval rules of orbench.analysis.stats against statsmodels, scipy and scikit-learn, and by hand,
on hand-built and random cases including every edge (no error seen, one item in a stratum, census,
uncovered strata, nothing varying, perfect agreement)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import accuracy_score, cohen_kappa_score, precision_score, recall_score
from statsmodels.stats.proportion import confint_proportions_2indep, proportion_confint

from orbench.analysis import stats


def wilson(k, n):
    low, high = proportion_confint(k, n, alpha=0.05, method="wilson")
    return (0.0 if k == 0 else float(low)), (1.0 if k == n else float(high))


def stratified_by_hand(y, z, strata, population, known=False):
    """The stratified Wilson rule written out per stratum (no code shared with orbench)."""
    frame = pd.DataFrame({"y": np.asarray(y, float), "z": np.asarray(z, float), "h": strata, "N": population})
    g = frame.groupby("h")
    N, n = g["N"].first().to_numpy(float), g.size().to_numpy(float)
    d, s = g["z"].sum().to_numpy(), (frame["y"] * frame["z"]).groupby(frame["h"]).sum().to_numpy()
    W = N / N.sum()
    zbar = d / n
    dom = (W * zbar).sum()
    rate = np.divide(s, d, out=np.zeros_like(s), where=d > 0)
    D = W * zbar / dom
    R = (D * rate).sum()
    r_adj = (s + 0.5) / (d + 1)
    z2 = 1.959963984540054 ** 2
    z_adj = np.where((d == 0) | (d == n), (d + z2 / 2) / (n + z2), (d + 0.5) / (n + 1))
    var = 0.0
    for h in range(len(N)):
        part = (D[h] ** 2 * r_adj[h] * (1 - r_adj[h]) / d[h]) if d[h] else 0.0
        if not known:
            spread = (rate[h] if d[h] else r_adj[h]) - R
            part += (W[h] * spread / dom) ** 2 * z_adj[h] * (1 - z_adj[h]) / n[h]
        var += (1 - n[h] / N[h]) * part
    R_adj = (D * r_adj).sum()
    n_eff = R_adj * (1 - R_adj) / var
    low, high = proportion_confint(R * n_eff, n_eff, method="wilson")
    return R, (0.0 if R == 0 else low), (1.0 if R == 1 else high)


# ---------------------------------------------------------------- one proportion

def test_wilson_equals_statsmodels_on_random_and_edge_counts():
    rng = np.random.default_rng(1)
    cases = [(0, 1), (1, 1), (0, 40), (40, 40), (3, 7), (500, 1319)] + \
        [(int(k), int(n)) for n in rng.integers(1, 2000, 40) for k in [rng.integers(0, n + 1)]]
    for k, n in cases:
        assert stats.wilson_interval(k, n) == pytest.approx(wilson(k, n), abs=1e-12)
    # effective (non-integer) sizes, as the weighted rules use them
    for k, n in ((2.5, 17.3), (0.0, 8.2), (8.2, 8.2)):
        assert stats.wilson_interval(k, n) == pytest.approx(wilson(k, n), abs=1e-12)
    assert all(math.isnan(v) for v in stats.wilson_interval(0, 0))
    # 0 errors in 40 bounds the error rate below ~9%, and it says so
    est = stats.proportion(0, 40)
    assert est.high == pytest.approx(0.0876, abs=1e-4) and est.low == 0 and stats.NONE_SEEN in est.flags


# ---------------------------------------------------------------- weighted shares

def random_audit(rng, strata=4, per=15, domain_share=0.6):
    sizes = rng.integers(30, 800, strata)
    h = np.repeat(np.arange(strata), per)
    pop = sizes[h]
    z = rng.random(len(h)) < domain_share
    y = rng.random(len(h)) < rng.uniform(0.05, 0.95, strata)[h]
    return y, z, h, pop


def test_stratified_point_estimates_equal_sklearn_with_weights():
    rng = np.random.default_rng(2)
    for _ in range(10):
        human, _, h, pop = random_audit(rng)
        machine = np.where(rng.random(len(human)) < 0.8, human, ~human)
        w = pop / pd.Series(h).map(pd.Series(h).value_counts()).to_numpy()
        acc = stats.stratified_share(human == machine, h, pop)
        prec = stats.stratified_share(human, h, pop, domain=machine)
        rec = stats.stratified_share(machine, h, pop, domain=human)
        spec = stats.stratified_share(~machine, h, pop, domain=~human)
        assert acc.value == pytest.approx(accuracy_score(human, machine, sample_weight=w), abs=1e-12)
        assert prec.value == pytest.approx(precision_score(human, machine, sample_weight=w), abs=1e-12)
        assert rec.value == pytest.approx(recall_score(human, machine, sample_weight=w), abs=1e-12)
        assert spec.value == pytest.approx(recall_score(human, machine, pos_label=0, sample_weight=w), abs=1e-12)


def test_stratified_interval_equals_the_rule_written_by_hand():
    rng = np.random.default_rng(3)
    for i in range(12):
        y, z, h, pop = random_audit(rng, strata=2 + i % 4, per=5 + 3 * i)
        est = stats.stratified_share(y, h, pop, domain=z)
        assert (est.value, est.low, est.high) == pytest.approx(stratified_by_hand(y, z, h, pop), abs=1e-12)
        whole = stats.stratified_share(y, h, pop)
        assert (whole.value, whole.low, whole.high) == pytest.approx(
            stratified_by_hand(y, np.ones(len(y)), h, pop, known=True), abs=1e-12)


def test_one_stratum_reduces_to_wilson():
    # a simple random sample of a huge population: Wilson on k of n, and on the domain's count
    for k, n in ((0, 40), (7, 40), (40, 40), (1, 3)):
        est = stats.stratified_share([1] * k + [0] * (n - k), ["s"] * n, [10 ** 12] * n)
        assert (est.low, est.high) == pytest.approx(wilson(k, n), abs=1e-9)
    y = [1, 1, 0, 1, 0, 0, 1, 0]
    z = [1, 1, 1, 1, 0, 0, 0, 1]  # domain of 5 items, 3 of them yes
    est = stats.stratified_share(y, ["s"] * 8, [10 ** 12] * 8, domain=z)
    assert est.value == pytest.approx(3 / 5) and (est.low, est.high) == pytest.approx(wilson(3, 5), abs=1e-6)


def test_no_error_seen_is_bounded_not_certain():
    # a matcher with no error in 40 + 40 audited items of two large strata: recall 1 but not [1, 1]
    human = np.array([1] * 40 + [0] * 40)
    h = np.array(["refusal"] * 40 + ["answer"] * 40)
    pop = np.array([1000] * 80)
    rec = stats.stratified_share(human, h, pop, domain=human)
    assert rec.value == 1 and rec.high == 1 and 0.85 < rec.low < 0.96 and stats.NONE_SEEN in rec.flags
    acc = stats.stratified_share(np.ones(80), h, pop)
    assert acc.value == 1 and acc.low < 0.97 and stats.CENSUS not in acc.flags
    # the same audit as a full census of both strata is exact
    census = stats.stratified_share(human, h, np.array([40] * 80), domain=human)
    assert census.low == census.high == census.value == 1 and stats.CENSUS in census.flags


def test_one_item_in_a_stratum_is_flagged_and_wide():
    y = [1, 0, 1, 1, 0, 1]
    h = ["a", "a", "a", "a", "a", "b"]
    est = stats.stratified_share(y, h, [100] * 5 + [400])
    assert stats.SINGLE_ITEM in est.flags and est.high - est.low > 0.5
    assert (est.value, est.low, est.high) == pytest.approx(stratified_by_hand(y, [1] * 6, h, [100] * 5 + [400],
                                                                          known=True))


def test_uncovered_strata_are_bounded_in_the_worst_case():
    y, h, pop = [1, 0, 1, 1], ["a"] * 4, [300] * 4
    inner = stats.stratified_share(y, h, pop)
    est = stats.stratified_share(y, h, pop, uncovered=100)  # a stratum of 100 rows nobody labelled
    m = 100 / 400
    assert est.value == inner.value and stats.PARTIAL in est.flags
    assert (est.low, est.high) == pytest.approx((inner.low * (1 - m), inner.high * (1 - m) + m))


def test_domain_estimator_with_unequal_safe_shares():
    """The issue's case: two categories, 90% / 20% safe, refusal 10% / 60% of the safe ones: the rate over
    safe prompts is (0.9*0.1 + 0.2*0.6) / (0.9 + 0.2) = 0.19, whatever the audit's per-stratum size."""
    z = [1] * 90 + [0] * 10 + [1] * 20 + [0] * 80
    y = [1] * 9 + [0] * 81 + [0] * 10 + [1] * 12 + [0] * 8 + [0] * 80
    h = ["a"] * 100 + ["b"] * 100
    census = stats.stratified_share(y, h, [100] * 200, domain=z)
    assert census.value == pytest.approx(0.21 / 1.1) and census.low == census.high
    # 10 items per stratum drawn so that their shares match the strata: the same estimate
    zs = [1] * 9 + [0] + [1] * 2 + [0] * 8
    ys = [1] + [0] * 8 + [0] + [1, 0] + [0] * 8
    est = stats.stratified_share(ys, ["a"] * 10 + ["b"] * 10, [5000] * 20, domain=zs)
    assert est.value == pytest.approx((0.9 * 1 / 9 + 0.2 * 0.5) / 1.1)
    assert est.low < 0.19 < est.high


# ---------------------------------------------------------------- repeated samples

def test_cluster_share_by_hand_and_its_edges():
    """Clopper-Pearson (scipy's Beta quantiles) at the clustered effective size, at most the rows,
    scaled by (z / t)^2 on one less than the prompts showing the rarer outcome, at least the prompts."""
    from scipy.stats import beta, t

    rng = np.random.default_rng(5)
    for m in (2, 5, 30):
        k, n = rng.integers(0, 6, m).astype(float), np.full(m, 5.0)
        if k.sum() in (0, n.sum()):
            continue
        est = stats.cluster_share(k, n)
        r = k.sum() / n.sum()
        var = m / (m - 1) * ((k - r * n) ** 2).sum() / n.sum() ** 2
        j = min((k > 0).sum(), (k < n).sum())
        n_eff = n.sum() if var == 0 else min(r * (1 - r) / var, n.sum())
        n_eff = max(m, n_eff * (1.959963984540054 / t.ppf(0.975, max(1, j - 1))) ** 2)
        assert est.value == pytest.approx(r) and est.n_eff == pytest.approx(n_eff)
        expected = (beta.ppf(0.025, r * n_eff, (1 - r) * n_eff + 1), beta.ppf(0.975, r * n_eff + 1, (1 - r) * n_eff))
        assert (est.low, est.high) == pytest.approx(expected, abs=1e-9)
    # nothing varies: every prompt at 0 -> Clopper-Pearson over the prompts, flagged; never width 0
    none = stats.cluster_share(np.zeros(3), np.full(3, 5.0))
    assert (none.low, none.high) == pytest.approx((0, 1 - 0.025 ** (1 / 3))) and stats.NO_VARIATION in none.flags
    # every prompt refused in every sample but different sample counts: the floor is (sum n)^2 / sum n^2
    full = stats.cluster_share(np.array([5.0, 1.0]), np.array([5.0, 1.0]))
    assert full.n_eff == pytest.approx(36 / 26) and full.low < 1 and full.high == 1
    # samples independent (every prompt at the same share): at most the rows (then scaled by t on 3 df)
    same = stats.cluster_share(np.array([2.0, 2, 2, 2]), np.full(4, 4.0))
    assert same.n_eff == pytest.approx(16 * (1.959963984540054 / t.ppf(0.975, 3)) ** 2)


def test_prompt_difference_of_a_degenerate_category_has_width():
    est = stats.prompt_paired_difference(np.zeros(3), np.full(3, 5.0), np.zeros(3), np.full(3, 5.0))
    upper = wilson(0, 3)[1]
    assert (est.value, est.low, est.high) == pytest.approx((0, -upper, upper))


def test_prompt_share_by_hand_and_one_sample_is_wilson():
    y = np.array([1.0, 0, 0, 1, 0, 0, 0])
    one = stats.prompt_share(y, np.ones(7))
    assert (one.low, one.high) == pytest.approx(wilson(2, 7)) and one.n_eff == 7
    # unequal samples: each prompt counts once (mean of shares), the ceiling m^2 / sum(1/n)
    k, n = np.array([1.0, 0, 2, 3]), np.array([1.0, 3, 3, 5])
    est = stats.prompt_share(k, n)
    s = k / n
    var = s.var(ddof=1) / 4
    n_eff = min(max(s.mean() * (1 - s.mean()) / var, 4), 16 / (1 / n).sum())
    assert est.value == pytest.approx(s.mean()) and est.n_eff == pytest.approx(n_eff)
    assert (est.low, est.high) == pytest.approx(wilson(s.mean() * n_eff, n_eff))


def test_prompt_difference_with_one_sample_against_three_by_hand():
    ka, na = np.array([1.0, 0, 0, 1, 0]), np.ones(5)
    kb, nb = np.array([3.0, 1, 0, 2, 0]), np.full(5, 3.0)
    est = stats.prompt_paired_difference(ka, na, kb, nb)
    a, b = stats.prompt_share(ka, na), stats.prompt_share(kb, nb)
    sa, sb = ka / na, kb / nb
    phi = np.corrcoef(sa, sb)[0, 1]
    low, high = stats.newcombe_difference(a.value, a.low, a.high, b.value, b.low, b.high, phi)
    assert (est.value, est.low, est.high) == pytest.approx((sb.mean() - sa.mean(), low, high))
    swapped = stats.prompt_paired_difference(kb, nb, ka, na)
    assert (swapped.value, swapped.low, swapped.high) == pytest.approx((-est.value, -est.high, -est.low))


# ---------------------------------------------------------------- differences

@pytest.mark.parametrize("both, a_only, b_only, neither", [(3, 1, 2, 1), (0, 0, 5, 15), (2, 1, 1, 1)])
def test_paired_difference_equals_statsmodels_when_uncorrelated(both, a_only, b_only, neither):
    n = both + a_only + b_only + neither
    est = stats.paired_difference(both, a_only, b_only, neither)
    lo, hi = confint_proportions_2indep(both + b_only, n, both + a_only, n, method="newcomb", compare="diff")
    assert (est.low, est.high) == pytest.approx((lo, hi), abs=1e-12)


def test_balanced_accuracy_is_newcombe_shifted_and_halved():
    lo, hi = confint_proportions_2indep(180, 200, 30, 150, method="newcomb", compare="diff")
    ba = stats.balanced_accuracy(stats.proportion(180, 200), stats.proportion(30, 150))
    assert (ba.value, ba.low, ba.high) == pytest.approx(((1 + 0.9 - 0.2) / 2, (1 + lo) / 2, (1 + hi) / 2))
    assert stats.balanced_accuracy_interval(180, 200, 30, 150) == pytest.approx((ba.value, ba.low, ba.high))


def test_stratified_paired_difference_a_judges_bias():
    rng = np.random.default_rng(8)
    human = rng.random(120) < 0.3
    machine = np.where(rng.random(120) < 0.9, human, ~human)
    h = np.repeat(["a", "b", "c"], 40)
    pop = np.repeat([200, 900, 50], 40)
    est = stats.stratified_paired_difference(human, machine, h, pop)
    a, b = stats.stratified_share(human, h, pop), stats.stratified_share(machine, h, pop)
    assert est.value == pytest.approx(b.value - a.value)
    independent = stats.newcombe_difference(a.value, a.low, a.high, b.value, b.low, b.high)
    assert est.low < est.value < est.high and est.high - est.low < independent[1] - independent[0]
    perfect = stats.stratified_paired_difference(human, human, h, pop)
    assert perfect.value == 0 and perfect.low < 0 < perfect.high


# ---------------------------------------------------------------- kappa

def test_kappa_equals_sklearn_and_a_perfect_judge_is_not_certain():
    rng = np.random.default_rng(9)
    a = rng.integers(0, 3, 200)
    b = np.where(rng.random(200) < 0.7, a, rng.integers(0, 3, 200))
    est = stats.kappa(a, b)
    assert est.value == pytest.approx(cohen_kappa_score(a, b), abs=1e-12)
    assert est.low < est.value < est.high
    h = rng.integers(0, 4, 200)
    pop = np.array([50, 300, 1000, 80])[h]
    w = pop / pd.Series(h).map(pd.Series(h).value_counts()).to_numpy()
    assert stats.kappa(a, b, strata=h, population=pop).value == pytest.approx(
        cohen_kappa_score(a, b, sample_weight=w), abs=1e-12)
    # a perfect judge on 450 items (half refusals): kappa 1, its interval from 0 errors in 450, not [1, 1]
    y = np.array([1] * 225 + [0] * 225)
    perfect = stats.kappa(y, y)
    low_po = wilson(450, 450)[0]
    assert perfect.value == 1 and perfect.high == 1
    assert perfect.low == pytest.approx((low_po - 0.5) / 0.5) and stats.FLOORED in perfect.flags
    assert stats.kappa(np.ones(10), np.ones(10)).flags == (stats.NOT_COMPUTABLE,)


# ---------------------------------------------------------------- ranks, CSV precision

def test_rank_interval_and_p_columns_kept_whole():
    draws = np.array([[3.0, 2, 1], [3, 1, 2], [2, 3, 1], [3, 2, 1]] * 25)
    low, high = stats.rank_interval(draws)
    assert list(low) == [1, 1, 2] and list(high) == [2, 3, 3]
    frame = pd.DataFrame({"rate": [0.123456789], "p_value": [1.8e-33], "p_holm": [2.2e-301]})
    out = stats.round_for_csv(frame)
    assert out.loc[0, "rate"] == 0.123457 and out.loc[0, "p_value"] == 1.8e-33 and out.loc[0, "p_holm"] == 2.2e-301
