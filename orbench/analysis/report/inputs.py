"""Reading the report's inputs: naming them, telling their prompt set, and turning rows into verdicts.

Each input file is read once, with only the columns the report uses (columnar:
:mod:`orbench.analysis.report.columns`), and reduced at once to a compact table of integer codes (prompt
hash, set, model, method, judge, category, status, verdict), so 30 models x 80K rows fit in
little memory. The replies are never decoded as a whole: a few example rows per model, category
and verdict take their text for the HTML report. ``<file>.meta.json`` beside an input (the
runner's provenance file) is read when present.
"""

from __future__ import annotations

import glob
import math
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from orbench.analysis.report import lineage
from orbench.analysis.report.columns import distinct, names, per_value, prompt_hash, read_results, texts
from orbench.analysis.report.lineage import read_meta
from orbench.benchmark.datasets import EIGHTY_K, HARD_1K, SET_NAMES, TOXIC
from orbench.benchmark.sets import XSTEST_SAFE, XSTEST_UNSAFE
from orbench.llm.errors import UsageError
from orbench.run.tables import did_you_mean, file_name, input_stem
from orbench.scoring.vocab import (
    JUDGE,
    JUDGE_CLASSES,
    JUDGE_REFUSED,
    KEYWORD,
    KEYWORD_CLASSES,
    PARTIAL,
    REJECTED_BY_CLASS,
    SKIPPED_ERROR,
    UNPARSED,
)

HARD, TOX, K80 = "hard", "toxic", "80k"
XS_SAFE, XS_UNSAFE = XSTEST_SAFE, XSTEST_UNSAFE  # XSTest's sets are labelled by their full names
# A set is named in a file name by one of these whole tokens (the bundled names or short names).
SET_TOKENS = {HARD_1K: HARD, TOXIC: TOX, EIGHTY_K: K80, HARD: HARD, TOX: TOX, K80: K80,
              XSTEST_SAFE: XS_SAFE, XSTEST_UNSAFE: XS_UNSAFE}
assert set(SET_NAMES) <= set(SET_TOKENS)
# "seemingly toxic" is the paper's name for the safe prompts (Hard-1K, 80K), never the toxic set.
NOT_A_SET_AFTER = {TOX: "seemingly"}

# Verdict status codes in the compact table (REFUSED_TO_JUDGE: the judge refused to judge, counted
# apart from the other rows without a verdict).
SCORED, ERROR, NO_VERDICT, REFUSED_TO_JUDGE = 0, 1, 2, 3
# REJECTED_BY_CLASS (orbench.scoring.vocab) is used only when a judge file has no is_rejected column at
# all; the judge's is_rejected wins.
# Origins of keyword verdicts, best first: a re-score (newest rules), the alignment file, the
# copy a judge file carries.
GROUP_KEYS = ["set", "model", "method", "judge"]
ORIGIN_RANK = {"rescore": 0, "alignment": 1, "judge": 2}


@dataclass
class Codes:
    """Interned strings: each distinct name gets a small integer, shared by every input."""

    names: list[str] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)

    def code(self, name: str) -> int:
        if name not in self.index:
            self.index[name] = len(self.names)
            self.names.append(name)
        return self.index[name]

    def encode(self, values, blank: str | None = None) -> np.ndarray:
        """The code of each cell (a column, :mod:`orbench.analysis.report.columns`); with ``blank``, cells
        are stripped and empty ones become ``blank``."""
        codes, uniques = distinct(values)
        if blank is None:
            names = [str(u) for u in uniques]
        else:
            names = [str(u).strip() or blank for u in uniques]
        table = np.array([self.code(v) for v in names] + [self.code(blank or "")], dtype=np.int32)
        return table[codes]  # code -1 (a missing cell) takes the last entry


@dataclass
class Inputs:
    """Everything read from the inputs: verdict rows, examples, provenance and notes."""

    data: pd.DataFrame
    examples: pd.DataFrame
    provenance: list[dict]
    files: list[str]
    codes: dict[str, Codes]
    notes: list[str]
    groups: pd.DataFrame  # row i: the codes of (set, model, method, judge) of group i (data["group"])


