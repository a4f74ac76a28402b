"""What every script shares on the command line: the common flags, one-line errors, exit codes.

A stage script builds an ``ArgumentParser``, adds its own flags and ``add_model_flags``, and calls
``run(parser, setup, argv)``; ``setup(args)`` returns an ``orbench.run.lifecycle.Job`` (the stage, its
input, its output path, the models it will call). ``run`` reads the shared flags once into
``orbench.run.lifecycle.RunOptions`` and runs the job through the lifecycle every stage shares
(``orbench.run.lifecycle.execute``: set-up, estimate, batch, run, meta file, summary), and returns the
exit code: 0 all rows done, 1 some rows have errors, 2 bad input or configuration (one line:
``error: ...``), 3 a bug in orbench (its traceback, :func:`report_bug`), 130 interrupted.

The Python API goes the same way from keywords instead of argv: :func:`keyword_settings` makes
the namespace ``parse_args`` would have made (the same names, defaults, types and choices), and the
same ``setup`` and lifecycle run it. Every parser made here takes ``-v/--verbose`` and
``--log_file`` (``orbench.logs``); the other scripts' ``main`` functions are wrapped in
:func:`entry_point`, which gives a bug exit code 3 with its traceback.
"""

from __future__ import annotations

import argparse
import functools
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from orbench.llm.clients import DEFAULT_CONCURRENCY, DEFAULT_MAX_RETRIES, DEFAULT_PATIENCE, DEFAULT_TIMEOUT
from orbench.llm.errors import UsageError
from orbench.llm.models import keys_not_needed, redact
from orbench.run import serving
from orbench.run.lifecycle import Delivery, Job, RunOptions, execute, report_bug, run_job

logger = logging.getLogger(__name__)

class ArgumentParser(argparse.ArgumentParser):
    """argparse with one-line errors (raised as ``UsageError``), help that shows defaults, and the
    logging flags ``-v/--verbose`` and ``--log_file``, applied as soon as the flags are parsed
    (``orbench.logs.configure``)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)
        group = self.add_argument_group("logging")
        # SUPPRESS: a sub-command's parser (orbench-audit sample) has them too, without overriding
        # what the main parser read
        group.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                           help="log everything from DEBUG on to stderr: providers and addresses, retries and "
                                "waits, files read and written (orbench's own loggers)")
        group.add_argument("--log_file", default=argparse.SUPPRESS, metavar="FILE",
                           help="append the same log, with times, to FILE (with or without -v)")

    def error(self, message: str):  # noqa: D401 - argparse hook
        # a mistyped flag is often why a required one is missing (--per_categry 2): name both
        unknown = [a for a in getattr(self, "_given", []) if a.startswith("--") and not self._takes(a)]
        if unknown and not message.startswith("unrecognized arguments"):
            message = f"{message}; {unrecognized_text(self, unknown)}"
        raise UsageError(f"{message} (see --help)")

    def _takes(self, arg: str) -> bool:
        """Whether ``arg`` (``--flag`` or ``--flag=value``) is one of this parser's long flags, or a
        prefix argparse accepts for one."""
        name = arg.split("=", 1)[0]
        flags = [o for a in self._actions for o in a.option_strings]
        return name in flags or (self.allow_abbrev and any(f.startswith(name) for f in flags))

    def parse_args(self, args=None, namespace=None):
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            self.error(unrecognized_text(self, extra))
        return parsed

    def parse_known_args(self, args=None, namespace=None):
        from orbench import logs

        self._given = [str(a) for a in (sys.argv[1:] if args is None else args)]
        parsed, extra = super().parse_known_args(args, namespace)
        if hasattr(parsed, "verbose") or hasattr(parsed, "log_file"):  # given (a second parser leaves them be)
            logs.configure(getattr(parsed, "verbose", False), getattr(parsed, "log_file", None))
        return parsed, extra


def unrecognized_text(parser: argparse.ArgumentParser, extra: list[str]) -> str:
    """argparse's "unrecognized arguments: ..." with, for the first mistyped flag, the closest flag
    the parser takes ("did you mean --concurrency?"), as the Python API names the closest setting.
    ``difflib``'s usual cutoff (0.6): a typo of a letter or two in a flag of ten is well above it."""
    import difflib

    text = "unrecognized arguments: " + " ".join(extra)
    parsers = [parser] + [p for a in parser._actions if isinstance(a, argparse._SubParsersAction)
                          for p in a.choices.values()]  # a sub-command's flags reach the main parser's check
    flags = sorted({o for p in parsers for a in p._actions for o in a.option_strings if o.startswith("--")})
    for item in extra:
        name = item.split("=", 1)[0]
        if name.startswith("--") and name not in flags:
            found = difflib.get_close_matches(name.lower(), flags, n=1)
            if found:
                return f"{text}; did you mean {found[0]}?"
            break
    return text


