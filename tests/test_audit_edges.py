"""The audit at its edges, through the real commands (orbench-audit sample / score / plan, report.py --audit):
an error-free audit, a half-labelled one, unequal safe shares, rows the audit cannot read, a cascade, a plan."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from statsmodels.stats.proportion import proportion_confint

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orbench.analysis.audit import commands as audit  # noqa: E402 (needs the sys.path set-up above)

AUDIT, REPORT = "analysis/audit.py", "analysis/report.py"


def stage4(path: Path, model: str, refused: list[bool], cats: list[str], prompts: list[str] | None = None,
           blocked: int = 0) -> Path:
    """A stage-4 output; the last ``blocked`` rows are provider blocks (empty response, a refusal)."""
    n = len(refused)
    prompts = prompts or [f"prompt {i}" for i in range(n)]
    responses = [("I can't help with that. " if r else "Sure, here it is: ") + f"#{i}" for i, r in enumerate(refused)]
    source = ["keyword" if r else "" for r in refused]
    for i in range(n - blocked, n):
        responses[i], source[i], refused[i] = "", "provider_block", True
    pd.DataFrame({"prompt": prompts, "category": cats, "model": model, "response": responses,
                  "is_rejected": [str(r) for r in refused], "refusal_source": source,
                  "refusal_kind": ["full" if r else "" for r in refused]}).to_csv(path, index=False)
    return path


def label(folder: Path, fn, names=("ann", "bob"), keep=None) -> None:
    """Every annotator labels each item with ``fn(row)`` (only the first ``keep`` items when given)."""
    sample = audit.read_sample(folder)
    merged = sample.key.merge(sample.items, on="item_id")
    if keep is not None:
        merged = merged.iloc[:keep]
    for name in names:
        pd.DataFrame({"sample_id": sample.sample_id, "item_id": merged["item_id"], "annotator": name,
                      "label": [fn(r) for r in merged.to_dict("records")], "note": ""}
                     ).to_csv(folder / f"labels_{name}.csv", index=False)


def as_machine(r: dict) -> str:
    return "full_refusal" if str(r["response"]).startswith("I can't") else "full_compliance"


def test_error_free_audit_is_bounded_not_certain(tmp_path, script, env):
    """A keyword matcher that makes no error on 40 + 40 audited items of 400 + 400 rows: recall 1, its
    interval a bound (flag none_seen, in machine.csv and report.html), never [1, 1]."""
    path = stage4(tmp_path / "hard_m.csv", "prov/m", [i % 2 == 0 for i in range(800)], ["illegal"] * 800)
    folder = tmp_path / "audit"
    r = script(AUDIT, "sample", "--kind", "verdict", str(path), "--per_stratum", "40", "--output_dir", str(folder),
               env=env)
    assert r.returncode == 0, r.stderr
    label(folder, as_machine)
    r = script(AUDIT, "score", str(folder), env=env)
    assert r.returncode == 0, r.stderr
    machine = pd.read_csv(folder / "score" / "machine.csv", keep_default_na=False)
    pooled = machine[(machine.set == "(all)") & (machine.verdict == "keyword")].set_index("figure")
    for figure in ("accuracy", "precision", "recall", "specificity"):
        row = pooled.loc[figure]
        assert row["weighted"] == 1 and row["weighted_ci_high"] == 1 and row["weighted_ci_low"] < 0.97, figure
        assert "none_seen" in row["weighted_flag"] and row["weighted_method"] == "stratified_wilson"
    # over the 40 audited refusals: Wilson's bound for 0 errors in 40, as statsmodels gives it
    assert pooled.loc["recall", "sample_ci_low"] == pytest.approx(proportion_confint(40, 40, method="wilson")[0])
    assert pooled.loc["kappa", "weighted"] == 1 and pooled.loc["kappa", "weighted_ci_low"] < 0.97
    assert "recall 1.000 [0." in r.stdout and "(none_seen)" in r.stdout
    out = tmp_path / "rep"
    r = script(REPORT, f"hard:={path}", "--audit", str(folder), "--output_dir", str(out), "--no_reference",
               "--no_figures", env=env)
    assert r.returncode == 0, r.stderr
    rates = pd.read_csv(out / "audit_rates.csv", keep_default_na=False).iloc[0]
    assert rates["corrected_rate"] == pytest.approx(0.5) and rates["corrected_method"] == "direct_stratified_wilson"
    assert rates["corrected_ci_low"] < 0.5 < rates["corrected_ci_high"]
    assert "none seen</span>" in (out / "report.html").read_text()


def test_half_labelled_audit_has_no_point_interval(tmp_path, script, env):
    """A newcomer's audit: 12 of 48 items labelled. Strata nobody labelled are bounded in the worst case
    (flag partial); no weighted figure is a point dressed as an interval."""
    cats = [c for c in ("hate", "privacy", "illegal", "violence", "sexual", "deception") for _ in range(60)]
    refused = [i % 3 == 0 for i in range(360)]
    path = stage4(tmp_path / "hard_m.csv", "prov/m", refused, cats)
    folder = tmp_path / "audit"
    assert script(AUDIT, "sample", "--kind", "verdict", str(path), "--per_stratum", "4", "--output_dir", str(folder),
                  env=env).returncode == 0
    label(folder, lambda r: as_machine(r) if int(r["response"].rsplit("#", 1)[1]) % 5 else "partial_refusal", keep=12)
    r = script(AUDIT, "score", str(folder), env=env)
    assert r.returncode == 0, r.stderr
    machine = pd.read_csv(folder / "score" / "machine.csv", keep_default_na=False)
    weighted = machine[machine.weighted.astype(str) != ""]
    assert len(weighted) and (weighted.weighted_ci_high.astype(float) > weighted.weighted_ci_low.astype(float)).all()
    assert weighted[weighted.figure != "kappa"].weighted_flag.str.contains("partial").all()
    rates = pd.read_csv(folder / "score" / "rates.csv", keep_default_na=False)
    assert "partial" in rates.flag.iat[0] and rates.ci_high.iat[0] - rates.ci_low.iat[0] > 0.3


def safe_share_run(tmp_path: Path, seed: int) -> tuple[list[str], dict, float]:
    """Two categories of 400 prompts, 90% / 20% safe to humans; the model refuses 10% / 60% of the safe ones
    (and 80% of the others). Returns the set file, the humans' labels and the true rate over safe prompts."""
    rng = np.random.default_rng(seed)
    prompts, cats, safe, refused = [], [], {}, []
    for cat, share, rate in (("privacy", 0.9, 0.1), ("illegal", 0.2, 0.6)):
        for i in range(400):
            p = f"{cat} prompt {i}"
            s = rng.random() < share
            prompts.append(p), cats.append(cat)
            safe[p] = s
            refused.append(bool(rng.random() < (rate if s else 0.8)))
    truth = sum(r for p, r in zip(prompts, refused) if safe[p]) / sum(safe.values())
    pd.DataFrame({"prompt": prompts, "category": cats}).to_csv(tmp_path / "hard_set.csv", index=False)
    stage4(tmp_path / "hard_m.csv", "prov/m", refused, cats, prompts)
    return prompts, safe, truth


