"""Stage 1: generate toxic seed prompts for one category.

Reads nothing but its flags (and, when it exists, its own earlier output, to continue it).
Writes ``--output_file`` (default ``./{category}_prompts.csv`` in the current directory, as the
original tool) with the columns ``prompt, category, generator_model, error``, one unique prompt a
row, exactly ``--num_toxic_prompts`` rows once the target is reached (in first-seen order).

Example (the original command, from inside this folder)::

    MISTRAL_API_KEY=... python generate_toxic_promt_from_category.py --category=harmful

How it works. Stage 1 goes through the run lifecycle every stage shares (``orbench.run.lifecycle``:
set-up, estimate, batch, run, meta file, summary, exit code) as a :class:`SeedJob`. Each model
call asks for 20 prompts of the category at temperature 1.0 (the paper's settings) and is one row
of a synthetic table of call numbers, ``call_index`` 0, 1, 2, ... run by the stage runner
(``orbench.run.stage.run_stage``) in rounds (``SeedJob.rounds``); the call number is also the request's ``sample_index``,
so the response cache keeps repeated sampling calls apart. The replies go to a work file beside
the output, ``<output>.calls.csv`` (columns ``call_index, reply, finish_reason, error``, the raw
replies kept for inspection), with the runner's progress log ``<output>.calls.csv.progress.jsonl``.
Items are read from each reply (``orbench.scoring.parsing.reply_items``, as stage 2 reads its replies:
``[[...]]`` first, then the fallbacks) and
near-exact duplicates dropped, walking the calls in call order, so the result does not depend on
which reply came back first. The run adds calls in rounds until the target is met; the prompts
are then written to the output and the lifecycle writes its meta file.

Cost flags, as in every stage (``orbench.run.lifecycle``): ``--estimate`` sends nothing and writes
nothing; it prices the recorded calls that failed plus the new calls the target still needs (one
per 20 missing prompts, within ``--limit``), with ``--prices``. ``--batch`` sends each round's
calls through the provider's batch API (``--poll_interval`` between checks) and then reads them
from the cache. ``--retry_upstream_errors`` is not offered: stage 1 reads no earlier stage's
output.

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
stops before any call (exit 2, ``orbench.run.existing_output``); ``--overwrite`` removes the old
prompts, calls and meta file and starts afresh.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from orbench.benchmark.categories import CATEGORIES, check_category
from orbench.benchmark.prompts import SEED_TEMPLATE
from orbench.llm.clients import Client
from orbench.llm.errors import UsageError
from orbench.llm.models import ModelSpec, parse_model
from orbench.llm.types import Completion, Request
from orbench.run.cli import ArgumentParser, add_model_flags, positive_int, run
from orbench.run.lifecycle import Delivery, Job, RunOptions
from orbench.run.provenance import meta_path_for, sha256_text
from orbench.run.settings import rule, setting
from orbench.run.stage import (
    ProgressLog,
    RunResult,
    Stage,
    check_writable,
    guard_existing,
    progress_path_for,
    row_key,
)
from orbench.run.tables import write_csv_atomic
from orbench.run.templates import add_template_flag, load_template
from orbench.scoring.parsing import example_forms, normalise_for_dedup, reply_items

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
    """What a generator call depends on (each in every call's key: ``orbench.run.settings``)."""

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


def make_stage(spec: ModelSpec, category: str, temperature: float, max_tokens: int,
               template: str = SEED_TEMPLATE, template_source: str = "built-in") -> Stage:
    """The runner's view of one generator call: input ``call_index``, output the raw reply."""
    settings = GenerateSettings(model=spec, temperature=temperature, max_tokens=max_tokens,
                                template=template.format(count=PER_CALL, category=category))
    return Stage(name=f"generate {category}", needs=("call_index",), adds=("reply", "finish_reason"),
                 requests=requests, decide=decide, settings=settings, stage_id="generate",
                 key_columns=("call_index",),
                 provenance={"templates": {"seed": sha256_text(template)}, "template_source": template_source,
                             "category": category})


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


def read_calls(calls_path: Path) -> list[dict]:
    """The work file written by the runner, in call order."""
    frame = pd.read_csv(calls_path, dtype=str, keep_default_na=False, encoding="utf-8")
    return frame.to_dict("records")


@dataclass
class SeedJob(Job):
    """Stage 1 in the run lifecycle (``orbench.run.lifecycle``): rounds of calls, then the prompts.

    The runner's rows are calls (``<output>.calls.csv``, its work file); each round asks for
    enough calls to reach the target, and the prompts read from all the calls in call order are
    delivered to ``output``. ``--limit`` counts calls here.
    """

    category: str = ""
    target: int = 0
    stale_limit: int = 5
    #: Set when the job is guarded and run: earlier prompts, recorded calls, what the calls gave.
    notes: list[str] = field(default_factory=list)
    prior: list[dict] = field(default_factory=list)
    recorded: int = 0
    calls: int = 0
    state: Tally = field(default_factory=Tally)
    started: float = 0.0
    calls_frame: pd.DataFrame | None = None  # the calls of the last round, as the runner delivered them
    limits_rows = False
    shardable = False  # no input rows: one job per --category instead (orbench.run.shards)

    @property
    def work(self) -> Path | None:
        """The calls' work file, ``<output>.calls.csv`` (the raw replies, kept for inspection); None in memory."""
        return None if self.in_memory else self.output.with_name(self.output.name + ".calls.csv")

    def ran(self, result: RunResult) -> None:
        """The calls of the round just run (the work file's rows), read when the calls are tallied."""
        self.calls_frame = result.frame

    @property
    def examples(self) -> frozenset[str]:
        """The request's own example texts: a reply item that repeats one is no seed."""
        return example_forms(self.stage.settings.template)

    def guard(self, table: pd.DataFrame, options: RunOptions) -> None:
        """The settings check over the calls and the prompts (``--overwrite`` removes them both
        now, unless ``--estimate``), then what is already there: prompts and recorded calls."""
        self.started = time.time()
        if self.in_memory:  # nothing to continue, nothing to guard
            return
        check_writable(self.output)
        self.notes = guard_output(self.stage, self.output, self.work, options.overwrite, remove=not options.estimate)
        self.prior = read_prior(self.output, self.category)
        self.recorded = recorded_calls(self.stage, self.work)  # replayed for free, even beyond --limit

    def tally(self, calls: int) -> Tally:
        """The earlier prompts, then the prompts of the first ``calls`` calls, walked in call order."""
        if not calls:
            found = []
        elif self.calls_frame is not None:
            found = self.calls_frame.to_dict("records")
        else:  # before any round (--estimate): the calls an earlier run recorded
            found = read_calls(self.work) if self.work is not None and self.work.exists() else []
        return tally(self.prior, found, str(self.stage.settings.model), self.category, self.examples)

    def planned(self, table: pd.DataFrame, options: RunOptions) -> pd.DataFrame:
        """The calls recorded, plus the new calls the target still needs (one per 20 prompts
        missing, within ``--limit``)."""
        needed = max(0, math.ceil((self.target - len(self.tally(self.recorded).rows)) / PER_CALL))
        total = self.recorded + needed
        if options.limit is not None:
            total = min(total, max(options.limit, self.recorded))
        return call_table(total)

    def rounds(self, table: pd.DataFrame, options: RunOptions) -> Iterator[pd.DataFrame]:
        """The recorded calls first (replayed from the progress file), then rounds of new calls
        until the target, a stale streak, a failed call or ``--limit`` calls."""
        total = self.recorded
        while True:
            if total:
                yield call_table(total)
            self.calls, self.state = total, self.tally(total)
            step = self.next_step(total, options)
            if not step:
                return
            if total and not options.quiet:
                print(f"{len(self.state.rows)} of {self.target} unique prompts after {total} calls; asking "
                      f"{step} more", file=sys.stderr)
            total += step

    def next_step(self, total: int, options: RunOptions) -> int:
        """How many calls the next round adds (0: stop)."""
        found, state = len(self.state.rows), self.state
        if found >= self.target or state.failed or state.stale_streak >= self.stale_limit:
            return 0
        if options.limit is not None and total >= options.limit:
            return 0
        # Rounds are capped so that a model that has run dry wastes at most one round.
        step = min(math.ceil((self.target - found) / PER_CALL), max(self.stale_limit, options.concurrency))
        return step if options.limit is None else min(step, options.limit - total)

    def deliver(self, table: pd.DataFrame, result: RunResult | None, client: Client,
                options: RunOptions) -> Delivery:
        """The prompts (the first ``--num_toxic_prompts`` unique ones) written to ``output``."""
        state, rows = self.state, self.state.rows[:self.target]
        frame = pd.DataFrame([{**r, "error": ""} for r in rows], columns=list(OUTPUT_COLUMNS))
        if not self.in_memory:
            try:
                write_csv_atomic(frame, self.output)
            except OSError as exc:
                raise UsageError(f"cannot write {self.output}: {exc.strerror or exc}") from None
        delivered = RunResult(output=None if self.in_memory else self.output, rows=len(rows), errors=state.failed,
                              started=self.started, finished=time.time(), frame=frame,
                              meta={"calls": self.calls, "duplicates_dropped": state.duplicates,
                                    "template_examples_dropped": state.example_repeats})
        code, closing = self.outcome(len(rows), options)
        return Delivery(delivered, self.calls, [self.summary(len(rows), client)], closing, code)

    def summary(self, rows: int, client: Client) -> str:
        state, s = self.state, client.stats
        repeats = f", {state.example_repeats} template examples dropped" if state.example_repeats else ""
        where = "(in memory)" if self.in_memory else self.output
        return (f"generate {self.category}: {rows} of {self.target} prompts -> {where} | {self.calls} calls "
                f"({self.calls - self.recorded} new, {self.recorded} resumed, {state.failed} failed), "
                f"{state.duplicates} duplicates dropped{repeats} | requests {s.sent} sent, "
                f"{s.cached} from cache" + "".join(f" | {n}" for n in self.notes))

    def outcome(self, rows: int, options: RunOptions) -> tuple[int, list[str]]:
        """The exit code and, when the target is not reached, why (said even with ``--quiet``)."""
        if rows >= self.target:
            return 0, []
        if self.state.failed:
            where = "" if self.work is None else f" (see the 'error' column of {self.work})"
            return 1, [f"{self.state.failed} calls failed after retries{where}; rerun the same command to retry them"]
        if self.state.stale_streak >= self.stale_limit:
            return 1, [f"stopped: the last {self.state.stale_streak} calls gave no new prompt, with {rows} of "
                       f"{self.target} found; the model seems to have run dry for {self.category!r} (raise "
                       f"--max_stale_calls to keep trying, or lower --num_toxic_prompts)"]
        return 0, [f"stopped at --limit={options.limit} calls with {rows} of {self.target} prompts (a trial "
                   f"run); rerun without --limit to continue"]


def setup(args) -> SeedJob:
    """The job of one command line (``orbench.run.cli.run`` runs it through the lifecycle)."""
    category = args.category
    template, template_source = load_template(args.template, SEED_TEMPLATE, {"count", "category"})
    spec = parse_model(args.model)
    stage = make_stage(spec, category, args.temperature, args.max_tokens, template, template_source)
    output = Path(args.output_file) if args.output_file else Path.cwd() / f"{category}_prompts.csv"
    return SeedJob(stage=stage, input=call_table(0), output=output, models=[spec], typed=[args.model],
                   input_name="call table", category=category, target=args.num_toxic_prompts,
                   stale_limit=args.max_stale_calls)


def main(argv=None) -> int:
    """Command-line entry point; returns the exit code (0 done, 1 incomplete, 2 bad input)."""
    return run(build_parser(), setup, argv)


if __name__ == "__main__":  # python -m orbench.stages.generate_seeds (the command a meta file records)
    raise SystemExit(main())
