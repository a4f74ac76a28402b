"""The one retry rule (``orbench.llm.retry``), as a table: real SDK exceptions, sorted by the
providers' own ``classify`` (the wait read from the reply's headers as they send them), then the
rule. Each expected value is worked out by hand from the rule in the module's docstring; the
backoff's jitter is drawn as 0.5 (half of the longest wait the attempt allows)."""

import email.utils
import time

import pytest

from orbench.llm.clients import Client
from orbench.llm.models import parse_model
from orbench.llm.providers.transport import http_module
from orbench.llm.retry import GIVE_UPS_TO_STOP, GiveUp, describe_wait, long_wait_stop, next_wait
from orbench.llm.types import Outcome

PATIENCE, MAX_RETRIES = 600.0, 5


def _http_date(seconds_from_now: float) -> str:
    return email.utils.formatdate(time.time() + seconds_from_now, usegmt=True)


def _error(model: str, status: int | None, headers: dict):
    """The exception the model's SDK raises for a reply of ``status`` with ``headers`` (None: the
    connection dropped mid-reply), and the provider's verdict on it."""
    client = Client(cache=None)
    spec = parse_model(model)
    sdk = __import__(spec.provider.api)
    http = http_module(sdk.DefaultAsyncHttpxClient)
    request = http.Request("POST", "http://127.0.0.1:9/x")
    if status is None:
        exc = sdk.APIConnectionError(request=request)
        exc.__cause__ = http.RemoteProtocolError("peer closed connection without a full reply")
    else:
        classes = {429: sdk.RateLimitError, 408: sdk.APIStatusError}
        cls = classes.get(status, sdk.InternalServerError)
        response = http.Response(status, request=request, headers=headers,
                                 json={"error": {"message": "x"}})
        exc = cls("x", response=response, body={"error": {"message": "x"}})
    return client.classify(exc, spec)


GPT, CLAUDE = "openai/gpt-test", "anthropic/claude-test"
# (model, status (None: a dropped connection), headers, attempts, seconds since the first failure,
#  expected: the wait in seconds, or GiveUp's reason)
TABLE = [
    # a 429: waits exactly what is asked, in any format, while it fits in --patience
    (GPT, 429, {"retry-after": "2"}, 1, 0.0, 2.0),
    (GPT, 429, {"retry-after-ms": "1500", "retry-after": "2"}, 1, 0.0, 1.5),
    (GPT, 429, {"retry-after": "date +30"}, 1, 0.0, pytest.approx(30, abs=2)),
    (GPT, 429, {"retry-after": "date -30"}, 1, 0.0, 0.0),  # a date past: no wait
    (GPT, 429, {"retry-after": "-5"}, 1, 0.0, 0.0),
    (GPT, 429, {"retry-after-ms": "-100"}, 1, 0.0, 0.0),
    (GPT, 429, {"retry-after": "30"}, 9, 560.0, 30.0),  # 40 s left: fits
    (GPT, 429, {"retry-after": "30"}, 9, 590.0,
     "the server asked to wait 30 s, more than the 10 s left of --patience"),
    (GPT, 429, {"retry-after": "3600"}, 1, 0.0,
     "the server asked to wait 1 h 0 min, more than the 10 min left of --patience"),
    (GPT, 429, {"retry-after": "1e12"}, 1, 0.0,  # an absurd one: in words, not 277777777 h
     "the server asked to wait over a year, more than the 10 min left of --patience"),
    (GPT, 429, {"retry-after": "259200"}, 1, 0.0,
     "the server asked to wait 3 days, more than the 10 min left of --patience"),
    (GPT, 429, {"retry-after-ms": "600000.1"}, 1, 0.0,  # rounding must not make them read alike
     "the server asked to wait 600.0001 s, more than the 600 s left of --patience"),
    (GPT, 429, {"retry-after-ms": "nan", "retry-after": "7"}, 1, 0.0, 7.0),  # NaN asks nothing
    # a 429 asking nothing (or nothing readable): full jitter, 0.5 s doubling to 8 s, until
    # --patience is spent; never against --max_retries
    (GPT, 429, {}, 1, 0.0, 0.25),
    (GPT, 429, {"retry-after": "soon"}, 1, 0.0, 0.25),
    (GPT, 429, {"retry-after": "nan"}, 3, 0.0, 1.0),
    (GPT, 429, {}, 40, 100.0, 4.0),
    (GPT, 429, {}, 40, 598.5, "--patience (10 min) spent"),
    # overloaded (503, Anthropic's 529): as a 429
    (GPT, 503, {}, 7, 10.0, 4.0),
    (GPT, 503, {"retry-after": "5"}, 1, 0.0, 5.0),
    (GPT, 503, {"retry-after": "900"}, 1, 0.0,
     "the server asked to wait 15 min, more than the 10 min left of --patience"),
    (CLAUDE, 529, {}, 1, 0.0, 0.25),
    (CLAUDE, 529, {"retry-after": "3"}, 2, 1.0, 3.0),
    # a 500, a 408, a dropped connection: the same waits, and each spends one of --max_retries
    (GPT, 500, {"retry-after": "86400"}, 1, 0.0,
     "the server asked to wait 24 h 0 min, more than the 10 min left of --patience"),
    (GPT, 500, {}, 1, 0.0, 0.25),
    (GPT, 500, {"retry-after": "1"}, 5, 20.0, 1.0),
    (GPT, 500, {}, 6, 20.0, "6 attempts"),
    (GPT, 500, {"retry-after": "1"}, 6, 20.0, "6 attempts"),
    (GPT, 408, {"retry-after": "3"}, 1, 0.0, 3.0),
    (GPT, 408, {}, 2, 0.5, 0.5),
    (CLAUDE, 500, {"retry-after": "-1"}, 1, 0.0, 0.0),
    (GPT, None, {}, 2, 0.5, 0.5),
    (GPT, None, {}, 6, 30.0, "6 attempts"),
]


