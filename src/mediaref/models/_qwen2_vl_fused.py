"""The fused exact vision path of the Qwen2-VL family: decoded media -> patch rows, no HF call.

For an item it takes, the output (``pixel_values`` / ``image_grid_thw``, ``pixel_values_videos``
/ ``video_grid_thw``) is bit-identical to what transformers' default Qwen2-VL processors (the
torchvision ones) give for the same decoded item, whatever the media pool's size: the same
``smart_resize``, the same resize kernel, the same patch order, and (device normalize off) the
same fp32 ``(x - mean / rescale) / (std / rescale)`` that HF's fused rescale + normalize computes.

Whether an item can take it is decided before any pixel work (:func:`image_settings`,
:func:`video_settings`, :func:`image_target`, :func:`video_target`); an item that cannot takes
the HF path. Those are:

- a processor that is not transformers' own torchvision ``Qwen2VLImageProcessor`` /
  ``Qwen2VLVideoProcessor`` (the PIL "slow" ones, subclasses), or configured off the path:
  ``do_resize`` or ``do_convert_rgb`` off, a resample other than bicubic, rescale without
  normalize (or the reverse), ``cap_pixels_per_frame`` on (videos);
- any processor kwarg beyond the rescale/normalize flags, ``min_pixels`` / ``max_pixels`` and
  ``do_sample_frames`` (``size``, ``device``, ...);
- an image that is not a ``PIL.Image``, a video that is not a ``(T, H, W, 3)`` uint8 array;
- an item ``smart_resize`` refuses (aspect ratio over 200): HF raises its own error for it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch
from PIL import Image

from mediaref.media.executor import on_media_pool_thread
from mediaref.models import _scratch_buffers as scratch_buffers
from mediaref.models._patch_rows import patch_rows, resize_frames, rgb_pixels, to_planes

__all__ = [
    "DRAFT_SOURCE_SIZE",
    "FusedVisionSettings",
    "fused_rows",
    "image_rows",
    "image_settings",
    "image_target",
    "smart_resize",
    "video_rows",
    "video_settings",
    "video_target",
]

# Processor kwargs the fused path honours (through the settings); any other sends items to HF.
_HONOURED_KWARGS = frozenset(
    {"do_rescale", "do_normalize", "do_sample_frames", "return_tensors", "min_pixels", "max_pixels"}
)
_BICUBIC = 3  # PIL's BICUBIC, which HF maps to torchvision's bicubic
_MAX_ASPECT_RATIO = 200
_Rows = tuple[torch.Tensor, tuple[int, int, int]]
_T = TypeVar("_T")
_BAND_BYTES = 1 << 20
"""Planes per band of an image's pixel work: small enough to be read back from cache."""
DRAFT_SOURCE_SIZE = "mediaref_draft_source_size"
"""``Image.info`` key of an image decoded at a reduced JPEG scale (the opt-in ``jpeg_draft``
mode): its full ``(width, height)``, from which its target size is taken, so a drafted image
gets the grid of the image it stands for."""


@dataclass(frozen=True)
class FusedVisionSettings:
    """What the fused path needs of one HF image or video processor, as resolved for a call."""

    patch_size: int
    merge_size: int
    temporal_patch_size: int
    min_pixels: int
    max_pixels: int
    mean: tuple[float, ...] | None
    """Per-channel fp32 ``mean / rescale_factor``; None: uint8 rows (rescale/normalize off)."""
    std: tuple[float, ...] | None
    dtype: torch.dtype | None
    """The model dtype floating outputs are cast to (as the HF call's outputs are); None: fp32."""

    @property
    def factor(self) -> int:
        return self.patch_size * self.merge_size


