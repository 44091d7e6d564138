"""The fused pixel path's scratch buffers: a returned buffer serves the next lease (no fresh
pages to fault in), a lease is never shared while held, the idle pool stays within its bound,
and the fused path returns every buffer it leased, on errors too."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import pytest
import torch
from PIL import Image

from mediaref.models.qwen2_vl import _scratch_buffers as scratch


@pytest.fixture(autouse=True)
def empty_pool() -> Iterator[None]:
    scratch._idle.clear()
    yield
    scratch._idle.clear()


def test_a_returned_buffer_serves_the_next_lease() -> None:
    with scratch.lease(1 << 20) as first:
        pointer = first.data_ptr()
    assert scratch.idle_bytes() == 1 << 20
    with scratch.lease(1000) as second:  # smaller: served by the idle buffer
        assert second.data_ptr() == pointer and second.numel() == 1000
    with scratch.lease((1 << 20) + 1) as third:  # larger: a new one
        assert third.data_ptr() != pointer


def test_the_best_fitting_idle_buffer_is_taken() -> None:
    with scratch.lease(4 << 20) as big, scratch.lease(1 << 20) as small:
        big_pointer, small_pointer = big.data_ptr(), small.data_ptr()
    with scratch.lease(100) as taken:
        assert taken.data_ptr() == small_pointer
    with scratch.lease(2 << 20) as taken:
        assert taken.data_ptr() == big_pointer


def test_a_held_lease_is_never_shared() -> None:
    pointers: list[int] = []
    barrier = threading.Barrier(8)

    def hold() -> None:
        with scratch.lease(1 << 16) as buffer:
            buffer.fill_(len(pointers) % 256)
            pointers.append(buffer.data_ptr())
            barrier.wait(timeout=30)  # all eight held at once

    threads = [threading.Thread(target=hold) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(set(pointers)) == 8


def test_the_idle_pool_keeps_within_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scratch, "RETAINED_BYTES", 3 << 20)
    with scratch.lease(4 << 20):  # over the bound on its own: never kept
        pass
    assert scratch.idle_bytes() == 0
    with scratch.lease(1 << 20), scratch.lease(1 << 20), scratch.lease(2 << 20):
        pass
    # 4 MiB returned against a 3 MiB bound: the smallest is dropped, the larger kept.
    assert scratch.idle_bytes() == 3 << 20
    assert sorted(buffer.numel() for buffer in scratch._idle) == [1 << 20, 2 << 20]


def test_a_lease_comes_back_when_its_block_raises() -> None:
    with pytest.raises(RuntimeError, match="boom"), scratch.lease(1 << 16):
        raise RuntimeError("boom")
    assert scratch.idle_bytes() == 1 << 16


def test_channels_last_views_the_buffer() -> None:
    with scratch.lease(2 * 3 * 4 * 5) as buffer:
        view = scratch.channels_last(buffer, (2, 5, 3, 4))
        assert view.shape == (2, 5, 3, 4)
        assert view.is_contiguous(memory_format=torch.channels_last)
        assert view.data_ptr() == buffer.data_ptr()


@pytest.mark.usefixtures("torch_resize")  # the native pass leases nothing: the next test
def test_the_fused_path_returns_what_it_leased(monkeypatch: pytest.MonkeyPatch) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from transformers import AutoImageProcessor

    from mediaref.models.builtin import builtin_model_path
    from mediaref.models.qwen2_vl import _fused as fused

    processor = AutoImageProcessor.from_pretrained(str(builtin_model_path("qwen2_vl")))
    settings = fused.image_settings(processor, {"do_rescale": False, "do_normalize": False})
    assert settings is not None
    rng = np.random.default_rng(0)
    image = Image.fromarray(rng.integers(0, 256, (300, 400, 3), dtype=np.uint8))
    target = fused.image_target(image, settings)
    assert target is not None
    held: list[int] = []
    lease = scratch.lease

    def counting(nbytes: int):  # type: ignore[no-untyped-def]
        held.append(nbytes)
        return lease(nbytes)

    monkeypatch.setattr(scratch, "lease", counting)
    with ThreadPoolExecutor(2) as executor:
        rows, _ = fused.image_rows(image, target, settings, executor=executor, pieces=2)
        # The resize's result and its horizontal pass: both back in the pool afterwards.
        assert len(held) == 2 and scratch.idle_bytes() == sum(held)
        first = scratch.idle_bytes()
        again, _ = fused.image_rows(image, target, settings, executor=executor, pieces=2)
        assert scratch.idle_bytes() == first  # served by the same buffers, none added
    assert torch.equal(rows, again)
    assert torch.equal(rows, fused.image_rows(image, target, settings)[0])

    def failing(*args: object, **kwargs: object) -> None:
        raise RuntimeError("band fails")

    monkeypatch.setattr(fused, "write_patch_rows", failing)
    before = scratch.idle_bytes()
    with pytest.raises(RuntimeError, match="band fails"):
        fused.image_rows(image, target, settings)
    assert scratch.idle_bytes() == before


@pytest.mark.usefixtures("native_resize")
def test_the_native_resize_leases_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its resized rows live in a small per-call window in cache, never a whole resized frame."""
    from concurrent.futures import ThreadPoolExecutor

    from transformers import AutoImageProcessor, AutoVideoProcessor

    from mediaref.models.builtin import builtin_model_path
    from mediaref.models.qwen2_vl import _fused as fused

    path = str(builtin_model_path("qwen2_vl"))
    raw = {"do_rescale": False, "do_normalize": False}
    settings = fused.image_settings(AutoImageProcessor.from_pretrained(path), raw)
    video_settings = fused.video_settings(
        AutoVideoProcessor.from_pretrained(path), {**raw, "do_sample_frames": False}
    )
    assert settings is not None and video_settings is not None
    rng = np.random.default_rng(0)
    image = Image.fromarray(rng.integers(0, 256, (300, 400, 3), dtype=np.uint8))
    frames = rng.integers(0, 256, (4, 61, 87, 3), dtype=np.uint8)
    target, video_target = (
        fused.image_target(image, settings),
        fused.video_target(frames, video_settings),
    )
    assert target is not None and video_target is not None

    def no_lease(nbytes: int) -> None:
        raise AssertionError("the native pass leases no scratch buffer")

    monkeypatch.setattr(scratch, "lease", no_lease)
    with ThreadPoolExecutor(2) as executor:
        fused.image_rows(image, target, settings, executor=executor, pieces=2)
        fused.video_rows(frames, video_target, video_settings, executor=executor, pieces=2)
    assert scratch.idle_bytes() == 0
