"""Pacing model requests to a provider's limits: one :class:`Pacer` per (provider, address, model).

``Client._send`` asks it when a request may go, and tells it how each one came back; how long a
refused request waits is ``orbench.llm.retry``'s rule, not the pacer's. What one reply does: an
answer may grow the window (rules 1 and 3) and brings the budgets its headers report (rule 5); a
429 cuts the window (rule 2) and, over a budget spent, holds every send for the wait its
``Retry-After`` asks (rule 5); a 503 or 529 ("overloaded") only frees its place. Each rule's
premise is stated with it; the figures behind them are in docs/rate_limits.md.

1. **A window on requests in flight** (TCP's congestion window), never past ``--concurrency``.
   Slow start: ``INITIAL_WINDOW`` requests until the first answer, then one more per answer
   (twice as many each round trip) until the first 429. Only answers to requests that found the
   window full grow it (RFC 7661: a window the client's own work holds back is not tested).
2. **Every 429 is congestion and cuts the window**, at most once a round trip: a 429 of a request
   sent less than a smoothed round trip (``srtt``) after the last cut is that cut's congestion;
   any later one cuts again. No state stops the cutting: a client that stops takes a shared
   limit from those that keep cutting (Chiu and Jain 1989, RFC 2914). The cut takes one request
   off the window for each 429 of a request sent since the last cut (each is a request the limit
   had no room for), and at most ``1 - BETA`` of it (RFC 9438's deepest cut). A 429 of a request
   sent before the last cut (in flight when it came) takes one request off at once, not below
   one (a window already below stays), so an overshoot (the slow start's last doubling, a limit
   that halved) comes off 429 by 429. Premise: on a shared limit the 429s fall on each client in
   proportion to what it sends, so each loses the same share, the multiplicative decrease of AIMD.
3. **Recovery is additive in round trips** (Chiu and Jain's AIMD; TCP's congestion avoidance,
   RFC 5681 3.1, with a smaller step): each answer of a full window, sent at least a round trip
   after the last cut, adds ``1 / (PROBE x window)`` (a window below one counts as one), so the
   window gains one request per ``PROBE`` round trips whatever its size. It counts answers, not
   seconds: the same at any round trip. Premise: clients that share a limit share its round
   trip, so they gain the same rate a second and, with rule 2, reach equal shares; clients whose
   replies take 3x as long gain a ninth as much rate (TCP Reno's round-trip unfairness). A step
   past a limit costs about two 429s (its own, and one sent before its cut is heard), so a step
   per ``PROBE`` = 20 round trips keeps one client to one 429 per ten answers, where a step is
   no more than a cut takes off (a window of 3.3 or more). n clients on one limit step n times
   as often: about 2n / (``PROBE`` x W) 429s per answer, W being the requests in flight the
   limit allows them all.
4. **Requests go out spread over the round trip** once a 429 came: ``srtt / (PACING x window)``
   apart (RFC 9002 7.7), not in bursts that a limit enforced over a short period refuses. Below
   a window of one, one request goes at a time, spaced further apart, never more than
   ``--patience`` apart (429s that never stop would otherwise space the sends out for ever);
   there the spacing is the only bound.
5. **A budget spent holds every send**: the last reply's rate-limit headers for each budget
   (OpenAI's ``x-ratelimit-*``, Anthropic's ``anthropic-ratelimit-*``, OpenRouter's, the IETF
   draft's ``ratelimit``, read by ``orbench.llm.providers.transport.budgets``), less what went
   after that request, say what is free; a request goes only when its cost is free in each
   (several of one unit, a minute's and a day's, each count). A budget whose size is said
   refills continuously, from what is left to whole at the reset named (Anthropic's docs
   describe token buckets, OpenAI's a reset to the initial state), so an empty one lets requests
   go one at a time as it refills; one whose size is not said, or whose reset moment stands
   still while requests go (a fixed window), comes back whole at the reset; one whose reset is
   not said (Azure's headers say only what is left) comes back whole when a 429's
   ``Retry-After`` says. At a window of one or less, a 429 after a round trip in which nothing
   got in (a fixed window shut) holds sending for the wait it asks. A request costs what
   providers count before generation: one request, its prompt's estimated tokens and
   ``max_tokens``. A hold longer than ``--patience`` is not held: the requests go, and give up
   on the wait their 429s ask.
   **What is free is spread over the reset**: a reply that leaves ``free`` units and the budget
   whole in ``reset`` seconds spaces the sends ``reset / free`` seconds a unit (the ratio the
   IETF draft names as a client's throughput), a reset past ``--patience`` counting as
   ``--patience``, as a hold does. Its reason is a key that other clients use too: each reads
   the same two numbers, so all space their sends alike and share the budget evenly. Its
   premises: the reset is when the budget is whole, and is read right. Its cost: a lone client
   keeps up to half of a token bucket unused (it sends faster than the refill only while more
   than half is left), and spends a sliding log whose reset is a whole window after its newest
   request at half its rate.
6. ``--rpm`` is a token bucket of one: requests at least ``60 / rpm`` seconds apart.

A request that is refused or fails leaves the flight at once and waits outside it. What is not a
rate limit (an exhausted quota, an overload sent as a 429) is sorted by the providers'
``classify`` and never reaches :meth:`Pacer.refused`.

The tunables: ``INITIAL_WINDOW`` 10, RFC 6928's (TCP's, raised from RFC 5681's 4 because short
transfers ended before their slow start filled the path; a limit under 10 in flight costs at
most its shortfall in 429s, once); ``BETA`` 0.7, RFC 9438's deepest cut (and the AWS SDKs');
``PROBE`` 20 round trips a step (rule 3); ``PACING`` 1.25, RFC 9002's ``N`` (7.7), so pacing
never holds the window below itself; ``RTT_GAIN`` 1/8, the smoothed round trip's gain of RFC
6298 (2).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import NamedTuple

INITIAL_WINDOW = 10
BETA = 0.7
PROBE = 20
PACING = 1.25
RTT_GAIN = 1 / 8

_REPLIES: ContextVar[list | None] = ContextVar("orbench_rate_replies", default=None)


def request_costs(prompt: int, max_tokens: int) -> dict[str, float]:
    """Units of each budget one request uses, as providers count them before generation: one
    request, its ``prompt`` tokens (``orbench.llm.pricing.input_tokens``) and ``max_tokens``."""
    return {"requests": 1, "tokens": prompt + max_tokens, "input-tokens": prompt,
            "output-tokens": max_tokens}


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
    """Called by the transport with the :class:`Budget` s every reply's headers report."""
    seen = _REPLIES.get()
    if seen is not None:
        seen.extend(budgets)


