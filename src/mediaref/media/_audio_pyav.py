"""The PyAV (FFmpeg) audio backend: the fallback for what libsndfile cannot read, such as AAC in
MP4/M4A or ADTS, Opus in WebM, and the audio track of a video container.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator

import av
import numpy as np
import numpy.typing as npt

from mediaref.media._audio_caps import duration_exceeded, max_frames

# FFmpegError covers libav's failures; ValueError our own "no audio" findings (and metadata that
# will not decode); OSError/EOFError the file-like adapter.
PYAV_ERRORS: tuple[type[Exception], ...] = (av.FFmpegError, ValueError, OSError, EOFError)


def describe_pyav_error(exc: BaseException) -> str:
    # FFmpegError's str() carries "[Errno 1094995529] ...: '<none>'"; strerror is the part
    # worth showing a client.
    reason = getattr(exc, "strerror", None)
    return str(reason) if reason else str(exc)


def decode_with_pyav(
    data: bytes, max_duration_s: float | None
) -> tuple[npt.NDArray[np.float32], float]:
    """Decode the best audio stream of ``data``: float32 samples at its native rate.

    Shapes and the duration cap follow :func:`collect_frames`. Raises one of :data:`PYAV_ERRORS`
    when the bytes hold no decodable audio.
    """
    # metadata_errors="ignore": a mis-encoded tag must not fail a decode of valid audio.
    with av.open(io.BytesIO(data), mode="r", metadata_errors="ignore") as container:
        stream = container.streams.best("audio")
        if not isinstance(stream, av.AudioStream):
            raise ValueError("no audio stream in the container")
        return collect_frames(container.decode(stream), max_duration_s)


def collect_frames(
    frames: Iterable[av.AudioFrame], max_duration_s: float | None
) -> tuple[npt.NDArray[np.float32], float]:
    """Gather decoded frames into (n,) mono or (channels, n) float32 samples, and the rate.

    Frames are converted to planar float (``fltp``), so packed and integer sample formats land in
    one shape. The cap is checked after every frame: iteration stops as soon as the decoded length
    passes it, so a container whose header understates (or omits) its length cannot make us decode
    more than the cap allows. A stream whose layout or rate changes midway fails with ValueError
    rather than being silently mixed or stretched.
    """
    planes: list[npt.NDArray[np.float32]] = []
    total = 0
    sample_rate: int | None = None
    channels = 0
    cap: int | None = None
    for converted in _as_planar_float(frames):
        if sample_rate is None:
            sample_rate, channels = converted.sample_rate, converted.layout.nb_channels
            cap = max_frames(max_duration_s, sample_rate)
        elif converted.sample_rate != sample_rate or converted.layout.nb_channels != channels:
            raise ValueError("the audio stream changes its sample rate or channel layout midway")
        planes.append(np.asarray(converted.to_ndarray(), dtype=np.float32))  # fltp: no copy
        total += converted.samples
        if cap is not None and total > cap:
            assert max_duration_s is not None
            raise duration_exceeded(max_duration_s, total / sample_rate, decoded=True)
    if sample_rate is None:
        raise ValueError("the audio stream decoded to no frames")
    samples = planes[0] if len(planes) == 1 else np.concatenate(planes, axis=1)
    return (samples[0] if channels == 1 else samples), float(sample_rate)


def _as_planar_float(frames: Iterable[av.AudioFrame]) -> Iterator[av.AudioFrame]:
    # With no layout or rate given, the resampler adopts the first frame's; when that frame is
    # already fltp it passes frames through untouched (AAC, MP3 and Vorbis decode to fltp).
    resampler = av.AudioResampler(format="fltp")
    for frame in frames:
        yield from resampler.resample(frame)
    # Flushing returns what a converting graph still buffers (nothing for a passthrough).
    yield from resampler.resample(None)


__all__ = ["PYAV_ERRORS", "collect_frames", "decode_with_pyav", "describe_pyav_error"]
