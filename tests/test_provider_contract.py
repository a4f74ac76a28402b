"""The provider contract (``orbench.llm.types.ProviderAPI``): a provider defined here, registered with
``orbench.llm.providers.register``, runs stage 4 with no edit anywhere else; its own ``classify``
decides what its exceptions mean (a block is a provider refusal, a stop ends the run with one
line, exit 2); every shipped provider implements the whole contract."""

import pandas as pd
import pytest

from orbench.llm import providers
from orbench.llm.models import PROVIDERS, Provider, parse_model
from orbench.llm.types import Completion, ErrorClass, Outcome, ProviderAPI, Request

SCRIPT = "alignment_checker/check_alignment.py"
SENT: list[Request] = []


class TinyError(Exception):
    """This provider's own exception type, which no other part of the suite knows."""

    def __init__(self, kind: str):
        super().__init__(kind)
        self.kind = kind


class Tiny(ProviderAPI):
    """Answers in process: echoes the prompt, or raises TinyError for the prompts named so."""

    closed = 0

    def __init__(self, spec):
        self.spec = spec

    @classmethod
    def connect(cls, spec, *, base_url, timeout, max_retries):
        return cls(spec)

    async def generate(self, request: Request) -> Completion:
        SENT.append(request)
        prompt = request.messages[-1][1]
        if prompt.startswith("BLOCK"):
            raise TinyError("blocked")
        if prompt.startswith("BADKEY"):
            raise TinyError("badkey")
        if prompt.startswith("FLAKY"):
            raise TinyError("flaky")
        return Completion(text=f"Sure. Here is how: {prompt}", finish_reason="stop",
                          input_tokens=3, output_tokens=5, reported_model="tiny-v1")

    async def close(self) -> None:
        Tiny.closed += 1

    def describe(self):
        return {"engine": "tiny"}

    @classmethod
    def parameters_sent(cls, spec):
        return ["temperature"]

    def classify(self, exc, spec):
        if not isinstance(exc, TinyError):
            return None
        if exc.kind == "blocked":
            return ErrorClass(Outcome.BLOCK, "tiny blocked it", "tiny_safety")
        if exc.kind == "badkey":
            return ErrorClass(Outcome.STOP, "tiny rejected the key: set TINY_KEY")
        return ErrorClass(Outcome.ROW, "tiny hiccup")


PROVIDER = Tiny


@pytest.fixture
def tiny():
    """This module registered as protocol ``tiny``, with a provider row of that name."""
    providers.register("tiny", __name__, Provider("tiny", "tiny", None, key_required=False))
    SENT.clear()
    yield
    SENT.clear()
    del providers.API_MODULES["tiny"], PROVIDERS["tiny"]


def test_registered_provider_runs_a_stage(tiny, env, script, tmp_path):
    pd.DataFrame({"prompt": ["how to bake bread", "BLOCK this", "FLAKY one"]}).to_csv(
        tmp_path / "in.csv", index=False)
    result = script(SCRIPT, "--model=tiny/echo-1", "--input_file=in.csv", "--output_file=out.csv",
                    env=env, cwd=tmp_path)
    assert result.returncode == 1, result.stderr  # the flaky row is a row error
    table = pd.read_csv(tmp_path / "out.csv", dtype=str, keep_default_na=False)
    assert list(table.response) == ["Sure. Here is how: how to bake bread", "", ""]
    assert list(table.is_rejected) == ["False", "True", ""]
    assert list(table.refusal_source) == ["", "provider_block", ""]
    assert list(table.finish_reason) == ["stop", "tiny_safety", ""]
    assert table.error[2] == "check_alignment: tiny hiccup"
    import json
    meta = json.loads((tmp_path / "out.csv.meta.json").read_text())
    model = meta["models"][0]
    assert model["provider"] == "tiny" and model["engine"] == {"engine": "tiny"}
    assert model["parameters_sent"] == ["temperature"] and model["reported_model"] == ["tiny-v1"]
    assert Tiny.closed >= 1


