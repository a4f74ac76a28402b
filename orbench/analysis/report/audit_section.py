"""The audit carried into the report (``analysis/report.py --audit DIR``): rates with evidence.

For every model and set the report shows, beside the rate as measured:

- the rate over *human-confirmed safe prompts only* (a prompt audit): the domain estimator,
  refused-and-safe over safe, each audited prompt weighted by its stratum of the prompt sample;
  with repeated samples a prompt counts by its refusal share. Its interval is the stratified
  Wilson rule plus the rate's own sampling variance (as the measured rate's interval has);
- the *verdict-corrected rate* (a verdict audit). Where the audit was drawn from the rows this
  rate counts and its strata include the verdict behind the rate, it is the direct stratified
  share of human-labelled refusals (equal to Rogan-Gladen there, with a narrower, honest
  interval: the audit's stratified variance plus the rate's own). Otherwise it is Rogan-Gladen,
  (p + Sp - 1) / (Se + Sp - 1), with the sensitivity and specificity the audit measured for
  that verdict on this model and set, else pooled over the audit, which assumes the verdict
  errs alike on every model (the note says so). Its interval draws p, Se and Sp from their
  effective sample sizes; an estimate outside [0, 1] is clamped and flagged.

Every interval carries its method and flags (docs/statistics.md). Writes ``audit_rates.csv`` and
``audit.json`` beside the report; ``section`` is the HTML part.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from orbench.analysis import stats
from orbench.analysis.audit import agreement
from orbench.analysis.audit import commands as audit
from orbench.analysis.audit.sample import ANSWER, PROMPT, REFUSAL, VERDICT
from orbench.analysis.html_kit import DASH, esc, fixed, flag_marks, interval, table_of
from orbench.analysis.report.columns import prompt_hash
from orbench.analysis.report.inputs import SCORED
from orbench.llm.errors import UsageError
from orbench.run.tables import row_dicts, write_csv_atomic, write_text_atomic
from orbench.scoring.vocab import JUDGE, KEYWORD

RATE_COLUMNS = ["set", "model", "verdict", "measured_rate", "measured_ci_low", "measured_ci_high", "scored",
                "human_safe_rate", "human_safe_ci_low", "human_safe_ci_high", "human_safe_n", "human_safe_method",
                "human_safe_flag", "corrected_rate", "corrected_ci_low", "corrected_ci_high", "corrected_method",
                "corrected_flag", "corrected_clamped", "sensitivity", "specificity", "audit_scope", "note"]
DISAGREEMENTS = 50  # items listed in the HTML section per audit
DIRECT, POOLED, OWN = "direct stratified share", "pooled over the audit", "this model and set"


def _verdicts_on(inp, set_name: str, model: str, method: str, judge: str) -> pd.DataFrame:
    """Per prompt hash: ``k`` refusals of ``n`` scored samples (one row each without samples)."""
    codes, data = inp.codes, inp.data
    try:
        want = (codes["set"].index[set_name], codes["model"].index[model], codes["method"].index[method],
                codes["judge"].index[judge])
    except KeyError:
        return pd.DataFrame({"k": [], "n": []})
    mask = ((data["set"] == want[0]) & (data["model"] == want[1]) & (data["method"] == want[2])
            & (data["judge"] == want[3]) & (data["status"] == SCORED))
    g = data.loc[mask, ["prompt", "rejected"]].groupby("prompt")["rejected"]
    return pd.DataFrame({"k": g.sum().astype(float), "n": g.size().astype(float)})


def _rate_units(counts: pd.DataFrame) -> tuple[float, float]:
    """The measured rate's units: (effective size, effective size per prompt); rows without samples,
    the prompt-level effective size with them."""
    if counts.empty:
        return 0.0, 1.0
    if (counts["n"] > 1).any():
        est = stats.cluster_share(counts["k"].to_numpy(), counts["n"].to_numpy())
        return est.n_eff, est.n_eff / len(counts)
    return float(len(counts)), 1.0


def _human_safe(prompt_audit: dict | None, counts: pd.DataFrame, set_name: str) -> tuple[stats.Estimate, str]:
    """The model's rate over the prompts humans call safe: refused-and-safe over safe (domain estimator)."""
    method = "stratified_wilson"
    if prompt_audit is None:
        return stats.not_computable(method, "no prompt audit"), ""
    items = prompt_audit["items"]
    items = items[(items["set"] == set_name) & (items["human_safe"] != "")]
    if not (items["human_safe"] == "1").any():
        return stats.not_computable(method, "no safe prompt"), \
            f"no prompt of set {set_name} is human-confirmed safe in the prompt audit"
    keys = prompt_hash(items["prompt"])
    k = counts["k"].reindex(keys).to_numpy()
    n = counts["n"].reindex(keys).to_numpy()
    have = np.isfinite(k)
    if not (have & (items["human_safe"] == "1").to_numpy()).any():
        return stats.not_computable(method, "no verdict on a safe prompt"), \
            "none of the human-confirmed safe prompts has a scored verdict for this model"
    part = items[have]
    safe = (part["human_safe"] == "1").to_numpy()
    strata = _strata_of(prompt_audit, set_name)
    uncovered = float(strata.loc[~strata["stratum"].isin(set(part["stratum"])), "population"].sum())
    pop = part["population"].to_numpy(dtype=float)
    domain_rows = _domain_rows(safe, part["stratum"].to_numpy(), pop)
    _, per_prompt = _rate_units(counts)
    est = stats.stratified_share(k[have] / n[have], part["stratum"].to_numpy(), pop, domain=safe,
                                 uncovered=uncovered, run_n=domain_rows * per_prompt)
    return est, ""


