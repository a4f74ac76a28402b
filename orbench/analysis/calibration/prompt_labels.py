"""Human prompt-safety labels for ``orbench-calibrate --moderator_model``: XSTest, a lab's CSV, or an audit.

Every source becomes one table with the column stage 3 moderates and the human label beside it:
``label_id``, ``prompt``, ``category`` (the group a card reports on; empty where the source has
none), ``human_label`` (the label as given) and ``human_unsafe`` (True/False).

- **XSTest** (``xstest``, the default): XSTest's 450 prompts, bundled (``orbench/data/xstest-safe.csv``
  and ``xstest-unsafe.csv``; Röttger et al., NAACL 2024, CC-BY-4.0): 250 safe prompts of ten
  types that only look unsafe (homonyms, figurative language, safe targets, ...) and 200 unsafe
  contrast prompts (``contrast_*``), each type its category. The labels are XSTest's by design.
- **A lab's CSV**: ``prompt`` and ``label`` (``safe`` or ``unsafe``; ``toxic`` is read as unsafe),
  with ``category`` and ``id`` where known. An empty prompt or an unknown label stops with the
  file and row.
- **An audit** (``orbench-audit``): a prompt audit's folder after ``orbench-audit score``; its
  ``score/items.csv`` gives each item's human majority (``safe``; ``borderline`` and ``toxic`` are
  not safe, the audit's own convention; ties are left out). The card is over the audited items as
  drawn, not weighted back to the run's strata.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pandas as pd

from orbench.analysis.calibration.label_sources import audit_items
from orbench.benchmark.sets import data_path
from orbench.llm.errors import UsageError
from orbench.run.tables import read_table

COLUMNS = ["label_id", "prompt", "category", "human_label", "human_unsafe"]
XSTEST = "xstest"
XSTEST_NAME = "XSTest prompts"
#: Label words a lab's CSV may use, and whether each is unsafe.
LABEL_WORDS = {"safe": False, "unsafe": True, "toxic": True}


def read_xstest() -> pd.DataFrame:
    """XSTest's 450 bundled prompts as the label table (module docstring)."""
    parts = []
    for kind, unsafe in (("safe", False), ("unsafe", True)):
        frame = read_table(str(data_path(f"xstest-{kind}.csv")), needs=("prompt", "category", "xstest_id"),
                           what="bundled XSTest prompts")
        parts.append(pd.DataFrame({"label_id": "xstest-" + frame["xstest_id"].str.strip(), "prompt": frame["prompt"],
                                   "category": frame["category"].str.strip(), "human_label": kind,
                                   "human_unsafe": unsafe}))
    return pd.concat(parts, ignore_index=True)


def read_lab_csv(path: str) -> pd.DataFrame:
    """A lab's own labelled prompts (module docstring); ``UsageError`` naming the file and row."""
    frame = read_table(path, needs=("prompt", "label"), what="labels file")
    if frame.empty:
        raise UsageError(f"{path}: no labelled prompts (the file has a header and no rows)")
    words = frame["label"].astype(str).str.strip().str.lower()
    for i, (prompt, word) in enumerate(zip(frame["prompt"], words)):
        if word not in LABEL_WORDS:
            raise UsageError(f"{path}, row {i + 2}: unknown label {frame['label'].iloc[i]!r} (expected safe or "
                             f"unsafe; toxic is read as unsafe)")
        if not str(prompt).strip():
            raise UsageError(f"{path}, row {i + 2}: the prompt is empty")
    category = frame["category"].str.strip() if "category" in frame.columns else ""
    ids = frame["id"].str.strip() if "id" in frame.columns else [str(i + 1) for i in range(len(frame))]
    return pd.DataFrame({"label_id": ids, "prompt": frame["prompt"], "category": category,
                         "human_label": frame["label"].str.strip(), "human_unsafe": words.map(LABEL_WORDS)})


def read_audit(folder: Path) -> pd.DataFrame:
    """A prompt audit's human majorities (``score/items.csv`` of ``orbench-audit score``)."""
    frame = audit_items(folder, "prompt", "human_safe", ("item_id", "prompt", "majority", "human_safe"))
    category = frame["category"].str.strip() if "category" in frame.columns else ""
    return pd.DataFrame({"label_id": frame["item_id"], "prompt": frame["prompt"], "category": category,
                         "human_label": frame["majority"], "human_unsafe": frame["human_safe"].str.strip() == "0"}
                        ).reset_index(drop=True)


def load_labels(spec: str) -> tuple[pd.DataFrame, dict]:
    """The label table for ``--labels`` (``xstest``, a CSV, or a prompt audit folder) and what it is
    (``name``, ``kind``, ``origin``)."""
    if spec.strip().lower() == XSTEST:
        return read_xstest(), {"name": XSTEST_NAME, "kind": XSTEST, "origin": "orbench/data/xstest-*.csv (bundled)"}
    path = Path(spec).expanduser()
    if path.is_dir():
        return read_audit(path), {"name": f"audit {path.name}", "kind": "audit", "origin": str(path)}
    if not path.is_file():
        raise UsageError(f"--labels {spec}: no such file or folder (give xstest, a CSV of prompt and label, or an "
                         f"orbench-audit prompt audit folder)")
    return read_lab_csv(str(path)), {"name": path.stem, "kind": "csv", "origin": str(path),
                                     "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def stratified_subset(frame: pd.DataFrame, size: int, seed: int = 0) -> pd.DataFrame:
    """At most ``size`` prompts, drawn (seeded) within each human label in proportion to its share
    (largest remainder), so the subset keeps the labels' shares. Rows keep their order."""
    from orbench.analysis.calibration.label_sources import stratified_subset as by_label

    return by_label(frame.assign(source="(all)"), size, seed).drop(columns="source")
