"""Logging: every module logs to its own logger (``logging.getLogger(__name__)``, under ``orbench``).

What a run says to its user (the progress bar, the summary line, warnings, one-line errors) is
printed as before; the log is what a developer or a bug report needs beside it: which provider
and address each model went to, retries and waits, files read and written, and exceptions
that were handled on purpose (with their tracebacks at DEBUG).

Nothing is configured on import (a library leaves that to its application), so by default only
warnings reach stderr, through Python's last-resort handler. Every script takes ``-v/--verbose``
(everything from DEBUG on, on stderr) and ``--log_file FILE`` (everything from DEBUG on, with
times, appended to FILE); the Python API takes the same as ``verbose=`` and ``log_file=``, for
the length of the call. :func:`configure` sets the ``orbench`` logger up for either.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = "orbench"
_FORMAT_STDERR = "%(levelname)s %(name)s: %(message)s"
_FORMAT_FILE = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _Stderr(logging.StreamHandler):
    """A handler writing to whatever ``sys.stderr`` is when a record comes (a notebook's, a
    redirected one), not the stream of the moment it was made."""

    def __init__(self):
        super().__init__()

    @property
    def stream(self):  # noqa: D102 - logging.StreamHandler's attribute
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


_installed: list[logging.Handler] = []


def configure(verbose: bool = False, log_file: str | Path | None = None) -> None:
    """Set the ``orbench`` logger up for a script run: ``verbose`` sends everything from DEBUG on
    to stderr, ``log_file`` appends everything from DEBUG on to that file. Handlers an earlier
    call installed are removed first (a process that runs several scripts, as the tests do)."""
    logger = logging.getLogger(ROOT)
    for handler in _installed:
        logger.removeHandler(handler)
        handler.close()
    _installed.clear()
    if verbose:
        handler = _Stderr()
        handler.setFormatter(logging.Formatter(_FORMAT_STDERR))
        _installed.append(handler)
    if log_file:
        from orbench.llm.errors import UsageError

        try:
            Path(log_file).parent.mkdir(parents=True, exist_ok=True)
            handler = logging.FileHandler(log_file, encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"--log_file {log_file}: cannot write it ({exc.strerror or exc})") from None
        handler.setFormatter(logging.Formatter(_FORMAT_FILE))
        _installed.append(handler)
    for handler in _installed:
        logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if _installed else logging.NOTSET)


@contextlib.contextmanager
def configured(verbose: bool = False, log_file: str | Path | None = None) -> Iterator[None]:
    """:func:`configure` for the length of a block (a Python API call), then as it was."""
    logger = logging.getLogger(ROOT)
    if not verbose and not log_file:
        yield
        return
    saved_handlers, saved_level = list(_installed), logger.level
    _installed.clear()  # the caller's own set-up stays; only what this block adds is removed after it
    configure(verbose, log_file)
    try:
        yield
    finally:
        configure()
        _installed.extend(saved_handlers)
        logger.setLevel(saved_level)
