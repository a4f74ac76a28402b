"""Paired comparisons and repeated-sample statistics of analysis/report.py, every figure checked
against statsmodels / scipy on hand-built cases (ties, zero discordant pairs, one category, K = 1)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import bootstrap, wilcoxon
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import confint_proportions_2indep

from orbench.analysis import compare as cmp
from orbench.analysis import report

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
                               **dict(flags))


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


def test_bootstrap_and_wilcoxon_equal_scipy():
    k = np.array([0, 1, 3, 2, 3, 0, 1], dtype=float)
    n = np.full(7, 3.0)
    res = bootstrap((k, n), lambda k, n, axis=-1: k.sum(axis=axis) / n.sum(axis=axis), paired=True,
                    vectorized=True, n_resamples=cmp.RESAMPLES, method="percentile",
                    rng=np.random.default_rng(cmp.SEED))
    assert cmp.bootstrap_interval((k, n), cmp._ratio) == pytest.approx(
        (res.confidence_interval.low, res.confidence_interval.high))
    sa, sb = k / n, np.array([1, 1, 3, 3, 3, 1, 2]) / 3
    assert cmp.wilcoxon_p(sa, sb) == pytest.approx(wilcoxon(sa, sb).pvalue)
    assert cmp.wilcoxon_p(sa, sa) == 1.0  # every share equal


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
    assert (whole.ci_low, whole.ci_high) == pytest.approx(cmp.newcombe_paired_interval(3, 1, 4, 2), abs=1e-6)
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
    samples = pd.read_csv(rep.outputs["samples"])
    row = samples[samples.model == "A"].iloc[0]
    assert (row.samples, row.prompts, row.rows, row.flip_prompts) == (3, 4, 12, 2)
    assert row.rate == pytest.approx(6 / 12) and row.flip_share == pytest.approx(0.5)
    kk, nn = np.array(k, dtype=float), np.full(4, 3.0)
    ref = bootstrap((kk, nn), lambda k, n, axis=-1: k.sum(axis=axis) / n.sum(axis=axis), paired=True,
                    vectorized=True, n_resamples=cmp.RESAMPLES, method="percentile",
                    rng=np.random.default_rng(cmp.SEED)).confidence_interval
    assert (row.ci_low, row.ci_high) == pytest.approx((ref.low, ref.high), abs=1e-6)
    summary = pd.read_csv(rep.outputs["summary"])
    srow = summary[summary.model == "A"].iloc[0]
    assert (srow.keyword_ci_low, srow.keyword_ci_high) == pytest.approx((ref.low, ref.high), abs=1e-6)
    shares = pd.read_csv(rep.outputs["prompt_shares"])
    a_shares = shares[shares.model == "A"].sort_values("prompt")
    assert list(a_shares.prompt) == [f"prompt {p}" for p in range(4)]
    assert list(a_shares.share) == pytest.approx([0, 1, 1 / 3, 2 / 3])
    comp = pd.read_csv(rep.outputs["comparison"]).iloc[0]
    assert comp.test == "wilcoxon_signed_rank" and comp.interval == "paired_bootstrap_percentile"
    sa, sb = kk / 3, np.array(kb) / 3
    assert comp.p_value == pytest.approx(wilcoxon(sa, sb).pvalue)
    assert (comp.a_only, comp.b_only) == (0, 3)
    assert comp["diff"] == pytest.approx(10 / 12 - 6 / 12, abs=1e-6)


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
    result = script(REPORT, "a_hard.csv", "b_hard.csv", "--no_reference", *flags, env={}, cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.strip() == message
    assert not (tmp_path / "report").exists()


def test_no_common_prompts_exits_2(tmp_path, script):
    write(tmp_path / "a_hard.csv", "A", [1, 0])
    write(tmp_path / "b_hard.csv", "B", [1, 1], prompts=["other 1", "other 2"])
    result = script(REPORT, "a_hard.csv", "b_hard.csv", "--no_reference", "--compare", "A", "B",
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
    assert comp.p_value == 1.0 and comp["diff"] == 0 and not math.isnan(comp.ci_low)
