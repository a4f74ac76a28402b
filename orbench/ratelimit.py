"""Adaptive pacing to a provider's rate limits, and the "nothing answers at all" check.

Every HTTP provider's SDK sends through ``orbench.providers.transport.WholeRequestTimeout``,
which hands each attempt to :func:`send`. When the ``Client`` is sending a model request it
attaches a :class:`Ticket` (the request's estimated cost and the :class:`Pacer` of its provider,
base URL and model) with :func:`attached`; :func:`send` then

- waits until the pacer's estimate of the provider's budget covers the request (requests, and
  tokens estimated as prompt characters / 4 plus ``max_tokens``, the way providers count them
  before generation);
- reads the limits the reply reports (OpenAI's ``x-ratelimit-{limit,remaining,reset}-{requests,
  tokens}``, Anthropic's ``anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-*``,
  and the bare / IETF ``ratelimit-*`` forms) and re-anchors the estimate on them;
- on a 429 waits as told (``retry-after-ms``, ``retry-after``, or the reset of the exhausted
  budget; without any header, an AIMD controller cuts the rate by 15 % and backs off) and
  sends the same request again, so the SDK never spends a retry and the row never fails while
  the provider merely asks to wait. Past the patience bound (``--patience``
  seconds since the request's first 429) the 429 goes back to the SDK as before.

The budget model is a token bucket per reported resource: capacity ``limit``, refill rate
``(limit - remaining) / reset`` (the reset headers give the time until the budget is full
again), level re-read from ``remaining`` on every reply minus what was sent since. A 429 while
every budget still had room means the provider enforces its limit over a shorter period than it
reports: the room it did not grant is learned as not there (``Bucket.hidden``), and from then on
that bucket keeps its own count, refilled at just under the reported rate (``_SHORT_PACE``), so
requests go evenly spaced. Until a pacer's first reply only ``SLOW_START`` requests go out.

:class:`Reachability` counts, per provider address, replies and connection failures; when the
first attempts all fail to connect (refused, unknown host, TLS) before anything has answered,
the ``Client`` stops the run with one line naming the address.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import statistics
import time
from collections import deque
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import parsedate_to_datetime

DEFAULT_PATIENCE = 600.0
# Connection failures, with no reply ever received from the address, that stop the run.
DEAD_AFTER_FAILURES = 3
_DECREASE = 0.85       # rate factor after a 429 the budget model did not foresee
_SHORT_DECREASE = 0.97  # the same once a short enforcement window is learned
_INCREASE = 1.002      # rate factor per success, back up to what the headers allow
_MARGIN = 0.02         # share of a budget kept in hand
_MAX_SLEEP = 0.5       # re-check the budget at least this often while waiting
_SHORT_PACE = 0.97     # share of the refill used once a short enforcement window is learned
SLOW_START = 4         # requests in flight before the first reply (the limits are not yet known)

_CURRENT: ContextVar[Ticket | None] = ContextVar("orbench_rate_ticket", default=None)

clock = time.monotonic


# -- reading the headers ---------------------------------------------------------------------

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|us|µs|ns|h|m|s)")


def parse_duration(text: str, now_wall: float | None = None) -> float | None:
    """Seconds from now in a reset or retry header: ``"6m0s"``, ``"20ms"``, ``"1.5"``, an
    RFC 3339 time (Anthropic), an HTTP date, or epoch seconds. None when unreadable."""
    text = (text or "").strip()
    if not text:
        return None
    now_wall = time.time() if now_wall is None else now_wall
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(value):
            return None
        return max(0.0, value - now_wall) if value > 1e9 else max(0.0, value)
    parts = _DURATION.findall(text)
    if parts and "".join(n + u for n, u in parts) == text.replace(" ", ""):
        scale = {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
        return sum(float(n) * scale[u] for n, u in parts)
    for parse in (lambda t: datetime.fromisoformat(t.replace("Z", "+00:00")), parsedate_to_datetime):
        try:
            moment = parse(text)
        except (ValueError, TypeError, IndexError):
            continue
        if moment.tzinfo is None:
            continue
        return max(0.0, moment.timestamp() - now_wall)
    return None


def retry_after(headers) -> float | None:
    """The wait a 429 asks for: ``retry-after-ms``, else ``retry-after``; None when absent."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    return parse_duration(value) if value is not None else None


