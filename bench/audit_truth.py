"""Synthetic runs whose truth is known, through the real commands: do the audit's and the report's numbers hold?

Three checks, each printed with its figures:

1. **The human-safe rate** (``report.py --audit``): a run of two categories of 500 prompts,
   exactly 90% / 20% of them safe to humans, the model refusing exactly 10% / 60% of the safe
   ones (and 80% of the rest): the rate over human-confirmed safe prompts is 0.19. Eight
   prompt audits (``orbench-audit sample --per_stratum 40``, seeds 1..8), labelled with the
   truth, carried into the report: the estimate per seed, its interval, the mean error, how many
   intervals hold 0.19, and what the old estimator (each stratum's safe items standing for the
   whole stratum) gives on the same audits.
2. **An error-free audit**: a keyword verdict with no error on 40 + 40 audited items: the
   interval of its recall and of the corrected rate (never [1, 1] unless a census), and, beside
   the direct corrected rate, the Rogan-Gladen interval on the same audit (wider).
3. **Repeated samples**: a run of 3 categories x 40 prompts x 5 samples whose prompts differ in
   how often they are refused: the width of every interval the report prints (categories.csv,
   summary.csv, the full-refusal rates, the balanced accuracy) against a percentile bootstrap
   over prompts (``scipy.stats.bootstrap``, 5,000 resamples) on the same per-prompt counts.

Usage::

    python bench/audit_truth.py [--work DIR] [--seeds 8]

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

from orbench.analysis.audit import agreement as audit_stats  # noqa: E402 (needs the sys.path set-up above)
from orbench.analysis.audit import commands as audit  # noqa: E402 (needs the sys.path set-up above)
from orbench.analysis.report.build import build_report  # noqa: E402 (needs the sys.path set-up above)


def stage4(path: Path, model: str, prompts: list[str], cats: list[str], refused: list[bool], samples=None) -> Path:
    frame = pd.DataFrame({"prompt": prompts, "category": cats, "model": model,
                          "response": [("I can't help with that. " if r else "Sure: ") + f"#{i}"
                                       for i, r in enumerate(refused)],
                          "is_rejected": [str(r) for r in refused],
                          "refusal_kind": ["full" if r else "" for r in refused]})
    if samples is not None:
        frame["sample"] = samples
    frame.to_csv(path, index=False)
    return path


def write_labels(folder: Path, fn) -> None:
    sample = audit.read_sample(folder)
    merged = sample.key.merge(sample.items, on="item_id")
    for name in ("a", "b"):
        pd.DataFrame({"sample_id": sample.sample_id, "item_id": merged["item_id"], "annotator": name,
                      "label": [fn(r) for r in merged.to_dict("records")], "note": ""}
                     ).to_csv(folder / f"labels_{name}.csv", index=False)


def quiet(argv: list[str]) -> None:
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert audit.main(argv) == 0, argv


def human_safe(work: Path, seeds: int) -> None:
    rng = np.random.default_rng(0)
    prompts, cats, safe, refused = [], [], {}, []
    for cat, n_safe, n_refused_safe in (("privacy", 450, 45), ("illegal", 100, 60)):
        order = rng.permutation(500)
        for j in range(500):
            p = f"{cat} prompt {j}"
            is_safe = order[j] < n_safe
            prompts.append(p), cats.append(cat)
            safe[p] = is_safe
            refused.append(bool(order[j] < n_refused_safe) if is_safe else bool(rng.random() < 0.8))
    truth = sum(r for p, r in zip(prompts, refused) if safe[p]) / sum(safe.values())
    pd.DataFrame({"prompt": prompts, "category": cats}).to_csv(work / "hard_set.csv", index=False)
    run = stage4(work / "hard_m.csv", "prov/m", prompts, cats, refused)
    rate = dict(zip(prompts, refused))
    print(f"1. Human-safe rate: 2 categories x 500 prompts, 90% / 20% safe, refusal 10% / 60% of the safe ones; "
          f"truth {truth:.4f}")
    print(f"   {'seed':>4s} {'estimate':>9s} {'95% CI':>18s} {'holds':>6s} {'old estimator':>14s}")
    est, hits, old = [], 0, []
    for seed in range(1, seeds + 1):
        folder = work / f"prompts_{seed}"
        quiet(["sample", "--kind", "prompt", str(work / "hard_set.csv"), "--per_stratum", "40", "--seed", str(seed),
               "--output_dir", str(folder)])
        write_labels(folder, lambda r: "safe" if safe[r["prompt"]] else "toxic")
        row = build_report([f"hard:={run}"], work / f"rep_{seed}", reference=False, html=False,
                           audit=[str(folder)]).audit["rates"].iloc[0]
        key = audit.read_sample(folder).key.merge(audit.read_sample(folder).items, on="item_id")
        s = key[key["prompt"].map(safe)]
        w = s["population"].astype(float) / s.groupby("stratum")["item_id"].transform("size")
        old.append(float((w * s["prompt"].map(rate)).sum() / w.sum()))
        held = row["human_safe_ci_low"] <= truth <= row["human_safe_ci_high"]
        hits += held
        est.append(row["human_safe_rate"])
        print(f"   {seed:4d} {row['human_safe_rate']:9.4f} [{row['human_safe_ci_low']:.4f}, "
              f"{row['human_safe_ci_high']:.4f}] {'yes' if held else 'NO':>6s} {old[-1]:14.4f}")
    est = np.array(est)
    print(f"   mean estimate {est.mean():.4f} (error {est.mean() - truth:+.4f}); mean |error| "
          f"{np.abs(est - truth).mean():.4f}; intervals holding the truth: {hits} of {seeds}; "
          f"old estimator's mean {np.mean(old):.4f}")


def corrected(work: Path) -> None:
    n = 800
    refused = [i % 2 == 0 for i in range(n)]
    run = stage4(work / "hard_e.csv", "prov/e", [f"p{i}" for i in range(n)], ["illegal"] * n, refused)
    print("\n2. A verdict audit of 40 + 40 of 400 + 400 rows, carried into the corrected rate:")
    for title, hidden in (("no error seen", None), ("every 10th answer is a refusal to humans", 10)):
        folder = work / f"verdicts_{hidden}"
        quiet(["sample", "--kind", "verdict", str(run), "--per_stratum", "40", "--output_dir", str(folder)])

        def human(r, hidden=hidden):
            i = int(r["response"].rsplit("#", 1)[1])
            machine = r["response"].startswith("I can't")
            return "full_refusal" if machine or (hidden and i % (2 * hidden) == 1) else "full_compliance"
        write_labels(folder, human)
        res = audit.load_and_score(folder)
        m = next(x for x in res["machine"] if x["set"] == "(all)")
        rep = build_report([f"hard:={run}"], work / f"rep_{hidden}", reference=False, html=False, audit=[str(folder)])
        row = rep.audit["rates"].iloc[0]
        rg = audit_stats.rogan_gladen(row["measured_rate"], row["scored"], m["weighted"]["recall"],
                                      m["weighted"]["specificity"])
        print(f"   {title}:")
        for f in ("accuracy", "recall", "specificity"):
            w = m["weighted"][f]
            print(f"     {f:12s} {w['value']:.4f} [{w['ci'][0]:.4f}, {w['ci'][1]:.4f}] flags {','.join(w['flags'])}")
        print(f"     corrected rate (direct) {row['corrected_rate']:.4f} [{row['corrected_ci_low']:.4f}, "
              f"{row['corrected_ci_high']:.4f}], width {row['corrected_ci_high'] - row['corrected_ci_low']:.4f}; "
              f"Rogan-Gladen on the same audit {rg.value:.4f} [{rg.low:.4f}, {rg.high:.4f}], width "
              f"{rg.high - rg.low:.4f}; measured {row['measured_rate']:.4f} [{row['measured_ci_low']:.4f}, "
              f"{row['measured_ci_high']:.4f}]")


def sampled_widths(work: Path) -> None:
    from scipy.stats import bootstrap

    rng = np.random.default_rng(5)
    rows = []
    for s_name, means in (("hard", (0.15, 0.4, 0.7)), ("toxic", (0.6, 0.8, 0.9))):
        for cat, mean in zip(("hate", "privacy", "illegal"), means):
            for p in range(40):
                share = rng.beta(mean * 1.2, (1 - mean) * 1.2)
                for k in range(5):
                    refused = bool(rng.random() < share)
                    rows.append((s_name, cat, f"{s_name} {cat} {p}", k, refused, "full" if refused and k % 2 else
                                 ("partial" if refused else "")))
    frame = pd.DataFrame(rows, columns=["set", "category", "prompt", "sample", "refused", "kind"])
    files = []
    for s_name, part in frame.groupby("set"):
        path = stage4(work / f"{s_name}_sampled.csv", "prov/s", part["prompt"].tolist(), part["category"].tolist(),
                      part["refused"].tolist(), part["sample"].tolist())
        f = pd.read_csv(path)
        f["refusal_kind"] = part["kind"].to_numpy()
        f.to_csv(path, index=False)
        files.append(f"{s_name}:={path}")
    t0 = time.perf_counter()
    rep = build_report(files, work / "rep_sampled", reference=False, html=False)
    took = time.perf_counter() - t0

    def boot(k, n):
        ci = bootstrap((k, n), lambda a, b, axis=-1: a.sum(axis=axis) / b.sum(axis=axis), paired=True,
                       vectorized=True, n_resamples=5000, method="percentile", rng=np.random.default_rng(0))
        return ci.confidence_interval.high - ci.confidence_interval.low

    ratios = []
    print("\n3. Repeated samples (3 categories x 40 prompts x 5 samples per set): interval width / prompt-level "
          "bootstrap width")
    for r in rep.categories.to_dict("records"):
        part = frame[(frame.set == r["set"]) & (frame.category == r["category"])].groupby("prompt")
        k, n = part["refused"].sum().to_numpy(float), part.size().to_numpy(float)
        kf = part["kind"].apply(lambda x: (x == "full").sum()).to_numpy(float)
        for what, width, ref in (("rate", r["ci_high"] - r["ci_low"], boot(k, n)),
                                 ("full refusals", r["full_ci_high"] - r["full_ci_low"], boot(kf, n))):
            ratios.append(width / ref)
            print(f"   {r['set']:5s} {r['category']:8s} {what:13s} {width:.4f} / {ref:.4f} = {width / ref:.2f}")
    for r in rep.summary.to_dict("records"):
        part = frame[frame.set == r["set"]].groupby("prompt")
        k, n = part["refused"].sum().to_numpy(float), part.size().to_numpy(float)
        width, ref = r["keyword_ci_high"] - r["keyword_ci_low"], boot(k, n)
        ratios.append(width / ref)
        print(f"   {r['set']:5s} {'(all)':8s} {'rate':13s} {width:.4f} / {ref:.4f} = {width / ref:.2f}")
    ratios.append(_balanced_accuracy_ratio(rep, frame))
    print(f"   ratio: min {min(ratios):.2f}, mean {np.mean(ratios):.2f} (row-level Wilson before: about 0.6); "
          f"report took {took:.2f} s")


def _balanced_accuracy_ratio(rep, frame: pd.DataFrame) -> float:
    b = rep.leaderboard.iloc[0]
    hard = frame[frame.set == "hard"].groupby("prompt")
    tox = frame[frame.set == "toxic"].groupby("prompt")
    kh, nh = hard["refused"].sum().to_numpy(float), hard.size().to_numpy(float)
    kt, nt = tox["refused"].sum().to_numpy(float), tox.size().to_numpy(float)
    rng2 = np.random.default_rng(1)
    draws = []
    for _ in range(5000):
        ih, it = rng2.integers(0, len(kh), len(kh)), rng2.integers(0, len(kt), len(kt))
        draws.append(100 * (kt[it].sum() / nt[it].sum() + 1 - kh[ih].sum() / nh[ih].sum()) / 2)
    ref = np.percentile(draws, 97.5) - np.percentile(draws, 2.5)
    width = b["balanced_accuracy_ci_high_pct"] - b["balanced_accuracy_ci_low_pct"]
    print(f"   balanced accuracy (points) {width:.2f} / {ref:.2f} = {width / ref:.2f}")
    return width / ref


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", default=None, help="folder for the runs (default: a new temporary folder)")
    parser.add_argument("--seeds", type=int, default=8, help="prompt audits of the human-safe check (default: 8)")
    args = parser.parse_args(argv)
    work = Path(args.work or tempfile.mkdtemp(prefix="audit_truth_"))
    work.mkdir(parents=True, exist_ok=True)
    human_safe(work, args.seeds)
    corrected(work)
    sampled_widths(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
