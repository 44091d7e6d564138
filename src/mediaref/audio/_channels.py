"""Channel normalization: the target channel count of a model's feature extractor.

:func:`normalize_audio` takes 1-D ``(time,)`` or 2-D audio, numpy or torch, and returns the same
type. Reducing to one channel uses the spec's :class:`ChannelReduction`; reducing to N > 1 keeps
the first N. Asking for more channels than there are is a ``ValueError``: inventing channels would
be a guess.

Which axis of 2-D audio holds time: decoders say ``(channels, time)``, soundfile and user arrays
often ``(time, channels)``. Left to guess (``channels_first=None``, vLLM's behaviour), the longer
axis is time. A caller that knows the layout says so, which matters for clips shorter than their
channel count (a 6-channel clip of 4 samples would otherwise read as 4 channels).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

import numpy as np
import torch

_A = TypeVar("_A", np.ndarray, torch.Tensor)


class ChannelReduction(str, Enum):
    """How several channels become one."""

    MEAN = "mean"
    FIRST = "first"
    MAX = "max"
    SUM = "sum"


@dataclass
class AudioSpec:
    """The channel layout a model's feature extractor expects.

    ``target_channels``: 1 for mono, N for N channels, None to pass audio through untouched.
    ``channel_reduction``: how to reach one channel from several.
    """

    target_channels: int | None = 1
    channel_reduction: ChannelReduction = ChannelReduction.MEAN

    @property
    def needs_normalization(self) -> bool:
        return self.target_channels is not None

    def __repr__(self) -> str:
        if self.target_channels is None:
            return "AudioSpec(passthrough)"
        reduction = ChannelReduction(self.channel_reduction).value
        return f"AudioSpec(channels={self.target_channels}, reduction={reduction})"


MONO_AUDIO_SPEC = AudioSpec(target_channels=1, channel_reduction=ChannelReduction.MEAN)
PASSTHROUGH_AUDIO_SPEC = AudioSpec(target_channels=None)


def _reduce_to_mono(audio: _A, reduction: ChannelReduction) -> _A:
    mono: _A
    if reduction is ChannelReduction.FIRST:
        mono = audio[0]
    elif isinstance(audio, torch.Tensor):
        if reduction is ChannelReduction.MEAN:
            mono = audio.mean(dim=0)
        elif reduction is ChannelReduction.MAX:
            mono = audio.max(dim=0).values
        else:
            mono = audio.sum(dim=0)
    elif reduction is ChannelReduction.MEAN:
        # Integer PCM averages in float32 rather than float64, as the decoders produce float32.
        mono = audio.mean(axis=0, dtype=audio.dtype if audio.dtype.kind == "f" else np.float32)
    elif reduction is ChannelReduction.MAX:
        mono = audio.max(axis=0)
    else:
        mono = audio.sum(axis=0)
    return mono


def normalize_audio(audio: _A, spec: AudioSpec, *, channels_first: bool | None = None) -> _A:
    """``audio`` with ``spec.target_channels`` channels; one channel comes back 1-D.

    ``channels_first`` (mediaref's extension) says 2-D audio is ``(channels, time)`` (True) or
    ``(time, channels)`` (False); None guesses, as vLLM does. The result of 2-D audio is
    ``(channels, time)``.
    """
    if not spec.needs_normalization:
        return audio
    target = spec.target_channels
    assert target is not None
    if audio.ndim == 1:
        if target == 1:
            return audio
        raise ValueError(f"Cannot expand mono audio to {target} channels")
    if audio.ndim != 2:
        raise ValueError(
            f"Unsupported audio shape {tuple(audio.shape)}: expected 1-D or 2-D samples"
        )
    if channels_first is None:
        channels_first = audio.shape[0] <= audio.shape[1]
    if not channels_first:
        audio = audio.T
    channels = audio.shape[0]
    if channels == target:
        return audio[0] if channels == 1 else audio
    if channels < target:
        raise ValueError(f"Cannot expand {channels} audio channels to {target}")
    if target == 1:
        return _reduce_to_mono(audio, ChannelReduction(spec.channel_reduction))
    return audio[:target]


__all__ = [
    "MONO_AUDIO_SPEC",
    "PASSTHROUGH_AUDIO_SPEC",
    "AudioSpec",
    "ChannelReduction",
    "normalize_audio",
]
