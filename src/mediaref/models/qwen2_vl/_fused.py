"""The fused exact vision path of the Qwen2-VL family: decoded media -> patch rows, no HF call.

For an item it takes (:mod:`mediaref.models.qwen2_vl._fused_settings` decides which, and its
target size), the output is bit-identical to what transformers' default Qwen2-VL processors (the
torchvision ones) give for the same decoded item, whatever the media pool's size: the same
``smart_resize``, the same resize kernel, the same patch order, and (device normalize off) the
same fp32 ``(x - mean / rescale) / (std / rescale)`` that HF's fused rescale + normalize computes.
The settings' names are re-exported here, the path's one import for its callers.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from concurrent.futures import Executor

import numpy as np
import torch
from PIL import Image

from mediaref.media.executor import on_media_pool_thread
from mediaref.models.qwen2_vl import _scratch_buffers as scratch_buffers
from mediaref.models.qwen2_vl._fused_settings import (
    DRAFT_SOURCE_SIZE,
    FusedVisionSettings,
    image_settings,
    image_target,
    smart_resize,
    video_settings,
    video_target,
)
from mediaref.models.qwen2_vl._patch_rows import (
    resize_frames,
    resize_in_rows,
    rgb_pixels,
    row_width,
    write_patch_rows,
    write_resized_patch_rows,
)
from mediaref.models.qwen2_vl._work_pieces import drain, run_pieces, runs

__all__ = [
    "DRAFT_SOURCE_SIZE",
    "FusedVisionSettings",
    "fused_rows",
    "image_rows",
    "image_settings",
    "image_target",
    "joined_rows",
    "smart_resize",
    "video_rows",
    "video_settings",
    "video_target",
]

_Rows = tuple[torch.Tensor, tuple[int, int, int]]
_BAND_BYTES = 1 << 20
"""An image band's size, counted at 3 bytes a pixel: small enough for its rows (and, through
numpy's steps, its planes) to be read back from cache when normalized; the unit cut across cores."""


