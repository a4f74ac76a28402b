"""The client helper through the real OpenAI and Anthropic SDKs talking HTTP to the loopback fake."""

import asyncio
import json

import pytest
from conftest import FAKE_KEYS

from orbench.llm.cache import Cache
from orbench.llm.clients import Client, Request
from orbench.llm.errors import FatalProviderError, RowError
from orbench.llm.models import parse_model
from orbench.llm.providers.openai_chat import is_reasoning_model, openai_params

# which requests were sent and what came out is tested, not the pauses between retries (conftest)
pytestmark = pytest.mark.usefixtures("quick_backoff")

GPT = parse_model("openai/gpt-test")
CLAUDE = parse_model("anthropic/claude-test")


def complete(client: Client, *requests: Request):
    async def go():
        try:
            return await asyncio.gather(*(client.complete(r) for r in requests))
        finally:
            await client.close()
    return asyncio.run(go())


@pytest.fixture
def client(env, tmp_path):
    return Client(cache=Cache(tmp_path / "cache.sqlite"), concurrency=4, max_retries=3)


def test_openai_and_anthropic_round_trip(client, fake):
    fake.add_rule(match="capital", text="Paris")
    gpt, claude = complete(client, Request.user(GPT, "capital of France?"),
                           Request.user(CLAUDE, "capital of France?", system="be brief"))
    assert (gpt.text, gpt.finish_reason, gpt.provider_refusal, gpt.cached) == ("Paris", "stop", False, False)
    assert (claude.text, claude.finish_reason) == ("Paris", "end_turn")
    assert gpt.output_tokens == 1 and gpt.input_tokens == 4
    anthropic = [r for r in fake.requests if r["path"].endswith("/messages")][0]
    assert anthropic["body"]["system"] == "be brief"
    assert anthropic["body"]["temperature"] == 0.0
    sent_key = anthropic["headers"].get("x-api-key") or anthropic["headers"]["authorization"]
    assert sent_key.endswith(FAKE_KEYS["ANTHROPIC_API_KEY"])
    openai = [r for r in fake.requests if r["path"].endswith("/chat/completions")][0]
    assert openai["body"]["messages"] == [{"role": "user", "content": "capital of France?"}]
    # OpenAI itself gets max_completion_tokens (GPT-5 and the o-series reject max_tokens)
    assert openai["body"]["max_completion_tokens"] == 1000 and "max_tokens" not in openai["body"]
    assert openai["body"]["temperature"] == 0.0
    assert anthropic["body"]["max_tokens"] == 1000


def test_second_identical_request_is_served_from_cache(env, fake, tmp_path):
    cache_path = tmp_path / "c.sqlite"
    first = complete(Client(cache=Cache(cache_path)), Request.user(GPT, "hello"))[0]
    second = complete(Client(cache=Cache(cache_path)), Request.user(GPT, "hello"))[0]
    assert fake.count() == 1
    assert second.cached and not first.cached and second.text == first.text


@pytest.mark.parametrize("change", [
    {"temperature": 0.5}, {"max_tokens": 5}, {"system": "x"}, {"model": parse_model("openai/other")},
])
def test_cache_key_covers_what_changes_output(env, fake, tmp_path, change):
    cache_path = tmp_path / "c.sqlite"
    base = {"model": GPT, "messages": (("user", "hi"),)}
    complete(Client(cache=Cache(cache_path)), Request(**base))
    complete(Client(cache=Cache(cache_path)), Request(**{**base, **change}))
    assert fake.count() == 2


def test_cache_key_ignores_timeouts_retries_concurrency_and_sample_index_at_t0(env, fake, tmp_path):
    cache_path = tmp_path / "c.sqlite"
    complete(Client(cache=Cache(cache_path), timeout=5, max_retries=0, concurrency=1),
             Request.user(GPT, "hi"))
    complete(Client(cache=Cache(cache_path), timeout=50, max_retries=4, concurrency=9),
             Request.user(GPT, "hi", sample_index=3))
    assert fake.count() == 1


def test_sample_index_separates_sampling_calls(env, fake, tmp_path):
    cache_path = tmp_path / "c.sqlite"
    complete(Client(cache=Cache(cache_path)),
             *(Request.user(GPT, "gen", temperature=1.0, sample_index=i) for i in range(3)))
    complete(Client(cache=Cache(cache_path)),
             *(Request.user(GPT, "gen", temperature=1.0, sample_index=i) for i in range(3)))
    assert fake.count() == 3


