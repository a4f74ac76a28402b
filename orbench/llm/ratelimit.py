"""Pacing model requests to a provider's limits: one :class:`Pacer` per (provider, address, model).

Its rules, in the order a request meets them (``Client._send``, the client's one retry loop, is
the other half: how long a refused request waits, and how often a failed one goes again):

1. **A window on requests in flight**, as TCP paces its segments. Slow start: ``INITIAL_WINDOW``
   requests until the first answer, then one more per answer (twice as many each round trip).
   Past it, ``GROWTH`` more per answer (one per cent a round trip). Only answers to requests that
   found the window full grow it (RFC 7661), and never past ``--concurrency``. Requests go out
   spread over the smoothed round trip (``srtt / (PACING x window)`` apart, RFC 9002 7.7), not in
   bursts that a limit enforced over a short period refuses.
2. **A 429 cuts the window** to ``BETA`` of itself (floor one), once a round trip: a 429 of a
   request sent less than a round trip after the last cut is that cut's congestion. Past the
   slow start, the cut goes no wider than the requests of the last round trip less the share
   refused (its lower ``1 - ALPHA`` bound): what the server admitted is what it admits.
3. **Each series of cuts is a test of whether the rate is to blame.** A limit refuses only what
   is sent past it: a share ``s`` refused in the round trip before a series (but for the 429 that
   set it off), ``m`` cuts later, becomes at most ``q = 1 - (1 - s) / BETA**m`` (taking ``s`` at its
   upper ``1 - ALPHA`` Clopper-Pearson bound). When the 429s among the requests sent since the last
   cut (from a round trip after it) are as many as would come with probability ``ALPHA`` at ``q``,
   the round trip before had 429s too, and the share has not moved (Fisher's exact test,
   two-sided at ``ALPHA``), the rate is not their cause: the window goes back to where the series
   began, slow start resumes, and 429s stop cutting. They cut again once the share of 429s in a
   round trip is clearly above the share the test saw (Fisher's, one-sided at ``ALPHA``, asked
   once a round trip). A series ends when the window grows back; the slow start ends at its second cut.
4. **A budget spent holds every send**: while a reply's rate-limit headers (OpenAI's
   ``x-ratelimit-*``, Anthropic's ``anthropic-ratelimit-*``, the IETF draft's ``ratelimit``) show a
   budget spent, counting what went after that request, sending waits for the reset they name;
   and at a window of one, a 429 after a round trip in which nothing got in (a fixed window shut)
   holds sending as long as it asks. A request costs what providers count before generation:
   one request, its prompt's estimated tokens and ``max_tokens``. No hold outlasts ``--patience``.
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
import re
import time
from collections import deque
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime

INITIAL_WINDOW = 4
PACING = 1.25
GROWTH = 0.01
BETA = 0.875
RTT_GAIN = 1 / 8
ALPHA = 0.05

_HEADERS: ContextVar[dict | None] = ContextVar("orbench_rate_headers", default=None)


def request_costs(prompt: int, max_tokens: int) -> dict[str, float]:
    """Units of each kind of budget one request uses, as providers count them before generation:
    one request, its ``prompt`` tokens (``orbench.llm.pricing.input_tokens``) and ``max_tokens``."""
    return {"requests": 1.0, "tokens": float(prompt + max_tokens), "input-tokens": float(prompt),
            "output-tokens": float(max_tokens)}


def seconds_until(text: str, now_wall: float | None = None) -> float | None:
    """Seconds from now in a reset or retry header: ``"6m0s"``, ``"20ms"``, ``"1.5"``, an
    RFC 3339 time, an HTTP date or epoch seconds; None when unreadable."""
    text, now = (text or "").strip(), time.time() if now_wall is None else now_wall
    try:
        value = float(text)
    except ValueError:
        pass
    else:  # a count of seconds past half of today's epoch time can only be a timestamp
        return max(0.0, value - now if value > now / 2 else value) if math.isfinite(value) else None
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", text)
    if parts and "".join(n + u for n, u in parts) == text:
        return sum(float(n) * {"h": 3600, "m": 60, "s": 1, "ms": 1e-3}[u] for n, u in parts)
    for parse in (lambda t: datetime.fromisoformat(t.replace("Z", "+00:00")), parsedate_to_datetime):
        with contextlib.suppress(ValueError, TypeError, IndexError):
            moment = parse(text)
            if moment.tzinfo is not None:
                return max(0.0, moment.timestamp() - now)
    return None


def budgets(headers) -> dict[str, tuple[float, float | None]]:
    """``{kind: (remaining, seconds until reset)}`` for each budget a reply's headers report."""
    fields: dict[str, dict] = {}
    for name, value in headers.items():
        name = name.lower()
        if name == "ratelimit":  # the IETF draft: "limit=100, remaining=50, reset=5"
            fields["requests"] = dict(p.strip().split("=", 1) for p in value.split(",") if "=" in p)
            continue
        found = re.fullmatch(r"(?:x-|anthropic-)?ratelimit-(.+)", name)
        parts = found.group(1).split("-") if found else []
        for key in {"remaining", "reset"}.intersection(parts):
            kind = "-".join(p for p in parts if p != key) or "requests"
            fields.setdefault(kind, {})[key] = value
    found = {}
    for kind, f in fields.items():
        with contextlib.suppress(ValueError, TypeError):
            found[kind] = (float(f["remaining"]), seconds_until(f["reset"]) if "reset" in f else None)
    return found


