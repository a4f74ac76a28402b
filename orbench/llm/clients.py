"""The provider-client helper: one async call, ``Client.complete(request) -> Completion``, for every provider.

The providers live in ``orbench.llm.providers``, one module per wire protocol, and are found by the
provider table's ``api`` name (``orbench.llm.providers.provider_class``); each implements the
contract :class:`orbench.llm.types.ProviderAPI`. ``Client`` adds what every provider shares: one
provider instance per provider and base URL (per model file for the local model), the pacer of
each (provider, address, model) (``orbench.llm.ratelimit``, ``--rpm`` a token bucket inside it),
the one retry loop, the response cache, and counters for the run summary. It is one
:class:`orbench.llm.types.AnswerSource`: ``complete`` answers from the cache, else from the
provider. ``--estimate`` and ``--batch`` need no other mode of it: a stage declares the requests
of each row up front, and :meth:`Client.unanswered` says which of them the cache cannot answer
(what is priced or submitted); after a batch, ``orbench.llm.batch.BatchAnswers`` answers the
batched providers' requests from the batch's results. The request and answer types are in
``orbench.llm.types`` and re-exported here.

**The retry loop** (:meth:`Client._send`; the SDKs' own retries are off). Each attempt waits for
the pacer, then the provider's ``classify`` sorts what went wrong (:class:`orbench.llm.types.Outcome`):

- a block is data (``provider_refusal=True``); a stop ends the run (``FatalProviderError``); a row
  error fails just that row (``RowError``);
- anything worth asking again (a 429, an "overloaded" answer, 5xx, 408/409, a timeout, a dropped
  connection, a reply with no answer) waits as ``orbench.llm.retry.next_wait`` says, the one
  retry rule: the wait the server asked if it fits in ``--patience``, else a backoff, and gives
  up (the row fails) when the rule says so; three requests in a row that give up on a wait asked
  past ``--patience``, or on 429s or overloads that took all of it, stop the run
  (``WaitPastPatience``, exit 1, naming the wait);
- an address that has never answered stops the run (exit 2, naming the address) at its first
  connection failure, or when a request has spent its ``--max_retries`` on "overloaded" answers.

A waiting request is out of the flight: it gives its pacer's window place back at once, and lends
its row's place among the ``--concurrency`` rows (:class:`RowPlace`) until it goes again. A
cancelled attempt (a row's other request failed: :func:`together`) gives its place back too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field

from orbench.llm import pricing, providers, ratelimit, retry
from orbench.llm.cache import Cache, cache_key
from orbench.llm.errors import (
    FatalProviderError,
    RowError,
    UsageError,
    WaitPastPatience,
    fails_the_row,
)
from orbench.llm.models import ModelSpec, redact
from orbench.llm.types import Completion, ErrorClass, Outcome, ProviderAPI, Request, TransientReply

logger = logging.getLogger(__name__)

__all__ = ["Client", "CallStats", "apply_verdict", "valid_text", "together", "RowPlace",
           "Request", "Completion", "TransientReply", "ProviderAPI",
           "DEFAULT_TIMEOUT", "DEFAULT_MAX_RETRIES", "DEFAULT_CONCURRENCY", "DEFAULT_PATIENCE", "ROW_PLACE"]

# The flags' defaults.
DEFAULT_TIMEOUT = 120.0
DEFAULT_MAX_RETRIES = 5
DEFAULT_PATIENCE = 600.0
#: Rows in flight at once (the CLI, Client and run_stage).
DEFAULT_CONCURRENCY = 16

class RowPlace:
    """A row's one place among the ``--concurrency`` rows in flight. The stage runner takes it
    before the row starts and gives it back (:meth:`give_back`) when the row ends; a request of
    the row lends it to the next row while it waits out a provider's wait (:meth:`lent`). However
    many of the row's requests wait, it is given back once and taken again once."""

    def __init__(self, places: asyncio.Semaphore):
        self.places, self.held = places, True

    def give_back(self) -> None:
        """Give the place back, if the row holds it (twice is once)."""
        if self.held:
            self.held = False
            self.places.release()

    @contextlib.asynccontextmanager
    async def lent(self):
        """The place goes to the next row while the block runs, and is taken again (waiting for
        one) when it ends, unless another of the row's requests took it already; a block that
        raises (cancelled) takes none."""
        self.give_back()
        yield
        if not self.held:
            await self.places.acquire()
            if self.held:  # another request of the row took it back while this one queued
                self.places.release()
            self.held = True


#: The place of the row a request belongs to (the stage runner sets it in each row's task).
ROW_PLACE: ContextVar[RowPlace | None] = ContextVar("orbench_row_place", default=None)