# ---------------------------------------------------------------- naming inputs

def parse_spec(spec: str) -> tuple[str | None, str | None, str]:
    """``[SET:][MODEL]=PATH`` or ``PATH`` -> (set or None, model or None, path)."""
    if "=" not in spec or Path(spec).exists():
        return None, None, spec
    label, path = spec.split("=", 1)
    if "://" in label or not path:
        return None, None, spec
    set_name, model = None, label
    if ":" in label and "/" not in label.split(":", 1)[0]:
        set_name, model = label.split(":", 1)
    set_name = (set_name.strip() or None) if set_name is not None else None
    if set_name:
        set_name = SET_TOKENS.get(set_name.lower(), set_name)
    return set_name, model.strip() or None, path


def expand(path: str) -> list[str]:
    """A glob's matches (sorted), or the path itself; URLs are passed through."""
    if "://" in path or not any(ch in path for ch in "*?["):
        return [path]
    found = sorted(glob.glob(path))
    if not found:
        raise UsageError(f"no file matches {path!r}")
    return found


def name_tokens(path: str) -> list[str]:
    """The file name's tokens: lower case, split on every character that is not a letter, digit or '-'."""
    return [t for t in re.split(r"[^a-z0-9-]+", input_stem(path).lower()) if t]


def infer_set(path: str) -> str | None:
    """The prompt set a file name names as a whole token (hard, toxic, 80k), or None.

    ``UsageError`` when the name names two different sets.
    """
    tokens = name_tokens(path)
    found = []
    for i, token in enumerate(tokens):
        label = SET_TOKENS.get(token)
        if label is None or (i > 0 and tokens[i - 1] == NOT_A_SET_AFTER.get(token)):
            continue
        if label not in found:
            found.append(label)
    if len(found) > 1:
        raise UsageError(f"the name of {path} names more than one prompt set ({', '.join(found)}); "
                         f"name the set as SET:PATH, e.g. {found[0]}:={path}")
    return found[0] if found else None


def _chain_set(path: str) -> str | None:
    """The set the file's meta chain names (a sample drawn by ``python -m orbench.benchmark.datasets``, or a
    bundled set read as an input), when its name names none."""
    for name in lineage.source_sets(path):
        label = infer_set(name)
        if label:
            return label
    return None


def identity(path: str) -> str:
    """What makes two namings the same file: the resolved local path, or the URL as written."""
    return path if "://" in path else str(Path(path).resolve())


def meta_judge(meta: dict | None) -> str:
    """The judge a stage-5 provenance file names (settings.judge, else the first model as resolved)."""
    if not meta:
        return ""
    settings = meta.get("settings") if isinstance(meta.get("settings"), dict) else {}
    if settings.get("judge"):
        return str(settings["judge"])
    models = meta.get("models") if isinstance(meta.get("models"), list) else []
    for m in models:
        if isinstance(m, dict) and (m.get("resolved") or m.get("typed")):
            return str(m.get("resolved") or m.get("typed"))
    return ""


# ---------------------------------------------------------------- reading

def _truth(value) -> float:
    text = str(value).strip().lower()
    return 1.0 if text in ("true", "1", "yes", "t", "y") else 0.0 if text in ("false", "0", "no", "f", "n") else np.nan


def _bools(values) -> np.ndarray:
    """Text cells -> 1.0 (true), 0.0 (false) or NaN (empty or anything else)."""
    return per_value(values, _truth, dtype=float)


def _status(err: np.ndarray, rej: np.ndarray) -> np.ndarray:
    status = np.where(np.isnan(rej), NO_VERDICT, SCORED).astype(np.int8)
    status[err] = ERROR
    return status


