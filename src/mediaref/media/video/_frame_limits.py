"""What a video decode may allocate: a pixel cap per frame, and the request's decoded bytes.

A frame is an image, so ``VLLM_MAX_IMAGE_PIXELS`` caps each frame (0 or less: no cap). It is
checked on the stream's header size before decoding, handed to FFmpeg's decoder as its
``max_pixels`` option (FFmpeg allocates every frame at its coded size, and a stream may switch
to a larger size midway, so the cap must bind inside the decoder, not only on what we keep), and
checked again on each decoded frame before it is converted.

The kept frames, ``count x height x width x 3`` bytes of RGB, are charged to the request's
decoded-bytes budget (:func:`~mediaref.media.decode_budget.charge_decoded_bytes`) before the
array that holds them is allocated.

The decoder's own frames are not charged (vLLM does not count them either), but their number is
bounded: FFmpeg's frame threads each hold a frame in flight, one thread per core by default, so
for huge frames :func:`decoder_thread_count` lowers the thread count. A codec's reference frames
(up to 16 for H.264/HEVC) remain, each within the pixel cap.
"""

from __future__ import annotations

import os

from mediaref import envs
from mediaref.exceptions import MediaTooLargeError
from mediaref.media.decode_budget import charge_decoded_bytes

RGB_CHANNELS = 3

# What the decoder's frames in flight may take together, at the coded size.
_IN_FLIGHT_BYTES = 256 << 20
# Bytes a decoded frame may take per pixel: 4:4:4 at 8 bits, or 4:2:0 at 16.
_CODED_BYTES_PER_PIXEL = 3


def max_frame_pixels() -> int | None:
    """``VLLM_MAX_IMAGE_PIXELS``, or None when it is 0 or less (no cap)."""
    limit = int(envs.VLLM_MAX_IMAGE_PIXELS)
    return limit if limit > 0 else None


def check_frame_size(width: int, height: int, *, limit: int | None) -> None:
    """Raise :class:`MediaTooLargeError` for a frame of more than ``limit`` pixels."""
    if limit is not None and width * height > limit:
        raise MediaTooLargeError(
            f"video frame of {width}x{height} = {width * height} pixels exceeds the "
            f"{limit}-pixel limit (VLLM_MAX_IMAGE_PIXELS)"
        )


def decoder_thread_count(width: int, height: int) -> int:
    """Threads for decoding frames of this size: 0 (FFmpeg's choice, a thread per core) unless
    the frames the threads hold in flight would pass ``_IN_FLIGHT_BYTES`` together."""
    frame_bytes = max(1, width * height * _CODED_BYTES_PER_PIXEL)
    cores = os.cpu_count() or 1
    if frame_bytes * (cores + 1) <= _IN_FLIGHT_BYTES:
        return 0
    return max(1, _IN_FLIGHT_BYTES // frame_bytes)


def rgb_frames_bytes(count: int, height: int, width: int) -> int:
    return count * height * width * RGB_CHANNELS


def charge_rgb_frames(count: int, height: int, width: int) -> None:
    """Charge ``count`` RGB frames of ``height`` x ``width`` about to be allocated."""
    charge_decoded_bytes(rgb_frames_bytes(count, height, width))


__all__ = [
    "RGB_CHANNELS",
    "charge_rgb_frames",
    "check_frame_size",
    "decoder_thread_count",
    "max_frame_pixels",
    "rgb_frames_bytes",
]
