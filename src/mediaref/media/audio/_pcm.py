"""Decoded audio gathered block by block into ONE float32 array, within the caps.

Both backends decode in blocks; keeping a list of blocks and concatenating them at the end holds
two full copies of the PCM at the peak (three, with a transpose). :class:`PcmBuffer` instead
writes each block straight into its place in the output, which is allocated once: from the
header's frame count when there is one (and it is within the caps), else grown geometrically.
Growing and the final trim resize that one allocation in place (``ndarray.resize``: a
``realloc``, which large blocks satisfy by remapping pages rather than copying), so a decode's
peak is about the output plus one block.

Every allocation is charged first to the request's decoded-bytes budget
(:func:`~mediaref.media.decode_budget.charge_decoded_bytes`), and no block is taken that would
pass the caps of :class:`~mediaref.media.audio._caps.AudioLimits`.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from mediaref.media.audio._caps import AudioLimits, check_stream_shape, pcm_bytes
from mediaref.media.decode_budget import charge_decoded_bytes

FloatArray = npt.NDArray[np.float32]

# First capacity when the length is unknown, and the least a growth adds.
_MIN_CAPACITY_FRAMES = 1 << 16
_GROWTH = 1.5


class DecodeCharge:
    """What one decode has charged to the request's budget, across its backends.

    A decode that soundfile gives up on partway is retried with PyAV; the retry charges only
    what it needs beyond what the first attempt already charged, so one clip is never counted
    twice against the request.
    """

    def __init__(self) -> None:
        self.charged_bytes = 0

    def cover(self, total_bytes: int) -> None:
        """Make sure ``total_bytes`` are charged, charging the part not charged yet."""
        if total_bytes > self.charged_bytes:
            charge_decoded_bytes(total_bytes - self.charged_bytes)
            self.charged_bytes = total_bytes


class PcmBuffer:
    """float32 samples of ``channels`` channels, stored channel-major: (channels, capacity).

    ``expected_frames`` is the header's count, or None when the header leaves it open. A count
    over the caps is refused here, before anything is allocated. ``slack_frames`` are allocated
    beyond it when the count is an estimate (a codec's priming and padding, a duration computed
    from the bit rate), so that a close estimate never costs a growth. ``charge`` is the
    decode's :class:`DecodeCharge`, shared by its backends.
    """

    def __init__(
        self,
        channels: int,
        sample_rate: float,
        limits: AudioLimits,
        *,
        expected_frames: int | None = None,
        slack_frames: int = 0,
        charge: DecodeCharge | None = None,
    ) -> None:
        check_stream_shape(sample_rate, channels)
        self._charge = DecodeCharge() if charge is None else charge
        self.channels = channels
        self.sample_rate = sample_rate
        self.frames = 0
        self._limits = limits
        self._max_frames = limits.max_frames(sample_rate, channels)
        if expected_frames is not None:
            limits.check_declared(expected_frames, sample_rate, channels)
            initial = expected_frames + slack_frames
        else:
            initial = _MIN_CAPACITY_FRAMES
        if self._max_frames is not None:
            initial = min(initial, self._max_frames)
        # Owned and 1-D, so that ndarray.resize may reallocate it in place; the 2-D layout is a
        # view taken for each write and never kept.
        self._flat: FloatArray = np.empty(0, dtype=np.float32)
        self._capacity = 0
        self._resize(max(initial, 0))

    def room(self) -> int | None:
        """Frames that may still be added before a cap trips, or None for no cap."""
        return None if self._max_frames is None else self._max_frames - self.frames

    def append_interleaved(self, block: FloatArray) -> None:
        """Add a (frames, channels) block, as soundfile reads them."""
        self._append(block.T)

    def result(self) -> FloatArray:
        """The samples: (n,) for mono, (channels, n) otherwise, C-contiguous. Call once."""
        self._resize(self.frames)
        flat, self._flat = self._flat, np.empty(0, dtype=np.float32)
        return flat if self.channels == 1 else flat.reshape(self.channels, self.frames)

    def _append(self, planar: FloatArray) -> None:
        channels, count = planar.shape
        if channels != self.channels:
            raise ValueError(
                f"the audio stream changes from {self.channels} to {channels} channels midway"
            )
        total = self.frames + count
        if self._max_frames is not None and total > self._max_frames:
            raise self._limits.exceeded(total, self.sample_rate, self.channels)
        if total > self._capacity:
            grown = max(total, int(self._capacity * _GROWTH), _MIN_CAPACITY_FRAMES)
            if self._max_frames is not None:
                grown = min(grown, self._max_frames)
            self._resize(grown)
        view = self._flat.reshape(self.channels, self._capacity)
        view[:, self.frames : total] = planar
        self.frames = total

    def _resize(self, capacity: int) -> None:
        """Give every channel row ``capacity`` frames, keeping the frames written so far."""
        old = self._capacity
        if capacity == old:
            return
        if capacity > old:
            self._charge.cover(pcm_bytes(capacity, self.channels))
        flat, rows, kept = self._flat, self.channels, self.frames
        if old == 0:
            self._flat = np.empty(rows * capacity, dtype=np.float32)  # not zero-filled
        elif capacity > old:
            flat.resize(rows * capacity, refcheck=False)
            # Rows move right; from the last, so no row is overwritten before it has moved.
            for row in range(rows - 1, 0, -1):
                flat[row * capacity : row * capacity + kept] = flat[row * old : row * old + kept]
        else:
            for row in range(1, rows):
                flat[row * capacity : row * capacity + kept] = flat[row * old : row * old + kept]
            flat.resize(rows * capacity, refcheck=False)
        self._capacity = capacity


__all__ = ["DecodeCharge", "PcmBuffer"]
