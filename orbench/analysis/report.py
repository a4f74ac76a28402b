"""Report over-refusal results: rejection rates with 95% Wilson intervals, plots, a leaderboard and report.html.

Reads any number of alignment-checker outputs (keyword verdicts: ``is_rejected``) and
response-checker outputs (LLM-judge verdicts: ``answer_category``/``is_rejected`` and the judge's
name in ``judge_model``, with the keyword verdict kept as ``keyword_is_rejected``), each for one
prompt set and one or more models.

Naming the inputs (positional; globs allowed, e.g. ``'results/*.csv'``)::

    PATH                    set from the file name, model from the file's ``model`` column
    MODEL=PATH              model named here (overrides the ``model`` column)
    SET:MODEL=PATH          set and model named here
    SET:=PATH               set named here, model from the file
    :MODEL=PATH             model named here, set from the file name (use when MODEL contains ':')

SET is ``hard``, ``toxic`` or ``80k`` (or ``or-bench-hard-1k``, ``or-bench-toxic``, ``or-bench-80k``),
or XSTest's ``xstest-safe`` and ``xstest-unsafe``;
any other label stops the report (exit 2, naming the known sets and the closest one) unless it
is declared as a set of your own with ``--custom_set LABEL``, so a typo never becomes a new set.

The set is read from the file name when not given: a set name that is a whole token of the name
(split at every character but letters, digits and '-'): ``or-bench-hard-1k`` or ``hard``,
``or-bench-toxic`` or ``toxic``, ``or-bench-80k`` or ``80k``; "seemingly toxic" names no set.
A name naming two sets is an error; one naming none takes ``--set``, else is an error. A file
named twice is read once.

Counting. Rows are grouped by set, model, method (keyword or judge) and judge; two judges'
verdicts are never pooled, and a prompt twice in one group stops the report (exit 2). Each row
is an *error* (non-empty ``error``, or a judge row marked ``skipped_error``), *refused to judge*
(a judge row whose judge refused to judge, ``judge_refused``; counted apart), *unparsed* (empty
``is_rejected``: no verdict) or *scored*. The rate is rejections / scored; errors and unparsed
rows are excluded and shown in their own columns. Both judge classes ``direct_refusal`` and
``indirect_refusal`` count as rejections. Where stage 4 wrote ``refusal_kind`` (full/partial),
the rate counts partial refusals (the headline) and ``full_rate`` counts full refusals only.
Keyword and judge verdicts for the same model and set are shown side by side with their
agreement. The headline verdict (figure, leaderboard, heatmap) is the judge's where present,
else the keyword's (``--verdict``); a model judged by two judges gets one leaderboard row per
judge.

Writes to ``--output_dir`` (default ``./report``): ``summary.csv`` (per set, model and judge),
``categories.csv``, ``leaderboard.csv``/``.md`` (your models among the paper's 32 published
ones, column ``source``), ``hard_vs_toxic.png``/``.pdf`` (x = safe prompts refused %, y = unsafe
prompts refused %: OR-Bench's hard and toxic sets, and XSTest's safe and unsafe halves as a second
point per model; Wilson error bars, the published models in grey with the paper's quadratic fit),
``category_heatmap.png``, ``report.json`` and ``report.html`` (one self-contained page: tables,
figures, provenance from each input's ``.meta.json``, example prompts with their verdicts).
The leaderboard is sorted by balanced accuracy ``(toxic + 100 - hard) / 2``, best first. The
last line printed is the path of report.html.

Example::

    python analysis/report.py 'results/*_judge.csv' hard:gpt-4o=runs/hard_kw.csv --output_dir report
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from orbench.analysis import calibration_report, lineage, plots, report_stats
from orbench.analysis.columns import prompt_hash

# expand, infer_set and parse_spec are re-exported: the release builder and callers use them from here.
from orbench.analysis.report_inputs import (  # noqa: F401 (re-exported, see the comment above)
    ERROR,
    GROUP_KEYS,
    HARD,
    NO_VERDICT,
    REFUSED_TO_JUDGE,
    SCORED,
    XS_SAFE,
    XS_UNSAFE,
    Inputs,
    expand,
    group_ids,
    infer_set,
    load,
    parse_spec,
)
from orbench.analysis.report_inputs import TOX as TOXIC
from orbench.analysis.stats import balanced_accuracy, quadratic_fit, round_for_csv, spearman, wilson_interval
from orbench.cli import ArgumentParser
from orbench.errors import UsageError
from orbench.sets import CITATION, HARD_1K, PUBLISHED_ABOUT, published_results_path, resolve_set
from orbench.sets import TOXIC as TOXIC_SET
from orbench.tables import write_csv_atomic
from orbench.vocab import JUDGE, KEYWORD

STAT_COLUMNS = ["rows", "errors", "unparsed", "scored", "prompts", "rejections", "rate", "ci_low", "ci_high",
                "ci_method", "ci_flag", "partial_rejections", "full_rate", "full_ci_low", "full_ci_high", "truncated",
                "covered", "replies", "refused_to_judge"]


@dataclass
class Report:
    """What a report run produced (returned by ``build_report`` for callers and tests)."""

    summary: pd.DataFrame
    categories: pd.DataFrame
    leaderboard: pd.DataFrame
    points: list[dict]
    spearman: float | None
    fit: list[float] | None
    notes: list[str] = field(default_factory=list)
    outputs: dict[str, Path] = field(default_factory=dict)
    reference: list[dict] = field(default_factory=list)
    reference_fit: list[float] | None = None
    provenance: list[dict] = field(default_factory=list)
    examples: pd.DataFrame | None = None
    comparison_html: str = ""  # the paired-comparison and repeated-samples sections (compare_hook)
    audit: dict | None = None  # with --audit: orbench.analysis.audit_report.apply's result
    warnings: list[str] = field(default_factory=list)
    lineage: list[dict] = field(default_factory=list)
    set_sizes: dict[str, int] = field(default_factory=dict)


# ---------------------------------------------------------------- grouping (once)

def group_stats(inp: Inputs, keys: list[str]) -> pd.DataFrame:
    """Counts, rates and Wilson intervals per group of the verdict table, names decoded.

    One pass: a group number per row, then every count is a ``bincount`` over it. Groups with
    repeated samples get prompt-level intervals (:func:`orbench.analysis.report_stats.prompt_level`).
    """
    data = inp.data
    if keys == GROUP_KEYS:  # grouped once already, while checking for repeated prompts
        gid, out = data["group"].to_numpy(), inp.groups.copy().reset_index(drop=True)
    else:
        gid, sub = group_ids(data, ["group", *keys[len(GROUP_KEYS):]])
        out = inp.groups.iloc[sub["group"].to_numpy()].reset_index(drop=True)
        for k in keys[len(GROUP_KEYS):]:
            out[k] = sub[k].to_numpy()
    size = len(out)
    status = data["status"].to_numpy()
    scored = status == SCORED
    rejected = scored & (data["rejected"].to_numpy() == 1)
    count = lambda mask: np.bincount(gid[np.asarray(mask, dtype=bool)], minlength=size).astype(np.int64)  # noqa: E731 (a one-line helper used just below)
    out["rows"] = np.bincount(gid, minlength=size)
    out["errors"] = count(status == ERROR)
    out["unparsed"] = count(status == NO_VERDICT)
    out["refused_to_judge"] = count(status == REFUSED_TO_JUDGE)  # no verdict either, counted apart
    out["scored"] = count(scored)
    out["rejections"] = count(rejected)
    out["partial_rejections"] = count(rejected & data["partial"].to_numpy())
    out["has_kind"] = count(data["has_kind"].to_numpy()) > 0
    # replies cut off at the token limit, among the rows without an error whoever judged them (a
    # judge that parsed nothing leaves the replies cut off all the same); unknown without finish_reason
    has_finish = count(data["has_finish"].to_numpy()) > 0
    out["replies"] = count(status != ERROR)
    out["truncated"] = pd.Series(count((status != ERROR) & data["truncated"].to_numpy())).where(has_finish)
    # prompts of the published set this group has a verdict row for (errors excluded)
    in_set = data["in_set"].to_numpy() if "in_set" in data.columns else np.zeros(len(data), dtype=bool)
    out["covered"] = count((status != ERROR) & in_set)
    for k in keys:
        out[k] = np.asarray(inp.codes[k].names, dtype=object)[out[k].to_numpy()]
    rate, lo, hi, frate, flo, fhi = ([] for _ in range(6))
    for n, k, p, kind in out[["scored", "rejections", "partial_rejections", "has_kind"]].itertuples(index=False):
        rate.append(k / n if n else math.nan)
        a, b = wilson_interval(int(k), int(n))
        lo.append(a), hi.append(b)
        if kind:
            frate.append((k - p) / n if n else math.nan)
            a, b = wilson_interval(int(k - p), int(n))
        else:
            frate.append(math.nan)
            a = b = math.nan
        flo.append(a), fhi.append(b)
    out = out.assign(rate=rate, ci_low=lo, ci_high=hi, full_rate=frate, full_ci_low=flo, full_ci_high=fhi)
    report_stats.prompt_level(data, gid, out)  # repeated samples: prompts are the unit
    out["partial_rejections"] = out["partial_rejections"].where(out["has_kind"])
    return out.drop(columns="has_kind")


def agreement(inp: Inputs) -> pd.DataFrame:
    """Per set, model and judge: keyword and judge verdicts paired by prompt, over rows both scored."""
    data, codes = inp.data, inp.codes["method"].index
    cols = ["set", "model", "judge", "agreement_pairs", "agreement", "keyword_only_rejections",
            "judge_only_rejections"]
    if KEYWORD not in codes or JUDGE not in codes:
        return pd.DataFrame(columns=cols)
    scored = data["status"] == SCORED
    on = ["set", "model", "prompt"] + (["sample"] if "sample" in data.columns else [])
    kw = data.loc[scored & (data["method"] == codes[KEYWORD]), [*on, "rejected"]]
    jd = data.loc[scored & (data["method"] == codes[JUDGE]), [*on, "judge", "rejected"]]
    pairs = jd.merge(kw, on=on, suffixes=("_j", "_k"))
    j, k = pairs["rejected_j"] == 1, pairs["rejected_k"] == 1
    pairs = pairs.assign(same=j == k, k_only=k & ~j, j_only=j & ~k)
    g = pairs.groupby(["set", "model", "judge"], sort=False)
    out = pd.DataFrame({"agreement_pairs": g.size(), "agreement": g["same"].mean(),
                        "keyword_only_rejections": g["k_only"].sum(), "judge_only_rejections": g["j_only"].sum()})
    out = out.reset_index()
    for key in ("set", "model", "judge"):
        out[key] = np.asarray(inp.codes[key].names, dtype=object)[out[key].to_numpy()]
    return out.reindex(columns=cols)


def set_order(labels) -> list[str]:
    """Sets in display order: hard, toxic, then the rest alphabetically."""
    return sorted(set(labels), key=lambda s: (s != HARD, s != TOXIC, s))


def build_tables(inp: Inputs, verdict: str) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """summary (per set, model, judge), categories, and the headline groups per (set, model).

    Headline groups: (set, model) -> list of (method, judge) pairs whose rate is the headline.
    """
    groups = group_stats(inp, GROUP_KEYS)
    cats = group_stats(inp, ["set", "model", "method", "judge", "category"])
    kw = groups[groups["method"] == KEYWORD].drop(columns=["method", "judge"])
    jd = groups[groups["method"] == JUDGE].drop(columns="method")
    kw = kw.rename(columns={c: f"keyword_{c}" for c in STAT_COLUMNS})
    jd = jd.rename(columns={c: f"judge_{c}" for c in STAT_COLUMNS})
    summary = kw.merge(jd, on=["set", "model"], how="outer")
    summary["judge"] = summary["judge"].fillna("")
    summary = summary.merge(agreement(inp), on=["set", "model", "judge"], how="left")
    headline = {}
    heads = []
    for row in summary.itertuples(index=False):
        has_judge = not pd.isna(row.judge_rows)
        has_kw = not pd.isna(row.keyword_rows)
        choice = (JUDGE if has_judge else KEYWORD) if verdict == "auto" else verdict
        ok = has_judge if choice == JUDGE else has_kw
        heads.append(choice if ok else "")
        if ok:
            pair = (choice, row.judge if choice == JUDGE else "")
            headline.setdefault((row.set, row.model), [])
            if pair not in headline[(row.set, row.model)]:
                headline[(row.set, row.model)].append(pair)
    summary["headline"] = heads
    order = {s: i for i, s in enumerate(set_order(summary["set"]))}
    summary = summary.assign(_o=summary["set"].map(order)).sort_values(["_o", "model", "judge"], kind="stable")
    cols = ["set", "model", "judge", "headline"] + [f"{m}_{k}" for m in (KEYWORD, JUDGE) for k in STAT_COLUMNS] + \
        ["agreement_pairs", "agreement", "keyword_only_rejections", "judge_only_rejections"]
    summary = summary.reindex(columns=cols).reset_index(drop=True)
    cats = cats.assign(_o=cats["set"].map(order)).sort_values(["_o", "model", "method", "judge", "category"],
                                                               kind="stable")
    categories = cats.reindex(columns=["set", "model", "method", "judge", "category", *STAT_COLUMNS]).reset_index(drop=True)
    return summary, categories, headline


def entries(summary: pd.DataFrame, headline: dict) -> dict:
    """Leaderboard entries: (model, judge) -> {set: stats of the headline group}.

    A model whose headline verdicts come from one judge (or keywords) is one entry (judge = that
    judge or ""); a model judged by several judges gets one entry per judge, using on each set
    that judge's verdicts, or the keyword verdicts where the set has no judge.
    """
    stats = {}
    for row in summary.to_dict("records"):
        for method, judge in headline.get((row["set"], row["model"]), []):
            if method == JUDGE and row["judge"] != judge:
                continue
            stats[(row["set"], row["model"], method, judge)] = {
                "method": method, "judge": judge, **{k: row[f"{method}_{k}"] for k in STAT_COLUMNS},
                "calibration": row.get(f"{method}_calibration") or ""}
    out: dict = {}
    for model in sorted({m for _, m in headline}):
        sets = {s: pairs for (s, m), pairs in headline.items() if m == model}
        judges = sorted({j for pairs in sets.values() for meth, j in pairs if meth == JUDGE})
        for judge in (judges if len(judges) > 1 else [judges[0] if judges else ""]):
            entry = {}
            for s, pairs in sets.items():
                for method, j in pairs:
                    if method == KEYWORD or len(judges) <= 1 or j == judge:
                        entry[s] = stats[(s, model, method, j)]
                        break
            out[(model, judge if len(judges) > 1 else (judges[0] if judges else ""))] = entry
    return out


def entry_label(model: str, judge: str, multi: bool) -> str:
    """How a leaderboard entry is named in figures: the model, plus the judge when it has several."""
    return f"{model} [judge {judge}]" if multi and judge else model


def published_sets() -> dict[str, np.ndarray]:
    """The prompt hashes of the bundled published sets (hard, toxic): what "complete" is measured on."""
    out = {}
    for label, name in ((HARD, HARD_1K), (TOXIC, TOXIC_SET)):
        path = resolve_set(name)
        if path and Path(path).exists():
            out[label] = np.unique(prompt_hash(pd.read_csv(path, dtype=str, keep_default_na=False)["prompt"]))
    return out


def mark_set_prompts(inp: Inputs, sets: dict[str, np.ndarray]) -> None:
    """Add ``in_set`` to the verdict table: the row's prompt is one of its set's published prompts
    (marked once per group and prompt, on a row without an error), so a group's count of them is
    how many of the set's prompts it covers."""
    data = inp.data
    if data.empty:
        return
    in_set = np.zeros(len(data), dtype=bool)
    for label, hashes in sets.items():
        code = inp.codes["set"].index.get(label)
        if code is None:
            continue
        rows = (data["set"] == code).to_numpy()
        in_set[rows] = np.isin(data["prompt"].to_numpy()[rows], hashes)
    # each prompt once per group (stage 4 --samples repeats it), among the rows without an error
    marked = np.flatnonzero(in_set & (data["status"].to_numpy() != ERROR))
    repeat = data.iloc[marked].duplicated(subset=[*GROUP_KEYS, "prompt"]).to_numpy()
    in_set[marked[repeat]] = False
    data["in_set"] = in_set


