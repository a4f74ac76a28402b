"""Paired comparisons of two models on the same prompts, and statistics over repeated samples.

Both models of an OR-Bench comparison answered the same prompts, so the comparison is paired:
per set and per category (and ``all`` for the whole set), on the prompts *both* models scored,

* ``rate_a``/``rate_b``: the mean over the compared prompts of each side's refusal share (its
  refusals over its scored samples; with one sample each, the rate), ``diff = rate_b - rate_a``;
  ``a_only`` / ``b_only``: prompts with a higher share for A / for B; ``samples_a`` /
  ``samples_b``: the most samples a prompt has on each side;
* the test, whatever the samples per prompt (one each, one against K, unequal counts): the exact
  conditional test of "the same refusal probability per prompt" (:mod:`orbench.analysis.conditional`:
  each prompt's pooled refusals placed at random among its pooled samples, a hypergeometric
  draw; the statistic B's refusals summed over prompts, its exact distribution their
  convolution). ``p_value`` is two-sided, twice the smaller tail; ``p_b_more`` the one-sided
  p for "B refuses more"; ``p_midp`` its mid-p version. With one sample each it is McNemar's
  exact test (``test`` ``mcnemar_exact``, the value statsmodels' ``mcnemar(exact=True)`` gives;
  mid-p as Fagerland, Lydersen & Laake 2013), else ``exact_conditional``;
* the intervals inverted from that test (``interval`` ``exact_conditional``): ``odds_ratio``
  with ``or_ci_low``/``or_ci_high``, the conditional common odds ratio of B against A on the
  same prompt and its exact 95% interval (with one sample each: the discordant pairs' ratio
  ``b_only / a_only`` with Clopper-Pearson's interval on ``b_only / (a_only + b_only)`` as odds), and
  ``ci_low``/``ci_high`` on ``diff``, the difference those limits imply given each prompt's
  pooled refusals: both exclude no difference exactly when ``p_value < 0.05``. With no prompt
  whose refusals could fall on either side, nothing is compared: ``p_value`` 1, no interval
  (flag ``not_computable``);
* rows without a verdict (unparsed, refused by the judge, or failed with an error), counted per
  side (``no_verdict_a``, ``errors_a``, ...): where either side has more than 5% of its rows in
  a cell without one, that cell has no rates and no p-value, only worst-case bounds on the
  difference (``diff_bound_low``/``diff_bound_high``, :func:`orbench.analysis.stats.difference_bounds`,
  flag ``bounds_only``), and a note says why; at 5% or less, a note says the p-value covers the
  decided rows only.

Multiplicity: ``p_holm`` is Holm-adjusted across the categories of one set and pair (as
before); ``p_holm_run`` is Holm-adjusted across every test of the same level in the run: the
``all`` rows of every pair and set together (``--baseline`` compares many models), the category
rows together (Holm's step-down, equal to statsmodels' ``multipletests(method="holm")``: family-wise
error, valid under any dependence). p-values are written at full precision.

A difference is computed only between verdicts of the same kind and the same judge: when the
two models' judges differ, the pair is compared on keyword verdicts where both have them, and the
note says so; otherwise the set is not compared and the note says why. Prompts only one model
scored are counted (``unpaired_a``, ``unpaired_b``), never used.

For one model with repeated samples, :func:`sample_stats` gives per set the rate over all
samples with its prompt-level interval (:func:`orbench.analysis.stats.cluster_share`: the prompt
is the unit, not the K x n rows), the share of prompts refused in some samples and answered in
others, and per-prompt refusal shares.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from orbench.analysis import stats
from orbench.analysis.conditional import conditional_test
from orbench.analysis.report import columns
from orbench.analysis.report.columns import names, per_value, prompt_hash, read_results
from orbench.analysis.report.inputs import ERROR, SCORED, Inputs
from orbench.llm.errors import UsageError
from orbench.scoring.vocab import JUDGE, KEYWORD

COLUMNS = ["set", "category", "model_a", "model_b", "judge", "n", "samples_a", "samples_b", "rate_a", "rate_b", "diff",
           "ci_low", "ci_high", "ci_flag", "diff_bound_low", "diff_bound_high", "a_only", "b_only", "odds_ratio",
           "or_ci_low", "or_ci_high", "p_value", "p_midp", "p_b_more", "p_holm", "p_holm_run", "test", "interval",
           "unpaired_a", "unpaired_b", "no_verdict_a", "errors_a", "no_verdict_b", "errors_b"]
SAMPLE_COLUMNS = ["set", "model", "judge", "samples", "prompts", "rows", "rate", "ci_low",
                  "ci_high", "n_eff", "ci_method", "ci_flag", "rate_bound_low", "rate_bound_high", "no_verdict",
                  "flip_share", "flip_prompts"]
SHARE_COLUMNS = ["set", "model", "judge", "category", "prompt", "samples", "refusals", "share"]
ALL = "all"
MCNEMAR, CONDITIONAL = "mcnemar_exact", "exact_conditional"
BOUNDS = "worst_case_clopper_pearson"


# ---------------------------------------------------------------- the statistics

def require_libraries(what: str) -> None:
    """``UsageError`` naming the extra to install when scipy or statsmodels is missing."""
    try:
        import scipy.stats  # noqa: F401 (imported only to check it is installed)
        import statsmodels.stats.contingency_tables  # noqa: F401 (imported only to check it is installed)
    except ImportError as exc:
        raise UsageError(f"{what} needs scipy and statsmodels ({exc.name} is not installed): "
                         f"pip install 'orbench[stats]'") from None


def newcombe_paired_interval(both: int, a_only: int, b_only: int, neither: int,
                             alpha: float = 0.05) -> tuple[float, float]:
    """Newcombe's (1998) method-10 interval for ``p_b - p_a`` of two paired proportions
    (:func:`orbench.analysis.stats.paired_difference`); ``(nan, nan)`` when there are no pairs."""
    if alpha != 0.05:
        raise ValueError("only the 95% interval is implemented")
    est = stats.paired_difference(both, a_only, b_only, neither)
    return est.low, est.high


def mcnemar_exact(a_only: int, b_only: int) -> float:
    """McNemar's exact two-sided p-value (statsmodels); 1.0 with no discordant pair."""
    from statsmodels.stats.contingency_tables import mcnemar

    return float(mcnemar([[0, a_only], [b_only, 0]], exact=True).pvalue)


