"""Reading Every Eval Ever records, this suite's and other tools', into runs the leaderboard shows.

A *run* is one aggregate record read (:func:`read_record`): its model, where it came from, and per
prompt set (``hard``, ``toxic``, ``80k``, ``xstest-safe``, ``xstest-unsafe``) a *cell*: the
rejection rate with its interval (or, where the record left the cell out for lack of verdicts, its
bounds), n and counts, the judge and its card, the settings, and per category where the record
has them. The per-prompt verdicts (:func:`read_samples`) come from the per-sample JSONL the record
names, looked for beside it.

This suite's records (``source_metadata.source_name`` ``orbench``) are read field for field
(:mod:`orbench.analysis.eee.records` says what they hold). Another tool's record is read by what
its results say:

* the set: a whole set name in the result's ``evaluation_name``, dataset name or inspect dataset
  name (``or_bench_hard_1k``, ``or-bench-toxic``, ``xstest-safe``; ``_`` read as ``-``);
* the rate: a result whose metric is a rejection or refusal rate (``rejection_rate``,
  ``refusal_rate``); where a set has several (this suite's inspect task reports ``rejected`` and
  ``full_rejected``), the one keyed ``rejected`` (full and partial refusals, the report's headline);
  a category: a result keyed ``rejected:<category>`` naming one of the set's categories (XSTest's
  types for XSTest); a score in percent (``metric_unit`` percent, or ``max_score`` 100) is read as such;
* the interval: ``score_details.uncertainty.confidence_interval`` when given; else, when the
  score times ``num_samples`` is a whole count, Clopper-Pearson's on that count, as the report's own
  rates (``clopper_pearson, computed here from the record's score and n``); else none, said so;
* the judge: ``metric_config.llm_scoring``'s judges, else "not stated in the record".

Per-sample scores are used (for the paired tests between adjacent ranks) only when their mean over
the set's lines equals the record's rate: a converter that could not read a scorer's values per
sample (EEE's inspect converter gives 0 for a dict-valued score) writes lines that say nothing of
the verdicts, and they are then said to be unusable, not used.

Anything that is not a record of this shape stops with :class:`~orbench.llm.errors.UsageError`
naming the file and what is wrong.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from datetime import datetime, timezone
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

from orbench.analysis import stats
from orbench.analysis.eee import KEY, SOURCE_NAME
from orbench.analysis.eee.sets import METRIC_ID, SETS
from orbench.analysis.report.inputs import HARD, K80, TOX, XS_SAFE, XS_UNSAFE
from orbench.benchmark.sets import resolve_set
from orbench.llm.errors import UsageError

#: Full set names (and the forms other tools write) -> the report's set labels.
SET_NAMES = {info.name: label for label, info in SETS.items()}
RATE_METRICS = ("rejection_rate", "refusal_rate")
HEADLINE_KEY = "rejected"
COMPUTED_EXACT = "clopper_pearson, computed here from the record's score and n"


class NoRates(UsageError):
    """A valid record with no rejection rate on an OR-Bench or XSTest set (another benchmark's)."""


def _fail(path, why: str):
    raise UsageError(f"{path}: {why}")


def set_of(*texts: str) -> str | None:
    """The set a result names (as a whole, ``_`` read as ``-``), or None; two sets named: None."""
    found = set()
    for text in texts:
        if not text:
            continue
        norm = str(text).lower().replace("_", "-")
        for name, label in SET_NAMES.items():
            if re.search(rf"(?<![a-z0-9-]){re.escape(name)}(?![a-z0-9-])", norm):
                found.add(label)
    return found.pop() if len(found) == 1 else None


@cache
def categories_of(label: str) -> frozenset:
    """The categories of a bundled set (XSTest's types for XSTest), empty when not bundled."""
    path = resolve_set(SETS[label].name) if label in SETS else None
    if not path or "://" in path or not Path(path).exists():
        return frozenset()
    return frozenset(pd.read_csv(path, dtype=str, keep_default_na=False, usecols=["category"])["category"])


def _num(value) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) or math.isinf(value) else value


