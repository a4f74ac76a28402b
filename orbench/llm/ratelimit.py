"""Pacing to a provider's limits, learned from its 429s: the pacer, its tickets, and the transport hook.

Every HTTP provider's SDK sends through ``orbench.llm.providers.transport.WholeRequestTimeout``,
which hands each attempt to :func:`send`. When the ``Client`` is sending a model request it
attaches a :class:`Ticket` (the request's estimated cost and the :class:`Pacer` of its provider,
base URL and model) with :func:`attached`. A 429 is then waited out and the same request sent
again, and so is a 503/529 "overloaded" answer, without spending the SDK's retries, until
``--patience`` seconds have passed since the request's first such answer. Once a rate or a cap
paces the requests, a 429 among few goes back in line at once (the pacer's limits space it);
among many (``CLEARLY_OVER`` of the last ``LATELY`` answers) it waits as its
``retry-after`` says (Gemini sends none: its body's ``RetryInfo`` says it instead), until
``ADMITTED_SINCE`` requests sent after it got in (a flat ``retry-after: 60`` is no limit's) or,
with nothing out and nothing sent for a while, as the one request that asks.

One pacer per (provider, base URL, model) follows these rules, in this order of authority:

1. **The 429s are the truth.** Headers are a hint: while every 429 comes with headers showing
   the budget it needed spent, the pacer follows the headers (below). A 429 that finds room in
   every budget its headers report (or reports none), or 429s more often than one per twenty
   answers while following the headers, ends that trust for the rest of the run, and the rate
   is cut: at such a 429 unless the slow start's window held the requests back (the number in
   flight was the headers' doing, not a cap's); at too many 429s to the share admitted of the
   rate sent, and no faster than the server admitted requests meanwhile (the headers may have
   let a window's worth out at once). The meta file says which signal the pacer ended up
   following and why.
2. **A cap on requests in flight** is learned from where the 429s start: when every 429 of the
   recent past came with more than C requests in flight and requests at C keep being admitted
   (``cap_from``), at most C are sent at once, and one request above C is tried now and then
   (after ``PROBE_EVERY`` answers, twice as long after each refused try). The slow start's
   first 429 sets a cap on trial (the number then in flight less one, not below the most in
   flight at an admitted request: requests may reach the server out of order); a 429 with
   fewer out, a number never admitted, lowers it to that number less one (the 429s of a burst
   come back in any order), a 429 with the cap reached while out fails the trial (one less),
   and only a request sent since the cap was set confirms it.
3. **Otherwise a 429 cuts the rate** (requests per second), once per congestion event (a 429
   of a request sent after the last cut), from the rate the requests went out at (since the
   last wait of every request, and then no faster than the server admitted them since the
   first: after a wait they go out at once, a burst): to the share of the requests sent since
   the last cut that the server admitted (when over its limit, that
   share of the rate sent is the rate it admits; one still in flight counts as admitted once
   out longer than the last 429s took to come back), kept between ``HALVE`` and ``CUT``
   (``cut_factor``). The first cut counts from the first request refused (those before met a
   budget not yet spent), and is halved when too few tell the share. It goes by the whole
   share refused, down to ``DEEPEST``, when the requests went out at a steady rate (headers
   that promised too much), not in a slow start's bursts or as a cap let them out; so does a
   cut when 429s come again within ``DESCENT_TRIPS`` round trips of a cut (a blind start far
   over the limit, still coming down) and at least ``MEASURED_AFTER`` were sent since it,
   unless that cut was the least and not itself in such a descent (the rate was near the
   limit: a wall of 429s then is a fixed window that shut, or a limit that fell). 429s below the
   last cut's rate, about as many as then, are not the rate's doing and cut nothing; more than
   ``CUT_ROSE`` times as many are. When nothing sent in a round trip since the last cut got
   through, and none sent before the 429 is still out (a fixed window shut until it reopens),
   every request waits instead, for ``SHUT_WAIT`` of the time nothing has got through (at least
   two replies' time, or as long as a Gemini 429's body says if longer), until one sent since
   gets in; the next cut then takes the share admitted times the share of the time the requests
   were not all waiting (they went out in bursts), and keeps the rate no faster than the server
   admitted requests since the first cut (once ``MEASURED_AFTER`` were: none admitted tells
   when a window reopens, not a rate). The rate grows by ``GROW`` per answer while it is what
   holds requests back (at a learned cap too), by ``GROW_MID`` after the first cut, a cut in a
   descent with ``CLEARLY_OVER`` of its requests refused, or after such a wait (after a wait,
   only up to ``CUT`` of the rate cut: the window shut at that rate, and growing fast past it
   shut the next windows too), and by ``GROW_FAST`` after any other halving cut (the limit may
   be well above). Past the rate last cut, with no 429 since (the limit rose: another job on
   the key ended), the growth doubles every ``ACCELERATE`` answers, up to ``GROW_MID``.
4. **Headers, while trusted**, form a token bucket per budget (requests, tokens, ...): capacity
   ``limit``, refill ``(limit - remaining) / reset``, level re-read from ``remaining`` on every
   reply minus what was sent since. A request waits until its budgets cover it (tokens counted
   as providers count them before generation: prompt characters / 4 plus ``max_tokens``); a
   429 they foresaw holds every request as told (``retry-after-ms``, ``retry-after`` but no
   longer than the exhausted budgets' refill needs: its whole seconds are coarse, the exhausted
   budget's refill or reset) and cuts the refill estimate by ``HEADER_CUT``.
5. **Slow start**: until the first success only ``SLOW_START`` requests go out, then ``RAMP``
   more per success (the number in flight triples each round trip), one while headers are
   believed (a start that outgrows a short-period limit's burst behind them is a 429 per
   request over it, against the tighter budget of 429s that carry headers, and read as a cap),
   until a 429 says where the limit is. Once a 429 came, its requests go out spread over a
   reply's time, not in bursts.
6. **Overload is not a rate limit**: a 503/529 answer makes that request wait (exponential
   backoff with jitter) and changes nothing else; it is counted apart from the 429s.
7. ``--rpm`` is a fixed cap on the rate.

The headers are read, and their budgets kept, by ``orbench.llm.limit_headers``; whether an
address answers at all is ``orbench.llm.reachability``'s to tell (:func:`send` reports to it).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import re
import statistics
import time
from collections import deque
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import NamedTuple

from orbench.llm.limit_headers import Bucket, read_limits, resource_kind, retry_after
from orbench.llm.reachability import Reachability, is_connect_failure

DEFAULT_PATIENCE = 600.0
OVERLOAD_STATUSES = frozenset({503, 529})
SLOW_START = 4         # requests in flight before the first success, then RAMP more per success
RAMP = 2               # (the number in flight triples each round trip); one while headers are believed
CUT = 0.9              # the least cut of the rate at a 429: to this share of the rate sent
HALVE = 0.5            # the cut when too few requests tell how far over the limit they went
DEEPEST = 0.05         # the deepest cut: a blind start may have gone far over the limit
MEASURED_AFTER = 10    # requests since the last cut that tell it
CLEARLY_OVER = 0.25    # a share of 429s that always cuts the rate
CUT_FELL_SHORT = 0.9   # below the last cut's rate, 429s at this share of the last cut's or more
                       # did not fall with it: the rate is not to blame, it is not cut again ...
CUT_ROSE = 1.5         # ... unless they rose above this multiple of the last cut's share
GROW = 0.001           # rate growth per answer while the rate is what holds requests back
GROW_FAST = 0.05       # ... after a halving cut (but the first): it may have gone far below the limit
GROW_MID = 0.005       # ... after the first cut, a cut in a descent (CLEARLY_OVER 429s within
                       # DESCENT_TRIPS of the last cut) or after a wait with nothing through
ACCELERATE = 50        # answers past the rate cut last in which the growth doubles (to GROW_MID)
DESCENT_TRIPS = 3      # round trips
SHUT_WAIT = 0.5        # a wait for a shut window: this share of the time it has been shut
RECENT_SENDS = 16      # the requests whose spacing tells the rate they went out at
HISTORY = 256          # outcomes remembered: send time, requests in flight, admitted or not
LATELY = 32            # the last answers whose share of 429s tells a storm from a stray 429
ADMITTED_SINCE = 3     # requests sent after a 429 and admitted that end its request's wait
PROBE_EVERY = 50       # answers between tries above a learned concurrency cap
PROBE_MAX = 800
HEADER_CUT = 0.85      # the headers' refill estimate after a 429 they foresaw
DISTRUST_SHARE = 0.05  # 429s per answer, while following the headers, that end their trust
_MAX_SLEEP = 0.5       # re-check the gates at least this often while waiting
_MIN_RATE = 1 / 60     # requests per second the rate is never cut below
_BACKOFF = (0.25, 8.0)       # a 429 with nothing to go on: first and longest wait, seconds
_OVERLOAD_BACKOFF = (0.5, 30.0)  # from one reply's time once known

_CURRENT: ContextVar[Ticket | None] = ContextVar("orbench_rate_ticket", default=None)

clock = time.monotonic


# -- tickets ---------------------------------------------------------------------------------

class Sent(NamedTuple):
    """What the pacer remembers of one answered request."""

    sent_at: float
    depth: int       # requests in flight when it was sent, itself included
    admitted: bool   # answered (not a 429)


@dataclass
class Ticket:
    """One model request on its way: its costs, its pacer, its patience, its address's health."""

    pacer: Pacer
    costs: dict[str, float]
    patience: float = DEFAULT_PATIENCE
    reach: Reachability | None = None
    sent_at: float = 0.0
    depth: int = 0             # requests in flight when it was sent, itself included
    peak: int = 0              # ... and the most while it was out
    seq: int = 0
    probe: bool = False        # sent above the learned concurrency cap, to see if it still holds
    rate_bound: bool = False   # it waited for the rate: growing the rate would have sent it sooner
    sent_before: dict = field(default_factory=dict)
    first_wait: float | None = None  # its first 429 or overload answer
    not_before: float = 0.0
    refused_at: float | None = None  # when its wait is a 429's: the time of that 429
    refused: int = 0
    overloads: int = 0

    def cost(self, resource: str) -> float:
        return self.costs.get(resource_kind(resource), 0.0)


