"""The shared media pool: created on first use, sized by VLLM_MEDIA_LOADING_THREAD_COUNT then."""

from __future__ import annotations

import threading
import time

import pytest

from mediaref.media import executor as media_executor


@pytest.fixture
def fresh_pool():
    media_executor.shutdown_media_executor()
    yield
    media_executor.shutdown_media_executor()


def _running_at_once(tasks: int, expected: int) -> int:
    """Submit ``tasks`` blocking tasks; once ``expected`` run (or 10 s pass), how many run."""
    pool = media_executor.get_media_executor()
    lock, running = threading.Lock(), [0]
    reached, release = threading.Event(), threading.Event()

    def task() -> None:
        with lock:
            running[0] += 1
            if running[0] >= expected:
                reached.set()
        release.wait(10)

    futures = [pool.submit(task) for _ in range(tasks)]
    reached.wait(10)
    time.sleep(0.1)  # room for a pool that is too large to start more
    with lock:
        seen = running[0]
    release.set()
    for future in futures:
        future.result(10)
    return seen


def test_pool_is_created_lazily_and_shared(fresh_pool) -> None:
    assert media_executor._executor is None
    pool = media_executor.get_media_executor()
    assert media_executor.get_media_executor() is pool
    name = pool.submit(lambda: threading.current_thread().name).result(10)
    assert name.startswith("mediaref-media")


def test_pool_size_defaults_to_eight(fresh_pool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_MEDIA_LOADING_THREAD_COUNT", raising=False)
    assert _running_at_once(12, expected=8) == 8


def test_pool_size_is_read_when_the_pool_is_created(
    fresh_pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_MEDIA_LOADING_THREAD_COUNT", "3")
    assert _running_at_once(6, expected=3) == 3


def test_invalid_pool_size_is_a_clear_error(fresh_pool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_MEDIA_LOADING_THREAD_COUNT", "0")
    with pytest.raises(ValueError, match="VLLM_MEDIA_LOADING_THREAD_COUNT must be >= 1"):
        media_executor.get_media_executor()
    monkeypatch.setenv("VLLM_MEDIA_LOADING_THREAD_COUNT", "many")
    with pytest.raises(ValueError, match="VLLM_MEDIA_LOADING_THREAD_COUNT='many' is invalid"):
        media_executor.get_media_executor()
