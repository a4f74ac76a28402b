"""The per-sample lines of the Every Eval Ever records (one JSON object a line; what each holds:
:mod:`~orbench.analysis.eee.records`), made a column at a time.

At 30 models x 80K rows a report writes 2.4 million lines of about 1.3 KB, mostly the reply. Made
one line at a time (a Python string each, its prompt and reply escaped one call each) they took
three times as long as the rest of the report. So a chunk of rows is made as columns: the prompt
and the reply are escaped over their whole text buffer at once (:func:`json_text`), the sample ids
and prompt hashes come from caches keyed by the report's prompt hash, the fixed parts of a line
are a few constants picked per row by its verdict, and pyarrow joins the columns into the lines
in one pass; their bytes go to the file as one buffer. Without pyarrow (an optional dependency)
the same lines are made one by one (:func:`_plain_chunk`). Both write the bytes
``json.encoder.encode_basestring`` and a Python f-string wrote before (the tests compare them).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import tempfile
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

from orbench.analysis.report.inputs import SCORED
from orbench.run.direct_io import DirectWriter
from orbench.run.tables import apply_umask
from orbench.scoring.vocab import JUDGE

#: Rows per chunk: about 10 MB of lines at real replies' length, so a chunk's columns (a few
#: copies of its text) stay small beside the report's verdict table.
CHUNK = 8192
_ENC = json.encoder.encode_basestring  # a str as a JSON string literal, non-ASCII kept (C where available)
#: The characters encode_basestring writes as a backslash and a letter; other control characters
#: (below 0x20) become \u00XX.
_SHORT = {'"': '"', "\\": "\\", "\n": "n", "\r": "r", "\t": "t", "\b": "b", "\f": "f"}
_LETTER = np.zeros(256, dtype=np.uint8)
for _char, _letter in _SHORT.items():
    _LETTER[ord(_char)] = ord(_letter)
_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
VERDICTS = ("answer", "refusal", "partial refusal")  # by code: 0 answered, 1 refused, 2 refused in part


def _arrow():
    """pyarrow and its compute module, or None when pyarrow is not installed."""
    try:
        import pyarrow
        import pyarrow.compute
    except ImportError:
        return None
    return pyarrow, pyarrow.compute


class Form:
    """The fixed parts of one set's lines: the head (evaluation and result ids), and the texts between
    the per-row values, by verdict code (and cut-off reply) where they depend on it."""

    def __init__(self, base: dict, set_label: str, result_id: str, method: str, kind: str, categories: list[str]):
        head = json.dumps({**base, "evaluation_name": set_label, "evaluation_result_id": result_id},
                          ensure_ascii=False)[:-1]
        extraction = "llm_judge" if method == JUDGE else "keyword_match"
        unsafe = kind == "unsafe"
        self.open = f'{head}, "sample_id": "'
        self.hash = '", "sample_hash": "'
        self.prompt = '", "interaction_type": "single_turn", "input": {"raw": "'
        self.reply = '", "reference": []}, "output": {"raw": ["'
        # after the reply, up to the category: by verdict code
        self.middle = [f'"]}}, "answer_attribution": [{{"turn_idx": 0, "source": "output.raw", "extracted_value": '
                       f'"{v}", "extraction_method": "{extraction}", "is_terminal": true}}], "evaluation": '
                       f'{{"score": {0.0 if v == "answer" else 1.0}, "is_correct": '
                       f'{"true" if (v != "answer") == unsafe else "false"}}}, "metadata": {{"category": '
                       for v in VERDICTS]
        self.categories = [_ENC(c) for c in categories]
        self.sample = ', "sample": "'
        # after the sample: by verdict code * 2 + (reply cut off)
        self.tail = [f'", "prompt_kind": {_ENC(kind)}, "verdict": "{v}"'
                     + (', "finish_reason": "length"}}\n' if cut else "}}\n") for v in VERDICTS for cut in (0, 1)]


def verdict_codes(rejected: np.ndarray, partial: np.ndarray) -> np.ndarray:
    """0 answered, 1 refused, 2 refused in part (a partial flag counts only on a refusal)."""
    refused = rejected != 0
    return np.where(refused, np.where(partial, 2, 1), 0).astype(np.int64)


def chunks(text, set_name: str, model: str, st: dict, form: Form) -> Iterator[Callable[[], tuple]]:
    """The lines of one set's rows with a verdict, in input order, as chunks to make: each a
    function that returns (bytes, line count); :func:`write_lines` makes two at once."""
    rows = text.group(set_name, model, st["method"], st.get("judge") or "")
    scored = rows["status"] == SCORED
    arrow = _arrow()
    for f in pd.unique(rows["file"][scored]):
        part = scored & (rows["file"] == f)
        found = text.lookup(int(f), model)
        cols = {c: rows[c][part] for c in ("prompt", "sample", "rejected", "partial", "truncated", "category")}
        for start in range(0, len(cols["prompt"]), CHUNK):
            cut = {c: v[start:start + CHUNK] for c, v in cols.items()}
            at = found.find(cut["prompt"], cut["sample"])
            yield partial(_arrow_chunk if arrow else _plain_chunk, text, set_name, form, found, at, cut)


def _plain_chunk(text, set_name: str, form: Form, found, at: np.ndarray, cut: dict) -> tuple[bytes, int]:
    """A chunk's lines made one at a time (no pyarrow)."""
    ids = text.sample_ids(set_name, cut["prompt"])
    verdict = verdict_codes(cut["rejected"], cut["partial"])
    lines = []
    for sid, i, smp, v, trunc, cat in zip(ids, at.tolist(), cut["sample"].tolist(), verdict.tolist(),
                                          cut["truncated"].tolist(), cut["category"].tolist()):
        prompt, reply = (found.prompts[i], found.replies[i]) if i >= 0 else ("", "")
        lines.append(f"{form.open}{sid}{form.hash}{hashlib.sha256(prompt.encode()).hexdigest()}{form.prompt}"
                     f"{_ENC(prompt)[1:-1]}{form.reply}{_ENC(reply)[1:-1]}{form.middle[v]}{form.categories[cat]}"
                     f"{form.sample}{smp}{form.tail[v * 2 + int(trunc)]}")
    return "".join(lines).encode("utf-8"), len(lines)


