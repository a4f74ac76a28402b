"""Report folders for the Every Eval Ever and leaderboard tests, made once per test process.

Real stage-4 and stage-5 runs (the scripts, in process, answered by the mock provider) over the
first prompts of the bundled sets, and real reports over them:

* ``rep1``: ``mock/gpt-4o-alpha`` with the system prompt "Be brief." on Hard-1K, Toxic and XSTest's
  two halves (keyword verdicts); ``mock/llama-2-beta`` on Hard-1K judged by ``mock/judge-x`` (and its
  keyword verdicts), on Toxic and on XSTest's safe half (keyword);
* ``rep2``: ``mock/gpt-4o-alpha`` again without a system prompt on Hard-1K and Toxic;
  ``mock/mistral-gamma`` on Hard-1K (keyword) and on Toxic judged by ``mock/judge-bad``, whose
  replies name no class on 9 of the 10 rows (no rate: bounds only); and the second alpha run's
  files under a hostile name, ``<script>alert(1)</script>``.

:data:`REFUSED` says which prompts (by position) each model refuses, so tests can count.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pandas as pd
from conftest import ROOT, run_in_process

from orbench.llm.providers import mock

REFUSAL = "I'm sorry, but I can't help with that."
ANSWER = "Sure. Here is an overview of the topic, with the usual steps."
SIZES = {"or-bench-hard-1k": 12, "or-bench-toxic": 10, "xstest-safe": 10, "xstest-unsafe": 10}
#: Per model id and set: the positions of the prompts it refuses.
REFUSED = {
    "gpt-4o-alpha": {"or-bench-hard-1k": {0, 4, 8}, "or-bench-toxic": set(range(10)), "xstest-safe": {0},
                     "xstest-unsafe": {0, 1, 2, 3, 4}},
    "llama-2-beta": {"or-bench-hard-1k": {0, 1, 2, 3, 4, 5}, "or-bench-toxic": set(), "xstest-safe": set(range(10))},
    "mistral-gamma": {"or-bench-hard-1k": {0, 1}, "or-bench-toxic": {0, 1, 2}},
}
HOSTILE = "<script>alert(1)</script>"
ALIGN, JUDGE = "alignment_checker/check_alignment.py", "response_checker/judge_responses.py"


@dataclass(frozen=True)
class Runs:
    root: Path
    rep1: Path
    rep2: Path
    prompts: dict  # set -> list of prompts (the first of the bundled set)
    files: dict    # (model id, set[, "judged"], report) -> the CSV the report read


def prompts_of(name: str) -> list[str]:
    frame = pd.read_csv(ROOT / "orbench" / "data" / f"{name}.csv", dtype=str, keep_default_na=False)
    return list(frame["prompt"].head(SIZES[name]))


def _rules(prompts: dict) -> None:
    mock.RULES.reset()
    # judges first: their requests hold the tested model's reply
    mock.RULES.add(model="judge-x", match="can't help", text="It declines. [[direct_refusal]]")
    mock.RULES.add(model="judge-x", text="It answers. [[direct_answer]]")
    mock.RULES.add(model="judge-bad", match=prompts["or-bench-toxic"][5][:60], text="It answers. [[direct_answer]]")
    mock.RULES.add(model="judge-bad", text="I would rather not classify this one.")
    for model, sets in REFUSED.items():
        for name, refused in sets.items():
            for i in sorted(refused):
                mock.RULES.add(model=model, match=prompts[name][i][:60], text=REFUSAL)
        mock.RULES.add(model=model, text=ANSWER)


@cache
def make() -> Runs:
    """Every run and both reports (cached: once per test process; removed at exit)."""
    root = Path(tempfile.mkdtemp(prefix="orbench-leaderboard-runs-"))
    atexit.register(shutil.rmtree, root, True)
    env = {k: v for k, v in os.environ.items()}
    env.update(ORBENCH_CACHE_DIR=str(root / "cache"), PYTHONPATH=str(ROOT))
    prompts = {name: prompts_of(name) for name in SIZES}
    for name in SIZES:  # the first rows of the bundled sets, with their categories
        frame = pd.read_csv(ROOT / "orbench" / "data" / f"{name}.csv", dtype=str, keep_default_na=False)
        frame.head(SIZES[name])[["prompt", "category"]].to_csv(root / f"{name}_prompts.csv", index=False)
    _rules(prompts)
    files = {}

    def run(*args):
        proc = run_in_process(*args, env=env, cwd=root)
        assert proc.returncode == 0, proc.stderr

    def stage4(model, name, tag, *extra):
        out = root / tag / f"{name}_{model}.csv"
        out.parent.mkdir(exist_ok=True)
        run(ALIGN, "--model", f"mock/{model}", "--input_file", str(root / f"{name}_prompts.csv"), "--output_file",
            str(out), "--quiet", *extra)
        files[(model, name, tag)] = out
        return out

    def stage5(model, name, tag, judge):
        out = root / tag / f"{name}_{model}_judged.csv"
        run(JUDGE, "--check_model", f"mock/{judge}", "--input_file", str(files[(model, name, tag)]),
            "--output_file", str(out), "--quiet")
        files[(model, name, "judged", tag)] = out
        return out

    try:
        for name in SIZES:
            stage4("gpt-4o-alpha", name, "rep1", "--system_prompt", "Be brief.")
        stage4("llama-2-beta", "or-bench-hard-1k", "rep1")
        stage5("llama-2-beta", "or-bench-hard-1k", "rep1", "judge-x")
        stage4("llama-2-beta", "or-bench-toxic", "rep1")
        stage4("llama-2-beta", "xstest-safe", "rep1")
        for name in ("or-bench-hard-1k", "or-bench-toxic"):
            stage4("gpt-4o-alpha", name, "rep2")
            stage4("mistral-gamma", name, "rep2")
        stage5("mistral-gamma", "or-bench-toxic", "rep2", "judge-bad")
    finally:
        mock.RULES.reset()
    hostile = []
    for name, short in (("or-bench-hard-1k", "hard"), ("or-bench-toxic", "toxic")):
        src = files[("gpt-4o-alpha", name, "rep2")]
        copy = root / "rep2" / f"{name}_hostile.csv"
        shutil.copy(src, copy)
        shutil.copy(f"{src}.meta.json", f"{copy}.meta.json")
        hostile.append(f"{short}:{HOSTILE}={copy}")
    rep1, rep2 = root / "report1", root / "report2"
    run("analysis/report.py", *[str(p) for k, p in files.items() if k[-1] == "rep1"], "--output_dir", str(rep1),
        "--no_figures")
    run("analysis/report.py", *[str(p) for k, p in files.items() if k[-1] == "rep2"], *hostile,
        "--output_dir", str(rep2), "--no_figures")
    return Runs(root, rep1, rep2, prompts, files)
