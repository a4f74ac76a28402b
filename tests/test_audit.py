"""analysis/audit.py: the sample, the scores against the libraries (on XSTest's real labels), bad input."""

from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from conftest import run_in_process  # noqa: E402 (beside the sys.path set-up above)

from orbench.analysis import html_kit  # noqa: E402 (needs the sys.path set-up above)
from orbench.analysis.audit import commands as audit  # noqa: E402 (needs the sys.path set-up above)

XSTEST = ROOT.parent / "shared" / "data" / "xstest-v2"
SCRIPT = "analysis/audit.py"
CATS = ["hate", "privacy", "illegal"]


def prompt_input(path: Path, n_per: int = 12) -> Path:
    """A stage-3-like file: 3 categories x (safe, toxic) with ``n_per`` rows each, plus one undecided."""
    rows = []
    for c in CATS:
        for tox in (False, True):
            for i in range(n_per):
                rows.append({"prompt": f"{c} {'toxic' if tox else 'safe'} prompt {i}", "category": c,
                             "is_toxic": str(tox), "moderation_category": c if tox else "none"})
    rows.append({"prompt": "undecided prompt", "category": "hate", "is_toxic": "", "moderation_category": "undecided"})
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def write_labels(folder: Path, name: str, labels: dict, sample_id: str | None = None) -> Path:
    sample = audit.read_sample(folder)
    path = folder / f"labels_{name}.csv"
    pd.DataFrame({"sample_id": sample_id or sample.sample_id, "item_id": list(labels), "annotator": name,
                  "label": list(labels.values()), "note": ""}).to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def prompt_audit_made(tmp_path_factory, module_env):
    """The prompt audit the tests start from, sampled once for the module (``prompt_audit`` copies it)."""
    folder = tmp_path_factory.mktemp("prompt_audit")
    src = prompt_input(folder / "or-bench-hard-1k.csv")
    out = folder / "audit"
    r = run_in_process(SCRIPT, "sample", "--kind", "prompt", str(src), "--per_stratum", "5", "--seed", "7",
                       "--output_dir", str(out), env=module_env)
    assert r.returncode == 0, r.stderr
    return folder


@pytest.fixture
def prompt_audit(prompt_audit_made, tmp_path, env):
    """A fresh copy, in ``tmp_path``, of the prompt audit (``audit``) and its input (``or-bench-hard-1k.csv``)."""
    shutil.copy(prompt_audit_made / "or-bench-hard-1k.csv", tmp_path)
    shutil.copytree(prompt_audit_made / "audit", tmp_path / "audit")
    return tmp_path / "audit"


def test_sample_is_stratified_weighted_and_blind(prompt_audit, tmp_path, script, env):
    sample = audit.read_sample(prompt_audit)
    key, items = sample.key, sample.items
    # blind: no verdict, set or category in what annotators see
    assert list(pd.read_csv(prompt_audit / "items.csv").columns) == ["item_id", "prompt"]
    assert len(items) == 3 * 2 * 5 + 1
    strata = pd.read_csv(prompt_audit / "strata.csv")
    assert len(strata) == 7 and strata["population"].sum() == 73
    assert set(strata["machine_verdict"]) == {"safe", "toxic", "none"}
    assert (key["set"] == "hard").all()
    for _, part in key.groupby("stratum"):
        assert part["weight"].astype(float).iat[0] == part["population"].iat[0] / len(part)
    # every item's text comes from its stratum, and the key holds the moderation verdict
    merged = key.merge(items, on="item_id")
    assert all(("toxic" in p) == (v == "toxic") for p, v in zip(merged["prompt"], merged["verdict:moderation"])
               if v)
    page = (prompt_audit / "audit.html").read_text()
    data = json.loads(page.split('id="data">')[1].split("</script>")[0])
    assert {k for it in data["items"] for k in it} == {"item_id", "prompt", "response"}
    assert "moderation" not in page and "population" not in page
    assert sample.manifest["stratified_by"] == ["set", "category", "verdict:moderation"]
    # seeded: the same seed draws the same items, another seed others
    again = tmp_path / "again"
    script(SCRIPT, "sample", "--kind", "prompt", str(tmp_path / "or-bench-hard-1k.csv"), "--per_stratum", "5",
           "--seed", "7", "--output_dir", str(again), env=env)
    assert (again / "items.csv").read_text() == (prompt_audit / "items.csv").read_text()
    other = tmp_path / "other"
    script(SCRIPT, "sample", "--kind", "prompt", str(tmp_path / "or-bench-hard-1k.csv"), "--per_stratum", "5",
           "--seed", "8", "--output_dir", str(other), env=env)
    assert set(pd.read_csv(other / "items.csv")["prompt"]) != set(items["prompt"])


