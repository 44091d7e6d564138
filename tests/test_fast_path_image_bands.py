"""One image's pixel work cut across cores: the resize in torch's vectorized kernel (a lone
image's frame axis must carry its dense stride, or torch falls back to its generic kernel), the
channel planes taken from the kernel's channels-last output, and the planes and patch rows
made band by band on the executor. Every cut gives the bytes of the uncut path, which
``test_fast_path.py`` pins to HF's processor."""

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
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from mediaref.models.builtin import builtin_model_path
from mediaref.models.qwen2_vl import _fused as fused
from mediaref.models.qwen2_vl import _patch_rows

QWEN2_VL = str(builtin_model_path("qwen2_vl"))
RAW = {"do_rescale": False, "do_normalize": False}


@functools.cache
def image_processor() -> Any:
    from transformers import AutoImageProcessor

    return AutoImageProcessor.from_pretrained(QWEN2_VL)


@pytest.fixture(scope="module")
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(4, thread_name_prefix="test-bands") as executor:
        yield executor


def photo(width: int, height: int, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


def raw_case() -> tuple[fused.FusedVisionSettings, Image.Image, tuple[int, int]]:
    """uint8 settings (rescale and normalize off), a 400x300 photo, and its target size."""
    settings = fused.image_settings(image_processor(), RAW)
    assert settings is not None
    image = photo(400, 300)
    target = fused.image_target(image, settings)
    assert target is not None
    return settings, image, target


def test_a_lone_image_reaches_the_kernel_with_a_dense_frame_stride(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pixels = _patch_rows.rgb_pixels(photo(90, 60))
    lone = pixels[None]
    assert lone.strides[0] == 0  # numpy's new axis: the stride torch's fast kernel refuses
    seen: list[tuple[int, ...]] = []
    resize_into = _patch_rows._resize_into

    def recording(source: torch.Tensor, out: torch.Tensor) -> None:
        seen.append(source.stride())
        resize_into(source, out)

    monkeypatch.setattr(_patch_rows, "_resize_into", recording)
    resized = _patch_rows.resize_frames(lone, 56, 84)
    assert seen == [(60 * 90 * 4, 1, 90 * 4, 4)]
    assert resized.is_contiguous(memory_format=torch.channels_last)
    expected = torch.nn.functional.interpolate(
        torch.from_numpy(pixels.copy()).permute(2, 0, 1)[None],
        size=[56, 84],
        mode="bicubic",
        antialias=True,
    )
    assert torch.equal(resized, expected)


def test_an_image_at_its_target_size_is_not_resized_even_with_a_split() -> None:
    pixels = _patch_rows.rgb_pixels(photo(84, 56))[None]
    with ThreadPoolExecutor(1) as executor:
        same = _patch_rows.resize_frames(pixels, 56, 84, executor=executor)
    assert np.shares_memory(same.numpy(), pixels)


@pytest.mark.parametrize("source", [(60, 90), (61, 84), (1, 84), (57, 90), (56, 90)])
@pytest.mark.parametrize("target", [(56, 84), (61, 84), (112, 28)])
def test_the_split_resize_gives_the_one_call_bytes(
    source: tuple[int, int], target: tuple[int, int]
) -> None:
    pixels = _patch_rows.rgb_pixels(photo(source[1], source[0], seed=source[0]))[None]
    whole = _patch_rows.resize_frames(pixels, *target)
    with ThreadPoolExecutor(1) as executor:
        split = _patch_rows.resize_frames(pixels, *target, executor=executor)
    into = torch.empty((1, 4, *target), dtype=torch.uint8, memory_format=torch.channels_last)
    assert torch.equal(split, whole)
    written = _patch_rows.resize_frames(pixels, *target, into=into)
    assert torch.equal(written, whole)
    if source != target:  # at its size the frames themselves come back, ``into`` unused
        assert written is into


@settings(max_examples=60, deadline=None)
@given(
    frames=st.integers(1, 3),
    count=st.sampled_from([1, 3, 4]),
    height=st.integers(1, 40),
    width=st.integers(1, 40),
    channels_last=st.booleans(),
    keep=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_planes_are_the_channels_in_any_layout(
    frames: int,
    count: int,
    height: int,
    width: int,
    channels_last: bool,
    keep: int,
    seed: int,
) -> None:
    rng = np.random.default_rng(seed)
    values = torch.from_numpy(rng.integers(0, 256, (frames, count, height, width), dtype=np.uint8))
    source = values.contiguous(memory_format=torch.channels_last) if channels_last else values
    keep = min(keep, count)
    planes = _patch_rows.to_planes(source, keep)
    assert planes.is_contiguous() and planes.shape == (frames, keep, height, width)
    assert torch.equal(planes, values[:, :keep])
    assert torch.equal(_patch_rows.to_planes(source), values)


def test_planes_of_a_band_of_rows() -> None:
    values = torch.from_numpy(np.random.default_rng(1).integers(0, 256, (1, 4, 30, 17), np.uint8))
    source = values.contiguous(memory_format=torch.channels_last)
    assert torch.equal(_patch_rows.to_planes(source[:, :, 7:19], 3), values[:, :3, 7:19])


OUTPUTS = [
    pytest.param(RAW, None, id="uint8"),
    pytest.param({}, None, id="fp32"),
    pytest.param({}, torch.bfloat16, id="bf16"),  # normalized in fp32, then cast per band
]


@pytest.mark.usefixtures("resize_path")
@pytest.mark.parametrize(("kwargs", "dtype"), OUTPUTS)
@pytest.mark.parametrize("size", [(90, 60), (333, 517), (1931, 1079), (29, 1000)])
@pytest.mark.parametrize("pieces", [1, 2, 3, 64])
def test_any_cut_gives_hf_bytes(
    pool: ThreadPoolExecutor,
    size: tuple[int, int],
    pieces: int,
    kwargs: dict[str, Any],
    dtype: torch.dtype | None,
) -> None:
    settings = fused.image_settings(image_processor(), kwargs, dtype)
    assert settings is not None
    image = photo(*size, seed=size[0])
    target = fused.image_target(image, settings)
    assert target is not None
    rows, grid = fused.image_rows(image, target, settings, executor=pool, pieces=pieces)
    expected = image_processor()(images=[image], return_tensors="pt", **kwargs)
    pixels = expected["pixel_values"]
    assert rows.dtype == (dtype or pixels.dtype)
    assert torch.equal(rows, pixels if dtype is None else pixels.to(dtype))
    assert [list(grid)] == expected["image_grid_thw"].tolist()


@pytest.mark.usefixtures("torch_resize")
def test_with_torch_s_resize_a_lone_image_is_cut_on_the_executor(
    pool: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, image, target = raw_case()
    seen: list[tuple[str, int]] = []
    original = fused.write_patch_rows

    def recording(pixels: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        seen.append((threading.current_thread().name, pixels.shape[2]))
        original(pixels, *args, **kwargs)

    monkeypatch.setattr(fused, "write_patch_rows", recording)
    [(rows, _)] = fused.fused_rows(
        [image], [target], settings, video=False, executor=pool, pieces=4
    )
    # The first band on the caller's thread, the three others on the executor.
    caller = threading.current_thread().name
    assert sorted(name.startswith("test-bands") for name, _ in seen) == [False, True, True, True]
    assert {name for name, _ in seen} - {caller} <= {f"test-bands_{i}" for i in range(4)}
    assert sum(height for _, height in seen) == target[0]
    monkeypatch.setattr(fused, "write_patch_rows", original)
    assert torch.equal(rows, fused.image_rows(image, target, settings)[0])


@pytest.mark.usefixtures("native_resize")
def test_with_the_native_resize_a_lone_image_is_cut_on_the_executor(
    pool: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, image, target = raw_case()
    seen: list[tuple[str, tuple[int, int]]] = []
    original = fused.write_resized_patch_rows

    def recording(*args: Any, blocks: tuple[int, int], **kwargs: Any) -> None:
        seen.append((threading.current_thread().name, blocks))
        original(*args, blocks=blocks, **kwargs)

    monkeypatch.setattr(fused, "write_resized_patch_rows", recording)
    [(rows, _)] = fused.fused_rows(
        [image], [target], settings, video=False, executor=pool, pieces=4
    )
    # One call a piece (uint8 rows): the first on the caller's thread, three on the executor,
    # together every block (merged-patch row) once.
    caller = threading.current_thread().name
    assert sorted(name.startswith("test-bands") for name, _ in seen) == [False, True, True, True]
    assert {name for name, _ in seen} - {caller} <= {f"test-bands_{i}" for i in range(4)}
    blocks = sorted(cut for _, cut in seen)
    assert blocks[0][0] == 0 and blocks[-1][1] == target[0] // 28
    assert all(a[1] == b[0] for a, b in itertools.pairwise(blocks))
    monkeypatch.setattr(fused, "write_resized_patch_rows", original)
    assert torch.equal(rows, fused.image_rows(image, target, settings)[0])


@pytest.mark.parametrize("resize", ["torch_resize", "native_resize"])
def test_a_failing_band_surfaces_after_every_band_finished(
    pool: ThreadPoolExecutor,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    resize: str,
) -> None:
    request.getfixturevalue(resize)
    settings, image, target = raw_case()
    name = "write_patch_rows" if resize == "torch_resize" else "write_resized_patch_rows"
    original = getattr(fused, name)
    finished: list[int] = []
    calls: list[int] = []
    lock = threading.Lock()

    def first_fails(*args: Any, **kwargs: Any) -> None:
        with lock:
            calls.append(1)
            first = len(calls) == 1
        if first:
            raise RuntimeError("first band fails")
        time.sleep(0.05)  # still running when the first one fails
        original(*args, **kwargs)
        finished.append(1)

    monkeypatch.setattr(fused, name, first_fails)
    with pytest.raises(RuntimeError, match="first band fails"):
        fused.image_rows(image, target, settings, executor=pool, pieces=3)
    assert len(finished) == 2  # the two other bands ran to the end before the error surfaced


@pytest.mark.usefixtures("resize_path")
@pytest.mark.parametrize("pieces", [1, 2])
def test_the_smallest_bands_give_the_same_bytes(
    pool: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch, pieces: int
) -> None:
    """One merged-patch row (an image) or one temporal group (a video) per band: the most
    slices, each written and normalized on its own."""
    from transformers import AutoVideoProcessor

    settings = fused.image_settings(image_processor(), {}, torch.bfloat16)
    video_processor = AutoVideoProcessor.from_pretrained(QWEN2_VL)
    video_settings = fused.video_settings(video_processor, {"do_sample_frames": False})
    assert settings is not None and video_settings is not None
    image = photo(333, 517, seed=3)
    frames = np.random.default_rng(4).integers(0, 256, (7, 61, 87, 3), dtype=np.uint8)
    target = fused.image_target(image, settings)
    video_target = fused.video_target(frames, video_settings)
    assert target is not None and video_target is not None
    whole = fused.image_rows(image, target, settings)[0]
    whole_video = fused.video_rows(frames, video_target, video_settings)[0]
    monkeypatch.setattr(fused, "_BAND_BYTES", 1)
    sliced = fused.image_rows(image, target, settings, executor=pool, pieces=pieces)[0]
    sliced_video = fused.video_rows(
        frames, video_target, video_settings, executor=pool, pieces=pieces
    )[0]
    assert torch.equal(sliced, whole) and torch.equal(sliced_video, whole_video)


@pytest.mark.parametrize("pieces", [1, 2])
def test_an_image_at_its_target_is_read_in_place_without_a_lease(
    pool: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch, pieces: int
) -> None:
    settings = fused.image_settings(image_processor(), RAW)
    assert settings is not None
    image = photo(84, 56)
    assert fused.image_target(image, settings) == (56, 84)

    def no_lease(nbytes: int) -> None:
        raise AssertionError("nothing to resize: no scratch buffer")

    monkeypatch.setattr(fused.scratch_buffers, "lease", no_lease)
    rows, grid = fused.image_rows(image, (56, 84), settings, executor=pool, pieces=pieces)
    expected = image_processor()(images=[image], return_tensors="pt", **RAW)
    assert torch.equal(rows, expected["pixel_values"])
    assert [list(grid)] == expected["image_grid_thw"].tolist()
