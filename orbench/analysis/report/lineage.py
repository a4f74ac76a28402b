"""Where a report input's numbers come from: the chain of provenance files behind it.

Every stage writes ``<output>.meta.json`` naming its input (``input.path`` and its SHA-256). A
report input is usually the end of a chain, e.g. a stage-5 keyword re-score of a stage-4 output
of a sample of Hard-1K. ``read_chain`` follows the ``input`` links back from the input's own meta
file through its ancestors' (stage 5, 4, 3, ...) for as long as each one is found; ``summarise``
then says who produced the responses (the stage-4 run: the model as typed, resolved and reported
by the provider, temperature, max tokens, system prompt, rules' fingerprint, engine) and who
decided the verdicts (the last stage: the judge and its template's hash, or the keyword matcher
and its rules' fingerprint), so the report can show both for every model and set.

A table the Python API kept in memory has no file: its child's meta record carries the record of
the run that made it (``input.record``, with the SHA-256 the table had when that run delivered it,
``input.record_sha256``), and the chain follows it as it follows a file, naming the link
``<output name> (in memory)``; a table edited in between is ``changed``, as a replaced file is
(``orbench.api._carried``). The links' records are kept without what they carry (:func:`read_meta`).

An ancestor is looked for at the path its child's meta file names; a relative path is tried from
the current folder and from the child's folder, then the file name alone beside the child (a
folder moved as a whole). When the file found no longer has the recorded SHA-256 the link is kept
and marked ``changed``: its meta file now describes another run (the file was replaced after its
child used it), so nothing is borrowed from it. When the stage-4 record is behind a changed link,
or the chain breaks at a missing file before reaching one, who produced the responses is
"settings unknown" (``responses["unknown"]`` says why), and ``chain_warnings`` says so for the
report's console, ``report.json`` and warning box.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from orbench.analysis.stats import NO_VERDICT_SHARE
from orbench.benchmark.sets import SET_NAMES, resolve_set
from orbench.run.outcomes import TRUNCATED_FINISH_REASONS, is_truncated  # noqa: F401 (re-exported for the report)
from orbench.run.provenance import sha256_file
from orbench.run.tables import row_dicts
from orbench.scoring.vocab import JUDGE, KEYWORD

#: How an in-memory link of a chain (the Python API's table, no file) is named after its run's output name.
IN_MEMORY = " (in memory)"
#: The keys of a meta record's ``input`` that carry an in-memory input's run (``orbench.api._carried``).
CARRIED_KEYS = ("record", "record_sha256", "name")
#: How many links are followed at most (the pipeline has five stages; a cycle stops earlier).
MAX_DEPTH = 8
#: Stage ids as the runner writes them (``Stage.config["stage"]``).
ALIGNMENT_STAGE = "check_alignment"
RESPONSE_STAGE = "check_response"
#: The stage of a CSV converted from an inspect_ai log (``orbench.integrations.inspect_log``).
INSPECT_STAGE = "inspect_log"
#: Above this share of cut-off replies the report warns.
TRUNCATION_WARN = 0.05
#: Above this share of rows with no verdict (unparsed, empty response, failed with an error) the report warns, and gives no
#: point rate (orbench.analysis.stats.NO_VERDICT_SHARE).
NO_VERDICT_WARN = NO_VERDICT_SHARE


def _load_meta(path: str) -> dict | None:
    if "://" in str(path):
        return None
    try:
        value = json.loads(Path(f"{path}.meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _carried(meta: dict) -> dict | None:
    """The record of the run that made an in-memory input (the Python API), which ``input.record``
    carries where a script's meta names a file; None when there is none."""
    block = meta.get("input")
    return block.get("record") if isinstance(block, dict) and isinstance(block.get("record"), dict) else None


def _own(meta: dict) -> dict:
    """A meta record without the records it carries of its in-memory ancestors (each is a link of
    its own in the chain): what a script's meta file holds."""
    if _carried(meta) is None:
        return meta
    return {**meta, "input": {k: v for k, v in meta["input"].items() if k not in CARRIED_KEYS}}


