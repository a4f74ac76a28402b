"""Pacing model requests to a provider's limits: one :class:`Pacer` per (provider, address, model).

Its rules, in the order a request meets them (``Client._send``, the client's one retry loop, is
the other half: how long a refused request waits, and how often a failed one goes again):

1. **A window on requests in flight**, as TCP paces its segments. Slow start: ``INITIAL_WINDOW``
   requests until the first answer, then one more per answer (twice as many each round trip).
   Past it, ``GROWTH`` more per answer (one per cent a round trip). Only answers to requests that
   found the window full grow it (RFC 7661), and never past ``--concurrency``. Once a 429 came,
   requests go out spread over the smoothed round trip (``srtt / (PACING x window)`` apart,
   RFC 9002 7.7): not in bursts that a limit enforced over a short period refuses, and 429s that
   come back at once do not let the refused go again faster than that.
2. **A 429 cuts the window** to ``BETA`` of itself, once a round trip: a 429 of a
   request sent less than a round trip after the last cut is that cut's congestion. Past the
   slow start, the cut goes no wider than the requests of the last round trip less the share
   refused (its lower ``1 - ALPHA`` bound): what the server admitted is what it admits. Below a
   window of one, one request at a time goes, the sends paced further apart.
3. **Each series of cuts is a test of whether the rate is to blame.** A limit refuses only what
   is sent past it: one that admitted ``1 - s`` of what went at some rate refuses, at ``c`` of that
   rate, at most ``q = 1 - (1 - s) / c`` (``s`` at its upper ``1 - ALPHA`` Clopper-Pearson bound).
   The answers before are all the series' before the test's first cut (the round trip before the
   series included, the round trip each cut takes to tell left out): one round trip of a small
   window bounds nothing (two 429s in three put ``s`` below 0.98 only), and a series started by a
   round trip that happened to have many refused would never clear. ``c`` is the rate measured
   since the test's first cut against theirs, and no less than ``BETA**m`` after ``m`` cuts: while
   the client's own work, not the window, holds its requests back, a cut does not lower the rate.
   When the 429s since are as many as would come with probability ``ALPHA`` at ``q``, and their
   share neither fell nor rose from the one before (Fisher's exact test, each way at ``ALPHA``),
   the rate is not their cause: the window goes back to where the series began, slow start
   resumes, and 429s stop cutting. While too few answers since could show a share fallen to ``q``
   (the same test's power), the test is not over: the next cut goes on with it, until its answers
   since are as many as those before (then they join them, and the next cut opens a new one). 429s
   cut again once the share in a round trip is clearly above the share the test saw (Fisher's,
   one-sided, asked once a round trip, the ``k``-th time at ``ALPHA / k**2``: false alarms in all
   below ``ALPHA * pi**2 / 6``). A series ends when the window grows back past the slow start. The
   slow start ends at a series' second cut, and its growth before then only moves where the
   series began: a limit it overshot must be cut to, not regrown past in the round trip a cut
   takes to tell (RFC 5681's ``ssthresh``).
4. **A budget spent holds every send**: while a reply's rate-limit headers (OpenAI's
   ``x-ratelimit-*``, Anthropic's ``anthropic-ratelimit-*``, the IETF draft's ``ratelimit``, read
   by ``orbench.llm.providers.transport.budgets``) show a budget spent, counting what went after
   that request, sending waits for the reset they name; and at a window of one or less, a 429 after a
   round trip in which nothing got in (a fixed window shut) holds sending as long as it asks. A
   request costs what providers count before generation: one request, its prompt's estimated
   tokens and ``max_tokens``. No hold outlasts ``--patience``.
5. ``--rpm`` is a token bucket of one: requests at least ``60 / rpm`` seconds apart.

Requests that are refused or fail leave the flight at once, and wait outside it.

Why multiplicative growth (Scalable TCP, Kelly 2003) and not TCP Reno's additive one: LLM limits
make small windows (50 requests a second at 50 ms replies is a window of 2.5), where one request
more per round trip is a third of the window and Reno's sawtooth has a third of a round trip's
requests refused; a one per cent step has one in thirty. The tunables: ``INITIAL_WINDOW`` 4,
RFC 5681's largest initial window (3.1); ``PACING`` 1.25, RFC 9002's ``N`` (7.7), so pacing
never holds the window below itself; ``GROWTH`` 0.01 and ``BETA`` 0.875, Scalable TCP's ``a`` and
``1 - b``; ``RTT_GAIN`` 1/8, the smoothed round trip's gain of RFC 6298 (2); ``ALPHA`` 0.05, the
usual significance level.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from contextvars import ContextVar
from dataclasses import dataclass

INITIAL_WINDOW = 4
PACING = 1.25
GROWTH = 0.01
BETA = 0.875
RTT_GAIN = 1 / 8
ALPHA = 0.05

_REPLIES: ContextVar[list | None] = ContextVar("orbench_rate_replies", default=None)


def request_costs(prompt: int, max_tokens: int) -> dict[str, float]:
    """Units of each budget one request uses, as providers count them before generation: one
    request, its ``prompt`` tokens (``orbench.llm.pricing.input_tokens``) and ``max_tokens``."""
    return {"requests": 1, "tokens": prompt + max_tokens, "input-tokens": prompt, "output-tokens": max_tokens}


def _log_choose(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(K >= k) for K ~ Binomial(n, p) (in logarithms: no overflow however many answers)."""
    if p <= 0 or p >= 1:
        return float(max(k, 0) <= (n if p >= 1 else 0))
    return sum(math.exp(_log_choose(n, i) + i * math.log(p) + (n - i) * math.log(1 - p))
               for i in range(max(k, 0), n + 1))


