"""The ``video/jpeg`` form: a video sent as comma-separated base64 JPEG frames.

As in vLLM, only the first ``num_frames`` frames are kept (-1: every frame), and the rest of the
text is never split, and the metadata names the backend ``jpeg_sequence``. The sequence's rate is
``fps`` (1 by default, as vLLM's); the client may say how it sampled the frames it sent
(:data:`JPEG_METADATA_OPTIONS`), which the metadata then reports.

A few kilobytes of base64 can declare frames of any size, so nothing is decoded before every kept
frame's header has been read: each frame is an image, under ``VLLM_MAX_IMAGE_PIXELS``, and the
frames must agree in size. The stack, ``frames x height x width x 3`` bytes, is then charged to
the request's decoded-bytes budget and allocated once; frames are decoded one at a time into it.
"""

from __future__ import annotations

import binascii
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pybase64
from PIL import Image

from mediaref.exceptions import MediaTooLargeError
from mediaref.media.decode_budget import decode_budget_scope
from mediaref.media.image import read_image_size
from mediaref.media.video._frame_limits import charge_rgb_frames
from mediaref.media.video._sampling import ALL_FRAMES
from mediaref.media.video.loader_registry import VideoFrames, VideoMetadata

if TYPE_CHECKING:
    from mediaref.media.base import DecodeSpec

JPEG_FRAMES_BACKEND = "jpeg_sequence"

# The rate a frame sequence is assumed to have when the decoder is given no ``fps`` (vLLM's).
DEFAULT_JPEG_FRAMES_FPS = 1.0

JPEG_METADATA_OPTIONS = ("frames_indices", "total_num_frames", "duration", "do_sample_frames")
"""What a client may say about the frames it sent: which frames of its video they are, how many
the video has, how long it lasts, and whether the processor may sample them again."""