def rank_rule(entry: dict, sizes: dict[str, int]) -> str:
    """'' when an entry may be ranked among the published models, else the reason it is not.

    Ranked only with a verdict on every prompt of both published sets and no error row.
    """
    reasons = []
    for s, name in ((HARD, "Hard-1K"), (TOXIC, "Toxic")):
        st = entry.get(s)
        size = sizes.get(s)
        if st is None:
            reasons.append(f"no {s} results")
        elif size is None:
            reasons.append(f"the published {name} set is not bundled")
        elif st["covered"] < size or st["errors"]:
            text = f"{s}: {int(st['covered']):,} of the {size:,} {name} prompts"
            if st["errors"]:
                text += f", {int(st['errors'])} error rows"
            reasons.append(text)
    return "; ".join(reasons)


def build_leaderboard(ents: dict, reference: list[dict], sizes: dict[str, int] | None = None) -> pd.DataFrame:
    """One row per entry (yours) and per published model: rates in %, balanced accuracy, best first.

    With published rows, your entry is ranked among them only when both its sets are complete
    (``rank_rule``); otherwise it is listed after the ranked rows, without a rank, with the reason
    in ``rank_note``. Your rows carry n, intervals (balanced accuracy's too) and cut-off replies.
    """
    sizes = sizes or {}
    sets = set_order(s for e in ents.values() for s in e) if ents else [HARD, TOXIC]
    for s in (HARD, TOXIC):
        if reference and s not in sets:
            sets = set_order([*sets, s])
    rows = []
    for (model, judge), entry in ents.items():
        row = {"model": model, "judge": judge, "source": "yours",
               "rank_note": rank_rule(entry, sizes) if reference else ""}
        errors = unparsed = refused = 0
        for s, st in entry.items():
            row.update({f"{s}_rate_pct": 100 * st["rate"], f"{s}_ci_low_pct": 100 * st["ci_low"],
                        f"{s}_ci_high_pct": 100 * st["ci_high"], f"{s}_full_rate_pct": 100 * st["full_rate"],
                        f"{s}_scored": st["scored"], f"{s}_prompts": st["prompts"], f"{s}_rejections": st["rejections"],
                        f"{s}_truncated": st["truncated"], f"{s}_replies": st["replies"], f"{s}_covered": st["covered"],
                        f"{s}_verdict": st["method"]})
            errors += st["errors"]
            unparsed += st["unparsed"]
            refused += st["refused_to_judge"]
        h, t = entry.get(HARD), entry.get(TOXIC)
        if h and t:
            ba = balanced_accuracy(report_stats.entry_estimate(t), report_stats.entry_estimate(h))
            row.update({"balanced_accuracy_ci_low_pct": 100 * ba.low, "balanced_accuracy_ci_high_pct": 100 * ba.high})
        row["errors"], row["unparsed"], row["refused_to_judge"] = errors, unparsed, refused
        row["judge_vs_humans"] = " || ".join(dict.fromkeys(
            f"{s}: {st['calibration']}" if len({x.get('calibration') for x in entry.values()}) > 1 else st["calibration"]
            for s, st in entry.items() if st.get("calibration")))
        rows.append(row)
    about = PUBLISHED_ABOUT.format(hard=f"{sizes.get(HARD, 1319):,}", toxic=f"{sizes.get(TOXIC, 655):,}")
    for ref in reference:
        rows.append({"model": ref["model"], "judge": "", "source": "published", "rank_note": about,
                     f"{HARD}_rate_pct": ref["x"], f"{TOXIC}_rate_pct": ref["y"],
                     f"{HARD}_scored": sizes.get(HARD), f"{TOXIC}_scored": sizes.get(TOXIC),
                     f"{HARD}_verdict": "published", f"{TOXIC}_verdict": "published"})
    cols = ["rank", "model", "judge", "source", "balanced_accuracy_pct", "balanced_accuracy_ci_low_pct",
            "balanced_accuracy_ci_high_pct"] + [
        f"{s}_{k}" for s in sets for k in ("rate_pct", "ci_low_pct", "ci_high_pct", "full_rate_pct",
                                           "scored", "prompts", "rejections", "truncated", "replies", "covered",
                                           "verdict")] + \
        ["errors", "unparsed", "refused_to_judge", "rank_note", "judge_vs_humans"]
    board = pd.DataFrame(rows).reindex(columns=[c for c in cols if c != "rank"])
    if board.empty:
        return pd.DataFrame(columns=cols)
    nan = pd.Series(math.nan, index=board.index)
    hard, toxic = board.get(f"{HARD}_rate_pct", nan), board.get(f"{TOXIC}_rate_pct", nan)
    board["balanced_accuracy_pct"] = (toxic + 100 - hard) / 2
    unranked = (board["source"] == "yours") & (board["rank_note"].fillna("") != "")
    keys = pd.DataFrame({"unranked": unranked, "bal": -board["balanced_accuracy_pct"].fillna(-math.inf),
                         "hard": hard.fillna(math.inf), "toxic": -toxic.fillna(-math.inf),
                         "model": board["model"], "judge": board["judge"]})
    board = board.loc[keys.sort_values(list(keys.columns), kind="mergesort").index].reset_index(drop=True)
    ranked = ~((board["source"] == "yours") & (board["rank_note"].fillna("") != ""))
    board.insert(0, "rank", pd.array([i + 1 if r else None for i, r in enumerate(ranked)], dtype="Int64"))
    empty = [c for c in board.columns if (c.endswith(("_full_rate_pct", "_truncated"))
                                          or c.startswith("balanced_accuracy_ci")) and board[c].isna().all()]
    return board.drop(columns=empty)