def test_moderation_precision_for_safe_is_weighted_by_stratum(prompt_audit, script, env):
    from sklearn.metrics import precision_score

    sample = audit.read_sample(prompt_audit)
    merged = sample.key.merge(sample.items, on="item_id")
    # humans call a third of the moderation-safe prompts borderline, every moderation-toxic one toxic
    human = {}
    for i, (item, verdict) in enumerate(zip(merged["item_id"], merged["verdict:moderation"])):
        human[item] = "toxic" if verdict != "safe" else ("borderline" if i % 3 == 0 else "safe")
    write_labels(prompt_audit, "alice", human)
    write_labels(prompt_audit, "bob", human)
    r = script(SCRIPT, "score", str(prompt_audit), env=env)
    assert r.returncode == 0, r.stderr
    res = json.loads((prompt_audit / "score" / "score.json").read_text())
    m = next(x for x in res["machine"] if x["verdict"] == "moderation" and x["set"] == "(all)")
    use = merged[merged["verdict:moderation"] != ""]
    h = use["item_id"].map(human) == "safe"
    mach = use["verdict:moderation"] == "safe"
    w = use["population"].astype(float) / use.groupby("stratum")["item_id"].transform("size")
    assert m["weighted"]["precision"]["value"] == pytest.approx(precision_score(h, mach, sample_weight=w), abs=1e-6)
    assert m["sample"]["precision"]["value"] == pytest.approx(precision_score(h, mach), abs=1e-6)
    lo, hi = m["weighted"]["precision"]["ci"]
    assert lo <= m["weighted"]["precision"]["value"] <= hi
    assert res["agreement"]["raw"] == 1.0
    assert "moderation vs humans (safe" in r.stdout
    items = pd.read_csv(prompt_audit / "score" / "items.csv", dtype=str, keep_default_na=False)
    assert list(items["majority"]) == [human[i] for i in items["item_id"]]


@pytest.mark.skipif(not XSTEST.is_dir(), reason=f"XSTest v2 data not found at {XSTEST}")
def test_xstest_two_annotators_equal_the_libraries(tmp_path, script, env):
    """XSTest v2's real labels as two annotators' files: our figures equal sklearn's, statsmodels' and
    krippendorff's, and the keyword matcher's audited accuracy equals the one computed directly."""
    import audit_xstest

    specs, annotations = audit_xstest.stage4_files(XSTEST, ["gpt4", "mistralguard"], tmp_path)
    folder = tmp_path / "audit"
    r = script(SCRIPT, "sample", "--kind", "verdict", *specs, "--per_stratum", "100000", "--output_dir",
               str(folder), env=env)
    assert r.returncode == 0, r.stderr
    files, joined = audit_xstest.annotator_files(folder, annotations)
    assert len(joined) == 900
    r = script(SCRIPT, "score", str(folder), *files, env=env)
    assert r.returncode == 0, r.stderr
    res = json.loads((folder / "score" / "score.json").read_text())
    lib = audit_xstest.library_figures(joined, audit.read_sample(folder).key)
    ag = res["agreement"]
    assert ag["complete"] == 900
    assert ag["raw"] == pytest.approx(lib["raw"], abs=1e-6)
    assert ag["cohen_kappa"] == pytest.approx(lib["cohen"], abs=1e-6)
    assert ag["fleiss_kappa"] == pytest.approx(lib["fleiss"], abs=1e-6)
    assert ag["krippendorff_alpha"] == pytest.approx(lib["alpha"], abs=1e-6)
    assert res["agreement_refusal"]["cohen_kappa"] == pytest.approx(lib["cohen_refusal"], abs=1e-6)
    kw = next(m for m in res["machine"] if m["verdict"] == "keyword" and m["set"] == "(all)")
    assert kw["n"] == lib["keyword_n"]
    assert kw["sample"]["accuracy"]["value"] == pytest.approx(lib["keyword_accuracy"], abs=1e-6)
    assert kw["weighted"]["accuracy"]["value"] == pytest.approx(lib["keyword_weighted"], abs=1e-6)
    assert 0.85 < kw["sample"]["accuracy"]["value"] < 1
    per_model = {m["model"] for m in res["machine"] if m["verdict"] == "keyword"}
    assert per_model == {"(all)", "openai/gpt-4", "mistralai/Mistral-7B-Instruct-v0.1-guard"}
    confusion = next(c for c in res["confusion"] if c["machine"] == "kind:keyword")
    assert set(confusion["rows"]) == {"full_compliance", "partial_refusal", "full_refusal"}


