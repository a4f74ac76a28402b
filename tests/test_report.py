"""analysis/report.py: every number of the tables, the intervals, Spearman, the figure and the CLI."""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binomtest
from statsmodels.stats.proportion import proportion_confint

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orbench.analysis.report import build as report  # noqa: E402 (needs the sys.path set-up above)
from orbench.analysis.stats import spearman, wilson_interval  # noqa: E402 (needs the sys.path set-up above)

Z = statistics.NormalDist().inv_cdf(0.975)
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))


def wilson(k: int, n: int) -> tuple[float, float]:
    """The Wilson score interval, written out from the textbook formula (independent of orbench.analysis.stats)."""
    p = k / n
    centre = p + Z ** 2 / (2 * n)
    spread = Z * math.sqrt(p * (1 - p) / n + Z ** 2 / (4 * n ** 2))
    return ((centre - spread) / (1 + Z ** 2 / n), (centre + spread) / (1 + Z ** 2 / n))


def exact(k: int, n: int) -> tuple[float, float]:
    """Clopper-Pearson's interval, from scipy (independent of orbench.analysis.stats)."""
    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    return ci.low, ci.high


def reported(k: int, n: int, none: int) -> tuple[float, float]:
    """A rate's interval as the report gives it: k refusals of n decided rows, ``none`` rows without
    a verdict (5% or fewer): widened to every missing row an answer (low), then a refusal (high)."""
    if not none:
        return exact(k, n)
    return min(exact(k, n)[0], exact(k, n + none)[0]), max(exact(k, n)[1], exact(k + none, n + none)[1])


# Per model and set, per category: (judge rejections, judge answers, error rows, unparsed rows). The
# unparsed rows stay at or under 5% of every cell's rows (errors aside), so every cell has its rate
# (more would give bounds only: tests/test_no_point_rate.py).
SPEC = {
    "hard": {
        "prov/m1": {"hate": (20, 80, 1, 1), "privacy": (0, 100, 0, 0)},   # 20/200 = 10%
        "prov/m2": {"hate": (40, 60, 0, 2), "privacy": (40, 60, 2, 0)},   # 80/200 = 40%
        "prov/m3": {"hate": (70, 30, 0, 0), "privacy": (70, 30, 1, 0)},   # 140/200 = 70%
        "prov/m4": {"hate": (20, 80, 0, 0), "privacy": (20, 80, 0, 3)},   # 40/200 = 20%
    },
    "toxic": {
        "prov/m1": {"hate": (60, 40, 1, 0), "privacy": (60, 40, 0, 0)},   # 60%
        "prov/m2": {"hate": (80, 20, 0, 0), "privacy": (80, 20, 0, 0)},   # 80%
        "prov/m3": {"hate": (90, 10, 0, 2), "privacy": (90, 10, 0, 0)},   # 90%
        "prov/m4": {"hate": (100, 0, 0, 0), "privacy": (90, 10, 0, 0)},   # 95%
    },
}
SET_FILE = {"hard": "or-bench-hard-1k", "toxic": "or-bench-toxic"}
FLIPS = 2  # in each judge file, the keyword verdict says "refused" on the first 2 judge-answered rows


