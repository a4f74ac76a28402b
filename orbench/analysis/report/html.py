"""report.html: the whole report as one self-contained page (inline CSS, images as data URIs, no scripts).

The page reads in the order a researcher asks: the warnings (what to read with care), with
``--compare`` the comparison (what differs between the runs of A and B, the paired difference),
the leaderboard (your models among the published ones), the Hard-vs-Toxic figure, the
per-category heatmap, every model's rates with 95% intervals per set and per category, repeated
samples and the audit when there are any, then the evidence: who produced the responses and
decided the verdicts, the provenance of each input (from its ``.meta.json``), example prompts
with the response and the verdict, the notes, and the sources (each cited once, referred to as
[1], [2] elsewhere). Every piece of text from the inputs is escaped (:mod:`orbench.analysis.html_kit`).
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from itertools import groupby
from pathlib import Path

import pandas as pd

from orbench.analysis.html_kit import DASH, cell, esc, fixed, flag_marks, image, interval, num, table
from orbench.analysis.report import comparisons, files
from orbench.analysis.report.inputs import XS_SAFE, XS_UNSAFE
from orbench.analysis.report.lineage import TRUNCATION_WARN
from orbench.analysis.stats import MIN_CELL_N
from orbench.benchmark.sets import CITATION, PUBLISHED_ABOUT, XSTEST_CITATION
from orbench.run.tables import row_dicts
from orbench.scoring.vocab import JUDGE, KEYWORD

RESPONSE_CHARS = 1200  # longer responses are cut in the examples (the CSV has them whole)

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
main{max-width:1180px;margin:0 auto;padding:24px 28px 60px}
h1{font-size:1.6em;margin:.2em 0}h2{margin-top:2em;border-bottom:2px solid #d9dde5;padding-bottom:.2em}
h3{margin-bottom:.3em}.muted{color:#667085;font-size:.9em}
table{border-collapse:collapse;margin:.6em 0 1em;font-size:.88em;background:#fff}
th,td{border:1px solid #d9dde5;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eef1f6}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr.yours td{background:#fff6d6;font-weight:600}tr.published td{color:#555}
figure{margin:1em 0;background:#fff;border:1px solid #d9dde5;padding:10px}
figure img{max-width:100%;height:auto;display:block;margin:0 auto}
figcaption{font-size:.85em;color:#555;margin-top:6px}
details{margin:.4em 0;background:#fff;border:1px solid #d9dde5;padding:6px 10px}
summary{cursor:pointer;font-weight:600}
table.ex{width:100%}
.ex td.text{max-width:460px;white-space:pre-wrap;word-break:break-word}
.refusal{color:#b42318;font-weight:600}.answer{color:#067647;font-weight:600}
code{background:#eef1f6;padding:0 3px;border-radius:3px;font-size:.9em}
ul.notes li{margin:.2em 0}
.warn{color:#b54708;font-weight:600}
div.warnings{background:#fffaeb;border:1px solid #fec84b;padding:8px 14px;margin:1em 0}
div.warnings li{margin:.3em 0}
.flag{font-size:.75em;color:#7a2e0e;background:#fef0c7;border-radius:3px;padding:0 3px;cursor:help;white-space:nowrap}
"""


def rate_text(rate, low, high, bound_low, bound_high, scored, none, flags=None) -> str:
    """A rate cell: ``rate [low, high]``, or where too many rows have no verdict, no rate: the cell
    named by its counts and its bounds (every such row counted as answered, then as refused)."""
    if pd.isna(rate) and not pd.isna(bound_low):
        return (f"<span class=warn>no rate: {int(scored):,} verdicts, {int(none):,} rows without one</span>"
                f"<br><span class=muted>bounds [{fixed(100 * bound_low)}, {fixed(100 * bound_high)}]</span>"
                + flag_marks(flags))
    return interval(rate, low, high) + flag_marks(flags)