def test_three_annotators_fleiss_and_krippendorff(tmp_path, script, env):
    import krippendorff
    from statsmodels.stats.inter_rater import aggregate_raters, fleiss_kappa

    src = prompt_input(tmp_path / "set.csv", n_per=6)
    folder = tmp_path / "audit"
    assert script(SCRIPT, "sample", "--kind", "prompt", str(src), "--per_stratum", "6", "--output_dir", str(folder),
                  env=env).returncode == 0
    ids = audit.read_sample(folder).items["item_id"].tolist()
    rng = np.random.default_rng(3)
    labels = np.array(["safe", "borderline", "toxic"])
    table = rng.choice(labels, size=(len(ids), 3))
    for j, name in enumerate(("a", "b", "c")):
        keep = {i: lab for k, (i, lab) in enumerate(zip(ids, table[:, j])) if not (name == "c" and k < 5)}
        write_labels(folder, name, keep)
    r = script(SCRIPT, "score", str(folder), env=env)
    assert r.returncode == 0, r.stderr
    res = json.loads((folder / "score" / "score.json").read_text())
    code = {lab: i for i, lab in enumerate(labels)}
    ints = np.vectorize(code.get)(table)
    counts, _ = aggregate_raters(ints[5:], n_cat=3)
    assert res["agreement"]["fleiss_kappa"] == pytest.approx(fleiss_kappa(counts), abs=1e-6)
    rel = ints.T.astype(float)
    rel[2, :5] = np.nan
    assert res["agreement"]["krippendorff_alpha"] == pytest.approx(
        krippendorff.alpha(reliability_data=rel, level_of_measurement="nominal"), abs=1e-6)
    assert res["agreement"]["cohen_kappa"] is None and res["agreement"]["complete"] == len(ids) - 5
    assert "Cohen's kappa is for two annotators" in r.stderr


def test_label_studio_files_and_export(prompt_audit, script, env):
    sample = audit.read_sample(prompt_audit)
    tasks = json.loads((prompt_audit / "labelstudio" / "tasks.json").read_text())
    assert [t["data"]["item_id"] for t in tasks] == sample.items["item_id"].tolist()
    assert all(t["data"]["sample_id"] == sample.sample_id for t in tasks)
    config = (prompt_audit / "labelstudio" / "config.xml").read_text()
    assert '<Choice value="safe" hotkey="1"/>' in config and 'toName="prompt"' in config
    # an export as Label Studio writes it: two annotators, one cancelled annotation, one note
    export = []
    for k, t in enumerate(tasks):
        anns = []
        for uid, lab in ((1, "safe"), (2, "safe" if k % 4 else "toxic")):
            anns.append({"id": 10 * k + uid, "completed_by": uid, "was_cancelled": False, "result": [
                {"from_name": "label", "to_name": "prompt", "type": "choices", "value": {"choices": [lab]}},
                {"from_name": "note", "to_name": "prompt", "type": "textarea", "value": {"text": ["hm"]}}]})
        anns.append({"id": 999 + k, "completed_by": {"id": 3, "email": "c@x.org"}, "was_cancelled": True,
                     "result": []})
        export.append({"id": k + 1, "data": t["data"], "annotations": anns})
    path = prompt_audit / "labels" / "project-1.json"
    path.parent.mkdir()
    path.write_text(json.dumps(export))
    r = script(SCRIPT, "score", str(prompt_audit), env=env)
    assert r.returncode == 0, r.stderr
    res = json.loads((prompt_audit / "score" / "score.json").read_text())
    assert res["annotators"] == ["ls-1", "ls-2"]
    n = len(tasks)
    assert res["agreement"]["raw"] == pytest.approx(sum(1 for k in range(n) if k % 4) / n, abs=1e-6)