def verdict_columns(frame, path: str, judge_name: str) -> list[tuple]:
    """(method, origin, judge, status codes, rejected 1/0/NaN) for each verdict a file holds
    (``frame``: the file's columns, :func:`orbench.analysis.report.columns.read_results`).

    ``judge`` is one name for the whole file (a str) or one per row (an array). A cascade's row of
    the check sample has the judge's verdict in ``is_rejected`` and the matcher's in
    ``sure_verdict``: its verdict here is the matcher's (the cascade's own), the judge's goes to
    :func:`cascade_columns`.
    """
    n, has = len(frame), set(names(frame))
    error = per_value(frame["error"], lambda v: str(v).strip() != "", dtype=bool) if "error" in has else \
        np.zeros(n, dtype=bool)
    if "answer_category" in has or "judge_model" in has:
        cls = per_value(frame["answer_category"], lambda v: str(v).strip().lower()) if "answer_category" in has \
            else np.full(n, "", dtype=object)
        judges = per_value(frame["judge_model"], lambda v: str(v).strip()) if "judge_model" in has else None
        # a failed row leaves judge_model empty: it belongs to the file's judge when there is one
        named = set(pd.unique(judges)) - {""} if judges is not None else set()
        if named:
            rescore = {j.lower() for j in named} == {KEYWORD}
        else:
            found = set(pd.unique(cls))
            rescore = bool(found & KEYWORD_CLASSES) and not found & set(JUDGE_CLASSES)
        skipped = cls == SKIPPED_ERROR
        rej = _bools(frame["is_rejected"]) if "is_rejected" in has else \
            np.array([REJECTED_BY_CLASS.get(c, np.nan) for c in cls], dtype=float)
        rej[cls == UNPARSED] = np.nan
        if rescore:
            return [(KEYWORD, "rescore", "", _status(error | skipped, rej), rej)]
        if len(named) <= 1:
            judge = next(iter(named)) if named else judge_name
        else:
            judge = np.where(judges == "", judge_name, judges).astype(object)
        status = _status(error | skipped, rej)
        status[(status == NO_VERDICT) & (cls == JUDGE_REFUSED)] = REFUSED_TO_JUDGE
        sure, _ = cascade_columns(frame)
        if sure is not None:  # the cascade's verdict on a checked sure row is the matcher's
            mine = (sure >= 0) & ~error & ~skipped
            rej = np.where(mine, sure.astype(float), rej)
            status[mine] = SCORED
        out = [(JUDGE, "judge", judge, status, rej)]
        if "keyword_is_rejected" in has:
            kw = _bools(frame["keyword_is_rejected"])
            out.append((KEYWORD, "judge", "", _status(error | (skipped & np.isnan(kw)), kw), kw))
        return out
    if "is_rejected" in has:
        rej = _bools(frame["is_rejected"])
        return [(KEYWORD, "alignment", "", _status(error, rej), rej)]
    raise UsageError(f"{path} has neither 'is_rejected' nor 'answer_category': not an alignment-"
                     f"checker or response-checker output")


def cascade_columns(frame) -> tuple[np.ndarray | None, np.ndarray | None]:
    """A stage-5 ``--cascade`` output's ``sure`` and ``check`` codes (:data:`ROW_TYPES`), or
    (None, None) for a file without ``sure_verdict``."""
    if "sure_verdict" not in set(names(frame)):
        return None, None
    has = set(names(frame))
    sure = _bools(frame["sure_verdict"])
    n = len(sure)
    sampled = (_bools(frame["cascade_sampled"]) == 1) & ~np.isnan(sure) if "cascade_sampled" in has else \
        np.zeros(n, dtype=bool)
    judged = _bools(frame["is_rejected"]) if "is_rejected" in has else np.full(n, np.nan)
    classed = per_value(frame["cascade_class"], lambda v: str(v).strip() != "", dtype=bool) \
        if "cascade_class" in has else np.ones(n, dtype=bool)
    code = np.where(np.isnan(sure), np.where(classed, UNSURE, NONE), np.nan_to_num(sure))
    check = np.where(sampled, np.where(np.isnan(judged), NO_CHECK, judged), NONE)
    return code.astype(np.int8), check.astype(np.int8)


KNOWN_SETS = {HARD: HARD_1K, TOX: TOXIC, K80: EIGHTY_K, XS_SAFE: XSTEST_SAFE, XS_UNSAFE: XSTEST_UNSAFE}


