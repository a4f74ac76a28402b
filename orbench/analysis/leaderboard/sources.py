"""The leaderboard's inputs: report folders, Every Eval Ever records, and folders of them, as runs.

A PATH given to ``orbench-leaderboard`` is

* a report folder (``report.json`` in it): its runs are its own Every Eval Ever records
  (``every_eval_ever/data/...``, written by the report), each with the meta files report.json
  cites for its model and sets (the input files' and their ancestors' ``.meta.json``: who made
  the responses and the verdicts) and the report's warnings that name its model;
* an Every Eval Ever aggregate record (``.json``), ours or another tool's, with its per-sample
  JSONL beside it when there is one;
* a folder of such things, searched recursively: a report folder inside it is read as one (its
  own records are not read again as records), and any other ``.json`` that is an Every Eval Ever
  record with a rejection rate on an OR-Bench or XSTest set is read; other JSON files (meta files,
  other benchmarks' records) are skipped and counted.

Each problem is one :class:`~orbench.llm.errors.UsageError` naming the path: a path that does not
exist, a file that is neither, a record without what it needs, a folder with nothing to read.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from orbench.analysis.eee import FOLDER
from orbench.analysis.eee.read import NoRates, is_record, load_json, read_record
from orbench.llm.errors import UsageError


def _report_id(folder: Path) -> str:
    return hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:8]


def _meta_files(report: dict, model: str, sets: set[str]) -> list[dict]:
    """The meta files report.json cites for (model, sets): each input's own and its ancestors',
    with the content report.json keeps of each (used when the file itself is gone)."""
    from orbench.analysis.eee.sets import SETS

    labels = {SETS[s].name for s in sets if s in SETS} | set(sets)
    found, seen = [], set()
    for item in report.get("inputs") or []:
        if not isinstance(item, dict) or model not in (item.get("models") or []) or item.get("set") not in labels:
            continue
        for link in ((item.get("lineage") or {}).get("chain") or []):
            name = str(link.get("file") or "")
            if not name or name in seen:
                continue
            seen.add(name)
            found.append({"file": f"{name}.meta.json", "meta": link.get("meta"), "set": item.get("set")})
    return found


def read_report(folder: Path) -> list[dict]:
    """The runs of one report folder."""
    report = load_json(folder / "report.json")
    if not isinstance(report.get("inputs"), list):
        raise UsageError(f"{folder / 'report.json'}: not an orbench report (no 'inputs' list)")
    records = sorted((folder / FOLDER / "data").rglob("*.json")) if (folder / FOLDER / "data").is_dir() else []
    if not records:
        raise UsageError(f"{folder}: a report folder without Every Eval Ever records ({FOLDER}/data/): made by an "
                         f"orbench-report from before they were written (rerun orbench-report), or one with no "
                         f"OR-Bench or XSTest results")
    runs, rid = [], _report_id(folder)
    warnings = [str(w) for w in report.get("warnings") or []]
    for path in records:
        run = read_record(path)
        if not run["ours"]:
            raise UsageError(f"{path}: not a record of this report (another tool's record inside {FOLDER}/)")
        run.update(report=str(folder), report_id=rid,
                   provenance=_meta_files(report, run["model"], set(run["cells"])),
                   warnings=[w for w in warnings if f" of {run['model']} on " in w or f"({run['model']} on " in w])
        runs.append(run)
    return runs


def _walk(folder: Path) -> tuple[list[dict], int]:
    """Runs under ``folder`` (report folders first, each read once) and the count of JSON files skipped."""
    reports = sorted({p.parent for p in folder.rglob("report.json")})
    runs, skipped = [], 0
    for r in reports:
        runs += read_report(r)
    for path in sorted(folder.rglob("*.json")):
        if any(r == path.parent or r in path.parents for r in reports) or path.name.endswith(".meta.json"):
            continue
        value = load_json(path)
        if not is_record(value):
            skipped += 1
            continue
        try:
            runs.append(read_record(path, value))
        except NoRates:  # another benchmark's record among them: not this site's
            skipped += 1
    return runs, skipped


def gather(paths: list[str]) -> tuple[list[dict], list[str]]:
    """Every run the paths hold, in the order given, and notes on what was skipped."""
    runs, notes = [], []
    for given in paths:
        path = Path(given)
        if not path.exists():
            raise UsageError(f"{given}: no such file or folder")
        if path.is_dir() and (path / "report.json").is_file():
            runs += read_report(path)
        elif path.is_dir():
            found, skipped = _walk(path)
            if not found:
                raise UsageError(f"{given}: no report folder (report.json) and no Every Eval Ever record in it")
            runs += found
            if skipped:
                notes.append(f"{given}: {skipped} JSON file(s) skipped: not Every Eval Ever records, or records "
                             f"with no rejection rate on an OR-Bench or XSTest set")
        elif path.name == "report.json":
            runs += read_report(path.parent)
        elif path.suffix.lower() == ".json":
            runs.append(read_record(path))
        elif path.suffix.lower() == ".jsonl":
            raise UsageError(f"{given}: a per-sample file: give its aggregate record (the .json beside it)")
        else:
            raise UsageError(f"{given}: neither a report folder nor an Every Eval Ever record (.json)")
    return runs, notes
