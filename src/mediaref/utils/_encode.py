"""Media to base64 and ``data:`` URLs, the form a chat request carries them in (the inverse of the
connector's ``data:`` reading): what a client, a test or a benchmark sends."""

from __future__ import annotations

import mimetypes
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from PIL import Image


def _mime_type(kind: str, format: str) -> str:
    extension = "." + format.lower()
    return mimetypes.types_map.get(extension, f"{kind}/{format.lower()}")


def encode_audio_base64(audio: npt.NDArray[Any], sampling_rate: int, *, format: str = "WAV") -> str:
    """``audio`` ((n,) or (channels, n) samples) written as ``format`` by soundfile, in base64."""
    from mediaref.media.audio import AudioMediaIO

    return AudioMediaIO().encode_base64((audio, sampling_rate), audio_format=format)


def encode_audio_url(audio: npt.NDArray[Any], sampling_rate: int, *, format: str = "WAV") -> str:
    """``audio`` as a ``data:`` URL (``data:audio/x-wav;base64,...`` for WAV)."""
    encoded = encode_audio_base64(audio, sampling_rate, format=format)
    return f"data:{_mime_type('audio', format)};base64,{encoded}"


def encode_image_base64(
    image: Image.Image, *, image_mode: str | None = "RGB", format: str = "PNG"
) -> str:
    """``image`` converted to ``image_mode`` (None: as it is), written as ``format``, in base64."""
    from mediaref.media.image import ImageMediaIO

    return ImageMediaIO(image_mode=image_mode).encode_base64(image, image_format=format)


def encode_image_url(
    image: Image.Image, *, image_mode: str | None = "RGB", format: str = "PNG"
) -> str:
    """``image`` as a ``data:`` URL (``data:image/png;base64,...`` by default)."""
    encoded = encode_image_base64(image, image_mode=image_mode, format=format)
    return f"data:{_mime_type('image', format)};base64,{encoded}"


def encode_video_base64(frames: npt.NDArray[np.uint8], *, format: str = "JPEG") -> str:
    """``frames`` ((T, H, W, 3) uint8) as the video decoder's base64 form: for ``"JPEG"``, each
    frame a base64 JPEG, joined by commas (what a ``video/jpeg`` data URL carries)."""
    from mediaref.media.image import ImageMediaIO
    from mediaref.media.video import VideoMediaIO

    return VideoMediaIO(ImageMediaIO()).encode_base64(frames, video_format=format)


def encode_video_url(frames: npt.NDArray[np.uint8], *, format: str = "JPEG") -> str:
    """``frames`` as a ``data:`` URL (``data:video/jpeg;base64,...`` for JPEG frames)."""
    encoded = encode_video_base64(frames, format=format)
    mime = "video/jpeg" if format.lower() == "jpeg" else _mime_type("video", format)
    return f"data:{mime};base64,{encoded}"


__all__ = [
    "encode_audio_base64",
    "encode_audio_url",
    "encode_image_base64",
    "encode_image_url",
    "encode_video_base64",
    "encode_video_url",
]