def check_set_label(label: str, custom: Sequence[str], where: str) -> str:
    """``label`` as a set name (``hard-1k``-style names mapped to the short ones); ``UsageError`` for
    a label that is neither a known set nor declared with ``--custom_set``."""
    mapped = SET_TOKENS.get(label.strip().lower(), label.strip())
    if mapped in KNOWN_SETS or mapped in custom:
        return mapped
    known = ", ".join(f"{short} ({name})" for short, name in KNOWN_SETS.items())
    hint = did_you_mean(mapped, [*KNOWN_SETS, *KNOWN_SETS.values(), *custom])
    raise UsageError(f"unknown set {mapped!r} in {where}{hint}; the known sets are {known}; to report a "
                     f"set of your own on purpose, declare it with --custom_set {mapped}")


def resolve(specs: Sequence[str], default_set: str | None,
            custom_sets: Sequence[str] = ()) -> tuple[list[tuple[str, str, str | None]], list[str]]:
    """(path, set, model or None) for every file the specs name, each file once; notes on repeats.

    Every set is settled here, before any file is read, so a bad name fails at once: a set label
    must be a known set or one declared in ``custom_sets``.
    """
    jobs, notes, seen = [], [], {}
    custom = [c.strip() for c in custom_sets if c.strip()]
    if default_set:
        default_set = check_set_label(default_set, custom, "--set")
    for spec in specs:
        set_name, model, pattern = parse_spec(spec)
        if set_name:
            set_name = check_set_label(set_name, custom, repr(spec))
        for path in expand(pattern):
            key = identity(path)
            label = set_name or infer_set(path) or _chain_set(path) or default_set
            if key in seen:
                if seen[key] != (label, model):
                    raise UsageError(f"{path} is named twice with different sets or models "
                                     f"({seen[key]} and {(label, model)}); name it once")
                notes.append(f"{path} was named more than once; read once")
                continue
            seen[key] = (label, model)
            if not label:
                raise UsageError(f"cannot tell the prompt set of {path} from its name: name it as "
                                 f"SET:PATH (e.g. hard:={path}) or pass --set")
            jobs.append((path, label, model))
    return jobs, notes


#: Files read ahead of the one being turned into rows, each on its own thread. One: its parser
#: has a core to itself while the main thread works on the previous file. Two saved 0.2 s of 4 on
#: 30 x 80K rows with 600-character replies and cost 100 MB more (a third file's columns in memory).
READ_AHEAD = 1


def _prefetched(paths: list[str]):
    """The files' tables in order, the next :data:`READ_AHEAD` read meanwhile, each by one thread
    that parses on its own (no pool of parser threads under it: the cores are taken by the
    readers and by the main thread, which turns the previous file into verdict rows)."""
    with ThreadPoolExecutor(max_workers=READ_AHEAD) as pool:
        ahead = [pool.submit(read_results, path, False) for path in paths[:READ_AHEAD]]
        for i in range(len(paths)):
            frame = ahead.pop(0).result()
            if i + READ_AHEAD < len(paths):
                ahead.append(pool.submit(read_results, paths[i + READ_AHEAD], False))
            yield frame
            del frame


def release_memory() -> None:
    """Hand freed memory back to the system: pyarrow's pool (which otherwise keeps the buffers of
    every file read so far) and, with glibc, the C heap (whose freed pages a run over many large
    files otherwise keeps, so the peak would grow with the inputs)."""
    try:
        import pyarrow
    except ImportError:
        pass
    else:
        pyarrow.default_memory_pool().release_unused()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def _glibc():
    """glibc's ``malloc_trim`` where the C library is glibc (Linux), else None."""
    import ctypes
    import ctypes.util
    import platform

    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


_LIBC = _glibc()


#: The verdict table's columns and types: one row per input row and verdict it holds.
ROW_TYPES = {"set": np.int16, "model": np.int32, "method": np.int8, "judge": np.int16, "category": np.int32,
             "origin": np.int8, "file": np.int16, "prompt": np.uint64, "status": np.int8, "rejected": np.int8,
             "partial": bool, "has_kind": bool, "sample": np.int32, "truncated": bool, "has_finish": bool,
             "sure": np.int8, "check": np.int8}
