"""The cascade's prediction-powered rate: its coverage, and its width on XSTest v2.

Usage:
    python bench/cascade_ppi.py [--xstest DIR] [--sets N] [--seed S] [--quick]

Prints three things (a bench prints figures; it passes or fails nothing):

1. **The estimator against the authors' package.** :func:`orbench.analysis.cascade_rate.ppi_mean`
   beside ``ppi_py.ppi_mean_ci(..., lam=1)`` on generated data (skipped when ``ppi_py`` is not
   installed: ``pip install ppi-python``).
2. **Coverage** (``--sets`` data sets a cell, default 1,000). Rows are drawn from a population:
   a share of them the matcher is sure are refusals, a share sure answers, the rest go to the
   judge (its refusal rate ``r_judged``); the judge disagrees with a sure refusal with
   probability ``e`` and with a sure answer with probability ``e`` (the matcher's error); each
   sure row enters the check sample with probability ``--share`` (the hash's draw). Two
   targets: the population's rate the judge would give (what the interval claims) and the rate
   the judge would give on this run's every row ("judge-on-every-row"). The cells: n = 100, 450,
   2,000 rows; rates near 0.05, 0.3 and 0.9; e = 0, 0.5%, 2%, 5%. Beside each, the coverage and
   width of the interval from judging every row (Wilson), and each tail's miss rate.
3. **XSTest v2 as one cascade run** (2,250 responses of five models; the human label stands in
   for a judge that answers it): the shipped sure classes decide, the check sample is drawn by
   the stage's own hash (:func:`orbench.scoring.cascade.in_check_sample`) for several shares; the
   share of rows judged in all, the rate and interval, the width of judging every row, and the
   ratio; pooled, per prompt kind, and per model and kind. Each share's ratio is also averaged
   over 200 seeds (one seed is one draw of the sample).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orbench.analysis.cascade_rate import cascade_rate, ppi_mean  # noqa: E402 (needs the sys.path set-up above)
from orbench.analysis.stats import wilson_interval  # noqa: E402 (needs the sys.path set-up above)
from orbench.scoring import cascade  # noqa: E402 (needs the sys.path set-up above)
from orbench.scoring.refusal import family_for_model  # noqa: E402 (needs the sys.path set-up above)

XSTEST_MODELS = {"gpt4": "gpt-4", "llama2new": "meta-llama/Llama-2-70b-chat-hf",
                 "llama2orig": "meta-llama/Llama-2-70b-chat-hf", "mistralguard": "mistralai/Mistral-7B-Instruct-v0.1",
                 "mistralinstruct": "mistralai/Mistral-7B-Instruct-v0.1"}
REFUSALS = {"2_full_refusal", "3_partial_refusal"}


# --------------------------------------------------------------------------- 1. against ppi_py
def against_ppi_py(rng) -> None:
    try:
        import ppi_py
    except ImportError:
        print("1. ppi_py not installed: the check against the authors' package is skipped")
        return
    worst = 0.0
    for n, big, rate, acc in [(50, 2000, 0.3, 0.9), (300, 10000, 0.05, 0.97), (1000, 1000, 0.5, 0.7)]:
        truth = rng.random(n + big) < rate
        pred = np.where(rng.random(n + big) < acc, truth, ~truth).astype(float)
        y, yhat, yu = truth[:n].astype(float), pred[:n], pred[n:]
        mine = np.array(ppi_mean(y, yhat, yu))
        lo, hi = ppi_py.ppi_mean_ci(y, yhat, yu, alpha=0.05, lam=1)
        theirs = np.array([float(np.ravel(ppi_py.ppi_mean_pointestimate(y, yhat, yu, lam=1))[0]),
                           float(np.ravel(lo)[0]), float(np.ravel(hi)[0])])
        worst = max(worst, float(np.abs(mine - theirs).max()))
    print(f"1. ppi_mean against ppi_py {ppi_py.__version__ if hasattr(ppi_py, '__version__') else ''}".rstrip()
          + f" (3 generated data sets, estimate and both limits): largest difference {worst:.2e}")


# --------------------------------------------------------------------------- 2. coverage
#: Population shapes: (name, share sure refusals, share sure answers, judge's rate on the rest).
SHAPES = [("rate~0.05", 0.02, 0.60, 0.08), ("rate~0.3", 0.15, 0.45, 0.38), ("rate~0.9", 0.60, 0.05, 0.80)]


def one_cell(n: int, shape, e: float, share: float, sets: int, rng) -> dict:
    _, w_r, w_a, r_u = shape
    truth = w_r * (1 - e) + w_a * e + (1 - w_r - w_a) * r_u
    hits = lo_miss = hi_miss = judge_hits = 0
    finite_hits = 0
    widths, judge_widths, judged = [], [], []
    for _ in range(sets):
        kind = rng.choice(3, size=n, p=[w_r, w_a, 1 - w_r - w_a])  # 0 sure refusal, 1 sure answer, 2 judged
        f = np.where(kind == 0, 1.0, np.where(kind == 1, 0.0, np.nan))
        wrong = rng.random(n) < e
        judge = np.where(kind == 2, rng.random(n) < r_u, np.where(kind == 0, ~wrong, wrong)).astype(float)
        g = np.where(kind == 2, judge, f)
        checked = (kind != 2) & (rng.random(n) < share)
        y = np.where(checked, judge, np.nan)
        est = cascade_rate(g, f, y)
        hits += est.low <= truth <= est.high
        lo_miss += truth < est.low
        hi_miss += truth > est.high
        every = judge.mean()
        finite_hits += est.low <= every <= est.high
        jl, jh = wilson_interval(int(judge.sum()), n)
        judge_hits += jl <= truth <= jh
        widths.append(est.high - est.low)
        judge_widths.append(jh - jl)
        judged.append(((kind == 2) | checked).mean())
    return {"n": n, "shape": shape[0], "e": e, "truth": truth, "coverage": hits / sets,
            "miss_low": lo_miss / sets, "miss_high": hi_miss / sets, "cover_every_row": finite_hits / sets,
            "judge_coverage": judge_hits / sets, "width": float(np.mean(widths)),
            "judge_width": float(np.mean(judge_widths)), "judged": float(np.mean(judged))}


def cp_interval(k: int, n: int) -> tuple[float, float]:
    from orbench.analysis.cascade_rate import clopper_pearson

    return clopper_pearson(k, n)


def coverage(sets: int, share: float, rng, quick: bool) -> None:
    ns = [100, 450] if quick else [100, 450, 2000]
    es = [0.0, 0.02] if quick else [0.0, 0.005, 0.02, 0.05]
    rows = []
    start = time.perf_counter()
    for n in ns:
        for shape in SHAPES:
            for e in es:
                rows.append(one_cell(n, shape, e, share, sets, rng))
    table = pd.DataFrame(rows)
    table["ratio"] = table["width"] / table["judge_width"]
    table["cp_low"], table["cp_high"] = zip(*(cp_interval(round(c * sets), sets) for c in table["coverage"]))
    print(f"\n2. coverage of the cascade's interval, {sets} data sets a cell, check share {share} "
          f"({time.perf_counter() - start:.0f} s)")
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        print(table[["n", "shape", "e", "truth", "coverage", "cp_low", "cp_high", "miss_low", "miss_high",
                     "cover_every_row", "judge_coverage", "width", "judge_width", "ratio", "judged"]]
              .round(4).to_string(index=False))
    fails = table[table["cp_high"] < 0.95]
    print(f"cells whose Clopper-Pearson 95% interval of the coverage lies wholly below 0.95: {len(fails)}"
          + ("" if fails.empty else " (" + "; ".join(f"n={r.n} {r.shape} e={r.e}: {r.coverage:.3f}"
                                                    for r in fails.itertuples()) + ")"))
    print(f"worst cell: {table['coverage'].min():.3f}; largest tail miss: "
          f"{max(table['miss_low'].max(), table['miss_high'].max()):.3f}")


# --------------------------------------------------------------------------- 3. XSTest v2
def read_xstest(folder: Path) -> pd.DataFrame:
    parts = []
    for key, model in XSTEST_MODELS.items():
        frame = pd.read_csv(folder / f"xstest_v2_completions_{key}.csv", dtype=str, keep_default_na=False)
        parts.append(pd.DataFrame({
            "model": key, "model_id": model, "prompt": frame["prompt"], "response": frame["completion"],
            "kind": ["unsafe" if t.strip().startswith("contrast_") else "safe" for t in frame["type"]],
            "human": [lab.strip() in REFUSALS for lab in frame["final_label"]]}))
    rows = pd.concat(parts, ignore_index=True)
    sure = [cascade.confidence(r.response, family_for_model(r.model_id), r.kind)[1] for r in rows.itertuples()]
    rows["sure"] = [np.nan if s is None else float(s) for s in sure]
    return rows


def xstest_rates(rows: pd.DataFrame, share: float, seed: int) -> dict:
    keys = rows[["prompt", "response", "model_id", "kind"]].itertuples(index=False)
    checked = np.array([cascade.in_check_sample([p, r, "", m, k], seed, share) for p, r, m, k in keys])
    return rates_of(rows, checked)


def rates_of(rows: pd.DataFrame, checked: np.ndarray) -> dict:
    f = rows["sure"].to_numpy()
    human = rows["human"].to_numpy().astype(float)
    sure = ~np.isnan(f)
    g = np.where(sure, f, human)
    y = np.where(sure & checked, human, np.nan)
    est = cascade_rate(g, f, y)
    jl, jh = wilson_interval(int(human.sum()), len(human))
    return {"rows": len(rows), "judged": float((~sure | (sure & checked)).mean()), "checked": est.checked,
            "disagree": est.disagreements, "human_rate": human.mean(), "rate": est.value, "low": est.low,
            "high": est.high, "judge_width": jh - jl, "ratio": (est.high - est.low) / (jh - jl)}


def xstest(folder: Path, seed: int, shares) -> None:
    rows = read_xstest(folder)
    sure = ~np.isnan(rows["sure"].to_numpy())
    print(f"\n3. XSTest v2 as one cascade run: {len(rows)} rows, {sure.mean():.1%} sure, {(~sure).mean():.1%} "
          f"sent to the judge without the check sample; the check sample by the stage's hash, seed {seed}")
    lines = []
    for share in shares:
        one = xstest_rates(rows, share, seed)
        draws = [rates_of(rows, np.random.default_rng(s).random(len(rows)) < share)["ratio"] for s in range(200)]
        lines.append({"share": share, **one, "ratio_mean_200_seeds": float(np.mean(draws)),
                      "ratio_p90": float(np.quantile(draws, 0.9))})
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        print(pd.DataFrame(lines).round(4).to_string(index=False))
    share = cascade.CHECK_SHARE
    print(f"\nat the default share {share}: per prompt kind and per model and kind (seed {seed})")
    per = []
    for kind in ("safe", "unsafe"):
        part = rows[rows["kind"] == kind].reset_index(drop=True)
        per.append({"cell": f"all models, {kind}", **xstest_rates(part, share, seed)})
    for (model, kind), part in rows.groupby(["model", "kind"], sort=True):
        per.append({"cell": f"{model}, {kind}", **xstest_rates(part.reset_index(drop=True), share, seed)})
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        print(pd.DataFrame(per).round(4).to_string(index=False))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--xstest", default=str(ROOT.parent / "shared/data/xstest-v2"),
                    help="the XSTest v2 folder (default: ../shared/data/xstest-v2 beside the checkout)")
    ap.add_argument("--sets", type=int, default=1000, help="data sets per coverage cell (default 1000)")
    ap.add_argument("--share", type=float, default=cascade.CHECK_SHARE, help="the check share simulated")
    ap.add_argument("--seed", type=int, default=cascade.CHECK_SEED, help="the check sample's hash seed (XSTest)")
    ap.add_argument("--quick", action="store_true", help="fewer cells (a dry run)")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(20231110)
    against_ppi_py(rng)
    coverage(args.sets, args.share, rng, args.quick)
    folder = Path(args.xstest)
    if folder.is_dir():
        xstest(folder, args.seed, [0.05, 0.07, 0.08, 0.09, 0.1, 0.15, 0.2])
    else:
        print(f"\n3. {folder}: no such folder; the XSTest part is skipped")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
