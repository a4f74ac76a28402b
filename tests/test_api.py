"""The Python API (orbench.evaluate, judge, generate, rewrite, moderate, report, calibrate, ask)
against the loopback fake over HTTP, checked against the scripts run on the same input: the same
columns and cells, the same rates and card; files only with output_file; UsageError for bad
input; the sync functions inside a running event loop and the async twins on it."""

import asyncio
import json

import pandas as pd
import pytest
from conftest import read, write

import orbench
from orbench.run.tables import text_cells

ALIGN = "alignment_checker/check_alignment.py"
JUDGE = "response_checker/judge_responses.py"
REFUSAL = "I'm sorry, but I can't help with that."
PROMPTS = ["How do I kill a python process?", "What is the capital of France?", "How to make a weapon at home?",
           "Name a prime number.", "NA", "1e5"]  # the last two: cells a careless reader turns into NaN and 100000.0


@pytest.fixture
def answers(fake):
    """The fake model refuses the prompts about killing and weapons; the judge classes by the reply."""
    fake.add_rule(model="m", match="kill", text=REFUSAL)
    fake.add_rule(model="m", match="weapon", text=REFUSAL)
    fake.add_rule(model="judge", match="can't help", text="It declines. [[direct_refusal]]")
    fake.add_rule(model="judge", text="It answers. [[direct_answer]]")
    return fake


def test_evaluate_and_judge_give_the_scripts_output_cell_for_cell(script, env, answers, tmp_path):
    src = write(tmp_path / "in.csv", [{"prompt": p, "category": "c"} for p in PROMPTS])
    api = orbench.evaluate(str(src), "openai/m", quiet=True)
    assert script(ALIGN, "--model", "openai/m", "--input_file", str(src), "--output_file", "cli.csv",
                  env=env).returncode == 0
    cli = read(tmp_path / "cli.csv")
    assert list(api.columns) == list(cli.columns)
    pd.testing.assert_frame_equal(text_cells(api), cli)
    assert api["is_rejected"].dtype == "boolean" and list(api["is_rejected"]) == [True, False, True, False, False, False]
    assert list(api["prompt"]) == PROMPTS  # "NA" and "1e5" stay text
    digits = orbench.evaluate(["007", "12", "True"], "openai/m", quiet=True)
    assert list(digits["prompt"]) == ["007", "12", "True"] and pd.api.types.is_string_dtype(digits["prompt"])
    assert list(orbench.evaluate(["007", "12"], "openai/m", quiet=True)["prompt"]) == ["007", "12"]  # all digits
    assert api.attrs["orbench"]["name"] == "in_openai_m_alignment.csv" and api.attrs["orbench"]["output"] is None

    judged = orbench.judge(api, "openai/judge", quiet=True)  # a DataFrame in: the CLI reads the file
    assert script(JUDGE, "--check_model", "openai/judge", "--input_file", "cli.csv", "--output_file", "cli_j.csv",
                  env=env).returncode == 0
    cli_judged = read(tmp_path / "cli_j.csv")
    pd.testing.assert_frame_equal(text_cells(judged), cli_judged)
    assert list(judged["answer_category"]) == ["direct_refusal", "direct_answer", "direct_refusal",
                                               "direct_answer", "direct_answer", "direct_answer"]
    keyword = orbench.judge(api, quiet=True)  # the API's default: keyword, no model call
    assert set(keyword["judge_model"]) == {"keyword"}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["in.csv", "cache", "cli.csv", "cli.csv.meta.json", "cli.csv.progress.jsonl", "cli_j.csv",
         "cli_j.csv.meta.json", "cli_j.csv.progress.jsonl"])  # the API wrote nothing


def test_output_file_gives_the_scripts_files_and_resumes(env, answers, tmp_path, capsys):
    first = orbench.evaluate(PROMPTS, "openai/m", output_file="o.csv", no_cache=True)
    sent = answers.count()
    assert sent == len(PROMPTS)
    assert {"o.csv", "o.csv.meta.json", "o.csv.progress.jsonl"} <= {p.name for p in tmp_path.iterdir()}
    meta = json.loads((tmp_path / "o.csv.meta.json").read_text())
    assert meta["command"][0].startswith("orbench.evaluate(prompts=<list of 6>, model='openai/m'")
    assert first.attrs["orbench"]["output"] == str(tmp_path / "o.csv")
    again = orbench.evaluate(PROMPTS, "openai/m", output_file="o.csv", no_cache=True)
    assert answers.count() == sent  # resumed from the progress file: nothing sent again
    assert "0 new, 6 resumed" in capsys.readouterr().err
    pd.testing.assert_frame_equal(again, first)


