"""What every stage script shares on the command line: the common flags, one-line errors, exit codes.

A stage script builds an ``ArgumentParser``, adds its own flags and ``add_model_flags``, and calls
``run(parser, setup)``; ``setup(args)`` returns a ``Job`` (the stage, its input, its output
path, the models it will call). ``run`` reads and checks the input, sets up the providers (so a
missing key fails before any request), runs the stage, prints one summary line on stderr and the
output path on stdout, and returns the exit code: 0 all rows done, 1 some rows have errors,
2 bad input or configuration, 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from orbench.cache import Cache, default_cache_path
from orbench.clients import DEFAULT_CONCURRENCY, DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT, Client
from orbench.errors import UsageError
from orbench.models import ModelSpec, keys_not_needed, redact
from orbench.provenance import build_meta, dumps, meta_path_for
from orbench.ratelimit import DEFAULT_PATIENCE
from orbench.stage import (
    RunResult,
    Stage,
    check_existing,
    check_writable,
    pending_records,
    progress_path_for,
    run_stage,
)
from orbench.tables import read_table, resolve_input, write_text_atomic
from orbench.types import AnswerSource, Request


class ArgumentParser(argparse.ArgumentParser):
    """argparse with one-line errors (raised as ``UsageError``) and help that shows defaults."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # noqa: D401 - argparse hook
        raise UsageError(f"{message} (see --help)")


