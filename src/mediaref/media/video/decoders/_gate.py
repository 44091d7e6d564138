"""The check every non-PyAV codec's payload passes before FFmpeg inside that codec reads it."""

from __future__ import annotations

import av

from mediaref.media._pyav_open import UnsupportedContainerError, open_input


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


__all__ = ["admit_container"]
