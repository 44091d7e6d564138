"""Generated audio clips for the audio decoder tests: sines of known frequency and amplitude,
encoded with soundfile or PyAV, and the measurements the tests compare them by.

Samples follow the decoder's convention: (n,) for mono, (channels, n) for more channels.
"""

from __future__ import annotations

import io
from typing import NamedTuple

import av
import numpy as np
import numpy.typing as npt
import soundfile as sf  # type: ignore[import-untyped]

FloatArray = npt.NDArray[np.float32]


class Tones(NamedTuple):
    """One sine per channel. Distinct per-channel frequencies make a channel swap detectable."""

    freqs_hz: tuple[float, ...]
    amplitudes: tuple[float, ...]

    @property
    def channels(self) -> int:
        return len(self.freqs_hz)


def sine(tones: Tones, sample_rate: int, seconds: float) -> FloatArray:
    assert len(tones.freqs_hz) == len(tones.amplitudes)
    t = np.arange(round(sample_rate * seconds)) / sample_rate
    channels = [a * np.sin(2 * np.pi * f * t) for f, a in zip(tones.freqs_hz, tones.amplitudes)]
    samples = np.stack(channels).astype(np.float32)
    return samples[0] if len(channels) == 1 else samples


def encode_soundfile(samples: FloatArray, sample_rate: int, fmt: str, subtype: str) -> bytes:
    buffer = io.BytesIO()
    frames_first = samples if samples.ndim == 1 else samples.T  # soundfile wants (frames, ch)
    sf.write(buffer, frames_first, sample_rate, format=fmt, subtype=subtype)
    return buffer.getvalue()


def encode_pyav(
    samples: FloatArray,
    sample_rate: int,
    container_format: str,
    codec: str,
    *,
    title: str | None = None,
) -> bytes:
    """Encode with FFmpeg through PyAV (e.g. AAC in "mp4"/"adts", libopus in "webm")."""
    planar = samples[None, :] if samples.ndim == 1 else samples
    layout = {1: "mono", 2: "stereo"}[planar.shape[0]]
    buffer = io.BytesIO()
    with av.open(buffer, "w", format=container_format) as container:
        if title is not None:
            container.metadata["title"] = title
        stream = container.add_stream(codec, rate=sample_rate)
        assert isinstance(stream, av.AudioStream)
        stream.layout = layout
        frame = av.AudioFrame.from_ndarray(
            np.ascontiguousarray(planar, dtype=np.float32), format="fltp", layout=layout
        )
        frame.sample_rate = sample_rate
        for packet in stream.encode(frame):
            container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return buffer.getvalue()


class _PipeSink(io.RawIOBase):
    """A write-only, unseekable sink: muxers cannot go back to patch the header."""

    def __init__(self) -> None:
        self.data = bytearray()

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def write(self, chunk: bytes) -> int:  # type: ignore[override]
        self.data += bytes(chunk)
        return len(chunk)


def encode_open_ended_flac(samples: FloatArray, sample_rate: int) -> bytes:
    """A mono FLAC written as if to a pipe: STREAMINFO's total sample count stays 0 (unknown)."""
    sink = _PipeSink()
    with av.open(sink, "w", format="flac") as container:
        stream = container.add_stream("flac", rate=sample_rate)
        assert isinstance(stream, av.AudioStream)
        stream.layout = "mono"
        stream.format = "s16"
        pcm = np.round(samples[None, :] * 32767).astype(np.int16)
        frame = av.AudioFrame.from_ndarray(pcm, format="s16", layout="mono")
        frame.sample_rate = sample_rate
        for packet in stream.encode(frame):
            container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    data = bytes(sink.data)
    assert int.from_bytes(data[8 + 13 : 8 + 18], "big") & ((1 << 36) - 1) == 0
    return data


def encode_video_only_mp4() -> bytes:
    """A tiny MP4 with one video stream and no audio."""
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="mp4") as container:
        stream = container.add_stream("mpeg4", rate=10)
        assert isinstance(stream, av.VideoStream)
        stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv420p"
        for index in range(3):
            image = np.full((32, 32, 3), index * 60, dtype=np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return buffer.getvalue()


def dominant_frequency_hz(channel: FloatArray, sample_rate: float) -> float:
    spectrum = np.abs(np.fft.rfft(channel * np.hanning(len(channel))))
    return float(np.fft.rfftfreq(len(channel), 1 / sample_rate)[np.argmax(spectrum)])


def rms(channel: FloatArray) -> float:
    return float(np.sqrt(np.mean(np.square(channel, dtype=np.float64))))