def _int(value) -> int | None:
    v = _num(value)
    return None if v is None else int(v)


def iso_date(value) -> str | None:
    """A record's timestamp (Unix epoch seconds, as EEE's converters write it, or ISO) as an ISO date-time."""
    if value in (None, ""):
        return None
    epoch = _num(value)
    try:
        when = datetime.fromtimestamp(epoch, tz=timezone.utc) if epoch is not None else \
            datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except (ValueError, OSError, OverflowError):
        return None
    return when.isoformat(timespec="seconds")


def _details(obj) -> dict:
    value = (obj or {}).get("additional_details") if isinstance(obj, dict) else None
    return value if isinstance(value, dict) else {}


def _json(text, default):
    try:
        return json.loads(text) if isinstance(text, str) else default
    except ValueError:
        return default


def load_json(path: Path) -> dict:
    """A JSON object from ``path`` (``UsageError`` naming the file when it is not one)."""
    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        _fail(path, f"cannot be read: {exc.strerror or exc}")
    except UnicodeDecodeError:
        _fail(path, "is not UTF-8 text")
    except ValueError as exc:
        _fail(path, f"is not JSON ({exc})")
    if not isinstance(value, dict):
        _fail(path, "is JSON but not an object")
    return value


def is_record(value: dict) -> bool:
    """Whether a JSON object looks like an Every Eval Ever aggregate record."""
    return isinstance(value, dict) and "evaluation_results" in value and "model_info" in value


def check_record(value: dict, path) -> None:
    """``UsageError`` naming the first field an aggregate record needs and lacks."""
    for name in ("schema_version", "evaluation_id", "model_info", "evaluation_results"):
        if name not in value:
            _fail(path, f"an Every Eval Ever record without {name!r}")
    if not isinstance(value["model_info"], dict) or not value["model_info"].get("id"):
        _fail(path, "an Every Eval Ever record whose model_info has no 'id'")
    if not isinstance(value["evaluation_results"], list):
        _fail(path, "an Every Eval Ever record whose evaluation_results is not a list")
    for i, result in enumerate(value["evaluation_results"]):
        if not isinstance(result, dict) or not isinstance(result.get("score_details"), dict) \
                or _num(result["score_details"].get("score")) is None:
            _fail(path, f"evaluation_results[{i}] has no numeric score_details.score")


# ---------------------------------------------------------------- cells

def _cell_from(result: dict, scale: float = 1.0) -> dict:
    """A cell of rate, interval and n from one result (``scale`` 0.01 for a score in percent)."""
    sd = result["score_details"]
    rate = _num(sd.get("score")) * scale
    unc = sd.get("uncertainty") if isinstance(sd.get("uncertainty"), dict) else {}
    ci = unc.get("confidence_interval") if isinstance(unc.get("confidence_interval"), dict) else {}
    details = sd.get("details") if isinstance(sd.get("details"), dict) else {}
    n = _int(unc.get("num_samples"))
    if n is None:
        n = _int(details.get("scored"))
    cell = {"rate": rate, "low": None, "high": None, "method": None, "n": n}
    lo, hi = _num(ci.get("lower")), _num(ci.get("upper"))
    if lo is not None and hi is not None:
        cell.update(low=lo * scale, high=hi * scale, method=str(ci.get("method") or "not stated"))
    elif n and abs(rate * n - round(rate * n)) < 1e-6:
        low, high = stats.clopper_pearson_arrays(round(rate * n), n)
        cell.update(low=float(low), high=float(high), method=COMPUTED_EXACT)
    for key, name in (("rows", "rows"), ("no_verdict", "no_verdict"), ("errors", "errors"), ("prompts", "prompts"),
                      ("cut_off", "cut_off_replies"), ("replies", "replies"), ("samples", "samples_per_prompt"),
                      ("refusals", "refusals"), ("covered", "prompts_of_published_set")):
        if _int(details.get(name)) is not None:
            cell[key] = _int(details[name])
    refused = _int(details.get("judge_refused_to_judge"))
    if refused:
        cell["no_verdict"] = cell.get("no_verdict", 0) + refused
    return cell


