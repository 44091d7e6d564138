"""The decode-duration cap, in the terms both audio backends count in: frames at a sample rate."""

from __future__ import annotations

import math

from mediaref.exceptions import MediaTooLargeError


def max_frames(max_duration_s: float | None, sample_rate: float) -> int | None:
    """The most frames a clip at ``sample_rate`` may hold under the cap, or None for no cap."""
    if max_duration_s is None or math.isinf(max_duration_s):
        return None
    return math.floor(max_duration_s * sample_rate)


def duration_exceeded(
    max_duration_s: float, seconds: float, *, decoded: bool
) -> MediaTooLargeError:
    """The error for audio longer than the cap.

    ``decoded`` says the length is a count of decoded frames at which decoding stopped (so the
    clip lasts at least that long) rather than the length its header declares.
    """
    source = "stopped decoding at" if decoded else "its header declares"
    return MediaTooLargeError(
        f"audio exceeds the {max_duration_s:g}-second duration limit "
        f"({source} {seconds:.3f} s)"
    )


__all__ = ["duration_exceeded", "max_frames"]
