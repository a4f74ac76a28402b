"""Reading the report's inputs: naming them, telling their prompt set, and turning rows into verdicts.

Each input file is read once, with only the columns the report uses, and reduced at once to a
compact table of integer codes (prompt hash, set, model, method, judge, category, status,
verdict), so 30 models x 80K rows fit in little memory. A few example rows per model, category
and verdict keep their text for the HTML report. ``<file>.meta.json`` beside an input (the
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

from orbench.analysis import lineage
from orbench.analysis.lineage import read_meta
from orbench.datasets import EIGHTY_K, HARD_1K, SET_NAMES, TOXIC
from orbench.errors import UsageError
from orbench.sets import XSTEST_SAFE, XSTEST_UNSAFE
from orbench.tables import did_you_mean, file_name, input_stem, read_csv_text, read_table
from orbench.vocab import (
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
# REJECTED_BY_CLASS (orbench.vocab) is used only when a judge file has no is_rejected column at
# all; the judge's is_rejected wins.
# Origins of keyword verdicts, best first: a re-score (newest rules), the alignment file, the
# copy a judge file carries.
GROUP_KEYS = ["set", "model", "method", "judge"]
ORIGIN_RANK = {"rescore": 0, "alignment": 1, "judge": 2}
COLUMNS = {"prompt", "category", "model", "response", "is_rejected", "keyword_is_rejected",
           "answer_category", "error", "refusal_kind", "judge_model", "sample", "finish_reason"}


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

    def encode(self, values: pd.Series, blank: str | None = None) -> np.ndarray:
        """The code of each cell; with ``blank``, cells are stripped and empty ones become ``blank``."""
        codes, uniques = pd.factorize(values, sort=False)
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
    """The set the file's meta chain names (a sample drawn by ``python -m orbench.datasets``, or a
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

def read_results(path: str) -> pd.DataFrame:
    """The columns the report uses from one result file (every value as text)."""
    lower = path.lower()
    if "://" not in path and lower.endswith(".csv") and Path(path).is_file():
        try:
            frame = read_csv_text(path, columns=lambda c: str(c).strip() in COLUMNS)
            frame.columns = [str(c).strip() for c in frame.columns]
            if not frame.empty and "prompt" in frame.columns:
                return frame
        except Exception:  # noqa: BLE001 - the general reader below gives the one-line message
            pass
    frame = read_table(path, needs=("prompt",), what="result file")
    return frame[[c for c in frame.columns if c in COLUMNS]]


def per_value(series: pd.Series, func, dtype=object) -> np.ndarray:
    """``func`` applied to each distinct value once (columns such as ``error`` or ``model`` repeat a lot)."""
    codes, uniques = pd.factorize(series, sort=False)
    table = np.array([func(u) for u in uniques] + [func("")], dtype=dtype)
    return table[codes]  # code -1 (a missing cell) takes func("")


def _truth(value) -> float:
    text = str(value).strip().lower()
    return 1.0 if text in ("true", "1", "yes", "t", "y") else 0.0 if text in ("false", "0", "no", "f", "n") else np.nan


def _bools(series: pd.Series) -> np.ndarray:
    """Text cells -> 1.0 (true), 0.0 (false) or NaN (empty or anything else)."""
    return per_value(series, _truth, dtype=float)


def _status(err: np.ndarray, rej: np.ndarray) -> np.ndarray:
    status = np.where(np.isnan(rej), NO_VERDICT, SCORED).astype(np.int8)
    status[err] = ERROR
    return status


def verdict_columns(frame: pd.DataFrame, path: str, judge_name: str) -> list[tuple]:
    """(method, origin, judge, status codes, rejected 1/0/NaN) for each verdict a file holds.

    ``judge`` is one name for the whole file (a str) or one per row (an array).
    """
    n, has = len(frame), set(frame.columns)
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


