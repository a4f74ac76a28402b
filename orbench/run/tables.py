"""Reading input tables and writing output tables: the one CSV reader and the one output-path rule.

Inputs may be any path or URL pandas reads: CSV (the default), JSON Lines (``.jsonl``) and
Parquet (``.parquet``), including ``hf://datasets/...`` paths when ``huggingface_hub`` is installed.
Every value is read as text, so a prompt such as ``NA`` or ``1e5`` survives a round trip unchanged.
Outputs are UTF-8 CSV written atomically (a temporary file beside the target, then a rename), so
a crash never leaves a half-written output.
"""

from __future__ import annotations

import csv
import difflib
import io
import logging
import math
import os
import tempfile
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from orbench.benchmark.sets import resolve_set
from orbench.llm.errors import UsageError
from orbench.llm.models import slug

logger = logging.getLogger(__name__)


def did_you_mean(name: str, choices: Sequence[str], cutoff: float = 0.6) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices`` to ``name`` (``difflib``, case
    ignored), or ``''`` when none is close."""
    lowered = {str(c).lower(): str(c) for c in choices}
    found = difflib.get_close_matches(str(name).lower(), list(lowered), n=1, cutoff=cutoff)
    return f" (did you mean {lowered[found[0]]!r}?)" if found else ""


def _is_url(path: str) -> bool:
    return "://" in path


#: Separators a CSV file may use besides the comma; a file is read with the one its header uses.
SEPARATORS = (",", ";", "\t", "|")
_XLS = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # OLE2: .xls (and other old Office files)
_ZIP = b"PK\x03\x04"


def not_found_hint(name: str) -> str:
    """What a missing input was probably meant to be: a bundled set name, or a file beside it."""
    from orbench.benchmark.sets import SET_NAMES

    hint = did_you_mean(name.removesuffix(".csv"), SET_NAMES, cutoff=0.8)
    if hint:
        return hint[:-2] + ", a bundled set name?)"
    folder = Path(name).parent
    try:
        siblings = [p.name for p in folder.iterdir() if p.is_file()] if folder.is_dir() else []
    except OSError:
        siblings = []
    hint = did_you_mean(Path(name).name, siblings, cutoff=0.75)
    return hint[:-2] + " in the same folder?)" if hint else ""


def check_not_spreadsheet(path: Path, what: str) -> None:
    """``UsageError`` when ``path`` is an Excel workbook (recognised by its bytes, not its name)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(8)
    except OSError:
        return
    excel = head == _XLS
    if head.startswith(_ZIP):
        import zipfile

        try:
            with zipfile.ZipFile(path) as archive:
                excel = any(n.startswith("xl/") for n in archive.namelist())
        except (OSError, zipfile.BadZipFile):
            excel = False
    if excel:
        raise UsageError(f"{what} {path} is an Excel workbook, not a CSV file: open it in your spreadsheet "
                         f"program and export it as CSV (File > Save As > 'CSV UTF-8'), then pass the .csv")


def sniff_separator(path: Path) -> str:
    """The separator the header line of a CSV file uses: a comma unless the header has none and
    has one of ``;``, tab or ``|`` (quoted text is skipped)."""
    try:
        with open(path, encoding="utf-8", errors="replace", newline="") as handle:
            header = handle.readline()
    except OSError:
        return ","
    counts = dict.fromkeys(SEPARATORS, 0)
    quoted = False
    for ch in header:
        if ch == '"':
            quoted = not quoted
        elif not quoted and ch in counts:
            counts[ch] += 1
    if counts[","]:
        return ","
    best = max(SEPARATORS[1:], key=lambda sep: counts[sep])
    return best if counts[best] else ","


def missing_columns_text(what: str, name: str, missing: Sequence[str], have: Sequence[str]) -> str:
    """``... has no column 'x' (did you mean 'X'?) (it has: ...)``: the one wording of a missing column."""
    hints = "".join(did_you_mean(c, have) for c in missing[:1])
    return (f"{what} {name} has no column {', '.join(repr(c) for c in missing)}{hints} "
            f"(it has: {', '.join(map(str, have))})")


def resolve_input(path: str | os.PathLike) -> str:
    """The file or URL an input names: an existing path as it is, else a set name's file
    (``or-bench-hard-1k`` -> the bundled CSV), else the text unchanged."""
    name = str(path)
    return name if Path(name).exists() else (resolve_set(name) or name)


#: A local CSV up to this size is read with pandas' C parser, a larger one with pyarrow. pyarrow's
#: cost per call is fixed (its thread pool, the conversion of each column to pandas: a few ms) and
#: its threads only help past one of its 1 MiB blocks, while the C parser's cost grows with the
#: cells; a quarter of a block stays below the point where the two meet for short cells and long
#: replies alike (``bench/csv_engine_size.py`` prints both by size).
SMALL_CSV = 1 << 18


def _small_local(path: str | os.PathLike) -> bool:
    """A local file of at most :data:`SMALL_CSV` bytes."""
    if _is_url(str(path)):
        return False
    try:
        return os.path.getsize(path) <= SMALL_CSV
    except (OSError, TypeError, ValueError):
        return False


