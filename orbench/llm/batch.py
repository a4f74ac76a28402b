"""``--batch``: send a stage's pending requests through the providers' batch APIs.

OpenAI (Files + Batch API, ``/v1/chat/completions``), Anthropic (Message Batches) and Gemini
(inline batch jobs) answer batches within 24 hours at half the synchronous price. What differs
between them (the request lines, the limits, submitting, polling, reading results) is each
provider's :class:`orbench.llm.types.BatchAPI` (``ProviderAPI.batch_api``); this module is the state
file and the runner they share. ``run_batches`` gets the requests a run would send (the pending
rows' declared requests the cache cannot answer, ``Client.unanswered``), submits the ones no
live batch already holds, polls every unfinished batch until it ends, and puts each answer into
the response cache with ``Client.store`` under the request's cache key, which is also its
``custom_id``. The stage then runs with :class:`BatchAnswers` as its answer source: the batched
providers' answers come from the cache (a batch answer and a synchronous answer to the same
request are the same cache entry) and a request the batch did not answer fails its row with the
reason; the other providers are asked as usual.

State: ``<output>.batches.jsonl`` beside the output, append-only JSON lines, one per change of a
submitted batch (a line names its batch by ``ref``; later lines add to earlier ones): provider,
address, model, the cache keys it holds, the batch id, the input file id (OpenAI), the status.
It is written before and after each submission, so a rerun or a crash resumes polling the
batches that are not finished and never submits a key that a live batch holds. An OpenAI
submission interrupted between the file upload and the batch id being recorded is found again
by its input file id. Per-request failures become row errors (``BatchSummary.failures``);
requests of an expired or cancelled batch are reported and left for a rerun to submit again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from orbench.llm import providers
from orbench.llm.clients import Client
from orbench.llm.errors import FatalProviderError, RowError, UsageError
from orbench.llm.models import PROVIDERS, ModelSpec, Provider, redact
from orbench.llm.types import Completion, Outcome, Request

logger = logging.getLogger(__name__)

# Consecutive polling rounds in which no batch could be read before giving up for this run.
MAX_FAILED_POLLS = 3

_LIVE = "submitted"
_STOPPED = {"expired", "cancelled", "canceled"}  # requests left to redo


def has_batch_api(provider: Provider) -> bool:
    """True for the providers whose batch API this project speaks (``ProviderAPI.batch_api``)."""
    return providers.batch_api(provider) is not None


def state_path_for(output: Path) -> Path:
    """The batch state file of a run that writes ``output``."""
    output = Path(output)
    return output.with_name(output.name + ".batches.jsonl")


async def _sleep(seconds: float) -> None:
    """The pause between polls (a seam for tests)."""
    await asyncio.sleep(seconds)


class BatchState:
    """The append-only batch record file; ``records`` maps each ``ref`` to its merged fields."""

    def __init__(self, path: Path):
        self.path = path
        self.records: dict[str, dict] = {}
        self.bad_lines = 0
        self._torn = False
        if path.exists():
            raw = path.read_bytes()
            self._torn = bool(raw) and not raw.endswith(b"\n")
            for line in raw.decode("utf-8", "replace").splitlines():
                try:
                    entry = json.loads(line)
                except ValueError:
                    entry = None
                if isinstance(entry, dict) and isinstance(entry.get("ref"), str):
                    self.records.setdefault(entry["ref"], {}).update(entry)
                elif line.strip():
                    self.bad_lines += 1

    def write(self, entry: dict) -> None:
        """Append ``entry`` (with ``ref``) durably and merge it into ``records``."""
        line = json.dumps(entry, ensure_ascii=False) + "\n"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as handle:  # open() honours the umask
                if self._torn:  # a crash cut the last line short: start on a fresh one
                    handle.write("\n")
                    self._torn = False
                handle.write(line)
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as exc:
            raise UsageError(f"cannot write the batch state file {self.path}: "
                             f"{exc.strerror or exc}") from None
        self.records.setdefault(entry["ref"], {}).update(entry)

    def live(self) -> list[dict]:
        """Records of batches that were submitted and are not finished."""
        return [r for r in self.records.values() if r.get("status") == _LIVE and r.get("batch_id")]


@dataclass
class BatchSummary:
    """What ``run_batches`` did, for its summary line and for tests."""

    submitted: int = 0
    resumed: int = 0
    answered: int = 0
    failed: int = 0
    redo: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    elapsed: float = 0.0
    #: Why a request failed (by cache key): its row's error text in the run that follows.
    failures: dict[str, str] = field(default_factory=dict)

    def line(self) -> str:
        """The one summary line printed on stderr."""
        return (f"batch: {self.submitted} batches submitted, {self.resumed} resumed | requests "
                f"{self.answered} answered, {self.failed} failed, {self.redo} left to redo | tokens "
                f"{self.input_tokens:,} in / {self.output_tokens:,} out | {self.elapsed:.1f}s")


async def run_batches(requests: Sequence[tuple[Request, str]], client: Client, output: Path, *,
                      poll_interval: float = 30.0, quiet: bool = False) -> BatchSummary:
    """Submit ``requests`` (``(request, cache key)`` pairs) as provider batches, poll every
    unfinished batch of this output until it ends, and store the answers in ``client``'s cache.

    Per-request failures are in the summary's ``failures``. ``UsageError`` (exit 2) for a provider
    with no batch API or a client without a cache, before anything is submitted.
    """
    if client.cache is None:
        raise UsageError("--batch needs the response cache (batch answers are stored there); "
                         "drop --no_cache")
    without = sorted({r.model.provider.name for r, _ in requests
                      if not has_batch_api(r.model.provider)})
    if without:
        raise UsageError(f"--batch: provider {', '.join(without)} has no batch API; providers with "
                         f"one: {', '.join(providers.batch_providers())} (run without --batch for the others)")
    from orbench.run.stage import OutputLock  # the stage runner's lock: one writer per output

    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with OutputLock(output):
        runner = _Runner(client, BatchState(state_path_for(output)), poll_interval, quiet)
        await runner.run(list(requests))
    runner.summary.elapsed = time.monotonic() - started
    if not quiet:
        print(runner.summary.line(), file=sys.stderr)
    return runner.summary


class BatchAnswers:
    """The answer source of a run after ``run_batches`` (an :class:`orbench.llm.types.AnswerSource`).

    Requests to the ``providers`` that went through a batch are answered from the cache, where
    the batch's answers are; one the batch did not answer fails its row with the reason the batch
    gave (``failures``, by cache key), or says that a rerun submits it. Nothing is sent for them.
    Requests to any other provider (e.g. a Together moderator in an ensemble) go to ``client``.
    """

    def __init__(self, client: Client, providers: set[str], failures: dict[str, str]):
        self.client = client
        self.providers = frozenset(providers)
        self.failures = failures
        self.rate_limits = client.rate_limits

    async def complete(self, request: Request) -> Completion:
        """The batch's answer to ``request`` (its provider was batched), else the client's."""
        if request.model.provider.name not in self.providers:
            return await self.client.complete(request)
        answer = self.client.cached(request)
        if answer is not None:
            return answer
        why = self.failures.get(self.client.cache_key(request))
        raise RowError(f"batch request failed: {why}" if why else
                       "no batch answer for this request yet; rerun the same command to submit it")

    async def close(self) -> None:
        await self.client.close()


def _split(items: list[tuple[str, bytes]], max_count: int,
           max_bytes: int) -> list[list[tuple[str, bytes]]]:
    """``(key, payload)`` items in consecutive chunks within ``max_count`` items and ``max_bytes``."""
    chunks: list[list[tuple[str, bytes]]] = []
    current: list[tuple[str, bytes]] = []
    size = 0
    for key, payload in items:
        if len(payload) > max_bytes:
            raise UsageError(f"one request is {len(payload):,} bytes, more than a batch may hold "
                             f"({max_bytes:,}); run it without --batch")
        if current and (len(current) >= max_count or size + len(payload) > max_bytes):
            chunks.append(current)
            current, size = [], 0
        current.append((key, payload))
        size += len(payload)
    if current:
        chunks.append(current)
    return chunks


def _warn(text: str) -> None:
    print(redact(text), file=sys.stderr)


class _Runner:
    """One ``run_batches`` call: submit, poll, collect, inside one event loop."""

    def __init__(self, client: Client, state: BatchState, poll_interval: float, quiet: bool):
        self.client = client
        self.state = state
        self.poll_interval = poll_interval
        self.quiet = quiet
        self.summary = BatchSummary()
        self._counts: dict[str, tuple[int, int]] = {}  # ref -> (completed, failed) as last seen
        self._skipped: set[str] = set()

    # -- plumbing ---------------------------------------------------------------
    def _spec(self, record: dict) -> ModelSpec:
        return ModelSpec(PROVIDERS[record["provider"]], record.get("model") or "")

    def _provider(self, spec: ModelSpec):
        return self.client.provider(spec)

    def _endpoint(self, spec: ModelSpec) -> str:
        base = self._provider(spec).base_url
        return redact(str(base)) if base else ""

    def _error_text(self, exc: BaseException, spec: ModelSpec) -> str:
        """Text for a provider error on a batch call; a stop (bad key, no access) raises
        FatalProviderError; an exception the provider does not know propagates."""
        verdict = self.client.classify(exc, spec)
        if verdict is None:
            raise exc
        if verdict.outcome is Outcome.STOP:
            raise FatalProviderError(verdict.message)
        return redact(verdict.message)

    async def run(self, requests: list[tuple[Request, str]]) -> None:
        try:
            self._report_old()
            await self._recover_unrecorded()
            live_keys = {k for r in self.state.live() for k in r.get("keys", [])}
            self.summary.resumed = len(self._pollable())
            fresh = [(r, k) for r, k in requests if k not in live_keys]
            groups: dict[tuple[str, str], list[tuple[Request, str]]] = {}
            for request, key in fresh:
                group = (request.model.provider.name, request.model.model)  # OpenAI: one model a file
                groups.setdefault(group, []).append((request, key))
            for items in groups.values():
                await self._submit_group(items)
            await self._poll()
        finally:
            await self.client.close()  # SDK connections belong to this event loop

    def _report_old(self) -> None:
        if self.state.bad_lines:
            _warn(f"batch: {self.state.bad_lines} unreadable lines in {self.state.path} skipped")

    async def _recover_unrecorded(self) -> None:
        """Batches whose submission was cut short before their id was recorded."""
        for record in list(self.state.records.values()):
            if record.get("status") != "submitting":
                continue
            spec = self._spec(record)
            api = providers.batch_api(spec.provider)
            found = None
            if record.get("input_file_id") and api is not None:
                try:
                    found = await api.find_submission(self._provider(spec), record)
                except Exception as exc:  # noqa: BLE001 - sorted by _error_text
                    why = self._error_text(exc, spec)
                    _warn(f"batch: could not look up an interrupted submission ({why}); rerun to retry")
                    continue
            if found is not None:
                self.state.write({"ref": record["ref"], "batch_id": found, "status": _LIVE})
                continue
            risk = ("; if it reached the provider, those requests may be answered twice"
                    if api is None or api.may_have_reached(record) else "")
            _warn(f"batch: an earlier run stopped while submitting {len(record.get('keys', []))} "
                  f"requests to {record['provider']}{risk}; any still needed are submitted again")
            self.state.write({"ref": record["ref"], "status": "abandoned"})

    # -- submitting -------------------------------------------------------------
    async def _submit_group(self, items: list[tuple[Request, str]]) -> None:
        spec = items[0][0].model
        api = providers.batch_api(spec.provider)
        payloads, lines = [], {}
        for request, key in items:
            lines[key] = api.line(spec, request, key)
            payloads.append((key, json.dumps(lines[key], ensure_ascii=False).encode() + b"\n"))
        for chunk in _split(payloads, *api.limits()):
            await self._submit(spec, chunk, lines)

    async def _submit(self, spec: ModelSpec, chunk: list[tuple[str, bytes]], lines: dict) -> None:
        ref = uuid.uuid4().hex[:16]
        keys = [k for k, _ in chunk]
        provider = self._provider(spec)
        self.state.write({"ref": ref, "provider": spec.provider.name, "endpoint": self._endpoint(spec),
                          "model": spec.model, "keys": keys, "status": "submitting", "at": time.time()})
        # An interruption here leaves the record "submitting": the next run looks the batch up
        # (OpenAI, by its input file) or warns, instead of guessing whether it went through.
        try:
            batch_id = await providers.batch_api(spec.provider).submit(
                provider, ref, [lines[k] for k in keys], b"".join(p for _, p in chunk),
                lambda fields: self.state.write({"ref": ref, **fields}))
        except Exception as exc:  # noqa: BLE001 - SDK errors are sorted, others propagate
            answered = getattr(exc, "status_code", None) is not None  # the provider said no
            try:
                text = self._error_text(exc, spec)
            except UsageError:
                self.state.write({"ref": ref, "status": "failed", "note": "rejected"})
                raise
            if answered:
                self.state.write({"ref": ref, "status": "failed", "note": text})
            for key in keys:
                self.summary.failures[key] = f"could not submit the batch: {text}"
            self.summary.failed += len(keys)
            _warn(f"batch: could not submit {len(keys)} requests to {spec.provider.name}: {text}")
            return
        self.state.write({"ref": ref, "batch_id": batch_id, "status": _LIVE})
        self.summary.submitted += 1
        logger.debug("batch %s: %d requests submitted to %s (%s)", batch_id, len(keys), spec.provider.name, ref)

    # -- polling ------------------------------------------------------------------
    async def _poll(self) -> None:
        live = self._pollable()
        if not live:
            return
        total = sum(len(r.get("keys", [])) for r in live)
        bar = tqdm(total=total, desc="batch", unit="req", file=sys.stderr,
                   disable=True if self.quiet else None, dynamic_ncols=True)
        failed_rounds, last_error = 0, ""
        try:
            while live:
                reached = False
                for record in live:
                    try:
                        await self._check(record)
                        reached = True
                    except RowError as exc:
                        last_error = str(exc)
                completed = sum(c for c, _ in self._counts.values())
                failed = sum(f for _, f in self._counts.values())
                bar.n = min(completed + failed, total)
                bar.set_postfix_str(f"completed {completed}, failed {failed}, total {total}")
                live = self._pollable()
                failed_rounds = 0 if reached else failed_rounds + 1
                if live and failed_rounds >= MAX_FAILED_POLLS:
                    _warn(f"batch: could not check {len(live)} batches ({last_error}); they stay "
                          f"recorded in {self.state.path}: rerun the same command to resume polling")
                    break
                if live:
                    await _sleep(self.poll_interval)
        finally:
            bar.close()

    def _pollable(self) -> list[dict]:
        """Live batches submitted to the address this run uses for their provider."""
        found = []
        for record in self.state.live():
            if record.get("endpoint", "") == self._endpoint(self._spec(record)):
                found.append(record)
            elif record["ref"] not in self._skipped:
                self._skipped.add(record["ref"])
                _warn(f"batch: batch {record['batch_id']} was submitted to {record.get('endpoint')}, "
                      f"not to this run's {record['provider']} address; not polled")
        return found

    async def _check(self, record: dict) -> None:
        """Poll one batch; when it has ended, collect its results and record the end."""
        spec = self._spec(record)
        try:
            counts, status, note, results = await providers.batch_api(spec.provider).poll(
                self._provider(spec), record["batch_id"])
            self._counts[record["ref"]] = counts
            if status is not None:
                await self._collect(record, spec, results, status, note)
        except Exception as exc:  # noqa: BLE001 - provider errors are sorted, others propagate
            if self.client.classify(exc, spec) is None:
                raise
            if getattr(exc, "status_code", None) == 404 or getattr(exc, "code", None) == 404:
                self._lost(record)
                return
            raise RowError(self._error_text(exc, spec)) from None

    def _lost(self, record: dict) -> None:
        keys = record.get("keys", [])
        _warn(f"batch: {record['provider']} no longer knows batch {record['batch_id']}; its "
              f"{len(keys)} requests are left to redo (rerun the same command to submit them)")
        self.state.write({"ref": record["ref"], "status": "lost"})
        self.summary.redo += len(keys)

    async def _collect(self, record: dict, spec: ModelSpec, results, status: str, note: str = "") -> None:
        """Store every answer of an ended batch; sort the rest into failures and requests to redo."""
        keys = set(record.get("keys", []))
        seen: set[str] = set()
        answered = failed = 0
        redo: list[str] = []
        logger.debug("batch %s of %s ended: %s %s", record.get("batch_id"), record.get("provider"), status, note)
        async for key, outcome in results:
            if key not in keys or key in seen:
                continue
            seen.add(key)
            if outcome is None:
                redo.append(key)
            elif isinstance(outcome, str):
                self.summary.failures[key] = redact(outcome)[:300]
                failed += 1
            else:
                self.client.store(key, outcome)
                self.summary.input_tokens += outcome.input_tokens
                self.summary.output_tokens += outcome.output_tokens
                answered += 1
        for key in keys - seen:
            if status == "failed":
                why = note or "no reason given"
                self.summary.failures[key] = f"{spec.provider.name} rejected the batch: {why}"
                failed += 1
            else:
                redo.append(key)
        self.summary.answered += answered
        self.summary.failed += failed
        self.summary.redo += len(redo)
        self._counts[record["ref"]] = (answered, failed + len(redo))
        if redo:
            why = status if status in _STOPPED else "not answered"
            _warn(f"batch: {len(redo)} requests of {spec.provider.name} batch {record['batch_id']} "
                  f"{why}; left to redo (rerun the same command to submit them again)")
        self.state.write({"ref": record["ref"], "status": "ended" if status == "completed" else status,
                          "answered": answered, "failed": failed, "redo": len(redo)})
