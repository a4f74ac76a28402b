"""An in-process provider that answers by rules and sends nothing: ``mock/<name>`` (protocol ``mock``).

What inspect_ai's ``mockllm`` is to inspect: a provider like any other (it implements the whole
:class:`orbench.llm.types.ProviderAPI` contract and is found through ``orbench.llm.providers``), for
tests of the logic above the wire (stages, resume, verdicts, error rows) that need replies but
not HTTP. Its provider row, :data:`ROW`, is not in the shipped provider table: a test adds it with
:func:`install` (``tests/conftest.py`` does, for every test).

Replies come from :data:`RULES`, which a test sets; the first rule that matches a request answers
it (``times`` limits how many it answers), and a request no rule matches gets the echo
:data:`DEFAULT_TEXT`::

    from orbench.llm.providers import mock
    mock.RULES.add(match="capital", text="Paris")                # a substring of the prompt
    mock.RULES.add(regex=r"^how (?:do|can) i", text="I can't help with that.")
    mock.RULES.add(match="ASK-BLOCK", block=True)                # a provider block (refusal)
    mock.RULES.add(match="ASK-CUT", text="The first step is", finish_reason="length")
    mock.RULES.add(match="FLAKY", error="row", times=1)          # one row error, then answers

``error`` names the outcome the provider's :meth:`MockProvider.classify` gives
(:class:`orbench.llm.types.Outcome`: ``retry``, ``rate_limit``, ``overload``, ``block``, ``stop``, ``connection``,
``row``), or ``transient`` (a reply with no answer in it, :class:`~orbench.llm.types.TransientReply`)
or ``bug`` (an exception no provider knows, which propagates). ``RULES.requests`` logs every
request in order. Reply text may use ``{prompt}`` (the last user message), ``{system}``,
``{model}`` and ``{n}`` (the request's number).
"""

from __future__ import annotations

import asyncio
import re
import threading
from dataclasses import dataclass

from orbench.llm.models import PROVIDERS, ModelSpec, Provider
from orbench.llm.types import Completion, ErrorClass, Outcome, ProviderAPI, Request, TransientReply

#: The provider row of ``mock/<name>`` models (added to the table by :func:`install`).
ROW = Provider("mock", "mock", None, key_required=False)
#: The reply to a request no rule matches.
DEFAULT_TEXT = "Mock answer to: {prompt}"
ERRORS = ("retry", "rate_limit", "overload", "block", "stop", "connection", "row", "transient", "bug")


@dataclass
class Rule:
    """How to answer the requests that match: ``match`` (a substring of the prompt or system text),
    ``regex`` (searched in both) and ``model`` (the model id) must all hold where given."""

    match: str | None = None
    regex: str | None = None
    model: str | None = None
    text: str | None = None
    finish_reason: str = "stop"
    block: bool = False
    error: str | None = None
    message: str | None = None
    delay: float = 0.0
    reported_model: str | None = None
    reasoning_tokens: int = 0
    times: int | None = None

    def __post_init__(self) -> None:
        if self.error is not None and self.error not in ERRORS:
            raise ValueError(f"unknown mock error {self.error!r}; one of: {', '.join(ERRORS)}")

    def matches(self, prompt: str, system: str, model: str) -> bool:
        if self.times is not None and self.times <= 0:
            return False
        if self.model is not None and self.model != model:
            return False
        if self.match is not None and self.match not in prompt and self.match not in system:
            return False
        return self.regex is None or bool(re.search(self.regex, prompt) or re.search(self.regex, system))


class Rules:
    """The rules and the request log; thread-safe (a stage may run in a worker thread)."""

    def __init__(self) -> None:
        self.rules: list[Rule] = []
        self.requests: list[Request] = []
        self._lock = threading.Lock()

    def add(self, **kwargs) -> Rule:
        """Add a rule (the :class:`Rule` fields); earlier rules win."""
        rule = Rule(**kwargs)
        with self._lock:
            self.rules.append(rule)
        return rule

    def reset(self) -> None:
        """No rules, an empty log."""
        with self._lock:
            self.rules.clear()
            self.requests.clear()

    def prompts(self) -> list[str]:
        """The last user message of every request, in order."""
        with self._lock:
            return [_prompt(r) for r in self.requests]

    def pick(self, request: Request) -> tuple[Rule, int]:
        """Log ``request``; the rule that answers it and its number (1 for the first)."""
        prompt, system = _prompt(request), request.system or ""
        with self._lock:
            self.requests.append(request)
            number = len(self.requests)
            for rule in self.rules:
                if rule.matches(prompt, system, request.model.model):
                    if rule.times is not None:
                        rule.times -= 1
                    return rule, number
        return Rule(), number


RULES = Rules()


class MockError(Exception):
    """What a rule with ``error`` raises; :meth:`MockProvider.classify` sorts it."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def _prompt(request: Request) -> str:
    for role, content in reversed(request.messages):
        if role == "user":
            return content
    return ""


class MockProvider(ProviderAPI):
    """Answers from :data:`RULES` in process."""

    endpoint = "mock"

    def __init__(self, spec: ModelSpec):
        self.spec = spec

    @classmethod
    def connect(cls, spec: ModelSpec, *, base_url: str | None, timeout: float,
                max_retries: int) -> MockProvider:
        return cls(spec)

    async def generate(self, request: Request) -> Completion:
        rule, number = RULES.pick(request)
        if rule.delay:
            await asyncio.sleep(rule.delay)
        if rule.error == "transient":
            raise TransientReply(rule.message or "mock reply with no answer")
        if rule.error is not None:
            raise MockError(rule.error, rule.message or f"mock {rule.error} error")
        if rule.block:
            raise MockError("block", rule.message or "mock provider block")
        prompt = _prompt(request)
        text = DEFAULT_TEXT if rule.text is None else rule.text
        for name, value in (("prompt", prompt), ("system", request.system or ""),
                            ("model", request.model.model), ("n", str(number))):
            text = text.replace("{%s}" % name, value)
        return Completion(text=text, finish_reason=rule.finish_reason,
                          input_tokens=len(prompt.split()) + 1, output_tokens=len(text.split()),
                          reasoning_tokens=rule.reasoning_tokens,
                          reported_model=rule.reported_model or request.model.model)

    async def close(self) -> None:
        pass

    def describe(self) -> dict | None:
        return None

    @classmethod
    def parameters_sent(cls, spec: ModelSpec) -> list[str] | None:
        return None

    def classify(self, exc: BaseException, spec: ModelSpec) -> ErrorClass | None:
        if not isinstance(exc, MockError) or exc.kind == "bug":
            return None
        finish = "content_filter" if exc.kind == "block" else None
        return ErrorClass(Outcome(exc.kind), str(exc), finish)


PROVIDER = MockProvider


def install() -> None:
    """Add :data:`ROW` to the provider table, so ``mock/<name>`` models resolve."""
    PROVIDERS[ROW.name] = ROW
