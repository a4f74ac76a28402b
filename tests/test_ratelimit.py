"""Pacing to a provider's limits, the one retry loop, and stopping when nothing answers.

The pacer's arithmetic is tested through its public methods (``take``, ``wait_time``,
``admitted``, ``refused``, ``released``, ``describe``) on a fake clock, each expected value worked
out by hand from the rules in ``orbench.llm.ratelimit``'s docstring; the behaviour through the
real openai, anthropic and google-genai SDKs talking HTTP to ``tests/fake_ratelimit.py``, a
loopback server that refuses with 429s (with headers, bare, at random, Gemini's way) and answers
"overloaded". No test depends on timing to pass: waits asked of the pacer are checked on the
fake clock, and the end-to-end tests check what a user sees (rows done, 429s counted, exit codes).
"""

import asyncio
import json
import math
import time
from datetime import datetime, timedelta, timezone

import pandas as pd
import pytest
from fake_ratelimit import FakeRateLimited, Shape

from orbench.llm import ratelimit, retry
from orbench.llm.clients import Client, Request
from orbench.llm.errors import FatalProviderError
from orbench.llm.models import parse_model
from orbench.llm.providers.transport import budgets, retry_after, seconds_until
from orbench.llm.ratelimit import Budget, Pacer
from orbench.stages import check_alignment

ALIGN = "alignment_checker/check_alignment.py"
COSTS = ratelimit.request_costs(10, 100)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock():
    return Clock()


def answered(pacer: Pacer, clock: Clock, rtt: float = 0.1, full: bool = True, headers=()):
    """One request sent now and admitted ``rtt`` later."""
    ticket = pacer.take(COSTS, full)
    clock.now += rtt
    pacer.admitted(ticket, headers)
    return ticket


# -- reading what providers say ----------------------------------------------------------------

@pytest.mark.parametrize("text, seconds", [
    ("6m0s", 360.0), ("20ms", 0.02), ("1s", 1.0), ("1.5s", 1.5), ("1m30.5s", 90.5), ("2h", 7200.0),
    ("0.25", 0.25), ("7", 7.0), ("", None), ("soon", None),
])
def test_durations_as_providers_write_them(text, seconds):
    assert seconds_until(text) == seconds


def test_absolute_resets_rfc3339_http_date_and_epoch_seconds():
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    wall = now.timestamp()
    assert seconds_until((now + timedelta(seconds=30)).isoformat().replace("+00:00", "Z"), wall) == 30
    assert seconds_until("Thu, 01 Jan 2026 00:00:12 GMT", wall) == 12
    assert seconds_until(str(wall + 5), wall) == 5
    # OpenRouter's resets: Unix milliseconds; a Retry-After's number stays seconds (RFC 9110)
    assert seconds_until(str(int((wall + 7) * 1000)), wall, unix_ms=True) == 7
    assert seconds_until(str(int((wall + 7) * 1000)), wall) > 1000 * 365 * 86400
    assert seconds_until((now - timedelta(seconds=9)).isoformat(), wall) == 0.0  # past: no wait


def test_the_wait_a_reply_asks_for():
    assert retry_after({"retry-after-ms": "1500", "retry-after": "2"}) == 1.5  # OpenAI's, finer
    assert retry_after({"retry-after": "3"}) == 3.0 and retry_after({}) is None
    assert retry_after({"retry-after": "Thu, 01 Jan 2099 00:00:00 GMT"}) > 365 * 86400


def test_budgets_from_every_header_family():
    openai = {"x-ratelimit-limit-requests": "500", "x-ratelimit-remaining-requests": "499",
              "x-ratelimit-reset-requests": "120ms", "x-ratelimit-remaining-tokens": "1000",
              "x-ratelimit-reset-tokens": "6m0s", "retry-after": "1"}
    assert budgets(openai) == [Budget("requests", 499.0, 0.12, 500.0), Budget("tokens", 1000.0, 360.0)]
    anthropic = {"anthropic-ratelimit-input-tokens-remaining": "40",
                 "anthropic-ratelimit-input-tokens-reset": "Thu, 01 Jan 2099 00:00:00 GMT",
                 "anthropic-ratelimit-requests-remaining": "3"}
    [(unit, remaining, reset, limit, _), requests] = budgets(anthropic)
    assert (unit, remaining, limit) == ("input-tokens", 40.0, None) and reset > 365 * 86400
    assert requests == Budget("requests", 3.0, None)
    assert budgets({"anthropic-ratelimit-requests-limit": "50", "anthropic-ratelimit-requests-remaining": "0",
                    "anthropic-ratelimit-requests-reset": "Thu, 01 Jan 2099 00:00:00 GMT"})[0].limit == 50.0
    # the IETF draft's reset is a fixed window's: its limit is not read as a refill rate
    assert budgets({"RateLimit": "limit=100, remaining=0, reset=5"}) == [Budget("requests", 0.0, 5.0)]
    assert budgets({"x-ratelimit-remaining-tokens-per-day": "9"}) == [Budget("tokens", 9.0, None, None, "tokens-per-day")]
    # a gateway's windows of one unit (Kong's): each keeps its name, so each binds
    assert budgets({"X-RateLimit-Limit-Minute": "20", "X-RateLimit-Remaining-Minute": "0",
                    "X-RateLimit-Limit-Day": "1000", "X-RateLimit-Remaining-Day": "900",
                    "RateLimit-Remaining": "0", "RateLimit-Reset": "30"}) == [
        Budget("requests", 0.0, None, 20.0, "minute"), Budget("requests", 900.0, None, 1000.0, "day"),
        Budget("requests", 0.0, 30.0)]
    # OpenRouter's: one budget of requests, its reset a Unix time in milliseconds (not 55,000
    # years away, which rule 5's spread would have taken as --patience to spread 150 requests over)
    [openrouter] = budgets({"X-RateLimit-Limit": "200", "X-RateLimit-Remaining": "150",
                            "X-RateLimit-Reset": str(int((time.time() + 9) * 1000))})
    assert openrouter[:2] == ("requests", 150.0) and openrouter.limit == 200.0
    assert 7 < openrouter.reset <= 9
    assert budgets({"x-ratelimit-remaining-requests": "lots"}) == []
    # Azure's "not reported" (its Responses API): no budget, not one spent
    assert budgets({"x-ratelimit-limit-tokens": "-1", "x-ratelimit-remaining-tokens": "-1",
                    "x-ratelimit-reset-tokens": "0"}) == []


