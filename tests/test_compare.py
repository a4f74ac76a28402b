"""Paired comparisons and repeated-sample statistics of analysis/report.py, every figure checked
against statsmodels / scipy on hand-built cases (ties, zero discordant pairs, one category, K = 1)."""

from __future__ import annotations

import math
from fractions import Fraction
from math import comb

import numpy as np
import pandas as pd
import pytest
from scipy.stats import bootstrap
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import confint_proportions_2indep, proportion_confint

from orbench.analysis import compare as cmp
from orbench.analysis import stats
from orbench.analysis.conditional import conditional_test
from orbench.analysis.report import build as report

REPORT = "analysis/report.py"


def write(path, model, verdicts, cats=None, samples=None, judge=None, prompts=None):
    """A result file: one row per verdict; ``samples`` gives each row's sample index."""
    n = len(verdicts)
    prompts = prompts or [f"prompt {i}" for i in range(n)]
    frame = pd.DataFrame({"prompt": prompts, "category": cats or ["illegal"] * n, "model": model,
                          "response": [f"{model} {'refuses' if v else 'answers'} {p}"
                                       for p, v in zip(prompts, verdicts)],
                          "is_rejected": [str(bool(v)) for v in verdicts]})
    if samples is not None:
        frame["sample"] = samples
    if judge is not None:
        frame["judge_model"] = judge
        frame["answer_category"] = ["direct_refusal" if v else "direct_answer" for v in verdicts]
        frame["keyword_is_rejected"] = frame["is_rejected"]
    frame.to_csv(path, index=False)
    return str(path)


def run_report(tmp_path, files, *flags):
    return report.build_report(files, tmp_path / "out", reference=False, html=True,
                               **dict(flags), figures=False)


# ---------------------------------------------------------------- the statistics against the libraries

@pytest.mark.parametrize("a_only, b_only", [(0, 0), (3, 3), (0, 8), (5, 1), (12, 30)])
def test_mcnemar_exact_equals_statsmodels(a_only, b_only):
    expected = mcnemar([[7, a_only], [b_only, 9]], exact=True).pvalue
    assert cmp.mcnemar_exact(a_only, b_only) == pytest.approx(expected, abs=1e-12)
    if a_only == b_only:  # ties and zero discordant pairs: no evidence at all
        assert cmp.mcnemar_exact(a_only, b_only) == 1.0


@pytest.mark.parametrize("both, a_only, b_only, neither", [(3, 1, 2, 1), (0, 0, 5, 15), (2, 1, 1, 1)])
def test_newcombe_equals_statsmodels_when_the_pairs_are_uncorrelated(both, a_only, b_only, neither):
    # with Newcombe's corrected correlation at 0 (ad - bc within [0, n/2], or an empty margin),
    # method 10 is the square-and-add interval of statsmodels' confint_proportions_2indep
    n = both + a_only + b_only + neither
    low, high = cmp.newcombe_paired_interval(both, a_only, b_only, neither)
    lo2, hi2 = confint_proportions_2indep(both + b_only, n, both + a_only, n, method="newcomb",
                                          compare="diff")
    assert (low, high) == pytest.approx((lo2, hi2), abs=1e-12)


def test_newcombe_correlated_pairs_narrower_and_symmetric():
    # positively correlated pairs give a narrower interval than the independent one
    low, high = cmp.newcombe_paired_interval(10, 4, 9, 12)
    lo2, hi2 = confint_proportions_2indep(19, 35, 14, 35, method="newcomb", compare="diff")
    assert lo2 < low < 5 / 35 < high < hi2
    # swapping A and B mirrors the interval; zero discordant pairs still give a real width
    assert cmp.newcombe_paired_interval(10, 9, 4, 12) == pytest.approx((-high, -low))
    z_low, z_high = cmp.newcombe_paired_interval(5, 0, 0, 5)
    assert z_low < 0 < z_high


