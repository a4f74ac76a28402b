"""The report reads in the order a researcher asks (issue 30, item 5), through the real scripts.

With ``--compare`` the comparison comes first and says which settings differ between the runs of
A and B (their meta files, written by real stage-4 runs against the loopback fake provider); the
quadratic fit's note names the models without a point; each source is cited once; the audit's
labelling page says when a reply was cut off.
"""

from __future__ import annotations

import html
import json
import re

import pandas as pd
import pytest

CUT = "Sure, here is the start of"
REFUSE = "I'm sorry, but I can't help with that."


def _stage4(script, env, tmp_path, name: str, *flags: str):
    proc = script("alignment_checker/check_alignment.py", "--model", "openai/gpt-4o-mini", "--input_file",
                  str(tmp_path / "prompts.csv"), "--output_file", str(tmp_path / name), "--quiet", *flags,
                  env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return tmp_path / name


def test_the_comparison_comes_first_and_names_the_settings_that_differ(env, fake, script, tmp_path):
    fake.add_rule(match="REFUSE", text=REFUSE)
    fake.add_rule(match="ANSWER", text="Sure, here is how it works.")
    pd.DataFrame({"prompt": [f"{'REFUSE' if i % 3 == 0 else 'ANSWER'} prompt {i}" for i in range(12)],
                  "category": "privacy"}).to_csv(tmp_path / "prompts.csv", index=False)
    plain = _stage4(script, env, tmp_path, "plain.csv", "--temperature", "0")
    system = _stage4(script, env, tmp_path, "system.csv", "--temperature", "0.7", "--system_prompt",
                     "You are careful.")
    proc = script("analysis/report.py", f"hard:gpt-a={plain}", f"hard:gpt-b={system}", "--compare", "gpt-a", "gpt-b",
                  "--no_reference", "--output_dir", str(tmp_path / "rep"), env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert ("gpt-a vs gpt-b (hard): what the meta files say differs: temperature: 0.0 (A) vs 0.7 (B); "
            "system prompt: none (A) vs You are careful. (B)") in proc.stderr
    page = (tmp_path / "rep" / "report.html").read_text()
    # the comparison is the first section after the warnings: before the leaderboard and the figures
    heads = re.findall(r"<h2>([^<]+)</h2>", page)
    assert heads[:2] == ["Paired comparisons", "Leaderboard"]
    row = re.search(r"<tr><td>gpt-a</td><td>gpt-b</td><td>hard</td><td>(.*?)</td></tr>", page).group(1)
    assert row == ("temperature: <code>0.0</code> (A) vs <code>0.7</code> (B)<br>"
                   "system prompt: <code>none</code> (A) vs <code>You are careful.</code> (B)")


def test_the_same_settings_and_an_unrecorded_run_are_said_so(tmp_path, script, env):
    rows = [{"prompt": f"p{i}", "category": "hate", "response": "r", "is_rejected": str(i % 2 == 0)} for i in range(8)]
    pd.DataFrame(rows).to_csv(tmp_path / "a.csv", index=False)
    pd.DataFrame(rows).to_csv(tmp_path / "b.csv", index=False)
    proc = script("analysis/report.py", f"hard:a={tmp_path / 'a.csv'}", f"hard:b={tmp_path / 'b.csv'}", "--compare",
                  "a", "b", "--no_reference", "--output_dir", str(tmp_path / "rep"), "--no_figures", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert ("a vs b (hard): what the meta files say differs: A (a): no meta file of the run that produced its "
            "responses; B (b): no meta file of the run that produced its responses") in proc.stderr


def _file(path, model, rates: dict[str, float], n: int = 20):
    rows = [{"prompt": f"{s} prompt {i}", "category": "hate", "model": model, "response": "r",
             "is_rejected": str(i < rate * n)} for s, rate in rates.items() for i in range(n)]
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_the_fit_note_names_the_models_without_a_point(tmp_path, script, env):
    specs = []
    for model, hard, toxic in (("prov/m1", 0.1, 0.6), ("prov/m2", 0.3, 0.8), ("prov/m3", 0.5, 0.9)):
        specs += [f"hard:={_file(tmp_path / f'{model[5:]}_h.csv', model, {'h': hard})}",
                  f"toxic:={_file(tmp_path / f'{model[5:]}_t.csv', model, {'t': toxic})}"]
    specs.append(f"hard:={_file(tmp_path / 'm5_h.csv', 'prov/m5', {'h': 0.2})}")
    specs.append(f"80k:={_file(tmp_path / 'm6_80k.csv', 'prov/m6', {'k': 0.2})}")
    proc = script("analysis/report.py", *specs, "--no_reference", "--output_dir", str(tmp_path / "rep"), "--no_figures",
                  env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    note = next(line for line in proc.stderr.splitlines() if line.startswith("Quadratic fit"))
    assert note.endswith("over your models' OR-Bench points (3: prov/m1, prov/m2, prov/m3); no point (not in the "
                         "fit): prov/m5 (no toxic results), 1 more with neither hard nor toxic results")
    # too few points: the note says whose are missing (the same function, in process)
    from orbench.analysis.report.build import correlation_notes

    _, coeffs, notes = correlation_notes([{"model": "prov/m1", "x": 10.0, "y": 60.0}], ["prov/m5 (no toxic results)"])
    assert coeffs is None and notes[1] == (
        "Quadratic fit y = a*x^2 + b*x + c: not drawn (needs >= 3 models with hard and toxic results and distinct "
        "hard-set rates, have 1: prov/m1); no point (not in the fit): prov/m5 (no toxic results)")


def test_each_source_is_cited_once(tmp_path, script, env):
    from orbench.benchmark.sets import CITATION, XSTEST_CITATION

    specs = [f"hard:={_file(tmp_path / 'h.csv', 'prov/m1', {'h': 0.1})}",
             f"toxic:={_file(tmp_path / 't.csv', 'prov/m1', {'t': 0.7})}",
             f"xstest-safe:={_file(tmp_path / 'xs.csv', 'prov/m1', {'s': 0.1})}",
             f"xstest-unsafe:={_file(tmp_path / 'xu.csv', 'prov/m1', {'u': 0.9})}"]
    proc = script("analysis/report.py", *specs, "--output_dir", str(tmp_path / "rep"), env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "rep" / "report.html").read_text()
    text = re.sub(r"<img [^>]*>", "", page)  # the figures' own captions are images
    assert text.count(html.escape(CITATION, quote=True)) == 1
    assert text.count(html.escape(XSTEST_CITATION, quote=True)) == 1
    assert text.count("2405.20947") == 1 and text.count("Röttger") == 1
    # the page refers to them by their place in its Sources list
    assert "<li id='src-orbench'>" in page and "<li id='src-xstest'>" in page
    assert page.count("href='#src-orbench'") >= 3 and page.count("href='#src-xstest'") == 1
    assert (tmp_path / "rep" / "leaderboard.md").read_text().count(CITATION) == 1
    assert json.loads((tmp_path / "rep" / "report.json").read_text())["reference"]["citation"] == CITATION


@pytest.fixture
def cut_audit(tmp_path, script, env):
    """A verdict audit of a stage-4 output where two of six replies were cut off at the token limit."""
    src = tmp_path / "hard_m.csv"
    pd.DataFrame({"prompt": [f"prompt {i}" for i in range(6)], "category": "hate", "model": "m",
                  "response": [CUT if i in (0, 3) else f"{REFUSE} ({i})" for i in range(6)],
                  "is_rejected": ["False", "True", "True", "False", "True", "True"],
                  "finish_reason": ["length", "stop", "stop", "max_tokens", "stop", "stop"]}).to_csv(src, index=False)
    folder = tmp_path / "audit"
    proc = script("analysis/audit.py", "sample", "--kind", "verdict", str(src), "--output_dir", str(folder), env=env)
    assert proc.returncode == 0, proc.stderr
    return folder


def test_the_audit_page_says_a_reply_was_cut_off(cut_audit):
    items = pd.read_csv(cut_audit / "items.csv", dtype=str, keep_default_na=False)
    assert list(items.columns) == ["item_id", "prompt", "response", "cut_off"]
    assert sorted(items.loc[items["cut_off"] == "True", "prompt"]) == ["prompt 0", "prompt 3"]
    page = (cut_audit / "audit.html").read_text()
    data = json.loads(page.split('id="data">')[1].split("</script>")[0])
    assert {it["prompt"] for it in data["items"] if it["cut_off"]} == {"prompt 0", "prompt 3"}
    assert 'id="cutoff" class="cutoff hidden">Cut off: this reply stopped at the model\'s token limit' in page
    tasks = json.loads((cut_audit / "labelstudio" / "tasks.json").read_text())
    assert sorted(t["data"]["prompt"] for t in tasks if t["data"]["cut_off"]) == ["prompt 0", "prompt 3"]
    assert '<Header value="$cut_off" size="6"/>' in (cut_audit / "labelstudio" / "config.xml").read_text()


def test_a_judge_comparison_names_the_judges_own_settings_that_differ():
    from orbench.analysis.report.lineage import differences_text, setting_differences

    run = {"model_resolved": "openai/gpt-4o", "temperature": 0.0, "max_tokens": 512, "system_prompt": None,
           "templates": {}, "source": "orbench"}
    judge = {"kind": "judge", "judge": "openai/j", "templates": {"judge": "aa11"}, "temperature": 0.0, "max_tokens": 64}
    records = [{"set": "hard", "model": "a", "responses": run, "verdicts": judge},
               {"set": "hard", "model": "b", "responses": run, "verdicts": {**judge, "templates": {"judge": "bb22"}}}]
    diff = setting_differences(records, "hard", "a", "b", judge="openai/j")
    assert diff["differs"] == [("judge templates", "judge aa11", "judge bb22")] and diff["unknown"] == []
    assert differences_text(diff) == "judge templates: judge aa11 (A) vs judge bb22 (B)"
    # keyword verdicts: the judges' settings are not theirs; the same runs: nothing differs
    assert differences_text(setting_differences(records, "hard", "a", "b")) == "no setting differs in the meta files"