class Budget(NamedTuple):
    """One budget a reply's headers report: its unit (one of :func:`request_costs`'), what is
    left, the seconds until it is whole again (None: not said), its size (None: not said), and
    its own name where the headers report several of one unit (``"requests-day"``, a gateway's
    ``"minute"`` and ``"day"``): each binds."""

    unit: str
    remaining: float
    reset: float | None
    limit: float | None = None
    name: str = ""

    def rate(self) -> float:
        """Units a second it refills: a budget whose size is said refills continuously from
        ``remaining`` to ``limit`` in ``reset`` (Anthropic's docs describe token buckets, OpenAI's
        a reset to the initial state); 0 when the size is not said: it comes back whole then."""
        if self.limit is not None and self.limit > self.remaining and self.reset:
            return (self.limit - self.remaining) / self.reset
        return 0.0


@dataclass
class Seen:
    """A budget as the last reply that reported it left it (rule 5): ``free`` units of ``unit``
    then, less what went after that reply's request; ``sent``, the units the pacer had sent then;
    ``spacing``, the seconds a unit takes when what is free is spread over its reset."""

    unit: str
    free: float
    at: float
    sent: float
    rate: float
    whole_at: float
    spacing: float = 0.0

    def wait(self, now: float, sent: float, cost: float) -> float:
        """Seconds until ``cost`` units are free, ``sent`` units having gone in all."""
        free = self.free + self.rate * (now - self.at) - (sent - self.sent)
        if free >= cost or now >= self.whole_at:
            return 0.0
        return (cost - free) / self.rate if self.rate else self.whole_at - now


@dataclass
class Ticket:
    """One request in flight: when it went, what it costs, what had been sent before it."""

    sent_at: float
    costs: dict
    units_before: dict
    full: bool  # it found the window full: its answer may grow the window


@dataclass
class Counts:
    """What the meta file records of one pacer."""

    admitted: int = 0
    refused: int = 0
    cuts: int = 0
    holds: int = 0
    held: float = 0.0  # seconds a send waited for a hold