def share_bound(k: int, n: int, upper: bool) -> float:
    """The exact (Clopper-Pearson) one-sided ``1 - ALPHA`` bound on a share seen as ``k`` of ``n``."""
    low, high = 0.0, 1.0
    for _ in range(40):  # bisection, to 1e-12
        mid = (low + high) / 2
        beyond = 1 - binomial_tail(k + 1, n, mid) if upper else binomial_tail(k, n, mid)
        low, high = (mid, high) if (beyond > ALPHA) == upper else (low, mid)
    return float(upper) if (k >= n if upper else k <= 0) else (low + high) / 2


def fisher_tail(k: int, n: int, marked: int, total: int) -> float:
    """P(X >= k) for X the marked among ``n`` drawn from ``total`` of which ``marked`` are."""
    return sum(math.exp(_log_choose(marked, i) + _log_choose(total - marked, n - i) - _log_choose(total, n))
               for i in range(max(k, 0, n - total + marked), min(n, marked) + 1))


def not_the_rate(before: int, refused_before: int, after: int, refused_after: int, cut: float = BETA) -> bool | None:
    """Rule 3: whether ``refused_after`` 429s of ``after`` answers, sent at ``cut`` of the rate of
    ``before`` answers earlier in the series (``refused_before`` 429s), say that the rate is not
    their cause: more 429s than a limit that admitted what went before would leave, at a share that
    neither fell nor rose (Fisher's exact test, each way); ``None`` while too few answers would show
    a share fallen to what such a limit leaves, or nothing before was refused."""
    most = max(0.0, 1 - (1 - share_bound(refused_before, before, upper=True)) / cut) if before else 1.0
    refused, total, least = refused_before + refused_after, before + after, math.floor(after * most)
    if not refused_before or not after or 1 - fisher_tail(least + 1, after, refused_before + least, total) > ALPHA:
        return None
    moved = min(fisher_tail(refused_after, after, refused, total), 1 - fisher_tail(refused_after + 1, after, refused, total))
    return binomial_tail(refused_after, after, most) <= ALPHA and moved > ALPHA


@contextlib.contextmanager
def watching():
    """Collect the rate-limit budgets of the replies the SDK gets while the block runs (this task
    only); the transport hands in what each reply's headers report with :func:`note_reply`."""
    seen: list = []
    token = _REPLIES.set(seen)
    try:
        yield seen
    finally:
        _REPLIES.reset(token)


def note_reply(budgets: list) -> None:
    """Called by the transport with the budgets every reply's headers report, as ``(unit,
    remaining, seconds until reset)``, the unit one of :func:`request_costs`'."""
    seen = _REPLIES.get()
    if seen is not None:
        seen.extend(budgets)