def test_a_request_costs_what_providers_count_before_generation():
    assert ratelimit.request_costs(30, 200) == {"requests": 1.0, "tokens": 230.0,
                                               "input-tokens": 30.0, "output-tokens": 200.0}


# -- the pacer, on a fake clock ------------------------------------------------------------------

def test_slow_start_grows_by_one_per_answer_of_a_full_window_up_to_concurrency(clock):
    pacer = Pacer(clock=clock, ceiling=12)
    assert pacer.window == 10
    tickets = [pacer.take(COSTS) for _ in range(10)]
    assert pacer.wait_time() == math.inf  # the window is full until one leaves
    clock.now += 0.1
    pacer.admitted(tickets[0])
    assert pacer.window == 10  # it did not find the window full: the window is not tested
    for ticket in tickets[1:]:
        pacer.released(ticket)
    for _ in range(5):
        answered(pacer, clock)
    assert pacer.window == 12  # 10, then one per answer, never past the ceiling


def test_once_a_429_came_requests_go_out_spread_over_the_round_trip(clock):
    pacer = Pacer(clock=clock)
    answered(pacer, clock, rtt=0.5)  # a window of 11
    pacer.take(COSTS)
    assert pacer.wait_time() == 0.0  # no 429 yet: no limit known, no spreading
    pacer.refused(pacer.take(COSTS), wait=1.0)  # one 429: one request off, to 10
    pacer.take(COSTS)
    # srtt 0.5 s: the next no sooner than 0.5 / (1.25 x 10) s
    assert pacer.wait_time() == pytest.approx(0.5 / (1.25 * 10))


def test_a_429_cuts_the_window_once_a_round_trip(clock):
    pacer = Pacer(clock=clock, ceiling=10)
    for _ in range(6):
        answered(pacer, clock, rtt=0.1)  # a window of 10, --concurrency's
    assert pacer.window == 10
    first, second = pacer.take(COSTS), pacer.take(COSTS)
    pacer.refused(first, wait=1.0)
    assert pacer.window == pytest.approx(9.0)
    pacer.refused(second, wait=1.0)  # sent with the first: the same congestion
    late = pacer.take(COSTS)
    clock.now += 0.05
    pacer.refused(late, wait=1.0)  # sent less than a round trip after it: still the same
    assert pacer.window == pytest.approx(9.0) and pacer.describe()["cuts"] == 1
    clock.now += 0.2
    answered(pacer, clock, rtt=0.1)
    again = pacer.take(COSTS)
    pacer.refused(again, wait=1.0)
    assert pacer.describe()["cuts"] == 2


def test_a_cut_takes_one_request_per_429_since_the_last_cut_and_at_most_0_3(clock):
    pacer = Pacer(clock=clock)
    for _ in range(6):
        answered(pacer, clock, rtt=0.1)  # slow start: a window of 16, srtt 0.1 s
    old = pacer.take(COSTS)
    clock.now += 0.01
    pacer.refused(pacer.take(COSTS), wait=0.1)  # the slow start's end: one 429, to 15
    assert pacer.window == pytest.approx(15.0)
    clock.now += 0.2
    pacer.refused(old, wait=0.1)  # in flight at that cut, which did not count it: one off at once
    assert pacer.window == pytest.approx(14.0) and pacer.describe()["cuts"] == 1
    pacer.refused(pacer.take(COSTS), wait=0.1)  # one 429 since the cut: one request off
    assert pacer.window == pytest.approx(13.0)
    clock.now += 0.05
    for ticket in [pacer.take(COSTS) for _ in range(4)]:
        pacer.refused(ticket, wait=0.1)  # within a round trip of the cut: counted, no cut
    assert pacer.window == pytest.approx(13.0)
    clock.now += 0.1
    pacer.refused(pacer.take(COSTS), wait=0.1)  # the fifth since the cut: five off would be
    assert pacer.window == pytest.approx(13 * 0.7) and pacer.describe()["cuts"] == 3  # < 0.7
    clock.now += 0.15
    pacer.refused(pacer.take(COSTS), wait=0.1)  # one since the cut: one off
    assert pacer.window == pytest.approx(13 * 0.7 - 1)


def test_429s_of_requests_in_flight_at_a_cut_take_one_each_off_not_below_one(clock):
    """The slow start's last round trip overshot: the cut counts the one 429 it heard, and each
    request refused after it comes off at once (the window falls to what the limit let through,
    with no deeper cut at the slow start's end), never below one."""
    pacer = Pacer(clock=clock, ceiling=64)
    for _ in range(22):
        answered(pacer, clock, rtt=0.1)  # a window of 32
    flight = [pacer.take(COSTS) for _ in range(32)]
    clock.now += 0.1
    pacer.refused(flight[0], wait=0.1)  # the slow start's end: one 429, to 31
    assert pacer.window == pytest.approx(31.0)
    for ticket in flight[1:21]:
        pacer.refused(ticket, wait=0.1)
    assert pacer.window == pytest.approx(11.0) and pacer.describe()["cuts"] == 1
    for ticket in flight[21:]:
        pacer.refused(ticket, wait=0.1)
    assert pacer.window == 1.0