def test_base_url_is_part_of_the_cache_key(env, fake, tmp_path):
    cache_path = tmp_path / "c.sqlite"
    complete(Client(cache=Cache(cache_path)), Request.user(GPT, "hi"))
    complete(Client(cache=Cache(cache_path), base_url=fake.url + "/v1/"), Request.user(GPT, "hi"))
    assert fake.count() == 2


def test_429_with_retry_after_is_retried(client, fake):
    fake.add_rule(status=429, retry_after="0", times=2)
    result = complete(client, Request.user(GPT, "busy"))[0]
    assert result.text == "Fake answer to: busy"
    assert fake.count() == 3


def test_500_and_dropped_connection_are_retried(client, fake):
    fake.add_rule(status=500, times=1, retry_after="0.01")  # not the SDK's 0.5 s backoff: a faster test
    fake.add_rule(drop=True, times=1)
    result = complete(client, Request.user(CLAUDE, "flaky"))[0]
    assert result.text == "Fake answer to: flaky"
    assert fake.count() == 3


def test_retries_are_bounded(env, fake, tmp_path):
    # Retry-After 10 ms: the SDK's own backoff (0.5 s, then 1 s) would only make the test slow.
    fake.add_rule(status=500, retry_after="0.01")  # (a 503/529 "overloaded" is waited out by the pacer instead)
    client = Client(cache=None, max_retries=2)
    with pytest.raises(RowError, match="HTTP 500"):
        complete(client, Request.user(GPT, "down"))
    assert fake.count() == 3


@pytest.mark.parametrize("status, fragment", [
    (401, "set OPENAI_API_KEY to a valid key"),
    (403, "check that the key in OPENAI_API_KEY may use it"),
    (404, "has no model 'gpt-test'"),
])
def test_auth_and_model_errors_are_fatal_and_not_retried(client, fake, status, fragment):
    fake.add_rule(status=status)
    with pytest.raises(FatalProviderError) as info:
        complete(client, Request.user(GPT, "x"))
    assert fragment in str(info.value)
    assert FAKE_KEYS["OPENAI_API_KEY"] not in str(info.value)
    assert fake.count() == 1


@pytest.mark.parametrize("model, status, rule, keys", [
    (GPT, 429, {"error_code": "insufficient_quota",
                "error_message": "You exceeded your current quota, please check your plan and billing details."},
     "OPENAI_API_KEY"),
    (CLAUDE, 400, {"error_message": "Your credit balance is too low to access the Anthropic API. Please go "
                                    "to Plans & Billing to upgrade or purchase credits."},
     "ANTHROPIC_API_KEY or CLAUDE_API_KEY"),
])
def test_an_account_out_of_credit_stops_the_run_at_its_first_answer(client, fake, model, status, rule, keys):
    """No wait fixes it and every row would fail alike: one request (not the SDK's retries of a
    429) and a stop naming the key's variable. Before, each row failed on its own, the 429 after
    the SDK's retries, and the run went on asking for every row."""
    fake.add_rule(status=status, **rule)
    with pytest.raises(FatalProviderError) as info:
        complete(client, Request.user(model, "x"))
    assert str(info.value) == (f"{model.provider.name} says the account is out of credit (HTTP {status}): "
                               f"add credit, or set {keys} to another key")
    assert fake.count() == 1


def test_anthropic_401_names_both_variables(client, fake):
    fake.add_rule(status=401)
    with pytest.raises(FatalProviderError, match="ANTHROPIC_API_KEY or CLAUDE_API_KEY"):
        complete(client, Request.user(CLAUDE, "x"))


def test_plain_400_is_a_row_error_not_retried(client, fake):
    fake.add_rule(status=400, error_message="context too long")
    with pytest.raises(RowError, match="HTTP 400 from openai: context too long"):
        complete(client, Request.user(GPT, "x"))
    assert fake.count() == 1


