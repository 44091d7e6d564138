"""Gathering kept frames into one (T, H, W, 3) uint8 RGB array, within the caps."""

from __future__ import annotations

import av
import numpy as np

from mediaref.media.video._frame_limits import charge_rgb_frames, check_frame_size
from mediaref.media.video._frame_scaling import SWSCALE_ONE_THREAD, FrameScaling

# Frames added at least per growth when a stream yields more frames than its packet index counted.
_MIN_GROWTH_FRAMES = 8


class FrameCollector:
    """Converts kept frames to RGB straight into one preallocated array.

    ``capacity`` is the expected frame count (from the packet index) and ``header_size`` the
    (width, height) the stream's header declares, when it declares one: the array's bytes are
    charged to the request's budget from them at construction, before anything is decoded, and
    topped up if the first decoded frame turns out larger. Filling a preallocated array, rather
    than stacking a list of frames at the end, halves the peak memory of a full-video decode.

    Every frame is scaled to the first one's size: VP9 and AV1 streams may change resolution
    midway, and the stack must stay well-formed. Each frame is checked against ``max_pixels``
    before it is converted. Frames beyond the capacity grow the array in place (charged first),
    and a short stream trims it in place.

    With a ``scaling`` (the opt-in approximate mode, :mod:`~mediaref.media.video._frame_scaling`)
    the array holds frames at the scaling's target of the first frame's size, converted to RGB
    and scaled by FFmpeg (:meth:`FrameScaling.to_rgb`). The pixel cap still binds on the source
    frames (the decoder allocates them whole); the budget is charged for the target frames, the
    ones kept.
    """

    def __init__(
        self,
        capacity: int,
        *,
        header_size: tuple[int, int] | None = None,
        max_pixels: int | None = None,
        scaling: FrameScaling | None = None,
    ) -> None:
        self._capacity = capacity
        self._max_pixels = max_pixels
        self._scaling = scaling
        self._charged_pixels = 0  # per frame of the capacity
        if header_size is not None and all(header_size):
            check_frame_size(*header_size, limit=max_pixels)
            width, height = self._kept_size(*header_size)
            charge_rgb_frames(capacity, height, width)
            self._charged_pixels = width * height
        self._buffer: np.ndarray | None = None
        self.indices: list[int] = []

    def __len__(self) -> int:
        return len(self.indices)

    def add(self, frame: av.VideoFrame, index: int) -> None:
        check_frame_size(frame.width, frame.height, limit=self._max_pixels)
        if self._buffer is None:
            self._buffer = self._allocate(*self._kept_size(frame.width, frame.height))
        position = len(self.indices)
        if position == len(self._buffer):
            self._grow()
        _, height, width, _ = self._buffer.shape
        if self._scaling is None:
            rgb = frame.to_ndarray(format="rgb24", width=width, height=height, **SWSCALE_ONE_THREAD)
        else:
            rgb = self._scaling.to_rgb(frame, width, height)
        self._buffer[position] = rgb
        self.indices.append(index)

    def clear(self) -> None:
        """Forget the kept frames; the array (already charged) is reused."""
        self.indices.clear()

    def frames(self) -> np.ndarray:
        """The kept frames; call once, after the last :meth:`add`."""
        if self._buffer is None or not self.indices:
            raise ValueError("no frames were kept")
        buffer, self._buffer = self._buffer, None
        kept = len(self.indices)
        if kept < len(buffer):
            # In place: a trimmed view would pin the whole array, and a copy would double it.
            buffer.resize((kept, *buffer.shape[1:]), refcheck=False)
        return buffer

    def _kept_size(self, width: int, height: int) -> tuple[int, int]:
        """The ``(width, height)`` frames of this source size are kept at."""
        if self._scaling is None:
            return width, height
        return self._scaling.target_size(width, height)

    def _allocate(self, width: int, height: int) -> np.ndarray:
        pixels = width * height
        if pixels > self._charged_pixels:
            charge_rgb_frames(self._capacity, 1, pixels - self._charged_pixels)
            self._charged_pixels = pixels
        return np.empty((self._capacity, height, width, 3), dtype=np.uint8)

    def _grow(self) -> None:
        # The packet index undercounted (packets carrying several frames): grow by a quarter.
        assert self._buffer is not None
        count, height, width, _ = self._buffer.shape
        added = max(_MIN_GROWTH_FRAMES, count // 4)
        charge_rgb_frames(added, height, width)
        self._buffer.resize((count + added, height, width, 3), refcheck=False)