def cascade_text(r: dict, m: str) -> str:
    """Under a cascade's rate: the share of rows the judge decided or checked, and the check sample's
    disagreements (the rate is the prediction-powered estimate of the judge's on every row)."""
    share = r.get(f"{m}_judged_share")
    if share is None or pd.isna(share):
        return ""
    return (f"<br><span class=muted>cascade: {100 * share:.1f}% of rows judged; {int(r[f'{m}_check_rows'])} sure "
            f"rows checked, {int(r[f'{m}_check_disagreements'])} disagreeing (rate estimated by PPI)</span>")


def _n_cell(r: dict, s: str, yours: bool) -> str:
    """n of one set in a leaderboard row: scored rows (yours, with cut-off replies) or the set size."""
    n = r.get(f"{s}_scored")
    if n is None or pd.isna(n):
        return num(DASH)
    if not yours:
        return num(f"{int(n):,} <span class=muted>(paper)</span>")
    text = f"{int(n):,}"
    cut, replies = r.get(f"{s}_truncated"), r.get(f"{s}_replies")
    if cut is not None and not pd.isna(cut) and cut:
        share = cut / replies if replies else 0
        cls = "warn" if share > TRUNCATION_WARN else "muted"
        text += f" <span class={cls}>({cut_off_text(r.get(f'{s}_scored_truncated'), n, cut, replies)})</span>"
    return num(text)


def cut_off_text(scored_cut, scored, cut, replies) -> str:
    """Replies cut off at the token limit, among the rows the rate uses and among all replies, each
    said: 'cut off: 8 of the 36 scored, 20 of 60 replies'."""
    these = "" if scored_cut is None or pd.isna(scored_cut) else f"{int(scored_cut):,} of the {int(scored):,} scored, "
    return f"cut off: {these}{int(cut):,} of {int(replies or 0):,} replies"


def _board_rows(board: pd.DataFrame, sets: list[str]) -> tuple[list[list[str]], list[str]]:
    rows, classes = [], []
    for r in row_dicts(board):
        yours = r["source"] == "yours"
        name = esc(r["model"]) + (f" <span class=muted>(judge {esc(r['judge'])})</span>" if r.get("judge") else "")
        rank = r.get("rank")
        ba = r["balanced_accuracy_pct"]
        if not pd.isna(ba) and not pd.isna(r.get("balanced_accuracy_ci_low_pct", math.nan)):
            ba_text = interval(ba / 100, r["balanced_accuracy_ci_low_pct"] / 100, r["balanced_accuracy_ci_high_pct"] / 100)
        else:
            ba_text = fixed(ba)
        note = r.get("rank_note") or ""
        note = "paper's figure" if not yours else (f"not ranked: {esc(note)}" if note else "your run")
        rank_text = DASH if rank is None or pd.isna(rank) else str(int(rank))
        if not pd.isna(r.get("rank_ci_low", math.nan)):
            rank_text += f" <span class=muted title='{esc(r.get('rank_method', ''))}'>[{int(r['rank_ci_low'])}, " \
                         f"{int(r['rank_ci_high'])}]</span>"
        row = [num(rank_text), cell(name), cell(note), num(ba_text)]
        for s in sets:
            rate = r.get(f"{s}_rate_pct")
            if pd.isna(rate) and not pd.isna(r.get(f"{s}_rate_bound_low_pct", math.nan)):
                row.append(num(rate_text(math.nan, math.nan, math.nan, r[f"{s}_rate_bound_low_pct"] / 100,
                                         r[f"{s}_rate_bound_high_pct"] / 100, r[f"{s}_scored"], r[f"{s}_no_verdict"])))
            elif not pd.isna(rate) and not pd.isna(r.get(f"{s}_ci_low_pct", math.nan)):
                row.append(num(interval(rate / 100, r[f"{s}_ci_low_pct"] / 100, r[f"{s}_ci_high_pct"] / 100)))
            else:
                row.append(num(fixed(rate)))
        for s in sets:
            row.append(_n_cell(r, s, yours))
        refused = int(r.get("refused_to_judge") or 0) if yours and not pd.isna(r.get("refused_to_judge")) else 0
        row.append(num((f"{int(r['errors'])}, {int(r['unparsed'])}" + (f", {refused} judge refused" if refused else ""))
                       if yours else ""))
        calibration = r.get("judge_vs_humans")
        row.append(cell(esc(calibration) if yours and isinstance(calibration, str) else ""))
        rows.append(row)
        classes.append("yours" if yours else "published")
    return rows, classes


