"""The audio backends by name (vLLM's ``AUDIO_BACKENDS``) and vLLM's ``load_audio*`` helpers.

:func:`decode_audio` is the one dispatcher: :class:`~mediaref.media.audio.AudioMediaIO` decodes
through it, and so do the ``load_audio*`` helpers, which add vLLM's conveniences on top (a path
or a buffer in, optional downmix to mono, resampling to ``sr``).

``"auto"`` (and None) is soundfile, then PyAV when soundfile cannot read the bytes. Unlike
vLLM's, it does not try torchcodec first: torchcodec is not a dependency, and the soundfile and
PyAV backends decode block by block, which is what lets every allocation be charged to the
request's budget before it happens. ``"torchcodec"`` asks for it explicitly.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Literal, get_args

import numpy as np
import numpy.typing as npt

from mediaref.audio import resample_audio_pyav
from mediaref.exceptions import MediaTooLargeError
from mediaref.media.audio import _pyav as audio_pyav
from mediaref.media.audio import _soundfile as audio_soundfile
from mediaref.media.audio._caps import AudioLimits
from mediaref.media.audio._pcm import DecodeCharge
from mediaref.media.audio._torchcodec import decode_with_torchcodec

AudioBackend = Literal["auto", "soundfile", "pyav", "torchcodec"]
AUDIO_BACKENDS: tuple[str, ...] = get_args(AudioBackend)

AudioSamples = tuple[npt.NDArray[np.float32], float]
AudioSource = io.BytesIO | Path | str

_REASON_MAX_CHARS = 200


def check_audio_backend(backend: str | None) -> str:
    """``backend`` as a name of :data:`AUDIO_BACKENDS` (None is ``"auto"``), or ``ValueError``."""
    name = "auto" if backend is None else backend
    if name not in AUDIO_BACKENDS:
        raise ValueError(
            f"Unknown audio backend {backend!r}. Available backends: {list(AUDIO_BACKENDS)}"
        )
    return name


def _shorten(reason: str) -> str:
    reason = " ".join(reason.split())
    if len(reason) <= _REASON_MAX_CHARS:
        return reason
    return reason[: _REASON_MAX_CHARS - 3] + "..."


def _decode_soundfile(data: bytes, limits: AudioLimits, charge: DecodeCharge) -> AudioSamples:
    try:
        return audio_soundfile.decode_with_soundfile(data, limits, charge)
    except MediaTooLargeError:
        raise
    except audio_soundfile.SOUNDFILE_ERRORS as exc:
        reason = audio_soundfile.describe_soundfile_error(exc)
        raise ValueError(f"Failed to decode audio: soundfile: {_shorten(reason)}") from exc


def _decode_pyav(data: bytes, limits: AudioLimits, charge: DecodeCharge) -> AudioSamples:
    try:
        return audio_pyav.decode_with_pyav(data, limits, charge)
    except MediaTooLargeError:
        raise
    except audio_pyav.PYAV_ERRORS as exc:
        reason = audio_pyav.describe_pyav_error(exc)
        raise ValueError(f"Failed to decode audio: pyav: {_shorten(reason)}") from exc


def _decode_auto(data: bytes, limits: AudioLimits, charge: DecodeCharge) -> AudioSamples:
    try:
        return audio_soundfile.decode_with_soundfile(data, limits, charge)
    except MediaTooLargeError:
        raise  # over a cap: a verdict on the audio, not a reason to try another backend
    except audio_soundfile.SOUNDFILE_ERRORS as exc:
        soundfile_reason = audio_soundfile.describe_soundfile_error(exc)
    try:
        # The shared charge: a PyAV retry does not charge the clip twice.
        return audio_pyav.decode_with_pyav(data, limits, charge)
    except MediaTooLargeError:
        raise
    except audio_pyav.PYAV_ERRORS as exc:
        pyav_reason = audio_pyav.describe_pyav_error(exc)
        raise ValueError(
            f"Failed to decode audio: soundfile: {_shorten(soundfile_reason)}; "
            f"pyav: {_shorten(pyav_reason)}"
        ) from exc


def decode_audio(data: bytes, backend: str | None, limits: AudioLimits) -> AudioSamples:
    """``data`` decoded by ``backend``: float32 samples at the native rate, (n,) or (channels, n).

    Raises ``MediaTooLargeError`` over a cap, ``ValueError`` for bytes the backend cannot decode
    (with ``"auto"``: neither soundfile nor PyAV), ``ImportError`` for a torchcodec that cannot
    be used.
    """
    name = check_audio_backend(backend)
    charge = DecodeCharge()
    if name == "soundfile":
        return _decode_soundfile(data, limits, charge)
    if name == "pyav":
        return _decode_pyav(data, limits, charge)
    if name == "torchcodec":
        return decode_with_torchcodec(data, limits, charge)
    return _decode_auto(data, limits, charge)


def _read_source(path: AudioSource) -> bytes:
    if isinstance(path, io.BytesIO):
        return path.getvalue()
    return Path(path).read_bytes()


def load_audio(
    path: AudioSource,
    *,
    sr: float | None = 22050,
    mono: bool = True,
    max_duration_s: float | None = None,
    max_decode_bytes: int | None = None,
    backend: str | None = None,
) -> AudioSamples:
    """The audio at ``path`` (a file path or an in-memory buffer) and its sample rate.

    Decoded by ``backend`` (one of :data:`AUDIO_BACKENDS`; None is ``"auto"``), refused over
    ``max_duration_s`` seconds or ``max_decode_bytes`` bytes of float32 PCM
    (``MediaTooLargeError``, a ``ValueError``), averaged down to one channel when ``mono``, and
    resampled to ``sr`` unless ``sr`` is None (the native rate is kept).
    """
    name = check_audio_backend(backend)
    limits = AudioLimits(max_duration_s, max_decode_bytes)
    samples, native_sr = decode_audio(_read_source(path), name, limits)
    if mono and samples.ndim > 1:
        samples = samples.mean(axis=0, dtype=np.float32)
    if sr is None or round(sr) == round(native_sr):
        return samples, native_sr
    resampled = resample_audio_pyav(samples, orig_sr=native_sr, target_sr=sr)
    return np.asarray(resampled, dtype=np.float32), float(sr)


def load_audio_soundfile(
    path: AudioSource,
    *,
    sr: float | None = 22050,
    mono: bool = True,
    max_duration_s: float | None = None,
    max_decode_bytes: int | None = None,
) -> AudioSamples:
    """:func:`load_audio` with the soundfile (libsndfile) backend only."""
    return load_audio(
        path,
        sr=sr,
        mono=mono,
        max_duration_s=max_duration_s,
        max_decode_bytes=max_decode_bytes,
        backend="soundfile",
    )


def load_audio_pyav(
    path: AudioSource,
    *,
    sr: float | None = 22050,
    mono: bool = True,
    max_duration_s: float | None = None,
    max_decode_bytes: int | None = None,
) -> AudioSamples:
    """:func:`load_audio` with the PyAV (FFmpeg) backend only."""
    return load_audio(
        path,
        sr=sr,
        mono=mono,
        max_duration_s=max_duration_s,
        max_decode_bytes=max_decode_bytes,
        backend="pyav",
    )


def load_audio_torchcodec(
    path: AudioSource,
    *,
    sr: float | None = 22050,
    mono: bool = True,
    max_duration_s: float | None = None,
    max_decode_bytes: int | None = None,
) -> AudioSamples:
    """:func:`load_audio` with the torchcodec backend only (``ImportError`` without torchcodec)."""
    return load_audio(
        path,
        sr=sr,
        mono=mono,
        max_duration_s=max_duration_s,
        max_decode_bytes=max_decode_bytes,
        backend="torchcodec",
    )


__all__ = [
    "AUDIO_BACKENDS",
    "AudioBackend",
    "AudioSamples",
    "check_audio_backend",
    "decode_audio",
    "load_audio",
    "load_audio_pyav",
    "load_audio_soundfile",
    "load_audio_torchcodec",
]
