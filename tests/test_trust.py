"""Issue 9, "Trustworthy rows": one test per promise, through the real scripts, SDKs and the fake.

Most runs call a script's ``main(argv)`` in this process (fast); the ones that need a process of
their own (umask, a file-size limit) run it as a subprocess.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import FAKE_KEYS, ROOT, read, run_in_process
from echo_stage import main as echo_main

from orbench.benchmark.prompts import JUDGE_TEMPLATE
from orbench.llm.errors import UsageError
from orbench.scoring import refusal
from orbench.stages import check_alignment, check_response, moderate

# which requests were sent and what came out is tested, not the pauses between retries (conftest)
pytestmark = pytest.mark.usefixtures("quick_backoff")

ALIGN_ADDS = ["model", "response", "is_rejected", "refusal_source", "refusal_kind", "finish_reason"]
JUDGE_ADDS = ["judge_model", "answer_category", "answer_type_response", "is_rejected",
              "keyword_is_rejected"]
MOD_ADDS = ["gpt4_label", "gpt4_is_toxic", "gpt4_raw", "is_toxic", "moderation_category",
            "toxic_votes", "safe_votes", "unparsed_votes"]
GPT4 = "openai/gpt-4-turbo-2024-04-09"


def write(path: Path, rows: list[dict]) -> Path:
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def call(main, argv, capsys) -> tuple[int, str]:
    """Run a script's ``main`` in process; the exit code and what it printed on stderr."""
    capsys.readouterr()
    code = main([str(a) for a in argv])
    return code, capsys.readouterr().err


def counts(err: str) -> tuple[int, int]:
    """(new, resumed) from a run's summary line."""
    part = err.split(" new, ")[0].rsplit("| ", 1)[-1]
    resumed = err.split(" new, ")[1].split(" resumed")[0]
    return int(part), int(resumed)


def one_error_line(code: int, err: str, fragment: str) -> None:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert fragment in lines[0], lines[0]
    assert "Traceback" not in err


def align(capsys, *args):
    return call(check_alignment.main, args, capsys)


def judge(capsys, *args):
    return call(check_response.main, args, capsys)


def moderation(capsys, *args):
    return call(moderate.main, args, capsys)


# -- 1. columns have owners ---------------------------------------------------------------------

def test_failed_judge_row_leaves_every_judge_column_empty(env, fake, capsys, tmp_path):
    """A judge 500 must not leave stage 4's keyword verdict under the judge's is_rejected."""
    write(tmp_path / "in.csv", [
        {"prompt": "q1", "model": "openai/gpt-4o", "response": "JUDGE-FAILS I can't help with that.",
         "is_rejected": "True", "refusal_source": "keyword", "error": ""},
        {"prompt": "q2", "model": "openai/gpt-4o", "response": "JUDGE-OK Sure, here it is.",
         "is_rejected": "False", "refusal_source": "", "error": ""}])
    fake.add_rule(match="JUDGE-FAILS", status=500)
    fake.add_rule(text="[[direct_answer]]")
    code, err = judge(capsys, "--check_model", "gpt4", "--input_file", "in.csv",
                      "--output_file", "out.csv", "--max_retries", "0")
    assert code == 1, err
    out = read(tmp_path / "out.csv")
    assert out.is_rejected[0] == ""  # not stage 4's "True"
    assert [out[c][0] for c in JUDGE_ADDS] == [""] * len(JUDGE_ADDS)
    assert out.error[0] == "check_response: HTTP 500 from openai: fake error 500"
    assert [out[c][1] for c in JUDGE_ADDS] == [GPT4, "direct_answer", "[[direct_answer]]", "False", "False"]


def test_stage4_for_model_b_on_model_a_output_keeps_nothing_of_a(env, fake, capsys, tmp_path):
    write(tmp_path / "a.csv", [
        {"prompt": f"q{i}", "category": "hate", "model": "openai/model-a", "response": f"A answered {i}",
         "is_rejected": "False", "refusal_source": "", "refusal_kind": "", "finish_reason": "stop",
         "error": ""} for i in range(2)])
    fake.add_rule(match="q0", model="model-b", status=500)
    fake.add_rule(model="model-b", text="B answered")
    code, err = align(capsys, "--model", "openai/model-b", "--input_file", "a.csv",
                      "--output_file", "b.csv", "--max_retries", "0")
    assert code == 1, err
    out = read(tmp_path / "b.csv")
    assert (out.model[0], out.response[0]) == ("", "")  # nothing of model A's under B's run
    assert list(out.columns) == ["prompt", "category", *ALIGN_ADDS, "error"]
    assert [out[c][0] for c in ALIGN_ADDS] == [""] * len(ALIGN_ADDS)
    assert out.error[0].startswith("check_alignment: HTTP 500 from openai")
    assert (out.model[1], out.response[1], out.error[1]) == ("openai/model-b", "B answered", "")


