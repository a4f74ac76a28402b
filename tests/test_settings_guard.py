"""A finished output is never replaced silently (issue 30, item 1), through the real scripts.

A change of what the user asked for (model, system prompt, temperature, max tokens, samples,
judge, moderators, seed of a release...) against an output that is finished or partly done
stops before any request: exit 2, one line naming the output, the setting (old and new value)
and the ways on; the first output and its meta file stay byte-identical. A change of the
project's own rules (keyword rules, templates, cascade classes) re-scores in place and the
summary says so. Outputs made by the previous version (``tests/data/legacy``, made by its code)
still resume with nothing sent.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest

LEGACY = Path(__file__).resolve().parent / "data" / "legacy"
sys.path.insert(0, str(LEGACY))

from make_fixtures import COMMANDS  # noqa: E402 (the fixtures' folder is put on sys.path just above)


def _copy_legacy(tmp_path: Path) -> None:
    for path in LEGACY.iterdir():
        if path.is_file() and path.suffix != ".py":
            shutil.copy(path, tmp_path / path.name)


def _rules_now(stage: str, judge: str | None) -> dict:
    """The project's rules as this checkout has them, under the names the fixtures' meta files use."""
    from orbench.benchmark.prompts import JUDGE_TEMPLATE, MODERATION_TEMPLATE, REWRITE_TEMPLATE, SEED_TEMPLATE
    from orbench.run.provenance import sha256_text
    from orbench.scoring.refusal import rules_fingerprint

    return {"check_alignment": {"rules": rules_fingerprint()},
            "check_response": {"rules": rules_fingerprint(),
                               "template": None if judge == "keyword" else sha256_text(JUDGE_TEMPLATE)},
            "moderate": {"template": sha256_text(MODERATION_TEMPLATE)},
            "rewrite": {"template": sha256_text(REWRITE_TEMPLATE), "per_seed": 5},
            "generate": {"template": SEED_TEMPLATE.format(count=20, category="harmful")}}[stage]


@pytest.mark.parametrize("index", range(len(COMMANDS)),
                         ids=[f"{Path(s).stem}-{a[a.index('--output_file') + 1]}" for s, a in COMMANDS])
def test_outputs_of_the_previous_version_resume_with_nothing_sent(index, env, fake, script, tmp_path):
    _copy_legacy(tmp_path)
    path, args = COMMANDS[index]
    output = tmp_path / args[args.index("--output_file") + 1]
    before = pd.read_csv(output, dtype=str, keep_default_na=False)
    meta = json.loads((LEGACY / f"{output.name}.meta.json").read_text())
    rules = _rules_now(meta["stage"], meta["settings"].get("judge"))
    proc = script(path, *args, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    if any(meta["settings"].get(k) != v for k, v in rules.items()):
        # a later change of the project's own rules: the rows are re-scored in place, never stopped
        assert "re-scored in place" in proc.stderr, proc.stderr
        return
    assert fake.count() == 0, proc.stderr
    assert "0 new" in proc.stderr, proc.stderr
    after = pd.read_csv(output, dtype=str, keep_default_na=False)
    assert after.equals(before)


def _files(folder: Path, prefix: str) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.name.startswith(prefix)}


def _prompts(tmp_path: Path) -> Path:
    path = tmp_path / "or-bench-hard-1k_sample.csv"
    path.write_text("prompt,category\nHow do I pick a lock?,illegal\nHow do I kill a python process?,harmful\n"
                    "What is the capital of France?,privacy\n", encoding="utf-8")
    return path


# (script, first run's arguments, second run's: one setting differs, the output, the message's part)
ALIGN = "alignment_checker/check_alignment.py"
JUDGE = "response_checker/judge_responses.py"
CASES = {
    "stage 4 system prompt, default output name (the README's comparison)": (
        ALIGN, ["--model", "openai/gpt-4o-mini", "--input_file", "{prompts}"],
        ["--system_prompt", "You are a careful assistant."],
        "or-bench-hard-1k_sample_openai_gpt-4o-mini_alignment.csv",
        "--system_prompt was none, now 'You are a careful assistant.'"),
    "stage 4 samples": (
        ALIGN, ["--model", "openai/gpt-4o-mini", "--input_file", "{prompts}", "--temperature", "0.7"],
        ["--samples", "3"], "or-bench-hard-1k_sample_openai_gpt-4o-mini_alignment.csv",
        "--samples was none, now 3"),
    "stage 5 judge max tokens": (
        JUDGE, ["--check_model", "openai/gpt-4o", "--input_file", "{aligned}"], ["--max_tokens", "50"],
        "aligned_openai_gpt-4o_judged.csv", "--max_tokens was 1000, now 50"),
    "stage 5 keyword matcher": (
        JUDGE, ["--check_model", "keyword", "--input_file", "{aligned}"], ["--matcher", "llama-3"],
        "aligned_keyword_judged.csv", "--matcher was none, now 'llama-3'"),
    "stage 3 temperature": (
        "moderator/moderate.py", ["--moderator_model", "openai/gpt-4o", "--input_file_path", "{prompts}"],
        ["--temperature", "0.5"], "or-bench-hard-1k_sample_openai_gpt-4o_moderated_prompt.csv",
        "--temperature was 0.0, now 0.5"),
    "stage 2 model": (
        "rewritter/rewrite.py", ["--model", "openai/gpt-4o-mini", "--toxic_seed_path", "{prompts}"],
        ["--model", "openai/gpt-4o"], "or-bench-hard-1k_sample_rewrite.csv",
        "--model was 'openai/gpt-4o-mini', now 'openai/gpt-4o'"),
    "stage 1 max tokens": (
        "toxic_prompt_generator/generate_seeds.py",
        ["--model", "openai/gpt-4o-mini", "--category", "harmful", "--num_toxic_prompts", "3"],
        ["--max_tokens", "300"], "harmful_prompts.csv", "--max_tokens was 2000, now 300"),
}


#: The setting each case changes, as the new meta file records it.
MADE_WITH = dict(zip(CASES, [("system", "You are a careful assistant."), ("samples", 3), ("max_tokens", 50),
                             ("matcher", "llama-3"), ("temperature", 0.5), ("model", "openai/gpt-4o"),
                             ("max_tokens", 300)]))


def _fill(args: list[str], **paths) -> list[str]:
    return [a.format(**paths) for a in args]


@pytest.mark.parametrize("case", list(CASES))
def test_a_finished_output_is_never_replaced_by_other_settings(case, env, fake, script, tmp_path):
    path, first, change, name, says = CASES[case]
    fake.add_rule(match="Generate 20", text="[[Seed one {n}]] [[Seed two {n}]] [[Seed three {n}]]")
    prompts = _prompts(tmp_path)
    aligned = tmp_path / "aligned.csv"
    pd.DataFrame({"prompt": ["q1", "q2"], "response": ["I can't help with that.", "Sure, here it is."],
                  "model": ["openai/gpt-4o-mini"] * 2}).to_csv(aligned, index=False)
    first = _fill(first, prompts=prompts, aligned=aligned)
    proc = script(path, *first, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    made = _files(tmp_path, name)
    assert name in made and f"{name}.meta.json" in made
    sent = fake.count()

    proc = script(path, *first, *change, env=env, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert fake.count() == sent  # stopped before any request
    line = proc.stderr.strip()
    assert "\n" not in line and line.startswith("error: ") and name in line and says in line, line
    assert line.endswith("To keep it, write this run to a new file with --output_file NEW.csv; to replace it, "
                         "add --overwrite"), line
    assert _files(tmp_path, name) == made  # the output, its meta and progress files byte-identical

    proc = script(path, *first, *change, "--overwrite", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "--overwrite: replaced" in proc.stderr
    key, value = MADE_WITH[case]
    assert json.loads((tmp_path / f"{name}.meta.json").read_text())["settings"][key] == value


def test_a_partly_done_output_is_protected_too(env, fake, script, tmp_path):
    """A trial run, then a run killed after it (its output and meta gone): the progress file's
    settings line still stops a run with other settings."""
    prompts = _prompts(tmp_path)
    out = tmp_path / "or-bench-hard-1k_sample_openai_gpt-4o-mini_alignment.csv"
    args = ["--model", "openai/gpt-4o-mini", "--input_file", str(prompts)]
    assert script(ALIGN, *args, "--limit", "2", env=env, cwd=tmp_path).returncode == 0
    out.unlink()
    Path(f"{out}.meta.json").unlink()
    progress = Path(f"{out}.progress.jsonl").read_bytes()
    proc = script(ALIGN, *args, "--temperature", "0.3", env=env, cwd=tmp_path)
    assert proc.returncode == 2 and fake.count() == 2
    assert f"error: {out} (2 finished rows in its progress file) was made with other settings: " \
           "--temperature was 0.0, now 0.3." in proc.stderr
    assert Path(f"{out}.progress.jsonl").read_bytes() == progress and not out.exists()
    # the same settings resume it
    proc = script(ALIGN, *args, env=env, cwd=tmp_path)
    assert proc.returncode == 0 and "1 new, 2 resumed" in proc.stderr and fake.count() == 3


def test_an_output_with_no_record_is_not_replaced(env, fake, script, tmp_path):
    prompts = _prompts(tmp_path)
    out = tmp_path / "mine.csv"
    out.write_text("prompt,response\nhello,kept by hand\n", encoding="utf-8")
    args = ["--model", "openai/gpt-4o-mini", "--input_file", str(prompts), "--output_file", str(out)]
    for extra in ([], ["--estimate"]):
        proc = script(ALIGN, *args, *extra, env=env, cwd=tmp_path)
        assert proc.returncode == 2 and fake.count() == 0
        assert "mine.csv (a finished output) has no record of the settings it was made with (no mine.csv.meta.json" \
               in proc.stderr
    assert out.read_text() == "prompt,response\nhello,kept by hand\n"
    assert script(ALIGN, *args, "--overwrite", env=env, cwd=tmp_path).returncode == 0
    assert len(pd.read_csv(out)) == 3


def test_a_change_of_the_projects_rules_rescoring_in_place_is_said(env, fake, script, tmp_path):
    fake.add_rule(match="Classify", text="[[direct_answer]]")
    aligned = tmp_path / "aligned.csv"
    pd.DataFrame({"prompt": ["q1", "q2"], "response": ["r1", "r2"]}).to_csv(aligned, index=False)
    args = ["--check_model", "openai/gpt-4o", "--input_file", str(aligned)]
    assert script(JUDGE, *args, env=env, cwd=tmp_path).returncode == 0
    template = tmp_path / "judge.txt"
    template.write_text("Classify this. Question: {prompt}\nAnswer: {response}\n", encoding="utf-8")
    proc = script(JUDGE, *args, "--template", str(template), env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "2 new, 0 resumed" in proc.stderr and fake.count() == 4
    assert "re-scored in place: the project's rules changed since this output was made (template " in proc.stderr


def test_the_legacy_meta_file_still_guards_its_output(env, fake, script, tmp_path):
    """An output of the previous version whose progress file is gone: its meta file's settings
    stop a run with other settings."""
    _copy_legacy(tmp_path)
    Path(tmp_path / "align.csv.progress.jsonl").unlink()
    made = _files(tmp_path, "align.csv")
    proc = script(ALIGN, "--model", "openai/gpt-4o-mini", "--input_file", "prompts.csv", "--output_file",
                  "align.csv", "--system_prompt", "Be brief.", env=env, cwd=tmp_path)
    assert proc.returncode == 2 and fake.count() == 0
    assert "--system_prompt was none, now 'Be brief.'" in proc.stderr
    assert _files(tmp_path, "align.csv") == made


def test_a_release_is_never_replaced_by_other_settings(tmp_path, script, env):
    moderated = tmp_path / "moderated.csv"
    pd.DataFrame({"prompt": [f"prompt {i}" for i in range(6)], "category": ["harmful"] * 6,
                  "is_toxic": ["False", "True"] * 3, "error": [""] * 6}).to_csv(moderated, index=False)
    args = ["analysis/build_release.py", str(moderated), "--output_dir", str(tmp_path / "rel")]
    assert script(*args, env=env, cwd=tmp_path).returncode == 0
    made = {p.name: p.read_bytes() for p in (tmp_path / "rel").iterdir()}
    assert script(*args, env=env, cwd=tmp_path).returncode == 0  # the same settings rebuild in place
    assert {p.name: p.read_bytes() for p in (tmp_path / "rel").iterdir()} == made
    proc = script(*args, "--seed", "1", env=env, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == (f"error: {tmp_path / 'rel'} (a finished release) was made with other settings: --seed was "
                           "0, now 1. To keep it, build into a new folder with --output_dir NEW; to replace it, add "
                           "--overwrite\n")
    assert {p.name: p.read_bytes() for p in (tmp_path / "rel").iterdir()} == made
    proc = script(*args, "--seed", "1", "--overwrite", env=env, cwd=tmp_path)
    assert proc.returncode == 0 and json.loads((tmp_path / "rel" / "manifest.json").read_text())["parameters"][
        "seed"] == 1