def cost_of(kind: str, costs: dict[str, float]) -> float:
    """What one request with ``costs`` spends of a budget named ``kind`` (``tokens-per-day``...)."""
    if "token" not in kind:
        return costs["requests"]
    return costs["input-tokens" if "input" in kind else "output-tokens" if "output" in kind else "tokens"]


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(K >= k) for K ~ Binomial(n, p)."""
    if k <= 0:
        return 1.0
    return sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k, n + 1))


def share_bound(k: int, n: int, upper: bool) -> float:
    """The exact (Clopper-Pearson) one-sided ``1 - ALPHA`` bound on a share seen as ``k`` of ``n``."""
    if upper and k >= n or not upper and k <= 0:
        return float(upper)
    low, high = 0.0, 1.0
    for _ in range(40):  # bisection to 1e-12
        mid = (low + high) / 2
        tail = 1 - binomial_tail(k + 1, n, mid) if upper else binomial_tail(k, n, mid)
        if (tail > ALPHA) == upper:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def fisher_tail(k: int, n: int, marked: int, total: int) -> float:
    """P(X >= k) for X the marked items among ``n`` drawn from ``total`` holding ``marked``."""
    return sum(math.comb(marked, i) * math.comb(total - marked, n - i)
               for i in range(max(k, 0), min(n, marked) + 1)) / math.comb(total, n)


def not_the_rate(before: int, refused_before: int, after: int, refused_after: int, cut: float = BETA) -> bool:
    """Whether the 429s of a series of cuts say the rate is not their cause (rule 3):
    among the requests of the round trip before the series, and those sent since its last cut (but
    in the round trip the cut took to tell), the window now ``cut`` of what it was. A rate limit
    refuses what is sent past it, so the share refused after is at most ``1 - (1 - s) / cut`` for a
    share ``s`` before; the rate is ruled out when that many 429s after would come with probability
    at most ``ALPHA`` even at the upper ``1 - ALPHA`` bound of ``s``, unless the share moved with the
    cut (Fisher's exact test, two-sided at ``ALPHA``: a share that moves is no share that ignores
    the rate)."""
    if after <= 0 or before <= 0:
        return False
    limit = max(0.0, 1 - (1 - share_bound(refused_before, before, upper=True)) / cut)
    total, refused = before + after, refused_before + refused_after
    moved = min(fisher_tail(refused_after, after, refused, total),
                1 - fisher_tail(refused_after + 1, after, refused, total)) <= ALPHA / 2
    return bool(refused_before) and binomial_tail(refused_after, after, limit) <= ALPHA and not moved


@contextlib.contextmanager
def watching():
    """Collect the rate-limit headers of the replies the SDK gets while the block runs (this task
    only); the transport hands them in with :func:`note_reply`."""
    seen: dict = {}
    token = _HEADERS.set(seen)
    try:
        yield seen
    finally:
        _HEADERS.reset(token)


def note_reply(headers) -> None:
    """Called by the transport with every reply's headers."""
    seen = _HEADERS.get()
    if seen is not None:
        seen.update(budgets(headers))


