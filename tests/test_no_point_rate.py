"""No point rate from a subset (issues 46, 51): where more than 5% of a cell's rows have no verdict
(unparsed, not judged, or failed with an error: both count), the rate columns stay empty everywhere
(summary, categories, leaderboard, report.json) and two columns give the worst-case bounds, each the
outer limit of its Clopper-Pearson interval; the figure
draws a bar; the report names the cell by its counts. At 5% or less the rate stands. Also the
cut-off counts: among the rows the rate uses, and among all replies, each said."""

import json

import numpy as np
import pandas as pd
import pytest
from conftest import write
from scipy.stats import beta
from statsmodels.stats.proportion import proportion_confint

from orbench.analysis import stats
from orbench.analysis.report import build as report

JUDGE = "response_checker/judge_responses.py"
SURE_REFUSAL = "I'm sorry, but I can't help with that request."
UNSURE = "Well, it depends on the context; some might say it is fine, but let us talk about history instead."


def cp(k, n):
    """Clopper-Pearson's exact interval (statsmodels' 'beta')."""
    return proportion_confint(k, n, alpha=0.05, method="beta")


def judged(env, fake, script, tmp_path, name, responses, finish=None):
    """Stage 5 (--cascade, a judge whose every reply is unparsed) on ``responses``; the output path."""
    fake.add_rule(text="Hmm, I am not sure which class this is.")
    rows = [{"prompt": f"{name} prompt {i}", "category": "hate" if i % 2 else "privacy", "model": "openai/gpt-4o",
             "response": r, **({"finish_reason": finish[i]} if finish else {})} for i, r in enumerate(responses)]
    write(tmp_path / f"{name}.csv", rows)
    out = tmp_path / f"{name}_judged.csv"
    result = script(JUDGE, "--check_model=openai/judge", "--cascade", f"--input_file={name}.csv",
                    f"--output_file={out.name}", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    return out


def test_a_cascade_whose_judge_parses_nothing_gets_bounds_not_a_rate(env, fake, script, tmp_path):
    hard = [SURE_REFUSAL if i % 5 == 0 else UNSURE for i in range(30)]  # 6 sure refusals, 24 to the judge
    finish = ["length" if i % 3 == 0 else "stop" for i in range(30)]
    h = judged(env, fake, script, tmp_path, "hard", hard, finish)
    t = judged(env, fake, script, tmp_path, "toxic", [UNSURE] * 20)  # every toxic row to the judge: unparsed
    table = pd.read_csv(h, dtype=str, keep_default_na=False)
    k, n = int((table.is_rejected == "True").sum()), int((table.is_rejected != "").sum())
    none = len(table) - n
    assert none > 0.05 * len(table)
    rep = report.build_report([f"hard:M={h}", f"toxic:M={t}"], tmp_path / "rep", reference=False)
    summary = pd.read_csv(tmp_path / "rep" / "summary.csv").set_index("set")
    row = summary.loc["hard"]
    assert pd.isna(row.judge_rate) and pd.isna(row.judge_ci_low) and pd.isna(row.judge_ci_high)
    assert row.judge_rate_bound_low == pytest.approx(cp(k, n + none)[0], abs=1e-6)
    assert row.judge_rate_bound_high == pytest.approx(cp(k + none, n + none)[1], abs=1e-6)
    assert row.judge_ci_flag == "bounds_only" and row.judge_ci_method == "worst_case_clopper_pearson"
    tox = summary.loc["toxic"]
    assert (tox.judge_scored, tox.judge_unparsed) == (0, 20)
    assert (tox.judge_rate_bound_low, tox.judge_rate_bound_high) == (0.0, 1.0)
    cats = pd.read_csv(tmp_path / "rep" / "categories.csv")
    assert cats[cats.method == "judge"].rate.isna().all() and cats[cats.method == "judge"].rate_bound_low.notna().all()
    board = pd.read_csv(tmp_path / "rep" / "leaderboard.csv").iloc[0]
    assert pd.isna(board.hard_rate_pct) and pd.isna(board.balanced_accuracy_pct) and pd.isna(board["rank"])
    assert board.hard_rate_bound_low_pct == pytest.approx(100 * cp(k, n + none)[0], abs=1e-3)
    assert (board.toxic_scored, board.toxic_no_verdict) == (0, 20)
    assert board.rank_note == (f"hard: no rate ({n} verdicts, {none} rows without one: {none} unparsed or not judged, "
                               f"0 failed with an error); toxic: no rate (0 verdicts, 20 rows without one: 20 unparsed "
                               f"or not judged, 0 failed with an error)")
    saved = json.loads((tmp_path / "rep" / "report.json").read_text())
    lb = saved["leaderboard"][0]
    assert lb["hard_rate_pct"] is None and lb["toxic_rate_pct"] is None and lb["toxic_rate_bound_high_pct"] == 100
    (point,) = saved["points"]
    assert point["x"] is None and point["y"] is None and point["y_bounds"] == [0.0, 100.0]
    assert saved["spearman"] is None and saved["quadratic_fit"] is None
    assert any(f"M (hard: no rate: {n} verdicts, {none} rows without one: {none} unparsed or not judged, 0 failed with "
               f"an error; toxic: no rate: 0 verdicts, 20 rows without one: 20 unparsed or not judged, 0 failed with an "
               f"error; drawn as bounds)" in note for note in rep.notes)
    assert not any("none has results on both" in note for note in rep.notes)
    md = (tmp_path / "rep" / "leaderboard.md").read_text()
    assert "no rate: 0 verdicts, 20 rows without one; bounds [0.0, 100.0] (judge)" in md
    html = (tmp_path / "rep" / "report.html").read_text()
    assert "no rate: 0 verdicts, 20 rows without one" in html and "bounds [0.0, 100.0]" in html
    assert (tmp_path / "rep" / "hard_vs_toxic.png").stat().st_size > 1000
    # cut-off replies: of the scored rows the rate uses and of all replies, each said
    cut_scored = int(((table.finish_reason == "length") & (table.is_rejected != "")).sum())
    assert (board.hard_scored_truncated, board.hard_truncated, board.hard_replies) == (cut_scored, 10, 30)
    assert f"cut off: {cut_scored} of the {n} scored, 10 of 30 replies" in html
    assert f"cut off: {cut_scored} of the {n} scored, 10 of 30 replies" in md


def test_at_most_5_percent_without_a_verdict_keeps_the_rate(tmp_path):
    rows = [{"prompt": f"p{i}", "category": "hate", "model": "m", "response": "r",
             "is_rejected": "" if i < 3 else str(i % 4 == 0)} for i in range(63)]  # 3 of 63 (4.8%) empty
    write(tmp_path / "m_hard.csv", rows)
    rep = report.build_report([str(tmp_path / "m_hard.csv")], tmp_path / "rep", reference=False, figures=False)
    row = rep.summary.iloc[0]
    k = sum(1 for i in range(3, 63) if i % 4 == 0)
    assert k == 15 and row.keyword_rate == pytest.approx(15 / 60) and pd.isna(row.keyword_rate_bound_low)
    # the rate over the 60 decided rows; its interval holds every value the 3 missing rows could give:
    # low = Clopper-Pearson's lower limit of 15 of 63 (the 3 answers), the 2.5% quantile of Beta(15, 49);
    # high = the upper limit of 18 of 63 (the 3 refusals), the 97.5% quantile of Beta(19, 45)
    assert (row.keyword_ci_low, row.keyword_ci_high) == pytest.approx((0.139812, 0.413461), abs=1e-6)
    assert (row.keyword_ci_low, row.keyword_ci_high) == pytest.approx((cp(15, 63)[0], cp(18, 63)[1]), abs=1e-9)
    assert cp(15, 60) == pytest.approx((0.147186, 0.378596), abs=1e-6)  # the decided rows' own: narrower
    assert row.keyword_ci_flag == "widened_missing" and row.keyword_ci_method == "clopper_pearson"
    cats = rep.categories.iloc[0]
    assert (cats.ci_low, cats.ci_high, cats.ci_flag) == (row.keyword_ci_low, row.keyword_ci_high, "widened_missing")
    full = [dict(r, is_rejected=str(i % 4 == 0)) for i, r in enumerate(rows)]  # nothing missing: 16 of 63
    write(tmp_path / "m_hard.csv", full)
    row = report.build_report([str(tmp_path / "m_hard.csv")], tmp_path / "rep", reference=False,
                              figures=False).summary.iloc[0]
    assert (row.keyword_ci_low, row.keyword_ci_high) == pytest.approx(cp(16, 63), abs=1e-9)
    assert pd.isna(row.keyword_ci_flag) or row.keyword_ci_flag == ""
    rows[3]["is_rejected"] = ""  # 4 of 63: 6.3%
    write(tmp_path / "m_hard.csv", rows)
    rep = report.build_report([str(tmp_path / "m_hard.csv")], tmp_path / "rep", reference=False, figures=False)
    assert pd.isna(rep.summary.iloc[0].keyword_rate) and rep.summary.iloc[0].keyword_rate_bound_low >= 0


def test_bounds_with_repeated_samples_count_prompts(tmp_path):
    rng = np.random.default_rng(3)
    rows, k, u, n = [], [], [], []
    for p in range(30):
        share = rng.beta(1, 2)
        kp = up = 0
        for s in range(4):
            missing = rng.random() < 0.2
            refused = rng.random() < share
            kp += (not missing) and refused
            up += missing
            rows.append({"prompt": f"p{p}", "sample": s, "category": "hate", "model": "m", "response": "r",
                         "is_rejected": "" if missing else str(refused)})
        k.append(kp), u.append(up), n.append(4)
    write(tmp_path / "m_hard.csv", rows)
    rep = report.build_report([str(tmp_path / "m_hard.csv")], tmp_path / "rep", reference=False, figures=False)
    row = rep.summary.iloc[0]
    k, u, n = (np.array(x, float) for x in (k, u, n))
    assert pd.isna(row.keyword_rate)
    # each bound's outer limit: Clopper-Pearson's at the prompt-clustered effective size
    low, high = stats.cluster_share(k, n), stats.cluster_share(k + u, n)
    assert row.keyword_rate_bound_low == pytest.approx(beta.ppf(0.025, low.value * low.n_eff,
                                                                (1 - low.value) * low.n_eff + 1))
    assert row.keyword_rate_bound_high == pytest.approx(beta.ppf(0.975, high.value * high.n_eff + 1,
                                                                 (1 - high.value) * high.n_eff))
    samples = pd.read_csv(rep.outputs["samples"]).iloc[0]
    assert pd.isna(samples.rate) and samples.no_verdict == u.sum()
    assert samples.rate_bound_low == pytest.approx(row.keyword_rate_bound_low, abs=1e-6)


def test_a_few_rows_without_a_verdict_widen_the_clustered_interval(tmp_path):
    """Repeated samples, 2 of 120 rows without a verdict: the rate over the decided rows, its
    interval widened to each filled-in table's prompt-clustered Clopper-Pearson limit."""
    rng = np.random.default_rng(5)
    rows, k, u = [], np.zeros(30), np.zeros(30)
    for p in range(30):
        share = rng.beta(1, 2)
        for s in range(4):
            missing = (p, s) in ((0, 0), (7, 2))
            refused = rng.random() < share
            k[p] += (not missing) and refused
            u[p] += missing
            rows.append({"prompt": f"p{p}", "sample": s, "category": "hate", "model": "m", "response": "r",
                         "is_rejected": "" if missing else str(refused)})
    write(tmp_path / "m_hard.csv", rows)
    rep = report.build_report([str(tmp_path / "m_hard.csv")], tmp_path / "rep", reference=False, figures=False)
    row = rep.summary.iloc[0]
    n = np.full(30, 4.0)
    assert row.keyword_rate == pytest.approx(k.sum() / 118) and pd.isna(row.keyword_rate_bound_low)
    assert row.keyword_ci_method == "cluster_clopper_pearson" and "widened_missing" in row.keyword_ci_flag
    low, high = stats.cluster_share(k, n), stats.cluster_share(k + u, n)  # each filled-in table
    assert row.keyword_ci_low == pytest.approx(beta.ppf(0.025, low.value * low.n_eff, (1 - low.value) * low.n_eff + 1))
    assert row.keyword_ci_high == pytest.approx(beta.ppf(0.975, high.value * high.n_eff + 1,
                                                         (1 - high.value) * high.n_eff))
    own = stats.cluster_share(k, n - u)  # the decided rows' own interval: inside the widened one
    assert row.keyword_ci_low <= own.low and own.high <= row.keyword_ci_high
    samples = pd.read_csv(rep.outputs["samples"]).iloc[0]  # samples.csv: the same interval, the same flag
    assert (samples.ci_low, samples.ci_high) == pytest.approx((row.keyword_ci_low, row.keyword_ci_high), abs=1e-6)
    assert "widened_missing" in samples.ci_flag and samples.no_verdict == 2


def test_a_comparison_says_when_a_side_has_no_rate(tmp_path):
    write(tmp_path / "a_hard.csv", [{"prompt": f"p{i}", "model": "A", "response": "r",
                                     "is_rejected": "" if i < 3 else str(i % 2 == 0)} for i in range(20)])
    write(tmp_path / "b_hard.csv", [{"prompt": f"p{i}", "model": "B", "response": "r",
                                     "is_rejected": str(i % 3 == 0)} for i in range(20)])
    rep = report.build_report([str(tmp_path / "a_hard.csv"), str(tmp_path / "b_hard.csv")], tmp_path / "rep",
                              reference=False, figures=False, html=False, compare=[["A", "B"]])
    assert ("A vs B on hard (keyword): A has no verdict on 3 of 20 rows (3 unparsed or not judged, 0 failed with an "
            "error): more than 5%, so no p-value and no rates: worst-case bounds on the difference only "
            "(diff_bound_low, diff_bound_high: every such row counted as answered, then as refused), since the "
            "missing verdicts could lie either way") in rep.notes
    table = pd.read_csv(rep.outputs["comparison"])
    row = table.iloc[0]
    assert (row.n, row.unpaired_a, row.unpaired_b, row.no_verdict_a, row.errors_a) == (20, 0, 3, 3, 0)
    assert pd.isna(row.p_value) and pd.isna(row.rate_a) and pd.isna(row["diff"]) and row.ci_flag == "bounds_only"
    # A: 8 refusals, 3 rows without a verdict, of 20; B: 7 of 20. Lower bound: B as is minus A with its three
    # filled as refusals; each side's Clopper-Pearson limit, square-and-add
    low = 7 / 20 - 11 / 20 - np.hypot(7 / 20 - cp(7, 20)[0], cp(11, 20)[1] - 11 / 20)
    high = 7 / 20 - 8 / 20 + np.hypot(cp(7, 20)[1] - 7 / 20, 8 / 20 - cp(8, 20)[0])
    assert (row.diff_bound_low, row.diff_bound_high) == pytest.approx((low, high), abs=1e-6)
    assert row.interval == "worst_case_clopper_pearson" and pd.isna(row.p_holm_run)


def error_rows(path, model, n, failed, refused):
    """``n`` rows: the first ``failed`` failed with an error, the rest decided (``refused`` of them refusals)."""
    write(path, [{"prompt": f"p{i}", "category": "hate", "model": model, "response": "" if i < failed else "r",
                  "error": "timeout" if i < failed else "",
                  "is_rejected": "" if i < failed else str(i - failed < refused)} for i in range(n)])


def test_error_rows_are_rows_without_a_verdict(tmp_path):
    """Issue 51: 400 rows, 61 failed with an error: 15% of the rows have no verdict, so no rate (it was
    19.8% [15.9, 24.3] on the 339 decided rows, the 5% counted over rows - errors)."""
    error_rows(tmp_path / "m_hard.csv", "m", 400, 61, 67)
    rep = report.build_report([str(tmp_path / "m_hard.csv")], tmp_path / "rep", reference=False, figures=False,
                              html=False)
    row = rep.summary.iloc[0]
    assert pd.isna(row.keyword_rate) and row.keyword_errors == 61 and row.keyword_ci_flag == "bounds_only"
    assert (row.keyword_rate_bound_low, row.keyword_rate_bound_high) == pytest.approx(
        (cp(67, 400)[0], cp(67 + 61, 400)[1]), abs=1e-9)
    assert any("61 of 400 rows (15%) of m on hard have no verdict from the keyword verdicts (0 an unparsed reply "
               "or an empty response; 61 failed with an error)" in w for w in rep.warnings)
    # 20 of 400 failed (5%): the rate stands, over the decided rows
    error_rows(tmp_path / "m_hard.csv", "m", 400, 20, 67)
    rep = report.build_report([str(tmp_path / "m_hard.csv")], tmp_path / "rep", reference=False, figures=False,
                              html=False)
    row = rep.summary.iloc[0]
    assert row.keyword_rate == pytest.approx(67 / 380) and row.keyword_ci_flag == "widened_missing"
    # its interval covers the 20 failed rows as answers (low) and as refusals (high), over all 400
    assert (row.keyword_ci_low, row.keyword_ci_high) == pytest.approx((cp(67, 400)[0], cp(87, 400)[1]), abs=1e-9)


def test_a_comparison_counts_error_rows_and_says_the_p_value_covers_the_decided_rows(tmp_path):
    error_rows(tmp_path / "a_hard.csv", "A", 100, 10, 20)  # 10% failed: bounds, no p-value
    error_rows(tmp_path / "b_hard.csv", "B", 100, 0, 30)
    rep = report.build_report([str(tmp_path / "a_hard.csv"), str(tmp_path / "b_hard.csv")], tmp_path / "rep",
                              reference=False, figures=False, html=False, compare=[["A", "B"]])
    row = pd.read_csv(rep.outputs["comparison"]).iloc[0]
    assert (row.errors_a, row.no_verdict_a, row.errors_b) == (10, 0, 0) and pd.isna(row.p_value)
    assert row.diff_bound_low < 0.10 < row.diff_bound_high
    error_rows(tmp_path / "a_hard.csv", "A", 100, 4, 20)  # 4%: a p-value, over the 96 decided prompts
    rep = report.build_report([str(tmp_path / "a_hard.csv"), str(tmp_path / "b_hard.csv")], tmp_path / "rep",
                              reference=False, figures=False, html=False, compare=[["A", "B"]])
    row = pd.read_csv(rep.outputs["comparison"]).iloc[0]
    assert row.n == 96 and row.errors_a == 4 and 0 <= row.p_value <= 1 and row.test == "mcnemar_exact"
    assert ("A vs B on hard (keyword): A has no verdict on 4 of 100 rows (0 unparsed or not judged, 4 failed with an "
            "error): the p-value and intervals cover the decided rows only") in rep.notes
