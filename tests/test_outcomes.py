"""A judge that decides nothing is loud (issue 30, item 3), through the real scripts.

Every stage's summary line states its outcomes; more than 5% of rows with no verdict warns in
the stage and in the report; cut-off replies are counted whoever judged them. The exit codes
keep their meaning (0: every row done). The replies come from the in-process mock provider
(``mock/<name>``): what is tested is the stages' counting, not the wire.
"""

from __future__ import annotations

import json

import pandas as pd

ALIGN = "alignment_checker/check_alignment.py"
JUDGE = "response_checker/judge_responses.py"


def _prompts(path, n: int, cut: int):
    rows = [{"prompt": f"{'CUT' if i < cut else 'FULL'} prompt {i}", "category": "privacy"} for i in range(n)]
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_an_all_unparsed_judge_is_counted_warned_and_the_cut_offs_stay(env, mock, script, tmp_path):
    """The issue's afternoon: replies 90% cut off at max_tokens, then a judge whose every reply is
    unparsed. Stage 5 says so (exit 0: every row is done), and the report keeps both warnings."""
    mock.add(match="Classify", text="This response seems fine to me.")  # no [[class]]: unparsed
    mock.add(match="CUT", text="Sure, here is the start of a long answer", finish_reason="length")
    mock.add(match="FULL", text="Sure, here is a complete answer.")
    sample = _prompts(tmp_path / "or-bench-hard-1k_sample.csv", 10, 9)
    aligned = tmp_path / "hard_m_alignment.csv"
    proc = script(ALIGN, "--model", "mock/gpt-4o-mini", "--input_file", str(sample), "--max_tokens", "48",
                  "--output_file", str(aligned), env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "0 refusals (0 provider blocks), 10 answers, 0 empty responses, 0 empty prompts skipped, 9 cut off" \
        in proc.stderr
    assert "warning: 9 of 10 (90%) replies were cut off at max_tokens 48 (finish_reason length)" in proc.stderr

    judged = tmp_path / "hard_m_judged.csv"
    proc = script(JUDGE, "--check_model", "mock/gpt-4o", "--input_file", str(aligned), "--output_file",
                  str(judged), env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr  # every row is done: the exit code keeps its meaning
    summary = proc.stderr.splitlines()[0]
    assert "10 new, 0 resumed, 0 errors" in summary
    assert "0 direct_answer, 0 direct_refusal, 0 indirect_refusal, 10 unparsed; 9 responses cut off" in summary
    assert "warning: 10 of 10 (100%) judge replies were unparsed" in proc.stderr
    meta = json.loads((tmp_path / "hard_m_judged.csv.meta.json").read_text())
    assert meta["outcomes"]["counts"]["unparsed"] == 10 and meta["outcomes"]["counts"]["responses_cut_off"] == 9
    assert len(meta["outcomes"]["warnings"]) == 2

    out = tmp_path / "rep"
    proc = script("analysis/report.py", f"hard:={judged}", "--output_dir", str(out), "--no_figures", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    warnings = json.loads((out / "report.json").read_text())["warnings"]
    cut = "9 of 10 replies (90%) of mock/gpt-4o-mini on hard were cut off at max_tokens 48"
    none = "10 of 10 rows (100%) of mock/gpt-4o-mini on hard have no verdict from the judge mock/gpt-4o"
    assert any(w.startswith(cut) for w in warnings), warnings
    assert any(w.startswith(none) for w in warnings), warnings
    assert f"warning: {cut}" in proc.stderr and f"warning: {none}" in proc.stderr
    html = (out / "report.html").read_text()
    box = html[html.index("<div class=warnings>"):]
    box = box[:box.index("</div>")]
    assert cut in box and none in box
    assert "of 10 replies<br><span class=warn>9 cut off (90%)</span>" in html
    assert "of 0" not in html


def test_stage_4_states_refusals_provider_blocks_and_samples(env, mock, script, tmp_path):
    mock.add(match="BLOCK", block=True)
    mock.add(match="NO", text="I'm sorry, but I can't help with that.")
    src = tmp_path / "in.csv"
    pd.DataFrame({"prompt": ["BLOCK this", "NO thanks", "fine one", ""]}).to_csv(src, index=False)
    proc = script(ALIGN, "--model", "mock/gpt-4o-mini", "--input_file", str(src), "--temperature", "0.7",
                  "--samples", "2", "--output_file", "out.csv", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert ("4 prompts x 2 samples = 8 rows: 4 refusals (2 provider blocks), 2 answers, 0 empty responses, "
            "2 empty prompts skipped, 0 cut off") in proc.stderr
    assert "warning" not in proc.stderr
    counts = json.loads((tmp_path / "out.csv.meta.json").read_text())["outcomes"]["counts"]
    assert counts == {"refusals": 4, "keyword_refusals": 2, "provider_blocks": 2, "answers": 2,
                      "empty_responses": 0, "skipped_empty_prompts": 2, "cut_off": 0}


def test_stage_3_states_safe_toxic_undecided_skipped_and_warns(env, mock, script, tmp_path):
    mock.add(match="SAFE", text="[[11. None of the above]]")
    mock.add(match="BAD", text="[[7. illegal]]")
    mock.add(match="Decide", text="I cannot decide.")  # the rest: unparsed, so undecided
    src = tmp_path / "in.csv"
    pd.DataFrame({"prompt": ["SAFE a", "BAD b", "odd c", "odd d", ""]}).to_csv(src, index=False)
    proc = script("moderator/moderate.py", "--moderator_model", "mock/gpt-4o", "--input_file_path", str(src),
                  "--output_file", "out.csv", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "1 safe, 1 toxic, 2 undecided, 1 skipped (empty); 2 unparsed votes" in proc.stderr
    assert "warning: 2 of 4 (50%) rows are undecided (no strict majority of the moderators" in proc.stderr


def test_an_empty_prompt_skipped_in_stage_4_stays_skipped_in_stage_5(env, mock, script, tmp_path):
    src = tmp_path / "in.csv"
    pd.DataFrame({"prompt": ["How do I bake bread?", ""]}).to_csv(src, index=False)
    assert script(ALIGN, "--model", "mock/gpt-4o-mini", "--input_file", str(src), "--output_file", "a.csv",
                  env=env, cwd=tmp_path).returncode == 0
    mock.add(match="Classify", text="[[direct_answer]]")
    for judge in ("mock/gpt-4o", "keyword"):
        sent = len(mock.requests)
        proc = script(JUDGE, "--check_model", judge, "--input_file", "a.csv", "--output_file", f"{judge[:6]}.csv",
                      env=env, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        out = pd.read_csv(tmp_path / f"{judge[:6]}.csv", dtype=str, keep_default_na=False)
        assert out.loc[1, "answer_category"] == "skipped_empty", judge
        assert out.loc[1, "is_rejected"] == "" and out.loc[1, "keyword_is_rejected"] == ""
        assert out.loc[1, "answer_type_response"] == "not judged: the prompt is empty (stage 4 skipped it)"
        assert "1 skipped_empty" in proc.stderr and "empty_response" not in proc.stderr
        assert len(mock.requests) - sent == (1 if judge != "keyword" else 0)  # the skipped row is not judged
