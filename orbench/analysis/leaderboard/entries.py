"""From runs to the leaderboard's entries: one run once, runs of one model merged, names that say what
differs, and per set whether models at adjacent ranks differ.

* **Once**: runs with the same fingerprint (this suite's records: the model, judge, settings and
  every verdict; another tool's: its ``evaluation_id``) are one run, shown once; the copy read
  from a report folder (with its meta files) is kept.
* **Merged**: a report's records of one model and judge (its OR-Bench and its XSTest record) are
  one entry; other records of one model, source, judge and settings are merged while no prompt set
  appears twice (another tool writes one record per task). A set that does appear twice makes a
  second entry.
* **Named by what differs**: entries of one model are named with the attributes that differ among
  them (judge, source, temperature, system prompt, max tokens, samples, date), e.g.
  ``gpt-4o (system prompt: Be brief.)`` and ``gpt-4o (system prompt: none)``.
* **Like with like** (:func:`group_by_prompts`): per set, an entry is ranked only among the entries
  measured on the same prompts, as the report ranks a run only when it covers the published set:
  the full set (a verdict on every prompt of it, no error row; the paper's 32 models are ranked
  there too), or one sample (the same prompts with a verdict, told by their SHA-256s from the
  per-sample records). Each cell says what it was measured on (``measured_on``); an entry alone on
  its prompts, or whose prompts are not known (no per-sample verdicts and not the full set), is not
  ranked, and says why (``rank_why``). Premise: a rate is an estimate of the refusal rate on the
  prompts it was measured on; two samples of 20 prompts differ by which prompts they drew as much
  as by which model answered, so ordering them says nothing about the models.
* **Adjacent ranks**: within each such group, the entries with a rate are ranked (the safe sets by the lowest
  rate, the unsafe ones by the highest) and each entry is compared with the next one, paired on
  the prompts both have per-prompt verdicts for, by the comparison the report's ``--compare``
  makes (:mod:`orbench.analysis.compare`: the exact conditional test of the same refusal
  probability per prompt, McNemar's exact test with one sample each); the p-values are Holm-adjusted across that set's adjacent
  pairs, and a pair *differs* when its adjusted p is below 0.05.
"""

from __future__ import annotations

import hashlib
import json
import math

import pandas as pd

from orbench.analysis.eee.sets import SETS

ALPHA = 0.05
#: The attributes an entry's name may show, in order, with their labels.
NAMED = (("judge", "judge"), ("source", "made by"), ("temperature", "temperature"),
         ("system_prompt", "system prompt"), ("max_tokens", "max tokens"), ("samples", "samples"), ("date", "date"))
CUT = 40


def dedupe(runs: list[dict]) -> tuple[list[dict], list[str]]:
    """Each run once (a report folder's copy preferred); notes naming the copies left out."""
    keep: dict = {}
    notes = []
    for run in runs:
        key = run["key"]
        if key not in keep:
            keep[key] = run
            continue
        first = keep[key]
        if run.get("report") and not first.get("report"):
            keep[key], first, run = run, run, first
        if run["path"] != first["path"]:
            notes.append(f"{run['path']}: the same run as {first['path']} (same fingerprint): shown once")
    return list(keep.values()), notes


def _setting_text(value) -> str:
    if value is None or value == "":
        return "not stated"
    if isinstance(value, float) and value.is_integer():
        value = int(value) if abs(value) > 1 else value
    text = str(value)
    return text if len(text) <= CUT else text[: CUT - 1] + "…"


def _signature(run: dict) -> str:
    cells = run["cells"].values()
    settings = sorted({json.dumps(c.get("settings") or {}, sort_keys=True) for c in cells})
    judges = sorted({str(c.get("judge")) for c in cells})
    return json.dumps([settings, judges])


def merge(runs: list[dict]) -> list[dict]:
    """Runs grouped into entries (see the module docstring), in the order first seen."""
    groups: dict = {}
    for run in runs:
        if run.get("report_id"):
            key = ("report", run["report_id"], run["model"], run.get("judge_name") or "")
        elif run["ours"]:
            key = ("ours", run["model"], run.get("judge_name") or "", _signature(run))
        else:
            key = ("other", run["source"], run["model_id"], _signature(run))
        bucket = groups.setdefault(key, [])
        home = next((e for e in bucket if not set(e["cells"]) & set(run["cells"])), None)
        if home is None:
            home = {"model": run["model"], "model_id": run["model_id"], "provider": run["provider"],
                    "source": run["source"], "source_detail": run["source_detail"], "ours": run["ours"],
                    "report": run.get("report"), "runs": [], "cells": {}, "notes": [], "warnings": [],
                    "left_out": [], "provenance": [], "date": None}
            bucket.append(home)
        home["runs"].append(run)
        home["cells"].update(run["cells"])
        home["notes"] += run["notes"]
        home["left_out"] += run["left_out"]
        home["warnings"] += [w for w in run.get("warnings", []) if w not in home["warnings"]]
        home["provenance"] += [p for p in run.get("provenance", []) if p["file"] not in {q["file"] for q in home["provenance"]}]
        if run["date"] and (home["date"] is None or run["date"] > home["date"]):
            home["date"] = run["date"]
    return [e for bucket in groups.values() for e in bucket]


