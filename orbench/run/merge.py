"""``orbench-merge``: the outputs of a stage's shards (``--shard i/N``, ``orbench.run.shards``) joined into
the output one run would have written, sending nothing (how, and what it checks: ``orbench.run.shards``)."""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
from pathlib import Path

from orbench.llm.errors import RowError, UsageError
from orbench.run import existing_output
from orbench.run.cli import ArgumentParser, entry_point, options_from
from orbench.run.lifecycle import Delivery, load_input, report
from orbench.run.loops import run_sync
from orbench.run.provenance import build_meta, dumps, meta_path_for, sha256_file
from orbench.run.shards import NOT_SHARDED, merged_output
from orbench.run.stage import ProgressLog, arun_stage, progress_path_for
from orbench.run.tables import write_text_atomic

#: The stages that shard, by the ``stage`` their meta files record, and the module that builds each.
STAGE_MODULES = {
    "rewrite": "orbench.stages.rewrite",
    "moderate": "orbench.stages.moderate",
    "check_alignment": "orbench.stages.check_alignment",
    "check_response": "orbench.stages.check_response",
}

class _NothingSent:
    """The merge's answer source: it sends nothing; a row no shard finished fails, saying so."""

    class rate_limits:  # noqa: N801 - what the runner's progress lines read
        paced = False

    async def complete(self, request):
        raise RowError("not done in its shard; rerun that shard, then merge again")

    async def close(self) -> None:
        pass


def _read_meta(output: Path) -> dict:
    if output.name.endswith((".meta.json", ".progress.jsonl", ".server.log")):
        raise UsageError(f"{output} is a file beside a shard's output: give the output CSVs (e.g. NAME.shard-*-of-N.csv)")
    path = meta_path_for(output)
    if not output.exists():
        raise UsageError(f"shard output {output} does not exist")
    if not path.exists():
        raise UsageError(f"shard output {output} has no meta file {path.name}: its run has not finished "
                         f"(rerun the same command until it ends)")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("shard"), dict):
        raise UsageError(f"{output} is not a shard's output (its meta file records no --shard)")
    if not progress_path_for(output).exists():
        raise UsageError(f"shard output {output} has no progress file {progress_path_for(output).name} beside it "
                         f"(the merge reads the shard's answers from it: copy it along with the output)")
    return meta


def check_shards(outputs: list[Path]) -> list[dict]:
    """The shards' meta records, ordered by shard number; ``UsageError`` unless they are the
    shards 1 to N of one run (same stage, settings, rules, input), each once."""
    metas = [_read_meta(o) for o in outputs]
    first = metas[0]
    same = ("stage", "settings", "rules")
    for output, meta in zip(outputs[1:], metas[1:]):
        for name in same:
            if meta.get(name) != first.get(name):
                differ = name
                if isinstance(first.get(name), dict) and isinstance(meta.get(name), dict):
                    keys = sorted(set(first[name]) | set(meta[name]), key=str)
                    differ = next((f"{name} {k!r}: {first[name].get(k)!r} vs {meta[name].get(k)!r}" for k in keys
                                   if first[name].get(k) != meta[name].get(k)), name)
                raise UsageError(f"shards of different runs: {outputs[0]} and {output} differ in {differ}")
        a, b = first.get("input") or {}, meta.get("input") or {}
        if (a.get("sha256") or a.get("path")) != (b.get("sha256") or b.get("path")):
            raise UsageError(f"shards of different runs: {outputs[0]} and {output} read different input files "
                             f"({a.get('path')} and {b.get('path')})")
        if meta["shard"]["count"] != first["shard"]["count"]:
            raise UsageError(f"shards of different runs: {outputs[0]} is one of {first['shard']['count']} shards, "
                             f"{output} one of {meta['shard']['count']}")
    count = first["shard"]["count"]
    seen: dict[int, Path] = {}
    for output, meta in zip(outputs, metas):
        index = meta["shard"]["index"]
        if index in seen:
            raise UsageError(f"shard {index}/{count} given twice: {seen[index]} and {output}")
        seen[index] = output
    missing = [str(i) for i in range(1, count + 1) if i not in seen]
    if missing:
        raise UsageError(f"shard{'s' if len(missing) > 1 else ''} {', '.join(missing)} of {count} missing: give "
                         f"every shard's output (have {', '.join(f'{i}/{count}' for i in sorted(seen))})")
    if first.get("stage") not in STAGE_MODULES:
        raise UsageError(f"cannot merge stage {first.get('stage')!r}: {NOT_SHARDED}")
    for meta, output in zip(metas, outputs):
        meta["_output"] = str(output)
    return sorted(metas, key=lambda m: m["shard"]["index"])


def _stage_args(meta: dict) -> list[str]:
    """The arguments of the shard's command (``python SCRIPT ARGS`` or ``python -m MODULE ARGS``),
    without those that say where and how it ran rather than what it computes."""
    command = list(meta.get("command") or [])
    args = command[3:] if command[1:2] == ["-m"] else command[2:]
    dropped = {"--shard": 1, "--output_file": 1, "--limit": 1, "--serve": 0, "--serve_args": 1,
               "--serve_timeout": 1, "--replicas": 1, "--base_url": 1, "--batch": 0, "--estimate": 0,
               "--overwrite": 0, "--poll_interval": 1}
    kept, skip = [], 0
    for arg in args:
        if skip:
            skip -= 1
            continue
        name = arg.split("=", 1)[0]
        if name in dropped:
            skip = 0 if "=" in arg else dropped[name]
            continue
        kept.append(arg)
    return kept


