"""The ``video/jpeg`` form: a video sent as comma-separated base64 JPEG frames."""

from __future__ import annotations

import binascii
from typing import TYPE_CHECKING, Protocol

import numpy as np
import pybase64
from PIL import Image

from mediaref.exceptions import MediaRefError
from mediaref.video._registry import VideoFrames, VideoMetadata

if TYPE_CHECKING:
    from mediaref.media.base import DecodeSpec

JPEG_FRAMES_BACKEND = "jpeg_frames"

# The rate a frame sequence is assumed to have when the decoder is given no ``fps``: the rate
# Qwen-VL style clients sample at before sending frames (qwen_vl_utils' FPS = 2.0).
DEFAULT_JPEG_FRAMES_FPS = 2.0


class FrameImageDecoder(Protocol):
    """What decodes one frame: an ImageMediaIO (its mode, background and pixel cap apply)."""

    def load_bytes(self, data: bytes) -> Image.Image: ...

    def get_decode_spec(self) -> DecodeSpec: ...


def load_jpeg_frames(
    text: bytes, image_io: FrameImageDecoder, fps: float | None
) -> tuple[VideoFrames, VideoMetadata]:
    """Decode every frame of ``text`` (base64 frames joined by commas) and stack them in order.

    Raises ValueError("Failed to decode video: ...") naming the first frame that fails.
    """
    frame_rate = DEFAULT_JPEG_FRAMES_FPS if fps is None else fps
    arrays: list[np.ndarray] = []
    for position, frame_text in enumerate(text.split(b",")):
        try:
            image = image_io.load_bytes(pybase64.b64decode(frame_text.strip(), validate=True))
        except MediaRefError:
            raise  # a frame over the pixel cap keeps its own type (and HTTP status)
        except (ValueError, binascii.Error) as exc:
            raise ValueError(f"Failed to decode video: JPEG frame {position}: {exc}") from exc
        # The frames join an RGB stack whatever mode the image decoder was configured with.
        arrays.append(np.asarray(image if image.mode == "RGB" else image.convert("RGB")))
    shapes = {a.shape for a in arrays}
    if len(shapes) > 1:
        raise ValueError(f"Failed to decode video: JPEG frames differ in size: {sorted(shapes)}")
    frames = np.stack(arrays)
    total = len(arrays)
    metadata: VideoMetadata = {
        "total_num_frames": total,
        "fps": frame_rate,
        "duration": total / frame_rate,
        "video_backend": JPEG_FRAMES_BACKEND,
        "frames_indices": list(range(total)),
        # The client chose these frames; resampling them again would drop some of its choice.
        "do_sample_frames": False,
        "width": int(frames.shape[2]),
        "height": int(frames.shape[1]),
    }
    return frames, metadata
