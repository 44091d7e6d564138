"""The native resize + patch rows pass (models/qwen2_vl/_aa_resize.c through _patch_rows_native.c): torch's
uint8 antialiased bicubic resize then the rows, byte for byte, for any sizes, layouts, frame
counts and cuts into blocks, with the vector loops and without; used by the fused path exactly
where it gives torch's bytes; a clear error for sizes that do not fit (never a read or write out
of bounds); the GIL released while it runs."""

from __future__ import annotations

import itertools
import platform
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from _gil import python_progress_in_some_call
from mediaref.models.qwen2_vl import _patch_rows
from mediaref.models.qwen2_vl import _patch_rows_native as native

BEST_LEVEL = native.simd_level()
LEVELS = {0: "plain", 1: "avx2", 2: "avx512"}


@pytest.fixture(params=list(LEVELS), ids=list(LEVELS.values()))
def simd(request: pytest.FixtureRequest) -> Iterator[int]:
    """Each of the passes' loops in turn: plain C, AVX2, AVX-512 (those the CPU has)."""
    if request.param > BEST_LEVEL:
        pytest.skip(f"no {LEVELS[request.param]} here")
    assert native.set_simd_level(request.param) == request.param
    try:
        yield int(request.param)
    finally:
        native.set_simd_level(BEST_LEVEL)


