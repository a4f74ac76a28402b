"""The report tells the whole truth: provenance chains, cut-off replies, set labels, honest rows.

Stage 4 runs against the loopback fake provider through the real SDK, stage 5 re-scores its
output, and the report reads the stage-5 file: what it says about stage 4 comes from following
the meta files back.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from orbench.analysis.report import build as report
from orbench.analysis.report import lineage
from orbench.analysis.stats import balanced_accuracy_interval


def _write(path, rows):
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def _pipeline(env, fake, script, tmp_path, *, cut: int, total: int, set_name: str = "or-bench-hard-1k"):
    """Stage 4 (``cut`` of ``total`` replies end with finish_reason length) then a stage-5 re-score."""
    fake.add_rule(match="CUT", text="Sure, here is the start of a long answer", finish_reason="length")
    fake.add_rule(match="FULL", text="Sure, here is a complete answer.")
    rows = [{"prompt": f"{'CUT' if i < cut else 'FULL'} prompt {i}", "category": "privacy"} for i in range(total)]
    sample = _write(tmp_path / f"{set_name}_sample.csv", rows)
    aligned = tmp_path / f"{set_name}_m_alignment.csv"
    proc = script("alignment_checker/check_alignment.py", "--model", "openai/gpt-4o-mini", "--input_file",
                  str(sample), "--max_tokens", "48", "--system_prompt", "Be brief.", "--temperature", "0",
                  "--output_file", str(aligned), "--quiet", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rescored = tmp_path / f"{set_name}_m_keyword.csv"
    proc = script("response_checker/judge_responses.py", "--check_model", "keyword", "--input_file",
                  str(aligned), "--output_file", str(rescored), "--quiet", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return sample, aligned, rescored


def test_provenance_follows_the_chain_and_cut_off_replies_are_counted(env, fake, script, tmp_path):
    sample, aligned, rescored = _pipeline(env, fake, script, tmp_path, cut=3, total=10)
    chain = lineage.read_chain(str(rescored))
    assert [link["meta"]["stage"] for link in chain] == ["check_response", "check_alignment"]
    assert [link["changed"] for link in chain] == [False, False]
    # the keyword re-score calls no model: it records no sampling settings of its own
    assert (chain[0]["meta"]["settings"]["max_tokens"], chain[0]["meta"]["settings"]["temperature"]) == (None, None)
    info = lineage.summarise(str(rescored))
    resp = info["responses"]
    assert (resp["model_resolved"], resp["max_tokens"], resp["temperature"], resp["system_prompt"]) == (
        "openai/gpt-4o-mini", 48, 0.0, "Be brief.")
    assert resp["model_reported"] == "gpt-4o-mini" and resp["rules_fingerprint"]
    assert info["verdicts"]["kind"] == "keyword" and info["verdicts"]["stage"] == "check_response"
    assert info["steps"] == [("check_response", rescored.name, False), ("check_alignment", aligned.name, False),
                             ("source", sample.name, False)]

    proc = script("analysis/report.py", f"hard:={rescored}", "--output_dir", str(tmp_path / "rep"), "--no_figures", env=env,
                  cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    summary = pd.read_csv(tmp_path / "rep" / "summary.csv")
    assert (summary["keyword_truncated"].iloc[0], summary["keyword_scored"].iloc[0]) == (3, 10)
    assert ("warning: 3 of 10 replies (30%) of openai/gpt-4o-mini on hard were cut off at max_tokens 48"
            in proc.stderr)
    page = (tmp_path / "rep" / "report.html").read_text()
    assert "Read these rates with care" in page and "3 cut off (30%)" in page
    assert "Who produced the responses and who decided the verdicts" in page
    # stage 4's settings appear although the report read only the stage-5 file
    assert "max tokens <code>48</code>" in page and "<code>Be brief.</code>" in page
    assert f"its input (check_alignment): {aligned.name}" in page
    data = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert data["lineage"][0]["responses"]["max_tokens"] == 48 and len(data["warnings"]) == 1


def test_a_few_cut_off_replies_are_shown_without_a_warning(env, fake, script, tmp_path):
    _, _, rescored = _pipeline(env, fake, script, tmp_path, cut=1, total=20)
    rep = report.build_report([f"hard:={rescored}"], tmp_path / "rep", reference=False, figures=False)
    assert not rep.warnings and int(rep.summary["keyword_truncated"].iloc[0]) == 1
    assert "1 cut off (5%)" in rep.outputs["html"].read_text()


def test_a_changed_ancestor_is_marked(env, fake, script, tmp_path):
    _, aligned, rescored = _pipeline(env, fake, script, tmp_path, cut=0, total=2)
    aligned.write_text(aligned.read_text() + "")  # same bytes: not changed
    assert lineage.read_chain(str(rescored))[1]["changed"] is False
    with open(aligned, "a") as handle:
        handle.write("\n")
    assert lineage.read_chain(str(rescored))[1]["changed"] is True


def test_without_finish_reason_cut_offs_are_unknown_not_zero(tmp_path):
    f = _write(tmp_path / "x_hard.csv", [{"prompt": "p", "model": "m", "response": "r", "is_rejected": "False"}])
    rep = report.build_report([str(f)], tmp_path / "rep", reference=False, figures=False)
    assert pd.isna(rep.summary["keyword_truncated"].iloc[0])
    assert "cut-offs unknown (no finish_reason)" in rep.outputs["html"].read_text()


@pytest.mark.parametrize("reason", ["length", "max_tokens", "MAX_TOKENS", "max_output_tokens"])
def test_every_providers_cut_off_word_counts(reason):
    assert lineage.is_truncated(reason) and not lineage.is_truncated("stop")
    assert not lineage.is_truncated("end_turn") and not lineage.is_truncated("")


# ---------------------------------------------------------------- set labels

def test_an_unknown_set_label_stops_the_report_naming_the_known_ones(tmp_path, script):
    f = _write(tmp_path / "file.csv", [{"prompt": "p", "model": "m", "response": "r", "is_rejected": "True"}])
    proc = script("analysis/report.py", f"hrad:={f}", "--output_dir", str(tmp_path / "out"), cwd=tmp_path,
                  env={"PATH": "/usr/bin"})
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "unknown set 'hrad'" in proc.stderr and "(did you mean 'hard'?)" in proc.stderr
    assert "hard (or-bench-hard-1k), toxic (or-bench-toxic), 80k (or-bench-80k)" in proc.stderr
    assert "--custom_set hrad" in proc.stderr and not (tmp_path / "out").exists()
    proc = script("analysis/report.py", str(f), "--set", "toxc", "--output_dir", str(tmp_path / "out"),
                  cwd=tmp_path, env={"PATH": "/usr/bin"})
    assert proc.returncode == 2 and "unknown set 'toxc' in --set (did you mean 'toxic'?)" in proc.stderr
    # declared on purpose: a set of one's own
    proc = script("analysis/report.py", f"mine:={f}", "--custom_set", "mine", "--output_dir",
                  str(tmp_path / "out"), "--no_reference", "--no_figures", cwd=tmp_path, env={"PATH": "/usr/bin"})
    assert proc.returncode == 0, proc.stderr
    assert list(pd.read_csv(tmp_path / "out" / "summary.csv")["set"]) == ["mine"]
    # the long names are the short ones
    rep = report.build_report([f"or-bench-hard-1k:={f}"], tmp_path / "o2", reference=False, figures=False)
    assert list(rep.summary["set"]) == ["hard"]


# ---------------------------------------------------------------- honest comparisons

def test_balanced_accuracy_interval_matches_statsmodels():
    sm = pytest.importorskip("statsmodels.stats.proportion")
    for tk, tn, hk, hn in ((15, 20, 2, 20), (655, 655, 0, 1319), (1, 2, 1, 2), (300, 655, 900, 1319)):
        ba, lo, hi = balanced_accuracy_interval(tk, tn, hk, hn)
        low, high = sm.confint_proportions_2indep(tk, tn, hk, hn, method="newcomb", compare="diff")
        assert ba == pytest.approx((1 + tk / tn - hk / hn) / 2)
        assert (lo, hi) == pytest.approx(((1 + low) / 2, (1 + high) / 2), abs=1e-9)


def test_a_complete_run_is_ranked_among_the_published_models(tmp_path):
    from orbench.benchmark.sets import data_path

    files = []
    for label, name, refuse in (("hard", "or-bench-hard-1k", 0.1), ("toxic", "or-bench-toxic", 0.9)):
        prompts = pd.read_csv(data_path(f"{name}.csv"), dtype=str, keep_default_na=False)
        n = len(prompts)
        k = int(refuse * n)
        prompts = prompts.assign(model="prov/full", response="r", finish_reason="stop",
                                 is_rejected=["True"] * k + ["False"] * (n - k), error="")
        files.append(_write(tmp_path / f"full_{label}.csv", prompts))
    rep = report.build_report([str(f) for f in files], tmp_path / "out", figures=False)
    mine = rep.leaderboard[rep.leaderboard["source"] == "yours"].iloc[0]
    assert not pd.isna(mine["rank"]) and mine["rank_note"] == ""
    assert (mine["hard_covered"], mine["toxic_covered"]) == (1319, 655)
    assert list(rep.leaderboard["rank"]) == list(range(1, 34))
    # one error row makes it incomplete
    broken = pd.read_csv(files[1], dtype=str, keep_default_na=False)
    broken.loc[0, "error"] = "check_alignment: HTTP 500"
    broken.to_csv(files[1], index=False)
    rep = report.build_report([str(f) for f in files], tmp_path / "o2", figures=False)
    mine = rep.leaderboard[rep.leaderboard["source"] == "yours"].iloc[0]
    assert pd.isna(mine["rank"]) and mine["rank_note"] == "toxic: 654 of the 655 Toxic prompts, 1 error rows"


def test_heatmap_greys_cells_with_few_prompts(tmp_path):
    rows = [{"prompt": f"p{i}", "category": "hate" if i < 2 else "privacy", "model": "m", "response": "r",
             "is_rejected": "True" if i % 2 else "False"} for i in range(14)]
    f = _write(tmp_path / "x_hard.csv", rows)
    rep = report.build_report([str(f)], tmp_path / "out", reference=False)
    assert rep.outputs["heatmap"].stat().st_size > 5000
    cats = rep.categories.set_index("category")["scored"].to_dict()
    assert cats == {"hate": 2, "privacy": 12}
    assert "cells with n &lt; 10 are grey" in rep.outputs["html"].read_text()
    from orbench.analysis.report.plots import heatmap_grid

    cells = rep.categories.assign(_m=rep.categories["model"])
    grid, counts, few = heatmap_grid(cells, ["hard"])
    assert list(grid.columns) == ["hate", "privacy"] and counts.to_numpy().tolist() == [[2, 12]]
    assert few.tolist() == [[True, False]] and grid.to_numpy().tolist() == [[50.0, 50.0]]


def test_an_llm_judges_verdicts_name_the_judge_and_the_stage_4_run(env, fake, script, tmp_path):
    fake.add_rule(model="judge-x", text="The reply declines. [[2]]")
    fake.add_rule(text="I'm sorry, I can't help with that.")
    _write(tmp_path / "or-bench-toxic_sample.csv", [{"prompt": f"q{i}", "category": "hate"} for i in range(3)])
    proc = script("alignment_checker/check_alignment.py", "--model", "openai/gpt-4o", "--input_file",
                  "or-bench-toxic_sample.csv", "--quiet", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    stage4 = "or-bench-toxic_sample_openai_gpt-4o_alignment.csv"
    proc = script("response_checker/judge_responses.py", "--check_model", "openai/judge-x", "--input_file", stage4,
                  "--quiet", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    judged = tmp_path / "or-bench-toxic_sample_openai_gpt-4o_alignment_openai_judge-x_judged.csv"
    rep = report.build_report([str(judged)], tmp_path / "rep", reference=False, figures=False)
    [record] = rep.lineage
    assert (record["set"], record["model"]) == ("toxic", "openai/gpt-4o")
    assert record["verdicts"]["kind"] == "judge" and record["verdicts"]["judge"] == "openai/judge-x"
    assert record["verdicts"]["max_tokens"] == 1000 and len(record["verdicts"]["templates"]["judge"]) == 64
    assert record["responses"]["model_resolved"] == "openai/gpt-4o" and record["responses"]["max_tokens"] == 1000
    assert [s[0] for s in record["steps"]] == ["check_response", "check_alignment", "source"]
    page = rep.outputs["html"].read_text()
    assert "LLM judge <code>openai/judge-x</code>" in page and "0 cut off (0%)" in page
    assert int(rep.summary["judge_rejections"].iloc[0]) == 3


def test_repeated_samples_count_each_prompt_of_the_set_once(tmp_path):
    from orbench.benchmark.sets import data_path

    files = []
    for label, name in (("hard", "or-bench-hard-1k"), ("toxic", "or-bench-toxic")):
        prompts = pd.read_csv(data_path(f"{name}.csv"), dtype=str, keep_default_na=False).head(700)
        twice = pd.concat([prompts.assign(sample="0"), prompts.assign(sample="1")], ignore_index=True)
        twice = twice.assign(model="prov/s", response="r", finish_reason="stop", is_rejected="False", error="")
        files.append(_write(tmp_path / f"s_{label}.csv", twice))
    rep = report.build_report([str(f) for f in files], tmp_path / "out", figures=False)
    mine = rep.leaderboard[rep.leaderboard["source"] == "yours"].iloc[0]
    # 2 x 700 rows cover 700 of the 1,319 hard prompts, not 1,400: not ranked
    assert (mine["hard_covered"], mine["toxic_covered"]) == (700, 655)
    assert pd.isna(mine["rank"]) and mine["rank_note"] == "hard: 700 of the 1,319 Hard-1K prompts"