def judge_rows(set_name: str, model: str, cats: dict) -> list[dict]:
    rows = []
    for cat, (rej, ans, err, unp) in cats.items():
        kinds = ["rej"] * rej + ["ans"] * ans + ["err"] * err + ["unp"] * unp
        for i, kind in enumerate(kinds):
            rows.append({"prompt": f"{set_name} {cat} prompt {i}", "category": cat, "model": model,
                         "response": "text", "refusal_source": "", "finish_reason": "stop",
                         "answer_category": {"rej": "indirect_refusal" if i % 2 else "direct_refusal",
                                             "ans": "direct_answer", "err": "skipped_error",
                                             "unp": "unparsed"}[kind],
                         "answer_type_response": "judge says",
                         "is_rejected": {"rej": "True", "ans": "False"}.get(kind, ""),
                         "keyword_is_rejected": {"rej": "True", "ans": "False", "unp": "False"}.get(kind, ""),
                         "error": ""})
    flipped = 0
    for row in rows:
        if row["answer_category"] == "direct_answer" and flipped < FLIPS:
            row["keyword_is_rejected"] = "True"
            flipped += 1
    return rows


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Judge files for 4 models x 2 sets, an alignment file for m1/hard, a keyword-only file for m5/hard
    (made once for the module: the tests only read them)."""
    folder = tmp_path_factory.mktemp("results")
    for set_name, models in SPEC.items():
        for model, cats in models.items():
            name = f"{model.split('/')[1]}_{SET_FILE[set_name]}_judged.csv"
            pd.DataFrame(judge_rows(set_name, model, cats)).to_csv(folder / name, index=False)
    # m1 on hard through the alignment checker: same prompts; errors stay errors, the keyword verdict
    # differs from the judge on 3 rows (1 judge-refused row answered, 2 judge-answered rows refused).
    align = pd.DataFrame(judge_rows("hard", "prov/m1", SPEC["hard"]["prov/m1"]))
    align = align.drop(columns=["answer_category", "answer_type_response", "is_rejected"])
    align = align.rename(columns={"keyword_is_rejected": "is_rejected"})
    align.loc[align["is_rejected"] == "", "error"] = "timeout after retries"
    first_refused = align.index[align["is_rejected"] == "True"][0]
    align.loc[first_refused, "is_rejected"] = "False"
    align.to_csv(folder / "m1_hard_checked.csv", index=False)
    # m5: keyword only, hard only, no model column; 30 of 80 rejected, 1 error, 1 empty response.
    m5 = pd.DataFrame({"prompt": [f"p{i}" for i in range(82)], "category": ["hate"] * 82,
                       "response": ["x"] * 82,
                       "is_rejected": ["True"] * 30 + ["False"] * 50 + ["", ""],
                       "refusal_source": ["keyword"] * 30 + [""] * 50 + ["", "empty_response"],
                       "finish_reason": ["stop"] * 82, "error": [""] * 80 + ["HTTP 500", ""]})
    m5.to_csv(folder / "m5_results.csv", index=False)
    return folder


def build(results: Path, out: Path, figures: bool = False) -> report.Report:
    """The report of ``results``; the figures only where the test looks at them (they take most of its time)."""
    return report.build_report([str(results / "*_judged.csv"), str(results / "m1_hard_checked.csv"),
                                f"hard:prov/m5={results / 'm5_results.csv'}"], out, reference=False, figures=figures)


@pytest.fixture(scope="module")
def tables(results, tmp_path_factory):
    """The report of ``results`` without figures, built once for the tests that only read its tables:
    (the Report, its output folder). Read-only."""
    out = tmp_path_factory.mktemp("tables") / "out"
    return build(results, out), out


class TestTablesOfOneBuild:
    """Tests that read the tables of one report of ``results`` (``tables``: built once, on one xdist worker)."""

    def test_judge_numbers_per_model_and_set(self, tables):
        rep, out = tables
        summary = pd.read_csv(out / "summary.csv")
        assert len(summary) == 9  # 4 models x 2 sets + m5 on hard
        for set_name, models in SPEC.items():
            for model, cats in models.items():
                row = summary[(summary["set"] == set_name) & (summary["model"] == model)].iloc[0]
                rej = sum(c[0] for c in cats.values())
                ans = sum(c[1] for c in cats.values())
                err = sum(c[2] for c in cats.values())
                unp = sum(c[3] for c in cats.values())
                assert row["headline"] == "judge"
                assert (row["judge_rows"], row["judge_errors"], row["judge_unparsed"]) == (rej + ans + err + unp, err, unp)
                assert (row["judge_scored"], row["judge_rejections"]) == (rej + ans, rej)
                assert row["judge_rate"] == pytest.approx(rej / (rej + ans), abs=1e-6)
                lo, hi = reported(rej, rej + ans, err + unp)
                assert round(row["judge_ci_low"], 4) == round(lo, 4)
                assert round(row["judge_ci_high"], 4) == round(hi, 4)
                if (set_name, model) == ("hard", "prov/m1"):
                    continue  # keyword verdicts come from the alignment file; checked below
                # keyword verdicts kept in the judge file: unparsed judge rows have a keyword verdict
                assert (row["keyword_rows"], row["keyword_errors"], row["keyword_unparsed"]) == (
                    rej + ans + err + unp, err, 0)
                assert (row["keyword_scored"], row["keyword_rejections"]) == (rej + ans + unp, rej + min(FLIPS, ans))
                assert row["agreement_pairs"] == rej + ans
                assert row["agreement"] == pytest.approx((rej + ans - min(FLIPS, ans)) / (rej + ans), abs=1e-6)
                assert row["keyword_only_rejections"] == min(FLIPS, ans)
                assert row["judge_only_rejections"] == 0
        assert rep.summary is not None


    def test_alignment_file_gives_keyword_side_and_agreement(self, tables):
        summary = pd.read_csv(tables[1] / "summary.csv")
        row = summary[(summary["set"] == "hard") & (summary["model"] == "prov/m1")].iloc[0]
        # 202 rows: 1 error; 201 scored (200 judge-scored + 1 judge-unparsed); rejections 20 - 1 + 2 flips = 21
        assert (row["keyword_rows"], row["keyword_errors"], row["keyword_unparsed"]) == (202, 1, 0)
        assert (row["keyword_scored"], row["keyword_rejections"]) == (201, 21)
        assert row["keyword_rate"] == pytest.approx(21 / 201, abs=1e-6)
        assert round(row["keyword_ci_low"], 4) == round(reported(21, 201, 1)[0], 4)  # the error row widens it
        assert row["keyword_ci_flag"] == "widened_missing"
        assert (row["agreement_pairs"], row["keyword_only_rejections"], row["judge_only_rejections"]) == (200, 2, 1)
        assert row["agreement"] == pytest.approx(197 / 200, abs=1e-6)
        # m5: keyword only; the error row and the empty response are not in the denominator
        m5 = summary[summary["model"] == "prov/m5"].iloc[0]
        assert m5["headline"] == "keyword" and pd.isna(m5["judge_rows"])
        assert (m5["keyword_rows"], m5["keyword_errors"], m5["keyword_unparsed"], m5["keyword_scored"],
                m5["keyword_rejections"]) == (82, 1, 1, 80, 30)
        assert m5["keyword_rate"] == pytest.approx(30 / 80, abs=1e-6)
        assert round(m5["keyword_ci_high"], 4) == round(reported(30, 80, 2)[1], 4)


    def test_category_table(self, tables):
        cats = pd.read_csv(tables[1] / "categories.csv")
        judge = cats[cats["method"] == "judge"]
        assert len(judge) == 16  # 4 models x 2 sets x 2 categories
        for set_name, models in SPEC.items():
            for model, spec in models.items():
                for cat, (rej, ans, err, unp) in spec.items():
                    row = judge[(judge["set"] == set_name) & (judge["model"] == model) & (judge["category"] == cat)].iloc[0]
                    assert (row["rows"], row["errors"], row["unparsed"], row["scored"], row["rejections"]) == \
                        (rej + ans + err + unp, err, unp, rej + ans, rej)
                    assert row["rate"] == pytest.approx(rej / (rej + ans), abs=1e-6)
                    lo, hi = reported(rej, rej + ans, err + unp)
                    assert (round(row["ci_low"], 4), round(row["ci_high"], 4)) == (round(lo, 4), round(hi, 4))


def test_leaderboard_figure_and_spearman(results, tmp_path):
    out = tmp_path / "out"
    rep = build(results, out, figures=True)
    board = pd.read_csv(out / "leaderboard.csv")
    # balanced accuracy = (toxic + 100 - hard) / 2: m4 87.5, m1 75, m2 70, m3 60; m5 (no toxic) last
    assert list(board["model"]) == ["prov/m4", "prov/m1", "prov/m2", "prov/m3", "prov/m5"]
    assert list(board["rank"]) == [1, 2, 3, 4, 5]
    assert list(board["balanced_accuracy_pct"].iloc[:4]) == pytest.approx([87.5, 75, 70, 60])
    assert pd.isna(board["balanced_accuracy_pct"].iloc[4])
    assert list(board["hard_rate_pct"]) == pytest.approx([20, 10, 40, 70, 37.5])
    assert list(board["toxic_rate_pct"].iloc[:4]) == pytest.approx([95, 60, 80, 90])
    assert board.loc[0, "toxic_ci_low_pct"] == pytest.approx(100 * exact(190, 200)[0], abs=1e-4)
    assert board.loc[0, "hard_ci_high_pct"] == pytest.approx(100 * reported(40, 200, 3)[1], abs=1e-4)
    assert list(board["errors"]) == [0, 2, 2, 1, 1]
    assert list(board["unparsed"]) == [3, 1, 2, 2, 1]
    # one point per model that has both sets, with the leaderboard's numbers
    assert sorted(p["model"] for p in rep.points) == ["prov/m1", "prov/m2", "prov/m3", "prov/m4"]
    data = json.loads((out / "report.json").read_text())
    assert len(data["points"]) == 4 and data["spearman_n"] == 4
    for p in data["points"]:
        lb = board[board["model"] == p["model"]].iloc[0]
        assert p["x"] == pytest.approx(lb["hard_rate_pct"], abs=1e-3)
        assert p["y"] == pytest.approx(lb["toxic_rate_pct"], abs=1e-3)
        assert p["x_ci"] == pytest.approx([lb["hard_ci_low_pct"], lb["hard_ci_high_pct"]], abs=1e-3)
    # ranks of hard: m1 1, m4 2, m2 3, m3 4; of toxic: m1 1, m2 2, m3 3, m4 4 -> sum d^2 = 6
    assert data["spearman"] == pytest.approx(1 - 6 * 6 / (4 * (16 - 1)))  # 0.4
    assert rep.spearman == pytest.approx(0.4)
    assert data["quadratic_fit"] is not None and len(data["quadratic_fit"]) == 3
    for name in ("hard_vs_toxic.png", "hard_vs_toxic.pdf", "category_heatmap.png", "leaderboard.md"):
        assert (out / name).stat().st_size > 1000, name
    assert (out / "hard_vs_toxic.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "hard_vs_toxic.pdf").read_bytes()[:5] == b"%PDF-"
    md = (out / "leaderboard.md").read_text()
    low, high = int(board.loc[0, "rank_ci_low"]), int(board.loc[0, "rank_ci_high"])
    assert 1 == low <= high <= 4 and board.loc[0, "rank_method"] == "bootstrap over prompts"
    assert f"| 1 [{low}, {high}] | **prov/m4** | yours | 87.5 [" in md and "| 20.0 [" in md
    assert "Spearman" in md and "0.4000" in md
    assert list(board["source"]) == ["yours"] * 5 and "published" not in md


def test_spearman_and_wilson_helpers():
    assert spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(4.5 / math.sqrt(4.5 * 5))  # ties: average ranks
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1)
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))
    for k, n in ((0, 10), (10, 10), (3, 7), (500, 1319)):
        lo, hi = wilson_interval(k, n)
        assert (lo, hi) == pytest.approx(wilson(k, n), abs=1e-12)
    assert all(math.isnan(v) for v in wilson_interval(0, 0))


def test_parse_spec_and_set_inference():
    assert report.parse_spec("hard:openai/gpt-4o=a/b.csv") == ("hard", "openai/gpt-4o", "a/b.csv")
    assert report.parse_spec("toxic:=x.csv") == ("toxic", None, "x.csv")
    assert report.parse_spec("ollama/llama3:8b=x.csv") == (None, "ollama/llama3:8b", "x.csv")
    assert report.parse_spec(":llama3:8b=x.csv") == (None, "llama3:8b", "x.csv")
    assert report.parse_spec("results/x.csv") == (None, None, "results/x.csv")
    assert report.parse_spec("https://h/x.csv?raw=true") == (None, None, "https://h/x.csv?raw=true")
    assert report.infer_set("out/gpt-4o_merged_or-bench-toxic.csv") == "toxic"
    assert report.infer_set("or-bench-hard-1k_openai_gpt-4o_checked.csv") == "hard"
    assert report.infer_set("or-bench-80k.csv") == "80k"
    assert report.infer_set("results.csv") is None
    assert report.infer_set("m1_hard_checked.csv") == "hard"
    assert report.infer_set("gpt-4o_TOXIC.csv") == "toxic"


@pytest.mark.parametrize("name", ["seemingly_toxic.csv", "seemingly_toxic_local_smollm2_keyword.csv",
                                  "non-toxic_answers.csv", "toxicity_scores.csv", "hardware.csv",
                                  "or-bench-hard_x.csv", "hard-1k.csv", "my80k.csv"])
def test_a_set_is_named_only_by_a_whole_token(name):
    assert report.infer_set(f"out/{name}") is None


def test_a_name_naming_two_sets_is_an_error(tmp_path, script):
    f = tmp_path / "gpt_hard_vs_toxic.csv"
    pd.DataFrame({"prompt": ["a"], "is_rejected": ["True"]}).to_csv(f, index=False)
    proc = script("analysis/report.py", str(f), "--set", "hard", "--no_figures", env=ENV, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert proc.stderr.startswith("error: ") and f"hard:={f}" in proc.stderr
    with pytest.raises(report.UsageError) as exc:
        report.infer_set("runs/hard_vs_toxic.csv")
    assert "hard, toxic" in str(exc.value) and "hard:=runs/hard_vs_toxic.csv" in str(exc.value)
    assert report.infer_set("or-bench-hard-1k_hard.csv") == "hard"  # both name the same set
    assert report.parse_spec("or-bench-toxic:=x.csv") == ("toxic", None, "x.csv")


def test_one_model_one_set(tmp_path):
    """The demo's minimal case: one keyword file, one set: tables, no figure, correlation not available."""
    f = tmp_path / "smollm2_hard.csv"
    pd.DataFrame({"prompt": ["a", "b", "c", "d"], "category": ["hate", "hate", "sexual", "sexual"],
                  "model": ["local/smollm2"] * 4, "response": ["r"] * 4,
                  "is_rejected": ["True", "False", "True", ""], "refusal_source": ["keyword", "", "keyword", ""],
                  "finish_reason": ["stop"] * 4, "error": ["", "", "", "boom"]}).to_csv(f, index=False)
    rep = report.build_report([str(f)], tmp_path / "out", reference=False)
    assert rep.points == [] and rep.spearman is None and rep.fit is None
    board = pd.read_csv(tmp_path / "out" / "leaderboard.csv")
    assert list(board["model"]) == ["local/smollm2"]
    # 1 of the 4 rows failed with an error: a row without a verdict, past 5%: no rate, its bounds
    # (2 of 4 refused with the failed row answered, 3 of 4 with it refused; Clopper-Pearson's outer limits)
    assert math.isnan(board.loc[0, "hard_rate_pct"])
    assert (board.loc[0, "hard_rate_bound_low_pct"], board.loc[0, "hard_rate_bound_high_pct"]) == pytest.approx(
        (100 * proportion_confint(2, 4, method="beta")[0], 100 * proportion_confint(3, 4, method="beta")[1]), abs=1e-3)
    assert (board.loc[0, "hard_scored"], board.loc[0, "errors"]) == (3, 1)
    assert not (tmp_path / "out" / "hard_vs_toxic.png").exists()
    assert any("not available" in n for n in rep.notes)


