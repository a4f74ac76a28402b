"""Protocol ``gemini``: Google's Gemini API (``generateContent``) through the ``google-genai`` SDK.

``gemini/<model>`` goes through this module; Gemini's OpenAI-compatible endpoint stays reachable
as ``gemini-openai/<model>`` (protocol ``openai``), which cannot carry safety settings.

What is sent:

- **Safety settings.** The paper's runs set the four adjustable harm categories (harassment,
  hate speech, sexually explicit, dangerous content) to ``BLOCK_NONE``, and so does this module
  by default. ``ORBENCH_GEMINI_SAFETY`` overrides the threshold for all four (``BLOCK_NONE``,
  ``OFF``, ``BLOCK_ONLY_HIGH``, ``BLOCK_MEDIUM_AND_ABOVE``, ``BLOCK_LOW_AND_ABOVE``), or
  ``default`` sends none, so Google's default filters apply. The threshold is part of the cache
  key and of the meta file.
- **Thinking.** Thinking models (Gemini 2.5 and later) get their thinking budget set
  explicitly: ``ORBENCH_GEMINI_THINKING_BUDGET`` if set (``-1`` lets the model decide), else
  0 (no thinking) for Flash models and 128 (the least allowed) for Pro models. The budget is
  added to ``maxOutputTokens``, so ``--max_tokens`` still bounds the visible reply. Thinking
  tokens are recorded as ``reasoning_tokens``; thought parts are not part of the reply text.
- ``temperature``, ``maxOutputTokens`` and the system prompt as ``systemInstruction``.

What comes back:

- A prompt blocked by the provider (``promptFeedback.blockReason``) or a candidate that
  finished for ``SAFETY``, ``PROHIBITED_CONTENT``, ``BLOCKLIST``, ``SPII``, ``IMAGE_SAFETY`` or
  ``RECITATION`` is a provider refusal (``Completion.provider_refusal``), its ``finish_reason``
  the lower-cased reason (``prompt_safety`` for a blocked prompt).
- ``STOP`` is ``finish_reason`` ``stop``; ``MAX_TOKENS`` is ``length`` (a truncated reply, kept
  and marked). A reply with no candidate and no block, or no text with no block, is no answer
  (``TransientReply``, asked again); a reply cut at ``MAX_TOKENS`` before any text fails its row.
- ``modelVersion`` is the reported model (the meta file's ``reported_model``).

Errors (``classify``): 401/403, a 400 naming an invalid API key, and 404 stop the run with one
line; a 429 is a rate limit whose wait is the ``google.rpc.RetryInfo`` detail of its body
(``"retryDelay": "47.434s"``: Gemini sends no ``Retry-After``), waited out by the client's retry
loop up to ``--patience``; 503 is an overload, other 5xx are asked again (``--max_retries``), and
what is left fails the row; no connection is a connection failure (it stops the run if the
address never answered). The SDK's own retries are off.

The key comes from ``GEMINI_API_KEY`` (or ``GOOGLE_API_KEY``); ``--base_url`` or
``GEMINI_BASE_URL`` points the SDK at another server. The HTTP client is the shared one of
``orbench.llm.providers.transport`` (a whole-request timeout). Needs the ``gemini`` extra:
``pip install "orbench[gemini]"``.

Batch (``--batch``, :class:`GeminiBatch`): Gemini's batch mode with inline requests
(``models/{model}:batchGenerateContent``, half price), the same request fields as the
synchronous path, each request carrying its cache key as ``metadata.key``; results are read from
the finished job's inline responses.
"""

from __future__ import annotations

import os
import re

from orbench.llm.errors import RowError, UsageError
from orbench.llm.models import ModelSpec, Provider, api_key_for, base_url_for
from orbench.llm.providers.transport import classify_http, http_module, sdk_http_client, shared_tls_context
from orbench.llm.types import (
    BatchAPI,
    Completion,
    ErrorClass,
    Outcome,
    ProviderAPI,
    Request,
    TransientReply,
)

EXTRA_HINT = 'pip install "orbench[gemini]"'
#: The four adjustable harm categories, as the paper set them.
HARM_CATEGORIES = ("HARM_CATEGORY_HARASSMENT", "HARM_CATEGORY_HATE_SPEECH",
                   "HARM_CATEGORY_SEXUALLY_EXPLICIT", "HARM_CATEGORY_DANGEROUS_CONTENT")
