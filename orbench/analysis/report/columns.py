"""One result file's columns for the report, read columnar, and the few things done with them.

The report needs every row's short cells (prompt, model, category, the verdicts, finish_reason,
error) but the reply text only for the handful of rows it shows, and a hash of it for the keyword
verdicts a judge file carries. So a local CSV is read by pyarrow with only those columns and the
``response`` column as bytes, neither checked nor decoded as a whole
(:func:`orbench.run.tables.read_csv_arrow`); the cells shown are taken and decoded afterwards
(:func:`texts`). Without pyarrow, or for a file it refuses (or a URL, JSON Lines, Parquet), the
table is a DataFrame from pandas' parser. A column is then an Arrow array or a pandas Series:
every helper here takes either and gives the same values.
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from orbench.run.tables import read_csv_arrow, read_csv_text, read_table

logger = logging.getLogger(__name__)

#: The columns the report reads from a result file.
COLUMNS = frozenset({"prompt", "category", "model", "response", "is_rejected", "keyword_is_rejected",
                     "answer_category", "error", "refusal_kind", "judge_model", "sample", "finish_reason",
                     "sure_verdict", "cascade_sampled", "cascade_class"})
#: Read as bytes: the reply, shown for a few rows only.
BYTES = ("response",)


def read_results(path: str, threads: bool = True, columns: frozenset = COLUMNS):
    """The report's columns of one result file (those of them in ``columns``): a ``pyarrow.Table``
    or a DataFrame of text cells (``threads=False``: parsed on this thread only, see
    :func:`orbench.run.tables.read_csv_arrow`)."""
    if "://" not in path and path.lower().endswith(".csv"):
        table = read_csv_arrow(path, lambda c: c in columns, binary=BYTES, threads=threads)
        if table is not None and table.num_rows and "prompt" in table.column_names:
            return table
        try:
            frame = read_csv_text(path, columns=lambda c: str(c).strip() in columns)
            frame.columns = [str(c).strip() for c in frame.columns]
            if not frame.empty and "prompt" in frame.columns:
                return frame
        except Exception as exc:  # noqa: BLE001 - the general reader below gives the one-line message
            logger.debug("%s: the column reader failed (%s: %s); reading it whole", path, type(exc).__name__, exc)
    frame = read_table(path, needs=("prompt",), what="result file")
    return frame[[c for c in frame.columns if c in columns]]


def names(table) -> list[str]:
    """The table's column names."""
    return list(table.columns) if isinstance(table, pd.DataFrame) else list(table.column_names)


def _is_pandas(values) -> bool:
    return isinstance(values, (pd.Series, pd.Index, np.ndarray))


def distinct(values) -> tuple[np.ndarray, list]:
    """The code of each cell and the distinct cells, in order of first appearance (as
    ``pd.factorize(sort=False)``); a missing cell has code -1."""
    if _is_pandas(values):
        codes, uniques = pd.factorize(values, sort=False)
        return codes, list(uniques)
    import pyarrow.compute as pc

    uniques = pc.unique(values)
    codes = pc.index_in(values, value_set=uniques).fill_null(-1)
    return np.asarray(codes.to_numpy(zero_copy_only=False), dtype=np.int64), uniques.to_pylist()


def per_value(values, func, dtype=object) -> np.ndarray:
    """``func`` applied to each distinct cell once (columns such as ``error`` or ``model`` repeat a
    lot); a missing cell gets ``func("")``."""
    codes, uniques = distinct(values)
    table = np.empty(len(uniques) + 1, dtype=dtype)
    table[:] = [func(u) for u in uniques] + [func("")]
    return table[codes]  # code -1 takes the last entry


def objects(values) -> np.ndarray:
    """Every cell as a Python object (text, or bytes for a bytes column), in a numpy array."""
    if isinstance(values, (pd.Series, pd.Index)):
        return values.to_numpy(dtype=object)
    if isinstance(values, np.ndarray):
        return values.astype(object, copy=False)
    return values.to_numpy(zero_copy_only=False)


def prompt_hash(values) -> np.ndarray:
    """A 64-bit hash per cell of the text as written (bytes hash as their UTF-8 text would): the
    report, the comparisons and the audit compare prompts by it."""
    if not _is_pandas(values) and values.type in (_arrow().string(), _arrow().large_string()):
        values = values.cast(_arrow().binary() if values.type == _arrow().string() else _arrow().large_binary())
    return pd.util.hash_array(objects(values), categorize=False)  # bytes: twice as fast as text, same hash


def _arrow():
    import pyarrow

    return pyarrow


def texts(values, rows) -> list[str]:
    """The cells at ``rows`` as text (bytes decoded as UTF-8, a bad byte replaced; missing: '')."""
    rows = np.asarray(rows, dtype=np.int64)
    if _is_pandas(values):
        cells = pd.Series(values).iloc[rows].tolist()
    else:  # cell by cell: a take() over a chunked column would first copy the whole column
        cells = [values[int(r)].as_py() for r in rows]
    return [c.decode("utf-8", "replace") if isinstance(c, bytes) else "" if c is None or c != c else str(c)
            for c in cells]