def read_csv_text(path: str | os.PathLike, sep: str = ",", columns=None) -> pd.DataFrame:
    """A CSV as text cells (empty cells ""), only ``columns`` when given (names as in the
    header, or a test of a name). A file larger than :data:`SMALL_CSV` (and a URL) is read with
    pyarrow (columnar, multi-threaded) when it is installed; a smaller file, a file pyarrow
    refuses and any file when pyarrow is not installed with pandas' own parser, so the cells and
    the error messages are the same either way."""
    kwargs = {"dtype": str, "keep_default_na": False, "encoding": "utf-8", "sep": sep}
    if callable(columns):
        header = pd.read_csv(path, nrows=0, **kwargs).columns
        columns = [c for c in header if columns(c)]
    if columns is not None:
        kwargs["usecols"] = list(columns)
    if _small_local(path):
        return pd.read_csv(path, **kwargs)
    try:
        import pyarrow  # noqa: F401 - only whether it is installed
    except ImportError:
        return pd.read_csv(path, **kwargs)
    try:
        return pd.read_csv(path, engine="pyarrow", **kwargs)
    except Exception as exc:  # noqa: BLE001 - pandas' parser reads it or gives the one-line message
        logger.debug("pyarrow could not read %s (%s: %s); reading it with pandas' parser", path,
                     type(exc).__name__, exc)
        return pd.read_csv(path, **kwargs)


def read_csv_arrow(path: str | os.PathLike, columns: Callable[[str], bool], binary: Collection[str] = (),
                   threads: bool = True):
    """The columns of a local CSV whose name (stripped) passes ``columns``, as a ``pyarrow.Table``
    of text cells named by the stripped names; the ``binary`` ones as bytes, neither checked nor
    decoded (a long reply column costs little when only a few of its cells are ever shown).
    Cells may hold line breaks (quoted, as replies do). None when pyarrow is not installed or
    refuses the file, or the header repeats a name: read it with :func:`read_csv_text` then.
    ``threads=False`` parses on the calling thread only (a caller reading one file while it works
    on the previous one keeps the other core for that work)."""
    try:
        import pyarrow as pa
        from pyarrow import csv as pa_csv
    except ImportError:
        return None
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            header = next(csv.reader(fh), None)
    except (OSError, UnicodeDecodeError, csv.Error):
        return None
    names = [c for c in header or [] if columns(c.strip())]
    stripped = [c.strip() for c in names]
    if not names or len(set(header)) != len(header) or len(set(stripped)) != len(stripped):
        return None
    types = {c: pa.binary() if c.strip() in binary else pa.string() for c in names}
    try:
        table = pa_csv.read_csv(path, read_options=pa_csv.ReadOptions(use_threads=threads),
                                parse_options=pa_csv.ParseOptions(newlines_in_values=True),
                                convert_options=pa_csv.ConvertOptions(include_columns=names, column_types=types))
    except (pa.ArrowException, OSError, ValueError):
        return None
    return table.rename_columns(stripped)


def read_table(path: str | os.PathLike, needs: Sequence[str] = (), what: str = "input file",
               sep: str | None = None) -> pd.DataFrame:
    """Read ``path`` as a table of strings; ``UsageError`` (one line, naming the file) on any problem.

    ``needs`` lists the columns that must be present (a missing one is named with the closest
    column the file has). A set name (``or-bench-hard-1k``, ``or-bench-toxic``, ``or-bench-80k``)
    reads that set (``orbench.benchmark.datasets``); a name that is almost one says so. An Excel workbook is
    recognised by its bytes and refused with how to export it. A local CSV is read with ``sep``,
    else with the separator its header uses (``sniff_separator``: ``;``-separated files from a
    spreadsheet in a European locale read as they are).
    """
    name = resolve_input(path)
    local_sep = sep or ","
    if not _is_url(name):
        p = Path(name)
        if not p.exists():
            raise UsageError(f"{what} not found: {name}{not_found_hint(name)}")
        if p.is_dir():
            raise UsageError(f"{what} is a folder, not a file: {name}")
        if p.stat().st_size == 0:
            raise UsageError(f"{what} is empty: {name}")
        check_not_spreadsheet(p, what)
        local_sep = sep or sniff_separator(p)
    lower = name.lower()
    try:
        if lower.endswith((".jsonl", ".jsonl.gz")):
            frame = pd.read_json(name, lines=True, dtype=False)
            frame = frame.fillna("").astype(str)
        elif lower.endswith(".parquet"):
            frame = pd.read_parquet(name)
            frame = frame.fillna("").astype(str)
        else:
            frame = read_csv_text(name, sep=local_sep)
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{what} {name} is not UTF-8 text (bad byte at position {exc.start}); re-save it as UTF-8"
        ) from None
    except pd.errors.EmptyDataError:
        raise UsageError(f"{what} has no header row: {name}") from None
    except pd.errors.ParserError as exc:
        first = str(exc).strip().splitlines()[-1] if str(exc).strip() else "parse error"
        raise UsageError(f"cannot parse {what} {name} as {_sep_name(local_sep)}-separated: {first}; if it "
                         f"uses another separator, pass it with --sep (e.g. --sep ';')") from None
    except ImportError as exc:
        if lower.startswith("hf://"):
            raise UsageError(f"reading {name} needs huggingface_hub: pip install -e '.[hub]'") from None
        raise UsageError(f"reading {name} needs an extra package: {str(exc).splitlines()[0]}") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read {what} {name}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    frame.columns = [str(c).strip() for c in frame.columns]
    logger.debug("read %s: %d rows, columns %s", name, len(frame), list(frame.columns))
    if frame.empty:
        raise UsageError(f"{what} {name} has a header but no rows")
    missing = [c for c in needs if c not in frame.columns]
    if missing:
        raise UsageError(missing_columns_text(what, name, missing, list(frame.columns)))
    return frame


