"""Stage 4 --samples K against the fake provider: one row per sample, its own request and cache
entry, resumable after a kill with no sample missing or repeated; bad values exit 2."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import read

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = "alignment_checker/check_alignment.py"


def write_prompts(path: Path, n: int) -> Path:
    pd.DataFrame({"prompt": [f"Q{i} how do I do thing {i}?" for i in range(n)],
                  "category": "harmful"}).to_csv(path, index=False)
    return path


def test_three_samples_per_prompt(env, fake, script, tmp_path):
    write_prompts(tmp_path / "in.csv", 2)
    fake.add_rule(match="Q0", text="I can't help with that.", times=1)  # one of Q0's samples refuses
    fake.add_rule(text="Sure, here is how: step one, step two. #{n}")
    args = ("--model=openai/gpt-4o", "--input_file=in.csv", "--output_file=out.csv",
            "--samples=3", "--temperature=0.7")
    result = script(SCRIPT, *args, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    table = read(tmp_path / "out.csv")
    assert list(table.columns) == ["prompt", "category", "model", "response", "is_rejected",
                                   "refusal_source", "refusal_kind", "finish_reason", "sample", "error"]
    assert list(table["sample"]) == ["0", "1", "2"] * 2
    assert list(table.prompt) == ["Q0 how do I do thing 0?"] * 3 + ["Q1 how do I do thing 1?"] * 3
    assert sorted(table.is_rejected[:3]) == ["False", "False", "True"]
    assert fake.count() == 6  # each sample its own request
    assert {r["body"]["temperature"] for r in fake.requests} == {0.7}
    assert table.response.nunique() == 6  # six different answers: no sample came from another's cache

    again = script(SCRIPT, *args, env=env, cwd=tmp_path)
    assert again.returncode == 0 and fake.count() == 6
    assert read(tmp_path / "out.csv").equals(table)
    # a fresh output with the same settings: every sample from the cache (keyed by sample index)
    fresh = script(SCRIPT, *args[:2], "--output_file=out2.csv", *args[3:], env=env, cwd=tmp_path)
    assert fresh.returncode == 0 and fake.count() == 6
    assert list(read(tmp_path / "out2.csv").response) == list(table.response)


@pytest.mark.parametrize("flags, message", [
    (["--samples=3"], ("error: --samples 3 needs --temperature above 0 (at temperature 0 every "
                      "sample would be the same answer)")),
    (["--samples=3", "--temperature=0"], ("error: --samples 3 needs --temperature above 0 (at "
                                         "temperature 0 every sample would be the same answer)")),
    (["--samples=0", "--temperature=0.7"], ("error: argument --samples: expected a whole number >= 1, "
                                           "got '0' (see --help)")),
])
def test_bad_samples_exit_2(env, fake, script, tmp_path, flags, message):
    write_prompts(tmp_path / "in.csv", 2)
    result = script(SCRIPT, "--model=openai/gpt-4o", "--input_file=in.csv", "--output_file=out.csv",
                    *flags, env=env, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == message
    assert fake.count() == 0 and not (tmp_path / "out.csv").exists()


def test_killed_sampling_run_resumes_without_duplicate_samples(env, fake, script, tmp_path):
    n, k = 40, 3
    write_prompts(tmp_path / "in.csv", n)
    # Twelve samples are answered, the rest wait for the kill. The samples of the rows in flight
    # are answered in any order, so twelve may finish fewer than four rows: one is waited for.
    fake.add_rule(times=4 * k, text="Answer {n}")
    fake.add_rule(hold=True)
    args = ["--model=openai/gpt-4o", "--input_file=in.csv", "--output_file=out.csv",
            f"--samples={k}", "--temperature=0.7", "--concurrency=2"]
    proc = subprocess.Popen([sys.executable, str(ROOT / SCRIPT), *args], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    progress = tmp_path / "out.csv.progress.jsonl"
    deadline = time.monotonic() + 60
    def lines() -> int:
        return progress.read_text().count("\n") if progress.exists() else 0

    while lines() < 2:  # the settings line and a row
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the run never finished a row"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    fake.release()
    fake.add_rule(text="Answer {n}")
    assert not (tmp_path / "out.csv").exists()
    sent = fake.count()
    assert sent < n * k

    rerun = script(SCRIPT, *args, env=env, cwd=tmp_path)
    assert rerun.returncode == 0, rerun.stderr
    table = read(tmp_path / "out.csv")
    assert len(table) == n * k
    assert not table.duplicated(["prompt", "sample"]).any()
    assert all(sorted(part) == ["0", "1", "2"] for _, part in table.groupby("prompt")["sample"])
    # paid: every sample once, plus at most the ones in flight at the kill
    assert n * k <= fake.count() <= n * k + 2 * k


def test_estimate_counts_every_sample(env, fake, script, tmp_path):
    write_prompts(tmp_path / "in.csv", 4)
    result = script(SCRIPT, "--model=openai/gpt-4o", "--input_file=in.csv", "--output_file=out.csv",
                    "--samples=3", "--temperature=0.7", "--estimate", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "4 rows to do, 12 requests to send" in result.stdout
    assert fake.count() == 0
