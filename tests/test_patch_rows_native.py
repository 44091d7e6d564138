"""The native patch-rows pass (models/qwen2_vl/_patch_rows_native.c): built, the numpy path's bytes for
every layout it takes, the numpy path for everything else, a clear error for sizes that do not
fit (never a write out of bounds), and the GIL released while it copies."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
import torch

from _gil import python_progress_in_some_call
from mediaref.models.qwen2_vl import _patch_rows

try:
    from mediaref.models.qwen2_vl import _patch_rows_native as native
except ImportError as exc:  # fails the run: a development install should have it
    raise ImportError(
        "mediaref.models.qwen2_vl._patch_rows_native was not built (setup.py builds it where a C "
        "compiler is found): reinstall with one, `pip install -e '.[test]'`"
    ) from exc


def test_the_fused_path_uses_the_extension() -> None:
    # setup.py builds it as an optional extension: an install without a C compiler still works
    # (numpy writes the rows), but a development install should know, so this module's import
    # fails there.
    assert _patch_rows.native_patch_rows is native.patch_rows


def numpy_rows(
    pixels: np.ndarray, channels: int, patch: int, merge: int, temporal: int
) -> np.ndarray:
    """The numpy path: planes of the first ``channels``, then the strided copy."""
    frames, height, width, _ = pixels.shape
    planes = _patch_rows.to_planes(torch.from_numpy(pixels).permute(0, 3, 1, 2), channels)
    out = np.empty(row_shape(frames, height, width, channels, patch, temporal), dtype=np.uint8)
    _patch_rows.patch_rows(
        planes, patch_size=patch, merge_size=merge, temporal_patch_size=temporal, out=out
    )
    return out


def row_shape(
    frames: int, height: int, width: int, channels: int, patch: int, temporal: int
) -> tuple[int, int]:
    groups = -(-frames // temporal)
    return groups * (height // patch) * (width // patch), channels * temporal * patch * patch


def native_rows(
    pixels: np.ndarray, channels: int, patch: int, merge: int, temporal: int
) -> np.ndarray:
    frames, height, width, pixel_bytes = pixels.shape
    out = np.empty(row_shape(frames, height, width, channels, patch, temporal), dtype=np.uint8)
    native.patch_rows(
        pixels, frames, height, width, pixel_bytes, channels, patch, merge, temporal, out
    )
    return out


# (patch, merge, temporal): Qwen2-VL's, Qwen3-VL's patch, no merge, more slots, 1-byte patches.
GEOMETRIES = [(14, 2, 2), (16, 2, 2), (14, 1, 1), (2, 1, 3), (1, 1, 1), (3, 2, 2)]


@pytest.mark.parametrize("pixel_bytes", [3, 4])
@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_the_numpy_paths_bytes(pixel_bytes: int, geometry: tuple[int, int, int]) -> None:
    patch, merge, temporal = geometry
    rng = np.random.default_rng(patch * 100 + temporal * 10 + pixel_bytes)
    # Odd frame counts pad their last group; 1x1 to 5x7 merged patches (a 4-byte row of 5 or
    # more merged 14-pixel patches crosses the 16-pixel vector steps and leaves a tail).
    for frames, (blocks_h, blocks_w) in itertools.product((1, 2, 3, 5), ((1, 1), (2, 3), (5, 7))):
        size = patch * merge
        pixels = rng.integers(0, 256, (frames, blocks_h * size, blocks_w * size, pixel_bytes))
        pixels = pixels.astype(np.uint8)
        for channels in range(1, pixel_bytes + 1):
            expected = numpy_rows(pixels, channels, patch, merge, temporal)
            got = native_rows(pixels, channels, patch, merge, temporal)
            assert np.array_equal(got, expected), (frames, blocks_h, blocks_w, channels)


def test_a_1080p_image_band_by_band_and_whole() -> None:
    # The fused path's own call: bands of the resized RGBX image, three channels, into slices
    # of one output.
    rng = np.random.default_rng(1)
    pixels = rng.integers(0, 256, (1, 1092, 1932, 4), dtype=np.uint8)
    whole = numpy_rows(pixels, 3, 14, 2, 2)
    banded = np.empty_like(whole)
    per_block = (1932 // 14) * 2
    for start, stop in itertools.pairwise((0, 10, 11, 39)):
        band = np.ascontiguousarray(pixels[:, start * 28 : stop * 28])
        out = banded[start * per_block : stop * per_block]
        native.patch_rows(band, 1, band.shape[1], 1932, 4, 3, 14, 2, 2, out)
    assert np.array_equal(banded, whole)


def tensor_case(layout: str) -> tuple[torch.Tensor, np.ndarray]:
    rng = np.random.default_rng(2)
    values = torch.from_numpy(rng.integers(0, 256, (3, 4, 56, 84), dtype=np.uint8))
    pixels = {
        "channels-last": values.contiguous(memory_format=torch.channels_last),
        "planes": values.contiguous(),  # not a layout the native pass reads
        # An image's band of rows: dense (its one frame's stride does not count).
        "band": values[:1].contiguous(memory_format=torch.channels_last)[:, :, 28:],
        # Frames cut to a band: rows strided by the whole frame, read by numpy.
        "frames' band": values.contiguous(memory_format=torch.channels_last)[:, :, 28:],
        "three channels": values[:, :3].contiguous(memory_format=torch.channels_last),
    }[layout]
    expected = numpy_rows(pixels.permute(0, 2, 3, 1).contiguous().numpy(), 3, 14, 2, 2)
    return pixels, expected


@pytest.mark.parametrize(
    "layout", ["channels-last", "planes", "band", "frames' band", "three channels"]
)
@pytest.mark.parametrize("built", [True, False])
def test_write_patch_rows_gives_the_same_bytes_either_way(
    layout: str, built: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    pixels, expected = tensor_case(layout)
    calls: list[int] = []
    if built:

        def counting(*args: Any) -> None:
            calls.append(1)
            native.patch_rows(*args)

        monkeypatch.setattr(_patch_rows, "native_patch_rows", counting)
    else:
        monkeypatch.setattr(_patch_rows, "native_patch_rows", None)
    out = np.empty_like(expected)
    _patch_rows.write_patch_rows(
        pixels, 3, patch_size=14, merge_size=2, temporal_patch_size=2, out=out
    )
    assert np.array_equal(out, expected)
    # The native pass reads dense channels-last pixels only; the rest go to numpy.
    assert len(calls) == (1 if built and layout not in ("planes", "frames' band") else 0)


def test_write_patch_rows_checks_out_before_writing() -> None:
    pixels, expected = tensor_case("channels-last")
    for out in (
        np.empty((expected.shape[0] - 1, expected.shape[1]), dtype=np.uint8),
        np.empty(expected.shape, dtype=np.int16),
        np.empty((expected.shape[1], expected.shape[0]), dtype=np.uint8).T,
    ):
        with pytest.raises(ValueError, match="out must be C-contiguous uint8"):
            _patch_rows.write_patch_rows(
                pixels, 3, patch_size=14, merge_size=2, temporal_patch_size=2, out=out
            )


# --- sizes that do not fit ----------------------------------------------------------------------


def good_arguments() -> list[Any]:
    pixels = np.zeros((2, 28, 56, 4), dtype=np.uint8)
    out = np.zeros(row_shape(2, 28, 56, 3, 14, 2), dtype=np.uint8)
    return [pixels, 2, 28, 56, 4, 3, 14, 2, 2, out]


def test_the_good_arguments_are_taken() -> None:
    native.patch_rows(*good_arguments())


@pytest.mark.parametrize(
    ("index", "value", "message"),
    [
        (1, 3, "expected"),  # one frame more than the pixels hold
        (2, 56, "expected"),  # rows the pixels lack: never read past their end
        (3, 28, "expected"),  # a width that does not match
        (2, 27, "multiples of patch"),
        (3, 42, "multiples of patch"),  # a whole patch, not a whole merged patch
        (4, 5, "out of range"),
        (4, 2, "out of range"),
        (5, 0, "out of range"),
        (5, 5, "out of range"),  # more channels than a pixel has
        (6, 0, "out of range"),
        (7, 0, "out of range"),
        (8, 0, "out of range"),
        (1, 0, "out of range"),
        (2, -28, "out of range"),
        (1, 2**62, "overflow|expected"),
        (2, 2**58 * 28, "overflow|expected"),
    ],
)
def test_arguments_that_do_not_fit_are_refused(index: int, value: int, message: str) -> None:
    arguments = good_arguments()
    arguments[index] = value
    with pytest.raises(ValueError, match=message):
        native.patch_rows(*arguments)


def test_an_output_of_the_wrong_size_is_refused_before_any_write() -> None:
    arguments = good_arguments()
    small = np.full(arguments[9].size - 1, 7, dtype=np.uint8)
    arguments[9] = small
    with pytest.raises(ValueError, match="expected"):
        native.patch_rows(*arguments)
    assert (small == 7).all()


def test_buffers_it_cannot_use_are_refused() -> None:
    arguments = good_arguments()
    read_only = arguments[9].copy()
    read_only.flags.writeable = False
    for index, value in (
        (9, read_only),  # the rows must be writable
        (9, bytes(arguments[9].size)),
        (0, np.zeros((2, 56, 28, 4), dtype=np.uint8).transpose(0, 2, 1, 3)),  # not contiguous
        (0, "pixels"),
    ):
        broken = list(arguments)
        broken[index] = value
        with pytest.raises((TypeError, ValueError, BufferError)):
            native.patch_rows(*broken)


# --- the GIL ------------------------------------------------------------------------------------


def test_the_copy_lets_python_run_beside_it() -> None:
    pixels = np.random.default_rng(3).integers(0, 256, (4, 1092, 1932, 4), dtype=np.uint8)
    out = np.empty(row_shape(4, 1092, 1932, 3, 14, 2), dtype=np.uint8)
    _, progress = python_progress_in_some_call(
        lambda: native.patch_rows(pixels, 4, 1092, 1932, 4, 3, 14, 2, 2, out)
    )
    assert progress > 0