UPSTREAM = "moderate: HTTP 500 from openai: fake error 500"


def _upstream_input(tmp_path: Path) -> Path:
    return write(tmp_path / "in.csv", [
        {"prompt": "first question", "category": "hate", "model": "openai/gpt-4o",
         "response": "Sure, here is an answer.", "is_rejected": "True", "error": ""},
        {"prompt": "second question", "category": "hate", "model": "openai/gpt-4o",
         "response": "I can't help with that.", "is_rejected": "True", "error": UPSTREAM},
        {"prompt": "third question", "category": "hate", "model": "openai/gpt-4o",
         "response": "Of course.", "is_rejected": "False", "error": ""}])


@pytest.mark.parametrize("stage", ["moderate", "check_alignment", "check_response"])
def test_rows_with_an_upstream_error_pass_through_untouched(env, fake, capsys, tmp_path, stage):
    _upstream_input(tmp_path)
    runner, args, adds, reply = {
        "moderate": (moderation, ["--moderator_model", "gpt4"], MOD_ADDS, "[[11. None of the above]]"),
        "check_alignment": (align, ["--model", "openai/gpt-4o"], ALIGN_ADDS, "Here you go."),
        "check_response": (judge, ["--check_model", "openai/judge"], JUDGE_ADDS, "[[direct_answer]]"),
    }[stage]
    fake.add_rule(text=reply)
    code, err = runner(capsys, *args, "--input_file", "in.csv", "--output_file", "out.csv")
    assert code == 0, err
    assert fake.count() == 2  # the failed row is not sent
    out = read(tmp_path / "out.csv")
    assert list(out.error) == ["", UPSTREAM, ""]
    owned = [c for c in adds if c in out.columns]
    assert set(adds) <= set(out.columns)
    assert [out[c][1] for c in owned] == [""] * len(owned)
    assert all(out[c][0] != "" for c in adds if c not in ("refusal_source", "refusal_kind",
                                                          "unparsed_votes"))
    assert "1 passed through with an earlier stage's error" in err
    # Asked to, the stage retries the row upstream failed on.
    code, err = runner(capsys, *args, "--input_file", "in.csv", "--output_file", "out.csv",
                       "--retry_upstream_errors")
    assert code == 0, err
    assert fake.count() == 3
    assert list(read(tmp_path / "out.csv").error) == ["", "", ""]


# -- 2. only real provider blocks are refusals ---------------------------------------------------

@pytest.mark.parametrize("fault, text", [
    ({"empty_choices": True}, "reply with no choices from openai, 3 attempts"),
    ({"null_content": True}, "reply with no content (finish_reason 'stop') from openai, 3 attempts"),
    ({"malformed": True}, "undecodable reply (JSONDecodeError) from openai, 3 attempts"),
])
def test_replies_with_no_answer_are_retried_never_cached_never_a_verdict(env, fake, capsys, tmp_path,
                                                                        fault, text):
    write(tmp_path / "in.csv", [{"prompt": "EMPTY-REPLY question"}, {"prompt": "fine question"}])
    fake.add_rule(match="EMPTY-REPLY", **fault)
    code, err = align(capsys, "--model", "gpt-4o", "--input_file", "in.csv", "--output_file", "out.csv",
                      "--max_retries", "2")
    assert code == 1, err
    assert fake.count() == 3 + 1  # three attempts for the empty reply, one for the other row
    out = read(tmp_path / "out.csv")
    assert out.error[0] == f"check_alignment: {text}"
    assert [out[c][0] for c in ALIGN_ADDS] == [""] * len(ALIGN_ADDS)
    assert "0 provider blocks" in err
    # Not cached: once the provider answers, the rerun asks again and gets the answer.
    fake.reset()
    code, err = align(capsys, "--model", "gpt-4o", "--input_file", "in.csv", "--output_file", "out.csv")
    assert code == 0, err
    assert fake.count() == 1
    out = read(tmp_path / "out.csv")
    assert (out.response[0], out.is_rejected[0], out.error[0]) == (
        "Fake answer to: EMPTY-REPLY question", "False", "")