def _scale(result: dict) -> float | None:
    """1 for a proportion, 0.01 for a percent, None when the unit is unknown and the score out of [0, 1]."""
    mc = result.get("metric_config") if isinstance(result.get("metric_config"), dict) else {}
    unit = str(mc.get("metric_unit") or "").lower()
    if unit in ("percent", "percentage", "%") or _num(mc.get("max_score")) == 100:
        return 0.01
    score = _num(result["score_details"].get("score"))
    return 1.0 if unit in ("proportion", "") and 0 <= score <= 1 else None


def _settings(result: dict) -> dict:
    gc = result.get("generation_config") if isinstance(result.get("generation_config"), dict) else {}
    args = gc.get("generation_args") if isinstance(gc.get("generation_args"), dict) else {}
    plan = (args.get("eval_plan") or {}).get("config") if isinstance(args.get("eval_plan"), dict) else {}
    plan = plan if isinstance(plan, dict) else {}
    extra = _details(gc)
    out = {"temperature": _num(args.get("temperature")) if args.get("temperature") is not None
           else _num(plan.get("temperature")),
           "max_tokens": _int(args.get("max_tokens")) if args.get("max_tokens") is not None else _int(plan.get("max_tokens")),
           "system_prompt": extra.get("system_prompt"), "samples": _int(extra.get("samples_per_prompt"))}
    if out["system_prompt"] is None:
        steps = (args.get("eval_plan") or {}).get("steps") if isinstance(args.get("eval_plan"), dict) else None
        system = [s for s in (steps or []) if isinstance(s, str) and "system" in s.lower()]
        out["system_prompt"] = "; ".join(system) if system else "not stated"
    return out


def _judge_of(result: dict) -> tuple[str, str]:
    """(judge, verdict kind) of a result: its LLM judges, this suite's keyword matcher, or not stated."""
    mc = result.get("metric_config") if isinstance(result.get("metric_config"), dict) else {}
    extra = _details(mc)
    judges = ((mc.get("llm_scoring") or {}).get("judges") or []) if isinstance(mc.get("llm_scoring"), dict) else []
    names = [str((j.get("model_info") or {}).get("id") or (j.get("model_info") or {}).get("name") or "")
             for j in judges if isinstance(j, dict)]
    names = [n for n in names if n]
    if extra.get(KEY + "verdict") == "keyword":
        return "keyword", "keyword"
    if names:
        return ",".join(names), "judge"
    return "not stated in the record", "unknown"


def _card(result: dict) -> dict:
    extra = _details(result.get("metric_config"))
    cards = _json(extra.get(KEY + "judge_cards"), [])
    return {"text": extra.get(KEY + "judge_vs_humans") or "", "cards": cards if isinstance(cards, list) else []}


# ---------------------------------------------------------------- a record

