"""Model specs, the provider table, and API-key lookup.

A model is named ``provider/model`` (split on the first ``/``, so
``together/meta-llama/Llama-3-70b-chat-hf`` keeps the slash in the model id), a bare name whose
provider can be inferred (``gpt-4o`` -> openai, ``claude-3-opus-20240229`` -> anthropic, ...), or one
of the original tool's short names (``gpt4``, ``llama3``, ``gemini-1.5``, ``mixtral``), which map to
the exact models the paper used.

OpenAI-compatible endpoints are rows in ``PROVIDERS``, not classes: adding one is one line.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import re
from dataclasses import dataclass
from pathlib import Path

from orbench.llm.errors import UsageError


@dataclass(frozen=True)
class Provider:
    """One row of the provider table.

    ``api`` says which provider module speaks to it (``orbench.llm.providers.API_MODULES``):
    ``openai`` (chat completions, also for every OpenAI-compatible server), ``anthropic``
    (messages), ``gemini`` (Gemini's own API through google-genai) or ``local`` (llama.cpp in
    process).
    ``key_vars`` lists the environment variables that may hold the key, preferred first.
    ``request_note`` says what is (not) sent that a reader of the results should know; it goes
    into every output's meta file.
    """

    name: str
    api: str
    base_url: str | None
    key_vars: tuple[str, ...] = ()
    key_required: bool = True
    request_note: str | None = None

    @property
    def base_url_var(self) -> str:
        """The environment variable that overrides this provider's base URL."""
        return self.name.upper().replace("-", "_") + "_BASE_URL"


PROVIDERS: dict[str, Provider] = {
    p.name: p
    for p in (
        Provider("openai", "openai", "https://api.openai.com/v1", ("OPENAI_API_KEY",)),
        Provider("anthropic", "anthropic", "https://api.anthropic.com",
                 ("ANTHROPIC_API_KEY", "CLAUDE_API_KEY")),
        Provider("together", "openai", "https://api.together.xyz/v1", ("TOGETHER_API_KEY",)),
        Provider("mistral", "openai", "https://api.mistral.ai/v1", ("MISTRAL_API_KEY",)),
        Provider("gemini", "gemini", "https://generativelanguage.googleapis.com/",
                 ("GEMINI_API_KEY", "GOOGLE_API_KEY")),
        Provider("gemini-openai", "openai", "https://generativelanguage.googleapis.com/v1beta/openai/",
                 ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
                 request_note="safety settings not sent: the paper's runs set all four harm "
                              "categories to BLOCK_NONE, but Gemini's OpenAI-compatible endpoint has "
                              "no field for them (its extra_body.google takes thinking_config and "
                              "cached_content), so Gemini's default filters apply; their blocks are "
                              "counted as provider blocks (refusal_source=provider_block)"),
        Provider("vllm", "openai", "http://localhost:8000/v1", ("VLLM_API_KEY",), key_required=False),
        # started by --serve (orbench.llm.serve) at a port of its own; these are the engines' default addresses
        Provider("sglang", "openai", "http://localhost:30000/v1", ("SGLANG_API_KEY",), key_required=False),
        Provider("llamacpp", "openai", "http://localhost:8080/v1", ("LLAMACPP_API_KEY",), key_required=False),
        Provider("ollama", "openai", "http://localhost:11434/v1", ("OLLAMA_API_KEY",),
                 key_required=False),
        Provider("openai-compatible", "openai", None, ("OPENAI_COMPATIBLE_API_KEY",),
                 key_required=False),
        Provider("local", "local", None, key_required=False),
    )
}

# The original tool's short names, mapped to the exact models of the paper.
ALIASES: dict[str, str] = {
    "gpt4": "openai/gpt-4-turbo-2024-04-09",
    "llama3": "together/meta-llama/llama-3-70b-chat-hf",
    "gemini-1.5": "gemini/gemini-1.5-pro-latest",
    "mixtral": "mistral/open-mixtral-8x7b",
    "smollm2": "local/smollm2",
}

# Bare model names whose provider is unambiguous.
_INFER: tuple[tuple[str, str], ...] = (
    (r"^(gpt-|chatgpt-|o1|o3|o4)", "openai"),
    (r"^claude-", "anthropic"),
    (r"^gemini-", "gemini"),
    (r"^(mistral-|open-mixtral-|open-mistral-|mixtral-)", "mistral"),
)


@dataclass(frozen=True)
class ModelSpec:
    """A resolved model: its provider row and the model id the provider expects."""

    provider: Provider
    model: str

    def __str__(self) -> str:
        return f"{self.provider.name}/{self.model}"


