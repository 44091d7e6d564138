"""Pixel work of the fused vision path: RGB conversion, the exact resize, patch rows.

Each step reproduces what transformers' default (torchvision) image and video processors do to
the same pixels, bit for bit, with fewer copies:

- :func:`rgb_pixels` is HF's PIL conversion (transparency composited onto white, everything
  else through ``Image.convert("RGB")``), the same Pillow calls, so every mode Pillow reads
  (L, LA, P, RGBA, CMYK, I;16, ...) converts as it does there. An RGB image is used as it is
  (the conversion would copy the same values), and its pixels are read in place, in Pillow's
  own 4-byte RGBX storage (:func:`mediaref.media.image.pillow_storage.rgbx_view`), not repacked.
- :func:`resize_frames` runs the kernel torchvision's ``resize`` reaches for uint8 bicubic on
  the CPU (``interpolate(..., antialias=True)`` on uint8, integer arithmetic). It is fed the
  decoded ``(H, W, C)`` buffer as a channels-last view, which is the layout that kernel works
  in, so HF's two repacks (to planes, and back inside the kernel) are skipped. The kernel
  computes every channel on its own (it even pads 3 channels to 4 internally), so resizing the
  RGBX storage and keeping the first three planes gives HF's bytes (pinned by the tests) without
  the 3-byte export.
- :func:`to_planes` turns the kernel's channels-last output into the channel planes HF's
  patchify reads, faster than torch's own layout change; over a band of rows, so one image's
  planes and patch rows can be cut across cores.
- :func:`patch_rows` writes the resized frames straight into the final
  ``(grid_t * grid_h * grid_w, C * T * P * P)`` row order in one strided copy of P-byte runs
  (a numpy ``V{P}`` view: one element per patch row segment), where HF makes a 9-D uint8 copy.
- :func:`write_resized_patch_rows` does the resize and the patch rows in one native pass, a
  merged-patch row at a time, so the resized image is never whole in memory: torch's integer
  kernel reproduced bit for bit (``_aa_resize.c``), where :func:`resize_in_rows` finds that it
  gives torch's bytes in this process. The fused path's default for images and video frames.
- :func:`write_patch_rows` is what the fused path calls otherwise: the resized pixels' rows in one native
  pass (``_patch_rows_native.c``: each merged-patch row of pixels split into channel rows in
  cache, then each patch row written whole, a padded temporal slot from the same cache), about
  3x faster than planes + :func:`patch_rows` for a 1080p image; the two when the extension was
  not built (no C compiler at install) or the pixels are not in a layout it reads.

Torch's kernel and numpy's copy release the GIL, so items run in parallel on the media pool;
nothing here depends on the thread that runs it, so the bytes are the same whatever the pool.
"""

from __future__ import annotations

import math
import sys
import warnings
from concurrent.futures import Executor

import numpy as np
import torch
from PIL import Image

from mediaref import envs
from mediaref.media.image.pillow_storage import rgbx_view
from mediaref.models.qwen2_vl import _scratch_buffers as scratch_buffers

try:
    from mediaref.models.qwen2_vl._patch_rows_native import patch_rows as native_patch_rows
    from mediaref.models.qwen2_vl._patch_rows_native import (
        resize_patch_rows as native_resize_patch_rows,
    )
except ImportError:  # installed without a C compiler: numpy writes the rows, the same bytes
    native_patch_rows = None  # type: ignore[assignment]
    native_resize_patch_rows = None  # type: ignore[assignment]

__all__ = [
    "patch_rows",
    "resize_frames",
    "resize_in_rows",
    "rgb_pixels",
    "row_width",
    "to_planes",
    "write_patch_rows",
    "write_resized_patch_rows",
]

# ``np.asarray(pil_image)`` is read-only (it wraps the bytes Pillow hands out), and copying it
# to make it writeable would cost a full frame. Torch only reads it here, but warns once per
# process the first time it wraps a read-only array; that one warning is spent here, at import,
# rather than surfacing in a server's log as "undefined behavior".
with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    torch.from_numpy(np.frombuffer(b"\0", dtype=np.uint8))


def rgb_pixels(image: Image.Image) -> np.ndarray:
    """``(H, W, C)`` uint8 whose first three channels are ``image`` converted as HF's
    ``convert_to_rgb(image, return_numpy=True)``; ``C`` is 4 (Pillow's padding byte last) where
    the converted image's storage can be read in place, else 3."""
    has_alpha = "A" in image.getbands() or image.info.get("transparency") is not None
    if has_alpha:
        rgba = image.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        rgb = Image.alpha_composite(white, rgba).convert("RGB")
    elif image.mode == "RGB":
        rgb = image  # convert("RGB") would copy the same values
    else:
        rgb = image.convert("RGB")
    in_place = rgbx_view(rgb)
    return in_place if in_place is not None else np.asarray(rgb)


