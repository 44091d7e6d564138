"""The async item tracker starts a request's items a bounded number at a time; the tracker
resolves the model only when it needs it, and takes items as vLLM's tests put them in.

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

from mediaref.exceptions import VLLMValidationError
from mediaref.processing.context import ModelConfig
from mediaref.renderers.chat_utils._bounded_loads import run_bounded
from mediaref.renderers.chat_utils.item_tracker import (
    AsyncMultiModalItemTracker,
    MultiModalItemTracker,
)


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
    results = await run_bounded(_items(40, log), 16)
    assert results == list(range(40))
    assert log["peak"] == 16


async def test_after_a_failure_no_further_item_starts() -> None:
    log = _log()
    results = await run_bounded(_items(40, log, fail_at=2), 16)
    assert isinstance(results[2], ValueError)
    assert len(log["started"]) == 16  # the ones already running end; nothing else begins
    assert results[16:] == [None] * 24


async def test_cancelling_the_request_cancels_its_running_items() -> None:
    log = _log()
    task = asyncio.create_task(run_bounded(_items(40, log), 16))
    await asyncio.sleep(0.001)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert log["now"] == 0 and len(log["started"]) == 16


# -- the tracker itself, as vLLM's tests drive it -----------------------------------------------


def _unregistered_model() -> ModelConfig:
    # A config whose model no processor is registered for: resolving its processing info fails.
    return ModelConfig(model="no-such-model-dir")


def test_building_a_tracker_reads_nothing_of_the_model() -> None:
    # vLLM's tracker resolves its processor on first need; its tests build one on a stand-in
    # config and give it a processor afterwards. Resolving at construction refused them.
    tracker = AsyncMultiModalItemTracker(_unregistered_model())
    assert tracker.get_num_items("image") == 0
    with pytest.raises((VLLMValidationError, OSError)):
        tracker.processing_info  # noqa: B018 - the first need resolves it, and fails here


async def test_items_put_straight_into_the_tracker_resolve_in_modality_order() -> None:
    async def load(name: str, delay: float) -> tuple[str, str]:
        await asyncio.sleep(delay)
        return name, f"{name}-uuid"

    tracker = AsyncMultiModalItemTracker(_unregistered_model())
    tracker.__dict__["mm_processor"] = object()  # as vLLM's test does; no embeddings to merge
    tracker._items_by_modality["video"] = [lambda: load("v0", 0.02), lambda: load("v1", 0.01)]
    tracker._items_by_modality["image"] = [lambda: load("i0", 0.01)]
    mm_data, mm_uuids = await tracker.resolve_items()
    assert mm_data == {"image": ["i0"], "video": ["v0", "v1"]}
    assert mm_uuids == {"image": ["i0-uuid"], "video": ["v0-uuid", "v1-uuid"]}

    sync = MultiModalItemTracker(_unregistered_model())
    sync._items_by_modality["audio"] = [("a0", None)]
    assert sync.resolve_items() == ({"audio": ["a0"]}, {"audio": [None]})