def row_dicts(frame: pd.DataFrame) -> list[dict]:
    """``frame.to_dict("records")``, the same values and types, in a fraction of its time.

    pandas builds a Series for every column and steps through each cell by cell (a wide report
    table of a few rows took 4-7 ms, and a report reads its tables that way some 60 times); here the
    table becomes one object array at once. As ``to_dict`` does, a missing cell of a column whose
    missing value is ``pd.NA`` (Int64, boolean, string[python]) is None and numpy scalars in such
    and object columns are Python scalars."""
    values = frame.to_numpy(dtype=object)
    for i, dtype in enumerate(frame.dtypes):
        na_column = getattr(dtype, "na_value", None) is pd.NA
        if na_column or dtype == np.dtype(object):
            column = values[:, i]
            if na_column:
                column[pd.isna(column)] = None
            values[:, i] = [v.item() if isinstance(v, np.generic) else v for v in column]
    columns = list(frame.columns)
    return [dict(zip(columns, row)) for row in values.tolist()]


def text_cells(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` as :func:`read_table` reads the CSV it would be written as: every cell text, an
    empty cell ``""`` (True -> ``"True"``, 2 -> ``"2"``, None -> ``""``)."""
    buffer = io.StringIO()
    frame.to_csv(buffer, index=False)
    buffer.seek(0)
    return pd.read_csv(buffer, dtype=str, keep_default_na=False)


def _sep_name(sep: str) -> str:
    return {"\t": "tab", ",": "comma", ";": "';'"}.get(sep, repr(sep))


_TRUE = {"true", "1", "yes", "t", "y"}
_FALSE = {"false", "0", "no", "f", "n"}


def parse_bool(value: object) -> bool | None:
    """A table cell as a bool: ``"True"``/``"False"`` (and 1/0, yes/no); empty or anything else is ``None``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    return None


def _read_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _read_umask()  # read once, at import: os.umask can only be read by setting it


def apply_umask(path: str | os.PathLike) -> None:
    """Give a file made by ``mkstemp`` (always 0600) the mode a plain ``open`` would have given it."""
    os.chmod(path, 0o666 & ~_UMASK)


def write_text_atomic(text: str, path: str | os.PathLike) -> None:
    """Write ``text`` (UTF-8) to ``path`` through a unique temporary file and an atomic rename."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
        apply_umask(tmp)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_csv_atomic(frame: pd.DataFrame, path: str | os.PathLike) -> None:
    """Write ``frame`` as UTF-8 CSV to ``path`` through a temporary file and an atomic rename.

    The file gets the mode the process's umask gives new files (not ``mkstemp``'s 0600).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            frame.to_csv(handle, index=False)
        apply_umask(tmp)
        os.replace(tmp, target)
        logger.debug("wrote %s: %d rows", target, len(frame))
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def file_name(path: str | os.PathLike) -> str:
    """The last component of a path or URL, without its folders."""
    return str(path).rstrip("/").rsplit("/", 1)[-1]


def input_stem(path: str | os.PathLike) -> str:
    """The input's file name without folders and extension (works for URLs too)."""
    name = file_name(path)
    for ext in (".csv", ".jsonl", ".jsonl.gz", ".parquet", ".json"):
        if name.lower().endswith(ext):
            return name[: -len(ext)]
    return Path(name).stem


def default_output_path(input_path: str | os.PathLike, suffix: str, model: str | None = None) -> Path:
    """The one default-output rule of every stage: ``./<input stem>[_<model>]_<suffix>.csv``.

    Always in the current directory, never in a sub-folder, named from the input's stem, the
    model(s) where one input is typically run through several (moderators, models under test,
    judges), and the stage: ``harmful_prompts.csv`` (generate, stem = the category),
    ``harmful_prompts_rewrite.csv``, ``x_gpt4_moderated_prompt.csv``, ``x_openai_gpt-4o_alignment.csv``,
    ``x_openai_gpt-4o_alignment_gpt4_judged.csv``. ``model`` is made file-name-safe, so ids with
    ``/`` stay one file name. ``--output_file`` overrides it.
    """
    parts = [input_stem(input_path)]
    if model:
        parts.append(slug(model))
    parts.append(suffix)
    return Path.cwd() / ("_".join(p for p in parts if p) + ".csv")
