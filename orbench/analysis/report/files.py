"""The report's files: the tables as CSV, the figures, the Markdown leaderboard and report.json.

:func:`write` takes a computed :class:`orbench.analysis.report.build.Report` (nothing is computed here)
and writes ``summary.csv``, ``categories.csv``, ``leaderboard.csv``/``.md``, ``hard_vs_toxic.png``/
``.pdf``, ``category_heatmap.png``, ``report.json`` and, with a comparison, repeated samples or an
audit, their files (:mod:`orbench.analysis.report.comparisons`, :mod:`orbench.analysis.report.audit_section`).
The CSVs keep p-values at full precision and other figures at 6 digits (4 in the leaderboard).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from orbench.analysis.report import comparisons
from orbench.analysis.stats import round_for_csv
from orbench.benchmark.sets import CITATION
from orbench.run.tables import row_dicts, write_csv_atomic
from orbench.scoring.vocab import JUDGE, KEYWORD

#: The paper, named short where the full citation is given elsewhere (the figure's own caption).
SHORT_CITATION = "Cui et al. 2024, arXiv:2405.20947"


#: The note of a report run without figures.
NO_FIGURES = "Figures not drawn (--no_figures)"
#: The figures' files, by their name in ``Report.outputs``.
FIGURES = {"figure_png": "hard_vs_toxic.png", "figure_pdf": "hard_vs_toxic.pdf", "heatmap": "category_heatmap.png"}


def write(rep, out: Path, *, figures: bool = True, pdf: bool = True) -> dict[str, Path]:
    """Write every file of ``rep`` into ``out``; what was written, by name (as ``Report.outputs``).
    ``pdf=False`` leaves out the scatter's PDF (``Report.html``: the page shows the PNG).

    A figure not drawn this time (``figures=False``, no point to plot, no category column) is
    removed from ``out`` if an earlier report left it there: it would show other numbers."""
    out.mkdir(parents=True, exist_ok=True)
    outputs = comparisons.write(rep.extra, out)
    write_csv_atomic(round_for_csv(rep.summary), out / "summary.csv")
    write_csv_atomic(round_for_csv(rep.categories), out / "categories.csv")
    write_csv_atomic(round_for_csv(rep.leaderboard, 4), out / "leaderboard.csv")
    outputs.update({"summary": out / "summary.csv", "categories": out / "categories.csv",
                    "leaderboard_csv": out / "leaderboard.csv"})
    if figures:
        from orbench.analysis.report import plots  # matplotlib: imported while the inputs were read (report.build_report)

        if rep.points or rep.reference:
            outputs.update(plots.scatter(rep.points, rep.fit, rep.spearman, out / "hard_vs_toxic",
                                         reference=rep.reference, reference_fit=rep.reference_fit,
                                         caption=SHORT_CITATION, without=rep.without_point, pdf=pdf))
        if rep.heat_cells is not None:
            outputs["heatmap"] = plots.heatmap(rep.heat_cells, rep.heat_sets, out / FIGURES["heatmap"])
    for name, filename in FIGURES.items():
        if name not in outputs:
            (out / filename).unlink(missing_ok=True)
    md = out / "leaderboard.md"
    md.write_text(leaderboard_markdown(rep.leaderboard, rep.summary, list(rep.notes)), encoding="utf-8")
    outputs["leaderboard_md"] = md
    outputs["json"] = write_json(rep, out / "report.json")
    if rep.audit:
        from orbench.analysis.report import audit_section

        outputs.update(audit_section.write(rep.audit, out))
    return outputs


def write_json(rep, path: Path) -> Path:
    """report.json: the figure's points and fits, notes, warnings, lineage, inputs, judge and moderator cards,
    leaderboard."""
    ref = rep.reference
    path.write_text(json.dumps({
        "points": rep.points, "spearman": rep.spearman, "spearman_n": len(rep.points), "quadratic_fit": rep.fit,
        "reference": {"points": ref, "quadratic_fit": rep.reference_fit, "citation": CITATION} if ref else None,
        "notes": list(rep.notes), "warnings": list(rep.warnings), "lineage": rep.lineage,
        "inputs": [dict(p) for p in rep.provenance], "judge_cards": rep.judge_cards,
        "moderator_cards": rep.moderator_cards,
        "leaderboard": [{k: _clean(v) for k, v in r.items()} for r in row_dicts(rep.leaderboard)]},
        indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    return path


def _fmt(value, digits=1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def _board_intro(published: pd.DataFrame) -> str:
    """The paragraph above the Markdown leaderboard: what the rates, the order and the intervals are."""
    return ("Rejection rates use the headline verdict (LLM judge where present, else keywords); "
            "rate = rejections / scored rows, where scored excludes error and unparsed rows; where more than 5% of "
            "a set's rows have no verdict (unparsed, not judged or failed with an error), no rate is given, only its "
            "bounds (every such row counted as answered, then as refused, each the outer limit of its Clopper-Pearson "
            "interval). "
            "Sorted by balanced accuracy = (toxic rejection % + (100 - hard rejection %)) / 2, best first."
            + (" Rows marked *published* are " + str(published["rank_note"].iloc[0]) + "; from " + CITATION
               + " (the source of every published figure here). Your model is ranked among them only with "
                 "verdicts on every prompt of both sets and no "
                 "error row; otherwise it is listed after them, unranked, with the reason. Published rows' "
                 "intervals are Clopper-Pearson intervals on their (rounded) rate and n."
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
    for r in row_dicts(board):
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
            if yours and not pd.isna(r.get(f"{s}_scored")):
                cut, these = r.get(f"{s}_truncated"), r.get(f"{s}_scored_truncated")
                these = "" if these is None or pd.isna(these) else f"{int(these)} of the {int(r[f'{s}_scored'])} scored, "
                cut = "" if cut is None or pd.isna(cut) or not cut else \
                    f", cut off: {these}{int(cut)} of {int(r[f'{s}_replies'])} replies"
            if pd.isna(r.get(f"{s}_rate_pct")) and yours and not pd.isna(r.get(f"{s}_rate_bound_low_pct", math.nan)):
                cells.append(f"no rate: {int(r[f'{s}_scored']):,} verdicts, {int(r[f'{s}_no_verdict']):,} rows without "
                             f"one; bounds [{_fmt(r[f'{s}_rate_bound_low_pct'])}, {_fmt(r[f'{s}_rate_bound_high_pct'])}] "
                             f"({r[f'{s}_verdict']}{cut})")
            elif pd.isna(r.get(f"{s}_rate_pct")):
                cells.append("-")
            elif not yours:
                n = r.get(f"{s}_scored")
                ci = "" if pd.isna(r.get(f"{s}_ci_low_pct", math.nan)) else \
                    f" [{_fmt(r[f'{s}_ci_low_pct'])}, {_fmt(r[f'{s}_ci_high_pct'])}]"
                cells.append(_fmt(r[f"{s}_rate_pct"]) + ci + ("" if pd.isna(n) else f" ({int(n):,}, paper)"))
            else:
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
    for r in row_dicts(summary):
        cells = [r["set"], r["model"], r["judge"] or "-"]
        for m in (KEYWORD, JUDGE):
            if pd.isna(r[f"{m}_rows"]):
                cells.append("-")
            elif pd.isna(r[f"{m}_rate"]) and not pd.isna(r.get(f"{m}_rate_bound_low", math.nan)):
                cells.append(f"no rate: bounds [{_fmt(100 * r[f'{m}_rate_bound_low'])}, "
                             f"{_fmt(100 * r[f'{m}_rate_bound_high'])}] ({int(r[f'{m}_rejections'])}/{int(r[f'{m}_scored'])}, "
                             f"{int(r[f'{m}_errors'])}, {int(r[f'{m}_unparsed'])})")
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


