"""What the per-sample lines of the Every Eval Ever records are made from: the report's verdict rows
(kept by :func:`collect` while the report is computed) and the prompts and responses, read again
from the input files. :mod:`~orbench.analysis.eee.lines` makes the lines;
:mod:`~orbench.analysis.eee.records` says what each holds."""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

from orbench.analysis.eee import lines
from orbench.analysis.eee.sets import SETS
from orbench.analysis.report.columns import names, per_value, prompt_hash, read_results
from orbench.analysis.report.inputs import ERROR, SCORED, Inputs, release_memory
from orbench.benchmark.sets import resolve_set
from orbench.scoring.vocab import JUDGE

#: The columns the lines need of an input file.
TEXT_COLUMNS = frozenset({"prompt", "response", "model", "sample"})
#: The columns of the verdict table the records and lines read of a group's rows.
GROUP_COLUMNS = ("status", "file", "prompt", "sample", "rejected", "partial", "truncated", "category")


@dataclass(frozen=True)
class VerdictRows:
    """What the records need of the report's verdict table (:func:`collect`): the table itself, the
    names behind its codes, the input files, the leaderboard entries and their verdict groups."""

    data: pd.DataFrame
    names: dict
    files: tuple
    provenance: tuple
    entries: dict
    groups: dict  # (set, model, method, judge) names -> group id in data["group"]


def collect(inp: Inputs, entries: dict) -> VerdictRows:
    """The verdict rows behind the leaderboard ``entries`` (``report.build.entries``), kept for
    :func:`orbench.analysis.eee.records.write` (no copy of the table is made)."""
    named = {k: inp.codes[k].names for k in ("set", "model", "method", "judge", "category")}
    groups = {}
    for gid, row in enumerate(inp.groups[["set", "model", "method", "judge"]].itertuples(index=False)):
        groups[(named["set"][row.set], named["model"][row.model], named["method"][row.method],
                named["judge"][row.judge])] = gid
    return VerdictRows(inp.data, named, tuple(inp.files), tuple(inp.provenance), dict(entries), groups)


@cache
def bundled_ids(label: str) -> tuple[np.ndarray, np.ndarray]:
    """The prompt hashes of the bundled copy of a set, sorted, and each one's 1-based row (its first;
    how the inspect tasks number samples); empty when the set is not bundled."""
    info = SETS.get(label)
    path = resolve_set(info.name) if info else None
    if not path or "://" in path or not Path(path).exists():
        return np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.int64)
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    keys, first = np.unique(prompt_hash(frame["prompt"]), return_index=True)
    return keys, first.astype(np.int64) + 1