def _unknown(spec: str, why: str) -> UsageError:
    valid = ", ".join(PROVIDERS)
    return UsageError(
        f"{why} in model {spec!r}; write it as provider/model with provider one of: {valid} "
        f"(or a short name: {', '.join(ALIASES)})"
    )


def parse_model(spec: str) -> ModelSpec:
    """Resolve a model string to a ``ModelSpec``; raise ``UsageError`` naming valid providers."""
    text = (spec or "").strip()
    if not text:
        raise _unknown(spec, "empty model name")
    text = ALIASES.get(text.lower(), text)
    head, sep, rest = text.partition("/")
    if sep:
        provider = PROVIDERS.get(head.lower())
        if provider is None:
            raise _unknown(spec, f"unknown provider {head!r}")
        if not rest:
            raise _unknown(spec, "missing model id")
        return ModelSpec(provider, rest)
    for pattern, name in _INFER:
        if re.match(pattern, text, flags=re.IGNORECASE):
            return ModelSpec(PROVIDERS[name], text)
    raise _unknown(spec, "cannot infer the provider")


def base_url_for(provider: Provider, override: str | None = None) -> str | None:
    """The base URL to use: ``--base_url``, else ``<PROVIDER>_BASE_URL``, else the table's."""
    url = override or os.environ.get(provider.base_url_var) or provider.base_url
    if provider.name == "openai-compatible" and not url:
        raise UsageError(
            "provider openai-compatible needs a server address: pass --base_url "
            "or set OPENAI_COMPATIBLE_BASE_URL"
        )
    return url


_dotenv_loaded = False
#: While set (``keys_not_needed``), a missing key is not an error: a run that sends nothing
#: (``--estimate``) still sets its providers up to look in the cache, and needs no key for that.
_KEYS_OPTIONAL: contextvars.ContextVar[bool] = contextvars.ContextVar("orbench_keys_optional", default=False)
#: What a provider is given in place of a key it does not need for a run that sends nothing.
UNUSED_KEY = "not-needed-nothing-is-sent"


@contextlib.contextmanager
def keys_not_needed(active: bool = True):
    """Within this block a provider with no key set gets :data:`UNUSED_KEY` instead of an error
    (for ``--estimate``, which collects requests and sends none)."""
    token = _KEYS_OPTIONAL.set(bool(active))
    try:
        yield
    finally:
        _KEYS_OPTIONAL.reset(token)


def load_env_file() -> None:
    """Load ``.env`` from the current directory (or a parent) once; real env vars win."""
    global _dotenv_loaded
    if _dotenv_loaded:
        return
    from dotenv import find_dotenv, load_dotenv

    path = find_dotenv(usecwd=True)
    if path:
        load_dotenv(path, override=False)
    _dotenv_loaded = True


def api_key_for(provider: Provider) -> str | None:
    """The provider's key from the environment or ``.env``; ``UsageError`` naming the variable if
    required and missing."""
    load_env_file()
    for var in provider.key_vars:
        value = os.environ.get(var, "").strip()
        if value:
            return value
    if provider.key_required and _KEYS_OPTIONAL.get():
        return UNUSED_KEY
    if provider.key_required:
        names = " or ".join(provider.key_vars)
        raise UsageError(
            f"no API key for provider {provider.name}: set {names} in the environment or in a .env file"
        )
    return None


def known_key_values() -> list[str]:
    """Every API key value currently set, for redaction of text that leaves the process."""
    load_env_file()
    values = []
    for provider in PROVIDERS.values():
        for var in provider.key_vars:
            value = os.environ.get(var, "").strip()
            if len(value) >= 6:
                values.append(value)
    return values


def redact(text: str) -> str:
    """Replace any known API key value (and ``sk-...``-style tokens) in ``text`` with ``[redacted]``."""
    for value in known_key_values():
        text = text.replace(value, "[redacted]")
    return re.sub(r"\b(sk-(?:ant-)?[A-Za-z0-9_\-]{8})[A-Za-z0-9_\-*]+", r"[redacted]", text)


def slug(model: str) -> str:
    """A file-name-safe form of a model name (``/`` and other separators become ``_``)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", model).strip("_") or "model"


def local_model_path(name: str) -> Path | None:
    """For ``local/<path>.gguf`` the path; ``None`` for the bundled default (``smollm2``)."""
    return None if name.lower() == "smollm2" else Path(name).expanduser()