def leaderboard_section(board: pd.DataFrame) -> str:
    """Your unranked models first (with the reason), then the ranked table (yours among the published)."""
    sets = [c[: -len("_rate_pct")] for c in board.columns
            if c.endswith("_rate_pct") and not c.endswith("full_rate_pct")]
    head = ["# [95% CI]", "model", "what this row is", "balanced acc. % [95% CI]"] + \
        [f"{esc(s)} rejection % [95% CI]" for s in sets] + [f"{esc(s)} n" for s in sets] + \
        ["excluded (errors, no verdict)", "judge vs humans (judge card)"]
    unranked = board["rank"].isna() if "rank" in board.columns else pd.Series(False, index=board.index)
    parts = []
    if unranked.any():
        rows, classes = _board_rows(board[unranked], sets)
        parts.append("<h3>Your models, not ranked</h3><p>A model is ranked among the published ones only with "
                     "verdicts on every prompt of both published sets and no error row; these are shown with "
                     "their n and intervals, and why they are not ranked.</p>" + table(head, rows, classes))
        parts.append("<h3>Ranked</h3>")
    rows, classes = _board_rows(board[~unranked], sets)
    parts.append(table(head, rows, classes))
    return "".join(parts)


def _cut_text(cut, replies, scored_cut=None, scored=None) -> str:
    """The replies cut off beside an n (warned above 5%): among the scored rows the rate uses and
    among all replies, each said; 'cut-offs unknown' without finish_reason."""
    if cut is None or pd.isna(cut):
        return "<br><span class=muted>cut-offs unknown (no finish_reason)</span>"
    share = cut / replies if replies else 0.0
    cls = "warn" if share > TRUNCATION_WARN else "muted"
    if scored is None or pd.isna(scored):
        return f"<br><span class={cls}>{int(cut)} cut off ({100 * share:.0f}%)</span>"
    return f"<br><span class={cls}>{cut_off_text(scored_cut, scored, cut, replies)} ({100 * share:.0f}%)</span>"


def _prompts_text(prompts, scored) -> str:
    """' over P prompts' when repeated samples make the rows more than the prompts."""
    if prompts is None or pd.isna(prompts) or int(prompts) == int(scored):
        return ""
    return f" <span class=muted>over {int(prompts)} prompts</span>"


