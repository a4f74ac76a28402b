"""The report's paired comparisons and repeated-sample statistics: computed, written, shown.

``report.py`` calls :func:`check` once the inputs are read (a bad ``--compare``/``--baseline``
name stops the run before any file is written), :func:`compute` with the rest of the report,
:func:`write` with its other files, and report.html shows :func:`comparison_html` (near the top:
the question a comparison asks comes first) and :func:`samples_html`. The statistics live in
:mod:`orbench.analysis.compare`; the files are

* ``comparison.csv`` (``--compare A B`` / ``--baseline A``): one row per set, category (``all``
  for the whole set), pair and judge; columns :data:`orbench.analysis.compare.COLUMNS`;
* ``samples.csv`` and ``prompt_shares.csv`` (inputs from stage 4 ``--samples K``): per model and
  set the rate over all samples with its prompt-level interval and the share of prompts refused
  in some samples and answered in others; per prompt its refusal share. (The summary's and the
  categories' intervals of such groups are prompt-level too: ``report_stats.prompt_level``.)

Beside the comparison's figures, what the meta files say differs between the runs of A and B
(system prompt, temperature, ...: :func:`orbench.analysis.report.lineage.setting_differences`), and the
prompts that flipped with both responses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from orbench.analysis import compare as cmp
from orbench.analysis.html_kit import cell, esc, fixed, flag_marks, num, table
from orbench.analysis.report import lineage
from orbench.analysis.report.inputs import Inputs
from orbench.analysis.stats import round_for_csv
from orbench.run.tables import row_dicts, write_csv_atomic
from orbench.scoring.vocab import KEYWORD

FLIPS_SHOWN = 10          # flipped prompts shown per direction and comparison in report.html
RESPONSE_CHARS = 800


@dataclass(frozen=True)
class Extra:
    """The comparisons' and repeated samples' part of a report (:func:`compute`)."""

    notes: tuple[str, ...] = ()
    samples: pd.DataFrame | None = None      # samples.csv
    shares: pd.DataFrame | None = None       # prompt_shares.csv, the prompts as text
    comparison: pd.DataFrame | None = None   # comparison.csv
    comparison_notes: tuple[str, ...] = ()
    flips: tuple[dict, ...] = ()             # per compared set, pair and judge: flipped prompts, both responses
    settings: tuple[dict, ...] = ()          # per compared set, pair and judge: the settings that differ


def check(inp: Inputs, compare: list | None, baseline: str | None) -> list[tuple[str, str]]:
    """The model pairs to compare (``UsageError`` for a model not in the inputs)."""
    if not compare and not baseline:
        return []
    cmp.require_libraries("--baseline" if baseline and not compare else "--compare")
    return cmp.model_pairs(inp, [list(p) for p in compare or []], baseline)


def cascade_notes(inp: Inputs) -> list[str]:
    """One note per input judged with stage 5 ``--cascade``: how many rows each source decided
    (from the input's meta file)."""
    notes = []
    for p in inp.provenance:
        meta = p.get("meta") or {}
        sources = meta.get("verdict_sources")
        if not isinstance(sources, dict) or not sources:
            continue
        judge = (meta.get("cascade") or {}).get("judge", "the judge")
        total = sum(int(v) for v in sources.values())
        by = ", ".join(f"{int(v)} by {k}" for k, v in sorted(sources.items(), key=lambda kv: -int(kv[1])))
        judged = int(sources.get(judge, 0))
        notes.append((f"{p['name']}: cascade verdicts ({total} rows): {by}; "
                      f"{judged / total:.1%} reached the judge {judge}" if total else
                      f"{p['name']}: cascade verdicts: none") + check_note(meta.get("check_sample")))
    return notes


def check_note(check) -> str:
    """What a cascade's check sample (the meta file's ``check_sample``) found, or that it has none."""
    if not isinstance(check, dict):
        return ("; no check sample (an output of an earlier version): its rate is the cascade's verdicts "
                "as they are and carries no measure of the keyword matcher's error")
    parts = []
    for name in ("refusal", "answer"):
        c = check.get(name) or {}
        parts.append(f"{c.get('checked', 0)} of {c.get('sure', 0)} sure {name}s checked by the judge, "
                     f"{c.get('disagreements', 0)} disagreeing")
    return (f"; check sample ({float(check.get('share', 0)):.0%} of the sure rows, seed {check.get('seed')}): "
            + "; ".join(parts) + "; the rate is the judge's on every row estimated from them (ci_method ppi)")


def compute(inp: Inputs, pairs: list[tuple[str, str]], verdict: str, records: list[dict], html: bool = True) -> Extra:
    """The comparisons asked for and the repeated-sample tables, with their notes (nothing written).
    ``records``: who produced each model's responses (:func:`orbench.analysis.report.lineage.by_set_and_model`);
    ``html``: also the flipped prompts' texts (read again from the inputs)."""
    notes = cascade_notes(inp)
    if not inp.data.empty and "sample" in inp.data.columns and inp.data["sample"].any():
        cmp.require_libraries("repeated samples (a 'sample' column)")
    samples, shares = cmp.sample_stats(inp)
    comp = cmp.compare(inp, pairs, verdict) if pairs else None
    if samples.empty and comp is None:
        return Extra(notes=tuple(notes))
    if not samples.empty:
        which = sorted({f"{m} on {s}" for s, m in samples[["set", "model"]].itertuples(index=False)})
        notes.append(f"Repeated samples ({', '.join(which)}): rates are over all samples; every 95% interval of "
                     f"these groups (summary.csv, categories.csv, samples.csv, the leaderboard) counts prompts, not "
                     f"rows: Clopper-Pearson on the prompt-clustered effective sample size (docs/statistics.md)")
    if comp is None:
        return Extra(notes=tuple(notes), samples=samples, shares=cmp.with_texts(inp, shares))
    settings = tuple(lineage.setting_differences(records, f["set"], f["model_a"], f["model_b"],
                                                 "" if f["judge"] == KEYWORD else f["judge"]) for f in comp.flips)
    notes += comp.notes + settings_notes(settings)
    return Extra(notes=tuple(notes), samples=None if samples.empty else samples,
                 shares=None if samples.empty else cmp.with_texts(inp, shares), comparison=comp.table,
                 comparison_notes=tuple(comp.notes), settings=settings,
                 flips=tuple(cmp.flipped_examples(inp, comp, FLIPS_SHOWN)) if html else ())


def settings_notes(settings) -> list[str]:
    """One console note per compared pair: the settings that differ, with the sets they hold for."""
    by_pair: dict[tuple[str, str, str], list[str]] = {}
    for d in settings:
        by_pair.setdefault((d["a"], d["b"], lineage.differences_text(d)), []).append(d["set"])
    return [f"{a} vs {b} ({', '.join(dict.fromkeys(sets))}): what the meta files say differs: {text}"
            for (a, b, text), sets in by_pair.items()]


def write(extra: Extra, out: Path) -> dict[str, Path]:
    """Write comparison.csv, samples.csv and prompt_shares.csv (those there are); their paths."""
    outputs = {}
    for name, frame, key in (("samples.csv", extra.samples, "samples"),
                             ("prompt_shares.csv", extra.shares, "prompt_shares"),
                             ("comparison.csv", extra.comparison, "comparison")):
        if frame is not None:
            out.mkdir(parents=True, exist_ok=True)
            write_csv_atomic(round_for_csv(frame), out / name)
            outputs[key] = out / name
    return outputs


# ---------------------------------------------------------------- HTML

def _p(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.2g}" if value < 0.001 else f"{value:.3f}"


def _odds(r: dict) -> str:
    value, low, high = r["odds_ratio"], r["or_ci_low"], r["or_ci_high"]
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    show = lambda v: "&infin;" if v == math.inf else f"{v:.2f}"  # noqa: E731 (a one-line helper used just below)
    return f"{show(value)} [{show(low)}, {show(high)}]"


def _count(value) -> str:
    return "-" if value is None or pd.isna(value) else str(int(value))


def _comparison_row(r: dict) -> list[str]:
    if not math.isnan(r["diff_bound_low"]):  # too many rows without a verdict: bounds, no p-value
        diff = (f"<span class=warn>no p-value: bounds</span> [{100 * r['diff_bound_low']:+.1f}, "
                f"{100 * r['diff_bound_high']:+.1f}]" + flag_marks(r.get("ci_flag")))
    else:
        diff = (f"{100 * r['diff']:+.1f} [{100 * r['ci_low']:+.1f}, {100 * r['ci_high']:+.1f}]"
                if not math.isnan(r["ci_low"]) else f"{100 * r['diff']:+.1f}") + flag_marks(r.get("ci_flag"))
    return [cell(esc(r["set"])), cell(esc(r["category"])), cell(esc(r["model_a"])), cell(esc(r["model_b"])),
            cell(esc(r["judge"])), num(str(int(r["n"]))), num(fixed(100 * r["rate_a"])), num(fixed(100 * r["rate_b"])),
            num(diff), num(_count(r["a_only"])), num(_count(r["b_only"])), num(_odds(r)), num(_p(r["p_value"])),
            num(_p(r["p_midp"])), num(_p(r["p_holm"])), num(_p(r["p_holm_run"])), cell(esc(r["test"]))]


def _settings_rows(settings) -> list[list[str]]:
    """Per compared pair and set: what the meta files say differs between the runs of A and B."""
    rows = []
    for d in settings:
        lines = [f"{esc(label)}: <code>{esc(va)}</code> (A) vs <code>{esc(vb)}</code> (B)"
                 for label, va, vb in d["differs"]] + [f"<span class=warn>{esc(u)}</span>" for u in d["unknown"]]
        what = "<br>".join(lines) or "<span class=muted>no setting differs in the meta files</span>"
        rows.append([cell(esc(d["a"])), cell(esc(d["b"])), cell(esc(d["set"])), cell(what)])
    return rows


def _flips_html(flips) -> list[str]:
    parts = []
    for f in flips:
        items = []
        for it in f["items"]:
            ra, rb = (str(it[k])[:RESPONSE_CHARS] for k in ("response_a", "response_b"))
            who = f["model_a"] if it["direction"] == "a_only" else f["model_b"]
            items.append([cell(esc(it["category"])), cell(f"refused by {esc(who)} only"),
                          f"<td class=text>{esc(it['prompt'])}</td>", f"<td class=text>{esc(ra)}</td>",
                          f"<td class=text>{esc(rb)}</td>"])
        summary = (f"{esc(f['model_a'])} vs {esc(f['model_b'])} &middot; {esc(f['set'])} &middot; "
                   f"{esc(f['judge'])}: {f['a_only']} refused by A only, {f['b_only']} by B only")
        body = table(["category", "flip", "prompt", f"A: {esc(f['model_a'])}", f"B: {esc(f['model_b'])}"],
                     items, cls="ex") if items else "<p class=muted>No prompt flipped.</p>"
        parts.append(f"<details><summary>{summary}</summary>{body}</details>")
    return parts


def comparison_html(extra: Extra) -> str:
    """report.html's comparison section ('' without a comparison): what differs between the two
    runs, the paired figures, the notes, the prompts that flipped."""
    if extra.comparison is None:
        return ""
    records = row_dicts(extra.comparison)
    whole = [_comparison_row(r) for r in records if r["category"] == cmp.ALL]
    per_category = [_comparison_row(r) for r in records if r["category"] != cmp.ALL]
    head = ["set", "category", "A", "B", "verdicts", "prompts", "A %", "B %", "B &minus; A, points [at the odds ratio's limits]",
            "A only", "B only", "odds ratio B:A [95% CI]", "p", "p (mid-p)", "p (Holm, set)", "p (Holm, run)", "test"]
    parts = ["<h2>Paired comparisons</h2>",
             "<h3>What differs between the runs of A and B</h3><p>From each input's meta file and its ancestors' "
             "(the run that produced the responses; for judge verdicts, the judge's own settings too).</p>",
             table(["A", "B", "set", "settings that differ"], _settings_rows(extra.settings)),
             "<h3>The difference, prompt by prompt</h3>",
             ("<p>On the prompts both models scored, with the same kind of verdict and the same judge. "
              "<i>A only</i> / <i>B only</i>: prompts refused by one model only (with repeated samples: "
              "a higher refusal share). The test, whatever the samples per prompt (one each, one against K, "
              "unequal counts): the exact conditional test of \"the same refusal probability per prompt\": each "
              "prompt's pooled refusals are placed among its pooled samples at random (a hypergeometric draw), the "
              "statistic is B's refusals summed over the prompts, its exact distribution their convolution; p is "
              "two-sided, twice the smaller tail (p_b_more in comparison.csv: the one-sided p for B refusing more); "
              "with one sample each it is McNemar's exact test (beside it the mid-p, Fagerland et al. 2013). The "
              "odds ratio B:A is the conditional common odds ratio with its exact interval, inverted from the same "
              "test; the difference's interval is the difference those limits imply given each prompt's pooled "
              "refusals, so it excludes 0 exactly when p &lt; 0.05. The rates are the mean of the prompts' refusal "
              "shares. Where more than 5% of a side's rows in a cell have no verdict (unparsed, not judged, or "
              "failed with an error), the cell has no p-value: worst-case bounds on the difference instead. "
              "p (Holm, set): adjusted across the categories of a set; p (Holm, run): adjusted across every "
              "comparison of the run at the same level (whole sets together, categories together), so many "
              "models against one baseline stay controlled (Holm: family-wise error).</p>"),
             table(head, whole)]
    if per_category:
        parts.append(f"<details><summary>Per category ({len(per_category)} rows)</summary>"
                     + table(head, per_category) + "</details>")
    if extra.comparison_notes:
        parts.append("<ul class=notes>" + "".join(f"<li>{esc(n)}</li>" for n in extra.comparison_notes) + "</ul>")
    return "\n".join(parts + _flips_html(extra.flips))


def samples_html(extra: Extra) -> str:
    """report.html's repeated-samples section ('' without repeated samples)."""
    if extra.samples is None:
        return ""
    rows = [[cell(esc(r["set"])), cell(esc(r["model"])), cell(esc(r["judge"])), num(str(r["samples"])),
             num(str(r["prompts"])),
             num(f"{100 * r['rate']:.1f} [{100 * r['ci_low']:.1f}, {100 * r['ci_high']:.1f}]" + flag_marks(r["ci_flag"])
                 if not math.isnan(r["rate"]) else
                 f"<span class=warn>no rate: {int(r['no_verdict'])} rows without a verdict</span><br><span class=muted>"
                 f"bounds [{fixed(100 * r['rate_bound_low'])}, {fixed(100 * r['rate_bound_high'])}]</span>"
                 + flag_marks(r["ci_flag"])),
             num(f"{100 * r['flip_share']:.1f}" if not math.isnan(r["flip_share"]) else "-")]
            for r in row_dicts(extra.samples)]
    return ("<h2>Repeated samples</h2><p>Rate over all samples with its 95% interval counting prompts, not rows "
            "(Clopper-Pearson on the prompt-clustered effective sample size); <i>flip %</i>: prompts refused in some "
            "samples and answered in others. Per-prompt shares: prompt_shares.csv.</p>"
            + table(["set", "model", "verdicts", "samples (max)", "prompts", "rate % [95% CI]", "flip %"], rows))