#: ``sure``: on a cascade's row, the matcher's verdict on a sure row (1 refusal, 0 answer), :data:`UNSURE`
#: on a row the judge decided, else :data:`NONE`; ``check``: on a sure row of the check sample the
#: judge's verdict (1/0) or :data:`NO_CHECK` (the judge gave none), else :data:`NONE`
#: (:mod:`orbench.analysis.report.cascade` reads both).
NONE, UNSURE, NO_CHECK = -2, -1, 2
EXAMPLE_COLUMNS = ["set", "model", "method", "judge", "category", "prompt", "response", "rejected", "kind",
                   "answer_category", "file"]


class _Rows:
    """Verdict rows gathered file by file as numpy columns, joined column by column at the end
    (each column's pieces are freed as it is joined, so the table is never held twice)."""

    def __init__(self):
        self.parts: list[dict[str, np.ndarray]] = []

    def add(self, part: dict[str, np.ndarray]) -> None:
        self.parts.append(part)

    def frame(self) -> pd.DataFrame:
        if not self.parts:
            return pd.DataFrame()
        out = {}
        for name in list(self.parts[0]):
            out[name] = np.concatenate([part.pop(name) for part in self.parts])
        self.parts = []
        return pd.DataFrame(out, copy=False)


def load(specs: Sequence[str], default_set: str | None, default_model: str | None,
         examples_per_cell: int = 3, custom_sets: Sequence[str] = ()) -> Inputs:
    """Read every input once into the compact verdict table (see the module docstring)."""
    codes = {k: Codes() for k in ("set", "model", "method", "judge", "category", "origin")}
    rows, copies, examples, provenance, files = _Rows(), _Rows(), [], [], []
    jobs, notes = resolve(specs, default_set, custom_sets)
    for (path, label, model), frame in zip(jobs, _prefetched([j[0] for j in jobs])):
        files.append(path)
        entry, parts, shown = _read_file(frame, path, label, model, default_model, len(files) - 1, codes,
                                         examples_per_cell)
        for part, is_copy in parts:
            (copies if is_copy else rows).add(part)
        examples += shown
        provenance.append(entry)
    release_memory()  # the files' buffers, before the table is joined
    if copies.parts:  # keyword verdicts carried by judge files: after every file's own verdicts
        kept = _drop_repeated_copies(copies.frame())
        rows.add({c: kept[c].to_numpy() for c in ROW_TYPES})
    data = _prefer_keyword_origin(rows.frame(), codes)
    release_memory()  # the pieces it was joined from
    gid, groups = check_duplicates(data, files, codes)
    if not data.empty:
        data["group"] = gid.astype(np.int32)
    ex = pd.concat(examples, ignore_index=True) if examples else pd.DataFrame(columns=EXAMPLE_COLUMNS)
    return Inputs(data, ex, provenance, files, codes, notes, groups)


def _shared_columns(frame, path: str, model: str | None, default_model: str | None, codes) -> dict:
    """The per-row columns every verdict of one file shares: model and category codes, the prompt's
    hash, the sample index, cut-off replies, and the refusal kinds (None without the column)."""
    n, has = len(frame), set(names(frame))
    blank = np.full(n, "", dtype=object)
    if model:
        model_codes = np.full(n, codes["model"].code(model), dtype=np.int32)
    else:
        model_codes = codes["model"].encode(frame["model"] if "model" in has else blank,
                                            blank=default_model or input_stem(path))
    category = frame["category"] if "category" in has else np.full(n, "(none)", dtype=object)
    return {
        "model": model_codes, "category": codes["category"].encode(category, blank="(blank)"),
        "prompt": prompt_hash(frame["prompt"]),
        # stage 4 --samples: the sample index; a prompt may then repeat once per sample
        "sample": per_value(frame["sample"], _sample_index, dtype=np.int32) if "sample" in has
        else np.zeros(n, dtype=np.int32),
        "truncated": per_value(frame["finish_reason"], lineage.is_truncated, dtype=bool) if "finish_reason" in has
        else np.zeros(n, dtype=bool),
        "has_finish": np.full(n, "finish_reason" in has),
        "kinds": per_value(frame["refusal_kind"], lambda v: str(v).strip().lower()) if "refusal_kind" in has else None,
    }