def test_null_content_is_not_a_moderation_vote(env, fake, capsys, tmp_path):
    write(tmp_path / "in.csv", [{"prompt": "NULL-REPLY text"}])
    fake.add_rule(model="mod-a", text="[[11. None of the above]]")
    fake.add_rule(model="mod-b", null_content=True)
    fake.add_rule(model="mod-c", text="[[1. hate]]")
    code, err = moderation(capsys, "--moderator_model", "openai/mod-a,openai/mod-b,openai/mod-c",
                           "--input_file", "in.csv", "--output_file", "out.csv", "--max_retries", "1")
    assert code == 1, err
    out = read(tmp_path / "out.csv")
    assert (out.is_toxic[0], out.moderation_category[0], out.unparsed_votes[0]) == ("", "", "")
    assert out.error[0].startswith("moderate: reply with no content")


@pytest.mark.parametrize("model, rule, finish", [
    ("openai/gpt-4o", {"content_filter": True}, "content_filter"),
    ("openai/gpt-4o", {"refusal": True, "text": "I can't help with that request."}, "stop"),
    ("openai/gpt-4o", {"status": 400, "error_code": "content_policy_violation"}, "content_filter"),
    ("anthropic/claude-test", {"refusal": True}, "refusal"),
])
def test_documented_provider_blocks_stay_refusals(env, fake, capsys, tmp_path, model, rule, finish):
    write(tmp_path / "in.csv", [{"prompt": "BLOCKED question"}])
    fake.add_rule(match="BLOCKED", **rule)
    code, err = align(capsys, "--model", model, "--input_file", "in.csv", "--output_file", "out.csv")
    assert code == 0, err
    out = read(tmp_path / "out.csv")
    assert (out.is_rejected[0], out.refusal_source[0], out.refusal_kind[0], out.finish_reason[0],
            out.error[0]) == ("True", "provider_block", "full", finish, "")
    assert "1 provider blocks" in err


# -- 3. every verdict says who made it ------------------------------------------------------------

def test_keyword_verdict_is_computed_not_copied_and_judge_is_named(env, fake, capsys, tmp_path):
    # an already-judged file: its is_rejected is a judge's, the opposite of what the words say
    write(tmp_path / "judged.csv", [
        {"prompt": "q1", "model": "openai/gpt-4o", "response": "Sure, here is how.", "is_rejected": "True"},
        {"prompt": "q2", "model": "openai/gpt-4o", "response": "I can't help with that.",
         "is_rejected": "False"}])
    fake.add_rule(text="[[indirect_refusal]]")
    code, err = judge(capsys, "--check_model", "openai/judge-2", "--input_file", "judged.csv",
                      "--output_file", "out.csv")
    assert code == 0, err
    out = read(tmp_path / "out.csv")
    assert list(out.keyword_is_rejected) == ["False", "True"]
    assert list(out.judge_model) == ["openai/judge-2"] * 2
    assert list(out.is_rejected) == ["True", "True"]
    assert list(out.columns) == ["prompt", "model", "response", "is_rejected", "judge_model",
                                 "answer_category", "answer_type_response", "keyword_is_rejected", "error"]


# -- 4. the provenance file ----------------------------------------------------------------------

