"""Pacing to a provider's limits, and stopping when nothing answers.

The arithmetic of ``orbench.llm.ratelimit`` (header reading, the headers' budget model, the cut of
the rate by what was admitted and refused, the concurrency cap found from the 429s, the waits)
is tested directly, each expected value worked out by hand; the behaviour through the real
openai, anthropic and google-genai SDKs talking HTTP to ``tests/fake_ratelimit.py``, a loopback
server that enforces limits with 429s (in both providers' header styles, with headers that
mean something else, with none), caps requests in flight and answers "overloaded".
"""

import asyncio
import contextlib
import json
import math
import random
import socket
import time
from datetime import datetime, timedelta, timezone

import fake_ratelimit
import pandas as pd
import pytest
from fake_ratelimit import FakeRateLimited, Shape

from orbench.llm import ratelimit, reachability
from orbench.llm.clients import Client, Request
from orbench.llm.errors import FatalProviderError
from orbench.llm.limit_headers import Bucket, Reading, parse_duration, read_limits
from orbench.llm.models import parse_model
from orbench.llm.ratelimit import Pacer, Sent, Ticket, backoff, cap_from, cut_factor, sent_rate
from orbench.llm.reachability import Reachability
from orbench.stages import check_alignment

ALIGN = "alignment_checker/check_alignment.py"


# -- arithmetic ------------------------------------------------------------------------------

@pytest.mark.parametrize("text, seconds", [
    ("6m0s", 360.0), ("20ms", 0.02), ("1s", 1.0), ("1.5s", 1.5), ("1m30.5s", 90.5), ("2h", 7200.0),
    ("0.25", 0.25), ("7", 7.0), ("", None), ("soon", None),
])
def test_durations_as_providers_write_them(text, seconds):
    assert parse_duration(text) == (pytest.approx(seconds) if seconds is not None else None)


def test_absolute_resets_rfc3339_http_date_and_epoch():
    now = 1_700_000_000.0
    moment = datetime.fromtimestamp(now + 12.5, tz=timezone.utc)
    assert parse_duration(moment.isoformat().replace("+00:00", "Z"), now) == pytest.approx(12.5)
    assert parse_duration("Tue, 14 Nov 2023 22:13:40 GMT", now) == pytest.approx(20.0)
    assert parse_duration(str(now + 3), now) == pytest.approx(3.0)
    assert parse_duration(str(int((now + 4.5) * 1000)), now) == pytest.approx(4.5)  # epoch ms
    past = (datetime.fromtimestamp(now, tz=timezone.utc) - timedelta(seconds=5)).isoformat()
    assert parse_duration(past, now) == 0.0


def test_openai_anthropic_and_other_header_families():
    openai, style = read_limits({"x-ratelimit-limit-requests": "3000", "x-ratelimit-remaining-requests": "2999",
                                 "x-ratelimit-reset-requests": "20ms", "x-ratelimit-limit-tokens": "1200000",
                                 "x-ratelimit-remaining-tokens": "1198970", "x-ratelimit-reset-tokens": "51ms",
                                 "content-type": "application/json"})
    assert style == "openai"
    assert openai == {"requests": Reading(3000, 2999, pytest.approx(0.02)), "tokens": Reading(1200000, 1198970, pytest.approx(0.051))}
    later = datetime.now(timezone.utc) + timedelta(seconds=30)
    anthropic, style = read_limits({
        "anthropic-ratelimit-requests-limit": "50", "anthropic-ratelimit-requests-remaining": "49",
        "anthropic-ratelimit-requests-reset": later.isoformat(),
        "anthropic-ratelimit-input-tokens-limit": "40000", "anthropic-ratelimit-output-tokens-remaining": "7000",
        "anthropic-ratelimit-tokens-limit": "48000"})
    assert style == "anthropic"
    assert set(anthropic) == {"requests", "input-tokens", "output-tokens", "tokens"}
    assert anthropic["requests"].reset == pytest.approx(30, abs=1)
    assert anthropic["input-tokens"].limit == 40000 and anthropic["output-tokens"].remaining == 7000
    bare, style = read_limits({"x-ratelimit-limit": "60", "x-ratelimit-remaining": "59", "x-ratelimit-reset": "1"})
    assert style == "openai" and bare == {"requests": Reading(60, 59, 1.0)}
    ietf, style = read_limits({"RateLimit": "limit=100, remaining=40, reset=6"})
    assert style == "ietf" and ietf == {"requests": Reading(100, 40, 6.0)}
    mistral, _ = read_limits({"x-ratelimit-limit-req-minute": "120", "x-ratelimit-remaining-tokens-minute": "9"})
    assert mistral == {"requests-per-minute": Reading(limit=120), "tokens-per-minute": Reading(remaining=9)}


def test_costs_count_prompt_characters_over_four_plus_max_tokens():
    assert ratelimit.request_costs(401, 1000) == {"requests": 1.0, "tokens": 1101.0, "input-tokens": 101.0,
                                                  "output-tokens": 1000.0}


def test_bucket_rate_from_remaining_and_reset_and_level_net_of_later_sends():
    bucket = Bucket()
    bucket.sent = 10.0  # ten sent so far; the observed request was the 6th
    bucket.observe(Reading(limit=100, remaining=80, reset=2.0), sent_at=5.0, sent_before=6.0, now=5.5)
    assert bucket.rate == pytest.approx(10.0)  # (100 - 80) / 2 s: 10 per second refill
    assert bucket.level == pytest.approx(80 + 10 * 0.5 - 4)  # refilled since sent, minus 4 sent after
    # Room for 81 now (level 81, margin 2): a request of 1 goes at once...
    assert bucket.wait(1, now=5.5, scale=1.0) == 0.0
    bucket.take(81, now=5.5, scale=1.0)
    # ...then the next waits for the refill: (1 + 2 margin - 0) / 10 per second.
    assert bucket.wait(1, now=5.5, scale=1.0) == pytest.approx(0.3)
    assert bucket.wait(1, now=5.5, scale=0.5) == pytest.approx(0.6)


def test_a_budget_with_no_refill_known_is_spent_until_the_time_a_429_names():
    bucket = Bucket()  # remaining alone, as a fixed window's headers may say it
    bucket.observe(Reading(remaining=24), sent_at=0.0, sent_before=0.0, now=0.1)
    assert bucket.wait(1, now=0.1, scale=1.0) == 0.0
    bucket.take(24, now=0.2, scale=1.0)
    assert bucket.wait(1, now=0.3, scale=1.0) == math.inf  # only a 429 can tell when it is back
    bucket.full_at = 2.0                                     # a 429 said: 1.7 s from 0.3
    assert bucket.wait(1, now=0.3, scale=1.0) == pytest.approx(1.7)
    assert bucket.wait(1, now=2.0, scale=1.0) == 0.0 and bucket.level == 24  # full again, as first seen


def test_the_fakes_sliding_log_admits_its_count_in_any_window():
    """The bench's sliding window (a gateway's log of the last ``window`` seconds): 3 a second
    taken at 0.0, 0.2 and 0.4 leave no room until the first ages out at 1.0, then one."""
    log = fake_ratelimit._Sliding(3, 1.0, 1.0, now=0.0)
    for at in (0.0, 0.2, 0.4):
        log.update(at)
        assert log.wait_for(1) == 0.0
        log.take(1)
    log.update(0.5)
    assert log.remaining() == 0 and log.wait_for(1) == pytest.approx(0.5)
    assert log.wait_for(2) == pytest.approx(0.7)  # two must age out: until 1.2
    log.update(1.0)
    assert log.remaining() == 1 and log.wait_for(1) == 0.0 and log.wait_for(2) == pytest.approx(0.2)


