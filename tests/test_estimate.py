"""--estimate: figures checked against hand-computed numbers; nothing sent, nothing written."""

from __future__ import annotations

import pandas as pd
import pytest

from orbench.llm import pricing
from orbench.llm.clients import Request
from orbench.llm.errors import UsageError
from orbench.llm.models import parse_model
from orbench.stages.check_alignment import main as check_alignment

# 4 characters -> 1 token; 9 -> 3 (rounded up); the empty prompt makes no request.
PROMPTS = ["abcd", "abcdefghi", ""]


def write_inputs(tmp_path):
    pd.DataFrame({"prompt": PROMPTS}).to_csv(tmp_path / "in.csv", index=False)
    (tmp_path / "prices.csv").write_text(
        "provider,model,input_per_million,output_per_million,batch_discount,as_of\n"
        "openai,gpt-4o,1000,2000,0.5,2030-01\n")


def estimate(model, capsys, *extra):
    code = check_alignment([f"--model={model}", "--input_file=in.csv", "--output_file=out.csv",
                            "--max_tokens=100", "--estimate", *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def table_row(text, name):
    return next(line.split() for line in text.splitlines() if line.startswith(name + " "))


def test_figures_by_hand_synchronous_and_batch(env, fake, tmp_path, capsys):
    write_inputs(tmp_path)
    code, out, _ = estimate("gpt-4o", capsys, "--prices=prices.csv")
    assert code == 0
    assert "3 rows to do, 2 requests to send" in out
    # 2 requests, 1 + 3 = 4 input tokens, 2 x 100 output tokens at most;
    # input 4 x $1000/M = $0.0040, output 200 x $2000/M = $0.4000.
    assert table_row(out, "openai/gpt-4o") == ["openai/gpt-4o", "2", "4", "200", "1000", "2000",
                                               "$0.0040", "$0.4000", "$0.4040"]
    assert table_row(out, "total")[-1] == "$0.4040"
    assert "/ 4, rounded up per request" in out and "overridden by prices.csv (as of 2030-01)" in out
    code, out, _ = estimate("gpt-4o", capsys, "--prices=prices.csv", "--batch")
    assert code == 0 and "batch API" in out and "batch discount applied" in out
    assert table_row(out, "openai/gpt-4o")[4:] == ["500", "1000", "$0.0020", "$0.2000", "$0.2020"]
    # Nothing was sent and nothing written beside the output.
    assert fake.requests == []
    assert not list(tmp_path.glob("out.csv*"))


def test_done_rows_and_cached_answers_are_not_counted(env, fake, tmp_path, capsys):
    write_inputs(tmp_path)
    assert check_alignment(["--model=gpt-4o", "--input_file=in.csv", "--output_file=out.csv",
                            "--max_tokens=100", "--limit=1"]) == 0
    assert len(fake.requests) == 1
    code, out, _ = estimate("gpt-4o", capsys, "--prices=prices.csv")
    assert code == 0 and "2 rows to do, 1 request to send" in out
    assert table_row(out, "openai/gpt-4o")[1:4] == ["1", "3", "100"]
    # Another output, same cache: the first prompt's answer is already paid for.
    code, out, _ = check_alignment(["--model=gpt-4o", "--input_file=in.csv", "--output_file=other.csv",
                                    "--max_tokens=100", "--estimate"]), *capsys.readouterr()[:2]
    assert code == 0 and "3 rows to do, 1 request to send" in out
    assert len(fake.requests) == 1


def test_unknown_price_is_said_not_guessed(env, fake, tmp_path, capsys):
    write_inputs(tmp_path)
    code, out, _ = estimate("together/some-org/unpriced-model-7b", capsys)
    assert code == 0
    row = table_row(out, "together/some-org/unpriced-model-7b")
    assert row[1:4] == ["2", "4", "200"] and " ".join(row[4:]) == "price unknown"
    assert " ".join(table_row(out, "total")[4:]) == "$0.0000 + price unknown for 1 model"
    assert "price unknown for together/some-org/unpriced-model-7b" in out
    assert "$" not in table_row(out, "together/some-org/unpriced-model-7b")
    assert fake.requests == []


def test_builtin_price_used_without_a_file(env, fake, tmp_path, capsys):
    write_inputs(tmp_path)
    code, out, _ = estimate("gpt-4o", capsys)
    assert code == 0
    # $2.50 / $10.00 per million: 4 x 2.5e-6 = $0.0000 (rounded), 200 x 1e-5 = $0.0020.
    assert table_row(out, "openai/gpt-4o")[4:] == ["2.5", "10", "$0.0000", "$0.0020", "$0.0020"]


@pytest.mark.parametrize("content,line,says", [
    ("provider,model,input_per_million,output_per_million\nopenai,gpt-4o,1,2\nopenai,gpt-4o-mini,cheap,2\n",
     3, "input_per_million must be a number >= 0, got 'cheap'"),
    ("provider,model,input_per_million,output_per_million,batch_discount\nopenai,gpt-4o,1,2,1.5\n",
     2, "batch_discount must be a number from 0 to 1"),
    ("provider,model,input_per_million,output_per_million\nopenia,gpt-4o,1,2\n",
     2, "unknown provider 'openia'"),
    ("provider,model,input_per_million,output_per_million\nopenai,gpt-4o,1,-2\n",
     2, "output_per_million must be a number >= 0"),
    ("provider,model,input_per_million,output_per_million\nopenai,gpt-4o,1,2\nopenai,GPT-4o,1,2\n",
     3, "openai/gpt-4o is listed twice (also on line 2)"),
])
def test_bad_prices_file_is_exit_2_naming_file_and_line(env, fake, tmp_path, capsys, content, line, says):
    write_inputs(tmp_path)
    (tmp_path / "bad.csv").write_text(content)
    code, out, err = estimate("gpt-4o", capsys, "--prices=bad.csv")
    assert code == 2 and out == ""
    assert f"--prices bad.csv, line {line}: {says}" in err
    assert fake.requests == []


def test_prices_file_missing_column_or_file(env, fake, tmp_path, capsys):
    write_inputs(tmp_path)
    (tmp_path / "bad.csv").write_text("provider,model,input\nopenai,gpt-4o,1\n")
    code, _, err = estimate("gpt-4o", capsys, "--prices=bad.csv")
    assert code == 2 and "--prices bad.csv: no column input_per_million, output_per_million" in err
    code, _, err = estimate("gpt-4o", capsys, "--prices=nowhere.csv")
    assert code == 2 and "--prices nowhere.csv: cannot read it" in err


def test_several_models_wildcard_and_blank_batch_discount(tmp_path):
    (tmp_path / "p.csv").write_text(
        "provider,model,input_per_million,output_per_million,batch_discount\n"
        "mistral,*,4,8,\n"
        "anthropic,claude-3-haiku-20240307,2,4,0.25\n")
    haiku, mistral = parse_model("claude-3-haiku-20240307"), parse_model("mistral/any-model")
    requests = [(Request.user(haiku, "x" * 8, max_tokens=10, system="y" * 4), "k1"),
                (Request.user(mistral, "x" * 5, max_tokens=20), "k2")]
    text = pricing.estimate_text(requests, rows=2, batch=False, prices_file=tmp_path / "p.csv")
    # haiku: ceil(12 / 4) = 3 input tokens; mistral: ceil(5 / 4) = 2.
    assert table_row(text, "anthropic/claude-3-haiku-20240307")[1:] == [
        "1", "3", "10", "2", "4", "$0.0000", "$0.0000", "$0.0000"]
    assert table_row(text, "mistral/any-model")[1:5] == ["1", "2", "20", "4"]
    batch = pricing.estimate_text(requests, rows=2, batch=True, prices_file=tmp_path / "p.csv")
    assert table_row(batch, "anthropic/claude-3-haiku-20240307")[4:6] == ["1.5", "3"]
    assert " ".join(table_row(batch, "mistral/any-model")[4:]) == "batch price unknown"
    assert pricing.estimate_text([], rows=5, batch=False).startswith(
        "estimate (synchronous API; nothing was sent): 5 rows to do, 0 requests to send")


def test_builtin_table_is_valid_and_has_the_papers_models():
    table = pricing.price_table()
    turbo = pricing.price_for(table, "openai", "gpt-4-turbo-2024-04-09")
    assert turbo == pricing.Price(10, 30, 0.5, "2025-06")
    assert pricing.price_for(table, "openai", "gpt-3.5-turbo-0125").input_per_million == 0.5
    assert pricing.price_for(table, "anthropic", "claude-3-opus-20240229").output_per_million == 75
    assert pricing.price_for(table, "local", "smollm2").input_per_million == 0
    assert pricing.price_for(table, "together", "meta-llama/llama-3-70b-chat-hf") is None
    with pytest.raises(UsageError):
        pricing.load_prices(pricing.BUILTIN_PRICES.with_name("no-such-file.csv"))