def check_jpeg_metadata_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` (of :data:`JPEG_METADATA_OPTIONS`) checked for type, as plain JSON values.

    Whether they agree with the frames sent is checked when the frames are decoded.
    """
    checked: dict[str, Any] = {}
    indices = options.get("frames_indices")
    if indices is not None:
        if not isinstance(indices, (list, tuple)) or not all(_is_int(i) for i in indices):
            raise ValueError("frames_indices must be a list of integers")
        checked["frames_indices"] = [int(i) for i in indices]
    if "total_num_frames" in options:
        total = options["total_num_frames"]
        if not _is_int(total) or total < 1:
            raise ValueError("total_num_frames must be a positive integer")
        checked["total_num_frames"] = int(total)
    duration = options.get("duration")
    if duration is not None:
        if not _is_number(duration) or not math.isfinite(duration) or duration < 0:
            raise ValueError("duration must be a non-negative number")
        checked["duration"] = float(duration)
    if "do_sample_frames" in options:
        if not isinstance(options["do_sample_frames"], bool):
            raise ValueError("do_sample_frames must be a boolean")
        checked["do_sample_frames"] = options["do_sample_frames"]
    return checked


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


class FrameImageDecoder(Protocol):
    """What decodes one frame: an ImageMediaIO (its mode, background and pixel cap apply)."""

    def load_bytes(self, data: bytes) -> Image.Image: ...

    def get_decode_spec(self) -> DecodeSpec: ...


def split_jpeg_frames(text: bytes, num_frames: int) -> list[bytes]:
    """The base64 texts of the frames kept: the first ``num_frames`` (-1: all)."""
    if num_frames == ALL_FRAMES:
        return text.split(b",")
    # maxsplit leaves whatever follows the kept frames in one piece, which is then dropped.
    return text.split(b",", num_frames)[:num_frames]


def load_jpeg_frames(
    text: bytes,
    image_io: FrameImageDecoder,
    fps: float | None,
    num_frames: int = ALL_FRAMES,
    metadata_options: Mapping[str, Any] | None = None,
) -> tuple[VideoFrames, VideoMetadata]:
    """Decode the first ``num_frames`` frames of ``text`` (base64 frames joined by commas).

    ``metadata_options`` (checked by :func:`check_jpeg_metadata_options`) describe how the
    client sampled the frames; ValueError when they disagree with the frames sent.
    Raises ValueError("Failed to decode video: ...") naming the first frame that fails, and
    :class:`~mediaref.exceptions.MediaTooLargeError` for a frame over the pixel cap or a stack
    over the request's budget, before any frame is decoded.
    """
    frame_rate = DEFAULT_JPEG_FRAMES_FPS if fps is None else fps
    parts = split_jpeg_frames(text, num_frames)
    pixels = _common_pixel_count(parts)
    charge_rgb_frames(len(parts), 1, pixels)  # before any pixel is decoded
    frames: np.ndarray | None = None
    for position, part in enumerate(parts):
        rgb = _decode_frame(position, part, image_io)
        if frames is None:
            # The decoded size: the header's, or its transpose for an EXIF-rotated frame.
            height, width, _ = rgb.shape
            if height * width != pixels:  # the decoder and the header disagree
                raise ValueError(f"Failed to decode video: JPEG frame {position}: size changed")
            frames = np.empty((len(parts), height, width, 3), dtype=np.uint8)
        elif rgb.shape != frames.shape[1:]:
            raise ValueError(
                f"Failed to decode video: JPEG frames differ in size: frame {position} is "
                f"{rgb.shape[1]}x{rgb.shape[0]}, frame 0 {frames.shape[2]}x{frames.shape[1]}"
            )
        frames[position] = rgb
    assert frames is not None  # split() yields at least one part
    sent = len(parts)
    options = metadata_options or {}
    indices = options.get("frames_indices", list(range(sent)))
    if len(indices) != sent:
        raise ValueError(
            f"frames_indices length ({len(indices)}) must match number of frames sent ({sent})"
        )
    total = options.get("total_num_frames", sent)
    if total < sent:
        raise ValueError(f"total_num_frames ({total}) must be >= number of frames sent ({sent})")
    metadata: VideoMetadata = {
        "total_num_frames": total,
        "fps": frame_rate,
        "duration": options.get("duration", total / frame_rate),
        "video_backend": JPEG_FRAMES_BACKEND,
        "frames_indices": list(indices),
        # The client chose these frames; resampling them again would drop some of its choice.
        "do_sample_frames": options.get("do_sample_frames", False),
        "width": int(frames.shape[2]),
        "height": int(frames.shape[1]),
    }
    return frames, metadata


def _common_pixel_count(parts: list[bytes]) -> int:
    """Every frame's header, read before any pixel is decoded: the pixels each frame has.

    The pixel cap fires here. Frames must agree in pixel count (their orientation may still
    swap width and height, which the decode reveals).
    """
    common: int | None = None
    for position, part in enumerate(parts):
        try:
            width, height = read_image_size(_base64_frame(part))
        except MediaTooLargeError:
            raise  # a frame over the pixel cap keeps its own type (and HTTP status)
        except (ValueError, binascii.Error) as exc:  # e.g. a format images refuse
            raise _frame_failure(position, exc) from exc
        if common is None:
            common = width * height
        elif width * height != common:
            raise ValueError(
                f"Failed to decode video: JPEG frames differ in size: frame {position} has "
                f"{width}x{height} pixels, frame 0 {common}"
            )
    assert common is not None
    return common


def _decode_frame(position: int, part: bytes, image_io: FrameImageDecoder) -> np.ndarray:
    try:
        # The stack was charged for every kept frame; each frame's raster is transient (freed
        # once copied into the stack), so the image decoder charges no request budget for it
        # (only its own per-item check applies).
        with decode_budget_scope(None):
            image = image_io.load_bytes(_base64_frame(part))
    except MediaTooLargeError:
        raise
    except ValueError as exc:  # the image decoder's documented failures (422 included)
        raise _frame_failure(position, exc) from exc
    # The frames join an RGB stack whatever mode the image decoder was configured with.
    return np.asarray(image if image.mode == "RGB" else image.convert("RGB"))


def _base64_frame(part: bytes) -> bytes:
    return pybase64.b64decode(part.strip(), validate=True)


def _frame_failure(position: int, exc: Exception) -> ValueError:
    reason = str(exc) or type(exc).__name__
    if isinstance(exc, binascii.Error):
        reason = f"invalid base64: {reason}"
    return ValueError(f"Failed to decode video: JPEG frame {position}: {reason}")
