"""The one way mediaref opens a payload with PyAV: a per-modality allow-list of demuxers, no I/O.

FFmpeg is a media *framework*, not just a decoder: some of its demuxers read further files or
URLs named inside the payload. ``ffconcat version 1.0 / file uploads/victim.wav`` makes the
``concat`` demuxer read a file relative to the server's working directory, an ``#EXTM3U``
playlist makes ``hls`` fetch its segments, ``image2`` expands a file-name pattern, and ``lavfi``,
``sdp``/``rtp``/``rtsp`` reach much further. Two FFmpeg format-context options close this:

``format_whitelist``
    checked after the payload is probed and *before* the chosen demuxer reads its header, so a
    demuxer off the modality's list never runs. It names demuxers by FFmpeg's input-format
    names (``av.ContainerFormat(name).is_input``); a list entry matches any part of a
    comma-joined name, so ``mov`` admits ``mov,mp4,m4a,3gp,3g2,mj2``.
``protocol_whitelist``
    the payload reaches FFmpeg through a Python file object, which needs no protocol, so a list
    naming no real protocol refuses every nested open (``file:``, ``subfile:``, ``http:``, ...)
    that an admitted demuxer might still attempt (an MP4 ``dref``, say).

:func:`open_input` is the only call of ``av.open`` in the package (a test walks ``src/`` for
others). FFmpeg reports a refused format as "Invalid argument" at open; that becomes
:class:`UnsupportedContainerError`, which callers map to their "Failed to decode ..." error like
any other unreadable payload.

Opening also allocates: FFmpeg's MP4 demuxer indexes every sample the file declares, and a few
bytes can declare millions (:mod:`mediaref.media._pyav_mp4_index`). That cost is charged to the
request's decoded-bytes budget before the demuxer sees the payload.
"""

from __future__ import annotations

import io
from typing import Literal

import av
from av.container import InputContainer

from mediaref.exceptions import MediaTooLargeError
from mediaref.media._pyav_mp4_index import ContainerIndexError, declared_index_bytes
from mediaref.media.decode_budget import (
    charge_decoded_bytes,
    request_decode_limit_bytes,
)

Modality = Literal["audio", "video"]

# Containers a video payload may be in. Each of these demuxers reads only the bytes it is given.
VIDEO_DEMUXERS: tuple[str, ...] = (
    "mov",  # mov,mp4,m4a,3gp,3g2,mj2
    "matroska",  # matroska,webm
    "avi",
    "mpegts",
    "flv",
    "mpeg",  # MPEG program streams (.mpg, .vob)
    "ogg",
    "asf",  # .wmv
    "ivf",  # raw VP8/VP9/AV1 in their test container
    "gif",  # animated GIFs are sent as videos
)

# Audio files, plus the video containers above: an audio track is also read out of a video
# payload (``use_audio_in_video``), and soundfile cannot read any of them.
AUDIO_DEMUXERS: tuple[str, ...] = (
    "wav",
    "w64",
    "flac",
    "ogg",  # Vorbis, Opus, FLAC in Ogg
    "mp3",
    "aac",  # ADTS
    "aiff",
    "caf",
    *(name for name in VIDEO_DEMUXERS if name != "ogg"),
)

_DEMUXERS: dict[Modality, tuple[str, ...]] = {"audio": AUDIO_DEMUXERS, "video": VIDEO_DEMUXERS}

# No protocol is named "none": every nested open is refused.
_NO_PROTOCOL = "none"


def _check_index_bytes(decoded_bytes: int) -> None:
    """Refuse, as a lone item would be, an index over the per-request limit (with its own
    message: the budget's would call it decoded media)."""
    limit = request_decode_limit_bytes()
    if limit is not None and decoded_bytes > limit:
        raise MediaTooLargeError(
            f"the container declares a sample index of {decoded_bytes} bytes, over the "
            f"{limit}-byte limit (VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES)"
        )


class UnsupportedContainerError(ValueError):
    """The payload is not in a container format the modality admits, or its header is invalid."""


def open_input(data: bytes, modality: Modality, *, charge_index: bool = True) -> InputContainer:
    """Open ``data`` for reading as a container of ``modality``; close it when done (``with``).

    ``charge_index``: charge the sample index the demuxer will build to the request's budget
    (it is always checked against the per-item limit). A decode that opens the same payload
    again passes False for the later opens.

    Raises :class:`UnsupportedContainerError` for a format off the modality's list (FFmpeg does
    not say which it refused, so a damaged header reads the same), ``MediaTooLargeError`` for a
    sample index over the budget, and ``av.FFmpegError`` for other unreadable bytes.
    """
    try:
        index_bytes = declared_index_bytes(data)
    except ContainerIndexError as exc:
        raise UnsupportedContainerError(str(exc)) from exc
    _check_index_bytes(index_bytes)
    if charge_index:
        charge_decoded_bytes(index_bytes)
    options = {
        "format_whitelist": ",".join(_DEMUXERS[modality]),
        "protocol_whitelist": _NO_PROTOCOL,
    }
    try:
        # metadata_errors="ignore": a mis-encoded tag must not fail a decode of valid media.
        return av.open(  # the package's one av.open
            io.BytesIO(data), mode="r", container_options=options, metadata_errors="ignore"
        )
    except av.ArgumentError as exc:
        raise UnsupportedContainerError(
            f"not a supported {modality} container, or a damaged one ({exc.strerror})"
        ) from exc


__all__ = [
    "AUDIO_DEMUXERS",
    "VIDEO_DEMUXERS",
    "Modality",
    "UnsupportedContainerError",
    "open_input",
]
