"""The provider-client helper: one async call, ``Client.complete(request) -> Completion``, for every provider.

The providers live in ``orbench.llm.providers``, one module per wire protocol, and are found by the
provider table's ``api`` name (``orbench.llm.providers.provider_class``); each implements the
contract :class:`orbench.llm.types.ProviderAPI`. ``Client`` adds what every provider shares: one
provider instance per provider and base URL (per model file for the local model), a concurrency
bound per provider (``--rpm`` is a fixed cap inside the pacer, ``orbench.llm.ratelimit``), the response
cache, and counters for the run summary. It is one :class:`orbench.llm.types.AnswerSource`: ``complete`` answers from the
cache, else from the provider. ``--estimate`` and ``--batch`` need no other mode of it: a stage
declares the requests of each row up front, and :meth:`Client.unanswered` says which of them the
cache cannot answer (what is priced or submitted); after a batch, ``orbench.llm.batch.BatchAnswers``
answers the batched providers' requests from the batch's results. The request and answer types
are in ``orbench.llm.types`` and re-exported here.

Retries are the SDKs' own (408, 409, 429, 5xx and connection errors, with exponential backoff
that honours ``Retry-After``); this module never loops on a failed request itself, except for a
reply with no answer in it. After the SDK gives up, the provider's own ``classify`` says what the
exception means (:class:`orbench.llm.types.Outcome`) and :func:`apply_verdict` acts on it: a block
becomes data (``provider_refusal=True``), a stop ends the run (``FatalProviderError``), a reply
with no answer is asked again (``TransientReply``), anything else fails just that row
(``RowError``). Below the SDKs, ``orbench.llm.ratelimit`` paces each (provider, base URL, model) to
the limits its 429s reveal (its headers a hint), with ``Client(rpm=)`` as a fixed cap inside the
same pacer, waits out its 429s and "overloaded" answers without spending those retries
(``Client(patience=)``), and stops the run when the first attempts at an address all fail to
connect or are all answered "overloaded".
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import asdict, dataclass, field

from orbench.llm import providers, ratelimit, reachability
from orbench.llm.cache import Cache, cache_key
from orbench.llm.errors import FatalProviderError, RowError
from orbench.llm.models import ModelSpec, redact
from orbench.llm.types import Completion, ErrorClass, Outcome, ProviderAPI, Request, TransientReply

__all__ = ["Client", "CallStats", "apply_verdict", "valid_text",
           "Request", "Completion", "TransientReply", "ProviderAPI",
           "DEFAULT_TIMEOUT", "DEFAULT_MAX_RETRIES", "DEFAULT_CONCURRENCY"]

DEFAULT_TIMEOUT = 120.0
DEFAULT_MAX_RETRIES = 5
#: Rows in flight at once, and requests in flight per provider (the CLI, Client and run_stage).
DEFAULT_CONCURRENCY = 16


def apply_verdict(verdict: ErrorClass) -> Completion:
    """Act on a provider's verdict: a blocked ``Completion`` for :attr:`Outcome.BLOCK`, else raise
    ``TransientReply`` (retry), ``FatalProviderError`` (stop) or ``RowError`` (the rest)."""
    if verdict.outcome is Outcome.BLOCK:
        return Completion(text="", finish_reason=verdict.finish_reason or "content_filter",
                          provider_refusal=True)
    if verdict.outcome is Outcome.RETRY:
        raise TransientReply(verdict.message)
    if verdict.outcome is Outcome.STOP:
        raise FatalProviderError(verdict.message)
    raise RowError(verdict.message)


_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(text: str | None) -> str:
    """``text`` as valid UTF-8: lone surrogates (from a JSON ``\\udXXX`` escape) become U+FFFD."""
    if not text:
        return text or ""
    return _SURROGATE.sub("\ufffd", text)


def _v1_hint(exc: BaseException, spec: ModelSpec, base_url: str | None) -> str:
    """For a 404 from an OpenAI-compatible server whose base URL has no ``/v1``: say so."""
    if getattr(exc, "status_code", None) != 404 or spec.provider.api != "openai" or not base_url:
        return ""
    if "/v1" in base_url:
        return ""
    return (f"; the base URL has no /v1 in it, and OpenAI-compatible servers answer under "
            f"/v1: try {base_url.rstrip('/')}/v1")


def _unreachable(provider, slot: _Slot) -> str:
    """The one line that stops a run whose address has never answered (or only "overloaded")."""
    where = f"{provider.name} at {slot.base_url or 'its default address'}"
    check = f"the address (--base_url or {provider.base_url_var})"
    if slot.reach.kind == "overloaded":
        return (f"{where} has answered nothing but \"overloaded\" since the run started "
                f"({slot.reach.reason}): check {check} and that the server has a model loaded, "
                f"or try again later")
    return (f"cannot connect to {where} ({slot.reach.reason}); nothing there has answered: check "
            f"{check}, that the server is running, and the network")


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
    semaphore: asyncio.Semaphore
    endpoint: str | None = None  # what the cache key records: the base URL, or the local weights' identity
    reach: reachability.Reachability = field(default_factory=reachability.Reachability)


class Client:
    """Sends ``Request``s to their providers with caching, bounds and error sorting.

    ``base_url`` overrides every provider's address for this client (the stage's ``--base_url``);
    otherwise ``<PROVIDER>_BASE_URL`` or the provider table decides.
    """

    def __init__(self, *, cache: Cache | None = None, base_url: str | None = None,
                 concurrency: int = DEFAULT_CONCURRENCY, rpm: float | None = None,
                 timeout: float = DEFAULT_TIMEOUT, max_retries: int = DEFAULT_MAX_RETRIES,
                 patience: float = ratelimit.DEFAULT_PATIENCE):
        self.cache = cache
        self.base_url = base_url
        self.concurrency = concurrency
        self.rpm = rpm
        self.timeout = timeout
        self.max_retries = max_retries
        self.stats = CallStats()
        # The pacers (``--rpm`` is a fixed cap inside each), kept for the meta file.
        self.rate_limits = ratelimit.RateLimits(patience, rpm)
        self._slots: dict[str, _Slot] = {}
        self._seen: dict[str, dict] = {}  # per slot: base URL and engine, for the meta file

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
            api = providers.provider_class(provider.api).connect(
                spec, base_url=self.base_url, timeout=self.timeout, max_retries=self.max_retries)
            base_url = api.base_url
            slot = _Slot(api, base_url, asyncio.Semaphore(self.concurrency), api.endpoint)
            self._slots[slot_key] = slot
            self._seen[slot_key] = {"base_url": base_url, "engine": api.describe()}
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
        async with slot.semaphore:
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
        """One provider answer; replies with no answer in them are asked again, a bounded number of times."""
        attempts = self.max_retries + 1
        for attempt in range(1, attempts + 1):
            self.stats.sent += 1
            try:
                try:
                    return await self._generate(request, slot)
                except TransientReply:
                    raise
                except Exception as exc:
                    verdict = slot.api.classify(exc, request.model)
                    if verdict is None:
                        raise
                    try:
                        return apply_verdict(verdict)
                    except FatalProviderError as fatal:
                        raise FatalProviderError(f"{fatal}{_v1_hint(exc, request.model, slot.base_url)}") from None
            except TransientReply as exc:
                self.stats.transient += 1
                if attempt == attempts:
                    raise RowError(f"{exc} from {request.model.provider.name}, "
                                   f"{attempts} attempts") from None
        raise AssertionError("unreachable")

    async def _generate(self, request: Request, slot: _Slot) -> Completion:
        """``slot.api.generate(request)`` paced by ``orbench.llm.ratelimit``; stops the run when the
        address has never answered and keeps refusing connections."""
        chars = len(request.system or "") + sum(len(content) for _, content in request.messages)
        ticket = self.rate_limits.ticket(request.model.provider.name, slot.base_url, request.model.model,
                                         prompt_chars=chars, max_tokens=request.max_tokens,
                                         reach=slot.reach)
        with ratelimit.attached(ticket):
            answered, completion = await slot.reach.guard(slot.api.generate(request))
        if not answered:
            raise FatalProviderError(_unreachable(request.model.provider, slot))
        return completion

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
