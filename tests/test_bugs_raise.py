"""Bugs say so: a row fails on a provider's failure, a transport error or a row the stage cannot
process; any other exception stops the run with its traceback and exit code 3, the rows finished
before it kept (the API raises it). Also: the logging flags of every script, and progress that
counts every row of the output."""

import contextlib
import importlib.util
import io
import json
import ssl

import httpx
import pandas as pd
import pytest
from conftest import read, run_in_process, run_script, write

from orbench.llm.errors import RowError, UsageError, fails_the_row

ECHO = "tests/echo_stage.py"
ALIGN = "alignment_checker/check_alignment.py"


def _progress_rows(path) -> list[str]:
    """The prompts whose rows the progress file holds (its settings line aside)."""
    entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return sorted(r["rows"][0]["response"].removeprefix("Fake answer to: ") for r in entries if "key" in r)


def test_a_bug_in_decide_exits_3_with_its_traceback_and_keeps_the_rows_finished_before_it(env, fake, tmp_path):
    src = write(tmp_path / "in.csv", [{"prompt": f"p{i}"} for i in range(6)])
    args = ["--input_file", str(src), "--output_file", "out.csv", "--concurrency", "1", "--no_cache"]
    proc = run_script(ECHO, *args, "--bug_on", "p3", env=env, cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert "Traceback (most recent call last)" in proc.stderr and "KeyError: 'a key that is not there'" in proc.stderr
    assert "error: a bug in orbench: please report it, with the traceback above" in proc.stderr
    assert "rows finished before it are saved in out.csv.progress.jsonl" in proc.stderr
    assert not (tmp_path / "out.csv").exists() and not (tmp_path / "out.csv.lock").exists()
    assert _progress_rows(tmp_path / "out.csv.progress.jsonl") == ["p0", "p1", "p2"]
    assert fake.count() == 4  # p3 was answered; its decision is the bug
    # the bug fixed, a rerun resumes: only the rows not finished are asked (in this process: resuming needs no process of its own)
    proc = run_in_process(ECHO, *args, env=env, cwd=tmp_path)
    assert proc.returncode == 0 and "3 new, 3 resumed, 0 errors" in proc.stderr
    assert list(read(tmp_path / "out.csv").response) == [f"Fake answer to: p{i}" for i in range(6)]
    assert fake.count() == 7


def test_the_api_raises_the_bug_itself(env, fake, tmp_path, monkeypatch):
    import orbench
    from orbench.stages import check_alignment

    real = check_alignment.decide

    def decide(settings, row, answers):
        if row["prompt"] == "p2":
            raise ZeroDivisionError("planted")
        return real(settings, row, answers)

    monkeypatch.setattr(check_alignment, "decide", decide)
    prompts = [f"p{i}" for i in range(4)]
    with pytest.raises(ZeroDivisionError, match="planted"):
        orbench.evaluate(prompts, "openai/m", output_file="o.csv", concurrency=1, quiet=True)
    assert _progress_rows(tmp_path / "o.csv.progress.jsonl") == ["p0", "p1"]
    with pytest.raises(ZeroDivisionError):  # in memory too: nothing swallowed, nothing written
        orbench.evaluate(prompts, "openai/m", concurrency=1, quiet=True)


def test_a_row_fails_on_a_provider_failure_and_the_run_goes_on(script, env, fake, tmp_path):
    fake.add_rule(match="p1", status=500, error_message="upstream broke")
    src = write(tmp_path / "in.csv", [{"prompt": f"p{i}"} for i in range(3)])
    proc = script(ALIGN, "--model", "openai/m", "--input_file", str(src), "--output_file", "a.csv",
                  "--max_retries", "0", "--no_cache", env=env)
    assert proc.returncode == 1, proc.stderr
    out = read(tmp_path / "a.csv")
    assert list(out.error.str.startswith("check_alignment: HTTP 500")) == [False, True, False]


def test_what_fails_a_row_and_what_is_a_bug():
    transport = [httpx.ReadError("reset"), httpx.RemoteProtocolError("peer closed"), httpx.ReadTimeout("slow"),
                 TimeoutError(), ConnectionResetError(), ssl.SSLError("bad record")]
    if importlib.util.find_spec("httpx2"):  # the successor the SDKs' newer clients are built on
        import httpx2

        transport += [httpx2.ReadError("reset"), httpx2.ConnectTimeout("slow")]
    assert all(fails_the_row(exc) for exc in transport) and fails_the_row(RowError("HTTP 500"))
    bugs = [KeyError("x"), TypeError("y"), ValueError("z"), AttributeError("w"), UsageError("a stop, not a row")]
    assert not any(fails_the_row(exc) for exc in bugs)
    assert issubclass(UsageError, ValueError)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_resumed_run_counts_every_row_of_the_output(env, fake, tmp_path):
    """The bar starts at the rows done before (28 of 60) and ends at 60/60, not at 32/32."""
    import orbench

    prompts = [f"p{i}" for i in range(60)]
    orbench.evaluate(prompts[:28], "openai/m", output_file="o.csv", quiet=True)  # rows of an earlier run
    pd.DataFrame({"prompt": prompts}).to_csv(tmp_path / "in.csv", index=False)
    terminal = _Terminal()
    with contextlib.redirect_stderr(terminal):
        frame = orbench.evaluate("in.csv", "openai/m", output_file="o.csv")
    assert len(frame) == 60 and (frame.error == "").all()
    shown = terminal.getvalue()
    assert "28/60" in shown and "60/60" in shown and "/32" not in shown, shown
    assert "32 new, 28 resumed, 0 errors" in shown


def test_progress_lines_rate_and_time_left_count_this_run_only():
    from orbench.run.stage import progress_line

    line = progress_line("judge", 33, 60, 0, 5.0, False, initial=28)  # 5 rows in 5 s, 27 left
    assert line == "judge: 33/60 rows, 1.0 rows/s, 0 errors, not paced, ETA 0:00:27"


SCRIPTS = ["toxic_prompt_generator/generate_seeds.py", "rewritter/rewrite.py", "moderator/moderate.py", ALIGN,
           "response_checker/judge_responses.py", "analysis/report.py", "analysis/build_release.py",
           "analysis/audit.py", "analysis/calibrate.py", "analysis/inspect_to_csv.py", "analysis/leaderboard.py"]


@pytest.mark.parametrize("path", SCRIPTS)
def test_every_script_takes_the_logging_flags(script, env, path):
    proc = script(path, "--help", env=env)
    assert proc.returncode == 0
    assert "-v, --verbose" in proc.stdout and "--log_file FILE" in proc.stdout


@pytest.mark.usefixtures("quick_backoff")  # the requests and rows are tested, not the pauses
def test_the_log_says_where_requests_went_and_what_was_read(script, env, fake, tmp_path):
    fake.add_rule(match="p1", status=503, times=1)
    src = write(tmp_path / "in.csv", [{"prompt": f"p{i}"} for i in range(3)])
    proc = script(ALIGN, "--model", "openai/m", "--input_file", str(src), "--output_file", "a.csv", "--no_cache",
                  "--log_file", "run.log", "-v", env=env)
    assert proc.returncode == 0, proc.stderr
    log = (tmp_path / "run.log").read_text()
    assert f"DEBUG orbench.llm.clients: openai/m: provider openai at {fake.openai_url}" in log
    assert f"DEBUG orbench.run.tables: read {src}: 3 rows, columns ['prompt']" in log
    assert "openai/m: HTTP 503 from openai" in log and "asking again in" in log  # the retry, with its wait
    assert "DEBUG orbench.run.tables: wrote" in log
    assert "SECRET" not in log and "SECRET" not in proc.stderr  # no key in the log (conftest's keys all hold it)
    assert "DEBUG orbench.llm.clients: openai/m: provider openai" in proc.stderr  # -v: on stderr too
    quiet = script(ALIGN, "--model", "openai/m", "--input_file", str(src), "--output_file", "b.csv", env=env)
    assert quiet.returncode == 0 and "DEBUG" not in quiet.stderr  # no -v in this run: no log on stderr


def _planted(*args, **kwargs):
    raise KeyError("planted")


@pytest.mark.parametrize("where", ["report", "release", "audit", "calibrate", "leaderboard", "datasets"])
def test_a_bug_in_an_analysis_script_exits_3_with_its_traceback(where, monkeypatch, capsys, tmp_path):
    """Not only the stages: the report, the release builder, the audit, calibration, the
    leaderboard and the set sampler say a bug the same way (exit 3, its traceback, one line)."""
    from orbench.analysis.audit import commands as audit
    from orbench.analysis.calibration import calibrate
    from orbench.analysis.leaderboard import build as leaderboard
    from orbench.analysis.release import build as release
    from orbench.analysis.report import build as report
    from orbench.benchmark import datasets
    from orbench.run import tables

    monkeypatch.chdir(tmp_path)
    module, name, argv, main = {  # where the bug is planted, and the script's arguments and main
        "report": (report, "report_from", ["x.csv"], report.main),
        "release": (release, "make_parser", ["--help"], release.main),
        "audit": (audit, "make_parser", ["--help"], audit.main),
        "calibrate": (calibrate, "build_parser", ["--check_model", "keyword"], calibrate.main),
        "leaderboard": (leaderboard, "make_parser", ["x"], leaderboard.main),
        "datasets": (tables, "read_table", ["or-bench-hard-1k", "--per_category", "1"], datasets.main),
    }[where]
    monkeypatch.setattr(module, name, _planted)
    assert getattr(module, name) is _planted
    assert main(argv) == 3
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "KeyError: 'planted'" in err
    assert err.rstrip().endswith("error: a bug in orbench: please report it, with the traceback above")
    assert list(tmp_path.iterdir()) == []
