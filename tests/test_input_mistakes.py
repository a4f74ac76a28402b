"""Mistakes people make with their input files get the right words, in every stage and the report.

Each case runs the real script (in process) on real files: exit 2, one line naming the file and
what to do, nothing written.
"""

from __future__ import annotations

import zipfile

import pandas as pd
import pytest

STAGE4 = "alignment_checker/check_alignment.py"
STAGE5 = "response_checker/judge_responses.py"
REPORT = "analysis/report.py"


def _xlsx(path):
    """A workbook container as Excel writes it (a zip with the xl/ part and its content types)."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("[Content_Types].xml", '<?xml version="1.0"?><Types/>')
        archive.writestr("xl/workbook.xml", '<?xml version="1.0"?><workbook/>')
        archive.writestr("xl/worksheets/sheet1.xml", '<?xml version="1.0"?><worksheet/>')
    return path


def _one_line(proc, *needles):
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr


def test_a_name_that_is_almost_a_set_is_named(env, script, tmp_path):
    proc = script(STAGE4, "--model", "openai/gpt-4o", "--input_file", "or-bench-hard1k", env=env, cwd=tmp_path)
    _one_line(proc, "input file not found: or-bench-hard1k (did you mean 'or-bench-hard-1k', a bundled set name?)")
    pd.DataFrame({"prompt": ["p"]}).to_csv(tmp_path / "prompts.csv", index=False)
    proc = script(STAGE4, "--model", "openai/gpt-4o", "--input_file", "promts.csv", env=env, cwd=tmp_path)
    _one_line(proc, "(did you mean 'prompts.csv' in the same folder?)")


@pytest.mark.parametrize("tool", [STAGE4, STAGE5, REPORT])
def test_an_excel_file_is_recognised_by_its_bytes(env, script, tmp_path, tool):
    book = _xlsx(tmp_path / "results.csv")  # named .csv, but a workbook inside
    args = {STAGE4: ["--model", "openai/gpt-4o", "--input_file", str(book)],
            STAGE5: ["--check_model", "keyword", "--input_file", str(book)],
            REPORT: [f"hard:={book}", "--output_dir", str(tmp_path / "out")]}[tool]
    proc = script(tool, *args, env=env, cwd=tmp_path)
    _one_line(proc, f"{book} is an Excel workbook, not a CSV file", "export it as CSV")
    assert not (tmp_path / "out").exists()
    old = tmp_path / "old.xls"
    old.write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 504)
    proc = script(STAGE4, "--model", "openai/gpt-4o", "--input_file", str(old), env=env, cwd=tmp_path)
    _one_line(proc, "old.xls is an Excel workbook")


def test_a_semicolon_separated_file_is_read_as_it_is(env, fake, script, tmp_path):
    fake.add_rule(text="I'm sorry, but I can't help with that.")
    (tmp_path / "semi.csv").write_text('prompt;category\n"a; prompt";privacy\nanother;hate\n', encoding="utf-8")
    proc = script(STAGE4, "--model", "openai/gpt-4o", "--input_file", "semi.csv", "--output_file", "out.csv",
                  "--quiet", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = pd.read_csv(tmp_path / "out.csv", dtype=str, keep_default_na=False)
    assert list(out["prompt"]) == ["a; prompt", "another"] and list(out["category"]) == ["privacy", "hate"]
    # the report reads the same kind of file
    out.to_csv(tmp_path / "semi_out.csv", sep=";", index=False)
    proc = script(REPORT, "hard:=semi_out.csv", "--output_dir", "rep", "--no_reference", "--no_figures", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert int(pd.read_csv(tmp_path / "rep" / "summary.csv")["keyword_rejections"].iloc[0]) == 2


def test_a_wrong_separator_flag_says_what_to_pass(env, script, tmp_path):
    (tmp_path / "bad.csv").write_text("prompt,category\na,b\nc,d,e,f\n", encoding="utf-8")
    proc = script(STAGE4, "--model", "openai/gpt-4o", "--input_file", "bad.csv", env=env, cwd=tmp_path)
    _one_line(proc, "cannot parse input file bad.csv as comma-separated", "pass it with --sep")
    proc = script(STAGE4, "--model", "openai/gpt-4o", "--input_file", "bad.csv", "--sep", ";;", env=env,
                  cwd=tmp_path)
    _one_line(proc, "--sep must be one character")


def test_a_column_named_almost_right_is_suggested(env, script, tmp_path):
    pd.DataFrame({"Prompt": ["p"], "category": ["x"]}).to_csv(tmp_path / "cap.csv", index=False)
    proc = script(STAGE4, "--model", "openai/gpt-4o", "--input_file", "cap.csv", env=env, cwd=tmp_path)
    _one_line(proc, "has no column 'prompt' (did you mean 'Prompt'?) (it has: Prompt, category)")
    pd.DataFrame({"prompt": ["p"], "respnse": ["r"]}).to_csv(tmp_path / "r.csv", index=False)
    proc = script(STAGE5, "--check_model", "keyword", "--input_file", "r.csv", env=env, cwd=tmp_path)
    _one_line(proc, "has no column 'response' (did you mean 'respnse'?)")
