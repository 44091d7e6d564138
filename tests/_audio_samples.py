"""Generated audio clips for the audio decoder tests: sines of known frequency and amplitude,
encoded with soundfile or PyAV, and the measurements the tests compare them by.

Samples follow the decoder's convention: (n,) for mono, (channels, n) for more channels.
"""

from __future__ import annotations

import io
import struct
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
    channels = [
        a * np.sin(2 * np.pi * f * t) for f, a in zip(tones.freqs_hz, tones.amplitudes, strict=True)
    ]
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
    layout = {1: "mono", 2: "stereo", 6: "5.1", 8: "7.1"}[planar.shape[0]]
    buffer = io.BytesIO()
    with av.open(buffer, "w", format=container_format) as container:
        if title is not None:
            container.metadata["title"] = title
        stream = container.add_stream(codec, rate=sample_rate)
        assert isinstance(stream, av.AudioStream)
        stream.layout = layout
        # Packed, which the encoder converts itself: PyAV 18's from_ndarray crashes on a planar
        # frame of exactly 8 channels (it walks one data pointer too far).
        interleaved = np.ascontiguousarray(planar.T, dtype=np.float32).reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(interleaved, format="flt", layout=layout)
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


def with_declared_flac_frames(data: bytes, total_frames: int) -> bytes:
    """``data`` (a FLAC file) with STREAMINFO's 36-bit total sample count set to ``total_frames``.

    0 means "unknown", as a FLAC written to a pipe says. The frames themselves are unchanged, so
    the header may now claim far more (or less) audio than the file holds.
    """
    assert data[:4] == b"fLaC" and data[4] & 0x7F == 0  # STREAMINFO comes first
    start = 8 + 13  # its sample count: the low 4 bits of byte 13, then bytes 14..17
    field = int.from_bytes(data[start : start + 5], "big")
    field = (field & ~((1 << 36) - 1)) | total_frames
    return data[:start] + field.to_bytes(5, "big") + data[start + 5 :]


def encode_silence(
    sample_rate: int, channels: int, frames: int, fmt: str = "FLAC", subtype: str = "PCM_16"
) -> bytes:
    """Silence, which lossless codecs store in almost no bytes: the cheapest decompression bomb."""
    buffer = io.BytesIO()
    sf.write(
        buffer, np.zeros((frames, channels), np.float32), sample_rate, format=fmt, subtype=subtype
    )
    return buffer.getvalue()


def _ogg_crc(page: bytes) -> int:
    crc = 0
    for byte in page:
        crc ^= byte << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7) if crc & 0x80000000 else crc << 1
            crc &= 0xFFFFFFFF
    return crc


def with_opus_pre_skip(data: bytes, pre_skip: int) -> bytes:
    """An Ogg Opus file whose OpusHead asks the decoder to drop ``pre_skip`` leading samples.

    The header sits alone on the first Ogg page, whose checksum is recomputed.
    """
    page = bytearray(data)
    head = page.index(b"OpusHead")
    struct.pack_into("<H", page, head + 10, pre_skip)
    segments = page[26]
    size = 27 + segments + sum(page[27 : 27 + segments])
    struct.pack_into("<I", page, 22, 0)
    struct.pack_into("<I", page, 22, _ogg_crc(bytes(page[:size])))
    return bytes(page)


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