def entry_point(main: Callable[..., int]) -> Callable[..., int]:
    """A script's ``main`` with the exit codes every script shares: 2 for a ``UsageError`` it did not
    catch itself (one line), 130 for Ctrl-C, and 3 for any other exception, a bug in orbench
    (:func:`report_bug`)."""

    @functools.wraps(main)
    def wrapped(*args, **kwargs) -> int:
        from orbench import logs

        logs.configure()  # as its own flags say (the parser applies them), not as an earlier run in this process said
        try:
            return main(*args, **kwargs)
        except UsageError as exc:
            print(f"error: {redact(str(exc))}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("\ninterrupted", file=sys.stderr)
            return 130
        except Exception as exc:  # noqa: BLE001 - a bug: its traceback and exit code 3
            return report_bug(exc)

    return wrapped


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
                       help=f"rows in flight at once, one place each however many requests a row "
                            f"has; while a row's request waits out a provider's 429 or overload, its "
                            f"place goes to the next row (default: {DEFAULT_CONCURRENCY})")
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
                            "(OPENAI_COMPATIBLE_BASE_URL); several, comma-separated, are replicas of one model "
                            "that share the rows (docs/scale_out.md)")
    group.add_argument("--rpm", type=positive_float, default=None,
                       help="hard cap on requests per minute per model and address, evenly spaced "
                            "(default: no cap; requests are paced to the provider's 429s and "
                            "rate-limit headers, see docs/rate_limits.md)")
    group.add_argument("--patience", type=positive_float, default=DEFAULT_PATIENCE,
                       help="seconds one request may keep waiting out 429 and 503/529 'overloaded' "
                            "answers, from its first failure; a wait the server asks that does not fit "
                            "in what is left fails the row at once, naming it; three requests in a row "
                            "that give up on a wait past it, or spend all of it, stop the run (exit 1: "
                            f"rerun later) (default: {DEFAULT_PATIENCE:g})")
    group.add_argument("--timeout", type=positive_float, default=DEFAULT_TIMEOUT,
                       help=f"seconds one attempt may take, the whole reply included (default: "
                            f"{DEFAULT_TIMEOUT:g})")
    group.add_argument("--max_retries", type=non_negative_int, default=DEFAULT_MAX_RETRIES,
                       help="times one request is asked again after 408/409/5xx, a timeout, a dropped "
                            "connection or a reply with no answer in it (no choices, null content), "
                            "waiting as Retry-After says (within --patience) or backing off; 429 and "
                            f"overload answers spend --patience instead (default: {DEFAULT_MAX_RETRIES})")
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
    serving.add_flags(parser, positive_int, positive_float)


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
                      estimate=args.estimate, prices=args.prices, shard=args.shard, serve=serving.options_from(args))


@entry_point
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


async def run_settings(setup: Callable[[argparse.Namespace], Job], args: argparse.Namespace, *,
                       command: list[str], in_memory: bool = False, table: Any = None,
                       table_name: str | None = None, input_record: dict | None = None) -> Delivery:
    """A stage's run from its settings (``args``: the namespace ``parse_args`` or
    :func:`keyword_settings` made): ``setup`` makes the job, the lifecycle runs it
    (``orbench.run.lifecycle.run_job``). ``in_memory`` writes no file; ``table`` (a DataFrame of text
    cells, named ``table_name`` in messages) replaces the input file, ``input_record`` adds to its meta
    record's ``input`` (``orbench.run.lifecycle.Job.input_record``). What the Python API and
    ``orbench-calibrate`` run; a script runs the same through :func:`run`."""
    options = options_from(args)
    with keys_not_needed(options.estimate):  # --estimate sends nothing: no key asked
        job = setup(args)
        job.in_memory = in_memory
        if table is not None:
            job.input, job.input_name = table, table_name
        job.input_record = input_record
        delivery = await run_job(job, options, command)
    delivery.job = job
    return delivery