def cluster_by_hand(k, n):
    """The prompt-clustered interval written out here: linearised variance, effective n at most the
    row count, scaled by (z / t)^2 with t on one less than the prompts showing the rarer outcome,
    at least the prompt count; Clopper-Pearson's limits (scipy's Beta quantiles) at that n."""
    from scipy.stats import beta, t

    k, n = np.asarray(k, float), np.asarray(n, float)
    m, total = len(k), n.sum()
    r = k.sum() / total
    var = m / (m - 1) * ((k - r * n) ** 2).sum() / total ** 2
    floor = total ** 2 / (n ** 2).sum()
    if var == 0 or r in (0, 1):
        n_eff = floor if r in (0, 1) else total
    else:
        j = min((k > 0).sum(), (k < n).sum())
        n_eff = max(floor, min(r * (1 - r) / var, total) * (1.959963984540054 / t.ppf(0.975, max(1, j - 1))) ** 2)
    low = 0.0 if r == 0 else beta.ppf(0.025, r * n_eff, (1 - r) * n_eff + 1)
    high = 1.0 if r == 1 else beta.ppf(0.975, r * n_eff + 1, (1 - r) * n_eff)
    return r, low, high


def exact_null(ka, na, kb, nb):
    """B's refusals summed over prompts under "the same refusal probability per prompt", by
    enumerating every prompt's reallocations of its pooled refusals (exact fractions): the
    distribution {T: probability} and the observed T."""
    dist = {0: Fraction(1)}
    for a_k, a_n, b_k, b_n in zip(*(map(int, x) for x in (ka, na, kb, nb))):
        t, new = a_k + b_k, {}
        for x in range(max(0, t - a_n), min(t, b_n) + 1):
            w = Fraction(comb(b_n, x) * comb(a_n, t - x), comb(a_n + b_n, t))
            for s, p in dist.items():
                new[s + x] = new.get(s + x, 0) + p * w
        dist = new
    return dist, int(sum(kb))


def two_sided(dist, obs):
    lower = sum(p for s, p in dist.items() if s <= obs)
    upper = sum(p for s, p in dist.items() if s >= obs)
    return min(Fraction(1), 2 * min(lower, upper)), upper


def test_the_issue_case_one_sample_against_five():
    """A refuses 0 of 1 sample on 100 prompts; B 1 of 5 on 12 of them: each of those prompts' one
    refusal falls on B's side with chance 5/6 under the null: one-sided (5/6)^12, two-sided twice that."""
    ka, na, kb, nb = np.zeros(100), np.ones(100), np.zeros(100), np.full(100, 5.0)
    kb[:12] = 1
    got = conditional_test(ka, na, kb, nb)
    assert got.p_greater == pytest.approx((5 / 6) ** 12, rel=1e-12) and got.p_less == 1.0
    assert got.p_value == pytest.approx(2 * (5 / 6) ** 12, rel=1e-12)  # 0.2243
    assert got.odds_ratio == math.inf and got.or_high == math.inf and 0 < got.or_low < 1
    assert got.diff_low < 0 < got.diff_high  # the interval agrees with p > 0.05
    swapped = conditional_test(kb, nb, ka, na)
    assert swapped.p_value == pytest.approx(got.p_value, rel=1e-12) and swapped.or_high == pytest.approx(1 / got.or_low)


@pytest.mark.parametrize("seed", range(6))
def test_conditional_test_equals_the_enumerated_distribution(seed):
    rng = np.random.default_rng(seed)
    m = int(rng.integers(3, 9))
    na, nb = rng.integers(1, 4, m), rng.integers(1, 6, m)
    ka, kb = rng.binomial(na, 0.3), rng.binomial(nb, 0.5)
    dist, obs = exact_null(ka, na, kb, nb)
    p, upper = two_sided(dist, obs)
    got = conditional_test(ka, na, kb, nb)
    assert got.p_value == pytest.approx(float(p), rel=1e-10)
    assert got.p_greater == pytest.approx(float(upper), rel=1e-10)
    # the odds ratio's limits: where the tilted distribution's tail at the observed T is 2.5%
    def tail(psi, upper_tail):
        total = sum(float(q) * psi ** s for s, q in dist.items())
        return sum(float(q) * psi ** s for s, q in dist.items() if (s >= obs if upper_tail else s <= obs)) / total
    if 0 < got.or_low:
        assert tail(got.or_low, True) == pytest.approx(0.025, abs=1e-7)
    if got.or_high < math.inf:
        assert tail(got.or_high, False) == pytest.approx(0.025, abs=1e-7)
    assert (got.or_low > 1 or got.or_high < 1) == (got.p_value < 0.05)
    assert (got.diff_low > 0 or got.diff_high < 0) == (got.p_value < 0.05)