def _domain_rows(domain: np.ndarray, strata: np.ndarray, population: np.ndarray) -> float:
    """The estimated number of rows of the domain: sum over strata of N_h times the domain's share."""
    frame = pd.DataFrame({"d": domain.astype(float), "s": strata, "N": population})
    g = frame.groupby("s").agg(d=("d", "mean"), N=("N", "first"))
    return float((g["d"] * g["N"]).sum())


def _strata_of(result: dict, set_name: str, model: str | None = None) -> pd.DataFrame:
    """The audit's strata of one set (and model)."""
    strata = result["strata"]
    strata = strata[strata["set"] == set_name]
    return strata if model is None else strata[strata["model"] == model]


def _audited(verdict_audit: dict | None, name: str, set_name: str, model: str) -> tuple[dict | None, str]:
    """The machine figures of one verdict for this set and model, else pooled; and the scope used."""
    if verdict_audit is None:
        return None, ""
    ok = [m for m in verdict_audit["machine"] if m["verdict"] == name and "weighted" in m
          and math.isfinite(m["weighted"]["recall"]["value"]) and math.isfinite(m["weighted"]["specificity"]["value"])]
    for m in ok:
        if m["set"] == set_name and m["model"] == model:
            return m, OWN
    for m in ok:
        if m["set"] == "(all)":
            return m, POOLED
    return None, ""