def _number(convert, ok, expected: str):
    """An argparse type: ``convert`` the text and check it with ``ok``, else say what was expected."""

    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            value = None
        if value is None or not ok(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    return parse


positive_int = _number(int, lambda v: v >= 1, "a whole number >= 1")
positive_float = _number(float, lambda v: v > 0, "a number > 0")
non_negative_int = _number(int, lambda v: v >= 0, "a whole number >= 0")
temperature = _number(float, lambda v: 0 <= v <= 2, "a number from 0 to 2")


def add_run_flags(parser: argparse.ArgumentParser, *,
                  output_help: str = "where to write the output CSV (default: named from the input, "
                                     "model and stage, in the current directory)",
                  limit_help: str = "process only the first N input rows (a trial run)",
                  upstream: bool = True) -> None:
    """Flags of every stage: --output_file, --limit, --concurrency, --quiet, and (``upstream``, for
    stages that read an earlier stage's output) --retry_upstream_errors; help texts may be
    stage-specific."""
    group = parser.add_argument_group("running")
    group.add_argument("--output_file", default=None, help=output_help)
    group.add_argument("--limit", type=positive_int, default=None, help=limit_help)
    group.add_argument("--sep", default=None, metavar="CHAR",
                       help="the input CSV's separator (default: the one its header line uses: ',', ';', "
                            "tab or '|')")
    group.add_argument("--concurrency", type=positive_int, default=DEFAULT_CONCURRENCY,
                       help=f"rows in flight at once, and requests in flight per provider "
                            f"(default: {DEFAULT_CONCURRENCY})")
    if upstream:
        group.add_argument("--retry_upstream_errors", action="store_true",
                           help="also process input rows whose 'error' is set by an earlier stage "
                                "(default: pass them through untouched, their error kept)")
    else:  # not offered (nothing upstream), so never asked for: RunOptions reads it as off
        parser.set_defaults(retry_upstream_errors=False)
    group.add_argument("--overwrite", action="store_true",
                       help="replace an existing output (finished or partly done) that was made with other "
                            "settings (default: stop with exit 2 naming the setting that differs, so a "
                            "finished output is never replaced silently; a change of the project's own rules "
                            "re-scores in place either way)")
    group.add_argument("--quiet", action="store_true",
                       help="no progress bar and no summary line; only the output path on stdout")


def add_model_flags(parser: argparse.ArgumentParser, *, temperature_default: float,
                    max_tokens_default: int, **run_flag_help) -> None:
    """Flags of every model-calling stage, with that stage's paper defaults.

    ``run_flag_help`` passes ``output_help`` / ``limit_help`` / ``upstream`` on to ``add_run_flags``.
    """
    add_run_flags(parser, **run_flag_help)
    group = parser.add_argument_group("model calls")
    group.add_argument("--temperature", type=temperature, default=temperature_default,
                       help=f"sampling temperature (default: {temperature_default})")
    group.add_argument("--max_tokens", type=positive_int, default=max_tokens_default,
                       help=f"most tokens per reply (default: {max_tokens_default})")
    group.add_argument("--base_url", default=None,
                       help="send requests to this address instead of the provider's (a server that "
                            "speaks the provider's protocol: OpenAI-compatible, Anthropic, Gemini); also "
                            "settable per provider as <PROVIDER>_BASE_URL, the name upper-cased with - as _ "
                            "(OPENAI_COMPATIBLE_BASE_URL)")
    group.add_argument("--rpm", type=positive_float, default=None,
                       help="hard cap on requests per minute per provider (default: no cap; without it "
                            "requests are paced to the limits the provider reports)")
    group.add_argument("--patience", type=positive_float, default=DEFAULT_PATIENCE,
                       help="seconds one request may keep waiting out the provider's rate limit (429 "
                            "answers) before the 429 counts as a failure and the SDK's retries apply "
                            f"(default: {DEFAULT_PATIENCE:g})")
    group.add_argument("--timeout", type=positive_float, default=DEFAULT_TIMEOUT,
                       help=f"seconds one attempt may take, the whole reply included (default: "
                            f"{DEFAULT_TIMEOUT:g})")
    group.add_argument("--max_retries", type=non_negative_int, default=DEFAULT_MAX_RETRIES,
                       help="SDK retries on 408/409/429/5xx/connection errors, with backoff that honours "
                            "Retry-After; also the retries of a reply with no answer in it (no choices, "
                            f"null content) (default: {DEFAULT_MAX_RETRIES})")
    group.add_argument("--no_cache", action="store_true",
                       help="do not read or write the response cache (ORBENCH_CACHE_DIR sets its folder)")
    cost = parser.add_argument_group("scale and cost")
    cost.add_argument("--batch", action="store_true",
                      help="send the rows still to do through the provider's batch API (OpenAI Batch, "
                           "Anthropic Message Batches, Gemini batch mode: half price, results within "
                           "24 h); a rerun resumes polling and never submits the same rows twice")
    cost.add_argument("--poll_interval", type=positive_float, default=30.0,
                      help="seconds between batch status checks with --batch (default: 30)")
    cost.add_argument("--estimate", action="store_true",
                      help="send nothing: print the requests this run would send (after the cache and "
                           "the progress file), their estimated tokens and price, and exit")
    cost.add_argument("--prices", default=None, metavar="FILE",
                      help="a CSV of prices (provider, model, input_per_million, output_per_million, "
                           "batch_discount) that overrides the built-in table for --estimate")


def _separator(text: str | None) -> str | None:
    """``--sep`` as one character (``\\t`` and ``tab`` mean a tab); ``UsageError`` otherwise."""
    if text is None:
        return None
    value = {"\\t": "\t", "tab": "\t"}.get(text, text)
    if len(value) != 1:
        raise UsageError(f"--sep must be one character (e.g. --sep ';' or --sep tab), got {text!r}")
    return value


@dataclass(frozen=True)
class RunOptions:
    """The flags every stage shares (``add_model_flags``), read once from the parsed arguments.

    The parser owns the defaults; nothing else reads these flags from ``args``.
    """

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

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RunOptions:
        """The options of a parser built with ``add_model_flags``; ``UsageError`` for a bad --sep."""
        return cls(output_file=args.output_file, limit=args.limit, sep=_separator(args.sep),
                   concurrency=args.concurrency, retry_upstream=args.retry_upstream_errors,
                   overwrite=args.overwrite, quiet=args.quiet, base_url=args.base_url, rpm=args.rpm,
                   patience=args.patience, timeout=args.timeout, max_retries=args.max_retries,
                   no_cache=args.no_cache, batch=args.batch, poll_interval=args.poll_interval,
                   estimate=args.estimate, prices=args.prices)


def make_client(options: RunOptions) -> Client:
    """A ``Client`` configured from the common model flags."""
    if options.batch and options.no_cache:
        raise UsageError("--batch needs the response cache (batch answers are stored there); drop --no_cache")
    use_cache = not options.no_cache
    if options.estimate and not default_cache_path().exists():
        use_cache = False  # --estimate writes nothing, not even an empty cache
    return Client(cache=Cache() if use_cache else None, base_url=options.base_url,
                  concurrency=options.concurrency, rpm=options.rpm, timeout=options.timeout,
                  max_retries=options.max_retries, patience=options.patience)


@dataclass
class Job:
    """What ``setup`` hands back to ``run``: the stage and where its data comes from and goes."""

    stage: Stage
    input: str | pd.DataFrame
    output: Path
    models: Sequence[ModelSpec] = field(default_factory=list)
    input_name: str | None = None
    typed: Sequence[str] | None = None  # the model names as the user wrote them, parallel to models


def summary_line(stage: Stage, result: RunResult, client: Client | None) -> str:
    """The one line printed at the end of a run."""
    counts = f"{result.new} new, {result.resumed} resumed, {result.errors} errors"
    if result.upstream_errors:
        counts += f", {result.upstream_errors} passed through with an earlier stage's error"
    parts = [f"{stage.name}: {result.rows} rows -> {result.output}", counts]
    if result.outcomes is not None:
        parts.append(result.outcomes.text)
    if result.bad_progress_lines:
        parts.append(f"{result.bad_progress_lines} unreadable progress lines skipped")
    if client is not None:
        s = client.stats
        parts.append(f"requests {s.sent} sent, {s.cached} from cache, {s.provider_blocks} provider blocks")
        tokens = f"tokens {s.input_tokens:,} in / {s.output_tokens:,} out"
        if s.reasoning_tokens:
            tokens += f" ({s.reasoning_tokens:,} reasoning)"
        parts.append(tokens)
        paced = client.rate_limits.summary()
        if paced:
            parts.append(paced)
    parts.append(f"{result.elapsed:.1f}s")
    parts.extend(result.notes)
    return " | ".join(parts)


def pending_requests(stage: Stage, table: pd.DataFrame, output: Path, options: RunOptions,
                     client: Client) -> tuple[int, list[tuple[Request, str]]]:
    """The rows a run of ``stage`` on ``table`` would still do (after the progress file, within
    ``--limit``), and their declared requests that the cache cannot answer, with their cache keys."""
    todo = pending_records(stage, table, output, limit=options.limit, retry_upstream=options.retry_upstream)
    requests = client.unanswered(r for record in todo.values() for r in stage.requests_of(record))
    return len(todo), requests


def estimate(stage: Stage, table: pd.DataFrame, output: Path, options: RunOptions, client: Client) -> str:
    """``--estimate``: the text pricing the requests a run would send; nothing is sent or written."""
    from orbench import pricing

    rows, requests = pending_requests(stage, table, output, options, client)
    return pricing.estimate_text(requests, rows=rows, batch=options.batch, prices_file=options.prices)


def send_batches(stage: Stage, table: pd.DataFrame, output: Path, options: RunOptions, client: Client,
                 models: Sequence[ModelSpec]) -> AnswerSource:
    """``--batch``: the pending requests of providers with a batch API go through it
    (``orbench.batch.run_batches``); returns the run's answer source, which answers those providers
    from the batch results and asks the others (e.g. a Together moderator in an ensemble) as usual.
    ``UsageError`` when no model has a batch API."""
    from orbench import batch, providers

    batched = {s.provider.name for s in models if batch.has_batch_api(s.provider)}
    if not batched:
        names = ", ".join(sorted({s.provider.name for s in models})) or "none"
        raise UsageError(f"--batch: provider {names} has no batch API; providers with one: "
                         f"{', '.join(providers.batch_providers())}")
    _, requests = pending_requests(stage, table, output, options, client)
    requests = [(r, k) for r, k in requests if r.model.provider.name in batched]
    check_writable(output)  # before anything is submitted (and paid for)
    summary = batch.run_batches(requests, client, output, poll_interval=options.poll_interval,
                                quiet=options.quiet)
    return batch.BatchAnswers(client, batched, summary.failures)


def run(parser: argparse.ArgumentParser, setup: Callable[[argparse.Namespace], Job],
        argv: Sequence[str] | None = None) -> int:
    """Parse flags, run the job, report; returns the process exit code."""
    try:
        args = parser.parse_args(argv)
        options = RunOptions.from_args(args)
        with keys_not_needed(options.estimate):  # --estimate sends nothing: no key asked
            return _run(setup, args, options, command_of(argv, setup.__module__))
    except UsageError as exc:
        print(f"error: {redact(str(exc))}", file=sys.stderr)
        return 2


def _load(job: Job, options: RunOptions, output: Path) -> tuple[pd.DataFrame, str, str | None]:
    """The job's input table, its name in messages, and (a file, not a URL) its absolute path."""
    if isinstance(job.input, pd.DataFrame):
        return job.input, job.input_name or "input", None
    input_path = resolve_input(job.input)
    if "://" not in str(input_path):
        input_path = str(Path(input_path).resolve())
    table = read_table(job.input, job.stage.needs, sep=options.sep)
    if Path(input_path).resolve() == output.resolve():
        raise UsageError(f"--output_file {output} would overwrite the input file; choose another")
    return table, job.input_name or str(job.input), input_path


def command_of(argv: Sequence[str] | None, module: str | None = None) -> list[str]:
    """The command that reruns this run, for the meta file: ``python SCRIPT ARGS`` (the script as an
    absolute path), or ``python -m MODULE ARGS`` when the stage was called with ``argv`` as a library."""
    if argv is None:
        return ["python", str(Path(sys.argv[0]).resolve()), *sys.argv[1:]]
    return ["python", "-m", module or "orbench", *argv]


def _write_meta(job: Job, result: RunResult, client: Client, table: pd.DataFrame, input_path: str | None,
                command: list[str]) -> None:
    typed = list(job.typed) if job.typed is not None else [str(s) for s in job.models]
    meta = build_meta(stage=job.stage, result=result, client=client,
                      models=[client.describe(s, t) for s, t in zip(job.models, typed)],
                      input_path=input_path, input_rows=len(table), output=result.output, argv=command)
    try:
        write_text_atomic(dumps(meta), meta_path_for(result.output))
    except OSError as exc:
        raise UsageError(f"cannot write {meta_path_for(result.output)}: {exc.strerror or exc}") from None


def _say(job: Job, result: RunResult, client: Client, quiet: bool) -> int:
    """The summary line, the warnings, the errors line and the output path; returns the exit code."""
    if not quiet:
        for line in [summary_line(job.stage, result, client), *result.lines]:
            print(line, file=sys.stderr)
    warnings = [*(result.outcomes.warnings if result.outcomes is not None else []), *result.warnings]
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)  # even with --quiet, as the errors line below
    if result.errors:
        print(f"{result.errors} rows still have errors (see the 'error' column); rerun the same "
              f"command to retry them", file=sys.stderr)
    print(result.output)
    return result.exit_code


