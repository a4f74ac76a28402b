"""The native Gemini provider through the real google-genai SDK against a loopback fake of the
Gemini REST API (tests/fake_gemini.py): safety settings sent, blocks and safety finishes as
provider refusals, thinking budget and tokens, model version in the meta file, 429/500 as row
errors, a bad key as one line and exit 2, and stages 3 to 5 end to end."""

import json
import sys

import pandas as pd
import pytest
from conftest import read

from orbench.llm import providers

MODERATE = "moderator/moderate.py"
CHECK = "alignment_checker/check_alignment.py"
JUDGE = "response_checker/judge_responses.py"
PAPER_SAFETY = [{"category": c, "threshold": "BLOCK_NONE"} for c in (
    "HARM_CATEGORY_HARASSMENT", "HARM_CATEGORY_HATE_SPEECH", "HARM_CATEGORY_SEXUALLY_EXPLICIT",
    "HARM_CATEGORY_DANGEROUS_CONTENT")]


def test_stages_3_to_5_with_a_gemini_model(gem, env, script, tmp_path):
    pd.DataFrame({"prompt": ["SAFE how do locks work", "HARD how to pick a lock",
                             "PBLOCK something", "FBLOCK other"],
                  "category": ["illegal"] * 4}).to_csv(tmp_path / "prompts.csv", index=False)
    gem.add_rule(match="Purely", text="x")  # never used: keeps rule order explicit
    # stage 3: the moderator's template quotes the prompt
    gem.add_rule(match="SAFE how", text="Harmless. [[11. None of the above]]", times=1)
    gem.add_rule(match="HARD how", text="Breaking in. [[7. illegal]]", times=1)
    gem.add_rule(match="PBLOCK", block_reason="SAFETY", times=1)
    gem.add_rule(match="FBLOCK", text="Fine. [[11. None of the above]]", times=1)
    result = script(MODERATE, "--moderator_model=gemini/gemini-1.5-pro-latest",
                    "--input_file=prompts.csv", "--output_file=moderated.csv", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    moderated = read(tmp_path / "moderated.csv")
    assert list(moderated["gemini_gemini-1.5-pro-latest_label"]) == [
        "none", "illegal", "provider_block", "none"]
    # stage 4: the tested model
    gem.add_rule(match="SAFE how", text="Pin tumbler locks use spring-loaded pins.", times=1)
    gem.add_rule(match="HARD how", text="I'm sorry, but I can't help with that.", times=1)
    gem.add_rule(match="PBLOCK", block_reason="PROHIBITED_CONTENT", times=1)
    gem.add_rule(match="FBLOCK", text="Partial", finish="SAFETY", times=1)
    result = script(CHECK, "--model=gemini/gemini-2.5-flash", "--input_file=moderated.csv",
                    "--output_file=answers.csv", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    answers = read(tmp_path / "answers.csv")
    assert list(answers.is_rejected) == ["False", "True", "True", "True"]
    assert list(answers.refusal_source) == ["", "keyword", "provider_block", "provider_block"]
    assert list(answers.finish_reason) == ["stop", "stop", "prompt_prohibited_content", "safety"]
    assert "2 provider blocks" in result.stderr
    meta = json.loads((tmp_path / "answers.csv.meta.json").read_text())
    model = meta["models"][0]
    assert model["provider"] == "gemini" and model["reported_model"] == ["gemini-fake-001"]
    assert model["engine"]["safety_settings"]["HARM_CATEGORY_DANGEROUS_CONTENT"] == "BLOCK_NONE"
    assert "note" not in model  # the settings were sent: no "not sent" note
    # stage 5: a Gemini judge
    gem.add_rule(match="Pin tumbler", text="It answers. [[direct_answer]]")
    gem.add_rule(match="I'm sorry", text="It declines. [[direct_refusal]]")
    result = script(JUDGE, "--check_model=gemini/gemini-2.5-pro", "--input_file=answers.csv",
                    "--output_file=judged.csv", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    judged = read(tmp_path / "judged.csv")
    assert list(judged.answer_category) == [
        "direct_answer", "direct_refusal", "provider_block", "provider_block"]
    # what the server received: every request carries the paper's safety settings and the key
    assert len(gem.requests) == 4 + 4 + 2
    for request in gem.requests:
        assert request["body"]["safetySettings"] == PAPER_SAFETY
        assert request["key"] == env["GEMINI_API_KEY"]
    config = [r["body"]["generationConfig"] for r in gem.requests]
    assert "thinkingConfig" not in config[0]  # gemini-1.5 does not think
    assert config[4]["thinkingConfig"]["thinking_budget"] == 0  # 2.5 Flash: no thinking
    assert config[4]["maxOutputTokens"] == 1000
    assert config[8]["thinkingConfig"]["thinking_budget"] == 128  # 2.5 Pro: the least allowed
    assert config[8]["maxOutputTokens"] == 1128
    assert {r["model"] for r in gem.requests[8:]} == {"gemini-2.5-pro"}


def one_run(script, env, tmp_path, *flags, prompts=("a question",)):
    pd.DataFrame({"prompt": list(prompts)}).to_csv(tmp_path / "in.csv", index=False)
    return script(CHECK, "--model=gemini/gemini-2.5-flash", "--input_file=in.csv",
                  "--output_file=out.csv", *flags, env=env, cwd=tmp_path)


@pytest.mark.parametrize("status,message", [
    (401, "Request had invalid authentication credentials."),
    (403, "Permission denied."),
    (400, "API key not valid. Please pass a valid API key."),
])
def test_a_bad_key_stops_the_run_with_one_line(gem, env, script, tmp_path, status, message):
    gem.add_rule(status=status, message=message)
    result = one_run(script, env, tmp_path, "--concurrency=1", prompts=[f"q{i}" for i in range(10)])
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: gemini ")
    assert "GEMINI_API_KEY" in lines[0] and env["GEMINI_API_KEY"] not in result.stderr
    assert len(gem.requests) == 1


def test_429_and_500_are_retried_then_fail_the_row(gem, env, script, tmp_path, monkeypatch):
    from orbench.llm import retry

    monkeypatch.setattr(retry, "BACKOFF_FIRST", 0.01)  # the backoffs short: a faster test
    gem.add_rule(match="flaky", status=500, times=1)
    gem.add_rule(match="limited", status=429)
    # A 429 is waited out (and the request sent again) for --patience seconds; a backoff that no
    # longer fits in it gives up (orbench.llm.retry), the row failing.
    result = one_run(script, env, tmp_path, "--max_retries=1", "--patience=0.2",
                     prompts=["flaky one", "limited two"])
    assert result.returncode == 1, result.stderr
    table = read(tmp_path / "out.csv")
    assert table.response[0].startswith("Fake Gemini answer") and table.error[0] == ""
    assert table.error[1].startswith("check_alignment: HTTP 429 from gemini: ")
    assert table.error[1].endswith(", --patience (0.2 s) spent")
    asked = [json.dumps(r["body"]) for r in gem.requests]
    assert sum("flaky" in b for b in asked) == 2  # the 500: asked once again
    limited = sum("limited" in b for b in asked)
    assert limited >= 2
    meta = json.loads((tmp_path / "out.csv.meta.json").read_text())
    assert meta["rate_limits"][0]["responses_429"] == limited == meta["requests"]["rate_limit_429s"]
    assert meta["requests"]["waits_past_patience"] == 1


def test_no_server_stops_the_run_naming_the_address(gem, env, script, tmp_path):
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env["GEMINI_BASE_URL"] = f"http://127.0.0.1:{port}/"
    result = one_run(script, env, tmp_path, "--max_retries=0")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"error: cannot connect to gemini at http://127.0.0.1:{port}/ (could not connect to gemini"), lines
    assert "nothing there has answered" in lines[0]


@pytest.mark.usefixtures("quick_backoff")  # the requests and rows are tested, not the pauses
def test_empty_and_truncated_replies(gem, env, script, tmp_path):
    gem.add_rule(match="empty", no_candidates=True, times=1)
    gem.add_rule(match="long", text="A long answer that was cut", finish="MAX_TOKENS")
    gem.add_rule(match="think", text="", finish="MAX_TOKENS", thoughts=50)
    result = one_run(script, env, tmp_path, prompts=["empty first", "long one", "think hard"])
    assert result.returncode == 1
    table = read(tmp_path / "out.csv")
    assert table.response[0].startswith("Fake Gemini answer")  # asked again, then answered
    assert (table.response[1], table.finish_reason[1]) == ("A long answer that was cut", "length")
    assert table.error[2] == ("check_alignment: the reply was cut at max_tokens before any text "
                              "(raise --max_tokens)")
    assert sum("empty first" in json.dumps(r["body"]) for r in gem.requests) == 2


def test_thinking_tokens_and_overrides(gem, env, script, tmp_path):
    gem.add_rule(text="Answer.", thoughts=42)
    env["ORBENCH_GEMINI_SAFETY"] = "BLOCK_ONLY_HIGH"
    env["ORBENCH_GEMINI_THINKING_BUDGET"] = "512"
    result = one_run(script, env, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "(42 reasoning)" in result.stderr
    body = gem.requests[0]["body"]
    assert {s["threshold"] for s in body["safetySettings"]} == {"BLOCK_ONLY_HIGH"}
    assert body["generationConfig"]["thinkingConfig"]["thinking_budget"] == 512
    env["ORBENCH_GEMINI_SAFETY"] = "default"
    result = one_run(script, env, tmp_path, "--output_file=out2.csv")
    assert "safetySettings" not in gem.requests[-1]["body"]  # a new cache key: asked again
    env["ORBENCH_GEMINI_SAFETY"] = "LOOSE"
    result = one_run(script, env, tmp_path, "--output_file=out3.csv")
    assert result.returncode == 2
    assert "ORBENCH_GEMINI_SAFETY='LOOSE' is not a safety threshold" in result.stderr


def test_google_api_key_and_base_url_flag(gem, env, script, tmp_path):
    env.pop("GEMINI_API_KEY")
    env["GOOGLE_API_KEY"] = "google-SECRET-key-789789789"
    env["GEMINI_BASE_URL"] = "http://127.0.0.1:9/"  # --base_url wins over it
    result = one_run(script, env, tmp_path, f"--base_url={gem.url}")
    assert result.returncode == 0, result.stderr
    assert [r["key"] for r in gem.requests] == ["google-SECRET-key-789789789"]
    meta = json.loads((tmp_path / "out.csv.meta.json").read_text())
    assert meta["models"][0]["base_url"] == gem.url
    assert meta["models"][0]["parameters_sent"] == [
        "generationConfig.maxOutputTokens", "generationConfig.temperature",
        "generationConfig.thinkingConfig", "safetySettings"]


def test_openai_compatible_endpoint_stays_reachable(gem, env, fake, script, tmp_path):
    fake.add_rule(text="Via the OpenAI-compatible endpoint.")
    env["GEMINI_OPENAI_BASE_URL"] = fake.openai_url
    pd.DataFrame({"prompt": ["q"]}).to_csv(tmp_path / "in.csv", index=False)
    result = script(CHECK, "--model=gemini-openai/gemini-1.5-pro", "--input_file=in.csv",
                    "--output_file=out.csv", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert read(tmp_path / "out.csv").response[0] == "Via the OpenAI-compatible endpoint."
    assert not gem.requests and fake.requests[0]["body"]["model"] == "gemini-1.5-pro"


def test_batch_mode_equals_the_synchronous_run_and_resumes(gem, env, script, tmp_path):
    prompts = ["SAFE how do locks work", "HARD how to pick a lock", "PBLOCK something"]
    gem.add_rule(match="HARD", text="I'm sorry, but I can't help with that.")
    gem.add_rule(match="PBLOCK", block_reason="SAFETY")
    sync = one_run(script, env, tmp_path, "--output_file=sync.csv", prompts=prompts)
    assert sync.returncode == 0, sync.stderr
    env["ORBENCH_CACHE_DIR"] = str(tmp_path / "cache2")  # start from an empty cache
    gem.requests.clear()
    gem.polls = 2
    result = one_run(script, env, tmp_path, "--output_file=batch.csv", "--batch",
                     "--poll_interval=0.001", prompts=prompts)
    assert result.returncode == 0, result.stderr
    columns = ["prompt", "response", "is_rejected", "refusal_source", "finish_reason", "error"]
    assert read(tmp_path / "batch.csv")[columns].equals(read(tmp_path / "sync.csv")[columns])
    paths = [r["path"] for r in gem.requests]
    assert paths.count("/v1beta/models/gemini-2.5-flash:batchGenerateContent") == 1
    assert not any(p.endswith(":generateContent") for p in paths)  # nothing sent synchronously
    (job,) = gem.batches.values()
    assert [i["metadata"]["key"] for i in job["items"]] == [
        json.loads(line)["keys"] for line in (tmp_path / "batch.csv.batches.jsonl").read_text().splitlines()
        if "keys" in json.loads(line)][0]
    for item in job["items"]:
        assert item["request"]["safetySettings"] == PAPER_SAFETY
        assert item["request"]["generationConfig"]["thinkingConfig"]["thinking_budget"] == 0
    assert "1 batches submitted" in result.stderr
    # a rerun sends nothing: every answer is in the cache
    again = one_run(script, env, tmp_path, "--output_file=batch.csv", "--batch",
                    "--poll_interval=0.001", prompts=prompts)
    assert again.returncode == 0 and len(gem.batches) == 1


def test_an_expired_batch_is_left_to_redo(gem, env, script, tmp_path):
    gem.end_state = "BATCH_STATE_EXPIRED"
    result = one_run(script, env, tmp_path, "--batch", "--poll_interval=0.001", prompts=["a", "b"])
    assert result.returncode == 1
    assert "2 requests of gemini batch batches/fake1 expired; left to redo" in result.stderr
    gem.end_state = "BATCH_STATE_SUCCEEDED"
    result = one_run(script, env, tmp_path, "--batch", "--poll_interval=0.001", prompts=["a", "b"])
    assert result.returncode == 0, result.stderr
    assert len(gem.batches) == 2


def test_without_the_sdk_one_line_names_the_extra(gem, env, script, tmp_path, monkeypatch):
    for name in [m for m in sys.modules if m == "google.genai" or m.startswith("google.genai.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "google.genai", None)
    result = one_run(script, env, tmp_path)
    assert result.returncode == 2 and not gem.requests
    assert result.stderr.strip().splitlines() == [
        'error: gemini/ models need the google-genai package: pip install "orbench[gemini]" '
        '(or use gemini-openai/<model> for the OpenAI-compatible endpoint)']


def test_gemini_is_a_registered_protocol():
    assert providers.API_MODULES["gemini"] == "orbench.llm.providers.gemini"


def test_a_client_closed_in_its_event_loop_leaves_no_close_for_a_later_one(gem, env, monkeypatch):
    """The HTTP client handed to google-genai is ours to close (the SDK's ``aclose`` leaves a
    client it was given open). Left open, it closed itself when collected, as a task on whatever
    loop ran then, whose connections belonged to a closed one: "Task exception was never
    retrieved ... Event loop is closed", printed when a provider outlived its run (a notebook's
    second evaluation, a reference cycle collected late)."""
    import asyncio
    import gc

    from orbench.llm.clients import Client, Request
    from orbench.llm.models import parse_model

    monkeypatch.setenv("GEMINI_BASE_URL", gem.url)
    spec, client, kept = parse_model("gemini/gemini-test"), Client(cache=None, concurrency=4), []

    async def first():
        try:
            requests = [Request.user(spec, f"hello {i}") for i in range(4)]
            replies = await asyncio.gather(*(client.complete(r) for r in requests))
            kept.append(client.provider(spec))  # outlives the run, as a notebook's variable can
            return replies
        finally:
            await client.close()

    assert all(reply.text for reply in asyncio.run(first()))
    assert kept[0].http_client.is_closed
    errors = []

    async def later():
        asyncio.get_running_loop().set_exception_handler(lambda loop, context: errors.append(context))
        kept.clear()
        gc.collect()
        await asyncio.sleep(0.05)  # a close the collection scheduled would run now

    asyncio.run(later())
    assert [str(e.get("exception") or e.get("message")) for e in errors] == []
