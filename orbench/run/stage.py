"""The CSV stage runner: validate, resume, run rows concurrently, write the output atomically.

A stage script describes its work as a ``Stage`` (the input columns it needs, the columns it
adds, the requests one row needs and how its result is decided from their answers, and the
settings that change its results) and hands it to ``run_stage`` with an answer source
(``orbench.llm.types.AnswerSource``: the ``Client``, or ``orbench.llm.batch.BatchAnswers`` after a
batch). The runner asks each row's requests together and keeps these promises:

- **Columns have owners.** A stage declares the columns it adds in ``adds`` (plus ``error``).
  On a row that failed or was not processed every declared column is empty: an input value
  under one of those names is never passed off as this stage's result. A row result may also
  carry keys beyond ``adds``: a key that names an input column overrides that row's value (the
  rewriter's ``prompt``), and any other key becomes an extra column after the declared ones,
  empty on the rows that lack it. Only the declared columns are blanked on failure.
- **Upstream failures pass through.** An input row whose ``error`` is set is not sent to a model:
  it is written back unchanged (its own columns empty, its error text kept) and counted apart,
  unless ``retry_upstream`` asks to process it anyway.
- **Resume.** Each finished row is appended, as one JSON line, to a progress file beside the output
  (``<output>.progress.jsonl``) the moment it finishes. A rerun skips rows already done (matched by
  a hash of the stage's settings, its rules' fingerprints and the row's key columns) and retries
  rows that errored. A crash or Ctrl-C loses no finished row; a torn or malformed line is skipped
  and counted.
- **Nothing replaced silently.** A stage's settings (``orbench.run.settings``) record two kinds of
  setting, both in every row's key: ``settings`` (what the user asked for: model, system prompt,
  temperature, ...) and ``rules`` (fingerprints of the project's own rules: keyword rules,
  templates, cascade classes). The
  progress file's first line records both before the first request, and the meta file does for
  a finished output. A run whose ``settings`` differ from those an existing output (finished or
  partly done) was made with stops before any work (``UsageError``: the output, each setting
  that differs with its old and new value, and the ways on: ``--output_file`` or
  ``--overwrite``); with ``overwrite`` the old rows are discarded and the output is replaced at
  the end of the run. Changed ``rules`` re-score in place, and ``RunResult.notes`` says so.
  Outputs of earlier versions (no first line) are read through their meta file, or else by
  their row keys.
- **One writer.** A lock (``<output>.lock``) is held for the run and removed at its end; a second
  run on the same output stops at once with exit 2. Temporary files are unique per process.
- **Trial runs are harmless.** ``limit`` processes the first rows only, but never shrinks an
  existing output or its progress file: rows done earlier stay in both.
- **Order and atomicity.** The output keeps every input column, adds the stage's columns and an
  ``error`` column, lists rows in input order, and is written through a temporary file and a rename.
- **Bounded concurrency**: ``concurrency`` rows in flight, the one bound. A row holds one place
  however many requests it has (they run in one ``asyncio.TaskGroup``: the first failure cancels
  the rest, ``orbench.llm.clients.together``); while one of them waits out a provider's 429 or
  overload the place goes to the next row, and is taken back once
  (``orbench.llm.clients.RowPlace``), with a tqdm progress bar on a
  terminal, and one plain progress line every ``PROGRESS_EVERY`` seconds when stderr is not one
  (CI, ``nohup``, a job scheduler); ``quiet`` silences both. Both count the rows of the whole
  output: a resumed run of 60 rows with 28 done before shows 33/60 after 5 more, not 5/32.
- **Failures are data; bugs are not.** A row fails, keeping its place with an ``error`` text
  naming the stage, on what ``orbench.llm.errors.fails_the_row`` says: a request's failure the
  provider's ``classify`` sorted as one (``RowError``, after the retries), a transport error, or an
  input row the stage cannot process (``RowError`` from its ``requests`` or ``decide``). A
  ``FatalProviderError`` (bad key, unknown model) stops the run at once; so does a full disk
  (``UsageError``); and so does any other exception, from a stage's ``requests``, ``decide`` or
  ``finish``: a bug in orbench, raised with its traceback (the script's exit code 3). Every row
  finished before a stop is kept in the progress file.
- **Exit status.** ``RunResult.exit_code`` is 0 when every row is done and 1 when some still
  have errors (bad input is the caller's exit 2, raised as ``UsageError`` before any work).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm import tqdm

from orbench.llm.clients import DEFAULT_CONCURRENCY, ROW_PLACE, RowPlace, together
from orbench.llm.errors import UsageError, fails_the_row
from orbench.llm.models import redact
from orbench.llm.types import AnswerSource, Completion, Request
from orbench.run import existing_output
from orbench.run.outcomes import Outcomes
from orbench.run.provenance import meta_path_for
from orbench.run.settings import recorded
from orbench.run.tables import apply_umask, missing_columns_text, write_csv_atomic

logger = logging.getLogger(__name__)
RowResult = dict | list[dict]
PROGRESS_EVERY = 30.0  # seconds between plain progress lines when stderr is not a terminal


@dataclass
class Stage:
    """One pipeline stage as the runner sees it.

    ``settings`` is the stage's frozen settings dataclass (``orbench.run.settings``): everything that
    changes a row's result, the model and sampling the user asked for as well as the project's
    rules the result depends on (templates, keyword rules, cascade classes). Each row's key is
    derived from it (``config``), so no setting can be left out of it; a rerun with other user
    settings stops unless told to overwrite, a rerun with other rules redoes the rows in place.

    ``requests(settings, row)`` gets the input row as a dict of strings and returns the model
    requests it needs (none for a row decided without a model); the runner has them answered
    together, and ``decide(settings, row, answers)`` gets the answers in the same order and
    returns the values of the added columns: one dict, or a list of dicts when one input row
    becomes several output rows (each output dict may also override input columns, as the
    rewriter does with ``prompt``). Because every request is declared up front, ``--estimate``
    and ``--batch`` read the pending rows' requests without running anything.

    ``finish(settings, frame)``, if given, gets the assembled output (input order, ``error``
    last) and returns what the run came to (:class:`Finished`): the frame to write (the place for
    steps that need the whole file, such as the rewriter's cross-file deduplication), the
    outcome counts and warnings, and the meta file's further keys. ``provenance`` is copied into
    the meta file (templates' hashes, the rules' fingerprint...). ``check(table, input_name)``,
    if given, gets the whole input before any request (``orbench.run.lifecycle`` calls it) and raises
    ``UsageError`` for a bad cell.
    """

    name: str
    needs: Sequence[str]
    adds: Sequence[str]
    requests: Callable[[Any, dict], Sequence[Request]]
    decide: Callable[[Any, dict, list[Completion]], RowResult]
    settings: Any = None
    key_columns: Sequence[str] | None = None
    finish: Callable[[Any, pd.DataFrame], Finished] | None = None
    provenance: dict = field(default_factory=dict)
    #: The short name an error text starts with (``check_alignment: HTTP 500 ...``); default ``name``.
    stage_id: str = ""
    check: Callable[[pd.DataFrame, str], None] | None = None
    #: ``estimate_note(settings, records)``, if given: a line ``--estimate`` adds about the pending rows.
    estimate_note: Callable[[Any, list[dict]], str] | None = None
    #: What ``settings`` records (``orbench.run.settings.recorded``): the user's part and the rules.
    key_settings: dict = field(init=False)
    key_rules: dict = field(init=False)

    def __post_init__(self) -> None:
        self.stage_id = self.stage_id or self.name
        self.key_settings, self.key_rules = recorded(self.settings)

    def requests_of(self, row: dict) -> list[Request]:
        """The requests ``row`` needs, in the order ``decide`` gets their answers."""
        return list(self.requests(self.settings, row))

    @property
    def config(self) -> dict:
        """What every row's key covers: the stage id, the user's settings and the rules'
        fingerprints (one flat dict, as earlier versions keyed their rows, so their outputs resume)."""
        return {"stage": self.stage_id, **self.key_settings, **self.key_rules}


@dataclass
class Finished:
    """What a stage made of its assembled output (``Stage.finish``)."""

    frame: pd.DataFrame
    #: The summary's counts and warnings and the meta file's ``outcomes`` (``orbench.run.outcomes``).
    outcomes: Outcomes | None = None
    #: Further keys of the meta file (counts of this output, e.g. the rewriter's ``rewrite_counts``).
    meta: dict = field(default_factory=dict)
    #: Further summary lines (not with ``--quiet``) and warnings (always).
    lines: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass
class RunResult:
    """What a run did, for the summary line, the meta file and the exit code."""

    output: Path | None  # None: an in-memory run
    rows: int = 0
    new: int = 0
    resumed: int = 0
    errors: int = 0
    upstream_errors: int = 0
    bad_progress_lines: int = 0
    elapsed: float = 0.0
    started: float = 0.0
    finished: float = 0.0
    notes: list[str] = field(default_factory=list)  # re-scored for new rules, replaced on --overwrite
    outcomes: Outcomes | None = None  # what the rows came to, when the stage counts it
    meta: dict = field(default_factory=dict)  # the stage's further keys of the meta file
    lines: list[str] = field(default_factory=list)  # the stage's further summary lines
    warnings: list[str] = field(default_factory=list)  # the stage's warnings beside the outcomes'
    frame: pd.DataFrame | None = None  # the output as written (or, in memory, as it would be)

    @property
    def exit_code(self) -> int:
        return 1 if self.errors else 0


def progress_path_for(output: Path) -> Path:
    """The progress file that makes a run resumable."""
    return output.with_name(output.name + ".progress.jsonl")


def lock_path_for(output: Path) -> Path:
    """The lock file held while a run writes ``output``."""
    return output.with_name(output.name + ".lock")


def row_key(config: dict, values: Sequence[str]) -> str:
    """A stable hash of the stage settings and a row's key values."""
    blob = json.dumps([config, list(values)], sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:32]


def _well_formed(entry: object) -> bool:
    """True for a progress entry of the shape the runner writes."""
    if not isinstance(entry, dict) or not isinstance(entry.get("key"), str):
        return False
    rows, error = entry.get("rows"), entry.get("error")
    if error is not None and not isinstance(error, str):
        return False
    if rows is None:
        return bool(error)
    return isinstance(rows, list) and bool(rows) and all(isinstance(r, dict) for r in rows)


def _disk_full(path: Path, exc: OSError) -> UsageError:
    return UsageError(f"cannot write {path}: {os.strerror(exc.errno) if exc.errno else exc}; every "
                      f"finished row is saved, free some space and rerun the same command")


class ProgressLog:
    """Append-only JSON-lines record of finished rows: ``{"key", "rows", "error"}`` per line.

    ``entries`` holds the latest entry per key: what ``load`` read plus what ``append`` wrote.
    ``bad_lines`` counts lines ``load`` skipped (torn by a kill, or not of the runner's shape).
    ``header`` is the settings line ``load`` found (the file's first line), or None.
    With ``path`` None (an in-memory run) the entries are kept in memory only.
    """

    def __init__(self, path: Path | None):
        self.path = path
        self.entries: dict[str, dict] = {}
        self.bad_lines = 0
        self.header: dict | None = None
        self._handle = None

    def load(self) -> dict[str, dict]:
        """The latest entry per key; unreadable or malformed lines are skipped and counted. The
        settings line (``orbench.run.existing_output``) is kept in ``header``, not counted as a row."""
        entries = self.entries = {}
        self.bad_lines = 0
        self.header = None
        if self.path is None or not self.path.exists():
            return entries
        try:
            with open(self.path, encoding="utf-8", errors="replace") as handle:
                for line in handle:
                    if not line.strip():
                        continue
                    try:
                        entry = json.loads(line)
                    except ValueError:
                        entry = None
                    if _well_formed(entry):
                        entries[entry["key"]] = entry
                    elif existing_output.is_header(entry):
                        self.header = entry
                    else:
                        self.bad_lines += 1
        except OSError as exc:
            raise UsageError(f"cannot read the progress file {self.path}: {exc.strerror or exc}") from None
        return entries

    def open(self) -> None:
        if self.path is None:
            return
        # A killed writer may leave a line without its newline; start ours on a fresh line.
        needs_newline = False
        if self.path.exists() and self.path.stat().st_size:
            with open(self.path, "rb") as handle:
                handle.seek(-1, os.SEEK_END)
                needs_newline = handle.read(1) != b"\n"
        existed = self.path.exists()
        self._handle = open(self.path, "a", encoding="utf-8")
        if not existed:
            apply_umask(self.path)
        if needs_newline:
            self._handle.write("\n")

    def append(self, entry: dict) -> None:
        if self.path is None:
            self.entries[entry["key"]] = entry
            return
        try:
            self._handle.write(json.dumps(entry, ensure_ascii=False, default=str) + "\n")
            self._handle.flush()
        except OSError as exc:
            raise _disk_full(self.path, exc) from None
        self.entries[entry["key"]] = entry

    def close(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            try:
                handle.close()
            except OSError:
                pass  # a full disk: the lines that reached the file are what was saved

    def rewrite(self, entries: list[dict], header: dict | None = None) -> None:
        """Replace the file with ``header`` (the settings line), then just ``entries`` (drops stale
        keys after a finished run)."""
        if self.path is None:
            self.header = header
            return
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                for entry in ([header] if header else []) + list(entries):
                    handle.write(json.dumps(entry, ensure_ascii=False, default=str) + "\n")
            apply_umask(Path(tmp))
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self.header = header


def _same_file(handle, path: Path) -> bool:
    """True when ``path`` still names the file ``handle`` has open (not removed, not replaced)."""
    try:
        here, there = os.fstat(handle.fileno()), os.stat(path)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


class OutputLock:
    """An exclusive, non-blocking lock on ``<output>.lock`` for the length of a run; no file is left.

    The holder removes the lock file while it still holds the lock, then releases it. A second
    writer that opened the file before the removal may get the lock on the removed file once it
    is released, so after locking it checks that the path still names the file it holds; if
    not, it opens the path afresh and tries again. Two writers can therefore never both believe
    they hold the lock of one output.
    """

    def __init__(self, output: Path):
        self.path = lock_path_for(output)
        self._handle = None

    def __enter__(self) -> OutputLock:
        try:
            import fcntl
        except ImportError:  # not POSIX: no lock
            return self
        for _ in range(100):  # each retry means another writer finished in between: rare
            handle = open(self.path, "a+")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                handle.close()
                raise UsageError(f"another run is writing {self.path.with_suffix('')} (it holds the lock "
                                 f"{self.path}); wait for it to finish or choose another --output_file") from None
            if _same_file(handle, self.path):
                self._handle = handle
                return self
            handle.close()  # locked a removed file: the previous writer finished; lock the current one
        raise UsageError(f"cannot lock {self.path}: other runs keep replacing it")

    def __exit__(self, *exc) -> None:
        handle, self._handle = self._handle, None
        if handle is None:
            return
        try:
            if _same_file(handle, self.path):
                os.unlink(self.path)  # while the lock is still held: see the class docstring
        except OSError:
            pass  # a read-only folder: the empty file stays, harmless
        finally:
            handle.close()  # closing releases the lock


def check_writable(output: Path) -> None:
    """``UsageError`` unless ``output`` (and its progress and lock files) can be written.

    Run before the first request, so a bad path never costs a paid call.
    """
    for parent in output.parents:
        if parent.exists():
            if not parent.is_dir():
                raise UsageError(f"cannot write {output}: {parent} is a file, not a folder")
            break
    if output.is_dir():
        raise UsageError(f"--output_file {output} is a folder; give a file path")
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".probe", dir=output.parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UsageError(f"cannot write to the folder {output.parent}: {exc.strerror or exc}") from None
    for path in (output, progress_path_for(output)):
        if path.is_dir():
            raise UsageError(f"cannot write {path}: it is a folder")
        if path.exists() and not os.access(path, os.W_OK):
            raise UsageError(f"cannot write {path}: permission denied")


def _as_rows(result: RowResult) -> list[dict]:
    rows = result if isinstance(result, list) else [result]
    if not rows:
        raise ValueError("stage returned no output row")
    return rows


def _has_error(record: dict) -> bool:
    return bool(str(record.get("error") or "").strip())


def _row_keys(stage: Stage, records: list[dict]) -> list[str]:
    key_columns, config = list(stage.key_columns or stage.needs), stage.config
    return [row_key(config, [r.get(c, "") for c in key_columns]) for r in records]


def _todo(records: list[dict], keys: list[str], upstream: list[bool], done: set[str],
          limit: int | None) -> dict[str, dict]:
    """The rows still to process, by key, in input order: within ``limit``, not done, not an
    upstream error; a key met twice is asked once."""
    todo: dict[str, dict] = {}
    for i in range(len(records) if limit is None else min(limit, len(records))):
        if not upstream[i] and keys[i] not in done:
            todo.setdefault(keys[i], records[i])
    return todo


def _done(entries: dict[str, dict]) -> set[str]:
    return {k for k, e in entries.items() if not e.get("error")}


def pending_records(stage: Stage, table: pd.DataFrame, output: Path, *, limit: int | None = None,
                    retry_upstream: bool = False) -> dict[str, dict]:
    """The rows a run would still process, by row key: not done in the progress file, not an
    upstream error (unless ``retry_upstream``), within ``limit``. Reads, never writes."""
    records = table.to_dict("records")
    upstream = [(not retry_upstream) and _has_error(r) for r in records]
    done = _done(ProgressLog(progress_path_for(Path(output))).load())
    return _todo(records, _row_keys(stage, records), upstream, done, limit)


def guard_existing(stage: Stage, output: Path, log: ProgressLog, keys: Sequence[str], *,
                   overwrite: bool = False, meta_path: Path | None = None, **how) -> tuple[bool, list[str]]:
    """Check ``output`` (and ``log``, loaded) against this run's settings before any work.

    ``UsageError`` when the output was made with other settings and ``overwrite`` is off (see
    ``orbench.run.existing_output``; ``how`` passes ``exists`` and ``unrecorded_ok`` on to its
    ``inspect``). Returns whether the old rows are to be discarded (``overwrite`` of a conflicting
    output) and the summary's notes (replaced, or re-scored for new rules).
    """
    found = existing_output.inspect(stage.stage_id, stage.key_settings, stage.key_rules, output, header=log.header,
                                    entries=log.entries, keys=keys,
                                    meta_path=meta_path or meta_path_for(output), **how)
    notes = existing_output.check(found, overwrite)
    return bool(found is not None and found.conflict), notes


def check_existing(stage: Stage, table: pd.DataFrame, output: Path, *, overwrite: bool = False) -> list[str]:
    """``guard_existing`` for a run about to be priced or batched (reads, never writes)."""
    log = ProgressLog(progress_path_for(Path(output)))
    log.load()
    return guard_existing(stage, Path(output), log, _row_keys(stage, table.to_dict("records")),
                          overwrite=overwrite)[1]


def run_stage(stage: Stage, table: pd.DataFrame, output: Path | None, **how) -> RunResult:
    """:func:`arun_stage` run to its end from synchronous code (``orbench.run_sync``)."""
    from orbench.run.loops import run_sync

    return run_sync(arun_stage(stage, table, output, **how))


async def arun_stage(stage: Stage, table: pd.DataFrame, output: Path | None, *,
                     concurrency: int = DEFAULT_CONCURRENCY, limit: int | None = None, input_name: str = "input",
                     client: AnswerSource | None = None, retry_upstream: bool = False,
                     quiet: bool = False, overwrite: bool = False, meta_path: Path | None = None) -> RunResult:
    """Run ``stage`` over ``table`` and write ``output``; see the module docstring for the promises.

    ``output`` None runs in memory: no lock, no progress file, nothing written, nothing resumed;
    ``RunResult.frame`` holds the output either way. ``client`` answers the rows' requests (None
    for a stage that asks no model). ``overwrite`` replaces an output made with other settings
    (else ``UsageError``); ``meta_path`` is where that output's meta file is (default
    ``<output>.meta.json``).
    """
    output = None if output is None else Path(output)
    missing = [c for c in stage.needs if c not in table.columns]
    if missing:
        raise UsageError(missing_columns_text("input", input_name, missing, list(table.columns)))
    if output is not None:
        check_writable(output)
    records = table.to_dict("records")
    keys = _row_keys(stage, records)
    upstream = [(not retry_upstream) and _has_error(r) for r in records]

    with OutputLock(output) if output is not None else contextlib.nullcontext():
        log = ProgressLog(progress_path_for(output) if output is not None else None)
        log.load()
        discard, notes = (guard_existing(stage, output, log, keys, overwrite=overwrite, meta_path=meta_path)
                          if output is not None else (False, []))
        previous = log.entries = {} if discard else log.entries  # --overwrite: the old rows go
        done = _done(previous)
        # A trial run works on the first rows, but keeps every row an earlier run wrote: the
        # rows it finished or failed, and (when there is an earlier output) the passed-through ones.
        chosen = len(records) if limit is None else limit
        earlier = output is not None and output.exists() and not discard
        keep = [i for i in range(len(records))
                if i < chosen or keys[i] in previous or (earlier and upstream[i])]
        todo = _todo(records, keys, upstream, done, limit)
        result = RunResult(output=output, rows=len(keep), bad_progress_lines=log.bad_lines, notes=notes)
        result.resumed = sum(1 for i in keep if not upstream[i] and keys[i] in done)
        result.upstream_errors = sum(1 for i in keep if upstream[i])
        header = existing_output.header_for(stage.stage_id, stage.key_settings, stage.key_rules)

        result.started = time.time()
        started = time.monotonic()
        if todo:
            weights = Counter(keys[i] for i in keep if keys[i] in todo)
            await _process(stage, todo, log, header, concurrency, client, quiet, fresh=discard,
                           weights=weights, total=len(keep))
        result.elapsed = time.monotonic() - started
        result.finished = time.time()

        entries = log.entries
        picked = [(records[i], keys[i], upstream[i]) for i in keep]
        frame, result.errors = _assemble(stage, table.columns, picked, entries)
        result.new = result.rows - result.resumed - result.upstream_errors
        if stage.finish is not None:
            finished = stage.finish(stage.settings, frame)
            frame, result.outcomes, result.meta = finished.frame, finished.outcomes, finished.meta
            result.lines, result.warnings = finished.lines, finished.warnings
        result.frame = frame
        if output is not None:
            try:
                write_csv_atomic(frame, output)
                # Keep every entry for a row of the whole input (a trial run drops nothing).
                all_keys = dict.fromkeys(k for k, up in zip(keys, upstream) if not up)
                log.rewrite([entries[k] for k in all_keys if k in entries], header)
            except OSError as exc:
                raise _disk_full(output, exc) from None
    return result


async def _process(stage: Stage, todo: dict[str, dict], log: ProgressLog, header: dict, concurrency: int,
                   client: AnswerSource | None, quiet: bool, *, fresh: bool, **progress) -> None:
    """Run the rows ``todo``, each appended to ``log`` as it finishes. The settings line goes first,
    before any request (``fresh``: the file is started anew, its old rows discarded)."""
    try:
        if fresh or log.header != header:
            log.rewrite(list(log.entries.values()), header)
        log.open()
    except OSError as exc:
        raise UsageError(f"cannot write the progress file {log.path}: {exc.strerror or exc}") from None
    try:
        # its own task: the row places it sets (a context variable) stay out of the caller's context
        await asyncio.ensure_future(_run_rows(stage, todo, log, concurrency, client, quiet, **progress))
    finally:
        log.close()


async def _answer(stage: Stage, record: dict, client: AnswerSource | None) -> RowResult:
    """One row's result: its requests answered together by ``client``, then the stage's decision."""
    requests = stage.requests_of(record)
    answers = await together(*(client.complete(r) for r in requests)) if requests else []
    return stage.decide(stage.settings, record, answers)


async def _run_rows(stage: Stage, todo: dict[str, dict], log: ProgressLog, concurrency: int,
                    client: AnswerSource | None, quiet: bool = False, *, weights: dict[str, int] | None = None,
                    total: int | None = None) -> None:
    """Answer and decide the rows ``todo``, ``concurrency`` at a time, each appended to ``log`` as it
    finishes. A row fails (its ``error`` set) on what ``orbench.llm.errors.fails_the_row`` says; a
    stop (``UsageError``) or any other exception, a bug, ends the run and is raised, the rows
    finished before it kept in ``log``. Progress counts rows of the whole output: ``total`` of them,
    each key standing for ``weights[key]`` rows (a prompt met twice is asked once), the rest done
    before this run (resumed, passed through)."""
    queue = list(todo.items())
    queue.reverse()  # pop() from the end keeps input order
    weights = weights or {}
    total = len(queue) if total is None else total
    initial = total - sum(weights.get(key, 1) for key in todo)
    bar = tqdm(total=total, initial=initial, desc=stage.name, unit="row", disable=True if quiet else None,
               file=sys.stderr, mininterval=0.5, smoothing=0.1, dynamic_ncols=True)
    counts = {"done": initial, "errors": 0, "initial": initial}
    lines = None
    if not quiet and not sys.stderr.isatty():
        lines = asyncio.ensure_future(_progress_lines(stage.name, total, counts, client))

    places = asyncio.Semaphore(concurrency)
    rows: set[asyncio.Task] = set()
    stop: list[BaseException] = []

    async def row(key: str, record: dict) -> None:
        place = RowPlace(places)  # taken by the spawner; its requests (tasks of this one) share it
        ROW_PLACE.set(place)
        try:
            try:
                entry = {"key": key, "rows": _as_rows(await _answer(stage, record, client)), "error": None}
            except Exception as exc:
                if not fails_the_row(exc):
                    raise
                text = redact(f"{type(exc).__name__}: {exc}" if not str(exc) else str(exc))
                entry = {"key": key, "rows": None, "error": f"{stage.stage_id}: {text}"[:500]}
                logger.debug("%s: row %s failed: %s", stage.stage_id, key, text)
            log.append(entry)
        except Exception as exc:  # noqa: BLE001 - a bad key, a full disk, a bug: the run stops, and says why
            stop.append(exc)
            spawner.cancel()
            return
        finally:
            place.give_back()
        weight = weights.get(key, 1)
        bar.update(weight)
        counts["done"] += weight
        counts["errors"] += weight if entry["error"] is not None else 0

    async def spawn() -> None:
        while queue:
            await places.acquire()
            key, record = queue.pop()
            task = asyncio.ensure_future(row(key, record))
            rows.add(task)
            task.add_done_callback(rows.discard)
        while rows:
            await asyncio.gather(*rows)

    spawner = asyncio.ensure_future(spawn())
    try:
        await asyncio.wait({spawner})  # (a row's stop cancels the spawner, not this task)
        if stop:  # the first stop (a bad key, a full disk, a bug) ends the run
            raise stop[0]
        spawner.result()
    finally:
        bar.close()
        if lines is not None:
            lines.cancel()
        spawner.cancel()
        for task in list(rows):  # after Ctrl-C: the rows in flight stop before their connections close
            task.cancel()        # (closing a connection a request still reads waits for its reply)
        await asyncio.gather(spawner, *rows, return_exceptions=True)
        if client is not None:  # SDK connections belong to this event loop; close them in it
            await client.close()


def progress_line(name: str, done: int, total: int, errors: int, elapsed: float, paced: bool,
                  initial: int = 0) -> str:
    """One plain progress line: rows done / total (``initial`` of them done before this run:
    resumed, passed through), the rate of this run, its errors, paced or not, time left."""
    rate = (done - initial) / elapsed if elapsed > 0 else 0.0
    if rate > 0:
        seconds = round((total - done) / rate)
        left = f"ETA {seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    else:
        left = "ETA unknown"
    paced_text = "paced by the provider's rate limit" if paced else "not paced"
    return (f"{name}: {done:,}/{total:,} rows, {rate:.1f} rows/s, {errors:,} errors, {paced_text}, "
            f"{left}")


async def _progress_lines(name: str, total: int, counts: dict, client: AnswerSource | None) -> None:
    started = time.monotonic()
    while True:
        await asyncio.sleep(PROGRESS_EVERY)
        paced = client is not None and bool(client.rate_limits.paced)
        print(progress_line(name, counts["done"], total, counts["errors"], time.monotonic() - started,
                            paced, counts["initial"]), file=sys.stderr, flush=True)


def _assemble(stage: Stage, input_columns, picked: list[tuple[dict, str, bool]],
              entries: dict[str, dict]) -> tuple[pd.DataFrame, int]:
    """The output rows in input order; this stage's columns empty wherever it has no result."""
    blank = {c: "" for c in stage.adds}
    out_rows: list[dict] = []
    errors = 0
    for record, key, upstream in picked:
        if upstream:  # passed through untouched, its own error text kept
            out_rows.append({**record, **blank, "error": str(record.get("error")).strip()})
            continue
        entry = entries.get(key)
        if entry is None or entry.get("error") or not entry.get("rows"):
            errors += 1
            reason = entry.get("error") if entry else f"{stage.stage_id}: not processed (run interrupted)"
            out_rows.append({**record, **blank, "error": reason})
            continue
        for values in entry["rows"]:
            out_rows.append({**record, **blank, **values, "error": ""})
    # An input "error" column (from the previous stage) is replaced by this stage's own, last.
    columns = [c for c in dict.fromkeys([*input_columns, *stage.adds]) if c != "error"]
    seen = set(columns) | {"error"}
    for row in out_rows:  # columns a stage added beyond its declared ones still come out
        for column in row:
            if column not in seen:
                seen.add(column)
                columns.append(column)
    columns.append("error")
    # Every cell is filled here (None -> ""), so no column is turned into floats by a gap:
    # a vote count stays 2, never 2.0.
    filled = [{c: ("" if row.get(c) is None else row.get(c)) for c in columns} for row in out_rows]
    frame = pd.DataFrame(filled, columns=columns, dtype=object)
    return frame, errors