def resize_frames(
    frames: np.ndarray,
    height: int,
    width: int,
    *,
    executor: Executor | None = None,
    into: torch.Tensor | None = None,
) -> torch.Tensor:
    """``(N, H, W, C)`` uint8 frames resized (bicubic, antialiased) to ``(N, C, height, width)``
    as torchvision resizes uint8 on the CPU, in the kernel's own channels-last layout (see
    :func:`to_planes`); a view of ``frames`` when the size already matches (torchvision returns
    its input then).

    ``into``: a channels-last ``(N, C, height, width)`` uint8 tensor (a leased scratch buffer)
    to write the result into, and return; None: a new tensor.

    With an ``executor`` (never one whose thread is the caller's: this call waits on it), the
    horizontal pass is cut in two halves of rows, one run there while this thread runs the
    other, then the vertical pass runs here. The kernel is separable with a uint8 intermediate
    (as Pillow's, which it mirrors), so the two calls give the bytes of one (pinned by the
    tests): a 1080p image 2.6 vs 3.7 ms on two cores. The intermediate is leased from
    :mod:`mediaref.models.qwen2_vl._scratch_buffers`.
    """
    channels_last = _dense(frames).permute(0, 3, 1, 2)
    count, channels, in_height, in_width = channels_last.shape
    if (in_height, in_width) == (height, width):
        return channels_last
    if into is None:
        into = torch.empty(
            (count, channels, height, width), dtype=torch.uint8, memory_format=torch.channels_last
        )
    if executor is None or in_width == width or in_height < 2:
        _resize_into(channels_last, into)
        return into
    if in_height == height:  # the horizontal pass is the whole resize: its halves write it
        _resize_halves(channels_last, into, executor)
        return into
    across_shape = (count, channels, in_height, width)
    with scratch_buffers.lease(math.prod(across_shape)) as buffer:
        across = scratch_buffers.channels_last(buffer, across_shape)
        _resize_halves(channels_last, across, executor)
        _resize_into(across, into)
    return into


def _resize_halves(channels_last: torch.Tensor, out: torch.Tensor, executor: Executor) -> None:
    """:func:`_resize_into` for inputs and ``out`` of the same height, cut in two halves of rows:
    the top one on ``executor``, the bottom one here."""
    half = int(channels_last.shape[2]) // 2
    top = executor.submit(_resize_into, channels_last[:, :, :half], out[:, :, :half])
    try:
        _resize_into(channels_last[:, :, half:], out[:, :, half:])
    finally:
        top.result()  # never return (and free ``out``) while the other half writes into it


def _resize_into(channels_last: torch.Tensor, out: torch.Tensor) -> None:
    """``channels_last`` resized to ``out``'s size, written into ``out`` (channels-last, maybe
    a band of a larger buffer): the out-variant of the operator ``interpolate(mode="bicubic",
    antialias=True)`` calls, with the same arguments, so the same kernel and bytes."""
    size = [int(out.shape[2]), int(out.shape[3])]
    torch.ops.aten._upsample_bicubic2d_aa.out(channels_last, size, False, None, None, out=out)


def _dense(frames: np.ndarray) -> torch.Tensor:
    """``frames`` as a tensor whose frame axis has its dense stride.

    Torch picks its vectorized uint8 kernel only for a channels-last input whose every stride
    is the dense one, size-1 axes included; numpy's new axis (``image[None]``) has stride 0, which
    sends a lone image to the generic kernel: the same bytes at 2.5x the time (1080p, 9.2 vs
    3.7 ms). Re-adding the axis in torch gives it its dense stride."""
    if frames.shape[0] == 1 and frames.strides[0] != frames[0].nbytes:
        return torch.from_numpy(frames[0]).unsqueeze(0)
    return torch.from_numpy(frames)