def read_meta(path: str) -> dict | None:
    """The provenance file ``<path>.meta.json`` as a dict, or None when absent or unreadable."""
    meta = _load_meta(path)
    return None if meta is None else _own(meta)


def _find_input(meta: dict, child: str) -> str | None:
    """The local file a meta record names as its input, looked for where it may be now."""
    recorded = (meta.get("input") or {}).get("path") if isinstance(meta.get("input"), dict) else None
    if not recorded or "://" in str(recorded):
        return None
    recorded = Path(str(recorded))
    here = Path(child).parent
    candidates = [recorded] if recorded.is_absolute() else [recorded, here / recorded]
    candidates.append(here / recorded.name)
    for candidate in candidates:
        if candidate.is_file():
            return str(candidate)
    return None


def read_chain(path: str) -> list[dict]:
    """``[{"file", "meta", "changed"}, ...]``: the input's own meta record first, then its
    ancestors', as far as each is found (empty when the input has no meta file)."""
    chain: list[dict] = []
    seen: set[str] = set()
    current: str | None = str(path)
    changed = False
    meta = _load_meta(current)
    while current and meta is not None and len(chain) < MAX_DEPTH:
        key = current if current.endswith(IN_MEMORY) else str(Path(current).resolve())
        if key in seen:
            break
        seen.add(key)
        chain.append({"file": current, "meta": _own(meta), "changed": changed})
        parent = _find_input(meta, current)
        recorded = (meta.get("input") or {}).get("sha256")
        carried = _carried(meta)
        if parent is None and carried is not None:
            # an in-memory input (the Python API): its run's record, named as its output would be; changed
            # when the table was edited between that run and this one
            made = meta["input"].get("record_sha256")
            changed = bool(recorded) and bool(made) and made != recorded
            current = str(meta["input"].get("name") or "table") + IN_MEMORY
            meta = carried
            continue
        if parent is None:
            break
        changed = bool(recorded) and sha256_file(parent) != recorded
        current, meta = parent, _load_meta(parent)
    return chain


def _settings(meta: dict) -> dict:
    value = meta.get("settings")
    return value if isinstance(value, dict) else {}


def _first_model(meta: dict) -> dict:
    for m in meta.get("models") or []:
        if isinstance(m, dict):
            return m
    return {}


def _unknown(link: dict, why: str) -> dict:
    return {"unknown": why, "file": link["file"]}


def responses_by(chain: list[dict], missing: str | None = None) -> dict | None:
    """Who produced the responses: the nearest stage-4 (check alignment) record of the chain.

    ``{"unknown": why}`` when a file on the way to it changed after its child used it (its meta
    describes another run), or when the chain breaks at ``missing`` (an input that is no longer
    found) before reaching one; None when no stage-4 record is known to exist.
    """
    for i, link in enumerate(chain):
        meta = link["meta"]
        if link["changed"]:
            child = Path(chain[i - 1]["file"]).name
            return _unknown(link, f"{Path(link['file']).name} has changed since {child} was made from it; its "
                                  f"meta file describes another run")
        if meta.get("stage") not in (ALIGNMENT_STAGE, INSPECT_STAGE):
            continue
        settings, model = _settings(meta), _first_model(meta)
        reported = model.get("reported_model")
        if isinstance(reported, list):
            reported = ", ".join(str(r) for r in reported)
        return {
            "file": link["file"],
            "model_typed": model.get("typed") or settings.get("model"),
            "model_resolved": model.get("resolved") or settings.get("model"),
            "model_reported": reported or None,
            "base_url": model.get("base_url"),
            "temperature": settings.get("temperature"),
            "max_tokens": settings.get("max_tokens"),
            "system_prompt": settings.get("system"),
            "matcher": settings.get("matcher") or meta.get("matcher"),
            "rules_fingerprint": meta.get("rules_fingerprint") or settings.get("rules"),
            "templates": meta.get("templates") or {},
            "engine": model.get("engine"),
            "package_version": meta.get("package_version"),
            "finished": meta.get("finished"),
            "source": meta.get("source") or "orbench",  # inspect_ai for a converted inspect log
        }
    if missing and chain:
        return _unknown(chain[-1], f"{Path(chain[-1]['file']).name} was made from {missing}, which is no "
                                   f"longer there (renamed, moved or deleted)")
    return None


