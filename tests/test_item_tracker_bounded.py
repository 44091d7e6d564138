"""The async item tracker starts a request's items a bounded number at a time.

A request naming 32 URLs used to hold 32 fetch coroutines at once, half of them waiting for one of
its 16 connections: chains of frames that the garbage collector walked on every full collection
while they waited (the stalled requests of one client held hundreds; a collection took 100 ms,
which every other request felt). Now an item starts only when one of those places is free, and
after a failure no further item starts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from mediaref.renderers.chat_utils.item_tracker import _run_bounded


def _items(
    count: int, log: dict[str, Any], fail_at: int | None = None
) -> list[Callable[[], Awaitable[int]]]:
    def start(index: int) -> Callable[[], Awaitable[int]]:
        async def run() -> int:
            log["started"].append(index)
            log["now"] += 1
            log["peak"] = max(log["peak"], log["now"])
            try:
                await asyncio.sleep(0.01 if index != fail_at else 0.0)
                if index == fail_at:
                    raise ValueError(f"item {index}")
                return index
            finally:
                log["now"] -= 1

        return run

    return [start(i) for i in range(count)]


def _log() -> dict[str, Any]:
    return {"started": [], "now": 0, "peak": 0}


async def test_at_most_the_bound_run_at_once_and_results_keep_their_order() -> None:
    log = _log()
    results = await _run_bounded(_items(40, log), 16)
    assert results == list(range(40))
    assert log["peak"] == 16


async def test_after_a_failure_no_further_item_starts() -> None:
    log = _log()
    results = await _run_bounded(_items(40, log, fail_at=2), 16)
    assert isinstance(results[2], ValueError)
    assert len(log["started"]) == 16  # the ones already running end; nothing else begins
    assert results[16:] == [None] * 24


async def test_cancelling_the_request_cancels_its_running_items() -> None:
    log = _log()
    task = asyncio.create_task(_run_bounded(_items(40, log), 16))
    await asyncio.sleep(0.001)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert log["now"] == 0 and len(log["started"]) == 16
