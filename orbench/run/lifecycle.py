"""The run lifecycle every stage goes through, stage 1 included.

``orbench.run.cli.run`` parses a stage script's flags into :class:`RunOptions` and asks the stage's
``setup(args)`` for a :class:`Job` (its stage, input, output and models); :func:`execute` then
runs it, in this order:

1. **set-up**: with ``--serve``, the model's server started (``orbench.run.serving``; stopped when the
   run ends, however it ends); the client (and its response cache; one per address with replicas:
   ``orbench.llm.replicas``), the input read (with ``--shard``, its shard's rows: ``orbench.run.shards``) and checked (``Stage.check``),
   each model's provider set up (a missing key fails here, before any request), and the
   existing output checked against this run's settings (``Job.guard``);
2. **estimate** (``--estimate``): the pending rows' declared requests the cache cannot answer,
   priced (``orbench.llm.pricing``); nothing is sent or written, and the run stops;
3. **rounds**: each round's rows (``Job.rounds``: one round over the input, or stage 1's rounds of
   calls until its target) go, with ``--batch``, first through the providers' batch APIs
   (:func:`send_batches`), then through the runner (``orbench.run.stage.run_stage``: resume,
   concurrency, the progress and output files), answered by the client or the batch results;
4. **delivery** (``Job.deliver``): the output and what the run came to; the meta file beside
   the output (``orbench.run.provenance``);
5. **report**: the summary line (not with ``--quiet``), warnings, why the exit code is not 0, the
   output path on stdout; the exit code: 0 all rows done, 1 some rows have errors (or the
   provider asked requests to wait past ``--patience``: ``WaitPastPatience``), 2 bad input
   or configuration (``UsageError``), 3 a bug in orbench (its traceback shown; the finished rows
   are in the progress file), 130 interrupted.

Steps 1 to 4 are :func:`run_job`, a coroutine the script (:func:`execute`) and the Python API
(``orbench.api``) both run; it raises instead of returning an exit code. A job whose ``in_memory``
is set (the API without ``output_file``) writes nothing: no lock, progress, output or meta file;
its output and meta record come back in the :class:`Delivery`.
"""

from __future__ import annotations

import logging
import sys
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from orbench.llm.cache import Cache, default_cache_path
from orbench.llm.clients import Client
from orbench.llm.errors import UsageError, WaitPastPatience
from orbench.llm.models import ModelSpec, redact
from orbench.llm.types import AnswerSource, Request
from orbench.run.loops import run_sync
from orbench.run.provenance import build_meta, dumps, meta_path_for
from orbench.run.stage import (
    RunResult,
    Stage,
    arun_stage,
    check_existing,
    check_writable,
    pending_records,
    progress_path_for,
)
from orbench.run.tables import read_table, resolve_input, write_text_atomic

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunOptions:
    """The flags every stage shares (``orbench.run.cli.add_model_flags``), read once (``cli.options_from``)."""

    output_file: str | None
    limit: int | None
    sep: str | None  # one character, or None: the one the input's header line uses
    concurrency: int
    retry_upstream: bool
    overwrite: bool
    quiet: bool
    base_url: str | None
    rpm: float | None
    patience: float
    timeout: float
    max_retries: int
    no_cache: bool
    batch: bool
    poll_interval: float
    estimate: bool
    prices: str | None
    #: ``--shard i/N`` as ``(i, N)`` (``orbench.run.shards``), and the engine flags (``orbench.run.serving``);
    #: neither changes a row's result, so neither is in a row's key.
    shard: tuple[int, int] | None = None
    serve: object = None


def make_client(options: RunOptions) -> Client:
    """A ``Client`` configured from the common model flags."""
    if options.batch and options.no_cache:
        raise UsageError("--batch needs the response cache (batch answers are stored there); drop --no_cache")
    use_cache = not options.no_cache
    if options.estimate and not default_cache_path().exists():
        use_cache = False  # --estimate writes nothing, not even an empty cache
    from orbench.run.serving import client_for

    return client_for(options, dict(cache=Cache() if use_cache else None, base_url=options.base_url,
                                    concurrency=options.concurrency, rpm=options.rpm, timeout=options.timeout,
                                    max_retries=options.max_retries, patience=options.patience))


