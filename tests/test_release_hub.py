"""orbench-release --push_to_hub against the loopback fake Hub (tests/fake_hub.py), never the real one.

The first push runs the real script as a process with ``HF_ENDPOINT`` pointing at the fake and Xet
off (``HF_HUB_DISABLE_XET=1``), so huggingface_hub reads both as a user's run would. The other
cases run ``main(argv)`` in this process with huggingface_hub's endpoint, token file and Xet switch
set to the same values (its ``constants``, read when it was imported), which is what those
variables set in a new process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, serving
from fake_hub import USER, FakeHub

from orbench.analysis.release import build as release

WRITE, READ = "hf_fake_write_token_0123456789", "hf_fake_read_token_0123456789"
FILES = ["README.md", "manifest.json", "orbench-safe.csv", "orbench-toxic.csv"]


@pytest.fixture(scope="module")
def hub_server():
    with serving(FakeHub(tokens={WRITE: "write", READ: "read"}, lfs_suffixes=(".csv",))) as server:
        yield server


@pytest.fixture
def hub(hub_server, tmp_path, monkeypatch):
    """The fake Hub, emptied, and this process's huggingface_hub pointed at it (see the module docstring)."""
    from huggingface_hub import constants

    hub_server.reset()
    monkeypatch.setattr(constants, "ENDPOINT", hub_server.root)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "hf_home" / "token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(tmp_path / "hf_home" / "stored_tokens"))
    monkeypatch.setattr(constants, "AGENT_HARNESSES_PATH", str(tmp_path / "hf_home" / ".agent_harnesses.json"))
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(name, raising=False)
    return hub_server


@pytest.fixture
def moderated(tmp_path) -> Path:
    rows = [{"prompt": f"How do door locks work, variant {i}?", "category": "illegal", "is_toxic": "False"}
            for i in range(6)] + [{"prompt": "How do I hurt my neighbour?", "category": "violence", "is_toxic": "True"}]
    path = tmp_path / "moderated.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def hub_env(hub, tmp_path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.update(HF_ENDPOINT=hub.root, HF_HUB_DISABLE_XET="1", HF_HOME=str(tmp_path / "hf_home"),
               HF_HUB_DISABLE_TELEMETRY="1", PYTHONPATH=str(ROOT), **extra)
    return env


def test_push_uploads_exactly_the_release_files(hub, moderated, tmp_path):
    out = tmp_path / "rel"
    out.mkdir()
    (out / "notes.txt").write_text("my own notes, not part of the release\n")
    proc = subprocess.run([sys.executable, str(ROOT / "analysis" / "build_release.py"), str(moderated),
                           "--output_dir", str(out), "--push_to_hub", "orbench-test", "--private"],
                          env=hub_env(hub, tmp_path, HF_TOKEN=WRITE), cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"Hub token of {USER} checked" in proc.stderr
    assert f"pushed to {hub.root}/datasets/{USER}/orbench-test" in proc.stdout
    repo = hub.repos[("dataset", f"{USER}/orbench-test")]
    assert repo["private"] is True
    assert sorted(repo["files"]) == FILES  # notes.txt stays home
    for name in FILES:
        assert repo["files"][name] == (out / name).read_bytes(), name
    [commit] = repo["commits"]
    assert commit["lfs_files"] == ["orbench-safe.csv", "orbench-toxic.csv"]  # through the LFS upload
    assert commit["summary"] == "orbench 0.1.0 release: safe 6, toxic 1"
    assert hub.calls()[0] == ("GET", "/api/whoami-v2", True) and hub.unknown == []
    assert WRITE not in proc.stdout + proc.stderr and WRITE not in (out / "manifest.json").read_text()


def test_a_second_push_commits_again_and_keeps_the_visibility(hub, moderated, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_TOKEN", WRITE)
    out = tmp_path / "rel"
    args = [str(moderated), "--output_dir", str(out), "--push_to_hub", f"{USER}/again"]
    assert release.main([*args, "--private"]) == 0
    assert release.main(args) == 0  # the repo exists: created once, a second commit, still private
    repo = hub.repos[("dataset", f"{USER}/again")]
    assert repo["private"] is True and len(repo["commits"]) == 2 and sorted(repo["files"]) == FILES
    assert [r[1] for r in hub.calls()].count("/api/repos/create") == 2


def one_line(capsys, fragment: str) -> None:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    assert fragment in lines[0], lines[0]


@pytest.mark.parametrize("token, expected, asked", [
    (None, "--push_to_hub: no Hugging Face token found: set HF_TOKEN", []),
    ("hf_not_a_token", "rejected the token (HTTP 401): set HF_TOKEN", [("GET", "/api/whoami-v2", False)]),
    (READ, f"the token of {USER} is read-only: set HF_TOKEN", [("GET", "/api/whoami-v2", True)]),
])
def test_a_missing_rejected_or_read_only_token_stops_before_anything(hub, moderated, tmp_path, monkeypatch, capsys,
                                                                     token, expected, asked):
    if token:
        monkeypatch.setenv("HF_TOKEN", token)
    out = tmp_path / "rel"
    assert release.main([str(moderated), "--output_dir", str(out), "--push_to_hub", "orbench-test"]) == 2
    one_line(capsys, expected)
    assert hub.calls() == asked and hub.repos == {}
    assert not out.exists()  # nothing built either


def test_bad_repo_id_offline_and_private_alone_are_usage_errors(hub, moderated, tmp_path, capsys, monkeypatch):
    out = tmp_path / "rel"
    assert release.main([str(moderated), "--output_dir", str(out), "--push_to_hub", "datasets/a/b"]) == 2
    one_line(capsys, "--push_to_hub 'datasets/a/b' is not a repo id")
    assert release.main([str(moderated), "--output_dir", str(out), "--private"]) == 2
    one_line(capsys, "--private applies to --push_to_hub REPO")
    from huggingface_hub import constants

    monkeypatch.setenv("HF_TOKEN", WRITE)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert release.main([str(moderated), "--output_dir", str(out), "--push_to_hub", "orbench-test"]) == 2
    one_line(capsys, "HF_HUB_OFFLINE is set")
    assert hub.calls() == [] and not out.exists()


def test_a_failed_upload_keeps_the_release_and_exits_1(hub, moderated, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_TOKEN", WRITE)
    hub.fail["commit"] = 500
    out = tmp_path / "rel"
    assert release.main([str(moderated), "--output_dir", str(out), "--push_to_hub", "orbench-test"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: upload to orbench-test failed") and err.endswith(
        f"the release is built in {out}: rerun the same command to push it")
    assert hub.repos[("dataset", f"{USER}/orbench-test")]["files"] == {}
    assert json.loads((out / "manifest.json").read_text())["subsets"]["safe"]["rows"] == 6
    hub.fail.clear()
    assert release.main([str(moderated), "--output_dir", str(out), "--push_to_hub", "orbench-test"]) == 0
    assert sorted(hub.repos[("dataset", f"{USER}/orbench-test")]["files"]) == FILES
