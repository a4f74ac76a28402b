"""CPU time of one read of a text-cell CSV, pandas' C parser against pyarrow, by file size.

``orbench.run.tables.read_csv_text`` reads a local file up to ``SMALL_CSV`` bytes with pandas' C
parser and a larger one with pyarrow (see its premise there: pyarrow's cost per call is fixed,
its cost per byte lower). This prints, for files of stage-output shape (12 short columns; and 5
columns holding a long reply each) from 16 KiB to 4 MiB, the CPU milliseconds of one read with
each engine (``time.process_time``: pyarrow's threads included), so the size where the two cross
can be checked against the threshold; ``nan``: pandas' pyarrow reader refused the file (it does not
allow a quoted line break across its blocks), and ``read_csv_text`` reads it with the C parser after
that failed try. Usage: ``python bench/csv_engine_size.py`` (about a minute).
"""

from __future__ import annotations

import math
import tempfile
import time
from pathlib import Path

import pandas as pd

from orbench.run.tables import SMALL_CSV

KWARGS = {"dtype": str, "keep_default_na": False, "encoding": "utf-8"}


def cpu_ms(path: Path, engine: str, budget: float = 0.4) -> float:
    """Mean CPU milliseconds of one ``pd.read_csv`` of ``path`` with ``engine``; NaN when it refuses the file."""
    try:
        pd.read_csv(path, engine=engine, **KWARGS)  # warm
    except pd.errors.ParserError:
        return math.nan
    start, runs = time.process_time(), 0
    while time.process_time() - start < budget:
        pd.read_csv(path, engine=engine, **KWARGS)
        runs += 1
    return (time.process_time() - start) / runs * 1e3


def frame(shape: str, rows: int) -> pd.DataFrame:
    if shape == "short":
        return pd.DataFrame({f"c{i}": [f"cell {i} {j} some words" for j in range(rows)] for i in range(12)})
    reply = "A reply, with commas and a line break\nas models write them. " * 12
    return pd.DataFrame({"prompt": [f"prompt {j}?" for j in range(rows)], "response": [reply] * rows,
                         "is_rejected": "False", "category": "privacy", "error": ""})


def main() -> None:
    print(f"SMALL_CSV = {SMALL_CSV} bytes")
    print(f"{'shape':6} {'rows':>7} {'KiB':>7} {'C ms':>7} {'arrow ms':>9} {'faster':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        for shape, row_bytes in (("short", 280), ("reply", 800)):
            for kib in (16, 64, 128, 256, 512, 1024, 4096):
                rows = max(1, kib * 1024 // row_bytes)
                path = Path(tmp) / f"{shape}{kib}.csv"
                frame(shape, rows).to_csv(path, index=False)
                c, arrow = cpu_ms(path, "c"), cpu_ms(path, "pyarrow")
                faster = "C" if not c >= arrow else "arrow"  # pyarrow refusing (NaN): the C parser reads it
                print(f"{shape:6} {rows:>7} {path.stat().st_size / 1024:>7.0f} {c:>7.2f} {arrow:>9.2f} {faster:>7}")


if __name__ == "__main__":
    main()
