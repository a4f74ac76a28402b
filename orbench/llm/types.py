"""The request and answer types every provider and every stage share, and the provider contract.

``Request`` is what a stage asks, ``Completion`` what a provider answers. ``TransientReply`` is a
200 reply with no answer in it (asked again, never a verdict). ``AnswerSource`` is where a run's
requests are answered: ``orbench.llm.clients.Client`` (the cache, then the provider) or, after
``--batch``, ``orbench.llm.batch.BatchAnswers`` (the batch's results for the providers it went to).

``ProviderAPI`` is the contract of a provider module (``orbench.llm.providers``): how it is set up
(``connect``), how it answers (``generate``), what it records in the meta file (``describe``,
``parameters_sent``), how it sorts its own exceptions (``classify`` -> :class:`ErrorClass`) and
whether it has a batch API (``batch_api`` -> :class:`BatchAPI`). ``Client`` and ``orbench.llm.batch``
call nothing else on a provider. This module imports nothing from the project but the model
spec, so providers and the client both stand on it.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from orbench.llm.models import ModelSpec, Provider


@dataclass(frozen=True)
class Request:
    """One chat request. ``messages`` is a tuple of ``(role, content)`` pairs."""

    model: ModelSpec
    messages: tuple[tuple[str, str], ...]
    system: str | None = None
    temperature: float = 0.0
    max_tokens: int = 1000
    sample_index: int = 0  # distinguishes repeated sampling calls (temperature > 0) in the cache

    @classmethod
    def user(cls, model: ModelSpec, text: str, **kwargs) -> Request:
        """A single-turn request with ``text`` as the user message."""
        return cls(model=model, messages=(("user", text),), **kwargs)


@dataclass(frozen=True)
class Completion:
    """A model's answer. ``provider_refusal`` is True when the provider itself blocked it."""

    text: str
    finish_reason: str | None
    provider_refusal: bool = False
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    reported_model: str | None = None  # the model id the provider says answered (a dated snapshot)
    latency: float = 0.0
    cached: bool = False


class AnswerSource(Protocol):
    """Where the stage runner gets the answers to a row's requests."""

    #: How sending is paced (``orbench.llm.ratelimit.RateLimits``): the progress lines say whether it is.
    rate_limits: Any

    async def complete(self, request: Request) -> Completion:
        """The answer to ``request``; ``RowError`` fails just the row it belongs to."""

    async def close(self) -> None:
        """Release connections (called in the event loop that used them)."""


class TransientReply(Exception):
    """A 200 reply that carries no answer (no choices, null content) or could not be decoded.

    Never a verdict and never cached: ``Client`` asks again (each time one of ``--max_retries``),
    then the row fails with ``RowError``.
    """


class Outcome(enum.Enum):
    """What an exception from a provider means: what the client's retry loop does with it."""

    RETRY = "retry"            # worth asking again (5xx, 408/409, a timeout, a dropped connection,
                               # a reply with no answer): spends one of --max_retries
    RATE_LIMIT = "rate_limit"  # a 429: waits as the provider says (``wait``), within --patience;
                               # the pacer learns from it
    OVERLOAD = "overload"      # 503/529 "overloaded": backs off, within --patience; nothing else changes
    BLOCK = "block"            # the provider blocked the prompt: a provider refusal (data)
    STOP = "stop"              # every row would fail alike (key, access, model, credit): stop the run
    CONNECTION = "connection"  # the server could not be reached: stops the run if the address has
                               # never answered, else as RETRY
    ROW = "row"                # anything else (a 400): this row fails, a rerun tries it again


@dataclass(frozen=True)
class ErrorClass:
    """A provider's verdict on one exception: the outcome and the one line to show for it.

    ``wait`` is the seconds the provider asked for before asking again (``Retry-After``,
    ``retry-after-ms``, Gemini's ``RetryInfo``), None when it named none. For
    :attr:`Outcome.BLOCK`, ``finish_reason`` is what the blocked ``Completion`` records.
    """

    outcome: Outcome
    message: str
    finish_reason: str | None = None
    wait: float | None = None


class BatchAPI(abc.ABC):
    """A provider's batch API, as ``orbench.llm.batch`` drives it.

    ``provider`` arguments are the connected ``ProviderAPI`` instances the batch goes through.
    """

    @abc.abstractmethod
    def limits(self) -> tuple[int, int]:
        """Most requests and most bytes in one batch."""

    @abc.abstractmethod
    def line(self, spec: ModelSpec, request: Request, key: str) -> dict:
        """One request of the batch as JSON data, carrying ``key`` as its id."""

    @abc.abstractmethod
    async def submit(self, provider: ProviderAPI, ref: str, lines: list[dict], payload: bytes,
                     record: Callable[[dict], None]) -> str:
        """Submit one batch (``record`` saves intermediate ids in the state file); its id."""

    @abc.abstractmethod
    def may_have_reached(self, record: dict) -> bool:
        """Whether an interrupted submission (its state ``record``) could have created a batch."""

    async def find_submission(self, provider: ProviderAPI, record: dict) -> str | None:
        """The batch an interrupted submission created, or None when it cannot be found."""
        return None

    @abc.abstractmethod
    async def poll(self, provider: ProviderAPI, batch_id: str) -> tuple[
            tuple[int, int], str | None, str, AsyncIterator[tuple[str, Any]] | None]:
        """``(done, failed)`` counts, the end status (None while running), a note, and once ended
        the results: an async iterator of ``(key, Completion | failure text | None to redo)``."""


class ProviderAPI(abc.ABC):
    """What a provider implements, in full; ``Client`` and ``orbench.llm.batch`` use nothing else.

    An instance carries ``base_url`` (where it sends, or None) and ``endpoint`` (what the cache
    key records: the base URL, or the local weights' identity). ``per_model`` says whether each
    model gets its own instance (the local model) rather than one per provider and address.
    """

    per_model: ClassVar[bool] = False
    base_url: str | None = None
    endpoint: str | None = None

    @classmethod
    @abc.abstractmethod
    def connect(cls, spec: ModelSpec, *, base_url: str | None, timeout: float,
                max_retries: int) -> ProviderAPI:
        """The instance that serves ``spec``; a missing key or address is a ``UsageError`` here."""

    @abc.abstractmethod
    async def generate(self, request: Request) -> Completion:
        """Answer ``request``; ``TransientReply`` for a reply with no answer in it."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release what ``connect`` opened (called in the event loop that used it)."""

    @abc.abstractmethod
    def describe(self) -> dict | None:
        """What the meta file records about this instance beyond its address (engine, weights)."""

    @classmethod
    @abc.abstractmethod
    def parameters_sent(cls, spec: ModelSpec) -> list[str] | None:
        """The request parameters sent for ``spec`` (for the meta file), or None if not HTTP."""

    @abc.abstractmethod
    def classify(self, exc: BaseException, spec: ModelSpec) -> ErrorClass | None:
        """What ``exc``, raised by ``generate`` or a batch call, means; None for an exception this
        provider does not know (a bug), which then propagates unchanged."""

    @classmethod
    def batch_api(cls, provider: Provider) -> BatchAPI | None:
        """The batch API for table row ``provider``, or None when there is none."""
        return None
