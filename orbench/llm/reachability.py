"""Whether a provider's address can answer at all: the "nothing answers" checks.

:class:`Reachability` counts, per provider address, replies, connection failures and
"overloaded" answers. When the first attempts all fail to connect, or the address has answered
nothing but "overloaded" for a few seconds, ``dead`` is set and the ``Client`` stops the run
with one line naming the address, instead of waiting out ``--patience`` on every row.
"""

from __future__ import annotations

import asyncio
import re
import time

# Connection failures, with no reply ever received from the address, that stop the run.
DEAD_AFTER_FAILURES = 3
# Overload answers, and seconds since the first, with nothing else ever answered, that stop it.
OVERLOADED_AFTER = (6, 2.0)

clock = time.monotonic


def is_connect_failure(exc: BaseException) -> bool:
    """A failure to reach the server at all: refused, unknown host, TLS, connect timeout."""
    for link in (exc, exc.__cause__, exc.__context__):
        if link is not None and type(link).__name__ in ("ConnectError", "ConnectTimeout"):
            return True
    return False


class Reachability:
    """Replies, connection failures and overload answers at one provider address, to stop a run
    that cannot work: ``dead`` with ``kind`` ``connect`` or ``overloaded``."""

    def __init__(self) -> None:
        self.replies = 0
        self.failures = 0
        self.overloads = 0
        self.first_overload: float | None = None
        self.reason = ""
        self.kind = ""
        self.dead = False

    def note_reply(self) -> None:
        self.replies += 1

    def note_failure(self, exc: BaseException) -> None:
        self.failures += 1
        cause = exc.__cause__ or exc
        self.reason = re.sub(r"\s+", " ", str(cause) or type(cause).__name__).strip()[:200]
        if not self.replies and self.failures >= DEAD_AFTER_FAILURES:
            self.dead, self.kind = True, "connect"

    def note_overload(self, status: int) -> None:
        now = clock()
        self.overloads += 1
        self.first_overload = self.first_overload if self.first_overload is not None else now
        count, seconds = OVERLOADED_AFTER
        if not self.replies and self.overloads >= count and now - self.first_overload >= seconds:
            self.dead, self.kind = True, "overloaded"
            self.reason = (f"{self.overloads} answers in {now - self.first_overload:.0f} s, all HTTP "
                           f"{status} overloaded")

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
