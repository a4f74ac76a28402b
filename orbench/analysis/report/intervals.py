"""The report's statistics beyond one Clopper-Pearson interval per cell: prompts as the unit, rows
without a verdict, ranks, the published rows.

* **Repeated samples** (stage 4 ``--samples K``): every interval of a sampled group, per set and
  per category, for the rate and the full-refusal rate, is the prompt-clustered interval
  (:func:`orbench.analysis.stats.cluster_share`), and ``prompts`` (distinct prompts scored) is
  the n the heatmap greys small cells by. Without samples a prompt is a row and nothing changes.
* **Rows without a verdict** (unparsed, the judge refusing to judge, or failed with an error: all
  count): where more than 5% of a cell's rows have none, the cell has no point rate: its rate
  columns stay empty and ``rate_bound_low`` / ``rate_bound_high`` give the worst-case bounds; where
  some but 5% or fewer have none, the rate stays over the decided rows and its interval is widened
  to those bounds (``ci_flag`` ``widened_missing``), so it holds whatever the missing verdicts are
  (:func:`no_point_rate`).
* **Ranks**: each ranked leaderboard row gets a 95% interval of its rank by balanced accuracy,
  from 2,000 draws in which your models' rates are bootstrapped over prompts (each set's prompts
  resampled, with their samples) and the published rows, which have only a rounded rate and n,
  are drawn parametrically (``Binomial(n, rate) / n``); the rank of each draw, percentiles over
  draws (:func:`orbench.analysis.stats.rank_interval`).
* **The published rows** get Clopper-Pearson intervals on their rate and n (the rate rounded as the paper
  gives it: the interval is approximate to that rounding), and the balanced accuracy's from them.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from orbench.analysis import stats
from orbench.analysis.report.inputs import ERROR, HARD, NO_VERDICT, REFUSED_TO_JUDGE, SCORED
from orbench.analysis.report.inputs import TOX as TOXIC
from orbench.run.tables import row_dicts

RANK_DRAWS, RANK_SEED = 2000, 20240601
BOOTSTRAP_RANKS = "bootstrap over prompts"
PARAMETRIC_RANKS = "parametric binomial draw at the published rate and n"


def prompt_level(data: pd.DataFrame, gid: np.ndarray, out: pd.DataFrame) -> None:
    """Add ``prompts``, ``ci_method`` and ``ci_flag`` to a group table (row i = group i of ``gid``)
    and, for groups with repeated samples, replace the rate's and the full rate's Clopper-Pearson
    intervals by the prompt-clustered ones, in place. Needs ``has_kind`` (full rates exist) in ``out``."""
    out["prompts"] = out["scored"].to_numpy()
    out["ci_method"] = np.where(out["scored"].to_numpy() > 0, "clopper_pearson", "")
    out["ci_flag"] = ""
    if data.empty or "sample" not in data.columns or not data["sample"].any():
        return
    scored = (data["status"] == SCORED).to_numpy()
    frame = pd.DataFrame({"g": gid[scored], "p": data["prompt"].to_numpy()[scored],
                          "r": data["rejected"].to_numpy()[scored].astype(float),
                          "f": (data["rejected"].to_numpy()[scored] == 1) & data["partial"].to_numpy()[scored]})
    per = frame.groupby(["g", "p"], sort=False).agg(k=("r", "sum"), n=("r", "size"), part=("f", "sum"))
    prompts = per.groupby(level=0).size()
    out.loc[prompts.index, "prompts"] = prompts.to_numpy()
    for g, part in per.groupby(level=0, sort=False):
        if part["n"].max() <= 1:
            continue
        k, n = part["k"].to_numpy(float), part["n"].to_numpy(float)
        est = stats.cluster_share(k, n)
        out.loc[g, ["ci_low", "ci_high", "ci_method", "ci_flag"]] = [est.low, est.high, est.method, est.flag]
        if out.at[g, "has_kind"]:
            full = stats.cluster_share(k - part["part"].to_numpy(float), n)
            out.loc[g, ["full_ci_low", "full_ci_high"]] = [full.low, full.high]


def no_point_rate(data: pd.DataFrame, gid: np.ndarray, out: pd.DataFrame) -> None:
    """Rows without a verdict (unparsed, the judge refusing to judge, an empty response, or failed
    with an error) in a group: its worst-case bounds, the rate with every such row counted as
    answered, then as refused, each the outer limit of its Clopper-Pearson interval
    (:func:`orbench.analysis.stats.rate_bounds`; prompt-level with repeated samples:
    :func:`orbench.analysis.stats.cluster_limits` of each filled-in table), for the rate and the
    full rate. Where more than :data:`~orbench.analysis.stats.NO_VERDICT_SHARE` of the rows have
    none, empty the rate columns and give ``rate_bound_low`` / ``rate_bound_high`` (``ci_flag``
    ``bounds_only``). Where some but no more have none, keep the rate over the decided rows and
    widen its interval to hold the bounds (``ci_flag`` ``widened_missing``): the missing rows may
    be anything, so only an interval that covers every value they could give keeps its 95%
    without a premise on them. In place; needs ``ci_method`` (``prompt_level`` first)."""
    none = (out["unparsed"] + out["refused_to_judge"] + out["errors"]).to_numpy(dtype=float)
    read = out["rows"].to_numpy(dtype=float)
    bounded = (read > 0) & (none > stats.NO_VERDICT_SHARE * read)
    widened = (read > 0) & (none > 0) & ~bounded
    out["rate_bound_low"], out["rate_bound_high"] = np.nan, np.nan
    if not (bounded | widened).any():
        return
    kind = out["has_kind"].to_numpy(bool)
    k = out["rejections"].to_numpy(float)
    full_k = k - out["partial_rejections"].to_numpy(float)
    low, high = stats.rate_bounds(k, out["scored"].to_numpy(float), none)
    full_low, full_high = stats.rate_bounds(full_k, out["scored"].to_numpy(float), none)
    sampled = (bounded | widened) & (out["ci_method"].to_numpy() == "cluster_clopper_pearson")
    if sampled.any():
        status = data["status"].to_numpy()
        keep = np.isin(gid, np.flatnonzero(sampled)) & np.isin(status, [SCORED, NO_VERDICT, REFUSED_TO_JUDGE, ERROR])
        refused = (status[keep] == SCORED) & (data["rejected"].to_numpy()[keep] == 1)
        frame = pd.DataFrame({"g": gid[keep], "p": data["prompt"].to_numpy()[keep], "k": refused.astype(float),
                              "f": (refused & ~data["partial"].to_numpy()[keep]).astype(float),
                              "u": (status[keep] != SCORED).astype(float)})
        per = frame.groupby(["g", "p"], sort=False).agg(k=("k", "sum"), f=("f", "sum"), u=("u", "sum"),
                                                        n=("k", "size"))
        for g, part in per.groupby(level=0, sort=False):
            k_, f_, u_, n_ = (part[c].to_numpy(float) for c in ("k", "f", "u", "n"))
            low[g], high[g] = stats.cluster_limits(k_, n_)[0], stats.cluster_limits(k_ + u_, n_)[1]
            full_low[g], full_high[g] = stats.cluster_limits(f_, n_)[0], stats.cluster_limits(f_ + u_, n_)[1]
    if widened.any():
        for col, lo, hi, rows in (("ci", low, high, widened), ("full_ci", full_low, full_high, widened & kind)):
            out.loc[rows, f"{col}_low"] = np.fmin(out[f"{col}_low"].to_numpy(float), lo)[rows]
            out.loc[rows, f"{col}_high"] = np.fmax(out[f"{col}_high"].to_numpy(float), hi)[rows]
        flags = out.loc[widened, "ci_flag"].astype(str)
        out.loc[widened, "ci_flag"] = [";".join(x for x in (f, stats.WIDENED_MISSING) if x) for f in flags]
    out.loc[bounded, "rate_bound_low"] = low[bounded]
    out.loc[bounded, "rate_bound_high"] = high[bounded]
    for c in ("rate", "ci_low", "ci_high", "full_rate", "full_ci_low", "full_ci_high"):
        out.loc[bounded, c] = np.nan
    out.loc[bounded, "ci_method"] = "worst_case_clopper_pearson"
    out.loc[bounded, "ci_flag"] = stats.BOUNDS_ONLY


def entry_estimate(st: dict) -> stats.Estimate:
    """A leaderboard entry's rate on one set as an Estimate (its interval as the summary has it)."""
    return stats.Estimate(float(st["rate"]), float(st["ci_low"]), float(st["ci_high"]), str(st.get("ci_method", "")))


