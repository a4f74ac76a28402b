"""What every stage script shares on the command line: the common flags, one-line errors, exit codes.

A stage script builds an ``ArgumentParser``, adds its own flags and ``add_model_flags``, and calls
``run(parser, setup)``; ``setup(args)`` returns an ``orbench.run.lifecycle.Job`` (the stage, its
input, its output path, the models it will call). ``run`` reads the shared flags once into
``orbench.run.lifecycle.RunOptions`` and runs the job through the lifecycle every stage shares
(``orbench.run.lifecycle.execute``: set-up, estimate, batch, run, meta file, summary), and returns the
exit code: 0 all rows done, 1 some rows have errors, 2 bad input or configuration (one line:
``error: ...``), 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from orbench.llm.clients import DEFAULT_CONCURRENCY, DEFAULT_MAX_RETRIES, DEFAULT_PATIENCE, DEFAULT_TIMEOUT
from orbench.llm.errors import UsageError
from orbench.llm.models import keys_not_needed, redact
from orbench.run.lifecycle import Job, RunOptions, execute


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
                       help=f"rows in flight at once; a row whose request waits out a provider's "
                            f"429 or overload gives its place to the next meanwhile (default: "
                            f"{DEFAULT_CONCURRENCY})")
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
                       help="hard cap on requests per minute per model and address, evenly spaced "
                            "(default: no cap; requests are paced to the provider's 429s and "
                            "rate-limit headers, see docs/rate_limits.md)")
    group.add_argument("--patience", type=positive_float, default=DEFAULT_PATIENCE,
                       help="seconds one request may keep waiting out 429 and 503/529 'overloaded' "
                            "answers (from its first such answer) before each further one spends one of "
                            f"--max_retries (default: {DEFAULT_PATIENCE:g})")
    group.add_argument("--timeout", type=positive_float, default=DEFAULT_TIMEOUT,
                       help=f"seconds one attempt may take, the whole reply included (default: "
                            f"{DEFAULT_TIMEOUT:g})")
    group.add_argument("--max_retries", type=non_negative_int, default=DEFAULT_MAX_RETRIES,
                       help="times one request is asked again after 408/409/5xx, a timeout, a dropped "
                            "connection or a reply with no answer in it (no choices, null content), "
                            "waiting as Retry-After says or backing off; 429 and overload answers "
                            f"spend --patience instead (default: {DEFAULT_MAX_RETRIES})")
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


def options_from(args: argparse.Namespace) -> RunOptions:
    """The shared flags of a parser built with ``add_model_flags``, read once; ``UsageError`` for a
    bad --sep. The parser owns the defaults; nothing else reads these flags from ``args``."""
    return RunOptions(output_file=args.output_file, limit=args.limit, sep=_separator(args.sep),
                      concurrency=args.concurrency, retry_upstream=args.retry_upstream_errors,
                      overwrite=args.overwrite, quiet=args.quiet, base_url=args.base_url, rpm=args.rpm,
                      patience=args.patience, timeout=args.timeout, max_retries=args.max_retries,
                      no_cache=args.no_cache, batch=args.batch, poll_interval=args.poll_interval,
                      estimate=args.estimate, prices=args.prices)


def run(parser: argparse.ArgumentParser, setup: Callable[[argparse.Namespace], Job],
        argv: Sequence[str] | None = None) -> int:
    """Parse flags, set the job up, run it through the lifecycle (``orbench.run.lifecycle.execute``);
    returns the process exit code."""
    try:
        args = parser.parse_args(argv)
        options = options_from(args)
        with keys_not_needed(options.estimate):  # --estimate sends nothing: no key asked
            job = setup(args)
            return execute(job, options, command_of(argv, setup.__module__))
    except UsageError as exc:
        print(f"error: {redact(str(exc))}", file=sys.stderr)
        return 2


def command_of(argv: Sequence[str] | None, module: str | None = None) -> list[str]:
    """The command that reruns this run, for the meta file: ``python SCRIPT ARGS`` (the script as an
    absolute path), or ``python -m MODULE ARGS`` when the stage was called with ``argv`` as a library."""
    if argv is None:
        return ["python", str(Path(sys.argv[0]).resolve()), *sys.argv[1:]]
    return ["python", "-m", module or "orbench", *argv]