@pytest.mark.parametrize("rule, model, finish", [
    ({"content_filter": True}, GPT, "content_filter"),
    ({"status": 400, "error_code": "content_filter"}, GPT, "content_filter"),
    ({"status": 400, "error_message": "Your request was rejected by our content management policy"},
     GPT, "content_filter"),
    ({"refusal": True}, CLAUDE, "refusal"),
    ({"refusal": True, "text": "I can't help with that."}, GPT, "stop"),  # OpenAI message.refusal
])
def test_provider_blocks_are_data(client, fake, rule, model, finish):
    fake.add_rule(**rule)
    result = complete(client, Request.user(model, "blocked prompt"))[0]
    assert result.provider_refusal is True
    assert result.finish_reason == finish
    assert client.stats.provider_blocks == 1


def test_provider_block_is_cached_too(env, fake, tmp_path):
    fake.add_rule(content_filter=True)
    cache_path = tmp_path / "c.sqlite"
    complete(Client(cache=Cache(cache_path)), Request.user(GPT, "blocked"))
    again = complete(Client(cache=Cache(cache_path)), Request.user(GPT, "blocked"))[0]
    assert again.cached and again.provider_refusal and fake.count() == 1


def test_malformed_body_is_retried_then_a_row_error(client, fake):
    fake.add_rule(malformed=True)
    with pytest.raises(RowError, match=r"undecodable reply \(JSONDecodeError\) from openai, 4 attempts"):
        complete(client, Request.user(GPT, "x"))
    assert fake.count() == 4  # max_retries 3: asked 4 times in all
    assert client.stats.provider_blocks == 0 and len(client.cache) == 0


def test_concurrency_bound_per_provider(env, fake):
    fake.add_rule(delay=0.05)
    client = Client(cache=None, concurrency=3)
    complete(client, *(Request.user(GPT, f"p{i}") for i in range(12)))
    assert fake.count() == 12
    assert fake.max_in_flight <= 3


def test_errors_are_not_cached(env, fake, tmp_path):
    cache_path = tmp_path / "c.sqlite"
    fake.add_rule(status=400, times=1)
    with pytest.raises(RowError):
        complete(Client(cache=Cache(cache_path)), Request.user(GPT, "x"))
    ok = complete(Client(cache=Cache(cache_path)), Request.user(GPT, "x"))[0]
    assert not ok.cached and fake.count() == 2


def test_cache_holds_no_key_values(env, fake, tmp_path):
    cache_path = tmp_path / "c.sqlite"
    complete(Client(cache=Cache(cache_path)), Request.user(GPT, "a"), Request.user(CLAUDE, "b"))
    blob = b"".join(p.read_bytes() for p in tmp_path.glob("c.sqlite*"))
    for value in FAKE_KEYS.values():
        assert value.encode() not in blob
    rows = Cache(cache_path)._db.execute("SELECT value FROM completions").fetchall()
    assert {json.loads(v)["text"] for (v,) in rows} == {"Fake answer to: a", "Fake answer to: b"}


@pytest.mark.parametrize("fault", [{"empty_choices": True}, {"null_content": True}])
def test_reply_with_no_answer_is_asked_again_and_never_cached(env, fake, tmp_path, fault):
    cache_path = tmp_path / "c.sqlite"
    fake.add_rule(times=2, **fault)
    client = Client(cache=Cache(cache_path), max_retries=3)
    result = complete(client, Request.user(GPT, "q"))[0]
    assert (result.text, result.provider_refusal) == ("Fake answer to: q", False)
    assert fake.count() == 3 and client.stats.transient == 2
    fake.reset()
    fake.add_rule(**fault)
    with pytest.raises(RowError, match=r"from openai, 2 attempts"):
        complete(Client(cache=Cache(cache_path), max_retries=1), Request.user(GPT, "other"))
    assert fake.count() == 2
    rows = Cache(cache_path)._db.execute("SELECT value FROM completions").fetchall()
    assert [json.loads(v)["text"] for (v,) in rows] == ["Fake answer to: q"]


def test_lone_surrogate_becomes_replacement_character_and_is_cached(env, fake, tmp_path):
    cache_path = tmp_path / "c.sqlite"
    fake.add_rule(text="abc", surrogate=True)
    first = complete(Client(cache=Cache(cache_path)), Request.user(GPT, "s"))[0]
    again = complete(Client(cache=Cache(cache_path)), Request.user(GPT, "s"))[0]
    assert first.text == again.text == "abc\ufffd"
    assert again.cached and fake.count() == 1


