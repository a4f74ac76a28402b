"""A mistyped flag on any script (issue 54): exit 2 and one line naming the flag it was meant to be,
as the Python API names the closest setting; a mistyped flag behind a missing required one is named
too."""

import pytest

SCRIPTS = [
    ("alignment_checker/check_alignment.py", ["--model", "openai/m", "--input_file", "a.csv", "--concurency", "3"],
     "--concurency 3; did you mean --concurrency?"),
    ("response_checker/judge_responses.py", ["--check_model", "keyword", "--input_file", "a.csv", "--concurency=3"],
     "--concurency=3; did you mean --concurrency?"),
    ("moderator/moderate.py", ["--moderator_model", "gpt4", "--input_file_path", "a.csv", "--concurency", "3"],
     "--concurency 3; did you mean --concurrency?"),
    ("rewritter/rewrite.py", ["--input_file", "a.csv", "--concurency", "3"], "did you mean --concurrency?"),
    ("toxic_prompt_generator/generate_seeds.py", ["--category", "hate", "--concurency", "3"],
     "did you mean --concurrency?"),
    ("alignment_checker/gpt3_4_alignment_checker.py", ["--concurency", "3"],
     "the following arguments are required: --model, --input_file; unrecognized arguments: --concurency; "
     "did you mean --concurrency?"),
    ("analysis/report.py", ["a.csv", "--output_dri", "x"], "--output_dri x; did you mean --output_dir?"),
    ("analysis/leaderboard.py", ["a", "--output_dri", "x"], "did you mean --output_dir?"),
    ("analysis/calibrate.py", ["--check_model", "keyword", "--concurency", "3"], "did you mean --concurrency?"),
    ("analysis/audit.py", ["sample", "--kind", "verdict", "--output_dir", "x", "--sise", "3"],
     "--sise; did you mean --size?"),
]


@pytest.mark.parametrize(("path", "args", "said"), SCRIPTS, ids=[s[0] for s in SCRIPTS])
def test_a_mistyped_flag_names_the_flag_it_was_meant_to_be(script, env, tmp_path, path, args, said):
    proc = script(path, *args, env=env)
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: ") and said in line and line.endswith("(see --help)")
    assert not any(tmp_path.glob("*.csv"))  # nothing written


def test_the_sample_command_names_a_mistyped_flag_too(capsys, tmp_path, monkeypatch):
    from orbench.benchmark import datasets

    monkeypatch.chdir(tmp_path)
    assert datasets.main(["or-bench-hard-1k", "--per_categry", "2"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: the following arguments are required: --per_category; unrecognized arguments: --per_categry; "
        "did you mean --per_category? (see --help)")
    assert not any(tmp_path.iterdir())
