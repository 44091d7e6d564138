"""Running a request's item loads at once, a bounded number at a time.

The async tracker starts an item only when one of the request's places is free
(``MEDIAREF_MEDIA_REQUEST_MAX_CONNECTIONS``, 16; 0 or less: all at once): a request naming 32
URLs keeps 16 fetches alive, not 32 coroutines of which half wait for a connection (each a
chain of frames the garbage collector walks while it waits). After a failure nothing more
starts, and every started load runs to its end before the caller sees the failure.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from mediaref import envs


def items_at_once(count: int) -> int:
    """How many of a request's ``count`` loads may run at once."""
    bound = int(envs.MEDIAREF_MEDIA_REQUEST_MAX_CONNECTIONS)
    return count if bound <= 0 else max(1, min(bound, count))


async def run_bounded(starts: list[Callable[[], Awaitable[Any]]], at_once: int) -> list[object]:
    """Each ``start()``'s result or exception, in order, at most ``at_once`` running; after the
    first exception nothing more starts (those never started are left None)."""
    results: list[object] = [None] * len(starts)
    running: dict[asyncio.Future[Any], int] = {}
    next_start, failed = 0, False
    try:
        while running or (next_start < len(starts) and not failed):
            while next_start < len(starts) and not failed and len(running) < at_once:
                running[asyncio.ensure_future(starts[next_start]())] = next_start
                next_start += 1
            done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                index = running.pop(task)
                error = task.exception()
                results[index] = error if error is not None else task.result()
                failed = failed or error is not None
    except BaseException:  # cancelled: so are the items still running, and awaited
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        raise
    return results


__all__ = ["items_at_once", "run_bounded"]