def test_one_sample_each_is_mcnemar_with_clopper_pearsons_odds_ratio():
    a = np.array([1] * 4 + [0] * 10 + [1] * 5 + [0] * 30)
    b = np.array([0] * 4 + [1] * 10 + [1] * 5 + [0] * 30)
    got = conditional_test(a, np.ones(49), b, np.ones(49))
    assert got.p_value == pytest.approx(mcnemar([[5, 4], [10, 30]], exact=True).pvalue, rel=1e-12)
    lo, hi = proportion_confint(10, 14, method="beta")
    assert (got.odds_ratio, got.or_low, got.or_high) == pytest.approx((10 / 4, lo / (1 - lo), hi / (1 - hi)), rel=1e-8)
    # the difference at those limits given the 14 discordant prompts: (14 / 49) (2 theta - 1)
    assert (got.diff_low, got.diff_high) == pytest.approx((14 / 49 * (2 * lo - 1), 14 / 49 * (2 * hi - 1)), rel=1e-8)


def test_mid_p_and_odds_ratio_by_hand():
    from fractions import Fraction
    from math import comb

    for b, c in ((0, 0), (3, 3), (0, 8), (5, 1), (12, 30), (2, 9)):
        n, low = b + c, min(b, c)
        exact = min(Fraction(1), 2 * sum(Fraction(comb(n, x), 2 ** n) for x in range(low + 1))) if n else 1
        mid = min(Fraction(1), 2 * sum(Fraction(comb(n, x), 2 ** n) for x in range(low + 1))
                  - Fraction(comb(n, low), 2 ** n)) if n else 1
        assert cmp.mcnemar_exact(b, c) == pytest.approx(float(exact), rel=1e-12)
        assert cmp.mcnemar_midp(b, c) == pytest.approx(float(mid), rel=1e-12)
    # the odds ratio B:A of the discordant pairs, with Wilson's interval for b/(a+b) mapped through p/(1-p)
    est = stats.discordant_odds_ratio(4, 10)
    lo, hi = proportion_confint(10, 14, method="wilson")
    assert (est.value, est.low, est.high) == pytest.approx((10 / 4, lo / (1 - lo), hi / (1 - hi)))
    assert stats.discordant_odds_ratio(0, 5).high == math.inf and stats.discordant_odds_ratio(5, 0).low == 0
    assert math.isnan(stats.discordant_odds_ratio(0, 0).value)


def test_tiny_p_values_equal_statsmodels_to_1e300():
    for b, c in ((0, 200), (3, 400), (0, 1000)):
        expected = mcnemar([[0, b], [c, 0]], exact=True).pvalue
        assert expected > 0 and cmp.mcnemar_exact(b, c) == expected
    assert cmp.mcnemar_exact(0, 1000) < 1e-300


# ---------------------------------------------------------------- the report

