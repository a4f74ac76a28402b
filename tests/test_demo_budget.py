"""scripts/demo.sh with a model other than the embedded one (issue 54): stage 4's own token budget
(the benchmark's setting), not the embedded model's 64, and no note that replies are cut off (the
embedded model's 64 and a MAX_TOKENS given: tests/test_local.py's demo test)."""

import json
import subprocess
import sys

from conftest import ROOT

FULL_BUDGET = 1000  # stage 4's --max_tokens default (check_alignment.py --help)


def _demo(env, out, **extra):
    env = dict(env, PYTHON=sys.executable, PER_CATEGORY="1", LIMIT="2", **extra)
    return subprocess.run(["bash", str(ROOT / "scripts" / "demo.sh"), str(out)], env=env, capture_output=True,
                          text=True, timeout=300)


def test_another_model_gets_the_stages_budget_and_no_cut_off_note(env, fake, tmp_path):
    fake.add_rule(model="m", text="Sure. Here is an overview.")
    proc = _demo(env, tmp_path / "demo", MODEL="openai/m")
    assert proc.returncode == 0, proc.stderr
    assert "cut off" not in proc.stderr.split(">> ")[0] and "capped" not in proc.stderr
    meta = json.loads((tmp_path / "demo" / "or-bench-hard-1k_openai_m_alignment.csv.meta.json").read_text())
    assert meta["settings"]["max_tokens"] == FULL_BUDGET
    sent = [r["body"] for r in fake.requests if r["path"].endswith("/chat/completions")]
    assert sent and {b.get("max_tokens") or b.get("max_completion_tokens") for b in sent} == {FULL_BUDGET}