def test_one_annotator_and_an_empty_one_are_said_not_crashed(prompt_audit, script, env):
    ids = audit.read_sample(prompt_audit).items["item_id"].tolist()
    write_labels(prompt_audit, "alice", {i: "safe" for i in ids[:10]})
    (prompt_audit / "labels_bob.csv").write_text("sample_id,item_id,annotator,label,note\n")
    r = script(SCRIPT, "score", str(prompt_audit), str(prompt_audit / "labels_alice.csv"), env=env)
    assert r.returncode == 0, r.stderr
    assert "agreement not computable: 1 annotator" in r.stdout
    res = json.loads((prompt_audit / "score" / "score.json").read_text())
    assert res["agreement"]["raw"] is None and res["unlabelled"] == len(ids) - 10
    # an annotator whose file has rows but no label
    write_labels(prompt_audit, "carol", {ids[0]: ""})
    r = script(SCRIPT, "score", str(prompt_audit), str(prompt_audit / "labels_alice.csv"),
               str(prompt_audit / "labels_carol.csv"), env=env)
    assert r.returncode == 0 and "annotator 'carol' labelled nothing; left out" in r.stderr


@pytest.mark.parametrize("case, message", [
    ("other_sample", "labels for sample 0123456789ab, but"),
    ("unknown_label", "unknown label 'unsafe' (expected one of safe, borderline, toxic)"),
    ("duplicate", "is labelled twice (first on row 2)"),
    ("unknown_item", "item 'i999' is not in sample"),
    ("nothing", "no labels to score: every annotator labelled nothing"),
])
def test_bad_labels_stop_with_one_line_and_write_nothing(prompt_audit, script, env, case, message):
    ids = audit.read_sample(prompt_audit).items["item_id"].tolist()
    good = write_labels(prompt_audit, "alice", {i: "safe" for i in ids})
    r = script(SCRIPT, "score", str(prompt_audit), env=env)
    assert r.returncode == 0
    before = (prompt_audit / "score" / "score.json").read_bytes()
    if case == "other_sample":
        write_labels(prompt_audit, "bob", {ids[0]: "safe"}, sample_id="0123456789ab")
    elif case == "unknown_label":
        write_labels(prompt_audit, "bob", {ids[0]: "safe", ids[1]: "unsafe"})
    elif case == "duplicate":
        (prompt_audit / "labels_bob.csv").write_text(
            f"item_id,label\n{ids[0]},safe\n{ids[1]},toxic\n{ids[0]},toxic\n")
    elif case == "unknown_item":
        write_labels(prompt_audit, "bob", {"i999": "safe"})
    else:
        good.unlink()
        write_labels(prompt_audit, "bob", {ids[0]: ""})
    r = script(SCRIPT, "score", str(prompt_audit), env=env)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and message in r.stderr
    if case != "nothing":
        assert "labels_bob.csv" in r.stderr
    assert (prompt_audit / "score" / "score.json").read_bytes() == before


