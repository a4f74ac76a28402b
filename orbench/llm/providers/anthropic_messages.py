"""Protocol ``anthropic``: the messages API through the official ``anthropic`` SDK, and Message Batches.

A stop reason ``refusal`` is a provider block (``Completion.provider_refusal``). The batch path
(:class:`AnthropicBatch`) sends the same parameters as the synchronous one in one create call.
"""

from __future__ import annotations

from orbench.llm.models import ModelSpec, Provider
from orbench.llm.providers.transport import SDKProvider, sdk_http_client
from orbench.llm.types import BatchAPI, Completion, Request

# Message Batches' documented limits per batch (module constants, so tests can lower them).
BATCH_MAX_REQUESTS = 100_000
BATCH_MAX_BYTES = 256_000_000  # 256 MB request body
_WRAPPER_BYTES = 64  # the JSON around the requests of one create call


def anthropic_params(request: Request) -> dict:
    """The messages-API parameters of ``request`` (synchronous and batch paths alike)."""
    params: dict = {
        "model": request.model.model,
        "max_tokens": request.max_tokens,
        "messages": [{"role": role, "content": content} for role, content in request.messages],
        "temperature": request.temperature,
    }
    if request.system:
        params["system"] = request.system
    return params


def anthropic_completion(response) -> Completion:
    """A messages-API response (SDK object) as a ``Completion``."""
    text = "".join(getattr(block, "text", "") for block in response.content
                   if getattr(block, "type", "") == "text")
    return Completion(
        text=text,
        finish_reason=response.stop_reason,
        provider_refusal=response.stop_reason == "refusal",
        input_tokens=response.usage.input_tokens or 0,
        output_tokens=response.usage.output_tokens or 0,
        reported_model=getattr(response, "model", None) or None,
    )


class AnthropicMessages(SDKProvider):
    """The messages API through the official ``anthropic`` SDK."""

    sdk_package = "anthropic"

    def __init__(self, provider: Provider, base_url: str | None, api_key: str | None,
                 timeout: float, max_retries: int):
        from anthropic import AsyncAnthropic, DefaultAsyncHttpxClient

        self.provider = provider
        self.base_url = self.endpoint = base_url
        self.sdk = AsyncAnthropic(api_key=api_key, base_url=base_url,
                                  timeout=timeout, max_retries=0,
                                  http_client=sdk_http_client(DefaultAsyncHttpxClient, timeout))
        # Model requests are retried by the client's loop; batch calls keep the SDK's own retries.
        self.batch_sdk = self.sdk.with_options(max_retries=max_retries)

    @classmethod
    def parameters_sent(cls, spec: ModelSpec) -> list[str]:
        """The request parameters this provider sends for ``spec`` (for the meta file)."""
        return sorted(k for k in anthropic_params(Request.user(spec, "")) if k not in ("model", "messages"))

    @classmethod
    def batch_api(cls, provider: Provider) -> BatchAPI | None:
        """Message Batches, at Anthropic's address and any server that speaks its protocol."""
        return AnthropicBatch()

    async def generate(self, request: Request) -> Completion:
        params = anthropic_params(request)
        # Newer SDKs dropped the typed argument; the API still takes the field.
        params["extra_body"] = {"temperature": params.pop("temperature")}
        response = await self.sdk.messages.create(**params)
        return anthropic_completion(response)


class AnthropicBatch(BatchAPI):
    """Anthropic's Message Batches; used by ``orbench.llm.batch``."""

    def limits(self) -> tuple[int, int]:
        """Most requests and most bytes of the requests in one create call."""
        return BATCH_MAX_REQUESTS, BATCH_MAX_BYTES - _WRAPPER_BYTES

    def line(self, spec: ModelSpec, request: Request, key: str) -> dict:
        """One request of the batch, ``key`` as its ``custom_id``."""
        return {"custom_id": key, "params": anthropic_params(request)}

    async def submit(self, provider, ref: str, lines: list[dict], payload: bytes, record) -> str:
        """Create the batch in one call; its id."""
        batch = await provider.batch_sdk.messages.batches.create(requests=lines)
        return batch.id

    def may_have_reached(self, record: dict) -> bool:
        """An interrupted create call may have gone through: there is no way to tell."""
        return True

    async def poll(self, provider, batch_id: str):
        """``(succeeded, failed)`` counts, ``"ended"`` once ended (else None), a note, and the
        results (an async iterator of ``(key, outcome)``) once ended."""
        sdk = provider.batch_sdk
        batch = await sdk.messages.batches.retrieve(batch_id)
        c = batch.request_counts
        counts = (c.succeeded, c.errored + c.expired + c.canceled)
        if batch.processing_status != "ended":
            return counts, None, "", None
        return counts, "ended", "", self._results(sdk, batch.id)

    @staticmethod
    async def _results(sdk, batch_id: str):
        """``(key, Completion | failure text | None to redo)`` for each request of the batch."""
        async for item in await sdk.messages.batches.results(batch_id):
            result = item.result
            if result.type == "succeeded":
                yield item.custom_id, anthropic_completion(result.message)
            elif result.type == "errored":
                error = getattr(result.error, "error", None)
                yield item.custom_id, (f"{getattr(error, 'type', 'error')} from anthropic batch: "
                                       f"{getattr(error, 'message', '')}")
            else:  # canceled, expired
                yield item.custom_id, None


PROVIDER = AnthropicMessages