def _read_file(frame, path: str, label: str, model: str | None, default_model: str | None, file_id: int,
               codes: dict[str, Codes], examples_per_cell: int) -> tuple[dict, list, list]:
    """One input's provenance entry, its verdict rows ((columns, is a judge file's keyword copy)
    per verdict it holds) and its example rows."""
    meta = read_meta(path)
    n, shared = len(frame), _shared_columns(frame, path, model, default_model, codes)
    kinds = shared.pop("kinds")
    entry = {"file": path, "name": file_name(path), "set": label, "rows": n,
             "models": sorted(codes["model"].names[c] for c in np.unique(shared["model"])), "verdicts": [],
             "meta": meta, "refusal_kind": kinds is not None, "finish_reason": "finish_reason" in names(frame),
             "lineage": lineage.summarise(path),
             # the file's own model column (a MODEL= name replaces it in the report): whose keyword rules decided
             "column_models": sorted({str(u).strip() for u in distinct(frame["model"])[1] if u is not None} - {""})
             if "model" in names(frame) else []}
    parts, shown = [], []
    none = np.full(n, NONE, dtype=np.int8)
    sure, check = cascade_columns(frame)
    for method, origin, judge, status, rej in verdict_columns(frame, path, meta_judge(meta)):
        with_kind = kinds is not None and method == KEYWORD  # refusal_kind belongs to the keyword matcher's verdict
        cascade = sure is not None and method == JUDGE
        part = {**shared, "set": np.full(n, codes["set"].code(label), dtype=np.int16),
                "method": np.full(n, codes["method"].code(method), dtype=np.int8),
                "judge": np.full(n, codes["judge"].code(judge), dtype=np.int16) if isinstance(judge, str)
                else codes["judge"].encode(judge).astype(np.int16),
                "origin": np.full(n, ORIGIN_RANK[origin], dtype=np.int8), "file": np.full(n, file_id, dtype=np.int16),
                "status": status, "rejected": np.nan_to_num(rej, nan=0.0).astype(np.int8),
                "partial": (kinds == PARTIAL) if with_kind else np.zeros(n, dtype=bool),
                "has_kind": np.full(n, with_kind),
                "sure": sure if cascade else none, "check": check if cascade else none}
        part = {c: part[c] for c in ROW_TYPES}
        copy = origin == "judge" and method == KEYWORD
        if copy:  # the response tells two judge files' copies of one stage-4 output apart from a rerun
            part["response"] = prompt_hash(frame["response"]) if "response" in names(frame) else \
                prompt_hash(np.full(n, "", dtype=object))
        parts.append((part, copy))
        judges = [judge] if isinstance(judge, str) else pd.unique(judge).tolist()
        entry["verdicts"].append({"method": method, "origin": origin, "judges": sorted(j for j in judges if j)})
        if examples_per_cell > 0 and not copy:
            shown.append(_examples(frame, part, kinds, method, judge, codes, label, examples_per_cell, path))
    return entry, parts, shown


def _examples(frame, part, kinds, method, judge, codes, label, n, path) -> pd.DataFrame:
    """Up to ``n`` refusals and ``n`` answers per model and category, picked by prompt hash (stable);
    only their cells are taken as text."""
    scored = np.flatnonzero(part["status"] == SCORED)
    model = part["model"][scored].astype(np.int64)
    category = part["category"][scored].astype(np.int64)
    cell = (model * 65536 + category) * 2 + part["rejected"][scored]
    rows = scored[first_per_cell(cell, part["prompt"][scored], n)]
    named = lambda kind, values: np.asarray(codes[kind].names, dtype=object)[values]  # noqa: E731 (a one-line helper used just below)
    has = set(names(frame))
    text = lambda column: texts(frame[column], rows) if column in has else [""] * len(rows)  # noqa: E731 (as above)
    return pd.DataFrame({
        "set": label, "model": named("model", part["model"][rows]), "method": method,
        "judge": judge if isinstance(judge, str) else judge[rows],
        "category": named("category", part["category"][rows]),
        "prompt": text("prompt"), "response": text("response"),
        "rejected": part["rejected"][rows].astype(bool),
        "kind": kinds[rows] if kinds is not None and method == KEYWORD else "",
        "answer_category": text("answer_category") if "answer_category" in has else "",
        "file": file_name(path),
    }, columns=EXAMPLE_COLUMNS)


