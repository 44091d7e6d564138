"""Shared by the benchmark scripts: real-photo media at real sizes, and order-robust timing.

Every payload is made here, offline and seeded: photos ship inside scikit-image, videos pan and zoom
across them, audio is synthesized. Not a test module (pytest only collects ``tests/``).
"""

from __future__ import annotations

import io
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

# Colour photographs scikit-image ships (the grey ones and the synthetic ones are left out).
PHOTO_NAMES: tuple[str, ...] = (
    "astronaut.png",
    "coffee.png",
    "chelsea.png",
    "rocket.jpg",
    "motorcycle_left.png",
    "hubble_deep_field.jpg",
    "retina.jpg",
    "ihc.png",
)

FULL_HD = (1920, 1080)
HD = (1280, 720)


def photo_path(name: str) -> Path:
    import skimage

    # The files live inside the installed package, so nothing is downloaded.
    return Path(skimage.__file__).parent / "data" / name


def load_photo(name: str) -> Image.Image:
    with Image.open(photo_path(name)) as image:
        rgb: Image.Image = image.convert("RGB")
        return rgb


def upscale(photo: Image.Image, size: tuple[int, int] = FULL_HD) -> Image.Image:
    return photo.resize(size, Image.Resampling.LANCZOS)


def photo_variant(
    photo: Image.Image, rng: np.random.Generator, size: tuple[int, int] = FULL_HD
) -> Image.Image:
    """A distinct image from ``photo``: a random crop (>= 60% per side), maybe mirrored, resized."""
    width, height = photo.size
    crop_w = int(width * rng.uniform(0.6, 1.0))
    crop_h = int(height * rng.uniform(0.6, 1.0))
    left = int(rng.integers(0, width - crop_w + 1))
    top = int(rng.integers(0, height - crop_h + 1))
    image = photo.crop((left, top, left + crop_w, top + crop_h))
    if rng.random() < 0.5:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return image.resize(size, Image.Resampling.LANCZOS)


def encode_image(image: Image.Image, fmt: str, quality: int = 90) -> bytes:
    options: dict[str, Any] = {"quality": quality} if fmt in ("JPEG", "WEBP") else {}
    with io.BytesIO() as buffer:
        image.save(buffer, format=fmt, **options)
        return buffer.getvalue()


def encode_pan_clip(
    photo: Image.Image,
    *,
    seconds: float,
    size: tuple[int, int] = HD,
    fps: int = 30,
    keyframe_interval: int | None = None,
    phase: float = 0.0,
) -> bytes:
    """An H.264 MP4 (x264 veryfast, crf 23) of a window panning across ``photo``.

    The photo is upscaled to twice the frame size and the window travels along a smooth curve,
    so every frame is new, real-photo content. ``keyframe_interval`` None keeps x264's default
    GOP; ``phase`` shifts the path, so clips made from one photo differ.
    """
    import av

    out_w, out_h = size
    source = np.asarray(photo.resize((out_w * 2, out_h * 2), Image.Resampling.LANCZOS))
    span_x, span_y = source.shape[1] - out_w, source.shape[0] - out_h
    frames = max(int(seconds * fps), 1)
    options = {"preset": "veryfast", "crf": "23"}
    if keyframe_interval is not None:
        options["x264-params"] = f"keyint={keyframe_interval}:min-keyint={keyframe_interval}"
    with io.BytesIO() as buffer:
        with av.open(buffer, "w", format="mp4") as container:
            stream = container.add_stream("libx264", rate=Fraction(fps), options=options)
            stream.width, stream.height, stream.pix_fmt = out_w, out_h, "yuv420p"
            for i in range(frames):
                t = i / max(frames - 1, 1) + phase
                x = int(span_x * (0.5 + 0.5 * math.sin(math.pi * t)))
                y = int(span_y * (0.5 - 0.5 * math.cos(math.pi * t)))
                window = np.ascontiguousarray(source[y : y + out_h, x : x + out_w])
                frame = av.VideoFrame.from_ndarray(window, format="rgb24")
                for packet in stream.encode(frame):
                    container.mux(packet)
            for packet in stream.encode(None):
                container.mux(packet)
        return buffer.getvalue()


def speechlike_audio(seconds: float, sample_rate: int, channels: int, seed: int = 0) -> np.ndarray:
    """Float32 (n, channels): a gliding harmonic voice with syllable-rate bursts, plus noise.

    Not silence or a pure tone, so lossy codecs have real work to do.
    """
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * sample_rate)) / sample_rate
    pitch = 140 + 40 * np.sin(2 * np.pi * 0.3 * t) + 15 * np.sin(2 * np.pi * 2.1 * t)
    phase = 2 * np.pi * np.cumsum(pitch) / sample_rate
    voice = sum(np.sin(k * phase) / k for k in range(1, 9))
    envelope = np.clip(np.sin(2 * np.pi * 4.0 * t + rng.uniform(0, 2 * np.pi)), 0, None) ** 0.5
    mono = 0.25 * voice * envelope + 0.01 * rng.standard_normal(t.size)
    stereo = [mono, np.roll(mono, 37)][:channels]  # a small inter-channel delay
    return np.stack(stereo, axis=1).astype(np.float32)


def encode_audio(samples: np.ndarray, sample_rate: int, fmt: str) -> bytes:
    import soundfile as sf

    subtype = {"WAV": "PCM_16", "MP3": "MPEG_LAYER_III"}[fmt]
    with io.BytesIO() as buffer:
        sf.write(buffer, samples, sample_rate, format=fmt, subtype=subtype)
        return buffer.getvalue()


# -- timing ------------------------------------------------------------------------------------


@dataclass
class Samples:
    """Per-call seconds of one measured operation."""

    seconds: list[float] = field(default_factory=list)

    def add(self, value: float) -> None:
        self.seconds.append(value)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds) if self.seconds else math.nan

    @property
    def p90(self) -> float:
        return float(np.percentile(self.seconds, 90)) if self.seconds else math.nan

    def __len__(self) -> int:
        return len(self.seconds)


def time_call(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def fmt_seconds(seconds: float) -> str:
    """A duration with a unit chosen for it: 12.3us, 4.56ms, 1.23s."""
    if math.isnan(seconds):
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f}us"
    if seconds < 1.0:
        return f"{seconds * 1e3:.2f}ms"
    return f"{seconds:.2f}s"


def fmt_bytes(size: int) -> str:
    return f"{size / 1024:.0f}KiB" if size < 1 << 20 else f"{size / (1 << 20):.1f}MiB"


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Left-align the first column, right-align the rest."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (cell.rjust(width) for cell, width in zip(cells[1:], widths[1:], strict=True))
        return "  ".join([first, *rest])

    print(line(headers))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print(line(row))