@dataclass
class Ticket:
    """One request in flight: when it went, what it costs, what had been sent before it."""

    sent_at: float
    costs: dict
    units_before: dict
    full: bool  # it found the window full: its answer may grow the window


@dataclass
class _Series:
    """A series of cuts on trial (rule 3): answers and 429s of the requests of the round trip
    before its first cut, and of those sent since its last and since its first (but in the round
    trip after them)."""

    start: float
    span: float  # the round trip then
    window: float  # before the first cut
    counts: list  # answers and 429s: the round trip before; since the last cut; since the first
    at: float  # the last cut
    sent: float  # requests sent by the last cut
    cuts: int = 1


class Pacer:
    """Paces the requests to one (provider, address, model) by the rules of the module docstring.

    ``take``, ``wait_time``, ``admitted``, ``refused``, ``released`` and ``describe`` are its whole
    interface (``acquire`` waits as ``wait_time`` says, then takes); ``clock`` can be a test's."""

    def __init__(self, name: str = "", rpm: float | None = None, clock=time.monotonic,
                 longest_hold: float = math.inf, ceiling: float = math.inf):
        self.name, self.rpm, self.clock, self.longest_hold, self.ceiling = name, rpm, clock, longest_hold, ceiling
        self.window, self.slow_start, self.srtt = float(min(INITIAL_WINDOW, ceiling)), True, None
        self.in_flight, self.next_send, self.next_rpm, self.hold_until = 0, 0.0, 0.0, 0.0
        self.last_cut = self.last_test = -math.inf
        self.tests = 0  # of whether the share rose, since the rate was cleared
        self.last_admitted: float | None = None
        self.rate_to_blame, self.reference, self.series = True, [0, 0], None
        self.answers: deque = deque()  # (sent at, refused) of the last two round trips' answers
        self.sends: deque = deque()  # ... and the times of their sends
        self.units_sent: dict[str, float] = {}
        self.loop = None
        self.admissions = self.responses_429 = self.cuts = self.undone = self.holds = 0
        self.held = 0.0

    def wait_time(self) -> float:
        """Seconds until one more request may go (``math.inf``: until one leaves the flight)."""
        now = self.clock()
        if self.in_flight >= max(1.0, self.window):  # below one: one at a time, paced further apart
            return math.inf
        return max(0.0, self.next_send - now, self.next_rpm - now, self.hold_until - now)

    def take(self, costs: dict, full: bool = False) -> Ticket:
        """Book a request costing ``costs`` as sent now (``full``: it found the window full)."""
        now = self.clock()
        if self.srtt and self.responses_429:  # no bursts a limit would refuse, no storm of retries
            self.next_send = max(now, self.next_send) + self.srtt / (PACING * self.window)
        if self.rpm:
            self.next_rpm = max(now, self.next_rpm) + 60 / self.rpm
        ticket = Ticket(now, costs, dict(self.units_sent), full)
        for unit, cost in costs.items():
            self.units_sent[unit] = self.units_sent.get(unit, 0) + cost
        self.sends.append(now)
        self.in_flight += 1
        return ticket

    async def acquire(self, costs: dict) -> Ticket:
        """Wait until a request may go (first come, first served), then take it."""
        if asyncio.get_running_loop() is not self.loop:  # a Client may serve several, one after another
            self.loop, self.turn, self.freed, self.in_flight = asyncio.get_running_loop(), asyncio.Lock(), asyncio.Event(), 0
        full = self.turn.locked()  # others wait before it: the window holds them
        async with self.turn:
            started = self.clock()
            while (wait := self.wait_time()) > 0:
                full = full or wait == math.inf
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self.freed.wait(), None if wait == math.inf else wait)
            self.held += self.clock() - started if self.hold_until > started else 0.0
            return self.take(costs, full)

    def released(self, ticket: Ticket, budgets_seen=()) -> None:
        """The request left the flight with no word on the rate (an error, an overload); the
        budgets its reply's headers showed (rule 4)."""
        self.in_flight = max(0, self.in_flight - 1)
        if self.loop is not None:
            self.freed.set()
            self.freed = asyncio.Event()
        now = self.clock()
        for unit, remaining, reset in budgets_seen or ():
            sent_since = self.units_sent.get(unit, 0) - ticket.units_before.get(unit, 0)
            if remaining - sent_since < ticket.costs[unit] and reset is not None:
                self.holds += now + reset > self.hold_until
                self.hold_until = max(self.hold_until, now + min(reset, self.longest_hold))

    def admitted(self, ticket: Ticket, budgets_seen=()) -> None:
        """An answer: the round trip is timed and the window may grow (rule 1)."""
        self.released(ticket, budgets_seen)
        now = self.last_admitted = self.clock()
        self.srtt = now - ticket.sent_at if self.srtt is None else self.srtt + RTT_GAIN * (
            now - ticket.sent_at - self.srtt)
        self.admissions += 1
        self._count(ticket.sent_at, False, now)
        if ticket.full and now >= self.last_cut + self.srtt:  # not in the round trip a cut took to tell
            self.window = min(self.ceiling, self.window + (1 if self.slow_start else GROWTH))

    def refused(self, ticket: Ticket, wait: float, budgets_seen=()) -> None:
        """A 429, whose request waits ``wait`` seconds before it goes again (rules 2 to 4)."""
        self.released(ticket, budgets_seen)
        now = self.clock()
        self.responses_429 += 1
        self._count(ticket.sent_at, True, now)
        if self.window <= 1 and (self.last_admitted is None or now - self.last_admitted >= self.srtt):
            self.holds += now + wait > self.hold_until
            self.hold_until = max(self.hold_until, now + min(wait, self.longest_hold))
        if self.srtt is None:  # nothing admitted yet: no round trip to count cuts by, or to test
            self.window *= BETA
            return
        series = self.series
        if ticket.sent_at < self.last_cut + self.srtt:
            return  # the congestion the last cut answered, or met before it told
        if series and self.window >= series.window and not self.slow_start:
            series = self.series = None  # the window grew back: the series is over
        if series:  # the series before the test's first cut (sent over ``span + at - start``), and since
            answers, refused = (series.counts[i] + series.counts[i + 4] - series.counts[i + 2] for i in (0, 1))
            rate = (self.units_sent.get("requests", 0) - series.sent) / (now - series.at) * (series.span + series.at - series.start)
        verdict = series and not_the_rate(answers, refused, *series.counts[2:4], max(BETA ** series.cuts, rate / max(1, answers)))
        if verdict:
            self.series, self.rate_to_blame, self.undone, self.tests = None, False, self.undone + 1, 0
            self.reference = [answers + series.counts[2], refused + series.counts[3]]
            self.window, self.slow_start = max(self.window, series.window), True
        elif series or self.rate_to_blame or self._share_rose(now):
            self._cut(now, ticket.sent_at, verdict is not None or not series or series.counts[2] >= answers)

    def _count(self, sent_at: float, refused: bool, now: float) -> None:
        span = self.srtt or math.inf
        self.answers.append((sent_at, refused))
        for times in (self.answers, self.sends):
            while times and (times[0][0] if times is self.answers else times[0]) < now - 2 * span:
                times.popleft()
        series = self.series
        if series and series.start - series.span <= sent_at < series.start:
            series.counts[:2] = [series.counts[0] + 1, series.counts[1] + refused]
        elif series and sent_at >= series.at + series.span:  # since the last cut, and the first
            series.counts[2:] = [series.counts[2] + 1, series.counts[3] + refused, series.counts[4] + 1, series.counts[5] + refused]
        elif series and sent_at >= series.start + series.span:  # since the first
            series.counts[4:] = [series.counts[4] + 1, series.counts[5] + refused]

    def _cut(self, now: float, trigger: float, told: bool = True) -> None:
        """Rules 2 and 3: cut the window, and put the cut on trial (``trigger``: when the request
        of the 429 that set it off went, no part of the round trip before)."""
        span = self.srtt
        before = [refused for at, refused in self.answers if at >= now - span and at != trigger]
        window, sent = self.window * BETA, self.units_sent.get("requests", 0)
        if not self.slow_start:  # what the server admitted in the last round trip, at most
            last = sum(1 for at in self.sends if now - span <= at != trigger)
            window = min(window, last * (1 - share_bound(sum(before), len(before), upper=False)))
        if self.series is None or not self.series.counts[1]:  # a series starts (again)
            self.series = _Series(now, span, self.window, [len(before), sum(before), 0, 0, 0, 0], now, sent)
        else:  # 429s went on after a cut: the slow start is over
            series, self.slow_start = self.series, False  # (it began where the slow start got to)
            series.window, series.cuts = max(series.window, self.window), series.cuts + 1
            if told:  # a test that could not tell goes on over the next cut
                series.at, series.sent, series.counts[2:4] = now, sent, [0, 0]
        self.last_cut, self.window, self.rate_to_blame = now, window or self.window * BETA, True
        self.cuts += 1

    def _share_rose(self, now: float) -> bool:
        """Whether the share of 429s among the last round trip that is all back is clearly above
        the share that cleared the rate: Fisher's exact test, asked once a round trip, the ``k``-th
        time at ``ALPHA / k**2`` (so that all of them together raise a false alarm with a chance
        under ``ALPHA * pi**2 / 6``, however long the run)."""
        if now < self.last_test + self.srtt:
            return False
        self.last_test, self.tests = now, self.tests + 1
        last = [refused for at, refused in self.answers if now - 2 * self.srtt <= at < now - self.srtt]
        answers, refused = self.reference
        return fisher_tail(sum(last), len(last), refused + sum(last), answers + len(last)) <= ALPHA / self.tests ** 2

    def describe(self) -> dict:
        """What the meta file records: what the pacer followed and why, and its counts."""
        following, why = (("429s", "429s came at a share cutting the window did not lower: waited out, not cut")
                          if not self.rate_to_blame else
                          ("429s", "429s fell when the window on requests in flight was cut") if self.cuts else
                          ("headers", "rate-limit headers or a 429 said when sending could go on") if self.holds else
                          ("none", "no 429 came: paced by --concurrency alone"))
        return {"model": self.name, "following": following, "why": why, "window": round(self.window, 2),
                "rpm_cap": self.rpm, "admitted": self.admissions, "responses_429": self.responses_429,
                "cuts": self.cuts, "cuts_undone": self.undone, "holds": self.holds,
                "seconds_held": round(self.held, 3)}


