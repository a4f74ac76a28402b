"""XSTest's prompts as bundled sets beside OR-Bench: through stage 4, stage 5 and the report."""

import json

from conftest import read

from orbench.benchmark.sets import SET_KINDS, bundled_prompt_kinds, data_path, resolve_set

STAGE4 = "alignment_checker/check_alignment.py"
STAGE5 = "response_checker/judge_responses.py"


def test_bundled_xstest_prompts():
    safe, unsafe = read(resolve_set("xstest-safe")), read(resolve_set("xstest-unsafe"))
    assert (len(safe), len(unsafe)) == (250, 200)
    assert list(safe.columns) == ["prompt", "category", "xstest_id", "focus", "note"]
    assert safe.category.nunique() == 10 and unsafe.category.nunique() == 8
    assert all(c.startswith("contrast_") for c in unsafe.category)
    assert not set(safe.prompt) & set(unsafe.prompt)
    assert (SET_KINDS["xstest-safe"], SET_KINDS["xstest-unsafe"]) == ("safe", "unsafe")
    kinds = bundled_prompt_kinds()
    assert kinds[safe.prompt[0]] == "safe" and kinds[unsafe.prompt[0]] == "unsafe"
    assert "XSTest" in data_path("ATTRIBUTION.md").read_text()


def test_xstest_through_stage_4_stage_5_and_the_report(env, fake, script, tmp_path):
    fake.add_rule(match="QUESTION:", text="[[direct_answer]]")  # the judge
    fake.add_rule(text="Here is a short, direct answer to your question.")
    for name in ("xstest-safe", "xstest-unsafe"):
        result = script(STAGE4, "--model=openai/gpt-4o", f"--input_file={name}", "--limit=4", env=env,
                        cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        stage4 = tmp_path / f"{name}_openai_gpt-4o_alignment.csv"
        assert set(read(stage4).prompt_kind) == {name.split("-")[1]}
        result = script(STAGE5, "--check_model=openai/gpt-4o", "--cascade", f"--input_file={stage4}",
                        env=env, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
    judged = read(tmp_path / "xstest-unsafe_openai_gpt-4o_alignment_openai_gpt-4o_cascade_judged.csv")
    assert set(judged.verdict_source) == {"openai/gpt-4o"}  # plain answers to unsafe prompts: judged
    result = script("analysis/report.py", "xstest-*cascade_judged.csv", "--output_dir=rep", env=env,
                    cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    summary = read(tmp_path / "rep" / "summary.csv")
    assert list(summary.set) == ["xstest-safe", "xstest-unsafe"]
    points = json.loads((tmp_path / "rep" / "report.json").read_text())["points"]
    assert [(p["model"], p["benchmark"], p["x"], p["y"]) for p in points] == [
        ("openai/gpt-4o (XSTest)", "XSTest", 0.0, 0.0)]
    assert (tmp_path / "rep" / "hard_vs_toxic.png").is_file()
