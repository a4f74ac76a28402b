"""What providers' rate-limit headers say, and the budgets the pacer keeps while it believes them.

:func:`read_limits` reads every known header family (OpenAI's ``x-ratelimit-*``, Anthropic's
``anthropic-ratelimit-*``, the IETF draft's ``ratelimit``) into one :class:`Reading` per budget;
:func:`retry_after` and :func:`parse_duration` read the waits and resets they name. A
:class:`Bucket` is one budget as the headers account for it (a token bucket, or a fixed window
when only the remaining count is sent). The rules for when the headers are believed live with
the pacer, in ``orbench.llm.ratelimit``.
"""

from __future__ import annotations

import math
import re
import statistics
import time
from collections import deque
from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime

_MARGIN = 0.02  # share of a budget kept in hand

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|us|µs|ns|h|m|s)")


def parse_duration(text: str, now_wall: float | None = None) -> float | None:
    """Seconds from now in a reset or retry header: ``"6m0s"``, ``"20ms"``, ``"1.5"``, an
    RFC 3339 time (Anthropic), an HTTP date, epoch seconds, or epoch milliseconds (some
    gateways: read as seconds, a reset thousands of years away). None when unreadable."""
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
        if value > 1e11:  # epoch milliseconds: 1e11 epoch seconds is the year 5138
            value /= 1000
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


# -- one budget ---------------------------------------------------------------

class Bucket:
    """The headers' account of one of the provider's budgets (requests or tokens).

    With a refill known (limit, remaining and reset reported), the level grows continuously;
    without one (remaining alone), the budget is taken as spent until the time a reset or a
    429's wait names (``full_at``), and full again from then on (a fixed window)."""

    def __init__(self) -> None:
        self.limit: float | None = None
        self.level: float | None = None
        self.at = 0.0
        self.rates: deque = deque(maxlen=15)
        self.lowest_remaining: float | None = None
        self.highest_remaining = 0.0
        self.full_at: float | None = None
        self.sent = 0.0  # units sent so far (for "sent since" at re-anchoring)

    @property
    def rate(self) -> float | None:
        """Refill per second: the median of ``(limit - remaining) / reset`` over recent replies."""
        return statistics.median(self.rates) if self.rates else None

    def level_at(self, now: float, scale: float) -> float | None:
        if self.level is None:
            return None
        rate = self.rate
        if not rate and self.full_at is not None and now >= self.full_at:
            self.level, self.at, self.full_at = self.limit or self.highest_remaining, self.full_at, None
        grown = self.level + (rate * scale * (now - self.at) if rate else 0.0)
        return min(self.limit, grown) if self.limit is not None else grown

    def wait(self, cost: float, now: float, scale: float) -> float:
        """Seconds until ``cost`` units fit, keeping a small margin in hand; ``math.inf`` when
        only a 429 can tell (spent, and no time known when it is full again)."""
        level = self.level_at(now, scale)
        rate = self.rate
        if level is None or cost <= 0 or level >= cost and not rate:
            return 0.0
        if not rate:
            return math.inf if self.full_at is None else self.full_at - now
        need = cost + _MARGIN * (self.limit or 0)
        if self.limit is not None:
            need = min(need, self.limit)
        return 0.0 if level >= need else (need - level) / (rate * scale)

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
        reported = reading.remaining
        self.lowest_remaining = reported if self.lowest_remaining is None else min(self.lowest_remaining,
                                                                                   reported)
        self.highest_remaining = max(self.highest_remaining, reported)
        if reading.reset is not None:
            self.full_at = now + reading.reset
        if self.limit and reading.reset and reading.reset > 0 and reported < self.limit:
            self.rates.append((self.limit - reported) / reading.reset)
        rate = self.rate or 0.0
        since = max(0.0, self.sent - sent_before)
        grown = reported + rate * max(0.0, now - sent_at)
        self.level = (min(self.limit, grown) if self.limit else grown) - since - unsure
        self.at = now
