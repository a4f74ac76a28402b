"""Protocol ``openai``: chat completions through the official ``openai`` SDK, and the OpenAI Batch API.

Serves OpenAI itself and every OpenAI-compatible server in the provider table (Together,
Mistral, Gemini, vLLM, Ollama, any ``--base_url``). OpenAI itself gets ``max_completion_tokens``
and, for reasoning models, no ``temperature``; other servers get the classic parameters
(:func:`openai_params`). The batch path (:class:`OpenAIBatch`, OpenAI itself only) uploads a
JSONL file of ``/v1/chat/completions`` requests and reads the output and error files back.
"""

from __future__ import annotations

import json
import re

from orbench.llm.models import ModelSpec, Provider
from orbench.llm.providers.transport import SDKProvider, sdk_http_client
from orbench.llm.types import BatchAPI, Completion, Request, TransientReply

# The Batch API's documented limits per batch (module constants, so tests can lower them).
BATCH_MAX_REQUESTS = 50_000
BATCH_MAX_BYTES = 200_000_000  # 200 MB input file
BATCH_ENDPOINT = "/v1/chat/completions"
# Per-request error codes of a batch that ended before the request ran: left to redo.
_REDO_CODES = {"batch_expired", "batch_cancelled", "batch_canceled"}


def is_reasoning_model(provider: str, model: str) -> bool:
    """OpenAI models that take only their default temperature: o1/o3/o4..., and GPT-5 (not its chat variant)."""
    if provider != "openai":
        return False
    name = model.lower()
    return bool(re.match(r"o\d", name)) or (name.startswith("gpt-5") and "chat" not in name)


def openai_params(provider: str, request: Request) -> dict:
    """The chat-completions parameters for ``request`` (without the messages).

    OpenAI itself gets ``max_completion_tokens`` (every current chat model accepts it; GPT-5 and
    the o-series reject ``max_tokens``), and reasoning models get no ``temperature`` (they reject
    any but their default). Other OpenAI-compatible servers get the classic ``max_tokens``.
    """
    params: dict = {"model": request.model.model}
    if provider == "openai":
        params["max_completion_tokens"] = request.max_tokens
    else:
        params["max_tokens"] = request.max_tokens
    if not is_reasoning_model(provider, request.model.model):
        params["temperature"] = request.temperature
    return params


def openai_messages(request: Request) -> list[dict]:
    """The chat-completions ``messages`` of ``request`` (system first, when there is one)."""
    messages = [{"role": "system", "content": request.system}] if request.system else []
    return messages + [{"role": role, "content": content} for role, content in request.messages]


def openai_completion(response) -> Completion:
    """A chat-completions response (SDK object) as a ``Completion``; ``TransientReply`` when it
    carries no answer. Shared by the synchronous and the batch paths."""
    if not response.choices:
        raise TransientReply("reply with no choices")
    choice = response.choices[0]
    message = choice.message
    refusal = getattr(message, "refusal", None) if message is not None else None
    blocked = choice.finish_reason == "content_filter" or bool(refusal)
    content = message.content if message is not None else None
    if content is None and not blocked:
        raise TransientReply(f"reply with no content (finish_reason {choice.finish_reason!r})")
    usage = response.usage
    details = getattr(usage, "completion_tokens_details", None)
    return Completion(
        text=content or refusal or "",
        finish_reason=choice.finish_reason,
        provider_refusal=blocked,
        input_tokens=getattr(usage, "prompt_tokens", 0) or 0,
        output_tokens=getattr(usage, "completion_tokens", 0) or 0,
        reasoning_tokens=getattr(details, "reasoning_tokens", 0) or 0,
        reported_model=getattr(response, "model", None) or None,
    )


class OpenAIChat(SDKProvider):
    """Chat completions through the official ``openai`` SDK (also every OpenAI-compatible server)."""

    sdk_package = "openai"

    def __init__(self, provider: Provider, base_url: str | None, api_key: str | None,
                 timeout: float, max_retries: int):
        from openai import AsyncOpenAI, DefaultAsyncHttpxClient

        self.provider = provider
        self.base_url = self.endpoint = base_url
        self.sdk = AsyncOpenAI(api_key=api_key or "not-needed", base_url=base_url,
                               timeout=timeout, max_retries=0,
                               http_client=sdk_http_client(DefaultAsyncHttpxClient, timeout))
        # Model requests are retried by the client's loop; batch calls keep the SDK's own retries.
        self.batch_sdk = self.sdk.with_options(max_retries=max_retries)

    @classmethod
    def parameters_sent(cls, spec: ModelSpec) -> list[str]:
        """The request parameters this provider sends for ``spec`` (for the meta file)."""
        return sorted(k for k in openai_params(spec.provider.name, Request.user(spec, "")) if k != "model")

    @classmethod
    def batch_api(cls, provider: Provider) -> BatchAPI | None:
        """Only OpenAI's own address has the Batch API, not the OpenAI-compatible servers."""
        return OpenAIBatch() if provider.name == "openai" else None

    async def generate(self, request: Request) -> Completion:
        params = openai_params(self.provider.name, request)
        params["messages"] = openai_messages(request)
        response = await self.sdk.chat.completions.create(**params)
        return openai_completion(response)


