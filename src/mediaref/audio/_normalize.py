"""The parser's audio transform: channel reduction, then resampling to the model's rate.

Both run eagerly on samples the user supplied, and lazily, inside a mapped
:class:`~mediaref.media.base.MediaRef`, on fetched audio, whose rate is only known once it has
been decoded. The work itself is this package's (``normalize_audio``, ``AudioResampler``):
:class:`AudioNormalizer` orders the two steps and names, in :meth:`AudioNormalizer.ref_settings`,
every parameter that changes their output, so a mapped ref's key changes whenever the output can.
It lives with the helpers rather than in ``parse`` so that an audio option (a new channel rule, a
resampling method) is added in one package; the parser only passes its options through.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mediaref.audio._channels import AudioSpec, ChannelReduction, normalize_audio
from mediaref.audio._resample import AudioResampler


def _time_axis(audio: np.ndarray, *, channels_first: bool) -> int:
    """The axis that holds time. Decoded media is ``(channels, time)``; user arrays are guessed."""
    if audio.ndim < 2 or channels_first:
        return audio.ndim - 1
    # soundfile hands out (time, channels), torchaudio (channels, time); time is the long axis.
    return 0 if audio.shape[0] > audio.shape[1] else 1


def normalize_audio_channels(
    audio: np.ndarray, target_channels: int, *, channels_first: bool
) -> np.ndarray:
    """``audio`` with ``target_channels`` channels (mono by their mean); mono comes back 1-D."""
    spec = AudioSpec(target_channels=target_channels, channel_reduction=ChannelReduction.MEAN)
    # A user's 2-D array is guessed as vLLM guesses; decoded audio is known to be channels-first.
    return normalize_audio(audio, spec, channels_first=True if channels_first else None)


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
            settings["audio_channel_reduction"] = ChannelReduction.MEAN.value
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


__all__ = ["AudioNormalizer", "normalize_audio_channels"]