def test_sample_never_overwrites_and_bad_inputs(prompt_audit, tmp_path, script, env):
    before = (prompt_audit / "items.csv").read_bytes()
    r = script(SCRIPT, "sample", "--kind", "prompt", str(tmp_path / "or-bench-hard-1k.csv"),
               "--output_dir", str(prompt_audit), env=env)
    assert r.returncode == 2 and "is never overwritten" in r.stderr and r.stderr.count("\n") == 1
    assert (prompt_audit / "items.csv").read_bytes() == before
    bad = tmp_path / "noresp.csv"
    bad.write_text("prompt,category\nhi,hate\n")
    r = script(SCRIPT, "sample", "--kind", "verdict", str(bad), "--output_dir", str(tmp_path / "v"), env=env)
    assert r.returncode == 2 and "has no column 'response'" in r.stderr
    assert not (tmp_path / "v").exists()
    r = script(SCRIPT, "score", str(tmp_path), env=env)
    assert r.returncode == 2 and "is not an audit folder" in r.stderr


def test_hostile_text_cannot_leave_the_data_element(tmp_path, script, env):
    hostile = ['<script>alert(1)</script>', '<img src=x onerror="alert(2)">', '</textarea><b>x</b>',
               'a </script><script>alert(3)</script> b', '\u2028line\u2029sep & more']
    src = tmp_path / "hard_kw.csv"
    pd.DataFrame({"prompt": [f"p{i} {h}" for i, h in enumerate(hostile)], "category": "hate", "model": "m",
                  "response": hostile, "is_rejected": "False", "refusal_kind": ""}).to_csv(src, index=False)
    folder = tmp_path / "audit"
    assert script(SCRIPT, "sample", "--kind", "verdict", str(src), "--output_dir", str(folder),
                  env=env).returncode == 0
    page = (folder / "audit.html").read_text()
    start = page.index('<script type="application/json" id="data">') + len('<script type="application/json" id="data">')
    body = page[start:page.index("</script>", start)]
    assert "<" not in body and ">" not in body and "&" not in body and "\u2028" not in body
    data = json.loads(body)
    assert [it["response"] for it in data["items"]] == [
        dict(zip(pd.read_csv(folder / "items.csv")["item_id"], pd.read_csv(folder / "items.csv")["response"]))[i]
        for i in (it["item_id"] for it in data["items"])]
    assert sorted(it["response"] for it in data["items"]) == sorted(hostile)
    assert html_kit.script_json("</script>") == '"\\u003c/script\\u003e"'
    assert not math.isnan(len(page))