def smart_resize(
    height: int, width: int, factor: int, min_pixels: int, max_pixels: int
) -> tuple[int, int]:
    """Qwen2-VL's target size: both sides multiples of ``factor``, the area within
    ``[min_pixels, max_pixels]``, the aspect ratio kept as closely as possible (HF's rule,
    float for float); ``ValueError`` when the aspect ratio exceeds 200."""
    if max(height, width) / min(height, width) > _MAX_ASPECT_RATIO:
        raise ValueError(
            f"absolute aspect ratio must be smaller than {_MAX_ASPECT_RATIO}, "
            f"got {max(height, width) / min(height, width)}"
        )
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def _settings(
    processor: Any, kwargs: Mapping[str, object], dtype: torch.dtype | None
) -> FusedVisionSettings | None:
    if set(kwargs) - _HONOURED_KWARGS:
        return None
    if not (processor.do_resize and processor.do_convert_rgb) or processor.resample != _BICUBIC:
        return None
    do_rescale = bool(kwargs.get("do_rescale", processor.do_rescale))
    do_normalize = bool(kwargs.get("do_normalize", processor.do_normalize))
    if do_rescale != do_normalize:
        return None
    mean = std = None
    if do_normalize:
        # HF folds the rescale into the normalize: fp32 tensors of mean and std times 1/factor.
        scale = 1.0 / processor.rescale_factor
        mean = tuple((torch.tensor(processor.image_mean) * scale).tolist())
        std = tuple((torch.tensor(processor.image_std) * scale).tolist())
    size = processor.size
    # As HF's call does: min_pixels / max_pixels override the size's edges.
    min_pixels = kwargs.get("min_pixels")
    max_pixels = kwargs.get("max_pixels")
    shortest = size.shortest_edge if min_pixels is None else min_pixels
    longest = size.longest_edge if max_pixels is None else max_pixels
    if not (isinstance(shortest, int) and isinstance(longest, int) and shortest and longest):
        return None
    return FusedVisionSettings(
        patch_size=int(processor.patch_size),
        merge_size=int(processor.merge_size),
        temporal_patch_size=int(processor.temporal_patch_size),
        min_pixels=shortest,
        max_pixels=longest,
        mean=mean,
        std=std,
        dtype=dtype,
    )


def image_settings(
    image_processor: Any, kwargs: Mapping[str, object], dtype: torch.dtype | None = None
) -> FusedVisionSettings | None:
    """The fused settings of ``image_processor`` called with ``kwargs``; None: the HF path."""
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor

    if type(image_processor) is not Qwen2VLImageProcessor:
        return None
    return _settings(image_processor, kwargs, dtype)


def video_settings(
    video_processor: Any, kwargs: Mapping[str, object], dtype: torch.dtype | None = None
) -> FusedVisionSettings | None:
    """The fused settings of ``video_processor`` called with ``kwargs``; None: the HF path."""
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

    if type(video_processor) is not Qwen2VLVideoProcessor:
        return None
    if getattr(video_processor, "cap_pixels_per_frame", False):
        return None
    if kwargs.get("do_sample_frames", video_processor.do_sample_frames):
        return None
    return _settings(video_processor, kwargs, dtype)


def _target(height: int, width: int, settings: FusedVisionSettings) -> tuple[int, int] | None:
    if height < 1 or width < 1:
        return None
    try:
        return smart_resize(
            height, width, settings.factor, settings.min_pixels, settings.max_pixels
        )
    except ValueError:
        return None  # HF raises its own error for it


def image_target(image: object, settings: FusedVisionSettings) -> tuple[int, int] | None:
    """The resized ``(height, width)`` of ``image``; None when it must take the HF path."""
    if not isinstance(image, Image.Image):
        return None
    source = image.info.get(DRAFT_SOURCE_SIZE)
    if source is not None:
        return _target(int(source[1]), int(source[0]), settings)
    return _target(image.height, image.width, settings)


def video_target(frames: object, settings: FusedVisionSettings) -> tuple[int, int] | None:
    """The resized ``(height, width)`` of a video's frames; None when they take the HF path."""
    if not (
        isinstance(frames, np.ndarray)
        and frames.dtype == np.uint8
        and frames.ndim == 4
        and frames.shape[0] > 0
        and frames.shape[-1] == 3
    ):
        return None
    return _target(int(frames.shape[1]), int(frames.shape[2]), settings)