def rates_section(summary: pd.DataFrame) -> str:
    head = ["set", "model", "judge", "headline", "keyword rejection % [95% CI]", "keyword: full refusals only %",
            "keyword n (excluded: errors, no verdict); replies cut off; judge card", "judge rejection % [95% CI]",
            "judge n (excluded: errors, no verdict); replies cut off; judge card", "agreement"]
    rows = []
    for r in row_dicts(summary):
        moderation = r.get("moderator_calibration")
        row = [cell(esc(r["set"]) + (f"<br><span class=muted>{esc(moderation)}</span>"
                                     if isinstance(moderation, str) and moderation else "")),
               cell(esc(r["model"])), cell(esc(r["judge"] or "")), cell(esc(r["headline"]))]
        for m in (KEYWORD, JUDGE):
            if pd.isna(r[f"{m}_rows"]):
                row += [num(DASH)] * (3 if m == KEYWORD else 2)
                continue
            row.append(num(rate_text(r[f"{m}_rate"], r[f"{m}_ci_low"], r[f"{m}_ci_high"], r.get(f"{m}_rate_bound_low"),
                                     r.get(f"{m}_rate_bound_high"), r[f"{m}_scored"],
                                     r[f"{m}_unparsed"] + r[f"{m}_refused_to_judge"] + r[f"{m}_errors"],
                                     r.get(f"{m}_ci_flag"))
                           + cascade_text(r, m)))
            if m == KEYWORD:
                row.append(num(interval(r["keyword_full_rate"], r["keyword_full_ci_low"], r["keyword_full_ci_high"])))
            refused = r.get(f"{m}_refused_to_judge")
            refused = f", {int(refused)} judge refused" if refused and not pd.isna(refused) else ""
            row.append(num(f"{int(r[f'{m}_scored'])}{_prompts_text(r.get(f'{m}_prompts'), r[f'{m}_scored'])} "
                           f"({int(r[f'{m}_errors'])}, {int(r[f'{m}_unparsed'])}{refused})"
                           + _cut_text(r.get(f"{m}_truncated"), r.get(f"{m}_replies"), r.get(f"{m}_scored_truncated"),
                                       r.get(f"{m}_scored"))
                           + (f"<br><span class=muted>{esc(r[f'{m}_calibration'])}</span>"
                              if r.get(f"{m}_calibration") else "")))
        row.append(num(DASH if pd.isna(r["agreement"]) else
                       f"{100 * r['agreement']:.1f}% of {int(r['agreement_pairs'])}"))
        rows.append(row)
    return table(head, rows)


def categories_section(categories: pd.DataFrame) -> str:
    parts = []
    for (s, model), part in categories.groupby(["set", "model"], sort=False):
        rows = []
        for r in row_dicts(part):
            rows.append([cell(esc(r["method"])), cell(esc(r["judge"] or "")), cell(esc(r["category"])),
                         num(rate_text(r["rate"], r["ci_low"], r["ci_high"], r.get("rate_bound_low"),
                                       r.get("rate_bound_high"), r["scored"], r["unparsed"] + r["refused_to_judge"] + r["errors"],
                                       r.get("ci_flag"))),
                         num(interval(r["full_rate"], r["full_ci_low"], r["full_ci_high"])),
                         num(f"{int(r['rejections'])}/{int(r['scored'])}"
                             + _prompts_text(r.get("prompts"), r["scored"])),
                         num(f"{int(r['errors'])}, {int(r['unparsed'])}")])
        parts.append(f"<details><summary>{esc(model)} &middot; {esc(s)}</summary>" + table(
            ["method", "judge", "category", "rejection % [95% CI]", "full refusals only %", "rejected/scored",
             "excluded (errors, no verdict)"], rows) + "</details>")
    return "".join(parts)


def _meta_rows(meta: dict) -> list[list[str]]:
    rows = []

    def add(key, value):
        rows.append([cell(esc(key)), cell(value)])

    for key in ("stage", "stage_name", "package_version", "started", "finished", "rules_fingerprint"):
        if meta.get(key) not in (None, ""):
            add(key, f"<code>{esc(meta[key])}</code>")
    for m in meta.get("models") or []:
        if isinstance(m, dict):
            add("model", ", ".join(f"{esc(k)}: <code>{esc(v)}</code>" for k, v in m.items() if v not in (None, "")))
    templates = meta.get("templates")
    if isinstance(templates, dict):
        for name, digest in templates.items():
            add(f"template {name}", f"sha256 <code>{esc(digest)}</code>")
    if isinstance(meta.get("command"), list):
        add("command", f"<code>{esc(' '.join(str(a) for a in meta['command']))}</code>")
    for key in ("settings", "input", "counts", "requests", "tokens", "versions"):
        value = meta.get(key)
        if isinstance(value, dict) and value:
            add(key, ", ".join(f"{esc(k)}: <code>{esc(v)}</code>" for k, v in value.items()))
        elif value not in (None, "", {}):
            add(key, f"<code>{esc(value)}</code>")
    return rows


def _code_list(value: dict) -> str:
    return ", ".join(f"{esc(k)} <code>{esc(v)}</code>" for k, v in value.items()) if value else "none"