@dataclass
class Pacer:
    """Paces the requests to one (provider, address, model) by the rules of the module docstring.

    ``acquire`` (or ``wait_time`` then ``take``), ``admitted``, ``refused``, ``released`` and
    ``describe`` are its whole interface; ``clock`` can be a test's."""

    name: str = ""
    rpm: float | None = None
    clock: object = time.monotonic
    longest_hold: float = math.inf  # --patience
    ceiling: float = math.inf  # --concurrency
    window: float = 0.0  # requests in flight allowed (rule 1)
    slow_start: bool = True
    srtt: float | None = None  # the smoothed round trip, seconds (None: nothing answered yet)
    epoch: float = -math.inf  # when the last cut happened
    refused_since_cut: int = 0  # 429s of requests sent since the last cut (rule 2)
    in_flight: int = 0
    next_send: float = 0.0  # rule 4
    next_rpm: float = 0.0  # rule 6
    next_spread: float = 0.0  # rule 5: what a budget has left, spread over its reset
    hold_until: float = 0.0  # rule 5: a fixed window shut
    seen: dict = field(default_factory=dict)  # rule 5: a budget's name (or unit) -> Seen
    costs: dict = field(default_factory=dict)  # what the last request cost: the next one's guess
    holding: bool = False  # sending waits for a hold (rule 5): counts.holds counts when one begins
    last_admitted: float = -math.inf
    units_sent: dict = field(default_factory=dict)
    counts: Counts = field(default_factory=Counts)
    loop: object = None

    def __post_init__(self):
        self.window = float(min(INITIAL_WINDOW, self.ceiling))

    def wait_time(self) -> float:
        """Seconds until one more request may go (``math.inf``: until one leaves the flight)."""
        now = self.clock()
        if self.in_flight >= max(1.0, self.window):
            return math.inf
        held = self.held(now)
        self.counts.holds += held > 0 and not self.holding  # a hold begins
        self.holding = held > 0
        return max(0.0, self.next_send - now, self.next_rpm - now, held)

    def held(self, now: float) -> float:
        """Seconds sending waits for a budget spent or a fixed window shut (rule 5); a wait longer
        than ``--patience`` is not held."""
        wait = max(0.0, self.hold_until - now, self.next_spread - now)
        for seen in self.seen.values():
            sent, cost = self.units_sent.get(seen.unit, 0), self.costs.get(seen.unit, 0)
            wait = max(wait, seen.wait(now, sent, cost))
        return wait if wait <= self.longest_hold else 0.0

    def take(self, costs: dict, full: bool = False) -> Ticket:
        """Book a request costing ``costs`` as sent now (``full``: it found the window full)."""
        now = self.clock()
        if self.srtt is not None and self.counts.refused:  # rule 4, spaced --patience at most
            gap = self.srtt / (PACING * self.window) if self.window > 0 else math.inf
            self.next_send = max(now, self.next_send) + min(gap, self.longest_hold)
        if self.rpm:
            self.next_rpm = max(now, self.next_rpm) + 60 / self.rpm
        spread = max((seen.spacing * costs.get(seen.unit, 0) for seen in self.seen.values()),
                     default=0.0)
        if spread:
            self.next_spread = max(now, self.next_spread) + min(spread, self.longest_hold)
        self.costs = costs
        ticket = Ticket(now, costs, dict(self.units_sent), full)
        for unit, cost in costs.items():
            self.units_sent[unit] = self.units_sent.get(unit, 0) + cost
        self.in_flight += 1
        return ticket

    async def acquire(self, costs: dict) -> Ticket:
        """Wait until a request may go (first come, first served), then take it."""
        if asyncio.get_running_loop() is not self.loop:  # a Client may serve several loops in turn
            self.loop, self.in_flight = asyncio.get_running_loop(), 0
            self.turn, self.freed = asyncio.Lock(), asyncio.Event()
        full = self.turn.locked()  # others wait before it: the window holds them
        async with self.turn:
            started = self.clock()
            while (wait := self.wait_time()) > 0:
                full = full or wait == math.inf
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self.freed.wait(), None if wait == math.inf else wait)
            self.counts.held += self.clock() - started if self.held(started) > 0 else 0.0
            return self.take(costs, full)

    def released(self, ticket: Ticket, budgets_seen=()) -> None:
        """The request left the flight with no word on the rate (an error, an overload, a
        cancellation); the budgets its reply's headers showed (rule 5)."""
        self.in_flight = max(0, self.in_flight - 1)
        if self.loop is not None:
            self.freed.set()
            self.freed = asyncio.Event()
        for budget in budgets_seen or ():
            if budget.reset is None:
                continue
            sent, rate = self.units_sent.get(budget.unit, 0), budget.rate()
            cost = ticket.costs.get(budget.unit, 0)  # the reply's count has this one taken
            free = budget.remaining - (sent - ticket.units_before.get(budget.unit, 0) - cost)
            key = budget.name or budget.unit
            whole_at, last = ticket.sent_at + budget.reset, self.seen.get(key)
            if rate and last and abs(whole_at - last.whole_at) < 0.5 / rate:
                # a bucket's reset moves 1/rate later a unit taken, a fixed window's stands still
                rate = 0.0
            spacing = min(budget.reset, self.longest_hold) / free if free > 0 else 0.0
            self.seen[key] = Seen(budget.unit, free, self.clock(), sent, rate, whole_at, spacing)

    def admitted(self, ticket: Ticket, budgets_seen=()) -> None:
        """An answer: the round trip is timed and the window may grow (rules 1 and 3)."""
        self.released(ticket, budgets_seen)
        now = self.last_admitted = self.clock()
        rtt = max(0.0, now - ticket.sent_at)
        self.srtt = rtt if self.srtt is None else self.srtt + RTT_GAIN * (rtt - self.srtt)
        self.counts.admitted += 1
        if not ticket.full or ticket.sent_at < self.epoch + self.srtt:
            return  # the window was not tested, or this was sent before the cut told
        growth = 1.0 if self.slow_start else 1 / (PROBE * max(self.window, 1.0))
        self.window = min(self.ceiling, self.window + growth)

    def refused(self, ticket: Ticket, wait: float | None = None, budgets_seen=()) -> None:
        """A 429, whose request asked to wait ``wait`` seconds (None: not said) (rules 2, 5)."""
        now = self.clock()
        if wait is not None:  # a budget whose reset is not said (Azure's) is back when a 429 says
            since_sent = max(0.0, now - ticket.sent_at)  # the wait counts from the reply
            budgets_seen = [b if b.reset is not None else b._replace(reset=since_sent + wait)
                            for b in budgets_seen or ()]
        self.released(ticket, budgets_seen)
        self.counts.refused += 1
        self.refused_since_cut += ticket.sent_at >= self.epoch
        span = self.srtt or 0.0
        if self.window <= 1 and wait and now - self.last_admitted >= span:
            self._hold(wait)  # a fixed window shut: nothing got in for a round trip
        if ticket.sent_at < self.epoch + span:
            if ticket.sent_at < self.epoch:  # in flight at the cut: the limit had no room for it
                self.window = max(min(1.0, self.window), self.window - 1)  # never raised
            return  # the congestion the last cut answered, or met before it told
        kept = 1 - self.refused_since_cut / self.window if self.window > 0 else 0.0
        beta = max(BETA, kept)
        self.window, self.epoch, self.slow_start = self.window * beta, now, False
        self.refused_since_cut = 0
        self.counts.cuts += 1

    def _hold(self, seconds: float) -> None:
        if seconds > self.longest_hold:  # the requests go, and give up on the wait their 429 asks
            return
        self.hold_until = max(self.hold_until, self.clock() + seconds)

    def describe(self) -> dict:
        """What the meta file records: what the pacer followed and why, and its counts."""
        counts = self.counts
        if counts.cuts:
            following, why = "429s", "the window on requests in flight was cut on 429s"
        elif counts.holds:
            following, why = "headers", "rate-limit headers or a 429 said when sending could go on"
        else:
            following, why = "none", "no 429 came: paced by --concurrency alone"
        return {"model": self.name, "following": following, "why": why,
                "window": round(self.window, 2), "rpm_cap": self.rpm, "admitted": counts.admitted,
                "responses_429": counts.refused, "cuts": counts.cuts, "holds": counts.holds,
                "seconds_held": round(counts.held, 3)}


