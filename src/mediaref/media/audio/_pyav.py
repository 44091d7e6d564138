"""The PyAV (FFmpeg) audio backend: the fallback for what libsndfile cannot read, such as AAC in
MP4/M4A or ADTS, Opus in WebM, and the audio track of a video container.

The payload is opened through :func:`~mediaref.media._pyav_open.open_input` with the audio
allow-list of demuxers, so a payload that names other files or URLs (``ffconcat``, HLS
playlists, image sequences) is refused before its demuxer runs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

import av
import numpy as np
import numpy.typing as npt

from mediaref.media._pyav_open import open_input
from mediaref.media.audio._caps import AudioLimits, check_stream_shape
from mediaref.media.audio._pcm import DecodeCharge, PcmBuffer

# FFmpegError covers libav's failures; ValueError our own "no audio" findings (and metadata that
# will not decode); OSError/EOFError the file-like adapter.
PYAV_ERRORS: tuple[type[Exception], ...] = (av.FFmpegError, ValueError, OSError, EOFError)


def describe_pyav_error(exc: BaseException) -> str:
    # FFmpegError's str() carries "[Errno 1094995529] ...: '<none>'"; strerror is the part
    # worth showing a client.
    reason = getattr(exc, "strerror", None)
    return str(reason) if reason else str(exc)


def decode_with_pyav(
    data: bytes, limits: AudioLimits, charge: DecodeCharge | None = None
) -> tuple[npt.NDArray[np.float32], float]:
    """Decode the best audio stream of ``data``: float32 samples at its native rate.

    Shapes and the caps follow :func:`collect_frames`; a duration the container declares over
    the caps is refused before decoding. Raises one of :data:`PYAV_ERRORS` when the bytes hold no
    decodable audio.
    """
    with open_input(data, "audio") as container:
        stream = container.streams.best("audio")
        if not isinstance(stream, av.AudioStream):
            raise ValueError("no audio stream in the container")
        expected_frames = _declared_frames(container, stream, limits)
        return collect_frames(container.decode(stream), limits, expected_frames, charge)


def _declared_frames(
    container: av.container.InputContainer, stream: av.AudioStream, limits: AudioLimits
) -> int | None:
    """The frame count the container declares, after refusing one over the caps; None if unknown.

    Container durations can be estimates (from the bit rate, for an MP3 without a Xing header),
    so the count only sizes the first allocation; the decode is capped on what it produces.
    """
    sample_rate, channels = stream.rate, stream.channels
    try:
        check_stream_shape(sample_rate, channels)
    except ValueError:
        return None  # the decoded frames carry the real shape; collect_frames checks that
    seconds: float | None = None
    if stream.duration and stream.time_base:
        seconds = float(stream.duration * stream.time_base)
    elif container.duration:
        seconds = container.duration / av.time_base
    if seconds is None or not math.isfinite(seconds) or seconds <= 0:
        return None
    frames = seconds * sample_rate
    limits.check_declared(frames, sample_rate, channels)
    return math.ceil(frames)


def collect_frames(
    frames: Iterable[av.AudioFrame],
    limits: AudioLimits,
    expected_frames: int | None = None,
    charge: DecodeCharge | None = None,
) -> tuple[npt.NDArray[np.float32], float]:
    """Gather decoded frames into (n,) mono or (channels, n) float32 samples, and the rate.

    Frames are converted to packed float (``flt``), so planar and integer sample formats land in
    one shape, and written into one :class:`PcmBuffer`. Packed, not planar: PyAV 18 finds a
    planar frame's planes by walking ``extended_data`` to a NULL entry, which for exactly 8
    channels reads past FFmpeg's 8 data pointers and crashes the process (a 7.1 AAC track, or
    any payload that says 8 channels); a packed frame has one plane. The caps are checked before every frame
    is kept: a container whose header understates (or omits) its length cannot make us decode
    more than they allow. A stream whose layout or rate changes midway fails with ValueError
    rather than being silently mixed or stretched.
    """
    pcm: PcmBuffer | None = None
    for converted in _as_packed_float(frames):
        if pcm is None:
            pcm = PcmBuffer(
                converted.layout.nb_channels,
                converted.sample_rate,
                limits,
                expected_frames=expected_frames,
                slack_frames=0 if expected_frames is None else _estimate_slack(expected_frames),
                charge=charge,
            )
        # (1, samples x channels), interleaved: a frame of (samples, channels).
        interleaved = np.asarray(converted.to_ndarray(), dtype=np.float32)  # flt: no copy
        pcm.append_interleaved(interleaved.reshape(-1, pcm.channels))
    if pcm is None:
        raise ValueError("the audio stream decoded to no frames")
    return pcm.result(), float(pcm.sample_rate)


def _estimate_slack(expected_frames: int) -> int:
    # A container's duration leaves out the encoder's priming and padding (AAC: a few hundred
    # samples over its mdhd duration), and may be an estimate from the bit rate.
    return 4096 + expected_frames // 64


def _as_packed_float(frames: Iterable[av.AudioFrame]) -> Iterator[av.AudioFrame]:
    # With no layout or rate given, the resampler adopts the first frame's, and refuses a later
    # frame that differs (ValueError); a frame already in flt passes through untouched.
    resampler = av.AudioResampler(format="flt")
    first: tuple[int, int] | None = None
    for frame in frames:
        shape = (frame.sample_rate, frame.layout.nb_channels)
        if first is None:
            first = shape
        elif shape != first:
            raise ValueError(
                "the audio stream changes its sample rate or channel count midway "
                f"({first[0]} Hz x {first[1]} to {shape[0]} Hz x {shape[1]})"
            )
        yield from resampler.resample(frame)
    # Flushing returns what a converting graph still buffers (nothing for a passthrough).
    yield from resampler.resample(None)


__all__ = ["PYAV_ERRORS", "collect_frames", "decode_with_pyav", "describe_pyav_error"]
