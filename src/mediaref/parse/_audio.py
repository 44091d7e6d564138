"""Audio normalization for the parse layer: channel reduction, then resampling to the model's rate.

Both run eagerly on samples the user supplied, and lazily, inside a mapped :class:`MediaRef`, on
fetched audio, whose rate is only known once it has been decoded. :class:`AudioNormalizer` is the
one implementation behind both, and :meth:`AudioNormalizer.ref_settings` names every parameter
that changes its output, so a mapped ref's key changes whenever the output can.

Resampling avoids numba: ``"librosa"`` reproduces ``librosa.resample``'s default (soxr at
``soxr_hq``, then length fixed to ``ceil(n * ratio)``) by calling soxr directly, because importing
librosa's resampler pulls numba's JIT into the decode workers; ``"scipy"`` is
``scipy.signal.resample_poly`` with the exact rational ratio of the two rates.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

AudioResampleMethod = Literal["librosa", "scipy"]
ChannelReduction = Literal["mean"]

_RESAMPLE_METHODS: tuple[str, ...] = ("librosa", "scipy")
# Rates are floats (decoders report them so); a denominator this large represents every rate in
# practical use (integers, 22050 / 11025, NTSC-style x/1001) exactly.
_MAX_RATE_DENOMINATOR = 1001


def _time_axis(audio: np.ndarray, *, channels_first: bool) -> int:
    """The axis that holds time. Decoded media is ``(channels, time)``; user arrays are guessed."""
    if audio.ndim < 2 or channels_first:
        return audio.ndim - 1
    # soundfile hands out (time, channels), torchaudio (channels, time); time is the long axis.
    return 0 if audio.shape[0] > audio.shape[1] else 1


def _rational_rate(rate: float) -> Fraction:
    return Fraction(rate).limit_denominator(_MAX_RATE_DENOMINATOR)


def _resample_soxr_hq(audio: np.ndarray, orig_sr: float, target_sr: float, axis: int) -> np.ndarray:
    import soxr  # a C library with no numba dependency; ships with librosa

    moved = np.moveaxis(audio, axis, -1)
    flat = moved.reshape(-1, moved.shape[-1])
    # soxr takes (time, channels); the channels of one clip share one resampler state.
    resampled = soxr.resample(flat.T, orig_sr, target_sr, quality="soxr_hq").T
    expected = math.ceil(flat.shape[-1] * float(target_sr) / float(orig_sr))
    if resampled.shape[-1] > expected:
        resampled = resampled[..., :expected]
    elif resampled.shape[-1] < expected:
        resampled = np.pad(resampled, ((0, 0), (0, expected - resampled.shape[-1])))
    out: np.ndarray = np.moveaxis(resampled.reshape(*moved.shape[:-1], expected), -1, axis)
    return out


def _resample_polyphase(
    audio: np.ndarray, orig_sr: float, target_sr: float, axis: int
) -> np.ndarray:
    from scipy.signal import resample_poly

    ratio = _rational_rate(target_sr) / _rational_rate(orig_sr)
    out: np.ndarray = resample_poly(audio, ratio.numerator, ratio.denominator, axis=axis)
    return out


class AudioResampler:
    """Resamples to ``target_sr`` with ``method`` (``"librosa"`` or ``"scipy"``), as vLLM's does.

    Unlike vLLM's ``"scipy"`` method, which only handles integer ratios, any pair of rates works.
    """

    def __init__(
        self, target_sr: float | None = None, method: AudioResampleMethod = "librosa"
    ) -> None:
        if method not in _RESAMPLE_METHODS:
            raise ValueError(
                f"Invalid resampling method: {method!r}; supported methods are {list(_RESAMPLE_METHODS)}"
            )
        if target_sr is not None and not (math.isfinite(target_sr) and target_sr > 0):
            raise ValueError(f"target_sr must be a positive number, got {target_sr!r}")
        self.target_sr = target_sr
        self.method = method

    def needs_resampling(self, orig_sr: float) -> bool:
        return self.target_sr is not None and not math.isclose(
            float(orig_sr), float(self.target_sr), rel_tol=0.0, abs_tol=1e-6
        )

    def resample(
        self, audio: npt.NDArray[np.floating[Any]], *, orig_sr: float, axis: int = -1
    ) -> npt.NDArray[np.floating[Any]]:
        """``audio`` at ``target_sr`` along ``axis``; unchanged when the rates already agree."""
        if self.target_sr is None:
            raise RuntimeError("Audio resampling is not supported when `target_sr` is not provided")
        if not (math.isfinite(orig_sr) and orig_sr > 0):
            raise ValueError(f"audio sample rate must be a positive number, got {orig_sr!r}")
        if not self.needs_resampling(orig_sr):
            return audio
        axis = axis % audio.ndim
        if audio.dtype not in (np.float32, np.float64):
            audio = audio.astype(
                np.float32
            )  # integer PCM and float16 alike: the filters want floats
        if self.method == "librosa":
            out = _resample_soxr_hq(audio, orig_sr, self.target_sr, axis)
        else:
            out = _resample_polyphase(audio, orig_sr, self.target_sr, axis)
        return np.asarray(out, dtype=audio.dtype)


def normalize_audio_channels(
    audio: np.ndarray, target_channels: int, *, channels_first: bool
) -> np.ndarray:
    """``audio`` with ``target_channels`` channels; mono comes back 1-D.

    More channels are reduced: to one by their mean, to N > 1 by keeping the first N. Fewer
    channels than asked for is an error, as in vLLM: inventing channels would be a guess.
    """
    if audio.ndim == 1:
        if target_channels == 1:
            return audio
        raise ValueError(f"Cannot expand mono audio to {target_channels} channels")
    if audio.ndim != 2:
        raise ValueError(f"Unsupported audio shape {audio.shape}: expected 1-D or 2-D samples")
    if _time_axis(audio, channels_first=channels_first) == 0:
        audio = audio.T  # to (channels, time)
    num_channels = audio.shape[0]
    if num_channels < target_channels:
        raise ValueError(f"Cannot expand {num_channels} audio channels to {target_channels}")
    if target_channels == 1:
        mono: np.ndarray = audio.mean(
            axis=0, dtype=audio.dtype if audio.dtype.kind == "f" else np.float32
        )
        return mono
    return audio[:target_channels]


class AudioNormalizer:
    """Channel normalization followed by resampling: the parser's whole audio transform.

    Channels are reduced before resampling, which is cheaper (fewer rows to filter) and, both steps
    being linear, gives the same samples as vLLM's resample-then-reduce up to rounding.
    """

    def __init__(self, resampler: AudioResampler, target_channels: int | None = None) -> None:
        if target_channels is not None and target_channels < 1:
            raise ValueError(f"target_channels must be at least 1, got {target_channels}")
        self.resampler = resampler
        self.target_channels = target_channels

    def ref_settings(self) -> dict[str, Any]:
        """The settings that identify this transform when it is mapped onto a ref."""
        settings: dict[str, Any] = {}
        if self.target_channels is not None:
            settings["audio_target_channels"] = self.target_channels
            settings["audio_channel_reduction"] = "mean"
        if self.resampler.target_sr is not None:
            settings["audio_target_sr"] = float(self.resampler.target_sr)
            settings["audio_resample_method"] = self.resampler.method
        return settings

    def normalize(
        self, audio: np.ndarray, orig_sr: float | None, *, channels_first: bool
    ) -> np.ndarray:
        """Samples with the target channel count, at the target rate when both rates are known."""
        if self.target_channels is not None:
            audio = normalize_audio_channels(
                audio, self.target_channels, channels_first=channels_first
            )
            channels_first = True  # normalization leaves (channels, time) or 1-D
        if orig_sr is None or self.resampler.target_sr is None:
            return audio
        return self.resampler.resample(
            audio, orig_sr=orig_sr, axis=_time_axis(audio, channels_first=channels_first)
        )

    def normalize_decoded(self, decoded: Any) -> Any:
        """The transform mapped onto an audio ref: ``(samples, rate)`` from the decoder -> samples.

        Runs in the decode worker, so a fetched clip is resampled in parallel with the others.
        """
        if isinstance(decoded, tuple) and len(decoded) == 2:
            samples, rate = decoded
            return self.normalize(np.asarray(samples), float(rate), channels_first=True)
        # A decoder declaring some other output (raw bytes, say) is passed through untouched.
        return decoded


__all__ = [
    "AudioNormalizer",
    "AudioResampleMethod",
    "AudioResampler",
    "ChannelReduction",
    "normalize_audio_channels",
]