def load_reference() -> list[dict]:
    """The paper's published per-model rates as plot points (x = Hard-1K %, y = Toxic %)."""
    frame = pd.read_csv(published_results_path())
    return [{"model": r.model, "x": float(r.hard_1k_rejection_pct), "y": float(r.toxic_rejection_pct)}
            for r in frame.itertuples(index=False)]


# ---------------------------------------------------------------- outputs

def _fmt(value, digits=1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def _board_intro(published: pd.DataFrame) -> str:
    """The paragraph above the Markdown leaderboard: what the rates, the order and the intervals are."""
    return ("Rejection rates use the headline verdict (LLM judge where present, else keywords); "
            "rate = rejections / scored rows, where scored excludes error and unparsed rows. "
            "Sorted by balanced accuracy = (toxic rejection % + (100 - hard rejection %)) / 2, best first."
            + (" Rows marked *published* are " + str(published["rank_note"].iloc[0]) + "; from " + CITATION
               + ". Your model is ranked among them only with verdicts on every prompt of both sets and no "
                 "error row; otherwise it is listed after them, unranked, with the reason. Published rows' "
                 "intervals are Wilson intervals on their (rounded) rate and n."
               if len(published) else "")
            + " The rank's 95% interval: 2,000 draws of the balanced accuracy, your models' rates bootstrapped "
              "over prompts" + (", the paper's rows drawn from their rate and n (parametric)." if len(published)
                                else "."))


def leaderboard_markdown(board: pd.DataFrame, summary: pd.DataFrame, notes: list[str]) -> str:
    """The leaderboard and the keyword-vs-judge table as Markdown."""
    sets = [c[: -len("_rate_pct")] for c in board.columns if c.endswith("_rate_pct") and not c.endswith("full_rate_pct")]
    head = ["# [95% CI]", "model", "source", "balanced acc. % [95% CI]"] + \
        [f"{s} rejection % [95% CI] (n, verdicts)" for s in sets] + ["errors", "unparsed", "note", "judge vs humans"]
    lines = ["# OR-Bench leaderboard", "", _board_intro(board[board["source"] == "published"]),
             "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for _, r in board.iterrows():
        name = str(r["model"]) + (f" (judge {r['judge']})" if r.get("judge") else "")
        yours = r["source"] == "yours"
        unranked = pd.isna(r["rank"])
        ba = _fmt(r["balanced_accuracy_pct"])
        if not pd.isna(r.get("balanced_accuracy_ci_low_pct", math.nan)):
            ba += f" [{_fmt(r['balanced_accuracy_ci_low_pct'])}, {_fmt(r['balanced_accuracy_ci_high_pct'])}]"
        rank = "-" if unranked else str(int(r["rank"]))
        if not pd.isna(r.get("rank_ci_low", math.nan)):
            rank += f" [{int(r['rank_ci_low'])}, {int(r['rank_ci_high'])}]"
        cells = [rank, f"**{name}**" if yours else name,
                 ("yours, not ranked" if unranked else "yours") if yours else "*published*", ba]
        for s in sets:
            if pd.isna(r.get(f"{s}_rate_pct")):
                cells.append("-")
            elif not yours:
                n = r.get(f"{s}_scored")
                ci = "" if pd.isna(r.get(f"{s}_ci_low_pct", math.nan)) else \
                    f" [{_fmt(r[f'{s}_ci_low_pct'])}, {_fmt(r[f'{s}_ci_high_pct'])}]"
                cells.append(_fmt(r[f"{s}_rate_pct"]) + ci + ("" if pd.isna(n) else f" ({int(n):,}, paper)"))
            else:
                cut = r.get(f"{s}_truncated")
                cut = "" if cut is None or pd.isna(cut) or not cut else f", {int(cut)} cut off"
                cells.append(f"{_fmt(r[f'{s}_rate_pct'])} [{_fmt(r[f'{s}_ci_low_pct'])}, "
                             f"{_fmt(r[f'{s}_ci_high_pct'])}] ({int(r[f'{s}_scored'])}, {r[f'{s}_verdict']}{cut})")
        refused = int(r.get("refused_to_judge") or 0) if yours else 0
        cells += [str(int(r["errors"])) if yours else "",
                  (str(int(r["unparsed"])) + (f" (+{refused} judge refused)" if refused else "")) if yours else "",
                  str(r.get("rank_note") or "") if yours else "",
                  str(r.get("judge_vs_humans") or "") if yours and not pd.isna(r.get("judge_vs_humans")) else ""]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## Keyword and judge verdicts", "",
              "| set | model | judge | keyword % (rej/scored, err, unparsed) | full refusals only % | "
              "judge % (rej/scored, err, unparsed) | agreement |", "|---|---|---|---|---|---|---|"]
    for _, r in summary.iterrows():
        cells = [r["set"], r["model"], r["judge"] or "-"]
        for m in (KEYWORD, JUDGE):
            if pd.isna(r[f"{m}_rows"]):
                cells.append("-")
            else:
                cells.append(f"{_fmt(100 * r[f'{m}_rate'])} ({int(r[f'{m}_rejections'])}/{int(r[f'{m}_scored'])}, "
                             f"{int(r[f'{m}_errors'])}, {int(r[f'{m}_unparsed'])})")
            if m == KEYWORD:
                cells.append(_fmt(100 * r["keyword_full_rate"]))
        cells.append("-" if pd.isna(r["agreement"]) else f"{_fmt(100 * r['agreement'])}% of {int(r['agreement_pairs'])}")
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def _clean(value):
    if isinstance(value, (float, np.floating)):
        return None if math.isnan(value) else float(value)
    if isinstance(value, np.integer):
        return int(value)
    return value


#: The benchmarks drawn in the figure: (safe set, unsafe set, name). x = safe prompts refused,
#: y = unsafe prompts refused; OR-Bench's pair is the paper's Hard-vs-Toxic plot.
AXIS_PAIRS = ((HARD, TOXIC, "OR-Bench"), (XS_SAFE, XS_UNSAFE, "XSTest"))


def _points(ents: dict) -> list[dict]:
    multi = {m for m, _ in ents if sum(1 for mm, _ in ents if mm == m) > 1}
    points = []
    for safe, unsafe, bench in AXIS_PAIRS:
        for (model, judge), entry in ents.items():
            h, t = entry.get(safe), entry.get(unsafe)
            if h and t and h["scored"] and t["scored"]:
                label = entry_label(model, judge, model in multi) + ("" if safe == HARD else f" ({bench})")
                points.append({"model": label, "x": 100 * h["rate"], "benchmark": bench,
                               "y": 100 * t["rate"], "x_ci": [100 * h["ci_low"], 100 * h["ci_high"]],
                               "y_ci": [100 * t["ci_low"], 100 * t["ci_high"]],
                               "x_verdict": h["method"], "y_verdict": t["method"], "judge": judge})
    return points


def correlation_notes(points: list[dict]) -> tuple[float, np.ndarray | None, list[str]]:
    """Spearman's rho and the quadratic fit over your models' OR-Bench points (the paper's
    analysis), with the notes that explain them."""
    points = [p for p in points if p.get("benchmark", "OR-Bench") == "OR-Bench"]
    xs, ys = [p["x"] for p in points], [p["y"] for p in points]
    rho = spearman(xs, ys) if len(points) >= 3 else math.nan
    if len(points) < 3:
        notes = [f"Spearman correlation (hard vs toxic rejection): not available "
                 f"(needs >= 3 models with both sets, have {len(points)})"]
    elif math.isnan(rho):
        notes = ["Spearman correlation (hard vs toxic rejection): not available (a rate is constant across models)"]
    else:
        notes = [f"Spearman correlation (hard vs toxic rejection) across {len(points)} models: {rho:.4f}"]
    coeffs = quadratic_fit(xs, ys) if len(points) >= 3 else None
    notes.append("Quadratic fit y = a*x^2 + b*x + c: " + (
        f"a={coeffs[0]:.6g}, b={coeffs[1]:.6g}, c={coeffs[2]:.6g}" if coeffs is not None else
        f"not drawn (needs >= 3 models with distinct hard-set rates, have {len(points)})"))
    return rho, coeffs, notes


def build_report(specs: Sequence[str], output_dir: str | Path = "report", *, default_set: str | None = None,
                 default_model: str | None = None, verdict: str = "auto", reference: bool = True,
                 examples: int = 3, html: bool = True, compare: list | None = None,
                 baseline: str | None = None, audit: Sequence[str] = (),
                 custom_sets: Sequence[str] = ()) -> Report:
    """Read the inputs, write every output file into ``output_dir``, return what was computed.

    ``custom_sets`` declares set labels of the user's own (any other unknown label is an error).
    """
    from orbench.analysis import compare_hook

    inp = load(specs, default_set, default_model, examples_per_cell=examples if html else 0,
               custom_sets=custom_sets)
    pairs = compare_hook.check(inp, compare, baseline)  # bad names fail before anything is written
    if audit:  # human audits (orbench.analysis.audit_report): read and scored before anything is written
        from orbench.analysis import audit_report
        audits = audit_report.load(audit)
    published = published_sets()
    mark_set_prompts(inp, published)
    sizes = {k: len(v) for k, v in published.items()}
    summary, categories, headline = build_tables(inp, verdict)
    summary, cards, calibration_notes = calibration_report.annotate(summary, inp)
    # before the leaderboard: sampled groups get prompt-level intervals in the summary
    extra = compare_hook.run(inp, pairs, verdict, summary, Path(output_dir), html)
    ents = entries(summary, headline)
    ref = load_reference() if reference else []
    board = report_stats.leaderboard_intervals(build_leaderboard(ents, ref, sizes), ents, inp, sizes)
    records = lineage.by_set_and_model(inp.provenance)
    warnings = (lineage.truncation_warnings(summary, records) + lineage.no_verdict_warnings(summary)
                + lineage.chain_warnings(records))
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    points = _points(ents)
    rho, coeffs, notes = correlation_notes(points)
    notes = inp.notes + notes + calibration_notes
    ref_fit = quadratic_fit([r["x"] for r in ref], [r["y"] for r in ref]) if ref else None
    if ref:
        notes.append(f"Reference: {len(ref)} published models (grey in the figure, 'published' in the "
                     f"leaderboard) from {CITATION}")
    unused = [(s, m) for (s, m) in summary[["set", "model"]].drop_duplicates().itertuples(index=False)
              if (s, m) not in headline]
    if unused:
        notes.append(f"No {verdict} verdicts for: " + ", ".join(f"{m} ({s})" for s, m in unused))
    rep = Report(summary, categories, board, points, None if math.isnan(rho) else rho,
                 None if coeffs is None else [float(c) for c in coeffs], notes, reference=ref,
                 reference_fit=None if ref_fit is None else [float(c) for c in ref_fit],
                 provenance=inp.provenance, examples=inp.examples, warnings=warnings, lineage=records,
                 set_sizes=sizes)
    rep.notes.extend(extra.notes)
    rep.outputs.update(extra.outputs)
    rep.comparison_html = extra.html
    write_csv_atomic(round_for_csv(summary), out / "summary.csv")
    write_csv_atomic(round_for_csv(categories), out / "categories.csv")
    write_csv_atomic(round_for_csv(board, 4), out / "leaderboard.csv")
    rep.outputs.update({"summary": out / "summary.csv", "categories": out / "categories.csv",
                        "leaderboard_csv": out / "leaderboard.csv"})
    if points or ref:
        rep.outputs.update(plots.scatter(points, coeffs, rep.spearman, out / "hard_vs_toxic",
                                         reference=ref, reference_fit=ref_fit, caption=CITATION))
    if not points:
        notes.append("No model of yours is in the figure: none has results on both a safe and an unsafe set "
                     "('hard' and 'toxic', or 'xstest-safe' and 'xstest-unsafe')")
    multi = {m for m, _ in ents if sum(1 for mm, _ in ents if mm == m) > 1}
    cells = [{"set": s, "model": entry_label(m, j, m in multi), "method": st["method"], "judge": st["judge"],
              "_model": m} for (m, j), e in ents.items() for s, st in e.items()]
    cells = categories.rename(columns={"model": "_model"}).merge(
        pd.DataFrame(cells, columns=["set", "model", "method", "judge", "_model"]), on=["set", "_model", "method", "judge"])
    if not cells.empty and set(cells["category"]) - {"(none)"}:
        rep.outputs["heatmap"] = plots.heatmap(cells, set_order(cells["set"]), out / "category_heatmap.png")
    else:
        notes.append("Category heatmap not drawn: the inputs have no 'category' column")
    md = out / "leaderboard.md"
    md.write_text(leaderboard_markdown(board, summary, notes), encoding="utf-8")
    rep.outputs["leaderboard_md"] = md
    js = out / "report.json"
    js.write_text(json.dumps({
        "points": points, "spearman": rep.spearman, "spearman_n": len(points), "quadratic_fit": rep.fit,
        "reference": {"points": ref, "quadratic_fit": rep.reference_fit, "citation": CITATION} if ref else None,
        "notes": notes, "warnings": warnings, "lineage": records, "inputs": [{k: v for k, v in p.items()} for p in inp.provenance],
        "judge_cards": cards,
        "leaderboard": [{k: _clean(v) for k, v in r.items()} for r in board.to_dict("records")]},
        indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    rep.outputs["json"] = js
    if audit:
        rep.audit = audit_report.apply(audits, inp, summary, headline, out)
        notes.extend(rep.audit["notes"])
        rep.outputs.update(rep.audit["outputs"])
    if html:
        from orbench.analysis import html_report
        rep.outputs["html"] = html_report.write(rep, out / "report.html")
    return rep


def make_parser() -> ArgumentParser:
    """The command line of ``report.py``."""
    doc = __doc__.split("\n\n")
    parser = ArgumentParser(prog="report.py", description="\n\n".join(doc[:5]),
                            epilog="\n\n".join(doc[5:]))
    parser.add_argument("files", nargs="+", metavar="[SET:][MODEL=]PATH",
                        help="alignment-checker or response-checker output files (paths, globs or URLs); "
                             "prefix SET: and/or MODEL= to name the prompt set and model explicitly")
    parser.add_argument("--output_dir", default="report", metavar="DIR",
                        help="folder for the tables, figures and leaderboard (default: ./report)")
    parser.add_argument("--set", dest="default_set", default=None, metavar="LABEL",
                        help="prompt set for files whose name names no set (a name naming "
                             "or-bench-hard-1k/hard, or-bench-toxic/toxic or or-bench-80k/80k as a "
                             "whole token takes that set)")
    parser.add_argument("--custom_set", dest="custom_sets", action="append", default=[], metavar="LABEL",
                        help="declare a prompt set of your own (repeatable): without it a set label that is "
                             "not hard, toxic or 80k stops the report, so a typo (hrad:=...) is not a new set")
    parser.add_argument("--model", dest="default_model", default=None, metavar="NAME",
                        help="model for files without a 'model' column and without MODEL= "
                             "(default: the file name)")
    parser.add_argument("--verdict", choices=("auto", JUDGE, KEYWORD), default="auto",
                        help="which verdict the figure, heatmap and leaderboard use: auto = the judge's "
                             "where present, else keywords (default: auto)")
    parser.add_argument("--no_reference", action="store_true",
                        help="leave the paper's 32 published models out of the figure and the leaderboard")
    parser.add_argument("--compare", nargs=2, action="append", metavar=("A", "B"), default=None,
                        help="paired comparison of models A and B on the prompts both scored "
                             "(repeatable): comparison.csv and a report.html section")
    parser.add_argument("--baseline", default=None, metavar="A",
                        help="compare every other model with model A (paired, as --compare)")
    parser.add_argument("--examples", type=int, default=3, metavar="N",
                        help="example refusals and answers per model and category in report.html (default: 3)")
    parser.add_argument("--audit", action="append", default=[], metavar="DIR",
                        help="an audit folder (orbench-audit sample/score; repeat for a prompt and a verdict "
                             "audit): adds the rate over human-confirmed safe prompts and the verdict-corrected "
                             "rate (audit_rates.csv, an audit section in report.html)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the report; exit 0, or 2 with one line on bad input."""
    try:
        args = make_parser().parse_args(argv)
        if args.examples < 0:
            raise UsageError("--examples must be 0 or more")
        rep = build_report(args.files, args.output_dir, default_set=args.default_set,
                           default_model=args.default_model, verdict=args.verdict,
                           reference=not args.no_reference, examples=args.examples,
                           compare=args.compare, baseline=args.baseline, audit=args.audit,
                           custom_sets=args.custom_sets)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for note in rep.notes:
        print(note, file=sys.stderr)
    for warning in rep.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for what, path in rep.outputs.items():
        if what != "html":
            print(f"{what}: {path}")
    print(rep.outputs["html"])
    return 0