def test_compare_one_sample_figures(tmp_path):
    #          prompts: 0  1  2  3  4  5  6  7  8  9
    a = [1, 1, 0, 0, 1, 0, 0, 0, 1, 0]
    b = [1, 0, 1, 1, 1, 1, 0, 1, 1, 0]
    cats = ["hate"] * 5 + ["privacy"] * 5
    files = [write(tmp_path / "a_hard.csv", "A", a, cats), write(tmp_path / "b_hard.csv", "B", b, cats)]
    rep = run_report(tmp_path, files, ("compare", [["A", "B"]]))
    table = pd.read_csv(rep.outputs["comparison"], keep_default_na=False)
    assert list(table.columns) == cmp.COLUMNS
    assert list(table.category) == ["all", "hate", "privacy"]
    whole = table.iloc[0]
    assert (whole.n, whole.a_only, whole.b_only) == (10, 1, 4)
    assert (whole.rate_a, whole.rate_b, whole["diff"]) == pytest.approx((0.4, 0.7, 0.3))
    assert whole.p_value == pytest.approx(mcnemar([[3, 1], [4, 2]], exact=True).pvalue)
    # 5 discordant prompts of 10, 4 of them B's: Clopper-Pearson's interval on 4 of 5, as the odds ratio
    # 4 : 1 and as the difference (5 / 10) (2 theta - 1) at its limits
    lo, hi = proportion_confint(4, 5, method="beta")
    assert (whole.odds_ratio, whole.or_ci_low, whole.or_ci_high) == pytest.approx((4, lo / (1 - lo), hi / (1 - hi)),
                                                                                  rel=1e-6)
    assert (whole.ci_low, whole.ci_high) == pytest.approx((0.5 * (2 * lo - 1), 0.5 * (2 * hi - 1)), abs=1e-6)
    assert whole.p_holm == "" and whole.test == "mcnemar_exact" and whole.judge == "keyword"
    # hate: a=[1,1,0,0,1] b=[1,0,1,1,1] -> a_only 1, b_only 2; privacy: a=[0,0,0,1,0] b=[1,0,1,1,0] -> 0, 2
    ps = [mcnemar([[2, 1], [2, 0]], exact=True).pvalue, mcnemar([[1, 0], [2, 2]], exact=True).pvalue]
    assert list(table.p_value[1:]) == pytest.approx(ps)
    assert list(table.p_holm[1:].astype(float)) == pytest.approx(list(multipletests(ps, method="holm")[1]))
    assert list(table.a_only[1:]) == [1, 0] and list(table.b_only[1:]) == [2, 2]
    html = rep.outputs["html"].read_text()
    assert "Paired comparisons" in html and "A refuses prompt 1" in html and "B refuses prompt 2" in html


def test_one_category_holm_is_the_p_value_and_unpaired_rows_are_counted(tmp_path):
    a = write(tmp_path / "a_hard.csv", "A", [1, 0, 0, 1, 1])
    b = write(tmp_path / "b_hard.csv", "B", [1, 1, 1], prompts=["prompt 0", "prompt 1", "prompt 9"])
    rep = run_report(tmp_path, [a, b], ("baseline", "A"))
    table = pd.read_csv(rep.outputs["comparison"])
    assert list(table.category) == ["all", "illegal"]
    assert table.p_holm[1] == pytest.approx(table.p_value[1])
    assert (table.n[0], table.unpaired_a[0], table.unpaired_b[0]) == (2, 3, 1)
    assert any("left out: 3 scored by A only, 1 by B only" in n for n in rep.notes)


def test_different_judges_fall_back_to_keyword_and_say_so(tmp_path):
    a = write(tmp_path / "a_hard.csv", "A", [1, 0, 1], judge="prov/judge-1")
    b = write(tmp_path / "b_hard.csv", "B", [1, 1, 1], judge="prov/judge-2")
    rep = run_report(tmp_path, [a, b], ("compare", [["A", "B"]]))
    table = pd.read_csv(rep.outputs["comparison"])
    assert set(table.judge) == {"keyword"}
    assert any("judges differ (A: prov/judge-1; B: prov/judge-2): compared on keyword verdicts" in n
               for n in rep.notes)


