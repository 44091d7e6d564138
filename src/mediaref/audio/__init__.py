"""Audio helpers at vLLM's public path ``vllm.multimodal.audio``: the one implementation.

The parse layer normalizes audio items with these (channel reduction and resampling to the
model's rate, mapped onto fetched refs), and the decoders' ``load_audio`` helpers resample with
them, so a caller of these functions gets what processing gets.

- :func:`get_audio_duration`: the length in seconds of ``(samples,)`` or ``(channels, samples)``.
- Channels: :class:`ChannelReduction`, :class:`AudioSpec`, :data:`MONO_AUDIO_SPEC`,
  :data:`PASSTHROUGH_AUDIO_SPEC`, :func:`normalize_audio`.
- Resampling: :class:`AudioResampler` and ``resample_audio_{torchaudio,pyav,scipy,soxr}``
  (vLLM's methods, ``"torchaudio"`` the default; torchaudio itself is not needed) and
  mediaref's numba-free ``"librosa"``.
- Splitting long audio at quiet points: :func:`split_audio`, :func:`find_split_point`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from mediaref.audio._channels import (
    MONO_AUDIO_SPEC,
    PASSTHROUGH_AUDIO_SPEC,
    AudioSpec,
    ChannelReduction,
    normalize_audio,
)
from mediaref.audio._resample import (
    RESAMPLE_METHODS,
    AudioResampleMethod,
    AudioResampler,
    resample_audio_librosa,
    resample_audio_pyav,
    resample_audio_scipy,
    resample_audio_soxr,
    resample_audio_torchaudio,
)
from mediaref.audio._split import find_split_point, split_audio


def get_audio_duration(*, y: npt.NDArray[np.floating[Any]], sr: float = 22050) -> float:
    """Seconds of audio in ``y`` (time on the last axis) at ``sr`` Hz, as ``librosa.get_duration``."""
    return float(y.shape[-1]) / sr


__all__ = [
    "MONO_AUDIO_SPEC",
    "PASSTHROUGH_AUDIO_SPEC",
    "RESAMPLE_METHODS",
    "AudioResampleMethod",
    "AudioResampler",
    "AudioSpec",
    "ChannelReduction",
    "find_split_point",
    "get_audio_duration",
    "normalize_audio",
    "resample_audio_librosa",
    "resample_audio_pyav",
    "resample_audio_scipy",
    "resample_audio_soxr",
    "resample_audio_torchaudio",
    "split_audio",
]
