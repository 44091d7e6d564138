"""Audio helpers at vLLM's public path ``vllm.multimodal.audio``: the one home of audio samples.

What is done to decoded samples (channels, rate, splitting) lives in this package: the parser's
audio transform is its :class:`AudioNormalizer`, and the decoders' ``load_audio`` helpers
resample with it, so a caller of these functions gets what processing gets. Turning encoded bytes
into samples (backends, caps, ``AudioMediaIO``) is :mod:`mediaref.media.audio`'s; the decoders
sit above this package and use it, never the reverse.

- :func:`get_audio_duration`: the length in seconds of ``(samples,)`` or ``(channels, samples)``.
- Channels (``_channels``): :class:`ChannelReduction`, :class:`AudioSpec`,
  :data:`MONO_AUDIO_SPEC`, :data:`PASSTHROUGH_AUDIO_SPEC`, :func:`normalize_audio`.
- Resampling (``_resample``, ``_sinc``): :class:`AudioResampler` and
  ``resample_audio_{torchaudio,pyav,scipy,soxr}`` (vLLM's methods, ``"torchaudio"`` the default;
  torchaudio itself is not needed) and mediaref's numba-free ``"librosa"``.
- The parser's transform (``_normalize``): :class:`AudioNormalizer`, channels then rate, and the
  settings that key a ref it is mapped onto (mediaref's).
- Durations and splitting long audio at quiet points (``_split``): :func:`split_audio`,
  :func:`find_split_point`.
"""

from __future__ import annotations

from mediaref.audio._channels import (
    MONO_AUDIO_SPEC,
    PASSTHROUGH_AUDIO_SPEC,
    AudioSpec,
    ChannelReduction,
    normalize_audio,
)
from mediaref.audio._normalize import AudioNormalizer
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
from mediaref.audio._sinc import sinc_resampler
from mediaref.audio._split import find_split_point, get_audio_duration, split_audio

# vLLM's private name for the cached per-rates resampler, which its own tests import.
_get_torchaudio_resampler = sinc_resampler

__all__ = [
    "MONO_AUDIO_SPEC",
    "PASSTHROUGH_AUDIO_SPEC",
    "RESAMPLE_METHODS",
    "AudioNormalizer",
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