def verdicts_by(chain: list[dict]) -> dict | None:
    """Who decided the verdicts in the input itself: its own (first) record of the chain."""
    if not chain:
        return None
    meta = chain[0]["meta"]
    settings = _settings(meta)
    stage = meta.get("stage")
    if stage == RESPONSE_STAGE:
        judge = settings.get("judge") or meta.get("judge")
        keyword = str(judge).lower() == "keyword"
        model = _first_model(meta)
        return {
            "stage": stage, "kind": "keyword" if keyword else "judge",
            "judge": judge if keyword else (model.get("resolved") or judge),
            "judge_reported": None if keyword else (", ".join(model.get("reported_model") or []) or None),
            "temperature": None if keyword else settings.get("temperature"),
            "max_tokens": None if keyword else settings.get("max_tokens"),
            "matcher": settings.get("matcher") or "from each row's model",
            "templates": meta.get("templates") or {},
            "rules_fingerprint": meta.get("rules_fingerprint") or settings.get("rules"),
        }
    if stage == INSPECT_STAGE:
        judge = settings.get("judge")
        return {"stage": stage, "kind": "judge" if judge else "keyword", "judge": judge or "keyword",
                "matcher": settings.get("matcher") or "from the model name", "templates": {},
                "temperature": None, "max_tokens": None, "rules_fingerprint": None}
    if stage == ALIGNMENT_STAGE:
        return {"stage": stage, "kind": "keyword", "judge": "keyword",
                "matcher": settings.get("matcher") or meta.get("matcher"),
                "rules_fingerprint": meta.get("rules_fingerprint") or settings.get("rules"),
                "templates": meta.get("templates") or {}}
    return {"stage": stage, "kind": "other"}


def summarise(path: str) -> dict:
    """The chain of ``path`` and what it says: ``{"chain", "responses", "verdicts", "steps"}``.

    ``steps`` lists ``(stage, file name, changed)`` from the input back to the first record found.
    """
    chain = read_chain(path)
    steps = [(str(link["meta"].get("stage") or "?"), Path(link["file"]).name, link["changed"]) for link in chain]
    missing = None
    if chain:
        last = _find_input(chain[-1]["meta"], chain[-1]["file"])
        recorded = (chain[-1]["meta"].get("input") or {}).get("path") if isinstance(
            chain[-1]["meta"].get("input"), dict) else None
        if recorded and last is None:
            steps.append(("source", str(recorded), False))
            if "://" not in str(recorded):
                missing = str(recorded)
        elif last is not None:
            steps.append(("source", Path(last).name, False))
    return {"chain": chain, "responses": responses_by(chain, missing), "verdicts": verdicts_by(chain),
            "steps": steps}


def source_sets(path: str) -> list[str]:
    """The published sets the chain behind ``path`` says its prompts came from, nearest first: a
    sample's ``set`` (``python -m orbench.benchmark.datasets``), or a bundled set file read as an input."""
    bundled = {str(Path(p).resolve()): n for n in SET_NAMES if (p := resolve_set(n)) and "://" not in p}
    found = []
    for link in read_chain(path):
        meta = link["meta"]
        if meta.get("set") in SET_NAMES:
            found.append(meta["set"])
        recorded = (meta.get("input") or {}).get("path") if isinstance(meta.get("input"), dict) else None
        if recorded and "://" not in str(recorded) and str(Path(str(recorded)).resolve()) in bundled:
            found.append(bundled[str(Path(str(recorded)).resolve())])
    return found