DEFAULT_SAFETY = "BLOCK_NONE"
SAFETY_VAR = "ORBENCH_GEMINI_SAFETY"
THRESHOLDS = ("BLOCK_NONE", "OFF", "BLOCK_ONLY_HIGH", "BLOCK_MEDIUM_AND_ABOVE", "BLOCK_LOW_AND_ABOVE")
THINKING_VAR = "ORBENCH_GEMINI_THINKING_BUDGET"
#: Candidate finish reasons that mean the provider withheld the reply.
BLOCK_FINISHES = frozenset({"SAFETY", "PROHIBITED_CONTENT", "BLOCKLIST", "SPII", "IMAGE_SAFETY",
                            "RECITATION"})
# Batch mode's limits per job (module constants, so tests can lower them): inline requests must
# stay under 20 MB in all.
BATCH_MAX_REQUESTS = 100_000
BATCH_MAX_BYTES = 20_000_000
# Job states -> the end statuses orbench.llm.batch knows; other states are still running.
_BATCH_ENDS = {"JOB_STATE_SUCCEEDED": "completed", "JOB_STATE_FAILED": "failed",
               "JOB_STATE_CANCELLED": "cancelled", "JOB_STATE_EXPIRED": "expired"}
_THINKING_MODEL = re.compile(r"gemini-(?:2\.5|[3-9])", re.IGNORECASE)


def safety_threshold() -> str | None:
    """The threshold sent for all four categories, or None to send no safety settings."""
    value = os.environ.get(SAFETY_VAR, "").strip() or DEFAULT_SAFETY
    if value.lower() == "default":
        return None
    if value.upper() not in THRESHOLDS:
        raise UsageError(f"{SAFETY_VAR}={value!r} is not a safety threshold; use one of "
                         f"{', '.join(THRESHOLDS)} or 'default'")
    return value.upper()


def thinking_budget(model: str) -> int | None:
    """The thinking budget sent for ``model``; None for a model that does not think."""
    if not _THINKING_MODEL.search(model):
        return None
    value = os.environ.get(THINKING_VAR, "").strip()
    if value:
        try:
            budget = int(value)
        except ValueError:
            budget = None
        if budget is None or budget < -1:
            raise UsageError(f"{THINKING_VAR}={value!r} is not a thinking budget (a whole number of "
                             f"tokens >= 0, or -1 to let the model decide)")
        return budget
    return 128 if "pro" in model.lower() else 0


def gemini_body(request: Request) -> dict:
    """The ``generateContent`` request of ``request`` as REST JSON (synchronous and batch alike)."""
    config: dict = {"temperature": request.temperature, "maxOutputTokens": request.max_tokens}
    budget = thinking_budget(request.model.model)
    if budget is not None:
        config["thinkingConfig"] = {"thinkingBudget": budget, "includeThoughts": False}
        if budget > 0:
            config["maxOutputTokens"] = request.max_tokens + budget
    body: dict = {
        "contents": [{"role": "model" if role == "assistant" else "user", "parts": [{"text": text}]}
                     for role, text in request.messages],
        "generationConfig": config,
    }
    threshold = safety_threshold()
    if threshold is not None:
        body["safetySettings"] = [{"category": c, "threshold": threshold} for c in HARM_CATEGORIES]
    if request.system:
        body["systemInstruction"] = {"parts": [{"text": request.system}]}
    return body


def _sdk_config(body: dict):
    """``body`` as the SDK's ``GenerateContentConfig``."""
    from google.genai import types

    gen = body["generationConfig"]
    thinking = gen.get("thinkingConfig")
    return types.GenerateContentConfig(
        temperature=gen["temperature"],
        max_output_tokens=gen["maxOutputTokens"],
        thinking_config=(types.ThinkingConfig(thinking_budget=thinking["thinkingBudget"],
                                              include_thoughts=False) if thinking else None),
        safety_settings=[types.SafetySetting(category=s["category"], threshold=s["threshold"])
                         for s in body.get("safetySettings", [])] or None,
        system_instruction=body["systemInstruction"]["parts"][0]["text"]
        if "systemInstruction" in body else None,
    )


def _name(value) -> str:
    """An SDK enum (or plain string) as its upper-case name."""
    return str(getattr(value, "name", value) or "").upper()