@dataclass
class Ticket:
    """One request in flight: when it went, what it costs, what had been sent before it."""

    sent_at: float
    costs: dict[str, float]
    units_before: dict[str, float]
    full: bool  # it found the window full: its answer may grow the window


@dataclass
class _Trial:
    """A series of cuts on trial (rule 3), from its first cut until the window grows back."""

    start: float  # the first cut of the series
    span: float
    window: float  # before the series
    counts: list  # the round trip before the series: answers, 429s; since the last cut: the same
    at: float = 0.0  # the last cut
    cuts: int = 1


class Pacer:
    """Paces the requests to one (provider, address, model); the rules are in the module docstring.

    ``take`` / ``wait_time`` / ``admitted`` / ``refused`` / ``released`` are the whole interface
    (``acquire`` is ``take`` once ``wait_time`` allows); ``clock`` is replaceable for tests."""

    def __init__(self, name: str = "", rpm: float | None = None, clock=time.monotonic,
                 longest_hold: float = math.inf, ceiling: float = math.inf):
        self.name, self.rpm, self.clock, self.longest_hold = name, rpm, clock, longest_hold
        self.ceiling = ceiling
        self.window, self.slow_start = float(min(INITIAL_WINDOW, ceiling)), True
        self.srtt: float | None = None
        self.in_flight = 0
        self.next_send = self.next_rpm = self.hold_until = 0.0
        self.last_cut = self.last_test = -math.inf
        self.last_admitted: float | None = None
        self.rate_to_blame = True
        self.reference = [0, 0]  # answers and 429s of the trial that cleared the rate of blame
        self.trial: _Trial | None = None
        self.recent: deque = deque()  # (sent at, refused) of the last two round trips' answers
        self.sends: deque = deque()  # ... and their send times
        self.units_sent: dict[str, float] = {}
        self.loop = None
        self.admissions = self.responses_429 = self.cuts = self.undone = 0
        self.header_holds = self.shut_holds = 0
        self.held = 0.0

    # -- sending ---------------------------------------------------------------------------
    def wait_time(self) -> float:
        """Seconds until one more request may go (``math.inf``: until one leaves the flight)."""
        now = self.clock()
        if self.in_flight >= self.window:
            return math.inf
        return max(0.0, self.next_send - now, self.next_rpm - now, self.hold_until - now)

    def take(self, costs: dict[str, float], full: bool = False) -> Ticket:
        """Book a request with ``costs`` as sent now (``full``: it waited for the window)."""
        now = self.clock()
        if self.srtt:
            self.next_send = max(now, self.next_send) + self.srtt / (PACING * self.window)
        if self.rpm:
            self.next_rpm = max(now, self.next_rpm) + 60 / self.rpm
        ticket = Ticket(now, costs, dict(self.units_sent), full)
        self.sends.append(now)
        for kind in costs:
            self.units_sent[kind] = self.units_sent.get(kind, 0.0) + costs[kind]
        self.in_flight += 1
        return ticket

    async def acquire(self, costs: dict[str, float]) -> Ticket:
        """Wait until a request with ``costs`` may go (first come, first served), then book it."""
        loop = asyncio.get_running_loop()
        if loop is not self.loop:  # a Client may serve several event loops, one after another
            self.loop, self.turn, self.freed, self.in_flight = loop, asyncio.Lock(), asyncio.Event(), 0
        full = self.turn.locked()  # others are waiting: the window is what holds them
        async with self.turn:
            started = self.clock()
            while (wait := self.wait_time()) > 0:
                full = full or wait == math.inf
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self.freed.wait(), None if wait == math.inf else wait)
            if self.hold_until > started:
                self.held += self.clock() - started
            return self.take(costs, full)

    # -- answers ---------------------------------------------------------------------------
    def released(self, ticket: Ticket, headers: dict | None = None) -> None:
        """The request left the flight with no verdict on the rate (an error, an overload)."""
        self.in_flight = max(0, self.in_flight - 1)
        if self.loop is not None:
            self.freed.set()
            self.freed = asyncio.Event()
        now = self.clock()
        for kind, (remaining, reset) in (headers or {}).items():
            since = self.units_sent.get(kind, 0.0) - ticket.units_before.get(kind, 0.0)
            if remaining - since < cost_of(kind, ticket.costs) and reset is not None:
                self.header_holds += now + reset > self.hold_until
                self.hold_until = max(self.hold_until, now + min(reset, self.longest_hold))

    def admitted(self, ticket: Ticket, headers: dict | None = None) -> None:
        """An answer: the round trip is measured and the window grows (rule 1)."""
        self.released(ticket, headers)
        now = self.clock()
        sample = now - ticket.sent_at
        self.srtt = sample if self.srtt is None else self.srtt + RTT_GAIN * (sample - self.srtt)
        self.admissions += 1
        self.last_admitted = now
        self._count(ticket.sent_at, False, now)
        trial = self.trial
        if ticket.full and (trial is None or now >= trial.at + trial.span):  # none in the cut's round
            self.window = min(self.ceiling, self.window + (1 if self.slow_start else GROWTH))

    def refused(self, ticket: Ticket, wait: float, headers: dict | None = None) -> None:
        """A 429, whose request waits ``wait`` seconds before it goes again (rules 2 to 4)."""
        self.released(ticket, headers)
        now = self.clock()
        self.responses_429 += 1
        self._count(ticket.sent_at, True, now)
        if self.window <= 1 and (self.last_admitted is None or now - self.last_admitted >= self.srtt):
            self.shut_holds += now + wait > self.hold_until
            self.hold_until = max(self.hold_until, now + min(wait, self.longest_hold))
        if self.srtt is None:  # nothing admitted yet: no round trip to count cuts by, or to test
            self.window = max(1.0, self.window * BETA)
            return
        if ticket.sent_at < self.last_cut + self.srtt:
            return  # the congestion the last cut answered, or that met it before it told
        trial = self.trial
        if trial and self.window >= trial.window:
            trial = self.trial = None  # the window grew back: the series is over
        if trial and not_the_rate(*trial.counts, BETA ** trial.cuts):
            self.trial, self.rate_to_blame, self.undone = None, False, self.undone + 1
            self.reference = [trial.counts[0] + trial.counts[2], trial.counts[1] + trial.counts[3]]
            self.window, self.slow_start = max(self.window, trial.window), True
        elif trial or self.rate_to_blame or self._share_rose(now):
            self._cut(now, ticket.sent_at)

    def _count(self, sent_at: float, refused: bool, now: float) -> None:
        span = self.srtt or math.inf
        self.recent.append((sent_at, refused))
        while self.recent and self.recent[0][0] < now - 2 * span:
            self.recent.popleft()
        while self.sends and self.sends[0] < now - 2 * span:
            self.sends.popleft()
        trial = self.trial
        if trial is not None:
            if trial.start - trial.span <= sent_at < trial.start:  # the round trip before the series
                trial.counts[0] += 1
                trial.counts[1] += refused
            elif sent_at >= trial.at + trial.span:  # since the last cut, once it could tell
                trial.counts[2] += 1
                trial.counts[3] += refused

    def _cut(self, now: float, trigger: float) -> None:
        """Rules 2 and 3: cut the window, and put the cut on trial (``trigger``: when the request
        of the 429 that set it off went)."""
        span = self.srtt or now - min(self.sends, default=now)
        before = [refused for at, refused in self.recent if at >= now - span and at != trigger]
        n, k = len(before), sum(before)
        window = self.window * BETA
        if not self.slow_start:  # past the slow start's doubling, what was admitted measures a limit
            sent = sum(1 for at in self.sends if now - span <= at != trigger)
            window = min(window, sent * (1 - share_bound(k, n, upper=False)))
        if self.trial is None or not self.trial.counts[1]:  # a series starts, or starts again
            self.trial = _Trial(now, span, self.window, [n, k, 0, 0], now)
        else:  # 429s went on after a cut: the slow start is over
            self.trial.at, self.trial.counts[2:], self.slow_start = now, [0, 0], False
            self.trial.cuts += 1
        self.last_cut, self.window, self.rate_to_blame = now, max(1.0, window), True
        self.cuts += 1

    def _share_rose(self, now: float) -> bool:
        """Whether the share of 429s among the requests of the last round trip that is all back
        (sent between two round trips and one ago) is clearly above the share of the trial that
        cleared the rate (rule 3; Fisher's exact test, one-sided, at ``ALPHA``); asked once a round trip."""
        span = self.srtt or math.inf
        if now < self.last_test + span:
            return False
        self.last_test = now
        round_trip = [refused for at, refused in self.recent if now - 2 * span <= at < now - span]
        n, k = len(round_trip), sum(round_trip)
        answers, refused = self.reference
        return fisher_tail(k, n, refused + k, answers + n) <= ALPHA

    # -- the record ------------------------------------------------------------------------
    def describe(self) -> dict:
        """What the meta file records: what the pacer followed and why, and its counts."""
        if not self.rate_to_blame:
            following, why = "429s", "429s came at a share that cutting did not lower: waited out, not cut"
        elif self.cuts:
            following, why = "429s", "429s fell when the window was cut: paced by a window on requests in flight"
        elif self.header_holds or self.shut_holds:
            following, why = "headers", "the provider said when its budget would be free again"
        else:
            following, why = "none", "no 429 came: paced by --concurrency alone"
        return {"model": self.name, "following": following, "why": why,
                "window": round(self.window, 2), "rpm_cap": self.rpm, "admitted": self.admissions,
                "responses_429": self.responses_429, "cuts": self.cuts, "cuts_undone": self.undone,
                "holds_for_headers": self.header_holds, "holds_for_429s": self.shut_holds,
                "seconds_held": round(self.held, 3)}