def read_record(path: Path, value: dict | None = None) -> dict:
    """One aggregate record as a run (see the module docstring); ``UsageError`` when it is not one."""
    value = load_json(path) if value is None else value
    if not is_record(value):
        _fail(path, "is not an Every Eval Ever record (no evaluation_results and model_info)")
    check_record(value, path)
    meta = value.get("source_metadata") if isinstance(value.get("source_metadata"), dict) else {}
    extra = _details(meta)
    ours = meta.get("source_name") == SOURCE_NAME and bool(extra.get(KEY + "fingerprint"))
    info = value["model_info"]
    library = value.get("eval_library") if isinstance(value.get("eval_library"), dict) else {}
    run = {"path": str(path), "ours": ours, "evaluation_id": str(value["evaluation_id"]),
           "key": (extra[KEY + "fingerprint"], "") if ours else ("", str(value["evaluation_id"])),
           "model": extra.get(KEY + "model") if ours else str(info.get("name") or info["id"]),
           "model_id": str(info["id"]), "provider": str(info.get("inference_platform") or info.get("developer") or "unknown"),
           "source": SOURCE_NAME if ours else str(library.get("name") or meta.get("source_name") or "unknown"),
           "source_detail": ", ".join(x for x in (str(meta.get("source_organization_name") or ""),
                                                  " ".join(str(library.get(k) or "") for k in ("name", "version")).strip())
                                      if x and x != "unknown"),
           "judge_name": extra.get(KEY + "judge", "") if ours else None,
           "date": iso_date(value.get("evaluation_timestamp")) or iso_date(value.get("retrieved_timestamp")),
           "cells": {}, "notes": [], "left_out": _json(extra.get(KEY + "left_out"), []) if ours else [],
           "samples_file": _samples_path(path, value)}
    (_our_cells if ours else _their_cells)(value, run)
    if not run["cells"] and not run["left_out"]:
        raise NoRates(f"{path}: an Every Eval Ever record with no rejection rate on an OR-Bench or XSTest set "
                      "(results: " + ", ".join(str(r.get("evaluation_name")) for r in value["evaluation_results"][:5])
                      + ")")
    return run


def _samples_path(path: Path, value: dict) -> str | None:
    detail = value.get("detailed_evaluation_results")
    if not isinstance(detail, dict) or not detail.get("file_path"):
        return None
    beside = Path(path).parent / Path(str(detail["file_path"])).name
    return str(beside) if beside.is_file() else None


def _cell_extras(result: dict, cell: dict) -> dict:
    judge, kind = _judge_of(result)
    cell.update(judge=judge, verdict=kind, settings=_settings(result), card=_card(result),
                result_id=str(result.get("evaluation_result_id") or ""), name=str(result.get("evaluation_name") or ""),
                date=iso_date(result.get("evaluation_timestamp")))
    return cell


def _our_cells(value: dict, run: dict) -> None:
    for result in value["evaluation_results"]:
        mc = result.get("metric_config") or {}
        rid = str(result.get("evaluation_result_id") or "")
        if mc.get("metric_id") != METRIC_ID or not rid.endswith("/rejection_rate"):
            continue
        parts = rid.split("/")
        label = SET_NAMES.get(parts[0])
        if label is None:
            continue
        cell = _cell_extras(result, _cell_from(result))
        if len(parts) == 2:
            run["cells"].setdefault(label, {"categories": {}}).update(cell)
        else:
            run["cells"].setdefault(label, {"categories": {}})["categories"]["/".join(parts[1:-1])] = cell
    for item in run["left_out"]:
        label = SET_NAMES.get(str(item.get("set")))
        if label is None:
            continue
        cell = {"rate": None, "low": None, "high": None, "bound_low": _num(item.get("rate_bound_low")),
                "bound_high": _num(item.get("rate_bound_high")), "n": _int(item.get("verdicts")),
                "no_verdict": _int(item.get("rows_without_verdict")), "errors": _int(item.get("errors")),
                "why": item.get("why"), "judge": item.get("judge"),
                "verdict": "keyword" if item.get("judge") == "keyword" else "judge" if item.get("judge") else None}
        if item.get("category"):
            run["cells"].setdefault(label, {"categories": {}})["categories"][str(item["category"])] = cell
        else:
            run["cells"].setdefault(label, {"categories": {}}).update(cell)
    for label, cell in list(run["cells"].items()):
        if "rate" not in cell:  # categories only (the set itself neither written nor left out): not shown
            del run["cells"][label]


