"""--batch through a real stage script and the real SDKs against the loopback fake batch server."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
from conftest import FAKE_KEYS, PROVIDER_URL_VARS, ROOT, read, run_in_process
from fake_batch import FakeBatch

from orbench.llm import batch
from orbench.llm.providers import anthropic_messages, openai_chat
from orbench.stages.check_alignment import main as check_alignment

OPENAI, CLAUDE = "gpt-4o", "claude-3-haiku-20240307"


@pytest.fixture
def fb():
    server = FakeBatch().start()
    yield server
    server.stop()


@pytest.fixture
def benv(tmp_path, fb, monkeypatch):
    """Fake keys, OpenAI and Anthropic pointed at the batch fake, a private cache; cwd tmp_path."""
    monkeypatch.chdir(tmp_path)
    for name in PROVIDER_URL_VARS:
        monkeypatch.setenv(f"{name}_BASE_URL", fb.openai_url)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fb.url)
    for name, value in FAKE_KEYS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("CLAUDE_API_KEY", raising=False)
    monkeypatch.setenv("ORBENCH_CACHE_DIR", str(tmp_path / "cache"))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def write_prompts(path, prompts):
    pd.DataFrame({"prompt": prompts, "category": ["privacy"] * len(prompts)}).to_csv(path, index=False)
    return path


def run(model, out, *extra):
    return check_alignment([f"--model={model}", "--input_file=in.csv", f"--output_file={out}",
                            "--poll_interval=0.001", "--max_retries=0", *extra])


def state_records(out):
    records = {}
    for line in (batch.state_path_for(out)).read_text().splitlines():
        entry = json.loads(line)
        records.setdefault(entry["ref"], {}).update(entry)
    return list(records.values())


@contextlib.contextmanager
def stopped_before_a_batch_id_is_recorded(monkeypatch):
    """Within the block, recording a ``batch_id`` in the batch state raises KeyboardInterrupt: a
    stop (Ctrl-C) after the provider accepted a batch and before the run wrote down its id."""
    original = batch.BatchState.write

    def crash_on_id(self, entry):
        if "batch_id" in entry:
            raise KeyboardInterrupt
        original(self, entry)

    monkeypatch.setattr(batch.BatchState, "write", crash_on_id)
    try:
        yield
    finally:
        monkeypatch.setattr(batch.BatchState, "write", original)


PROMPTS = [f"how do I pick a lock number {i}" for i in range(6)]


@pytest.mark.parametrize("model", [OPENAI, CLAUDE])
def test_batch_output_equals_synchronous_and_shares_the_cache(benv, fb, tmp_path, monkeypatch, model):
    write_prompts(tmp_path / "in.csv", PROMPTS)
    fb.polls = 3
    assert run(model, tmp_path / "sync.csv") == 0
    assert fb.count("chat") == 6
    monkeypatch.setenv("ORBENCH_CACHE_DIR", str(tmp_path / "cache2"))  # start from an empty cache
    assert run(model, tmp_path / "batch.csv", "--batch") == 0
    sync, batched = read(tmp_path / "sync.csv"), read(tmp_path / "batch.csv")
    assert batched.equals(sync)
    assert list(batched.response) == [f"Fake answer to: {p}" for p in PROMPTS]
    assert fb.count("chat") == 6  # nothing synchronous in the batch run
    assert fb.count("create") == 1 and len(fb.submitted_ids()) == len(set(fb.submitted_ids())) == 6
    polls = 3 + (model == CLAUDE)  # the Anthropic SDK reads the batch again for its results URL
    assert fb.count("retrieve") == polls
    [record] = state_records(tmp_path / "batch.csv")
    assert record["status"] == "ended" and record["answered"] == 6 and len(record["keys"]) == 6
    assert record["provider"] == ("openai" if model == OPENAI else "anthropic")

    # A second batch run finds every row done: nothing is submitted or sent.
    log_before = list(fb.log)
    assert run(model, tmp_path / "batch.csv", "--batch") == 0
    assert fb.log == log_before
    # The batch answers are the cache entries a synchronous run reads: a plain run sends nothing.
    assert run(model, tmp_path / "again.csv") == 0
    assert fb.count("chat") == 6
    assert read(tmp_path / "again.csv").equals(sync)


def test_interrupted_after_submit_resumes_polling_without_resubmitting(benv, fb, tmp_path, monkeypatch):
    write_prompts(tmp_path / "in.csv", PROMPTS)
    fb.polls = 4

    async def interrupt(seconds):
        raise KeyboardInterrupt

    monkeypatch.setattr(batch, "_sleep", interrupt)
    assert run(OPENAI, tmp_path / "out.csv", "--batch") == 130
    [record] = state_records(tmp_path / "out.csv")
    assert record["status"] == "submitted" and record["batch_id"]
    assert not (tmp_path / "out.csv").exists()
    # The provider goes down and comes back on the same address, its batches kept.
    port = fb.port
    fb.stop()
    fb.start(port)
    monkeypatch.setattr(batch, "_sleep", _noop)
    assert run(OPENAI, tmp_path / "out.csv", "--batch") == 0
    assert fb.count("upload") == 1 and fb.count("create") == 1 and len(fb.submitted_ids()) == 6
    assert list(read(tmp_path / "out.csv").response) == [f"Fake answer to: {p}" for p in PROMPTS]
    assert [r["status"] for r in state_records(tmp_path / "out.csv")] == ["ended"]


async def _noop(seconds):
    return None


def test_provider_unreachable_mid_poll_leaves_rows_to_a_rerun(benv, fb, tmp_path, monkeypatch, capsys):
    write_prompts(tmp_path / "in.csv", PROMPTS[:3])
    fb.polls = 2
    port = fb.port

    async def outage(seconds):
        fb.stop()

    monkeypatch.setattr(batch, "_sleep", outage)
    assert run(CLAUDE, tmp_path / "out.csv", "--batch") == 1
    err = capsys.readouterr().err
    assert "could not check 1 batches" in err and "rerun the same command to resume polling" in err
    table = read(tmp_path / "out.csv")
    assert all("no batch answer for this request yet" in e for e in table.error)
    fb.start(port)
    monkeypatch.setattr(batch, "_sleep", _noop)
    assert run(CLAUDE, tmp_path / "out.csv", "--batch") == 0
    assert fb.count("create") == 1 and len(fb.submitted_ids()) == 3
    assert list(read(tmp_path / "out.csv").error) == ["", "", ""]


def test_killed_mid_poll_with_the_provider_restarted(benv, fb, tmp_path):
    """A real process, killed while polling a batch of 2,000 requests; the fake restarts meanwhile."""
    prompts = [f"prompt number {i}" for i in range(2000)]
    write_prompts(tmp_path / "in.csv", prompts)
    fb.hold = True
    out = tmp_path / "out.csv"
    args = [sys.executable, str(ROOT / "alignment_checker/check_alignment.py"), f"--model={OPENAI}",
            "--input_file=in.csv", f"--output_file={out}", "--batch", "--poll_interval=0.01"]
    proc = subprocess.Popen(args, env=benv, cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        for _ in range(6000):  # wait (at most 60 s) until it is polling
            if fb.count("retrieve") >= 3 or proc.poll() is not None:
                break
            time.sleep(0.01)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    port = fb.port
    fb.stop()
    fb.start(port)
    fb.hold = False
    done = run_in_process(*args[1:], env=benv, cwd=tmp_path)  # the resuming run, in this process
    assert done.returncode == 0, done.stderr
    assert "0 batches submitted, 1 resumed" in done.stderr
    ids = fb.submitted_ids()
    assert len(ids) == 2000 and len(set(ids)) == 2000 and fb.count("create") == 1
    table = read(out)
    assert list(table.response) == [f"Fake answer to: {p}" for p in prompts]
    assert set(table.error) == {""}


def test_crash_between_create_and_record_is_found_by_input_file(benv, fb, tmp_path, monkeypatch, capsys):
    write_prompts(tmp_path / "in.csv", PROMPTS[:2])
    with stopped_before_a_batch_id_is_recorded(monkeypatch):
        assert run(OPENAI, tmp_path / "out.csv", "--batch") == 130
        assert fb.count("create") == 1
    assert run(OPENAI, tmp_path / "out.csv", "--batch") == 0
    assert fb.count("create") == 1 and fb.count("list") == 1
    assert "0 batches submitted, 1 resumed" in capsys.readouterr().err
    assert list(read(tmp_path / "out.csv").error) == ["", ""]


def test_anthropic_submission_cut_short_is_reported_then_resubmitted(benv, fb, tmp_path, monkeypatch,
                                                                     capsys):
    """Message Batches cannot be looked up by content: the risk is said, the rows are done again."""
    write_prompts(tmp_path / "in.csv", PROMPTS[:2])
    with stopped_before_a_batch_id_is_recorded(monkeypatch):
        assert run(CLAUDE, tmp_path / "out.csv", "--batch") == 130
    capsys.readouterr()
    assert run(CLAUDE, tmp_path / "out.csv", "--batch") == 0
    err = capsys.readouterr().err
    assert "stopped while submitting 2 requests to anthropic" in err and "answered twice" in err
    assert fb.count("create") == 2
    assert [r["status"] for r in state_records(tmp_path / "out.csv")] == ["abandoned", "ended"]


@pytest.mark.parametrize("model,module", [(OPENAI, openai_chat), (CLAUDE, anthropic_messages)])
def test_split_by_request_count(benv, fb, tmp_path, monkeypatch, model, module):
    write_prompts(tmp_path / "in.csv", PROMPTS[:5])
    monkeypatch.setattr(module, "BATCH_MAX_REQUESTS", 2)
    assert run(model, tmp_path / "out.csv", "--batch") == 0
    assert fb.count("create") == 3
    assert [len(r["keys"]) for r in state_records(tmp_path / "out.csv")] == [2, 2, 1]
    assert list(read(tmp_path / "out.csv").response) == [f"Fake answer to: {p}" for p in PROMPTS[:5]]


def test_split_by_size(benv, fb, tmp_path, monkeypatch):
    prompts = ["short", "x" * 3000, "y" * 3000, "z" * 3000]
    write_prompts(tmp_path / "in.csv", prompts)
    monkeypatch.setattr(openai_chat, "BATCH_MAX_BYTES", 6000)  # one long line (~3.3 KB) per file
    assert run(OPENAI, tmp_path / "out.csv", "--batch") == 0
    assert [len(r["keys"]) for r in state_records(tmp_path / "out.csv")] == [2, 1, 1]
    assert len(fb.files) == 3 + 3  # three inputs, three outputs
    assert all(len(data) <= 6000 for name, data in fb.files.items() if "out" not in name)
    monkeypatch.setattr(openai_chat, "BATCH_MAX_BYTES", 1000)
    (tmp_path / "out.csv").unlink()
    (tmp_path / "out.csv.progress.jsonl").unlink()
    monkeypatch.setenv("ORBENCH_CACHE_DIR", str(tmp_path / "cache2"))
    assert run(OPENAI, tmp_path / "out.csv", "--batch") == 2  # one request larger than a batch


@pytest.mark.parametrize("model", [OPENAI, CLAUDE])
def test_partial_failure_fails_exactly_those_rows(benv, fb, tmp_path, capsys, model):
    prompts = ["fine one", "BAD two", "fine three", "BAD four"]
    write_prompts(tmp_path / "in.csv", prompts)
    fb.fail_match = "BAD"
    assert run(model, tmp_path / "out.csv", "--batch") == 1
    table = read(tmp_path / "out.csv")
    assert [bool(e) for e in table.error] == [False, True, False, True]
    assert all("batch request failed" in e and "fake per-request failure" in e
               for e in table.error[[1, 3]])
    assert list(table.response) == ["Fake answer to: fine one", "", "Fake answer to: fine three", ""]
    assert "2 answered, 2 failed, 0 left to redo" in capsys.readouterr().err
    # A rerun submits just the failed rows again.
    fb.fail_match = None
    assert run(model, tmp_path / "out.csv", "--batch") == 0
    assert fb.count("create") == 2 and len(fb.submitted_ids()) == 6
    assert list(read(tmp_path / "out.csv").response) == [f"Fake answer to: {p}" for p in prompts]


@pytest.mark.parametrize("model", [OPENAI, CLAUDE])
def test_expired_batch_is_reported_and_left_to_redo(benv, fb, tmp_path, capsys, model):
    write_prompts(tmp_path / "in.csv", PROMPTS[:3])
    fb.expire_next = 1
    assert run(model, tmp_path / "out.csv", "--batch") == 1
    err = capsys.readouterr().err
    assert "3 requests of" in err and "expired" in err and "left to redo" in err
    assert "0 answered, 0 failed, 3 left to redo" in err
    assert all("no batch answer for this request yet" in e for e in read(tmp_path / "out.csv").error)
    assert run(model, tmp_path / "out.csv", "--batch") == 0
    assert fb.count("create") == 2 and len(fb.submitted_ids()) == 6
    assert list(read(tmp_path / "out.csv").response) == [f"Fake answer to: {p}" for p in PROMPTS[:3]]


@pytest.mark.parametrize("model", [OPENAI, CLAUDE])
def test_provider_block_is_stored_as_data(benv, fb, tmp_path, model):
    write_prompts(tmp_path / "in.csv", ["ordinary", "FILTER me"])
    fb.filter_match = "FILTER"
    assert run(model, tmp_path / "out.csv", "--batch") == 0
    table = read(tmp_path / "out.csv")
    assert list(table.refusal_source) == ["", "provider_block"]
    assert list(table.is_rejected) == ["False", "True"]


def test_provider_without_batch_api_is_exit_2(benv, fb, tmp_path, capsys):
    write_prompts(tmp_path / "in.csv", PROMPTS[:2])
    assert run("together/meta-llama/Llama-3-70b-chat-hf", tmp_path / "out.csv", "--batch") == 2
    err = capsys.readouterr().err
    assert "provider together has no batch API; providers with one: openai, anthropic, gemini" in err
    assert fb.log == [] and not (tmp_path / "out.csv").exists()
    assert not batch.state_path_for(tmp_path / "out.csv").exists()


def test_batch_without_cache_is_exit_2(benv, fb, tmp_path, capsys):
    write_prompts(tmp_path / "in.csv", PROMPTS[:2])
    assert run(OPENAI, tmp_path / "out.csv", "--batch", "--no_cache") == 2
    assert "--batch needs the response cache" in capsys.readouterr().err
    assert fb.log == []


def test_bad_key_stops_with_the_variable_named(benv, fb, tmp_path, capsys):
    write_prompts(tmp_path / "in.csv", PROMPTS[:2])
    fb.reject_key = True
    assert run(OPENAI, tmp_path / "out.csv", "--batch") == 2
    err = capsys.readouterr().err
    assert "HTTP 401" in err and "OPENAI_API_KEY" in err
    assert FAKE_KEYS["OPENAI_API_KEY"] not in err
    assert [r["status"] for r in state_records(tmp_path / "out.csv")] == ["failed"]


def test_keys_never_written(benv, fb, tmp_path, capsys):
    write_prompts(tmp_path / "in.csv", PROMPTS[:2])
    assert run(CLAUDE, tmp_path / "a.csv", "--batch") == 0
    assert run(OPENAI, tmp_path / "b.csv", "--batch") == 0
    text = capsys.readouterr().err
    for path in tmp_path.rglob("*"):
        if path.is_file():
            text += path.read_bytes().decode("utf-8", "replace")
    for value in FAKE_KEYS.values():
        assert value not in text


def test_state_file_skips_a_torn_line_and_appends_on_a_fresh_one(tmp_path):
    path = tmp_path / "x.csv.batches.jsonl"
    path.write_text('{"ref": "a", "status": "submitted", "batch_id": "b1", "keys": ["k"]}\n{"ref": "b", "sta')
    state = batch.BatchState(path)
    assert state.bad_lines == 1 and [r["ref"] for r in state.live()] == ["a"]
    state.write({"ref": "a", "status": "ended"})
    again = batch.BatchState(path)
    assert again.bad_lines == 1 and again.live() == [] and again.records["a"]["keys"] == ["k"]


def test_mixed_ensemble_batches_what_it_can_and_asks_the_rest(benv, fb, tmp_path, capsys):
    """A moderation ensemble of an OpenAI and a Together model: OpenAI through its batch API,
    Together (no batch API) synchronously, in one run."""
    from orbench.stages.moderate import main as moderate

    write_prompts(tmp_path / "in.csv", PROMPTS[:3])
    code = moderate(["--moderator_model", "openai/gpt-4o,together/meta-llama/Llama-3-70b-chat-hf",
                     "--input_file", "in.csv", "--output_file", str(tmp_path / "mod.csv"),
                     "--batch", "--poll_interval=0.001", "--max_retries=0"])
    assert code == 0, capsys.readouterr().err
    assert fb.count("create") == 1 and len(fb.submitted_ids()) == 3  # the OpenAI moderator's 3
    assert fb.count("chat") == 3  # the Together moderator's 3, asked directly
    out = read(tmp_path / "mod.csv")
    assert len(out) == 3 and (out["error"] == "").all()
    assert all(raw.startswith("Fake answer to:") for raw in out["openai_gpt-4o_raw"])


def test_unwritable_output_is_exit_2_before_any_batch_is_submitted(benv, fb, tmp_path, capsys):
    write_prompts(tmp_path / "in.csv", PROMPTS[:2])
    (tmp_path / "taken").write_text("a file, not a folder")
    assert run(OPENAI, tmp_path / "taken" / "out.csv", "--batch") == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    assert fb.log == []
