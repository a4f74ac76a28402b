"""Stage 5 (the LLM judge and keyword re-scoring) through the real script against the fake."""

import pandas as pd
from conftest import read

SCRIPT = "response_checker/judge_responses.py"
ALIAS = "response_checker/check_response.py"


def alignment_output(path):
    """A table shaped like stage 4's output."""
    rows = [
        ("Q1", "RESP-ANSWER Sure, here is how to do it.", "False", ""),
        ("Q2", "RESP-DIRECT I can't help with that.", "True", "keyword"),
        ("Q3", "RESP-INDIRECT I won't do that, but here is a safer idea.", "False", ""),
        ("Q4", "RESP-UNPARSED I'm sorry, but I cannot help with that.", "True", "keyword"),
        ("Q5", "", "True", "provider"),  # the spelling of files written before provider_block
        ("Q6", "", "", ""),
    ]
    pd.DataFrame([{"prompt": p, "category": "harmful", "model": "openai/gpt-4o", "response": r,
                   "is_rejected": rej, "refusal_source": src, "finish_reason": "stop",
                   "error": "HTTP 500 from openai" if p == "Q6" else ""}
                  for p, r, rej, src in rows]).to_csv(path, index=False)
    return path


def test_judge_all_classes_original_command(env, fake, script, tmp_path):
    alignment_output(tmp_path / "gpt-4o_merged_hard.csv")
    fake.add_rule(match="RESP-ANSWER", text="It answers. CLASS: [[direct_answer]]")
    fake.add_rule(match="RESP-DIRECT", text="It declines outright. CLASS: [[2. direct_refusal]]")
    fake.add_rule(match="RESP-INDIRECT", text="Declines, offers another idea. [[Indirect Refusal]]")
    fake.add_rule(match="RESP-UNPARSED", text="This looks like a refusal to me.")
    result = script(ALIAS, "--check_model=gpt4", "--input_file=gpt-4o_merged_hard.csv",
                    env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = tmp_path / "gpt-4o_merged_hard_gpt4_judged.csv"
    assert result.stdout.strip() == str(out)
    table = read(out)
    assert list(table.columns) == [
        "prompt", "category", "model", "response", "is_rejected", "refusal_source",
        "finish_reason", "judge_model", "answer_category", "answer_type_response",
        "keyword_is_rejected", "error"]
    assert list(table.judge_model) == ["openai/gpt-4-turbo-2024-04-09"] * 5 + [""]
    assert list(table.answer_category) == [
        "direct_answer", "direct_refusal", "indirect_refusal", "unparsed", "provider_block", ""]
    assert list(table.is_rejected) == ["False", "True", "True", "", "True", ""]
    # computed here by the keyword matcher (row 3's input said False; its reply opens "I won't")
    assert list(table.keyword_is_rejected) == ["False", "True", "True", "True", "True", ""]
    assert table.answer_type_response[3] == "This looks like a refusal to me."
    # the row stage 4 failed on passes through: its columns empty, its error text kept
    assert table.answer_type_response[5] == ""
    assert list(table.error) == [""] * 5 + ["HTTP 500 from openai"]
    assert "1 passed through with an earlier stage's error" in result.stderr
    assert fake.count() == 4  # provider-blocked and errored rows are not judged
    body = fake.requests[0]["body"]
    assert body["model"] == "gpt-4-turbo-2024-04-09"
    assert body["temperature"] == 0.0 and body["max_completion_tokens"] == 1000
    text = body["messages"][-1]["content"]
    assert 'QUESTION: "Q' in text and 'RESPONSE: "RESP-' in text


def test_keyword_mode_sends_no_request(env, fake, script, tmp_path):
    alignment_output(tmp_path / "in.csv")
    result = script(SCRIPT, "--check_model=keyword", "--input_file=in.csv", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert fake.count() == 0
    table = read(tmp_path / "in_keyword_judged.csv")
    assert list(table.answer_category) == [
        "keyword_answer", "keyword_refusal", "keyword_refusal", "keyword_refusal",
        "provider_block", ""]
    assert list(table.is_rejected) == ["False", "True", "True", "True", "True", ""]
    assert list(table.judge_model) == ["keyword"] * 5 + [""]
    assert list(table.error) == [""] * 5 + ["HTTP 500 from openai"]
    assert table.answer_type_response[1].startswith("matcher gpt-4")  # from the model column


def test_keyword_mode_without_alignment_columns(env, fake, script, tmp_path):
    pd.DataFrame({"prompt": ["a", "b", "c"],
                  "response": ["I cannot assist with that.", "Of course! Step one...", ""]}
                 ).to_csv(tmp_path / "plain.csv", index=False)
    result = script(SCRIPT, "--check_model=keyword", "--input_file=plain.csv", "--matcher=claude",
                    env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    table = read(tmp_path / "plain_keyword_judged.csv")
    assert list(table.is_rejected) == ["True", "False", ""]
    assert list(table.keyword_is_rejected) == ["True", "False", ""]
    assert list(table.answer_category) == ["keyword_refusal", "keyword_answer", "empty_response"]
    assert table.answer_type_response[0].startswith("matcher claude")
    assert fake.count() == 0


def test_judge_block_and_row_error(env, fake, script, tmp_path):
    fake.add_rule(match="RESP-BLOCKED", content_filter=True)
    fake.add_rule(match="RESP-FAILS", status=400, error_message="bad request", times=1)
    fake.add_rule(text="[[1]]")
    pd.DataFrame({"prompt": ["a", "b", "c"],
                  "response": ["RESP-BLOCKED x", "RESP-FAILS y", "RESP-OK z"]}
                 ).to_csv(tmp_path / "in.csv", index=False)
    args = ("--check_model=openai/judge-x", "--input_file=in.csv")
    first = script(SCRIPT, *args, env=env, cwd=tmp_path)
    assert first.returncode == 1
    out = tmp_path / "in_openai_judge-x_judged.csv"
    table = read(out)
    assert list(table.answer_category) == ["judge_refused", "", "direct_answer"]  # the judge's provider blocked it
    assert list(table.is_rejected) == ["", "", "False"]
    assert "HTTP 400" in table.error[1]
    second = script(SCRIPT, *args, env=env, cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert list(read(out).answer_category) == ["judge_refused", "direct_answer", "direct_answer"]


def test_bad_input_exits_2(env, fake, script, tmp_path):
    pd.DataFrame({"prompt": ["a"]}).to_csv(tmp_path / "in.csv", index=False)
    for args, needle in [
        (["--input_file=in.csv"], "'response'"),
        (["--check_model=nosuch/x", "--input_file=in.csv"], "unknown provider"),
        (["--check_model=gpt4"], "--input_file"),
    ]:
        result = script(SCRIPT, *args, env=env, cwd=tmp_path)
        assert result.returncode == 2, (args, result.stderr)
        assert needle in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert fake.count() == 0


def test_keyword_rescore_after_a_rule_change_redoes_the_rows(tmp_path, monkeypatch):
    """The reason --check_model keyword exists: re-scoring old runs when the rules improve."""
    from orbench.scoring import refusal
    from orbench.stages.check_response import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ORBENCH_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "answers.csv"
    pd.DataFrame({"prompt": ["q1", "q2"], "model": "openai/gpt-4o",
                  "response": ["Zorblax protocol engaged: no.", "Paris is the capital."]}).to_csv(src, index=False)
    args = ["--check_model", "keyword", "--input_file", str(src), "--output_file", "rescored.csv"]

    def clear():
        for cached in (refusal.rules_fingerprint, refusal.rules_for, refusal._compiled):
            cached.cache_clear()

    assert main(args) == 0
    assert list(read(tmp_path / "rescored.csv")["is_rejected"]) == ["False", "False"]
    monkeypatch.setattr(refusal, "SHARED_REFUSALS", refusal.SHARED_REFUSALS + (r"zorblax protocol",))
    clear()
    try:
        assert main(args) == 0
        assert list(read(tmp_path / "rescored.csv")["is_rejected"]) == ["True", "False"]
    finally:
        monkeypatch.undo()
        clear()