def first_per_cell(cell: np.ndarray, key: np.ndarray, n: int) -> np.ndarray:
    """Positions of the ``n`` smallest ``key`` values in each ``cell`` (equal keys in position
    order), ordered by cell, then key. Two sorts of the whole column (the key's, then the cells'
    small codes'), then one of the few rows picked: a fraction of a lexsort's time."""
    order = np.argsort(key)
    if len(key) > 1 and (key[order][1:] == key[order][:-1]).any():
        order = np.argsort(key, kind="stable")  # a repeated key (samples): ties in position order
    codes = pd.factorize(cell[order])[0]
    codes = codes.astype(np.int16 if len(codes) and codes.max() < 2**15 else np.int32)
    by_cell = np.argsort(codes, kind="stable")  # a radix sort for small codes; key order kept within a cell
    grouped = codes[by_cell]
    starts = np.flatnonzero(np.r_[True, grouped[1:] != grouped[:-1]])
    rank = np.empty(len(codes), dtype=np.int64)
    rank[by_cell] = np.arange(len(grouped)) - np.repeat(starts, np.diff(np.r_[starts, len(grouped)]))
    picked = np.sort(order[rank < n])
    return picked[np.lexsort((key[picked], cell[picked]))]


def _sample_index(value) -> int:
    """A ``sample`` cell as an int (empty: 0); -1 for anything else, which never pairs."""
    text = str(value).strip()
    if not text:
        return 0
    try:
        return int(float(text))
    except ValueError:
        return -1


def _drop_repeated_copies(copies: pd.DataFrame) -> pd.DataFrame:
    """Keyword verdicts carried by judge files, each once.

    Two judge files made from the same stage-4 output carry the same keyword verdicts: a copy
    equal to one from an earlier file (same prompt, response and verdict) is dropped; a repeat
    inside one file is kept, so the duplicate check sees it.
    """
    k = ["set", "model", "prompt", "sample", "response", "status", "rejected"]
    across = copies.duplicated(subset=k) & ~copies.duplicated(subset=k + ["file"])
    return copies[~across.to_numpy()].drop(columns="response")


def _prefer_keyword_origin(data: pd.DataFrame, codes: dict[str, Codes]) -> pd.DataFrame:
    """One source of keyword verdicts per set and model: a re-score, else the alignment file,
    else the copy in judge files."""
    if data.empty or KEYWORD not in codes["method"].index:
        return data
    keyword = (data["method"] == codes["method"].index[KEYWORD]).to_numpy()
    if len(np.unique(data["origin"].to_numpy()[keyword])) < 2:
        return data
    kw = data.loc[keyword, ["set", "model", "origin"]]
    best = kw.groupby(["set", "model"], sort=False)["origin"].transform("min")
    drop = np.zeros(len(data), dtype=bool)
    drop[np.flatnonzero(keyword)[(kw["origin"] != best).to_numpy()]] = True
    return data[~drop].reset_index(drop=True) if drop.any() else data