def gemini_completion(response) -> Completion:
    """A ``GenerateContentResponse`` (SDK object) as a ``Completion``; see the module docstring."""
    usage = response.usage_metadata
    tokens = {
        "input_tokens": getattr(usage, "prompt_token_count", 0) or 0,
        "output_tokens": (getattr(usage, "candidates_token_count", 0) or 0)
        + (getattr(usage, "thoughts_token_count", 0) or 0),
        "reasoning_tokens": getattr(usage, "thoughts_token_count", 0) or 0,
        "reported_model": getattr(response, "model_version", None) or None,
    }
    feedback = response.prompt_feedback
    if feedback is not None and feedback.block_reason is not None:
        return Completion(text="", finish_reason=f"prompt_{_name(feedback.block_reason).lower()}",
                          provider_refusal=True, **tokens)
    if not response.candidates:
        raise TransientReply("reply with no candidates")
    candidate = response.candidates[0]
    finish = _name(candidate.finish_reason)
    parts = (candidate.content.parts if candidate.content is not None else None) or []
    text = "".join(p.text for p in parts if p.text and not p.thought)
    if finish in BLOCK_FINISHES:
        return Completion(text=text, finish_reason=finish.lower(), provider_refusal=True, **tokens)
    if finish == "MAX_TOKENS":
        if not text:
            raise RowError("the reply was cut at max_tokens before any text (raise --max_tokens)")
        return Completion(text=text, finish_reason="length", **tokens)
    if not text:
        raise TransientReply(f"reply with no text (finish_reason {finish or None!r})")
    return Completion(text=text, finish_reason="stop" if finish in ("STOP", "") else finish.lower(),
                      **tokens)


def _client_classes() -> tuple[type, type]:
    """The sync and async HTTP client classes google-genai itself would build (over httpx or
    httpx2), so the clients given to it speak the same library."""
    try:
        from google.genai._api_client import _get_http_client_classes  # private, so guarded

        classes = _get_http_client_classes(None)
        return classes[0], classes[1]
    except (ImportError, AttributeError, TypeError, IndexError):
        import httpx

        return httpx.Client, httpx.AsyncClient


class Gemini(ProviderAPI):
    """``generateContent`` through the ``google-genai`` SDK."""

    def __init__(self, provider: Provider, base_url: str | None, api_key: str | None,
                 timeout: float, max_retries: int):
        try:
            import google.genai as genai
            import google.genai.types as types
        except ImportError:
            raise UsageError(f"gemini/ models need the google-genai package: {EXTRA_HINT} "
                             f"(or use gemini-openai/<model> for the OpenAI-compatible endpoint)") from None
        self.provider = provider
        self.base_url = base_url
        self.threshold = safety_threshold()
        # The cache key records what changes answers: the address and the safety threshold.
        self.endpoint = f"{base_url or ''}#safety={self.threshold or 'default'}"
        sync_class, async_class = _client_classes()
        # The SDK builds a TLS context (the whole CA bundle read, ~40 ms) for each client it is not
        # given: a sync one (never used here) and one for its websocket API (Live, never used).
        # Given the process's shared context for both, a client per model and stage costs none.
        tls = shared_tls_context(http_module(async_class))
        # Clients handed to the SDK are ours to close: its aclose() leaves them open (see close).
        self.http_client = sdk_http_client(async_class, timeout)
        self.sync_http_client = sync_class(verify=tls, timeout=None)
        options = types.HttpOptions(
            base_url=base_url, api_version="v1beta", timeout=int(timeout * 1000),
            retry_options=types.HttpRetryOptions(attempts=1),  # the client's loop retries
            httpx_client=self.sync_http_client, httpx_async_client=self.http_client,
            async_client_args={"ssl": tls})
        self.sdk = genai.Client(api_key=api_key, http_options=options)

    @classmethod
    def connect(cls, spec: ModelSpec, *, base_url: str | None, timeout: float, max_retries: int):
        """The client for ``spec``: ``--base_url`` / ``GEMINI_BASE_URL`` / Google's address, and
        the key from ``GEMINI_API_KEY`` or ``GOOGLE_API_KEY``."""
        safety_threshold()  # a bad setting fails before any row
        thinking_budget(spec.model)
        url = base_url_for(spec.provider, base_url)
        return cls(spec.provider, url, api_key_for(spec.provider), timeout, max_retries)

    async def generate(self, request: Request) -> Completion:
        body = gemini_body(request)
        response = await self.sdk.aio.models.generate_content(
            model=request.model.model, contents=body["contents"], config=_sdk_config(body))
        return gemini_completion(response)

    async def close(self) -> None:
        """Close the SDK and the HTTP clients it was given, in this event loop: left open, the
        SDK's async client closes itself when collected, as a task on whatever loop runs then,
        over connections of a closed one ("Task exception was never retrieved")."""
        try:
            await self.sdk.aio.aclose()
        finally:
            await self.http_client.aclose()
            self.sync_http_client.close()

    def describe(self) -> dict:
        """The safety settings and the thinking-budget rule, for the meta file."""
        return {"safety_settings": ({c: self.threshold for c in HARM_CATEGORIES}
                                    if self.threshold else "not sent (Google's defaults)"),
                "thinking_budget": os.environ.get(THINKING_VAR, "").strip()
                or "0 for Flash, 128 for Pro thinking models (none for models that do not think)"}

    @classmethod
    def parameters_sent(cls, spec: ModelSpec) -> list[str]:
        """The request fields sent for ``spec`` (for the meta file)."""
        body = gemini_body(Request.user(spec, "", system="s"))
        return sorted([k for k in body if k not in ("contents", "systemInstruction", "generationConfig")]
                      + [f"generationConfig.{k}" for k in body["generationConfig"]])

    @classmethod
    def batch_api(cls, provider: Provider) -> BatchAPI | None:
        """Gemini's batch mode (inline requests)."""
        return GeminiBatch()

    def classify(self, exc: BaseException, spec: ModelSpec) -> ErrorClass | None:
        """The SDK's ``APIError`` by HTTP status (a 400 naming an invalid key stops the run, as
        401/403/404 do); httpx's connection and timeout errors; pydantic's and the SDK's
        ``ValueError`` (an undecodable reply) are asked again."""
        from google.genai import errors

        if isinstance(exc, errors.APIError):
            message = f"{exc.status or ''} {exc.message or ''} {exc.details or ''}".lower()
            if exc.code == 400 and ("api key not valid" in message or "api_key_invalid" in message):
                keys = " or ".join(spec.provider.key_vars)
                return ErrorClass(Outcome.STOP, f"{spec.provider.name} rejected the API key "
                                                f"(HTTP 400, API key not valid): set {keys} to a valid key")
            return classify_http(exc, spec, self.base_url, exc.code, retry_delay(exc.details))
        root = type(exc).__module__.split(".")[0]
        if root in ("httpx", "httpx2"):
            return classify_http(exc, spec, self.base_url, None)
        if isinstance(exc, ValueError) and root in ("google", "pydantic", "pydantic_core", "json"):
            return ErrorClass(Outcome.RETRY, f"undecodable reply ({type(exc).__name__})")
        return None