class Clock:
    """A clock the test moves (``ratelimit.clock`` and ``reachability.clock`` are patched to it)."""

    def __init__(self, now: float = 100.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = Clock()
    monkeypatch.setattr(ratelimit, "clock", fake)
    monkeypatch.setattr(reachability, "clock", fake)
    return fake


def _ticket(pacer: Pacer, sent_at: float = 0.0, depth: int = 1, tokens: int = 0, **fields) -> Ticket:
    """A ticket as ``Pacer._book`` leaves it: no more in flight while it was out than when sent."""
    fields.setdefault("peak", depth)
    return Ticket(pacer, ratelimit.request_costs(4 * tokens, 0), sent_at=sent_at, depth=depth, **fields)


def _headers(limit: int, remaining: int, reset: str) -> dict:
    return {"x-ratelimit-limit-requests": str(limit), "x-ratelimit-remaining-requests": str(remaining),
            "x-ratelimit-reset-requests": reset}


def test_cut_factor_is_the_admitted_share_between_a_half_and_nine_tenths():
    assert cut_factor(14, 6) == pytest.approx(0.7)   # 14 of 20 admitted
    assert cut_factor(18, 2) == pytest.approx(0.9)   # 18 of 20
    assert cut_factor(99, 1) == pytest.approx(0.9)   # 99 of 100, but at least a tenth off
    assert cut_factor(2, 18) == pytest.approx(0.5)   # 2 of 20, but at most halved
    assert cut_factor(5, 4) is None                   # 9 requests tell too little


def test_sent_rate_from_the_spacing_of_the_last_sends():
    assert sent_rate([0.0, 0.1, 0.2, 0.3, 0.4]) == pytest.approx(10.0)   # 4 gaps in 0.4 s
    assert sent_rate([float(i) for i in range(40)]) == pytest.approx(1.0)  # the last 16 only
    assert sent_rate([0.0] * 10 + [0.5]) == pytest.approx(20.0)  # a burst: 10 gaps in 0.5 s
    assert sent_rate([5.0, 5.0, 5.0]) is None and sent_rate([1.0]) is None


def test_a_concurrency_cap_is_where_the_429s_start():
    def sent(*runs: tuple[int, int, bool]) -> list[Sent]:  # (how many, requests in flight, admitted)
        return [Sent(float(i), depth, ok) for i, (depth, ok) in
                enumerate((depth, ok) for count, depth, ok in runs for _ in range(count))]

    below = (3, 8, True), *((3, depth, True) for depth in range(1, 8))  # admitted with 1 to 8 in flight
    assert cap_from(sent(*below, (3, 9, False), (1, 8, True))) == 8
    assert cap_from(sent(*below, (3, 9, False), (1, 8, True)), latency=2.0) is None  # 3 at once: a burst
    assert cap_from(sent(*below, (3, 9, False))) is None             # nothing admitted at 8 since
    assert cap_from(sent(*below, (2, 9, False), (1, 8, True))) is None  # two 429s: too few
    assert cap_from(sent(*below, (3, 9, False), (3, 10, True), (1, 8, True))) == 8      # 3 of 6 above
    assert cap_from(sent(*below, (3, 9, False), (4, 10, True), (1, 8, True))) is None   # 3 of 7 above
    assert cap_from(sent(*below, (3, 1, False), (1, 8, True))) is None  # refused with 1 in flight
    # A rate limit: 3 of the 33 sent with 3 in flight refused, none of those with 2.
    assert cap_from(sent((30, 3, True), (10, 2, True), (3, 3, False), (5, 2, True))) is None


def test_backoff_doubles_with_jitter_up_to_the_longest():
    random.seed(7)
    waits = [backoff(3, 0.5, 30.0) for _ in range(200)]  # 0.5 x 2^2 = 2 s, +- half
    assert 1.0 <= min(waits) and max(waits) <= 3.0 and max(waits) - min(waits) > 1.0
    assert backoff(40, 0.5, 30.0) == 30.0


def test_a_429_the_headers_foresaw_holds_everyone_as_told_and_cuts_their_refill(clock):
    pacer = Pacer("openai", None, "m")
    pacer.observe(_ticket(pacer, 100.0), 200, _headers(60, 50, "1s"))  # refilling 10 per second
    assert pacer.trusted and pacer.buckets["requests"].rate == pytest.approx(10.0)
    assert pacer.observe(_ticket(pacer, 100.0), 429, {**_headers(60, 0, "6s"), "retry-after-ms": "250"}) \
        == pytest.approx(0.25)
    assert pacer.hold_until == pytest.approx(100.25) and pacer.scale == pytest.approx(0.85)
    # A second event, without a retry header: the refill cut by 15 % again (to 10 x 0.85 x 0.85
    # = 7.225 a second), and the wait one request's worth of it.
    clock.now = 101.0
    assert pacer.observe(_ticket(pacer, 100.9), 429, _headers(60, 0, "6s")) == pytest.approx(1 / 7.225)
    clock.now = 101.1  # sent before that cut: the same event, no further cut
    assert pacer.observe(_ticket(pacer, 100.95), 429, _headers(60, 0, "6s")) == pytest.approx(1 / 7.225)
    assert pacer.signal() == ("headers", "every 429 came with headers showing its budget spent")


def test_a_whole_second_retry_after_holds_no_longer_than_the_budgets_refill_needs(clock):
    """Anthropic's retry-after is whole seconds ("1" where a request's worth is free in 21 ms):
    the hold is the budgets' own wait when that is shorter; a millisecond retry-after stands."""
    pacer = Pacer("anthropic", None, "m")
    pacer.observe(_ticket(pacer, 100.0), 200, _headers(60, 48, "250ms"))  # refilling 48 per second
    assert pacer.buckets["requests"].rate == pytest.approx(48.0)
    told = pacer.observe(_ticket(pacer, 100.0), 429, {**_headers(60, 0, "1250ms"), "retry-after": "1"})
    assert told == pytest.approx(1 / (48 * 0.85)) and pacer.hold_until == pytest.approx(100.0 + told)
    clock.now = 102.0  # remaining-only budgets know no refill: the retry-after is all there is
    other = Pacer("anthropic", None, "m")
    other.observe(_ticket(other, 101.0), 200, {"x-ratelimit-remaining-requests": "5"})
    assert other.observe(_ticket(other, 101.5), 429, {"x-ratelimit-remaining-requests": "0",
                                                       "retry-after": "2"}) == 2.0


def test_a_429_while_the_headers_show_room_ends_their_trust(clock):
    pacer = Pacer("openai", None, "m")
    pacer.observe(_ticket(pacer, 99.9), 200, _headers(3000, 2990, "20ms"))
    pacer.observe(_ticket(pacer, 100.0, depth=2), 429, {**_headers(3000, 2950, "20ms"), "retry-after-ms": "20"})
    following, why = pacer.signal()
    assert pacer.trusted is False and following == "429s"
    assert why.startswith("a 429 came while its headers showed 2950 requests remaining")


def _history(pacer: Pacer, *sends: tuple[float, int, bool]) -> None:
    for sent_at, depth, admitted in sends:
        pacer.history.append(Sent(sent_at, depth, admitted))
    pacer.latencies.extend([0.1] * 5)


def test_a_429_cuts_the_rate_to_the_share_admitted_once_per_round_trip(clock):
    pacer = Pacer("openai", None, "m")
    pacer.rate, pacer.window, pacer.last_cut = 40.0, None, 90.0
    # Since the last cut: 16 answered, 2 refused and 2 still in flight (counted as admitted),
    # then this 429: 18 of 21 admitted, and the rate is cut to that share of itself.
    _history(pacer, *[(95.0 + i * 0.1, 2, True) for i in range(16)], (97.0, 2, False), (97.1, 2, False))
    for i in range(2):
        ticket = _ticket(pacer, 97.2 + i * 0.01)
        pacer.in_flight[100 + i] = ticket
    clock.now = 98.0
    pacer.observe(_ticket(pacer, 97.9, depth=3), 429, {})
    assert pacer.rate == pytest.approx(40 * 18 / 21)  # 16 + 2 in flight admitted, 3 refused
    # A 429 of a request sent within one reply's time (0.1 s) of that cut: the same event.
    clock.now = 98.05
    pacer.observe(_ticket(pacer, 98.02, depth=3), 429, {})
    assert pacer.rate == pytest.approx(40 * 18 / 21)
    assert pacer.last_cut == 98.0 and pacer.growth == 0.001  # a trim: the rate creeps back (0.1 % an answer)


def test_429s_again_within_three_round_trips_of_a_cut_cut_by_the_whole_share_refused(clock):
    """A descent from a blind start: the last cut 0.2 s ago (two replies' time), and since then
    4 of 20 admitted. The rate is cut to 4/20 of itself, not only halved, and grows back by 0.5 %
    an answer (the share undershoots where refused requests count against the limit)."""
    pacer = Pacer("openai", None, "m")
    pacer.rate, pacer.window, pacer.last_cut = 400.0, None, 98.0
    _history(pacer, *[(98.0 + i * 0.01, 8, i < 4) for i in range(20)])
    clock.now = 98.2
    pacer.observe(_ticket(pacer, 98.19, depth=8), 429, {})  # the 21st since the cut, refused too
    assert pacer.rate == pytest.approx(400.0 * 4 / 21) and pacer.growth == 0.005
    assert ratelimit.cut_factor(4, 17) == 0.5 and ratelimit.cut_factor(4, 17, 0.05) == pytest.approx(4 / 21)
    assert ratelimit.cut_factor(0, 30, 0.05) == 0.05  # never below the deepest cut


def test_after_a_wait_for_a_shut_window_the_cut_counts_the_wait_and_keeps_to_what_was_admitted(clock):
    """A fixed window with bare 429s: nothing got through for a round trip, so everyone waited
    (98.0 to 98.4); then a burst at the rate allowed (300/s) met the window again: 12 of the 21
    sent since the wait admitted. The requests went out only a fifth of that time, so the
    share admitted (12/21) times 0.2 says 0.11 of the rate: cut, but at most halved (150/s).
    They are let out in bursts, so no faster than the server admitted them since the first
    cut either: 80 of 160 sent from 90.0 and 12 since, over 8.5 s."""
    pacer = Pacer("openai", None, "m")
    pacer.rate, pacer.window, pacer.first_cut, pacer.last_cut, pacer.hold_until = 300.0, None, 90.0, 98.0, 98.4
    _history(pacer, *[(90.0 + i * 0.05, 4, i % 2 == 0) for i in range(160)],
             *[(98.4 + i * 0.004, 4, i < 12) for i in range(20)])
    clock.now = 98.5
    pacer.observe(_ticket(pacer, 98.48, depth=4), 429, {})
    assert ratelimit.cut_factor(12, 9, 0.5, open_share=0.2) == 0.5
    assert ratelimit.cut_factor(12, 9, 0.05, open_share=0.2) == pytest.approx(12 / 21 * 0.2)
    assert pacer.rate == pytest.approx(92 / 8.5) and pacer.growth == 0.005 and pacer.last_cut == 98.5
    # Without the wait, the same 429s cut to the share admitted alone, and no ceiling applies.
    plain = Pacer("openai", None, "m")
    plain.rate, plain.window, plain.first_cut, plain.last_cut = 300.0, None, 90.0, 98.0
    _history(plain, *[(90.0 + i * 0.05, 4, i % 2 == 0) for i in range(160)],
             *[(98.4 + i * 0.004, 4, i < 12) for i in range(20)])
    plain.observe(_ticket(plain, 98.48, depth=4), 429, {})
    assert plain.rate == pytest.approx(300 * 12 / 21)


def test_after_a_cut_that_followed_a_wait_the_rate_regrows_fast_to_nine_tenths_of_its_last_peak(clock):
    """The cut of the test above (300/s to 10.8/s, the rate admitted since the first cut): the
    window drained at 300/s, so the limit is likely a little below that. The rate grows back by
    0.5 % an answer held by it up to nine tenths of 300/s, then by 0.1 %, and the next windows
    drain seldom. Growing by 0.5 % beyond (30 % a second at 60 answers a second) drained every
    window: fixed windows of 60 a second behind headers claiming twice that met 0.08 429s per
    success, and 0.04 so."""
    pacer = Pacer("openai", None, "m")
    pacer.rate, pacer.window, pacer.first_cut, pacer.last_cut, pacer.hold_until = 300.0, None, 90.0, 98.0, 98.4
    _history(pacer, *[(90.0 + i * 0.05, 4, i % 2 == 0) for i in range(160)],
             *[(98.4 + i * 0.004, 4, i < 12) for i in range(20)])
    clock.now = 98.5
    pacer.observe(_ticket(pacer, 98.48, depth=4), 429, {})
    cut = 92 / 8.5
    assert pacer.rate == pytest.approx(cut)
    clock.now = 98.6
    pacer.observe(_ticket(pacer, 98.55, rate_bound=True), 200, {})
    assert pacer.rate == pytest.approx(cut * 1.005)
    pacer.rate = 269.0
    pacer.observe(_ticket(pacer, 98.56, rate_bound=True), 200, {})
    assert pacer.rate == pytest.approx(269.0 * 1.005)
    pacer.observe(_ticket(pacer, 98.57, rate_bound=True), 200, {})  # past 270/s
    assert pacer.rate == pytest.approx(269.0 * 1.005 * 1.001)


def test_past_the_rate_cut_last_with_no_429_the_growth_doubles_every_fifty_answers(clock):
    """Another job on the key ended and the limit doubled: growing by GROW (0.1 % an answer), 200
    answers past the rate cut last take it only to 1.22 x (693 answers to double: runs at 0.78-0.81
    of allowed); past that rate each 50 answers held by it double the growth, up to GROW_MID,
    and 200 answers double the rate. Below it, and after the next cut, the growth is as before."""
    pacer = Pacer("openai", None, "m")
    pacer.rate, pacer.window, pacer.peak, pacer.growth = 19.0, None, 20.0, ratelimit.GROW
    pacer.observe(_ticket(pacer, 99.0, rate_bound=True), 200, {})
    assert pacer.rate == pytest.approx(19.0 * 1.001) and pacer.above == 0
    pacer.rate = 20.0 * 1.0001
    for i in range(200):
        pacer.observe(_ticket(pacer, 99.0 + i * 0.01, rate_bound=True), 200, {})
    assert 1.9 < pacer.rate / 20.0 < 2.1 and pacer.above == 200
    _history(pacer, *[(101.0 + i * 0.01, 2, i % 4 != 0) for i in range(20)])
    clock.now, pacer.last_cut = 101.3, 90.0
    pacer.observe(_ticket(pacer, 101.25, depth=2), 429, {})
    assert pacer.above == 0 and pacer.peak == pytest.approx(40.0, rel=0.05)


def test_429s_that_rose_since_the_last_cut_are_the_rates_doing_even_below_its_rate(clock):
    """Below the last cut's rate (100/s), 429s as many as then (2 %) are not the rate's doing and
    the rate is left alone; 429s that rose to 6 of 40 (15 %, over 1.5 x 2 %) are: it is cut."""
    def pacer_after_a_cut(refused: int) -> Pacer:
        pacer = Pacer("openai", None, "m")
        pacer.rate, pacer.window, pacer.last_cut = 90.0, None, 90.0
        pacer.peak, pacer.cut_share = 100.0, 0.02
        _history(pacer, *[(95.0 + i * 0.05, 4, i >= refused) for i in range(40)])
        return pacer
    clock.now = 98.0
    same = pacer_after_a_cut(0)
    same.observe(_ticket(same, 97.9, depth=4), 429, {})  # 1 of 41 refused: 2.4 %, as before
    assert same.rate == 90.0 and same.last_cut == 90.0
    rose = pacer_after_a_cut(6)
    rose.observe(_ticket(rose, 97.9, depth=4), 429, {})  # 7 of 41 refused
    assert rose.rate == pytest.approx(90.0 * 34 / 41) and rose.last_cut == 98.0


def test_when_nothing_got_through_since_the_last_cut_everyone_waits_instead(clock):
    pacer = Pacer("openai", None, "m")
    pacer.rate, pacer.window, pacer.last_cut = 40.0, None, 98.0
    _history(pacer, *[(97.0 + i * 0.05, 2, True) for i in range(20)], (98.2, 2, False), (98.3, 2, False))
    clock.now = 98.5
    pacer.observe(_ticket(pacer, 98.4, depth=2), 429, {})
    assert pacer.rate == 40.0 and pacer.shut == 1
    assert pacer.hold_until == pytest.approx(98.5 + 0.2)  # 2 replies' time: more than half the 0.3 s shut


def test_a_wait_for_a_shut_window_is_half_the_time_it_has_been_shut(clock):
    """Nothing got through since 98.2 (the first refused since the last cut). At 98.5 everyone
    waits two replies' time (0.2 s, more than half of the 0.3 s shut); still shut at 101.2, half
    the 3 s it has been shut (1.5 s: a wait that grows with the time shut overshoots a reopening
    by at most half that time, where a doubling wait, jittered, could overshoot it by a whole
    window). A request admitted that was sent since ends the spell: the next one counts from its
    own first refusal."""
    pacer = Pacer("openai", None, "m")
    pacer.rate, pacer.window, pacer.last_cut = 40.0, None, 98.0
    _history(pacer, *[(97.0 + i * 0.05, 2, True) for i in range(20)], (98.2, 2, False), (98.3, 2, False))
    clock.now = 98.5
    pacer.observe(_ticket(pacer, 98.4, depth=2), 429, {})
    assert pacer.shut == 1 and pacer.hold_until == pytest.approx(98.7)
    clock.now = 101.2
    pacer.observe(_ticket(pacer, 101.0, depth=1), 429, {})
    assert pacer.shut == 2 and pacer.hold_until == pytest.approx(101.2 + 1.5) and pacer.rate == 40.0
    clock.now = 102.9
    pacer.observe(_ticket(pacer, 102.8, depth=1), 200, {})  # the window reopened
    # Later, shut again: from the first refused since the last cut (103.0), not from 98.2.
    pacer.last_cut = 103.0
    _history(pacer, (103.0, 1, False), (103.05, 1, False))
    clock.now = 103.4
    pacer.observe(_ticket(pacer, 103.2, depth=1), 429, {})
    assert pacer.shut == 3 and pacer.hold_until == pytest.approx(103.4 + 0.2)


def test_a_shut_window_is_waited_out_as_long_as_a_gemini_429_body_says_if_longer(clock):
    """Nothing got through since 98.2; the 429 that says so asks for 20 s in its body (Gemini's
    per-minute quota): everyone waits 20 s, not two replies' time (each try before the
    reopening is one more 429). A header's retry-after outranks the body, and sets no such wait:
    some gateways send a flat 60 s whatever the limit."""
    pacer = Pacer("gemini", None, "m")
    pacer.rate, pacer.window, pacer.last_cut = 40.0, None, 98.0
    _history(pacer, *[(97.0 + i * 0.05, 2, True) for i in range(20)], (98.2, 2, False), (98.3, 2, False))
    clock.now = 98.5
    pacer.observe(_ticket(pacer, 98.4, depth=2), 429, {}, told_in_body=20.0)
    assert pacer.shut == 1 and pacer.hold_until == pytest.approx(118.5)
    pacer.hold_until, pacer.last_cut = 0.0, 98.0
    pacer.observe(_ticket(pacer, 98.45, depth=2), 429, {"retry-after": "60"}, told_in_body=20.0)
    assert pacer.hold_until == pytest.approx(98.7)  # the shut wait: two replies' time


def test_the_wait_in_a_gemini_429_body_is_read():
    import httpx

    body = {"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": "Please retry in 47.4s.",
                      "details": [{"@type": "type.googleapis.com/google.rpc.QuotaFailure",
                                   "violations": [{"quotaValue": "4000000"}]},
                                  {"@type": "type.googleapis.com/google.rpc.RetryInfo",
                                   "retryDelay": "47.434392449s"}]}}
    assert ratelimit.told_in_body(httpx.Response(429, json=body)) == pytest.approx(47.434392449)
    assert ratelimit.told_in_body(httpx.Response(429, json=[body])) == pytest.approx(47.434392449)
    spaced = b'{"details": [{"retryDelay" : "38s"}]}'
    assert ratelimit.told_in_body(httpx.Response(429, content=spaced)) == 38.0
    assert ratelimit.told_in_body(httpx.Response(429, json={"error": {"code": 429}})) is None

    async def chunks():
        yield b'{"retryDelay": "5s"}'

    assert ratelimit.told_in_body(httpx.Response(429, content=chunks())) is None  # not read: unknown