def test_a_429_of_a_request_in_flight_at_a_cut_never_raises_the_window(clock):
    """"Not below one" keeps the window where it is when a cut already took it below one: a 429
    takes a request off or leaves the window as it was, never adds one."""
    pacer = Pacer(clock=clock, ceiling=2)
    answered(pacer, clock)  # a round trip of 0.1 s; the window at the ceiling, 2
    first, second = pacer.take(COSTS), pacer.take(COSTS)
    clock.now += 0.1
    pacer.refused(first)  # the cut: 2 x 0.7
    pacer.refused(second)  # in flight at the cut: one off, to 0.4, but not below one
    assert pacer.window == pytest.approx(1.0)
    clock.now += 0.2
    grown = 1.0
    for _ in range(5):
        answered(pacer, clock)  # a round trip after the cut: 1 / (20 x window) each
        grown += 1 / (20 * grown)
    assert pacer.window == pytest.approx(grown) and 1.2 < grown < 1.25
    first, second = pacer.take(COSTS), pacer.take(COSTS)  # two fit in a window over one
    clock.now += 0.1
    pacer.refused(first)  # the cut: x 0.7, below one
    assert pacer.window == pytest.approx(grown * 0.7)
    pacer.refused(second)  # in flight at that cut: below one already, it stays
    assert pacer.window == pytest.approx(grown * 0.7)


def test_429s_at_a_share_that_does_not_fall_keep_cutting_every_round_trip(clock):
    """No state in which 429s stop cutting: a 429 in every round trip cuts every other one (one
    cut a round trip, at most), however long it goes on (the pacer before stopped)."""
    pacer = Pacer(clock=clock)
    for _ in range(6):
        answered(pacer, clock, rtt=0.1)  # a window of 16
    for round_trip in range(30):
        tickets = [pacer.take(COSTS) for _ in range(4)]
        clock.now += 0.1
        pacer.refused(tickets[0], wait=0.1)
        for ticket in tickets[1:]:
            pacer.admitted(ticket)
        # sent 0.01 s after the last answers: the round trip after a cut is that cut's (sent less
        # than a round trip after it), the next cuts again
        assert pacer.describe()["cuts"] == round_trip // 2 + 1
        clock.now += 0.01
    assert pacer.window < 1


def _cut_at_ten(pacer: Pacer, clock: Clock, rtt: float) -> None:
    for _ in range(2):
        answered(pacer, clock, rtt=rtt)  # a window of 10: the pacer's --concurrency
    pacer.refused(pacer.take(COSTS), wait=0.1)  # the slow start's end: one 429, to 9


def test_after_a_cut_the_window_waits_a_round_trip_and_tests_only_a_full_window(clock):
    pacer = Pacer(clock=clock, ceiling=10)
    _cut_at_ten(pacer, clock, rtt=0.1)
    assert pacer.window == pytest.approx(9.0)
    for _ in range(2):
        answered(pacer, clock, rtt=0.03)  # sent within a round trip of the cut: no growth
    assert pacer.window == pytest.approx(9.0)
    clock.now += 0.1
    answered(pacer, clock, rtt=0.1)
    assert pacer.window == pytest.approx(9 + 1 / 180)  # 1 / (20 x 9)
    answered(pacer, clock, rtt=0.1, full=False)  # the window was not full: not tested
    assert pacer.window == pytest.approx(9 + 1 / 180)


@pytest.mark.parametrize("slow_start, start, answers", [(0, 9, 190), (30, 39, 790)])
def test_the_window_gains_one_request_per_20_round_trips_at_any_size(clock, slow_start, start,
                                                                      answers):
    """Additive in round trips: from 9, twenty round trips of 9-10 answers (about 190); from 39,
    twenty of 39-40 (about 790). Worked by hand: each answer adds 1 / (20 w), so w^2 grows by
    1/10 an answer, and 9^2 -> 10^2 takes 190 answers, 39^2 -> 40^2 790."""
    pacer = Pacer(clock=clock, ceiling=64)
    for _ in range(slow_start):  # slow start: 10 + 1 an answer, to 10 or 40
        answered(pacer, clock, rtt=0.1)
    pacer.refused(pacer.take(COSTS), wait=0.1)  # the slow start's end: one 429, to 9 or 39
    assert pacer.window == pytest.approx(start)
    clock.now += 0.2
    before = pacer.counts.admitted
    while pacer.window < start + 1:
        answered(pacer, clock, rtt=0.1)
    assert abs(pacer.counts.admitted - before - answers) <= 2


def test_the_window_moves_the_same_at_any_round_trip(clock):
    """Growth counts answers, not seconds: replies of 50 ms and of 2 s give the same windows."""
    windows = []
    for rtt in (0.05, 2.0):
        pacer = Pacer(clock=clock, ceiling=10)
        _cut_at_ten(pacer, clock, rtt=rtt)
        clock.now += 2 * rtt
        seen = []
        for round_trip in range(40):
            for _ in range(int(pacer.window)):
                answered(pacer, clock, rtt=rtt)
            if round_trip % 10 == 9:
                pacer.refused(pacer.take(COSTS), wait=0.1)
                clock.now += 2 * rtt
            seen.append(round(pacer.window, 9))
        windows.append(seen)
    assert windows[0] == windows[1] and windows[0][-1] != 7.0


