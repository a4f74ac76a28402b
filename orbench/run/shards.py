"""Shards for a cluster: ``--shard i/N`` runs a fixed 1/N of a stage's input rows; ``orbench-merge``
joins the N shard outputs into the output one run would have written.

**Which rows.** A row belongs to shard ``1 + h mod N``, ``h`` the first 8 bytes of the SHA-256 of
its key columns' values (the columns the runner keys a row by: ``Stage.key_columns``, else
``Stage.needs``). Premise: the choice must not depend on anything but the row itself, so it is
the same on every machine, on a rerun (resume), with ``--limit`` (which then takes the first rows
*of the shard*) and whatever the other settings; and two rows with the same key (asked once by the
runner) fall in the same shard. A cryptographic hash spreads any set of distinct keys evenly: each
shard gets N-th of the rows up to binomial noise (sd ``sqrt(n/N)``), with no tuning to the data.

**Merging** (``orbench.run.merge``, ``orbench-merge``). Each shard's run keeps its answers in its
progress file (``<output>.progress.jsonl``), keyed by the row key, which covers the stage's
settings and not the shard (``--shard`` is a run option, like ``--concurrency``: it changes no
row's result). ``orbench-merge`` checks that the
shards are one run's (same stage, settings, rules and input, shard numbers 1 to N each once, every
shard finished: its meta file written), writes their progress entries into the merged output's
progress file, and has the runner assemble the whole input from it, sending nothing: the stage's
own end step (``Stage.finish``: the rewriter's cross-file de-duplication, outcome counts) runs over
the whole output, so the merged file is, row for row, the file one run would have written. A row
that failed in its shard stays failed (``error`` says to rerun that shard); the merge's exit code
is then 1. The merged meta file lists the shards.

Stage 1 (``orbench-generate``) has no input rows to split: it does not shard (a cluster runs one
job per ``--category``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
from pathlib import Path

import pandas as pd

from orbench.run.stage import Stage

NOT_SHARDED = ("stage 1 (generate) does not shard: it has no input rows to split; on a cluster run one job "
               "per --category (each its own --output_file) and concatenate the outputs")


def parse_shard(text: str) -> tuple[int, int]:
    """``--shard i/N`` as ``(i, N)``, 1 <= i <= N (an argparse type)."""
    found = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
    if not found or not 1 <= int(found[1]) <= int(found[2]):
        raise argparse.ArgumentTypeError(f"expected i/N with 1 <= i <= N (e.g. 3/8), got {text!r}")
    return int(found[1]), int(found[2])


def shard_of(values, count: int) -> int:
    """The shard (1 to ``count``) of a row whose key columns hold ``values`` (module docstring)."""
    blob = json.dumps([str(v) for v in values], ensure_ascii=False).encode("utf-8")
    return 1 + int.from_bytes(hashlib.sha256(blob).digest()[:8], "big") % count


def key_columns(stage: Stage) -> list[str]:
    """The columns a row is keyed (and sharded) by."""
    return list(stage.key_columns or stage.needs)


def take(stage: Stage, table: pd.DataFrame, shard: tuple[int, int]) -> pd.DataFrame:
    """The rows of ``table`` in ``shard`` (``(i, N)``), in input order."""
    index, count = shard
    columns = key_columns(stage)
    records = table[columns].to_dict("records") if len(table) else []
    mine = [shard_of([r.get(c, "") for c in columns], count) == index for r in records]
    return table[mine].reset_index(drop=True) if len(table) else table


def shard_output(output: Path, shard: tuple[int, int]) -> Path:
    """The default output of shard ``i`` of ``N``: ``<stem>.shard-i-of-N<suffix>`` beside ``output``,
    so the shards of one run, written to a shared folder, never collide."""
    index, count = shard
    return output.with_name(f"{output.stem}.shard-{index}-of-{count}{output.suffix}")


def merged_output(output: Path) -> Path:
    """A shard's default output with the shard part taken out (the merge's default output)."""
    return output.with_name(re.sub(r"\.shard-\d+-of-\d+(?=\.[^.]*$|$)", "", output.name))


def meta_record(shard: tuple[int, int], rows: int, of_rows: int) -> dict:
    """What a shard's meta file records of its shard: the merge reads it."""
    return {"index": shard[0], "count": shard[1], "rows": rows, "of_rows": of_rows,
            "key": "sha256 of the key columns' values, first 8 bytes, mod count"}