def test_a_429_while_an_earlier_request_is_still_out_is_not_a_shut_window(clock):
    """After a wait for a shut window, two went out (cap 2): the second came back refused at
    once, while the first (sent 0.03 s before it) was still out. Nothing since the wait is known
    to have got in, but the first may have: no second wait (which would let out the same pair
    again, one in and one refused, each time). The rate is cut instead: halved, as 4 of the last
    10 were admitted and too few were sent since the wait to tell a share."""
    pacer = Pacer("openai", None, "m")
    pacer.rate, pacer.window, pacer.cap, pacer.last_cut, pacer.shut = 30.0, None, 2, 97.5, 1
    pacer.hold_until = 98.0
    _history(pacer, *[(96.0 + i * 0.05, 2, i % 2 == 0) for i in range(20)])
    pacer.refusal_times.append(0.08)  # an earlier 429 took 0.08 s: the first tells nothing yet
    first, second = _ticket(pacer, 98.0, depth=1), _ticket(pacer, 98.03, depth=2)
    pacer.in_flight = {1: first, 2: second}
    first.seq, second.seq = 1, 2
    clock.now = 98.035
    pacer.observe(second, 429, {})
    assert pacer.shut == 0 and pacer.hold_until == 98.0 and pacer.last_cut == 98.035
    assert pacer.rate == pytest.approx(15.0)
    # With nothing earlier still out, the same 429 is a window shut: everyone waits.
    alone = Pacer("openai", None, "m")
    alone.rate, alone.window, alone.cap, alone.last_cut, alone.shut = 30.0, None, 2, 97.5, 1
    alone.hold_until = 98.0
    _history(alone, *[(96.0 + i * 0.05, 2, i % 2 == 0) for i in range(20)])
    alone.observe(_ticket(alone, 98.03, depth=1), 429, {})
    assert alone.shut == 2 and alone.hold_until > 98.035 and alone.rate == 30.0


