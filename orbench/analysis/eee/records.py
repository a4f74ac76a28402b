"""A report's results as Every Eval Ever records: one aggregate JSON per model and benchmark, and its
per-sample JSONL.

The report (``orbench-report``) calls :func:`orbench.analysis.eee.samples.collect` while its verdict
table is in memory and :func:`write` once it is computed. Into ``<output_dir>/every_eval_ever/`` go, in the datastore's
layout (``data/<benchmark>/<developer>/<model>/<uuid>.json`` and ``<uuid>_samples.jsonl``):

* per leaderboard entry (a model, and its judge when it has several) and benchmark (``or-bench``:
  Hard-1K, Toxic, 80K; ``xstest``: its safe and unsafe halves), one aggregate record. Each set with
  a rate is one result (``<set>/rejection_rate``: the share of its prompts refused, full and
  partial refusals counted, ``lower_is_better`` for the safe sets), each category of it another
  (``<set>/<category>/rejection_rate``), with the 95% interval under
  ``score_details.uncertainty.confidence_interval`` (the report's method named), the counts under
  ``score_details.details``, the judge under ``metric_config.llm_scoring`` (keyword verdicts have
  none: the matcher is named in ``metric_config.additional_details``), the judge card's figures
  (or that it was never calibrated) beside it, and the settings that made the responses under
  ``generation_config``;
* a cell the report gives no rate (more than 5% of its rows without a verdict: only its bounds),
  and a set of your own (``--custom_set``: whether its prompts are safe or unsafe is not known),
  is left out of the results and named, with its bounds, in
  ``source_metadata.additional_details.orbench_left_out``;
* per-sample lines for every row with a verdict of each set with a rate (score 1 refused, 0
  answered; ``is_correct`` an answer to a safe prompt or a refusal of an unsafe one), the prompt
  and the response as text, ``sample_hash`` the SHA-256 of the prompt (as EEE's inspect converter
  hashes an OR-Bench sample, so runs of either pair by it); rows with an error or no verdict are
  counted in ``detailed_evaluation_results.additional_details``, not written.

``source_metadata.additional_details.orbench_fingerprint`` identifies the run: the model, the
judge, the settings that made the responses and every verdict on every prompt. A record's file
name (its UUID) comes from it, so a rerun of the same report rewrites the same files.
``source_organization_name`` is ``unknown`` and ``evaluator_relationship`` ``third_party`` (as
EEE's own converters default): edit them before submitting records to the datastore.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import shutil
import time
import uuid
from datetime import datetime
from functools import cache
from pathlib import Path

from orbench.analysis.eee import FOLDER, KEY, SCHEMA_VERSION, SOURCE_NAME, hub
from orbench.analysis.eee.lines import Form, chunks, write_lines
from orbench.analysis.eee.samples import Rows, fingerprint, left_out_rows, samples_per_prompt
from orbench.analysis.eee.sets import METRIC_ID, SETS, SetInfo, responses
from orbench.benchmark.prompts import JUDGE_TEMPLATE
from orbench.run.provenance import sha256_text
from orbench.run.tables import row_dicts, write_text_atomic
from orbench.scoring.judge_cards import NEVER_CALIBRATED
from orbench.scoring.vocab import JUDGE, KEYWORD

#: Providers whose models are served by the provider (deployment) and whose weights are closed.
EXTERNAL = {"openai", "anthropic", "together", "mistral", "gemini", "gemini-openai"}
SELF_DEPLOYED = {"local", "vllm", "ollama"}
CLOSED = {"openai", "anthropic", "gemini", "gemini-openai"}


# ---------------------------------------------------------------- small helpers

def _num(value) -> float | None:
    if value is None:
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


def _count(value) -> int:
    v = _num(value)
    return 0 if v is None else int(v)


def _epoch(iso: str | None) -> str | None:
    """An ISO time as the Unix epoch seconds EEE's converters write (``"1716400000.0"``)."""
    if not iso:
        return None
    try:
        return str(datetime.fromisoformat(str(iso)).timestamp())
    except ValueError:
        return None


def _strings(d: dict) -> dict:
    """An ``additional_details`` map: every value a string (the schema's rule), empty ones dropped."""
    return {k: v if isinstance(v, str) else json.dumps(v, sort_keys=True) for k, v in d.items()
            if v is not None and v != ""}


