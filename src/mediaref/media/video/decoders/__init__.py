"""Video codecs: what opens a payload and decodes the frames a loader's sampling rule picks.

A codec is a function ``decode_<name>(loader_cls, data, target, sampling_kwargs, **options)``
returning ``(frames, source, frame_idx, valid)``: the decoded frames, the container's
:class:`VideoSourceMetadata` (after the loader's ``_prepare_source``), the indices the rule
asked for, and those actually decoded. :func:`decode_video` picks one by name and imports only
that one, so an optional package is needed only by the deployments that use it.

========================  ==========================================================  =========
codec                     needs                                                       options
========================  ==========================================================  =========
``pyav`` (mediaref's)     PyAV (a dependency): keyframe seeks, exact frame counts     none
``opencv`` (vLLM's)       ``cv2`` (opencv-python[-headless] >= 4.11, not a dependency)  none
``torchcodec``            ``torchcodec`` (not a dependency)                           ``num_ffmpeg_threads``, ``seek_mode``, ``device``
``pynvvideocodec``,       NVIDIA GPUs: not part of mediaref (docs/compat.md); their   vLLM's, so
``deepstream``            options are still recognised, and refused at decode         they resolve alike
========================  ==========================================================  =========

Every codec reads the payload only after it passes the video allow-list of demuxers
(:mod:`mediaref.media._pyav_open`): FFmpeg inside OpenCV or torchcodec would otherwise follow
playlists and concat scripts to other files and URLs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from mediaref.media.video.decoders.base import (
    PYNVVIDEOCODEC_DEFAULT_HW_DECODERS,
    PYNVVIDEOCODEC_VIDEO_BACKEND,
    VideoSourceMetadata,
    VideoTargetMetadata,
    check_frame_pixel_limit,
)
from mediaref.media.video.decoders.errors import (
    UnsupportedCodecOptionError,
    VideoCodecUnavailableError,
)

VideoDecoderBackend = Literal["pyav", "opencv", "torchcodec", "pynvvideocodec", "deepstream"]
"""The codec names: vLLM's four, and mediaref's own ``pyav``."""

_GPU_CODECS = frozenset({PYNVVIDEOCODEC_VIDEO_BACKEND, "deepstream"})

# codec -> its options and their defaults; any other codec's option given to one is refused.
_CODEC_OPTIONS: dict[str, dict[str, Any]] = {
    "pyav": {},
    "opencv": {},
    "torchcodec": {"num_ffmpeg_threads": 0, "seek_mode": "exact", "device": "cpu"},
    PYNVVIDEOCODEC_VIDEO_BACKEND: {
        "hw_decoders": PYNVVIDEOCODEC_DEFAULT_HW_DECODERS,
        "max_width": None,
        "max_height": None,
    },
    "deepstream": {"pool_size": None, "timeout_sec": 120.0},
}

DecodedVideo = tuple[Any, VideoSourceMetadata, list[int], list[int]]
"""What a codec returns: (frames, source, frame_idx, valid)."""


def _codec_options(backend: str) -> dict[str, Any]:
    options = _CODEC_OPTIONS.get(backend)
    if options is None:
        valid = ", ".join(repr(name) for name in _CODEC_OPTIONS)
        raise ValueError(f"Unknown video codec backend {backend!r}; valid options: {valid}.")
    return options


def incompatible_backend_options(old_backend: str | None, new_backend: str) -> set[str]:
    """The option names ``old_backend`` takes and ``new_backend`` does not (unknown: none)."""
    old = _CODEC_OPTIONS.get(old_backend or "", {})
    new = _CODEC_OPTIONS.get(new_backend, {})
    return set(old) - set(new)


def resolve_video_backend_kwargs(
    backend: str, kwargs: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split ``kwargs`` into the sampling rule's and the codec's (defaults filled in).

    ValueError for an unknown codec, and for an option that belongs to another codec (it would
    otherwise reach the sampling rule and be silently ignored).
    """
    defaults = _codec_options(backend)
    every_codec_option = {name for options in _CODEC_OPTIONS.values() for name in options}
    misplaced = (set(kwargs) & every_codec_option) - set(defaults)
    if misplaced:
        raise ValueError(
            f"{', '.join(sorted(misplaced))} is not supported by the {backend!r} backend"
        )
    sampling = {k: v for k, v in kwargs.items() if k not in defaults}
    codec = {name: kwargs.get(name, default) for name, default in defaults.items()}
    return sampling, codec


