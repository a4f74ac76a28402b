"""Stage 1: generate toxic seed prompts for one category.

Reads nothing but its flags (and, when it exists, its own earlier output, to continue it).
Writes ``--output_file`` (default ``./{category}_prompts.csv`` in the current directory, as the
original tool) with the columns ``prompt, category, generator_model, error``, one unique prompt a
row, exactly ``--num_toxic_prompts`` rows once the target is reached (in first-seen order).

Example (the original command, from inside this folder)::

    MISTRAL_API_KEY=... python generate_toxic_promt_from_category.py --category=harmful

How it works. Each model call asks for 20 prompts of the category at temperature 1.0 (the
paper's settings) and is one row of a synthetic table of call numbers, ``call_index`` 0, 1, 2,
... run by ``orbench.stage.run_stage``; the call number is also the request's ``sample_index``,
so the response cache keeps repeated sampling calls apart. The replies go to a work file beside
the output, ``<output>.calls.csv`` (columns ``call_index, reply, finish_reason, error``, the raw
replies kept for inspection), with the runner's progress log ``<output>.calls.csv.progress.jsonl``.
Items are read from each reply (``orbench.parsing.reply_items``, as stage 2 reads its replies:
``[[...]]`` first, then the fallbacks) and
near-exact duplicates dropped, walking the calls in call order, so the result does not depend on
which reply came back first. The run adds calls in rounds until the target is met.

Cost flags, as in every stage (``orbench.cli.estimate``, ``orbench.cli.send_batches``): ``--estimate`` sends nothing and
writes nothing; it prices the recorded calls that failed plus the new calls the target still
needs (one per 20 missing prompts, within ``--limit``), with ``--prices``. ``--batch`` sends each
round's calls through the provider's batch API (``--poll_interval`` between checks) and then
reads them from the cache. ``--retry_upstream_errors`` is not offered: stage 1 reads no earlier
stage's output.

Stops:

- target reached: exit 0;
- the last ``--max_stale_calls`` calls all gave nothing new: exit 1 with a message (the model
  has run dry at these settings); what was found is still written;
- some calls failed after the SDK's retries: exit 1 after the round; rerun to retry them;
- ``--limit`` calls made: exit 0 (a trial run), with a note.

Resume. A rerun with the same settings replays the recorded calls from the progress log (no
request is sent again) and only adds calls if more prompts are needed; a rerun with a larger
``--num_toxic_prompts`` continues where the last one stopped. Prompts already in the output file
(from an earlier run with these settings, or the original tool's file, which records none) come
first and count towards the target; novelty for the no-progress rule is judged among this run's
calls only. A run with another model, temperature or max tokens than the output was made with
stops before any call (exit 2, ``orbench.existing_output``); ``--overwrite`` removes the old
prompts, calls and meta file and starts afresh.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from orbench.categories import CATEGORIES, check_category
from orbench.cli import (
    ArgumentParser,
    RunOptions,
    add_model_flags,
    command_of,
    make_client,
    positive_int,
    send_batches,
)
from orbench.cli import estimate as cli_estimate
from orbench.clients import Client
from orbench.errors import UsageError
from orbench.models import ModelSpec, keys_not_needed, parse_model, redact
from orbench.parsing import example_forms, normalise_for_dedup, reply_items
from orbench.prompts import SEED_TEMPLATE
from orbench.provenance import build_meta, dumps, meta_path_for, sha256_text
from orbench.settings import rule, setting
from orbench.stage import (
    ProgressLog,
    RunResult,
    Stage,
    check_writable,
    guard_existing,
    progress_path_for,
    row_key,
    run_stage,
)
from orbench.tables import write_csv_atomic, write_text_atomic
from orbench.templates import add_template_flag, load_template
from orbench.types import Completion, Request

PER_CALL = 20  # prompts asked for in one call (the paper's figure)
DEFAULT_MODEL = "mixtral"  # -> mistral/open-mixtral-8x7b, the paper's generator
OUTPUT_COLUMNS = ("prompt", "category", "generator_model", "error")


def _category(text: str) -> str:
    import argparse

    try:
        return check_category(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> ArgumentParser:
    """The command line of this stage."""
    parser = ArgumentParser(
        prog="generate_seeds.py",
        description="Generate toxic seed prompts for one category (OR-Bench stage 1). Each call asks "
                    f"the model for {PER_CALL} prompts; duplicates are dropped; calls continue until "
                    "the target number of unique prompts is reached.",
        epilog="Example: python generate_seeds.py --category=harmful --num_toxic_prompts=2000\n"
               "Output columns: prompt, category, generator_model, error. Raw replies are kept in "
               "<output>.calls.csv; a rerun resumes without repeating calls.",
    )
    parser.add_argument("--category", required=True, type=_category, metavar="NAME",
                        help=f"the category to generate, one of: {', '.join(CATEGORIES)}")
    parser.add_argument("--num_toxic_prompts", type=positive_int, default=2000, metavar="N",
                        help="how many unique prompts to produce (default: 2000)")
    parser.add_argument("--model", default=DEFAULT_MODEL,
                        help="generator model, provider/model or a short name (default: mixtral = "
                             "mistral/open-mixtral-8x7b, as in the paper)")
    parser.add_argument("--max_stale_calls", type=positive_int, default=5, metavar="K",
                        help="give up (exit 1) when the last K calls gave no new prompt (default: 5)")
    parser.add_argument("--output_path", dest="output_file", default=None, metavar="PATH",
                        help="the original tool's name for --output_file")
    add_template_flag(parser, "{count} and {category}")
    add_model_flags(parser, temperature_default=1.0, max_tokens_default=2000,
                    output_help="where to write the prompts (default: ./{category}_prompts.csv in the "
                                "current directory); --output_path is the same flag",
                    limit_help="make at most N model calls in total, then stop with what was found "
                               "(a trial run)",
                    upstream=False)  # stage 1 reads no earlier stage's output
    return parser


@dataclass
class Tally:
    """The prompts found so far and what the calls did, from one walk over the calls in order."""

    rows: list[dict] = field(default_factory=list)
    duplicates: int = 0
    example_repeats: int = 0  # items that repeat an example of the template, dropped
    stale_streak: int = 0  # calls at the end of the record that gave no new prompt
    failed: int = 0
    answered: int = 0


def read_prior(output: Path, category: str) -> list[dict]:
    """Prompt rows already in ``output`` (empty if it does not exist); ``UsageError`` if unusable."""
    if not output.exists():
        return []
    try:
        frame = pd.read_csv(output, dtype=str, keep_default_na=False, encoding="utf-8")
    except pd.errors.EmptyDataError:
        return []
    except (ValueError, OSError) as exc:
        raise UsageError(f"cannot read the existing output {output} to continue it ({exc}); "
                         "move it away or choose another --output_file") from None
    if "prompt" not in frame.columns:
        raise UsageError(f"the existing output {output} has no 'prompt' column; move it away or "
                         "choose another --output_file")
    others = sorted({c for c in frame.get("category", pd.Series(dtype=str)) if c and c != category})
    if others:
        raise UsageError(f"the existing output {output} holds prompts of category "
                         f"{', '.join(map(repr, others))}, not {category!r}; choose another --output_file")
    return [{"prompt": r["prompt"], "category": category,
             "generator_model": r.get("generator_model", "")}
            for r in frame.to_dict("records") if r["prompt"].strip()]


def tally(prior: list[dict], calls: list[dict], model: str, category: str,
          examples: frozenset[str] = frozenset()) -> Tally:
    """Walk ``prior`` rows, then ``calls`` (dicts with ``reply``, ``error``) in call order.

    Items whose dedup form is in ``examples`` (the template's own example texts, such as a
    ``[[here is a prompt]]`` format line) are dropped and counted, never taken as seeds.
    """
    out = Tally()
    taken: set[str] = set()
    for row in prior:
        form = normalise_for_dedup(row["prompt"])
        if form in taken:
            out.duplicates += 1
            continue
        taken.add(form)
        out.rows.append(row)
    from_calls: set[str] = set()
    for call in calls:
        if call.get("error"):
            out.failed += 1
            continue
        out.answered += 1
        novel = False
        items, repeats = reply_items(call.get("reply", ""), examples)  # as stage 2 reads its replies
        out.example_repeats += repeats
        for item in items:
            form = normalise_for_dedup(item)
            if form not in from_calls:
                from_calls.add(form)
                novel = True
            if form in taken:
                out.duplicates += 1
                continue
            taken.add(form)
            out.rows.append({"prompt": item, "category": category, "generator_model": model})
        out.stale_streak = 0 if novel else out.stale_streak + 1
    return out


def recorded_calls(stage: Stage, calls_path: Path) -> int:
    """How many calls (``0..n-1``) the progress log already holds for these settings."""
    highest = -1
    for key, entry in ProgressLog(progress_path_for(calls_path)).load().items():
        for row in entry.get("rows") or []:
            index = str(row.get("call_index", ""))
            if index.isdigit() and row_key(stage.config, [index]) == key:
                highest = max(highest, int(index))
    return highest + 1


@dataclass(frozen=True, kw_only=True)
class GenerateSettings:
    """What a generator call depends on (each in every call's key: ``orbench.settings``)."""

    model: ModelSpec = setting(record=str)
    temperature: float
    max_tokens: int
    #: The request sent on every call: the template filled in with the count and the category.
    template: str = rule()


def requests(s: GenerateSettings, row: dict) -> list[Request]:
    """One call: the request, with the call number as its sample index (its own cache entry)."""
    return [Request.user(s.model, s.template, temperature=s.temperature, max_tokens=s.max_tokens,
                         sample_index=int(row["call_index"]))]


def decide(s: GenerateSettings, row: dict, answers: list[Completion]) -> dict:
    """The raw reply of the call (its items are read when the calls are tallied)."""
    reply = answers[0]
    return {"call_index": str(int(row["call_index"])), "reply": reply.text, "finish_reason": reply.finish_reason or ""}


def make_stage(spec: ModelSpec, category: str, temperature: float,
               max_tokens: int, template: str = SEED_TEMPLATE) -> Stage:
    """The runner's view of one generator call: input ``call_index``, output the raw reply."""
    settings = GenerateSettings(model=spec, temperature=temperature, max_tokens=max_tokens,
                                template=template.format(count=PER_CALL, category=category))
    return Stage(name=f"generate {category}", needs=("call_index",), adds=("reply", "finish_reason"),
                 requests=requests, decide=decide, settings=settings, stage_id="generate",
                 key_columns=("call_index",), provenance={"templates": {"seed": sha256_text(template)}})


def guard_output(stage: Stage, output: Path, calls_path: Path, overwrite: bool, remove: bool = True) -> list[str]:
    """Stop (``UsageError``) before any call when ``output`` was made with other settings, unless
    ``overwrite``: then (``remove``) its prompts, calls and meta file are removed now. Returns the
    summary's notes.

    The settings are read from the calls' progress file, else from the output's meta file; an
    output with neither (the original tool's) is continued, as the module docstring says.
    """
    log = ProgressLog(progress_path_for(calls_path))
    log.load()
    indexes = {str(r.get("call_index", "")) for e in log.entries.values() for r in e.get("rows") or []}
    keys = [row_key(stage.config, [i]) for i in indexes]
    discard, notes = guard_existing(
        stage, output, log, keys, overwrite=overwrite, meta_path=meta_path_for(output),
        exists=output.exists() or calls_path.exists() or bool(log.entries), unrecorded_ok=not log.entries)
    if discard and remove:
        for path in (output, meta_path_for(output), calls_path, progress_path_for(calls_path)):
            path.unlink(missing_ok=True)
    return notes


def call_table(calls: int) -> pd.DataFrame:
    """The synthetic input of the call runner: call numbers ``0 .. calls - 1``."""
    return pd.DataFrame({"call_index": [str(i) for i in range(calls)]})


def estimate(stage: Stage, args, options: RunOptions, client: Client, spec: ModelSpec, prior: list[dict],
             examples: frozenset[str], calls_path: Path, recorded: int) -> str:
    """The ``--estimate`` report: the calls recorded but not answered, plus the new calls needed
    to reach the target (one per 20 prompts still missing, within ``--limit``); nothing is sent
    and nothing written."""
    calls = read_calls(calls_path) if calls_path.exists() else []
    found = len(tally(prior, calls, str(spec), args.category, examples).rows)
    needed = max(0, math.ceil((args.num_toxic_prompts - found) / PER_CALL))
    total = recorded + needed
    if options.limit is not None:
        total = min(total, max(options.limit, recorded))
    return cli_estimate(stage, call_table(total), calls_path, options, client)


def read_calls(calls_path: Path) -> list[dict]:
    """The work file written by the runner, in call order."""
    frame = pd.read_csv(calls_path, dtype=str, keep_default_na=False, encoding="utf-8")
    return frame.to_dict("records")


def generate(args, command: list[str] | None = None) -> int:
    """Run the stage for parsed ``args``; returns the exit code (see the module docstring).
    ``command`` is what the meta file records as the command (default: this process's)."""
    started = time.time()
    options = RunOptions.from_args(args)
    spec = parse_model(args.model)
    category, target, stale_limit = args.category, args.num_toxic_prompts, args.max_stale_calls
    output = Path(options.output_file) if options.output_file else Path.cwd() / f"{category}_prompts.csv"
    calls_path = output.with_name(output.name + ".calls.csv")
    template, template_source = load_template(args.template, SEED_TEMPLATE, {"count", "category"})
    examples = example_forms(template.format(count=PER_CALL, category=category))
    client = make_client(options)
    client.prepare(spec)  # a missing key fails here, before any request
    stage = make_stage(spec, category, args.temperature, args.max_tokens, template)
    check_writable(output)
    notes = guard_output(stage, output, calls_path, options.overwrite, remove=not options.estimate)
    prior = read_prior(output, category)

    total = recorded_calls(stage, calls_path)  # replayed for free, even beyond --limit
    if options.estimate:
        print(estimate(stage, args, options, client, spec, prior, examples, calls_path, total))
        return 0
    calls: list[dict] = []
    resumed = total
    while True:
        if total:
            table = call_table(total)
            source = client
            if options.batch:  # this round's calls through the batch API, then read from the cache
                source = send_batches(stage, table, calls_path, options, client, [spec])
            run_stage(stage, table, calls_path, concurrency=options.concurrency, input_name="call table",
                      client=source, quiet=options.quiet, meta_path=meta_path_for(output))
            calls = read_calls(calls_path)
        state = tally(prior, calls, str(spec), category, examples)
        found = len(state.rows)
        if found >= target or state.failed or state.stale_streak >= stale_limit:
            break
        if options.limit is not None and total >= options.limit:
            break
        # Rounds are capped so that a model that has run dry wastes at most one round.
        step = min(math.ceil((target - found) / PER_CALL), max(stale_limit, options.concurrency))
        if options.limit is not None:
            step = min(step, options.limit - total)
        if total and not options.quiet:
            print(f"{found} of {target} unique prompts after {total} calls; asking {step} more",
                  file=sys.stderr)
        total += step

    rows = state.rows[:target]
    frame = pd.DataFrame([{**r, "error": ""} for r in rows], columns=list(OUTPUT_COLUMNS))
    write_csv_atomic(frame, output)
    write_meta(stage, spec, args, client, output, total, state, len(rows), template_source, started, command)
    s = client.stats
    repeats = f", {state.example_repeats} template examples dropped" if state.example_repeats else ""
    if not options.quiet:
        print(f"generate {category}: {len(rows)} of {target} prompts -> {output} | {total} calls "
              f"({total - resumed} new, {resumed} resumed, {state.failed} failed), "
              f"{state.duplicates} duplicates dropped{repeats} | requests {s.sent} sent, "
              f"{s.cached} from cache" + "".join(f" | {n}" for n in notes), file=sys.stderr)
    print(output)
    if len(rows) >= target:
        return 0
    if state.failed:  # the reason for exit 1 is said even with --quiet, as the other stages do
        print(f"{state.failed} calls failed after retries (see the 'error' column of {calls_path}); "
              f"rerun the same command to retry them", file=sys.stderr)
        return 1
    if state.stale_streak >= stale_limit:
        print(f"stopped: the last {state.stale_streak} calls gave no new prompt, with {len(rows)} of "
              f"{target} found; the model seems to have run dry for {category!r} (raise "
              f"--max_stale_calls to keep trying, or lower --num_toxic_prompts)", file=sys.stderr)
        return 1
    print(f"stopped at --limit={options.limit} calls with {len(rows)} of {target} prompts (a trial "
          f"run); rerun without --limit to continue", file=sys.stderr)
    return 0


def write_meta(stage: Stage, spec: ModelSpec, args, client: Client, output: Path, calls: int,
               state: Tally, rows: int, template_source: str, started: float,
               command: list[str] | None = None) -> None:
    """The output's ``.meta.json`` (see ``orbench.provenance``): calls stand in for input rows."""
    result = RunResult(output=output, rows=rows, errors=state.failed, started=started,
                       finished=time.time())
    stage.provenance.update({"template_source": template_source, "category": args.category,
                             "calls": calls, "duplicates_dropped": state.duplicates,
                             "template_examples_dropped": state.example_repeats})
    meta = build_meta(stage=stage, result=result, client=client,
                      models=[client.describe(spec, args.model)], input_path=None, input_rows=calls,
                      output=output, argv=command)
    try:
        write_text_atomic(dumps(meta), meta_path_for(output))
    except OSError as exc:
        raise UsageError(f"cannot write {meta_path_for(output)}: {exc.strerror or exc}") from None


def main(argv=None) -> int:
    """Command-line entry point; returns the exit code (0 done, 1 incomplete, 2 bad input)."""
    try:
        args = build_parser().parse_args(argv)
        with keys_not_needed(args.estimate):  # --estimate sends nothing: no key asked
            return generate(args, None if argv is None else command_of(argv, __name__))
    except UsageError as exc:
        print(f"error: {redact(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted: finished calls are saved; rerun the same command to continue",
              file=sys.stderr)
        return 130


if __name__ == "__main__":  # python -m orbench.stages.generate_seeds (the command a meta file records)
    raise SystemExit(main())