@dataclass
class Reading:
    """One budget as a reply reports it."""

    limit: float | None = None
    remaining: float | None = None
    reset: float | None = None  # seconds until the budget is full again


_FIELDS = ("limit", "remaining", "reset")
_PERIODS = ("second", "minute", "hour", "day")


def resource_kind(name: str) -> str:
    """What one unit of a budget is: ``requests``, ``tokens``, ``input-tokens``, ``output-tokens``."""
    if "token" in name:
        return "input-tokens" if "input" in name else "output-tokens" if "output" in name else "tokens"
    return "requests"


def _resource(raw: str) -> str:
    raw = raw.strip("-")
    kind = resource_kind(raw)
    period = next((p for p in _PERIODS if p in raw), None)
    return f"{kind}-per-{period}" if period else kind


def read_limits(headers) -> tuple[dict[str, Reading], str | None]:
    """The budgets a reply reports, by resource, and the header style (``openai``, ``anthropic``,
    ``ietf``), from any of the known header families."""
    found: dict[str, Reading] = {}
    style = None
    for name, value in headers.items():
        name = name.lower()
        if name == "ratelimit":  # IETF draft: "limit=100, remaining=50, reset=5"
            pairs = dict(p.strip().split("=", 1) for p in value.split(",") if "=" in p)
            reading = found.setdefault("requests", Reading())
            for key in _FIELDS:
                if key in pairs:
                    _set(reading, key, pairs[key].strip())
            style = style or "ietf"
            continue
        match = re.fullmatch(r"(x-|anthropic-)?ratelimit-(.+)", name)
        if not match:
            continue
        rest = match.group(2)
        key = next((f for f in _FIELDS if rest == f or rest.startswith(f + "-") or rest.endswith("-" + f)),
                   None)
        if key is None:
            continue
        resource = rest[len(key):] if rest.startswith(key) else rest[:-len(key)]
        _set(found.setdefault(_resource(resource), Reading()), key, value)
        prefix = match.group(1)
        style = style or {"x-": "openai", "anthropic-": "anthropic"}.get(prefix or "", "ietf")
    return found, style


def _set(reading: Reading, key: str, value: str) -> None:
    if key == "reset":
        reading.reset = parse_duration(value)
        return
    try:
        number = float(value.strip())
    except ValueError:
        return
    if math.isfinite(number) and number >= 0:
        setattr(reading, key, number)


# -- the budget model ------------------------------------------------------------------------

