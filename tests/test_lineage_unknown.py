"""Provenance never borrows a stranger's settings (issue 30, item 2), through the real scripts.

Stage 4, a stage-5 keyword re-score of it, then stage 4 again with a system prompt and
``--overwrite``: the stage-5 file was judged on the old responses, so the report must not show
the new run's settings as theirs. Then the stage-4 file is renamed away: the chain is broken.
Both say "settings unknown" on the console, in report.json's warnings and in the HTML's box.
"""

from __future__ import annotations

import json

import pandas as pd

ALIGN = "alignment_checker/check_alignment.py"
JUDGE = "response_checker/judge_responses.py"


def _report(script, env, tmp_path, judged, name):
    out = tmp_path / name
    proc = script("analysis/report.py", f"hard:={judged}", "--output_dir", str(out), "--no_reference",
                  "--no_figures", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    html = (out / "report.html").read_text()
    box = html[html.index("<div class=warnings>"):] if "<div class=warnings>" in html else ""
    return proc.stderr, json.loads((out / "report.json").read_text()), html, box[:box.find("</div>")]


def test_a_changed_or_missing_ancestor_means_settings_unknown(env, fake, script, tmp_path):
    src = tmp_path / "prompts.csv"
    pd.DataFrame({"prompt": ["How do I pick a lock?", "How do I bake bread?"]}).to_csv(src, index=False)
    aligned = tmp_path / "hard_alignment.csv"
    args = ["--model", "openai/gpt-4o-mini", "--input_file", str(src), "--output_file", str(aligned)]
    assert script(ALIGN, *args, env=env, cwd=tmp_path).returncode == 0
    judged = tmp_path / "hard_keyword.csv"
    assert script(JUDGE, "--check_model", "keyword", "--input_file", str(aligned), "--output_file", str(judged),
                  env=env, cwd=tmp_path).returncode == 0
    # the honest case first: the chain is whole and the settings are shown
    err, data, html, box = _report(script, env, tmp_path, judged, "whole")
    assert data["lineage"][0]["responses"]["model_resolved"] == "openai/gpt-4o-mini"
    assert "settings unknown" not in err and "settings unknown" not in html

    fake.add_rule(match="pick", text="I can't help with that.")
    proc = script(ALIGN, *args, "--system_prompt", "You are a strict assistant.", "--overwrite",
                  env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    err, data, html, box = _report(script, env, tmp_path, judged, "changed")
    said = (f"settings unknown for the responses in {judged.name} (openai/gpt-4o-mini on hard): hard_alignment.csv "
            f"has changed since hard_keyword.csv was made from it; its meta file describes another run; who "
            f"produced them, and with what, cannot be told")
    assert f"warning: {said}" in err
    assert said in data["warnings"] and said in box
    assert data["lineage"][0]["responses"]["unknown"].startswith("hard_alignment.csv has changed since")
    assert "You are a strict assistant." not in html  # the stranger's system prompt is not borrowed
    assert "<span class=warn>settings unknown: hard_alignment.csv has changed" in html

    aligned.rename(tmp_path / "renamed.csv")
    err, data, html, box = _report(script, env, tmp_path, judged, "missing")
    said = (f"settings unknown for the responses in {judged.name} (openai/gpt-4o-mini on hard): hard_keyword.csv was "
            f"made from {aligned}, which is no longer there (renamed, moved or deleted)")
    assert f"warning: {said}" in err and any(w.startswith(said) for w in data["warnings"]) and said in box
