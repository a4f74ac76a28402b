"""Report over-refusal results: rejection rates with 95% intervals, plots, a leaderboard and report.html.

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
point per model; Clopper-Pearson error bars, the published models in grey with the paper's quadratic fit),
``category_heatmap.png``, ``report.json`` and ``report.html`` (one self-contained page: tables,
figures, provenance from each input's ``.meta.json``, example prompts with their verdicts), and
``every_eval_ever/`` (the results as Every Eval Ever records, per model and benchmark with their
per-sample JSONL, and Hugging Face ``.eval_results`` snippets: :mod:`orbench.analysis.eee`);
``--no_figures`` writes all but the figures.
The leaderboard is sorted by balanced accuracy ``(toxic + 100 - hard) / 2``, best first. The
last line printed is the path of report.html.

Example::

    python analysis/report.py 'results/*_judge.csv' hard:gpt-4o=runs/hard_kw.csv --output_dir report
"""

from __future__ import annotations

import functools
import importlib
import logging
import math
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from orbench.analysis.eee import records as eee
from orbench.analysis.eee import samples as eee_rows
from orbench.analysis.folders import check_writable, write_error
from orbench.analysis.report import cards_section, cascade, comparisons, files, intervals, lineage
from orbench.analysis.report.columns import prompt_hash

# expand, infer_set and parse_spec are re-exported: the release builder and callers use them from here.
from orbench.analysis.report.inputs import (  # noqa: F401 (re-exported, see the comment above)
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
    release_memory,
)
from orbench.analysis.report.inputs import TOX as TOXIC
from orbench.analysis.stats import balanced_accuracy, clopper_pearson_arrays, quadratic_fit, spearman
from orbench.benchmark.sets import HARD_1K, PUBLISHED_ABOUT, published_results_path, resolve_set
from orbench.benchmark.sets import TOXIC as TOXIC_SET
from orbench.llm.errors import UsageError
from orbench.run.cli import ArgumentParser, entry_point
from orbench.run.tables import row_dicts
from orbench.scoring.vocab import JUDGE, KEYWORD

logger = logging.getLogger(__name__)

STAT_COLUMNS = ["rows", "errors", "unparsed", "scored", "prompts", "rejections", "rate", "ci_low", "ci_high",
                "ci_method", "ci_flag", "partial_rejections", "full_rate", "full_ci_low", "full_ci_high", "truncated",
                "covered", "replies", "refused_to_judge", "rate_bound_low", "rate_bound_high", "scored_truncated",
                *cascade.COLUMNS]


