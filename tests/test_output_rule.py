"""One default-output rule for every stage: ``./<input stem>[_<model>]_<stage>.csv``, no leftovers."""

from __future__ import annotations

import pandas as pd


def test_stages_4_and_5_follow_one_rule_and_leave_no_lock(env, fake, script, tmp_path):
    fake.add_rule(text="I'm sorry, but I can't help with that.")
    pd.DataFrame({"prompt": ["a", "b"], "category": ["hate", "privacy"]}).to_csv(tmp_path / "hard.csv", index=False)
    proc = script("alignment_checker/check_alignment.py", "--model", "openai/gpt-4o", "--input_file", "hard.csv",
                  "--quiet", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(tmp_path / "hard_openai_gpt-4o_alignment.csv")
    proc = script("response_checker/judge_responses.py", "--check_model", "keyword", "--input_file",
                  "hard_openai_gpt-4o_alignment.csv", "--quiet", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(tmp_path / "hard_openai_gpt-4o_alignment_keyword_judged.csv")
    proc = script("moderator/moderate.py", "--moderator_model", "openai/gpt-4o", "--input_file_path", "hard.csv",
                  "--column", "prompt", "--quiet", env=env, cwd=tmp_path)
    assert proc.stdout.strip() == str(tmp_path / "hard_openai_gpt-4o_moderated_prompt.csv"), proc.stderr
    # everything in the current folder, no sub-folder, no lock file left
    assert not [p for p in tmp_path.iterdir() if p.is_dir() and p.name != "cache"]
    assert not list(tmp_path.glob("*.lock"))