@dataclass
class Delivery:
    """What a finished run reports: the counts its meta file records and the lines it prints."""

    result: RunResult | None  # the delivered output, its counts, times, outcomes and further meta keys
    input_rows: int
    summary: list[str]  # not with --quiet
    closing: list[str] = field(default_factory=list)  # said even with --quiet: why the exit code is not 0
    exit_code: int = 0
    meta: dict | None = None  # the provenance record (written beside the output unless in memory)
    estimate: str | None = None  # --estimate: the text pricing the run; nothing was sent
    job: Job | None = None  # the job that made it

    @property
    def frame(self) -> pd.DataFrame | None:
        """The delivered output (as written, or as it would be in memory)."""
        return None if self.result is None else self.result.frame

    @property
    def warnings(self) -> list[str]:
        if self.result is None:
            return []
        outcomes = self.result.outcomes
        return [*(outcomes.warnings if outcomes is not None else []), *self.result.warnings]


@dataclass
class Job:
    """What a stage's ``setup`` hands to the lifecycle: the stage and where its data comes from and goes.

    The methods are the lifecycle's hooks; these defaults run the stage once over its input into
    ``output``. Stage 1 (``orbench.stages.generate_seeds.SeedJob``) overrides them to run rounds
    of calls into a work file and deliver the prompts read from them.
    """

    stage: Stage
    input: str | pd.DataFrame
    #: Where the output goes; in memory, the path it would have had (its name names the output).
    output: Path
    models: Sequence[ModelSpec] = field(default_factory=list)
    input_name: str | None = None
    #: What the meta record's ``input`` says beyond a file's path and SHA-256: for an in-memory
    #: table (the Python API), its SHA-256 and the record of the run that made it (``orbench.api``).
    input_record: dict | None = None
    typed: Sequence[str] | None = None  # the model names as the user wrote them, parallel to models
    #: Nothing written: no lock, progress, output or meta file (the API without ``output_file``).
    in_memory: bool = False
    #: Whether ``--limit`` limits the runner's rows (stage 1 counts it in calls, in its rounds).
    limits_rows = True
    #: Whether ``--shard`` can split its input rows (``orbench.run.shards``; not stage 1's).
    shardable = True

    def __post_init__(self) -> None:
        self.output = Path(self.output)

    @property
    def work(self) -> Path | None:
        """Where the runner writes (its progress, lock and batch files beside it); None in memory."""
        return None if self.in_memory else self.output

    def ran(self, result: RunResult) -> None:
        """Told each round's result, before the next round is asked for."""

    def row_limit(self, options: RunOptions) -> int | None:
        """The runner's ``limit``: ``--limit``, unless the job counts it otherwise."""
        return options.limit if self.limits_rows else None

    def guard(self, table: pd.DataFrame, options: RunOptions) -> None:
        """Before anything is sent: stop (``UsageError``) when the output was made with other
        settings. The runner checks again under its lock; ``--estimate`` and ``--batch`` check here."""
        if (options.estimate or options.batch) and self.work is not None:
            check_existing(self.stage, table, self.work, overwrite=options.overwrite)

    def planned(self, table: pd.DataFrame, options: RunOptions) -> pd.DataFrame:
        """The rows whose pending requests ``--estimate`` prices."""
        return table

    def rounds(self, table: pd.DataFrame, options: RunOptions) -> Iterator[pd.DataFrame]:
        """The rows of each round, in turn; a round has run before the next is asked for."""
        yield table

    def deliver(self, table: pd.DataFrame, result: RunResult, client: Client, options: RunOptions) -> Delivery:
        """The runner's output as it wrote it, and the summary of the run."""
        closing = []
        if result.errors:
            again = ("call again to retry them (with output_file, a call keeps the rows done and retries only "
                     "these)") if self.in_memory else "rerun the same command to retry them"
            closing.append(f"{result.errors} rows still have errors (see the 'error' column); {again}")
        return Delivery(result, len(table), [summary_line(self.stage, result, client), *result.lines],
                        closing, result.exit_code)


def summary_line(stage: Stage, result: RunResult, client: Client | None) -> str:
    """The one line printed at the end of a run."""
    counts = f"{result.new} new, {result.resumed} resumed, {result.errors} errors"
    if result.upstream_errors:
        counts += f", {result.upstream_errors} passed through with an earlier stage's error"
    where = "(in memory)" if result.output is None else result.output
    parts = [f"{stage.name}: {result.rows} rows -> {where}", counts]
    if result.outcomes is not None:
        parts.append(result.outcomes.text)
    if result.bad_progress_lines:
        parts.append(f"{result.bad_progress_lines} unreadable progress lines skipped")
    if client is not None:
        parts.extend(request_counts(client))
    parts.append(f"{result.elapsed:.1f}s")
    parts.extend(result.notes)
    return " | ".join(parts)


