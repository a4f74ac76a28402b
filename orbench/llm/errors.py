"""The project's exception types, sorted by what the caller should do with them.

- ``UsageError``: bad input or configuration (a flag, a file, a missing key). The run stops
  before or instead of doing work; the script prints one line and exits 2; the Python API raises
  it (a ``ValueError``).
- ``FatalProviderError``: the provider refused the whole run (bad key, no access, unknown model).
  Every further row would fail the same way, so the run stops at once; exit 2.
- ``WaitPastPatience``: the provider asks every request to wait past ``--patience``; the run
  stops, one line naming the wait, exit 1 (the rows finished are kept, a rerun does the rest).
- ``RowError``: one row failed: a request failed after the retries (what the provider's
  ``classify`` sorts as a row's failure), or a stage met an input row it cannot process. The row
  keeps its place with an ``error`` text and a rerun tries it again.

A transport error that reaches the stage runner unsorted (:data:`TRANSPORT_ERRORS`: a connection
dropped, a timeout, a broken HTTP exchange) fails its row too (:func:`fails_the_row`). Any other
exception is a bug in orbench: it stops the run with its traceback (exit 3), the rows finished
before it kept.
"""

from __future__ import annotations

import http.client
import ssl

import httpx


class UsageError(ValueError):
    """Bad input or configuration; one line for the user, exit code 2."""


class FatalProviderError(UsageError):
    """The provider rejected the run itself (401/403/404); stop everything, exit code 2."""


class RowError(Exception):
    """A single row failed: recorded in its ``error`` column, retried by a rerun."""


class WaitPastPatience(Exception):
    """The provider keeps asking requests to wait longer than ``--patience`` (a quota reset an hour
    away): the run stops with one line naming the wait, exit 1; its rows stay to rerun."""


#: Errors of the connection itself, below any provider's sorting: the row fails, the run goes on.
#: ``httpx.TransportError`` (connect, read, write, pool, timeout, protocol) is what the SDKs' HTTP
#: client raises; ``TimeoutError`` and ``ConnectionError`` the standard library's sockets and
#: ``asyncio.wait_for``; ``http.client.HTTPException`` and ``ssl.SSLError`` a broken exchange.
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    httpx.TransportError, TimeoutError, ConnectionError, http.client.HTTPException, ssl.SSLError)


def fails_the_row(exc: BaseException) -> bool:
    """Whether ``exc``, raised while a row was answered and decided, fails just that row
    (``RowError`` or a transport error); anything else but a stop (``UsageError``) is a bug."""
    return isinstance(exc, (RowError, *TRANSPORT_ERRORS))