class RateLimits:
    """The pacers of one ``Client``, one per (provider, address, model), and the run's counts."""

    def __init__(self, patience: float, rpm: float | None = None, concurrency: float = math.inf):
        self.patience, self.rpm, self.concurrency = patience, rpm, concurrency
        self.pacers: dict[tuple, Pacer] = {}
        self.overloaded = self.past_patience = 0
        self.waited = 0.0

    def pacer(self, provider: str, base_url: str | None, model: str) -> Pacer:
        if (provider, base_url, model) not in self.pacers:
            self.pacers[provider, base_url, model] = Pacer(f"{provider}/{model}", self.rpm, longest_hold=self.patience,
                                                           ceiling=self.concurrency)
        return self.pacers[provider, base_url, model]

    @property
    def responses_429(self) -> int:
        return sum(p.responses_429 for p in self.pacers.values())

    @property
    def paced(self) -> bool:
        """Whether any request waited for a provider's limit (a 429, an overload, a hold)."""
        return bool(self.responses_429 or self.overloaded or any(p.held for p in self.pacers.values()))

    def describe(self) -> list[dict]:
        return [p.describe() for p in self.pacers.values()]

    def summary(self) -> str | None:
        """The summary line's part, when the run was paced by a provider's limit."""
        if not self.paced:
            return None
        said = " and ".join(text for count, text in ((self.responses_429, f"{self.responses_429} 429 answers"),
                                                     (self.overloaded, f"{self.overloaded} overload answers")) if count)
        past = f"{self.past_patience} past --patience, " if self.past_patience else ""
        held = sum(p.held for p in self.pacers.values()) + self.waited
        return f"paced by the provider's rate limit ({said + ' waited out, ' if said else ''}{past}{held:.1f}s waited)"
