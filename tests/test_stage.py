"""The stage runner's promises, through a real script (tests/echo_stage.py).

Most runs call its ``main`` in this process (the ``echo`` fixture); the kill tests start the run
they kill as a subprocess.
"""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from conftest import FAKE_KEYS, ROOT, read, run_in_process
from echo_stage import main as echo_main

ECHO = "tests/echo_stage.py"


def write_input(path: Path, n: int, duplicate_every: int = 0) -> Path:
    prompts = [f"prompt {i}" for i in range(n)]
    if duplicate_every:
        prompts = [p if i % duplicate_every else "prompt 0" for i, p in enumerate(prompts)]
    pd.DataFrame({"prompt": prompts, "category": ["harmful"] * n}).to_csv(path, index=False)
    return path


@pytest.fixture
def echo(env, capsys, monkeypatch):
    """Run tests/echo_stage.py's ``main`` in this process (cwd: the test's folder); returns
    ``returncode``, ``stdout`` and ``stderr`` like a finished subprocess."""

    def run(*args: str, env_change: dict | None = None) -> SimpleNamespace:
        for name, value in (env_change or {}).items():
            monkeypatch.setenv(name, value)
        capsys.readouterr()
        code = echo_main(list(args))
        out = capsys.readouterr()
        return SimpleNamespace(returncode=code, stdout=out.out, stderr=out.err)

    return run


def test_output_keeps_columns_and_input_order(tmp_path, env, fake, echo):
    # Later prompts answer faster than earlier ones, so completion order differs from input order.
    for i in reversed(range(12)):  # "prompt 10" before "prompt 1", since rules match substrings
        fake.add_rule(match=f"prompt {i}", text=f"answer {i}", delay=0.01 * (12 - i))
    src = write_input(tmp_path / "in.csv", 12)
    proc = echo("--input_file", str(src), "--concurrency", "6")
    assert proc.returncode == 0, proc.stderr
    out = read(tmp_path / "echo_out.csv")
    assert list(out.columns) == ["prompt", "category", "model", "response", "finish_reason",
                                 "provider_refusal", "error"]
    assert list(out["response"]) == [f"answer {i}" for i in range(12)]
    assert set(out["error"]) == {""} and set(out["model"]) == {"openai/test-model"}
    assert proc.stdout.strip() == "echo_out.csv"
    assert "echo: 12 rows" in proc.stderr and "12 new, 0 resumed, 0 errors" in proc.stderr


def test_second_identical_run_sends_no_request(tmp_path, env, fake, echo):
    src = write_input(tmp_path / "in.csv", 20)
    assert echo("--input_file", str(src)).returncode == 0
    first = (tmp_path / "echo_out.csv").read_bytes()
    assert fake.count() == 20
    proc = echo("--input_file", str(src))
    assert proc.returncode == 0 and fake.count() == 20
    assert "0 new, 20 resumed" in proc.stderr and "requests 0 sent" in proc.stderr
    assert (tmp_path / "echo_out.csv").read_bytes() == first


def test_cache_serves_a_fresh_output_without_requests(tmp_path, env, fake, echo):
    src = write_input(tmp_path / "in.csv", 10)
    assert echo("--input_file", str(src), "--output_file", "a.csv").returncode == 0
    proc = echo("--input_file", str(src), "--output_file", "b.csv")
    assert proc.returncode == 0 and fake.count() == 10
    assert "requests 0 sent, 10 from cache" in proc.stderr
    assert read(tmp_path / "a.csv").equals(read(tmp_path / "b.csv"))


def test_no_cache_flag_bypasses_the_cache(tmp_path, env, fake, echo):
    src = write_input(tmp_path / "in.csv", 5)
    for name in ("a.csv", "b.csv"):
        assert echo("--input_file", str(src), "--output_file", name, "--no_cache").returncode == 0
    assert fake.count() == 10
    assert not (tmp_path / "cache").exists()


def test_duplicate_rows_are_asked_once(tmp_path, env, fake, echo):
    src = write_input(tmp_path / "in.csv", 12, duplicate_every=3)  # rows 0,3,6,9 are "prompt 0"
    proc = echo("--input_file", str(src), "--no_cache")
    assert proc.returncode == 0
    out = read(tmp_path / "echo_out.csv")
    assert len(out) == 12 and fake.count() == 9
    assert list(out.loc[[0, 3, 6, 9], "response"]) == ["Fake answer to: prompt 0"] * 4