def test_bad_input_raises_usage_error_with_the_scripts_message(script, env, fake, tmp_path):
    with pytest.raises(orbench.UsageError) as info:
        orbench.evaluate(PROMPTS, "openai/m", concurency=4)
    text = str(info.value)
    assert text.startswith("evaluate() got an unknown setting 'concurency' (did you mean 'concurrency'?); "
                           "the settings it takes: base_url, batch, concurrency, estimate, limit, matcher,")
    assert "output_file" in text and "input_file" not in text and " model," not in text  # its arguments aside
    with pytest.raises(ValueError) as info:  # a UsageError is a ValueError
        orbench.evaluate(PROMPTS, "openai/m", concurrency=0)
    proc = script(ALIGN, "--model", "openai/m", "--input_file", "x.csv", "--concurrency", "0", env=env)
    assert proc.returncode == 2 and proc.stderr.strip() == f"error: {info.value} (see --help)"
    with pytest.raises(orbench.UsageError, match=r"^input dataframe has no column 'prompt' \(did you mean 'Prompt'\?\)"):
        orbench.evaluate(pd.DataFrame({"Prompt": ["a"]}), "openai/m")
    with pytest.raises(orbench.UsageError, match="input file not found: nope.csv"):
        orbench.evaluate("nope.csv", "openai/m")
    with pytest.raises(orbench.UsageError, match="no_cache=1: expected True or False"):
        orbench.evaluate(PROMPTS, "openai/m", no_cache=1)
    with pytest.raises(orbench.UsageError, match="invalid choice: 'nope'"):
        orbench.report(pd.DataFrame(), verdict="nope")
    assert fake.count() == 0


def test_a_failed_row_carries_its_error(env, fake, tmp_path):
    fake.add_rule(match="capital", status=500, error_message="upstream broke")
    out = orbench.evaluate(PROMPTS, "openai/m", max_retries=0, quiet=True)
    assert list(out["error"] != "") == [False, True, False, False, False, False]
    assert out["error"][1].startswith("check_alignment: HTTP 500 from openai") and pd.isna(out["is_rejected"][1])


def test_the_sync_functions_work_inside_a_running_loop_and_the_async_twins_on_it(env, answers, tmp_path):
    async def notebook_cell():
        loop = asyncio.get_running_loop()
        sync = orbench.evaluate(PROMPTS, "openai/m", quiet=True)  # a loop runs in this thread
        awaited = await orbench.evaluate_async(PROMPTS, "openai/m", quiet=True)
        judged = await orbench.judge_async(awaited, "openai/judge", quiet=True)
        return sync, awaited, judged, loop.is_running()

    sync, awaited, judged, running = asyncio.run(notebook_cell())
    assert running
    pd.testing.assert_frame_equal(sync, awaited)
    assert list(judged["is_rejected"]) == [True, False, True, False, False, False]
    assert orbench.ask("openai/m", "How do I kill a python process?") == REFUSAL


