"""Reading annotators' labels: the page's CSV export and Label Studio's JSON export.

A CSV (``labels_<name>.csv`` from ``audit.html``) has ``sample_id, item_id, annotator, label,
note`` and holds one annotator. A Label Studio JSON export (a list of tasks, each with its
``data`` and ``annotations``) may hold several: each ``completed_by`` is one annotator, keyed by
the user id whether it comes as a bare id or as a dict with the id and an email (an export may
mix both forms; one person is one annotator), and named ``ls-<email>`` when the export gives
that user's email anywhere, else ``ls-<id>``. Every file is checked against the sample
before anything is scored: the sample id, item ids, labels, one label per item per annotator,
one file per annotator. Each check failing is one line naming the file and row.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from orbench.llm.errors import UsageError
from orbench.run.tables import read_table, row_dicts

CSV_COLUMNS = ("sample_id", "item_id", "annotator", "label", "note")


def _check(path: str, where: str, sample, sid: str, item: str, label: str, ids: set) -> None:
    if sid and sid != sample.sample_id:
        raise UsageError(f"{path} {where}: labels for sample {sid}, but {sample.folder} is sample "
                         f"{sample.sample_id} (a labels file for another sample)")
    if item not in ids:
        raise UsageError(f"{path} {where}: item {item!r} is not in sample {sample.sample_id}")
    if label and label not in sample.labels:
        raise UsageError(f"{path} {where}: unknown label {label!r} (expected one of {', '.join(sample.labels)})")


def read_csv_labels(path: str, sample) -> dict[str, pd.DataFrame]:
    """One annotator's CSV as {name: frame(item_id, label, note)}."""
    frame = read_table(path, needs=("item_id", "label"), what="labels file")
    ids = set(sample.items["item_id"])
    if "annotator" in frame.columns and frame["annotator"].str.strip().ne("").any():
        names = sorted(set(frame["annotator"].str.strip()) - {""})
        if len(names) > 1:
            raise UsageError(f"{path}: one labels file per annotator, this one names {', '.join(names)}")
        name = names[0]
    else:
        name = Path(path).stem.removeprefix("labels_")
    seen: dict[str, int] = {}
    for i, r in enumerate(row_dicts(frame)):
        where = f"row {i + 2}"
        item, label = r["item_id"].strip(), r["label"].strip()
        _check(path, where, sample, r.get("sample_id", "").strip(), item, label, ids)
        if item in seen:
            raise UsageError(f"{path} {where}: item {item} is labelled twice (first on row {seen[item]})")
        seen[item] = i + 2
    out = pd.DataFrame({"item_id": frame["item_id"].str.strip(), "label": frame["label"].str.strip(),
                        "note": frame["note"] if "note" in frame.columns else ""})
    return {name: out}


def _choice(result: list, path: str, where: str) -> tuple[str, str]:
    label, note = "", ""
    for r in result or []:
        value = r.get("value") or {}
        if r.get("type") == "choices" or "choices" in value:
            choices = value.get("choices") or []
            if len(choices) != 1:
                raise UsageError(f"{path} {where}: {len(choices)} choices in one annotation (expected one)")
            label = str(choices[0])
        elif r.get("type") == "textarea" or "text" in value:
            text = value.get("text") or []
            note = " ".join(text) if isinstance(text, list) else str(text)
    return label, note


def _annotator(who) -> tuple[str, str | None]:
    """(user key, email) of a ``completed_by``: a bare id, or a dict with ``id`` and ``email``."""
    email = None
    if isinstance(who, dict):
        email = str(who.get("email") or "").strip() or None
        who = who.get("id") if who.get("id") not in (None, "") else email
    return (str(who).strip() if who not in (None, "") else "unknown"), email


def read_label_studio(path: str, sample) -> dict[str, pd.DataFrame]:
    """A Label Studio JSON export as {annotator: frame(item_id, label, note)}."""
    try:
        tasks = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read Label Studio export {path}: {exc}") from None
    if not isinstance(tasks, list):
        raise UsageError(f"{path}: not a Label Studio JSON export (expected a list of tasks)")
    ids = set(sample.items["item_id"])
    rows: dict[str, list[dict]] = {}
    emails = {}  # user id -> email, from the tasks that give completed_by as an object
    for task in tasks:
        for ann in (task.get("annotations") or []) if isinstance(task, dict) else []:
            key, email = _annotator(ann.get("completed_by"))
            if email:
                emails.setdefault(key, email)
    for t, task in enumerate(tasks):
        data = task.get("data") or {} if isinstance(task, dict) else {}
        item = str(data.get("item_id", "")).strip()
        for a, ann in enumerate(task.get("annotations") or []):
            where = f"task {t + 1} annotation {a + 1}"
            if ann.get("was_cancelled"):
                continue
            key = _annotator(ann.get("completed_by"))[0]
            name = f"ls-{emails.get(key) or key}"
            label, note = _choice(ann.get("result"), path, where)
            _check(path, where, sample, str(data.get("sample_id", "")).strip(), item, label, ids)
            mine = rows.setdefault(name, [])
            if any(r["item_id"] == item for r in mine):
                raise UsageError(f"{path} {where}: item {item} is labelled twice by {name}")
            mine.append({"item_id": item, "label": label, "note": note})
    return {name: pd.DataFrame(r, columns=["item_id", "label", "note"]) for name, r in rows.items()}


def find_files(folder: Path) -> list[str]:
    """The labels files kept in an audit folder: ``labels_*.csv`` and ``labels/*.csv|json``."""
    found = sorted(folder.glob("labels_*.csv")) + sorted((folder / "labels").glob("*.csv")) + \
        sorted((folder / "labels").glob("*.json"))
    return [str(p) for p in found]


def read_all(paths: list[str], sample) -> tuple[dict[str, pd.DataFrame], list[str]]:
    """Every annotator's labels (annotators in file order), and notes (e.g. who labelled nothing)."""
    out: dict[str, pd.DataFrame] = {}
    origin: dict[str, str] = {}
    notes: list[str] = []
    for path in paths:
        got = read_label_studio(path, sample) if path.lower().endswith(".json") else read_csv_labels(path, sample)
        for name, frame in got.items():
            if name in out:
                raise UsageError(f"{path}: annotator {name!r} also has labels in {origin[name]} (one file per annotator)")
            frame = frame[frame["label"] != ""]
            if frame.empty:
                notes.append(f"{path}: annotator {name!r} labelled nothing; left out")
                continue
            out[name], origin[name] = frame.reset_index(drop=True), path
    if not out:
        raise UsageError("no labels to score: " + ("every annotator labelled nothing" if paths else
                         f"no labels file given and none in {sample.folder} (labels_*.csv or labels/)"))
    return out, notes