@pytest.mark.parametrize("provider, model, reasoning", [
    ("openai", "o1", True), ("openai", "o3-mini", True), ("openai", "o4-mini", True),
    ("openai", "gpt-5", True), ("openai", "gpt-5-mini", True), ("openai", "gpt-5-chat-latest", False),
    ("openai", "gpt-4o", False), ("openai", "gpt-4.1", False), ("together", "gpt-5", False),
])
def test_parameters_per_model(provider, model, reasoning):
    assert is_reasoning_model(provider, model) is reasoning
    params = openai_params(provider, Request.user(parse_model(f"{provider}/{model}"), "x", max_tokens=9))
    expected = {"model": model, ("max_completion_tokens" if provider == "openai" else "max_tokens"): 9}
    if not reasoning:
        expected["temperature"] = 0.0
    assert params == expected


def test_reported_model_and_reasoning_tokens_are_recorded(env, fake):
    fake.add_rule(reported_model="gpt-test-2025-01-01", reasoning_tokens=4)
    client = Client(cache=None)
    result = complete(client, Request.user(GPT, "r"))[0]
    assert (result.reported_model, result.reasoning_tokens) == ("gpt-test-2025-01-01", 4)
    assert client.stats.reported_models == {"openai/gpt-test": ["gpt-test-2025-01-01"]}


def test_one_default_concurrency_everywhere():
    import inspect

    from orbench.llm import clients
    from orbench.run import cli, stage

    assert clients.DEFAULT_CONCURRENCY == 16
    assert Client().concurrency == 16
    assert inspect.signature(stage.arun_stage).parameters["concurrency"].default == 16
    parser = cli.ArgumentParser()
    cli.add_run_flags(parser)
    assert parser.parse_args([]).concurrency == 16


def test_one_spelling_for_a_provider_block():
    from orbench.scoring import vocab

    assert vocab.PROVIDER_BLOCK == "provider_block"
    assert not hasattr(vocab, "PROVIDER_REFUSAL") and not hasattr(vocab, "SOURCE_PROVIDER")
    spelled = {v for k, v in vars(vocab).items() if k.isupper() and isinstance(v, str)}
    assert not spelled & vocab.OLD_PROVIDER_BLOCK  # the old spellings are read, never written
    assert all(vocab.is_provider_block(v) for v in ("provider_block", "provider", "provider_refusal"))


def test_tls_is_set_up_once_per_process_and_follows_ssl_cert_file(monkeypatch, tmp_path):
    """Reading the CA bundle costs ~25 ms of CPU; a run with many models and judges reads it once,
    and a changed SSL_CERT_FILE is read, not ignored."""
    import ssl

    import certifi

    from orbench.llm.providers import transport
    from orbench.llm.providers.anthropic_messages import AnthropicMessages
    from orbench.llm.providers.gemini import Gemini
    from orbench.llm.providers.openai_chat import OpenAIChat

    loaded = []
    real = ssl.SSLContext.load_verify_locations

    def counting(self, cafile=None, capath=None, cadata=None):
        loaded.append(cafile)
        return real(self, cafile, capath, cadata)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counting)
    monkeypatch.setattr(transport, "_tls_contexts", {})
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    for key, value in FAKE_KEYS.items():
        monkeypatch.setenv(key, value)

    def connect(cls, model):
        return cls.connect(parse_model(model), base_url=None, timeout=10, max_retries=0)

    # kept alive: a client freed at once could leave its id to the next one
    openai_clients = [connect(OpenAIChat, m) for m in ("openai/gpt-4o-mini", "openai/gpt-4o")]
    connect(AnthropicMessages, "anthropic/claude-3-haiku-20240307")
    gemini = [connect(Gemini, m) for m in ("gemini/gemini-2.5-flash", "gemini/gemini-2.5-pro")]  # and its SDK's own clients
    assert len({id(c.sdk) for c in openai_clients}) == 2  # a client per model, one CA bundle read between them
    assert len({id(c.sdk) for c in gemini}) == 2
    assert len(loaded) == 1

    bundle = tmp_path / "ca.pem"
    bundle.write_bytes(open(certifi.where(), "rb").read())
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    connect(OpenAIChat, "openai/gpt-4o-mini")
    connect(OpenAIChat, "openai/gpt-4o-mini")
    assert loaded[1:] == [str(bundle)]
