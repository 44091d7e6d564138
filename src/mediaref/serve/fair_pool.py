"""Thread pools that clients take turns on, for the server's blocking work.

The server's CPU work outside the model's worker (parsing a body, applying the chat template and
bounding the prompt's length, encoding a response) runs off the event loop. On a shared FIFO pool
one client's queue of expensive jobs would run before another client's cheap one; here each job
first takes a turn at a :class:`~mediaref.serve.client_limits.FairGate` with one place per
thread, so a client waits for at most the jobs already running plus one job of each other waiting
client, never for another client's whole queue; and with a per-client share under the thread
count, a client with work to do always finds a thread another client cannot take.
``/health`` and ``/metrics`` never go through a pool.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from collections.abc import Callable
from typing import Any, TypeVar

from mediaref.serve.client_limits import FairGate

_R = TypeVar("_R")


class FairPool:
    """``threads`` threads, at most ``per_client`` (0: all) of them running one client's jobs; a
    job waits for its client's turn, then runs on one of them."""

    def __init__(self, name: str, threads: int, per_client: int = 0) -> None:
        self.gate = FairGate(threads, per_client)
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=threads, thread_name_prefix=f"mediaref-{name}"
        )

    async def run(self, client: str, fn: Callable[..., _R], *args: Any) -> _R:
        """``fn(*args)`` on the pool once it is ``client``'s turn."""
        async with self.gate.slot(client):
            loop = asyncio.get_running_loop()
            job = loop.run_in_executor(self._executor, functools.partial(fn, *args))
            try:
                return await asyncio.shield(job)
            except asyncio.CancelledError:
                # The thread runs on whatever the caller does: its place stays taken until then.
                await asyncio.wait([job])
                raise

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


__all__ = ["FairPool"]
