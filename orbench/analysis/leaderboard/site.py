"""The leaderboard's static site: one folder that opens from disk and from any static host.

``index.html`` with ``leaderboard.css`` and ``leaderboard.js`` beside it (plain JavaScript and SVG,
nothing fetched from anywhere), the data as ``data.js`` (what the page loads: a ``<script>``
works from ``file://``, where a fetch of JSON does not) and as ``data.json`` (the same, for
machines), the records each entry was read from under ``records/``, and the meta files of each
entry's runs under ``provenance/``, linked relatively from the page.
"""

from __future__ import annotations

import json
import math
import shutil
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path

import numpy as np

from orbench.analysis import stats
from orbench.analysis.eee.read import categories_of
from orbench.analysis.eee.sets import SETS
from orbench.analysis.report.inputs import HARD, K80, TOX, XS_SAFE, XS_UNSAFE
from orbench.benchmark.sets import CITATION, published_results_path, resolve_set
from orbench.run.tables import write_text_atomic

ASSETS = ("index.html", "leaderboard.css", "leaderboard.js")
TITLES = {HARD: "OR-Bench Hard-1K", TOX: "OR-Bench Toxic", K80: "OR-Bench 80K", XS_SAFE: "XSTest safe prompts",
          XS_UNSAFE: "XSTest unsafe prompts"}
ORDER = (HARD, TOX, K80, XS_SAFE, XS_UNSAFE)
#: The plot's axes: (safe set, unsafe set, benchmark).
PAIRS = ((HARD, TOX, "OR-Bench"), (XS_SAFE, XS_UNSAFE, "XSTest"))
PUBLISHED_JUDGE = "the paper's LLM judge"