def test_two_clients_on_one_limit_end_near_equal_shares(clock):
    """Two pacers, one limit of 20 requests a round trip: their sends of a round trip arrive
    interleaved, the first 20 are admitted and the rest refused. The first starts alone with a
    window of 24; a minute on, their mean windows are within 30 % of each other and together
    near the limit."""
    first, second = Pacer(clock=clock, ceiling=64), Pacer(clock=clock, ceiling=64)
    for _ in range(20):
        answered(first, clock, rtt=0.1)
    windows = []
    while clock.now < 170:
        mine = [[(p, p.take(COSTS, True)) for _ in range(int(max(1, p.window)))]
                for p in (first, second)]
        arrived = [sent for pair in zip(*mine) for sent in pair]
        arrived += mine[0][len(mine[1]):] + mine[1][len(mine[0]):]
        clock.now += 0.1
        for i, (pacer, ticket) in enumerate(arrived):
            pacer.admitted(ticket) if i < 20 else pacer.refused(ticket, 0.1)
        windows.append((first.window, second.window))
    late = windows[-300:]
    mean = [sum(w[k] for w in late) / len(late) for k in (0, 1)]
    assert max(mean) / min(mean) < 1.3 and 14 < sum(mean) < 26, mean


def test_429s_that_never_stop_space_the_sends_no_more_than_patience(clock):
    pacer = Pacer(clock=clock, longest_hold=30.0)
    answered(pacer, clock, rtt=1.0)
    for _ in range(3000):  # every one refused, each sent when the pacer lets it: the window
        clock.now += pacer.wait_time() + 2.0  # ends near the smallest float
        pacer.refused(pacer.take(COSTS), wait=None)
    assert pacer.window < 1e-300
    assert pacer.wait_time() == pytest.approx(30.0)  # the next no later than --patience after


def test_a_zero_round_trip_is_safe(clock):
    """An answer on the same clock tick as its send: a round trip of 0, and the 429 after it cuts
    (the pacer before divided by it); sends are not spread, the window still works."""
    pacer = Pacer(clock=clock)
    for _ in range(3):
        answered(pacer, clock, rtt=0.0)
    assert pacer.srtt == 0.0
    pacer.refused(pacer.take(COSTS), wait=None)
    pacer.refused(pacer.take(COSTS), wait=0.0)
    assert pacer.describe()["cuts"] == 2 and pacer.wait_time() == 0.0
    answered(pacer, clock, rtt=0.0)
    assert pacer.window > 0 and math.isfinite(pacer.window)


@pytest.mark.parametrize("order", [1, -1])
def test_every_budget_of_one_unit_binds_whatever_the_headers_order(clock, order):
    """A minute's budget spent and a day's with plenty left, both of requests: the minute's holds
    the sends until its reset, whichever the reply names last (one budget a unit kept only the
    last: the day's, which holds nothing)."""
    pacer = Pacer(clock=clock)
    ticket = pacer.take(COSTS)
    clock.now += 0.1
    budgets_seen = [Budget("requests", 0.0, 5.0, None, "minute"), Budget("requests", 900.0, 3600.0, None, "day")]
    pacer.admitted(ticket, budgets_seen[::order])
    assert pacer.wait_time() == pytest.approx(4.9)  # whole 5 s after its request went


def test_a_budget_the_headers_show_spent_holds_every_send_until_its_reset(clock):
    """A budget whose size is not said comes back whole at its reset, counted from when its
    request went (the server counts a request when it admits it)."""
    pacer = Pacer(clock=clock)
    first = pacer.take(COSTS)
    pacer.take(COSTS)  # sent after it: not in the count the reply reports
    clock.now += 0.1
    pacer.admitted(first, [Budget("requests", 1.0, 2.0)])  # 1 left: the one sent since takes it
    assert pacer.wait_time() == pytest.approx(1.9)
    clock.now += 1.9
    assert pacer.wait_time() == pytest.approx(0.0)
    tokens = pacer.take(COSTS)
    clock.now += 0.1
    pacer.admitted(tokens, [Budget("tokens", 50.0, 6.0)])  # fewer tokens left than a request costs
    assert pacer.wait_time() == pytest.approx(5.9)
    assert pacer.describe()["holds"] == 2


def test_a_budget_whose_size_is_said_refills_continuously_and_paces_the_sends(clock):
    """OpenAI's and Anthropic's budgets are token buckets: 0 of 60 left, whole in 60 s, is one
    request a second, not one wait of 60 s and then a burst."""
    pacer = Pacer(clock=clock)
    ticket = pacer.take(COSTS)
    clock.now += 0.25
    pacer.admitted(ticket, [Budget("requests", 0.0, 60.0, 60.0)])
    assert pacer.wait_time() == pytest.approx(1.0)  # one request's refill, from the reply
    clock.now += 1.0
    pacer.take(COSTS)
    assert pacer.wait_time() == pytest.approx(1.0)  # the next one's
    clock.now += 10.0  # ten more refilled, none sent: they may go at once (as the window allows)
    pacer.take(COSTS)
    assert pacer.wait_time() == 0.0 and pacer.describe()["holds"] == 1


def test_what_a_budget_has_left_is_spread_over_its_reset(clock):
    """10 requests left and the budget whole again in 5 s: a request every half second, not ten
    at once and then a wait. Each budget spaces the sends by its own units: 4,400 tokens left
    over 2 s space requests of 110 tokens 0.05 s apart, so the requests' budget decides."""
    pacer = Pacer(clock=clock)
    ticket = pacer.take(COSTS)
    clock.now += 0.1
    pacer.admitted(ticket, [Budget("requests", 10.0, 5.0, 20.0),
                            Budget("tokens", 4400.0, 2.0, 10000.0)])
    pacer.take(COSTS)
    assert pacer.wait_time() == pytest.approx(0.5)
    clock.now += 0.5
    pacer.take(COSTS)
    assert pacer.wait_time() == pytest.approx(0.5)
    ticket = pacer.take(COSTS)  # a reply with more left spaces less: 40 left over 5 s
    clock.now += 0.1
    pacer.admitted(ticket, [Budget("requests", 40.0, 5.0, 60.0)])
    clock.now += 1.0
    pacer.take(COSTS)
    assert pacer.wait_time() == pytest.approx(5.0 / 40)