def test_the_slow_starts_429_is_taken_for_a_cap_then_a_429_within_it_cuts_a_rate(clock):
    pacer = Pacer("openai", None, "m")
    # Slow start: 12 answered, sent 0.05 s apart (20 a second), then a 429 with 5 in flight.
    _history(pacer, *[(99.0 + i * 0.05, 4, True) for i in range(12)])
    pacer.successes = 12
    clock.now = 99.7
    assert pacer.observe(_ticket(pacer, 99.6, depth=5), 429, {}) == 0.0
    assert (pacer.cap, pacer.window, pacer.rate) == (4, None, None)
    # A 429 with 3 in flight: a rate is to blame too. None was set: the rate the requests went
    # at (14 sent over 0.7 s: 13 gaps, 18.57 a second), cut to the share admitted since the
    # first request refused (what went before met a budget not yet spent), here too few (2,
    # both refused) to tell a share: halved. It grows back at 0.5 % per answer.
    clock.now = 99.75
    assert pacer.observe(_ticket(pacer, 99.7, depth=3), 429, {}) == 0.0
    assert pacer.rate == pytest.approx(13 / 0.7 * 0.5) and pacer.cap == 4 and pacer.growth == 0.005
    pacer.observe(_ticket(pacer, 99.75, rate_bound=True), 200, {})
    assert pacer.rate == pytest.approx(13 / 0.7 * 0.5 * 1.005)


def test_a_blind_starts_first_cut_counts_from_the_first_request_refused(clock):
    """A bucket spent by a blind start: 200 admitted (its burst), then, from the first refused,
    3 of 20 admitted. The first cut takes that share (3/21 with this 429), not 203 of 221, and may
    go below half (a blind start may be far over the limit)."""
    pacer = Pacer("openai", None, "m")
    pacer.window, pacer.cap = None, 64
    _history(pacer, *[(99.0 + i * 0.002, 30, True) for i in range(200)],
             *[(99.4 + i * 0.002, 30, i in (5, 11, 17)) for i in range(20)])
    clock.now = 99.5
    pacer.observe(_ticket(pacer, 99.45, depth=30), 429, {})
    # From the rate the last 16 went out at (15 gaps over 99.41 to 99.45: 375 a second).
    assert pacer.rate == pytest.approx(375 * 3 / 21) and pacer.growth == 0.005


def test_a_concurrency_cap_is_learned_held_and_tried_above(clock):
    pacer = Pacer("openai", None, "m")
    pacer.rate, pacer.window, pacer.first_answer = 30.0, None, 0.0
    _history(pacer, *[(90.0 + i * 0.01, 1 + i % 4, True) for i in range(40)], (95.0, 5, False), (95.1, 5, False),
             (95.2, 4, True))
    pacer.successes = 40
    clock.now = 96.0
    assert pacer.observe(_ticket(pacer, 95.9, depth=5), 429, {}) == 0.0
    assert (pacer.cap, pacer.rate) == (4, None)  # the cap explains the cuts: they are undone
    pacer.in_flight = {i: _ticket(pacer, 95.95, depth=i) for i in range(1, 5)}
    pacer.last_send = 95.99
    assert pacer._room(96.0) == ratelimit._MAX_SLEEP  # full: until one of them is answered
    assert pacer._wait(_ticket(pacer), 96.0) == (ratelimit._MAX_SLEEP, True)
    assert pacer.signal()[0] == "concurrency"  # the cap held a request back
    pacer.successes = pacer.probe_at  # a try above the cap is due, a quarter reply (0.025 s) after the last
    assert pacer._room(96.0) == pytest.approx(0.015)
    assert pacer._room(96.1) == 0.0
    probe = _ticket(pacer, 96.1, depth=5, probe=True)
    pacer.observe(probe, 429, {})  # refused: the cap holds, the next try twice as late
    assert pacer.cap == 4 and pacer.probe_every == 2 * ratelimit.PROBE_EVERY and pacer.rate is None
    for _ in range(2):  # admitted above the cap twice in a row: one more, on trial
        pacer.observe(_ticket(pacer, 96.2, depth=5, probe=True), 200, {})
    assert pacer.cap == 5
    clock.now = 96.5
    pacer.observe(_ticket(pacer, 96.45, depth=5), 429, {})  # refused at it: back to 4, no rate cut
    assert (pacer.cap, pacer.rate) == (4, None)
    pacer.cap, pacer.cap_trial = 1, True  # a cap is never below one request
    pacer.observe(_ticket(pacer, 96.5, depth=1), 429, {})
    assert pacer.cap == 1 and pacer.rate is not None


def test_requests_that_reach_a_gateway_out_of_order_do_not_mislead_the_cap(clock):
    """A gateway allowing 3 in flight. The blind start's 4 arrive out of order (one that opens a
    connection comes late): the one sent 3rd is refused, the 4th admitted. After the answers, a
    request sent 2nd of a new burst arrives late too and is refused: taken alone it says a cap of
    1 (a third of the throughput); the most in flight at an admitted request says 4."""
    pacer = Pacer("gemini", None, "m")
    _history(pacer, (99.0, 1, True), (99.0, 2, True), (99.0, 3, False), (99.0, 4, True))
    pacer.successes = 3
    clock.now = 99.2
    assert pacer.observe(_ticket(pacer, 99.15, depth=2), 429, {}) == 0.0
    assert (pacer.cap, pacer.window, pacer.rate, pacer.cap_trial) == (4, None, None, True)
    # An answer at 4, sent before the cap was set (alongside that 429), does not confirm it: it
    # may have got in while a reply was on its way. A 429 at 4 sent since then fails the trial.
    clock.now = 99.25
    pacer.observe(_ticket(pacer, 99.16, depth=4), 200, {})
    assert pacer.cap_trial is True
    clock.now = 99.3
    assert pacer.observe(_ticket(pacer, 99.26, depth=4), 429, {}) == 0.0
    assert (pacer.cap, pacer.rate, pacer.cap_trial) == (3, None, False)


def test_a_burst_refused_in_any_order_sets_the_cap_at_its_least_refused(clock):
    """A gateway allowing 8 in flight. Eight answers come back together and 16 requests go out
    in one burst; those sent with 9 or more out are refused, and their 429s arrive in any order.
    The first says 10 in flight then: a cap of 10, on trial. The others of the burst say 8, not
    9 then a rate (as before, when only one 429 at the cap lowered it)."""
    pacer = Pacer("openai", None, "m")
    _history(pacer, *[(99.0 + i * 0.001, i + 1, True) for i in range(8)])
    pacer.successes = 8
    clock.now = 99.3
    assert pacer.observe(_ticket(pacer, 99.21, depth=11), 429, {}) == 0.0
    assert (pacer.cap, pacer.cap_trial, pacer.cap_since) == (10, True, 99.3)
    for depth in (12, 10, 9, 16):
        assert pacer.observe(_ticket(pacer, 99.21, depth=depth), 429, {}) == 0.0
    assert (pacer.cap, pacer.rate, pacer.cap_trial) == (8, None, True)


def test_a_refusal_with_the_cap_on_trial_reached_while_it_was_out_fails_the_trial(clock):
    """Cap 4 on trial. A request sent with 3 in flight (itself included) is refused after a 4th
    went out: the trial failed (the cap is 3), not a rate. One refused with never more than 3 out,
    after the trial ended, is a rate's doing."""
    pacer = Pacer("openai", None, "m")
    _history(pacer, *[(90.0 + i * 0.01, 1 + i % 3, True) for i in range(20)])
    pacer.window, pacer.cap, pacer.cap_trial = None, 4, True
    clock.now = 99.0
    early = [_ticket(pacer) for _ in range(3)]
    for ticket in early:
        pacer._book(ticket, 99.0)
    assert [(t.depth, t.peak) for t in early] == [(1, 3), (2, 3), (3, 3)]
    pacer._book(_ticket(pacer), 99.01)
    assert [t.peak for t in early] == [4, 4, 4]
    clock.now = 99.02
    assert pacer.observe(early[2], 429, {}) == 0.0
    assert (pacer.cap, pacer.rate, pacer.cap_trial) == (3, None, False)
    pacer.observe(early[0], 200, {})  # 2 left in flight
    late = _ticket(pacer)
    pacer._book(late, 99.03)
    assert (late.depth, late.peak) == (3, 3)
    clock.now = 99.04
    pacer.observe(late, 429, {})
    assert pacer.cap == 3 and pacer.rate is not None


def test_a_429_with_a_number_in_flight_never_admitted_lowers_the_cap_again(clock):
    """A gateway allowing 26 in flight; the slow start's burst set a cap of 28 on trial. 429s at
    28 and then at 27, both sent since, with numbers in flight never admitted: the cap is 26,
    not a rate (before, the first failed the trial, 27, and the second cut the rate: the run went
    on at 0.88 with 17 times the 429s). A 429 at 26, a number admitted many times, is a rate's."""
    pacer = Pacer("openai", None, "m")
    _history(pacer, *[(90.0 + i * 0.01, 1 + i % 26, True) for i in range(60)])
    pacer.window, pacer.cap, pacer.cap_trial, pacer.cap_since = None, 28, True, 91.0
    clock.now = 91.2
    assert pacer.observe(_ticket(pacer, 91.1, depth=28), 429, {}) == 0.0
    clock.now = 91.3
    assert pacer.observe(_ticket(pacer, 91.25, depth=27), 429, {}) == 0.0
    assert (pacer.cap, pacer.rate) == (26, None)
    pacer.cap_trial = False  # confirmed meanwhile
    clock.now = 91.5
    pacer.observe(_ticket(pacer, 91.45, depth=26), 429, {})
    assert pacer.cap == 26 and pacer.rate is not None


