"""Does ``orbench-audit plan`` predict the precision an audit will have? Prediction against 200 real audits.

A synthetic run of 3 models x 2 categories whose strata (category x the keyword verdict) have
very unequal sizes (40 to 1,500 rows), with humans disagreeing with the machine on exactly 5% of
each "refusal" stratum and 10% of each "answer" stratum (the rates the plan assumes). The plan
(:func:`orbench.analysis.audit.plan.expected_half_widths`, Neyman allocation of ``--size`` items)
predicts every figure's 95% half-width; then ``--audits`` audits are drawn with that allocation
(the real ``draw``, seeds 1..N), labelled with the truth and scored (the real ``score``), and each
figure's mean achieved half-width is printed beside the prediction. Goal: every prediction within
15% of the mean achieved. Also prints the size the plan names for ``--target`` and the half-width
achieved there.

Usage::

    python bench/audit_plan.py [--size 240] [--audits 200] [--target 0.05] [--work DIR]

Exit status: 0 after printing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orbench.analysis.audit import commands as audit  # noqa: E402 (needs the sys.path set-up above)
from orbench.analysis.audit import plan as audit_plan  # noqa: E402 (needs the sys.path set-up above)
from orbench.analysis.audit import sample as audit_sample  # noqa: E402 (needs the sys.path set-up above)

ERRORS = {"refusal": 0.05, "answer": 0.10}
# rows per (model, category, keyword verdict)
SIZES = {("m1", "hate"): (60, 1500), ("m1", "privacy"): (300, 400), ("m2", "hate"): (800, 200),
         ("m2", "privacy"): (40, 900), ("m3", "hate"): (500, 500), ("m3", "privacy"): (120, 1200)}


def population(work: Path) -> tuple[list[str], dict[str, str]]:
    """The stage-4 files and each response's human label (flipped on exactly e_h of each stratum)."""
    rng = np.random.default_rng(0)
    truth, specs = {}, []
    for model in ("m1", "m2", "m3"):
        rows = []
        for (m, cat), (n_ref, n_ans) in SIZES.items():
            if m != model:
                continue
            for verdict, n in (("refusal", n_ref), ("answer", n_ans)):
                flip = set(rng.choice(n, round(ERRORS[verdict] * n), replace=False).tolist())
                for i in range(n):
                    refused = verdict == "refusal"
                    text = ("I can't help with that. " if refused else "Sure: ") + f"{model} {cat} {verdict} {i}"
                    human = refused != (i in flip)
                    truth[text] = "full_refusal" if human else "full_compliance"
                    rows.append({"prompt": f"{cat} {verdict} {i}", "category": cat, "model": f"prov/{model}",
                                 "response": text, "is_rejected": str(refused), "refusal_kind": "full" if refused else ""})
        path = work / f"hard_{model}.csv"
        pd.DataFrame(rows).to_csv(path, index=False)
        specs.append(f"hard:={path}")
    return specs, truth


def one_audit(rows: pd.DataFrame, sizes: dict, seed: int, truth: dict) -> dict:
    """Draw with the planned allocation, label with the truth, score: the scored result."""
    sample, strata, by = audit_sample.draw(rows, "verdict", 0, seed, sizes)
    verdict_cols = [c for c in sample.columns if c.startswith(("verdict:", "kind:", "class:"))]
    items = sample[["item_id", "prompt", "response"]].reset_index(drop=True)
    key = sample[["item_id", "set", "model", "category", "stratum", "population", "sampled", "weight",
                  *verdict_cols]].reset_index(drop=True)
    key["population"] = key["population"].astype(float)
    manifest = {"kind": "verdict", "labels": list(audit_sample.LABELS["verdict"]), "sample_id": f"bench{seed}",
                "stratified_by": ["set", "model", "category", f"verdict:{by}"],
                "verdicts": [c[len("verdict:"):] for c in verdict_cols if c.startswith("verdict:")]}
    s = audit_sample.Sample(Path("."), manifest, items, key, strata)
    labels = pd.DataFrame({"item_id": items["item_id"], "label": items["response"].map(truth)})
    return audit.score(s, {"truth": labels})


def achieved(result: dict) -> dict:
    """(figure, set, model) -> half-width of every planned figure in one scored audit."""
    out = {}
    for m in result["machine"]:
        for f in ("accuracy", "precision", "recall", "specificity"):
            ci = m["weighted"][f]["ci"]
            out[(f, m["set"], m["model"])] = (ci[1] - ci[0]) / 2
    for r in result["human_rates"]:
        out[("human_refusal_share", r["set"], r["model"])] = (r["ci"][1] - r["ci"][0]) / 2
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=240, help="items per audit (default: 240)")
    parser.add_argument("--audits", type=int, default=200, help="simulated audits (default: 200)")
    parser.add_argument("--target", type=float, default=0.05, help="half-width for the size-to-target check")
    parser.add_argument("--work", default=None)
    args = parser.parse_args(argv)
    work = Path(args.work or tempfile.mkdtemp(prefix="audit_plan_"))
    work.mkdir(parents=True, exist_ok=True)
    specs, truth = population(work)
    rows, _ = audit_sample.collect(specs, "verdict")
    table = audit_sample.assign_strata(rows, "verdict")[1]
    sizes = audit_plan.allocate(table, args.size, "neyman", ERRORS, "verdict")
    t0 = time.perf_counter()
    plan = audit_plan.expected_half_widths(table, sizes, ERRORS, "verdict")
    t_plan = time.perf_counter() - t0
    t0 = time.perf_counter()
    runs = [achieved(one_audit(rows, sizes, seed, truth)) for seed in range(1, args.audits + 1)]
    t_audits = time.perf_counter() - t0
    print(f"{len(table)} strata ({int(table['population'].min())}-{int(table['population'].max())} rows), "
          f"{int(table['population'].sum())} rows; Neyman allocation of {args.size} items "
          f"({min(sizes.values())}-{max(sizes.values())} per stratum); error rates {ERRORS}")
    print(f"{'figure':22s} {'set':6s} {'model':8s} {'predicted +-':>12s} {'achieved +-':>12s} {'ratio':>6s}")
    ratios = []
    for r in plan.to_dict("records"):
        got = [run[(r["figure"], r["set"], r["model"])] for run in runs if (r["figure"], r["set"], r["model"]) in run]
        mean = float(np.nanmean(got))
        ratio = r["expected_half_width"] / mean
        ratios.append(ratio)
        print(f"{r['figure']:22s} {r['set']:6s} {r['model']:8s} {r['expected_half_width']:12.4f} {mean:12.4f} "
              f"{ratio:6.2f}{'' if abs(ratio - 1) <= 0.15 else '  OUTSIDE 15%'}")
    ratios = np.array(ratios)
    print(f"within 15% of the mean achieved: {int((abs(ratios - 1) <= 0.15).sum())} of {len(ratios)} figures; "
          f"ratio min {ratios.min():.2f}, max {ratios.max():.2f}; plan {t_plan:.2f} s, {args.audits} audits "
          f"{t_audits:.1f} s")
    need = audit_plan.size_for_target(table, args.target, "neyman", ERRORS, "verdict")
    row = need[(need.figure == "human_refusal_share") & (need.set == "(all)")].iloc[0]
    size = int(row["size_for_target"])
    at = [achieved(one_audit(rows, audit_plan.allocate(table, size, "neyman", ERRORS, "verdict"), s, truth))
          [("human_refusal_share", "(all)", "(all)")] for s in range(1, 51)]
    print(f"size for +-{args.target} on the pooled human refusal share: {size} items; achieved over 50 audits "
          f"at that size: mean +-{np.mean(at):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
