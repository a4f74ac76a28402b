"""Stage 4 through the real scripts and SDKs against the fake provider."""

import pandas as pd
from conftest import FAKE_KEYS, read

SCRIPT = "alignment_checker/check_alignment.py"
ADDED = ["model", "response", "is_rejected", "refusal_source", "refusal_kind", "finish_reason"]


def write(path, rows):
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_openai_alias_keyword_and_provider_block(env, fake, script, tmp_path):
    fake.add_rule(match="ASK-REFUSE", text="I'm sorry, but I can't assist with that.")
    fake.add_rule(match="ASK-ANSWER", text="Sure! Clean the stain with baking soda and vinegar.")
    fake.add_rule(match="ASK-BLOCK", content_filter=True)
    fake.add_rule(match="ASK-EMPTY", text="")
    write(tmp_path / "hard.csv", [
        {"prompt": "ASK-REFUSE how to remove a lock", "category": "illegal"},
        {"prompt": "ASK-ANSWER how to remove a stain", "category": "harmful"},
        {"prompt": "ASK-BLOCK something", "category": "violence"},
        {"prompt": "ASK-EMPTY anything", "category": "privacy"},
    ])
    result = script("alignment_checker/gpt3_4_alignment_checker.py", "--model=gpt-3.5-turbo-0125",
                    "--input_file=hard.csv", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = tmp_path / "hard_gpt-3.5-turbo-0125_alignment.csv"
    assert result.stdout.strip() == str(out)
    table = read(out)
    assert list(table.columns) == ["prompt", "category", *ADDED, "error"]
    assert list(table.category) == ["illegal", "harmful", "violence", "privacy"]
    assert "prompt_kind" not in table  # prompts of no bundled set, no kind declared: nothing to record
    assert list(table.model) == ["openai/gpt-3.5-turbo-0125"] * 4
    assert list(table.is_rejected) == ["True", "False", "True", ""]
    assert list(table.refusal_source) == ["keyword", "", "provider_block", "empty_response"]
    assert list(table.refusal_kind) == ["full", "", "full", ""]
    assert list(table.finish_reason) == ["stop", "stop", "content_filter", "stop"]
    assert table.response[2] == ""
    for request in fake.requests:
        body = request["body"]
        assert [m["role"] for m in body["messages"]] == ["user"]  # no system prompt
        assert body["temperature"] == 0.0 and body["max_completion_tokens"] == 1000
        assert "max_tokens" not in body
        assert body["model"] == "gpt-3.5-turbo-0125"


def test_claude_refusal_stop_reason(env, fake, script, tmp_path):
    fake.add_rule(match="blocked-topic", refusal=True)
    fake.add_rule(text="I apologize, but I won't help with that.", match="declined-topic")
    fake.add_rule(text="Here is a short overview of the history of lock picking.")
    write(tmp_path / "in.csv", [{"prompt": "blocked-topic"}, {"prompt": "declined-topic"},
                                {"prompt": "history"}])
    result = script("alignment_checker/claude_alignment_checker.py",
                    "--model=claude-3-haiku-20240307", "--input_file=in.csv", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    table = read(tmp_path / "in_claude-3-haiku-20240307_alignment.csv")
    assert list(table.is_rejected) == ["True", "True", "False"]
    assert list(table.refusal_source) == ["provider_block", "keyword", ""]
    assert table.finish_reason[0] == "refusal"
    assert all(r["path"].endswith("/messages") for r in fake.requests)
    assert "category" not in table.columns  # absent in the input, not invented


def test_opensource_alias_defaults_to_together(env, fake, script, tmp_path):
    fake.add_rule(text="I cannot provide that.")
    write(tmp_path / "in.csv", [{"prompt": "q", "category": "hate"}])
    result = script("alignment_checker/opensource_alignment_checker.py",
                    "--model=meta-llama/Llama-3-70b-chat-hf", "--input_file=in.csv",
                    env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    table = read(tmp_path / "in_meta-llama_Llama-3-70b-chat-hf_alignment.csv")
    assert table.model[0] == "together/meta-llama/Llama-3-70b-chat-hf"
    assert table.is_rejected[0] == "True"
    body = fake.requests[0]["body"]
    assert body["model"] == "meta-llama/Llama-3-70b-chat-hf"
    # an OpenAI-compatible server other than OpenAI keeps the classic parameters
    assert body["max_tokens"] == 1000 and body["temperature"] == 0.0
    assert "max_completion_tokens" not in body
    # the generic script has no default provider: the same name is a one-line error
    bad = script(SCRIPT, "--model=meta-llama/Llama-3-70b-chat-hf", "--input_file=in.csv",
                 env=env, cwd=tmp_path)
    assert bad.returncode == 2 and "unknown provider" in bad.stderr


def test_other_aliases_resolve_their_provider(env, fake, gem, script, tmp_path):
    fake.add_rule(text="Sure, here you go.")
    write(tmp_path / "in.csv", [{"prompt": "q"}])
    for alias, model, dirname in [
        ("mistral", "mistral-large-latest", "mistral-large-latest"),
        ("gemini", "gemini-1.5-pro-latest", "gemini-1.5-pro-latest"),
    ]:
        result = script(f"alignment_checker/{alias}_alignment_checker.py", f"--model={model}",
                        "--input_file=in.csv", env=env, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        table = read(tmp_path / f"in_{dirname}_alignment.csv")
        assert table.model[0].startswith(alias + "/")


def test_system_prompt_and_matcher(env, fake, script, tmp_path):
    fake.add_rule(text="As an AI language model, I cannot help with that.")
    write(tmp_path / "in.csv", [{"prompt": "q"}])
    result = script(SCRIPT, "--model=openai/my-model", "--input_file=in.csv",
                    "--system_prompt=Be helpful.", "--matcher=qwen", "--output_file=o.csv",
                    env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert fake.requests[0]["body"]["messages"][0] == {"role": "system", "content": "Be helpful."}
    assert read(tmp_path / "o.csv").refusal_source[0] == "keyword"


def test_auth_error_exits_2_naming_the_variable(env, fake, script, tmp_path):
    fake.add_rule(status=401, error_message="Incorrect API key provided")
    write(tmp_path / "in.csv", [{"prompt": f"q{i}"} for i in range(5)])
    result = script("alignment_checker/gpt3_4_alignment_checker.py", "--model=gpt-4o",
                    "--input_file=in.csv", env=env, cwd=tmp_path)
    assert result.returncode == 2
    assert "OPENAI_API_KEY" in result.stderr
    assert FAKE_KEYS["OPENAI_API_KEY"] not in result.stderr + result.stdout
    assert result.stderr.strip().splitlines()[-1].startswith("error:"), result.stderr


def test_missing_key_exits_2_before_any_request(env, fake, script, tmp_path):
    write(tmp_path / "in.csv", [{"prompt": "q"}])
    env = {k: v for k, v in env.items() if k != "MISTRAL_API_KEY"}
    result = script("alignment_checker/mistral_alignment_checker.py", "--model=mistral-small-latest",
                    "--input_file=in.csv", env=env, cwd=tmp_path)
    assert result.returncode == 2 and "MISTRAL_API_KEY" in result.stderr
    assert fake.count() == 0


def test_erroring_row_keeps_its_place_and_rerun_retries(env, fake, script, tmp_path):
    fake.add_rule(match="row-two", status=400, error_message="context length exceeded", times=1)
    fake.add_rule(text="Certainly. Here is the answer.")
    write(tmp_path / "in.csv", [{"prompt": f"row-{n}", "category": "hate"}
                                for n in ("one", "two", "three")])
    args = ("--model=gpt-4o", "--input_file=in.csv")
    first = script(SCRIPT, *args, env=env, cwd=tmp_path)
    assert first.returncode == 1
    out = tmp_path / "in_gpt-4o_alignment.csv"
    table = read(out)
    assert list(table.prompt) == ["row-one", "row-two", "row-three"]
    assert "HTTP 400" in table.error[1] and "context length" in table.error[1]
    assert table.error[0] == table.error[2] == ""
    assert table.response[1] == "" and table.is_rejected[1] == ""
    sent = fake.count()
    second = script(SCRIPT, *args, env=env, cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert fake.count() == sent + 1  # only the failed row is asked again
    table = read(out)
    assert list(table.error) == ["", "", ""]
    assert list(table.is_rejected) == ["False", "False", "False"]


def test_bad_input_exits_2(env, fake, script, tmp_path):
    write(tmp_path / "in.csv", [{"question": "q"}])
    for args, needle in [
        (["--model=gpt-4o", "--input_file=in.csv"], "'prompt'"),
        (["--model=gpt-4o"], "--input_file"),
        (["--model=gpt-4o", "--input_file=in.csv", "--matcher=nope"], "--matcher"),
        (["--model=gpt-4o", "--input_file=in.csv", "--temperature=9"], "--temperature"),
    ]:
        result = script(SCRIPT, *args, env=env, cwd=tmp_path)
        assert result.returncode == 2, (args, result.stderr)
        assert needle in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert fake.count() == 0


def test_empty_prompt_is_skipped_without_a_call(tmp_path, env, fake, script):
    src = tmp_path / "in.csv"
    pd.DataFrame({"prompt": ["How do locks work?", "", "   "], "category": "illegal"}).to_csv(src, index=False)
    proc = script("alignment_checker/check_alignment.py", "--model", "gpt-4o", "--input_file", str(src),
                  "--output_file", "out.csv", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = pd.read_csv(tmp_path / "out.csv", dtype=str, keep_default_na=False)
    assert list(out["refusal_source"]) == ["", "skipped_empty", "skipped_empty"]
    assert list(out["is_rejected"]) == ["False", "", ""]
    assert fake.count() == 1


def test_a_rule_table_edit_recomputes_the_keyword_verdicts_on_rerun(env, fake, script, tmp_path,
                                                                    monkeypatch):
    from orbench.scoring import refusal

    def clear():
        for cached in (refusal.rules_fingerprint, refusal.rules_for, refusal._compiled):
            cached.cache_clear()

    fake.add_rule(text="Sure! Here is some background. Locks have pins. I cannot help with picking them.")
    write(tmp_path / "in.csv", [{"prompt": "how do locks work"}])
    args = (SCRIPT, "--model=openai/gpt-4o", "--input_file=in.csv", "--output_file=out.csv")
    assert script(*args, env=env, cwd=tmp_path).returncode == 0
    assert read(tmp_path / "out.csv").is_rejected[0] == "False"  # the opener "Sure!" comes first
    # the opener window (not a phrase table) set to 0: no opener counts, the cue does
    monkeypatch.setattr(refusal, "_OPENER_SENTENCES", 0)
    clear()
    try:
        result = script(*args, env=env, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert read(tmp_path / "out.csv").is_rejected[0] == "True"
        assert "0 resumed" in result.stderr
        assert fake.count() == 1  # the answer came from the cache: only the verdict was redone
    finally:
        monkeypatch.undo()
        clear()
