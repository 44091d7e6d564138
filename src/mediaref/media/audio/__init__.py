"""The audio decoder: encoded bytes to ``(samples, sample_rate)`` at the native rate.

The backend is the decoder's ``audio_backend`` (vLLM's option; :data:`AUDIO_BACKENDS`). The
default, ``"auto"``, tries two in order:

1. soundfile (libsndfile): WAV, FLAC, Ogg Vorbis/Opus, MP3 and the other formats it lists; fast,
   and its header is cheap to read, so the duration cap can fire when a ref is built.
2. PyAV (FFmpeg), when soundfile fails: AAC in MP4/M4A or ADTS, Opus in WebM, audio tracks of
   video containers, anything else FFmpeg demuxes.

If both fail, ``load_bytes`` raises ``ValueError("Failed to decode audio: soundfile: ...;
pyav: ...")``. ``"soundfile"`` and ``"pyav"`` use one of them alone, ``"torchcodec"`` torchcodec
(imported when used; ``ImportError`` without it). vLLM's ``load_audio*`` helpers, which take a
path or a buffer, downmix and resample, are here too, on the same backends (``_loaders``).
Output: float32 samples shaped (n,) for mono and (channels, n) otherwise, and the rate as a
float. This package is where bytes become samples; what is done to samples afterwards
(resampling, channel mixing: :mod:`mediaref.audio`, which the parser maps onto refs with
``MediaRef.map``) is not the decoder's, and the decoder never imports librosa, whose first
resample pulls in numba for seconds.

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

import io
import math
from typing import Any, ClassVar

import pybase64
import soundfile as sf

from mediaref import envs
from mediaref.audio import resample_audio_pyav
from mediaref.media._embedding_io import EmbeddingMediaIO
from mediaref.media.audio import _soundfile as _audio_soundfile
from mediaref.media.audio._caps import AudioLimits, decode_bytes_cap
from mediaref.media.audio._loaders import (
    AUDIO_BACKENDS,
    AudioSamples,
    check_audio_backend,
    decode_audio,
    load_audio,
    load_audio_pyav,
    load_audio_soundfile,
    load_audio_torchcodec,
)
from mediaref.media.base import DecodeSpec, MediaIO, MediaRef
from mediaref.media.decode_budget import MediaDecodedBudget, decode_budget_scope
from mediaref.media.sparse_utils import (  # vLLM's modules hold it too; one function for all
    check_sparse_tensor_invariants_threadsafe as check_sparse_tensor_invariants_threadsafe,
)

# The decode spec's name for each backend; "auto" keeps the name it always had.
_DECODER_NAMES = {
    "auto": "soundfile+pyav",
    "soundfile": "soundfile",
    "pyav": "pyav",
    "torchcodec": "torchcodec",
}


class AudioMediaIO(MediaIO[AudioSamples]):
    """Decodes audio bytes with ``audio_backend`` (default: soundfile, falling back to PyAV).

    ``max_duration_s`` overrides ``VLLM_MAX_AUDIO_DECODE_DURATION_S`` for this decoder; pass
    ``math.inf`` for no cap. ``decoded_budget`` (vLLM's argument) is the budget every decode
    charges, in place of the running request's; like the caps it never changes the output, so it
    is not in the spec. ``audio_backend`` (vLLM's option: one of :data:`AUDIO_BACKENDS`, checked
    here) is. Any other keyword is kept in ``kwargs`` for custom decoders, as vLLM keeps it, and
    counted in the spec (so it must be a JSON value): a subclass may decode by it.
    """

    modality: ClassVar[str] = "audio"

    def __init__(
        self,
        *,
        max_duration_s: float | None = None,
        decoded_budget: MediaDecodedBudget | None = None,
        **kwargs: Any,
    ) -> None:
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
        backend = kwargs.pop("audio_backend", None)
        if backend is not None:
            check_audio_backend(backend)
        self.audio_backend: str | None = backend
        self.kwargs = kwargs
        settings: dict[str, Any] = {
            "modality": self.modality,
            "decoder": _DECODER_NAMES[check_audio_backend(backend)],
        }
        if kwargs:
            settings["kwargs"] = kwargs
        # The caps are left out on purpose. They decide whether a decode succeeds, never what
        # a successful decode returns, and the key names the output: decoders that differ only
        # in their caps decode the same bytes to the same samples and should share cache
        # entries. The caps guard decode work, and a cache hit does none; a stricter decoder
        # still rejects a header-declared excess when it builds its own ref.
        self._spec = DecodeSpec(settings)

    def get_decode_spec(self) -> DecodeSpec:
        return self._spec

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
        """Decode now. Over ``VLLM_MAX_AUDIO_CLIP_FILESIZE_MB`` is ``MediaTooLargeError``, as in
        vLLM, whose ``load_bytes`` checks the size too."""
        self.check_encoded_size(len(data))
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
        return MediaRef(data, lambda: self._decode(data, limits), self._spec)

    def encode_base64(self, media: tuple[Any, float], *, audio_format: str = "WAV") -> str:
        """``(samples, sample_rate)`` written as ``audio_format`` by soundfile, in base64.

        Samples are (n,) or 2-D: (channels, n) as the decoder returns them, or soundfile's own
        (n, channels); the longer axis is taken for time.
        """
        samples, sample_rate = media
        with io.BytesIO() as buffer:
            sf.write(buffer, _frames_first(samples), int(sample_rate), format=audio_format)
            return pybase64.b64encode(buffer.getvalue()).decode("ascii")

    def _decode(self, data: bytes, limits: AudioLimits) -> AudioSamples:
        if self.decoded_budget is not None:
            with decode_budget_scope(self.decoded_budget):
                return decode_audio(data, self.audio_backend, limits)
        return decode_audio(data, self.audio_backend, limits)

    def __repr__(self) -> str:
        return (
            f"AudioMediaIO(audio_backend={self.audio_backend!r}, "
            f"max_duration_s={self.max_duration_s!r})"
        )


def _frames_first(samples: Any) -> Any:
    """(n,) and (n, channels) stay; (channels, n) becomes soundfile's (n, channels)."""
    if getattr(samples, "ndim", 1) == 2 and samples.shape[0] < samples.shape[1]:
        return samples.T
    return samples


class AudioEmbeddingMediaIO(EmbeddingMediaIO):
    """Loads pre-computed audio embeddings (``audio_embeds``): a ``.npy`` array or a
    ``torch.save``'d tensor, sparse ones densified; see :mod:`mediaref.media._embedding_io`."""

    modality: ClassVar[str] = "audio"
    parameter: ClassVar[str] = "audio_embeds"


__all__ = [
    "AUDIO_BACKENDS",
    "AudioEmbeddingMediaIO",
    "AudioMediaIO",
    "AudioSamples",
    "load_audio",
    "load_audio_pyav",
    "load_audio_soundfile",
    "load_audio_torchcodec",
    "resample_audio_pyav",
]
