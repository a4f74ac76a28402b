"""What the HTTP providers share: a transport that bounds one whole attempt, reply body included,
the set-up from the provider table (:class:`SDKProvider`), and the sorting of HTTP errors
(:func:`classify_http`) that each SDK provider's ``classify`` builds on.

httpx's own timeouts apply per network read, so a server that trickles a reply a byte at a time
never trips them; :class:`WholeRequestTimeout` reads the whole reply inside the limit, and hands
the rate-limit budgets its headers report (:func:`budgets`) to the pacer. The SDKs' own retries
are off (``max_retries=0``): the client's one retry loop (``orbench.llm.clients``) asks again, on
what :func:`classify_http` sorts as worth it, waiting as :func:`retry_after` reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import math
import os
import re
import time
from datetime import datetime
from email.utils import parsedate_to_datetime

from orbench.llm import ratelimit
from orbench.llm.models import ModelSpec, api_key_for, base_url_for, redact
from orbench.llm.types import ErrorClass, Outcome, ProviderAPI


def http_module(default_client: type):
    """The HTTP library an SDK is built on (``httpx``, or its successor ``httpx2``), found from
    the SDK's default client class, so the transport below speaks the same one."""
    base = next(c for c in default_client.__mro__ if c.__name__ == "AsyncClient")
    return importlib.import_module(base.__module__.split(".")[0])


_tls_contexts: dict[tuple, object] = {}


