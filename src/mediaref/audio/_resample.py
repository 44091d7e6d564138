"""Resampling: vLLM's four methods, mediaref's numba-free librosa one, and ``AudioResampler``.

Every ``resample_audio_*`` function takes ``(samples,)`` or ``(channels, samples)`` audio and the
two rates, rounds the rates to whole hertz (as vLLM does) and returns the input itself when they
agree:

- ``"torchaudio"`` (vLLM's default): torchaudio's band-limited sinc filter, computed here without
  torchaudio (see ``_sinc``); float32 out.
- ``"pyav"``: FFmpeg's libswresample, one channel at a time; float32 out, ``ceil(n * ratio)``
  samples.
- ``"scipy"``: ``scipy.signal.resample_poly`` with the exact rational ratio of the rates.
- ``"soxr"``: soxr at its default (high) quality, one channel at a time.
- ``"librosa"`` (mediaref's): what ``librosa.resample`` gives by default (soxr at ``soxr_hq``,
  length fixed to ``ceil(n * ratio)``), without importing librosa, whose resampler pulls numba's
  JIT into the decode workers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal, get_args

import numpy as np
import numpy.typing as npt

from mediaref.audio._sinc import sinc_resampler

AudioResampleMethod = Literal["pyav", "scipy", "soxr", "torchaudio", "librosa"]
FloatArray = npt.NDArray[np.floating[Any]]

# libswresample buffers its filter's delay: shorter inputs come out empty until flushed, and
# very short ones not even then. Padding with silence to this length, then trimming, avoids both.
_PYAV_MIN_SAMPLES = 1024


def _whole_hertz(orig_sr: float, target_sr: float) -> tuple[int, int]:
    return round(float(orig_sr)), round(float(target_sr))


def _per_channel(
    resample_one: Callable[[FloatArray, int, int], FloatArray],
    audio: FloatArray,
    orig: int,
    target: int,
) -> FloatArray:
    if audio.ndim == 1:
        return resample_one(audio, orig, target)
    rows = audio.reshape(-1, audio.shape[-1])
    out = np.stack([resample_one(row, orig, target) for row in rows])
    return out.reshape(*audio.shape[:-1], out.shape[-1])


def _pyav_one(channel: FloatArray, orig: int, target: int) -> FloatArray:
    import av  # PyAV's import is heavy and the other methods do not need it

    expected = math.ceil(channel.shape[-1] * target / orig)
    samples = np.asarray(channel, dtype=np.float32)
    if samples.shape[-1] < _PYAV_MIN_SAMPLES:
        samples = np.pad(samples, (0, _PYAV_MIN_SAMPLES - samples.shape[-1]))
    frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="fltp", layout="mono")
    frame.sample_rate = orig
    resampler = av.AudioResampler(format="fltp", layout="mono", rate=target)
    frames = [*resampler.resample(frame), *resampler.resample(None)]
    out: FloatArray = np.concatenate([f.to_ndarray() for f in frames], axis=1)[0]
    return out[:expected]


def _soxr_one(channel: FloatArray, orig: int, target: int) -> FloatArray:
    import soxr

    out: FloatArray = soxr.resample(channel, orig, target)
    return out


def resample_audio_pyav(audio: FloatArray, *, orig_sr: float, target_sr: float) -> FloatArray:
    """``audio`` at ``target_sr`` through FFmpeg's libswresample, float32, ``ceil(n * ratio)`` long."""
    orig, target = _whole_hertz(orig_sr, target_sr)
    if orig == target:
        return audio
    return _per_channel(_pyav_one, audio, orig, target)