def _run(setup: Callable[[argparse.Namespace], Job], args: argparse.Namespace,
         options: RunOptions, command: list[str]) -> int:
    """``run`` after the flags are parsed."""
    output = None
    try:
        client = make_client(options)
        job = setup(args)
        output = Path(job.output)
        table, name, input_path = _load(job, options, output)
        if job.stage.check is not None:
            job.stage.check(table, name)
        for spec in job.models:
            client.prepare(spec)
        source: AnswerSource = client
        if options.estimate or options.batch:
            check_existing(job.stage, table, output, overwrite=options.overwrite)  # before anything is submitted
            if options.estimate:
                print(estimate(job.stage, table, output, options, client))
                return 0
            source = send_batches(job.stage, table, output, options, client, job.models)
        result = run_stage(job.stage, table, output, concurrency=options.concurrency, limit=options.limit,
                           input_name=name, client=source, retry_upstream=options.retry_upstream,
                           quiet=options.quiet, overwrite=options.overwrite)
        _write_meta(job, result, client, table, input_path, command)
    except UsageError as exc:
        print(f"error: {redact(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        where = f" in {progress_path_for(output)}" if output else ""
        if output and options.batch:
            where += f" (submitted batches in {output.name}.batches.jsonl; a rerun resumes polling)"
        print(f"\ninterrupted: finished rows are saved{where}; rerun the same command to continue",
              file=sys.stderr)
        return 130
    return _say(job, result, client, options.quiet)
