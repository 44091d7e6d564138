"""Offline helpers: fetch one media URL and return it decoded, as vLLM's ``multimodal.utils`` does.

Each builds the default decoder for its modality (configured by the optional ``*_io_kwargs``),
fetches through the connector that ``VLLM_MEDIA_CONNECTOR`` names (or the one passed in), and
calls ``decode()`` before returning, so scripts get plain objects. The serving path does not use
these: it calls ``MediaConnector.fetch_*`` directly and stays lazy.

As vLLM's, the default connector may read any local file (``file:`` URLs from ``/``): these are
for user code, never for a server handling requests.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from PIL import Image

    from mediaref.media.connector import MediaConnector


def _connector(connector: MediaConnector | None) -> MediaConnector:
    if connector is not None:
        return connector
    from mediaref.media.connector import load_media_connector

    return load_media_connector(allowed_local_media_path="/")


def fetch_image(
    image_url: str,
    image_io_kwargs: Mapping[str, Any] | None = None,
    *,
    connector: MediaConnector | None = None,
) -> Image.Image:
    """The decoded image at ``image_url`` (``image_io_kwargs`` go to ``ImageMediaIO``)."""
    from mediaref.media.image import ImageMediaIO

    image_io = ImageMediaIO(**(image_io_kwargs or {}))
    image: Image.Image = _connector(connector).fetch_image(image_url, image_io).decode()
    return image


def fetch_video(
    video_url: str,
    video_io_kwargs: Mapping[str, Any] | None = None,
    *,
    connector: MediaConnector | None = None,
) -> tuple[npt.NDArray[np.uint8], dict[str, Any]]:
    """The decoded ``(frames, metadata)`` at ``video_url`` (kwargs go to ``VideoMediaIO``)."""
    from mediaref.media.image import ImageMediaIO
    from mediaref.media.video import VideoMediaIO

    video_io = VideoMediaIO(ImageMediaIO(), **(video_io_kwargs or {}))
    video: tuple[npt.NDArray[np.uint8], dict[str, Any]] = (
        _connector(connector).fetch_video(video_url, video_io).decode()
    )
    return video


def fetch_audio(
    audio_url: str,
    audio_io_kwargs: Mapping[str, Any] | None = None,
    *,
    connector: MediaConnector | None = None,
) -> tuple[npt.NDArray[np.float32], float]:
    """The decoded ``(samples, sample_rate)`` at ``audio_url`` (kwargs go to ``AudioMediaIO``)."""
    from mediaref.media.audio import AudioMediaIO

    audio_io = AudioMediaIO(**(audio_io_kwargs or {}))
    audio: tuple[npt.NDArray[np.float32], float] = (
        _connector(connector).fetch_audio(audio_url, audio_io).decode()
    )
    return audio


__all__ = ["fetch_audio", "fetch_image", "fetch_video"]