def clean(value):
    """``value`` with NaN/inf as None and numpy scalars as Python ones (JSON-ready)."""
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return None if math.isnan(value) or math.isinf(value) else float(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def set_prompt_keys(label: str) -> frozenset | None:
    """The prompt keys (``orbench.analysis.eee.read.prompt_key``) of a published set's prompts, when
    the set is bundled (Hard-1K, Toxic, XSTest's halves); else None."""
    import pandas as pd

    from orbench.analysis.eee.read import prompt_key

    path = resolve_set(SETS[label].name) if label in SETS else None
    if not path or "://" in str(path) or not Path(path).exists():
        return None
    return frozenset(prompt_key(p) for p in pd.read_csv(path, usecols=["prompt"], dtype=str,
                                                         keep_default_na=False)["prompt"])


def published() -> tuple[list[dict], list[float] | None]:
    """The paper's 32 models (hard and toxic, Clopper-Pearson intervals on the rounded rate and the set's
    size, as the report gives them) and the quadratic fit over them (x and y in %)."""
    import pandas as pd

    frame = pd.read_csv(published_results_path())
    sizes = {}
    for label in (HARD, TOX):
        path = resolve_set(SETS[label].name)
        sizes[label] = len(pd.read_csv(path, usecols=["prompt"])) if path and Path(path).exists() else None
    out = []
    for row in frame.itertuples(index=False):
        cells = {}
        for label, pct in ((HARD, row.hard_1k_rejection_pct), (TOX, row.toxic_rejection_pct)):
            n = sizes[label]
            rate = float(pct) / 100
            low, high = (float(v) for v in stats.clopper_pearson_arrays(round(rate * n), n)) if n else (None, None)
            cells[label] = {"rate": rate, "low": low, "high": high, "n": n, "judge": PUBLISHED_JUDGE,
                            "method": "clopper_pearson on the published (rounded) rate and n"}
        out.append({"model": str(row.model), "cells": cells})
    fit = stats.quadratic_fit(list(frame.hard_1k_rejection_pct), list(frame.toxic_rejection_pct))
    return out, None if fit is None else [float(c) for c in fit]


def _copy_unique(src_text: bytes, folder: Path, name: str, taken: set) -> str:
    base, n = name, 2
    while name in taken:
        stem, dot, ext = base.partition(".")
        name = f"{stem}-{n}{dot}{ext}"
        n += 1
    taken.add(name)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(src_text)
    return name


def copy_files(entry: dict, out: Path) -> tuple[list[dict], list[dict]]:
    """The entry's records and meta files copied into the site; their names and relative links."""
    records, provenance, taken = [], [], set()
    for run in entry["runs"]:
        src = Path(run["path"])
        name = _copy_unique(src.read_bytes(), out / "records" / entry["id"], src.name, taken)
        records.append({"name": src.name, "href": f"records/{entry['id']}/{name}",
                        "samples": Path(run["samples_file"]).name if run.get("samples_file") else None})
    taken = set()
    for item in entry["provenance"]:
        src = Path(item["file"])
        if src.is_file():
            data, how = src.read_bytes(), "copied"
        elif isinstance(item.get("meta"), dict):
            data, how = (json.dumps(item["meta"], indent=2, ensure_ascii=False) + "\n").encode("utf-8"), \
                "as report.json keeps it (the file is no longer there)"
        else:
            continue
        name = _copy_unique(data, out / "provenance" / entry["id"], src.name, taken)
        provenance.append({"name": src.name, "href": f"provenance/{entry['id']}/{name}", "how": how,
                           "set": item.get("set")})
    return records, provenance


def _card(cell: dict) -> dict | None:
    """The first judge card of a cell, with the figures the page shows."""
    cards = ((cell.get("card") or {}).get("cards")) or []
    return cards[0] if cards else None


def entry_json(entry: dict, records: list, provenance: list) -> dict:
    cells = {}
    for label, cell in entry["cells"].items():
        out = {k: cell.get(k) for k in ("rate", "low", "high", "method", "bound_low", "bound_high", "n", "rows",
                                         "no_verdict", "errors", "prompts", "cut_off", "replies", "samples",
                                         "judge", "verdict", "rank", "next", "why", "covered", "measured_on",
                                         "rank_group", "rank_why", "rank_order", "ranked_among")}
        out["settings"] = cell.get("settings") or {}
        out["card"] = _card(cell)
        out["card_text"] = (cell.get("card") or {}).get("text") or ""
        out["categories"] = {c: {k: v.get(k) for k in ("rate", "low", "high", "method", "bound_low", "bound_high", "n",
                                                       "no_verdict", "why")}
                             for c, v in sorted((cell.get("categories") or {}).items())}
        cells[label] = out
    return {"id": entry["id"], "name": entry["name"], "model": entry["model"], "model_id": entry["model_id"],
            "provider": entry["provider"], "source": entry["source"], "source_detail": entry["source_detail"],
            "ours": entry["ours"], "date": entry["date"], "report": entry.get("report"),
            "records": records, "provenance": provenance, "warnings": entry["warnings"],
            "notes": entry["notes"], "left_out": entry["left_out"], "cells": cells}


def data(entries: list[dict], files: dict, notes: list[str], with_published: bool,
         pub: tuple[list[dict], list[float] | None] | None = None) -> dict:
    """The site's data (``data.json``); ``pub``: :func:`published`'s, as ranked (else read here)."""
    present = [s for s in ORDER if any(s in e["cells"] for e in entries) or (with_published and s in (HARD, TOX))]
    sets = [{"key": s, "name": TITLES[s], "full_name": SETS[s].name, "kind": SETS[s].kind,
             "categories": sorted(categories_of(s) | {c for e in entries for c in
                                                      ((e["cells"].get(s) or {}).get("categories") or {})})}
            for s in present]
    pub, fit = (pub if pub is not None else published()) if with_published else ([], None)
    from orbench.run.provenance import package_versions

    return clean({
        "title": "OR-Bench leaderboard", "built": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "version": package_versions().get("orbench"), "sets": sets,
        "pairs": [{"x": a, "y": b, "name": n} for a, b, n in PAIRS if a in present and b in present],
        "entries": [entry_json(e, *files[e["id"]]) for e in entries],
        "published": pub, "published_fit": fit, "published_citation": CITATION if with_published else None,
        "alpha": 0.05, "notes": notes})


def write(out: Path, payload: dict) -> Path:
    """The page, its assets and its data into ``out``; the path of index.html."""
    out.mkdir(parents=True, exist_ok=True)
    assets = resources.files("orbench.analysis.leaderboard") / "assets"
    for name in ASSETS:
        write_text_atomic(assets.joinpath(name).read_text(encoding="utf-8"), out / name)
    text = json.dumps(payload, ensure_ascii=False, allow_nan=False, sort_keys=False)
    write_text_atomic(text + "\n", out / "data.json")
    write_text_atomic("window.ORBENCH_LEADERBOARD = " + text + ";\n", out / "data.js")
    return out / "index.html"


def clear(out: Path) -> None:
    """Remove what an earlier build left in ``out`` (its records and meta files), so none is stale."""
    for sub in ("records", "provenance"):
        if (out / sub).is_dir():
            shutil.rmtree(out / sub)