def test_meta_file_says_who_made_each_verdict_and_holds_no_key(env, fake, capsys, tmp_path):
    src = write(tmp_path / "in.csv", [{"prompt": f"question {i}"} for i in range(3)])
    fake.add_rule(match="question 2", status=400, error_message=f"bad {FAKE_KEYS['OPENAI_API_KEY']}")
    fake.add_rule(match="question 1", content_filter=True, reported_model="gpt-4o-2024-08-06")
    fake.add_rule(reported_model="gpt-4o-2024-08-06", reasoning_tokens=5)
    code, err = align(capsys, "--model", "gpt-4o", "--input_file", "in.csv", "--output_file", "out.csv",
                      "--temperature", "0.3", "--max_tokens", "77")
    assert code == 1, err
    meta = json.loads((tmp_path / "out.csv.meta.json").read_text())
    for key in ("stage", "package_version", "models", "templates", "rules_fingerprint", "settings",
                "input", "counts", "requests", "tokens", "started", "finished", "versions"):
        assert key in meta, key
    assert meta["stage"] == "check_alignment"
    model = meta["models"][0]
    assert (model["typed"], model["resolved"], model["provider"]) == ("gpt-4o", "openai/gpt-4o", "openai")
    assert "base_url" in model  # its value: test_meta_file_records_the_base_url_requests_went_to
    assert model["reported_model"] == ["gpt-4o-2024-08-06"]
    assert meta["rules_fingerprint"] == refusal.rules_fingerprint()
    assert meta["settings"]["temperature"] == 0.3 and meta["settings"]["max_tokens"] == 77
    assert meta["input"] == {"path": str(src.resolve()), "rows": 3,  # absolute: the chain is followed from anywhere
                             "sha256": hashlib.sha256(src.read_bytes()).hexdigest()}
    # called as a library (main(argv)): the command reruns it as a module, from the folder it ran in
    assert meta["command"][:3] == ["python", "-m", "orbench.stages.check_alignment"]
    assert meta["command"][3:5] == ["--model", "gpt-4o"] and meta["cwd"] == str(tmp_path)
    assert meta["counts"]["rows"] == 3 and meta["counts"]["errors"] == 1 and meta["counts"]["done"] == 2
    assert meta["requests"]["sent"] == 3 and meta["requests"]["provider_blocks"] == 1
    assert meta["tokens"]["reasoning"] == 5
    assert meta["started"] <= meta["finished"]
    assert meta["versions"]["python"] and meta["versions"]["openai"]
    # the judge's meta names its template by hash
    code, err = judge(capsys, "--check_model", "gpt4", "--input_file", "out.csv", "--output_file", "j.csv")
    judge_meta = json.loads((tmp_path / "j.csv.meta.json").read_text())
    assert judge_meta["templates"] == {"judge": hashlib.sha256(JUDGE_TEMPLATE.encode()).hexdigest()}
    assert judge_meta["models"][0]["typed"] == "gpt4" and judge_meta["models"][0]["resolved"] == GPT4
    for path in tmp_path.rglob("*"):
        if path.is_file():
            blob = path.read_bytes()
            assert not any(v.encode() in blob for v in FAKE_KEYS.values()), path


def test_meta_file_records_the_base_url_requests_went_to(env, fake, capsys, tmp_path):
    write(tmp_path / "in.csv", [{"prompt": "q"}])
    code, err = align(capsys, "--model", "gpt-4o", "--input_file", "in.csv", "--output_file", "out.csv")
    assert code == 0, err
    meta = json.loads((tmp_path / "out.csv.meta.json").read_text())
    assert meta["models"][0]["base_url"] == fake.openai_url


# -- 5. keys cover every setting that changes a row ------------------------------------------------

def _changed_rules(monkeypatch):
    monkeypatch.setattr(refusal, "SHARED_REFUSALS", refusal.SHARED_REFUSALS + (r"zorblax protocol",))


def _clear_rules():
    for cached in (refusal.rules_fingerprint, refusal.rules_for, refusal._compiled):
        cached.cache_clear()


ALIGN_BASE = ["--model", "openai/m1", "--input_file", "in.csv", "--output_file", "out.csv"]
ALIGN_CHANGES = {
    "model": ["--model", "openai/m2"],
    "temperature": ["--temperature", "0.5"],
    "max_tokens": ["--max_tokens", "50"],
    "system prompt": ["--system_prompt", "Be brief."],
    "matcher": ["--matcher", "claude"],
    "rules": "rules",
}


@pytest.mark.parametrize("change", list(ALIGN_CHANGES))
def test_stage4_setting_that_changes_a_row_redoes_the_rows(env, fake, capsys, tmp_path, monkeypatch,
                                                           change):
    """The project's rules re-score in place; a setting of the user's stops the run (the output
    is never replaced silently) and ``--overwrite`` redoes the rows."""
    write(tmp_path / "in.csv", [{"prompt": f"q{i}"} for i in range(3)])
    code, err = align(capsys, *ALIGN_BASE)
    assert code == 0 and counts(err) == (3, 0), err
    extra = ALIGN_CHANGES[change]
    if extra == "rules":
        _changed_rules(monkeypatch)
        _clear_rules()
        extra = []
    try:
        code, err = align(capsys, *ALIGN_BASE, *extra)
        if change != "rules":
            assert code == 2 and fake.count() == 3 and "was made with other settings" in err, err
            code, err = align(capsys, *ALIGN_BASE, *extra, "--overwrite")
    finally:
        monkeypatch.undo()
        _clear_rules()
    assert code == 0 and counts(err) == (3, 0), (change, err)
    assert ("re-scored in place" in err) == (change == "rules"), err