def test_limit_runs_the_first_rows_only(tmp_path, env, fake, echo):
    src = write_input(tmp_path / "in.csv", 30)
    proc = echo("--input_file", str(src), "--limit", "7")
    assert proc.returncode == 0 and fake.count() == 7
    assert list(read(tmp_path / "echo_out.csv")["prompt"]) == [f"prompt {i}" for i in range(7)]


@pytest.mark.usefixtures("quick_backoff")  # the requests and rows are tested, not the pauses
def test_failed_rows_keep_their_place_and_are_retried_on_rerun(tmp_path, env, fake, echo):
    fake.add_rule(match="prompt 3", status=400, error_message="prompt is too long", times=1)
    fake.add_rule(match="prompt 5", status=500)  # keeps failing through the SDK's retries
    src = write_input(tmp_path / "in.csv", 8)
    proc = echo("--input_file", str(src), "--max_retries", "1")
    assert proc.returncode == 1, proc.stderr
    out = read(tmp_path / "echo_out.csv")
    assert len(out) == 8 and list(out["prompt"]) == [f"prompt {i}" for i in range(8)]
    assert out.loc[3, "error"] == "echo: HTTP 400 from openai: prompt is too long"
    assert out.loc[5, "error"].startswith("echo: HTTP 500 from openai")
    assert out.loc[3, "response"] == "" and out.loc[5, "response"] == ""
    assert (out.drop(index=[3, 5])["error"] == "").all()
    assert "2 rows still have errors" in proc.stderr
    fake.reset()  # the provider recovers
    proc = echo("--input_file", str(src))
    assert proc.returncode == 0, proc.stderr
    assert fake.count() == 2  # only the two failed rows are asked again
    out = read(tmp_path / "echo_out.csv")
    assert out.loc[3, "response"] == "Fake answer to: prompt 3" and (out["error"] == "").all()


def test_provider_block_is_a_row_not_an_error(tmp_path, env, fake, echo):
    fake.add_rule(match="prompt 1", content_filter=True)
    src = write_input(tmp_path / "in.csv", 3)
    proc = echo("--input_file", str(src))
    assert proc.returncode == 0
    out = read(tmp_path / "echo_out.csv")
    assert list(out["provider_refusal"]) == ["False", "True", "False"]
    assert out.loc[1, "finish_reason"] == "content_filter" and out.loc[1, "error"] == ""
    assert "1 provider blocks" in proc.stderr


def test_401_stops_the_run_at_once(tmp_path, env, fake, echo):
    fake.add_rule(status=401)
    src = write_input(tmp_path / "in.csv", 50)
    proc = echo("--input_file", str(src), "--concurrency", "2")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines == ["error: openai rejected the API key (HTTP 401): set OPENAI_API_KEY to a valid key"]
    assert fake.count() <= 2  # at most the requests already in flight
    assert not (tmp_path / "echo_out.csv").exists()


