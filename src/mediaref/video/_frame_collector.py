"""Gathering kept frames into one (T, H, W, 3) uint8 RGB array."""

from __future__ import annotations

import av
import numpy as np


class FrameCollector:
    """Converts kept frames to RGB straight into one preallocated array.

    ``capacity`` is the expected frame count (from the packet index). Filling a preallocated
    array, rather than stacking a list of frames at the end, halves the peak memory of a
    full-video decode. Frames beyond the capacity still fit (they are appended), and a short
    stream is trimmed. Every frame is scaled to the first one's size: VP9 and AV1 streams may
    change resolution mid-way, and the stack must stay well-formed.
    """

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._buffer: np.ndarray | None = None
        self._overflow: list[np.ndarray] = []
        self.indices: list[int] = []

    def __len__(self) -> int:
        return len(self.indices)

    def add(self, frame: av.VideoFrame, index: int) -> None:
        if self._buffer is None:
            shape = (self._capacity, frame.height, frame.width, 3)
            self._buffer = np.empty(shape, dtype=np.uint8)
        _, height, width, _ = self._buffer.shape
        rgb = frame.to_ndarray(format="rgb24", width=width, height=height)
        position = len(self.indices)
        if position < self._capacity:
            self._buffer[position] = rgb
        else:
            self._overflow.append(rgb)
        self.indices.append(index)

    def clear(self) -> None:
        self._buffer = None
        self._overflow.clear()
        self.indices.clear()

    def frames(self) -> np.ndarray:
        """The kept frames; call once, after the last :meth:`add`."""
        if self._buffer is None:
            raise ValueError("no frames were kept")
        if self._overflow:
            return np.concatenate([self._buffer, np.stack(self._overflow)])
        kept = len(self.indices)
        # A trimmed view would pin the whole buffer; a short stream is rare, so copy.
        return self._buffer if kept == self._capacity else self._buffer[:kept].copy()