def test_an_answer_held_by_the_rate_at_the_cap_grows_the_rate(clock):
    """A cap learned in the slow start (3) and a rate found since (40/s): an answer at the cap
    that also waited for the rate grows the rate (before, an answer at the cap never did, and a
    run settled at 0.93 of a limit the rate alone would have reached); a try above the cap does not."""
    pacer = Pacer("openai", None, "m")
    pacer.rate, pacer.window, pacer.cap, pacer.cap_trial, pacer.growth = 40.0, None, 3, True, 0.001
    clock.now = 99.0
    pacer.observe(_ticket(pacer, 98.95, depth=3, rate_bound=True), 200, {})
    assert pacer.rate == pytest.approx(40.04) and pacer.cap_trial is False
    pacer.observe(_ticket(pacer, 98.96, depth=3), 200, {})  # not held by the rate
    pacer.observe(_ticket(pacer, 98.97, depth=4, probe=True, rate_bound=True), 200, {})
    assert pacer.rate == pytest.approx(40.04)


def test_a_429_asking_for_no_wait_is_sent_again_at_once_unless_429s_abound(clock):
    pacer = Pacer("openai", None, "m")
    pacer.rate, pacer.window = 40.0, None
    _history(pacer, *[(90.0 + i * 0.01, 2, i % 5 != 0) for i in range(40)])  # 8 of 40 refused
    clock.now = 96.0
    assert pacer.observe(_ticket(pacer, 95.9, depth=2), 429, {"retry-after": "0"}) == 0.0  # 9 of 41
    assert pacer.rate == 40.0 and pacer.cap is None
    _history(pacer, *[(96.0 + i * 0.01, 2, False) for i in range(4)])  # with the next: 14 of 46
    assert pacer.observe(_ticket(pacer, 96.1, depth=2), 429, {"retry-after": "0"}) == 0.0
    assert pacer.rate < 40.0


def test_a_429s_wait_ends_once_three_requests_sent_after_it_got_in(clock):
    """A gateway's flat "retry-after: 60", whatever its limit: the refused request waits only
    until three requests sent after its 429 were admitted (the server has room, and the pacer's
    rate spaces the request from then on). Answers to requests sent before the 429 tell nothing:
    they may have got in before a window shut. With nothing out and nothing sent for 8 s (a run's
    last rows all waiting), one request goes; an overload's backoff is never cut short."""
    pacer = Pacer("openai", None, "m")
    pacer.rate, pacer.window = 40.0, None
    pacer.latencies.extend([0.05] * 3)
    refused = _ticket(pacer, 99.99)
    refused.not_before, refused.refused_at = 160.0, 100.0

    def ends() -> bool:
        async def wait():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(pacer._own_wait(refused), 0.2)
                return True
            return False
        return asyncio.run(wait())

    for sent_at in (99.95, 99.98, 100.01, 100.02):  # two of them sent before the 429
        pacer.observe(_ticket(pacer, sent_at), 200, {})
    assert not ends()  # the clock stands still: it would wait the whole minute
    pacer.observe(_ticket(pacer, 100.03), 200, {})
    assert ends()
    # At a run's end no request may be left to tell: with none out and none sent for 8 s, one asks.
    pacer.history.clear()
    pacer.last_send, clock.now = 100.5, 108.4
    assert not ends()
    clock.now = 108.5
    assert ends()
    pacer._book(_ticket(pacer), 108.5)  # it went: the rest wait for its answer
    clock.now = 120.0
    assert not ends()
    overload = _ticket(pacer, 100.0, not_before=130.0)  # an overload's backoff is not cut short
    with pytest.raises(asyncio.TimeoutError):
        asyncio.run(asyncio.wait_for(pacer._own_wait(overload), 0.2))


def test_after_a_429_the_slow_start_spreads_its_window_over_a_replys_time(clock):
    """Once a 429 came, the slow start's window goes out spread over a reply's time, not at
    once: a limit enforced over a short period (a gateway's 30 a second, one at a time) refuses
    a burst whatever the number in flight, and at 1 s a reply its 429s read as a cap of one or
    two (a run at 0.05 of allowed). Before any 429 it goes out at once (spread, a server with
    no limit took 15 % longer)."""
    calm = Pacer("openai", None, "m")
    first = _ticket(calm)
    calm._book(first, 100.0)
    clock.now = 101.0
    calm.observe(first, 200, {})  # 1 s a reply; the window grows to 6
    calm._book(_ticket(calm), 101.0)
    assert calm.window == 6 and calm._wait(_ticket(calm), 101.0)[0] == 0.0  # no 429: at once

    pacer = Pacer("openai", None, "m")
    first, refused = _ticket(pacer), _ticket(pacer, depth=2)
    pacer._book(first, 100.0)
    pacer._book(refused, 100.0)
    clock.now = 100.01
    pacer.observe(refused, 429, {})  # a burst of two: one refused
    clock.now = 101.0
    pacer.observe(first, 200, {})
    assert pacer.window == 3
    pacer._book(_ticket(pacer), 101.0)
    assert pacer._wait(_ticket(pacer), 101.0)[0] == pytest.approx(1 / 3)
    assert pacer._wait(_ticket(pacer), 101.1)[0] == pytest.approx(1 / 3 - 0.1)


def test_overload_makes_that_request_wait_and_changes_nothing_else(clock):
    pacer = Pacer("anthropic", None, "m")
    pacer.rate, pacer.cap = 20.0, 6
    pacer.latencies.extend([0.4] * 3)
    ticket = _ticket(pacer, 99.0)
    random.seed(3)
    first = pacer.overloaded(ticket)
    second = pacer.overloaded(ticket)
    assert 0.2 <= first <= 0.6 and 0.4 <= second <= 1.2  # from one reply's time (0.4 s), doubling
    assert (pacer.rate, pacer.cap, pacer.responses_overloaded, pacer.responses_429) == (20.0, 6, 2, 0)


def test_rpm_is_a_fixed_cap_inside_the_pacer(clock):
    pacer = Pacer("openai", None, "m", rpm=600)  # one request every 0.1 s
    first, second = _ticket(pacer), _ticket(pacer)
    pacer._book(first, 10.0)
    pacer._book(second, 10.1)
    assert pacer.next_start == pytest.approx(10.2)
    assert pacer._wait(_ticket(pacer), 10.05)[0] == pytest.approx(0.15)
    pacer._book(_ticket(pacer), 10.23)  # woken 0.03 s late: the next start keeps the beat
    assert pacer.next_start == pytest.approx(10.3)
    pacer._book(_ticket(pacer), 12.0)  # after a pause: no credit for the time idle
    assert pacer.next_start == pytest.approx(12.1)
    pacer.rate = 5.0  # a learned rate below the cap governs; above it, the cap does
    assert pacer.send_rate == 5.0
    pacer.rate = 50.0
    assert pacer.send_rate == pytest.approx(10.0)
    assert pacer.describe()["rpm_cap"] == 600


@pytest.mark.parametrize("headers, window", [({}, 6), (_headers(3000, 2999, "20ms"), 5)],
                         ids=["bare", "headers"])
def test_slow_start_sends_a_few_until_the_first_success_then_more_per_success(headers, window):
    """4 until the first answer; then 2 more per success without rate-limit headers (the number
    in flight triples each round trip: growing by one, a run bound by 64 in flight spent 3 of
    its first 4 round trips below it), 1 while headers are believed (growing faster behind them,
    the start outgrew a short-period limit's burst so far that its 429s read as a cap of 4: in
    4 of 10 runs of the test below at 3 more per success, about 1 in 10 at 2 more)."""
    async def scenario():
        pacer = Pacer("openai", None, "m")
        tickets = [_ticket(pacer) for _ in range(10)]
        first = [asyncio.ensure_future(pacer.acquire(t)) for t in tickets]
        await asyncio.sleep(0.05)
        sent = sum(task.done() for task in first)
        pacer.observe(tickets[0], 200, headers)  # one answer: one leaves, more may be out
        await asyncio.sleep(0.05)
        done = sum(task.done() for task in first)
        for task in first:
            task.cancel()
        return sent, pacer.window, len(pacer.in_flight), pacer.waited_requests, done

    sent, grown, in_flight, held, done = asyncio.run(scenario())
    assert sent == 4 and grown == window and in_flight == window
    assert done == window + 1  # the one answered and those in flight; the rest wait for room
    assert held == 0  # not a wait for the provider's limit


def test_reachability_stops_only_when_nothing_ever_answered():
    class ConnectError(Exception):
        pass

    cold, warm = Reachability(), Reachability()
    warm.note_reply()
    for _ in range(10):
        warm.note_failure(ConnectError("refused"))  # a blip in a healthy run: retried as usual
    for _ in range(3):
        cold.note_failure(ConnectError("All connection attempts failed"))
    assert cold.dead and not warm.dead and "connection attempts failed" in cold.reason
    assert cold.kind == "connect"
    assert reachability.is_connect_failure(ConnectError()) and not reachability.is_connect_failure(ValueError())


def test_an_address_that_only_ever_answers_overloaded_is_dead_after_a_few_seconds(clock):
    gateway, busy = Reachability(), Reachability()
    busy.note_reply()
    for second in (0.0, 0.1, 0.5, 1.0, 1.5, 1.9):  # six answers, under 2 s
        clock.now = 100 + second
        gateway.note_overload(503)
        busy.note_overload(503)
    assert not gateway.dead
    clock.now = 103.0
    gateway.note_overload(503)
    busy.note_overload(503)
    assert gateway.dead and gateway.kind == "overloaded" and not busy.dead
    assert gateway.reason == "7 answers in 3 s, all HTTP 503 overloaded"


# -- through the real SDKs -------------------------------------------------------------------

@pytest.fixture
def limited(env, monkeypatch):
    """A limiting fake factory (``Shape`` fields); every provider pointed at it."""
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


def _run(script, env, model: str, *extra: str):
    return script(ALIGN, "--model", model, "--input_file", "in.csv", "--output_file", "out.csv",
                  "--no_cache", *extra, env=env)