def by_set_and_model(provenance: list[dict]) -> list[dict]:
    """One record per (set, model, input file): who produced the responses and who decided the
    verdicts, from each report input's ``lineage`` (see ``report_inputs.load``)."""
    out = []
    for entry in provenance:
        info = entry.get("lineage") or {}
        for model in entry.get("models") or [""]:
            out.append({"set": entry.get("set"), "model": model, "file": entry.get("name"),
                        "responses": info.get("responses"), "verdicts": info.get("verdicts"),
                        "steps": info.get("steps") or []})
    return out


def responses_of(records: list[dict], set_name: str, model: str) -> dict:
    """Who produced the responses behind (set, model) (``responses_by``), or {} when unrecorded."""
    for r in records:
        if r["set"] == set_name and r["model"] == model and r["responses"]:
            return r["responses"]
    return {}


#: The settings behind the responses a comparison names when they differ between its two models
#: (keys of :func:`responses_by`'s record, and how they are named).
RESPONSE_SETTINGS = (("model_resolved", "model"), ("base_url", "address"), ("temperature", "temperature"),
                     ("max_tokens", "max tokens"), ("system_prompt", "system prompt"), ("templates", "templates"),
                     ("engine", "engine"), ("matcher", "keyword matcher"), ("rules_fingerprint", "keyword rules"),
                     ("source", "made by"))
#: The judge's own settings (keys of :func:`verdicts_by`'s record), for a comparison of judge verdicts.
JUDGE_SETTINGS = (("templates", "judge templates"), ("temperature", "judge temperature"),
                  ("max_tokens", "judge max tokens"))


def _setting(value, key: str = "") -> str:
    """A setting as a comparison shows it (no system prompt: 'none'; another setting the run left
    to its default: 'not set')."""
    if value is None or value == "":
        return "none" if key in ("system_prompt", "templates", "engine") else "not set"
    if isinstance(value, dict):
        shown = {k: v for k, v in value.items() if k != "system_info"}
        return ", ".join(f"{k} {v}" for k, v in sorted(shown.items())) or "none"
    return str(value)


def _judge_record(records: list[dict], set_name: str, model: str, judge: str) -> dict:
    for r in records:
        v = r.get("verdicts") or {}
        if r["set"] == set_name and r["model"] == model and v.get("kind") == "judge" and v.get("judge") == judge:
            return v
    return {}


def setting_differences(records: list[dict], set_name: str, a: str, b: str, judge: str = "") -> dict:
    """What the meta files say differs between the runs behind models ``a`` and ``b`` on a set:
    ``{"set", "a", "b", "differs": [(setting, A's, B's)], "unknown": [why]}``. The responses'
    settings (:data:`RESPONSE_SETTINGS`) are compared when both are known, and with ``judge`` (a
    comparison of that judge's verdicts) the judge's own settings where both files record them."""
    out = {"set": set_name, "a": a, "b": b, "differs": [], "unknown": []}
    found = {}
    for who, model in (("A", a), ("B", b)):
        r = responses_of(records, set_name, model)
        if not r:
            out["unknown"].append(f"{who} ({model}): no meta file of the run that produced its responses")
        elif r.get("unknown"):
            out["unknown"].append(f"{who} ({model}): settings unknown: {r['unknown']}")
        else:
            found[who] = r
    if len(found) == 2:
        out["differs"] += [(label, _setting(found["A"].get(key), key), _setting(found["B"].get(key), key))
                           for key, label in RESPONSE_SETTINGS
                           if _setting(found["A"].get(key), key) != _setting(found["B"].get(key), key)]
    ja, jb = (_judge_record(records, set_name, m, judge) for m in (a, b)) if judge else ({}, {})
    if ja and jb:
        out["differs"] += [(label, _setting(ja.get(key), key), _setting(jb.get(key), key))
                           for key, label in JUDGE_SETTINGS if _setting(ja.get(key), key) != _setting(jb.get(key), key)]
    return out


