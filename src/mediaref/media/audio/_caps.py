"""The audio decode caps, in the terms both backends count in: frames of float32 PCM.

Two caps bound a decode, and both raise :class:`~mediaref.exceptions.MediaTooLargeError`:

* the duration (``VLLM_MAX_AUDIO_DECODE_DURATION_S``, or the decoder's ``max_duration_s``);
* the PCM bytes (``VLLM_MAX_AUDIO_DECODE_BYTES``): frames x channels x 4, what the float32 output
  takes. The duration alone cannot bound memory, since a header may declare 8 channels at
  192 kHz (or 2^31 Hz) and stay under ten minutes.

Each is checked twice: from what a header declares, before anything is allocated (reject-only:
a header is the payload's claim, so it may refuse a decode but never vouches for one), and on the
frames really decoded, whatever the header said.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mediaref import envs
from mediaref.exceptions import MediaTooLargeError

PCM_SAMPLE_BYTES = 4  # float32

_BYTES_SETTING = "VLLM_MAX_AUDIO_DECODE_BYTES"


def decode_bytes_cap() -> int | None:
    """``VLLM_MAX_AUDIO_DECODE_BYTES``, or None when it is 0 or less (no cap)."""
    limit = int(envs.VLLM_MAX_AUDIO_DECODE_BYTES)
    return limit if limit > 0 else None


def pcm_bytes(frames: int, channels: int) -> int:
    return frames * channels * PCM_SAMPLE_BYTES


def check_stream_shape(sample_rate: float, channels: int) -> None:
    """A ValueError for a stream no audio can have: no channels, or a rate that is not positive.

    Checked before any cap arithmetic, which divides by both.
    """
    if not channels or channels < 1:
        raise ValueError(f"the audio stream declares {channels} channels")
    if not sample_rate or not math.isfinite(sample_rate) or sample_rate <= 0:
        raise ValueError(f"the audio stream declares a sample rate of {sample_rate} Hz")


@dataclass(frozen=True)
class AudioLimits:
    """The caps one decode runs under (None: no cap), read once when its ref is built."""

    max_duration_s: float | None = None
    max_decode_bytes: int | None = None

    def max_frames(self, sample_rate: float, channels: int) -> int | None:
        """The most frames a clip of this shape may hold under both caps, or None for no cap."""
        caps = []
        if self.max_duration_s is not None and not math.isinf(self.max_duration_s):
            caps.append(math.floor(self.max_duration_s * sample_rate))
        if self.max_decode_bytes is not None:
            caps.append(self.max_decode_bytes // (channels * PCM_SAMPLE_BYTES))
        return min(caps) if caps else None

    def check_declared(self, frames: float, sample_rate: float, channels: int) -> None:
        """Refuse what a header declares (``frames`` may be an estimate) if it passes a cap."""
        self._check(frames, sample_rate, channels, decoded=False)

    def exceeded(self, frames: int, sample_rate: float, channels: int) -> MediaTooLargeError:
        """The error for a decode stopped at ``frames`` decoded frames, which pass a cap."""
        try:
            self._check(frames, sample_rate, channels, decoded=True)
        except MediaTooLargeError as exc:
            return exc
        raise AssertionError(f"{frames} frames pass no cap of {self}")

    def _check(self, frames: float, sample_rate: float, channels: int, *, decoded: bool) -> None:
        seconds = frames / sample_rate
        if self.max_duration_s is not None and seconds > self.max_duration_s:
            raise duration_exceeded(self.max_duration_s, seconds, decoded=decoded)
        nbytes = math.ceil(frames) * channels * PCM_SAMPLE_BYTES
        if self.max_decode_bytes is not None and nbytes > self.max_decode_bytes:
            source = "stopped decoding at" if decoded else "its header declares"
            raise MediaTooLargeError(
                f"audio exceeds the {self.max_decode_bytes}-byte decode limit "
                f"({_BYTES_SETTING}): {source} {nbytes} bytes of float32 PCM "
                f"({math.ceil(frames)} frames x {channels} channels at {sample_rate:g} Hz)"
            )


def duration_exceeded(
    max_duration_s: float, seconds: float, *, decoded: bool
) -> MediaTooLargeError:
    """The error for audio longer than the cap.

    ``decoded`` says the length is a count of decoded frames at which decoding stopped (so the
    clip lasts at least that long) rather than the length its header declares.
    """
    source = "stopped decoding at" if decoded else "its header declares"
    return MediaTooLargeError(
        f"audio exceeds the {max_duration_s:g}-second duration limit ({source} {seconds:.3f} s)"
    )


__all__ = [
    "PCM_SAMPLE_BYTES",
    "AudioLimits",
    "check_stream_shape",
    "decode_bytes_cap",
    "duration_exceeded",
    "pcm_bytes",
]
