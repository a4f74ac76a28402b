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

A transport error that reaches the stage runner unsorted (:func:`transport_errors`: a connection
dropped, a timeout, a broken HTTP exchange) fails its row too (:func:`fails_the_row`). Any other
exception is a bug in orbench: it stops the run with its traceback (exit 3), the rows finished
before it kept.
"""

from __future__ import annotations

import http.client
import ssl
import sys


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
#: ``TimeoutError`` and ``ConnectionError`` are the standard library's sockets and ``asyncio.wait_for``;
#: ``http.client.HTTPException`` and ``ssl.SSLError`` a broken exchange. :func:`transport_errors` adds
#: the HTTP libraries' own.
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    TimeoutError, ConnectionError, http.client.HTTPException, ssl.SSLError)
#: The HTTP libraries the SDKs' clients are built on (``orbench.llm.providers.transport.http_module``):
#: their ``TransportError`` (connect, read, write, pool, timeout, protocol) is what those clients raise.
HTTP_LIBRARIES = ("httpx", "httpx2")


def transport_errors() -> tuple[type[BaseException], ...]:
    """:data:`TRANSPORT_ERRORS` and the ``TransportError`` of each of :data:`HTTP_LIBRARIES` imported
    so far. A library not imported has raised nothing, so none is imported here: httpx takes a
    tenth of a second to import, which every script (the report, the keyword judge) would pay."""
    loaded = (getattr(sys.modules.get(name), "TransportError", None) for name in HTTP_LIBRARIES)
    return TRANSPORT_ERRORS + tuple(error for error in loaded if error is not None)


def fails_the_row(exc: BaseException) -> bool:
    """Whether ``exc``, raised while a row was answered and decided, fails just that row
    (``RowError`` or a transport error); anything else but a stop (``UsageError``) is a bug."""
    return isinstance(exc, (RowError, *transport_errors()))
