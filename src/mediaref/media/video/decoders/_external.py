"""What a codec outside PyAV (OpenCV, torchcodec) needs before the FFmpeg inside it runs.

- Its optional package, imported by name when the codec is used: through ``importlib`` rather
  than an ``import`` statement, because the package is no dependency of mediaref
  (pyproject.toml declares exactly what ``src/`` imports), and a deployment that never selects
  the codec never loads it.
- The payload, admitted through the video allow-list of demuxers first, as the PyAV codec would
  open it: the other FFmpeg has every demuxer enabled.
"""

from __future__ import annotations

import importlib
from types import ModuleType

import av

from mediaref.media._pyav_open import UnsupportedContainerError, open_input
from mediaref.media.video.decoders.errors import VideoCodecUnavailableError


def import_optional(module: str, *, codec: str, install: str) -> ModuleType:
    """``module``, or :class:`VideoCodecUnavailableError` saying what to install."""
    try:
        return importlib.import_module(module)
    except (ImportError, RuntimeError) as exc:  # torchcodec raises RuntimeError without FFmpeg
        raise VideoCodecUnavailableError(
            f"the {codec!r} video codec needs {install} ({module} could not be imported: "
            f"{exc}); or use the 'pyav' codec, mediaref's default"
        ) from exc


def optional_unavailable_reason(module: str, *, codec: str, install: str) -> str | None:
    try:
        import_optional(module, codec=codec, install=install)
    except VideoCodecUnavailableError as exc:
        return str(exc)
    return None


def admit_container(data: bytes) -> None:
    """Refuse a payload off the video allow-list of demuxers, as the PyAV codec would.

    OpenCV and torchcodec hand the bytes to their own FFmpeg, with every demuxer enabled: an
    HLS playlist or a concat script would make it read other files or URLs. Opening the payload
    here with the allow-list (and no protocols) first costs a header parse, and charges the
    sample index the other FFmpeg is about to build to the request's budget.
    """
    try:
        with open_input(data, "video"):
            pass
    except av.FFmpegError as exc:
        raise ValueError(f"Failed to decode video: {exc.strerror or exc}") from exc
    except UnsupportedContainerError as exc:
        raise ValueError(f"Failed to decode video: {exc}") from exc


__all__ = ["admit_container", "import_optional", "optional_unavailable_reason"]
