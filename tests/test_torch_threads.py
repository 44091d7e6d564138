"""Bounded torch threads: scopes that overlap share one setting, and the last one out restores it.

torch's thread count is process-wide for every thread but the main one, so these tests set and
read it from worker threads, as the renderer's mm worker does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pytest
import torch

from _instrumented_decoding import (
    image_bytes,
    image_prompt,
    instrumented_ref,
    make_inspecting_processor_class,
    make_processor,
)
from mediaref.processing.torch_threads import default_num_threads, set_default_torch_num_threads
from mediaref.renderers.base import BaseRenderer, MultiModalRequest

_T = TypeVar("_T")
WAIT_S = 30.0


def on_worker(fn: Callable[[], _T]) -> _T:
    """Run ``fn`` on a fresh non-main thread (where torch's count is the process-wide one)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(fn).result(WAIT_S)


@pytest.fixture
def worker_threads() -> Iterator[int]:
    """Worker threads start at 3 threads (not 1, so a leak to 1 shows); restored afterwards."""
    before = on_worker(torch.get_num_threads)
    on_worker(lambda: torch.set_num_threads(3))
    try:
        yield 3
    finally:
        on_worker(lambda: torch.set_num_threads(before))


def test_default_follows_omp_num_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert default_num_threads() == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    assert default_num_threads() == 4
    for invalid in ("", "zero", "0", "-2"):
        monkeypatch.setenv("OMP_NUM_THREADS", invalid)
        assert default_num_threads() == 1
    with pytest.raises(ValueError, match=">= 1"):
        with set_default_torch_num_threads(0):
            pass


def test_a_scope_restores_after_an_exception(worker_threads: int) -> None:
    def body() -> None:
        with pytest.raises(KeyError):
            with set_default_torch_num_threads(2):
                assert torch.get_num_threads() == 2
                raise KeyError("body failed")

    on_worker(body)
    assert on_worker(torch.get_num_threads) == worker_threads


def test_nested_scopes_keep_the_outer_count_until_the_last_one_closes(worker_threads: int) -> None:
    def body() -> list[int]:
        seen = []
        with set_default_torch_num_threads(1):
            with set_default_torch_num_threads(2):
                seen.append(torch.get_num_threads())
            seen.append(torch.get_num_threads())
        seen.append(torch.get_num_threads())
        return seen

    assert on_worker(body) == [1, 1, worker_threads]


def test_scopes_overlapping_on_two_threads_leave_the_count_as_it_was(worker_threads: int) -> None:
    # A enters, B enters, A leaves, B leaves: save-set-restore per scope would have B restore the
    # 1 that A had set, leaving every thread of the process at 1 for good.
    a_entered, b_entered, a_left = threading.Event(), threading.Event(), threading.Event()
    inside: dict[str, int] = {}

    def scope_a() -> None:
        with set_default_torch_num_threads(1):
            a_entered.set()
            assert b_entered.wait(WAIT_S)
            inside["a"] = torch.get_num_threads()
        a_left.set()

    def scope_b() -> None:
        assert a_entered.wait(WAIT_S)
        with set_default_torch_num_threads(1):
            b_entered.set()
            assert a_left.wait(WAIT_S)
            inside["b"] = torch.get_num_threads()

    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(scope_a), pool.submit(scope_b)]
        for future in futures:
            future.result(WAIT_S)
    assert inside == {"a": 1, "b": 1}
    assert on_worker(torch.get_num_threads) == worker_threads


async def test_the_renderer_runs_hf_on_one_thread_and_restores_the_count(
    worker_threads: int,
    make_renderer: Callable[[Any], BaseRenderer],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    processor_cls = make_inspecting_processor_class()
    renderer = make_renderer(make_processor(processor_cls))
    first, _ = instrumented_ref(image_bytes(171))
    second, _ = instrumented_ref(image_bytes(172))

    await renderer.process_multimodal_async(MultiModalRequest(image_prompt(1), {"image": [first]}))
    renderer.process_multimodal(MultiModalRequest(image_prompt(1), {"image": [second]}))

    assert [call.torch_threads for call in processor_cls.hf_calls] == [1, 1]
    assert on_worker(torch.get_num_threads) == worker_threads