def test_a_budget_whole_only_after_patience_is_spread_over_patience(clock):
    """100 requests left of a day's budget, whole in 8 hours: spread over --patience (600 s), a
    request every 6 s, not one every 288 s; the budget's own refill (14,400 a day, one every 6 s)
    would allow as much."""
    pacer = Pacer(clock=clock, longest_hold=600.0)
    ticket = pacer.take(COSTS)
    clock.now += 0.1
    pacer.admitted(ticket, [Budget("requests", 100.0, 8 * 3600.0, 14400.0)])
    pacer.take(COSTS)
    assert pacer.wait_time() == pytest.approx(6.0)


def _shared_bucket(pacers, clock, limit: float, per_second: float, seconds: float,
                   latency: float = 0.5) -> tuple[list[int], int]:
    """Backlogged pacers on one token bucket (``limit`` requests, refilled ``per_second``) whose
    replies report what is left and the seconds until it is whole, OpenAI's way: each pacer sends
    whenever it lets a request go, each answer or 429 comes ``latency`` later. The answers of
    each, and the 429s of all."""
    level, at, pending, answers, refused = limit, clock.now, [], [0] * len(pacers), 0
    end = clock.now + seconds
    while clock.now < end:
        for i, pacer in enumerate(pacers):
            while pacer.wait_time() == 0.0:
                ticket = pacer.take(COSTS, True)
                level, at = min(limit, level + per_second * (clock.now - at)), clock.now
                ok = level >= 1
                level -= ok
                said = [Budget("requests", math.floor(level), (limit - level) / per_second, limit)]
                pending.append((clock.now + latency, i, ticket, ok, said))
        clock.now = round(clock.now + 0.01, 6)
        for item in [p for p in pending if p[0] <= clock.now]:
            pending.remove(item)
            _, i, ticket, ok, said = item
            if ok:
                pacers[i].admitted(ticket, said)
                answers[i] += 1
            else:
                pacers[i].refused(ticket, None, said)
                refused += 1
    return answers, refused


@pytest.mark.parametrize("runs", [1, 2, 4])
def test_runs_on_one_budget_its_headers_report_share_it_with_no_429(clock, runs):
    """Each reply tells every run on the key the same two numbers, what is left and when the
    budget is whole, so all spread it alike: over ten minutes of a 60-a-minute bucket none gets
    a 429, they get the same share within 5 %, and together nearly all of it (a run alone too).
    Counting the whole refill as its own, as each did before, two runs here got 256 and 403
    answers with 167 429s, four 73-275 with 396."""
    pacers = [Pacer(clock=clock, ceiling=32) for _ in range(runs)]
    answers, refused = _shared_bucket(pacers, clock, limit=60, per_second=1.0, seconds=600)
    assert refused == 0
    assert max(answers) / min(answers) < 1.05
    assert sum(answers) >= 0.9 * 600, answers


def test_a_reset_that_stands_still_as_requests_go_is_a_fixed_window_back_whole(clock):
    """Two replies naming the same reset moment while units went: a fixed window (a gateway's
    count per minute), whose budget comes back whole at the reset, not a little at a time."""
    pacer = Pacer(clock=clock)
    first, second = pacer.take(COSTS), pacer.take(COSTS)
    clock.now += 0.5
    pacer.admitted(first, [Budget("requests", 1.0, 30.0, 100.0)])
    pacer.admitted(second, [Budget("requests", 0.0, 30.0, 100.0)])  # sent with it: same moment
    assert pacer.wait_time() == pytest.approx(29.5)


def test_a_budget_whose_reset_is_not_said_is_back_when_a_429_says(clock):
    """Azure's headers say what is left, not when it comes back: a 429 over a budget spent
    holds every send for the wait it asks; one over a budget with room holds nothing."""
    pacer = Pacer(clock=clock)
    answered(pacer, clock)
    refused = pacer.take(COSTS)
    clock.now += 0.5  # the 429 took half a second: its wait counts from then
    pacer.refused(refused, wait=5.0, budgets_seen=[Budget("requests", 0.0, None)])
    assert pacer.wait_time() == pytest.approx(5.0) and pacer.describe()["holds"] == 1
    clock.now += 5.0
    pacer.refused(pacer.take(COSTS), wait=5.0, budgets_seen=[Budget("requests", 9.0, None)])
    assert pacer.held(clock.now) == 0.0


def test_azure_style_headers_hold_the_sends_through_the_real_sdk(env, limited):
    """Fixed windows of 8 requests a half second that report only what is left, and a 429's
    retry-after: the real SDK's 429s carry both to the pacer, which holds until the window
    turns, and every request is answered."""
    server = limited(rpm=8, window=0.5, fixed=True, remaining_only=True, style="openai",
                     latency=0.01)
    client = Client(cache=None, concurrency=16, max_retries=0)

    async def go():
        try:
            return await asyncio.gather(*(client.complete(Request.user(
                parse_model("openai/gpt-test"), f"q{i}", max_tokens=5)) for i in range(20)))
        finally:
            await client.close()

    answers = asyncio.run(go())
    assert len(answers) == 20 and server.ok == 20
    paced = client.rate_limits.describe()[0]
    assert paced["holds"] >= 1 and paced["responses_429"] == server.rejected >= 1


