"""A single video's frames cut into pieces on the media pool: the same bytes as HF's processor
whatever the cut (odd frame counts pad only in the last piece), every piece waited for before an
error surfaces, and a call from a pool thread never waits on the pool."""

from __future__ import annotations

import functools
import itertools
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
import torch

from mediaref.media.executor import MEDIA_POOL_THREAD_PREFIX
from mediaref.models.builtin import builtin_model_path
from mediaref.models.qwen2_vl import _fused as fused

QWEN2_VL = str(builtin_model_path("qwen2_vl"))
RAW = {"do_rescale": False, "do_normalize": False}


@functools.cache
def video_processor() -> Any:
    from transformers import AutoVideoProcessor

    return AutoVideoProcessor.from_pretrained(QWEN2_VL)


@pytest.fixture(scope="module")
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(4, thread_name_prefix="test-pieces") as executor:
        yield executor


def clip(count: int, height: int = 61, width: int = 87) -> np.ndarray:
    return np.random.default_rng(count).integers(0, 256, (count, height, width, 3), dtype=np.uint8)


@pytest.mark.parametrize(
    ("kwargs", "dtype"),
    [
        pytest.param(RAW, None, id="uint8"),
        pytest.param({}, None, id="fp32"),
        pytest.param({}, torch.bfloat16, id="bf16"),  # normalized in fp32, cast per piece
    ],
)
@pytest.mark.parametrize("count", [1, 2, 3, 5, 8, 9])
@pytest.mark.parametrize("pieces", [1, 2, 3, 7])
@pytest.mark.usefixtures("resize_path")
def test_any_cut_gives_hf_bytes(
    pool: ThreadPoolExecutor,
    count: int,
    pieces: int,
    kwargs: dict[str, Any],
    dtype: torch.dtype | None,
) -> None:
    call_kwargs = {**kwargs, "do_sample_frames": False}
    settings = fused.video_settings(video_processor(), call_kwargs, dtype)
    assert settings is not None
    frames = clip(count)
    target = fused.video_target(frames, settings)
    assert target is not None
    rows, grid = fused.video_rows(frames, target, settings, executor=pool, pieces=pieces)
    expected = video_processor()(videos=[frames], return_tensors="pt", **call_kwargs)
    pixels = expected["pixel_values_videos"]
    assert rows.dtype == (dtype or pixels.dtype)
    assert torch.equal(rows, pixels if dtype is None else pixels.to(dtype))
    assert [list(grid)] == expected["video_grid_thw"].tolist()


def raw_clip(count: int) -> tuple[fused.FusedVisionSettings, np.ndarray, tuple[int, int]]:
    settings = fused.video_settings(video_processor(), {**RAW, "do_sample_frames": False})
    assert settings is not None
    frames = clip(count)
    target = fused.video_target(frames, settings)
    assert target is not None
    return settings, frames, target


@pytest.mark.usefixtures("torch_resize")
def test_with_torch_s_resize_a_single_video_is_cut_on_the_executor(
    pool: ThreadPoolExecutor,
) -> None:
    settings, frames, target = raw_clip(8)
    seen: list[str] = []
    original = fused.resize_frames

    def recording(*args: Any, **kwargs: Any) -> torch.Tensor:
        seen.append(threading.current_thread().name)
        return original(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fused, "resize_frames", recording)
        [(rows, _)] = fused.fused_rows(
            [frames], [target], settings, video=True, executor=pool, pieces=4
        )
    # The first piece on the caller's thread, the three others on the executor.
    assert len(seen) == 4  # one call a piece: a piece of this clip is one group
    assert seen.count(threading.current_thread().name) == 1
    assert len([name for name in seen if name.startswith("test-pieces")]) == 3
    assert torch.equal(rows, fused.video_rows(frames, target, settings)[0])