def _finished(proc, tmp_path, prompts) -> dict:
    """The run's meta file's one pacer, after checking every row was answered."""
    assert proc.returncode == 0, proc.stderr
    out = pd.read_csv(tmp_path / "out.csv", dtype=str, keep_default_na=False)
    assert (out.error == "").all() and list(out.response) == [f"Fake answer to: {p}" for p in prompts]
    meta = json.loads((tmp_path / "out.csv.meta.json").read_text())
    [paced] = meta["rate_limits"]
    assert paced["passed_to_sdk_after_patience"] == 0
    assert paced["responses_429"] == meta["requests"]["rate_limit_429s"]
    return paced


@pytest.mark.parametrize("model, shape", [
    ("openai/gpt-test", {"rpm": 30, "style": "openai"}),
    ("anthropic/claude-test", {"tpm": 3000, "style": "anthropic"}),   # max_tokens 100: ~25 a window
])
def test_honest_headers_are_followed_with_no_error_row(script, env, limited, tmp_path, model, shape):
    server = limited(window=1.0, **shape)
    prompts = _input(tmp_path, 60)
    # --max_retries 0: a 429 handed to the SDK would fail its row at once.
    proc = _run(script, env, model, "--concurrency", "16", "--max_retries", "0", "--max_tokens", "100")
    paced = _finished(proc, tmp_path, prompts)
    assert (paced["provider"], paced["model"]) == tuple(model.split("/"))
    assert paced["responses_429"] == server.rejected and server.ok == 60
    assert (paced["following"], paced["header_style"]) == ("headers", shape["style"])
    seen = paced["limits_seen"]["requests" if "rpm" in shape else "tokens"]
    assert seen["limit"] == next(iter(shape.values()))
    assert seen["refill_per_minute"] == pytest.approx(seen["limit"] * 60, rel=0.1)
    assert server.rejected <= 15  # paced from the headers (the bench measures the rate goals)
    assert "paced by the provider's rate limit" in proc.stderr


@pytest.mark.parametrize("model, shape, following", [
    # Headers whose reset means "until the next request" on a limit enforced over a short period.
    ("openai/gpt-test", {"rpm": 60, "window": 1.0, "burst": 0.1, "reset": "next", "latency": 0.05}, "429s"),
    # Bare 429s through google-genai, and a gateway that allows 3 requests in flight. Its replies
    # take 0.15 s: this client counts a request in flight until it has read the reply, so on a
    # loaded machine, with replies of 0.03 s, the lag between the two counts was a good part of
    # a reply's time and a request looked deeper than the server saw it (a cap of 4 was learned
    # in 1 run of 4 beside three busy processes; at 0.15 s, 0 of 83).
    ("gemini/gemini-test", {"rpm": 60, "window": 1.0, "burst": 0.1, "style": "none", "latency": 0.05}, "429s"),
    ("gemini/gemini-test", {"cap": 3, "style": "none", "latency": 0.15}, "concurrency"),
])
def test_the_429s_outrank_the_headers_and_a_cap_on_requests_in_flight_is_found(
        script, env, limited, tmp_path, model, shape, following):
    server = limited(**shape)
    prompts = _input(tmp_path, 45 if "cap" in shape else 40)
    proc = _run(script, env, model, "--concurrency", "16", "--max_retries", "0")
    paced = _finished(proc, tmp_path, prompts)
    assert paced["responses_429"] == server.rejected + server.capped > 0
    assert paced["following"] == following, json.dumps(paced)
    if following == "concurrency":
        assert paced["concurrency_cap"] == 3 and server.max_in_flight == 3
        assert paced["learned_requests_per_minute"] is None
    else:
        assert paced["learned_requests_per_minute"] > 0
    if "reset" in shape:
        assert paced["why"].startswith("a 429 came while its headers showed"), paced["why"]


def test_a_gemini_quota_429_is_waited_out_as_its_body_says(script, env, limited, tmp_path):
    """Gemini sends no Retry-After: a spent quota's 429 says when it reopens in its body
    (``google.rpc.RetryInfo``). A window of 8 requests per 1.5 s, 12 rows: the requests refused
    wait for the reopening the body names (5 429s in all), not for backoffs that double from
    0.25 s (15-16 429s when the body was not read)."""
    server = limited(rpm=8, window=1.5, fixed=True, style="gemini", latency=0.05)
    prompts = _input(tmp_path, 12)
    proc = _run(script, env, "gemini/gemini-test", "--concurrency", "16", "--max_retries", "0")
    paced = _finished(proc, tmp_path, prompts)
    assert paced["responses_429"] == server.rejected and server.ok == 12
    assert server.rejected <= 8, server.rejected


def test_overload_is_waited_out_and_counted_apart_from_429s(script, env, limited, tmp_path):
    server = limited(overload_every=3, style="anthropic")
    prompts = _input(tmp_path, 30)
    proc = _run(script, env, "anthropic/claude-test", "--concurrency", "8", "--max_retries", "0")
    paced = _finished(proc, tmp_path, prompts)
    assert paced["responses_overloaded"] == server.overloaded >= 10
    assert paced["responses_429"] == 0 and paced["learned_requests_per_minute"] is None
    assert f"0 429 answers waited out, {server.overloaded} overload answers waited out" in proc.stderr


def test_an_address_that_only_answers_overloaded_stops_the_run_within_seconds(script, env, limited,
                                                                                  tmp_path, monkeypatch):
    monkeypatch.setattr(reachability, "OVERLOADED_AFTER", (4, 0.3))  # the same rule, sooner
    server = limited(overload_only=True)
    _input(tmp_path, 50)
    started = time.monotonic()
    proc = _run(script, env, "openai/gpt-test")
    assert proc.returncode == 2 and time.monotonic() - started < 10
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"error: openai at {server.url}/v1 has answered nothing but \"overloaded\" since the run started"), lines
    assert "HTTP 503 overloaded" in lines[0] and "has a model loaded" in lines[0]


def test_rpm_caps_the_rate_inside_the_pacer(env, limited):
    server = limited()  # no limit of its own
    client = Client(cache=None, rpm=1200)  # one start every 0.05 s

    async def go():
        try:
            return await asyncio.gather(*(client.complete(Request.user(parse_model("openai/gpt-test"), f"q{i}"))
                                          for i in range(5)))
        finally:
            await client.close()

    asyncio.run(go())
    gaps = [b - a for a, b in zip(server.admitted, server.admitted[1:])]
    assert len(gaps) == 4 and min(gaps) >= 0.025  # at worst half a gap late, then on the beat
    assert server.admitted[-1] - server.admitted[0] >= 0.2 - 0.025
    [paced] = client.rate_limits.describe()
    assert paced["rpm_cap"] == 1200 and paced["learned_requests_per_minute"] is None


def test_patience_bounds_the_wait_then_the_429_is_an_error(script, env, limited, tmp_path):
    server = limited(window=100.0, rpm=2, style="openai")
    _input(tmp_path, 4)
    started = time.monotonic()
    proc = _run(script, env, "openai/gpt-test", "--max_retries", "0", "--patience", "0.5")
    assert proc.returncode == 1 and time.monotonic() - started < 30
    out = pd.read_csv(tmp_path / "out.csv", dtype=str, keep_default_na=False)
    assert (out.error != "").sum() == 2 and out.error[out.error != ""].str.contains("HTTP 429").all()
    meta = json.loads((tmp_path / "out.csv.meta.json").read_text())
    assert meta["rate_limits"][0]["passed_to_sdk_after_patience"] == 2 and server.ok == 2


def test_both_sdks_share_the_transport_hook_and_pace_per_model(env, limited):
    limited(window=1.0, rpm=40, style="openai", burst=0.2)
    client = Client(cache=None, concurrency=8, max_retries=0)
    gpt, other = parse_model("openai/a"), parse_model("openai/b")

    async def go():
        try:
            return await asyncio.gather(*(client.complete(Request.user(m, f"q{i}", max_tokens=5))
                                          for i in range(12) for m in (gpt, other)))
        finally:
            await client.close()

    answers = asyncio.run(go())
    assert len(answers) == 24 and all(a.text.startswith("Fake answer") for a in answers)
    assert sorted(p["model"] for p in client.rate_limits.describe()) == ["a", "b"]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_closed_port_stops_the_run_within_seconds_keeping_finished_rows(script, env, fake, tmp_path):
    _input(tmp_path, 200)
    first = _run(script, env, "openai/gpt-test", "--limit", "5")
    assert first.returncode == 0 and fake.count() == 5
    dead = f"http://127.0.0.1:{_closed_port()}/v1"
    started = time.monotonic()
    proc = _run(script, {**env, "OPENAI_BASE_URL": dead}, "openai/gpt-test")
    took = time.monotonic() - started
    assert proc.returncode == 2 and took < 15, (took, proc.stderr)
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


def test_patience_flag_is_documented(capsys):
    with pytest.raises(SystemExit):
        check_alignment.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--patience PATIENCE seconds one request may keep waiting out the provider's rate limit" in text


def test_unreachable_client_raises_fatal_error(env):
    client = Client(cache=None, max_retries=5, base_url=f"http://127.0.0.1:{_closed_port()}/v1")

    async def go():
        try:
            await client.complete(Request.user(parse_model("openai/gpt-test"), "hi"))
        finally:
            await client.close()

    started = time.monotonic()
    with pytest.raises(FatalProviderError, match="cannot connect to openai"):
        asyncio.run(go())
    assert time.monotonic() - started < 15


