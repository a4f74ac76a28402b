"""The providers: one module per wire protocol, looked up lazily by the provider table's ``api``.

``orbench.llm.models.PROVIDERS`` says which protocol each provider speaks (``Provider.api``); this
registry maps that name to the module that speaks it:

- ``openai`` -> ``orbench.llm.providers.openai_chat``: chat completions through the ``openai`` SDK
  (OpenAI and every OpenAI-compatible server: Together, Mistral, Gemini, vLLM, Ollama, any
  ``--base_url``), and the OpenAI Batch API;
- ``anthropic`` -> ``orbench.llm.providers.anthropic_messages``: the messages API and Message Batches;
- ``local`` -> ``orbench.llm.providers.local``: a GGUF model in process through llama.cpp;
- ``mock`` -> ``orbench.llm.providers.mock``: replies from rules a test sets, in process (its
  provider row is added by the tests, like inspect_ai's ``mockllm``).

A module is imported the first time a model of its protocol is used, so a run that never asks
the local model never imports llama.cpp's bindings. Each module defines ``PROVIDER``, a subclass
of :class:`orbench.llm.types.ProviderAPI` that implements the whole contract: ``connect``,
``generate``, ``close``, ``describe``, ``parameters_sent``, ``classify`` (its own error sorting)
and ``batch_api`` (its batch API, if any, with its limits). Adding a provider that speaks a known
protocol is one row in the provider table; a new protocol is one module plus its line here
(:func:`register` adds one at run time, as the tests do).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from orbench.llm.models import PROVIDERS, Provider
from orbench.llm.types import BatchAPI, ProviderAPI

#: Provider table ``api`` name -> the full name of the module that speaks it.
API_MODULES: dict[str, str] = {
    "openai": f"{__name__}.openai_chat",
    "anthropic": f"{__name__}.anthropic_messages",
    "gemini": f"{__name__}.gemini",
    "local": f"{__name__}.local",
    "mock": f"{__name__}.mock",
}


def register(api: str, module: str, provider: Provider | None = None) -> None:
    """Make protocol ``api`` spoken by ``module`` (a full module name); with ``provider``, also
    add that row to the provider table."""
    API_MODULES[api] = module
    if provider is not None:
        PROVIDERS[provider.name] = provider


def module_for(api: str) -> ModuleType:
    """The module that speaks protocol ``api`` (imported on first use)."""
    try:
        name = API_MODULES[api]
    except KeyError:
        raise ValueError(f"no provider module for api {api!r}; known: {', '.join(API_MODULES)}") from None
    return importlib.import_module(name)


def provider_class(api: str) -> type[ProviderAPI]:
    """The provider class for protocol ``api``."""
    cls = module_for(api).PROVIDER
    if not (isinstance(cls, type) and issubclass(cls, ProviderAPI)):
        raise TypeError(f"{API_MODULES[api]}.PROVIDER does not implement orbench.llm.types.ProviderAPI")
    return cls


def batch_api(provider: Provider) -> BatchAPI | None:
    """The batch API for ``provider``, or None when this project speaks none for it."""
    return provider_class(provider.api).batch_api(provider)


def batch_providers() -> list[str]:
    """The names of the table's providers that have a batch API (for messages)."""
    return [p.name for p in PROVIDERS.values() if batch_api(p) is not None]
