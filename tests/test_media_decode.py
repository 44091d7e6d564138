"""Decode orchestration: submit records at once, collect drains everything, errors in request order."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

import pytest

from mediaref.exceptions import VLLMUnprocessableEntityError
from mediaref.media.base import DecodeSpec, MediaRef
from mediaref.media.decode import (
    MediaDecodeJob,
    collect_media_decodes,
    collect_media_decodes_async,
    submit_media_decodes,
)


def gated_ref(
    gate: threading.Event, value: object = "ok", fail: Exception | None = None
) -> MediaRef:
    def decode() -> object:
        assert gate.wait(10), "gate never opened"
        if fail is not None:
            raise fail
        return value

    return MediaRef(b"x", decode, DecodeSpec())


def ready_ref(value: object = "ok", fail: Exception | None = None) -> MediaRef:
    gate = threading.Event()
    gate.set()
    return gated_ref(gate, value, fail)


def test_submit_appends_each_job_immediately_even_if_a_later_submit_fails(pool) -> None:
    class FailingSecondSubmit(concurrent.futures.Executor):
        def __init__(self) -> None:
            self.n = 0

        def submit(self, fn, /, *args, **kwargs):  # type: ignore[override]
            self.n += 1
            if self.n == 2:
                raise RuntimeError("cannot schedule new futures after shutdown")
            return pool.submit(fn, *args, **kwargs)

    jobs: list[MediaDecodeJob] = []
    with pytest.raises(RuntimeError, match="shutdown"):
        submit_media_decodes(
            [("image", 0, ready_ref()), ("image", 1, ready_ref())],
            jobs,
            executor=FailingSecondSubmit(),
        )
    assert len(jobs) == 1  # the running decode is on the caller's list, so it can be drained
    collect_media_decodes(jobs)


def test_collect_drains_every_future_before_raising_first_failure_in_request_order(pool) -> None:
    slow_gate = threading.Event()
    slow = gated_ref(slow_gate)
    bad0 = ready_ref(fail=ValueError("Failed to load image: corrupt 0"))
    bad2 = ready_ref(fail=ValueError("Failed to load image: corrupt 2"))
    jobs: list[MediaDecodeJob] = []
    submit_media_decodes(
        [("image", 0, bad0), ("image", 1, slow), ("image", 2, bad2)], jobs, executor=pool
    )
    outcome: list[BaseException] = []
    collector = threading.Thread(
        target=lambda: _capture(outcome, lambda: collect_media_decodes(jobs))
    )
    collector.start()
    collector.join(0.2)
    assert collector.is_alive()  # a failure is known, but the slow sibling is still running
    slow_gate.set()
    collector.join(5)
    (error,) = outcome
    assert isinstance(error, VLLMUnprocessableEntityError)
    assert error.status_code == 422 and error.modality == "image" and error.index == 0
    assert str(error).startswith("image media at index 0")
    assert isinstance(error.__cause__, ValueError)
    assert all(job.future.done() for job in jobs)


def _capture(outcome: list[BaseException], fn) -> None:
    try:
        fn()
    except BaseException as exc:  # the test inspects it
        outcome.append(exc)


def test_collect_uses_the_callers_error_factory(pool) -> None:
    jobs: list[MediaDecodeJob] = []
    submit_media_decodes([("audio", 3, ready_ref(fail=ValueError("bad")))], jobs, executor=pool)
    with pytest.raises(LookupError, match="audio#3: bad"):
        collect_media_decodes(jobs, lambda m, i, e: LookupError(f"{m}#{i}: {e}"))


def test_collect_success_leaves_refs_decoded(pool) -> None:
    refs = [ready_ref(i) for i in range(4)]
    jobs: list[MediaDecodeJob] = []
    submit_media_decodes([("image", i, r) for i, r in enumerate(refs)], jobs, executor=pool)
    collect_media_decodes(jobs)
    assert [r.decode() for r in refs] == [0, 1, 2, 3]
    assert all(r.is_decoded for r in refs)


async def test_collect_async_raises_first_failure_after_draining(pool) -> None:
    gate = threading.Event()
    jobs: list[MediaDecodeJob] = []
    submit_media_decodes(
        [
            ("video", 0, gated_ref(gate)),
            ("video", 1, ready_ref(fail=ValueError("Failed to decode video"))),
        ],
        jobs,
        executor=pool,
    )
    task = asyncio.ensure_future(collect_media_decodes_async(jobs))
    await asyncio.sleep(0.1)
    assert not task.done()
    gate.set()
    with pytest.raises(VLLMUnprocessableEntityError, match="video media at index 1"):
        await asyncio.wait_for(task, 5)


async def test_collect_async_drains_through_repeated_cancellation(pool) -> None:
    gate = threading.Event()
    jobs: list[MediaDecodeJob] = []
    submit_media_decodes(
        [("image", 0, gated_ref(gate)), ("image", 1, gated_ref(gate))], jobs, executor=pool
    )
    task = asyncio.ensure_future(collect_media_decodes_async(jobs))
    await asyncio.sleep(0.05)
    for _ in range(3):
        task.cancel()
        await asyncio.sleep(0.05)
        assert not task.done()  # still draining: the workers hold the payloads
    gate.set()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    assert all(job.future.done() and job.future.exception() is None for job in jobs)


async def test_collect_async_does_not_block_the_event_loop(pool) -> None:
    gate = threading.Event()
    jobs: list[MediaDecodeJob] = []
    submit_media_decodes([("image", 0, gated_ref(gate))], jobs, executor=pool)
    task = asyncio.ensure_future(collect_media_decodes_async(jobs))
    ticks = 0
    for _ in range(5):
        await asyncio.sleep(0.01)
        ticks += 1
    assert ticks == 5 and not task.done()
    gate.set()
    await asyncio.wait_for(task, 5)


async def test_collect_async_with_no_jobs_returns() -> None:
    await collect_media_decodes_async([])