class Bucket:
    """The estimate of one of the provider's budgets (requests or tokens)."""

    def __init__(self) -> None:
        self.limit: float | None = None
        self.level: float | None = None
        self.at = 0.0
        self.rates: deque = deque(maxlen=15)
        # Learned: what the reported "remaining" counts that the provider does not let through
        # at once (a per-minute limit enforced over shorter periods).
        self.hidden = 0.0
        self.lowest_remaining: float | None = None
        self.sent = 0.0  # units sent so far (for "sent since" at re-anchoring)
        # Share of the refill rate to use: just under 1 once a short window is learned, so
        # the requests go evenly spaced instead of in bursts the short window refuses.
        self.pace = 1.0

    @property
    def rate(self) -> float | None:
        return statistics.median(self.rates) if self.rates else None

    def cap(self) -> float:
        return self.limit - self.hidden if self.limit is not None else math.inf

    def level_at(self, now: float, scale: float) -> float | None:
        if self.level is None:
            return None
        rate = self.rate
        grown = self.level + (rate * scale * self.pace * (now - self.at) if rate else 0.0)
        return min(self.cap(), grown)

    def wait(self, cost: float, now: float, scale: float) -> float:
        """Seconds until ``cost`` units fit, keeping a small margin in hand."""
        level = self.level_at(now, scale)
        if level is None or cost <= 0:
            return 0.0
        margin = _MARGIN * (self.limit or 0)
        need = min(cost + margin, self.cap())
        if level >= need:
            return 0.0
        rate = self.rate
        if not rate:
            return 0.0  # no refill known: only the 429s can tell
        return (need - level) / (rate * scale * self.pace)

    def take(self, cost: float, now: float, scale: float) -> None:
        level = self.level_at(now, scale)
        if level is not None:
            self.level, self.at = level - cost, now
        self.sent += cost

    def refund(self, cost: float) -> None:
        if self.level is not None:
            self.level += cost
        self.sent -= cost

    def observe(self, reading: Reading, sent_at: float, sent_before: float, now: float,
                unsure: float = 0.0) -> None:
        """Re-anchor on what a reply reports: ``sent_before`` is ``self.sent`` just after that
        request was sent, so what was sent since is not yet in the provider's count; ``unsure``
        is what was sent before it and is still in flight (it may have reached the provider
        after it): counted as spent, to be safe."""
        if reading.limit is not None and reading.limit > 0:
            self.limit = reading.limit
        if reading.remaining is None:
            return
        remaining = reading.remaining - self.hidden
        reported = reading.remaining
        self.lowest_remaining = (reported if self.lowest_remaining is None
                                 else min(self.lowest_remaining, reported))
        if self.limit and reading.reset and reading.reset > 0 and reported < self.limit:
            self.rates.append((self.limit - reported) / reading.reset)
        if self.hidden and self.level is not None:
            # A short window learned: its level is below what "remaining" can show (and that is
            # rounded to whole units), so the bucket is kept by its own count, refilled at just
            # under the reported rate and emptied on a 429.
            return
        rate = self.rate or 0.0
        since = max(0.0, self.sent - sent_before)
        self.level = min(self.cap(), remaining + rate * max(0.0, now - sent_at)) - since - unsure
        self.at = now


@dataclass
class Ticket:
    """One model request on its way: its costs, its pacer, its patience, its address's health."""

    pacer: Pacer
    costs: dict[str, float]
    patience: float = DEFAULT_PATIENCE
    reach: Reachability | None = None
    sent_at: float = 0.0
    sent_before: dict = field(default_factory=dict)
    level_after: dict = field(default_factory=dict)
    first_429: float | None = None
    not_before: float = 0.0
    seq: int = 0

    def cost(self, resource: str) -> float:
        return self.costs.get(resource_kind(resource), 0.0)


def request_costs(prompt_chars: int, max_tokens: int) -> dict[str, float]:
    """Units of each budget one request uses, as providers count them before generation."""
    prompt = math.ceil(prompt_chars / 4)
    return {"requests": 1.0, "tokens": float(prompt + max_tokens), "input-tokens": float(prompt),
            "output-tokens": float(max_tokens)}


