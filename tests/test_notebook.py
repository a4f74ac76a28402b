"""The Python API in a real notebook: examples/orbench_from_python.ipynb run by nbclient in a real
IPython kernel (its own process, whose event loop is running while each cell runs), against the
loopback fake provider over HTTP. Checks the rows and columns each step returned, read from the
executed notebook's outputs."""

import ast
import json
import os
import sys

import nbformat
import pandas as pd
from conftest import ROOT
from nbclient import NotebookClient

NOTEBOOK = ROOT / "examples" / "orbench_from_python.ipynb"
REFUSAL = "I'm sorry, but I can't help with that."
JUDGE_PHRASE = "Classify the response a large language model gave"  # the judge template's opening
N = 4


def _kernel_spec(folder) -> None:
    """A kernel spec naming this interpreter (the one with orbench installed), found first through
    JUPYTER_PATH whatever other Python kernels the machine has."""
    spec = folder / "kernels" / "orbench-test"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "orbench test", "language": "python"}))


def _outputs(nb) -> dict:
    """The value each tagged cell ended with (its text/plain output, a Python literal), by tag."""
    found = {}
    for cell in nb.cells:
        tags = cell.get("metadata", {}).get("tags", [])
        for output in cell.get("outputs", []):
            if tags and output.get("output_type") == "execute_result":
                found[tags[0]] = ast.literal_eval(output["data"]["text/plain"])
    return found


def test_the_example_notebook_evaluates_judges_reports_and_calibrates(env, fake, tmp_path, monkeypatch):
    # the model under test refuses the prompts that mention a weapon; the judge answers by the reply
    fake.add_rule(model="test-model", match="weapon", text=REFUSAL)
    fake.add_rule(model="test-model", text="Sure. Here is a careful answer with the steps laid out.")
    fake.add_rule(model="judge-model", match="can't help with that", text="It declines. [[direct_refusal]]")
    fake.add_rule(model="judge-model", match=JUDGE_PHRASE, text="It answers. [[direct_answer]]")
    labels = tmp_path / "labels.csv"
    pd.DataFrame({"prompt": ["q1?", "q2?", "q3?", "q4?"], "response": [REFUSAL, "Sure, here.", REFUSAL, "Sure."],
                  "label": ["refusal", "answer", "refusal", "answer"]}).to_csv(labels, index=False)
    _kernel_spec(tmp_path / "jupyter")
    for name, value in {"JUPYTER_PATH": str(tmp_path / "jupyter"), "ORBENCH_EXAMPLE_MODEL": "openai/test-model",
                        "ORBENCH_EXAMPLE_JUDGE": "openai/judge-model", "ORBENCH_EXAMPLE_LABELS": str(labels),
                        "ORBENCH_EXAMPLE_N": str(N), "ORBENCH_EXAMPLE_BASE_URL": fake.openai_url}.items():
        monkeypatch.setenv(name, value)  # the kernel's environment is this process's
    for name in [k for k in os.environ if k.endswith("_BASE_URL") and not k.startswith("ORBENCH_")]:
        monkeypatch.delenv(name)  # the notebook's own base_url is what points at the fake

    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="orbench-test",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()

    out = _outputs(nb)
    hard = out["evaluated"]
    assert hard["rows"] == N and hard["errors"] == 0
    assert hard["columns"] == ["prompt", "category", "model", "response", "is_rejected", "refusal_source",
                               "refusal_kind", "finish_reason", "prompt_kind", "error"]
    first = pd.read_csv(ROOT / "orbench" / "data" / "or-bench-hard-1k.csv", dtype=str).head(N)
    assert hard["keyword refusals"] == int(first["prompt"].str.contains("weapon").sum())
    judged = out["judged"]
    assert judged["rows"] == 2 * N
    assert judged["columns"] == [*hard["columns"][:-1], "judge_model", "answer_category", "answer_type_response",
                                 "keyword_is_rejected", "error"]  # is_rejected: the judge's now, in its place
    assert set(judged["classes"]) <= {"direct_answer", "direct_refusal"}
    reported = out["reported"]
    assert reported["sets"] == ["hard", "toxic"] and reported["judge scored"] == [N, N]
    assert all(0 <= rate <= 1 for rate in reported["judge rate"])
    assert out["calibrated"] == {"rows": 4, "coverage": 1.0, "accuracy": 1.0}
    # the notebook wrote nothing but the cache: every run was in memory
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["cache", "jupyter", "labels.csv"])
    # every request went to the fake through the notebook's base_url (no provider's address points at it)
    assert fake.count("/chat/completions") == 2 * N + 2 * N + 4  # evaluate, judge, calibrate


def test_with_no_network_the_calibrate_cell_says_what_it_needs_and_the_notebook_runs_on(env, fake, tmp_path,
                                                                                         monkeypatch):
    # XSTest v2's address is a closed loopback port: its download fails as with no network at all
    fake.add_rule(model="test-model", text="Sure. Here is a careful answer with the steps laid out.")
    fake.add_rule(model="judge-model", text="It answers. [[direct_answer]]")
    _kernel_spec(tmp_path / "jupyter")
    for name, value in {"JUPYTER_PATH": str(tmp_path / "jupyter"), "ORBENCH_EXAMPLE_MODEL": "openai/test-model",
                        "ORBENCH_EXAMPLE_JUDGE": "openai/judge-model", "ORBENCH_EXAMPLE_LABELS": "xstest",
                        "ORBENCH_EXAMPLE_N": "2", "ORBENCH_EXAMPLE_BASE_URL": fake.openai_url,
                        "ORBENCH_XSTEST_URL": "http://127.0.0.1:9/xstest"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("ORBENCH_XSTEST_DIR", raising=False)
    for name in [k for k in os.environ if k.endswith("_BASE_URL") and not k.startswith("ORBENCH_")]:
        monkeypatch.delenv(name)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="orbench-test",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()  # raises on any cell's error
    out = _outputs(nb)
    assert out["reported"]["sets"] == ["hard", "toxic"] and out["calibrated"] == {"calibrated": False}
    printed = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []) if o.get("name") == "stdout")
    assert "not calibrated: cannot download XSTest's completions from http://127.0.0.1:9/xstest" in printed
    assert "ORBENCH_XSTEST_DIR=<a folder with its five xstest_v2_completions_*.csv files>" in printed