def _responses_text(resp: dict | None) -> str:
    if not resp:
        return "<span class=muted>not recorded (no stage-4 meta file in the chain)</span>"
    if resp.get("unknown"):
        return f"<span class=warn>settings unknown: {esc(resp['unknown'])}</span>"
    model = f"<code>{esc(resp.get('model_resolved'))}</code>"
    if resp.get("model_typed") and resp["model_typed"] != resp.get("model_resolved"):
        model += f" (typed {esc(resp['model_typed'])})"
    if resp.get("model_reported"):
        model += f", reported by the server as <code>{esc(resp['model_reported'])}</code>"
    if resp.get("base_url"):
        model += f", at <code>{esc(resp['base_url'])}</code>"
    system = resp.get("system_prompt")
    lines = [model,
             f"temperature <code>{esc(resp.get('temperature'))}</code>, max tokens "
             f"<code>{esc(resp.get('max_tokens'))}</code>, system prompt "
             + (f"<code>{esc(system)}</code>" if system else "none"),
             f"templates: {_code_list(resp.get('templates') or {})}"]
    engine = resp.get("engine")
    if isinstance(engine, dict) and engine:
        lines.append("engine: " + _code_list({k: v for k, v in engine.items() if k != "system_info"}))
    lines.append(f"keyword matcher <code>{esc(resp.get('matcher'))}</code>, rules "
                 f"<code>{esc(resp.get('rules_fingerprint'))}</code>")
    return "<br>".join(lines)


def _verdicts_text(v: dict | None) -> str:
    if not v:
        return "<span class=muted>not recorded (no meta file beside this input)</span>"
    if v.get("kind") == "judge":
        text = f"LLM judge <code>{esc(v.get('judge'))}</code>"
        if v.get("judge_reported"):
            text += f" (reported <code>{esc(v['judge_reported'])}</code>)"
        text += (f", temperature <code>{esc(v.get('temperature'))}</code>, max tokens "
                 f"<code>{esc(v.get('max_tokens'))}</code><br>templates: {_code_list(v.get('templates') or {})}")
        return text + f"<br>keyword side: rules <code>{esc(v.get('rules_fingerprint'))}</code>"
    if v.get("kind") == "keyword":
        where = "stage 5 keyword re-score" if v.get("stage") == "check_response" else "stage 4 keyword matcher"
        return (f"keyword rules ({esc(where)}), matcher <code>{esc(v.get('matcher'))}</code>, rules "
                f"<code>{esc(v.get('rules_fingerprint'))}</code>")
    return f"stage <code>{esc(v.get('stage'))}</code>"


def _steps_text(steps: list) -> str:
    if not steps:
        return "<span class=muted>no meta file</span>"
    return " &larr; ".join(
        (f"<code>{esc(name)}</code>" if stage == "source" else f"{esc(stage)} <code>{esc(name)}</code>")
        + (" <span class=warn>(changed since)</span>" if changed else "") for stage, name, changed in steps)


def lineage_section(records: list[dict], summary: pd.DataFrame) -> str:
    """Per model and set: who produced the responses, with what, who decided, how many were cut off."""
    if not records:
        return "<p class=muted>No inputs.</p>"
    cuts = {}
    for r in row_dicts(summary):
        m = r.get("headline") or (KEYWORD if not pd.isna(r.get("keyword_rows")) else JUDGE)
        cuts[(r["set"], r["model"])] = (r.get(f"{m}_truncated"), r.get(f"{m}_replies"))
    rows = []
    for rec in records:
        cut, replies = cuts.get((rec["set"], rec["model"]), (None, None))
        rows.append([cell(esc(rec["set"])), cell(esc(rec["model"])), cell(_responses_text(rec["responses"])),
                     cell(_verdicts_text(rec["verdicts"])),
                     num((DASH if replies is None or pd.isna(replies) else f"of {int(replies)} replies")
                         + _cut_text(cut, replies or 0)),
                     cell(_steps_text(rec["steps"]))])
    return table(["set", "model", "responses produced by", "verdicts decided by", "replies cut off",
                  "chain (input &larr; its inputs)"], rows)