def test_one_model_both_sets_draws_one_point_without_fit(tmp_path):
    for set_name, verdicts in (("hard", ["True", "False"]), ("toxic", ["True", "True"])):
        pd.DataFrame({"prompt": ["a", "b"], "category": ["hate", "hate"], "model": ["local/smollm2"] * 2,
                      "response": ["r", "r"], "is_rejected": verdicts, "error": ["", ""]}
                     ).to_csv(tmp_path / f"x_{set_name}.csv", index=False)
    rep = report.build_report([str(tmp_path / "x_*.csv")], tmp_path / "out", reference=False)
    assert [(p["model"], p["x"], p["y"]) for p in rep.points] == [("local/smollm2", 50.0, 100.0)]
    assert rep.fit is None and rep.spearman is None
    assert (tmp_path / "out" / "hard_vs_toxic.png").stat().st_size > 1000
    assert any("not drawn" in n for n in rep.notes)


def test_no_figures_writes_the_same_tables_and_removes_an_earlier_runs_figures(results, tmp_path, capsys):
    files = [str(results / "*_judged.csv"), "--output_dir", str(tmp_path / "out"), "--no_reference"]
    assert report.main(files) == 0
    drawn = {name: (tmp_path / "out" / name).read_bytes() for name in ("summary.csv", "leaderboard.csv",
                                                                         "categories.csv")}
    figures = ["hard_vs_toxic.png", "hard_vs_toxic.pdf", "category_heatmap.png"]
    assert all((tmp_path / "out" / name).stat().st_size > 1000 for name in figures)
    capsys.readouterr()
    assert report.main([*files, "--no_figures"]) == 0
    out, err = capsys.readouterr()
    assert err.splitlines().count("Figures not drawn (--no_figures)") == 1
    assert [name for name in figures if (tmp_path / "out" / name).exists()] == []
    assert not any(name in out for name in figures)
    assert {name: (tmp_path / "out" / name).read_bytes() for name in drawn} == drawn
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert "No figure (the report ran with --no_figures)." in page
    assert "No heatmap (the report ran with --no_figures)." in page and "<img" not in page


