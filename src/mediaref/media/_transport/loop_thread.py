"""The private event loop that the synchronous fetch API runs its downloads on.

There is one download implementation and it is async. A synchronous caller hands the coroutine to
a daemon thread that runs its own event loop and blocks until the result is back. That works from
any thread, including one whose own event loop is running (that loop simply waits, as it would
for any blocking call), because the download never needs the caller's loop. The one thing that
cannot work is a synchronous fetch issued *on* this private loop's thread — it would wait for
itself — so that raises instead of deadlocking.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

_T = TypeVar("_T")

_SHUTDOWN_SECONDS = 5.0


class _LoopThread:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name="mediaref-fetch-loop", daemon=True)
        try:
            self.thread.start()
        except BaseException:
            self.loop.close()  # its self-pipe descriptors go back; the next fetch tries again
            raise

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def stop(self) -> None:
        # Finalizing async generators is what closes the HTTP sessions bound to this loop
        # (see http_client), so the interpreter exits without "unclosed session" warnings.
        if not self.thread.is_alive():
            return
        done = asyncio.run_coroutine_threadsafe(self.loop.shutdown_asyncgens(), self.loop)
        with contextlib.suppress(Exception):
            done.result(_SHUTDOWN_SECONDS)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(_SHUTDOWN_SECONDS)


_lock = threading.Lock()
_current: _LoopThread | None = None


def _loop_thread() -> _LoopThread:
    global _current
    worker = _current
    # A forked child inherits the object but not the thread: start a fresh one there.
    if worker is None or worker.pid != os.getpid():
        with _lock:
            worker = _current
            if worker is None or worker.pid != os.getpid():
                first = _current is None
                worker = _current = _LoopThread()
                if first:
                    atexit.register(_stop_current)
    return worker


def _stop_current() -> None:
    worker = _current
    if worker is not None and worker.pid == os.getpid():
        worker.stop()


def run_sync(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro`` on the private loop and return its result (or raise its exception)."""
    try:
        worker = _loop_thread()
    except BaseException:
        coro.close()  # never started: close it rather than leave "never awaited" behind
        raise
    if threading.current_thread() is worker.thread:
        coro.close()
        raise RuntimeError(
            "a synchronous media fetch was called on mediaref's own fetch loop thread; "
            "await the _async variant there instead"
        )
    future = asyncio.run_coroutine_threadsafe(coro, worker.loop)
    try:
        return future.result()
    except BaseException:
        # Interrupted while waiting (KeyboardInterrupt): stop the download rather than orphan it.
        future.cancel()
        raise


__all__ = ["run_sync"]