class Pacer:
    """Paces the requests to one (provider, base URL, model) to stay just under its limits."""

    def __init__(self, provider: str, base_url: str | None, model: str):
        self.provider, self.base_url, self.model = provider, base_url, model
        self.buckets: dict[str, Bucket] = {}
        self.style: str | None = None
        self.scale = 1.0
        self.hold_until = 0.0
        self.last_decrease = -math.inf
        # AIMD when the provider reports no limits: requests per second, None until a 429.
        self.aimd_rate: float | None = None
        self.next_start = 0.0
        self.backoff = 0
        self.successes: deque = deque(maxlen=400)
        self.in_flight: dict[int, Ticket] = {}
        self._seq = 0
        # For the meta file and the summary.
        self.responses_429 = 0
        self.resent = 0
        self.gave_up = 0
        self.waited = 0.0       # seconds requests spent held by this pacer
        self.waited_requests = 0
        self.replies = 0        # replies of any kind: until the first, only SLOW_START go out

    @property
    def headers_seen(self) -> bool:
        return any(b.rate or b.level is not None for b in self.buckets.values())

    def _wait(self, ticket: Ticket, now: float) -> float:
        wait = max(self.hold_until, ticket.not_before) - now
        for name, bucket in self.buckets.items():
            wait = max(wait, bucket.wait(ticket.cost(name), now, self.scale))
        if self.aimd_rate and not self.headers_seen:
            wait = max(wait, self.next_start - now)
        return wait

    @property
    def slow_starting(self) -> bool:
        """Before the first reply (which tells the limits) only ``SLOW_START`` requests go out:
        a burst of the whole concurrency would overrun a budget smaller than it."""
        return not self.replies and len(self.in_flight) >= SLOW_START

    async def acquire(self, ticket: Ticket) -> None:
        """Wait until the request fits the budget, then book it."""
        started = clock()
        while True:
            if self.slow_starting:  # not a wait for the provider's limit: not counted as held
                await asyncio.sleep(0.01)
                started = clock()
                continue
            now = clock()
            wait = self._wait(ticket, now)
            if wait <= 0:
                break
            await asyncio.sleep(min(wait, _MAX_SLEEP))
        if now - started > 0.001:
            self.waited += now - started
            self.waited_requests += 1
        for name, bucket in self.buckets.items():
            bucket.take(ticket.cost(name), now, self.scale)
            ticket.sent_before[name] = bucket.sent
            ticket.level_after[name] = bucket.level
        if self.aimd_rate and not self.headers_seen:
            self.next_start = max(self.next_start, now) + 1 / self.aimd_rate
        ticket.sent_at = now
        self._seq += 1
        ticket.seq = self._seq
        self.in_flight[ticket.seq] = ticket

    def refund(self, ticket: Ticket) -> None:
        """The request never reached the provider (connection failed): give its units back."""
        self.in_flight.pop(ticket.seq, None)
        for name, bucket in self.buckets.items():
            if name in ticket.sent_before:
                bucket.refund(ticket.cost(name))

    def observe(self, ticket: Ticket, status: int, headers) -> float | None:
        """Take in a reply; for a 429 to wait out, the seconds to wait, else None."""
        now = clock()
        self.in_flight.pop(ticket.seq, None)
        self.replies += 1
        readings, style = read_limits(headers)
        self.style = self.style or style
        earlier = [t for seq, t in self.in_flight.items() if seq < ticket.seq] if readings else []
        for name, reading in readings.items():
            bucket = self.buckets.get(name)
            if bucket is None:
                bucket = self.buckets[name] = Bucket()
                # A budget first heard of now: what was sent since this request is unknown to it.
                ticket.sent_before[name] = 0.0
            bucket.observe(reading, ticket.sent_at, ticket.sent_before.get(name, bucket.sent), now,
                           sum(t.cost(name) for t in earlier))
        if status != 429:
            if 200 <= status < 300:
                self.successes.append(now)
                self.backoff = 0
                self.scale = min(1.0, self.scale * _INCREASE)
                if self.aimd_rate:  # faster while no 429 has come for a while
                    calm = now - self.last_decrease > 2.0
                    self.aimd_rate *= _INCREASE ** (5 if calm else 1)
            return None
        self.responses_429 += 1
        told = retry_after(headers)
        exhausted = [(name, r) for name, r in readings.items() if r.remaining is not None
                     and r.remaining < max(1.0, ticket.cost(name))]
        # One decrease (and backoff step) per congestion event. A bare 429 that says how long to
        # wait is waited out as told; the rate is only cut when the provider says nothing at all.
        if ticket.sent_at > self.last_decrease and (readings or told is None):
            self.last_decrease = now
            self.backoff += 1
            self._slow_down(ticket, readings, now)
        if told is None:
            told = self._own_wait(ticket, exhausted, now)
        self.hold_until = max(self.hold_until, now + told)
        return told

    def _slow_down(self, ticket: Ticket, readings: dict, now: float) -> None:
        if self.headers_seen:
            rooms = {}
            for name, bucket in self.buckets.items():
                reading = readings.get(name)
                if reading is not None and reading.remaining is not None:
                    rooms[name] = reading.remaining - bucket.hidden
                elif ticket.level_after.get(name) is not None:
                    rooms[name] = ticket.level_after[name] + ticket.cost(name)
            costs = {name: max(1.0, ticket.cost(name)) for name in rooms}
            if rooms and all(rooms[n] >= costs[n] for n in rooms):
                # Every budget had room, yet the provider said no: it lets less through at once
                # than its limit says. Take the tightest budget's room as not really there.
                name = min(rooms, key=lambda n: rooms[n] / costs[n])
                bucket = self.buckets[name]
                if bucket.limit:
                    bucket.hidden = min(bucket.limit - costs[name], bucket.hidden + rooms[name])
                    bucket.pace = _SHORT_PACE
            else:
                # The budget model was right but sent too much: slow its refill estimate. With a
                # short window learned, most such 429s come from timing (two requests a little
                # closer than the even spacing): a gentle cut, still enough to follow a limit
                # that really drops.
                short = any(b.hidden for b in self.buckets.values())
                self.scale = max(0.25, self.scale * (_SHORT_DECREASE if short else _DECREASE))
            for bucket in self.buckets.values():
                if bucket.level is not None:
                    bucket.level = min(bucket.level, 0.0)
                    bucket.at = now
            return
        if self.aimd_rate:
            base = self.aimd_rate
        else:  # the first 429: start from the rate answers came at (over at least a second)
            recent = [t for t in self.successes if t > now - 2.0]
            if len(recent) < 4:
                return  # too few answers to measure a rate: back off only
            base = len(recent) / min(2.0, max(1.0, now - recent[0]))
        self.aimd_rate = max(0.05, base * _DECREASE)
        self.next_start = max(self.next_start, now + 1 / self.aimd_rate)

    def _own_wait(self, ticket: Ticket, exhausted: list, now: float) -> float:
        """No retry header: wait for the exhausted budget, or back off."""
        waits = []
        for name, reading in exhausted:
            bucket = self.buckets[name]
            if bucket.rate:
                waits.append(max(ticket.cost(name), 1.0) / (bucket.rate * self.scale))
            elif reading.reset is not None:
                waits.append(reading.reset)
        if waits:
            return min(max(waits), 60.0)
        rate = self.aimd_rate or 1.0
        return min(8.0, (2.0 / rate) * 2 ** max(0, self.backoff - 1))

    def describe(self) -> dict:
        """What the meta file records about this pacer."""
        limits = {}
        for name, bucket in sorted(self.buckets.items()):
            rate = bucket.rate
            limits[name] = {
                "limit": bucket.limit,
                "lowest_remaining": bucket.lowest_remaining,
                "refill_per_minute": round(rate * 60, 3) if rate else None,
            }
        return {
            "provider": self.provider, "base_url": self.base_url, "model": self.model,
            "header_style": self.style, "limits_seen": limits,
            "responses_429": self.responses_429, "resent_after_429": self.resent,
            "passed_to_sdk_after_patience": self.gave_up,
            "requests_held": self.waited_requests, "seconds_held": round(self.waited, 3),
            "adaptive_requests_per_minute": round(self.aimd_rate * 60, 3) if self.aimd_rate else None,
        }


