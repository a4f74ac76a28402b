"""Where a report input's numbers come from: the chain of provenance files behind it.

Every stage writes ``<output>.meta.json`` naming its input (``input.path`` and its SHA-256). A
report input is usually the end of a chain, e.g. a stage-5 keyword re-score of a stage-4 output
of a sample of Hard-1K. ``read_chain`` follows the ``input`` links back from the input's own meta
file through its ancestors' (stage 5, 4, 3, ...) for as long as each one is found; ``summarise``
then says who produced the responses (the stage-4 run: the model as typed, resolved and reported
by the provider, temperature, max tokens, system prompt, rules' fingerprint, engine) and who
decided the verdicts (the last stage: the judge and its template's hash, or the keyword matcher
and its rules' fingerprint), so the report can show both for every model and set.

An ancestor is looked for at the path its child's meta file names; a relative path is tried from
the current folder and from the child's folder, then the file name alone beside the child (a
folder moved as a whole). When the file found no longer has the recorded SHA-256 the link is kept
and marked ``changed``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from orbench.provenance import sha256_file

#: How many links are followed at most (the pipeline has five stages; a cycle stops earlier).
MAX_DEPTH = 8
#: Stage ids as the runner writes them (``Stage.config["stage"]``).
ALIGNMENT_STAGE = "check_alignment"
RESPONSE_STAGE = "check_response"
#: ``finish_reason`` values meaning "cut off at the token limit": OpenAI-compatible ``length``,
#: Anthropic ``max_tokens``, Gemini ``MAX_TOKENS``, OpenAI Responses ``max_output_tokens``.
TRUNCATED_FINISH_REASONS = frozenset({"length", "max_tokens", "max_output_tokens"})
#: Above this share of cut-off replies the report warns.
TRUNCATION_WARN = 0.05


def read_meta(path: str) -> dict | None:
    """The provenance file ``<path>.meta.json`` as a dict, or None when absent or unreadable."""
    if "://" in str(path):
        return None
    try:
        value = json.loads(Path(f"{path}.meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


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
    while current and len(chain) < MAX_DEPTH:
        key = str(Path(current).resolve())
        if key in seen:
            break
        seen.add(key)
        meta = read_meta(current)
        if meta is None:
            break
        chain.append({"file": current, "meta": meta, "changed": changed})
        parent = _find_input(meta, current)
        if parent is None:
            break
        recorded = (meta.get("input") or {}).get("sha256")
        changed = bool(recorded) and sha256_file(parent) != recorded
        current = parent
    return chain


def _settings(meta: dict) -> dict:
    value = meta.get("settings")
    return value if isinstance(value, dict) else {}


def _first_model(meta: dict) -> dict:
    for m in meta.get("models") or []:
        if isinstance(m, dict):
            return m
    return {}


def responses_by(chain: list[dict]) -> dict | None:
    """Who produced the responses: the nearest stage-4 (check alignment) record of the chain."""
    for link in chain:
        meta = link["meta"]
        if meta.get("stage") != ALIGNMENT_STAGE:
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
        }
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
    if chain:
        last = _find_input(chain[-1]["meta"], chain[-1]["file"])
        recorded = (chain[-1]["meta"].get("input") or {}).get("path") if isinstance(
            chain[-1]["meta"].get("input"), dict) else None
        if recorded and last is None:
            steps.append(("source", str(recorded), False))
        elif last is not None:
            steps.append(("source", Path(last).name, False))
    return {"chain": chain, "responses": responses_by(chain), "verdicts": verdicts_by(chain), "steps": steps}


def is_truncated(finish_reason: object) -> bool:
    """True when a ``finish_reason`` cell says the reply hit the token limit."""
    return str(finish_reason).strip().lower() in TRUNCATED_FINISH_REASONS


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


def max_tokens_of(records: list[dict], set_name: str, model: str) -> object:
    """The stage-4 ``max_tokens`` behind (set, model), or None when no record names it."""
    for r in records:
        if r["set"] == set_name and r["model"] == model and r["responses"]:
            return r["responses"].get("max_tokens")
    return None


def truncation_warnings(summary, records: list[dict]) -> list[str]:
    """A warning per (set, model) whose headline verdicts rest on more than 5% cut-off replies."""
    warnings = []
    for r in summary.to_dict("records"):
        method = r.get("headline")
        if not method:
            continue
        cut, scored = r.get(f"{method}_truncated"), r.get(f"{method}_scored")
        if cut is None or scored is None or math.isnan(cut) or not scored or cut / scored <= TRUNCATION_WARN:
            continue
        limit = max_tokens_of(records, r["set"], r["model"])
        at = f"max_tokens {limit}" if limit is not None else "the token limit"
        warnings.append(
            f"{int(cut)} of {int(scored)} replies ({100 * cut / scored:.0f}%) of {r['model']} on {r['set']} were "
            f"cut off at {at} (finish_reason length): their verdicts judge only the opening of each reply; "
            f"rerun stage 4 with a larger --max_tokens")
    return warnings