def resample_audio_scipy(audio: FloatArray, *, orig_sr: float, target_sr: float) -> FloatArray:
    """``audio`` at ``target_sr`` by polyphase filtering with the exact ratio of the two rates."""
    from scipy.signal import resample_poly

    orig, target = _whole_hertz(orig_sr, target_sr)
    if orig == target:
        return audio
    gcd = math.gcd(orig, target)
    out: FloatArray = resample_poly(audio, target // gcd, orig // gcd, axis=-1)
    return out


def resample_audio_soxr(audio: FloatArray, *, orig_sr: float, target_sr: float) -> FloatArray:
    """``audio`` at ``target_sr`` through soxr (high quality), one channel at a time."""
    orig, target = _whole_hertz(orig_sr, target_sr)
    if orig == target:
        return audio
    return _per_channel(_soxr_one, audio, orig, target)


def resample_audio_torchaudio(audio: FloatArray, *, orig_sr: float, target_sr: float) -> FloatArray:
    """``audio`` at ``target_sr`` with torchaudio's default sinc filter, float32 (see ``_sinc``)."""
    orig, target = _whole_hertz(orig_sr, target_sr)
    if orig == target:
        return audio
    return sinc_resampler(orig, target)(audio)


def resample_audio_librosa(audio: FloatArray, *, orig_sr: float, target_sr: float) -> FloatArray:
    """What ``librosa.resample(audio, orig_sr=..., target_sr=...)`` returns, without librosa."""
    import soxr

    if math.isclose(orig_sr, target_sr, rel_tol=0.0, abs_tol=1e-6):
        return audio
    rows = audio.reshape(-1, audio.shape[-1])
    # soxr takes (time, channels); the channels of one clip share one resampler state.
    out: FloatArray = soxr.resample(rows.T, orig_sr, target_sr, quality="soxr_hq").T
    expected = math.ceil(rows.shape[-1] * float(target_sr) / float(orig_sr))
    if out.shape[-1] > expected:
        out = out[..., :expected]
    elif out.shape[-1] < expected:
        out = np.pad(out, ((0, 0), (0, expected - out.shape[-1])))
    return out.reshape(*audio.shape[:-1], expected)


_METHODS: dict[str, Callable[..., FloatArray]] = {
    "pyav": resample_audio_pyav,
    "scipy": resample_audio_scipy,
    "soxr": resample_audio_soxr,
    "torchaudio": resample_audio_torchaudio,
    "librosa": resample_audio_librosa,
}
RESAMPLE_METHODS: tuple[str, ...] = get_args(AudioResampleMethod)


class AudioResampler:
    """Resamples audio to ``target_sr`` with ``method`` (vLLM's four, or mediaref's ``"librosa"``).

    Both are checked when it is built: an unknown method is a ``ValueError``, and so is a
    ``target_sr`` that is not a positive number. ``target_sr`` None builds a resampler that
    refuses to resample (``RuntimeError``), as vLLM's does.
    """

    def __init__(
        self, target_sr: float | None = None, method: AudioResampleMethod = "torchaudio"
    ) -> None:
        if method not in _METHODS:
            raise ValueError(
                f"Invalid resampling method: {method!r}; supported methods are {list(RESAMPLE_METHODS)}"
            )
        if target_sr is not None and not (math.isfinite(target_sr) and target_sr > 0):
            raise ValueError(f"target_sr must be a positive number, got {target_sr!r}")
        self.target_sr = target_sr
        self.method = method

    def needs_resampling(self, orig_sr: float) -> bool:
        return self.target_sr is not None and not math.isclose(
            float(orig_sr), float(self.target_sr), rel_tol=0.0, abs_tol=1e-6
        )

    def resample(self, audio: FloatArray, *, orig_sr: float, axis: int = -1) -> FloatArray:
        """``audio`` at ``target_sr`` along ``axis`` (mediaref's extension; vLLM's is the last).

        Unchanged when the rates agree. Integer PCM is resampled as float32; a float input keeps
        its dtype.
        """
        if self.target_sr is None:
            raise RuntimeError("Audio resampling is not supported when `target_sr` is not provided")
        if not (math.isfinite(orig_sr) and orig_sr > 0):
            raise ValueError(f"audio sample rate must be a positive number, got {orig_sr!r}")
        if not self.needs_resampling(orig_sr):
            return audio
        if audio.dtype not in (np.float32, np.float64):
            audio = audio.astype(np.float32)  # integer PCM and float16 alike: filters want floats
        moved = np.moveaxis(audio, axis, -1)
        out = _METHODS[self.method](moved, orig_sr=orig_sr, target_sr=self.target_sr)
        return np.asarray(np.moveaxis(out, -1, axis), dtype=audio.dtype)

    def __repr__(self) -> str:
        return f"AudioResampler(target_sr={self.target_sr!r}, method={self.method!r})"


__all__ = [
    "RESAMPLE_METHODS",
    "AudioResampleMethod",
    "AudioResampler",
    "resample_audio_librosa",
    "resample_audio_pyav",
    "resample_audio_scipy",
    "resample_audio_soxr",
    "resample_audio_torchaudio",
]