def _hash(series: pd.Series) -> np.ndarray:
    """A 64-bit hash per cell (the text as written): the report compares prompts by it."""
    return pd.util.hash_pandas_object(series, index=False, categorize=False).to_numpy()


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


def _prefetched(paths: list[str]):
    """The files' tables in order; the next file is read in a second thread meanwhile (the parser
    releases the GIL), at most one ahead so memory stays at two files."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        ahead = pool.submit(read_results, paths[0]) if paths else None
        for i in range(len(paths)):
            frame = ahead.result()
            ahead = pool.submit(read_results, paths[i + 1]) if i + 1 < len(paths) else None
            yield frame
            del frame
            _release_arrow_memory()


def _release_arrow_memory() -> None:
    """Hand pyarrow's freed pages back to the system (its mimalloc pool otherwise keeps the
    buffers of every file read so far and the report's peak memory grows with the inputs)."""
    try:
        import pyarrow
    except ImportError:
        return
    pyarrow.default_memory_pool().release_unused()


def load(specs: Sequence[str], default_set: str | None, default_model: str | None,
         examples_per_cell: int = 3, custom_sets: Sequence[str] = ()) -> Inputs:
    """Read every input once into the compact verdict table (see the module docstring)."""
    codes = {k: Codes() for k in ("set", "model", "method", "judge", "category", "origin")}
    parts, copies, examples, provenance, files = [], [], [], [], []
    jobs, notes = resolve(specs, default_set, custom_sets)
    for (path, label, model), frame in zip(jobs, _prefetched([j[0] for j in jobs])):
        meta = read_meta(path)
        file_id = len(files)
        files.append(path)
        n = len(frame)
        if model:
            model_codes = np.full(n, codes["model"].code(model), dtype=np.int32)
        else:
            fallback = default_model or input_stem(path)
            model_codes = codes["model"].encode(frame["model"] if "model" in frame.columns else
                                                pd.Series("", index=frame.index), blank=fallback)
        category = frame["category"] if "category" in frame.columns else pd.Series("(none)", index=frame.index)
        cat_codes = codes["category"].encode(category, blank="(blank)")
        kinds = per_value(frame["refusal_kind"], lambda v: str(v).strip().lower()) \
            if "refusal_kind" in frame.columns else None
        has_finish = "finish_reason" in frame.columns
        truncated = per_value(frame["finish_reason"], lineage.is_truncated, dtype=bool) if has_finish \
            else np.zeros(n, dtype=bool)
        prompt_key = _hash(frame["prompt"])
        # stage 4 --samples: the sample index; a prompt may then repeat once per sample
        sample = per_value(frame["sample"], _sample_index, dtype=np.int32) if "sample" in frame.columns \
            else np.zeros(n, dtype=np.int32)
        response = frame["response"] if "response" in frame.columns else pd.Series("", index=frame.index)
        entry = {"file": path, "name": file_name(path), "set": label, "rows": n,
                 "models": sorted(codes["model"].names[c] for c in np.unique(model_codes)), "verdicts": [],
                 "meta": meta, "refusal_kind": kinds is not None, "finish_reason": has_finish,
                 "lineage": lineage.summarise(path)}
        for method, origin, judge, status, rej in verdict_columns(frame, path, meta_judge(meta)):
            # refusal_kind belongs to the keyword matcher's verdict
            with_kind = kinds is not None and method == KEYWORD
            part = pd.DataFrame({
                "set": np.full(n, codes["set"].code(label), dtype=np.int16),
                "model": model_codes,
                "method": np.full(n, codes["method"].code(method), dtype=np.int8),
                "judge": np.full(n, codes["judge"].code(judge), dtype=np.int16) if isinstance(judge, str)
                else codes["judge"].encode(pd.Series(judge)).astype(np.int16),
                "category": cat_codes,
                "origin": np.full(n, ORIGIN_RANK[origin], dtype=np.int8),
                "file": np.full(n, file_id, dtype=np.int16),
                "prompt": prompt_key,
                "status": status,
                "rejected": np.nan_to_num(rej, nan=0.0).astype(np.int8),
                "partial": (kinds == PARTIAL) if with_kind else np.zeros(n, dtype=bool),
                "has_kind": np.full(n, with_kind),
                "sample": sample,
                "truncated": truncated,
                "has_finish": np.full(n, has_finish),
            })
            if origin == "judge" and method == KEYWORD:
                copies.append(part.assign(response=_hash(response)))
            else:
                parts.append(part)
            judges = [judge] if isinstance(judge, str) else pd.unique(judge).tolist()
            entry["verdicts"].append({"method": method, "origin": origin, "judges": sorted(j for j in judges if j)})
            if examples_per_cell > 0 and not (method == KEYWORD and origin == "judge"):
                examples.append(_examples(frame, part, response, kinds, method, judge, codes,
                                          label, examples_per_cell, path))
        provenance.append(entry)
    if copies:
        parts.append(_drop_repeated_copies(pd.concat(copies, ignore_index=True)))
    data = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    del parts, copies
    data = _prefer_keyword_origin(data, codes)
    gid, groups = check_duplicates(data, files, codes)
    if not data.empty:
        data["group"] = gid.astype(np.int32)
    ex = pd.concat(examples, ignore_index=True) if examples else pd.DataFrame(
        columns=["set", "model", "method", "judge", "category", "prompt", "response", "rejected",
                 "kind", "answer_category", "file"])
    return Inputs(data, ex, provenance, files, codes, notes, groups)