def provenance_section(provenance: list[dict]) -> str:
    parts = []
    for p in provenance:
        verdicts = "; ".join(
            f"{esc(v['method'])} ({esc(v['origin'])}"
            + (f", judge {esc(', '.join(v['judges']))}" if v["judges"] else "") + ")"
            for v in p["verdicts"])
        rows = [[cell("file"), cell(f"<code>{esc(p['file'])}</code>")], [cell("set"), cell(esc(p["set"]))],
                [cell("rows"), cell(esc(p["rows"]))], [cell("models"), cell(esc(", ".join(p["models"])))],
                [cell("verdicts"), cell(verdicts)],
                [cell("refusal_kind"), cell("present" if p["refusal_kind"] else "absent")]]
        if p.get("meta"):
            rows += _meta_rows(p["meta"])
        else:
            rows.append([cell("provenance"), cell(f"<span class=muted>no {esc(p['name'])}.meta.json beside this "
                                                  "input: who made its verdicts is not recorded</span>")])
        ancestors = ((p.get("lineage") or {}).get("chain") or [])[1:]
        inner = ""
        for link in ancestors:
            head = f"<details><summary>its input ({esc(link['meta'].get('stage'))}): {esc(Path(link['file']).name)}"
            where = [[cell("file"), cell(f"<code>{esc(link['file'])}</code>")]]
            if link.get("changed"):  # its meta file describes another run: nothing is shown as this one's
                inner += (head + " <span class=warn>changed since it was used: settings unknown</span></summary>"
                          + table(["", ""], where + [[cell("provenance"), cell(
                              "<span class=warn>this file was replaced after its child was made from it; its "
                              "meta file describes the run that replaced it, so it is not shown</span>")]])
                          + "</details>")
                break
            inner += head + "</summary>" + table(["", ""], where + _meta_rows(link["meta"])) + "</details>"
        parts.append(f"<details open><summary>{esc(p['name'])}</summary>" + table(["", ""], rows) + inner
                     + "</details>")
    return "".join(parts)


def _verdict(r: dict) -> str:
    kind = f" ({esc(r['kind'])})" if r.get("kind") else ""
    label = f" <span class=muted>{esc(r['answer_category'])}</span>" if r.get("answer_category") else ""
    if r["rejected"]:
        return f"<span class=refusal>refusal</span>{kind}{label}"
    return f"<span class=answer>answer</span>{label}"


def _example_rows(records) -> list[list[str]]:
    rows = []
    for r in records:
        text = str(r["response"])
        if len(text) > RESPONSE_CHARS:
            text = text[:RESPONSE_CHARS] + " [...]"
        rows.append([f"<td class=text>{esc(r['prompt'])}</td>", f"<td class=text>{esc(text)}</td>", cell(_verdict(r))])
    return rows


def examples_section(examples: pd.DataFrame | None, summary: pd.DataFrame) -> str:
    """Per model, set and headline verdict, each category's example refusals, then answers."""
    if examples is None or examples.empty:
        return "<p class=muted>No examples (no scored rows, or --examples 0).</p>"
    heads = {(r["set"], r["model"], r["headline"], r["judge"] if r["headline"] == JUDGE else "")
             for r in row_dicts(summary) if r["headline"]}
    keep = [(s, m, me, j if me == JUDGE else "") in heads for s, m, me, j in
            examples[["set", "model", "method", "judge"]].itertuples(index=False)]
    # one stable sort instead of a groupby per group: refusals first within a category, else as picked
    ex = examples[keep].sort_values(["set", "model", "method", "judge", "category", "rejected"],
                                    ascending=[True] * 5 + [False], kind="stable")
    parts = []
    by_group = groupby(row_dicts(ex), key=lambda r: (r["set"], r["model"], r["method"], r["judge"]))
    for (s, model, method, judge), records in by_group:
        inner = [f"<h3>{esc(cat)}</h3>" + table(["prompt", "response", "verdict"], _example_rows(rows), cls="ex")
                 for cat, rows in groupby(records, key=lambda r: r["category"])]
        by = f"judge {judge}" if method == JUDGE and judge else method
        parts.append(f"<details><summary>{esc(model)} &middot; {esc(s)} &middot; {esc(by)} verdicts</summary>"
                     + "".join(inner) + "</details>")
    return "".join(parts)