def request_costs(prompt_chars: int, max_tokens: int) -> dict[str, float]:
    """Units of each budget one request uses, as providers count them before generation."""
    prompt = math.ceil(prompt_chars / 4)
    return {"requests": 1.0, "tokens": float(prompt + max_tokens), "input-tokens": float(prompt),
            "output-tokens": float(max_tokens)}


# -- what the 429s tell ----------------------------------------------------------------------

def cut_factor(admitted: int, refused: int, deepest: float = HALVE, open_share: float = 1.0) -> float | None:
    """The factor a 429 cuts the rate by, from what was admitted and refused of the requests
    sent since the last cut (this 429 included): the admitted share (over its limit, the server
    admits that share of the rate sent) times ``open_share``, the share of that time the requests
    were not all held by a wait (they went out at the rate only then), between ``deepest``
    (``HALVE``, or ``DEEPEST`` while the rate is still coming down from a blind start) and
    ``CUT``; None when fewer than ``MEASURED_AFTER`` requests tell the share."""
    sent = admitted + refused
    return min(CUT, max(deepest, admitted / sent * open_share)) if sent >= MEASURED_AFTER else None


def sent_rate(times, count: int = RECENT_SENDS) -> float | None:
    """Requests per second over the last ``count`` send times (None for fewer than two, or
    all at once)."""
    recent = sorted(times)[-count:]
    if len(recent) < 2 or recent[-1] <= recent[0]:
        return None
    return (len(recent) - 1) / (recent[-1] - recent[0])


