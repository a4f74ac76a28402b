"""The per-sample lines of the Every Eval Ever records, and what they are made from: the report's
verdict rows (kept by :func:`collect` while the report is computed) and the prompts and responses,
read again from the input files. :mod:`~orbench.analysis.eee.records` says what each line holds."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

from orbench.analysis.eee.sets import SETS, SetInfo
from orbench.analysis.report.columns import names, per_value, prompt_hash, read_results
from orbench.analysis.report.inputs import ERROR, SCORED, Inputs
from orbench.benchmark.sets import resolve_set
from orbench.run.tables import apply_umask
from orbench.scoring.vocab import JUDGE


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
def bundled_rows(label: str) -> dict:
    """prompt hash -> 1-based row of the bundled copy of a set (how the inspect tasks number samples)."""
    info = SETS.get(label)
    path = resolve_set(info.name) if info else None
    if not path or "://" in path or not Path(path).exists():
        return {}
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    return {int(h): i + 1 for i, h in reversed(list(enumerate(prompt_hash(frame["prompt"]))))}


class Rows:
    """A report's verdict rows by group (each found once), and the prompts and responses read again
    from the input files (the verdict table keeps only their hashes)."""

    def __init__(self, vr: VerdictRows):
        self.vr, self.cache, self.rows = vr, {}, {}

    def lookup(self, file_code: int, model: str) -> dict:
        """(prompt hash, sample) -> (prompt, response) of one file's rows of ``model``."""
        key = (file_code, model)
        if key in self.cache:
            return self.cache[key]
        self.cache.clear()  # one file's texts at a time: a group's rows are nearly always one file
        frame = read_results(self.vr.files[file_code])
        has = set(names(frame))
        hashes = prompt_hash(frame["prompt"])
        sample = per_value(frame["sample"], _sample, dtype=np.int64) if "sample" in has else np.zeros(len(hashes), np.int64)
        keep = None
        entry = self.vr.provenance[file_code] if file_code < len(self.vr.provenance) else {}
        if "model" in has and len(entry.get("models") or []) > 1:
            keep = per_value(frame["model"], lambda v: str(v).strip() == model, dtype=bool)
        prompts = _cells(frame["prompt"])
        replies = _cells(frame["response"]) if "response" in has else [""] * len(prompts)
        found = {(h, s): (p, t) for h, s, p, t, k in zip(hashes.tolist(), sample.tolist(), prompts, replies,
                                                         keep.tolist() if keep is not None else [True] * len(prompts))
                 if k}
        self.cache[key] = found
        return found

    def group(self, set_name: str, model: str, method: str, judge: str) -> pd.DataFrame:
        """The verdict rows of one group (all statuses), in input order."""
        key = (set_name, model, method, judge if method == JUDGE else "")
        if key not in self.rows:
            gid, data = self.vr.groups.get(key), self.vr.data
            self.rows[key] = data.iloc[:0] if gid is None or data.empty else data[data["group"].to_numpy() == gid]
        return self.rows[key]


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
        cols = [rows[c].to_numpy().astype(np.int64) for c in ("prompt", "sample", "status", "rejected")]
        order = np.lexsort((cols[1], cols[0]))
        h.update(f"|{set_name}|{st['method']}|{st.get('judge') or ''}|".encode())
        h.update(np.stack([c[order] for c in cols]).tobytes())
    return h.hexdigest()


_ENC = json.encoder.encode_basestring  # a str as a JSON string literal, non-ASCII kept (C where available)


def left_out_rows(text: Rows, set_name: str, model: str, st: dict) -> dict:
    """The rows of a set not written as samples: errors, and rows without a verdict."""
    status = text.group(set_name, model, st["method"], st.get("judge") or "")["status"].to_numpy()
    return {"error_rows_not_written": int((status == ERROR).sum()),
            "rows_without_verdict_not_written": int(((status != SCORED) & (status != ERROR)).sum())}


def lines_of(text: Rows, set_name: str, model: str, st: dict, info: SetInfo, base: dict, result_id: str):
    """The per-sample lines of one set, one per row with a verdict (a generator of JSON texts)."""
    rows = text.group(set_name, model, st["method"], st.get("judge") or "")
    scored = rows[rows["status"].to_numpy() == SCORED]
    ids = bundled_rows(set_name)
    categories = [_ENC(c) for c in text.vr.names["category"]]
    extraction = "llm_judge" if st["method"] == JUDGE else "keyword_match"
    head = json.dumps({**base, "evaluation_name": info.name, "evaluation_result_id": result_id},
                      ensure_ascii=False)[:-1]
    kind, unsafe = _ENC(info.kind), info.kind == "unsafe"
    for f in pd.unique(scored["file"]):
        part = scored[scored["file"].to_numpy() == f]
        found = text.lookup(int(f), model)
        for h, smp, rej, partial, cut, cat in zip(*(part[c].to_numpy().tolist() for c in (
                "prompt", "sample", "rejected", "partial", "truncated", "category"))):
            prompt, reply = found.get((h, smp), ("", ""))
            refused = bool(rej)
            verdict = ("partial refusal" if partial else "refusal") if refused else "answer"
            sid = ids.get(h) or f"{h:016x}"
            yield (f'{head}, "sample_id": "{sid}", "sample_hash": "{hashlib.sha256(prompt.encode()).hexdigest()}", '
                   f'"interaction_type": "single_turn", "input": {{"raw": {_ENC(prompt)}, "reference": []}}, '
                   f'"output": {{"raw": [{_ENC(reply)}]}}, "answer_attribution": [{{"turn_idx": 0, "source": '
                   f'"output.raw", "extracted_value": "{verdict}", "extraction_method": "{extraction}", '
                   f'"is_terminal": true}}], "evaluation": {{"score": {1.0 if refused else 0.0}, "is_correct": '
                   f'{"true" if refused == unsafe else "false"}}}, "metadata": {{"category": {categories[cat]}, '
                   f'"sample": "{smp}", "prompt_kind": {kind}, "verdict": "{verdict}"'
                   + (', "finish_reason": "length"}}' if cut else '}}'))


def write_lines(lines, path: Path) -> tuple[int, str]:
    """Stream ``lines`` into ``path`` (a temporary file renamed at the end); their count and SHA-256."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    digest, count = hashlib.sha256(), 0
    try:
        with os.fdopen(fd, "wb") as handle:
            for line in lines:
                data = (line + "\n").encode("utf-8")
                digest.update(data)
                handle.write(data)
                count += 1
        apply_umask(tmp)
        if count:
            os.replace(tmp, path)
        else:
            Path(tmp).unlink()
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return count, digest.hexdigest()


def samples_per_prompt(text: Rows, set_name: str, model: str, st: dict) -> int:
    """The most samples a prompt has in the group (stage 4 ``--samples``)."""
    rows = text.group(set_name, model, st["method"], st.get("judge") or "")
    if rows.empty:
        return 1
    return int(np.unique(rows["prompt"].to_numpy(), return_counts=True)[1].max())