def _prompt_counts(inp, set_name: str, model: str, method: str, judge: str) -> tuple[np.ndarray, np.ndarray]:
    """Per prompt of one headline group: refusals and scored samples."""
    codes, d = inp.codes, inp.data
    try:
        want = (codes["set"].index[set_name], codes["model"].index[model], codes["method"].index[method],
                codes["judge"].index[judge])
    except KeyError:
        return np.zeros(0), np.zeros(0)
    rows = d[(d["set"] == want[0]) & (d["model"] == want[1]) & (d["method"] == want[2]) & (d["judge"] == want[3])
             & (d["status"] == SCORED)]
    g = rows.groupby("prompt", sort=False)["rejected"]
    return g.sum().to_numpy(float), g.size().to_numpy(float)


def _bootstrap_rates(k: np.ndarray, n: np.ndarray, rng: np.random.Generator, draws: int) -> np.ndarray:
    """The rate over prompts resampled with replacement (with all their samples), ``draws`` times.

    One verdict per prompt: the number of refusals among m resampled prompts is exactly
    Binomial(m, k/m), drawn as such."""
    m = len(k)
    if np.all(n == 1):
        return rng.binomial(m, k.sum() / m, size=draws) / m
    out = np.empty(draws)
    step = max(1, 2_000_000 // max(m, 1))  # a few million indices at a time
    for start in range(0, draws, step):
        idx = rng.integers(0, m, size=(min(step, draws - start), m))
        out[start:start + len(idx)] = k[idx].sum(axis=1) / n[idx].sum(axis=1)
    return out


def leaderboard_intervals(board: pd.DataFrame, ents: dict, inp, sizes: dict[str, int]) -> pd.DataFrame:
    """The leaderboard with intervals for the published rows and a 95% interval of every ranked
    row's rank (see the module docstring)."""
    board = board.copy()
    published = (board["source"] == "published").to_numpy()
    for s in (HARD, TOXIC):
        if f"{s}_rate_pct" not in board.columns:
            continue
        rate = board[f"{s}_rate_pct"].to_numpy(dtype=float, na_value=np.nan)
        n = board[f"{s}_scored"].to_numpy(dtype=float, na_value=np.nan)
        rows = published & np.isfinite(rate) & np.isfinite(n)
        # the paper gives a rounded rate and n: k is the whole count nearest to rate x n
        low, high = stats.clopper_pearson_arrays(np.round(rate[rows] / 100 * n[rows]), n[rows])
        board.loc[rows, f"{s}_ci_low_pct"] = 100 * low
        board.loc[rows, f"{s}_ci_high_pct"] = 100 * high
    if {f"{HARD}_ci_low_pct", f"{TOXIC}_ci_low_pct"} <= set(board.columns):
        pct = {c: board[c].to_numpy(dtype=float, na_value=np.nan) / 100 for s in (HARD, TOXIC)
               for c in (f"{s}_rate_pct", f"{s}_ci_low_pct", f"{s}_ci_high_pct")}
        estimate = lambda at, s: stats.Estimate(pct[f"{s}_rate_pct"][at], pct[f"{s}_ci_low_pct"][at],  # noqa: E731 (a one-line helper used just below)
                                                pct[f"{s}_ci_high_pct"][at], "clopper_pearson")
        bounds = {}
        for at in np.flatnonzero(published):
            ba = stats.balanced_accuracy(estimate(at, TOXIC), estimate(at, HARD))
            if math.isfinite(ba.value):
                bounds[board.index[at]] = (100 * ba.low, 100 * ba.high)
        if bounds:
            board.loc[list(bounds), ["balanced_accuracy_ci_low_pct", "balanced_accuracy_ci_high_pct"]] = \
                np.array(list(bounds.values()))
    return _rank_intervals(board, ents, inp)


def _rank_intervals(board: pd.DataFrame, ents: dict, inp) -> pd.DataFrame:
    """The board with ``rank_ci_low``, ``rank_ci_high`` and ``rank_method`` after its rank (the
    module docstring): made as arrays, then inserted."""
    low, high = pd.array([None] * len(board), dtype="Int64"), pd.array([None] * len(board), dtype="Int64")
    method = np.full(len(board), "", dtype=object)
    rates = [f"{HARD}_rate_pct", f"{TOXIC}_rate_pct"]
    ranked = np.zeros(len(board), dtype=bool)
    if "rank" in board.columns and set(rates) <= set(board.columns):
        ranked = (board["rank"].notna() & board[rates[0]].notna() & board[rates[1]].notna()).to_numpy()
    if ranked.sum() >= 2:
        rng = np.random.default_rng(RANK_SEED)
        scores = np.full((RANK_DRAWS, ranked.sum()), np.nan)
        rows = board.iloc[np.flatnonzero(ranked)][["source", "model", "judge", f"{HARD}_scored", f"{TOXIC}_scored",
                                                    *rates]]
        for j, r in enumerate(row_dicts(rows)):
            draws = {}
            for s in (HARD, TOXIC):
                if r["source"] == "published":
                    n = int(r[f"{s}_scored"])
                    draws[s] = rng.binomial(n, float(r[f"{s}_rate_pct"]) / 100, size=RANK_DRAWS) / n
                else:
                    st = ents[(r["model"], r["judge"])][s]
                    k, n = _prompt_counts(inp, s, r["model"], st["method"], st["judge"])
                    draws[s] = _bootstrap_rates(k, n, rng, RANK_DRAWS)
            scores[:, j] = (draws[TOXIC] + 1 - draws[HARD]) / 2
        method[ranked] = np.where(rows["source"].to_numpy() == "published", PARAMETRIC_RANKS, BOOTSTRAP_RANKS)
        low[ranked], high[ranked] = stats.rank_interval(scores)
    at = list(board.columns).index("rank") + 1 if "rank" in board.columns else 0
    for j, (name, value) in enumerate((("rank_ci_low", low), ("rank_ci_high", high), ("rank_method", method))):
        board.insert(at + j, name, value)
    return board
