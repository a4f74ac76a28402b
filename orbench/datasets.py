"""The named prompt sets: bundled copies of OR-Bench's Hard-1K and Toxic and of XSTest's safe and
unsafe prompts, and the hub path of OR-Bench-80K.

A set name works wherever an input path does (``--input_file or-bench-hard-1k``); the report
uses the same names to tell which set a file holds. The bundled files are the published sets,
CC-BY-4.0, with their attribution in ``orbench/data/ATTRIBUTION.md``. The names and paths are
defined in ``orbench.sets`` (which the table reader uses) and re-exported here, beside
``stratified_sample`` and the ``python -m orbench.datasets`` sampling command.
"""

from __future__ import annotations

from orbench.sets import (
    EIGHTY_K,
    HARD_1K,
    HUB_80K,
    PUBLISHED_RESULTS,
    SET_NAMES,
    TOXIC,
    data_path,
    published_results_path,
    resolve_set,
)

__all__ = ["EIGHTY_K", "HARD_1K", "HUB_80K", "PUBLISHED_RESULTS", "SET_NAMES", "TOXIC", "data_path",
           "published_results_path", "resolve_set", "stratified_sample", "main"]


def stratified_sample(frame, per_category: int, seed: int = 0):
    """``per_category`` rows of each category (all of a smaller one), drawn with ``seed``, in the
    input's row order. The same seed and input always give the same rows."""
    if "category" not in frame.columns:
        return frame.sample(n=min(per_category, len(frame)), random_state=seed).sort_index()
    parts = [group.sample(n=min(per_category, len(group)), random_state=seed)
             for _, group in frame.groupby("category", sort=True)]
    import pandas as pd

    return pd.concat(parts).sort_index()


def main(argv=None) -> int:
    """``python -m orbench.datasets SET --per_category N [--seed S] --output FILE``: a seeded,
    category-stratified sample of a named set or any prompt file."""
    import argparse
    import sys

    from orbench.errors import UsageError
    from orbench.tables import read_table, write_csv_atomic

    parser = argparse.ArgumentParser(
        prog="python -m orbench.datasets",
        description="Write a seeded, category-stratified sample of a prompt set (a set name such as "
                    "or-bench-hard-1k, or a path).")
    parser.add_argument("source", help=f"a set name ({', '.join(SET_NAMES)}) or a CSV path")
    parser.add_argument("--per_category", type=int, required=True, help="rows per category")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    parser.add_argument("--output", required=True, help="where to write the sample CSV")
    args = parser.parse_args(argv)
    try:
        if args.per_category < 1:
            raise UsageError(f"--per_category must be at least 1, got {args.per_category}")
        frame = read_table(args.source, needs=["prompt"])
        write_csv_atomic(stratified_sample(frame, args.per_category, args.seed), args.output)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