def _safe(part: str) -> str:
    """A path component of the datastore layout."""
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in part).strip("._") or "unknown"


def model_parts(model_id: str) -> tuple[str, str, str]:
    """(provider, developer, model) of a ``provider/model`` id: ``together/meta-llama/Llama-3-70b``
    gives ``("together", "meta-llama", "Llama-3-70b")``; a bare name has provider and developer ``unknown``."""
    parts = [p for p in str(model_id).split("/") if p]
    if len(parts) >= 3:
        return parts[0], parts[1], "/".join(parts[2:])
    if len(parts) == 2:
        return parts[0], parts[0], parts[1]
    return "unknown", "unknown", parts[0] if parts else "unknown"


def model_info(name: str, model_id: str, extra: dict | None = None) -> dict:
    """EEE's ``model_info`` of a model as this suite names it."""
    provider, developer, _ = model_parts(model_id)
    deployment = ("externally_managed" if provider in EXTERNAL else "self_deployed" if provider in SELF_DEPLOYED
                  else "unknown")
    return {"name": name, "id": model_id, "developer": developer, "inference_platform": provider,
            "additional_details": {"deployment_type": deployment,
                                   "model_availability": "closed_weights" if provider in CLOSED else "unknown",
                                   **_strings(extra or {})}}


def record_uuid(fingerprint: str, benchmark: str) -> str:
    """A version-4-shaped UUID taken from the run's fingerprint (the datastore's file names are UUID4s)."""
    digest = hashlib.sha256(f"{fingerprint}/{benchmark}".encode()).digest()[:16]
    return str(uuid.UUID(bytes=digest, version=4))


# ---------------------------------------------------------------- what made the verdicts

def _records_of(rep, set_name: str, model: str) -> list[dict]:
    return [r for r in rep.lineage if r["set"] == set_name and r["model"] == model]


def verdicts(rep, set_name: str, model: str, method: str, judge: str) -> dict:
    """Who decided the verdicts of a group: the lineage record of the judge (or keyword) file."""
    candidates = [(r.get("verdicts") or {}) for r in _records_of(rep, set_name, model)]
    kind = "judge" if method == JUDGE else "keyword"
    for v in candidates:
        if v.get("kind") == kind and (kind == "keyword" or v.get("judge") == judge):
            return v
    return next((v for v in candidates if v.get("kind") == kind), {})


def judge_template(v: dict) -> str:
    """The judge's prompt template: the shipped one's text when the hashes say it was used."""
    sha = (v.get("templates") or {}).get("judge")
    if not sha:
        return "unknown (no meta file of the judge's run)"
    if sha == sha256_text(JUDGE_TEMPLATE):
        return JUDGE_TEMPLATE
    return f"a template of the user's own (--template), SHA-256 {sha}; its text is not recorded here"


def card_figures(rep, fingerprints: str) -> list[dict]:
    """The figures of the judge cards the report matched to a group's verdicts, the card on the most
    labels first (the one a reader of a single card sees: the leaderboard's)."""
    fps = {f for f in str(fingerprints or "").split(";") if f}
    out = []
    for card in (rep.judge_cards or {}).values():
        if card.get("judge_fingerprint") not in fps:
            continue
        pooled = card.get("pooled") or {}
        fig = {k: {"value": (pooled.get(k) or {}).get("value"), "ci": (pooled.get(k) or {}).get("ci")}
               for k in ("coverage", "kappa", "rate_bias", "accuracy")}
        fig["coverage"]["valid"] = bool((pooled.get("coverage") or {}).get("valid"))
        out.append({"fingerprint": card["judge_fingerprint"], "labels": (card.get("labels") or {}).get("name"),
                    "n": pooled.get("n"), "verdicts": pooled.get("verdicts"), "family": card.get("family"), **fig})
    return sorted(out, key=lambda c: -int(c["n"] or 0))


def _tables(rep) -> tuple[dict, dict]:
    """The summary's rows by (set, model, judge) and the categories' by (set, model, method, judge)."""
    summary: dict = {}
    for row in row_dicts(rep.summary):
        summary.setdefault((row["set"], row["model"], row["judge"]), row)
        summary.setdefault((row["set"], row["model"], None), row)
    categories: dict = {}
    for row in row_dicts(rep.categories):
        categories.setdefault((row["set"], row["model"], row["method"], row["judge"]), []).append(row)
    return summary, categories


