"""The named prompt sets: bundled copies of OR-Bench's Hard-1K and Toxic and of XSTest's safe and
unsafe prompts, and the hub path of OR-Bench-80K.

A set name works wherever an input path does (``--input_file or-bench-hard-1k``); the report
uses the same names to tell which set a file holds. The bundled files are the published sets,
CC-BY-4.0, with their attribution in ``orbench/data/ATTRIBUTION.md``. The names and paths are
defined in ``orbench.benchmark.sets`` (which the table reader uses) and re-exported here, beside
``stratified_sample`` and the ``python -m orbench.benchmark.datasets`` sampling command.
"""

from __future__ import annotations

from orbench.benchmark.sets import (
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


def set_of(source: str) -> str | None:
    """The published set a source names (a set name, or the path of a bundled set), else None."""
    from pathlib import Path

    for name in SET_NAMES:
        path = resolve_set(name)
        if resolve_set(str(source)) == path or (
                "://" not in str(source) and path and "://" not in path
                and Path(str(source)).resolve() == Path(path).resolve()):
            return name
    return None


def sample_meta(source: str, output: str, per_category: int, seed: int, rows: int, input_rows: int,
                argv: list[str]) -> dict:
    """The provenance of a sample (``<output>.meta.json``): the report follows it back to the set."""
    from pathlib import Path

    from orbench.run.provenance import package_versions, sha256_file
    from orbench.run.tables import resolve_input

    path = resolve_input(source)
    if "://" not in str(path):
        path = str(Path(path).resolve())
    return {"stage": "sample", "set": set_of(source), "package_version": package_versions().get("orbench"),
            "command": ["python", "-m", "orbench.benchmark.datasets", *argv], "cwd": str(Path.cwd()),
            "settings": {"source": source, "per_category": per_category, "seed": seed},
            "input": {"path": path, "sha256": sha256_file(path) if "://" not in str(path) else None,
                      "rows": input_rows},
            "output": str(output), "counts": {"rows": rows}}


def main(argv=None) -> int:
    """:func:`sample_main` with the exit codes every script shares (``orbench.run.cli.entry_point``:
    3 and its traceback for a bug)."""
    from orbench.run.cli import entry_point

    return entry_point(sample_main)(argv)


def sample_main(argv=None) -> int:
    """``python -m orbench.benchmark.datasets SET --per_category N [--seed S] [--output FILE]``: a seeded,
    category-stratified sample of a named set or any prompt file, with its meta file (the set it
    was drawn from, so the report can tell the sample's set whatever its name)."""
    import sys
    from pathlib import Path

    from orbench.llm.errors import UsageError
    from orbench.run.cli import ArgumentParser
    from orbench.run.provenance import dumps, meta_path_for
    from orbench.run.tables import input_stem, read_table, write_csv_atomic, write_text_atomic

    parser = ArgumentParser(
        prog="python -m orbench.benchmark.datasets",
        description="Write a seeded, category-stratified sample of a prompt set (a set name such as "
                    "or-bench-hard-1k, or a path), and its meta file (<output>.meta.json), which says "
                    "which set it was drawn from: the report then knows the sample's set whatever its name.")
    parser.add_argument("source", help=f"a set name ({', '.join(SET_NAMES)}) or a CSV path")
    parser.add_argument("--per_category", type=int, required=True, help="rows per category")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    parser.add_argument("--output", default=None,
                        help="where to write the sample CSV (default: ./<set or file stem>_sample.csv)")
    try:
        args = parser.parse_args(argv)
        if args.per_category < 1:
            raise UsageError(f"--per_category must be at least 1, got {args.per_category}")
        output = Path(args.output or f"{input_stem(args.source)}_sample.csv")
        frame = read_table(args.source, needs=["prompt"])
        sample = stratified_sample(frame, args.per_category, args.seed)
        meta = sample_meta(args.source, str(output), args.per_category, args.seed, len(sample), len(frame),
                           list(sys.argv[1:] if argv is None else argv))
        try:
            write_csv_atomic(sample, output)
            write_text_atomic(dumps(meta), meta_path_for(output))
        except OSError as exc:  # a read-only folder, a folder named like the output: one line, exit 2
            raise UsageError(f"--output {output}: cannot write it: {exc.strerror or exc}") from None
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