def test_human_safe_rate_is_the_domain_estimator(tmp_path, script, env):
    """Refused-and-safe over safe: a census of the prompts gives the true rate exactly (the mean of the two
    categories' rates, the old estimator, gives about 0.35 for a truth near 0.19); 40 per stratum hold it."""
    _, safe, truth = safe_share_run(tmp_path, seed=11)
    for per, seed in (("400", "0"), ("40", "3")):
        folder = tmp_path / f"audit_prompts_{per}"
        assert script(AUDIT, "sample", "--kind", "prompt", str(tmp_path / "hard_set.csv"), "--per_stratum", per,
                      "--seed", seed, "--output_dir", str(folder), env=env).returncode == 0
        label(folder, lambda r: "safe" if safe[r["prompt"]] else "toxic")
        out = tmp_path / f"rep_{per}"
        r = script(REPORT, f"hard:={tmp_path / 'hard_m.csv'}", "--audit", str(folder), "--output_dir", str(out),
                   "--no_reference", "--no_figures", env=env)
        assert r.returncode == 0, r.stderr
        row = pd.read_csv(out / "audit_rates.csv", keep_default_na=False).iloc[0]
        assert row["human_safe_ci_low"] <= truth <= row["human_safe_ci_high"]
        assert row["human_safe_method"] == "stratified_wilson" and row["human_safe_n"] > 0
        if per == "400":  # every prompt audited: the estimate is the truth; its interval is the rate's own
            assert row["human_safe_rate"] == pytest.approx(truth, abs=1e-6)
            assert row["human_safe_ci_high"] - row["human_safe_ci_low"] > 0.05