def test_repeated_samples_prompt_level_interval_flips_and_shares(tmp_path):
    # 4 prompts x 3 samples: refusals per prompt 0, 3, 1, 2 -> flips on prompts 2 and 3
    k = [0, 3, 1, 2]
    rows = [(p, s, int(s < k[p])) for p in range(4) for s in range(3)]
    prompts = [f"prompt {p}" for p, _, _ in rows]
    a = write(tmp_path / "a_hard.csv", "A", [v for *_, v in rows], prompts=prompts,
              samples=[s for _, s, _ in rows])
    kb = [1, 3, 3, 3]
    rows_b = [(p, s, int(s < kb[p])) for p in range(4) for s in range(3)]
    b = write(tmp_path / "b_hard.csv", "B", [v for *_, v in rows_b], prompts=prompts,
              samples=[s for _, s, _ in rows_b])
    rep = run_report(tmp_path, [a, b], ("compare", [["A", "B"]]))
    samples = pd.read_csv(rep.outputs["samples"], keep_default_na=False)
    row = samples[samples.model == "A"].iloc[0]
    assert (row.samples, row.prompts, row.rows, row.flip_prompts) == (3, 4, 12, 2)
    assert row.rate == pytest.approx(6 / 12) and row.flip_share == pytest.approx(0.5)
    r, low, high = cluster_by_hand(k, [3] * 4)
    assert (row.ci_low, row.ci_high) == pytest.approx((low, high), abs=1e-6)
    assert row.ci_method == "cluster_clopper_pearson"
    summary = pd.read_csv(rep.outputs["summary"])
    srow = summary[summary.model == "A"].iloc[0]
    assert (srow.keyword_ci_low, srow.keyword_ci_high) == pytest.approx((low, high), abs=1e-6)
    assert (srow.keyword_prompts, srow.keyword_scored) == (4, 12)
    shares = pd.read_csv(rep.outputs["prompt_shares"])
    a_shares = shares[shares.model == "A"].sort_values("prompt")
    assert list(a_shares.prompt) == [f"prompt {p}" for p in range(4)]
    assert list(a_shares.share) == pytest.approx([0, 1, 1 / 3, 2 / 3])
    comp = pd.read_csv(rep.outputs["comparison"]).iloc[0]
    assert comp.test == "exact_conditional" and comp.interval == "exact_conditional"
    p, upper = two_sided(*exact_null(k, [3] * 4, kb, [3] * 4))
    assert comp.p_value == pytest.approx(float(p)) and comp.p_b_more == pytest.approx(float(upper))
    assert (comp.a_only, comp.b_only) == (0, 3)
    assert comp["diff"] == pytest.approx(10 / 12 - 6 / 12, abs=1e-6)
    assert comp.ci_low < comp["diff"] <= comp.ci_high  # B refused all it could: the odds ratio is infinite


def test_three_prompt_category_with_samples_is_not_certain(tmp_path):
    # a 3-prompt category where neither model ever refuses: the old bootstrap said 0.0 [0.0, 0.0]
    prompts = [f"prompt {p}" for p in range(3) for _ in range(5)]
    samples = [s for _ in range(3) for s in range(5)]
    a = write(tmp_path / "a_hard.csv", "A", [0] * 15, prompts=prompts, samples=samples)
    b = write(tmp_path / "b_hard.csv", "B", [0] * 15, prompts=prompts, samples=samples)
    rep = run_report(tmp_path, [a, b], ("compare", [["A", "B"]]))
    comp = pd.read_csv(rep.outputs["comparison"], keep_default_na=False).iloc[0]
    # no refusal could fall on either side: nothing to compare, no interval claimed (not [0, 0])
    assert comp["diff"] == 0 and comp.ci_low == "" and comp.ci_high == ""
    assert comp.ci_flag == "not_computable" and comp.p_value == 1.0
    cats = pd.read_csv(rep.outputs["categories"], keep_default_na=False)
    assert (cats.ci_high > 0.5).all() and set(cats.prompts) == {3} and set(cats.scored) == {15}
    assert set(cats.ci_method) == {"cluster_clopper_pearson"} and all("no_variation" in f for f in cats.ci_flag)
    assert "no variation</span>" in rep.outputs["html"].read_text()