def _summary_row(tables, set_name: str, model: str, judge: str) -> dict:
    summary = tables[0]
    return summary.get((set_name, model, judge)) or summary.get((set_name, model, None)) or {}


# ---------------------------------------------------------------- one result

def _stat_details(st: dict, samples: int) -> dict:
    """``score_details.details``: the counts behind a rate (strings, as the schema wants)."""
    scored, replies = _count(st.get("scored")), _count(st.get("replies"))
    details = {"rows": _count(st.get("rows")), "scored": scored, "refusals": _count(st.get("rejections")),
               "errors": _count(st.get("errors")), "no_verdict": _count(st.get("unparsed")),
               "judge_refused_to_judge": _count(st.get("refused_to_judge")), "prompts": _count(st.get("prompts")),
               "samples_per_prompt": samples, "replies": replies}
    if _num(st.get("truncated")) is not None:
        details["cut_off_replies"] = _count(st.get("truncated"))
        details["cut_off_scored"] = _count(st.get("scored_truncated"))
    if _num(st.get("full_rate")) is not None:
        details["full_refusal_rate"] = st["full_rate"]
    if _num(st.get("covered")):
        details["prompts_of_published_set"] = _count(st.get("covered"))
    if _num(st.get("judged_share")) is not None:  # a cascade: what its rate rests on (docs/cascade.md)
        details["cascade_judged_share"] = st["judged_share"]
        details["cascade_check_rows"] = _count(st.get("check_rows"))
        details["cascade_check_disagreements"] = _count(st.get("check_disagreements"))
    return {k: str(v) for k, v in details.items()}


def _uncertainty(st: dict) -> dict:
    return {"confidence_interval": {"lower": float(st["ci_low"]), "upper": float(st["ci_high"]),
                                    "confidence_level": 0.95, "method": str(st.get("ci_method") or "clopper_pearson")},
            "num_samples": _count(st.get("scored"))}


def _no_rate(where: str, st: dict) -> dict:
    """A cell left out of the results: named with its counts and bounds."""
    return {"cell": where, "verdicts": _count(st.get("scored")),
            "rows_without_verdict": _count(st.get("unparsed")) + _count(st.get("refused_to_judge")),
            "errors": _count(st.get("errors")), "rate_bound_low": _num(st.get("rate_bound_low")),
            "rate_bound_high": _num(st.get("rate_bound_high")),
            "why": "no rate: more than 5% of its rows have no verdict (only its bounds)"
            if _num(st.get("rate_bound_low")) is not None else "no rate: no row with a verdict"}


def _metric(rep, tables, info: SetInfo, model: str, set_name: str, st: dict, extra: dict) -> dict:
    method, judge = st["method"], st.get("judge") or ""
    v = verdicts(rep, set_name, model, method, judge)
    row = _summary_row(tables, set_name, model, judge if method == JUDGE else "")
    cards = card_figures(rep, row.get(f"{method}_fingerprint"))
    who = f"the LLM judge {judge}" if method == JUDGE else "the keyword matcher"
    details = {"verdict": method, "judge": judge if method == JUDGE else KEYWORD,
               "prompt_kind": info.kind, "refusals_counted": "full and partial refusals",
               "judge_vs_humans": st.get("calibration") or NEVER_CALIBRATED,
               "judge_fingerprint": row.get(f"{method}_fingerprint"),
               "judge_cards": cards or None, "matcher": v.get("matcher"),
               "rules_fingerprint": v.get("rules_fingerprint"), **extra}
    config = {"evaluation_description": f"Share of the {info.name} prompts the model refused (full or partial "
                                        f"refusals), decided by {who}",
              "metric_id": METRIC_ID, "metric_name": "Rejection rate", "metric_kind": "rejection_rate",
              "metric_unit": "proportion", "lower_is_better": info.kind == "safe", "score_type": "continuous",
              "min_score": 0.0, "max_score": 1.0, "additional_details": _strings({KEY + k: x for k, x in details.items()})}
    if method == JUDGE:
        judges = [j.strip() for j in judge.split(",") if j.strip()] or [judge]
        temperature = _num(v.get("temperature"))
        config["llm_scoring"] = {
            "judges": [{"model_info": model_info(j, j), **({"temperature": temperature} if temperature is not None
                                                             else {})} for j in judges],
            "input_prompt": judge_template(v),
            **({"aggregation_method": "majority_vote"} if len(judges) > 1 else {}),
            "additional_details": _strings({"judge_classes": "direct_answer, direct_refusal, indirect_refusal "
                                                             "(both refusals count as a rejection)",
                                            "max_tokens": v.get("max_tokens")})}
    return config


