"""The torchcodec audio backend, used when a decoder names it (``audio_backend="torchcodec"``).

torchcodec is not a dependency: it is imported when a decode asks for it, and its absence (or a
missing FFmpeg) is an ``ImportError`` then, as in vLLM. It decodes a whole stream in one call,
allocating the output itself, so the caps work around that call rather than inside it: the
header's duration is refused over the caps and charged to the request's budget before decoding,
only the samples the caps allow (plus a second's slack, to tell an over-long stream from one at
the limit) are decoded, and the real size is checked and charged after.
"""

from __future__ import annotations

import importlib
import math
from typing import Any

import numpy as np
import numpy.typing as npt

from mediaref.media.audio._caps import AudioLimits, check_stream_shape, pcm_bytes
from mediaref.media.audio._pcm import DecodeCharge

TORCHCODEC_UNAVAILABLE = (
    "the torchcodec audio backend needs the torchcodec package and an FFmpeg it can load"
)
# Decoded past the caps' length, so an over-long stream is refused rather than cut at the limit.
_GUARD_SECONDS = 1.0


def _audio_decoder_class() -> Any:
    # Through importlib: an optional package, not a dependency pyproject.toml declares.
    try:
        decoders = importlib.import_module("torchcodec.decoders")
    except (ImportError, RuntimeError, OSError) as exc:  # not installed, or no FFmpeg
        raise ImportError(TORCHCODEC_UNAVAILABLE) from exc
    return decoders.AudioDecoder


def decode_with_torchcodec(
    data: bytes, limits: AudioLimits, charge: DecodeCharge | None = None
) -> tuple[npt.NDArray[np.float32], float]:
    """Decode ``data`` with torchcodec: float32 samples at the native rate, (n,) or (channels, n).

    Raises ``ImportError`` when torchcodec cannot be used, ``MediaTooLargeError`` over a cap and
    ``ValueError`` for bytes it cannot decode.
    """
    decoder_class = _audio_decoder_class()
    charge = DecodeCharge() if charge is None else charge
    try:
        decoder = decoder_class(data)
        metadata = decoder.metadata
    except RuntimeError as exc:
        if "libtorchcodec" in str(exc):  # its FFmpeg-backed core loads on first use
            raise ImportError(TORCHCODEC_UNAVAILABLE) from exc
        raise ValueError(f"torchcodec cannot open the audio: {exc}") from exc
    rate, channels = metadata.sample_rate, metadata.num_channels
    duration = metadata.duration_seconds
    stop: float | None = None
    if rate and channels:
        check_stream_shape(rate, channels)
        if duration is not None and math.isfinite(duration) and duration > 0:
            limits.check_declared(duration * rate, rate, channels)
            charge.cover(pcm_bytes(math.ceil(duration * rate), channels))
        max_frames = limits.max_frames(rate, channels)
        if max_frames is not None:
            stop = max_frames / rate + _GUARD_SECONDS
    try:
        if stop is None:
            samples = decoder.get_all_samples()
        else:
            samples = decoder.get_samples_played_in_range(0.0, stop)
    except RuntimeError as exc:
        raise ValueError(f"torchcodec cannot decode the audio: {exc}") from exc
    pcm = np.ascontiguousarray(samples.data.numpy(), dtype=np.float32)
    out_rate = float(samples.sample_rate)
    if pcm.ndim != 2 or pcm.shape[-1] == 0:
        raise ValueError("the audio stream decoded to no samples")
    check_stream_shape(out_rate, pcm.shape[0])
    frames = pcm.shape[-1]
    allowed = limits.max_frames(out_rate, pcm.shape[0])
    if allowed is not None and frames > allowed:
        raise limits.exceeded(frames, out_rate, pcm.shape[0])
    charge.cover(pcm_bytes(frames, pcm.shape[0]))
    return (pcm[0] if pcm.shape[0] == 1 else pcm), out_rate


__all__ = ["TORCHCODEC_UNAVAILABLE", "decode_with_torchcodec"]