def test_verdict_audit_joins_stage4_and_judge_files(tmp_path, script, env):
    n = 30
    base = pd.DataFrame({"prompt": [f"p{i}" for i in range(n)], "category": ["hate", "privacy"] * (n // 2),
                         "model": "prov/m", "response": [f"r{i}" for i in range(n)],
                         "is_rejected": [str(i % 3 == 0) for i in range(n)],
                         "refusal_kind": ["full" if i % 3 == 0 else "" for i in range(n)]})
    base.to_csv(tmp_path / "hard_m.csv", index=False)
    judge = base.assign(judge_model="prov/judge",
                        answer_category=["direct_refusal" if i % 2 == 0 else "direct_answer" for i in range(n)],
                        is_rejected=[str(i % 2 == 0) for i in range(n)],
                        # the judge file's own keyword verdict differs on one row: the stage-4 file's wins
                        keyword_is_rejected=[str(i % 3 == 0 or i == 1) for i in range(n)])
    judge.loc[4, "answer_category"], judge.loc[4, "is_rejected"] = "unparsed", ""
    judge.to_csv(tmp_path / "hard_m_judge.csv", index=False)
    folder = tmp_path / "audit"
    r = script(SCRIPT, "sample", "--kind", "verdict", str(tmp_path / "hard_m_judge.csv"), str(tmp_path / "hard_m.csv"),
               "--per_stratum", "100", "--output_dir", str(folder), env=env)
    assert r.returncode == 0, r.stderr
    sample = audit.read_sample(folder)
    assert sample.manifest["stratified_by"] == ["set", "model", "category", "verdict:judge:prov/judge"]
    assert sample.manifest["verdicts"] == ["judge:prov/judge", "keyword"]
    key = sample.key.merge(sample.items, on="item_id").set_index("prompt")
    assert len(key) == n and key.loc["p1", "verdict:keyword"] == "answer"
    assert key.loc["p3", "verdict:keyword"] == "refusal" and key.loc["p3", "kind:keyword"] == "full"
    assert key.loc["p4", "verdict:judge:prov/judge"] == "" and key.loc["p4", "class:judge:prov/judge"] == "unparsed"
    # even rows are 'hate' and judged refusals (p4: no verdict); odd rows 'privacy' and answers
    assert set(key["stratum"]) == {"hard | prov/m | hate | refusal", "hard | prov/m | hate | none",
                                   "hard | prov/m | privacy | answer"}
    labels = {i: ("full_refusal" if int(p[1:]) % 2 == 0 else "full_compliance") for i, p in
              zip(key["item_id"], key.index)}
    write_labels(folder, "a", labels)
    write_labels(folder, "b", labels)
    assert script(SCRIPT, "score", str(folder), env=env).returncode == 0
    res = audit.load_and_score(folder)
    judge_fig = next(m for m in res["machine"] if m["verdict"] == "judge:prov/judge" and m["set"] == "(all)")
    assert judge_fig["n"] == n - 1 and judge_fig["sample"]["accuracy"]["value"] == 1.0


def test_prompt_audit_of_a_bundled_set(tmp_path, script, env):
    folder = tmp_path / "audit"
    r = script(SCRIPT, "sample", "--kind", "prompt", "or-bench-hard-1k", "--per_stratum", "2", "--output_dir",
               str(folder), env=env)
    assert r.returncode == 0, r.stderr
    assert "20 items from 10 strata (1319 rows); stratified by set, category" in r.stdout
    sample = audit.read_sample(folder)
    assert sample.manifest["verdicts"] == [] and set(sample.key["set"]) == {"hard"}
    ids = sample.items["item_id"].tolist()
    write_labels(folder, "alice", {i: ("safe" if k % 4 else "borderline") for k, i in enumerate(ids)})
    r = script(SCRIPT, "score", str(folder), env=env)
    assert r.returncode == 0, r.stderr
    res = json.loads((folder / "score" / "score.json").read_text())
    shares = {s["label"]: s for s in res["shares"]}
    assert shares["safe"]["count"] == 15 and shares["toxic"]["share"] == 0
    w = sample.key["population"].astype(float) / 2
    safe = np.array([k % 4 != 0 for k in range(len(ids))])
    assert shares["safe"]["share"] == pytest.approx(float(w[safe].sum() / w.sum()), abs=1e-6)
    assert res["machine"] == []


def test_page_command_rewrites_the_page_and_label_studio_config_parses(prompt_audit, script, env):
    import xml.etree.ElementTree as ET

    page = (prompt_audit / "audit.html").read_text()
    (prompt_audit / "audit.html").unlink()
    r = script(SCRIPT, "page", str(prompt_audit), env=env)
    assert r.returncode == 0 and r.stdout.strip().endswith("audit.html")
    assert (prompt_audit / "audit.html").read_text() == page
    root = ET.fromstring((prompt_audit / "labelstudio" / "config.xml").read_text())
    choices = root.find("Choices")
    assert [c.get("value") for c in choices.findall("Choice")] == ["safe", "borderline", "toxic"]
    assert choices.get("toName") == "prompt" and root.find("Text").get("value") == "$prompt"
    # score --output_dir writes elsewhere and leaves the folder's own score alone
    ids = audit.read_sample(prompt_audit).items["item_id"].tolist()
    write_labels(prompt_audit, "alice", {i: "safe" for i in ids})
    r = script(SCRIPT, "score", str(prompt_audit), "--output_dir", str(prompt_audit.parent / "elsewhere"), env=env)
    assert r.returncode == 0 and (prompt_audit.parent / "elsewhere" / "machine.csv").exists()
    assert not (prompt_audit / "score").exists()