class RateLimits:
    """The pacers of one ``Client``, one per (provider, address, model), and the run's counts."""

    def __init__(self, patience: float, rpm: float | None = None, concurrency: float = math.inf):
        self.patience, self.rpm, self.concurrency = patience, rpm, concurrency
        self.pacers: dict[tuple, Pacer] = {}
        self.overloaded = self.past_patience = 0
        self.waited = 0.0

    def pacer(self, provider: str, base_url: str | None, model: str) -> Pacer:
        key = (provider, base_url, model)
        if key not in self.pacers:
            self.pacers[key] = Pacer(f"{provider}/{model}", self.rpm, longest_hold=self.patience,
                                     ceiling=self.concurrency)
        return self.pacers[key]

    @property
    def responses_429(self) -> int:
        return sum(p.responses_429 for p in self.pacers.values())

    @property
    def paced(self) -> bool:
        """Whether any request waited for a provider's limit (a 429, an overload, a hold)."""
        return bool(self.responses_429 or self.overloaded
                    or any(p.held for p in self.pacers.values()))

    def describe(self) -> list[dict]:
        return [p.describe() for p in self.pacers.values()]

    def summary(self) -> str | None:
        """The summary line's part, when the run was paced by a provider's limit."""
        if not self.paced:
            return None
        held = sum(p.held for p in self.pacers.values()) + self.waited
        parts = [f"{self.responses_429} 429 answers" if self.responses_429 else "",
                 f"{self.overloaded} overload answers" if self.overloaded else ""]
        said = " and ".join(p for p in parts if p)
        text = f"{said} waited out, " if said else ""
        text += f"{self.past_patience} past --patience, " if self.past_patience else ""
        return f"paced by the provider's rate limit ({text}{held:.1f}s waited)"