def cap_from(outcomes, latency: float = 0.0) -> int | None:
    """The concurrency cap that explains ``outcomes`` (:class:`Sent`), or None: at least three
    429s, sent over more than one ``latency`` (not one burst), all with more than C requests in
    flight, at least half of the requests above C refused, and a request at C admitted after the
    first 429 (a budget run dry would have refused it too)."""
    refused = [h for h in outcomes if not h.admitted]
    if len(refused) < 3 or min(h.depth for h in refused) < 2:
        return None
    cap = min(h.depth for h in refused) - 1
    first = min(h.sent_at for h in refused)
    if max(h.sent_at for h in refused) - first <= latency:
        return None
    at_cap = any(h.admitted and h.depth == cap and h.sent_at > first for h in outcomes)
    above = sum(1 for h in outcomes if h.depth > cap)
    return cap if at_cap and 2 * len(refused) >= above else None


def backoff(attempt: int, first: float, longest: float) -> float:
    """Exponential backoff with jitter: about ``first`` x 2^(attempt - 1), at most ``longest``."""
    return min(longest, first * 2 ** min(attempt - 1, 16) * random.uniform(0.5, 1.5))


# -- the pacer -------------------------------------------------------------------------------

class Pacer:
    """Paces the requests to one (provider, base URL, model); the rules are in the module docstring."""

    def __init__(self, provider: str, base_url: str | None, model: str, rpm: float | None = None):
        self.provider, self.base_url, self.model = provider, base_url, model
        self.fixed_rate = rpm / 60 if rpm else None
        # What the headers say, and whether they are still believed (None: none seen).
        self.buckets: dict[str, Bucket] = {}
        self.style: str | None = None
        self.trusted: bool | None = None
        self.distrust: str | None = None
        self.scale = 1.0
        # What the 429s taught: a rate (requests per second), a cap on requests in flight.
        self.rate: float | None = None
        self.growth = GROW_FAST  # per answer: fast until a cut finds the limit close by
        self.regrow_to = math.inf  # ... up to this rate, GROW above it
        self.cap: int | None = None
        self.cap_since = -math.inf  # when the cap was last set
        self.window: int | None = SLOW_START  # slow start: requests in flight allowed
        self.spread = False  # ... sent spread over a reply's time, since a 429 came during it
        self.probe_every, self.probe_at, self.probe_streak = PROBE_EVERY, PROBE_EVERY, 0
        self.next_start = self.last_send = 0.0
        self.hold_until = 0.0
        self.resumed = -math.inf  # the first request sent after the last wait of every request
        self.last_cut = -math.inf  # the last cut of the rate, or wait of every request
        self.first_cut = math.inf
        self.peak, self.cut_share = math.inf, 1.0  # the rate cut last, and the share of 429s then
        self.above = 0  # answers since the rate grew past the rate cut last, with no 429 since
        self.cut_least = False  # whether the last cut was the least (CUT): the rate was near the limit
        self.first_answer = math.inf
        self.cap_holds = 0  # requests the cap held back (a cap never reached is not what paced)
        self.flight_held = -math.inf  # when the slow start's window or a cap last held a request back
        self.cap_trial = False  # raised after tries above it passed, and not yet confirmed
        self.shut = 0  # round trips in a row in which nothing got through
        self.spell_start: float | None = None  # since when nothing got through (sent at), if so
        self.history: deque[Sent] = deque(maxlen=HISTORY)
        self.latencies: deque = deque(maxlen=32)
        self.refusal_times: deque = deque(maxlen=32)  # seconds a 429 took to come back
        self.in_flight: dict[int, Ticket] = {}
        self._seq = 0
        self._loop = None
        self._turn = asyncio.Lock()  # requests pass the gates one at a time, first come first served
        self._freed = asyncio.Event()
        # For the meta file and the summary.
        self.successes = 0
        self.responses_429 = 0
        self.responses_overloaded = 0
        self.resent = 0
        self.gave_up = 0
        self.waited = 0.0       # seconds requests spent held by this pacer's limits
        self.waited_requests = 0

    # -- sending ---------------------------------------------------------------------------
    async def acquire(self, ticket: Ticket) -> None:
        """Wait until the request may go, then book it."""
        await self._own_wait(ticket)
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # a Client may serve several event loops, one after another
            self._loop, self._turn, self._freed = loop, asyncio.Lock(), asyncio.Event()
            self.in_flight.clear()
        ticket.rate_bound = False
        async with self._turn:
            started = now = clock()
            limited = False
            while True:
                wait, by_limit = self._wait(ticket, now)
                if wait <= 0:
                    break
                limited = limited or by_limit
                await self._nap(wait)
                now = clock()
            if limited and now - started > 0.001:
                self.waited += now - started
                self.waited_requests += 1
            self._book(ticket, now)

    async def _own_wait(self, ticket: Ticket) -> None:
        """Sleep out the request's own wait (a 429's ``retry-after``, an overload backoff). A
        429's ends early once ``ADMITTED_SINCE`` requests sent after it were admitted (the server
        has room, whatever the wait said: some gateways send a flat ``retry-after: 60`` whatever
        the limit, and the pacer's own limits space the request from then on), or when nothing
        has been sent or is out for ``_BACKOFF``'s longest wait (no answer will come to tell:
        one request at a time asks, as a shut window's wait would)."""
        while (left := ticket.not_before - clock()) > 0:
            if ticket.refused_at is not None:
                admitted = sum(1 for h in self.history if h.admitted and h.sent_at > ticket.refused_at)
                if admitted >= ADMITTED_SINCE:
                    return
                if not self.in_flight and clock() - max(self.last_send, ticket.refused_at) >= _BACKOFF[1]:
                    return
            await asyncio.sleep(min(left, self.latency or _MAX_SLEEP, _MAX_SLEEP))

    def _wait(self, ticket: Ticket, now: float) -> tuple[float, bool]:
        """Seconds until the request may go (at most a nap: a reply may change it), and whether
        a limit (not the slow start) is what holds it."""
        waits = [self.hold_until - now]
        rate = self.send_rate
        if rate:
            waits.append(self.next_start - now)
            ticket.rate_bound = ticket.rate_bound or (self.next_start > now and rate == self.rate)
        if self.trusted:  # a budget only a 429 can tell about: one request alone asks
            waits += [b.wait(ticket.cost(n), now, self.scale) for n, b in self.buckets.items()]
            waits = [w if w < math.inf else (_MAX_SLEEP if self.in_flight else 0.0) for w in waits]
        room = self._room(now)
        if room > 0:
            self.flight_held = now
            self.cap_holds += self.window is None
        return max(*waits, room), room <= 0 or self.window is None

    def _room(self, now: float) -> float:
        """Seconds until one more request may be in flight (``_MAX_SLEEP``: until one leaves):
        the slow start's window (its requests spread over a reply's time once a 429 came: a
        limit enforced over a short period refuses a burst however few are in flight, and at 1 s
        a reply its 429s read as a cap of one or two) or the learned cap, plus one try above the
        cap when it is due.
        The try goes a cap's share of a reply's time after the last request, not in a burst: a
        rate limit enforced over a short period would refuse a burst whatever the number in flight."""
        limit = self.window if self.window is not None else self.cap
        if limit is None or len(self.in_flight) < limit:
            if self.window is not None and self.latencies and self.spread:
                return max(0.0, self.last_send + self.latency / self.window - now)
            return 0.0
        if (self.cap is not None and len(self.in_flight) == self.cap and self.successes >= self.probe_at
                and not any(t.probe for t in self.in_flight.values())):
            return max(0.0, self.last_send + self.latency / self.cap - now)
        return _MAX_SLEEP

    @property
    def latency(self) -> float | None:
        """Seconds an admitted request takes to be answered: the median of the last ones (None
        before the first)."""
        return statistics.median(self.latencies) if self.latencies else None

    @property
    def send_rate(self) -> float | None:
        """Requests per second allowed now: the learned rate, capped by ``--rpm``."""
        rates = [r for r in (self.rate, self.fixed_rate) if r]
        return min(rates) if rates else None

    async def _nap(self, seconds: float) -> None:
        """Sleep up to ``seconds``, waking early when a request leaves the flight."""
        freed = self._freed
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(freed.wait(), min(seconds, _MAX_SLEEP))

    def _book(self, ticket: Ticket, now: float) -> None:
        rate = self.send_rate
        if rate:  # a wake-up late by less than half a gap keeps the beat; after a pause, from now
            late = now - self.next_start
            self.next_start = (self.next_start if late < 0.5 / rate else now) + 1 / rate
        limit = self.cap if self.window is None else self.window
        ticket.probe = limit is not None and len(self.in_flight) >= limit
        if self.trusted:
            for name, bucket in self.buckets.items():
                bucket.take(ticket.cost(name), now, self.scale)
                ticket.sent_before[name] = bucket.sent
        if self.last_send < self.hold_until <= now:
            self.resumed = now
        ticket.sent_at = self.last_send = now
        ticket.depth = ticket.peak = len(self.in_flight) + 1
        for other in self.in_flight.values():
            other.peak = max(other.peak, ticket.depth)
        self._seq += 1
        ticket.seq = self._seq
        self.in_flight[ticket.seq] = ticket

    def release(self, ticket: Ticket, *, refund: bool = False) -> None:
        """The request left the flight without an answer to learn from; ``refund`` when it never
        reached the provider (its budget units are given back)."""
        if self.in_flight.pop(ticket.seq, None) is not None:
            self._freed.set()
            self._freed = asyncio.Event()
        if refund:
            for name, bucket in self.buckets.items():
                if name in ticket.sent_before:
                    bucket.refund(ticket.cost(name))

    # -- answers ---------------------------------------------------------------------------
    def observe(self, ticket: Ticket, status: int, headers, told_in_body: float | None = None) -> float | None:
        """Take in a reply; for a 429, the seconds that request waits before it is sent again,
        else None. ``told_in_body``: the wait a 429's body asks for (Gemini's ``RetryInfo``),
        taken when no header asks for one."""
        now = clock()
        earlier = [t for seq, t in self.in_flight.items() if seq < ticket.seq]
        self.release(ticket)
        readings = self._read(ticket, headers, earlier, now)
        if status != 429:
            if 200 <= status < 300:
                self._admitted(ticket, now)
            return None
        self.responses_429 += 1
        self.above = 0  # at the limit, whether or not this 429 cuts the rate
        self.spread = True
        ticket.refused += 1
        self.history.append(Sent(ticket.sent_at, ticket.depth, False))
        self.refusal_times.append(now - ticket.sent_at)
        told, reopens_in = retry_after(headers), None
        if told is None:  # only a wait in the body may also hold a shut window (see _cut)
            told = reopens_in = told_in_body
        if self.trusted and self._foreseen(ticket, readings):
            return self._spent(ticket, readings, told, now, whole=headers.get("retry-after-ms") is None)
        if self.trusted:
            self._stop_trusting(ticket, readings)
            # The headers set the number in flight, not the slow start's window: it tells
            # nothing of a cap. The rate is cut (and a cap, if there is one, found from the
            # 429s to come).
            if self.window is not None and self._flight_idle(now):
                self.window = None
        if told == 0 and self._refused_share(LATELY // 2) < CLEARLY_OVER:
            # "Again at once": not a server pacing us, unless its 429s are that many (of at least
            # half of LATELY answers: two of a run's first four answers are no storm).
            return 0.0
        self.window = None if self.window is None else max(1, min(self.window, len(self.in_flight)))
        if not self._capped(ticket):
            self._cut(ticket, now, reopens_in)
        return self._again_in(ticket, told)

    def _again_in(self, ticket: Ticket, told: float | None) -> float:
        """Seconds a refused request waits before it is sent again: none once a rate or a cap
        paces the requests and 429s are few (a stray 429 at the limit's edge: waiting as told
        would not ease the server, others take its turn, and at a run's end it only adds the
        wait, Anthropic's whole seconds among them), else as told, else a backoff."""
        if (self.rate or self.cap) and (told is None or self._refused_share() < CLEARLY_OVER):
            return 0.0
        return told if told is not None else backoff(ticket.refused, *_BACKOFF)

    def _read(self, ticket: Ticket, headers, earlier: list, now: float) -> dict:
        readings, style = read_limits(headers)
        if not readings:
            return readings
        self.style = self.style or style
        if self.trusted is None:
            self.trusted = True
        for name, reading in readings.items():
            bucket = self.buckets.get(name)
            if bucket is None:
                bucket = self.buckets[name] = Bucket()
                ticket.sent_before[name] = 0.0  # first heard of now: all later sends are unknown to it
            bucket.observe(reading, ticket.sent_at, ticket.sent_before.get(name, bucket.sent), now,
                           sum(t.cost(name) for t in earlier))
        return readings

    def _admitted(self, ticket: Ticket, now: float) -> None:
        if not self.successes:
            self.first_answer = now
        if self.spell_start is not None and ticket.sent_at >= self.spell_start:  # the window reopened
            self.spell_start = None
        self.successes += 1
        self.history.append(Sent(ticket.sent_at, ticket.depth, True))
        self.latencies.append(now - ticket.sent_at)
        if self.window is not None and self.cap is None:
            self.window += 1 if self.trusted else RAMP
        if ticket.probe and self.cap is not None:  # admitted above the cap: try again at once,
            self.probe_at, self.probe_streak = self.successes, self.probe_streak + 1
            if self.probe_streak >= 2:  # and twice in a row is a higher cap (on trial), or, with
                self.probe_streak = 0    # a rate limit found meanwhile, none: the 429s were the rate's
                self.cap, self.cap_trial = (None, False) if self.rate else (self.cap + 1, True)
        elif self.cap is not None and ticket.depth == self.cap and ticket.sent_at >= self.cap_since:
            # Confirmed only by a request sent since it was set: one sent alongside the 429 that
            # set it may have got in while a reply was on its way (one fewer in flight there).
            self.cap_trial = False
        if (not ticket.probe and self.rate and ticket.rate_bound
                and (not self.fixed_rate or self.rate < self.fixed_rate)):
            # Held by the rate (at the cap too): it may be higher.
            growth = self.growth if self.rate < self.regrow_to else GROW
            if self.rate > self.peak:  # past the rate last cut with no 429 since: the limit rose
                self.above += 1        # (another job on the key ended): faster and faster
                growth = min(GROW_MID, max(growth, GROW * 2 ** (self.above / ACCELERATE)))
            self.rate *= 1 + growth
        if (self.cap and self.rate and len(self.history) == HISTORY
                and all(h.depth < self.cap for h in self.history)):
            self.cap = None  # not reached in all that time, under a rate: forgotten (found again if real)
        if self.trusted and len(self.history) >= 50:
            refused = sum(1 for sent in self.history if not sent.admitted)
            if refused >= 5 and refused > DISTRUST_SHARE * (len(self.history) - refused):
                self._stop_trusting(ticket, None, refused)
                # A congestion event: the rate is cut to the share admitted of the rate the
                # requests went out at, and no faster than the server admitted them in all that
                # time (the headers may have let them out in bursts: a window's worth at once).
                admitted = len(self.history) - refused
                self.rate = max(_MIN_RATE, min(self._sent_rate() * admitted / len(self.history),
                                               self._admitted_since_first(now)))
                self.growth, self.window = GROW_MID, None
                self.last_cut, self.first_cut = now, min(self.first_cut, now)

    def _refused_share(self, least: int = 1) -> float:
        """The share of 429s among the last ``LATELY`` answers, or among ``least`` when fewer came
        (a storm after many answers admitted is a storm, however few 429s the whole history holds)."""
        recent = list(self.history)[-LATELY:]
        return sum(1 for h in recent if not h.admitted) / max(least, len(recent))

    def _foreseen(self, ticket: Ticket, readings: dict) -> bool:
        """Whether the 429's own headers show a budget too low for the request."""
        return any(r.remaining is not None and r.remaining < max(1.0, ticket.cost(name))
                   for name, r in readings.items())

    def _spent(self, ticket: Ticket, readings: dict, told: float | None, now: float, whole: bool = False) -> float:
        """A 429 the headers foresaw: every request waits as told (a ``retry-after`` in ``whole``
        seconds no longer than the budgets' refill needs: Anthropic's "1" held every request a
        second where a sliding log of 48 a second frees one in 21 ms); the refill estimate is cut."""
        self.window = None
        if ticket.sent_at > self.last_cut:  # one cut per congestion event
            self.last_cut = now
            self.scale = max(0.05, self.scale * HEADER_CUT)
            for bucket in self.buckets.values():
                if bucket.level is not None:
                    bucket.level, bucket.at = min(bucket.level, 0.0), now
        waits = []
        for name, reading in readings.items():
            rate = self.buckets[name].rate
            if reading.remaining is not None and reading.remaining < max(1.0, ticket.cost(name)):
                waits.append(ticket.cost(name) / (rate * self.scale) if rate else reading.reset)
        known = [w for w in waits if w is not None]
        if told is not None:  # a budget with no refill known is full again then
            for bucket in self.buckets.values():
                if not bucket.rate:
                    bucket.full_at = now + told
            if whole and known:
                told = min(told, max(known))
        else:
            told = min(max(known), 60.0) if known else backoff(ticket.refused, *_BACKOFF)
        self.hold_until = max(self.hold_until, now + told)
        return told

    def _stop_trusting(self, ticket: Ticket, readings: dict | None, refused: int = 0) -> None:
        self.trusted = False
        if readings is None:
            self.distrust = (f"{refused} of the last {len(self.history)} answers were 429s while "
                             f"following the headers' budgets")
            return
        shown = {name: r.remaining for name, r in readings.items() if r.remaining is not None}
        if shown:
            room = ", ".join(f"{v:g} {name}" for name, v in sorted(shown.items()))
            self.distrust = f"a 429 came while its headers showed {room} remaining"
        else:
            self.distrust = "a 429 came without the rate-limit headers the other answers carry"

    def _capped(self, ticket: Ticket) -> bool:
        """Whether a cap on requests in flight explains this 429 (then the rate is not cut)."""
        if self.window is not None and self.successes:
            # The slow start's first 429 after an answer: the number in flight then, less one, is
            # the cap until a 429 within it says a rate is to blame too (or tries above it pass);
            # not below the most in flight when a request was admitted: requests reach the server
            # in another order than they were sent (one that opens a connection comes late).
            self._hold_cap(max(ticket.depth - 1, self._most_admitted()))
            self.cap_trial = True  # until confirmed: a 429 with it reached while out fails it
            return True
        if self.cap is None:
            # Not the blind first requests: sent at once, they meet a short-period limit as a cap.
            cap = cap_from([h for h in self.history if h.sent_at >= self.first_answer],
                           self.latency or 0.0)
            if cap is None:
                return False
            self._hold_cap(cap)
            self.rate = None  # any cut so far was the cap's doing
            return True
        if ticket.probe:  # the cap still holds: try again twice as late
            self.probe_streak = 0
            self.probe_every = min(PROBE_MAX, self.probe_every * 2)
            self.probe_at = self.successes + self.probe_every
            return True
        if self._most_admitted() <= ticket.depth - 1 < self.cap:
            # Refused with fewer out than the cap, and never admitted with that many out (sent
            # alongside the 429 that set the cap, their 429s answered in any order; or sent
            # since a failed trial lowered it by one): the cap is lower.
            self.cap = ticket.depth - 1
            return True
        if self.cap_trial and ticket.depth <= self.cap <= ticket.peak and self.cap > 1:
            # Refused with the cap on trial reached while it was out: the cap failed its trial.
            self.cap, self.cap_trial, self.cap_since = self.cap - 1, False, clock()
            return True
        return ticket.depth > self.cap  # sent when the cap was higher; within it, the rate is to blame

    def _cut(self, ticket: Ticket, now: float, reopens_in: float | None = None) -> None:
        """A 429 from too fast a rate: cut it, once per round trip. When nothing sent since the
        last cut got through (a window closed, a budget spent for a while), no rate would: every
        request waits instead (``_shut_wait``, or ``reopens_in`` if longer: the wait a Gemini
        429's body names, its quota's own count of the time left, often tens of seconds, each
        try before it one more 429; not a header's ``retry-after``, which some gateways send
        flat, 60 s whatever the limit)."""
        if not self.latencies:  # nothing answered yet: only a backoff
            return
        latency = self.latency
        if ticket.sent_at < self.last_cut + (latency if self.rate else 0.0):
            return  # one cut (or wait) per round trip: what was in flight then is still out
        first = self.rate is None
        since = self._since_cut(now)
        # Shut only if none sent before this one is still out: one may have got in (a 429 comes
        # back sooner than an answer), and the rate is cut instead. Taken for shut, each wait's
        # end let out the same pair again (one in, the next refused), without end.
        earlier_out = any(self.last_cut <= t.sent_at < ticket.sent_at for t in self.in_flight.values())
        if self.rate and not any(since) and not earlier_out:
            if self.spell_start is None:  # shut since the first request refused after the last cut
                self.spell_start = min((h.sent_at for h in self.history
                                        if not h.admitted and h.sent_at >= self.last_cut), default=ticket.sent_at)
            self.last_cut, self.shut = now, self.shut + 1
            self.hold_until = max(self.hold_until, now + max(self._shut_wait(now, latency), reopens_in or 0.0))
            return
        self.shut = 0
        measured = len(since) >= MEASURED_AFTER
        if not first and not measured:
            since = self._since_cut(now, MEASURED_AFTER)
        refused = 1 - sum(since) / len(since)
        if (self.rate and self.rate < self.peak
                and CUT_FELL_SHORT * self.cut_share <= refused <= min(CLEARLY_OVER, CUT_ROSE * self.cut_share)):
            return  # as many 429s as before the last cut, below its rate: not the rate's doing
        # 429s again within a few round trips of a cut: the rate is still far over the limit
        # (a blind start), and may be cut by the whole share refused, not at most halved. Not
        # after the least cut, which found the rate near the limit: a wall of 429s then is a
        # fixed window that shut (it refuses all, whatever the rate) or a limit that fell.
        descent = (self.rate is not None and now - self.last_cut < DESCENT_TRIPS * latency
                   and not self.cut_least)
        open_share = self._open_share(now)
        # The first cut may go deep only if the requests went out at a steady rate (paced by
        # headers that promised too much: the slow start's window held nothing back for a round
        # trip). A slow start sends a window's worth at once, and cut by the whole share
        # refused, the rate of such a burst lands far below any limit.
        steady = first and self._flight_idle(now)
        # A descent cuts by the whole share only if enough were sent since the last cut to tell
        # it: the last few, most sent before that cut at the faster rate, overstate it (35 a
        # second cut to 10 where the server admitted 19 a second took 9 s to grow back).
        deep = (descent and measured) or steady
        factor = (None if self.window is not None
                  else cut_factor(sum(since), len(since) - sum(since), DEEPEST if deep else HALVE, open_share))
        # A halving cut (too few requests tell the share, or no more was allowed) may land far
        # below the limit: grow fast until the next. After the first cut (the rate it cut was
        # the start's, seldom one sustained), a cut in a descent (by the share refused, which
        # undershoots where refused requests count against the limit), or from requests let out
        # in bursts after a wait (growing in each burst would send the next one faster still),
        # faster than GROW but not so fast as to overshoot again. Not after a few 429s in a
        # descent: at 0.45 s a reply, a 429 in six answers every 0.1 s, each taken for a
        # descent, grew the rate fast after every cut (a 429 per five answers all run long).
        if first or factor is not None and (descent and refused >= CLEARLY_OVER or open_share < 1):
            self.growth = GROW_MID
        else:
            self.growth = GROW_FAST if factor is None or factor <= HALVE else GROW
        self.peak, self.cut_share, self.above = self.rate or self._first_rate(now), refused, 0
        # After a wait, the window shut at the rate cut: fast growth only to just below it (past
        # it, 0.5 % an answer shut every window, at 0.08 429s per success where GROW met 0.04).
        self.regrow_to = CUT * self.peak if open_share < 1 and not (first or descent) else math.inf
        rate = (factor or HALVE) * self.peak
        if open_share < 1:  # requests let out in bursts: no faster than the server admitted them
            rate = min(rate, self._admitted_rate(now))
        self.rate = max(_MIN_RATE, rate)
        # Near the limit only when the rate was not still coming down: in a descent, the few
        # requests since the last cut may all have got in while the rate was still too fast.
        self.cut_least = factor is not None and factor >= CUT and not (descent or first)
        self.window = None
        self.last_cut, self.first_cut = now, min(self.first_cut, now)
        self.next_start = max(self.next_start, now + 1 / self.rate)

    def _shut_wait(self, now: float, latency: float) -> float:
        """Seconds every request waits for a shut window: ``SHUT_WAIT`` of the time it has been
        shut so far (since the first request refused), at least two replies' time, at most
        ``_BACKOFF``'s longest. A wait doubling with each round trip, jittered, could overshoot
        the reopening by one and a half times as long as the window had been shut: a whole window lost."""
        return min(max(2 * latency, SHUT_WAIT * (now - self.spell_start)), _BACKOFF[1])

    def _flight_idle(self, now: float) -> bool:
        """Whether neither the slow start's window nor a cap on requests in flight has held
        anything back for a round trip (something else set the pace: headers, or
        ``--concurrency``; a cap the slow start's burst suggested lets requests out as answers
        come, in bursts)."""
        latency = self.latency
        return latency is not None and now - self.flight_held > latency

    def _most_admitted(self) -> int:
        """The most requests in flight (itself included) at a request admitted, of those remembered."""
        return max((h.depth for h in self.history if h.admitted), default=1)

    def _hold_cap(self, cap: int) -> None:
        self.cap, self.window, self.cap_since = cap, None, clock()
        self.probe_at = self.successes + cap  # a first try above it after one round of answers

    def _since_cut(self, now: float, at_least: int = 0) -> list[bool]:
        """Whether each request sent since the last cut (before the first, since the first
        request refused: what went before it met a budget not yet spent), or the last
        ``at_least``, was admitted. Those still in flight count as admitted once out longer
        than any of the last 429s took to come back (a 429 comes back at once, but a client
        busy sending may read it late), and tell nothing before."""
        known = now - max(self.refusal_times, default=0.0)
        sent = sorted([(h.sent_at, h.admitted) for h in self.history]
                      + [(t.sent_at, True) for t in self.in_flight.values() if t.sent_at <= known])
        if at_least:
            return [ok for _, ok in sent[-at_least:]]
        start = self.last_cut
        if start == -math.inf:
            start = min((h.sent_at for h in self.history if not h.admitted), default=start)
        return [ok for at, ok in sent if at >= start]

    def _open_share(self, now: float) -> float:
        """The share of the time since the last cut that requests were not all held by a wait
        (after a round trip in which nothing got through: a fixed window shut until it reopens
        lets them out in bursts, and its admitted share of the bursts overstates its rate)."""
        span = now - self.last_cut
        held = min(now, self.hold_until) - self.last_cut
        return 1 - held / span if 0 < held < span < math.inf else 1.0

    def _admitted_rate(self, now: float) -> float:
        """Requests per second admitted over the answers remembered since the first cut (the
        slow start before it sent fewer than it could); no ceiling (inf) until ``MEASURED_AFTER``
        were admitted: a window shut since then says when it reopens, not what it admits (taken
        as a rate, none admitted since a cut a moment ago left one request a minute)."""
        sent = [h for h in self.history if h.sent_at >= self.first_cut]
        admitted = sum(1 for h in sent if h.admitted)
        if admitted < MEASURED_AFTER:
            return math.inf
        return admitted / max(now - min(h.sent_at for h in sent), 1e-3)

    def _first_rate(self, now: float) -> float:
        """The rate the first cut cuts: the rate the last requests went out at, and, when they
        went out after a wait of every request (at once: a burst's rate), no faster than the
        server admitted requests since the first was sent."""
        rate = self._sent_rate()
        if self.resumed > -math.inf:
            rate = min(rate, self._admitted_since_first(now))
        return rate

    def _admitted_since_first(self, now: float) -> float:
        """Requests per second admitted since the first request remembered was sent."""
        admitted = sum(1 for h in self.history if h.admitted)
        return admitted / max(now - min(h.sent_at for h in self.history), 1e-3)

    def _sent_rate(self) -> float:
        """Requests per second the last requests went out at (answered or not), since the last
        wait of every request ended (a wait is no part of the rate they go out at)."""
        times = [h.sent_at for h in self.history] + [t.sent_at for t in self.in_flight.values()]
        times = [t for t in times if t >= self.resumed]
        rate = sent_rate(times)
        return rate if rate is not None else max(1, len(times)) / self.latency

    def overloaded(self, ticket: Ticket) -> float:
        """A 503/529 "overloaded" answer: the seconds that request waits (nothing else changes),
        doubling with each such answer it gets, from one reply's time."""
        self.release(ticket)
        self.responses_overloaded += 1
        ticket.overloads += 1
        first, longest = _OVERLOAD_BACKOFF
        latency = self.latency
        return backoff(ticket.overloads, first if latency is None else latency, longest)

    # -- the record ------------------------------------------------------------------------
    def signal(self) -> tuple[str, str]:
        """Which signal the pacer ended up following, and why."""
        capped = self.cap is not None and self.cap_holds
        if capped and self.rate is None:
            return "concurrency", (f"the 429s came only with more than {self.cap} requests in flight: "
                                   f"held at {self.cap}, trying {self.cap + 1} now and then")
        also = f"; at most {self.cap} requests in flight" if capped else ""
        if self.trusted is False:
            return "429s", f"{self.distrust}: paced by what was admitted and refused{also}"
        if self.rate is not None:
            return "429s", ("the 429s carried no rate-limit headers: paced by what was admitted and "
                            f"refused{also}")
        if self.trusted:
            why = "every 429 came with headers showing its budget spent" if self.responses_429 else \
                "no 429 came"
            return "headers", why
        return "none", "no 429 and no rate-limit headers came: paced by --concurrency alone"

    def describe(self) -> dict:
        """What the meta file records about this pacer."""
        limits = {}
        for name, bucket in sorted(self.buckets.items()):
            rate = bucket.rate
            limits[name] = {"limit": bucket.limit, "lowest_remaining": bucket.lowest_remaining,
                            "refill_per_minute": per_minute(rate)}
        signal, why = self.signal()
        return {
            "provider": self.provider, "base_url": self.base_url, "model": self.model,
            "following": signal, "why": why,
            "header_style": self.style, "limits_seen": limits,
            "learned_requests_per_minute": per_minute(self.rate),
            "concurrency_cap": self.cap, "rpm_cap": per_minute(self.fixed_rate),
            "responses_429": self.responses_429, "resent_after_429": self.resent,
            "responses_overloaded": self.responses_overloaded,
            "passed_to_sdk_after_patience": self.gave_up,
            "requests_held": self.waited_requests, "seconds_held": round(self.waited, 3),
        }


def per_minute(rate: float | None) -> float | None:
    """A rate per second as a rounded rate per minute (None stays None)."""
    return round(rate * 60, 3) if rate else None


class RateLimits:
    """The pacers of one ``Client``, one per (provider, base URL, model), and their record."""

    def __init__(self, patience: float = DEFAULT_PATIENCE, rpm: float | None = None):
        self.patience = patience
        self.rpm = rpm
        self.pacers: dict[tuple, Pacer] = {}

    def pacer(self, provider: str, base_url: str | None, model: str) -> Pacer:
        key = (provider, base_url, model)
        found = self.pacers.get(key)
        if found is None:
            found = self.pacers[key] = Pacer(provider, base_url, model, self.rpm)
        return found

    def ticket(self, provider: str, base_url: str | None, model: str, *, prompt_chars: int,
               max_tokens: int, reach: Reachability | None = None) -> Ticket:
        return Ticket(self.pacer(provider, base_url, model), request_costs(prompt_chars, max_tokens),
                      self.patience, reach)

    @property
    def responses_429(self) -> int:
        return sum(p.responses_429 for p in self.pacers.values())

    @property
    def paced(self) -> bool:
        """Whether any request waited for a provider's limit (held before sending, a 429 or an
        overload answer)."""
        return any(p.responses_429 or p.responses_overloaded or p.waited_requests
                   for p in self.pacers.values())

    def describe(self) -> list[dict]:
        return [p.describe() for p in self.pacers.values()]

    def summary(self) -> str | None:
        """The summary line's part, when the run was paced by a provider's limit."""
        if not self.paced:
            return None
        held = sum(p.waited for p in self.pacers.values())
        text = f"paced by the provider's rate limit ({self.responses_429} 429 answers waited out"
        overloaded = sum(p.responses_overloaded for p in self.pacers.values())
        if overloaded:
            text += f", {overloaded} overload answers waited out"
        gave_up = sum(p.gave_up for p in self.pacers.values())
        if gave_up:
            text += f", {gave_up} past --patience"
        return text + f", {held:.1f}s held)"


# -- the transport hook ------------------------------------------------------------------------

@contextlib.contextmanager
def attached(ticket: Ticket):
    """Make ``ticket`` the one the transport paces while the block runs (this task only)."""
    token = _CURRENT.set(ticket)
    try:
        yield ticket
    finally:
        _CURRENT.reset(token)


_RETRY_DELAY = re.compile(rb'"retryDelay"\s*:\s*"(\d+(?:\.\d*)?)s"')


def _body(response) -> bytes:
    """A reply's body, or nothing for a streamed one not yet read (a 429 then paces as usual)."""
    try:
        return response.content
    except Exception:  # noqa: BLE001 - httpx's ResponseNotRead, by whichever copy of httpx
        return b""


def told_in_body(response) -> float | None:
    """The wait a 429's body asks for: Gemini sends no ``Retry-After`` but a
    ``google.rpc.RetryInfo`` detail, ``"retryDelay": "47.434s"`` (a protobuf duration)."""
    found = _RETRY_DELAY.search(_body(response))
    return float(found.group(1)) if found else None


def _quota_exhausted(response) -> bool:
    """A 429 that waiting will not fix (OpenAI's "insufficient_quota": out of credit)."""
    return b"insufficient_quota" in _body(response)


async def send(request, attempt):
    """Send ``request`` with ``attempt`` (one timed HTTP attempt), paced by the attached ticket."""
    ticket = _CURRENT.get()
    if ticket is None:
        return await attempt(request)
    pacer, reach = ticket.pacer, ticket.reach
    while True:
        await pacer.acquire(ticket)
        try:
            response = await attempt(request)
        except BaseException as exc:
            refused = is_connect_failure(exc)
            pacer.release(ticket, refund=refused)
            if refused and reach is not None:
                reach.note_failure(exc)
            raise
        status = response.status_code
        if status in OVERLOAD_STATUSES:
            if reach is not None:
                reach.note_overload(status)
            wait = pacer.overloaded(ticket)
        else:
            if reach is not None:
                reach.note_reply()
            if status == 429 and _quota_exhausted(response):
                pacer.release(ticket)
                response.headers["x-should-retry"] = "false"  # the SDK's retries would only ask again
                return response
            wait = pacer.observe(ticket, status, response.headers,
                                 told_in_body(response) if status == 429 else None)
        if wait is None:
            return response
        now = clock()
        if ticket.first_wait is None:
            ticket.first_wait = now
        if now + wait - ticket.first_wait > ticket.patience:
            pacer.gave_up += 1
            return response
        ticket.not_before = now + wait
        ticket.refused_at = now if status == 429 else None
        if status == 429:
            pacer.resent += 1
        await response.aclose()