def _grid(
    frames: int, height: int, width: int, settings: FusedVisionSettings
) -> tuple[int, int, int]:
    return (
        -(-frames // settings.temporal_patch_size),
        height // settings.patch_size,
        width // settings.patch_size,
    )


def _patch_rows(
    planes: torch.Tensor, settings: FusedVisionSettings, out: np.ndarray | None = None
) -> np.ndarray:
    return patch_rows(
        planes,
        patch_size=settings.patch_size,
        merge_size=settings.merge_size,
        temporal_patch_size=settings.temporal_patch_size,
        out=out,
    )


class _RowsOut:
    """One call's output rows, written slice by slice: patch rows in uint8 and, when the settings
    normalize, each slice normalized as HF does as soon as it is written (by the thread that
    wrote it, while its bytes are in cache), into the floating output."""

    def __init__(self, count: int, channels: int, settings: FusedVisionSettings) -> None:
        self._settings = settings
        width = channels * settings.temporal_patch_size * settings.patch_size**2
        self.raw = np.empty((count, width), dtype=np.uint8)
        self._floating: torch.Tensor | None = None
        if settings.mean is not None and settings.std is not None:
            shape = (1, len(settings.mean), 1)
            self._mean = torch.tensor(settings.mean, dtype=torch.float32).view(shape)
            self._std = torch.tensor(settings.std, dtype=torch.float32).view(shape)
            self._floating = torch.empty((count, width), dtype=settings.dtype or torch.float32)

    def write(self, planes: torch.Tensor, first: int, stop: int) -> None:
        """Rows ``[first, stop)`` from ``planes`` (their frames or band of rows)."""
        chunk = _patch_rows(planes, self._settings, out=self.raw[first:stop])
        if self._floating is None:
            return
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
        return self._floating if self._floating is not None else torch.from_numpy(self.raw)


def image_rows(
    image: Image.Image,
    target: tuple[int, int],
    settings: FusedVisionSettings,
    *,
    executor: Executor | None = None,
    pieces: int = 1,
) -> tuple[torch.Tensor, tuple[int, int, int]]:
    """One image's patch rows and ``(t, h, w)`` grid.

    The image is resized into a leased buffer, then turned into planes and patch rows in bands
    of whole merged-patch rows (about :data:`_BAND_BYTES` of planes each, so a band's planes are
    still in cache when its rows are written: 1080p 3.8 vs 6.3 ms on one core). With an
    ``executor`` and ``pieces`` > 1, the resize's horizontal pass is cut in two
    (:func:`resize_frames`) and the bands are shared out in up to ``pieces`` runs, the first on
    the caller's thread, each writing straight into its slice of the rows. A band's rows depend
    on its pixels alone, so the bytes are the same whatever the cut. The same rule as
    :func:`video_rows` about the executor.
    """
    # Possibly Pillow's RGBX storage in place: its padding plane is dropped in the planes.
    pixels = rgb_pixels(image)[None]
    if pixels.shape[1:3] == target:  # nothing to resize: the pixels themselves are read
        return _image_rows(resize_frames(pixels, *target), settings, executor, pieces)
    with scratch_buffers.lease(math.prod((*target, pixels.shape[-1]))) as buffer:
        into = scratch_buffers.channels_last(buffer, (1, pixels.shape[-1], *target))
        parallel = executor is not None and pieces > 1
        resized = resize_frames(pixels, *target, executor=executor if parallel else None, into=into)
        return _image_rows(resized, settings, executor, pieces)


def _image_rows(
    resized: torch.Tensor, settings: FusedVisionSettings, executor: Executor | None, pieces: int
) -> tuple[torch.Tensor, tuple[int, int, int]]:
    target = (int(resized.shape[2]), int(resized.shape[3]))
    grid = _grid(1, *target, settings)
    band = settings.merge_size * settings.patch_size  # pixel rows of one merged-patch row
    per_block = grid[2] * settings.merge_size  # patch rows of one merged-patch row
    blocks = grid[1] // settings.merge_size
    per_band = max(1, _BAND_BYTES // (3 * band * target[1]))
    rows = _RowsOut(grid[1] * grid[2], 3, settings)

    def piece(first: int, stop: int) -> None:
        for start, end in _runs(first, stop, per_band):
            planes = to_planes(resized[:, :, start * band : end * band], 3)
            rows.write(planes, start * per_block, end * per_block)

    pieces = min(pieces, blocks)
    if executor is None or pieces < 2:
        piece(0, blocks)
    else:
        _run_pieces(executor, piece, blocks, pieces)
    return rows.result(), grid


def video_rows(
    frames: np.ndarray,
    target: tuple[int, int],
    settings: FusedVisionSettings,
    *,
    executor: Executor | None = None,
    pieces: int = 1,
) -> tuple[torch.Tensor, tuple[int, int, int]]:
    """One video's patch rows and ``(t, h, w)`` grid: every frame resized once, at the target.

    Frames are resized, turned into planes and patched a temporal group at a time (a few, for
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
    height, width = target
    grid = _grid(count, height, width, settings)
    per_group = grid[1] * grid[2]
    t_size = settings.temporal_patch_size
    per_run = max(1, _BAND_BYTES // (t_size * height * width * channels))
    rows = _RowsOut(grid[0] * per_group, channels, settings)

    def piece(first: int, stop: int) -> None:
        # Group by group (or a few small ones), so a group's pixels are read back from cache.
        for start, end in _runs(first, stop, per_run):
            chunk = frames[start * t_size : end * t_size]
            shape = (len(chunk), channels, height, width)
            with scratch_buffers.lease(math.prod(shape)) as buffer:
                into = scratch_buffers.channels_last(buffer, shape)
                resized = resize_frames(chunk, height, width, into=into)
                planes = to_planes(resized)
            rows.write(planes, start * per_group, end * per_group)

    pieces = min(pieces, grid[0])
    if executor is None or pieces < 2:
        piece(0, grid[0])
    else:
        _run_pieces(executor, piece, grid[0], pieces)
    return rows.result(), grid


def _runs(first: int, stop: int, most: int) -> Iterator[tuple[int, int]]:
    """``[first, stop)`` as near-equal consecutive runs of at most ``most``."""
    count = -(-(stop - first) // most)
    cuts = [first + (stop - first) * i // count for i in range(count + 1)]
    return itertools.pairwise(cuts)


def _run_pieces(
    executor: Executor, piece: Callable[[int, int], None], units: int, pieces: int
) -> None:
    """``piece(first, stop)`` over ``units`` cut into ``pieces`` near-equal runs: the first on
    the caller's thread (which would otherwise only wait: one core's worth of work fewer to
    queue, one thread fewer to wake), the others on ``executor``. Returns when every run has
    finished; the first error in run order is raised then."""
    bounds = [units * i // pieces for i in range(pieces + 1)]
    first, *others = itertools.pairwise(bounds)
    futures: list[Future[None]] = []
    here: Future[None] = Future()
    try:
        for run in others:
            futures.append(executor.submit(piece, *run))
        piece(*first)
        here.set_result(None)
    except BaseException as exc:  # drained with the others below, then raised in run order
        here.set_exception(exc)
    _drain([here, *futures])


def _drain(futures: Sequence[Future[_T]]) -> list[_T]:
    """Every future's result in order; every one is waited for before the first error
    propagates, so no worker is left reading an item (or writing rows) after the call."""
    results: list[_T] = []
    error: BaseException | None = None
    for future in futures:
        try:
            results.append(future.result())
        except BaseException as exc:
            error = error or exc
    if error is not None:
        raise error
    return results


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
    frames (:func:`video_rows`)."""
    work: Callable[..., _Rows] = video_rows if video else image_rows
    if executor is None or on_media_pool_thread() or not items:
        return [work(item, target, settings) for item, target in zip(items, targets, strict=True)]
    if len(items) == 1:
        return [work(items[0], targets[0], settings, executor=executor, pieces=pieces)]
    return _drain(
        [
            executor.submit(work, item, target, settings)
            for item, target in zip(items, targets, strict=True)
        ]
    )