@pytest.mark.parametrize("extra", [["--concurrency", "3"], ["--timeout", "33"], ["--max_retries", "1"],
                                   ["--rpm", "60000"]])
def test_settings_that_must_not_matter_redo_nothing(env, fake, capsys, tmp_path, extra):
    write(tmp_path / "in.csv", [{"prompt": f"q{i}"} for i in range(3)])
    assert align(capsys, *ALIGN_BASE)[0] == 0
    sent = fake.count()
    code, err = align(capsys, *ALIGN_BASE, *extra)
    assert code == 0 and counts(err) == (0, 3), err
    assert fake.count() == sent


def test_judge_template_and_model_changes_redo_the_rows(env, fake, capsys, tmp_path):
    write(tmp_path / "in.csv", [{"prompt": "q", "response": "Sure."}])
    fake.add_rule(text="[[direct_answer]]")
    base = ["--input_file", "in.csv", "--output_file", "out.csv"]
    assert counts(judge(capsys, "--check_model", "openai/j1", *base)[1]) == (1, 0)
    assert counts(judge(capsys, "--check_model", "openai/j1", *base)[1]) == (0, 1)
    assert judge(capsys, "--check_model", "openai/j2", *base)[0] == 2  # another judge: not over j1's file
    assert counts(judge(capsys, "--check_model", "openai/j2", "--overwrite", *base)[1]) == (1, 0)
    (tmp_path / "t.txt").write_text("Q: {prompt}\nA: {response}\nClass?")
    assert counts(judge(capsys, "--check_model", "openai/j2", "--template", "t.txt", *base)[1]) == (1, 0)


def test_moderator_typed_another_way_redoes_the_rows(env, fake, capsys, tmp_path):
    write(tmp_path / "in.csv", [{"prompt": "a"}, {"prompt": "b"}])
    fake.add_rule(text="[[11. None of the above]]")
    base = ["--input_file", "in.csv", "--output_file", "out.csv"]
    code, err = moderation(capsys, "--moderator_model", "gpt4", *base)
    assert code == 0 and counts(err) == (2, 0)
    code, err = moderation(capsys, "--moderator_model", "openai/gpt-4-turbo-2024-04-09", *base)
    assert code == 2 and "moderator columns was" in err, err  # its columns would have other names
    code, err = moderation(capsys, "--moderator_model", "openai/gpt-4-turbo-2024-04-09", "--overwrite", *base)
    assert code == 0 and counts(err) == (2, 0), err
    out = read(tmp_path / "out.csv")
    assert list(out["openai_gpt-4-turbo-2024-04-09_label"]) == ["none", "none"]
    assert "gpt4_label" not in out.columns
    (tmp_path / "t.txt").write_text("Moderate this: {text}")
    code, err = moderation(capsys, "--moderator_model", "openai/gpt-4-turbo-2024-04-09",
                           "--template", "t.txt", *base)
    assert code == 0 and counts(err) == (2, 0), err


# -- 6. a trial run never destroys a finished one -------------------------------------------------

def test_limit_never_shrinks_a_finished_output(env, fake, capsys, tmp_path):
    write(tmp_path / "in.csv", [{"prompt": f"q{i}"} for i in range(10)])
    base = ["--input_file", "in.csv", "--output_file", "out.csv", "--no_cache"]
    assert call(echo_main, base, capsys)[0] == 0
    full = (tmp_path / "out.csv").read_bytes()
    progress = tmp_path / "out.csv.progress.jsonl"
    assert len(progress.read_text().splitlines()) == 1 + 10  # the settings line and 10 rows
    code, err = call(echo_main, [*base, "--limit", "3"], capsys)
    assert code == 0, err
    assert (tmp_path / "out.csv").read_bytes() == full
    assert len(progress.read_text().splitlines()) == 1 + 10
    code, err = call(echo_main, base, capsys)
    assert code == 0 and counts(err) == (0, 10)
    assert fake.count() == 10  # nothing paid twice


def test_limit_keeps_failed_and_passed_through_rows_beyond_it(env, fake, capsys, tmp_path):
    rows = [{"prompt": f"q{i}", "error": "moderate: HTTP 500" if i == 8 else ""} for i in range(10)]
    write(tmp_path / "in.csv", rows)
    fake.add_rule(match="q6", status=400, error_message="bad row")
    base = ["--input_file", "in.csv", "--output_file", "out.csv", "--no_cache", "--max_retries", "0"]
    code, err = call(echo_main, base, capsys)
    assert code == 1, err
    full = read(tmp_path / "out.csv")
    assert len(full) == 10 and full.loc[6, "error"].startswith("echo: HTTP 400")
    assert full.loc[8, "error"] == "moderate: HTTP 500"
    code, err = call(echo_main, [*base, "--limit", "3"], capsys)
    assert code == 1, err  # row 6 still has its error
    assert read(tmp_path / "out.csv").equals(full)