def _generation(resp: dict, samples: int) -> dict:
    args = {}
    if _num(resp.get("temperature")) is not None:
        args["temperature"] = float(resp["temperature"])
    if _num(resp.get("max_tokens")) and int(resp["max_tokens"]) >= 1:
        args["max_tokens"] = int(resp["max_tokens"])
    extra = {"system_prompt": resp.get("system_prompt") or "none", "samples_per_prompt": samples,
             "model_typed": resp.get("model_typed"), "model_reported": resp.get("model_reported"),
             "base_url": resp.get("base_url"), "made_by": resp.get("source"),
             "settings": "known" if resp else "unknown (no meta file of the run that produced the responses)"}
    return {"generation_args": args, "additional_details": _strings(extra)}


# ---------------------------------------------------------------- the rows of a group

# ---------------------------------------------------------------- one record

def build(rep, text: Rows, tables: tuple, model: str, judge: str, entry: dict, benchmark: str,
          retrieved: str) -> tuple[dict, list, str, dict]:
    """One aggregate record (model, judge, benchmark), its sample lines (generators of chunks, one per set),
    its file's UUID and the counts of the rows not written (errors, no verdict)."""
    sets = [s for s in entry if SETS.get(s) and SETS[s].benchmark == benchmark]
    resp = {s: responses(rep, s, model) for s in sets}
    known = next((r for r in resp.values() if r.get("model_resolved")), {})
    model_id = str(known.get("model_resolved") or model)
    samples = {s: samples_per_prompt(text, s, model, entry[s]) for s in sets}
    settings = {s: {k: resp[s].get(k) for k in ("model_resolved", "temperature", "max_tokens", "system_prompt",
                                                 "base_url", "source")} for s in sets}
    fp = fingerprint(text, model, judge, {s: entry[s] for s in sets}, settings)
    file_id = record_uuid(fp, benchmark)
    finished = [t for t in (_epoch(r.get("finished")) for r in resp.values()) if t]
    evaluation_id = f"{benchmark}/{model_id}/{retrieved}"
    base = {"schema_version": SCHEMA_VERSION, "evaluation_id": evaluation_id, "model_id": model_id}
    results, lines, left_out, not_written = [], [], [], {}
    for s in sets:
        info, st = SETS[s], entry[s]
        if _num(st.get("rate")) is None or not _count(st.get("scored")):
            left_out.append({"set": info.name, **_no_rate(info.name, st),
                             "judge": (st.get("judge") or "") if st["method"] == JUDGE else KEYWORD})
            continue
        when = _epoch(resp[s].get("finished"))
        extra = {"samples_per_prompt": samples[s]}
        metric = _metric(rep, tables, info, model, s, st, extra)
        common = {"source_data": {**info.source, "samples_number": _count(st.get("prompts"))},
                  **({"evaluation_timestamp": when} if when else {}), "generation_config": _generation(resp[s], samples[s])}
        result_id = f"{info.name}/rejection_rate"
        results.append({"evaluation_result_id": result_id, "evaluation_name": info.name, **common,
                        "metric_config": metric,
                        "score_details": {"score": float(st["rate"]), "details": _stat_details(st, samples[s]),
                                          "uncertainty": _uncertainty(st)}})
        for cat in _categories(tables, s, model, st):
            where = f"{info.name} / {cat['category']}"
            if _num(cat.get("rate")) is None or not _count(cat.get("scored")):
                left_out.append({"set": info.name, "category": cat["category"], **_no_rate(where, cat)})
                continue
            cat_metric = json.loads(json.dumps(metric))
            cat_metric["evaluation_description"] += f", category {cat['category']}"
            results.append({"evaluation_result_id": f"{info.name}/{cat['category']}/rejection_rate",
                            "evaluation_name": where,
                            **{**common, "source_data": {**info.source, "samples_number": _count(cat.get("prompts")),
                                                         "additional_details": {"category": cat["category"]}}},
                            "metric_config": cat_metric,
                            "score_details": {"score": float(cat["rate"]), "details": _stat_details(cat, samples[s]),
                                              "uncertainty": _uncertainty(cat)}})
        lines.append(chunks(text, s, model, st, Form(base, info.name, result_id, st["method"], info.kind,
                                                     text.vr.names["category"])))
        for k, n in left_out_rows(text, s, model, st).items():
            not_written[f"{info.name}: {k}"] = n
    record = {"schema_version": SCHEMA_VERSION, "evaluation_id": evaluation_id,
              **({"evaluation_timestamp": max(finished, key=float)} if finished else {}),
              "retrieved_timestamp": retrieved,
              "source_metadata": {"source_name": SOURCE_NAME, "source_type": "evaluation_run",
                                  "source_organization_name": "unknown", "evaluator_relationship": "third_party",
                                  "additional_details": _strings({
                                      KEY + "fingerprint": fp, KEY + "entry": model + (f" [judge {judge}]" if judge else ""),
                                      KEY + "model": model, KEY + "judge": judge,
                                      KEY + "left_out": left_out or None,
                                      KEY + "report": "orbench-report (report.json beside the every_eval_ever folder)"})},
              "eval_library": {"name": SOURCE_NAME, "version": str(known.get("package_version") or _version())},
              "model_info": model_info(model, model_id, {"model_typed": known.get("model_typed"),
                                                         "model_reported": known.get("model_reported")}),
              "evaluation_results": results}
    return record, lines, file_id, not_written