class RateLimits:
    """The pacers of one ``Client``, one per (provider, base URL, model), and their record."""

    def __init__(self, patience: float = DEFAULT_PATIENCE):
        self.patience = patience
        self.pacers: dict[tuple, Pacer] = {}

    def pacer(self, provider: str, base_url: str | None, model: str) -> Pacer:
        key = (provider, base_url, model)
        found = self.pacers.get(key)
        if found is None:
            found = self.pacers[key] = Pacer(provider, base_url, model)
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
        """Whether any request waited for a provider's limit (held before sending, or a 429)."""
        return any(p.responses_429 or p.waited_requests for p in self.pacers.values())

    def describe(self) -> list[dict]:
        return [p.describe() for p in self.pacers.values()]

    def summary(self) -> str | None:
        """The summary line's part, when the run was paced by a provider's limit."""
        if not self.paced:
            return None
        held = sum(p.waited for p in self.pacers.values())
        text = f"paced by the provider's rate limit ({self.responses_429} 429 answers waited out"
        gave_up = sum(p.gave_up for p in self.pacers.values())
        if gave_up:
            text += f", {gave_up} past --patience"
        return text + f", {held:.1f}s held)"


# -- reachability ------------------------------------------------------------------------------

def is_connect_failure(exc: BaseException) -> bool:
    """A failure to reach the server at all: refused, unknown host, TLS, connect timeout."""
    for link in (exc, exc.__cause__, exc.__context__):
        if link is not None and type(link).__name__ in ("ConnectError", "ConnectTimeout"):
            return True
    return False