def test_a_window_shut_since_the_first_cut_sets_no_ceiling_on_the_rate(clock):
    """A blind start met a fixed window: cut at 98.0, then nothing got through and everyone
    waited until 98.3. Of the 10 sent since the cut (this 429 included) 1 was admitted, and the
    requests went out 0.4 of the time: the cut is at most halved, 700 -> 350 a second. Only 1
    request was admitted since the first cut, which tells no rate: taken as one (1 in 0.2 s),
    the rate fell to 5 a second, and in a run of the bench to one request a minute, for good."""
    pacer = Pacer("openai", None, "m")
    pacer.rate, pacer.window, pacer.first_cut, pacer.last_cut, pacer.hold_until = 700.0, None, 98.0, 98.0, 98.3
    _history(pacer, *[(97.0 + i * 0.005, 30, True) for i in range(100)],
             *[(98.3 + i * 0.01, 30, False) for i in range(8)], (98.38, 30, True))
    clock.now = 98.5
    pacer.observe(_ticket(pacer, 98.39, depth=30), 429, {})
    assert pacer.rate == pytest.approx(350.0) and pacer.last_cut == 98.5


def _paced(provider: str, refused: int) -> Pacer:
    """Paced by a rate of 40 a second since a cut at 90.0: 200 answers admitted, then the last 32
    answers, of which the last ``refused`` were 429s."""
    pacer = Pacer(provider, None, "m")
    pacer.rate, pacer.window, pacer.last_cut = 40.0, None, 90.0
    _history(pacer, *[(88.0 + i * 0.01, 2, True) for i in range(200)],
             *[(95.0 + i * 0.05, 2, i < 32 - refused) for i in range(32)])
    return pacer


def test_a_stray_429_at_the_limits_edge_goes_back_in_line_at_once_a_storm_waits_as_told(clock):
    """Paced by a rate (40 a second), a 429 saying "retry after 1 s" among answers that were all
    admitted goes back in line at once: the rate paces it, and a second's wait at the end of a
    run is a second lost. Among many 429s, 9 of the last 32 answers (this one included), it waits
    the second it was told, though the 200 answers before them were admitted (9 of 233 in all)."""
    clock.now = 98.0
    calm = _paced("anthropic", 0)
    assert calm.observe(_ticket(calm, 97.9, depth=2), 429, {"retry-after": "1"}) == 0.0
    storm = _paced("anthropic", 8)
    assert storm.observe(_ticket(storm, 97.9, depth=2), 429, {"retry-after": "1"}) == 1.0
    assert calm.observe(_ticket(calm, 97.95, depth=2), 429, {}) == 0.0  # none told: at once too


def test_a_wall_of_429s_just_after_the_least_cut_is_not_a_descent(clock):
    """At 98.0 the rate was cut the least (to 320 a second: it was near the limit). A moment
    later, 18 of the 20 sent since (this 429 included) are refused: a fixed window that shut
    refuses all, whatever the rate. That is at most halved (160), where the same 429s after a
    deeper cut, a blind start still coming down, cut by the whole share refused (to 32). Cut to
    32, a run of the bench (140 requests per 2.6 s window) sent below the window's rate for
    seconds and lost 0.15 of its time."""
    def after(least: bool) -> Pacer:
        pacer = Pacer("gemini", None, "m")
        pacer.rate, pacer.window, pacer.first_cut, pacer.last_cut = 320.0, None, 97.0, 98.0
        pacer.peak, pacer.cut_share, pacer.cut_least = 356.0, 0.1, least
        _history(pacer, *[(97.0 + i * 0.009, 30, True) for i in range(100)],
                 *[(98.0 + i * 0.0075, 30, i < 2) for i in range(19)])
        return pacer
    clock.now = 98.2
    for least, rate in ((True, 160.0), (False, 32.0)):
        pacer = after(least)
        pacer.observe(_ticket(pacer, 98.15, depth=30), 429, {})
        assert pacer.rate == pytest.approx(rate) and pacer.last_cut == 98.2
        assert pacer.cut_least is False  # neither was the least cut


def test_a_storm_of_429s_saying_again_at_once_cuts_however_many_were_admitted_before(clock):
    """"retry-after: 0" on a stray 429 is sent again at once and cuts nothing. Nine of the last
    32 answers refused so (this one included) is a server pacing us, whatever it says: the rate
    is cut, though the 200 answers before them were admitted (9 of 233 in all, 4%, which the
    whole history would have read as strays, resent at once and never cut)."""
    clock.now = 98.0
    pacer = _paced("openai", 8)
    assert pacer.observe(_ticket(pacer, 97.9, depth=2), 429, {"retry-after": "0"}) == 0.0  # as told
    assert pacer.rate == pytest.approx(40.0 * 24 / 33) and pacer.last_cut == 98.0  # the share admitted since the cut
    calm = _paced("openai", 0)
    assert calm.observe(_ticket(calm, 97.9, depth=2), 429, {"retry-after": "0"}) == 0.0
    assert calm.rate == 40.0 and calm.last_cut == 90.0


def test_a_429_saying_again_at_once_among_a_runs_first_answers_is_no_storm(clock):
    """Two admitted, then a 429 with "retry-after: 0": a third of the answers so far, but too
    few answers to call a storm (a share counts among at least 16): sent again at once, and the
    slow start goes on, with no cap and no rate. Four such among 16 answers are a quarter: a
    storm, and the slow start's 429 sets a cap on trial (3 in flight then, less one)."""
    clock.now = 97.5
    pacer = Pacer("openai", None, "m")
    pacer.window, pacer.successes = 6, 2
    _history(pacer, (97.0, 1, True), (97.01, 2, True))
    assert pacer.observe(_ticket(pacer, 97.02, depth=3), 429, {"retry-after": "0"}) == 0.0
    assert pacer.window == 6 and pacer.cap is None and pacer.rate is None
    storm = Pacer("openai", None, "m")
    storm.window, storm.successes = 6, 12
    _history(storm, *[(97.0 + i * 0.01, 2, i % 4 != 3) for i in range(15)])  # 3 of 15 refused
    assert storm.observe(_ticket(storm, 97.2, depth=3), 429, {"retry-after": "0"}) == 0.0
    assert storm.window is None and storm.cap == 2 and storm.cap_trial


def test_a_descent_with_too_few_sent_since_the_cut_to_tell_a_share_is_at_most_halved(clock):
    """0.15 s after a cut, within three round trips (0.053 s each): a descent. Only 3 were sent
    since the cut, 1 admitted. The last 10 (7 of them sent before the cut, at the faster rate)
    say 4 of 10 admitted, which would cut 34 a second to 14; too few since the cut tell a
    share, so the rate is halved, to 17."""
    pacer = Pacer("openai", None, "m")
    pacer.rate, pacer.window, pacer.first_cut, pacer.last_cut = 34.0, None, 98.0, 98.0
    _history(pacer, *[(97.9 + i * 0.014, 2, i % 3 == 0) for i in range(7)],
             (98.03, 2, True), (98.06, 2, False))
    pacer.latencies.extend([0.053] * 5)
    clock.now = 98.15
    pacer.observe(_ticket(pacer, 98.12, depth=2), 429, {})
    assert pacer.rate == pytest.approx(17.0) and pacer.growth == 0.005
    # With 10 sent since the cut (3 admitted), the same descent cuts by the share: to 34 x 3/11.
    deep = Pacer("openai", None, "m")
    deep.rate, deep.window, deep.first_cut, deep.last_cut = 34.0, None, 98.0, 98.0
    _history(deep, *[(98.0 + i * 0.012, 2, i < 3) for i in range(10)])
    deep.latencies.extend([0.053] * 5)
    deep.observe(_ticket(deep, 98.13, depth=2), 429, {})
    assert deep.rate == pytest.approx(34.0 * 3 / 11)


def test_a_cap_holding_requests_back_cuts_the_first_429_as_a_bursts(clock):
    """The slow start's burst set a cap of 18 (a sliding log's 429s read as one); from then on
    the cap lets requests out as answers come, in bursts, and a 429 there is cut as a burst's:
    at most halved. Cut by the whole share refused (to 5 %), a short-period limit of 92 a second
    was met at 20 and took 15 s to grow back. Once the cap holds nothing back for a round trip,
    the pace is steady again."""
    pacer = Pacer("gemini", None, "m")
    pacer.window, pacer.cap, pacer.successes = None, 18, 30
    _history(pacer, *[(99.0 + i * 0.001, 18, i < 6) for i in range(20)])
    for i in range(18):
        pacer.in_flight[100 + i] = _ticket(pacer, 99.0 + i * 0.001, depth=18)
    clock.now = 99.05
    assert pacer._wait(_ticket(pacer), 99.05)[0] > 0 and pacer.flight_held == 99.05
    pacer.in_flight.clear()
    clock.now = 99.1  # 0.05 s later: within a round trip (0.1 s) of the cap's hold
    pacer.observe(_ticket(pacer, 99.02, depth=10), 429, {})
    assert pacer.rate == pytest.approx(0.5 * 15 / 0.015)


def test_a_few_429s_in_a_descent_cut_by_their_share_and_grow_slowly_after(clock):
    """At 0.45 s a reply, a 429 within three round trips of the last cut is a descent; 3 of 21
    refused is no wall, and the rate grows by GROW after its cut, not GROW_MID (a 429 in six
    answers every 0.1 s, each taken for a descent and grown fast after, ran a cap behind a rate
    at a 429 per five answers). A wall (8 of 21 refused) still grows by GROW_MID."""
    def cut_after(refused: int) -> Pacer:
        pacer = Pacer("openai", None, "m")
        pacer.rate, pacer.window, pacer.last_cut, pacer.peak = 40.0, None, 98.0, 50.0
        _history(pacer, *[(98.5 + i * 0.02, 4, i >= refused) for i in range(20)])
        pacer.latencies.extend([0.45] * 10)
        clock.now = 99.0
        pacer.observe(_ticket(pacer, 98.95, depth=4), 429, {})
        return pacer
    few, wall = cut_after(2), cut_after(7)
    assert few.rate == pytest.approx(40.0 * 18 / 21) and few.growth == ratelimit.GROW
    assert wall.rate == pytest.approx(40.0 * 13 / 21) and wall.growth == ratelimit.GROW_MID