def test_progress_file_tolerates_a_torn_last_line(tmp_path, env, fake, echo):
    src = write_input(tmp_path / "in.csv", 6)
    assert echo("--input_file", str(src)).returncode == 0
    progress = tmp_path / "echo_out.csv.progress.jsonl"
    lines = progress.read_text().splitlines()
    assert len(lines) == 7  # the settings line, then one line per row
    assert json.loads(lines[0])["settings"] == {"model": "openai/test-model", "temperature": 0.0,
                                                "max_tokens": 100}
    # Drop the last two finished rows and leave half a line, as a killed writer would.
    progress.write_text("\n".join(lines[:5]) + "\n" + lines[5][: len(lines[5]) // 2])
    (tmp_path / "echo_out.csv").unlink()
    proc = echo("--input_file", str(src), "--no_cache")
    assert proc.returncode == 0, proc.stderr
    assert fake.count() == 6 + 2
    assert len(read(tmp_path / "echo_out.csv")) == 6
    assert all(json.loads(line) for line in progress.read_text().splitlines())


def _start(tmp_path, env, *args):
    return subprocess.Popen([sys.executable, str(ROOT / ECHO), *args], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_lines(path: Path, n: int, proc: subprocess.Popen, limit: float = 60) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().count("\n") >= n:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    raise AssertionError(f"{path} never reached {n} lines")


@pytest.mark.parametrize("sig, code", [(signal.SIGKILL, -9), (signal.SIGINT, 130)])
def test_killed_run_resumes_to_the_same_file(tmp_path, env, fake, sig, code):
    n, concurrency = 120, 4
    src = write_input(tmp_path / "in.csv", n)
    reference = tmp_path / "reference"
    reference.mkdir()
    env_ref = dict(env, ORBENCH_CACHE_DIR=str(reference / "cache"))
    # The reference and the rerun run in this process; only the run that is killed is a process.
    done = run_in_process(ECHO, "--input_file", str(src), "--concurrency", str(concurrency),
                          env=env_ref, cwd=reference)
    assert done.returncode == 0, done.stderr
    fake.reset()
    fake.add_rule(times=30)  # 30 rows are answered, the rest wait until the run is killed
    fake.add_rule(hold=True)

    proc = _start(tmp_path, env, "--input_file", str(src), "--concurrency", str(concurrency))
    progress = tmp_path / "echo_out.csv.progress.jsonl"
    _wait_for_lines(progress, 31, proc)  # the settings line and 30 rows
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    fake.release()  # the held requests end; the rerun is answered as usual
    assert proc.returncode == code, stderr
    if sig == signal.SIGINT:
        assert "interrupted: finished rows are saved" in stderr and "Traceback" not in stderr
    assert not (tmp_path / "echo_out.csv").exists()
    lines = [json.loads(line) for line in progress.read_text().splitlines() if line.strip().endswith("}")]
    assert lines[0]["settings"]["model"] == "openai/test-model"  # written before the first request
    finished = {line["key"] for line in lines[1:]}
    assert len(finished) == 30

    rerun = run_in_process(ECHO, "--input_file", str(src), "--concurrency", str(concurrency),
                           "--no_cache", env=env, cwd=tmp_path)
    assert rerun.returncode == 0, rerun.stderr
    out = (tmp_path / "echo_out.csv").read_bytes()
    assert out == (reference / "echo_out.csv").read_bytes()
    frame = read(tmp_path / "echo_out.csv")
    assert len(frame) == n and frame["prompt"].is_unique
    # Paid requests: every row once, plus at most the ones in flight at the kill.
    assert n <= fake.count() <= n + concurrency


# -- bad input: one line on stderr, exit 2, no traceback, existing files untouched ----------------

def _bad_cases(tmp_path: Path):
    good = write_input(tmp_path / "good.csv", 3)
    (tmp_path / "empty.csv").write_bytes(b"")
    (tmp_path / "header.csv").write_text("prompt,category\n")
    (tmp_path / "nocol.csv").write_text("question,category\nhi,harmful\n")
    (tmp_path / "latin1.csv").write_bytes("prompt\ncaf\xe9 cr\xe8me\n".encode("latin-1"))
    return {
        "missing file": (["--input_file", "nope.csv"], "input file not found: nope.csv", {}),
        "empty file": (["--input_file", "empty.csv"], "input file is empty: empty.csv", {}),
        "header only": (["--input_file", "header.csv"], "header.csv has a header but no rows", {}),
        "missing column": (["--input_file", "nocol.csv"], "has no column 'prompt' (it has: question, category)", {}),
        "not utf-8": (["--input_file", "latin1.csv"], "latin1.csv is not UTF-8 text", {}),
        "unknown provider": (["--input_file", str(good), "--model", "acme/m1"], "unknown provider 'acme'", {}),
        "missing key": (["--input_file", str(good)], "no API key for provider openai: set OPENAI_API_KEY",
                        {"OPENAI_API_KEY": ""}),
        "bad concurrency": (["--input_file", str(good), "--concurrency", "0"],
                            "argument --concurrency: expected a whole number >= 1, got '0'", {}),
        "bad temperature": (["--input_file", str(good), "--temperature", "hot"],
                            "argument --temperature: expected a number from 0 to 2", {}),
        "unknown flag": (["--input_file", str(good), "--frobnicate"], "unrecognized arguments: --frobnicate", {}),
        "output is input": (["--input_file", str(good), "--output_file", str(good)],
                            "would overwrite the input file", {}),
    }


@pytest.mark.parametrize("case", ["missing file", "empty file", "header only", "missing column", "not utf-8",
                                  "unknown provider", "missing key", "bad concurrency", "bad temperature",
                                  "unknown flag", "output is input"])
def test_bad_input_is_one_line_exit_2(tmp_path, env, fake, echo, case):
    args, message, env_change = _bad_cases(tmp_path)[case]
    sentinel = tmp_path / "echo_out.csv"
    sentinel.write_text("existing output\n")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    proc = echo(*args, env_change=env_change)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert message in lines[0]
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    assert after == before
    assert fake.count() == 0


def test_no_key_value_anywhere(tmp_path, env, fake, echo):
    fake.add_rule(match="prompt 1", status=400, error_message=f"bad key {FAKE_KEYS['OPENAI_API_KEY']}")
    fake.add_rule(match="prompt 2", content_filter=True)
    src = write_input(tmp_path / "in.csv", 4)
    proc = echo("--input_file", str(src))
    assert proc.returncode == 1
    fake.reset()
    fake.add_rule(status=401)
    proc2 = echo("--input_file", str(src), "--output_file", "other.csv", "--no_cache")
    assert proc2.returncode == 2
    texts = [proc.stdout, proc.stderr, proc2.stdout, proc2.stderr]
    files = [p for p in tmp_path.rglob("*") if p.is_file() and p.name != "in.csv"]
    assert any(p.name.startswith("cache.sqlite") for p in files)
    blobs = [p.read_bytes() for p in files]
    for value in FAKE_KEYS.values():
        assert not any(value in t for t in texts)
        assert not any(value.encode() in b for b in blobs)
    out = read(tmp_path / "echo_out.csv")
    assert out.loc[1, "error"] == "echo: HTTP 400 from openai: bad key [redacted]"


def test_jsonl_input_is_accepted(tmp_path, env, fake, echo):
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(json.dumps({"prompt": f"q{i}", "n": i}) for i in range(3)) + "\n")
    proc = echo("--input_file", str(src))
    assert proc.returncode == 0, proc.stderr
    out = read(tmp_path / "echo_out.csv")
    assert list(out["n"]) == ["0", "1", "2"] and out.loc[2, "response"] == "Fake answer to: q2"


def test_changing_the_model_stops_and_overwrite_redoes_the_rows(tmp_path, env, fake, echo):
    src = write_input(tmp_path / "in.csv", 4)
    assert echo("--input_file", str(src)).returncode == 0
    first = {p.name: p.read_bytes() for p in tmp_path.glob("echo_out.csv*")}
    proc = echo("--input_file", str(src), "--model", "openai/other-model")
    assert proc.returncode == 2 and fake.count() == 4
    assert proc.stderr == ("error: echo_out.csv (a finished output, 4 rows in its progress file) was made with "
                           "other settings: --model was 'openai/test-model', now 'openai/other-model'. To keep "
                           "it, write this run to a new file with --output_file NEW.csv; to replace it, add "
                           "--overwrite\n")
    assert {p.name: p.read_bytes() for p in tmp_path.glob("echo_out.csv*")} == first
    proc = echo("--input_file", str(src), "--model", "openai/other-model", "--overwrite")
    assert proc.returncode == 0 and fake.count() == 8
    assert "4 new, 0 resumed" in proc.stderr and "--overwrite: replaced echo_out.csv (made with --model " \
        "'openai/test-model')" in proc.stderr
    assert set(read(tmp_path / "echo_out.csv")["model"]) == {"openai/other-model"}
    # the new settings are the output's now: a rerun resumes, the old ones stop
    assert echo("--input_file", str(src), "--model", "openai/other-model").returncode == 0
    assert echo("--input_file", str(src)).returncode == 2 and fake.count() == 8


def test_undeclared_result_keys_as_the_docstring_says(tmp_path):
    """A result key that names an input column overrides it; any other undeclared key becomes a
    column after the declared ones; only the declared columns are blanked on a failed row."""
    import orbench.run.stage as stage_module
    from orbench.llm.errors import RowError
    from orbench.run.stage import Stage, run_stage

    def decide(settings, row, answers):
        if row["prompt"] == "bad":  # a row the stage cannot process fails that row (any other exception is a bug)
            raise RowError("boom")
        return {"answer": "a:" + row["prompt"], "prompt": row["prompt"].upper(), "extra": "x"}

    stage = Stage(name="t", needs=("prompt",), adds=("answer",), requests=lambda settings, row: [], decide=decide,
                  key_columns=("prompt",))
    table = pd.DataFrame({"prompt": ["ok", "bad"], "answer": ["stale", "stale"]})
    result = run_stage(stage, table, tmp_path / "out.csv", quiet=True)
    assert result.errors == 1
    out = read(tmp_path / "out.csv")
    assert list(out.columns) == ["prompt", "answer", "extra", "error"]
    assert list(out.prompt) == ["OK", "bad"] and list(out.answer) == ["a:ok", ""]
    assert list(out.extra) == ["x", ""] and out.error[1] == "t: boom"
    assert "any other key becomes an extra column" in stage_module.__doc__