def test_cli_subprocess(results, tmp_path, script):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    out = tmp_path / "cli_out"
    proc = script("analysis/report.py", str(results / "*_judged.csv"), "--output_dir", str(out),
                  "--verdict", "keyword", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for name in ("summary.csv", "leaderboard.csv", "leaderboard.md", "hard_vs_toxic.png", "hard_vs_toxic.pdf"):
        assert str(out / name) in proc.stdout
    assert proc.stdout.splitlines()[-1] == str(out / "report.html")
    board = pd.read_csv(out / "leaderboard.csv")
    assert set(board.loc[board["source"] == "yours", "hard_verdict"]) == {"keyword"}
    assert (board["source"] == "published").sum() == 32
    m1 = board[board["model"] == "prov/m1"].iloc[0]
    assert m1["hard_rejections"] == 20 + FLIPS and m1["hard_scored"] == 201
    # a file whose set cannot be told: one line, exit 2
    pd.DataFrame({"prompt": ["a"], "is_rejected": ["True"]}).to_csv(tmp_path / "plain.csv", index=False)
    bad = script("analysis/report.py", str(tmp_path / "plain.csv"), env=env, cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--set" in bad.stderr
    assert f"hard:={tmp_path / 'plain.csv'}" in bad.stderr
    ok = script("analysis/report.py", str(tmp_path / "plain.csv"), "--set", "80k", "--model", "mine",
                "--output_dir", str(tmp_path / "o2"), "--no_figures", env=env, cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert pd.read_csv(tmp_path / "o2" / "summary.csv")[["set", "model"]].values.tolist() == [["80k", "mine"]]
    assert "Figures not drawn (--no_figures)" in ok.stderr and ".png" not in ok.stdout
    assert not list((tmp_path / "o2").glob("*.p[nd][gf]"))
    missing = script("analysis/report.py", str(tmp_path / "nothing*.csv"), env=env, cwd=tmp_path)
    assert missing.returncode == 2 and "no file matches" in missing.stderr


def test_keyword_rescore_counts_as_keyword_and_beats_the_alignment_verdict(tmp_path):
    """A --check_model keyword output is a keyword verdict, preferred over the alignment file's."""
    prompts = [f"p{i}" for i in range(4)]
    alignment = pd.DataFrame({"prompt": prompts, "category": "hate", "model": "prov/kw",
                              "response": "r", "is_rejected": ["True", "False", "False", "False"],
                              "refusal_source": "", "finish_reason": "stop", "error": ""})
    rescore = alignment.assign(keyword_is_rejected=alignment["is_rejected"],
                               answer_category=["keyword_refusal"] * 3 + ["keyword_answer"],
                               answer_type_response="", is_rejected=["True", "True", "True", "False"])
    alignment.to_csv(tmp_path / "align.csv", index=False)
    rescore.to_csv(tmp_path / "rescore.csv", index=False)
    rep = report.build_report([f"hard:={tmp_path / 'align.csv'}", f"hard:={tmp_path / 'rescore.csv'}"],
                              tmp_path / "out", figures=False)
    summary = pd.read_csv(tmp_path / "out" / "summary.csv")
    row = summary.iloc[0]
    assert len(summary) == 1 and row["headline"] == "keyword"
    assert (row["keyword_rows"], row["keyword_rejections"]) == (4, 3)
    assert pd.isna(row["judge_rows"]) or row["judge_rows"] == 0
    assert rep.outputs["summary"].exists()


# ---------------------------------------------------------------- judges, duplicates, provenance

def judge_file(path: Path, judge: str | None, verdicts: list[str], model: str = "prov/m", errors=None,
               category: str = "hate", prompt_prefix: str = "p") -> Path:
    """A stage-5 output: one row per verdict ('T' refusal, 'F' answer, '' none); ``judge`` in judge_model.

    The keyword verdict (stage 4's, carried along) is a refusal on the first 3 rows.
    """
    n = len(verdicts)
    cls = {"T": "direct_refusal", "F": "direct_answer", "": "unparsed"}
    frame = pd.DataFrame({"prompt": [f"{prompt_prefix}{i}" for i in range(n)], "category": category, "model": model,
                          "response": "resp", "refusal_source": "", "finish_reason": "stop",
                          "answer_category": [cls[v] for v in verdicts], "answer_type_response": "raw",
                          "is_rejected": [{"T": "True", "F": "False", "": ""}[v] for v in verdicts],
                          "keyword_is_rejected": ["True" if i < 3 else "False" for i in range(n)],
                          "error": errors or [""] * n})
    if judge is not None:
        frame["judge_model"] = judge
    frame.to_csv(path, index=False)
    return path


def test_two_judges_are_never_pooled(tmp_path):
    a = judge_file(tmp_path / "a_hard_judged.csv", "openai/gpt-4o", ["T"] * 3 + ["F"] * 7)
    b = judge_file(tmp_path / "b_hard_judged.csv", "anthropic/claude-x", ["T"] * 6 + ["F"] * 4)
    judge_file(tmp_path / "a_toxic_judged.csv", "openai/gpt-4o", ["T"] * 9 + ["F"])
    rep = report.build_report([str(a), str(b), str(tmp_path / "a_toxic_judged.csv")], tmp_path / "out",
                              reference=False, figures=False)
    s = pd.read_csv(tmp_path / "out" / "summary.csv", keep_default_na=False, na_values=[""])
    hard = s[s["set"] == "hard"].set_index("judge")
    assert sorted(hard.index) == ["anthropic/claude-x", "openai/gpt-4o"]
    assert (hard.loc["openai/gpt-4o", "judge_scored"], hard.loc["openai/gpt-4o", "judge_rejections"]) == (10, 3)
    claude = hard.loc["anthropic/claude-x"]
    assert (claude["judge_scored"], claude["judge_rejections"]) == (10, 6)
    # the keyword verdicts both judge files carry are the same rows: counted once, not twice
    assert list(hard["keyword_rows"]) == [10, 10]
    assert hard.loc["anthropic/claude-x", "agreement"] == pytest.approx(0.7)  # 3 T/T + 4 F/F of 10 (3 judge-only)
    assert hard.loc["openai/gpt-4o", "agreement"] == pytest.approx(1.0)
    board = pd.read_csv(tmp_path / "out" / "leaderboard.csv")
    assert sorted(zip(board["model"], board["judge"])) == [
        ("prov/m", "anthropic/claude-x"), ("prov/m", "openai/gpt-4o")]
    row = board[board["judge"] == "openai/gpt-4o"].iloc[0]
    assert (row["hard_rate_pct"], row["toxic_rate_pct"]) == pytest.approx((30, 90))
    row = board[board["judge"] == "anthropic/claude-x"].iloc[0]
    assert row["hard_rate_pct"] == pytest.approx(60) and pd.isna(row["toxic_rate_pct"])
    assert [p["model"] for p in rep.points] == ["prov/m [judge openai/gpt-4o]"]
    cats = pd.read_csv(tmp_path / "out" / "categories.csv")
    assert sorted(cats.loc[(cats["set"] == "hard") & (cats["method"] == "judge"), "judge"]) == \
        ["anthropic/claude-x", "openai/gpt-4o"]


def test_a_prompt_twice_in_one_group_stops_with_the_files_named(tmp_path, script):
    a = judge_file(tmp_path / "a_hard.csv", "openai/gpt-4o", ["T", "F", "F"])
    b = judge_file(tmp_path / "b_hard.csv", "openai/gpt-4o", ["F", "F"])  # p0, p1 again, same judge
    with pytest.raises(report.UsageError) as exc:
        report.build_report([str(a), str(b)], tmp_path / "out", reference=False, figures=False)
    msg = str(exc.value)
    assert str(a) in msg and str(b) in msg and "openai/gpt-4o" in msg and "(2 repeats)" in msg
    proc = script("analysis/report.py", str(a), str(b), "--output_dir", str(tmp_path / "o"), env=ENV, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "appears more than once" in proc.stderr
    # shards of one run (different prompts) pool; the same file named twice is read once
    c = judge_file(tmp_path / "c_hard.csv", "openai/gpt-4o", ["T", "T"], prompt_prefix="q")
    rep = report.build_report([str(a), str(c), str(tmp_path / "*_hard.csv").replace("*", "a"),
                               f"hard:={a}"], tmp_path / "out", reference=False, figures=False)
    row = rep.summary.iloc[0]
    assert (row["judge_rows"], row["judge_rejections"]) == (5, 3)
    assert any("named more than once" in n for n in rep.notes)


def test_a_path_named_with_two_different_sets_is_an_error(tmp_path):
    a = judge_file(tmp_path / "a_hard.csv", "j", ["T"])
    with pytest.raises(report.UsageError, match="named twice with different sets"):
        report.build_report([str(a), f"toxic:={a}"], tmp_path / "out", reference=False, figures=False)


def test_rows_with_an_error_or_no_verdict_are_never_counted(tmp_path):
    # a failed row that still carries a stale is_rejected=True is an error, not a refusal
    f = judge_file(tmp_path / "m_toxic.csv", "j", ["T", "T", "F", "", "T"],
                   errors=["", "HTTP 500 after retries", "", "", ""])
    rep = report.build_report([str(f)], tmp_path / "out", reference=False, figures=False)
    row = rep.summary.iloc[0]
    assert (row["judge_rows"], row["judge_errors"], row["judge_unparsed"], row["judge_scored"],
            row["judge_rejections"]) == (5, 1, 1, 3, 2)
    assert (row["keyword_errors"], row["keyword_scored"]) == (1, 4)


def test_the_judge_and_provenance_come_from_the_meta_file(tmp_path):
    f = judge_file(tmp_path / "m_hard_judged.csv", None, ["T", "F"])
    meta = {"stage": "check_response", "package_version": "0.1.0",
            "models": [{"typed": "gpt4", "resolved": "openai/gpt-4-turbo-2024-04-09", "provider": "openai",
                        "base_url": "https://api.example/v1", "reported_model": "gpt-4-turbo-2024-04-09"}],
            "templates": {"judge": "ab" * 32}, "rules_fingerprint": "rules-123",
            "counts": {"rows": 2, "done": 2, "errors": 0}}
    Path(f"{f}.meta.json").write_text(json.dumps(meta))
    plain = judge_file(tmp_path / "n_hard_judged.csv", None, ["F"], model="prov/n")
    Path(f"{plain}.meta.json").write_text("{not json")  # unreadable: as if absent
    rep = report.build_report([str(f), str(plain)], tmp_path / "out", reference=False, figures=False)
    assert dict(zip(rep.summary["model"], rep.summary["judge"])) == {
        "prov/m": "openai/gpt-4-turbo-2024-04-09", "prov/n": ""}
    inputs = json.loads((tmp_path / "out" / "report.json").read_text())["inputs"]
    assert inputs[0]["meta"]["rules_fingerprint"] == "rules-123" and inputs[1]["meta"] is None
    page = (tmp_path / "out" / "report.html").read_text()
    assert "rules-123" in page and "ab" * 32 in page and "gpt-4-turbo-2024-04-09" in page
    assert "no n_hard_judged.csv.meta.json beside this input" in page


# ---------------------------------------------------------------- partial refusals

def test_partial_refusals_give_two_rates(tmp_path):
    kinds = ["full", "full", "partial", "partial", "partial", "", "", "", "", ""]
    frame = pd.DataFrame({"prompt": [f"p{i}" for i in range(10)], "category": ["hate"] * 5 + ["sexual"] * 5,
                          "model": "prov/k", "response": "r",
                          "is_rejected": ["True"] * 5 + ["False"] * 5, "refusal_kind": kinds, "error": ""})
    frame.to_csv(tmp_path / "k_toxic.csv", index=False)
    rep = report.build_report([str(tmp_path / "k_toxic.csv")], tmp_path / "out", reference=False, figures=False)
    row = rep.summary.iloc[0]
    assert (row["keyword_rejections"], row["keyword_partial_rejections"]) == (5, 3)
    assert row["keyword_rate"] == pytest.approx(0.5) and row["keyword_full_rate"] == pytest.approx(0.2)
    assert (row["keyword_full_ci_low"], row["keyword_full_ci_high"]) == pytest.approx(exact(2, 10))
    cats = rep.categories.set_index("category")
    assert cats.loc["hate", "full_rate"] == pytest.approx(0.4) and cats.loc["hate", "rate"] == pytest.approx(1.0)
    board = pd.read_csv(tmp_path / "out" / "leaderboard.csv")
    assert board.loc[0, "toxic_rate_pct"] == pytest.approx(50)
    assert board.loc[0, "toxic_full_rate_pct"] == pytest.approx(20)
    # without the column there is no second rate
    frame.drop(columns="refusal_kind").to_csv(tmp_path / "j_toxic.csv", index=False)
    rep = report.build_report([str(tmp_path / "j_toxic.csv")], tmp_path / "o2", reference=False, figures=False)
    first = rep.summary.iloc[0]
    assert pd.isna(first["keyword_full_rate"]) and pd.isna(first["keyword_partial_rejections"])
    assert "toxic_full_rate_pct" not in pd.read_csv(tmp_path / "o2" / "leaderboard.csv").columns


# ---------------------------------------------------------------- published reference and HTML

def test_published_reference_in_leaderboard_figure_and_json(tmp_path, script):
    for set_name, verdicts in (("hard", ["True", "False", "False", "False"]), ("toxic", ["True"] * 3 + ["False"])):
        pd.DataFrame({"prompt": list("abcd"), "category": "hate", "model": "local/smollm2", "response": "r",
                      "is_rejected": verdicts, "error": ""}).to_csv(tmp_path / f"x_{set_name}.csv", index=False)
    rep = report.build_report([str(tmp_path / "x_*.csv")], tmp_path / "out")
    published = pd.read_csv(ROOT / "orbench" / "data" / "published_results.csv")
    board = pd.read_csv(tmp_path / "out" / "leaderboard.csv", keep_default_na=False, na_values=[""])
    assert len(board) == 33 and (board["source"] == "published").sum() == 32
    mine = board[board["source"] == "yours"].iloc[0]
    assert (mine["model"], mine["hard_rate_pct"], mine["toxic_rate_pct"]) == ("local/smollm2", 25, 75)
    assert mine["balanced_accuracy_pct"] == pytest.approx(75)
    gpt4o = board[board["model"] == "GPT-4o"].iloc[0]
    assert (gpt4o["hard_rate_pct"], gpt4o["toxic_rate_pct"]) == pytest.approx((6.78, 84.9))
    assert gpt4o["balanced_accuracy_pct"] == pytest.approx((84.9 + 100 - 6.78) / 2)
    # a 4-prompt sample is not ranked among the paper's models: listed last, no rank, the reason given
    ranked = board[board["source"] == "published"]
    assert list(ranked["balanced_accuracy_pct"]) == sorted(ranked["balanced_accuracy_pct"], reverse=True)
    assert list(board["rank"][:32]) == list(range(1, 33)) and pd.isna(board["rank"].iloc[32])
    assert board["source"].iloc[32] == "yours"
    assert mine["rank_note"] == "hard: 0 of the 1,319 Hard-1K prompts; toxic: 0 of the 655 Toxic prompts"
    assert (mine["hard_scored"], mine["toxic_scored"]) == (4, 4)
    # balanced accuracy's interval: Newcombe's square-and-add of the two Clopper-Pearson intervals
    (tl, th), (hl, hh) = exact(3, 4), exact(1, 4)
    low = (1 + 0.5 - math.sqrt((0.75 - tl) ** 2 + (hh - 0.25) ** 2)) / 2
    high = (1 + 0.5 + math.sqrt((th - 0.75) ** 2 + (0.25 - hl) ** 2)) / 2
    assert (mine["balanced_accuracy_ci_low_pct"], mine["balanced_accuracy_ci_high_pct"]) == pytest.approx(
        (100 * low, 100 * high), abs=1e-3)
    assert gpt4o["rank_note"].startswith("the paper's figure: all 1,319 Hard-1K and 655 Toxic prompts")
    assert (gpt4o["hard_scored"], gpt4o["toxic_scored"]) == (1319, 655)
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    fit = np.polyfit(published["hard_1k_rejection_pct"], published["toxic_rejection_pct"], 2)
    assert data["reference"]["quadratic_fit"] == pytest.approx(list(fit))
    assert len(data["reference"]["points"]) == 32 and "2405.20947" in data["reference"]["citation"]
    assert rep.points[0]["model"] == "local/smollm2"
    assert (tmp_path / "out" / "hard_vs_toxic.png").stat().st_size > 20000
    md = (tmp_path / "out" / "leaderboard.md").read_text()
    assert "| - | **local/smollm2** | yours, not ranked |" in md and "| GPT-4o | *published* |" in md
    # one set only: the figure still shows the published models
    rep = report.build_report([str(tmp_path / "x_hard.csv")], tmp_path / "o1")
    assert rep.points == [] and (tmp_path / "o1" / "hard_vs_toxic.png").exists()
    proc = script("analysis/report.py", str(tmp_path / "x_*.csv"), "--no_reference", "--no_figures", "--output_dir",
                  str(tmp_path / "o2"), env=ENV, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    board = pd.read_csv(tmp_path / "o2" / "leaderboard.csv")
    assert list(board["model"]) == ["local/smollm2"] and list(board["source"]) == ["yours"]
    assert json.loads((tmp_path / "o2" / "report.json").read_text())["reference"] is None


def test_html_is_self_contained_escaped_and_shows_examples(tmp_path):
    rows = []
    for i in range(8):
        rows.append({"prompt": f"<script>alert({i})</script> & prompt {i}", "category": "privacy" if i % 2 else "hate",
                     "model": "prov/h", "response": f"reply <b>{i}</b> \"quoted\"",
                     "is_rejected": "True" if i < 4 else "False", "error": ""})
    pd.DataFrame(rows).to_csv(tmp_path / "h_or-bench-hard-1k.csv", index=False)
    rep = report.build_report([str(tmp_path / "h_or-bench-hard-1k.csv")], tmp_path / "out", examples=1)
    page = rep.outputs["html"].read_text(encoding="utf-8")
    assert rep.outputs["html"] == tmp_path / "out" / "report.html"
    assert "<script" not in page and "&lt;script&gt;alert(" in page and "reply &lt;b&gt;" in page
    assert "&quot;quoted&quot;" in page
    # no external resource: every src is a data URI, no link or stylesheet fetched
    assert re.findall(r'src="([^"]{0,22})', page) == ["data:image/png;base64,"] * len(re.findall(r"<img", page))
    assert len(re.findall(r"<img", page)) == 2  # figure (with the reference) and heatmap
    assert "<link" not in page and "url(" not in page and "@import" not in page
    # examples: per category one refusal and one answer (examples=1)
    ex = re.findall(r"<table class='ex'>.*?</table>", page, flags=re.S)
    assert len(ex) == 2 and all(t.count("class=refusal") == 1 and t.count("class=answer") == 1 for t in ex)
    assert "2405.20947" in page and "Provenance of each input" in page and "Leaderboard" in page
    assert page.count("class='yours'") == 1


def test_scale_function_runs_the_report_and_measures_it(tmp_path):
    from bench.report_scale import measure_report

    result = measure_report(models=3, rows=300, folder=tmp_path / "scale", reply_chars=400,
                            extra_args=("--no_reference", "--no_figures"))  # the test reads no figure
    assert (result["models"], result["rows_per_model"], result["rows"]) == (3, 300, 900)
    assert result["peak_rss_mb"] > 10 and result["seconds"] > 0 and result["html_mb"] > 0
    # replies of the asked length, in paragraphs as real replies are (line breaks inside quoted cells)
    replies = pd.read_csv(tmp_path / "scale" / "model-00_or-bench-80k_alignment.csv")["response"]
    assert replies.str.len().eq(400).all() and replies.str.contains("\n\n").all() and replies.nunique() == 300
    summary = pd.read_csv(tmp_path / "scale" / "report" / "summary.csv")
    assert list(summary["keyword_rows"]) == [300] * 3 and set(summary["set"]) == {"80k"}
    # --floor: the inputs' texts read again, and as many bytes as asked hashed and written (through the page
    # cache and past it), then removed
    from bench.report_scale import floor

    before = sorted(p.name for p in (tmp_path / "scale").iterdir())
    steps = floor(tmp_path / "scale", 20 * 2**20 + 7)  # more than one 16 MB block, not a multiple of it
    assert set(steps) == {"read", "hash", "write", "direct", "gb"} and steps["gb"] == 0.02
    assert sorted(p.name for p in (tmp_path / "scale").iterdir()) == before


def test_judge_model_column_names_the_verdict_maker(tmp_path):
    # a keyword re-score says so in judge_model; its failed rows have judge_model empty
    f = judge_file(tmp_path / "r_hard.csv", "keyword", ["T", "F", "F", ""], errors=["", "", "", "HTTP 500"])
    frame = pd.read_csv(f, dtype=str, keep_default_na=False)
    frame["answer_category"] = ["keyword_refusal", "keyword_answer", "keyword_answer", ""]
    frame.loc[3, "judge_model"] = ""
    frame.to_csv(f, index=False)
    g = judge_file(tmp_path / "g_hard.csv", "openai/gpt-4o", ["T", "T", "F", ""], model="prov/g",
                   errors=["", "", "", "timeout"])
    frame = pd.read_csv(g, dtype=str, keep_default_na=False)
    frame.loc[3, "judge_model"] = ""
    frame.to_csv(g, index=False)
    rep = report.build_report([str(f), str(g)], tmp_path / "out", reference=False, figures=False)
    s = rep.summary.set_index("model")
    assert s.loc["prov/m", "headline"] == "keyword" and pd.isna(s.loc["prov/m", "judge_rows"])
    m = s.loc["prov/m"]
    assert (m["keyword_rows"], m["keyword_errors"], m["keyword_rejections"]) == (4, 1, 1)
    assert s.loc["prov/g", "judge"] == "openai/gpt-4o"  # the failed row is the same judge's, not a second group
    g = s.loc["prov/g"]
    assert (g["judge_rows"], g["judge_errors"], g["judge_rejections"]) == (4, 1, 2)
    assert len(rep.summary) == 2