def differences_text(diff: dict, limit: int = 80) -> str:
    """One line for a comparison's :func:`setting_differences` (long values cut at ``limit``)."""
    cut = lambda v: v if len(v) <= limit else v[: limit - 3] + "..."  # noqa: E731 (a one-line helper used just below)
    parts = [f"{label}: {cut(va)!s} (A) vs {cut(vb)!s} (B)" for label, va, vb in diff["differs"]]
    if not diff["differs"] and not diff["unknown"]:
        parts.append("no setting differs in the meta files")
    return "; ".join(parts + diff["unknown"])


def _number(value) -> float | None:
    """A count from the summary, or None when there is none (absent or NaN)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return float(value)


def truncation_warnings(summary, records: list[dict]) -> list[str]:
    """A warning per (set, model) whose replies were more than 5% cut off, whoever judged them
    (the headline's verdicts, else the keyword matcher's: a judge that decided nothing does not
    make the cut-off replies go away)."""
    warnings = []
    for r in row_dicts(summary):
        method = r.get("headline") or (KEYWORD if _number(r.get("keyword_rows")) else "")
        if not method:
            continue
        cut, replies = _number(r.get(f"{method}_truncated")), _number(r.get(f"{method}_replies"))
        if cut is None or not replies or cut / replies <= TRUNCATION_WARN:
            continue
        responses = responses_of(records, r["set"], r["model"])
        limit = responses.get("max_tokens")
        at = f"max_tokens {limit}" if limit is not None else "the token limit"
        rerun = ("rerun the inspect task with a larger -T max_tokens" if responses.get("source") == "inspect_ai"
                 else "rerun stage 4 with a larger --max_tokens")
        warnings.append(
            f"{int(cut)} of {int(replies)} replies ({100 * cut / replies:.0f}%) of {r['model']} on {r['set']} were "
            f"cut off at {at} (finish_reason length): their verdicts judge only the opening of each reply; "
            f"{rerun}")
    return warnings


def no_verdict_warnings(summary) -> list[str]:
    """A warning per (set, model, method) where more than 5% of the rows have no verdict (an
    unparsed judge reply, an empty response, the judge refusing to judge, or a row failed with an
    error: each named): no rate is given, only its bounds."""
    warnings = []
    for r in row_dicts(summary):
        for method in (KEYWORD, JUDGE):
            rows, errors, unparsed = (_number(r.get(f"{method}_{k}")) for k in ("rows", "errors", "unparsed"))
            refused = _number(r.get(f"{method}_refused_to_judge")) or 0  # no verdict either
            errors, unparsed = errors or 0, (unparsed or 0) + refused
            none = unparsed + errors
            if not rows or not none or none / rows <= NO_VERDICT_WARN:
                continue
            who = f"the judge {r['judge']}" if method == JUDGE and r.get("judge") else f"the {method} verdicts"
            low, high = _number(r.get(f"{method}_rate_bound_low")), _number(r.get(f"{method}_rate_bound_high"))
            bounds = ("" if low is None or high is None else
                      f": no rate is given, only its bounds [{100 * low:.1f}%, {100 * high:.1f}%] (every such row "
                      f"counted as answered, then as refused)")
            warnings.append(
                f"{int(none)} of {int(rows)} rows ({100 * none / rows:.0f}%) of {r['model']} on {r['set']} have no "
                f"verdict from {who} ({int(unparsed - refused)} an unparsed reply or an empty response"
                + (f"; {int(refused)} the judge refusing to judge" if refused else "") + f"; {int(errors)} failed "
                f"with an error){bounds}; {int(rows - none)} rows have one"
                + ("; check the judge's replies in answer_type_response" if method == JUDGE and unparsed else ""))
    return warnings


def chain_warnings(records: list[dict]) -> list[str]:
    """A warning per input whose responses' settings are unknown (a changed or missing ancestor)."""
    warnings, seen = [], set()
    for r in records:
        unknown = (r.get("responses") or {}).get("unknown")
        if unknown and r["file"] not in seen:
            seen.add(r["file"])
            warnings.append(f"settings unknown for the responses in {r['file']} ({r['model']} on {r['set']}): "
                            f"{unknown}; who produced them, and with what, cannot be told")
    return warnings