@dataclass(frozen=True)
class Report:
    """Everything a report run computed (:func:`compute`), nothing written yet; ``outputs`` names
    the files written from it (:func:`build_report`). It does not change once made."""

    summary: pd.DataFrame
    categories: pd.DataFrame
    leaderboard: pd.DataFrame
    points: list[dict]
    spearman: float | None
    fit: list[float] | None
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    reference: list[dict] = field(default_factory=list)
    reference_fit: list[float] | None = None
    without_point: tuple[str, ...] = ()  # your models with no OR-Bench point (one set missing), and why
    provenance: list[dict] = field(default_factory=list)
    examples: pd.DataFrame | None = None
    extra: comparisons.Extra = field(default_factory=comparisons.Extra)  # comparisons, repeated samples
    audit: dict | None = None  # with --audit: orbench.analysis.report.audit_section.compute's result
    lineage: list[dict] = field(default_factory=list)
    set_sizes: dict[str, int] = field(default_factory=dict)
    judge_cards: dict = field(default_factory=dict)
    heat_cells: pd.DataFrame | None = None  # the heatmap's cells (None: no category column)
    heat_sets: tuple[str, ...] = ()
    moderator_cards: dict = field(default_factory=dict)  # the cards of the moderations that chose the prompts
    outputs: dict[str, Path] = field(default_factory=dict)
    # the verdict rows behind the leaderboard, for the Every Eval Ever records (orbench.analysis.eee.samples)
    verdict_rows: object = field(default=None, repr=False, compare=False)
    # what keeps the inputs readable while the report lives (Every Eval Ever samples read them when it is
    # saved): the temporary folder the Python API saved its DataFrames into, removed with the report
    inputs_folder: object = field(default=None, repr=False, compare=False)

    def save(self, output_dir: str | Path = "report", *, figures: bool = True, html: bool = True,
             eee_samples: bool = True) -> dict[str, Path]:
        """Write the report's files into ``output_dir`` as ``report.py`` does: the Every Eval Ever
        records (with their per-sample lines unless ``eee_samples`` is off), the tables as CSV, the
        figures unless ``figures`` is off, report.json and, with ``html``, report.html; what was
        written, by name (as ``outputs``)."""
        out = Path(output_dir)
        check_writable(out)
        return self._write(out, figures, html, eee.write(self, out, eee_samples))

    def html(self, *, figures: bool = True) -> str:
        """report.html's text: one self-contained page, its figures inlined unless ``figures`` is off
        (drawing them is most of the page's time on a small report), written into a temporary folder
        with only what the page shows: not the Every Eval Ever records (their per-sample lines are
        3.3 GB at 30 models x 80K rows), nor the figure's PDF."""
        import tempfile

        with tempfile.TemporaryDirectory(prefix="orbench-report-") as folder:
            return self._write(Path(folder), figures, True, {}, pdf=False)["html"].read_text(encoding="utf-8")

    def _write(self, out: Path, figures: bool, html: bool, written: dict[str, Path], pdf: bool = True) -> dict[str, Path]:
        """The files :meth:`save` writes after the Every Eval Ever records (``written``), into ``out``."""
        rep = replace(self, verdict_rows=None)
        if not figures and files.NO_FIGURES not in rep.notes:
            rep = replace(rep, notes=(*rep.notes, files.NO_FIGURES))
        return _write_files(rep, out, figures, html, written, pdf)

    def text(self) -> str:
        """A short text of the report: its sets and models, per set, model and judge the headline
        rate with its 95% interval (or, with no point rate, its bounds) and n, the judge's card line,
        and how many warnings; the tables are the attributes it names."""
        s = self.summary
        sets = list(dict.fromkeys(s["set"])) if "set" in s.columns else []
        models = list(dict.fromkeys(s["model"])) if "model" in s.columns else []
        lines = [f"OR-Bench report: {len(sets)} set{'s' * (len(sets) != 1)} ({', '.join(map(str, sets))}), "
                 f"{len(models)} model{'s' * (len(models) != 1)} ({', '.join(map(str, models))})"]
        for row in s.to_dict("records"):
            method = row.get("headline") or ("judge" if pd.notna(row.get("judge_rate", np.nan)) else "keyword")
            get = lambda k, row=row, method=method: row.get(f"{method}_{k}", np.nan)  # noqa: E731 (used just below)
            who = f"judge {row['judge']}" if method == "judge" and row.get("judge") else method
            if pd.notna(get("rate")):
                rate = (f"{get('rejections'):.0f} of {get('scored'):.0f} rejected = {100 * get('rate'):.1f}% "
                        f"[{100 * get('ci_low'):.1f}, {100 * get('ci_high'):.1f}]")
            elif pd.notna(get("rate_bound_low")):
                rate = f"no rate: bounds [{100 * get('rate_bound_low'):.1f}%, {100 * get('rate_bound_high'):.1f}%]"
            else:
                rate = "no verdict"
            lines.append(f"  {row.get('set')}  {row.get('model')}  {who}: {rate}")
            card = row.get(f"{method}_calibration")
            if isinstance(card, str) and card:
                lines.append(f"    {card}")
        if self.warnings:
            lines.append(f"{len(self.warnings)} warning{'s' * (len(self.warnings) != 1)} (Report.warnings)")
        lines.append("tables: Report.summary, .leaderboard, .categories; files: Report.save(dir), Report.html()")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        """In a notebook: the rates per set, model and judge (the summary's headline columns)."""
        from orbench.analysis.html_kit import esc

        rows = [c for c in ("set", "model", "judge", "headline", "keyword_scored", "keyword_rate", "judge_scored",
                            "judge_rate") if c in self.summary.columns]
        notes = "".join(f"<li>{esc(w)}</li>" for w in self.warnings)
        return ("<p><b>OR-Bench report</b>: rates per set, model and judge (Report.summary; Report.leaderboard, "
                "Report.categories, Report.save(dir), Report.html())</p>"
                + self.summary[rows].to_html(index=False, na_rep="") + (f"<ul>{notes}</ul>" if notes else ""))


# ---------------------------------------------------------------- grouping (once)