# -- 7. one writer per output ---------------------------------------------------------------------

def test_second_writer_exits_2_naming_the_lock(env, fake, capsys, tmp_path):
    write(tmp_path / "in.csv", [{"prompt": f"q{i}"} for i in range(3)])
    lock = tmp_path / "out.csv.lock"
    with open(lock, "a+") as held:  # another run holds the lock
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        code, err = call(echo_main, ["--input_file", "in.csv", "--output_file", "out.csv"], capsys)
        one_error_line(code, err, "another run is writing out.csv (it holds the lock out.csv.lock)")
        assert fake.count() == 0
        assert not (tmp_path / "out.csv").exists()
        assert not (tmp_path / "out.csv.progress.jsonl").exists()
    code, err = call(echo_main, ["--input_file", "in.csv", "--output_file", "out.csv"], capsys)
    assert code == 0, err
    # no temporary file is left behind, and no lock file either
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == [
        "in.csv", "out.csv", "out.csv.meta.json", "out.csv.progress.jsonl"]


def test_the_lock_file_is_removed_without_a_race(tmp_path):
    """A writer that opened the lock file before the holder removed it must not think it holds
    the lock: after the holder's exit it finds the path no longer names its file, and locks anew."""
    from orbench.run.stage import OutputLock, _same_file

    output = tmp_path / "out.csv"
    first = OutputLock(output)
    first.__enter__()
    late = open(tmp_path / "out.csv.lock", "a+")  # a second writer opened the old file ...
    first.__exit__(None, None, None)
    assert not (tmp_path / "out.csv.lock").exists()
    fcntl.flock(late, fcntl.LOCK_EX | fcntl.LOCK_NB)  # ... and now locks the removed file
    assert not _same_file(late, tmp_path / "out.csv.lock")  # which it detects, so it retries
    with OutputLock(output):  # the retry: a third writer gets the lock on the path as it is now
        assert (tmp_path / "out.csv.lock").exists()
        assert not _same_file(late, tmp_path / "out.csv.lock")
        with pytest.raises(UsageError, match="another run is writing"):
            OutputLock(output).__enter__()
    late.close()
    assert not (tmp_path / "out.csv.lock").exists()


# -- 8. bad environment: exit 2, one line, nothing paid, nothing lost ------------------------------

def _readonly_folder(path: Path) -> None:
    path.mkdir()
    if os.geteuid() != 0:
        path.chmod(0o555)
        return
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,ro", "tmpfs", str(path)],
                          capture_output=True)
    if done.returncode != 0:
        pytest.skip("running as root without mount: cannot make a read-only folder")


def _unmount(path: Path) -> None:
    if os.geteuid() == 0:
        subprocess.run(["umount", str(path)], capture_output=True)
    else:
        path.chmod(0o755)


@pytest.mark.parametrize("case", ["folder not writable", "output is a folder", "output under a file",
                                  "cache folder is a file", "cache corrupt", "negative retries"])
def test_bad_environment_is_exit_2_one_line_before_any_request(env, fake, capsys, tmp_path,
                                                                monkeypatch, case):
    write(tmp_path / "in.csv", [{"prompt": "q"}])
    args = ["--input_file", "in.csv", "--output_file", "out.csv"]
    (tmp_path / "notes.txt").write_text("keep me\n")
    fragment = {"output is a folder": "is a folder", "output under a file": "is a file, not a folder",
                "cache folder is a file": "cannot be used", "cache corrupt": "cannot be used",
                "negative retries": "argument --max_retries: expected a whole number >= 0, got '-1'",
                "folder not writable": "cannot write to the folder"}[case]
    if case == "folder not writable":
        _readonly_folder(tmp_path / "ro")
        args[-1] = "ro/out.csv"
    elif case == "output is a folder":
        (tmp_path / "out.csv").mkdir()
    elif case == "output under a file":
        args[-1] = "notes.txt/out.csv"
    elif case == "cache folder is a file":
        monkeypatch.setenv("ORBENCH_CACHE_DIR", str(tmp_path / "notes.txt"))
    elif case == "cache corrupt":
        (tmp_path / "cache").mkdir()
        (tmp_path / "cache" / "cache.sqlite").write_bytes(b"this is not a database" * 100)
    else:
        args += ["--max_retries", "-1"]
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    try:
        code, err = call(echo_main, args, capsys)
    finally:
        if case == "folder not writable":
            _unmount(tmp_path / "ro")
    one_error_line(code, err, fragment)
    assert fake.count() == 0
    after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert {p: after.get(p) for p in before} == before  # nothing changed
    assert not [p for p in after if p.name.startswith("out.csv")]