def _rank(exc: BaseException) -> int:
    """Which failure of a row's requests the row reports: Ctrl-C, then a bug, a stop, a run's
    stop on a wait too long, and a row's failure last."""
    if not isinstance(exc, Exception):
        return 0
    if fails_the_row(exc):
        return 4
    return 2 if isinstance(exc, UsageError) else 3 if isinstance(exc, WaitPastPatience) else 1


async def together(*aws):
    """The results of the awaitables ``aws``, run at once in one ``asyncio.TaskGroup`` (a row's
    requests): the first failure cancels the rest, whose pacer slots go back; the failure is
    raised as itself, not as an ``ExceptionGroup`` (a bug before a stop before a row's failure,
    when several came at once)."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(a) for a in aws]
    except BaseExceptionGroup as failed:
        leaves, found = [failed], []
        while leaves:
            leaf = leaves.pop()
            if isinstance(leaf, BaseExceptionGroup):
                leaves.extend(leaf.exceptions)
            else:
                found.append(leaf)
        raise min(found, key=_rank) from None
    return [task.result() for task in tasks]


def apply_verdict(verdict: ErrorClass) -> Completion:
    """Act on a final verdict: a blocked ``Completion`` for :attr:`Outcome.BLOCK`, else raise
    ``FatalProviderError`` (stop) or ``RowError`` (the rest)."""
    if verdict.outcome is Outcome.BLOCK:
        return Completion(text="", finish_reason=verdict.finish_reason or "content_filter",
                          provider_refusal=True)
    if verdict.outcome is Outcome.STOP:
        raise FatalProviderError(verdict.message)
    raise RowError(verdict.message)


_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(text: str | None) -> str:
    """``text`` as valid UTF-8: lone surrogates (from a JSON ``\\udXXX`` escape) become U+FFFD."""
    if not text:
        return text or ""
    return _SURROGATE.sub("\ufffd", text)


def _unreachable(provider, slot: _Slot, verdict: ErrorClass) -> ErrorClass:
    """The stop of a run whose address has never answered (or only "overloaded")."""
    where = f"{provider.name} at {slot.base_url or 'its default address'}"
    check = f"the address (--base_url or {provider.base_url_var})"
    if verdict.outcome is Outcome.OVERLOAD:
        return ErrorClass(Outcome.STOP, f"{where} has answered nothing but \"overloaded\" since the run "
                          f"started ({verdict.message}): check {check} and that the server has a model "
                          f"loaded, or try again later")
    return ErrorClass(Outcome.STOP, f"cannot connect to {where} ({verdict.message}); nothing there has "
                      f"answered: check {check}, that the server is running, and the network")


@dataclass
class CallStats:
    """Counters for the run summary."""

    sent: int = 0
    cached: int = 0
    provider_blocks: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    transient: int = 0  # replies with no answer in them, asked again
    reported_models: dict = field(default_factory=dict)  # model as resolved -> ids the provider reported


@dataclass
class _Slot:
    api: ProviderAPI
    base_url: str | None
    endpoint: str | None = None  # what the cache key records: the base URL, or the local weights' identity
    answered: bool = False  # whether anything there has answered but "overloaded"


class Client:
    """Sends ``Request``s to their providers with caching, bounds and error sorting.

    ``base_url`` overrides every provider's address for this client (the stage's ``--base_url``);
    otherwise ``<PROVIDER>_BASE_URL`` or the provider table decides.
    """

    def __init__(self, *, cache: Cache | None = None, base_url: str | None = None,
                 concurrency: int = DEFAULT_CONCURRENCY, rpm: float | None = None,
                 timeout: float = DEFAULT_TIMEOUT, max_retries: int = DEFAULT_MAX_RETRIES,
                 patience: float = DEFAULT_PATIENCE):
        self.cache = cache
        self.base_url = base_url
        self.concurrency = concurrency
        self.rpm = rpm
        self.timeout = timeout
        self.max_retries = max_retries
        self.patience = patience
        self.stats = CallStats()
        # The pacers (``--rpm`` is a token bucket inside each), kept for the meta file.
        self.rate_limits = ratelimit.RateLimits(patience, rpm, concurrency)
        self._slots: dict[str, _Slot] = {}
        #: Per provider, the address of a server this run started and the served model's cache identity
        #: (``orbench.run.serving``): its port is no part of the cache key.
        self.served: dict[str, tuple[str, str]] = {}
        self._seen: dict[str, dict] = {}  # per slot: base URL and engine, for the meta file
        self._long_waits: dict[str, int] = {}  # per pacer: give-ups on a wait past --patience in a row

    def prepare(self, spec: ModelSpec) -> None:
        """Set up the provider for ``spec`` now, so a missing key or base URL fails before any row."""
        self._slot(spec)

    def describe(self, spec: ModelSpec, typed: str | None = None) -> dict:
        """What the meta file records about a model: as typed, as resolved, where it was sent,
        what the provider reported back, and (local model) the engine and its load settings."""
        # Recorded when the slot was made: close() drops the slots (their SDK clients belong to
        # the event loop that has ended), not what the meta file needs to say about them.
        seen = self._seen.get(self._slot_key(spec), {})
        info = {
            "typed": typed if typed is not None else str(spec),
            "resolved": str(spec),
            "provider": spec.provider.name,
            "base_url": redact(seen["base_url"]) if seen.get("base_url") else None,
            "reported_model": list(self.stats.reported_models.get(str(spec), [])),
        }
        parameters_sent = providers.provider_class(spec.provider.api).parameters_sent(spec)
        if parameters_sent is not None:
            info["parameters_sent"] = parameters_sent
        if spec.provider.request_note:
            info["note"] = spec.provider.request_note
        if seen.get("engine") is not None:
            info["engine"] = seen["engine"]
        return info

    @staticmethod
    def _slot_key(spec: ModelSpec) -> str:
        per_model = providers.provider_class(spec.provider.api).per_model
        return f"{spec.provider.name}/{spec.model}" if per_model else spec.provider.name

    def _slot(self, spec: ModelSpec) -> _Slot:
        provider = spec.provider
        slot_key = self._slot_key(spec)
        slot = self._slots.get(slot_key)
        if slot is None:
            served_url, identity = self.served.get(provider.name, (None, None))
            api = providers.provider_class(provider.api).connect(
                spec, base_url=served_url or self.base_url, timeout=self.timeout, max_retries=self.max_retries)
            base_url = api.base_url
            slot = _Slot(api, base_url, identity or api.endpoint)
            self._slots[slot_key] = slot
            self._seen[slot_key] = {"base_url": base_url, "engine": api.describe()}
            logger.debug("%s: provider %s at %s", spec, provider.name, redact(str(base_url)) if base_url else "its default address")
        return slot

    def cache_key(self, request: Request) -> str:
        """The cache key of ``request`` (also its id in a provider batch): everything that changes
        the answer (``orbench.llm.cache``), the provider's address or local weights included."""
        return cache_key({
            "provider": request.model.provider.name,
            "endpoint": self._slot(request.model).endpoint,
            "model": request.model.model,
            "system": request.system,
            "messages": [list(m) for m in request.messages],
            "temperature": request.temperature,
            "max_tokens": request.max_tokens,
            "sample": request.sample_index if request.temperature > 0 else 0,
        })

    def cached(self, request: Request) -> Completion | None:
        """The cache's answer to ``request`` (counted in the summary as from the cache), or None."""
        if self.cache is None:
            return None
        hit = self.cache.get(self.cache_key(request))
        if hit is None:
            return None
        self.stats.cached += 1
        completion = Completion(**{**hit, "cached": True, "latency": 0.0})
        self._note_model(request, completion)
        self._count(completion)
        return completion

    def unanswered(self, requests) -> list[tuple[Request, str]]:
        """The ``requests`` the cache cannot answer, each once, with their cache keys, in order:
        what a run would send (``--estimate`` prices them, ``--batch`` submits them)."""
        found: dict[str, Request] = {}
        for request in requests:
            key = self.cache_key(request)
            if key not in found and (self.cache is None or self.cache.get(key) is None):
                found[key] = request
        return [(request, key) for key, request in found.items()]

    async def complete(self, request: Request) -> Completion:
        """Answer ``request`` from the cache or the provider; see the module docstring for errors."""
        hit = self.cached(request)
        if hit is not None:
            return hit
        slot = self._slot(request.model)
        started = time.monotonic()
        completion = await self._send(request, slot)
        latency = time.monotonic() - started
        completion = Completion(**{**asdict(completion), "text": valid_text(completion.text),
                                   "latency": latency})
        self.stats.input_tokens += completion.input_tokens
        self.stats.output_tokens += completion.output_tokens
        self.stats.reasoning_tokens += completion.reasoning_tokens
        self._note_model(request, completion)
        self._count(completion)
        if self.cache is not None:
            self.store(self.cache_key(request), completion)
        return completion

    async def _send(self, request: Request, slot: _Slot) -> Completion:
        """One provider answer to ``request``: each attempt waits for the pacer, the provider's
        ``classify`` sorts what went wrong, and ``orbench.llm.retry.next_wait`` says how long to
        wait before the next attempt, or to give up (the module docstring)."""
        spec, provider = request.model, request.model.provider
        pacer = self.rate_limits.pacer(provider.name, slot.base_url, spec.model)
        costs = ratelimit.request_costs(pricing.input_tokens(request), request.max_tokens)
        failures = {True: 0, False: 0}  # this request's failures: patient (429, overload) or not
        first_failure = None
        while True:
            ticket = await pacer.acquire(costs)
            self.stats.sent += 1
            try:
                with ratelimit.watching() as seen:
                    try:
                        answer, verdict = await slot.api.generate(request), None
                    except TransientReply as exc:  # a reply, but no answer in it
                        self.stats.transient += 1
                        answer, verdict = None, ErrorClass(Outcome.RETRY, f"{exc} from {provider.name}")
                    except Exception as exc:
                        answer, verdict = exc, slot.api.classify(exc, spec)
                        if verdict is None:  # not the provider's to sort: a bug
                            raise
            except BaseException:  # a bug, or cancelled (a row's other request failed, Ctrl-C)
                pacer.released(ticket)
                raise
            if verdict is None:
                slot.answered = True
                pacer.admitted(ticket, seen)
                self._long_waits[pacer.name] = 0
                return answer
            outcome = verdict.outcome
            never = not slot.answered and outcome in (Outcome.CONNECTION, Outcome.OVERLOAD)
            slot.answered = not never
            if outcome is not Outcome.RATE_LIMIT:
                pacer.released(ticket, seen)
            if outcome in (Outcome.BLOCK, Outcome.STOP, Outcome.ROW) or never and outcome is Outcome.CONNECTION:
                return apply_verdict(_unreachable(provider, slot, verdict) if never else verdict)
            kind = Outcome.RETRY if never else outcome  # "overloaded" since the start: not waited out
            patient = kind in retry.PATIENT
            now = time.monotonic()
            first_failure = now if first_failure is None else first_failure
            failures[patient] += 1
            wait = retry.next_wait(kind, verdict.wait, failures[patient], now - first_failure,
                                   self.patience, self.max_retries)
            if outcome is Outcome.RATE_LIMIT:
                pacer.refused(ticket, verdict.wait, seen)
            self.rate_limits.overloaded += outcome is Outcome.OVERLOAD
            if isinstance(wait, retry.GiveUp):
                if never:
                    return apply_verdict(_unreachable(provider, slot, verdict))
                self.rate_limits.past_patience += patient or wait.asked is not None
                # past all of --patience (not what was left), or all of it spent on 429s or overloads
                if (wait.asked > self.patience) if wait.asked is not None else patient:
                    self._long_waits[pacer.name] = self._long_waits.get(pacer.name, 0) + 1
                    where = f"{provider.name} at {slot.base_url or 'its default address'}"
                    stop = retry.long_wait_stop(self._long_waits[pacer.name], wait.asked, where, self.patience)
                    if stop:
                        raise WaitPastPatience(stop)
                why = f"{verdict.message}, {wait.why}" if wait.why else verdict.message
                return apply_verdict(ErrorClass(Outcome.ROW, why))
            self.rate_limits.waited += wait if patient else 0.0
            logger.debug("%s: %s; asking again in %.1f s", spec, verdict.message, wait)
            place = ROW_PLACE.get()
            if place is None:
                await asyncio.sleep(wait)
            else:
                async with place.lent():
                    await asyncio.sleep(wait)

    def store(self, key: str, completion: Completion) -> None:
        """Put an answer into the cache under ``key``: a synchronous one (``complete``) or one
        obtained another way (a batch result), so both are the same cache entry."""
        stored = asdict(Completion(**{**asdict(completion), "text": valid_text(completion.text)}))
        del stored["cached"], stored["latency"]
        self.cache.put(key, stored)

    def _note_model(self, request: Request, completion: Completion) -> None:
        if completion.reported_model:
            reported = self.stats.reported_models.setdefault(str(request.model), [])
            if completion.reported_model not in reported:
                reported.append(completion.reported_model)

    def _count(self, completion: Completion) -> None:
        if completion.provider_refusal:
            self.stats.provider_blocks += 1

    async def close(self) -> None:
        """Close every provider this ``Client`` opened (in the event loop that used them); a
        later call opens them again."""
        slots, self._slots = list(self._slots.values()), {}
        for slot in slots:
            await slot.api.close()

    # -- what orbench.llm.batch and the stage runner use ----------------------------------
    def provider(self, spec: ModelSpec) -> ProviderAPI:
        """The connected provider instance that serves ``spec`` (opened on first use)."""
        return self._slot(spec).api

    def classify(self, exc: BaseException, spec: ModelSpec) -> ErrorClass | None:
        """``spec``'s provider's verdict on ``exc`` (None: not a provider error)."""
        return self.provider(spec).classify(exc, spec)