class Reachability:
    """Replies and connection failures at one provider address, to stop a run that cannot work."""

    def __init__(self) -> None:
        self.replies = 0
        self.failures = 0
        self.reason = ""
        self.dead = False

    def note_reply(self) -> None:
        self.replies += 1

    def note_failure(self, exc: BaseException) -> None:
        self.failures += 1
        cause = exc.__cause__ or exc
        self.reason = re.sub(r"\s+", " ", str(cause) or type(cause).__name__).strip()[:200]
        if not self.replies and self.failures >= DEAD_AFTER_FAILURES:
            self.dead = True

    async def guard(self, work) -> tuple[bool, object]:
        """``(True, result)`` of awaiting ``work``; ``(False, None)`` when the address is found
        dead meanwhile (``work`` is then cancelled: the SDK may be sleeping before a retry)."""
        task = asyncio.ensure_future(_captured(work))
        try:
            while not self.dead:
                done, _ = await asyncio.wait({task}, timeout=0.2)
                if done:
                    ok, value = task.result()
                    if not ok:
                        raise value
                    return True, value
        except BaseException:  # cancelled: cancel the work too, and let it finish unwinding
            task.cancel()
            try:
                await asyncio.wait({task})
            finally:
                if task.done() and not task.cancelled():
                    task.exception()  # retrieved: not "never retrieved" at shutdown
            raise
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return False, None


async def _captured(work) -> tuple[bool, object]:
    """``(True, result)`` or ``(False, exception)`` of ``work``: the task that runs it never ends
    in an exception of its own, which asyncio.run would report at an interrupted run's shutdown."""
    try:
        return True, await work
    except Exception as exc:  # noqa: BLE001 - handed back to the caller, which raises it
        return False, exc


# -- the transport hook ------------------------------------------------------------------------

@contextlib.contextmanager
def attached(ticket: Ticket):
    """Make ``ticket`` the one the transport paces while the block runs (this task only)."""
    token = _CURRENT.set(ticket)
    try:
        yield ticket
    finally:
        _CURRENT.reset(token)


def _quota_exhausted(response) -> bool:
    """A 429 that waiting will not fix (OpenAI's "insufficient_quota": out of credit)."""
    try:
        return b"insufficient_quota" in response.content
    except Exception:  # noqa: BLE001 - a streamed body: treat as a pacing 429
        return False


async def send(request, attempt):
    """Send ``request`` with ``attempt`` (one timed HTTP attempt), paced by the attached ticket."""
    ticket = _CURRENT.get()
    if ticket is None:
        return await attempt(request)
    pacer = ticket.pacer
    while True:
        await pacer.acquire(ticket)
        try:
            response = await attempt(request)
        except BaseException as exc:
            pacer.in_flight.pop(ticket.seq, None)
            if is_connect_failure(exc):
                pacer.refund(ticket)
                if ticket.reach is not None:
                    ticket.reach.note_failure(exc)
            raise
        if ticket.reach is not None:
            ticket.reach.note_reply()
        if response.status_code == 429 and _quota_exhausted(response):
            return response
        wait = pacer.observe(ticket, response.status_code, response.headers)
        if wait is None:
            return response
        now = clock()
        if ticket.first_429 is None:
            ticket.first_429 = now
        if now + wait - ticket.first_429 > ticket.patience:
            pacer.gave_up += 1
            return response
        ticket.not_before = now + wait
        pacer.resent += 1
        await response.aclose()