def _sorted_find(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each value is in the sorted ``keys`` (0 where absent), and whether it is there."""
    if not len(keys):
        return np.zeros(len(values), dtype=np.int64), np.zeros(len(values), dtype=bool)
    at = np.searchsorted(keys, values).clip(max=len(keys) - 1)
    return at, keys[at] == values


_EMPTY_SHA = np.frombuffer(hashlib.sha256(b"").digest(), dtype=np.uint8)


@dataclass(frozen=True)
class Texts:
    """One input file's prompts and replies (of one model), found by (prompt hash, sample)."""

    index: pd.Index  # the hashes of the rows kept (with their samples unless ``flat``), each key once
    rows: np.ndarray  # the file row of each key (its last, as a dict built row by row kept)
    flat: bool  # every kept row has sample 0: the index holds the hashes only
    prompts: object  # a pyarrow string array (a list of str without pyarrow), by file row
    replies: object

    def find(self, hashes: np.ndarray, samples: np.ndarray) -> np.ndarray:
        """The file row of each (prompt hash, sample); -1 where the file has none."""
        if self.flat:
            at = self.index.get_indexer(pd.Index(hashes))
            at[np.asarray(samples) != 0] = -1
        else:
            at = self.index.get_indexer(pd.MultiIndex.from_arrays([hashes, np.asarray(samples, dtype=np.int64)]))
        return np.where(at >= 0, self.rows[at], -1) if len(self.rows) else np.full(len(at), -1)


class Rows:
    """A report's verdict rows by group (each found once), the prompts and responses read again
    from the input files (the verdict table keeps only their hashes), and per set the sample ids
    and prompt digests already made (a set's prompts repeat once per model)."""

    def __init__(self, vr: VerdictRows):
        self.vr, self.cache, self.rows, self.digests = vr, {}, {}, {}
        self.lock = threading.Lock()  # the digests are looked up by two threads at once (lines.write_lines)

    def lookup(self, file_code: int, model: str) -> Texts:
        """The prompts and replies of one file's rows of ``model``."""
        key = (file_code, model)
        if key in self.cache:
            return self.cache[key]
        self.cache.clear()  # one file's texts at a time: a group's rows are nearly always one file
        release_memory()  # the last file's buffers, before this one is read
        frame = read_results(self.vr.files[file_code], columns=TEXT_COLUMNS)
        has = set(names(frame))
        hashes = prompt_hash(frame["prompt"])
        sample = per_value(frame["sample"], _sample, dtype=np.int64) if "sample" in has else np.zeros(len(hashes), np.int64)
        rows = np.arange(len(hashes))
        entry = self.vr.provenance[file_code] if file_code < len(self.vr.provenance) else {}
        if "model" in has and len(entry.get("models") or []) > 1:
            rows = np.flatnonzero(per_value(frame["model"], lambda v: str(v).strip() == model, dtype=bool))
        flat = not sample[rows].any()
        index = pd.Index(hashes[rows]) if flat else pd.MultiIndex.from_arrays([hashes[rows], sample[rows]])
        last = ~index.duplicated(keep="last")
        prompts = text_column(frame["prompt"])
        replies = text_column(frame["response"]) if "response" in has else text_column(pd.Series([""] * len(hashes)))
        found = Texts(index[last], rows[last], flat, prompts, replies)
        self.cache[key] = found
        return found

    def group(self, set_name: str, model: str, method: str, judge: str) -> dict[str, np.ndarray]:
        """The verdict rows of one group (all statuses), in input order: the columns the records read
        (:data:`GROUP_COLUMNS`), as arrays (a table's row selection takes every column of it)."""
        key = (set_name, model, method, judge if method == JUDGE else "")
        if key not in self.rows:
            gid, data = self.vr.groups.get(key), self.vr.data
            rows = np.zeros(len(data), dtype=bool) if gid is None or data.empty else data["group"].to_numpy() == gid
            self.rows[key] = {c: data[c].to_numpy()[rows] for c in GROUP_COLUMNS}
        return self.rows[key]

    def sample_ids(self, set_name: str, hashes: np.ndarray):
        """Each prompt's sample id: its row in the bundled copy of the set, else its hash in hex
        (a pyarrow large_string array; a list of str without pyarrow)."""
        keys, numbers = bundled_ids(set_name)
        at, known = _sorted_find(keys, hashes)
        arrow = lines._arrow()
        if arrow is None:
            return [str(numbers[a]) if k else f"{h:016x}" for a, k, h in zip(at.tolist(), known.tolist(), hashes.tolist())]
        pa, pc = arrow
        hexed = lines.fixed_width(lines.hex_digits(hashes.astype(">u8").view(np.uint8).reshape(-1, 8)))
        if not known.any():
            return hexed
        rows = pa.array(np.where(known, numbers[at] if len(numbers) else 0, 0)).cast(pa.large_string())
        return pc.if_else(pa.array(known), rows, hexed)

    def prompt_digests(self, set_name: str, hashes: np.ndarray, prompts, present: np.ndarray):
        """The SHA-256 (hex) of each prompt's text (of '' where ``present`` is false), as a pyarrow
        large_string array. Each distinct prompt is hashed once per set and kept by its 64-bit hash
        (the report's identity of a prompt), so 30 models' rows of one set hash its prompts once."""
        with self.lock:
            keys, raw = self.digests.get(set_name, (np.empty(0, dtype=np.uint64), np.empty((0, 32), dtype=np.uint8)))
            at, known = _sorted_find(keys, hashes)
            new = present & ~known
            if new.any():
                fresh, first = np.unique(hashes[new], return_index=True)
                cells = prompts.take(np.flatnonzero(new)[first]).to_pylist()  # a chunk's prompts
                digests = b"".join(hashlib.sha256(c.encode("utf-8")).digest() for c in cells)
                keys = np.concatenate([keys, fresh])
                raw = np.concatenate([raw, np.frombuffer(digests, np.uint8).reshape(-1, 32)])
                order = np.argsort(keys, kind="stable")
                keys, raw = keys[order], raw[order]
                self.digests[set_name] = (keys, raw)
                at, known = _sorted_find(keys, hashes)
        out = raw[at] if len(keys) else np.empty((len(hashes), 32), dtype=np.uint8)
        out[~present] = _EMPTY_SHA
        return lines.fixed_width(lines.hex_digits(out))


def text_column(values):
    """Every cell of a column as text (bytes decoded as UTF-8, a bad byte replaced; missing: ''):
    a pyarrow string array in one piece (pyarrow's take from a chunked column first joins the whole
    column, so it is joined once here), or a list of str when pyarrow is not installed."""
    arrow = lines._arrow()
    if arrow is None:
        return _cells(values)
    pa, pc = arrow
    if isinstance(values, pd.Series):
        return pa.array(_cells(values), pa.string())
    try:
        values = values.cast(pa.string())  # a bytes column: checked as UTF-8 here (its buffers kept)
    except pa.ArrowInvalid:
        return pa.array(_cells(values), pa.string())  # a bad byte: decoded cell by cell, replaced
    return lines._one_piece(pc.fill_null(values, ""))


def _cells(values) -> list[str]:
    """Every cell of a column as text (bytes decoded as UTF-8, a bad byte replaced; missing: '')."""
    cells = values.tolist() if isinstance(values, pd.Series) else values.to_pylist()
    return [c.decode("utf-8", "replace") if isinstance(c, bytes) else "" if c is None or c != c else str(c)
            for c in cells]


def _sample(value) -> int:
    text = str(value).strip()
    try:
        return int(float(text)) if text else 0
    except ValueError:
        return -1


def fingerprint(text: Rows, model: str, judge: str, entry: dict, settings: dict) -> str:
    """The run's identity: model, judge, settings and every verdict on every prompt (in no order)."""
    h = hashlib.sha256(json.dumps([model, judge, settings], sort_keys=True, default=str).encode())
    for set_name in sorted(entry):
        st = entry[set_name]
        rows = text.group(set_name, model, st["method"], st.get("judge") or "")
        cols = [rows[c].astype(np.int64) for c in ("prompt", "sample", "status", "rejected")]
        order = np.lexsort((cols[1], cols[0]))
        h.update(f"|{set_name}|{st['method']}|{st.get('judge') or ''}|".encode())
        h.update(np.stack([c[order] for c in cols]).tobytes())
    return h.hexdigest()


def left_out_rows(text: Rows, set_name: str, model: str, st: dict) -> dict:
    """The rows of a set not written as samples: errors, and rows without a verdict."""
    status = text.group(set_name, model, st["method"], st.get("judge") or "")["status"]
    return {"error_rows_not_written": int((status == ERROR).sum()),
            "rows_without_verdict_not_written": int(((status != SCORED) & (status != ERROR)).sum())}


def samples_per_prompt(text: Rows, set_name: str, model: str, st: dict) -> int:
    """The most samples a prompt has in the group (stage 4 ``--samples``)."""
    prompts = text.group(set_name, model, st["method"], st.get("judge") or "")["prompt"]
    if not len(prompts):
        return 1
    return int(np.unique(prompts, return_counts=True)[1].max())
