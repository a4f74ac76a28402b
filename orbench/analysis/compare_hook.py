"""The report's paired comparisons and repeated-sample statistics: files, notes and HTML.

``report.py`` calls :func:`check` once the inputs are read (a bad ``--compare``/``--baseline``
name stops the run before any file is written) and :func:`run` once the summary exists. The
statistics live in :mod:`orbench.analysis.compare`; this module writes

* ``comparison.csv`` (``--compare A B`` / ``--baseline A``): one row per set, category (``all``
  for the whole set), pair and judge; columns :data:`orbench.analysis.compare.COLUMNS`;
* ``samples.csv`` and ``prompt_shares.csv`` (inputs from stage 4 ``--samples K``): per model and
  set the rate over all samples with its prompt-level interval and the share of prompts refused
  in some samples and answered in others; per prompt its refusal share. (The summary's and the
  categories' intervals of such groups are prompt-level too: ``report_stats.prompt_level``.)

and returns the report.html sections: the comparison table, the prompts that flipped with both
responses, and the repeated-sample table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from orbench.analysis import compare as cmp
from orbench.analysis.report_inputs import Inputs
from orbench.analysis.stats import flag_marks, round_for_csv
from orbench.tables import write_csv_atomic

FLIPS_SHOWN = 10          # flipped prompts shown per direction and comparison in report.html
RESPONSE_CHARS = 800


@dataclass
class Extra:
    """What :func:`run` adds to the report."""

    notes: list[str] = field(default_factory=list)
    outputs: dict[str, Path] = field(default_factory=dict)
    html: str = ""


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
        notes.append(f"{p['name']}: cascade verdicts ({total} rows): {by}; "
                     f"{judged / total:.1%} reached the judge {judge}" if total else
                     f"{p['name']}: cascade verdicts: none")
    return notes


def run(inp: Inputs, pairs: list[tuple[str, str]], verdict: str, summary: pd.DataFrame,
        out: Path, html: bool = True) -> Extra:
    """Compute, write the CSV files into ``out`` and build the HTML sections."""
    extra = Extra(notes=cascade_notes(inp))
    if not inp.data.empty and "sample" in inp.data.columns and inp.data["sample"].any():
        cmp.require_libraries("repeated samples (a 'sample' column)")
    table, shares = cmp.sample_stats(inp)
    comp = cmp.compare(inp, pairs, verdict) if pairs else None
    if table.empty and comp is None:
        return extra  # the cascade notes only
    out.mkdir(parents=True, exist_ok=True)
    parts = []
    if not table.empty:
        write_csv_atomic(round_for_csv(table), out / "samples.csv")
        write_csv_atomic(round_for_csv(cmp.with_texts(inp, shares)), out / "prompt_shares.csv")
        extra.outputs.update({"samples": out / "samples.csv", "prompt_shares": out / "prompt_shares.csv"})
        extra.notes.append(
            f"Repeated samples ({', '.join(sorted({f'{m} on {s}' for s, m in table[['set', 'model']].itertuples(index=False)}))}): "
            f"rates are over all samples; every 95% interval of these groups (summary.csv, categories.csv, "
            f"samples.csv, the leaderboard) counts prompts, not rows: Wilson on the prompt-clustered effective "
            f"sample size (docs/statistics.md)")
        if html:
            parts.append(_samples_html(table))
    if comp is not None:
        write_csv_atomic(round_for_csv(comp.table), out / "comparison.csv")
        extra.outputs["comparison"] = out / "comparison.csv"
        extra.notes.extend(comp.notes)
        if html:
            parts.append(_comparison_html(comp.table, cmp.flipped_examples(inp, comp, FLIPS_SHOWN),
                                          comp.notes))
    extra.html = "\n".join(parts)
    return extra


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


def _comparison_row(r: dict) -> list[str]:
    from orbench.analysis.html_report import cell, esc, num, pct

    diff = (f"{100 * r['diff']:+.1f} [{100 * r['ci_low']:+.1f}, {100 * r['ci_high']:+.1f}]"
            if not math.isnan(r["ci_low"]) else f"{100 * r['diff']:+.1f}") + flag_marks(r.get("ci_flag"))
    return [cell(esc(r["set"])), cell(esc(r["category"])), cell(esc(r["model_a"])), cell(esc(r["model_b"])),
            cell(esc(r["judge"])), num(str(int(r["n"]))), num(pct(100 * r["rate_a"])), num(pct(100 * r["rate_b"])),
            num(diff), num(str(int(r["a_only"]))), num(str(int(r["b_only"]))), num(_odds(r)), num(_p(r["p_value"])),
            num(_p(r["p_midp"])), num(_p(r["p_holm"])), num(_p(r["p_holm_run"])), cell(esc(r["test"]))]


def _comparison_html(table: pd.DataFrame, flips: list[dict], notes: list[str]) -> str:
    from orbench.analysis.html_report import cell, esc
    from orbench.analysis.html_report import table as html_table

    rows = [_comparison_row(r) for r in table.to_dict("records")]
    head = ["set", "category", "A", "B", "verdicts", "prompts", "A %", "B %", "B &minus; A, points [95% CI]",
            "A only", "B only", "odds ratio B:A [95% CI]", "p", "p (mid-p)", "p (Holm, set)", "p (Holm, run)", "test"]
    parts = ["<h2>Paired comparisons</h2>",
             ("<p>On the prompts both models scored, with the same kind of verdict and the same judge. "
              "<i>A only</i> / <i>B only</i>: prompts refused by one model only (with repeated samples: "
              "a higher refusal share). One sample per prompt: Newcombe's paired interval, McNemar's exact test "
              "and beside it the mid-p McNemar test (Fagerland et al. 2013), and the discordant-pair odds ratio "
              "(B only : A only) with its transformed Wilson interval. Repeated samples: each rate's prompt-level "
              "interval combined by Newcombe's method, and a sign-flip permutation test of the difference shown. "
              "p (Holm, set): adjusted across the categories of a set; p (Holm, run): adjusted across every "
              "comparison of the run at the same level (whole sets together, categories together), so many "
              "models against one baseline stay controlled (Holm: family-wise error).</p>"),
             html_table(head, rows)]
    if notes:
        parts.append("<ul class=notes>" + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>")
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
        body = html_table(["category", "flip", "prompt", f"A: {esc(f['model_a'])}", f"B: {esc(f['model_b'])}"],
                          items, cls="ex") if items else "<p class=muted>No prompt flipped.</p>"
        parts.append(f"<details><summary>{summary}</summary>{body}</details>")
    return "\n".join(parts)


def _samples_html(table: pd.DataFrame) -> str:
    from orbench.analysis.html_report import cell, esc, num
    from orbench.analysis.html_report import table as html_table

    rows = [[cell(esc(r["set"])), cell(esc(r["model"])), cell(esc(r["judge"])), num(str(r["samples"])),
             num(str(r["prompts"])),
             num(f"{100 * r['rate']:.1f} [{100 * r['ci_low']:.1f}, {100 * r['ci_high']:.1f}]"
                 + flag_marks(r["ci_flag"])),
             num(f"{100 * r['flip_share']:.1f}" if not math.isnan(r["flip_share"]) else "-")]
            for r in table.to_dict("records")]
    return ("<h2>Repeated samples</h2><p>Rate over all samples with its 95% interval counting prompts, not rows "
            "(Wilson on the prompt-clustered effective sample size); <i>flip %</i>: prompts refused in some "
            "samples and answered in others. Per-prompt shares: prompt_shares.csv.</p>"
            + html_table(["set", "model", "verdicts", "samples (max)", "prompts", "rate % [95% CI]", "flip %"],
                         rows))