def test_a_hold_longer_than_patience_is_not_held(clock):
    """A reset years away: the requests go, and their 429s' asked wait gives them up at once
    (the retry rule), rather than every send waiting out --patience first."""
    pacer = Pacer(clock=clock, longest_hold=30.0)
    ticket = pacer.take(COSTS)
    clock.now += 0.1
    pacer.admitted(ticket, [Budget("requests", 0.0, 1e8)])
    assert pacer.wait_time() == 0.0
    pacer.admitted(pacer.take(COSTS), [Budget("requests", 0.0, 30.0)])  # within it: held
    assert pacer.wait_time() == pytest.approx(30.0)


def test_at_a_window_of_one_a_429_with_nothing_admitted_holds_sending_as_it_asks(clock):
    pacer = Pacer(clock=clock)
    for _ in range(12):  # nothing admitted, no round trip known: each 429 sent after a cut cuts
        pacer.refused(pacer.take(COSTS), wait=0.2)
    # one off a 429 from 10 down to 3, then 0.7 a 429 (one would be a third or more)
    assert pacer.window == pytest.approx(3 * 0.7 ** 5) and pacer.window < 1
    assert pacer.wait_time() == pytest.approx(0.2)


def test_overload_and_errors_leave_the_window_as_it_was(clock):
    pacer = Pacer(clock=clock)
    answered(pacer, clock)
    before = pacer.window
    for _ in range(5):
        pacer.released(pacer.take(COSTS))
    assert pacer.window == before and pacer.describe()["cuts"] == 0


def test_rpm_is_a_token_bucket_of_one(clock):
    pacer = Pacer(clock=clock, rpm=120)
    pacer.take(COSTS)
    assert pacer.wait_time() == pytest.approx(0.5)
    clock.now += 0.5
    assert pacer.wait_time() == 0.0


# -- through the real SDKs -----------------------------------------------------------------------

@pytest.fixture
def limited(env, monkeypatch):
    """A limiting fake factory (``Shape`` fields); every provider pointed at it; backoffs short."""
    monkeypatch.setattr(retry, "BACKOFF_FIRST", 0.01)
    monkeypatch.setattr(retry, "BACKOFF_LONGEST", 0.05)
    servers = []

    def start(**fields) -> FakeRateLimited:
        server = FakeRateLimited(Shape(**fields)).start()
        servers.append(server)
        urls = {"OPENAI_BASE_URL": server.url + "/v1", "ANTHROPIC_BASE_URL": server.url,
                "GEMINI_BASE_URL": server.url + "/"}
        for name, url in urls.items():
            monkeypatch.setenv(name, url)
        env.update(urls)
        return server

    yield start
    for server in servers:
        server.stop()


def _input(tmp_path, n: int):
    prompts = [f"Row {i:04d}: how do smoke detectors work?" for i in range(n)]
    pd.DataFrame({"prompt": prompts, "category": "harmful"}).to_csv(tmp_path / "in.csv", index=False)
    return prompts


def prompts_heads(prompts):
    return [p[:8] for p in prompts]


def _run(script, env, model: str, *extra: str):
    return script(ALIGN, "--model", model, "--input_file", "in.csv", "--output_file", "out.csv",
                  "--no_cache", *extra, env=env)


def _finished(proc, tmp_path, prompts) -> tuple[dict, dict]:
    """The run's meta file and its one pacer, after checking every row was answered."""
    assert proc.returncode == 0, proc.stderr
    out = pd.read_csv(tmp_path / "out.csv", dtype=str, keep_default_na=False)
    assert (out.error == "").all() and list(out.response) == [f"Fake answer to: {p}" for p in prompts]
    meta = json.loads((tmp_path / "out.csv.meta.json").read_text())
    [paced] = meta["rate_limits"]
    assert paced["responses_429"] == meta["requests"]["rate_limit_429s"]
    return meta, paced


@pytest.mark.parametrize("model, shape", [
    ("openai/gpt-test", {"rpm": 10, "window": 0.25, "style": "openai"}),
    ("anthropic/claude-test", {"tpm": 1000, "window": 0.25, "style": "anthropic"}),  # 100-token requests
    ("gemini/gemini-test", {"rpm": 10, "window": 0.25, "fixed": True, "style": "gemini"}),  # RetryInfo
    ("openai/gpt-test", {"rpm": 10, "window": 0.25, "style": "none"}),  # bare 429s
])
def test_a_limited_run_finishes_with_every_row_and_counts_its_429s(script, env, limited, tmp_path,
                                                                    model, shape):
    server = limited(latency=0.02, **shape)
    prompts = _input(tmp_path, 30)
    # --max_retries 0: a 429 waited out counts against --patience only, never against the retries
    proc = _run(script, env, model, "--concurrency", "16", "--max_retries", "0", "--max_tokens", "100")
    meta, paced = _finished(proc, tmp_path, prompts)
    assert paced["responses_429"] == server.rejected and server.ok == 30
    assert paced["model"] == model
    assert meta["requests"]["waits_past_patience"] == 0 and meta["requests"]["overloaded_answers"] == 0
    assert "error:" not in proc.stderr


def test_random_429s_do_not_stall_the_run(script, env, limited, tmp_path):
    """One answer in four a 429 asking for up to 0.05 s, whatever the rate: every row is done,
    and the 429s are waited out, not answered by starving the run."""
    server = limited(random_429=0.25, random_retry=0.05, latency=0.01, seed=3)
    prompts = _input(tmp_path, 120)
    proc = _run(script, env, "openai/gpt-test", "--concurrency", "16", "--max_retries", "0")
    meta, paced = _finished(proc, tmp_path, prompts)
    assert paced["responses_429"] == server.rejected > 10 and server.ok == 120
    assert f"{server.rejected} 429 answers waited out" in proc.stderr