def _examples(frame, part, response, kinds, method, judge, codes, label, n, path) -> pd.DataFrame:
    """Up to ``n`` refusals and ``n`` answers per model and category, picked by prompt hash (stable)."""
    scored = np.flatnonzero(part["status"].to_numpy() == SCORED)
    model = part["model"].to_numpy()[scored].astype(np.int64)
    category = part["category"].to_numpy()[scored].astype(np.int64)
    cell = (model * 65536 + category) * 2 + part["rejected"].to_numpy()[scored]
    order = np.lexsort((part["prompt"].to_numpy()[scored], cell))
    cell = cell[order]
    starts = np.flatnonzero(np.r_[True, cell[1:] != cell[:-1]])
    rank = np.arange(len(cell)) - np.repeat(starts, np.diff(np.r_[starts, len(cell)]))
    rows = scored[order[rank < n]]
    names = lambda kind, values: np.asarray(codes[kind].names, dtype=object)[values]  # noqa: E731 (a one-line helper used just below)
    return pd.DataFrame({
        "set": label, "model": names("model", part["model"].to_numpy()[rows]), "method": method,
        "judge": judge if isinstance(judge, str) else judge[rows],
        "category": names("category", part["category"].to_numpy()[rows]),
        # pick the rows before converting: to_numpy() on a whole Arrow string column is costly
        "prompt": frame["prompt"].iloc[rows].to_numpy(), "response": response.iloc[rows].to_numpy(),
        "rejected": part["rejected"].to_numpy()[rows].astype(bool),
        "kind": kinds[rows] if kinds is not None and method == KEYWORD else "",
        "answer_category": frame["answer_category"].iloc[rows].to_numpy() if "answer_category" in frame.columns else "",
        "file": file_name(path),
    })


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
            for c, r in zip(columns, radix):
                folded = folded * r + c.astype(np.int64)
            gid, uniques = pd.factorize(folded, sort=False)
            out = {}
            for k, c, r in zip(reversed(keys), reversed(columns), reversed(radix)):
                out[k] = (uniques % r).astype(c.dtype)
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
    # A hash table over (group, prompt) folded into 64 bits finds the candidates in one pass; the
    # exact check below runs on them only (a fold collision cannot raise a false error).
    all_gid = gid
    folded = prompt ^ (gid.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15))
    candidates = np.flatnonzero(pd.Series(folded).duplicated(keep=False).to_numpy())
    if not len(candidates):
        return all_gid, groups
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