def video_codec_unavailable_reason(backend: str) -> str | None:
    """Why ``backend`` cannot decode here (a GPU codec, a package not installed), or None."""
    _codec_options(backend)
    if backend in _GPU_CODECS:
        return (
            f"the {backend!r} codec decodes on NVIDIA GPUs (NVDEC) and is not part of mediaref; "
            "use 'pyav' (the default), 'opencv' or 'torchcodec'"
        )
    if backend == "opencv":
        from mediaref.media.video.decoders.opencv import opencv_unavailable_reason

        return opencv_unavailable_reason()
    if backend == "torchcodec":
        from mediaref.media.video.decoders.torchcodec import torchcodec_unavailable_reason

        return torchcodec_unavailable_reason()
    return None


def check_video_codec(backend: str) -> None:
    """Raise :class:`VideoCodecUnavailableError` unless ``backend`` can decode here."""
    reason = video_codec_unavailable_reason(backend)
    if reason is not None:
        raise VideoCodecUnavailableError(reason)


def _codec(backend: str) -> Callable[..., DecodedVideo]:
    # Imported on use: each codec module imports its package (cv2, torchcodec) only when called.
    if backend == "pyav":
        from mediaref.media.video.decoders.pyav import decode_pyav

        return decode_pyav
    if backend == "opencv":
        from mediaref.media.video.decoders.opencv import decode_opencv

        return decode_opencv
    if backend == "torchcodec":
        from mediaref.media.video.decoders.torchcodec import decode_torchcodec

        return decode_torchcodec
    check_video_codec(backend)  # a GPU codec: raises
    raise AssertionError(f"codec {backend!r} has no decoder")


def decode_video(
    backend: str,
    loader_cls: Any,
    data: bytes,
    target: VideoTargetMetadata,
    sampling_kwargs: dict[str, Any],
    backend_kwargs: dict[str, Any],
    *,
    frame_recovery: bool,
) -> DecodedVideo:
    """Decode the frames ``loader_cls`` samples from ``data`` with the codec ``backend``.

    ``frame_recovery`` (a lost frame is replaced by the next one that decodes) is an option of
    the OpenCV codec; PyAV always recovers this way, and the other codecs refuse it with an
    error that is both vLLM's ``AssertionError`` and a ``ValueError``.
    """
    _codec_options(backend)
    if frame_recovery and backend not in ("opencv", "pyav"):
        raise UnsupportedCodecOptionError(
            f"frame_recovery is not supported by the {backend!r} backend"
        )
    options = dict(backend_kwargs)
    if backend == "opencv":
        options["frame_recovery"] = frame_recovery
    return _codec(backend)(loader_cls, data, target, sampling_kwargs, **options)


__all__ = [
    "PYNVVIDEOCODEC_DEFAULT_HW_DECODERS",
    "PYNVVIDEOCODEC_VIDEO_BACKEND",
    "DecodedVideo",
    "UnsupportedCodecOptionError",
    "VideoCodecUnavailableError",
    "VideoDecoderBackend",
    "VideoSourceMetadata",
    "VideoTargetMetadata",
    "check_frame_pixel_limit",
    "check_video_codec",
    "decode_video",
    "incompatible_backend_options",
    "resolve_video_backend_kwargs",
    "video_codec_unavailable_reason",
]