@pytest.mark.parametrize("model, status, headers, attempts, since, expected", TABLE)
def test_the_retry_rule(env, model, status, headers, attempts, since, expected):
    headers = {name: _http_date(float(value.split()[1])) if value.startswith("date ") else value
               for name, value in headers.items()}  # an HTTP date, made as the test runs
    verdict = _error(model, status, headers)
    wait = next_wait(verdict.outcome, verdict.wait, attempts, since, PATIENCE, MAX_RETRIES,
                     draw=lambda: 0.5)
    if isinstance(expected, str):
        assert isinstance(wait, GiveUp) and wait.why.startswith(expected), wait
        assert (wait.asked is not None) == expected.startswith("the server asked")
    else:
        assert wait == expected


def test_the_outcomes_sorted_as_the_table_says(env):
    assert _error(GPT, 429, {}).outcome is Outcome.RATE_LIMIT
    assert _error(GPT, 503, {}).outcome is _error(CLAUDE, 529, {}).outcome is Outcome.OVERLOAD
    assert _error(GPT, 500, {}).outcome is _error(GPT, 408, {}).outcome is Outcome.RETRY
    assert _error(GPT, None, {}).outcome is Outcome.RETRY


def test_what_is_not_worth_asking_again_is_never_waited_for():
    for outcome in (Outcome.STOP, Outcome.BLOCK, Outcome.ROW):
        assert isinstance(next_wait(outcome, 1.0, 1, 0.0, PATIENCE, MAX_RETRIES), GiveUp)


def test_max_retries_zero_gives_up_at_the_first_failure_but_not_on_a_429():
    assert next_wait(Outcome.RETRY, None, 1, 0.0, PATIENCE, 0) == GiveUp("")  # one attempt: no count
    assert next_wait(Outcome.RATE_LIMIT, 2.0, 1, 0.0, PATIENCE, 0) == 2.0


@pytest.mark.parametrize("seconds, text", [(0.25, "0.25 s"), (45, "45 s"), (119.6, "120 s"),
                                           (3600, "1 h 0 min"), (5400, "1 h 30 min"),
                                           (172799, "48 h 0 min"), (172800, "2 days"),
                                           (364 * 86400, "364 days"), (365 * 86400, "over a year"),
                                           (float("inf"), "forever")])
def test_waits_as_a_person_reads_them(seconds, text):
    assert describe_wait(seconds) == text


def test_the_run_stops_on_the_third_give_up_in_a_row_naming_the_wait_or_the_patience_spent():
    where = "openai at http://127.0.0.1:9/v1"
    assert GIVE_UPS_TO_STOP == 3
    assert long_wait_stop(2, 3600.0, where, PATIENCE) is None
    assert long_wait_stop(2, None, where, PATIENCE) is None
    assert long_wait_stop(3, 3600.0, where, PATIENCE) == (
        "openai at http://127.0.0.1:9/v1 asked 3 requests in a row to wait 1 h 0 min, past --patience: "
        "stopped; rerun the same command after that wait (or with a larger --patience) to do the rows left")
    assert long_wait_stop(3, None, where, PATIENCE) == (
        'openai at http://127.0.0.1:9/v1 answered 3 requests in a row with nothing but rate limits (429) '
        'or "overloaded" for all of --patience (10 min): stopped; rerun the same command later (or with '
        'a larger --patience) to do the rows left')