def mcnemar_midp(a_only: int, b_only: int) -> float:
    """The mid-p McNemar test (Fagerland et al. 2013): ``2 P(X <= min) - P(X = min)`` with
    ``X ~ Binomial(a_only + b_only, 1/2)``; 1.0 with no discordant pair."""
    from scipy.stats import binom

    n, low = a_only + b_only, min(a_only, b_only)
    if n == 0:
        return 1.0
    return float(min(1.0, 2 * binom.cdf(low, n, 0.5) - binom.pmf(low, n, 0.5)))


def holm(pvalues: list[float]) -> list[float]:
    """Holm-adjusted p-values; NaNs stay NaN and are not counted.

    The step-down rule itself: the i-th smallest of m p-values is multiplied by m - i (i from 0),
    made non-decreasing along the order and capped at 1 (the tests compare it with statsmodels'
    ``multipletests(method="holm")``, which runs a full ``gc.collect()`` on every call: a tenth of
    a second each in a large process, called once per family)."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(len(p), np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    order = ok[np.argsort(p[ok], kind="stable")]
    steps = np.arange(len(order), 0, -1)
    out[order] = np.minimum(1.0, np.maximum.accumulate(p[order] * steps))
    return [float(v) for v in out]


# ---------------------------------------------------------------- per-prompt tables

def per_prompt(inp: Inputs, set_code: int, model_code: int, method_code: int, judge_code: int) -> pd.DataFrame:
    """One row per prompt the group scored: ``k`` refusals of ``n`` scored samples, category."""
    full = prompt_rows(inp, set_code, model_code, method_code, judge_code)
    return full.loc[full["n"] > 0, ["k", "n", "category"]]


def prompt_rows(inp: Inputs, set_code: int, model_code: int, method_code: int, judge_code: int) -> pd.DataFrame:
    """One row per prompt the group has any row for: ``k`` refusals of ``n`` scored samples, ``u``
    rows without a verdict (unparsed, the judge refusing to judge), ``e`` rows failed with an error."""
    d = inp.data
    mask = _where(d, set=set_code, model=model_code, method=method_code, judge=judge_code)
    status = d["status"].to_numpy()[mask]
    scored, error = status == SCORED, status == ERROR
    rows = pd.DataFrame({"prompt": d["prompt"].to_numpy()[mask],
                         "k": (scored & (d["rejected"].to_numpy()[mask] == 1)).astype(np.int64),
                         "n": scored.astype(np.int64), "u": (~scored & ~error).astype(np.int64),
                         "e": error.astype(np.int64), "category": d["category"].to_numpy()[mask]})
    g = rows.groupby("prompt", sort=False)
    out = g[["k", "n", "u", "e"]].sum()
    out["category"] = g["category"].first()
    return out


def _where(d: pd.DataFrame, **codes: int) -> np.ndarray:
    """The rows of ``d`` whose columns hold the given codes, as a mask (plain numpy: the verdict
    table's columns are integer codes, and pandas' cost per comparison dominated on small runs)."""
    mask = np.ones(len(d), dtype=bool)
    for column, code in codes.items():
        mask &= d[column].to_numpy() == code
    return mask


def _verdict_groups(inp: Inputs, set_code: int, model_code: int) -> list[tuple[int, int]]:
    """(method code, judge code) of every verdict group with scored rows for one set and model."""
    d = inp.data
    mask = _where(d, set=set_code, model=model_code, status=SCORED)
    return sorted(set(zip(d["method"].to_numpy()[mask].tolist(), d["judge"].to_numpy()[mask].tolist())))


# ---------------------------------------------------------------- comparisons

@dataclass
class Comparison:
    """What :func:`compare` produced: the table, the notes, and the flipped prompts."""

    table: pd.DataFrame
    notes: list[str] = field(default_factory=list)
    flips: list[dict] = field(default_factory=list)   # one entry per compared (set, pair, judge)


def model_pairs(inp: Inputs, compare: list[list[str]] | None, baseline: str | None) -> list[tuple[str, str]]:
    """The (A, B) pairs asked for; ``UsageError`` naming a model that is not in the inputs."""
    models = inp.codes["model"].names
    present = {models[c] for c in pd.unique(inp.data["model"])} if not inp.data.empty else set()
    pairs: list[tuple[str, str]] = []
    asked = [("--compare", a) for pair in (compare or []) for a in pair] + \
        ([("--baseline", baseline)] if baseline else [])
    for flag, name in asked:
        if name not in present:
            raise UsageError(f"{flag}: no model {name!r} in the inputs (models: "
                             f"{', '.join(sorted(present)) or 'none'})")
    for a, b in compare or []:
        if a == b:
            raise UsageError(f"--compare {a} {b}: a model compared with itself")
        pairs.append((a, b))
    if baseline:
        others = sorted(present - {baseline})
        if not others:
            raise UsageError(f"--baseline {baseline}: no other model in the inputs to compare with")
        pairs += [(baseline, m) for m in others]
    return list(dict.fromkeys(pairs))


def _choose(inp: Inputs, ga: list, gb: list, verdict: str) -> tuple[list, str | None]:
    """The verdict groups to compare on (same method and judge for both) and a note, if any."""
    kw = inp.codes["method"].index.get(KEYWORD)
    jd = inp.codes["method"].index.get(JUDGE)
    names = inp.codes["judge"].names
    common = sorted(set(ga) & set(gb))
    judged = [g for g in common if g[0] == jd]
    keyword = [g for g in common if g[0] == kw]
    if verdict == KEYWORD:
        return keyword, None
    if verdict == JUDGE:
        return judged, None
    if judged:
        return judged, None
    ja = sorted({names[j] for m, j in ga if m == jd})
    jb = sorted({names[j] for m, j in gb if m == jd})
    if (ja or jb) and keyword:
        return keyword, (f"judges differ (A: {', '.join(ja) or 'none'}; B: {', '.join(jb) or 'none'}): "
                         f"compared on keyword verdicts")
    return keyword, None


def compare(inp: Inputs, pairs: list[tuple[str, str]], verdict: str = "auto") -> Comparison:
    """Every asked pair on every set both have verdicts for (see the module docstring)."""
    codes = inp.codes
    out = Comparison(pd.DataFrame(columns=COLUMNS))
    rows: list[dict] = []
    for a, b in pairs:
        ca, cb = codes["model"].index[a], codes["model"].index[b]
        compared = 0
        for s in sorted(pd.unique(inp.data["set"])):
            set_name = codes["set"].names[s]
            ga, gb = _verdict_groups(inp, s, ca), _verdict_groups(inp, s, cb)
            if not ga or not gb:
                if ga or gb:
                    out.notes.append(f"{a} vs {b} on {set_name}: not compared "
                                     f"({b if ga else a} has no scored rows on this set)")
                continue
            chosen, note = _choose(inp, ga, gb, verdict)
            if note:
                out.notes.append(f"{a} vs {b} on {set_name}: {note}")
            if not chosen:
                def describe(gs):
                    return ", ".join(codes["judge"].names[j] or codes["method"].names[m] for m, j in gs)
                out.notes.append(f"{a} vs {b} on {set_name}: not compared: no verdicts of the same "
                                 f"kind and judge (A: {describe(ga)}; B: {describe(gb)})")
                continue
            for method, judge in chosen:
                fa, fb = (prompt_rows(inp, s, c, method, judge) for c in (ca, cb))
                pa, pb = fa[fa["n"] > 0], fb[fb["n"] > 0]
                both = pa[["k", "n", "category"]].add_suffix("_a").join(
                    pb[["k", "n", "category"]].add_suffix("_b"), how="inner")
                rows_both = fa.add_suffix("_a").join(fb.drop(columns="category").add_suffix("_b"), how="inner")
                unpaired_a, unpaired_b = len(pa) - len(both), len(pb) - len(both)
                judge_name = codes["judge"].names[judge] or KEYWORD
                if unpaired_a or unpaired_b:
                    out.notes.append(f"{a} vs {b} on {set_name} ({judge_name}): {len(both)} prompts "
                                     f"scored by both compared; left out: {unpaired_a} scored by "
                                     f"{a} only, {unpaired_b} by {b} only")
                if rows_both.empty:
                    continue
                out.notes += _missing_notes(rows_both, f"{a} vs {b} on {set_name} ({judge_name})", a, b)
                if (both["n_a"] > 1).any() or (both["n_b"] > 1).any():
                    out.notes.append(f"{a} vs {b} on {set_name} ({judge_name}): compared prompt by prompt, "
                                     f"each prompt's value its refusal share over its samples ({a}: "
                                     f"{_samples_text(both['n_a'])}, {b}: {_samples_text(both['n_b'])} per "
                                     f"prompt); a prompt differs when its share does")
                compared += len(rows_both)
                rows += _rows(both, rows_both, set_name, a, b, judge_name, unpaired_a, unpaired_b, codes)
                out.flips.append({"set": set_name, "model_a": a, "model_b": b, "judge": judge_name,
                                  "set_code": s, "method": method, "judge_code": judge,
                                  "codes": (ca, cb), "pairs": both})
        if compared == 0:
            raise UsageError(f"--compare {a} {b}: the two models have no prompt in common that both "
                             f"scored (same set, same kind of verdict and judge); nothing to compare")
    if rows:
        table = pd.DataFrame(rows).reindex(columns=COLUMNS)
        for c in ("n", "samples_a", "samples_b", "a_only", "b_only", "unpaired_a", "unpaired_b", "no_verdict_a",
                  "errors_a", "no_verdict_b", "errors_b"):
            table[c] = table[c].astype("Int64")
        table["p_holm_run"] = holm_across_run(table)
        out.table = table
    return out


def _samples_text(n: pd.Series) -> str:
    low, high = int(n.min()), int(n.max())
    return f"{high} sample{'s' if high > 1 else ''}" if low == high else f"{low} to {high} samples"


def _missing(part, side: str) -> tuple[int, int, int]:
    """(rows without a verdict and no error, rows failed with an error, all rows) of one side;
    ``part``: a table or a dict of its columns."""
    u, e = int(part[f"u_{side}"].sum()), int(part[f"e_{side}"].sum())
    return u, e, u + e + int(part[f"n_{side}"].sum())


def _bounded(part) -> bool:
    """Whether either side has more than NO_VERDICT_SHARE of its rows without a verdict (errors counted)."""
    return any(u + e > stats.NO_VERDICT_SHARE * r for u, e, r in (_missing(part, x) for x in ("a", "b")))


def _missing_notes(rows_both: pd.DataFrame, where: str, a: str, b: str) -> list[str]:
    """What the rows without a verdict (unparsed, refused by the judge, failed) do to the comparison."""
    notes = []
    for who, side in ((a, "a"), (b, "b")):
        u, e, r = _missing(rows_both, side)
        if not u + e:
            continue
        what = f"{who} has no verdict on {u + e} of {r} rows ({u} unparsed or not judged, {e} failed with an error)"
        if u + e > stats.NO_VERDICT_SHARE * r:
            notes.append(f"{where}: {what}: more than {100 * stats.NO_VERDICT_SHARE:.0f}%, so no p-value and no "
                         f"rates: worst-case bounds on the difference only (diff_bound_low, diff_bound_high: every "
                         f"such row counted as answered, then as refused), since the missing verdicts could lie "
                         f"either way")
        else:
            notes.append(f"{where}: {what}: the p-value and intervals cover the decided rows only")
    return notes


def _rows(both: pd.DataFrame, rows_both: pd.DataFrame, set_name: str, a: str, b: str, judge: str,
          unpaired_a: int, unpaired_b: int, codes) -> list[dict]:
    sampled = bool((both["n_a"] > 1).any() or (both["n_b"] > 1).any())
    cats = codes["category"].names
    # the cells' columns as numpy arrays, a category's rows taken by mask (a pair has a few cells of
    # a few prompts each, and pandas' cost per column access was most of a comparison's time)
    every = {c: rows_both[c].to_numpy() for c in rows_both.columns}
    scored = {c: both[c].to_numpy() for c in ("k_a", "n_a", "k_b", "n_b", "category_a")}
    groups = [(ALL, None)] + sorted(((cats[c], c) for c in set(every["category_a"].tolist())), key=lambda g: g[0])
    rows = []
    for name, code in groups:
        part = every if code is None else {c: v[every["category_a"] == code] for c, v in every.items()}
        # the prompts of the cell both models scored (``both`` is a subset of ``rows_both``)
        decided = scored if code is None else {c: v[scored["category_a"] == code] for c, v in scored.items()}
        row = _bounds(part) if _bounded(part) or not len(decided["k_a"]) else _stats(decided, sampled)
        ua, ea, _ = _missing(part, "a")
        ub, eb, _ = _missing(part, "b")
        rows.append({"set": set_name, "category": name, "model_a": a, "model_b": b, "judge": judge,
                     "unpaired_a": unpaired_a if name == ALL else None,
                     "unpaired_b": unpaired_b if name == ALL else None, "no_verdict_a": ua, "errors_a": ea,
                     "no_verdict_b": ub, "errors_b": eb, **row})
    adjusted = holm([r["p_value"] for r in rows[1:]])
    rows[0]["p_holm"] = math.nan
    for r, p in zip(rows[1:], adjusted):
        r["p_holm"] = p
    return rows


def _bounds(part: dict[str, np.ndarray]) -> dict:
    """A cell where a side has too many rows without a verdict: bounds on the difference, no p-value."""
    arrays = [np.asarray(part[f"{c}_{x}"], dtype=float) for x in ("a", "b") for c in ("k", "u", "n")]
    arrays[1] = arrays[1] + np.asarray(part["e_a"], dtype=float)
    arrays[4] = arrays[4] + np.asarray(part["e_b"], dtype=float)
    low, high = stats.difference_bounds(*arrays)
    rows_a, rows_b = (part[f"n_{x}"] + part[f"u_{x}"] + part[f"e_{x}"] for x in ("a", "b"))
    nan = math.nan
    return {"n": len(part["k_a"]), "samples_a": int(rows_a.max()), "samples_b": int(rows_b.max()), "rate_a": nan,
            "rate_b": nan, "diff": nan, "ci_low": nan, "ci_high": nan, "ci_flag": stats.BOUNDS_ONLY,
            "diff_bound_low": low, "diff_bound_high": high, "a_only": None, "b_only": None, "odds_ratio": nan,
            "or_ci_low": nan, "or_ci_high": nan, "p_value": nan, "p_midp": nan, "p_b_more": nan, "test": "",
            "interval": BOUNDS}


def _stats(part: dict[str, np.ndarray], sampled: bool) -> dict:
    """The comparison of one cell's decided prompts (``k_a, n_a, k_b, n_b`` per prompt): rates, the
    difference, the exact conditional test (McNemar's exact test with one sample each) and the
    intervals inverted from it (:mod:`orbench.analysis.conditional`)."""
    ka, na, kb, nb = (np.asarray(part[c], dtype=float) for c in ("k_a", "n_a", "k_b", "n_b"))
    sa, sb = ka / na, kb / nb
    test = conditional_test(ka, na, kb, nb)
    flag = "" if test.varying else stats.NOT_COMPUTABLE
    row = {"n": len(ka), "samples_a": int(na.max()), "samples_b": int(nb.max()), "rate_a": float(sa.mean()),
           "rate_b": float(sb.mean()), "diff": float(sb.mean() - sa.mean()), "ci_low": test.diff_low,
           "ci_high": test.diff_high, "ci_flag": flag, "diff_bound_low": math.nan, "diff_bound_high": math.nan,
           "a_only": int((sa > sb).sum()), "b_only": int((sb > sa).sum()), "odds_ratio": test.odds_ratio,
           "or_ci_low": test.or_low if test.varying else math.nan,
           "or_ci_high": test.or_high if test.varying else math.nan, "p_value": test.p_value,
           "p_midp": test.p_midp, "p_b_more": test.p_greater, "test": CONDITIONAL, "interval": CONDITIONAL}
    if not sampled:  # the same test: statsmodels' McNemar value (exact below 1e-300)
        row.update(p_value=mcnemar_exact(row["a_only"], row["b_only"]),
                   p_midp=mcnemar_midp(row["a_only"], row["b_only"]), test=MCNEMAR)
    return row


def holm_across_run(table: pd.DataFrame) -> pd.Series:
    """Holm across every comparison of the run at the same level: the ``all`` rows of every pair and
    set together, and the category rows together (``p_holm_run``)."""
    out = pd.Series(np.nan, index=table.index)
    whole = table["category"] == ALL
    for mask in (whole, ~whole):
        if mask.any():
            out[mask] = holm(table.loc[mask, "p_value"].tolist())
    return out


# ---------------------------------------------------------------- repeated samples, one model

def sample_stats(inp: Inputs) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per (set, model, judge) with more than one sample of some prompt: the rate over all
    samples with its prompt-level interval (:func:`orbench.analysis.stats.cluster_share`) and the
    share of prompts whose samples disagree; and the per-prompt refusal shares (prompt as its
    hash; see :func:`with_texts`)."""
    d = inp.data
    if d.empty or "sample" not in d.columns or not d["sample"].any():
        # No sample index: ``load`` has already refused a prompt repeated within a (set, model,
        # method, judge) group, so no prompt has more than one sample (and grouping 2.4M rows by
        # prompt only to find that out is the report's costliest step at scale).
        return pd.DataFrame(columns=SAMPLE_COLUMNS), pd.DataFrame(columns=SHARE_COLUMNS)
    read = d  # an error row is a row without a verdict, as an unparsed one is
    read = read.assign(k=(read["status"] == SCORED) & (read["rejected"] == 1), n=read["status"] == SCORED,
                       u=read["status"] != SCORED)
    counts = read.groupby(["set", "model", "method", "judge", "prompt"], sort=False).agg(
        k=("k", "sum"), n=("n", "sum"), u=("u", "sum"), category=("category", "first")).reset_index()
    table, shares = [], []

    def names(kind, v):
        return inp.codes[kind].names[v]
    for (s, m, me, j), part in counts.groupby(["set", "model", "method", "judge"], sort=True):
        if (part["n"] + part["u"]).max() <= 1:
            continue
        none = int(part["u"].sum())
        bounded = none > stats.NO_VERDICT_SHARE * (part["n"].sum() + none)
        filled = part.copy()
        part = part[part["n"] > 0]
        k, n = part["k"].to_numpy(float), part["n"].to_numpy(float)
        est = stats.cluster_share(k, n)
        bounds = (math.nan, math.nan)
        if bounded:  # too many rows without a verdict: no rate, only its bounds (stats.rate_bounds, prompt-level)
            fk, fu, fn = (filled[c].to_numpy(float) for c in ("k", "u", "n"))
            bounds = (stats.cluster_limits(fk, fn + fu)[0], stats.cluster_limits(fk + fu, fn + fu)[1])
            est = stats.Estimate(math.nan, math.nan, math.nan, BOUNDS, (stats.BOUNDS_ONLY,))
        elif none:  # a few: the rate over the decided rows, its interval widened to every value they could give
            fk, fu, fn = (filled[c].to_numpy(float) for c in ("k", "u", "n"))
            low = min(est.low, stats.cluster_limits(fk, fn + fu)[0])
            high = max(est.high, stats.cluster_limits(fk + fu, fn + fu)[1])
            est = stats.Estimate(est.value, low, high, est.method, est.flags + (stats.WIDENED_MISSING,), est.n,
                                 est.n_eff)
        multi = part["n"] > 1
        flips = int((multi & (part["k"] > 0) & (part["k"] < part["n"])).sum())
        judge = names("judge", j) or names("method", me)
        table.append({"set": names("set", s), "model": names("model", m), "judge": judge,
                      "samples": int((filled["n"] + filled["u"]).max()), "prompts": len(part), "rows": int(n.sum()),
                      "rate": est.value, "ci_low": est.low, "ci_high": est.high, "n_eff": est.n_eff,
                      "ci_method": est.method, "ci_flag": est.flag, "rate_bound_low": bounds[0],
                      "rate_bound_high": bounds[1], "no_verdict": none,
                      "flip_share": flips / int(multi.sum()) if multi.any() else math.nan,
                      "flip_prompts": flips})
        shares.append(pd.DataFrame({
            "set": names("set", s), "model": names("model", m), "judge": judge,
            "category": [names("category", c) for c in part["category"]], "prompt": part["prompt"].to_numpy(),
            "samples": part["n"].to_numpy(), "refusals": part["k"].to_numpy(), "share": k / n,
            "_file_model": m, "_set": s}))
    share = pd.concat(shares, ignore_index=True) if shares else pd.DataFrame(columns=SHARE_COLUMNS)
    return pd.DataFrame(table, columns=SAMPLE_COLUMNS), share


# ---------------------------------------------------------------- texts (re-read on demand)

def texts(inp: Inputs, set_code: int, model_code: int, hashes: set) -> dict:
    """prompt hash -> (prompt text, first response) for one set and model, read again from the
    input files that hold its rows (the verdict table keeps only hashes)."""
    d = inp.data
    files = sorted(pd.unique(d.loc[(d["set"] == set_code) & (d["model"] == model_code), "file"]))
    model = inp.codes["model"].names[model_code]
    wanted_keys = np.fromiter(hashes, dtype=np.uint64, count=len(hashes))
    found: dict = {}
    for f in files:
        path = inp.files[f]
        frame = read_results(path)
        entry = inp.provenance[f] if f < len(inp.provenance) else {}
        keys = prompt_hash(frame["prompt"])
        wanted = np.isin(keys, wanted_keys)
        if "model" in names(frame) and len(entry.get("models", [])) > 1:
            wanted &= per_value(frame["model"], lambda v: str(v).strip() == model, dtype=bool)
        rows = np.flatnonzero(wanted)
        responses = columns.texts(frame["response"], rows) if "response" in names(frame) else [""] * len(rows)
        for key, prompt, resp in zip(keys[rows], columns.texts(frame["prompt"], rows), responses):
            found.setdefault(key, (prompt, resp))
        if len(found) == len(hashes):
            break
    return found


def flipped_examples(inp: Inputs, comp: Comparison, limit: int = 10) -> list[dict]:
    """Per compared (set, pair, judge): up to ``limit`` prompts of each flip direction, with the
    prompt text and both models' responses."""
    out = []
    for f in comp.flips:
        pairs = f["pairs"]
        sa, sb = pairs["k_a"] / pairs["n_a"], pairs["k_b"] / pairs["n_b"]
        a_only = pairs[sa > sb].sort_index().head(limit)
        b_only = pairs[sb > sa].sort_index().head(limit)
        wanted = set(a_only.index) | set(b_only.index)
        ta = texts(inp, f["set_code"], f["codes"][0], wanted) if wanted else {}
        tb = texts(inp, f["set_code"], f["codes"][1], wanted) if wanted else {}
        cats = inp.codes["category"].names
        items = []
        for direction, part in (("a_only", a_only), ("b_only", b_only)):
            for key, r in part.iterrows():
                items.append({"direction": direction, "category": cats[r["category_a"]],
                              "prompt": ta.get(key, tb.get(key, ("", "")))[0],
                              "response_a": ta.get(key, ("", ""))[1], "response_b": tb.get(key, ("", ""))[1],
                              "share_a": r["k_a"] / r["n_a"], "share_b": r["k_b"] / r["n_b"]})
        out.append({k: f[k] for k in ("set", "model_a", "model_b", "judge")} | {
            "a_only": int((sa > sb).sum()), "b_only": int((sb > sa).sum()), "items": items})
    return out


def with_texts(inp: Inputs, shares: pd.DataFrame) -> pd.DataFrame:
    """The per-prompt share table with the prompt text in place of its hash."""
    if shares.empty:
        return shares.reindex(columns=SHARE_COLUMNS)
    parts = []
    for (s, m), part in shares.groupby(["_set", "_file_model"], sort=False):
        found = texts(inp, s, m, set(part["prompt"]))
        parts.append(part.assign(prompt=[found.get(h, ("", ""))[0] for h in part["prompt"]]))
    return pd.concat(parts, ignore_index=True).reindex(columns=SHARE_COLUMNS)
