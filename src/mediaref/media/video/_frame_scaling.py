"""How kept frames go through FFmpeg's scaler (swscale): on the calling thread, and, opt-in, straight
to a target size.

**One scaler thread** (:data:`SWSCALE_ONE_THREAD`, every conversion of a kept frame). PyAV 17 and
newer give each conversion a scaler that starts a thread per core, and PyAV builds a new scaler
for every frame it converts. For frames kept from a decode, that is a pool of threads started and
joined per frame while the decoder's own threads already hold the cores: measured on a 2-core
host (``docs/performance.md``), a 32-frame sample of a 480p clip decodes 1.2x faster with
one-thread conversions, a 1080p clip 1.1x, and the pixels are the same (each output row depends
on its own source rows only, however the rows are cut across threads).

**Frame scaling** (opt-in, approximate). A :class:`FrameScaling` given to :class:`~mediaref.media.video.VideoMediaIO` (``frame_scaling=``)
makes the PyAV codec scale each kept frame to the rule's target size with FFmpeg's scaler
(swscale) as it converts it to RGB, instead of converting at the source size and leaving the
resize to the model's processor. It saves the full-size RGB frames and the processor's resize,
at the price of bit parity: FFmpeg's bicubic is not torchvision's antialiased bicubic
(``docs/performance.md`` reports the deviation). Nothing in mediaref turns it on by default.

The scaled decode keeps every guarantee of the exact one: the payload opens through the video
allow-list of demuxers, each *source* frame is checked against ``VLLM_MAX_IMAGE_PIXELS`` (the
decoder allocates it whole), and the request's decoded-bytes budget is charged for the frames
kept, which are the *target* frames. The scaling is part of the decoder's spec, so a scaled and an
exact decode of the same bytes never share a cache entry.

How a frame is scaled (measured against torchvision's antialiased bicubic, on real clips, by CPU
time): a YUV frame whose target keeps at least half its size on both sides is scaled in its own
pixel format, then converted to RGB at the target size by swscale's unscaled converters (2-5x
less CPU for that step than converting at the source size and resizing, and as close or
closer). A stronger downscale is converted and scaled in one call: scaling 4:2:0 planes that far
would leave the chroma at half the target's resolution, 0.5-2.9 dB further from the exact path
(whose chroma, upsampled first, is then at the target's). Other pixel formats (RGB, palette)
always take the one call. The method is versioned in the spec (``method``).

The setting reaches the frame collector through a context variable that
:meth:`VideoMediaIO.load_bytes` sets around the loader's call: loaders are classmethods with
their own signatures, and the codec is several calls below them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import av
import numpy as np

__all__ = [
    "DEFAULT_INTERPOLATION",
    "SCALING_CODECS",
    "SWSCALE_ONE_THREAD",
    "FrameScaling",
    "current_frame_scaling",
    "frame_scaling_scope",
]


def _pyav_major() -> int:
    head = av.__version__.split(".", 1)[0]
    return int(head) if head.isdigit() else 0


SWSCALE_ONE_THREAD: Mapping[str, Any] = MappingProxyType(
    {"threads": 1} if _pyav_major() >= 17 else {}
)
"""Keyword arguments for ``VideoFrame.reformat`` / ``to_ndarray``: one scaler thread where PyAV
takes the argument (17 and newer), nothing on older releases, whose scalers are single-threaded."""

# Of swscale's eleven kernels, the one closest to torchvision's antialiased bicubic on real clips
# (854x480 and 1920x1080 pans at 1,280, 256 and 64 tokens): best or within 0.2 dB of the best
# (BICUBLIN) at every size; docs/performance.md.
DEFAULT_INTERPOLATION = "BICUBIC"
_INTERPOLATIONS = frozenset(
    {
        "FAST_BILINEAR",
        "BILINEAR",
        "BICUBIC",
        "X",
        "POINT",
        "AREA",
        "BICUBLIN",
        "GAUSS",
        "SINC",
        "LANCZOS",
        "SPLINE",
    }
)
# Keys the conversion below: change it whenever the pixels it gives may change.
_METHOD = "swscale-yuv-first-above-half/1"
# The codecs whose frame collector honours a scaling; the others would ignore it silently.
SCALING_CODECS = frozenset({"pyav"})

SizeRule = Callable[[int, int], tuple[int, int] | None]


@dataclass(frozen=True)
class FrameScaling:
    """Scale every kept frame to ``rule(width, height)`` (a ``(width, height)``; None: keep the
    source size) with FFmpeg's ``interpolation``.

    ``rule`` is applied to the first decoded frame's size (every later frame is scaled to the
    same size, as the exact decode scales them to the first one's). ``key`` identifies the rule
    in the decoder's spec: two rules that may size a frame differently must have different keys.
    """

    rule: SizeRule = field(compare=False)
    key: Mapping[str, Any]
    interpolation: str = DEFAULT_INTERPOLATION

    def __post_init__(self) -> None:
        if self.interpolation not in _INTERPOLATIONS:
            raise ValueError(
                f"frame_scaling: unknown interpolation {self.interpolation!r}; "
                f"one of {sorted(_INTERPOLATIONS)}"
            )

    def target_size(self, width: int, height: int) -> tuple[int, int]:
        """The ``(width, height)`` frames of ``width`` x ``height`` are decoded to."""
        target = self.rule(width, height)
        if target is None:
            return width, height
        target_width, target_height = (int(side) for side in target)
        if target_width < 1 or target_height < 1:
            raise ValueError(f"frame_scaling: the rule gave an empty size {target!r}")
        return target_width, target_height

    def to_rgb(self, frame: av.VideoFrame, width: int, height: int) -> np.ndarray:
        """``frame`` as ``(height, width, 3)`` uint8 RGB, scaled by FFmpeg (the method above)."""
        if _scales_in_yuv(frame, width, height):
            scaled = frame.reformat(
                width=width, height=height, interpolation=self.interpolation, **SWSCALE_ONE_THREAD
            )
            rgb: np.ndarray = scaled.to_ndarray(format="rgb24", **SWSCALE_ONE_THREAD)
            return rgb
        rgb = frame.to_ndarray(
            format="rgb24",
            width=width,
            height=height,
            interpolation=self.interpolation,
            **SWSCALE_ONE_THREAD,
        )
        return rgb

    def spec_settings(self) -> dict[str, Any]:
        """What keys this scaling in a decode spec."""
        return {"rule": dict(self.key), "interpolation": self.interpolation, "method": _METHOD}


def _scales_in_yuv(frame: av.VideoFrame, width: int, height: int) -> bool:
    # Planar YUV only: scaling palette indices (pal8) or packed formats in place is not safe.
    return (
        frame.format.name.startswith("yuv")
        and 2 * width >= frame.width
        and 2 * height >= frame.height
    )


_active: ContextVar[FrameScaling | None] = ContextVar("mediaref_frame_scaling", default=None)


def current_frame_scaling() -> FrameScaling | None:
    """The scaling of the decode running in this context; None: frames keep their size."""
    return _active.get()


@contextmanager
def frame_scaling_scope(scaling: FrameScaling | None) -> Iterator[None]:
    """Run a decode with ``scaling`` (None: exact), restoring the previous one on exit."""
    token = _active.set(scaling)
    try:
        yield
    finally:
        _active.reset(token)
