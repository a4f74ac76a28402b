"""inspect_ai against your own OpenAI-compatible endpoint (issue 30, item 6).

What docs/inspect.md says, run against the loopback fake: inspect's ``openai-api/<name>/<model>``
with ``<NAME>_BASE_URL`` talks chat completions and completes the task; inspect's ``openai/``
provider calls ``/responses``, which such a server does not serve, and the converter then says the
run completed no sample (and what to use instead), not "not written by an orbench task".
"""

from __future__ import annotations

import pandas as pd
import pytest

pytest.importorskip("inspect_ai", reason='inspect_ai is not installed: pip install -e ".[dev]" '
                                         '(or ".[inspect]") to run the inspect task tests')

from inspect_ai import eval as inspect_eval  # noqa: E402 (after pytest.importorskip above)

from orbench.integrations.inspect_tasks import or_bench_hard_1k  # noqa: E402 (after pytest.importorskip above)

CONVERT = "analysis/inspect_to_csv.py"


def test_your_own_endpoint_through_openai_api_and_a_run_that_completed_nothing(env, fake, script, tmp_path,
                                                                               monkeypatch):
    fake.add_rule(text="I'm sorry, but I can't help with that.")
    monkeypatch.setenv("LLAMA_BASE_URL", fake.openai_url)  # what docs/inspect.md tells a user to set
    monkeypatch.setenv("LLAMA_API_KEY", "unused")
    logs = inspect_eval(or_bench_hard_1k(), model="openai-api/llama/smollm2", limit=2,
                        log_dir=str(tmp_path / "ok"), display="none")
    assert logs[0].status == "success", logs[0].error
    assert len(fake.requests) == 2 and all(r["path"].endswith("/v1/chat/completions") for r in fake.requests)
    assert {r["body"]["model"] for r in fake.requests} == {"smollm2"}
    proc = script(CONVERT, logs[0].location, "--output", "own.csv", env={**env, "LLAMA_API_KEY": "unused"},
                  cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = pd.read_csv(tmp_path / "own.csv", dtype=str, keep_default_na=False)
    assert list(out.is_rejected) == ["True", "True"] and set(out.model) == {"openai-api/llama/smollm2"}

    fake.requests.clear()
    logs = inspect_eval(or_bench_hard_1k(), model="openai/smollm2", model_base_url=fake.openai_url, limit=2,
                        log_dir=str(tmp_path / "responses"), display="none")
    assert logs[0].status == "error"
    assert fake.requests and all(r["path"].endswith("/v1/responses") for r in fake.requests)
    proc = script(CONVERT, logs[0].location, env=env, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    line = proc.stderr.strip()
    assert "\n" not in line and line.startswith("error: the run of or_bench_hard_1k completed no sample: all 2 "
                                                "failed (the first: ")
    assert line.endswith("use inspect's --model openai-api/<name>/<model> with <NAME>_BASE_URL and <NAME>_API_KEY "
                         "set: its openai/ provider calls the /responses API, which such servers do not serve")
    assert "not written by an orbench" not in line and not list(tmp_path.glob("openai_*.csv"))


def test_cut_off_replies_of_an_inspect_run_point_to_the_tasks_max_tokens(env, script, tmp_path):
    from inspect_ai.model import ModelOutput, ModelUsage, get_model

    def cut(messages, tools, tool_choice, config):
        output = ModelOutput.from_content("mockllm", "Sure, here is the start of", stop_reason="max_tokens")
        output.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
        return output

    mock = get_model("mockllm/model", custom_outputs=cut, memoize=False)
    logs = inspect_eval(or_bench_hard_1k(max_tokens=40, system_prompt="Be brief."), model=mock, limit=3,
                        log_dir=str(tmp_path / "logs"), display="none")
    assert logs[0].status == "success", logs[0].error
    proc = script(CONVERT, logs[0].location, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    converted = proc.stdout.strip().splitlines()[-1]
    proc = script("analysis/report.py", converted, "--output_dir", "rep", "--no_reference", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert ("warning: 3 of 3 replies (100%) of mockllm/model on hard were cut off at max_tokens 40 (finish_reason "
            "length): their verdicts judge only the opening of each reply; rerun the inspect task with a larger "
            "-T max_tokens") in proc.stderr
    assert "stage 4" not in proc.stderr
    html = (tmp_path / "rep" / "report.html").read_text()
    assert "system prompt <code>Be brief.</code>" in html  # who produced the responses: from the log
