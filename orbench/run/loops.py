"""Running the runner's coroutines from synchronous code, wherever that code runs.

Every run is a coroutine (the rows of a stage are asked concurrently on one event loop); the
scripts and the synchronous Python API (``orbench.evaluate`` ...) wait for it with
:func:`run_sync`. From a plain script there is no event loop yet, so it runs on a new one, in
this thread (``asyncio.run``: Ctrl-C cancels it, and the runner keeps every finished row). In
Jupyter a loop is already running in the calling thread, where ``asyncio.run`` cannot be called
and the loop cannot be re-entered; the coroutine then runs on a worker thread with a loop of its
own, and the calling thread waits for it. An interrupt of the waiting thread (the notebook's
stop button) cancels the coroutine on its loop, waits for it to wind down (finished rows saved,
connections closed) and is raised again. The ``*_async`` functions are the coroutines themselves,
to be awaited on the caller's own loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def loop_running() -> bool:
    """Whether an event loop is running in this thread (a notebook's, or an async caller's)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to its end and return its result (or raise its exception), from
    synchronous code: on a new loop in this thread, or, when a loop is running here already, on
    a worker thread with its own loop (module docstring)."""
    if not loop_running():
        return asyncio.run(coroutine)
    return _on_worker_thread(coroutine)


def _on_worker_thread(coroutine: Coroutine[Any, Any, T]) -> T:
    ready = threading.Event()
    found: dict[str, Any] = {}

    def work() -> None:
        loop = asyncio.new_event_loop()
        try:
            found["task"] = task = loop.create_task(coroutine)
            found["loop"] = loop
            ready.set()
            found["result"] = loop.run_until_complete(task)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread, which raises it
            found["error"] = exc
        finally:
            ready.set()
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()

    context = contextvars.copy_context()  # the caller's context variables (keys_not_needed ...) go along
    worker = threading.Thread(target=context.run, args=(work,), name="orbench-run", daemon=True)
    worker.start()
    try:
        worker.join()
    except KeyboardInterrupt:
        ready.wait()
        try:
            found["loop"].call_soon_threadsafe(found["task"].cancel)
        except (KeyError, RuntimeError):  # no loop made, or it has closed: the run has ended
            pass
        worker.join()  # the run winds down: finished rows saved, connections closed
        raise
    if "error" in found:
        error = found["error"]
        if isinstance(error, asyncio.CancelledError):
            raise KeyboardInterrupt from None
        raise error
    return found["result"]
