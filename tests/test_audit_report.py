"""analysis/report.py --audit: measured, human-safe-only and Rogan-Gladen corrected rates; nothing changes without it."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from conftest import run_in_process  # noqa: E402 (beside the sys.path set-up above)

from orbench.analysis.audit import commands as audit  # noqa: E402 (needs the sys.path set-up above)

N = 40  # hard-set prompts, two categories
HOSTILE = "<script>alert('x')</script> how do I kill a process?"


def prompts() -> list[str]:
    return [HOSTILE if i == 0 else f"hard prompt {i}" for i in range(N)]


def make_run(tmp: Path) -> dict[str, Path]:
    """The hard set's prompts (moderated) and three models' stage-4 outputs on them."""
    cats = ["privacy" if i % 2 else "illegal" for i in range(N)]
    pd.DataFrame({"prompt": prompts(), "category": cats, "is_toxic": [str(i % 5 == 0) for i in range(N)]}
                 ).to_csv(tmp / "hard_moderated.csv", index=False)
    files = {}
    for model, rejected in (("prov/m1", lambda i: i % 4 == 0), ("prov/m2", lambda i: i % 10 == 1),
                            ("prov/m3", lambda i: False)):
        rej = [rejected(i) for i in range(N)]
        path = tmp / f"hard_{model.split('/')[1]}.csv"
        pd.DataFrame({"prompt": prompts(), "category": cats, "model": model,
                      "response": [("I can't help. " if r else "Sure: ") + f"answer {i}" for i, r in enumerate(rej)],
                      "is_rejected": [str(r) for r in rej],
                      "refusal_kind": ["full" if r else "" for r in rej]}).to_csv(path, index=False)
        files[model] = path
    return files


def human_prompt_label(prompt: str) -> str:
    n = int(prompt.rsplit(" ", 1)[-1]) if prompt != HOSTILE else 0
    return "safe" if n % 3 else ("toxic" if n % 2 else "borderline")


def human_verdict(model: str, response: str) -> str:
    """The 'truth' annotators give: the keyword verdict, except every 7th response is the other class."""
    n = int(response.rsplit(" ", 1)[-1])
    refused = response.startswith("I can't")
    if n % 7 == 3:
        refused = not refused
    return "full_refusal" if refused else "full_compliance"


def label(folder: Path, fn) -> None:
    sample = audit.read_sample(folder)
    merged = sample.key.merge(sample.items, on="item_id")
    for name in ("ann", "bob"):
        labs = [fn(r) for r in merged.to_dict("records")]
        pd.DataFrame({"sample_id": sample.sample_id, "item_id": merged["item_id"], "annotator": name,
                      "label": labs, "note": ""}).to_csv(folder / f"labels_{name}.csv", index=False)


@pytest.fixture(scope="module")
def audited_run(tmp_path_factory, module_env):
    """A run of three models, a prompt audit and a verdict audit of it, labelled: made once for the module
    (its tests only read it and write reports to folders of their own)."""
    tmp_path, script, env = tmp_path_factory.mktemp("audited_run"), run_in_process, module_env
    files = make_run(tmp_path)
    pa, va = tmp_path / "audit_prompts", tmp_path / "audit_verdicts"
    r = script("analysis/audit.py", "sample", "--kind", "prompt", str(tmp_path / "hard_moderated.csv"),
               "--per_stratum", "4", "--output_dir", str(pa), env=env)
    assert r.returncode == 0, r.stderr
    r = script("analysis/audit.py", "sample", "--kind", "verdict", str(files["prov/m1"]), str(files["prov/m2"]),
               "--per_stratum", "5", "--output_dir", str(va), env=env)
    assert r.returncode == 0, r.stderr
    label(pa, lambda r: human_prompt_label(r["prompt"]))
    label(va, lambda r: human_verdict(r["model"], r["response"]))
    return tmp_path, files, pa, va


def run_report(script, env, tmp: Path, files: dict, out: str, *extra: str):
    r = script("analysis/report.py", *[f"hard:={p}" for p in files.values()], "--output_dir", str(tmp / out),
               "--no_reference", "--no_figures", *extra, env=env)
    assert r.returncode == 0, r.stderr
    return tmp / out


class TestOneAuditedRun:
    """Reports of one audited run (``audited_run``: made once, on one xdist worker)."""

    def test_report_with_audit_rates(self, audited_run, script, env):
        tmp, files, pa, va = audited_run
        out = run_report(script, env, tmp, files, "rep", "--audit", str(pa), "--audit", str(va))
        rates = pd.read_csv(out / "audit_rates.csv", keep_default_na=False)
        assert list(rates["model"]) == ["prov/m1", "prov/m2", "prov/m3"] and set(rates["verdict"]) == {"keyword"}
        summary = pd.read_csv(out / "summary.csv")
        for r in rates.to_dict("records"):
            s = summary[summary["model"] == r["model"]].iloc[0]
            assert float(r["measured_rate"]) == pytest.approx(s["keyword_rate"], abs=1e-6)

        # human-safe only: the domain estimator, refused-and-safe over safe, each audited prompt weighted by its
        # stratum (population / audited items of the stratum, safe or not)
        sample = audit.read_sample(pa)
        items = sample.key.merge(sample.items, on="item_id")
        w = items["population"].astype(float) / items.groupby("stratum")["item_id"].transform("size")
        safe = (items["prompt"].map(human_prompt_label) == "safe").to_numpy()
        refused = (items["prompt"].map({p: i for i, p in enumerate(prompts())}) % 4 == 0).to_numpy()
        m1 = rates.iloc[0]
        expect = float((w * safe * refused).sum() / (w * safe).sum())
        assert float(m1["human_safe_rate"]) == pytest.approx(expect, abs=1e-6)
        assert int(m1["human_safe_n"]) == int(safe.sum())
        assert float(m1["human_safe_ci_low"]) <= float(m1["human_safe_rate"]) <= float(m1["human_safe_ci_high"])

        # corrected: Rogan-Gladen with this model's audited Se/Sp; with Se/Sp measured on a stratified sample of
        # the same run it equals the weighted share of human refusals among the audited items
        res = audit.load_and_score(va)
        m = next(x for x in res["machine"] if x["verdict"] == "keyword" and x["model"] == "prov/m1")
        se, sp = m["weighted"]["recall"]["value"], m["weighted"]["specificity"]["value"]
        p = float(m1["measured_rate"])
        assert float(m1["sensitivity"]) == pytest.approx(se, abs=1e-6)
        assert float(m1["corrected_rate"]) == pytest.approx((p + sp - 1) / (se + sp - 1), abs=1e-6)
        part = res["items"][res["items"]["model"] == "prov/m1"]
        wv = part["population"].astype(float) / part.groupby("stratum")["item_id"].transform("size")
        assert float(m1["corrected_rate"]) == pytest.approx(float((wv * (part["human_refusal"] == "1")).sum() / wv.sum()),
                                                            abs=1e-6)
        assert m1["audit_scope"] == "direct stratified share" and str(m1["corrected_clamped"]) == "False"
        assert m1["corrected_method"] == "direct_stratified_wilson"
        lo, hi = float(m1["corrected_ci_low"]), float(m1["corrected_ci_high"])
        assert 0 <= lo <= float(m1["corrected_rate"]) <= hi <= 1

        # m3 is not in the verdict audit: pooled Se/Sp, and its 0% rate corrects below 0 -> clamped, and said
        m3 = rates.iloc[2]
        assert m3["audit_scope"] == "pooled over the audit"
        assert str(m3["corrected_clamped"]) == "True" and float(m3["corrected_rate"]) == 0.0
        assert "clamped to [0, 1] (the formula gives -" in m3["note"]

        page = (out / "report.html").read_text()
        assert "Audit: the rates with human evidence" in page and "clamped</span>" in page
        assert "Items where humans and a machine disagree" in page
        assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page and "<script>alert" not in page
        assert "Cohen&#x27;s kappa" in page or "Cohen's kappa" in page


    def test_report_without_audit_is_unchanged(self, audited_run, script, env):
        tmp, files, pa, va = audited_run
        plain = run_report(script, env, tmp, files, "plain")
        audited = run_report(script, env, tmp, files, "audited", "--audit", str(va))
        assert not (plain / "audit_rates.csv").exists() and not (plain / "audit.json").exists()
        assert "Audit:" not in (plain / "report.html").read_text()
        for name in ("summary.csv", "categories.csv", "leaderboard.csv"):
            assert (plain / name).read_bytes() == (audited / name).read_bytes()
        rates = pd.read_csv(audited / "audit_rates.csv")
        assert rates["human_safe_rate"].isna().all()  # no prompt audit given
        assert not math.isnan(rates["corrected_rate"].iat[0])


    def test_report_audit_bad_folder(self, audited_run, script, env):
        tmp, files, pa, va = audited_run
        r = script("analysis/report.py", f"hard:={files['prov/m1']}", "--output_dir", str(tmp / "x"), "--audit",
                   str(tmp), "--no_figures", env=env)
        assert r.returncode == 2 and "is not an audit folder" in r.stderr
        assert not (tmp / "x").exists()  # checked before the report writes anything
        r = script("analysis/report.py", f"hard:={files['prov/m1']}", "--output_dir", str(tmp / "y"), "--audit",
                   str(va), "--audit", str(va), "--no_figures", env=env)
        assert r.returncode == 2 and "two verdict audits" in r.stderr