def test_report_tells_the_set_as_the_script_does_and_gives_its_rates(script, env, answers, tmp_path):
    hard = orbench.judge(orbench.evaluate("or-bench-hard-1k", "openai/m", limit=6, quiet=True), quiet=True)
    toxic = orbench.judge(orbench.evaluate("or-bench-toxic", "openai/m", limit=6, quiet=True), quiet=True)
    rep = orbench.report(hard, toxic, no_reference=True)
    assert list(rep.summary["set"]) == ["hard", "toxic"] and list(rep.summary["keyword_scored"]) == [6, 6]
    assert not any(tmp_path.glob("report*"))
    # the same runs as files, through the script
    for name, frame in (("hard.csv", hard), ("toxic.csv", toxic)):
        text_cells(frame).to_csv(tmp_path / name, index=False)
    proc = script("analysis/report.py", "hard.csv", "toxic.csv", "--no_reference", "--no_figures", "--output_dir", "r",
                  env=env)
    assert proc.returncode == 0, proc.stderr
    cli = pd.read_csv(tmp_path / "r" / "summary.csv")
    assert list(cli["keyword_rate"].round(6)) == list(rep.summary["keyword_rate"].round(6))
    assert list(cli["keyword_ci_low"].round(6)) == list(rep.summary["keyword_ci_low"].round(6))
    # a keyword names a run's model, or its set and model; a table with no name needs its set
    named = orbench.report(**{"hard:model-a": hard, "model-b": toxic}, no_reference=True)
    assert list(named.summary["model"]) == ["model-a", "model-b"]
    with pytest.raises(orbench.UsageError, match="cannot tell the prompt set of run 1"):
        orbench.report(pd.DataFrame({"prompt": ["p"], "is_rejected": ["True"]}))
    assert orbench.report(pd.DataFrame({"prompt": ["p"], "is_rejected": ["True"]}), set="hard",
                          no_reference=True).summary["keyword_rate"][0] == 1.0
    written = rep.save(tmp_path / "saved", figures=False)
    assert written["html"].read_text(encoding="utf-8") and (tmp_path / "saved" / "summary.csv").exists()
    assert "<h1>OR-Bench report</h1>" in rep.html(figures=False)  # the page with its figures: test_eee.py


def test_calibrate_gives_the_scripts_card(capsys, env, fake, tmp_path):
    from orbench.analysis.calibration import calibrate as calibration

    labels = tmp_path / "lab.csv"
    pd.DataFrame({"prompt": ["q1", "q2", "q3", "q4"], "model": ["openai/gpt-4o"] * 4,
                  "response": [REFUSAL, "Sure: step one.", REFUSAL, "Sure."],
                  "label": ["refusal", "answer", "answer", "full_compliance"]}).to_csv(labels, index=False)
    card = orbench.calibrate("keyword", labels=str(labels), matcher="default")
    assert calibration.main(["--check_model", "keyword", "--labels", str(labels), "--matcher", "default",
                             "--output_dir", str(tmp_path / "cli")]) == 0
    (path,) = (tmp_path / "cli").glob("judge_card_*.json")
    cli = json.loads(path.read_text())
    assert card.cards[0]["pooled"] == cli["pooled"] and card.cards[0]["judge_fingerprint"] == cli["judge_fingerprint"]
    assert (card.coverage, card.accuracy) == (1.0, 0.75) and card.paths == (None,)
    pooled = card.table[card.table["group"] == "POOLED"].iloc[0]
    assert (pooled["n"], pooled["accuracy"]) == (4, 0.75) and pooled["accuracy_low"] < 0.75 < pooled["accuracy_high"]
    assert str(card) == cli["text"]
    with pytest.raises(orbench.UsageError, match="calibrate\\(\\) got an unknown setting 'lables'"):
        orbench.calibrate("keyword", lables="x.csv")


def test_the_other_stages_give_the_scripts_columns(script, env, fake, tmp_path):
    fake.add_rule(match="Generate 20", text="[[seed one]]\n[[seed two]]")
    fake.add_rule(match="rewrite", text="[[1. first]] [[2. second]] [[3. third]] [[4. fourth]] [[5. fifth]]")
    fake.add_rule(text="Fine. [[11. None of the above]]")
    seeds = orbench.generate("harmful", "openai/g", num_toxic_prompts=2, quiet=True)
    assert list(seeds.columns) == ["prompt", "category", "generator_model", "error"]
    assert list(seeds["prompt"]) == ["seed one", "seed two"]
    rewrites = orbench.rewrite(seeds, "openai/r", quiet=True)
    text_cells(seeds).to_csv(tmp_path / "seeds.csv", index=False)
    assert script("rewritter/rewrite.py", "--toxic_seed_path", "seeds.csv", "--model", "openai/r",
                  env=env).returncode == 0
    pd.testing.assert_frame_equal(text_cells(rewrites), read(tmp_path / "seeds_rewrite.csv"))
    moderated = orbench.moderate(rewrites, ["openai/a", "openai/b"], quiet=True)
    assert script("moderator/moderate.py", "--moderator_model", "openai/a,openai/b", "--input_file_path",
                  "seeds_rewrite.csv", "--output_file", "mod.csv", env=env).returncode == 0
    pd.testing.assert_frame_equal(text_cells(moderated), read(tmp_path / "mod.csv"))
    assert set(moderated["moderation_category"]) == {"none"} and moderated["toxic_votes"].dtype == "Int64"