def retry_delay(details) -> float | None:
    """The wait in a Gemini error body's ``google.rpc.RetryInfo`` detail (a protobuf duration,
    ``"47.434s"``), or None."""
    error = details.get("error", details) if isinstance(details, dict) else {}
    for item in error.get("details") or [] if isinstance(error, dict) else []:
        delay = item.get("retryDelay") if isinstance(item, dict) else None
        if isinstance(delay, str) and re.fullmatch(r"\d+(\.\d*)?s", delay):
            return float(delay[:-1])
    return None


class GeminiBatch(BatchAPI):
    """Gemini's batch mode with inline requests, through ``client.aio.batches``."""

    def limits(self) -> tuple[int, int]:
        """Most requests and most bytes of inline requests in one job."""
        return BATCH_MAX_REQUESTS, BATCH_MAX_BYTES

    def line(self, spec: ModelSpec, request: Request, key: str) -> dict:
        """One inline request: the synchronous path's request, ``key`` as its metadata."""
        return {"key": key, "model": spec.model, "body": gemini_body(request)}

    async def submit(self, provider, ref: str, lines: list[dict], payload: bytes, record) -> str:
        """Create the job in one call; its name."""
        import google.genai.types as types

        requests = [types.InlinedRequest(model=line["model"], contents=line["body"]["contents"],
                                         config=_sdk_config(line["body"]), metadata={"key": line["key"]})
                    for line in lines]
        job = await provider.sdk.aio.batches.create(
            model=lines[0]["model"], src=requests, config={"display_name": f"orbench-{ref}"})
        return job.name

    def may_have_reached(self, record: dict) -> bool:
        """An interrupted create call may have gone through: there is no way to tell."""
        return True

    async def poll(self, provider, batch_id: str):
        """``(answered, failed)`` counts (known once ended), the end status (None while running),
        a note, and the results once ended."""
        job = await provider.sdk.aio.batches.get(name=batch_id)
        status = _BATCH_ENDS.get(_name(job.state))
        if status is None:
            return (0, 0), None, "", None
        responses = (job.dest.inlined_responses if job.dest is not None else None) or []
        failed = sum(1 for r in responses if r.error is not None)
        note = f"job {_name(job.state).lower()}" if status == "failed" else ""
        return (len(responses) - failed, failed), status, note, self._results(responses)

    @staticmethod
    async def _results(responses):
        """``(key, Completion | failure text)`` for each inline response that names its key."""
        for item in responses:
            key = (item.metadata or {}).get("key")
            if not key:
                continue
            if item.error is not None:
                yield key, f"gemini batch error {item.error.code}: {item.error.message or ''}".strip()
                continue
            try:
                yield key, gemini_completion(item.response)
            except (TransientReply, RowError) as exc:
                yield key, f"{exc} (gemini batch)"


PROVIDER = Gemini
