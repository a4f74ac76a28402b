"""Progress that reads well in logs: plain lines when stderr is not a terminal, none with --quiet."""

import re

import pandas as pd

from orbench.run import stage
from orbench.run.stage import progress_line

ALIGN = "alignment_checker/check_alignment.py"
LINE = re.compile(r"^check alignment openai/gpt-test: [\d,]+/20 rows, [\d.]+ rows/s, 0 errors, "
                  r"not paced, ETA (\d+:\d\d:\d\d|unknown)$")


def test_progress_line_text():
    assert progress_line("judge", 250, 1000, 3, 50.0, True) == (
        "judge: 250/1,000 rows, 5.0 rows/s, 3 errors, paced by the provider's rate limit, ETA 0:02:30")
    assert progress_line("judge", 0, 10, 0, 1.0, False).endswith("not paced, ETA unknown")


def test_plain_lines_when_stderr_is_not_a_terminal_and_none_when_quiet(script, env, fake, tmp_path,
                                                                       monkeypatch):
    # 20 rows of 40 ms, 2 at a time: 0.4 s, some 6 lines' worth at one per 60 ms (8 rows: 2.7)
    monkeypatch.setattr(stage, "PROGRESS_EVERY", 0.06)
    fake.add_rule(delay=0.04)
    pd.DataFrame({"prompt": [f"p{i}" for i in range(20)]}).to_csv(tmp_path / "in.csv", index=False)
    args = ["--model", "openai/gpt-test", "--input_file", "in.csv", "--concurrency", "2", "--no_cache"]
    proc = script(ALIGN, *args, "--output_file", "a.csv", env=env)
    assert proc.returncode == 0
    lines = [line for line in proc.stderr.splitlines() if line.startswith("check alignment")
             and "->" not in line]
    assert len(lines) >= 2 and all(LINE.match(line) for line in lines), proc.stderr
    pd.DataFrame({"prompt": [f"q{i}" for i in range(8)]}).to_csv(tmp_path / "few.csv", index=False)
    few = [arg if arg != "in.csv" else "few.csv" for arg in args]
    quiet = script(ALIGN, *few, "--output_file", "b.csv", "--quiet", env=env)
    assert quiet.returncode == 0 and quiet.stderr == ""
    assert len(pd.read_csv(tmp_path / "b.csv")) == 8  # long enough for two lines, had they been due