def shared_tls_context(http):
    """One TLS context per HTTP library and CA setting, shared by every client in the process.

    Building one reads the whole CA bundle (about 25 ms of CPU), and a run builds a client per
    model, per stage and per judge; a context is safe to share between connections. The key
    holds ``SSL_CERT_FILE`` and ``SSL_CERT_DIR``, which the library reads, so a changed setting
    gets a context of its own.
    """
    key = (http.__name__, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    if key not in _tls_contexts:
        _tls_contexts[key] = http.create_ssl_context()
    return _tls_contexts[key]


class WholeRequestTimeout:
    """An HTTP transport that bounds one attempt, reply body included, by ``timeout`` seconds.

    On expiry the SDK sees the library's ``ReadTimeout``. ``http`` is the SDK's HTTP module.
    The budgets every reply's headers report go to ``orbench.llm.ratelimit.note_reply``: they
    pace the requests that follow.
    """

    def __init__(self, timeout: float, http):
        self.timeout = timeout
        self.http = http
        self._inner = http.AsyncHTTPTransport(verify=shared_tls_context(http))

    async def handle_async_request(self, request):
        try:
            response = await asyncio.wait_for(self._fetch(request), self.timeout)
        except TimeoutError:
            raise self.http.ReadTimeout(f"no complete reply within {self.timeout:g} s",
                                        request=request) from None
        ratelimit.note_reply(budgets(response.headers))
        return response

    async def _fetch(self, request):
        response = await self._inner.handle_async_request(request)
        try:
            body = b"".join([chunk async for chunk in response.aiter_raw()])
        finally:
            await response.aclose()
        return self.http.Response(status_code=response.status_code, headers=response.headers,
                                  content=body, extensions=response.extensions)

    async def aclose(self) -> None:
        await self._inner.aclose()


def sdk_http_client(default_client: type, timeout: float):
    """An SDK's default async HTTP client over :class:`WholeRequestTimeout`."""
    return default_client(transport=WholeRequestTimeout(timeout, http_module(default_client)))


# Markers in a 400 error's code or message that mean "the provider blocked this prompt".
BLOCK_MARKERS = (
    "content_filter", "content_policy", "content management policy", "prohibited_content",
    "responsible ai", "safety system",
)
# An account out of credit, so every row would fail alike: OpenAI's 429 "insufficient_quota",
# Anthropic's 400 "Your credit balance is too low to access the Anthropic API".
CREDIT_MARKERS = ("insufficient_quota", "credit balance is too low")
# Error codes that say the request itself is wrong for this model, so every row would fail alike.
SETUP_MARKERS = ("unsupported_parameter", "unsupported_value", "model_not_found", "invalid_model",
                 "unknown_parameter", "does not exist")


def error_fields(exc: BaseException) -> tuple[str, str]:
    """``(code and type, message)`` of an SDK error whose ``body`` is the JSON error object."""
    body = getattr(exc, "body", None)
    err = body.get("error", body) if isinstance(body, dict) else {}
    if not isinstance(err, dict):
        err = {}
    code = " ".join(str(err.get(k) or "") for k in ("code", "type", "status"))
    message = str(err.get("message") or getattr(exc, "message", "") or exc)
    return code, message


def short_message(exc: BaseException) -> str:
    """The error's message on one line, keys redacted, at most 300 characters."""
    _, message = error_fields(exc)
    return redact(re.sub(r"\s+", " ", message).strip())[:300]


def seconds_until(text: str, now_wall: float | None = None, unix_ms: bool = False) -> float | None:
    """Seconds from now in a reset or retry header: ``"6m0s"``, ``"20ms"``, ``"1.5"``, an
    RFC 3339 time, an HTTP date, or a Unix time in seconds (GitHub's ``X-RateLimit-Reset``) or,
    with ``unix_ms`` (a reset), milliseconds (OpenRouter's); None when unreadable.

    A plain number past half of now is a Unix time: as a wait it would be decades. With
    ``unix_ms``, one past half of now in milliseconds is a Unix time in milliseconds: read as
    seconds it would be tens of thousands of years away (Unix seconds pass 10^11 in the year
    5138). A ``Retry-After``'s number is never read as milliseconds: below half of now it is a
    delay in seconds (RFC 9110); past it, where a delay would be decades, a Unix time in seconds."""
    text, now = (text or "").strip(), time.time() if now_wall is None else now_wall
    with contextlib.suppress(ValueError):
        value = float(text)
        if unix_ms and value > now * 1000 / 2:
            value /= 1000
        return max(0.0, value - now if value > now / 2 else value) if math.isfinite(value) else None
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", text)
    if parts and "".join(n + u for n, u in parts) == text:
        return sum(float(n) * {"h": 3600, "m": 60, "s": 1, "ms": 1e-3}[u] for n, u in parts)
    for parse in (lambda t: datetime.fromisoformat(t.replace("Z", "+00:00")), parsedate_to_datetime):
        with contextlib.suppress(ValueError, TypeError, IndexError):
            moment = parse(text)
            if moment.tzinfo is not None:
                return max(0.0, moment.timestamp() - now)
    return None


def budgets(headers) -> list[ratelimit.Budget]:
    """The budgets a reply's headers report (:class:`orbench.llm.ratelimit.Budget`), the unit one
    of ``orbench.llm.ratelimit.request_costs``' (a ``tokens-per-day`` budget counts ``tokens``).
    Several budgets of one unit (a day's and a minute's) keep their names, so each binds.
    The size (``limit``) is read from the ``x-`` and ``anthropic-`` families only (OpenAI's,
    Anthropic's, OpenRouter's, a gateway's): Anthropic's docs describe token buckets that refill
    continuously, OpenAI's name the reset as the time until the budget is back to its initial
    state (a fixed window among them is told by its reset standing still: the pacer's rule 5);
    the IETF draft's ``reset`` is a fixed window's, so its size is not read."""
    fields: dict[str, dict] = {}
    for name, value in headers.items():
        name = name.lower()
        if name == "ratelimit":  # the IETF draft: "limit=100, remaining=50, reset=5"
            fields["requests"] = dict(p.strip().split("=", 1) for p in value.split(",") if "=" in p)
            fields["requests"].pop("limit", None)
        parts = name.split("ratelimit-", 1)[1].split("-") if re.match(r"(x-|anthropic-)?ratelimit-", name) else []
        keys = {"remaining", "reset", "limit"} if name.startswith(("x-", "anthropic-")) else {"remaining", "reset"}
        for key in keys.intersection(parts):
            fields.setdefault("-".join(p for p in parts if p != key), {})[key] = value
    found = []
    for kind, values in fields.items():
        unit = ("input-tokens" if "input" in kind else "output-tokens" if "output" in kind
                else "tokens" if "token" in kind else "requests")
        with contextlib.suppress(KeyError, ValueError):
            limit = float(values["limit"]) if "limit" in values else None
            remaining = float(values["remaining"])
            if remaining >= 0:  # Azure's -1: not reported
                reset = seconds_until(values.get("reset", ""), unix_ms=True)
                found.append(ratelimit.Budget(unit, remaining, reset, limit, "" if kind in ("", unit) else kind))
    return found


def retry_after(headers) -> float | None:
    """The wait a reply asks for: OpenAI's ``retry-after-ms``, else ``Retry-After`` (seconds or an
    HTTP date, RFC 9110); None when it names none."""
    headers = headers or {}
    with contextlib.suppress(TypeError, ValueError):
        milliseconds = float(headers.get("retry-after-ms"))
        if not math.isnan(milliseconds):  # NaN asks nothing readable: Retry-After, if any, does
            return max(0.0, milliseconds / 1000)
    value = headers.get("retry-after")
    return seconds_until(value) if value is not None else None


def connect_failed(exc: BaseException) -> bool:
    """Whether ``exc`` is a failure to reach the server at all (refused, unknown host, TLS)."""
    links = (exc, exc.__cause__, exc.__context__)
    return any(type(link).__name__ in ("ConnectError", "ConnectTimeout") for link in links if link)


def classify_http(exc: BaseException, spec: ModelSpec, base_url: str | None,
                  status: int | None, wait: float | None = None) -> ErrorClass:
    """The verdict on an HTTP SDK's exception with HTTP ``status`` (None when no reply came);
    ``wait`` is what the reply asked for (default: its ``Retry-After``).

    401/403/404, a 400/422 naming an unsupported parameter or unknown model, and an account out
    of credit stop the run; a 400 naming a content filter is a provider block; 429 is a rate
    limit, 503/529 an overload; 408, 409 and other 5xx, a timeout or a dropped connection are
    worth asking again; no connection at all is a connection failure; any other status fails
    the row.
    """
    provider = spec.provider
    keys = " or ".join(provider.key_vars) or "its key variable"
    code, message = error_fields(exc)
    text = f"{code} {message}".lower()
    if wait is None:
        wait = retry_after(getattr(getattr(exc, "response", None), "headers", None))
    if status == 400 and any(m in text for m in BLOCK_MARKERS):
        return ErrorClass(Outcome.BLOCK, f"{provider.name} blocked the prompt", "content_filter")
    if status in (400, 422) and any(m in text for m in SETUP_MARKERS):
        return ErrorClass(Outcome.STOP, f"{provider.name} rejected the request for model "
                                        f"{spec.model!r} (HTTP {status}): {short_message(exc)}")
    if status == 401:
        return ErrorClass(Outcome.STOP, f"{provider.name} rejected the API key (HTTP 401): set "
                                        f"{keys} to a valid key")
    if status == 403:
        return ErrorClass(Outcome.STOP, f"{provider.name} refused access to model {spec.model!r} "
                                        f"(HTTP 403): check that the key in {keys} may use it")
    if status == 404:
        hint = ""
        if provider.api == "openai" and base_url and "/v1" not in base_url:
            hint = (f"; the base URL has no /v1 in it, and OpenAI-compatible servers answer under "
                    f"/v1: try {base_url.rstrip('/')}/v1")
        return ErrorClass(Outcome.STOP, f"{provider.name} has no model {spec.model!r} at "
                                        f"{base_url or 'its default address'} (HTTP 404): check the "
                                        f"model name and the base URL{hint}")
    if status in (400, 429) and any(m in text for m in CREDIT_MARKERS):  # every row would fail alike
        return ErrorClass(Outcome.STOP, f"{provider.name} says the account is out of credit (HTTP {status}): "
                                        f"add credit, or set {keys} to another key")
    if status is not None:
        outcome = {429: Outcome.RATE_LIMIT, 503: Outcome.OVERLOAD, 529: Outcome.OVERLOAD}.get(
            status, Outcome.RETRY if status in (408, 409) or status >= 500 else Outcome.ROW)
        return ErrorClass(outcome, f"HTTP {status} from {provider.name}: {short_message(exc)}", wait=wait)
    kind = type(exc).__name__
    if "Timeout" in kind and not connect_failed(exc):
        return ErrorClass(Outcome.RETRY, f"timed out talking to {provider.name}")
    if connect_failed(exc):
        return ErrorClass(Outcome.CONNECTION, f"could not connect to {provider.name} at {base_url}: "
                                              f"{short_message(exc.__cause__ or exc)}")
    if "Connect" in kind or "Protocol" in kind or "Read" in kind or "Write" in kind:
        return ErrorClass(Outcome.RETRY, f"the connection to {provider.name} broke ({kind})")
    return ErrorClass(Outcome.ROW, f"{kind} from {provider.name}: {short_message(exc)}")


class SDKProvider(ProviderAPI):
    """What the SDK-backed providers share: set up from the provider table, closed after the run.

    A subclass's ``__init__(provider, base_url, api_key, timeout, max_retries)`` builds ``self.sdk``;
    it implements ``generate`` and ``parameters_sent``, and names in ``sdk_package`` the SDK whose
    exceptions :meth:`classify` sorts (or overrides ``classify`` when its SDK differs).
    """

    sdk = None
    #: The top-level package of the SDK's exceptions (``openai``, ``anthropic``).
    sdk_package = ""

    def classify(self, exc: BaseException, spec: ModelSpec) -> ErrorClass | None:
        """The SDK's exceptions by HTTP status (:func:`classify_http`); an undecodable reply is
        asked again. Anything else is not this provider's to sort."""
        undecodable = ErrorClass(Outcome.RETRY, f"undecodable reply ({type(exc).__name__}) from "
                                                f"{spec.provider.name}")
        if isinstance(exc, json.JSONDecodeError) or type(exc).__name__ == "APIResponseValidationError":
            return undecodable
        if type(exc).__module__.split(".")[0] != self.sdk_package:
            return None
        if isinstance(exc, ValueError):
            return undecodable
        return classify_http(exc, spec, self.base_url, getattr(exc, "status_code", None))

    @classmethod
    def connect(cls, spec: ModelSpec, *, base_url: str | None, timeout: float, max_retries: int):
        """The client for ``spec``'s provider: its address (``base_url`` overrides) and key."""
        url = base_url_for(spec.provider, base_url)
        return cls(spec.provider, url, api_key_for(spec.provider), timeout, max_retries)

    def describe(self) -> dict | None:
        """Nothing beyond the address: an HTTP provider has no engine of ours to describe."""
        return None

    async def close(self) -> None:
        await self.sdk.close()