def row_shape(
    frames: int, height: int, width: int, channels: int, patch: int, temporal: int
) -> tuple[int, int]:
    groups = -(-frames // temporal)
    return groups * (height // patch) * (width // patch), channels * temporal * patch * patch


def torch_rows(
    pixels: np.ndarray, target: tuple[int, int], channels: int, geometry: tuple[int, int, int]
) -> np.ndarray:
    """What the fused path writes without the native resize: torch's kernel, then the rows."""
    patch, merge, temporal = geometry
    frames = len(pixels)
    out = np.empty(row_shape(frames, *target, channels, patch, temporal), dtype=np.uint8)
    resized = _patch_rows.resize_frames(pixels, *target)
    _patch_rows.write_patch_rows(
        resized,
        channels,
        patch_size=patch,
        merge_size=merge,
        temporal_patch_size=temporal,
        out=out,
    )
    return out


def native_rows(
    pixels: np.ndarray,
    target: tuple[int, int],
    channels: int,
    geometry: tuple[int, int, int],
    cuts: tuple[int, ...] = (),
) -> np.ndarray:
    """The native pass, one call per run of blocks between ``cuts``, each into its slice."""
    patch, merge, temporal = geometry
    frames, height, width, pixel_bytes = pixels.shape
    out = np.empty(row_shape(frames, *target, channels, patch, temporal), dtype=np.uint8)
    blocks = -(-frames // temporal) * (target[0] // (patch * merge))
    per_block = out.shape[0] // blocks
    bounds = [0, *sorted({cut % blocks for cut in cuts} - {0}), blocks]
    for first, stop in itertools.pairwise(bounds):
        native.resize_patch_rows(
            pixels, frames, height, width, pixel_bytes, channels, *target,
            patch, merge, temporal, first, stop, out[first * per_block : stop * per_block],
        )  # fmt: skip
    return out


def test_the_fused_path_resizes_natively_on_this_machine() -> None:
    # On x86-64, torch's uint8 antialiased kernel is the integer one the pass reproduces; its
    # first-use check against torch must find the same bytes there, or the fused path would
    # quietly keep torch's slower resize.
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("the integer kernel is torch's x86 one")
    assert _patch_rows.resize_in_rows()


def test_the_best_vector_loops_the_cpu_has_are_used() -> None:
    cpuinfo = Path("/proc/cpuinfo")
    flags = set(cpuinfo.read_text().split()) if cpuinfo.exists() else set()
    if not flags:
        pytest.skip("no /proc/cpuinfo to compare with")
    expected = 2 if {"avx512f", "avx512bw"} <= flags else 1 if "avx2" in flags else 0
    assert native.simd_level() == BEST_LEVEL == expected
    assert native.set_simd_level(5) == BEST_LEVEL and native.set_simd_level(-1) == 0
    native.set_simd_level(BEST_LEVEL)


# (patch, merge, temporal): Qwen2-VL's, Qwen3-VL's patch, no merge, more slots, tiny patches.
GEOMETRIES = [(14, 2, 2), (16, 2, 2), (14, 1, 1), (2, 1, 3), (1, 1, 1), (3, 2, 2)]


@settings(max_examples=150, deadline=None)
@given(
    frames=st.integers(1, 5),
    height=st.integers(1, 90),
    width=st.integers(1, 90),
    blocks=st.tuples(st.integers(1, 6), st.integers(1, 6)),
    pixel_bytes=st.sampled_from([3, 4]),
    channels=st.integers(1, 4),
    geometry=st.sampled_from(GEOMETRIES),
    cuts=st.lists(st.integers(0, 40), max_size=3),
    level=st.sampled_from(list(LEVELS)),
    seed=st.integers(0, 2**16),
)
def test_torch_s_bytes_for_any_sizes_layout_and_cut(
    frames: int,
    height: int,
    width: int,
    blocks: tuple[int, int],
    pixel_bytes: int,
    channels: int,
    geometry: tuple[int, int, int],
    cuts: list[int],
    level: int,
    seed: int,
) -> None:
    # Down and up on either axis, an axis left as it is (that pass skipped), windows stretched by
    # large factors, 1-pixel inputs; every channel count a pixel can give.
    patch, merge, _ = geometry
    target = (blocks[0] * patch * merge, blocks[1] * patch * merge)
    channels = min(channels, pixel_bytes)
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (frames, height, width, pixel_bytes), dtype=np.uint8)
    native.set_simd_level(level)  # one the CPU lacks runs the best it has
    try:
        got = native_rows(pixels, target, channels, geometry, tuple(cuts))
    finally:
        native.set_simd_level(BEST_LEVEL)
    assert np.array_equal(got, torch_rows(pixels, target, channels, geometry))


# Real sizes: 1080p to its Qwen2-VL target (a slight upscale), a 4:3 photo down by more than two,
# a clip's frames, a portrait image over one Pillow block (3-byte pixels), a thin strip.
REAL_CASES = [
    ((1, 1080, 1920, 4), (1092, 1932)),
    ((1, 960, 1280, 4), (448, 588)),
    ((5, 480, 854, 3), (476, 840)),
    ((1, 2731, 1537, 3), (2744, 1540)),
    ((1, 27, 1000, 4), (28, 1008)),
]


@pytest.mark.parametrize(("shape", "target"), REAL_CASES, ids=lambda case: str(case))
def test_torch_s_bytes_at_real_sizes(
    simd: int, shape: tuple[int, int, int, int], target: tuple[int, int]
) -> None:
    rng = np.random.default_rng(shape[1])
    # Smooth content with noise: real photos' weights and rounding, not only random bytes.
    ramp = np.add.outer(np.arange(shape[1]), np.arange(shape[2])) % 256
    pixels = (ramp[None, :, :, None] + rng.integers(-8, 9, shape)).clip(0, 255).astype(np.uint8)
    geometry = (14, 2, 2)
    expected = torch_rows(pixels, target, 3, geometry)
    assert np.array_equal(native_rows(pixels, target, 3, geometry), expected)
    assert np.array_equal(native_rows(pixels, target, 3, geometry, cuts=(1, 7, 20)), expected)


@pytest.mark.usefixtures("simd")
def test_saturated_values_clamp_as_torch_s() -> None:
    # Black-white edges: the cubic's negative lobes overshoot both ends of the byte range.
    pixels = np.zeros((1, 64, 64, 4), dtype=np.uint8)
    pixels[:, :, ::2] = 255
    pixels[:, ::3] = 255 - pixels[:, ::3]
    for target in ((28, 28), (112, 140), (56, 28)):
        expected = torch_rows(pixels, target, 4, (14, 2, 2))
        assert np.array_equal(native_rows(pixels, target, 4, (14, 2, 2)), expected)


def test_a_native_resize_that_differs_from_torch_is_not_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def off_by_one(*args: Any) -> None:
        native.resize_patch_rows(*args)
        out = args[-1]
        out[0, 0] ^= 1

    monkeypatch.setattr(_patch_rows, "_resize_in_rows", None)
    monkeypatch.setattr(_patch_rows, "native_resize_patch_rows", off_by_one)
    assert not _patch_rows.resize_in_rows()
    monkeypatch.setattr(_patch_rows, "_resize_in_rows", None)
    monkeypatch.setattr(_patch_rows, "native_resize_patch_rows", None)  # not built
    assert not _patch_rows.resize_in_rows()
    monkeypatch.setattr(_patch_rows, "_resize_in_rows", None)
    monkeypatch.setattr(_patch_rows, "native_resize_patch_rows", native.resize_patch_rows)
    assert _patch_rows.resize_in_rows() == (platform.machine() in ("x86_64", "AMD64"))


def test_the_setting_turns_the_native_resize_off(monkeypatch: pytest.MonkeyPatch) -> None:
    from mediaref.models.qwen2_vl import _fused as fused

    if not _patch_rows.resize_in_rows():
        pytest.skip("the native resize does not give torch's bytes here")
    called: list[int] = []
    monkeypatch.setattr(fused, "write_resized_patch_rows", lambda *a, **k: called.append(1))
    monkeypatch.setenv("MEDIAREF_NATIVE_RESIZE", "0")
    assert not _patch_rows.resize_in_rows()
    settings = fused.FusedVisionSettings(14, 2, 2, 3136, 12845056, None, None, None)
    frames = np.zeros((2, 30, 40, 3), dtype=np.uint8)
    rows, _ = fused.video_rows(frames, (56, 56), settings)  # torch's resize, then the rows
    assert not called and rows.shape == (16, 1176)
    monkeypatch.setenv("MEDIAREF_NATIVE_RESIZE", "1")
    assert _patch_rows.resize_in_rows()
    fused.video_rows(frames, (56, 56), settings)
    assert called == [1]


def test_write_resized_patch_rows_checks_out() -> None:
    pixels = np.zeros((1, 30, 40, 4), dtype=np.uint8)
    for out in (
        np.empty((55, 1176), dtype=np.uint8),  # one row short of blocks [0, 1)
        np.empty((56, 1176), dtype=np.int16),
    ):
        with pytest.raises(ValueError, match="out must be uint8"):
            _patch_rows.write_resized_patch_rows(
                pixels, 56, 56, 3, patch_size=14, merge_size=2, temporal_patch_size=2,
                blocks=(0, 1), out=out,
            )  # fmt: skip


# --- sizes that do not fit ----------------------------------------------------------------------


def good_arguments() -> list[Any]:
    pixels = np.zeros((3, 30, 41, 4), dtype=np.uint8)
    # 3 frames -> 2 groups of 2 blocks (56 rows at 84 wide): blocks [1, 3), each 6 * 2 rows.
    out = np.zeros((2 * 12, 3 * 2 * 14 * 14), dtype=np.uint8)
    return [pixels, 3, 30, 41, 4, 3, 56, 84, 14, 2, 2, 1, 3, out]


def test_the_good_arguments_are_taken() -> None:
    native.resize_patch_rows(*good_arguments())


@pytest.mark.parametrize(
    ("index", "value", "message"),
    [
        (1, 4, "expected"),  # a frame more than the pixels hold
        (2, 31, "expected"),  # rows the pixels lack: never read past their end
        (3, 40, "expected"),
        (6, 55, "multiples of patch"),
        (7, 42, "multiples of patch"),
        (6, 0, "out of range"),
        (7, -28, "out of range"),
        (4, 2, "out of range"),
        (5, 5, "out of range"),
        (8, 0, "out of range"),
        (10, 0, "out of range"),
        (11, -1, r"blocks \[-1, 3\)"),
        (11, 4, r"blocks \[4, 3\)"),
        (12, 5, r"blocks \[1, 5\) not within \[0, 4\)"),
        (12, 2, "expected"),  # fewer blocks than the output holds
        (1, 2**62, "overflow|expected"),
        (6, 2**58 * 28, "overflow|expected"),
    ],
)
def test_arguments_that_do_not_fit_are_refused(index: int, value: int, message: str) -> None:
    arguments = good_arguments()
    arguments[index] = value
    out = arguments[-1]
    out[:] = 7
    with pytest.raises(ValueError, match=message):
        native.resize_patch_rows(*arguments)
    assert (out == 7).all()  # refused before any write


def test_buffers_it_cannot_use_are_refused() -> None:
    arguments = good_arguments()
    read_only = arguments[-1].copy()
    read_only.flags.writeable = False
    for index, value in (
        (13, read_only),
        (13, bytes(arguments[-1].size)),
        (0, np.zeros((3, 41, 30, 4), dtype=np.uint8).transpose(0, 2, 1, 3)),  # not contiguous
        (0, "pixels"),
    ):
        broken = list(arguments)
        broken[index] = value
        with pytest.raises((TypeError, ValueError, BufferError)):
            native.resize_patch_rows(*broken)


# --- the GIL ------------------------------------------------------------------------------------


def test_the_pass_lets_python_run_beside_it() -> None:
    pixels = np.random.default_rng(3).integers(0, 256, (2, 1080, 1920, 4), dtype=np.uint8)
    out = np.empty(row_shape(2, 1092, 1932, 3, 14, 2), dtype=np.uint8)
    arguments = (pixels, 2, 1080, 1920, 4, 3, 1092, 1932, 14, 2, 2, 0, 39, out)
    _, progress = python_progress_in_some_call(lambda: native.resize_patch_rows(*arguments))
    assert progress > 0
    assert torch.equal(
        torch.from_numpy(out), torch.from_numpy(torch_rows(pixels, (1092, 1932), 3, (14, 2, 2)))
    )