def test_a_least_cut_in_a_descent_does_not_say_the_rate_was_near_the_limit(clock):
    """0.2 s after a cut from a blind start, 19 of the 21 sent since were admitted (a few, sent
    while the rate was still coming down): the cut is the least (to 360 a second), but not a
    sign the rate is near the limit, so a wall of 429s next is a descent again, cut by the whole
    share refused, not at most halved."""
    pacer = Pacer("openai", None, "m")
    pacer.rate, pacer.window, pacer.first_cut, pacer.last_cut = 400.0, None, 98.0, 98.0
    _history(pacer, *[(98.0 + i * 0.01, 8, i != 5) for i in range(19)])
    clock.now = 98.2
    pacer.observe(_ticket(pacer, 98.19, depth=8), 200, {})
    pacer.observe(_ticket(pacer, 98.195, depth=8), 429, {})  # 19 of 21 admitted
    assert pacer.rate == pytest.approx(360.0) and pacer.cut_least is False
    _history(pacer, *[(98.2 + i * 0.005, 8, i < 4) for i in range(20)])
    clock.now = 98.35
    pacer.observe(_ticket(pacer, 98.31, depth=8), 429, {})  # 4 of 21 admitted since
    assert pacer.rate == pytest.approx(360.0 * 4 / 21)


def test_a_429_that_ends_the_headers_trust_cuts_the_rate_and_sets_no_cap(clock):
    """Headers that promised more than is given: the requests went out as they allowed (40 a
    second, 30 in flight), not as the slow start's window did (it held nothing back for a round
    trip), so the 429 that ends their trust says nothing of a cap on requests in flight. The
    rate is cut from the rate the requests went out at: halved, as the requests sent since the
    first refused are too few to tell a share (this one alone). A cap there would have held the
    rate unset while 429s came. With the window holding requests back, the same 429 sets a cap
    on trial."""
    pacer = Pacer("openai", None, "m")
    clock.now = 99.0
    pacer.observe(_ticket(pacer, 98.9), 200, _headers(6000, 5990, "20ms"))
    assert pacer.trusted is True
    pacer.window, pacer.successes, pacer.flight_held = 40, 40, 99.5  # 0.2 s ago: two round trips
    _history(pacer, *[(98.0 + i * 0.025, 30, True) for i in range(40)])
    for i in range(29):
        pacer.in_flight[100 + i] = _ticket(pacer, 99.0 + i * 0.025, depth=30)
    clock.now = 99.73
    told = {**_headers(6000, 5000, "20ms"), "retry-after-ms": "20"}
    assert pacer.observe(_ticket(pacer, 99.725, depth=30), 429, told) == 0.0
    assert pacer.trusted is False and pacer.cap is None and pacer.window is None
    assert pacer.rate == pytest.approx(20.0) and pacer.growth == 0.005
    held = Pacer("openai", None, "m")
    held.observe(_ticket(held, 98.9), 200, _headers(6000, 5990, "20ms"))
    held.window, held.successes, held.flight_held = 40, 40, 99.7
    _history(held, *[(98.0 + i * 0.025, 30, True) for i in range(40)])
    held.observe(_ticket(held, 99.725, depth=30), 429, told)
    assert held.trusted is False and held.cap == 30 and held.rate is None


def test_429s_too_many_while_following_the_headers_cut_the_rate_to_what_was_admitted(clock):
    """Headers that promise twice a fixed window's count: each window's worth goes out in a burst
    and ends in 429s. When they pass one in twenty answers, trust ends and the rate is cut as at
    a congestion event: the share admitted (45 of 50) of the rate the last requests went out at
    (a burst, 1,000 a second), and no faster than the server admitted requests over the whole
    history (45 in the second since the first was sent). Taken as it was sent, the rate let the
    next window's burst out as fast as before."""
    pacer = Pacer("openai", None, "m")
    pacer.trusted = True
    _history(pacer, *[(100.0 + i * 0.02, 8, True) for i in range(34)],
             *[(100.975 + i * 0.001, 20, i < 10) for i in range(15)])
    clock.now = 101.0
    pacer.observe(_ticket(pacer, 100.99, depth=20), 200, {})
    assert pacer.trusted is False
    assert pacer.signal()[1].startswith("5 of the last 50 answers were 429s while following")
    assert pacer.rate == pytest.approx(45.0)
    assert pacer.growth == ratelimit.GROW_MID and pacer.last_cut == 101.0 and pacer.window is None


def test_a_wait_of_every_request_is_no_part_of_the_rate_a_cut_starts_from(clock):
    """A sliding window's worth (150) went out in the first half second, then the headers held
    every request until the window began to slide open, 2.5 s later; the 15 let out at once then
    met 10 429s (the window frees requests as the first ones age out), which ends the headers'
    trust. The last 16 sends span the wait: taken as a rate, 6 a second (the old cut: 5.6 a
    second, where the server admits 50). Since the wait the requests went out as a burst, so
    the rate is the server's since the first request: 155 admitted in 3.01 s."""
    pacer = Pacer("openai", None, "m")
    pacer.trusted, pacer.window = True, None  # the slow start long over
    _history(pacer, *[(100.0 + i * 0.5 / 149, 31, True) for i in range(150)])
    pacer.last_send, pacer.hold_until = 100.5, 103.0
    burst = []
    for i in range(15):
        clock.now = 103.0 + i * 0.0005
        burst.append(_ticket(pacer))
        asyncio.run(pacer.acquire(burst[-1]))
    assert [t.sent_at for t in burst] == [103.0 + i * 0.0005 for i in range(15)]
    assert pacer.resumed == 103.0  # the first request sent after the wait
    for i, ticket in enumerate(burst[:-1]):
        pacer.release(ticket)
        pacer.history.append(Sent(ticket.sent_at, ticket.depth, i >= 10))
    clock.now = 103.01
    pacer.observe(burst[-1], 200, {})
    assert pacer.trusted is False and pacer.signal()[1].startswith("10 of the last 165 answers were 429s")
    assert pacer.rate == pytest.approx(155 / 3.01)


def test_the_first_cut_after_a_wait_of_every_request_starts_from_what_was_admitted(clock):
    """As above, with no headers to trust (a wait a 429 asked for): the first cut takes the share
    admitted since the first 429 (4 of 15) of the server's rate since the first request (154 in
    3.01 s), not of the last 16 sends' rate across the wait (6 a second: 1.6 a second after the
    cut) nor of the burst's since (2,000 a second)."""
    pacer = Pacer("openai", None, "m")
    pacer.window = None
    _history(pacer, *[(100.0 + i * 0.5 / 149, 31, True) for i in range(150)])
    pacer.last_send, pacer.hold_until = 100.5, 103.0
    burst = []
    for i in range(15):
        clock.now = 103.0 + i * 0.0005
        burst.append(_ticket(pacer))
        asyncio.run(pacer.acquire(burst[-1]))
    for i, ticket in enumerate(burst[:-1]):
        pacer.release(ticket)
        pacer.history.append(Sent(ticket.sent_at, ticket.depth, i >= 10))
    clock.now = 103.01
    pacer.observe(burst[-1], 429, {})
    assert pacer.rate == pytest.approx(4 / 15 * 154 / 3.01)


def test_429s_past_one_in_twenty_answers_while_following_the_headers_end_their_trust(clock):
    """The goal is at most one 429 per twenty successes: headers that let more through (each
    429 showing its budget spent, so each one foreseen) are not followed for the rest of the run.
    8 of 150 (5.6 %) ends their trust; 7 of 150 (4.9 %) does not, nor 4 of 50 (8 %, fewer than
    five: a start's burst)."""
    def following(refused: int, answers: int) -> Pacer:
        pacer = Pacer("openai", None, "m")
        pacer.trusted = True
        _history(pacer, *[(100.0 + i * 0.01, 8, i % 9 != 4 or i >= 9 * refused) for i in range(answers - 1)])
        clock.now = 102.0
        pacer.observe(_ticket(pacer, 101.9, depth=8), 200, {})
        assert sum(1 for h in pacer.history if not h.admitted) == refused
        return pacer
    assert following(8, 150).trusted is False
    assert following(7, 150).trusted is True
    assert following(4, 50).trusted is True


def test_requests_in_flight_count_as_admitted_only_once_out_longer_than_a_429_takes(clock):
    """The cut of the first test, with three more requests sent 0.01 s ago and still out: the
    last 429s took 0.05 s to come back, so they may yet be refused and tell nothing (the two
    out since 97.2 do count as admitted). Counted as admitted, the cut would be 21 of 24."""
    pacer = Pacer("openai", None, "m")
    pacer.rate, pacer.window, pacer.last_cut = 40.0, None, 90.0
    _history(pacer, *[(95.0 + i * 0.1, 2, True) for i in range(16)], (97.0, 2, False), (97.1, 2, False))
    pacer.refusal_times.extend([0.01, 0.05])
    for i, sent_at in enumerate((97.2, 97.21, 97.99, 97.99, 97.99)):
        pacer.in_flight[100 + i] = _ticket(pacer, sent_at)
    clock.now = 98.0
    pacer.observe(_ticket(pacer, 97.9, depth=3), 429, {})
    assert pacer.rate == pytest.approx(40 * 18 / 21)


def test_a_slow_starts_burst_is_cut_at_most_by_half_at_first(clock):
    """A slow start sent its window's worth at once (the last 16 in 0.015 s: 1,000 a second),
    and all 15 sent since the first refused were 429s (a window shut, or a budget spent). Cut by
    the whole share refused (to 50 a second), the rate of a burst lands far below any limit: the
    first cut is halved. Paced by headers for more than a round trip, the same 429s are a rate
    far over the limit, and are cut by the whole share."""
    def after_a_burst(flight_held: float) -> Pacer:
        pacer = Pacer("gemini", None, "m")
        pacer.window, pacer.cap, pacer.flight_held = None, 18, flight_held
        _history(pacer, *[(99.0 + i * 0.001, 18, i < 6) for i in range(20)])
        return pacer
    clock.now = 99.1
    for flight_held, factor in ((99.05, 0.5), (98.0, 0.05)):
        pacer = after_a_burst(flight_held)
        pacer.observe(_ticket(pacer, 99.02, depth=10), 429, {})
        assert pacer.rate == pytest.approx(factor * 15 / 0.015)