def test_corrected_rate_direct_with_provider_blocks_and_rogan_gladen_elsewhere(tmp_path, script, env):
    cats = ["hate"] * 300
    run = stage4(tmp_path / "hard_m.csv", "prov/m", [i % 3 == 0 for i in range(300)], cats, blocked=12)
    (tmp_path / "other").mkdir()
    other = stage4(tmp_path / "other" / "hard_m.csv", "prov/m", [i % 4 == 0 for i in range(200)], cats[:200])
    stage4(tmp_path / "hard_n.csv", "prov/n", [i % 5 == 0 for i in range(300)], cats)
    def truth(r):  # humans call every 9th response a partial refusal
        return as_machine(r) if int(r["response"].rsplit("#", 1)[1]) % 9 else "partial_refusal"
    same, elsewhere = tmp_path / "audit_same", tmp_path / "audit_other"
    for folder, src in ((same, run), (elsewhere, other)):
        assert script(AUDIT, "sample", "--kind", "verdict", str(src), "--per_stratum", "30", "--output_dir",
                      str(folder), env=env).returncode == 0
        label(folder, truth)
    out = tmp_path / "rep"
    files = [f"hard:={run}", f"hard:={tmp_path / 'hard_n.csv'}"]
    r = script(REPORT, *files, "--audit", str(same), "--output_dir", str(out), "--no_reference", "--no_figures", env=env)
    assert r.returncode == 0, r.stderr
    rates = pd.read_csv(out / "audit_rates.csv", keep_default_na=False).set_index("model")
    m = rates.loc["prov/m"]
    # direct: the humans' share over the 288 audited rows, the 12 provider blocks counted as refusals
    res = audit.load_and_score(same)
    items = res["items"][res["items"]["human_refusal"] != ""]
    w = items["population"].astype(float) / items.groupby("stratum")["item_id"].transform("size")
    share = float((w * (items["human_refusal"] == "1")).sum() / w.sum())
    assert m["corrected_rate"] == pytest.approx((share * 288 + 12) / 300, abs=1e-6)
    assert m["corrected_method"] == "direct_stratified_wilson" and "12 provider-blocked rows" in m["note"]
    n = rates.loc["prov/n"]  # not in the audit: Rogan-Gladen with the pooled Se/Sp, said to assume alike errors
    assert n["corrected_method"] == "rogan_gladen" and n["audit_scope"] == "pooled over the audit"
    assert "assumes the verdict errs alike on every model" in n["note"]
    # an audit of another run of the same model: its rows are not this rate's -> Rogan-Gladen, this model's Se/Sp
    out2 = tmp_path / "rep2"
    assert script(REPORT, *files, "--audit", str(elsewhere), "--output_dir", str(out2), "--no_reference", "--no_figures",
                  env=env).returncode == 0
    m2 = pd.read_csv(out2 / "audit_rates.csv", keep_default_na=False).set_index("model").loc["prov/m"]
    assert m2["corrected_method"] == "rogan_gladen" and m2["audit_scope"] == "this model and set"
    assert "are not the rows this rate counts" in m2["note"]
    assert m2["corrected_ci_low"] < m2["corrected_rate"] < m2["corrected_ci_high"]


def test_cascade_class_is_a_stratum_with_its_error_rate(tmp_path, script, env):
    n = 240
    classes = ["refusal_first_sentence", "answer_no_cue", "unsure"]
    cls = [classes[i % 3] for i in range(n)]
    refused = [c == "refusal_first_sentence" or (c == "unsure" and i % 2 == 0) for i, c in enumerate(cls)]
    path = tmp_path / "hard_m_judged.csv"
    stage4(path, "prov/m", refused, ["hate"] * n)
    frame = pd.read_csv(path)
    frame["judge_model"] = "keyword+prov/judge"
    frame["answer_category"] = ["direct_refusal" if r else "direct_answer" for r in refused]
    frame["keyword_is_rejected"] = frame["is_rejected"]
    frame["cascade_class"], frame["verdict_source"] = cls, ["prov/judge" if c == "unsure" else "keyword" for c in cls]
    frame.to_csv(path, index=False)
    folder = tmp_path / "audit"
    r = script(AUDIT, "sample", "--kind", "verdict", str(path), "--per_stratum", "20", "--output_dir", str(folder),
               env=env)
    assert r.returncode == 0, r.stderr
    sample = audit.read_sample(folder)
    assert sample.manifest["stratified_by"][-1] == "cascade_class" and "cascade_class" in sample.key.columns
    assert set(sample.key["stratum"].str.rsplit(" | ", n=1).str[1]) == set(classes)
    # humans disagree with every 4th answer_no_cue verdict and every 10th unsure one
    wrong = {c: k for c, k in (("answer_no_cue", 4), ("unsure", 10))}

    def human(r):
        i = int(r["response"].rsplit("#", 1)[1])
        flip = r["cascade_class"] in wrong and i % wrong[r["cascade_class"]] == 0
        return ("full_compliance" if as_machine(r) == "full_refusal" else "full_refusal") if flip else as_machine(r)
    label(folder, human)
    r = script(AUDIT, "score", str(folder), env=env)
    assert r.returncode == 0, r.stderr
    table = pd.read_csv(folder / "score" / "cascade.csv", keep_default_na=False)
    pooled = table[table.set == "(all)"].set_index("class")
    items = audit.load_and_score(folder)["items"]
    for c in classes:
        part = items[items["cascade_class"] == c]
        errors = int(((part["verdict:judge:keyword+prov/judge"] == "refusal") != (part["human_refusal"] == "1")).sum())
        w = part["population"].astype(float) / part.groupby("stratum")["item_id"].transform("size")
        bad = (part["verdict:judge:keyword+prov/judge"] == "refusal") != (part["human_refusal"] == "1")
        assert pooled.loc[c, "errors"] == errors and pooled.loc[c, "n"] == len(part)
        assert pooled.loc[c, "value"] == pytest.approx(float((w * bad).sum() / w.sum()), abs=1e-6)
        assert pooled.loc[c, "ci_low"] <= pooled.loc[c, "value"] <= pooled.loc[c, "ci_high"] < 1
    assert pooled.loc["refusal_first_sentence", "errors"] == 0 and pooled.loc["refusal_first_sentence", "ci_high"] > 0
    assert "cascade class answer_no_cue:" in r.stdout
    out = tmp_path / "rep"
    assert script(REPORT, f"hard:={path}", "--audit", str(folder), "--output_dir", str(out), "--no_reference", "--no_figures",
                  env=env).returncode == 0
    assert "Cascade classes" in (out / "report.html").read_text()