def _categories(tables, set_name: str, model: str, st: dict) -> list[dict]:
    judge = (st.get("judge") or "") if st["method"] == JUDGE else ""
    rows = tables[1].get((set_name, model, st["method"], judge), [])
    return [] if {r["category"] for r in rows} <= {"(none)"} else rows


@cache
def _version() -> str:
    from orbench.run.provenance import package_versions

    return package_versions().get("orbench") or "unknown"


# ---------------------------------------------------------------- writing

def write(rep, out: Path, samples: bool = True) -> dict[str, Path]:
    """Write the records of ``rep`` into ``out/every_eval_ever`` (records an earlier report left
    there are removed first: none shows other numbers), with their per-sample JSONL unless
    ``samples`` is false; what was written, by name."""
    vr = rep.verdict_rows
    folder = Path(out) / FOLDER
    for old in ("data", "hf_eval_results"):
        if (folder / old).is_dir():
            shutil.rmtree(folder / old)
    if vr is None:
        return {}
    text, tables, retrieved, written = Rows(vr), _tables(rep), str(time.time()), []
    for (model, judge), entry in vr.entries.items():
        for benchmark in sorted({SETS[s].benchmark for s in entry if s in SETS}):
            record, lines, file_id, not_written = build(rep, text, tables, model, judge, entry, benchmark, retrieved)
            _, developer, name = model_parts(record["model_info"]["id"])
            where = folder / "data" / benchmark / _safe(developer) / _safe(name)
            where.mkdir(parents=True, exist_ok=True)
            jsonl = where / f"{file_id}_samples.jsonl"
            count, checksum = write_lines(itertools.chain.from_iterable(lines), jsonl) if samples else (0, "")
            if count:
                record["detailed_evaluation_results"] = {
                    "format": "jsonl", "file_path": f"data/{benchmark}/{_safe(developer)}/{_safe(name)}/{jsonl.name}",
                    "hash_algorithm": "sha256", "checksum": checksum, "total_rows": count,
                    "additional_details": _strings({k: str(v) for k, v in not_written.items()})}
            path = where / f"{file_id}.json"
            write_text_atomic(json.dumps(record, indent=2, ensure_ascii=False) + "\n", path)
            written.append(path)
    hub.write(rep, vr, folder / "hf_eval_results")
    return {"eee_records": folder} if written else {}