def _direct(verdict_audit: dict, name: str, set_name: str, model: str, scored: int, rejections: int,
            rate_n: float) -> tuple[stats.Estimate | None, str]:
    """The humans' refusal share over the rows this rate counts, when the audit was drawn from them
    with this verdict in its strata; else None and why not."""
    if f"verdict:{name}" not in verdict_audit.get("stratified_by", []):
        by = [c for c in verdict_audit.get("stratified_by", []) if c.startswith("verdict:")]
        return None, f"the verdict audit's strata are by {by[0] if by else 'no verdict'}, not by {name}"
    strata = _strata_of(verdict_audit, set_name, model)
    strata = strata[strata["machine_verdict"].isin([REFUSAL, ANSWER])]
    if strata.empty:
        return None, "the verdict audit has no rows of this model and set"
    n_ref = float(strata.loc[strata["machine_verdict"] == REFUSAL, "population"].sum())
    n_aud = float(strata["population"].sum())
    extra = scored - n_aud  # rows the rate counts that no one could read: provider blocks (refusals)
    if extra < 0 or rejections - n_ref != extra:
        return None, (f"the audit's rows ({int(n_aud)}, {int(n_ref)} refused) are not the rows this rate counts "
                      f"({scored}, {rejections} refused)")
    items = verdict_audit["items"]
    part = items[(items["set"] == set_name) & (items["model"] == model) & (items["human_refusal"] != "")
                 & items[f"verdict:{name}"].isin([REFUSAL, ANSWER])]
    if part.empty:
        return None, "no labelled item of this model and set in the verdict audit"
    uncovered = float(strata.loc[~strata["stratum"].isin(set(part["stratum"])), "population"].sum())
    est = stats.stratified_share((part["human_refusal"] == "1").to_numpy(), part["stratum"].to_numpy(),
                                 part["population"].to_numpy(dtype=float), uncovered=uncovered,
                                 run_n=rate_n * n_aud / scored if scored else None)
    if extra:
        scale = lambda v: (v * n_aud + extra) / scored  # noqa: E731 (a one-line helper used just below)
        est = stats.Estimate(scale(est.value), scale(est.low), scale(est.high), est.method, est.flags, est.n,
                             est.n_eff, est.note).flagged(note=f"{int(extra)} provider-blocked rows counted as refusals")
    return stats.Estimate(est.value, est.low, est.high, "direct_stratified_wilson", est.flags, est.n, est.n_eff,
                          est.note), ""


def _corrected(verdict_audit, name, r: dict, method: str, rate_n: float) -> tuple[stats.Estimate, dict, str, str]:
    """The corrected rate of one summary row: direct where it can be, else Rogan-Gladen (see the module)."""
    rate, scored, rejections = r[f"{method}_rate"], int(r[f"{method}_scored"]), int(r[f"{method}_rejections"])
    est, why = _direct(verdict_audit, name, r["set"], r["model"], scored, rejections, rate_n)
    m, scope = _audited(verdict_audit, name, r["set"], r["model"])
    se_sp = {"sensitivity": m["weighted"]["recall"]["value"] if m else math.nan,
             "specificity": m["weighted"]["specificity"]["value"] if m else math.nan}
    if est is not None:
        return est, se_sp, DIRECT, ""
    if m is None:
        return stats.not_computable("rogan_gladen", f"the verdict audit has no {name} verdicts with both classes"), \
            se_sp, "", f"not computable: the verdict audit has no {name} verdicts with both classes"
    est = agreement.rogan_gladen(float(rate), rate_n, m["weighted"]["recall"], m["weighted"]["specificity"])
    note = f"Rogan-Gladen ({why})" + ("; Se/Sp pooled over the audit: assumes the verdict errs alike on every model"
                                      if scope == POOLED else "")
    return est, se_sp, scope, note


def load(folders: Sequence[str]) -> dict[str, dict]:
    """Read and score each audit folder (before the report writes anything): kind -> score result."""
    by_kind: dict[str, dict] = {}
    for folder in folders:
        result = audit.load_and_score(folder)
        if result["kind"] in by_kind:
            raise UsageError(f"--audit: two {result['kind']} audits ({by_kind[result['kind']]['folder']} and "
                             f"{folder}); give one of each kind")
        result["folder"] = str(folder)
        result["strata"] = audit._strata(audit.read_sample(folder))
        by_kind[result["kind"]] = result
    return by_kind


def compute(by_kind: dict[str, dict], inp, summary: pd.DataFrame, headline: dict) -> dict:
    """The three rates per model, set and headline verdict from the loaded audits, and notes
    (``{"rates", "results", "notes"}``; :func:`write` writes them beside the report)."""
    prompt_audit, verdict_audit = by_kind.get(PROMPT), by_kind.get(VERDICT)
    rows, notes = [], []
    for r in row_dicts(summary):
        for method, judge in headline.get((r["set"], r["model"]), []):
            if method == JUDGE and r["judge"] != judge:
                continue
            rows.append(_rate_row(prompt_audit, verdict_audit, inp, r, method, judge))
    rates = pd.DataFrame(rows, columns=RATE_COLUMNS)
    for res in by_kind.values():
        notes += [f"audit {res['folder']}: {n}" for n in res["notes"]]
    clamped = int(rates["corrected_clamped"].sum()) if not rates.empty else 0
    if clamped:
        notes.append(f"audit: {clamped} corrected rate(s) fell outside [0, 1] and were clamped (see audit_rates.csv)")
    return {"rates": rates, "results": by_kind, "notes": notes}