def request_counts(client: Client) -> list[str]:
    """The summary's parts about requests: sent, from the cache, blocked; tokens; pacing."""
    s = client.stats
    tokens = f"tokens {s.input_tokens:,} in / {s.output_tokens:,} out"
    if s.reasoning_tokens:
        tokens += f" ({s.reasoning_tokens:,} reasoning)"
    parts = [f"requests {s.sent} sent, {s.cached} from cache, {s.provider_blocks} provider blocks", tokens]
    paced = client.rate_limits.summary()
    return parts + [paced] if paced else parts


def pending_requests(job: Job, table: pd.DataFrame, options: RunOptions,
                     client: Client) -> tuple[int, list[tuple[Request, str]]]:
    """The rows a round over ``table`` would still do (after the progress file, within ``--limit``),
    and their declared requests that the cache cannot answer, with their cache keys."""
    todo = pending_records(job.stage, table, job.work, limit=job.row_limit(options),
                           retry_upstream=options.retry_upstream)  # in memory (work None): nothing done yet
    requests = client.unanswered(r for record in todo.values() for r in job.stage.requests_of(record))
    return len(todo), requests


def estimate(job: Job, table: pd.DataFrame, options: RunOptions, client: Client) -> str:
    """``--estimate``: the text pricing the requests a run would send; nothing is sent or written."""
    from orbench.llm import pricing

    planned = job.planned(table, options)
    rows, requests = pending_requests(job, planned, options, client)
    text = pricing.estimate_text(requests, rows=rows, batch=options.batch, prices_file=options.prices)
    if job.stage.estimate_note is not None:
        todo = pending_records(job.stage, planned, job.work, limit=job.row_limit(options),
                               retry_upstream=options.retry_upstream)
        text += "\n" + job.stage.estimate_note(job.stage.settings, list(todo.values()))
    return text


async def send_batches(job: Job, table: pd.DataFrame, options: RunOptions, client: Client) -> AnswerSource:
    """``--batch``: the round's pending requests of providers with a batch API go through it
    (``orbench.llm.batch.run_batches``); returns the round's answer source, which answers those
    providers from the batch results and asks the others (e.g. a Together moderator in an
    ensemble) as usual. ``UsageError`` when no model has a batch API."""
    from orbench.llm import batch, providers

    batched = {s.provider.name for s in job.models if batch.has_batch_api(s.provider)}
    if not batched:
        names = ", ".join(sorted({s.provider.name for s in job.models})) or "none"
        raise UsageError(f"--batch: provider {names} has no batch API; providers with one: "
                         f"{', '.join(providers.batch_providers())}")
    if job.work is None:
        raise UsageError("batch=True needs output_file: the batches' state is kept beside the output, so "
                         "a rerun resumes polling and never submits the same rows twice")
    _, requests = pending_requests(job, table, options, client)
    requests = [(r, k) for r, k in requests if r.model.provider.name in batched]
    check_writable(job.work)  # before anything is submitted (and paid for)
    summary = await batch.run_batches(requests, client, job.work, poll_interval=options.poll_interval,
                                      quiet=options.quiet)
    return batch.BatchAnswers(client, batched, summary.failures)


def load_input(job: Job, options: RunOptions) -> tuple[pd.DataFrame, str, str | None]:
    """The job's input table, its name in messages, and (a file, not a URL) its absolute path."""
    if isinstance(job.input, pd.DataFrame):
        return job.input, job.input_name or "input", None
    input_path = resolve_input(job.input)
    if "://" not in str(input_path):
        input_path = str(Path(input_path).resolve())
    table = read_table(job.input, job.stage.needs, sep=options.sep)
    if job.work is not None and Path(input_path).resolve() == job.output.resolve():
        raise UsageError(f"--output_file {job.output} would overwrite the input file; choose another")
    return table, job.input_name or str(job.input), input_path


async def run_job(job: Job, options: RunOptions, command: list[str]) -> Delivery:
    """Steps 1 to 4 of the lifecycle (module docstring) for ``job``: its output and what the run
    came to. ``UsageError`` for bad input or configuration; any other exception is raised as it
    is. ``command`` is what the meta file records as the command that reruns it."""
    from orbench.run import serving, shards

    if options.shard is not None:
        if not job.shardable:
            raise UsageError(f"--shard: {shards.NOT_SHARDED}")
        if not options.output_file and not job.in_memory:
            job.output = shards.shard_output(job.output, options.shard)
    async with serving.engines(job, options) as options:
        return await _run_job(job, options, command)