def _grid(
    frames: int, height: int, width: int, settings: FusedVisionSettings
) -> tuple[int, int, int]:
    return (
        -(-frames // settings.temporal_patch_size),
        height // settings.patch_size,
        width // settings.patch_size,
    )


RowsInto = tuple[torch.Tensor, torch.Tensor | None]
"""Where an item's rows go: its uint8 rows and, when the settings normalize, its floating rows
(slices of a whole call's buffers: :func:`fused_rows`)."""


class _RowsOut:
    """One call's output rows, written slice by slice: patch rows in uint8 and, when the settings
    normalize, each slice normalized as HF does as soon as it is written (by the thread that
    wrote it, while its bytes are in cache), into the floating output. ``into``: the tensors to
    write (:data:`RowsInto`), else new ones."""

    def __init__(
        self,
        count: int,
        channels: int,
        settings: FusedVisionSettings,
        into: RowsInto | None = None,
    ) -> None:
        self._channels = channels
        self._geometry = {
            "patch_size": settings.patch_size,
            "merge_size": settings.merge_size,
            "temporal_patch_size": settings.temporal_patch_size,
        }
        self._raw, self._floating = into or _new_rows(count, channels, settings)
        self.raw = self._raw.numpy()
        if self._floating is not None:
            assert settings.mean is not None and settings.std is not None
            shape = (1, len(settings.mean), 1)
            self._mean = torch.tensor(settings.mean, dtype=torch.float32).view(shape)
            self._std = torch.tensor(settings.std, dtype=torch.float32).view(shape)

    @property
    def normalizes(self) -> bool:
        return self._floating is not None

    def write(self, pixels: torch.Tensor, first: int, stop: int) -> None:
        """Rows ``[first, stop)`` from ``pixels`` (their frames or band of rows, ``(N, C, H, W)``
        in the resize's layout; the first ``channels`` are read)."""
        write_patch_rows(pixels, self._channels, **self._geometry, out=self.raw[first:stop])
        self._normalize(first, stop)

    def write_resized(
        self, frames: np.ndarray, target: tuple[int, int], blocks: tuple[int, int], per_block: int
    ) -> None:
        """The rows of ``blocks`` (merged-patch rows, counted group by group, ``per_block``
        rows each) of ``frames`` (``(N, H, W, C)``) resized to ``target``, in one native pass."""
        first, stop = blocks[0] * per_block, blocks[1] * per_block
        write_resized_patch_rows(
            frames, *target, self._channels, **self._geometry, blocks=blocks,
            out=self.raw[first:stop],
        )  # fmt: skip
        self._normalize(first, stop)

    def _normalize(self, first: int, stop: int) -> None:
        if self._floating is None:
            return
        chunk = self.raw[first:stop]
        # Elementwise, so the same fp32 values as HF's normalize before its patchify; the cast
        # to the model dtype rounds each value as a cast of the whole would.
        channels = self._mean.shape[1]
        values = torch.from_numpy(chunk).view(stop - first, channels, -1)
        target = self._floating[first:stop].view(stop - first, channels, -1)
        if target.dtype == torch.float32:
            torch.sub(values, self._mean, out=target).div_(self._std)
        else:
            target.copy_(torch.sub(values, self._mean).div_(self._std))

    def result(self) -> torch.Tensor:
        return self._floating if self._floating is not None else self._raw


def _new_rows(count: int, channels: int, settings: FusedVisionSettings) -> RowsInto:
    """New buffers for ``count`` patch rows: uint8, and floating when the settings normalize
    (the output then, the uint8 rows staged before it). Plain ``torch.empty``: transparent huge
    pages asked for with ``madvise`` faulted a 97 MB batch in ~7 instead of ~45 ms, but stalled
    calls on the kernel's compaction (247 ms once; a normalized clip's miss 2.3-3x slower in
    ``bench_processor_miss.py``), so a request's latency would hang on the host's memory state."""
    width = row_width(channels, settings.patch_size, settings.temporal_patch_size)
    raw = torch.empty((count, width), dtype=torch.uint8)
    if settings.mean is None or settings.std is None:
        return raw, None
    return raw, torch.empty((count, width), dtype=settings.dtype or torch.float32)


def image_rows(
    image: Image.Image,
    target: tuple[int, int],
    settings: FusedVisionSettings,
    *,
    executor: Executor | None = None,
    pieces: int = 1,
    into: RowsInto | None = None,
) -> tuple[torch.Tensor, tuple[int, int, int]]:
    """One image's patch rows and ``(t, h, w)`` grid (written into ``into`` when given).

    The image is resized into a leased buffer, then written as patch rows
    (:func:`~mediaref.models.qwen2_vl._patch_rows.write_patch_rows`) in bands of whole
    merged-patch rows (about :data:`_BAND_BYTES` each: through numpy's planes, a band's planes
    are still in cache when its rows are written, 1080p 3.8 vs 6.3 ms on one core). With an
    ``executor`` and ``pieces`` > 1, the resize's horizontal pass is cut in two
    (:func:`resize_frames`) and the bands are shared out in up to ``pieces`` runs, the first on
    the caller's thread, each writing straight into its slice of the rows. A band's rows depend
    on its pixels alone, so the bytes are the same whatever the cut. The same rule as
    :func:`video_rows` about the executor.
    """
    # Possibly Pillow's RGBX storage in place: its padding byte is never written to the rows.
    pixels = rgb_pixels(image)[None]
    if pixels.shape[1:3] == target:  # nothing to resize: the pixels themselves are read
        return _image_rows(resize_frames(pixels, *target), settings, executor, pieces, into)
    if resize_in_rows():
        return _resized_rows(pixels, target, 3, settings, executor, pieces, into)
    with scratch_buffers.lease(math.prod((*target, pixels.shape[-1]))) as buffer:
        scratch = scratch_buffers.channels_last(buffer, (1, pixels.shape[-1], *target))
        parallel = executor is not None and pieces > 1
        resized = resize_frames(
            pixels, *target, executor=executor if parallel else None, into=scratch
        )
        return _image_rows(resized, settings, executor, pieces, into)


def _image_rows(
    resized: torch.Tensor,
    settings: FusedVisionSettings,
    executor: Executor | None,
    pieces: int,
    into: RowsInto | None,
) -> tuple[torch.Tensor, tuple[int, int, int]]:
    target = (int(resized.shape[2]), int(resized.shape[3]))
    grid = _grid(1, *target, settings)
    band = settings.merge_size * settings.patch_size  # pixel rows of one merged-patch row
    per_block = grid[2] * settings.merge_size  # patch rows of one merged-patch row
    blocks = grid[1] // settings.merge_size
    per_band = max(1, _BAND_BYTES // (3 * band * target[1]))
    rows = _RowsOut(grid[1] * grid[2], 3, settings, into)

    def piece(first: int, stop: int) -> None:
        for start, end in runs(first, stop, per_band):
            rows.write(resized[:, :, start * band : end * band], start * per_block, end * per_block)

    run_pieces(executor, piece, blocks, pieces)
    return rows.result(), grid


def video_rows(
    frames: np.ndarray,
    target: tuple[int, int],
    settings: FusedVisionSettings,
    *,
    executor: Executor | None = None,
    pieces: int = 1,
    into: RowsInto | None = None,
) -> tuple[torch.Tensor, tuple[int, int, int]]:
    """One video's patch rows and ``(t, h, w)`` grid: every frame resized once, at the target
    (the rows written into ``into`` when given).

    Frames are resized and written as patch rows a temporal group at a time (a few, for
    small frames: about :data:`_BAND_BYTES` each), the resize written into a leased buffer, so a
    group's pixels are read back from cache. With an ``executor`` and ``pieces`` > 1, the groups
    are cut into up to ``pieces`` runs, the first run on the caller's thread and the others on
    the executor, each writing straight into its slice of the rows (the resize and the copies
    release the GIL, so the runs use as many cores). Frames are resized independently and a
    group's rows depend on its frames alone, so the bytes are the same whatever the cut; only
    the last run can hold the padded group. Must not be called with the executor from one of its
    own threads (the caller waits on the runs).
    """
    count, _, _, channels = frames.shape
    if resize_in_rows() and frames.shape[1:3] != target and channels in (3, 4):
        frames = np.ascontiguousarray(frames)
        return _resized_rows(frames, target, channels, settings, executor, pieces, into)
    height, width = target
    grid = _grid(count, height, width, settings)
    per_group = grid[1] * grid[2]
    t_size = settings.temporal_patch_size
    per_run = max(1, _BAND_BYTES // (t_size * height * width * channels))
    rows = _RowsOut(grid[0] * per_group, channels, settings, into)

    def piece(first: int, stop: int) -> None:
        # Group by group (or a few small ones), so a group's pixels are read back from cache.
        for start, end in runs(first, stop, per_run):
            chunk = frames[start * t_size : end * t_size]
            shape = (len(chunk), channels, height, width)
            with scratch_buffers.lease(math.prod(shape)) as buffer:
                scratch = scratch_buffers.channels_last(buffer, shape)
                resized = resize_frames(chunk, height, width, into=scratch)
                rows.write(resized, start * per_group, end * per_group)

    run_pieces(executor, piece, grid[0], pieces)
    return rows.result(), grid


def _resized_rows(
    frames: np.ndarray,
    target: tuple[int, int],
    channels: int,
    settings: FusedVisionSettings,
    executor: Executor | None,
    pieces: int,
    into: RowsInto | None,
) -> _Rows:
    """``(N, H, W, C)`` frames' rows at ``target`` through the native resize + rows pass
    (:func:`~mediaref.models.qwen2_vl._patch_rows.write_resized_patch_rows`): the resized
    frames are never whole in memory, nothing is leased, and every block's resize is cut across
    ``pieces`` (the torch path cuts only the horizontal pass of an image). Blocks are merged-patch rows, counted
    temporal group by group; uint8 rows are written one call per piece, normalized ones about
    :data:`_BAND_BYTES` at a time, each slice normalized while in cache."""
    grid = _grid(len(frames), *target, settings)
    band = settings.merge_size * settings.patch_size
    per_block = grid[2] * settings.merge_size  # patch rows of one block
    blocks = grid[0] * (target[0] // band)
    rows = _RowsOut(grid[0] * grid[1] * grid[2], channels, settings, into)
    block_bytes = settings.temporal_patch_size * channels * band * target[1]
    per_run = max(1, _BAND_BYTES // block_bytes) if rows.normalizes else blocks

    def piece(first: int, stop: int) -> None:
        for run in runs(first, stop, per_run):
            rows.write_resized(frames, target, run, per_block)

    run_pieces(executor, piece, blocks, pieces)
    return rows.result(), grid


def fused_rows(
    items: Sequence[object],
    targets: Sequence[tuple[int, int]],
    settings: FusedVisionSettings,
    *,
    video: bool,
    executor: Executor | None,
    pieces: int = 1,
) -> list[_Rows]:
    """Every item's rows, fanned out on ``executor`` (inline when None or when called from a
    media-pool thread), returned in item order. A single item is cut into up to ``pieces`` on
    ``executor`` instead: an image into bands of rows (:func:`image_rows`), a video into runs of
    frames (:func:`video_rows`).

    The items' rows are consecutive slices of one buffer, in item order, so
    :func:`joined_rows` hands out all of them as one tensor without copying (a batch of eight
    1080p images: ~100 MB a ``torch.cat`` would copy again, into fresh pages)."""
    work: Callable[..., _Rows] = video_rows if video else image_rows
    if not items:
        return []
    into = _shared_rows(items, targets, settings, video)
    if executor is None or on_media_pool_thread():
        return [
            work(item, target, settings, into=out)
            for item, target, out in zip(items, targets, into, strict=True)
        ]
    if len(items) == 1:
        return [
            work(items[0], targets[0], settings, executor=executor, pieces=pieces, into=into[0])
        ]
    return drain(
        [
            executor.submit(work, item, target, settings, into=out)
            for item, target, out in zip(items, targets, into, strict=True)
        ]
    )


def _shared_rows(
    items: Sequence[object],
    targets: Sequence[tuple[int, int]],
    settings: FusedVisionSettings,
    video: bool,
) -> list[RowsInto | None]:
    """Each item's slice of one buffer for all their rows, sized from the targets before any
    item is read; None for every item where their rows differ in width (videos of other than 3
    channels beside others), each then allocating its own."""
    # An image's rows are of its three RGB channels; a video's of its frames' channels.
    shapes = [(item.shape[0], item.shape[-1]) if video else (1, 3) for item in items]  # type: ignore[attr-defined]
    if len({channels for _, channels in shapes}) != 1:
        return [None] * len(items)
    counts = [
        math.prod(_grid(frames, *target, settings))
        for (frames, _), target in zip(shapes, targets, strict=True)
    ]
    raw, floating = _new_rows(sum(counts), shapes[0][1], settings)
    bounds = list(itertools.accumulate(counts, initial=0))
    return [
        (raw[first:stop], None if floating is None else floating[first:stop])
        for first, stop in itertools.pairwise(bounds)
    ]


def joined_rows(rows: Sequence[torch.Tensor]) -> torch.Tensor:
    """``rows`` as one tensor along the first axis: without a copy where they are consecutive
    slices of one buffer (what :func:`fused_rows` returns), else ``torch.cat``."""
    if len(rows) == 1:
        return rows[0]
    first = rows[0]
    storage = first.untyped_storage().data_ptr()
    consecutive = all(
        row.is_contiguous()
        and row.dtype == first.dtype
        and row.shape[1:] == first.shape[1:]
        and row.untyped_storage().data_ptr() == storage
        for row in rows
    ) and all(
        after.data_ptr() == before.data_ptr() + before.nbytes
        for before, after in itertools.pairwise(rows)
    )
    if not consecutive:
        return torch.cat(list(rows))
    return first.as_strided((sum(len(row) for row in rows), *first.shape[1:]), first.stride())
