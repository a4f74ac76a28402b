"""Run the whole audit on XSTest v2's real human labels and print the figures beside the libraries'.

Reads the XSTest v2 completions (``xstest_v2_completions_<model>.csv``: prompt, completion and
two annotators' labels, ``annotation_1`` and ``annotation_2``), writes them as stage-4 outputs
(the keyword matcher's ``is_rejected`` and ``refusal_kind``), draws a verdict audit that takes
every row (``--per_stratum`` larger than any stratum, so every weight is 1), writes the two
annotators' labels as two ``labels_<name>.csv`` files (the page's export format), runs
``orbench-audit score`` on them, and prints our figures next to scikit-learn's, statsmodels'
and krippendorff's on the same labels, and the keyword matcher's audited accuracy next to the
one computed directly. Then a small audit (``--audit_size`` per stratum) is carried into the
report: measured, corrected and the humans' rate per model; with ``--repeat K``, K such audits
give the corrected interval's coverage. Also prints how long each step took.

Usage::

    python bench/audit_xstest.py [XSTEST_DIR] [--models gpt4,llama2new] [--work DIR] [--audit_size 5] [--repeat 20]

Exit status: 0 after printing (1 when a figure differs from the library's); 2 on a missing input.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orbench.analysis.audit import commands as audit  # noqa: E402 (needs the sys.path set-up above)
from orbench.scoring.refusal import family_for_model, refusal_kind  # noqa: E402 (needs the sys.path set-up above)

MODELS = {"gpt4": "openai/gpt-4", "llama2new": "meta-llama/Llama-2-70b-chat-hf",
          "llama2orig": "meta-llama/Llama-2-70b-chat-hf-orig-sysprompt",
          "mistralguard": "mistralai/Mistral-7B-Instruct-v0.1-guard",
          "mistralinstruct": "mistralai/Mistral-7B-Instruct-v0.1"}
LABEL = {"1_full_compliance": "full_compliance", "2_full_refusal": "full_refusal",
         "3_partial_refusal": "partial_refusal"}


def stage4_files(xstest: Path, models: list[str], work: Path) -> tuple[list[str], pd.DataFrame]:
    """One stage-4-like CSV per model; and the annotations, keyed by (model, prompt, response)."""
    specs, notes = [], []
    for short in models:
        frame = pd.read_csv(xstest / f"xstest_v2_completions_{short}.csv", dtype=str, keep_default_na=False)
        model = MODELS[short]
        family = family_for_model(model)
        kinds = [refusal_kind(t, family) for t in frame["completion"]]
        out = pd.DataFrame({"prompt": frame["prompt"], "category": frame["type"], "model": model,
                            "response": frame["completion"], "is_rejected": [k is not None for k in kinds],
                            "refusal_kind": [k or "" for k in kinds]})
        path = work / f"xstest_{short}.csv"
        out.to_csv(path, index=False)
        specs.append(f"xstest:={path}")
        notes.append(frame.assign(model=model, response=frame["completion"])[
            ["model", "prompt", "response", "annotation_1", "annotation_2"]])
    return specs, pd.concat(notes, ignore_index=True)


def annotator_files(folder: Path, annotations: pd.DataFrame) -> tuple[list[str], pd.DataFrame]:
    """``labels_annotator_1.csv`` and ``labels_annotator_2.csv`` for the sample in ``folder``."""
    sample = audit.read_sample(folder)
    items = sample.key[["item_id", "model"]].merge(sample.items, on="item_id")
    joined = items.merge(annotations, on=["model", "prompt", "response"], how="left", validate="one_to_one")
    assert joined["annotation_1"].notna().all(), "an item has no XSTest annotation"
    paths = []
    for n in (1, 2):
        path = folder / f"labels_annotator_{n}.csv"
        pd.DataFrame({"sample_id": sample.sample_id, "item_id": joined["item_id"], "annotator": f"annotator_{n}",
                      "label": joined[f"annotation_{n}"].map(LABEL), "note": ""}).to_csv(path, index=False)
        paths.append(str(path))
    return paths, joined


def library_figures(joined: pd.DataFrame, key: pd.DataFrame) -> dict:
    """The same figures computed straight from the labels with the libraries (no orbench code)."""
    import krippendorff
    import numpy as np
    from sklearn.metrics import accuracy_score, cohen_kappa_score
    from statsmodels.stats.inter_rater import aggregate_raters, fleiss_kappa

    a, b = joined["annotation_1"].map(LABEL), joined["annotation_2"].map(LABEL)
    codes = {lab: i for i, lab in enumerate(("full_compliance", "partial_refusal", "full_refusal"))}
    counts, _ = aggregate_raters(np.stack([a.map(codes), b.map(codes)], axis=1), n_cat=3)
    ra, rb = a != "full_compliance", b != "full_compliance"
    agree = ra == rb
    keyed = joined.merge(key[["item_id", "verdict:keyword", "stratum", "population"]], on="item_id")
    kw = keyed["verdict:keyword"] == "refusal"
    used = keyed[agree.to_numpy()].groupby("stratum")["item_id"].transform("size")
    weight = keyed.loc[agree.to_numpy(), "population"].astype(float) / used
    return {"raw": float((a == b).mean()), "cohen": float(cohen_kappa_score(a, b)),
            "fleiss": float(fleiss_kappa(counts)),
            "alpha": float(krippendorff.alpha(reliability_data=np.stack([a.map(codes), b.map(codes)]),
                                              level_of_measurement="nominal")),
            "cohen_refusal": float(cohen_kappa_score(ra, rb)),
            "keyword_accuracy": float(accuracy_score(ra[agree], kw[agree])), "keyword_n": int(agree.sum()),
            "keyword_weighted": float(accuracy_score(ra[agree], kw[agree], sample_weight=weight))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("xstest", nargs="?", default=str(ROOT.parent / "shared" / "data" / "xstest-v2"))
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--work", default=None)
    parser.add_argument("--audit_size", type=int, default=5, help="items per stratum of the small audit")
    parser.add_argument("--repeat", type=int, default=0, metavar="K",
                        help="also draw K small audits (seeds 1..K) and print the corrected rate's coverage")
    args = parser.parse_args(argv)
    xstest = Path(args.xstest)
    if not xstest.is_dir():
        print(f"error: no XSTest folder at {xstest}", file=sys.stderr)
        return 2
    work = Path(args.work or tempfile.mkdtemp(prefix="audit_xstest_"))
    work.mkdir(parents=True, exist_ok=True)
    specs, annotations = stage4_files(xstest, args.models.split(","), work)
    t0 = time.perf_counter()
    audit.main(["sample", "--kind", "verdict", *specs, "--output_dir", str(work / "audit"),
                "--per_stratum", "100000"])
    t1 = time.perf_counter()
    files, joined = annotator_files(work / "audit", annotations)
    t2 = time.perf_counter()
    result = audit.load_and_score(work / "audit", files)
    t3 = time.perf_counter()
    lib = library_figures(joined, audit.read_sample(work / "audit").key)
    ag, agr = result["agreement"], result["agreement_refusal"]
    kw = next(m for m in result["machine"] if m["verdict"] == "keyword" and m["set"] == "(all)")
    rows = [("raw agreement (3 classes)", ag["raw"], lib["raw"]),
            ("Cohen's kappa (3 classes)", ag["cohen_kappa"], lib["cohen"]),
            ("Fleiss' kappa (3 classes)", ag["fleiss_kappa"], lib["fleiss"]),
            ("Krippendorff's alpha (3 classes)", ag["krippendorff_alpha"], lib["alpha"]),
            ("Cohen's kappa (refusal yes/no)", agr["cohen_kappa"], lib["cohen_refusal"]),
            ("keyword accuracy vs humans", kw["sample"]["accuracy"]["value"], lib["keyword_accuracy"]),
            ("keyword accuracy, weighted", kw["weighted"]["accuracy"]["value"], lib["keyword_weighted"])]
    print(f"XSTest v2, models {args.models}: {result['items_total']} items, 2 annotators")
    print(f"{'figure':36s} {'orbench-audit':>14s} {'library':>10s}")
    bad = 0
    for name, ours, theirs in rows:
        same = abs(ours - theirs) < 1e-12
        bad += not same
        print(f"{name:36s} {ours:14.6f} {theirs:10.6f} {'equal' if same else 'DIFFERENT'}")
    print(f"keyword n (annotators agree on refusal): {kw['n']} (direct: {lib['keyword_n']}); "
          f"accuracy 95% CI {kw['sample']['accuracy']['ci']}; kappa {kw['sample']['kappa']['value']:.4f} "
          f"{kw['sample']['kappa']['ci']}")
    for line in audit.summary_lines(result):
        print("  " + line)
    print(f"time: sample {t1 - t0:.2f} s, write labels {t2 - t1:.2f} s, score {t3 - t2:.2f} s")
    corrected_rates(xstest, specs, annotations, work, args.models.split(","), args.audit_size)
    if args.repeat:
        coverage(xstest, specs, annotations, work, args.models.split(","), args.audit_size, args.repeat)
    return 1 if bad else 0


def coverage(xstest: Path, specs: list[str], annotations: pd.DataFrame, work: Path, models: list[str],
             size: int, repeat: int) -> None:
    """Draw ``repeat`` small audits (seeds 1..repeat): how often the corrected rate's interval holds the humans' rate."""
    from orbench.analysis.report.build import build_report

    truth = {}
    for short in models:
        frame = pd.read_csv(xstest / f"xstest_v2_completions_{short}.csv", dtype=str, keep_default_na=False)
        truth[MODELS[short]] = float((frame["final_label"] != "1_full_compliance").mean())
    hits = err_measured = err_corrected = width = 0.0
    cells = 0
    for seed in range(1, repeat + 1):
        folder = work / f"audit_seed_{seed}"
        audit.main(["sample", "--kind", "verdict", *specs, "--output_dir", str(folder), "--per_stratum", str(size),
                    "--seed", str(seed)])
        annotator_files(folder, annotations)
        rates = build_report(specs, work / f"report_seed_{seed}", reference=False, html=False,
                             custom_sets=["xstest"], audit=[str(folder)]).audit["rates"]
        for r in rates.to_dict("records"):
            t = truth[r["model"]]
            hits += r["corrected_ci_low"] <= t <= r["corrected_ci_high"]
            err_measured += abs(r["measured_rate"] - t)
            err_corrected += abs(r["corrected_rate"] - t)
            width += r["corrected_ci_high"] - r["corrected_ci_low"]
            cells += 1
    print(f"\n{repeat} audits of {size} per stratum (seeds 1..{repeat}) x {len(models)} models = {cells} corrected rates:")
    print(f"  95% interval holds the humans' rate: {hits / cells:.1%}; mean interval width {100 * width / cells:.1f} points")
    print(f"  mean |measured - humans| {100 * err_measured / cells:.2f} points; "
          f"mean |corrected - humans| {100 * err_corrected / cells:.2f} points")


def corrected_rates(xstest: Path, specs: list[str], annotations: pd.DataFrame, work: Path, models: list[str],
                    size: int) -> None:
    """A small audit (``size`` per stratum) carried into the report: measured vs corrected vs the humans' rate."""
    from orbench.analysis.report.build import build_report

    folder = work / f"audit_small_{size}"
    audit.main(["sample", "--kind", "verdict", *specs, "--output_dir", str(folder), "--per_stratum", str(size)])
    annotator_files(folder, annotations)
    t0 = time.perf_counter()
    rep = build_report(specs, work / f"report_{size}", reference=False, html=True, audit=[str(folder)],
                       custom_sets=["xstest"])
    t1 = time.perf_counter()
    rates = rep.audit["rates"]
    items = len(audit.read_sample(folder).items)
    print(f"\nA {items}-item audit ({size} per stratum) carried into the report (keyword verdicts; humans' rate ="
          f" final_label full or partial refusal on all rows):")
    print(f"{'model':48s} {'measured %':>10s} {'corrected % [95% CI]':>26s} {'humans %':>9s} {'covered':>8s}")
    for short in models:
        frame = pd.read_csv(xstest / f"xstest_v2_completions_{short}.csv", dtype=str, keep_default_na=False)
        truth = float((frame["final_label"] != "1_full_compliance").mean())
        r = rates[rates["model"] == MODELS[short]].iloc[0]
        lo, hi = r["corrected_ci_low"], r["corrected_ci_high"]
        print(f"{MODELS[short]:48s} {100 * r['measured_rate']:10.1f} "
              f"{100 * r['corrected_rate']:8.1f} [{100 * lo:5.1f}, {100 * hi:5.1f}]{' clamped' if r['corrected_clamped'] else ''}"
              f" {100 * truth:9.1f} {'yes' if lo <= truth <= hi else 'NO':>8s}")
    print(f"time: report with --audit {t1 - t0:.2f} s")


if __name__ == "__main__":
    sys.exit(main())