class OpenAIBatch(BatchAPI):
    """The OpenAI Batch API (Files + Batches), for OpenAI itself; used by ``orbench.llm.batch``."""

    def limits(self) -> tuple[int, int]:
        """Most requests and most bytes in one batch's input file."""
        return BATCH_MAX_REQUESTS, BATCH_MAX_BYTES

    def line(self, spec: ModelSpec, request: Request, key: str) -> dict:
        """One line of the JSONL input file, ``key`` as its ``custom_id``."""
        body = openai_params(spec.provider.name, request)
        body["messages"] = openai_messages(request)
        return {"custom_id": key, "method": "POST", "url": BATCH_ENDPOINT, "body": body}

    async def submit(self, provider, ref: str, lines: list[dict], payload: bytes, record) -> str:
        """Upload the input file, record its id with ``record``, create the batch; its id."""
        sdk = provider.batch_sdk
        upload = await sdk.files.create(file=(f"orbench-{ref}.jsonl", payload, "application/jsonl"),
                                        purpose="batch")
        record({"input_file_id": upload.id})
        batch = await sdk.batches.create(input_file_id=upload.id, endpoint=BATCH_ENDPOINT,
                                         completion_window="24h", metadata={"orbench_ref": ref})
        return batch.id

    def may_have_reached(self, record: dict) -> bool:
        """Whether an interrupted submission could have created a batch (its file was uploaded)."""
        return bool(record.get("input_file_id"))

    async def find_submission(self, provider, record: dict):
        """The batch an interrupted submission created, found by its input file id, or None."""
        sdk = provider.batch_sdk
        if not record.get("input_file_id"):
            return None
        since = float(record.get("at") or 0) - 3600  # the list is newest first
        async for batch in sdk.batches.list(limit=100):
            if batch.input_file_id == record["input_file_id"]:
                return batch.id
            if batch.created_at < since:
                break
        return None

    async def poll(self, provider, batch_id: str):
        """``(completed, failed)`` counts, the end status (None while running), a note, and the
        results (an async iterator of ``(key, outcome)``) once ended."""
        sdk = provider.batch_sdk
        batch = await sdk.batches.retrieve(batch_id)
        c = batch.request_counts
        counts = (c.completed, c.failed) if c else (0, 0)
        if batch.status not in ("completed", "expired", "cancelled", "failed"):
            return counts, None, "", None
        note = ""
        if batch.status == "failed" and batch.errors and batch.errors.data:
            note = "; ".join(str(e.message) for e in batch.errors.data[:3])
        return counts, batch.status, note, self._results(sdk, [batch.output_file_id, batch.error_file_id])

    @staticmethod
    async def _results(sdk, file_ids):
        """``(key, Completion | failure text | None to redo)`` for each line of the result files."""
        for file_id in file_ids:
            if not file_id:
                continue
            content = await sdk.files.content(file_id)
            for line in content.text.splitlines():
                if not line.strip():
                    continue
                try:
                    item = json.loads(line)
                except ValueError:
                    continue
                key = item.get("custom_id")
                if isinstance(key, str):
                    yield key, batch_outcome(item)


def batch_outcome(item: dict):
    """One OpenAI batch output line as a Completion, a failure text, or None (left to redo)."""
    from openai.types.chat import ChatCompletion

    error = item.get("error")
    response = item.get("response") or {}
    if error:
        code = str(error.get("code") or "")
        if code in _REDO_CODES:
            return None
        return f"openai batch error {code}: {error.get('message') or ''}".strip()
    status = response.get("status_code")
    body = response.get("body") or {}
    if status != 200:
        message = body.get("error", {}).get("message", "") if isinstance(body, dict) else ""
        return f"HTTP {status} from openai batch: {message}"
    try:
        return openai_completion(ChatCompletion.model_validate(body))
    except TransientReply as exc:
        return f"{exc} from openai batch"
    except ValueError:
        return "undecodable reply in the openai batch output"


PROVIDER = OpenAIChat
