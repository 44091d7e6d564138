"""The audio decoder: encoded bytes to ``(samples, sample_rate)`` at the native rate.

Two backends, tried in order:

1. soundfile (libsndfile): WAV, FLAC, Ogg Vorbis/Opus, MP3 and the other formats it lists; fast,
   and its header is cheap to read, so the duration cap can fire when a ref is built.
2. PyAV (FFmpeg), when soundfile fails: AAC in MP4/M4A or ADTS, Opus in WebM, audio tracks of
   video containers, anything else FFmpeg demuxes.

If both fail, ``load_bytes`` raises ``ValueError("Failed to decode audio: soundfile: ...;
pyav: ...")``. Output: float32 samples shaped (n,) for mono and (channels, n) otherwise, and the
rate as a float. Resampling and channel mixing are the parse layer's job (``MediaRef.map``); the
decoder never imports librosa, whose first resample pulls in numba for seconds.

Caps, all raising ``MediaTooLargeError`` (HTTP 413):

* the encoded size (``VLLM_MAX_AUDIO_CLIP_FILESIZE_MB``), when the ref is built;
* the duration (``VLLM_MAX_AUDIO_DECODE_DURATION_S``, or the ``max_duration_s`` argument) and the
  float32 PCM bytes (``VLLM_MAX_AUDIO_DECODE_BYTES``: frames x channels x 4), checked from the
  header when the ref is built (where soundfile reads it) and again before decoding, then
  enforced on the frames actually decoded, whatever the header said;
* the request's decoded bytes (``VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES``), charged before the
  output is allocated (:mod:`mediaref.media.decode_budget`).

A non-positive environment value disables its cap. The output is written into one preallocated
array (:mod:`mediaref.media.audio._pcm`), so a decode's peak memory is about its output.
The PyAV fallback opens payloads through the audio allow-list of demuxers
(:mod:`mediaref.media._pyav_open`): a payload naming other files or URLs is refused.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from mediaref import envs
from mediaref.exceptions import MediaTooLargeError
from mediaref.media.audio import _pyav as _audio_pyav
from mediaref.media.audio import _soundfile as _audio_soundfile
from mediaref.media.audio._caps import AudioLimits, decode_bytes_cap
from mediaref.media.audio._pcm import DecodeCharge
from mediaref.media.base import DecodeSpec, MediaIO, MediaRef
from mediaref.media.decode_budget import MediaDecodedBudget, decode_budget_scope

AudioSamples = tuple[npt.NDArray[np.float32], float]

_REASON_MAX_CHARS = 200


class AudioMediaIO(MediaIO[AudioSamples]):
    """Decodes audio bytes with soundfile, falling back to PyAV.

    ``max_duration_s`` overrides ``VLLM_MAX_AUDIO_DECODE_DURATION_S`` for this decoder; pass
    ``math.inf`` for no cap. ``decoded_budget`` (vLLM's argument) is the budget every decode
    charges, in place of the running request's; like the caps it never changes the output, so it
    is not in the spec. Any other keyword is rejected: none would change the decode, and a
    silently ignored option would be a setting missing from the cache key.
    """

    modality: ClassVar[str] = "audio"

    def __init__(
        self,
        *,
        max_duration_s: float | None = None,
        decoded_budget: MediaDecodedBudget | None = None,
        **kwargs: Any,
    ) -> None:
        if kwargs:
            raise TypeError(
                f"AudioMediaIO got unexpected keyword arguments: {sorted(kwargs)}; "
                "it accepts only max_duration_s and decoded_budget"
            )
        if decoded_budget is not None and not isinstance(decoded_budget, MediaDecodedBudget):
            raise TypeError(
                f"decoded_budget must be a MediaDecodedBudget, got {type(decoded_budget).__name__}"
            )
        self.decoded_budget = decoded_budget
        if max_duration_s is not None and (
            isinstance(max_duration_s, bool)
            or not isinstance(max_duration_s, (int, float))
            or math.isnan(max_duration_s)
            or max_duration_s <= 0
        ):
            raise ValueError(
                f"max_duration_s must be a positive number (math.inf for no cap), "
                f"got {max_duration_s!r}"
            )
        self.max_duration_s = max_duration_s

    def get_decode_spec(self) -> DecodeSpec:
        # The caps are left out on purpose. They decide whether a decode succeeds, never what
        # a successful decode returns, and the key names the output: decoders that differ only
        # in their caps decode the same bytes to the same samples and should share cache
        # entries. The caps guard decode work, and a cache hit does none; a stricter decoder
        # still rejects a header-declared excess when it builds its own ref.
        return DecodeSpec(modality=self.modality, decoder="soundfile+pyav")

    def get_max_bytes(self) -> int | None:
        return envs.size_cap_bytes("VLLM_MAX_AUDIO_CLIP_FILESIZE_MB")

    def get_max_duration_s(self) -> float | None:
        """The duration cap in seconds, or None for none (the argument wins over the env)."""
        if self.max_duration_s is not None:
            return None if math.isinf(self.max_duration_s) else float(self.max_duration_s)
        limit_s = envs.VLLM_MAX_AUDIO_DECODE_DURATION_S
        return limit_s if limit_s > 0 else None

    def get_max_decode_bytes(self) -> int | None:
        """``VLLM_MAX_AUDIO_DECODE_BYTES``: the float32 PCM bytes one decode may produce."""
        return decode_bytes_cap()

    def get_limits(self) -> AudioLimits:
        """The caps a decode started now runs under."""
        return AudioLimits(self.get_max_duration_s(), self.get_max_decode_bytes())

    def load_bytes(self, data: bytes) -> AudioSamples:
        return self._decode(data, self.get_limits())

    def load_bytes_ref(self, data: bytes) -> MediaRef[AudioSamples]:
        """A lazy ref. The size cap fires now, and so do the duration and PCM-bytes caps where
        soundfile can read the header.

        The caps are read once here so the eager check and the later decode agree even if the
        environment changes in between.
        """
        self.check_encoded_size(len(data))
        limits = self.get_limits()
        if limits != AudioLimits():
            _audio_soundfile.check_header(data, limits)
        return MediaRef(data, lambda: self._decode(data, limits), self.get_decode_spec())

    def _decode(self, data: bytes, limits: AudioLimits) -> AudioSamples:
        if self.decoded_budget is not None:
            with decode_budget_scope(self.decoded_budget):
                return self._decode_in_scope(data, limits)
        return self._decode_in_scope(data, limits)

    def _decode_in_scope(self, data: bytes, limits: AudioLimits) -> AudioSamples:
        charge = DecodeCharge()  # shared: a PyAV retry does not charge the clip twice
        try:
            return _audio_soundfile.decode_with_soundfile(data, limits, charge)
        except MediaTooLargeError:
            raise  # over the cap: a verdict on the audio, not a reason to try another backend
        except _audio_soundfile.SOUNDFILE_ERRORS as exc:
            soundfile_reason = _audio_soundfile.describe_soundfile_error(exc)
        try:
            return _audio_pyav.decode_with_pyav(data, limits, charge)
        except MediaTooLargeError:
            raise
        except _audio_pyav.PYAV_ERRORS as exc:
            pyav_reason = _audio_pyav.describe_pyav_error(exc)
            raise ValueError(
                f"Failed to decode audio: soundfile: {_shorten(soundfile_reason)}; "
                f"pyav: {_shorten(pyav_reason)}"
            ) from exc


def _shorten(reason: str) -> str:
    reason = " ".join(reason.split())
    if len(reason) <= _REASON_MAX_CHARS:
        return reason
    return reason[: _REASON_MAX_CHARS - 3] + "..."


__all__ = ["AudioMediaIO"]