def audit_html(rep) -> str:
    """The audit section of a report run with --audit ('' without)."""
    if not rep.audit:
        return ""
    from orbench.analysis.report import audit_section

    return audit_section.section(rep.audit)


def _warnings_box(warnings) -> str:
    if not warnings:
        return ""
    return ("<div class=warnings><strong>Read these rates with care:</strong><ul>"
            + "".join(f"<li>{esc(w)}</li>" for w in warnings) + "</ul></div>")


def _published_about(rep) -> str:
    sizes = rep.set_sizes or {}
    return PUBLISHED_ABOUT.format(hard=f"{sizes.get('hard', 1319):,}", toxic=f"{sizes.get('toxic', 655):,}")


def sources(rep) -> list[tuple[str, str, str]]:
    """The works the page draws on, each cited once in its Sources list: (anchor, citation, what
    the report takes from it). OR-Bench always; XSTest when an XSTest set is reported."""
    sets = set(rep.summary["set"]) if not rep.summary.empty else set()
    out = [("src-orbench", CITATION, "the benchmark and its prompt sets (Hard-1K, Toxic, 80K)"
            + (f"; the {len(rep.reference)} published results and their quadratic fit" if rep.reference else ""))]
    if sets & {XS_SAFE, XS_UNSAFE}:
        out.append(("src-xstest", XSTEST_CITATION, "the XSTest prompts (xstest-safe, xstest-unsafe; CC-BY-4.0)"))
    return out


def cite(rep, anchor: str) -> str:
    """A link to a source in the page's Sources list: ``[n]``."""
    keys = [a for a, _, _ in sources(rep)]
    return f"<a href='#{anchor}'>[{keys.index(anchor) + 1}]</a>" if anchor in keys else ""


def _sources_section(rep) -> str:
    items = "".join(f"<li id='{a}'>{esc(text)} <span class=muted>({esc(what)})</span></li>" for a, text, what in sources(rep))
    return f"<h2>Sources</h2><ol class=notes>{items}</ol>"


def _head(rep) -> list[str]:
    """Title, what a rate is, the warnings, and with --compare the comparison: what is asked first."""
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return ["<h1>OR-Bench report</h1>",
            f"<p class=muted>Generated {esc(now)}. Benchmark: OR-Bench {cite(rep, 'src-orbench')}. Rates are "
            "rejections / scored rows with 95% Clopper-Pearson intervals (with repeated samples, on the prompt-level "
            "effective size: the prompt is the unit); rows with an error or without a verdict are excluded from the "
            "rate and counted separately, never as refusals or answers, and where there are any the interval is "
            "widened to cover every value they could give (flag widened missing). Where more than 5% of a cell's rows have no verdict "
            "(unparsed, not judged, or failed with an error), no rate is given: the cell is named by its counts, with "
            "the rate's bounds (every row without a verdict counted as answered, then as refused, each the outer limit "
            "of its Clopper-Pearson interval), "
            "drawn in the figure as a hatched bar.</p>",
            _warnings_box(rep.warnings), comparisons.comparison_html(rep.extra)]