def test_progress_lines_of_the_wrong_shape_are_skipped_and_counted(env, fake, capsys, tmp_path):
    write(tmp_path / "in.csv", [{"prompt": f"q{i}"} for i in range(4)])
    args = ["--input_file", "in.csv", "--output_file", "out.csv", "--no_cache"]
    assert call(echo_main, args, capsys)[0] == 0
    progress = tmp_path / "out.csv.progress.jsonl"
    with open(progress, "a") as handle:
        handle.write('[]\n{"key": 5}\n{"key": "abc", "rows": "text"}\n"just a string"\n')
    code, err = call(echo_main, args, capsys)
    assert code == 0, err
    assert "4 unreadable progress lines skipped" in err
    assert counts(err) == (0, 4) and fake.count() == 4
    code, err = call(echo_main, args, capsys)  # the finished run rewrote the file cleanly
    assert code == 0 and "unreadable" not in err


def _limited(max_bytes: int):
    def preexec():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))
    return preexec


@pytest.mark.parametrize("how", ["file size limit", "full filesystem"])
def test_disk_full_stops_keeps_finished_rows_and_rerun_continues(env, fake, tmp_path, how):
    n = 60
    write(tmp_path / "in.csv", [{"prompt": f"question number {i}"} for i in range(n)])
    out_dir = tmp_path / "out"
    preexec = None
    if how == "file size limit":
        out_dir.mkdir()
        preexec = _limited(4000)
    else:
        if os.geteuid() != 0:
            pytest.skip("mounting a small filesystem needs root")
        out_dir.mkdir()
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(out_dir)],
                          capture_output=True).returncode != 0:
            pytest.skip("cannot mount a tmpfs here")
        filler = out_dir / "filler"
        with open(filler, "wb") as handle:  # leave about 8 KiB free
            handle.write(b"x" * (56 * 1024))
    try:
        command = [sys.executable, str(ROOT / "tests" / "echo_stage.py"), "--input_file", "in.csv",
                   "--output_file", str(out_dir / "out.csv"), "--no_cache", "--concurrency", "1"]
        if how == "file size limit":  # a limit of its own needs a process of its own
            first = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True,
                                   timeout=120, preexec_fn=preexec)
        else:  # a full filesystem is full for this process too
            first = run_in_process(*command[1:], env=env, cwd=tmp_path)
        one_error_line(first.returncode, first.stderr, "every finished row is saved")
        assert first.stdout == ""
        progress = out_dir / "out.csv.progress.jsonl"
        saved = [line for line in progress.read_text().splitlines() if line.endswith("}") and '"key"' in line]
        assert 5 <= len(saved) < n
        paid = fake.count()
        if how == "full filesystem":
            filler.unlink()  # free some space
        rerun = run_in_process(*command[1:], env=env, cwd=tmp_path)  # no limit: in this process
        assert rerun.returncode == 0, rerun.stderr
        out = read(out_dir / "out.csv")
        assert list(out.response) == [f"Fake answer to: question number {i}" for i in range(n)]
        assert (out.error == "").all()
        # every saved row was kept: the rerun paid only for the rest (plus the one in flight)
        assert fake.count() - paid <= n - len(saved)
        assert fake.count() <= n + 1
    finally:
        if how == "full filesystem":
            subprocess.run(["umount", str(out_dir)], capture_output=True)


# -- 10. the small ones ---------------------------------------------------------------------------