@pytest.mark.usefixtures("native_resize")
def test_with_the_native_resize_a_single_video_is_cut_on_the_executor(
    pool: ThreadPoolExecutor,
) -> None:
    settings, frames, target = raw_clip(8)
    seen: list[tuple[str, tuple[int, int]]] = []
    original = fused.write_resized_patch_rows

    def recording(*args: Any, blocks: tuple[int, int], **kwargs: Any) -> None:
        seen.append((threading.current_thread().name, blocks))
        original(*args, blocks=blocks, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fused, "write_resized_patch_rows", recording)
        [(rows, _)] = fused.fused_rows(
            [frames], [target], settings, video=True, executor=pool, pieces=4
        )
    # One call a piece, the first on the caller's thread; together every block of every group.
    assert len(seen) == 4
    assert [name for name, _ in seen].count(threading.current_thread().name) == 1
    blocks = sorted(cut for _, cut in seen)
    assert blocks[0][0] == 0 and blocks[-1][1] == 4 * target[0] // 28
    assert all(a[1] == b[0] for a, b in itertools.pairwise(blocks))
    assert torch.equal(rows, fused.video_rows(frames, target, settings)[0])


@pytest.mark.usefixtures("torch_resize")
def test_with_torch_s_resize_a_failing_piece_surfaces_after_every_piece_finished(
    pool: ThreadPoolExecutor,
) -> None:
    settings, frames, target = raw_clip(8)
    original = fused.resize_frames
    finished: list[int] = []

    def flaky(chunk: np.ndarray, *args: Any, **kwargs: Any) -> torch.Tensor:
        if np.shares_memory(chunk[0], frames[0]):
            raise RuntimeError("first piece fails")
        time.sleep(0.05)  # the others are still running when the first one fails
        result = original(chunk, *args, **kwargs)
        finished.append(chunk.shape[0])
        return result

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fused, "resize_frames", flaky)
        with pytest.raises(RuntimeError, match="first piece fails"):
            fused.video_rows(frames, target, settings, executor=pool, pieces=4)
    assert sum(finished) == 6  # the three other pieces of two frames each ran to the end


@pytest.mark.usefixtures("native_resize")
def test_with_the_native_resize_a_failing_piece_surfaces_after_every_piece_finished(
    pool: ThreadPoolExecutor,
) -> None:
    settings, frames, target = raw_clip(8)
    original = fused.write_resized_patch_rows
    finished: list[tuple[int, int]] = []

    def flaky(*args: Any, blocks: tuple[int, int], **kwargs: Any) -> None:
        if blocks[0] == 0:
            raise RuntimeError("first piece fails")
        time.sleep(0.05)  # the others are still running when the first one fails
        original(*args, blocks=blocks, **kwargs)
        finished.append(blocks)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fused, "write_resized_patch_rows", flaky)
        with pytest.raises(RuntimeError, match="first piece fails"):
            fused.video_rows(frames, target, settings, executor=pool, pieces=4)
    assert len(finished) == 3  # the three other pieces ran to the end


def test_from_a_media_pool_thread_a_video_is_not_cut() -> None:
    """The pool's own threads run it whole: waiting there on queued pieces could deadlock."""
    settings = fused.video_settings(video_processor(), {**RAW, "do_sample_frames": False})
    assert settings is not None
    frames = clip(6)
    target = fused.video_target(frames, settings)
    assert target is not None
    with ThreadPoolExecutor(1, thread_name_prefix=MEDIA_POOL_THREAD_PREFIX) as media:

        def nested() -> list[Any]:
            return fused.fused_rows(
                [frames], [target], settings, video=True, executor=media, pieces=4
            )

        [(rows, grid)] = media.submit(nested).result(timeout=120)
    assert torch.equal(rows, fused.video_rows(frames, target, settings)[0])
    assert grid == (3, *grid[1:])


@pytest.mark.parametrize(
    "out",
    [
        np.empty((3, 1176), np.uint8),  # one group short
        np.empty((4, 1176), np.float32),
        np.empty((4, 2352), np.uint8)[:, ::2],  # not contiguous
    ],
    ids=["shape", "dtype", "strided"],
)
def test_patch_rows_refuses_an_out_it_cannot_fill(out: np.ndarray) -> None:
    from mediaref.models.qwen2_vl._patch_rows import patch_rows

    planes = torch.zeros((2, 3, 28, 28), dtype=torch.uint8)
    with pytest.raises(ValueError, match="out must be"):
        patch_rows(planes, patch_size=14, merge_size=2, temporal_patch_size=2, out=out)