def test_sampled_widths_match_a_prompt_level_bootstrap(tmp_path):
    """Every sampled interval (categories, summary, full refusals) counts prompts: its width is at least
    0.8 of scipy's prompt-level bootstrap's on the same per-prompt counts (the row-level Wilson was 0.6x)."""
    rng = np.random.default_rng(7)
    cats, prompts, samples, verdicts, kinds = [], [], [], [], []
    for c, mean in (("hate", 0.2), ("privacy", 0.5), ("illegal", 0.8)):
        for p in range(30):
            share = rng.beta(mean * 1.5, (1 - mean) * 1.5)
            for s in range(5):
                cats.append(c), prompts.append(f"{c} {p}"), samples.append(s)
                refused = rng.random() < share
                verdicts.append(int(refused)), kinds.append("full" if refused and s % 2 else "partial" if refused else "")
    path = write(tmp_path / "a_hard.csv", "A", verdicts, cats=cats, prompts=prompts, samples=samples)
    frame = pd.read_csv(path)
    frame["refusal_kind"] = kinds
    frame.to_csv(path, index=False)
    rep = run_report(tmp_path, [path])
    table = pd.read_csv(rep.outputs["categories"])
    for r in table.to_dict("records"):
        part = frame[frame.category == r["category"]].groupby("prompt")
        k, n = part["is_rejected"].sum().to_numpy(float), part.size().to_numpy(float)
        kf = part["refusal_kind"].apply(lambda x: (x == "full").sum()).to_numpy(float)
        for kk, low, high in ((k, r["ci_low"], r["ci_high"]), (kf, r["full_ci_low"], r["full_ci_high"])):
            ref = bootstrap((kk, n), lambda a, b, axis=-1: a.sum(axis=axis) / b.sum(axis=axis), paired=True,
                            vectorized=True, n_resamples=2000, method="percentile",
                            rng=np.random.default_rng(0)).confidence_interval
            assert (high - low) >= 0.8 * (ref.high - ref.low), r["category"]
        assert r["prompts"] == 30 and r["scored"] == 150


def test_k_equal_one_is_the_one_sample_comparison(tmp_path):
    a = write(tmp_path / "a_hard.csv", "A", [1, 0, 0], samples=[0, 0, 0])
    b = write(tmp_path / "b_hard.csv", "B", [1, 1, 0], samples=[0, 0, 0])
    rep = run_report(tmp_path, [a, b], ("compare", [["A", "B"]]))
    comp = pd.read_csv(rep.outputs["comparison"]).iloc[0]
    assert comp.test == "mcnemar_exact" and (comp.a_only, comp.b_only) == (0, 1)
    assert "samples" not in rep.outputs