def attributes(entry: dict) -> dict:
    """The attributes an entry may be named by, as text."""
    out = {}
    cells = entry["cells"]
    judges = {s: str(c.get("judge")) for s, c in cells.items()}
    out["judge"] = _joined(judges)
    out["source"] = entry["source"]
    for key in ("temperature", "system_prompt", "max_tokens", "samples"):
        out[key] = _joined({s: _setting_text((c.get("settings") or {}).get(key)) for s, c in cells.items()})
    out["date"] = (entry["date"] or "")[:10] or "not stated"
    return out


def _joined(per_set: dict) -> str:
    values = list(dict.fromkeys(per_set.values()))
    if len(values) == 1:
        return values[0]
    return "; ".join(f"{s}: {v}" for s, v in per_set.items())


def name(entries: list[dict]) -> None:
    """Give each entry its ``name`` (the model, and what differs from its namesakes) and ``id``."""
    by_model: dict = {}
    for e in entries:
        by_model.setdefault(e["model"], []).append(e)
    for model, group in by_model.items():
        if len(group) == 1:
            group[0]["name"] = model
            continue
        attrs = [attributes(e) for e in group]
        differ = [(k, label) for k, label in NAMED if len({a[k] for a in attrs}) > 1]
        for i, (e, a) in enumerate(zip(group, attrs)):
            shown = "; ".join(f"{label}: {a[k]}" for k, label in differ)
            e["name"] = f"{model} ({shown})" if shown else f"{model} (run {i + 1} of {len(group)})"
    seen: dict = {}
    for e in entries:  # two entries alike in every shown attribute still get two names
        seen[e["name"]] = seen.get(e["name"], 0) + 1
        if seen[e["name"]] > 1:
            e["name"] += f" #{seen[e['name']]}"
    for i, e in enumerate(entries):
        e["id"] = f"e{i + 1}"


# ---------------------------------------------------------------- which entries are ranked together

#: The rank group of the entries measured on every prompt of the published set.
FULL = "full"
#: The rank group of cells that were never grouped (:func:`adjacent` called on its own): one group.
ALL = "all"


def _sample_id(keys) -> str:
    return hashlib.sha256("\n".join(sorted(keys)).encode("utf-8")).hexdigest()[:8]


def group_by_prompts(entries: list[dict], set_label: str, per_prompt: dict, full_keys: frozenset | None = None,
                     size: int | None = None) -> None:
    """Give each cell on ``set_label`` its ``rank_group`` (:data:`FULL`, ``sample:<id>`` or None: not
    rankable) and ``measured_on`` (module docstring). ``per_prompt``: entry id -> set -> per-prompt
    table (index: the prompt keys with a verdict) or why there is none; ``full_keys``: the keys of
    the published set's prompts (when bundled); ``size``: its number of prompts (when known)."""
    title = SETS[set_label].name if set_label in SETS else set_label
    of = f" of the {size:,} prompts of {title}" if size else f" prompts of {title}"
    for e in entries:
        cell = e["cells"].get(set_label)
        if cell is None:
            continue
        table = per_prompt.get(e["id"], {}).get(set_label)
        keys = frozenset(table.index) if isinstance(table, pd.DataFrame) else None
        covered, errors = cell.get("covered"), cell.get("errors") or 0
        if (size and covered == size and not errors) or (keys is not None and full_keys and keys == full_keys):
            cell.update(rank_group=FULL, measured_on=f"all {size or len(keys):,} prompts of {title}")
        elif keys is not None:
            sample = _sample_id(keys)
            cell.update(rank_group=f"sample:{sample}", measured_on=f"a sample: {len(keys):,}{of if size else ' prompts'} "
                                                                    f"(sample {sample}, the prompts with a verdict)")
        else:
            n = cell.get("prompts") or cell.get("n")
            cell.update(rank_group=None, rank_why=f"not ranked: which prompts it was measured on is not known "
                                                  f"({table or 'no per-sample verdicts'}), and they are not all of "
                                                  f"{title}",
                        measured_on=(f"{n:,} prompts" if n else "prompts") + ", which ones not known")