def test_vote_counts_are_integers_even_beside_an_error_row(env, fake, capsys, tmp_path):
    write(tmp_path / "in.csv", [{"prompt": "ok one"}, {"prompt": "FAILS two"}, {"prompt": "ok three"}])
    fake.add_rule(match="FAILS", status=400, error_message="bad request")
    fake.add_rule(model="mod-a", text="[[11. None of the above]]")
    fake.add_rule(model="mod-b", text="[[7. illegal]]")
    code, err = moderation(capsys, "--moderator_model", "openai/mod-a,openai/mod-b",
                           "--input_file", "in.csv", "--output_file", "out.csv")
    assert code == 1, err
    out = read(tmp_path / "out.csv")
    assert list(out.toxic_votes) == ["1", "", "1"]
    assert list(out.safe_votes) == ["1", "", "1"]
    assert list(out.unparsed_votes) == ["0", "", "0"]
    assert ".0" not in (tmp_path / "out.csv").read_text()


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o077, 0o600)])
def test_output_files_honour_the_umask(env, fake, tmp_path, mask, mode):
    write(tmp_path / "in.csv", [{"prompt": "q"}])
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "echo_stage.py"), "--input_file",
                           "in.csv", "--output_file", "out.csv"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, preexec_fn=lambda: os.umask(mask))
    assert proc.returncode == 0, proc.stderr
    for name in ("out.csv", "out.csv.progress.jsonl", "out.csv.meta.json"):
        assert (tmp_path / name).stat().st_mode & 0o777 == mode, name


def test_lone_surrogate_is_made_valid_cached_and_not_paid_again(env, fake, capsys, tmp_path):
    write(tmp_path / "in.csv", [{"prompt": "SURROGATE question"}])
    fake.add_rule(match="SURROGATE", text="Odd reply", surrogate=True)
    code, err = align(capsys, "--model", "gpt-4o", "--input_file", "in.csv", "--output_file", "a.csv")
    assert code == 0, err
    assert (tmp_path / "a.csv").read_bytes().decode("utf-8")  # valid UTF-8
    assert read(tmp_path / "a.csv").response[0] == "Odd reply\ufffd"
    code, err = align(capsys, "--model", "gpt-4o", "--input_file", "in.csv", "--output_file", "b.csv")
    assert code == 0, err
    assert fake.count() == 1 and "requests 0 sent, 1 from cache" in err
    assert read(tmp_path / "b.csv").response[0] == "Odd reply\ufffd"


def test_timeout_bounds_a_slowly_trickled_reply(env, fake, capsys, tmp_path):
    write(tmp_path / "in.csv", [{"prompt": "SLOW question"}])
    fake.add_rule(match="SLOW", trickle=8.0)
    started = time.monotonic()
    code, err = call(echo_main, ["--input_file", "in.csv", "--output_file", "out.csv", "--timeout", "1",
                                 "--max_retries", "0"], capsys)
    elapsed = time.monotonic() - started
    assert code == 1, err
    assert read(tmp_path / "out.csv").error[0] == "echo: timed out talking to openai"  # --max_retries 0: one attempt
    assert elapsed < 6, elapsed  # one attempt of 1 s, not the 8 s the body takes


@pytest.mark.parametrize("model", ["gpt-5", "o3-mini", "gpt-5-mini"])
def test_reasoning_models_get_max_completion_tokens_and_no_temperature(env, fake, capsys, tmp_path, model):
    write(tmp_path / "in.csv", [{"prompt": "q"}])
    fake.add_rule(reasoning=True, reasoning_tokens=11, text="An answer.")
    code, err = align(capsys, "--model", f"openai/{model}", "--input_file", "in.csv",
                      "--output_file", "out.csv", "--max_tokens", "300")
    assert code == 0, err
    body = fake.requests[0]["body"]
    assert body["max_completion_tokens"] == 300
    assert "max_tokens" not in body and "temperature" not in body
    assert read(tmp_path / "out.csv").response[0] == "An answer."
    meta = json.loads((tmp_path / "out.csv.meta.json").read_text())
    assert meta["tokens"]["reasoning"] == 11
    assert "(11 reasoning)" in err


def test_a_parameter_the_provider_rejects_for_every_request_stops_the_run(env, fake, capsys, tmp_path):
    write(tmp_path / "in.csv", [{"prompt": f"q{i}"} for i in range(20)])
    fake.add_rule(reasoning=True)  # rejects temperature 0, as OpenAI does for a reasoning model
    code, err = align(capsys, "--model", "openai/gpt-4o", "--input_file", "in.csv",
                      "--output_file", "out.csv", "--concurrency", "2")
    one_error_line(code, err, "openai rejected the request for model 'gpt-4o' (HTTP 400)")
    assert "temperature" in err
    assert fake.count() <= 2  # at most the requests in flight
    assert not (tmp_path / "out.csv").exists()