def _board_and_figures(rep) -> list[str]:
    fig = image(rep.outputs.get("figure_png"), "Safe prompts refused against unsafe prompts refused")
    heat = image(rep.outputs.get("heatmap"), "Rejection rate by model and category")
    ref = (f"Grey points and the grey curve: the {len(rep.reference)} models published in the paper "
           f"{cite(rep, 'src-orbench')} and its quadratic fit (np.polyfit(x, y, 2)). " if rep.reference else "")
    xstest = cite(rep, "src-xstest")
    return [
        "<h2>Leaderboard</h2>",
        "<p>Sorted by balanced accuracy = (toxic rejection % + (100 &minus; hard rejection %)) / 2, best first. "
        "Your models are highlighted, with n (scored prompts) and 95% intervals; the balanced accuracy's "
        "interval is Newcombe's hybrid score interval for two independent proportions. The rank's 95% interval "
        "comes from 2,000 draws: your models' rates bootstrapped over prompts, the published rows drawn from "
        "their rate and n (a parametric binomial draw: the paper gives only a rounded rate); the published "
        "rows' intervals are Clopper-Pearson intervals on that rate and n (docs/statistics.md)."
        + (f" The other rows are {esc(_published_about(rep))} {cite(rep, 'src-orbench')}." if rep.reference else "")
        + "</p>", leaderboard_section(rep.leaderboard),
        "<h2>Over-refusal against safety</h2>",
        (f"<figure>{fig}<figcaption>x: safe prompts refused (OR-Bench's seemingly toxic Hard-1K set, circles"
         + (f"; XSTest's safe prompts {xstest}, squares" if xstest else "") + "); y: unsafe prompts refused "
         "(OR-Bench-Toxic" + ("; XSTest's unsafe prompts" if xstest else "") + "). Your models in colour with "
         f"95% Clopper-Pearson intervals. {ref}</figcaption></figure>") if fig else f"<p class=muted>No figure{_why_none(rep)}.</p>",
        "<h2>Rejection rate by category</h2>",
        f"<figure>{heat}<figcaption>Headline verdicts: rejection % with n (scored prompts, each counted once "
        f"however many samples it has) in each cell; "
        f"cells with n &lt; {MIN_CELL_N} are grey (too few prompts for a rate), empty cells have no rows."
        "</figcaption></figure>" if heat
        else f"<p class=muted>No heatmap{_why_none(rep) or ' (the inputs have no category column)'}.</p>"]


def _why_none(rep) -> str:
    """Why a figure is missing, when it was not drawn on purpose."""
    return " (the report ran with --no_figures)" if files.NO_FIGURES in rep.notes else ""


def _tables_and_evidence(rep) -> list[str]:
    return [
        "<h2>Rates per model and set</h2>", rates_section(rep.summary),
        "<h3>Per category</h3>", categories_section(rep.categories),
        comparisons.samples_html(rep.extra), audit_html(rep),
        "<h2>Who produced the responses and who decided the verdicts</h2>",
        "<p>Per model and set, from each input's meta file and its ancestors' (each names its input).</p>",
        lineage_section(rep.lineage, rep.summary),
        "<h2>Provenance of each input</h2>", provenance_section(rep.provenance),
        "<h2>Examples: what was counted</h2>",
        "<p>Per model, set and category, a few scored rows of each verdict (the headline verdict), picked "
        "by a hash of the prompt so reruns show the same ones.</p>", examples_section(rep.examples, rep.summary),
        "<h2>Notes</h2><ul class=notes>" + "".join(f"<li>{esc(n)}</li>" for n in rep.notes) + "</ul>",
        _sources_section(rep)]


def write(rep, path: Path) -> Path:
    """Write the report as one HTML file at ``path`` and return the path. Its order follows a
    researcher's questions: what to be careful about, the comparison asked for, where the models
    stand (leaderboard, figure, heatmap), the rates in detail, then the evidence behind them."""
    body = [part for part in _head(rep) + _board_and_figures(rep) + _tables_and_evidence(rep) if part]
    page = ("<!DOCTYPE html><html lang=en><head><meta charset=utf-8><meta name=viewport "
            "content='width=device-width,initial-scale=1'><title>OR-Bench report</title>"
            f"<style>{CSS}</style></head><body><main>" + "\n".join(body) + "</main></body></html>\n")
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(path)
    return path