@pytest.mark.parametrize("flags, message", [
    (["--compare", "A", "C"], "error: --compare: no model 'C' in the inputs (models: A, B)"),
    (["--baseline", "Z"], "error: --baseline: no model 'Z' in the inputs (models: A, B)"),
])
def test_unknown_model_exits_2(tmp_path, script, flags, message):
    write(tmp_path / "a_hard.csv", "A", [1, 0])
    write(tmp_path / "b_hard.csv", "B", [1, 1])
    result = script(REPORT, "a_hard.csv", "b_hard.csv", "--no_reference", *flags, "--no_figures", env={}, cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.strip() == message
    assert not (tmp_path / "report").exists()


def test_no_common_prompts_exits_2(tmp_path, script):
    write(tmp_path / "a_hard.csv", "A", [1, 0])
    write(tmp_path / "b_hard.csv", "B", [1, 1], prompts=["other 1", "other 2"])
    result = script(REPORT, "a_hard.csv", "b_hard.csv", "--no_reference", "--compare", "A", "B", "--no_figures",
                    env={}, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == ("error: --compare A B: the two models have no prompt in common "
                                     "that both scored (same set, same kind of verdict and judge); "
                                     "nothing to compare")
    assert not (tmp_path / "report" / "summary.csv").exists()


def test_nan_free_columns(tmp_path):
    a = write(tmp_path / "a_hard.csv", "A", [0, 0])
    b = write(tmp_path / "b_hard.csv", "B", [0, 0])
    rep = run_report(tmp_path, [a, b], ("compare", [["A", "B"]]))
    comp = pd.read_csv(rep.outputs["comparison"]).iloc[0]
    assert comp.p_value == 1.0 and comp["diff"] == 0 and math.isnan(comp.ci_low) and comp.ci_flag == "not_computable"


def test_baseline_many_models_holm_across_the_run(tmp_path):
    """--baseline against three models on two sets: p_holm_run is Holm over every whole-set test of the
    run (and over every category test)."""
    n = 60
    cats = ["hate" if i % 2 else "privacy" for i in range(n)]
    files = [write(tmp_path / "base_hard.csv", "base", [0] * n, cats),
             write(tmp_path / "base_toxic.csv", "base", [i % 3 == 0 for i in range(n)], cats)]
    for name, hard, toxic in (("all", [1] * n, [1] * n), ("some", [i % 9 == 0 for i in range(n)],
                                                          [i % 3 == 0 or i % 7 == 0 for i in range(n)]),
                              ("same", [0] * n, [i % 3 == 0 for i in range(n)])):
        files += [write(tmp_path / f"{name}_hard.csv", name, hard, cats),
                  write(tmp_path / f"{name}_toxic.csv", name, toxic, cats)]
    rep = report.build_report(files, tmp_path / "out", reference=False, html=False, baseline="base",
                              figures=False)
    table = pd.read_csv(rep.outputs["comparison"])
    assert list(table.columns) == cmp.COLUMNS
    whole = table[table.category == "all"]
    assert len(whole) == 6  # 3 models x 2 sets
    assert list(whole.p_holm_run) == pytest.approx(list(multipletests(whole.p_value, method="holm")[1]))
    cat_rows = table[table.category != "all"]
    assert list(cat_rows.p_holm_run) == pytest.approx(list(multipletests(cat_rows.p_value, method="holm")[1]))
    row = table[(table.set == "hard") & (table.model_b == "all") & (table.category == "all")].iloc[0]
    assert row.p_midp == pytest.approx(2 * 0.5 ** 60 - 0.5 ** 60, rel=1e-12)
    assert row.odds_ratio == math.inf and row.b_only == 60
    same = table[(table.model_b == "same") & (table.category == "all")]
    assert (same.p_value == 1).all() and (same.p_midp == 1).all() and same.odds_ratio.isna().all()


def test_p_values_reach_the_csv_at_full_precision(tmp_path):
    """A McNemar p of 1.9e-301 (1000 prompts refused by B only) is written as it is, not as 0."""
    n = 1000
    files = [write(tmp_path / "a_hard.csv", "A", [0] * n), write(tmp_path / "b_hard.csv", "B", [1] * n)]
    rep = run_report(tmp_path, files, ("compare", [["A", "B"]]))
    row = pd.read_csv(rep.outputs["comparison"]).iloc[0]
    assert row.p_value == mcnemar([[0, 0], [1000, 0]], exact=True).pvalue and 0 < row.p_value < 1e-300
    assert row.p_holm_run == row.p_value and row.p_midp > 0
    html = rep.outputs["html"].read_text()
    assert "p (Holm, run)" in html and "mid-p" in html


def test_holm_on_p_values_that_tell_the_rival_corrections_apart():
    """p = (0.30, 0.01, NaN, 0.20, 0.03): Holm by hand (step-down, m = 4): sorted 0.01, 0.03, 0.20,
    0.30 -> 4 x 0.01 = 0.04, max(0.04, 3 x 0.03) = 0.09, max(0.09, 2 x 0.20) = 0.40,
    max(0.40, 0.30) = 0.40. Hochberg (0.04, 0.09, 0.30, 0.30), Bonferroni (0.04, 0.12, 0.80, 1.0)
    and Benjamini-Hochberg (0.04, 0.06, 0.267, 0.30) each give another answer on the same data."""
    p = [0.30, 0.01, math.nan, 0.20, 0.03]
    holm = cmp.holm(p)
    assert math.isnan(holm[2])
    assert [holm[i] for i in (0, 1, 3, 4)] == pytest.approx([0.40, 0.04, 0.40, 0.09])
    finite = [0.30, 0.01, 0.20, 0.03]
    assert list(multipletests(finite, method="holm")[1]) == pytest.approx([0.40, 0.04, 0.40, 0.09])
    rivals = {"simes-hochberg": [0.30, 0.04, 0.30, 0.09], "bonferroni": [1.0, 0.04, 0.80, 0.12],
              "fdr_bh": [0.30, 0.04, 0.80 / 3, 0.06]}
    for method, expected in rivals.items():
        assert list(multipletests(finite, method=method)[1]) == pytest.approx(expected), method
        assert expected != pytest.approx([0.40, 0.04, 0.40, 0.09]), method


def test_one_sample_against_three_compares_prompts_not_rows(tmp_path, script):
    """Issue 46: A with one sample per prompt, B with --samples 3, one prompt refused by A only and
    none by B only: that prompt's one refusal falls on A's single sample with chance 1/4 under the
    null, so p = 2 x 1/4 (it was 0.00049: the swaps moved whole rows); the other category has no
    refusal to place: p = 1."""
    cats = ["hate"] * 6 + ["illegal"] * 6
    pd.DataFrame({"prompt": [f"prompt {i}" for i in range(12)], "category": cats, "model": "A",
                  "response": "r", "is_rejected": [str(i == 0) for i in range(12)]}).to_csv(tmp_path / "a_hard.csv",
                                                                                            index=False)
    pd.DataFrame({"prompt": [f"prompt {i}" for i in range(12) for _ in range(3)],
                  "category": [c for c in cats for _ in range(3)], "model": "B", "response": "r",
                  "sample": [s for _ in range(12) for s in range(3)], "is_rejected": "False"}).to_csv(
        tmp_path / "b_hard.csv", index=False)
    result = script(REPORT, "a_hard.csv", "b_hard.csv", "--no_reference", "--no_figures", "--compare", "A", "B",
                    env={}, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    table = pd.read_csv(tmp_path / "report" / "comparison.csv")
    assert list(table.p_value) == pytest.approx([0.5, 0.5, 1.0])
    whole = table.iloc[0]
    assert (whole.n, whole.samples_a, whole.samples_b, whole.a_only, whole.b_only) == (12, 1, 3, 1, 0)
    assert whole["diff"] == pytest.approx(-1 / 12, abs=1e-6) and whole.ci_low <= whole["diff"] < whole.ci_high
    assert whole.test == "exact_conditional" and whole.interval == "exact_conditional"
    assert ("A vs B on hard (keyword): compared prompt by prompt, each prompt's value its refusal share over its "
            "samples (A: 1 sample, B: 3 samples per prompt); a prompt differs when its share does") in result.stderr




def test_clopper_pearson_without_scipy_equals_scipys():
    """The numpy-only incomplete beta (used where scipy is not installed) against scipy's quantiles."""
    from scipy.stats import beta

    a, b = np.array([0.5, 3.0, 37.3, 800.0, 1.0]), np.array([3.2, 18.0, 64.4, 79201.0, 1.0])
    for q in (0.025, 0.975):
        assert stats._beta_bisection(q, a, b) == pytest.approx(beta.ppf(q, a, b), rel=1e-9, abs=1e-12)


def test_far_in_the_null_tail_the_limits_still_hold():
    """A refuses 0 of 5 on 1,000 prompts, B 5 of 5: p underflows, and the odds ratio's lower limit is
    where all 1,000 prompts put their 5 refusals on B's side with chance 2.5%: (1 / (1 + 5 psi^-1 ...))."""
    ka, kb, n = np.zeros(1000), np.full(1000, 5.0), np.full(1000, 5.0)
    got = conditional_test(ka, n, kb, n)
    assert got.p_value < 1e-300 and got.odds_ratio == math.inf
    # at psi, a prompt's 5 refusals of 10 samples all fall on B's side with probability
    # psi^5 / sum_x C(5, x) C(5, 5 - x) psi^x; the limit makes that to the 1,000th power 2.5%
    psi = got.or_low
    one = psi ** 5 / sum(comb(5, x) * comb(5, 5 - x) * psi ** x for x in range(6))
    assert one ** 1000 == pytest.approx(0.025, rel=1e-6)