def to_planes(resized: torch.Tensor, channels: int | None = None) -> torch.Tensor:
    """``(N, C, H, W)`` uint8 in any layout as new contiguous ``(N, channels, H, W)`` planes of
    its first ``channels`` (all when None), the layout :func:`patch_rows` reads.

    Torch's own layout change (``.contiguous()``) moves one byte at a time at about 2 GB/s, as
    long as the resize itself. Here each plane is one numpy copy, and four interleaved channels
    (Pillow's RGBX storage, resized as is) are read as one little-endian word per pixel, a plane
    being a shift of the words and a narrowing cast: 0.95 vs 4.7 ms for a resized 1080p image.
    """
    frames, count, height, width = resized.shape
    wanted = count if channels is None else channels
    planes = np.empty((frames, wanted, height, width), dtype=np.uint8)
    pixels = resized.permute(0, 2, 3, 1).numpy()
    if count == 4 and sys.byteorder == "little" and pixels.strides[2:] == (4, 1):
        words = pixels.view(np.uint32)[..., 0]  # channel c is byte c: bits 8c..8c+7
        for channel in range(wanted):
            # The narrowing cast keeps the low byte; numpy shifts and casts in small buffered
            # chunks, so no word-sized temporary goes through memory (0.95 vs 1.7 ms at 1080p).
            np.right_shift(words, 8 * channel, out=planes[:, channel], casting="unsafe")
    else:
        for channel in range(wanted):
            planes[:, channel] = pixels[..., channel]
    return torch.from_numpy(planes)


def write_patch_rows(
    pixels: torch.Tensor,
    channels: int,
    *,
    patch_size: int,
    merge_size: int,
    temporal_patch_size: int,
    out: np.ndarray,
) -> None:
    """``(F, C, H, W)`` uint8 ``pixels`` (any layout, ``C >= channels``) written into ``out`` as
    the patch rows of their first ``channels`` channels: the bytes
    ``patch_rows(to_planes(pixels, channels), ...)`` writes (see :func:`patch_rows` for the
    layout and ``out``).

    Dense channels-last pixels of 3 or 4 channels (the resize's output, Pillow's RGBX storage,
    decoded video frames) take the native pass, which releases the GIL; anything else, or an
    install without the extension, the two numpy steps.
    """
    frames, count, height, width = pixels.shape
    dense = pixels.permute(0, 2, 3, 1)
    if native_patch_rows is None or count not in (3, 4) or not dense.is_contiguous():
        patch_rows(  # checks ``out`` itself
            to_planes(pixels, channels),
            patch_size=patch_size,
            merge_size=merge_size,
            temporal_patch_size=temporal_patch_size,
            out=out,
        )
        return
    _check_out(out, frames, channels, height, width, patch_size, temporal_patch_size)
    native_patch_rows(
        dense.numpy(), frames, height, width, count, channels,
        patch_size, merge_size, temporal_patch_size, out,
    )  # fmt: skip


def resize_in_rows() -> bool:
    """Whether :func:`write_resized_patch_rows` stands in for :func:`resize_frames` +
    :func:`write_patch_rows` here: ``MEDIAREF_NATIVE_RESIZE`` is on (the default), the extension
    is built, and its resize gave torch's bytes on a few small images when first asked in this
    process (torch's integer kernel is what it reproduces; a torch whose kernel computes
    otherwise, or a platform where it takes another path, keeps the fused path on torch's)."""
    global _resize_in_rows
    if not envs.MEDIAREF_NATIVE_RESIZE:
        return False
    if _resize_in_rows is None:
        _resize_in_rows = native_resize_patch_rows is not None and _native_resize_matches_torch()
    return _resize_in_rows


_resize_in_rows: bool | None = None

# (height, width, pixel bytes) -> (height, width): down and up, each axis alone and both, the
# filter's stretched windows (a factor of 3) and a 1-pixel-wide input.
_SELF_CHECK = (
    ((61, 97, 4), (28, 56)),
    ((30, 40, 3), (56, 84)),
    ((90, 31, 4), (28, 28)),
    ((56, 1, 3), (56, 28)),
)


def _native_resize_matches_torch() -> bool:
    rng = np.random.default_rng(0)
    for (height, width, pixel_bytes), target in _SELF_CHECK:
        frames = rng.integers(0, 256, (1, height, width, pixel_bytes), dtype=np.uint8)
        expected = np.empty(_row_shape(1, 3, *target, 14, 2), dtype=np.uint8)
        write_patch_rows(
            resize_frames(frames, *target), 3,
            patch_size=14, merge_size=2, temporal_patch_size=2, out=expected,
        )  # fmt: skip
        got = np.empty_like(expected)
        native_resize_patch_rows(
            frames, 1, height, width, pixel_bytes, 3, *target, 14, 2, 2, 0, target[0] // 28, got
        )
        if not np.array_equal(got, expected):
            return False
    return True