async def _run_job(job: Job, options: RunOptions, command: list[str]) -> Delivery:
    from orbench.llm.replicas import row_concurrency
    from orbench.run import serving, shards

    client = make_client(options)
    try:
        table, name, input_path = load_input(job, options)
        whole = len(table)
        if options.shard is not None:
            table = shards.take(job.stage, table, options.shard)
        logger.debug("%s: %d input rows from %s -> %s", job.stage.stage_id, len(table), name,
                     "(in memory)" if job.in_memory else job.output)
        if job.stage.check is not None:
            job.stage.check(table, name)
        for spec in job.models:
            client.prepare(spec)
        job.guard(table, options)
        if options.estimate:
            return Delivery(None, len(table), [], estimate=estimate(job, table, options, client))
        result = None
        for rows in job.rounds(table, options):
            source = await send_batches(job, rows, options, client) if options.batch else client
            result = await arun_stage(job.stage, rows, job.work, concurrency=row_concurrency(options.concurrency, client),
                                      limit=job.row_limit(options), input_name=name, client=source,
                                      retry_upstream=options.retry_upstream, quiet=options.quiet,
                                      overwrite=options.overwrite, meta_path=meta_path_for(job.output))
            job.ran(result)
        delivery = job.deliver(table, result, client, options)
        delivery.meta = meta_of(job, delivery, client, input_path, command)
        if options.shard is not None:
            delivery.meta["shard"] = shards.meta_record(options.shard, len(table), whole)
        serving.record(delivery.meta, options, client)
        if not job.in_memory:
            write_meta(delivery)
        return delivery
    finally:
        await client.close()  # its SDK connections belong to this event loop


def execute(job: Job, options: RunOptions, command: list[str]) -> int:
    """Run ``job`` through the lifecycle (module docstring) from a script; returns the exit code.
    ``command`` is what the meta file records as the command that reruns it."""
    try:
        delivery = run_sync(run_job(job, options, command))
    except UsageError as exc:
        print(f"error: {redact(str(exc))}", file=sys.stderr)
        return 2
    except WaitPastPatience as exc:  # the rows stay to rerun after the wait
        print(f"stopped: {redact(str(exc))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        where = "" if job.work is None else f" in {progress_path_for(job.work)}"
        if options.batch:
            where += f" (submitted batches in {job.work.name}.batches.jsonl; a rerun resumes polling)"
        print(f"\ninterrupted: finished rows are saved{where}; rerun the same command to continue",
              file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - a bug in orbench: its traceback, and where the rows are
        kept = [] if job.work is None else [f"the rows finished before it are saved in {progress_path_for(job.work)}"]
        return report_bug(exc, kept)
    if delivery.estimate is not None:
        print(delivery.estimate)
        return 0
    return report(delivery, options.quiet)


#: What a script says under a bug's traceback.
BUG = "a bug in orbench: please report it, with the traceback above"


def report_bug(exc: BaseException, lines: Sequence[str] = ()) -> int:
    """A bug in orbench, said on stderr: its traceback, :data:`BUG` and ``lines`` (where the
    finished work is); also to the log. Returns the exit code, 3."""
    # DEBUG: for --log_file (the traceback is printed just below; a WARNING would print it twice)
    logger.debug("a bug in orbench: %s: %s", type(exc).__name__, exc, exc_info=exc)
    traceback.print_exception(exc, file=sys.stderr)
    print(f"error: {BUG}", file=sys.stderr)
    for line in lines:
        print(line, file=sys.stderr)
    return 3


def meta_of(job: Job, delivery: Delivery, client: Client, input_path: str | None, command: list[str]) -> dict:
    """The delivered output's provenance record (``orbench.run.provenance``)."""
    typed = list(job.typed) if job.typed is not None else [str(s) for s in job.models]
    meta = build_meta(stage=job.stage, result=delivery.result, client=client,
                      models=[client.describe(s, t) for s, t in zip(job.models, typed)],
                      input_path=input_path, input_rows=delivery.input_rows, output=delivery.result.output,
                      argv=command)
    if job.input_record and isinstance(meta.get("input"), dict):
        meta["input"].update(job.input_record)
    return meta


def write_meta(delivery: Delivery) -> None:
    """The delivered output's meta file, written atomically beside it."""
    path = meta_path_for(delivery.result.output)
    try:
        write_text_atomic(dumps(delivery.meta), path)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


def report(delivery: Delivery, quiet: bool, *, path: bool = True) -> int:
    """The summary, the warnings, why the exit code is not 0, and (``path``) the output path on
    stdout; the exit code."""
    if not quiet:
        for line in delivery.summary:
            print(line, file=sys.stderr)
    for warning in delivery.warnings:
        print(f"warning: {warning}", file=sys.stderr)  # even with --quiet, as the closing lines below
    for line in delivery.closing:
        print(line, file=sys.stderr)
    if path and delivery.result.output is not None:
        print(delivery.result.output)
    return delivery.exit_code
