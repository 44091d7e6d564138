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

Caps: the encoded size (``VLLM_MAX_AUDIO_CLIP_FILESIZE_MB``) and the duration
(``VLLM_MAX_AUDIO_DECODE_DURATION_S``, or the ``max_duration_s`` argument). A non-positive environment
value disables its cap. Both raise ``MediaTooLargeError``: the size and a header-declared duration
when the ref is built, a decoded duration while decoding.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from mediaref import envs
from mediaref.exceptions import MediaTooLargeError
from mediaref.media import _audio_pyav, _audio_soundfile
from mediaref.media._audio_caps import duration_exceeded
from mediaref.media.base import DecodeSpec, MediaIO, MediaRef

AudioSamples = tuple[npt.NDArray[np.float32], float]

_REASON_MAX_CHARS = 200


class AudioMediaIO(MediaIO[AudioSamples]):
    """Decodes audio bytes with soundfile, falling back to PyAV.

    ``max_duration_s`` overrides ``VLLM_MAX_AUDIO_DECODE_DURATION_S`` for this decoder; pass
    ``math.inf`` for no cap. Any other keyword is rejected: none would change the decode, and a
    silently ignored option would be a setting missing from the cache key.
    """

    modality: ClassVar[str] = "audio"

    def __init__(self, *, max_duration_s: float | None = None, **kwargs: Any) -> None:
        if kwargs:
            raise TypeError(
                f"AudioMediaIO got unexpected keyword arguments: {sorted(kwargs)}; "
                "it accepts only max_duration_s"
            )
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
        # The duration cap is left out on purpose. It decides whether a decode succeeds, never
        # what a successful decode returns, and the key names the output: decoders that differ
        # only in their caps decode the same bytes to the same samples and should share cache
        # entries. The cap guards decode work, and a cache hit does none; a stricter decoder
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

    def load_bytes(self, data: bytes) -> AudioSamples:
        return self._decode(data, self.get_max_duration_s())

    def load_bytes_ref(self, data: bytes) -> MediaRef[AudioSamples]:
        """A lazy ref. The size cap fires now, and so does the duration cap where soundfile
        can read the header.

        The cap is read once here so the eager check and the later decode agree even if the
        environment changes in between.
        """
        self.check_encoded_size(len(data))
        max_duration_s = self.get_max_duration_s()
        if max_duration_s is not None:
            declared_s = _audio_soundfile.header_duration_s(data)
            if declared_s is not None and declared_s > max_duration_s:
                raise duration_exceeded(max_duration_s, declared_s, decoded=False)
        return MediaRef(
            data, lambda: self._decode(data, max_duration_s), self.get_decode_spec()
        )

    def _decode(self, data: bytes, max_duration_s: float | None) -> AudioSamples:
        try:
            return _audio_soundfile.decode_with_soundfile(data, max_duration_s)
        except MediaTooLargeError:
            raise  # over the cap: a verdict on the audio, not a reason to try another backend
        except _audio_soundfile.SOUNDFILE_ERRORS as exc:
            soundfile_reason = _audio_soundfile.describe_soundfile_error(exc)
        try:
            return _audio_pyav.decode_with_pyav(data, max_duration_s)
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
