"""The sharp corners a user hit (issue 30, item 4), each through the real script or command."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pandas as pd
import pytest
from conftest import ROOT

from orbench.analysis.audit import commands as audit
from orbench.benchmark import datasets
from orbench.llm.models import PROVIDERS

ALIGN = "alignment_checker/check_alignment.py"
SHELL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _prompts(path, n: int = 3):
    pd.DataFrame({"prompt": [f"How do I do thing {i}?" for i in range(n)], "category": "privacy"}).to_csv(
        path, index=False)
    return path


# -- --estimate sends nothing, so it asks for no key ------------------------------------------------

@pytest.mark.parametrize("path, args, key", [
    (ALIGN, ["--model", "openai/gpt-4o", "--input_file", "in.csv"], "OPENAI_API_KEY"),
    ("moderator/moderate.py", ["--moderator_model", "anthropic/claude-3-haiku-20240307,gemini/gemini-1.5-pro",
                               "--input_file_path", "in.csv"], "ANTHROPIC_API_KEY"),
    ("toxic_prompt_generator/generate_seeds.py", ["--category", "harmful", "--num_toxic_prompts", "40"],
     "MISTRAL_API_KEY"),
])
def test_estimate_asks_for_no_api_key(path, args, key, env, fake, script, tmp_path):
    _prompts(tmp_path / "in.csv")
    bare = {k: v for k, v in env.items() if not k.endswith("_API_KEY")}
    proc = script(path, *args, "--estimate", env=bare, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("estimate (synchronous API; nothing was sent)") and fake.count() == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]  # nothing written
    proc = script(path, *args, env=bare, cwd=tmp_path)  # a real run still needs its key, said at once
    assert proc.returncode == 2 and f"set {key}" in proc.stderr and fake.count() == 0


# -- every variable a message names can be set in a shell --------------------------------------------

def test_every_variable_name_the_provider_table_gives_is_a_shell_name():
    names = [v for p in PROVIDERS.values() for v in (p.base_url_var, *p.key_vars)]
    assert "OPENAI_COMPATIBLE_BASE_URL" in names and "GEMINI_OPENAI_BASE_URL" in names
    assert [n for n in names if not SHELL_NAME.match(n)] == []



def test_the_connection_failure_names_a_variable_a_shell_can_set(env, fake, script, tmp_path, closed_port):
    _prompts(tmp_path / "in.csv", 8)  # enough first attempts failing to connect to stop the run
    dead = f"http://127.0.0.1:{closed_port()}/v1"
    proc = script(ALIGN, "--model", "openai-compatible/smollm2", "--input_file", "in.csv",
                  env={**env, "OPENAI_COMPATIBLE_BASE_URL": dead}, cwd=tmp_path)
    assert proc.returncode == 2
    assert f"cannot connect to openai-compatible at {dead}" in proc.stderr
    assert "(--base_url or OPENAI_COMPATIBLE_BASE_URL)" in proc.stderr
    named = re.findall(r"\b[A-Za-z][A-Za-z0-9_-]*_(?:BASE_URL|API_KEY)\b", proc.stderr)
    assert named and all(SHELL_NAME.match(n) for n in named), named


# -- the release builder on a pool with no decided prompt ------------------------------------------

def test_a_release_with_no_decided_prompt_stops_and_writes_nothing(env, script, tmp_path):
    moderated = tmp_path / "moderated.csv"
    pd.DataFrame({"prompt": ["a", "b", "c", ""], "category": "harmful", "is_toxic": "",
                  "moderation_category": ["undecided", "undecided", "undecided", "skipped_empty"],
                  "error": ["", "", "moderate: HTTP 500", ""]}).to_csv(moderated, index=False)
    proc = script("analysis/build_release.py", str(moderated), "--output_dir", str(tmp_path / "rel"),
                  env=env, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("error: no decided prompt in the 4 moderated rows (1 with an error, 2 undecided, "
                                  "1 empty): nothing to release.")
    assert proc.stderr.count("\n") == 1 and not (tmp_path / "rel").exists()


# -- python -m orbench.benchmark.datasets: the report can tell the sample's set --------------------------------

def test_a_datasets_sample_is_recognised_by_the_report(env, fake, script, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert datasets.main(["or-bench-hard-1k", "--per_category", "1", "--output", "sample.csv"]) == 0
    meta = json.loads((tmp_path / "sample.csv.meta.json").read_text())
    assert meta["set"] == "or-bench-hard-1k" and meta["settings"] == {
        "source": "or-bench-hard-1k", "per_category": 1, "seed": 0}
    assert meta["command"] == ["python", "-m", "orbench.benchmark.datasets", "or-bench-hard-1k", "--per_category", "1",
                               "--output", "sample.csv"]
    assert datasets.main(["or-bench-toxic", "--per_category", "1"]) == 0  # default name: after the set
    assert capsys.readouterr().out.splitlines()[-1] == "or-bench-toxic_sample.csv"
    proc = script(ALIGN, "--model", "openai/gpt-4o-mini", "--input_file", "sample.csv", "--limit", "3",
                  env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    aligned = "sample_openai_gpt-4o-mini_alignment.csv"  # the name names no set
    proc = script("analysis/report.py", aligned, "--output_dir", "rep", "--no_reference", "--no_figures", env=env,
                  cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert set(pd.read_csv(tmp_path / "rep" / "summary.csv")["set"]) == {"hard"}


# -- two runs of one model in one report -------------------------------------------------------------

def test_two_runs_of_one_model_are_told_how_to_be_named_apart(env, fake, script, tmp_path):
    _prompts(tmp_path / "hard.csv")
    for name, extra in (("plain.csv", []), ("system.csv", ["--system_prompt", "Be careful."])):
        assert script(ALIGN, "--model", "openai/gpt-4o-mini", "--input_file", "hard.csv", "--output_file", name,
                      *extra, env=env, cwd=tmp_path).returncode == 0
    proc = script("analysis/report.py", "hard:=plain.csv", "hard:=system.csv", "--output_dir", "rep", "--no_figures",
                  env=env, cwd=tmp_path)
    assert proc.returncode == 2
    assert ("If these are separate runs of openai/gpt-4o-mini (e.g. with and without a system prompt), name "
            "each as its own model with SET:MODEL=PATH: 'hard:gpt-4o-mini-a=plain.csv' "
            "'hard:gpt-4o-mini-b=system.csv'") in proc.stderr
    proc = script("analysis/report.py", "hard:gpt-4o-mini-a=plain.csv", "hard:gpt-4o-mini-b=system.csv",
                  "--output_dir", "rep", "--no_reference", "--no_figures", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert set(pd.read_csv(tmp_path / "rep" / "summary.csv")["model"]) == {"gpt-4o-mini-a", "gpt-4o-mini-b"}


def test_check_alignment_help_documents_provider_block(env, script, tmp_path):
    proc = script(ALIGN, "--help", env=env, cwd=tmp_path)
    assert proc.returncode == 0
    assert "refusal_source: keyword (matcher found a refusal), provider_block (the provider blocked" in proc.stdout
    assert "provider (provider blocked" not in proc.stdout


# -- the meta file's command reruns the run; its input path is absolute ------------------------------

def test_the_provenance_command_is_runnable(env, fake, script, tmp_path):
    src = _prompts(tmp_path / "in.csv")
    proc = script(ALIGN, "--model", "openai/gpt-4o-mini", "--input_file", "in.csv", "--output_file", "out.csv",
                  env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    meta = json.loads((tmp_path / "out.csv.meta.json").read_text())
    assert meta["input"]["path"] == str(src.resolve())
    assert meta["command"] == ["python", str(ROOT / ALIGN), "--model", "openai/gpt-4o-mini", "--input_file", "in.csv",
                               "--output_file", "out.csv"]
    assert meta["cwd"] == str(tmp_path)
    rerun = subprocess.run([sys.executable, *meta["command"][1:]], cwd=meta["cwd"], env=env, capture_output=True,
                           text=True, timeout=60)
    assert rerun.returncode == 0, rerun.stderr
    assert "0 new, 3 resumed" in rerun.stderr and fake.count() == 3


# -- stages 1 and 2 read a reply's list alike ----------------------------------------------------------

@pytest.mark.parametrize("listing", [
    "[1] {w} one?\n[2] {w} two?\n[3] {w} three?",
    "[[1]] {w} one?\n[[2]] {w} two?\n[[3]] {w} three?",
    "[1. {w} one?]\n[2. {w} two?]\n[3. {w} three?]",
    "[[1. {w} one?]]\n[[2. {w} two?]]\n[[3. {w} three?]]",
])
def test_stages_1_and_2_read_numbered_bracket_lists_alike(listing, env, fake, script, tmp_path):
    fake.add_rule(match="Generate 20", text="Here you go:\n" + listing.format(w="Seed"))
    fake.add_rule(match="Rewrite the harmful", text="New prompts:\n" + listing.format(w="Rewrite"))
    proc = script("toxic_prompt_generator/generate_seeds.py", "--category", "harmful", "--num_toxic_prompts", "3",
                  "--model", "openai/gpt-4o-mini", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    seeds = pd.read_csv(tmp_path / "harmful_prompts.csv")["prompt"].tolist()
    assert seeds == ["Seed one?", "Seed two?", "Seed three?"]
    proc = script("rewritter/rewrite.py", "--toxic_seed_path", "harmful_prompts.csv", "--model", "openai/gpt-4o-mini",
                  "--limit", "1", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rewrites = pd.read_csv(tmp_path / "harmful_prompts_rewrite.csv", keep_default_na=False)
    assert rewrites["prompt"].tolist()[:3] == ["Rewrite one?", "Rewrite two?", "Rewrite three?"]


# -- Label Studio: one person, whichever form completed_by takes ---------------------------------------

def test_label_studio_annotators_are_keyed_by_user_id_in_both_forms(env, script, tmp_path):
    src = tmp_path / "set.csv"
    pd.DataFrame({"prompt": [f"prompt {i}" for i in range(6)], "category": "hate",
                  "is_toxic": ["False", "True"] * 3}).to_csv(src, index=False)
    folder = tmp_path / "audit"
    assert script("analysis/audit.py", "sample", "--kind", "prompt", str(src), "--per_stratum", "3",
                  "--output_dir", str(folder), env=env).returncode == 0
    tasks = json.loads((folder / "labelstudio" / "tasks.json").read_text())
    export = []
    for k, task in enumerate(tasks):  # user 7 as an object on even tasks and as a bare id on odd ones
        who = {"id": 7, "email": "dana@lab.org"} if k % 2 == 0 else 7
        label = ("safe", "toxic")[k % 2]
        anns = [{"id": 10 * k + u, "completed_by": c, "was_cancelled": False,
                 "result": [{"type": "choices", "value": {"choices": [label]}}]} for u, c in ((1, who), (2, 8))]
        export.append({"id": k + 1, "data": task["data"], "annotations": anns})
    (folder / "labels").mkdir()
    (folder / "labels" / "export.json").write_text(json.dumps(export))
    proc = script("analysis/audit.py", "score", str(folder), env=env)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((folder / "score" / "score.json").read_text())
    assert result["annotators"] == ["ls-dana@lab.org", "ls-8"]
    assert result["agreement"]["raw"] == 1.0 and len(audit.read_sample(folder).items) == len(tasks)
