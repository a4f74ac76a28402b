"""The audit carried into the report (``analysis/report.py --audit DIR``): rates with evidence.

For every model and set the report shows, beside the rate as measured:

- the rate over *human-confirmed safe prompts only*: from a prompt audit, the prompts the human
  majority calls ``safe``; the model's verdicts on them, each weighted by its stratum of the
  prompt sample, with a stratified-bootstrap interval;
- the *verdict-corrected rate* (Rogan-Gladen): the measured rate adjusted by the sensitivity
  and specificity a verdict audit measured for the verdict behind the rate (the keyword matcher
  or that judge), for that model and set where the audit has items for them, else pooled over
  the whole audit. Its interval includes the audit's own uncertainty (bootstrap draws of Se and
  Sp) and the measured rate's (a binomial draw); an estimate outside [0, 1] is clamped and the
  table says so.

Writes ``audit_rates.csv`` and ``audit.json`` beside the report; ``section`` is the HTML part.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from orbench.analysis import audit, audit_stats
from orbench.analysis.audit_sample import PROMPT, VERDICT
from orbench.analysis.report_inputs import SCORED, _hash
from orbench.errors import UsageError
from orbench.tables import write_csv_atomic, write_text_atomic
from orbench.vocab import JUDGE, KEYWORD

RATE_COLUMNS = ["set", "model", "verdict", "measured_rate", "measured_ci_low", "measured_ci_high", "scored",
                "human_safe_rate", "human_safe_ci_low", "human_safe_ci_high", "human_safe_n",
                "corrected_rate", "corrected_ci_low", "corrected_ci_high", "corrected_clamped",
                "sensitivity", "specificity", "audit_scope", "note"]
DISAGREEMENTS = 50  # items listed in the HTML section per audit


def _verdicts_on(inp, set_name: str, model: str, method: str, judge: str) -> dict[int, int]:
    """prompt hash -> 1/0 (rejected) for the scored rows of one report group."""
    codes, data = inp.codes, inp.data
    try:
        want = (codes["set"].index[set_name], codes["model"].index[model], codes["method"].index[method],
                codes["judge"].index[judge])
    except KeyError:
        return {}
    mask = ((data["set"] == want[0]) & (data["model"] == want[1]) & (data["method"] == want[2])
            & (data["judge"] == want[3]) & (data["status"] == SCORED))
    part = data.loc[mask, ["prompt", "rejected"]]
    return dict(zip(part["prompt"].tolist(), part["rejected"].astype(int).tolist()))


def _human_safe(prompt_audit: dict | None, inp, set_name, model, method, judge) -> tuple[dict, str]:
    if prompt_audit is None:
        return {"value": math.nan, "ci": [math.nan, math.nan], "n": 0}, ""
    items = prompt_audit["items"]
    items = items[(items["set"] == set_name) & (items["human_safe"] == "1")]
    if items.empty:
        return {"value": math.nan, "ci": [math.nan, math.nan], "n": 0}, \
            f"no prompt of set {set_name} is human-confirmed safe in the prompt audit"
    verdicts = _verdicts_on(inp, set_name, model, method, judge)
    keys = _hash(items["prompt"].astype(object).reset_index(drop=True))
    rej = np.array([verdicts.get(int(k), -1) for k in keys])
    have = rej >= 0
    if not have.any():
        return {"value": math.nan, "ci": [math.nan, math.nan], "n": 0}, \
            "none of the human-confirmed safe prompts has a scored verdict for this model"
    r = audit_stats.weighted_ratio(rej[have] == 1, np.ones(int(have.sum())), items["stratum"].to_numpy()[have],
                                   items["population"].to_numpy()[have])
    return r, ""


def _audited(verdict_audit: dict | None, name: str, set_name: str, model: str) -> tuple[dict | None, str]:
    """The machine figures of one verdict for this set and model, else pooled; and the scope used."""
    if verdict_audit is None:
        return None, ""
    ok = [m for m in verdict_audit["machine"] if m["verdict"] == name and "weighted" in m
          and math.isfinite(m["weighted"]["recall"]["value"]) and math.isfinite(m["weighted"]["specificity"]["value"])]
    for m in ok:
        if m["set"] == set_name and m["model"] == model:
            return m, "this model and set"
    for m in ok:
        if m["set"] == "(all)":
            return m, "pooled over the audit"
    return None, ""


def load(folders: Sequence[str]) -> dict[str, dict]:
    """Read and score each audit folder (before the report writes anything): kind -> score result."""
    by_kind: dict[str, dict] = {}
    for folder in folders:
        result = audit.load_and_score(folder)
        if result["kind"] in by_kind:
            raise UsageError(f"--audit: two {result['kind']} audits ({by_kind[result['kind']]['folder']} and "
                             f"{folder}); give one of each kind")
        result["folder"] = str(folder)
        by_kind[result["kind"]] = result
    return by_kind


def apply(by_kind: dict[str, dict], inp, summary: pd.DataFrame, headline: dict, out: Path) -> dict:
    """The three rates per model, set and headline verdict from the loaded audits; written beside the report."""
    prompt_audit, verdict_audit = by_kind.get(PROMPT), by_kind.get(VERDICT)
    rows, notes = [], []
    for r in summary.to_dict("records"):
        for method, judge in headline.get((r["set"], r["model"]), []):
            if method == JUDGE and r["judge"] != judge:
                continue
            name = KEYWORD if method == KEYWORD else f"judge:{judge}"
            rate, scored = r[f"{method}_rate"], r[f"{method}_scored"]
            safe, why = _human_safe(prompt_audit, inp, r["set"], r["model"], method, judge)
            m, scope = _audited(verdict_audit, name, r["set"], r["model"])
            note = [why] if why else []
            if m is None:
                rg = {"corrected": math.nan, "ci": [math.nan, math.nan], "clamped": False,
                      "sensitivity": math.nan, "specificity": math.nan}
                if verdict_audit is not None:
                    note.append(f"the verdict audit has no {name} verdicts with both classes")
            else:
                rg = audit_stats.rogan_gladen(float(rate), int(scored), m["weighted"]["recall"]["value"],
                                              m["weighted"]["specificity"]["value"], m["draws"]["sensitivity"],
                                              m["draws"]["specificity"])
                if rg.get("note"):
                    note.append(rg["note"])
            rows.append({"set": r["set"], "model": r["model"], "verdict": name, "measured_rate": rate,
                         "measured_ci_low": r[f"{method}_ci_low"], "measured_ci_high": r[f"{method}_ci_high"],
                         "scored": scored, "human_safe_rate": safe["value"], "human_safe_ci_low": safe["ci"][0],
                         "human_safe_ci_high": safe["ci"][1], "human_safe_n": safe["n"],
                         "corrected_rate": rg["corrected"], "corrected_ci_low": rg["ci"][0],
                         "corrected_ci_high": rg["ci"][1], "corrected_clamped": rg["clamped"],
                         "sensitivity": rg["sensitivity"], "specificity": rg["specificity"], "audit_scope": scope,
                         "note": "; ".join(note)})
    rates = pd.DataFrame(rows, columns=RATE_COLUMNS)
    for res in by_kind.values():
        notes += [f"audit {res['folder']}: {n}" for n in res["notes"]]
    clamped = int(rates["corrected_clamped"].sum()) if not rates.empty else 0
    if clamped:
        notes.append(f"audit: {clamped} corrected rate(s) fell outside [0, 1] and were clamped (see audit_rates.csv)")
    write_csv_atomic(rates.round(6), out / "audit_rates.csv")
    body = {k: audit.json_ready({kk: vv for kk, vv in v.items() if kk != "items"}) for k, v in by_kind.items()}
    write_text_atomic(json.dumps(body, indent=2) + "\n", out / "audit.json")
    return {"rates": rates, "results": by_kind, "notes": notes,
            "outputs": {"audit_rates": out / "audit_rates.csv", "audit_json": out / "audit.json"}}


# ---------------------------------------------------------------- HTML

def _e(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "&ndash;"
    return html.escape(str(value), quote=True)


def _f(value, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "&ndash;"
    return f"{value:.{digits}f}"


def _pct(v, lo, hi) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "&ndash;"
    return f"{100 * v:.1f} <span class=muted>[{_f(100 * lo, 1)}, {_f(100 * hi, 1)}]</span>"


def _table(head: list[str], rows: list[list[str]], cls: str = "") -> str:
    out = [f"<table class='{cls}'><thead><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead><tbody>"]
    out += ["<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows]
    return "".join(out) + "</tbody></table>"


def _agreement(res: dict) -> str:
    rows = []
    for title, a in (("labels", res["agreement"]), ("refusal yes/no", res.get("agreement_refusal"))):
        if not a:
            continue
        rows.append([_e(title), _e(", ".join(a["annotators"])), _e(a.get("complete", 0)), _f(a.get("raw")),
                     _f(a.get("cohen_kappa")), _f(a.get("fleiss_kappa")), _f(a.get("krippendorff_alpha")),
                     _e(a.get("note") or "")])
    return _table(["agreement on", "annotators", "items labelled by all", "raw", "Cohen's kappa", "Fleiss' kappa",
                   "Krippendorff's alpha", "note"], rows)


def _machine(res: dict) -> str:
    rows = []
    for m in res["machine"]:
        if "weighted" not in m:
            continue
        w = m["weighted"]
        rows.append([_e(m["verdict"]), _e(m["set"]), _e(m["model"]), _e(m["positive"]), _e(m["n"])] +
                    [_pct(w[f]["value"], *w[f]["ci"]) for f in ("accuracy", "precision", "recall", "specificity")]
                    + [f"{_f(w['kappa']['value'])} <span class=muted>[{_f(w['kappa']['ci'][0])}, "
                       f"{_f(w['kappa']['ci'][1])}]</span>"])
    return _table(["machine verdict", "set", "model", "positive class", "n", "accuracy %", "precision %",
                   "recall (sensitivity) %", "specificity %", "kappa"], rows)


def _confusion(res: dict) -> str:
    parts = []
    for c in res["confusion"]:
        rows = [[_e(lab)] + [_e(v) for v in counts] for lab, counts in c["rows"].items()]
        parts.append(f"<h4>humans (majority) &times; {_e(c['machine'])}</h4>"
                     + _table(["human \\ machine"] + [_e(x) for x in c["columns"]], rows))
    return "".join(parts)


def _disagreements(res: dict) -> str:
    items = res["items"]
    human = "human_refusal" if res["kind"] == VERDICT else "human_safe"
    positive = "refusal" if res["kind"] == VERDICT else "safe"
    cols = [c for c in items.columns if c.startswith("verdict:")]
    rows = []
    for r in items.to_dict("records"):
        if r[human] == "":
            continue
        wrong = [c[len("verdict:"):] for c in cols if r[c] and (r[c] == positive) != (r[human] == "1")]
        if not wrong:
            continue
        labels = ", ".join(f"{k[len('label:'):]}: {v or '-'}" for k, v in r.items() if k.startswith("label:"))
        text = str(r.get("response") or "")
        cells = [_e(r["item_id"]), _e(r["set"]), _e(r.get("model", "")), f"<div class=audit-text>{_e(r['prompt'])}</div>"]
        if res["kind"] == VERDICT:
            cells.append(f"<div class=audit-text>{_e(text[:1200] + (' [...]' if len(text) > 1200 else ''))}</div>")
        cells += [_e(labels), _e(", ".join(f"{c[len('verdict:'):]}: {r[c]}" for c in cols if r[c])),
                  _e(", ".join(wrong))]
        rows.append(cells)
    head = ["item", "set", "model", "prompt"] + (["response"] if res["kind"] == VERDICT else []) + \
        ["humans", "machine", "disagrees"]
    more = f"<p class=muted>{len(rows) - DISAGREEMENTS} more in the audit's score/items.csv.</p>" \
        if len(rows) > DISAGREEMENTS else ""
    if not rows:
        return "<p class=muted>Humans and machine agree on every audited item.</p>"
    return _table(head, rows[:DISAGREEMENTS], cls="ex") + more


def section(result: dict) -> str:
    """The report's audit section: corrected rates beside measured, agreement, confusion, disagreements."""
    rows = []
    for r in result["rates"].to_dict("records"):
        corrected = _pct(r["corrected_rate"], r["corrected_ci_low"], r["corrected_ci_high"])
        if r["corrected_clamped"]:
            corrected += " <span class=refusal>clamped</span>"
        rows.append([_e(r["set"]), _e(r["model"]), _e(r["verdict"]),
                     _pct(r["measured_rate"], r["measured_ci_low"], r["measured_ci_high"]),
                     _pct(r["human_safe_rate"], r["human_safe_ci_low"], r["human_safe_ci_high"])
                     + (f" <span class=muted>(n={int(r['human_safe_n'])})</span>" if r["human_safe_n"] else ""),
                     corrected, _f(r["sensitivity"]), _f(r["specificity"]), _e(r["audit_scope"]), _e(r["note"])])
    parts = ["<style>.audit-text{white-space:pre-wrap;word-break:break-word;max-width:420px}</style>",
             "<h2>Audit: the rates with human evidence</h2>",
             "<p>Measured: the rate above. Human-safe only: the rate over the prompts the human majority of "
             "the prompt audit calls safe (weighted by stratum). Corrected: the measured rate adjusted by the "
             "audited sensitivity (Se) and specificity (Sp) of the verdict behind it, (p + Sp &minus; 1) / "
             "(Se + Sp &minus; 1) (Rogan-Gladen); its 95% interval includes the audit's own uncertainty. "
             "A corrected rate outside [0, 1] is clamped and marked.</p>",
             _table(["set", "model", "verdict", "measured % [95% CI]", "human-safe only % [95% CI]",
                     "corrected % [95% CI]", "Se", "Sp", "Se/Sp from", "note"], rows)]
    for kind, res in result["results"].items():
        what = "prompts (safe / borderline / toxic)" if kind == PROMPT else "verdicts (compliance / refusal)"
        parts += [f"<h3>{_e(kind.capitalize())} audit: {what}</h3>",
                  f"<p class=muted>{_e(res['folder'])}: sample {_e(res['sample_id'])}, {_e(res['items_total'])} "
                  f"items, {_e(res['unlabelled'])} unlabelled, {_e(res['ties'])} without a majority.</p>",
                  _agreement(res), "<h4>Machine verdicts against the human majority (weighted to the run)</h4>",
                  _machine(res)]
        if kind == PROMPT and res["shares"]:
            parts.append("<h4>What humans call the prompts (weighted share per set)</h4>" + _table(
                ["set", "label", "share % [95% CI]", "items"],
                [[_e(s["set"]), _e(s["label"]), _pct(s["share"], *s["ci"]), _e(s["count"])] for s in res["shares"]]))
        parts += ["<details><summary>Confusion tables</summary>" + _confusion(res) + "</details>",
                  "<details><summary>Items where humans and a machine disagree</summary>"
                  + _disagreements(res) + "</details>"]
    return "\n".join(parts)