def group_stats(inp: Inputs, keys: list[str]) -> pd.DataFrame:
    """Counts, rates and their intervals per group of the verdict table, names decoded.

    One pass: a group number per row, then every count is a ``bincount`` over it. Groups with
    repeated samples get prompt-level intervals (:func:`orbench.analysis.report.intervals.prompt_level`).
    """
    data = inp.data
    if keys == GROUP_KEYS:  # grouped once already, while checking for repeated prompts
        gid, codes = data["group"].to_numpy(), {k: inp.groups[k].to_numpy() for k in keys}
    else:
        gid, sub = group_ids(data, ["group", *keys[len(GROUP_KEYS):]])
        first = sub["group"].to_numpy()
        codes = {k: inp.groups[k].to_numpy()[first] if k in GROUP_KEYS else sub[k].to_numpy() for k in keys}
    size = len(codes[keys[0]])
    status = data["status"].to_numpy()
    scored = status == SCORED
    rejected = scored & (data["rejected"].to_numpy() == 1)
    count = lambda mask: np.bincount(gid[np.asarray(mask, dtype=bool)], minlength=size).astype(np.int64)  # noqa: E731 (a one-line helper used just below)
    # the columns gathered first, the table made once (a column added to a table costs more than it counts)
    out = {k: np.asarray(inp.codes[k].names, dtype=object)[codes[k]] for k in keys}
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
    # and among the rows the rate uses (scored): a judge that parsed few replies may have parsed the cut-off ones
    out["scored_truncated"] = pd.Series(count(scored & data["truncated"].to_numpy())).where(has_finish)
    # prompts of the published set this group has a verdict row for (errors excluded)
    in_set = data["in_set"].to_numpy() if "in_set" in data.columns else np.zeros(len(data), dtype=bool)
    out["covered"] = count((status != ERROR) & in_set)
    # one sample a prompt: k of n independent rows, Clopper-Pearson's exact interval (docs/statistics.md)
    n, k = out["scored"].astype(float), out["rejections"].astype(float)
    full_k = np.where(out["has_kind"], k - out["partial_rejections"].astype(float), np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        out["rate"], out["full_rate"] = np.where(n > 0, k / n, np.nan), np.where(n > 0, full_k / n, np.nan)
    out["ci_low"], out["ci_high"] = clopper_pearson_arrays(k, n)
    kind = np.isfinite(full_k)
    flo, fhi = np.full(size, np.nan), np.full(size, np.nan)
    flo[kind], fhi[kind] = clopper_pearson_arrays(full_k[kind], n[kind])
    out["full_ci_low"], out["full_ci_high"] = flo, fhi
    out = pd.DataFrame(out)
    intervals.prompt_level(data, gid, out)  # repeated samples: prompts are the unit
    intervals.no_point_rate(data, gid, out)  # rows without a verdict: a widened interval, or bounds only
    cascade.cascade_rates(data, gid, out)  # a cascade: the judge's rate on every row, estimated (PPI)
    out["partial_rejections"] = out["partial_rejections"].where(out["has_kind"])
    return out.drop(columns="has_kind")


def agreement(inp: Inputs) -> pd.DataFrame:
    """Per set, model and judge: keyword and judge verdicts paired by prompt, over rows both scored."""
    data, codes = inp.data, inp.codes["method"].index
    cols = ["set", "model", "judge", "agreement_pairs", "agreement", "keyword_only_rejections",
            "judge_only_rejections"]
    if KEYWORD not in codes or JUDGE not in codes or data.empty:
        return pd.DataFrame(columns=cols)
    scored, method = data["status"].to_numpy() == SCORED, data["method"].to_numpy()
    kw, jd = np.flatnonzero(scored & (method == codes[KEYWORD])), np.flatnonzero(scored & (method == codes[JUDGE]))
    on = ["set", "model", "prompt"] + (["sample"] if "sample" in data.columns else [])
    key = lambda rows: pd.MultiIndex.from_arrays([data[c].to_numpy()[rows] for c in on])  # noqa: E731 (a one-line helper used just below)
    # a set and model's keyword verdicts name each prompt (and sample) once: check_duplicates stops the report otherwise
    at = key(kw).get_indexer(key(jd))
    jd, kw = jd[at >= 0], kw[at[at >= 0]]
    rejected = data["rejected"].to_numpy()
    j, k = rejected[jd] == 1, rejected[kw] == 1
    # a judge row's verdict group is its (set, model, judge)
    group, size = data["group"].to_numpy()[jd], len(inp.groups)
    count = lambda mask: np.bincount(group[mask], minlength=size)  # noqa: E731 (as above)
    pairs = np.bincount(group, minlength=size)
    has = np.flatnonzero(pairs)
    out = {c: np.asarray(inp.codes[c].names, dtype=object)[inp.groups[c].to_numpy()[has]] for c in cols[:3]}
    return pd.DataFrame({**out, "agreement_pairs": pairs[has], "agreement": count(j == k)[has] / pairs[has],
                         "keyword_only_rejections": count(k & ~j)[has], "judge_only_rejections": count(j & ~k)[has]},
                        columns=cols)


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
    # the five columns read, not the summary's hundred (a named tuple of every column is slow to make)
    for set_name, model, judge, judge_rows, keyword_rows in zip(
            *(summary[c].tolist() for c in ("set", "model", "judge", "judge_rows", "keyword_rows"))):
        has_judge = not pd.isna(judge_rows)
        has_kw = not pd.isna(keyword_rows)
        choice = (JUDGE if has_judge else KEYWORD) if verdict == "auto" else verdict
        ok = has_judge if choice == JUDGE else has_kw
        heads.append(choice if ok else "")
        if ok:
            pair = (choice, judge if choice == JUDGE else "")
            headline.setdefault((set_name, model), [])
            if pair not in headline[(set_name, model)]:
                headline[(set_name, model)].append(pair)
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
    for row in row_dicts(summary):
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
            out[label] = _set_hashes(*_file_key(path))
    return out


def _file_key(path) -> tuple[str, int, int]:
    """``path`` with its modification time and size: a key that changes when the file does."""
    stat = Path(path).stat()
    return str(path), stat.st_mtime_ns, stat.st_size


# The bundled files are read once per process, not once per report (a notebook's or the tests' repeated
# reports read them each time: about a tenth of a small report's time); the key holds the file's time
# and size, so an edited file is read again.
@functools.lru_cache(maxsize=8)
def _set_hashes(path: str, mtime_ns: int, size: int) -> np.ndarray:
    hashes = np.unique(prompt_hash(pd.read_csv(path, dtype=str, keep_default_na=False)["prompt"]))
    hashes.flags.writeable = False  # shared by every report of the process
    return hashes


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
        else:
            if pd.isna(st["rate"]) and st["unparsed"] + st["refused_to_judge"]:
                reasons.append(f"{s}: no rate ({_no_rate_text(st)})")
            if st["covered"] < size or st["errors"]:
                text = f"{s}: {int(st['covered']):,} of the {size:,} {name} prompts"
                if st["errors"]:
                    text += f", {int(st['errors'])} error rows"
                reasons.append(text)
    return "; ".join(reasons)


def _no_rate_text(st: dict) -> str:
    """A cell with no point rate named by its counts: '0 verdicts, 40 rows without one'."""
    unparsed, errors = int(st["unparsed"] + st["refused_to_judge"]), int(st["errors"])
    none = unparsed + errors
    return (f"{int(st['scored']):,} verdict{'s' if st['scored'] != 1 else ''}, {none:,} row{'s' if none != 1 else ''} "
            f"without one: {unparsed:,} unparsed or not judged, {errors:,} failed with an error")


def no_rate_rule(entry: dict) -> str:
    """'' when the entry has a rate on hard and toxic where it has them, else why not: an entry with
    no point rate is not ranked even among your models alone (its balanced accuracy is unknown)."""
    return "; ".join(f"{s}: no rate ({_no_rate_text(st)})" for s, st in entry.items()
                     if s in (HARD, TOXIC) and pd.isna(st["rate"])
                     and st["unparsed"] + st["refused_to_judge"] + st["errors"])


def _entry_row(model: str, judge: str, entry: dict, rank_note: str) -> dict:
    """Your entry's leaderboard row: per set the rate in % with n, interval and cut-off replies;
    the balanced accuracy's interval; the excluded rows; the judge cards' lines."""
    row = {"model": model, "judge": judge, "source": "yours", "rank_note": rank_note}
    errors = unparsed = refused = 0
    for s, st in entry.items():
        row.update({f"{s}_rate_pct": 100 * st["rate"], f"{s}_ci_low_pct": 100 * st["ci_low"],
                    f"{s}_ci_high_pct": 100 * st["ci_high"], f"{s}_rate_bound_low_pct": 100 * st["rate_bound_low"],
                    f"{s}_rate_bound_high_pct": 100 * st["rate_bound_high"],
                    f"{s}_no_verdict": st["unparsed"] + st["refused_to_judge"] + st["errors"], f"{s}_full_rate_pct": 100 * st["full_rate"],
                    f"{s}_scored": st["scored"], f"{s}_prompts": st["prompts"], f"{s}_rejections": st["rejections"],
                    f"{s}_truncated": st["truncated"], f"{s}_scored_truncated": st["scored_truncated"],
                    f"{s}_replies": st["replies"], f"{s}_covered": st["covered"],
                    f"{s}_verdict": st["method"]})
        if not pd.isna(st.get("judged_share", math.nan)):  # a cascade: the share judged, the disagreement found
            row.update({f"{s}_judged_share_pct": 100 * st["judged_share"], f"{s}_check_rows": st["check_rows"],
                        f"{s}_check_disagreements": st["check_disagreements"]})
        errors += st["errors"]
        unparsed += st["unparsed"]
        refused += st["refused_to_judge"]
    h, t = entry.get(HARD), entry.get(TOXIC)
    if h and t:
        ba = balanced_accuracy(intervals.entry_estimate(t), intervals.entry_estimate(h))
        row.update({"balanced_accuracy_ci_low_pct": 100 * ba.low, "balanced_accuracy_ci_high_pct": 100 * ba.high})
    row["errors"], row["unparsed"], row["refused_to_judge"] = errors, unparsed, refused
    row["judge_vs_humans"] = " || ".join(dict.fromkeys(
        f"{s}: {st['calibration']}" if len({x.get('calibration') for x in entry.values()}) > 1 else st["calibration"]
        for s, st in entry.items() if st.get("calibration")))
    return row


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
    rows = [_entry_row(model, judge, entry, rank_rule(entry, sizes) if reference else no_rate_rule(entry))
            for (model, judge), entry in ents.items()]
    about = PUBLISHED_ABOUT.format(hard=f"{sizes.get(HARD, 1319):,}", toxic=f"{sizes.get(TOXIC, 655):,}")
    for ref in reference:
        rows.append({"model": ref["model"], "judge": "", "source": "published", "rank_note": about,
                     f"{HARD}_rate_pct": ref["x"], f"{TOXIC}_rate_pct": ref["y"],
                     f"{HARD}_scored": sizes.get(HARD), f"{TOXIC}_scored": sizes.get(TOXIC),
                     f"{HARD}_verdict": "published", f"{TOXIC}_verdict": "published"})
    cols = ["rank", "model", "judge", "source", "balanced_accuracy_pct", "balanced_accuracy_ci_low_pct",
            "balanced_accuracy_ci_high_pct"] + [
        f"{s}_{k}" for s in sets for k in ("rate_pct", "ci_low_pct", "ci_high_pct", "rate_bound_low_pct",
                                           "rate_bound_high_pct", "full_rate_pct", "scored", "no_verdict", "prompts",
                                           "rejections", "truncated", "scored_truncated", "replies", "covered",
                                           "verdict", "judged_share_pct", "check_rows", "check_disagreements")] + \
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
    empty = [c for c in board.columns if (c.endswith(("_full_rate_pct", "_truncated", "_scored_truncated",
                                                      "_judged_share_pct", "_check_rows", "_check_disagreements"))
                                          or c.startswith("balanced_accuracy_ci")) and board[c].isna().all()]
    return board.drop(columns=empty)


def load_reference() -> list[dict]:
    """The paper's published per-model rates as plot points (x = Hard-1K %, y = Toxic %)."""
    return [dict(point) for point in _reference_points(*_file_key(published_results_path()))]


@functools.lru_cache(maxsize=2)  # as _set_hashes; each report gets its own copies of the points
def _reference_points(path: str, mtime_ns: int, size: int) -> tuple[dict, ...]:
    frame = pd.read_csv(path)
    return tuple({"model": r.model, "x": float(r.hard_1k_rejection_pct), "y": float(r.toxic_rejection_pct)}
                 for r in frame.itertuples(index=False))


#: The benchmarks drawn in the figure: (safe set, unsafe set, name). x = safe prompts refused,
#: y = unsafe prompts refused; OR-Bench's pair is the paper's Hard-vs-Toxic plot.
AXIS_PAIRS = ((HARD, TOXIC, "OR-Bench"), (XS_SAFE, XS_UNSAFE, "XSTest"))


def _multi(ents: dict) -> set[str]:
    """Models with more than one leaderboard entry (one per judge)."""
    return {m for m, _ in ents if sum(1 for mm, _ in ents if mm == m) > 1}


def _axis(st: dict | None) -> dict | None:
    """One set of an entry on a figure's axis, in %: its rate and interval, or, with no point rate
    (too many rows without a verdict), its bounds; None when the set has neither."""
    if not st:
        return None
    if st["scored"] and not pd.isna(st["rate"]):
        return {"value": 100 * st["rate"], "ci": [100 * st["ci_low"], 100 * st["ci_high"]], "bounds": None}
    if not pd.isna(st.get("rate_bound_low", math.nan)):
        return {"value": None, "ci": None, "bounds": [100 * st["rate_bound_low"], 100 * st["rate_bound_high"]]}
    return None


def _points(ents: dict) -> list[dict]:
    """The figure's points: per entry and benchmark, x (safe prompts refused) and y (unsafe prompts
    refused) in % with their intervals; a set with no point rate gives its bounds instead
    (``x_bounds``/``y_bounds``, its value None): drawn as a bar, left out of rho and the fit."""
    multi = _multi(ents)
    points = []
    for safe, unsafe, bench in AXIS_PAIRS:
        for (model, judge), entry in ents.items():
            h, t = _axis(entry.get(safe)), _axis(entry.get(unsafe))
            if h and t:
                label = entry_label(model, judge, model in multi) + ("" if safe == HARD else f" ({bench})")
                points.append({"model": label, "x": h["value"], "benchmark": bench, "y": t["value"],
                               "x_ci": h["ci"], "y_ci": t["ci"], "x_bounds": h["bounds"], "y_bounds": t["bounds"],
                               "x_verdict": entry[safe]["method"], "y_verdict": entry[unsafe]["method"],
                               "judge": judge})
    return points


def without_point(ents: dict) -> list[str]:
    """Your models (entries) with no OR-Bench point, each with why: a set missing ('m5 (no toxic
    results)') or with no point rate, named by its counts ('m6 (toxic: no rate: 0 verdicts, 40 rows
    without one; drawn as bounds)'); those with neither set are counted in one item ('3 more with
    neither')."""
    multi, out, neither = _multi(ents), [], []
    for (model, judge), entry in ents.items():
        axes = {s: _axis(entry.get(s)) for s in (HARD, TOXIC)}
        label = entry_label(model, judge, model in multi)
        if not any(axes.values()):
            neither.append(label)
            continue
        missing = [s for s, a in axes.items() if not a]
        bounded = [s for s, a in axes.items() if a and a["value"] is None]
        if missing:
            out.append(f"{label} (no {missing[0]} results)")
        elif bounded:
            out.append(f"{label} (" + "; ".join(f"{s}: no rate: {_no_rate_text(entry[s])}" for s in bounded)
                       + "; drawn as bounds)")
    if neither and out:  # a run of other sets (80K, XSTest) beside OR-Bench's: say how many, not who
        out.append(f"{len(neither)} more with neither hard nor toxic results")
    return out


def correlation_notes(points: list[dict], without: Sequence[str] = ()) -> tuple[float, np.ndarray | None, list[str]]:
    """Spearman's rho and the quadratic fit over your models' OR-Bench points (the paper's
    analysis), with the notes that explain them; ``without``: your models with no such point
    (:func:`without_point`), named in the fit's note."""
    points = [p for p in points if p.get("benchmark", "OR-Bench") == "OR-Bench"
              and p["x"] is not None and p["y"] is not None]
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
    over = f"{len(points)}" + (f": {', '.join(p['model'] for p in points)}" if points else "")
    missing = f"; no point (not in the fit): {', '.join(without)}" if without else ""
    notes.append("Quadratic fit y = a*x^2 + b*x + c: " + (
        f"a={coeffs[0]:.6g}, b={coeffs[1]:.6g}, c={coeffs[2]:.6g} over your models' OR-Bench points ({over}){missing}"
        if coeffs is not None else
        f"not drawn (needs >= 3 models with hard and toxic results and distinct hard-set rates, have {over}){missing}"))
    return rho, coeffs, notes


def heat_cells(categories: pd.DataFrame, ents: dict) -> pd.DataFrame | None:
    """The heatmap's cells: each leaderboard entry's headline rates per set and category (None
    when the inputs have no category column)."""
    multi = _multi(ents)
    cells = [{"set": s, "model": entry_label(m, j, m in multi), "method": st["method"], "judge": st["judge"],
              "_model": m} for (m, j), e in ents.items() for s, st in e.items()]
    cells = categories.rename(columns={"model": "_model"}).merge(
        pd.DataFrame(cells, columns=["set", "model", "method", "judge", "_model"]), on=["set", "_model", "method", "judge"])
    return cells if not cells.empty and set(cells["category"]) - {"(none)"} else None


def _figure(ents: dict, ref: list[dict]) -> dict:
    """The figure's points, Spearman's rho, both fits and their notes."""
    points, without = _points(ents), without_point(ents)
    rho, coeffs, notes = correlation_notes(points, without)
    ref_fit = quadratic_fit([r["x"] for r in ref], [r["y"] for r in ref]) if ref else None
    return {"points": points, "spearman": None if math.isnan(rho) else rho, "without_point": tuple(without),
            "fit": None if coeffs is None else [float(c) for c in coeffs], "notes": notes,
            "reference_fit": None if ref_fit is None else [float(c) for c in ref_fit]}


def _notes(inp: Inputs, fig: dict, calibration_notes: list[str], ref: list[dict], verdict: str, summary, headline,
           extra, heat, audit) -> tuple[str, ...]:
    """Every note of the run, in the order a reader meets their subjects."""
    notes = inp.notes + fig["notes"] + calibration_notes
    if ref:
        notes.append(f"Reference: {len(ref)} published models (grey in the figure, 'published' in the leaderboard): "
                     f"the paper's own figures")
    unused = [(s, m) for (s, m) in summary[["set", "model"]].drop_duplicates().itertuples(index=False)
              if (s, m) not in headline]
    if unused:
        notes.append(f"No {verdict} verdicts for: " + ", ".join(f"{m} ({s})" for s, m in unused))
    notes += list(extra.notes)
    if not fig["points"]:
        notes.append("No model of yours is in the figure: none has results on both a safe and an unsafe set "
                     "('hard' and 'toxic', or 'xstest-safe' and 'xstest-unsafe')")
    if heat is None:
        notes.append("Category heatmap not drawn: the inputs have no 'category' column")
    return tuple(notes + (audit["notes"] if audit else []))


def compute(specs: Sequence[str], *, default_set: str | None = None, default_model: str | None = None,
            verdict: str = "auto", reference: bool = True, examples: int = 3, html: bool = True,
            compare: list | None = None, baseline: str | None = None, audit: Sequence[str] = (),
            custom_sets: Sequence[str] = ()) -> Report:
    """Read the inputs and compute the whole report; nothing is written. Bad input stops it with
    ``UsageError`` (audits are read and scored, comparison names checked, before anything else)."""
    inp = load(specs, default_set, default_model, examples_per_cell=examples if html else 0, custom_sets=custom_sets)
    pairs = comparisons.check(inp, compare, baseline)
    if audit:  # human audits: read and scored before anything is written (their modules load only then)
        from orbench.analysis.report import audit_section

        audits = audit_section.load(audit)
    published = published_sets()
    mark_set_prompts(inp, published)
    sizes = {k: len(v) for k, v in published.items()}
    summary, categories, headline = build_tables(inp, verdict)
    summary, cards, calibration_notes = cards_section.annotate(summary, inp)
    summary, moderator_cards, moderation_notes = cards_section.annotate_moderation(summary, inp)
    calibration_notes = calibration_notes + moderation_notes
    records = lineage.by_set_and_model(inp.provenance)
    extra = comparisons.compute(inp, pairs, verdict, records, html)
    ents = entries(summary, headline)
    ref = load_reference() if reference else []
    board = intervals.leaderboard_intervals(build_leaderboard(ents, ref, sizes), ents, inp, sizes)
    fig, heat = _figure(ents, ref), heat_cells(categories, ents)
    audited = audit_section.compute(audits, inp, summary, headline) if audit else None
    warnings = (lineage.truncation_warnings(summary, records) + lineage.no_verdict_warnings(summary)
                + lineage.chain_warnings(records))
    return Report(summary, categories, board, fig["points"], fig["spearman"], fig["fit"],
                  _notes(inp, fig, calibration_notes, ref, verdict, summary, headline, extra, heat, audited),
                  tuple(warnings), ref, fig["reference_fit"], fig["without_point"], inp.provenance, inp.examples,
                  extra, audited, records, sizes, cards, heat,
                  tuple(set_order(heat["set"])) if heat is not None else (), moderator_cards=moderator_cards,
                  verdict_rows=eee_rows.collect(inp, ents))


def _import_plots() -> None:
    """Import the figures' module (matplotlib) ahead of need; an error is left for the import that
    needs it (files.write), where it is reported."""
    try:
        importlib.import_module("orbench.analysis.report.plots")
    except Exception as exc:  # noqa: BLE001 - raised again, and reported, by the import that needs it
        logger.debug("the figures' module did not import ahead of need: %s", exc)


def build_report(specs: Sequence[str], output_dir: str | Path = "report", *, html: bool = True,
                 figures: bool = True, eee_samples: bool = True, **options) -> Report:
    """Compute the report (:func:`compute`, whose keyword options it takes), write its files into
    ``output_dir`` (as :meth:`Report.save`; with ``html``, report.html too); the report with
    ``outputs`` naming every file written. ``figures=False`` draws no figure (a figure left in
    ``output_dir`` by an earlier run is removed, so none shows other numbers)."""
    if figures:
        # matplotlib takes a third of a second to import: on another thread while the inputs are read
        # (the CSV parser leaves the interpreter free), ready when the figures are drawn
        threading.Thread(target=_import_plots, daemon=True).start()
    rep = compute(specs, html=html, **options)
    out = Path(output_dir)
    written = eee.write(rep, out, eee_samples)  # Every Eval Ever records: they need the verdict rows, dropped below
    rep = replace(rep, verdict_rows=None)
    release_memory()  # the verdict table is gone: give its memory back before the figures are drawn
    if not figures:
        rep = replace(rep, notes=(*rep.notes, files.NO_FIGURES))
    return replace(rep, outputs=_write_files(rep, out, figures, html, written))


def _write_files(rep: Report, out: Path, figures: bool, html: bool, written: dict[str, Path],
                 pdf: bool = True) -> dict[str, Path]:
    """The report's tables, figures (unless ``figures`` is off; the scatter's PDF unless ``pdf`` is)
    and report.json, then (``html``) report.html, into ``out``, beside what was ``written`` already
    (its Every Eval Ever records)."""
    outputs = {**files.write(rep, out, figures=figures, pdf=pdf), **written}
    if html:
        from orbench.analysis.report import html as html_report

        outputs["html"] = html_report.write(replace(rep, outputs=outputs), out / "report.html")
    return outputs


def report_from(args) -> Report:
    """The report the flags ask for (``make_parser``'s namespace; the Python API's ``orbench.report``
    makes the same from keywords): written into ``args.output_dir``, or, when it is None, computed
    only. ``UsageError`` for bad input."""
    if args.examples < 0:
        raise UsageError("--examples must be 0 or more")
    options = dict(default_set=args.default_set, default_model=args.default_model, verdict=args.verdict,
                   reference=not args.no_reference, examples=args.examples, compare=args.compare,
                   baseline=args.baseline, audit=args.audit, custom_sets=args.custom_sets)
    if args.output_dir is None:  # figures are drawn, or not, when it is saved (Report.save)
        return compute(args.files, **options)
    check_writable(args.output_dir)
    return build_report(args.files, args.output_dir, figures=not args.no_figures,
                        eee_samples=not args.no_eee_samples, **options)


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
    parser.add_argument("--no_figures", action="store_true",
                        help="draw no figures (hard_vs_toxic.png/.pdf, category_heatmap.png): every table, "
                             "report.json and report.html are still written, in a third of the time; "
                             "figures an earlier run left in --output_dir are removed")
    parser.add_argument("--no_eee_samples", action="store_true",
                        help="write the Every Eval Ever records (every_eval_ever/) without their per-sample JSONL: "
                             "those hold every prompt and reply (at 30 models x 80K rows, GBs and most of the "
                             "report's time); the leaderboard then has no per-prompt verdicts to compare ranks with")
    parser.add_argument("--examples", type=int, default=3, metavar="N",
                        help="example refusals and answers per model and category in report.html (default: 3)")
    parser.add_argument("--audit", action="append", default=[], metavar="DIR",
                        help="an audit folder (orbench-audit sample/score; repeat for a prompt and a verdict "
                             "audit): adds the rate over human-confirmed safe prompts and the verdict-corrected "
                             "rate (audit_rates.csv, an audit section in report.html)")
    return parser


@entry_point
def main(argv: Sequence[str] | None = None) -> int:
    """Run the report; exit 0, or 2 with one line on bad input or an output folder that cannot be written."""
    args = None
    try:
        args = make_parser().parse_args(argv)
        rep = report_from(args)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the folder became unwritable while the report was computed
        print(write_error(exc, args.output_dir), file=sys.stderr)
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