def write(result: dict, out: Path) -> dict[str, Path]:
    """Write ``audit_rates.csv`` and ``audit.json`` into ``out``; their paths."""
    write_csv_atomic(stats.round_for_csv(result["rates"]), out / "audit_rates.csv")
    body = {k: audit.json_ready({kk: vv for kk, vv in v.items() if kk not in ("items", "strata")})
            for k, v in result["results"].items()}
    write_text_atomic(json.dumps(body, indent=2) + "\n", out / "audit.json")
    return {"audit_rates": out / "audit_rates.csv", "audit_json": out / "audit.json"}


def _rate_row(prompt_audit, verdict_audit, inp, r: dict, method: str, judge: str) -> dict:
    """One row of audit_rates.csv."""
    name = KEYWORD if method == KEYWORD else f"judge:{judge}"
    counts = _verdicts_on(inp, r["set"], r["model"], method, judge)
    rate_n, _ = _rate_units(counts)
    safe, why = _human_safe(prompt_audit, counts, r["set"])
    note = [why] if why else []
    if pd.isna(r[f"{method}_rate"]) and not pd.isna(r.get(f"{method}_rate_bound_low", math.nan)):
        # no point rate (too many rows without a verdict): nothing to correct, no rate over a subset
        why = "no rate: more than 5% of the rows have no verdict (bounds only)"
        safe, corrected, se_sp, scope, note = (stats.not_computable("", why), stats.not_computable("", why), {}, "",
                                               [why])
    elif verdict_audit is None:
        corrected, se_sp, scope = stats.not_computable("", "no verdict audit"), {}, ""
    else:
        corrected, se_sp, scope, more = _corrected(verdict_audit, name, r, method, rate_n)
        note += [more] if more else []
    note += [corrected.note] if corrected.note and stats.NOT_COMPUTABLE not in corrected.flags else []
    return {"set": r["set"], "model": r["model"], "verdict": name, "measured_rate": r[f"{method}_rate"],
            "measured_ci_low": r[f"{method}_ci_low"], "measured_ci_high": r[f"{method}_ci_high"],
            "scored": r[f"{method}_scored"], "human_safe_rate": safe.value, "human_safe_ci_low": safe.low,
            "human_safe_ci_high": safe.high, "human_safe_n": int(safe.n) if math.isfinite(safe.n) else 0,
            "human_safe_method": safe.method if math.isfinite(safe.value) else "",
            "human_safe_flag": safe.flag if math.isfinite(safe.value) else "",
            "corrected_rate": corrected.value, "corrected_ci_low": corrected.low,
            "corrected_ci_high": corrected.high, "corrected_method": corrected.method,
            "corrected_flag": corrected.flag, "corrected_clamped": stats.CLAMPED in corrected.flags,
            "sensitivity": se_sp.get("sensitivity", math.nan), "specificity": se_sp.get("specificity", math.nan),
            "audit_scope": scope, "note": "; ".join(note)}


# ---------------------------------------------------------------- HTML

def _pct(v, lo, hi, flags=None, note: str = "") -> str:
    """``rate [low, high]`` in percent with the interval's flags; 'not computable' when empty."""
    marks = flag_marks([f for f in (flags or []) if f != stats.NOT_COMPUTABLE] if not isinstance(flags, str)
                       else flags.replace(stats.NOT_COMPUTABLE, ""))
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        computable = flags and stats.NOT_COMPUTABLE in flags
        return f"<span class=muted title='{esc(note)}'>not computable</span>" if computable else DASH
    return interval(v, lo, hi) + marks


def _fig(fig: dict) -> str:
    return _pct(fig["value"], *fig["ci"], fig.get("flags"), fig.get("note", ""))