def test_registered_provider_stop_is_one_line_exit_2(tiny, env, script, tmp_path):
    pd.DataFrame({"prompt": [f"BADKEY {i}" for i in range(20)]}).to_csv(tmp_path / "in.csv", index=False)
    result = script(SCRIPT, "--model=tiny/echo-1", "--input_file=in.csv", "--output_file=out.csv",
                    "--concurrency=1", env=env, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == "error: tiny rejected the key: set TINY_KEY"
    assert len(SENT) == 1  # the run stopped at the first answer


def test_registered_provider_without_batch_api_says_so(tiny, env, script, tmp_path):
    pd.DataFrame({"prompt": ["a"]}).to_csv(tmp_path / "in.csv", index=False)
    result = script(SCRIPT, "--model=tiny/echo-1", "--input_file=in.csv", "--output_file=out.csv",
                    "--batch", env=env, cwd=tmp_path)
    assert result.returncode == 2 and not SENT
    assert "--batch: provider tiny has no batch API; providers with one: openai, anthropic, gemini" in result.stderr


def test_a_provider_missing_part_of_the_contract_cannot_be_made():
    class Partial(ProviderAPI):
        async def generate(self, request):
            return Completion("", "stop")

    with pytest.raises(TypeError, match="abstract"):
        Partial()


@pytest.mark.parametrize("api", sorted(set(providers.API_MODULES) - {"tiny"}))
def test_every_shipped_provider_implements_the_contract(api):
    cls = providers.provider_class(api)
    assert issubclass(cls, ProviderAPI) and not cls.__abstractmethods__
    spec = parse_model("local/smollm2" if api == "local" else "openai/gpt-4o")
    sent = cls.parameters_sent(spec)
    assert sent is None or isinstance(sent, list)


def _http_request(http):
    return http.Request("POST", "http://127.0.0.1:9/x")


@pytest.mark.parametrize("model", ["openai/gpt-4o", "anthropic/claude-3-haiku-20240307",
                                   "gemini/gemini-2.5-flash"])
def test_each_provider_sorts_its_own_exceptions(env, model):
    """The outcomes the client and the pacer act on, from each SDK's own exception types."""
    from orbench.llm.clients import Client
    from orbench.llm.providers.transport import http_module

    client = Client(cache=None)
    spec = parse_model(model)
    api = client.provider(spec)
    if spec.provider.api == "gemini":
        from google.genai import errors

        from orbench.llm.providers.gemini import _client_classes

        http = http_module(_client_classes()[1])
        unauthorised = errors.ClientError(401, {"error": {"code": 401, "message": "bad key",
                                                          "status": "UNAUTHENTICATED"}})
        limited = errors.ClientError(429, {"error": {"code": 429, "message": "slow down",
                                                     "status": "RESOURCE_EXHAUSTED"}})
        quota = errors.ClientError(429, {"error": {"code": 429, "details": [
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "47.434s"}]}})
        assert client.classify(quota, spec).wait == 47.434  # RetryInfo: Gemini's wait, in its body
        no_server = http.ConnectError("refused", request=_http_request(http))
    else:
        sdk = __import__(spec.provider.api)
        http = http_module(sdk.DefaultAsyncHttpxClient)

        def error(cls, code):
            response = http.Response(code, request=_http_request(http), json={"error": {"message": "x"}})
            return cls("x", response=response, body={"error": {"message": "x"}})

        unauthorised = error(sdk.AuthenticationError, 401)
        limited = error(sdk.RateLimitError, 429)
        limited.response.headers["retry-after-ms"] = "1500"
        no_server = sdk.APIConnectionError(request=_http_request(http))
        no_server.__cause__ = http.ConnectError("refused", request=_http_request(http))
    overloaded = error(sdk.InternalServerError, 529) if spec.provider.api == "anthropic" else None
    assert client.classify(unauthorised, spec).outcome is Outcome.STOP
    verdict = client.classify(limited, spec)
    assert verdict.outcome is Outcome.RATE_LIMIT
    assert verdict.wait == (1.5 if spec.provider.api != "gemini" else None)
    assert client.classify(no_server, spec).outcome is Outcome.CONNECTION
    if overloaded is not None:
        assert client.classify(overloaded, spec).outcome is Outcome.OVERLOAD
    assert client.classify(KeyError("a bug"), spec) is None  # not the provider's: propagates
    assert api is client.provider(spec)


def test_the_mock_provider_answers_by_rules_and_sorts_its_errors(mock, env, script, tmp_path):
    """``mock/<name>``: a rule per prompt substring or regex, the echo otherwise; a block is a
    provider refusal, a cut-off keeps its finish reason, a row error fails its row only."""
    mock.add(match="BLOCK", block=True)
    mock.add(regex=r"^CUT\b", text="The first step is", finish_reason="length")
    mock.add(match="FLAKY", error="row", message="mock hiccup")
    mock.add(match="SORRY", text="I'm sorry, but I can't help with that.")
    prompts = ["how to bake bread", "BLOCK this", "CUT short", "FLAKY one", "SORRY please"]
    pd.DataFrame({"prompt": prompts}).to_csv(tmp_path / "in.csv", index=False)
    result = script(SCRIPT, "--model=mock/echo-1", "--input_file=in.csv", "--output_file=out.csv",
                    env=env, cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    table = pd.read_csv(tmp_path / "out.csv", dtype=str, keep_default_na=False)
    assert list(table.response) == ["Mock answer to: how to bake bread", "", "The first step is", "",
                                    "I'm sorry, but I can't help with that."]
    assert list(table.is_rejected) == ["False", "True", "False", "", "True"]
    assert list(table.refusal_source) == ["", "provider_block", "", "", "keyword"]
    assert list(table.finish_reason) == ["stop", "content_filter", "length", "", "stop"]
    assert table.error[3] == "check_alignment: mock hiccup"
    assert sorted(mock.prompts()) == sorted(prompts)


@pytest.mark.parametrize("error, outcome, asked", [
    ("retry", "RowError", 2), ("transient", "RowError", 2), ("stop", "FatalProviderError", 1),
    ("rate_limit", "RowError", 1), ("overload", "FatalProviderError", 2),
    ("connection", "FatalProviderError", 1), ("bug", "MockError", 1)])
def test_the_mock_provider_errors_reach_the_client_as_their_class(mock, monkeypatch, error, outcome, asked):
    """--max_retries 1: what is worth asking again is asked twice; a 429 past --patience gives
    up at once (the retry rule). At an address that has never answered, a connection failure
    stops the run at once and "overloaded" answers once the retries are spent."""
    import asyncio

    from orbench.llm import retry
    from orbench.llm.clients import Client

    monkeypatch.setattr(retry, "BACKOFF_FIRST", 0.01)
    mock.add(error=error)
    # patience 0: every wait a 429 asks for, and every backoff, is past it
    client = Client(cache=None, max_retries=1, patience=0.0)
    with pytest.raises(Exception) as info:
        asyncio.run(client.complete(Request.user(parse_model("mock/m"), "hi")))
    assert type(info.value).__name__ == outcome
    assert len(mock.requests) == asked