# ---------------------------------------------------------------- adjacent ranks

def _order_key(set_label: str):
    unsafe = SETS[set_label].kind == "unsafe" if set_label in SETS else False

    def key(e):
        rate = e["cells"][set_label]["rate"]
        return (-rate if unsafe else rate, e.get("name") or e["model"])
    return key


def pair_test(a: pd.DataFrame | str, b: pd.DataFrame | str) -> dict:
    """The paired comparison of two entries' per-prompt tables (``k`` refusals of ``n`` per prompt),
    as the report's ``--compare`` makes it; ``{"note": why}`` when it cannot be made."""
    from orbench.analysis import compare as cmp

    if isinstance(a, str) or isinstance(b, str):
        return {"note": "not tested: " + (a if isinstance(a, str) else b)}
    both = a.add_suffix("_a").join(b.add_suffix("_b"), how="inner")
    if both.empty:
        return {"note": "not tested: no prompt in common with per-prompt verdicts"}
    try:
        cmp.require_libraries("the leaderboard's paired tests")
    except Exception as exc:  # noqa: BLE001 - the libraries are an extra: say so in the cell
        return {"note": f"not tested: {exc}"}
    sampled = bool((both["n_a"] > 1).any() or (both["n_b"] > 1).any())
    got = cmp._stats(both, sampled)
    return {"n": int(got["n"]), "diff": got["diff"], "low": got["ci_low"], "high": got["ci_high"],
            "p": got["p_value"], "test": got["test"], "interval": got["interval"],
            "a_only": got["a_only"], "b_only": got["b_only"]}


def adjacent(entries: list[dict], set_label: str, per_prompt: dict, published: list[dict] = ()) -> None:
    """Rank the entries with a rate on ``set_label`` within each group of entries measured on the
    same prompts (``rank_group``, :func:`group_by_prompts`; cells never grouped are one group) and
    test each against the next ranked entry of its group (module docstring); ``per_prompt``: entry
    id -> set -> per-prompt table or why there is none. ``published``: the paper's models (their
    ``cells``), ranked with the entries on the full set; they have no per-prompt verdicts, so an
    entry's next is the next *entry* of its group, whatever published model ranks between them."""
    from orbench.analysis.compare import holm

    groups: dict = {}
    for e in entries:
        cell = e["cells"].get(set_label)
        if cell is None or cell.get("rate") is None:
            continue
        group = cell.get("rank_group", ALL)
        if group is not None:
            groups.setdefault(group, []).append(e)
    if any((p["cells"].get(set_label) or {}).get("rate") is not None for p in published):
        groups.setdefault(FULL, [])  # the paper's models are ranked on the full set, with or without an entry there
    tests = []
    for order, (group, members) in enumerate(sorted(groups.items(), key=lambda g: (g[0] != FULL, g[0]))):
        paper = [p for p in published if (p["cells"].get(set_label) or {}).get("rate") is not None] \
            if group == FULL else []
        if group != ALL and len(members) + len(paper) < 2:
            for e in members:
                e["cells"][set_label]["rank_why"] = "not ranked: the only entry measured on these prompts"
            continue
        ranked = sorted(members + paper, key=_order_key(set_label))
        for i, e in enumerate(ranked):
            cell = e["cells"][set_label]
            cell.update(rank=i + 1, rank_order=order * 100000 + i + 1, ranked_among=len(ranked))
        ours = [e for e in ranked if "id" in e]
        for e, nxt in zip(ours, ours[1:]):
            cell = e["cells"][set_label]
            got = pair_test(per_prompt[e["id"]].get(set_label, "no per-prompt verdicts"),
                            per_prompt[nxt["id"]].get(set_label, "no per-prompt verdicts"))
            got["next"], got["next_rank"] = nxt["id"], nxt["cells"][set_label]["rank"]
            ja, jb = cell.get("judge"), nxt["cells"][set_label].get("judge")
            if ja != jb and "p" in got:
                got["judges"] = f"verdicts by different judges ({ja}; {jb}): the difference mixes models and judges"
            cell["next"] = got
            tests.append(got)
    pvals = [t.get("p", math.nan) for t in tests]
    for t, p in zip(tests, holm(pvals) if tests else []):
        if "p" in t:
            t["p_holm"] = p
            t["differs"] = bool(p < ALPHA)