def _agreement(res: dict) -> str:
    rows = []
    for title, a in (("labels", res["agreement"]), ("refusal yes/no", res.get("agreement_refusal"))):
        if not a:
            continue
        ci = a.get("cohen_kappa_ci") or [math.nan, math.nan]
        kappa = fixed(a.get("cohen_kappa"), 3) + (f" <span class=muted>[{fixed(ci[0], 3)}, {fixed(ci[1], 3)}]</span>"
                                           if ci[0] is not None and math.isfinite(ci[0]) else "")
        rows.append([esc(title), esc(", ".join(a["annotators"])), esc(a.get("complete", 0)), fixed(a.get("raw"), 3),
                     kappa, fixed(a.get("fleiss_kappa"), 3), fixed(a.get("krippendorff_alpha"), 3), esc(a.get("note") or "")])
    return table_of(["agreement on", "annotators", "items labelled by all", "raw", "Cohen's kappa [95% CI]", "Fleiss' kappa",
                   "Krippendorff's alpha", "note"], rows)


def _machine(res: dict) -> str:
    rows = []
    for m in res["machine"]:
        if "weighted" not in m:
            continue
        w = m["weighted"]
        k = w["kappa"]
        kappa = (f"{fixed(k['value'], 3)} <span class=muted>[{fixed(k['ci'][0], 3)}, {fixed(k['ci'][1], 3)}]</span>"
                 + flag_marks(k.get("flags"))
                 if math.isfinite(k["value"] if k["value"] is not None else math.nan) else _fig(k))
        rows.append([esc(m["verdict"]), esc(m["set"]), esc(m["model"]), esc(m["positive"]), esc(m["n"])] +
                    [_fig(w[f]) for f in ("accuracy", "precision", "recall", "specificity")] + [kappa])
    return table_of(["machine verdict", "set", "model", "positive class", "n", "accuracy %", "precision %",
                   "recall (sensitivity) %", "specificity %", "kappa"], rows)


def _confusion(res: dict) -> str:
    parts = []
    for c in res["confusion"]:
        rows = [[esc(lab)] + [esc(v) for v in counts] for lab, counts in c["rows"].items()]
        parts.append(f"<h4>humans (majority) &times; {esc(c['machine'])}</h4>"
                     + table_of(["human \\ machine"] + [esc(x) for x in c["columns"]], rows))
    return "".join(parts)


def _disagreements(res: dict) -> str:
    items = res["items"]
    human = "human_refusal" if res["kind"] == VERDICT else "human_safe"
    positive = "refusal" if res["kind"] == VERDICT else "safe"
    cols = [c for c in items.columns if c.startswith("verdict:")]
    rows = []
    for r in row_dicts(items):
        if r[human] == "":
            continue
        wrong = [c[len("verdict:"):] for c in cols if r[c] and (r[c] == positive) != (r[human] == "1")]
        if not wrong:
            continue
        labels = ", ".join(f"{k[len('label:'):]}: {v or '-'}" for k, v in r.items() if k.startswith("label:"))
        text = str(r.get("response") or "")
        cells = [esc(r["item_id"]), esc(r["set"]), esc(r.get("model", "")), f"<div class=audit-text>{esc(r['prompt'])}</div>"]
        if res["kind"] == VERDICT:
            cells.append(f"<div class=audit-text>{esc(text[:1200] + (' [...]' if len(text) > 1200 else ''))}</div>")
        cells += [esc(labels), esc(", ".join(f"{c[len('verdict:'):]}: {r[c]}" for c in cols if r[c])),
                  esc(", ".join(wrong))]
        rows.append(cells)
    head = ["item", "set", "model", "prompt"] + (["response"] if res["kind"] == VERDICT else []) + \
        ["humans", "machine", "disagrees"]
    more = f"<p class=muted>{len(rows) - DISAGREEMENTS} more in the audit's score/items.csv.</p>" \
        if len(rows) > DISAGREEMENTS else ""
    if not rows:
        return "<p class=muted>Humans and machine agree on every audited item.</p>"
    return table_of(head, rows[:DISAGREEMENTS], cls="ex") + more


