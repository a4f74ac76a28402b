"""The one retry rule: how long a request that went wrong waits before it goes again, or whether
it gives up. ``Client._send`` (``orbench.llm.clients``) only carries it out.

:func:`next_wait` takes what went wrong (the provider's ``classify`` sorted it into an
``Outcome``), the wait the server asked for (``Retry-After``, ``retry-after-ms``, Gemini's
``RetryInfo``; None when it asked none), the request's failed attempts of that kind so far, the
seconds since the request's first failure, ``--patience`` and ``--max_retries``. The rule, the
same for every outcome:

1. **The server asked a wait:** wait exactly that if it fits in what is left of ``--patience``
   since the request's first failure; if it does not, give up at once, naming the wait asked.
   Never sooner than asked (an HTTP date in the past asks for none).
2. **It asked nothing:** back off with full jitter, a wait drawn from 0 to ``BACKOFF_FIRST``
   seconds, doubling each attempt up to ``BACKOFF_LONGEST`` (the openai and anthropic SDKs' own
   defaults); for a 429 or an overload, a backoff that no longer fits in ``--patience`` gives up.
3. **How many times:** a 429 or an "overloaded" answer (the patient outcomes) goes on until
   ``--patience`` is spent; any other outcome worth asking again (5xx, 408, 409, a timeout, a
   dropped connection) spends one of ``--max_retries`` each time, and gives up once they are
   spent. Blocks, stops and row errors are not asked again.

So one 429 with ``Retry-After: 2`` waits 2 s; one 503 with none waits 0-0.5 s; one 500 with
``Retry-After: 86400`` gives up at once with the default ``--patience`` of 600 s.

:func:`long_wait_stop` is the run's side of rules 1 and 3: when ``GIVE_UPS_TO_STOP`` requests in a
row (no answer between) give up on a wait asked past ``--patience`` (a daily quota, a reset an
hour away), or on 429s or overloads asking no wait that took all of ``--patience`` (a quota
spent behind bare 429s, an outage), the run stops, exit 1, with one line naming the wait: every
further row would give up the same way, and a rerun after the wait does them. (A wait asked
that fits in ``--patience`` but not in what a request had left does not count: a fresh row
would wait it.)
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from datetime import timedelta

from orbench.llm.types import Outcome

BACKOFF_FIRST, BACKOFF_LONGEST = 0.5, 8.0
DAY = timedelta(days=1).total_seconds()  # a unit for reading waits, not a tunable
#: Requests in a row giving up on a wait asked past --patience before the run stops ("the
#: first few": one could be a server's slip, three in a row with no answer between are a rule).
GIVE_UPS_TO_STOP = 3

PATIENT = (Outcome.RATE_LIMIT, Outcome.OVERLOAD)
RETRIED = (*PATIENT, Outcome.RETRY, Outcome.CONNECTION)


@dataclass(frozen=True)
class GiveUp:
    """The request is not asked again: ``why`` (added to the row's error text; empty when its one
    attempt says it all) and the wait the server asked, when it was one too long (``asked``)."""

    why: str
    asked: float | None = None


def backoff(attempt: int, draw=random.random) -> float:
    """Seconds before the ``attempt``-th try again: exponential backoff with full jitter."""
    return draw() * min(BACKOFF_LONGEST, BACKOFF_FIRST * 2 ** min(attempt - 1, 16))


def next_wait(outcome: Outcome, asked: float | None, attempts: int, since_first: float,
              patience: float, max_retries: int, draw=random.random) -> float | GiveUp:
    """Seconds to wait before the request goes again, or :class:`GiveUp`, by the module's rule.

    ``attempts`` counts this request's failures of the kind ``outcome`` is (patient or not), this
    one included; ``since_first`` the seconds since its first failure of any kind; ``draw`` a
    uniform draw in [0, 1) for the jitter."""
    if outcome not in RETRIED:
        return GiveUp(f"not asked again ({outcome.value})")
    left = patience - max(0.0, since_first)
    if outcome not in PATIENT and attempts > max_retries:
        return GiveUp(f"{attempts} attempts" if attempts > 1 else "")  # one: nothing to add
    if asked is not None and not math.isnan(asked):
        asked = max(0.0, asked)
        if asked > left:
            said, spare = _asked_and_left(asked, max(0.0, left))
            return GiveUp(f"the server asked to wait {said}, more than the {spare} left of "
                          f"--patience", asked)
        return asked
    wait = backoff(attempts, draw)
    if outcome in PATIENT and wait > left:
        return GiveUp(f"--patience ({describe_wait(patience)}) spent")
    return wait


def describe_wait(seconds: float) -> str:
    """A wait as a person reads it: ``"45 s"``, ``"1 h 0 min"``, ``"3 days"``, ``"over a year"``
    (no quota resets that far off: the digits would say nothing), ``"forever"``."""
    if not math.isfinite(seconds):
        return "forever"
    if seconds >= 365 * DAY:
        return "over a year"
    if seconds < 120:
        return f"{seconds:g} s" if seconds < 10 else f"{seconds:.0f} s"
    if seconds >= 2 * DAY:
        return f"{seconds / DAY:.0f} days"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def _asked_and_left(asked: float, left: float) -> tuple[str, str]:
    """Both waits as a person reads them, in seconds to the digit that tells them apart when
    rounding made them read the same (``600.0001 s`` asked, ``600 s`` left)."""
    texts = describe_wait(asked), describe_wait(left)
    return texts if texts[0] != texts[1] else (f"{asked:.10g} s", f"{left:.10g} s")


def long_wait_stop(give_ups: int, asked: float | None, where: str, patience: float) -> str | None:
    """The line that stops a run once ``give_ups`` requests in a row have given up on a wait
    asked past --patience (the last ``asked`` seconds, at ``where``), or, asking none, on 429s
    or overloads that took all of ``patience`` (``asked`` None); None before."""
    if give_ups < GIVE_UPS_TO_STOP:
        return None
    if asked is None:
        return (f"{where} answered {give_ups} requests in a row with nothing but rate limits (429) "
                f"or \"overloaded\" for all of --patience ({describe_wait(patience)}): stopped; "
                f"rerun the same command later (or with a larger --patience) to do the rows left")
    return (f"{where} asked {give_ups} requests in a row to wait {describe_wait(asked)}, past "
            f"--patience: stopped; rerun the same command after that wait (or with a larger "
            f"--patience) to do the rows left")