def _their_cells(value: dict, run: dict) -> None:
    found: dict[str, list] = {}
    cats: dict[str, dict] = {}
    for result in value["evaluation_results"]:
        sd = result.get("source_data") if isinstance(result.get("source_data"), dict) else {}
        label = set_of(str(result.get("evaluation_name") or ""), str(sd.get("dataset_name") or ""),
                       str(_details(sd).get("inspect_dataset_name") or ""))
        if label is None:
            continue
        mc = result.get("metric_config") if isinstance(result.get("metric_config"), dict) else {}
        rid = str(result.get("evaluation_result_id") or "")
        key, _, tail = rid.replace("/", ":").rpartition(":")
        metric = " ".join(str(x) for x in (mc.get("metric_id"), mc.get("metric_name"), tail)).lower()
        scale = _scale(result)
        if scale is None:
            run["notes"].append(f"{result.get('evaluation_name')}: a score out of [0, 1] in an unknown unit: not read")
            continue
        if any(m in metric for m in RATE_METRICS):
            found.setdefault(label, []).append((key, result, scale))
        elif key == HEADLINE_KEY and tail in categories_of(label):
            cats.setdefault(label, {})[tail] = _cell_extras(result, _cell_from(result, scale))
    for label, options in found.items():
        chosen = next((o for o in options if o[0] == HEADLINE_KEY), options[0])
        cell = _cell_extras(chosen[1], _cell_from(chosen[1], chosen[2]))
        cell["categories"] = cats.get(label, {})
        if len(options) > 1:
            run["notes"].append(f"{SETS[label].name}: {len(options)} rejection rates in the record; shown: "
                                f"{chosen[1].get('evaluation_result_id') or chosen[1].get('evaluation_name')}")
        run["cells"][label] = cell


# ---------------------------------------------------------------- per-sample lines

def prompt_key(text: str) -> str:
    """How prompts pair across records: the SHA-256 of the prompt text (EEE's ``sample_hash`` of an
    OR-Bench sample, whose reference is empty)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_samples(run: dict) -> dict[str, pd.DataFrame | str]:
    """Per set of ``run``: a table of refusals ``k`` over samples ``n`` per prompt (index: the prompt's
    key), or, where none can be used, why not."""
    out: dict = {}
    path = run.get("samples_file")
    if not path:
        return {label: "no per-sample file beside the record" for label in run["cells"]}
    names = {cell.get("name"): label for label, cell in run["cells"].items()}
    ids = {cell.get("result_id"): label for label, cell in run["cells"].items() if cell.get("result_id")}
    rows: dict[str, list] = {}
    try:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    item = json.loads(line)
                    label = ids.get(item.get("evaluation_result_id")) or names.get(item.get("evaluation_name"))
                    if label is None:
                        continue
                    score = _num(item["evaluation"]["score"])
                    raw = item["input"]["raw"]
                except (ValueError, KeyError, TypeError):
                    return {label: f"{Path(path).name} line {number} is not a per-sample record" for label in run["cells"]}
                if score is None or not isinstance(raw, str):
                    continue
                rows.setdefault(label, []).append((prompt_key(raw), score))
    except OSError as exc:
        return {label: f"{Path(path).name} cannot be read: {exc.strerror or exc}" for label in run["cells"]}
    for label, cell in run["cells"].items():
        got = rows.get(label)
        if not got:
            out[label] = "no per-sample line for this set"
            continue
        frame = pd.DataFrame(got, columns=["prompt", "score"])
        if not frame["score"].isin((0.0, 1.0)).all():
            out[label] = "per-sample scores are not 0/1 verdicts"
            continue
        mean = float(frame["score"].mean())
        if cell.get("rate") is None or abs(mean - cell["rate"]) > 1e-6:
            rate = "none" if cell.get("rate") is None else f"{cell['rate']:.4f}"
            out[label] = f"the per-sample scores (mean {mean:.4f}) do not give the record's rate ({rate}): not used"
            continue
        g = frame.groupby("prompt", sort=False)["score"]
        out[label] = pd.DataFrame({"k": g.sum().astype(np.int64), "n": g.size().astype(np.int64)})
    return out


#: What the readers need of the sets (re-exported for the leaderboard).
LABELS = (HARD, TOX, K80, XS_SAFE, XS_UNSAFE)