def group_ids(data: pd.DataFrame, keys: list[str]) -> tuple[np.ndarray, pd.DataFrame]:
    """A group number per row and the groups' key values (row i = group i).

    Groups are numbered in order of first appearance (as ``groupby(sort=False).ngroup()``). The
    key columns are small non-negative codes: folded into one int64 (mixed radix), one
    ``factorize`` numbers the groups several times faster than a multi-key groupby.
    """
    columns = [data[k].to_numpy() for k in keys]
    if len(data) and all(c.dtype.kind in "iub" for c in columns):
        lows = [int(c.min()) for c in columns]
        radix = [int(c.max()) - low + 1 for c, low in zip(columns, lows)]
        if min(lows) >= 0 and math.prod(radix) < 2**62:
            folded = np.zeros(len(data), dtype=np.int64)
            for c, r, low in zip(columns, radix, lows):
                folded = folded * r + (c.astype(np.int64) - low)
            gid, uniques = pd.factorize(folded, sort=False)
            out = {}
            for k, c, r, low in zip(reversed(keys), reversed(columns), reversed(radix), reversed(lows)):
                out[k] = (uniques % r + low).astype(c.dtype)
                uniques = uniques // r
            return gid.astype(np.int64), pd.DataFrame({k: out[k] for k in keys})
    gid = data.groupby(keys, sort=False).ngroup().to_numpy()
    _, first = np.unique(gid, return_index=True)
    return gid, data[keys].iloc[first].reset_index(drop=True)


def check_duplicates(data: pd.DataFrame, files: list[str], codes: dict[str, Codes]) -> tuple[np.ndarray, pd.DataFrame]:
    """``UsageError`` naming the files when one prompt appears twice in one (set, model, method, judge) group.

    Returns the group number of each row and the groups' keys (see ``group_ids``).
    """
    if data.empty:
        return np.zeros(0, dtype=np.int64), pd.DataFrame(columns=GROUP_KEYS)
    gid, groups = group_ids(data, GROUP_KEYS)
    prompt = data["prompt"].to_numpy()
    if "sample" in data.columns and data["sample"].any():  # one row per prompt and sample
        prompt = prompt ^ (data["sample"].to_numpy().astype(np.uint64) * np.uint64(0xC2B2AE3D27D4EB4F))
    # (group, prompt) folded into 64 bits and sorted finds the candidates (a sort is faster and
    # lighter than a hash table here); the exact check below runs on them only (a fold collision
    # cannot raise a false error).
    all_gid = gid
    folded = prompt ^ (gid.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15))
    ordered = np.sort(folded)
    repeated = ordered[1:][ordered[1:] == ordered[:-1]]
    del ordered
    if not len(repeated):
        return all_gid, groups
    candidates = np.flatnonzero(np.isin(folded, repeated))
    data, gid, prompt = data.iloc[candidates], gid[candidates], prompt[candidates]
    order = np.lexsort((prompt, gid))
    same = (prompt[order][1:] == prompt[order][:-1]) & (gid[order][1:] == gid[order][:-1])
    if not same.any():
        return all_gid, groups
    rows = np.union1d(order[1:][same], order[:-1][same])
    first = groups.iloc[gid[rows[0]]]
    in_group = rows[gid[rows] == gid[rows[0]]]
    names = [files[i] for i in sorted(set(data["file"].to_numpy()[in_group]))]
    judge = codes["judge"].names[first["judge"]]
    set_name, model = codes["set"].names[first["set"]], codes["model"].names[first["model"]]
    raise UsageError(
        f"the same prompt appears more than once for set {set_name}, model "
        f"{model}, {codes['method'].names[first['method']]} verdicts"
        f"{' by ' + judge if judge else ''} ({int(same[gid[order][1:] == gid[rows[0]]].sum())} repeats) in: "
        f"{', '.join(names)}; give each prompt once per model, set and judge"
        + (" (keyword verdicts carried by judge files: name their stage-4 output too, and its verdicts count instead)"
           if codes["method"].names[first["method"]] == KEYWORD else "")
        + (_name_runs_apart(set_name, model, names) if len(names) > 1 else ""))


def _name_runs_apart(set_name: str, model: str, names: list[str]) -> str:
    """How to report two runs of one model (say with and without a system prompt) side by side."""
    short = re.sub(r"[^A-Za-z0-9._+-]+", "-", model.split("/")[-1]).strip("-") or "model"
    example = " ".join(f"'{set_name}:{short}-{chr(97 + i)}={name}'" for i, name in enumerate(names[:2]))
    return (f". If these are separate runs of {model} (e.g. with and without a system prompt), name each "
            f"as its own model with SET:MODEL=PATH: {example}")