def test_a_limit_with_random_429s_on_top_finishes_every_row(script, env, limited, tmp_path):
    """A 10-request limit a quarter second, and 10 % of all requests refused at random on top:
    every row is done, no 429 becomes an error row, each is counted once."""
    server = limited(rpm=10, window=0.25, style="openai", random_429=0.1, random_retry=0.05,
                     latency=0.01, seed=5)
    prompts = _input(tmp_path, 60)
    proc = _run(script, env, "openai/gpt-test", "--concurrency", "16", "--max_retries", "0")
    meta, paced = _finished(proc, tmp_path, prompts)
    assert paced["responses_429"] == server.rejected > 0 and server.ok == 60
    assert paced["following"] == "429s" and paced["cuts"] >= 1


def test_openai_headers_that_say_a_budget_spent_hold_the_sends_through_the_real_sdk(
        script, env, limited, tmp_path):
    """A bucket of 8 requests a half second with OpenAI's headers (limit, remaining, reset): the
    real SDK's replies carry them to the pacer, which holds sends while the budget is spent
    (holds counted in the meta file) and answers every row."""
    server = limited(rpm=8, window=0.5, style="openai", latency=0.01)
    prompts = _input(tmp_path, 40)
    proc = _run(script, env, "openai/gpt-test", "--concurrency", "16", "--max_retries", "0")
    meta, paced = _finished(proc, tmp_path, prompts)
    assert server.ok == 40 and paced["holds"] >= 1 and paced["seconds_held"] > 0


def test_openrouter_headers_pace_the_sends_by_their_reset_through_the_real_sdk(
        script, env, limited, tmp_path):
    """A bucket of 20 requests a half second behind OpenRouter's headers (``X-RateLimit-Reset`` a
    Unix time in milliseconds): the sends are spread over the reset it names, so 40 rows wait
    well under a second in all (read as Unix seconds, the reset was --patience away: 30 / 19 s
    between sends, a minute for the run)."""
    server = limited(rpm=20, window=0.5, style="openrouter", latency=0.01)
    prompts = _input(tmp_path, 40)
    proc = _run(script, env, "openai/gpt-test", "--concurrency", "16", "--max_retries", "0",
                "--patience", "30")
    meta, paced = _finished(proc, tmp_path, prompts)
    assert server.ok == 40 and paced["seconds_held"] < 5


def test_two_clients_sharing_one_limit_both_finish_every_request(env, limited):
    """Two clients (two runs' pacers) on one key of 10 requests a quarter second: each gets all
    its answers; the server's 429s are the two pacers' together, none lost or made an error."""
    server = limited(rpm=10, window=0.25, style="openai", latency=0.01)
    clients = [Client(cache=None, concurrency=16, max_retries=0) for _ in range(2)]

    async def one(client, name):
        try:
            return await asyncio.gather(*(client.complete(
                Request.user(parse_model("openai/gpt-test"), f"{name} q{i}", max_tokens=5))
                for i in range(40)))
        finally:
            await client.close()

    async def both():
        return await asyncio.gather(one(clients[0], "a"), one(clients[1], "b"))

    answers = asyncio.run(both())
    assert [len(a) for a in answers] == [40, 40] and server.ok == 80
    assert all(x.text.startswith("Fake answer") for a in answers for x in a)
    assert sum(c.rate_limits.responses_429 for c in clients) == server.rejected


def test_a_request_waiting_out_a_429_gives_its_row_place_to_the_next(script, env, limited, tmp_path):
    """Two rows in flight (--concurrency 2); the first request to arrive is refused and asked to
    wait about a second: the other rows are answered meanwhile, not after it."""
    server = limited(refuse_first=1, random_retry=1.0, seed=2)  # seed 2: a wait of 0.96 s
    prompts = _input(tmp_path, 4)
    proc = _run(script, env, "openai/gpt-test", "--concurrency", "2", "--max_retries", "0")
    _finished(proc, tmp_path, prompts)
    refused = server.order[0]
    assert len(server.order) == 5 and server.order[-1] == refused, server.order
    assert sorted(server.order[1:4]) == sorted(set(prompts_heads(prompts)) - {refused}), server.order


def test_overload_is_waited_out_and_counted_apart_from_429s(script, env, limited, tmp_path):
    server = limited(overload_every=3, style="anthropic")
    prompts = _input(tmp_path, 15)
    # Overloads after the first answer are waited out, not counted as retries. One that the client
    # reads before any answer (replies of concurrent requests may come in any order) is the
    # "never answered" case, which counts: --max_retries 2 leaves room for that race, no more.
    proc = _run(script, env, "anthropic/claude-test", "--concurrency", "8", "--max_retries", "2")
    meta, paced = _finished(proc, tmp_path, prompts)
    assert meta["requests"]["overloaded_answers"] == server.overloaded >= 5
    assert paced["responses_429"] == 0 and paced["cuts"] == 0
    assert f"({server.overloaded} overload answers waited out" in proc.stderr


def test_a_wait_asked_past_patience_fails_the_row_at_once_naming_it(script, env, limited, tmp_path):
    server = limited(window=100.0, rpm=2, style="openai")  # two requests a 100 s
    _input(tmp_path, 4)
    proc = _run(script, env, "openai/gpt-test", "--max_retries", "3", "--patience", "20")
    assert proc.returncode == 1, proc.stderr
    out = pd.read_csv(tmp_path / "out.csv", dtype=str, keep_default_na=False)
    failed = out.error[out.error != ""]
    assert len(failed) == 2 and failed.str.contains("HTTP 429 from openai").all()
    # asked once each, not retried on a backoff: the server asked for about 50 s
    assert failed.str.contains(r"the server asked to wait \d+ s, more than the 20 s left of --patience").all()
    assert server.ok == 2 and server.rejected == 2
    meta = json.loads((tmp_path / "out.csv.meta.json").read_text())
    assert meta["requests"]["waits_past_patience"] == 2


