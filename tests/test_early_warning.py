"""Stages 3 and 5 warn early, while the run goes on, when most of a model's first 20 replies are
unparsed (orbench.run.outcomes.EarlyCheck): through the real scripts against the loopback server."""

from __future__ import annotations

from conftest import read, run_script, write

MODERATE = "moderator/moderate.py"
JUDGE = "response_checker/check_response.py"
GIBBERISH = "Blue seven, the the window of maybe."
SAFE = "Harmless. [[11. None of the above]]"


def prompts(n: int) -> list[dict]:
    return [{"prompt": f"P{i:02d} how do I bake bread?", "category": "harmful"} for i in range(1, n + 1)]


def early(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "of its first 20 replies were unparsed" in line]


def test_the_warning_comes_as_soon_as_20_rows_are_decided_not_at_the_end(env, fake, tmp_path):
    # a real process, one row at a time: rows 1-20 unparsed, then the key is refused (401), which stops the run
    write(tmp_path / "in.csv", prompts(30))
    for i in range(1, 21):
        fake.add_rule(match=f"P{i:02d} ", text=GIBBERISH)
    fake.add_rule(status=401, error_message="bad key")
    result = run_script(MODERATE, "--moderator_model=openai/mod-x", "--input_file=in.csv", "--output_file=out.csv",
                        "--concurrency=1", env=env, cwd=tmp_path)
    assert result.returncode == 2  # the auth error's exit code, unchanged by the warning
    assert early(result.stderr) == [
        "warning: moderator openai/mod-x: 20 of its first 20 replies were unparsed (no [[N. category]] label the "
        "parser could read): the model cannot follow the moderation template, and a prompt without a majority is "
        "left undecided (in no subset of a release). The run goes on (Ctrl-C stops it; finished rows are kept); "
        "try a larger moderator, or --template FILE, and read the <moderator>_raw columns"]
    lines = result.stderr.splitlines()
    assert lines.index(early(result.stderr)[0]) < next(i for i, line in enumerate(lines) if line.startswith("error:"))
    assert "rows are undecided" not in result.stderr  # the end-of-run warning never came: the run stopped before


def test_it_counts_the_first_20_replies_and_needs_more_than_half(env, fake, script, tmp_path):
    write(tmp_path / "in.csv", prompts(40))
    for case, unparsed, warned in (("late", range(21, 41), False), ("half", range(1, 11), False),
                                   ("most", range(1, 12), True)):
        fake.reset()
        for i in unparsed:
            fake.add_rule(match=f"P{i:02d} ", text=GIBBERISH)
        fake.add_rule(text=SAFE)
        result = script(MODERATE, "--moderator_model=gpt4", "--input_file=in.csv", f"--output_file={case}.csv",
                        "--concurrency=1", "--no_cache", env=env, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert bool(early(result.stderr)) is warned, (case, result.stderr)
        table = read(tmp_path / f"{case}.csv")
        assert (table.moderation_category == "undecided").sum() == len(unparsed)  # the rows are decided as before
    # the resolved model and the name typed, the count of the first 20
    assert early(result.stderr)[0].startswith(
        "warning: moderator openai/gpt-4-turbo-2024-04-09 (gpt4): 11 of its first 20 replies were unparsed")


def test_a_judge_of_an_ensemble_is_named_once(env, fake, script, tmp_path):
    write(tmp_path / "in.csv", [{"prompt": f"Q{i}", "response": f"R{i} Paris."} for i in range(25)])
    fake.add_rule(model="j-a", text=GIBBERISH)
    fake.add_rule(model="j-b", text="An answer. [[direct_answer]]")
    result = script(JUDGE, "--check_model=openai/j-a,openai/j-b", "--input_file=in.csv", "--output_file=out.csv",
                    env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert early(result.stderr) == [
        "warning: judge openai/j-a: 20 of its first 20 replies were unparsed (no [[class]] the strict parser could "
        "read): the model cannot follow the judge template, and those rows have no verdict (past 5% of a set's rows "
        "the report gives no rate, only its bounds). The run goes on (Ctrl-C stops it; finished rows are kept); try "
        "a larger judge, or --template FILE, and read the answer_type_response column"]
    assert len(read(tmp_path / "out.csv")) == 25
    # a rerun resumes every row: nothing decided in this run, no early warning (the summary still counts them)
    again = script(JUDGE, "--check_model=openai/j-a,openai/j-b", "--input_file=in.csv", "--output_file=out.csv",
                   env=env, cwd=tmp_path)
    assert again.returncode == 0 and "0 new, 25 resumed" in again.stderr and not early(again.stderr)