def write_resized_patch_rows(
    frames: np.ndarray,
    height: int,
    width: int,
    channels: int,
    *,
    patch_size: int,
    merge_size: int,
    temporal_patch_size: int,
    blocks: tuple[int, int],
    out: np.ndarray,
) -> None:
    """``(F, H, W, C)`` uint8 ``frames`` (C-contiguous, ``C`` 3 or 4, ``C >= channels``)
    resized to ``height`` x ``width``, written as patch rows: the bytes of
    :func:`resize_frames` then :func:`write_patch_rows`, where :func:`resize_in_rows` holds.

    One native pass, the GIL released: a merged-patch row ("block") at a time, the input rows
    it needs are resized across into a window kept from the previous block, then down, then
    written as patch rows, all in cache (a 1080p image's resize + rows: ~6 ms on one core
    against ~6.5 for torch's kernel then the native rows, and cut across cores in bands, the
    whole of it parallel where the torch path's vertical pass is not). Only ``blocks``
    ``[first, stop)`` are written (counted temporal group by group, each ``height / (patch *
    merge)`` blocks), into ``out``, exactly their rows; the bytes of a block never depend on
    the cut.
    """
    first, stop = blocks
    count, in_height, in_width, pixel_bytes = frames.shape
    per_block = (width // patch_size) * merge_size
    shape = ((stop - first) * per_block, row_width(channels, patch_size, temporal_patch_size))
    if out.shape != shape or out.dtype != np.uint8:
        raise ValueError(f"out must be uint8 of shape {shape}")
    native_resize_patch_rows(
        frames, count, in_height, in_width, pixel_bytes, channels, height, width,
        patch_size, merge_size, temporal_patch_size, first, stop, out,
    )  # fmt: skip


def row_width(channels: int, patch_size: int, temporal_patch_size: int) -> int:
    """The bytes of one patch row: ``C * T * P * P``."""
    return channels * temporal_patch_size * patch_size * patch_size


def _row_shape(
    frames: int, channels: int, height: int, width: int, patch_size: int, temporal_patch_size: int
) -> tuple[int, int]:
    grid_t = -(-frames // temporal_patch_size)
    grid_h, grid_w = height // patch_size, width // patch_size
    return grid_t * grid_h * grid_w, row_width(channels, patch_size, temporal_patch_size)


def _check_out(
    out: np.ndarray,
    frames: int,
    channels: int,
    height: int,
    width: int,
    patch_size: int,
    temporal_patch_size: int,
) -> None:
    shape = _row_shape(frames, channels, height, width, patch_size, temporal_patch_size)
    if out.shape != shape or out.dtype != np.uint8 or not out.flags.c_contiguous:
        raise ValueError(f"out must be C-contiguous uint8 of shape {shape}, got {out.shape}")


def patch_rows(
    planes: torch.Tensor,
    *,
    patch_size: int,
    merge_size: int,
    temporal_patch_size: int,
    out: np.ndarray,
) -> None:
    """``(F, C, H, W)`` uint8 planes written into ``out`` as Qwen2-VL's ``(rows, C * T * P * P)``
    patch rows.

    Frames are grouped ``temporal_patch_size`` at a time; a last short group repeats its last
    frame (HF pads a video so, and an image is one frame repeated ``T`` times). Rows run
    ``(t, h / merge, w / merge, merge_h, merge_w)``, each ``(C, T, P_h, P_w)``. ``out``: a
    C-contiguous uint8 array of exactly that shape (a slice of a whole item's rows: its band of
    rows or run of frames).
    """
    frames, channels, height, width = planes.shape
    t_size, p_size, m_size = temporal_patch_size, patch_size, merge_size
    _check_out(out, frames, channels, height, width, p_size, t_size)
    grid_t = -(-frames // t_size)
    grid_h, grid_w = height // p_size, width // p_size
    # One element per P-byte run: a patch row of one channel is contiguous in both layouts.
    run = np.dtype(f"V{p_size}")
    source = (
        planes.numpy()
        .view(run)
        .reshape(frames, channels, grid_h // m_size, m_size, p_size, grid_w // m_size, m_size)
    )
    target = out.view(run).reshape(
        grid_t, grid_h // m_size, grid_w // m_size, m_size, m_size, channels, t_size, p_size
    )
    # The same rows as whole (P x P) patches, to repeat a slot with long copies.
    patches = torch.from_numpy(out).view(grid_t, -1, channels, t_size, p_size * p_size)
    for group in range(grid_t):
        for slot in range(t_size):
            frame = group * t_size + slot
            if frame >= frames:
                # A padded slot repeats the last frame, already in the previous slot.
                patches[group, :, :, slot].copy_(patches[group, :, :, slot - 1])
                continue
            # (C, h/m, m_h, P_h, w/m, m_w) -> (h/m, w/m, m_h, m_w, C, P_h)
            target[group, :, :, :, :, :, slot] = source[frame].transpose(1, 4, 2, 5, 0, 3)