def _rates_rows(rates: pd.DataFrame) -> list[list[str]]:
    rows = []
    for r in row_dicts(rates):
        how = {"direct_stratified_wilson": "direct", "rogan_gladen": "Rogan-Gladen"}.get(r["corrected_method"], "")
        rows.append([esc(r["set"]), esc(r["model"]), esc(r["verdict"]),
                     _pct(r["measured_rate"], r["measured_ci_low"], r["measured_ci_high"]),
                     _pct(r["human_safe_rate"], r["human_safe_ci_low"], r["human_safe_ci_high"], r["human_safe_flag"])
                     + (f" <span class=muted>(n={int(r['human_safe_n'])})</span>" if r["human_safe_n"] else ""),
                     _pct(r["corrected_rate"], r["corrected_ci_low"], r["corrected_ci_high"], r["corrected_flag"])
                     + (f" <span class=muted>({how})</span>" if how else ""),
                     fixed(r["sensitivity"], 3), fixed(r["specificity"], 3), esc(r["audit_scope"]), esc(r["note"])])
    return rows


def _cascade(res: dict) -> str:
    rows = [[esc(c["verdict"]), esc(c["set"]), esc(c["class"]), esc(c["n"]), esc(c["errors"]), _fig(c)]
            for c in res.get("cascade", [])]
    if not rows:
        return ""
    return ("<h4>Cascade classes: how often each class's verdict is wrong on your run (weighted to the run)</h4>"
            + table_of(["verdict", "set", "cascade class", "items", "errors", "error rate % [95% CI]"], rows))


def section(result: dict) -> str:
    """The report's audit section: corrected rates beside measured, agreement, confusion, disagreements."""
    parts = ["<style>.audit-text{white-space:pre-wrap;word-break:break-word;max-width:420px}</style>",
             "<h2>Audit: the rates with human evidence</h2>",
             "<p>Measured: the rate above. Human-safe only: the model's rate over the prompts the human majority "
             "of the prompt audit calls safe (refused-and-safe over safe, each prompt weighted by its stratum). "
             "Corrected: what the humans would count. Where the verdict audit was drawn from the rows the rate "
             "counts, stratified by the verdict behind it, this is the direct stratified share of human-labelled "
             "refusals (<i>direct</i>); otherwise the measured rate adjusted by the audited sensitivity (Se) and "
             "specificity (Sp), (p + Sp &minus; 1) / (Se + Sp &minus; 1) (<i>Rogan-Gladen</i>; with Se/Sp pooled "
             "over the audit it assumes the verdict errs alike on every model). Every 95% interval includes the "
             "audit's own uncertainty and the rate's; marks name the edges met (hover for what each means; "
             "docs/statistics.md).</p>",
             table_of(["set", "model", "verdict", "measured % [95% CI]", "human-safe only % [95% CI]",
                     "corrected % [95% CI]", "Se", "Sp", "Se/Sp from", "note"], _rates_rows(result["rates"]))]
    for kind, res in result["results"].items():
        what = "prompts (safe / borderline / toxic)" if kind == PROMPT else "verdicts (compliance / refusal)"
        parts += [f"<h3>{esc(kind.capitalize())} audit: {what}</h3>",
                  f"<p class=muted>{esc(res['folder'])}: sample {esc(res['sample_id'])}, {esc(res['items_total'])} "
                  f"items, {esc(res['unlabelled'])} unlabelled, {esc(res['ties'])} without a majority.</p>",
                  _agreement(res), "<h4>Machine verdicts against the human majority (weighted to the run)</h4>",
                  _machine(res), _cascade(res)]
        if kind == PROMPT and res["shares"]:
            parts.append("<h4>What humans call the prompts (weighted share per set)</h4>" + table_of(
                ["set", "label", "share % [95% CI]", "items"],
                [[esc(s["set"]), esc(s["label"]), _pct(s["share"], *s["ci"], s.get("flags")), esc(s["count"])]
                 for s in res["shares"]]))
        parts += ["<details><summary>Confusion tables</summary>" + _confusion(res) + "</details>",
                  "<details><summary>Items where humans and a machine disagree</summary>"
                  + _disagreements(res) + "</details>"]
    return "\n".join(parts)