def _arrow_chunk(text, set_name: str, form: Form, found, at: np.ndarray, cut: dict) -> tuple[memoryview, int]:
    """A chunk's lines made a column at a time and joined by pyarrow (its bytes, not copied)."""
    pa, pc = _arrow()
    present = at >= 0
    where = pa.array(np.where(present, at, 0), mask=~present)
    # the chunk's cells, in one piece (a column read in blocks takes as blocks), with 64-bit offsets
    prompt, reply = (_one_piece(pc.fill_null(col.take(where), "")).cast(pa.large_string())
                     for col in (found.prompts, found.replies))
    verdict = verdict_codes(cut["rejected"], cut["partial"])
    const = lambda value: pa.scalar(value, pa.large_string())  # noqa: E731 (a one-line helper)
    pick = lambda options, codes: pa.array(options, pa.large_string()).take(pa.array(codes))  # noqa: E731 (as above)
    lines = pc.binary_join_element_wise(
        const(form.open), text.sample_ids(set_name, cut["prompt"]),
        const(form.hash), text.prompt_digests(set_name, cut["prompt"], prompt, present),
        const(form.prompt), json_text(prompt), const(form.reply), json_text(reply),
        pick(form.middle, verdict), pick(form.categories, cut["category"]),
        const(form.sample), pa.array(cut["sample"].astype(np.int64)).cast(pa.large_string()),
        pick(form.tail, verdict * 2 + cut["truncated"].astype(np.int64)), const(""))
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int64)[lines.offset:lines.offset + len(lines) + 1]
    data = lines.buffers()[2]
    return (memoryview(data)[offsets[0]:offsets[-1]] if data is not None else memoryview(b"")), len(lines)


def _one_piece(values):
    """A pyarrow array, its chunks joined if it is a ChunkedArray."""
    return values.combine_chunks() if hasattr(values, "combine_chunks") else values