class RateLimits:
    """The pacers of one ``Client``, one per (provider, address, model), and the run's counts."""

    def __init__(self, patience: float, rpm: float | None = None, concurrency: float = math.inf):
        self.patience, self.rpm, self.concurrency = patience, rpm, concurrency
        self.pacers: dict[tuple, Pacer] = {}
        self.overloaded = self.past_patience = 0
        self.waited = 0.0

    def pacer(self, provider: str, base_url: str | None, model: str) -> Pacer:
        """The pacer of (``provider``, ``base_url``, ``model``), made on first use."""
        if (provider, base_url, model) not in self.pacers:
            self.pacers[provider, base_url, model] = Pacer(f"{provider}/{model}", self.rpm,
                                                           longest_hold=self.patience,
                                                           ceiling=self.concurrency)
        return self.pacers[provider, base_url, model]

    @property
    def responses_429(self) -> int:
        return sum(p.counts.refused for p in self.pacers.values())

    @property
    def paced(self) -> bool:
        """Whether any request waited for a provider's limit (a 429, an overload, a hold)."""
        held = any(p.counts.held for p in self.pacers.values())
        return bool(self.responses_429 or self.overloaded or held)

    def describe(self) -> list[dict]:
        return [p.describe() for p in self.pacers.values()]

    def summary(self) -> str | None:
        """The summary line's part, when the run was paced by a provider's limit."""
        if not self.paced:
            return None
        answers = [(self.responses_429, "429"), (self.overloaded, "overload")]
        said = " and ".join(f"{count} {kind} answers" for count, kind in answers if count)
        past = f"{self.past_patience} past --patience, " if self.past_patience else ""
        held = sum(p.counts.held for p in self.pacers.values()) + self.waited
        said = f"{said} waited out, " if said else ""
        return f"paced by the provider's rate limit ({said}{past}{held:.1f}s waited)"