@pytest.mark.parametrize("style, patience, stop", [
    # a daily quota: each 429 asks to wait past --patience
    ("openai", "20", "asked 3 requests in a row to wait 1 h 0 min, past --patience: stopped; rerun the same command"),
    # a quota spent behind bare 429s: no wait asked, each request spends all of --patience
    ("none", "1", 'answered 3 requests in a row with nothing but rate limits (429) or "overloaded" for all of '
                  "--patience (1 s): stopped; rerun the same command"),
])
def test_rows_that_keep_giving_up_on_a_quota_stop_the_run_naming_why(script, env, limited, tmp_path, style,
                                                                    patience, stop):
    """Two requests, then 429s for an hour: three requests in a row that give up, with no answer
    between, stop the run (exit 1, one line naming the wait or the patience spent), the two rows
    done kept for a rerun, not 80,000 rows failed one by one."""
    server = limited(window=3600.0, rpm=2, fixed=True, style=style)
    _input(tmp_path, 40)
    proc = _run(script, env, "openai/gpt-test", "--concurrency", "1", "--patience", patience)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"stopped: openai at {server.url}/v1 {stop}"), lines
    assert server.ok == 2
    if style == "openai":  # asked once each, not retried: the wait asked does not fit
        assert server.rejected == 3
    progress = [json.loads(line) for line in (tmp_path / "out.csv.progress.jsonl").read_text().splitlines()[1:]]
    assert [entry["error"] is None for entry in progress] == [True, True, False, False]


def test_an_address_that_only_answers_overloaded_stops_the_run(script, env, limited, tmp_path):
    server = limited(overload_only=True)
    _input(tmp_path, 50)
    proc = _run(script, env, "openai/gpt-test", "--max_retries", "2")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"error: openai at {server.url}/v1 has answered nothing but \"overloaded\" since the run started"), lines
    assert "HTTP 503" in lines[0] and "has a model loaded" in lines[0]


def test_rpm_spaces_the_requests(env, limited):
    server = limited()  # no limit of its own
    client = Client(cache=None, rpm=600)  # one request every 0.1 s

    async def go():
        try:
            return await asyncio.gather(*(client.complete(Request.user(parse_model("openai/gpt-test"), f"q{i}"))
                                          for i in range(5)))
        finally:
            await client.close()

    asyncio.run(go())
    # 4 gaps of 0.1 s as sent; the server sees them less what connecting took the first ones
    assert server.admitted[-1] - server.admitted[0] >= 0.25
    assert client.rate_limits.describe()[0]["rpm_cap"] == 600


def test_each_model_has_its_own_pacer(env, limited):
    limited(window=1.0, rpm=40, style="openai")
    client = Client(cache=None, concurrency=8, max_retries=0)
    one, other = parse_model("openai/a"), parse_model("anthropic/b")

    async def go():
        try:
            return await asyncio.gather(*(client.complete(Request.user(m, f"q{i}", max_tokens=5))
                                          for i in range(6) for m in (one, other)))
        finally:
            await client.close()

    answers = asyncio.run(go())
    assert len(answers) == 12 and all(a.text.startswith("Fake answer") for a in answers)
    assert sorted(p["model"] for p in client.rate_limits.describe()) == ["anthropic/b", "openai/a"]



def test_a_closed_port_stops_the_run_at_once_keeping_finished_rows(script, env, fake, tmp_path, closed_port):
    _input(tmp_path, 200)
    first = _run(script, env, "openai/gpt-test", "--limit", "5")
    assert first.returncode == 0 and fake.count() == 5
    dead = f"http://127.0.0.1:{closed_port()}/v1"
    proc = _run(script, {**env, "OPENAI_BASE_URL": dead}, "openai/gpt-test")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: cannot connect to openai at {dead}"), lines
    assert "check the address" in lines[0]
    progress = (tmp_path / "out.csv.progress.jsonl").read_text().splitlines()
    assert sum(1 for line in progress if json.loads(line).get("error", "") is None) == 5  # after the settings line
    rerun = _run(script, env, "openai/gpt-test")  # the server is back: only the rest is asked
    assert rerun.returncode == 0 and fake.count() == 200


def test_a_404_from_a_base_url_without_v1_says_so(script, env, fake, tmp_path):
    fake.add_rule(status=404, error_message="Not Found")
    _input(tmp_path, 3)
    proc = _run(script, {**env, "OPENAI_BASE_URL": fake.url}, "openai/gpt-test")
    assert proc.returncode == 2
    assert "has no /v1 in it" in proc.stderr and f"try {fake.url}/v1" in proc.stderr
    with_v1 = _run(script, env, "openai/gpt-test")
    assert with_v1.returncode == 2 and "/v1 in it" not in with_v1.stderr


def test_the_retry_flags_are_documented(capsys):
    with pytest.raises(SystemExit):
        check_alignment.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--patience PATIENCE seconds one request may keep waiting out 429 and 503/529" in text
    assert "429 and overload answers spend --patience instead" in text
    assert "three requests in a row that give up on a wait past it, or spend all of it, stop the run" in text


def test_unreachable_client_raises_fatal_error(env, closed_port):
    client = Client(cache=None, max_retries=5, base_url=f"http://127.0.0.1:{closed_port()}/v1")

    async def go():
        try:
            await client.complete(Request.user(parse_model("openai/gpt-test"), "hi"))
        finally:
            await client.close()

    started = time.monotonic()
    with pytest.raises(FatalProviderError, match="cannot connect to openai"):
        asyncio.run(go())
    assert time.monotonic() - started < 15  # at the first failure, not after the retries