# ---------------------------------------------------------------- the same settings from keywords

def _flag_names(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Each setting a parser takes, by its flags' names without dashes (``input_file_path`` and
    ``input_file`` for one flag with two spellings) and by its ``dest``; help and logging aside."""
    names: dict[str, argparse.Action] = {}
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.dest in ("verbose", "log_file"):
            continue
        for option in action.option_strings:
            if option.startswith("--"):
                names.setdefault(option[2:], action)
        if action.option_strings:
            names.setdefault(action.dest, action)
    return names


def setting_names(parser: argparse.ArgumentParser) -> list[str]:
    """The keywords :func:`keyword_settings` takes for ``parser``: its flags without dashes."""
    return sorted({o[2:] for a in _flag_names(parser).values() for o in a.option_strings if o.startswith("--")})


def _convert(action: argparse.Action, name: str, value: Any) -> Any:
    """``value`` for ``action`` as ``parse_args`` would have made it from ``--name value``."""
    flag = f"--{name}"
    if action.nargs == 0:  # store_true / store_false
        if not isinstance(value, bool):
            raise UsageError(f"{name}={value!r}: expected True or False (the flag {flag} takes no value)")
        return value if isinstance(action, argparse._StoreTrueAction) else not value
    if value is None:
        return None
    if isinstance(action, argparse._AppendAction):  # a repeatable flag: a list of what each takes
        items = [value] if isinstance(value, str) or action.nargs not in (None, "?") and not \
            isinstance(value, (list, tuple)) else list(value)
        if action.nargs not in (None, "?") and items and not isinstance(items[0], (list, tuple)):
            items = [items]  # one --compare A B given as ("A", "B")
        return [_one(action, name, item) for item in items]
    return _one(action, name, value)


def _one(action: argparse.Action, name: str, value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_one(action, name, v) for v in value]
    if action.type is not None:
        text = value if isinstance(value, str) else ("" if isinstance(value, bool) else str(value))
        try:
            value = action.type(text)
        except (argparse.ArgumentTypeError, ValueError, TypeError) as exc:
            raise UsageError(f"argument --{name}: {exc}") from None
    elif not isinstance(value, str):
        value = str(value)
    if action.choices is not None and value not in action.choices:
        raise UsageError(f"argument --{name}: invalid choice: {value!r} (choose from "
                         f"{', '.join(map(repr, action.choices))})")
    return value


def keyword_settings(parser: argparse.ArgumentParser, given: dict, *, call: str,
                     fixed: dict | None = None) -> argparse.Namespace:
    """The namespace ``parser.parse_args`` would make, from keywords instead of flags: each
    keyword is a flag's name without dashes, with that flag's default when left out, its type's
    check (``concurrency=0`` fails as ``--concurrency 0`` does) and choices. ``fixed`` are the
    values the caller sets itself (the API's positional arguments), by ``dest``. ``UsageError``
    for a keyword no flag has, naming it and listing the valid ones (``call`` names the function)."""
    names = _flag_names(parser)
    unknown = [k for k in given if k not in names]
    if unknown:
        from orbench.run.tables import did_you_mean

        valid = [n for n in setting_names(parser) if names[n].dest not in (fixed or {})]
        raise UsageError(f"{call}() got an unknown setting {unknown[0]!r}{did_you_mean(unknown[0], valid)}; "
                         f"the settings it takes: {', '.join(valid)}")
    values = {a.dest: a.default for a in parser._actions if a.dest is not argparse.SUPPRESS
              and a.default is not argparse.SUPPRESS}
    values.update(parser._defaults)
    for name, value in given.items():
        action = names[name]
        if action.dest in (fixed or {}):
            raise UsageError(f"{call}() takes {name} as an argument of its own, not as a setting")
        values[action.dest] = _convert(action, name, value)
    values.update(fixed or {})
    return argparse.Namespace(**values)


def command_of(argv: Sequence[str] | None, module: str | None = None) -> list[str]:
    """The command that reruns this run, for the meta file: ``python SCRIPT ARGS`` (the script as an
    absolute path), or ``python -m MODULE ARGS`` when the stage was called with ``argv`` as a library."""
    if argv is None:
        return ["python", str(Path(sys.argv[0]).resolve()), *sys.argv[1:]]
    return ["python", "-m", module or "orbench", *argv]