async def amerge(outputs: list[Path], output: Path | None = None, *, quiet: bool = False):
    """Merge the shard outputs ``outputs`` into ``output`` (default: the first shard's name without
    its shard part); returns the run's ``orbench.run.lifecycle.Delivery`` (exit code 0, or 1 when a
    row failed in its shard). ``UsageError`` for shards that are not one run's (module docstring)."""
    metas = check_shards([Path(o) for o in outputs])
    first = metas[0]
    output = Path(output) if output is not None else merged_output(Path(first["_output"]))
    if any(Path(m["_output"]).resolve() == output.resolve() for m in metas):
        raise UsageError(f"--output_file {output} is one of the shards; choose another")
    module = importlib.import_module(STAGE_MODULES[first["stage"]])
    parser = module.build_parser()
    # the command's relative paths (input, --template) are the shard's folder's: rebuild the stage there
    with _in_folder(first.get("cwd")):
        try:
            args = parser.parse_args([*_stage_args(first), "--output_file", str(output.resolve())])
        except UsageError as exc:
            raise UsageError(f"cannot rebuild the stage from {meta_path_for(Path(first['_output']))}'s command: "
                             f"{exc}") from None
        job = module.setup(args)
        options = options_from(args)
        if job.stage.config != _config_of(first):
            raise UsageError(f"the stage rebuilt from {first['_output']}'s command has other settings than the shard "
                             f"recorded (a changed template or orbench version?); rerun the shards with this version")
        table, name, input_path = load_input(job, options)
    recorded = (first.get("input") or {}).get("sha256")
    if recorded and input_path and sha256_file(input_path) not in (None, recorded):
        raise UsageError(f"the input {input_path} has changed since the shards read it (its SHA-256 differs from the "
                         f"one their meta files record); merge needs the file they ran on")

    progress = progress_path_for(output)
    entries: dict[str, dict] = {}
    for meta in metas:
        shard_log = ProgressLog(progress_path_for(Path(meta["_output"])))
        entries.update(shard_log.load())
    header = existing_output.header_for(job.stage.stage_id, job.stage.key_settings, job.stage.key_rules)
    progress.parent.mkdir(parents=True, exist_ok=True)
    ProgressLog(progress).rewrite(list(entries.values()), header)  # merging again: the shards' rows replace it

    result = await arun_stage(job.stage, table, output, concurrency=1, input_name=name,
                              client=_NothingSent(), retry_upstream=options.retry_upstream,
                              quiet=True, overwrite=options.overwrite)
    closing = []
    if result.errors:
        failed = [f"{m['shard']['index']}/{m['shard']['count']}" for m in metas if (m.get("counts") or {}).get("errors")]
        closing.append(f"{result.errors} rows have errors (see the 'error' column): rerun shard "
                       f"{', '.join(failed) or 'their shards'}, then merge again")
    models = first.get("models") or []
    meta = build_meta(stage=job.stage, result=result, client=None, models=models, input_path=input_path,
                      input_rows=len(table), output=output,
                      argv=["orbench-merge", *[m["_output"] for m in metas], "--output_file", str(output)])
    meta["shards"] = [{"output": m["_output"], **{k: m["shard"][k] for k in ("index", "count", "rows")},
                       "counts": m.get("counts"), "requests": m.get("requests"), "tokens": m.get("tokens"),
                       "started": m.get("started"), "finished": m.get("finished")} for m in metas]
    write_text_atomic(dumps(meta), meta_path_for(output))
    summary = [f"merge: {len(metas)} shards -> {output}: {result.rows} rows, {result.rows - result.errors - result.upstream_errors} "
               f"done, {result.errors} errors" + (f" | {result.outcomes.text}" if result.outcomes else "")]
    return Delivery(result, len(table), summary, closing, result.exit_code, meta)


@contextlib.contextmanager
def _in_folder(folder: str | None):
    """The current folder set to ``folder`` (when it exists) for the block."""
    here = os.getcwd()
    if folder and Path(folder).is_dir():
        os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(here)


def _config_of(meta: dict) -> dict:
    return {"stage": meta.get("stage"), **(meta.get("settings") or {})}


def build_parser():
    parser = ArgumentParser(
        prog="orbench-merge",
        description="Join the outputs of a stage's shards (--shard i/N) into the output one run would have "
                    "written, in input order; nothing is sent.",
        epilog="exit status: 0 every row done, 1 some rows failed in their shard (rerun it, then merge again), "
               "2 the shards are not one run's (different settings or input, one missing, one unfinished).")
    parser.add_argument("shards", nargs="+", metavar="SHARD_OUTPUT", help="each shard's output CSV (its meta file beside it)")
    parser.add_argument("--output_file", default=None,
                        help="the merged output (default: the shards' name without the .shard-i-of-N part)")
    parser.add_argument("--quiet", action="store_true", help="no summary line; only the output path on stdout")
    return parser


def main(argv=None) -> int:
    """``orbench-merge SHARD...``: see :func:`build_parser`."""
    @entry_point
    def merge(argv) -> int:
        args = build_parser().parse_args(argv)
        delivery = run_sync(amerge([Path(s) for s in args.shards], args.output_file and Path(args.output_file),
                                   quiet=args.quiet))
        return report(delivery, args.quiet)

    return merge(argv)


if __name__ == "__main__":
    sys.exit(main())