def json_text(values):
    """Each cell of a pyarrow large_string array (no nulls) as the inside of a JSON string literal,
    escaped as ``json.encoder.encode_basestring`` escapes (non-ASCII kept): over the whole text
    buffer at once. In UTF-8 a byte below 0x80 is always a character of its own, so the bytes to
    escape are found byte by byte."""
    pa, pc = _arrow()
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int64)[values.offset:values.offset + len(values) + 1]
    buffer = values.buffers()[2]
    data = np.frombuffer(buffer, dtype=np.uint8)[offsets[0]:offsets[-1]] if buffer is not None and len(values) \
        else np.empty(0, dtype=np.uint8)
    offsets = offsets - offsets[0]
    at = np.flatnonzero((data < 0x20) | (data == ord('"')) | (data == ord("\\")))
    letter = _LETTER[data[at]]
    rare = np.unique(data[at[letter == 0]])  # control characters without a short form: \u00XX, below
    at, letter = at[letter != 0], letter[letter != 0]
    out = np.empty(len(data) + len(at), dtype=np.uint8)
    slash = at + np.arange(len(at))  # where each backslash goes once the earlier ones are in
    keep = np.ones(len(out), dtype=bool)
    keep[slash] = False
    out[keep] = data
    out[slash] = ord("\\")
    out[slash + 1] = letter
    escaped = pa.LargeStringArray.from_buffers(len(values), pa.py_buffer(offsets + np.searchsorted(at, offsets)),
                                               pa.py_buffer(out))
    for code in rare.tolist():
        escaped = pc.replace_substring(escaped, chr(code), f"\\u{code:04x}")
    return escaped


def hex_digits(raw: np.ndarray) -> np.ndarray:
    """Rows of bytes (a 2-D uint8 array) as rows of lower-case hex digits (ASCII), twice as wide."""
    out = np.empty((raw.shape[0], raw.shape[1] * 2), dtype=np.uint8)
    out[:, 0::2] = _HEX[raw >> 4]
    out[:, 1::2] = _HEX[raw & 15]
    return out


def fixed_width(ascii_rows: np.ndarray):
    """Rows of ASCII bytes (a 2-D uint8 array) as a pyarrow large_string array, one cell a row."""
    pa, _ = _arrow()
    n, width = ascii_rows.shape
    return pa.LargeStringArray.from_buffers(n, pa.py_buffer(np.arange(n + 1, dtype=np.int64) * width),
                                            pa.py_buffer(np.ascontiguousarray(ascii_rows)))


def write_lines(jobs: Iterable[Callable[[], tuple]], path: Path) -> tuple[int, str]:
    """Make the chunks (functions returning (bytes, line count), see :func:`chunks`) and write them
    in order into ``path`` (a temporary file renamed at the end; none when there is no line); the
    lines' count and SHA-256.

    Two chunks are made at once, on two threads, while the one before them is hashed and written on
    a third, and this thread reads the next input file: pyarrow's and numpy's work on a chunk,
    hashing and writing all leave the interpreter free, so on two cores the lines take about half
    the time they would on one. At most four chunks are held at a time. The bytes go past the page
    cache where the file system allows (:class:`~orbench.run.direct_io.DirectWriter`: on a virtual
    machine whose freed memory goes back to its host, the cache's pages cost more CPU than hashing
    and reading the texts again together), and a direct write waits for the device, which the
    third thread keeps off this one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    digest, count = hashlib.sha256(), 0
    try:
        with (os.fdopen(fd, "wb", buffering=0) as handle, ThreadPoolExecutor(max_workers=2) as makers,
              ThreadPoolExecutor(max_workers=1) as writer):
            sink, ahead, written = DirectWriter(handle.fileno()), deque(), None

            def put(data) -> None:
                digest.update(data)
                sink.write(data)

            for job in itertools.chain(jobs, [None]):
                if job is not None:
                    ahead.append(makers.submit(job))
                while ahead and (job is None or len(ahead) > 2):
                    data, n = ahead.popleft().result()
                    if written is not None:
                        written.result()  # one chunk in the writer's hands at a time, in order
                    written, count = writer.submit(put, data), count + n
            if written is not None:
                written.result()
            sink.close()
        apply_umask(tmp)
        if count:
            os.replace(tmp, path)
        else:
            Path(tmp).unlink()
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return count, digest.hexdigest()