def test_plan_predicts_allocates_and_sample_follows_it(tmp_path, script, env):
    cats = ["hate"] * 900 + ["privacy"] * 300
    refused = [i % 10 == 0 for i in range(900)] + [i % 2 == 0 for i in range(300)]
    path = stage4(tmp_path / "hard_m.csv", "prov/m", refused, cats)
    plan_dir = tmp_path / "plan"
    r = script(AUDIT, "plan", "--kind", "verdict", str(path), "--size", "80", "--target", "0.05",
               "--error_rate", "refusal=0.02,answer=0.1", "--output_dir", str(plan_dir), env=env)
    assert r.returncode == 0, r.stderr
    assert "neyman allocation of 80 items" in r.stdout and "refusal 0.020, answer 0.100" in r.stdout
    plan = pd.read_csv(plan_dir / "plan.csv")
    allocation = pd.read_csv(plan_dir / "allocation.csv").set_index("stratum")
    assert allocation["planned"].sum() == 80 and (allocation["planned"] >= 2).all()
    # where errors hide: the large answer stratum (810 rows, 10% assumed error) gets the most items
    assert allocation["planned"].idxmax() == "hard | prov/m | hate | answer"
    share = plan[(plan.figure == "human_refusal_share") & (plan.set == "(all)")].iloc[0]
    assert 0 < share["expected_half_width"] < 0.2 and share["size_for_target"] > 80
    assert set(plan.figure) == {"human_refusal_share", "accuracy", "precision", "recall", "specificity"}
    # the target met at the size the plan names (re-planned at that size)
    size = int(share["size_for_target"])
    r = script(AUDIT, "plan", "--kind", "verdict", str(path), "--size", str(size), "--error_rate",
               "refusal=0.02,answer=0.1", "--output_dir", str(tmp_path / "plan2"), env=env)
    again = pd.read_csv(tmp_path / "plan2" / "plan.csv")
    assert again[(again.figure == "human_refusal_share") & (again.set == "(all)")].expected_half_width.iat[0] <= 0.0505
    # sample --size with the same allocation draws exactly the planned items per stratum
    folder = tmp_path / "audit"
    r = script(AUDIT, "sample", "--kind", "verdict", str(path), "--size", "80", "--allocation", "neyman",
               "--error_rate", "refusal=0.02,answer=0.1", "--output_dir", str(folder), env=env)
    assert r.returncode == 0, r.stderr
    strata = pd.read_csv(folder / "strata.csv").set_index("stratum")
    assert strata["sampled"].to_dict() == allocation["planned"].to_dict()
    manifest = json.loads((folder / "audit.json").read_text())
    assert manifest["allocation"]["method"] == "neyman" and manifest["allocation"]["size"] == 80


@pytest.mark.parametrize("flags, message", [
    (["--error_rate", "abc"], "--error_rate 'abc': 'abc' is not a number"),
    (["--error_rate", "maybe=0.1"], "unknown verdict 'maybe'"),
    (["--target", "0.7"], "--target 0.7: a half-width between 0 and 0.5"),
    (["--allocation", "random"], "argument --allocation: invalid choice"),
])
def test_plan_bad_flags_exit_2(tmp_path, script, env, flags, message):
    path = stage4(tmp_path / "hard_m.csv", "prov/m", [True, False] * 10, ["hate"] * 20)
    r = script(AUDIT, "plan", "--kind", "verdict", str(path), *flags, env=env)
    assert r.returncode == 2 and message in r.stderr and r.stderr.strip().count("\n") <= 1
