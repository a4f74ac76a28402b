"""Replicas: several addresses for one model (``--base_url URL1,URL2,...``) share a run's rows; a replica
killed mid-run is taken out and its rows go to the others. Three loopback fake servers in this
process; the stage runs as a real process (so a server can be stopped while it runs)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from conftest import ROOT, read, serving, write
from fake_provider import FakeProvider

CHECK = ROOT / "alignment_checker" / "check_alignment.py"
OUT = "in_vllm_org_model-a_alignment.csv"


@pytest.fixture
def three():
    with serving(FakeProvider()) as a, serving(FakeProvider()) as b, serving(FakeProvider()) as c:
        yield a, b, c


def _wait_for(check, what: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def _start(env, urls, *args):
    return subprocess.Popen([sys.executable, str(CHECK), "--model", "vllm/org/model-a", "--input_file", "in.csv",
                             "--base_url", ",".join(urls), "--max_retries", "1", *args],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_replica_killed_mid_run_every_row_done(env, tmp_path, three):
    a, b, c = three
    prompts = [f"question {i}" for i in range(30)]
    write(tmp_path / "in.csv", [{"prompt": p} for p in prompts])
    b.add_rule(hold=True)  # b takes requests and never answers them: then it dies
    urls = [f.openai_url for f in three]
    proc = _start(env, urls, "--concurrency", "2")
    _wait_for(lambda: b.count() >= 1, "a request at b")
    b.stop()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    out = read(tmp_path / OUT)
    assert out["prompt"].tolist() == prompts
    assert out["response"].tolist() == [f"Fake answer to: {p}" for p in prompts]
    assert set(out["error"]) == {""}
    answered_by = {}
    for fake in (a, c):
        for request in fake.requests:
            answered_by.setdefault(request["body"]["messages"][-1]["content"], []).append(fake)
    assert sorted(answered_by) == sorted(prompts)  # every row answered by a live replica
    assert a.count() > 0 and c.count() > 0  # both shared the work
    meta = json.loads((tmp_path / f"{OUT}.meta.json").read_text())
    [ra, rb, rc] = meta["replicas"]
    assert [r["base_url"] for r in meta["replicas"]] == urls
    assert rb["taken_out"].startswith("stopped answering") and rb["answered"] == 0
    assert ra["taken_out"] is None and rc["taken_out"] is None
    assert ra["answered"] + rc["answered"] == len(prompts)
    assert "replica" in err and "taken out" in err


def test_concurrency_per_replica_and_least_loaded_first(env, tmp_path, three):
    """Every replica holds its requests: the run keeps --concurrency rows in flight per replica (6 for
    2 x 3), and least loaded first puts 2 at each; once they answer, every row is done."""
    write(tmp_path / "in.csv", [{"prompt": f"question {i}"} for i in range(12)])
    for fake in three:
        fake.add_rule(hold=True)
    proc = _start(env, [f.openai_url for f in three], "--concurrency", "2")
    _wait_for(lambda: sum(f.count() for f in three) >= 6, "6 requests in flight")
    assert [f.count() for f in three] == [2, 2, 2]
    for fake in three:
        fake.release()  # the held requests are answered 503 (asked again), the rules dropped
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert read(tmp_path / OUT)["error"].tolist() == [""] * 12
    meta = json.loads((tmp_path / f"{OUT}.meta.json").read_text())
    answered = [r["answered"] for r in meta["replicas"]]
    assert sum(answered) == 12 and all(answered)
    assert len(meta["rate_limits"]) == 3  # a pacer per address



def test_no_replica_ever_answered_is_exit_2(env, tmp_path, closed_port):
    write(tmp_path / "in.csv", [{"prompt": "question"}])
    urls = [f"http://127.0.0.1:{closed_port()}/v1", f"http://127.0.0.1:{closed_port()}/v1"]
    proc = _start(env, urls)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err
    assert "error: no replica has answered since the run started" in err
    assert all(url in err for url in urls)


def test_all_replicas_gone_mid_run_rows_wait_for_a_rerun(env, tmp_path, three):
    a, b, _ = three
    write(tmp_path / "in.csv", [{"prompt": f"early {i}"} for i in range(4)] + [{"prompt": f"HOLD {i}"} for i in range(4)])
    for fake in (a, b):
        fake.add_rule(match="HOLD", hold=True)
    proc = _start(env, [a.openai_url, b.openai_url], "--concurrency", "1")
    _wait_for(lambda: any("HOLD" in r["body"]["messages"][-1]["content"] for r in a.requests)
              and any("HOLD" in r["body"]["messages"][-1]["content"] for r in b.requests), "held requests at both")
    a.stop()
    b.stop()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    out = read(tmp_path / OUT)
    assert out["response"].tolist()[:4] == [f"Fake answer to: early {i}" for i in range(4)]  # kept
    assert all(e.startswith("check_alignment: every replica has stopped answering") for e in out["error"][4:])
    assert "4 rows still have errors" in err and "rerun the same command to retry them" in err
