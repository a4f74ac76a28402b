"""Model specs, the provider table, base URLs and API-key lookup."""

import pytest

from orbench.llm import models
from orbench.llm.errors import UsageError
from orbench.llm.models import PROVIDERS, api_key_for, base_url_for, parse_model, redact, slug


@pytest.mark.parametrize("spec, provider, model", [
    ("openai/gpt-4o", "openai", "gpt-4o"),
    ("together/meta-llama/Llama-3-70b-chat-hf", "together", "meta-llama/Llama-3-70b-chat-hf"),
    ("anthropic/claude-3-opus-20240229", "anthropic", "claude-3-opus-20240229"),
    ("gpt-3.5-turbo-0125", "openai", "gpt-3.5-turbo-0125"),
    ("o1-mini", "openai", "o1-mini"),
    ("o3-mini", "openai", "o3-mini"),
    ("claude-3-haiku-20240307", "anthropic", "claude-3-haiku-20240307"),
    ("gemini-1.5-flash", "gemini", "gemini-1.5-flash"),
    ("mistral-large-latest", "mistral", "mistral-large-latest"),
    ("open-mixtral-8x7b", "mistral", "open-mixtral-8x7b"),
    ("open-mistral-7b", "mistral", "open-mistral-7b"),
    ("gpt4", "openai", "gpt-4-turbo-2024-04-09"),
    ("llama3", "together", "meta-llama/llama-3-70b-chat-hf"),
    ("gemini-1.5", "gemini", "gemini-1.5-pro-latest"),
    ("mixtral", "mistral", "open-mixtral-8x7b"),
    ("local/smollm2", "local", "smollm2"),
    ("vllm/my-model", "vllm", "my-model"),
    ("ollama/llama3:8b", "ollama", "llama3:8b"),
    ("openai-compatible/some/model", "openai-compatible", "some/model"),
])
def test_parse_model(spec, provider, model):
    parsed = parse_model(spec)
    assert (parsed.provider.name, parsed.model) == (provider, model)


@pytest.mark.parametrize("spec, fragment", [
    ("meta-llama/Llama-3-70b-chat-hf", "unknown provider 'meta-llama'"),
    ("some-model", "cannot infer the provider"),
    ("openai/", "missing model id"),
    ("", "empty model name"),
])
def test_parse_model_errors_list_valid_providers(spec, fragment):
    with pytest.raises(UsageError) as info:
        parse_model(spec)
    message = str(info.value)
    assert fragment in message
    assert ("openai, anthropic, together, mistral, gemini, gemini-openai, vllm, sglang, llamacpp, ollama, "
            "openai-compatible, local") in message
    assert "\n" not in message


def test_provider_table_rows():
    assert PROVIDERS["vllm"].base_url == "http://localhost:8000/v1"
    assert PROVIDERS["ollama"].base_url == "http://localhost:11434/v1"
    assert PROVIDERS["together"].base_url == "https://api.together.xyz/v1"
    shipped = {name: p for name, p in PROVIDERS.items() if name != "mock"}  # the tests add mock/<name>
    assert all(p.api in ("openai", "anthropic", "gemini", "local") for p in shipped.values())


def test_base_url_precedence(monkeypatch):
    together = PROVIDERS["together"]
    monkeypatch.delenv("TOGETHER_BASE_URL", raising=False)
    assert base_url_for(together) == "https://api.together.xyz/v1"
    monkeypatch.setenv("TOGETHER_BASE_URL", "http://127.0.0.1:9/v1")
    assert base_url_for(together) == "http://127.0.0.1:9/v1"
    assert base_url_for(together, "http://127.0.0.1:7/v1") == "http://127.0.0.1:7/v1"
    monkeypatch.delenv("OPENAI_COMPATIBLE_BASE_URL", raising=False)
    with pytest.raises(UsageError, match="--base_url"):
        base_url_for(PROVIDERS["openai-compatible"])


def test_missing_key_names_the_variable(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setattr(models, "_dotenv_loaded", True)
    with pytest.raises(UsageError) as info:
        api_key_for(PROVIDERS["openai"])
    assert "OPENAI_API_KEY" in str(info.value)
    assert api_key_for(PROVIDERS["vllm"]) is None  # local servers need no key


def test_claude_api_key_accepted(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("CLAUDE_API_KEY", "claude-key-value-123")
    monkeypatch.setattr(models, "_dotenv_loaded", True)
    assert api_key_for(PROVIDERS["anthropic"]) == "claude-key-value-123"


def test_dotenv_file_is_read(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MISTRAL_API_KEY", raising=False)
    (tmp_path / ".env").write_text("MISTRAL_API_KEY=from-dotenv-123456\n")
    monkeypatch.setattr(models, "_dotenv_loaded", False)
    try:
        assert api_key_for(PROVIDERS["mistral"]) == "from-dotenv-123456"
    finally:
        monkeypatch.delenv("MISTRAL_API_KEY", raising=False)


def test_redact_removes_key_values(monkeypatch):
    monkeypatch.setenv("TOGETHER_API_KEY", "tg-very-secret-value-42")
    monkeypatch.setattr(models, "_dotenv_loaded", True)
    text = redact("bad key tg-very-secret-value-42 and sk-proj-abcdefghijklmnop")
    assert "tg-very-secret-value-42" not in text
    assert "abcdefghijklmnop" not in text
    assert text.count("[redacted]") == 2


def test_slug_is_file_name_safe():
    assert slug("together/meta-llama/Llama-3-70b-chat-hf") == "together_meta-llama_Llama-3-70b-chat-hf"
    assert "/" not in slug("a/b/c") and slug("gpt4") == "gpt4"
