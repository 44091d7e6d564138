"""``VideoBackend``: a sampling rule decoded with a chosen codec; the uniform rule and its loaders.

Every codec-based loader derives from :class:`VideoBackend`: its ``load_bytes`` resolves the codec
(the ``backend`` option), decodes the frames :meth:`compute_frames_index_to_sample` picks and
builds vLLM's metadata. Subclasses change the rule, their defaults (the class attributes
``default_fps`` and ``default_backend``, which ``load_bytes`` reads when a call leaves ``fps`` or
``backend`` out), or finish the frames afterwards.

The uniform rule is :class:`VideoBackend`'s own, registered as ``opencv`` (vLLM's name and codec);
the other loaders that sample uniformly are here too: ``pyav`` (:class:`PyAVVideoBackend`,
mediaref's default loader) and ``nemotron_vl`` (:class:`NemotronVLVideoBackend`).

``sampling_options`` lists the options a loader's rule reads; when a class declares it (it is
read from the class itself, never inherited), a :class:`~mediaref.media.video.VideoMediaIO`
refuses any other option when it is built. A subclass that declares none takes any option, as
vLLM's loaders do, and its rule reads what it knows.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from mediaref.media.video._sampling import (
    ALL_FRAMES,
    uniform_frame_indices,
    validate_fps,
    validate_num_frames,
)
from mediaref.media.video.decoders import (
    UnsupportedCodecOptionError,
    VideoDecoderBackend,
    check_video_codec,
    decode_video,
    resolve_video_backend_kwargs,
)
from mediaref.media.video.decoders.base import VideoSourceMetadata, VideoTargetMetadata
from mediaref.media.video.decoders.pyav import decode_pyav_detailed
from mediaref.media.video.loader_registry import (
    VIDEO_LOADER_REGISTRY,
    DecodedFrames,
    VideoLoader,
    VideoMetadata,
    refuse_unknown_options,
)

logger = logging.getLogger(__name__)

# load_bytes parameters besides num_frames and fps, which VideoMediaIO passes itself.
_LOAD_OPTIONS = frozenset({"max_duration", "frame_recovery", "backend"})


@dataclass
class DecodedSample:
    """One codec decode: the frames, the source figures, the indices asked for and those read,
    and what the PyAV codec reports about its work (``details``)."""

    frames: Any
    source: VideoSourceMetadata
    frame_idx: list[int]
    valid: list[int]
    details: dict[str, Any] = field(default_factory=dict)


def decode_sample(
    loader_cls: Any,
    data: bytes,
    target: VideoTargetMetadata,
    options: dict[str, Any],
    *,
    backend: str,
    frame_recovery: bool,
) -> DecodedSample:
    """Decode ``loader_cls``'s sample of ``data`` with the codec ``backend``."""
    sampling_kwargs, codec_kwargs = resolve_video_backend_kwargs(backend, options)
    if backend == "pyav":
        result = decode_pyav_detailed(loader_cls, data, target, sampling_kwargs)
        return DecodedSample(*result.as_tuple(), details=result.details)
    frames, source, frame_idx, valid = decode_video(
        backend,
        loader_cls,
        data,
        target,
        sampling_kwargs,
        codec_kwargs,
        frame_recovery=frame_recovery,
    )
    return DecodedSample(frames, source, frame_idx, valid)


def default_codec(loader: Any) -> str:
    """The codec ``loader.load_bytes`` decodes with when no ``backend`` option is given.

    A loader that spells its default in its ``load_bytes`` signature, as vLLM's loaders (and a
    plugin written like them) do, is taken at its word; a :class:`VideoBackend` that leaves it to
    the class says so in ``default_backend``; any other loader decodes with PyAV.
    """
    parameter = inspect.signature(loader.load_bytes).parameters.get("backend")
    if parameter is not None and isinstance(parameter.default, str):
        return parameter.default
    declared = getattr(loader, "default_backend", None)
    return declared if isinstance(declared, str) else "pyav"


def check_codec_options(
    loader: Any, options: Mapping[str, Any], accepted: frozenset[str] | None, *, name: str
) -> None:
    """Vet a codec-based loader's options: a known, usable codec, no other codec's options,
    ``frame_recovery`` only where supported, and (when ``accepted`` is given) nothing else."""
    codec = options.get("backend", default_codec(loader))
    sampling, _ = resolve_video_backend_kwargs(codec, dict(options))
    if options.get("frame_recovery") and codec not in ("opencv", "pyav"):
        raise UnsupportedCodecOptionError(
            f"frame_recovery is not supported by the {codec!r} backend"
        )
    check_video_codec(codec)
    if accepted is not None:
        refuse_unknown_options(sampling, set(accepted | _LOAD_OPTIONS), name=name)


@VIDEO_LOADER_REGISTRY.register("opencv")
class VideoBackend(VideoLoader):
    """Uniform sampling: ``num_frames`` frames spread evenly over the video, or one every
    ``1/fps`` seconds, whichever gives fewer (-1: no limit); at least one frame.

    The codec is the ``backend`` option (``pyav``, ``opencv``, ``torchcodec``); registered as
    ``opencv``, vLLM's name, it decodes with OpenCV unless told otherwise (``pyav`` is the
    same rule on mediaref's default codec). ``frame_recovery`` replaces an unreadable frame by
    the next readable one (OpenCV; PyAV always does). ``max_duration`` is read by
    duration-aware subclasses only.

    ``fps`` and ``backend`` left out of a ``load_bytes`` call (or None) are the class's
    :attr:`default_fps` and :attr:`default_backend`: a subclass changes its defaults there, and
    every other default is vLLM's.
    """

    decoder_version: ClassVar[str] = "uniform/1"
    sampling_options: ClassVar[frozenset[str] | None] = frozenset()
    _sampling_suffix: ClassVar[str] = ""
    default_fps: ClassVar[float] = -1
    """The rate ``load_bytes`` samples at when the call gives none (-1: no rate cap)."""
    default_backend: ClassVar[VideoDecoderBackend] = "opencv"
    """The codec ``load_bytes`` decodes with when the call names none."""

    @classmethod
    def compute_frames_index_to_sample(
        cls, source: VideoSourceMetadata, target: VideoTargetMetadata, **kwargs: Any
    ) -> list[int]:
        fps = target.fps if target.fps > 0 else None
        return uniform_frame_indices(
            source.total_frames_num, target.num_frames, fps, source.duration
        )

    @classmethod
    def load_bytes(
        cls,
        data: bytes,
        num_frames: int = -1,
        fps: float | None = None,
        max_duration: float = 300,
        frame_recovery: bool = False,
        *,
        backend: VideoDecoderBackend | None = None,
        **kwargs: Any,
    ) -> tuple[DecodedFrames, VideoMetadata]:
        """``(frames, metadata)`` of the frames this loader's rule samples from ``data``.

        ``fps`` and ``backend`` default to :attr:`default_fps` and :attr:`default_backend`.
        ``kwargs``: the rule's options and the codec's (``num_ffmpeg_threads``, ``seek_mode``,
        ``device`` for torchcodec); another codec's option raises ValueError.
        """
        fps, codec = cls._defaults(fps, backend)
        sample = cls._decode_sample(
            data, num_frames, fps, max_duration, frame_recovery, backend=codec, options=kwargs
        )
        return cls._finish(data, sample.frames, cls._metadata(sample, codec))

    @classmethod
    def _finish(
        cls, data: bytes, frames: DecodedFrames, metadata: VideoMetadata
    ) -> tuple[DecodedFrames, VideoMetadata]:
        """What a loader adds to the sampled frames and their metadata (``data`` is the encoded
        video): nothing here; a family's loader pads frames or attaches the bytes."""
        return frames, metadata

    @classmethod
    def _defaults(cls, fps: float | None, backend: str | None) -> tuple[float, str]:
        """``fps`` and ``backend`` with the class's defaults for what a call left out."""
        return (
            cls.default_fps if fps is None else fps,
            cls.default_backend if backend is None else backend,
        )

    @classmethod
    def _decode_sample(
        cls,
        data: bytes,
        num_frames: int,
        fps: float,
        max_duration: float,
        frame_recovery: bool,
        *,
        backend: str,
        options: dict[str, Any],
    ) -> DecodedSample:
        target = VideoTargetMetadata(num_frames, fps, max_duration)
        sample = decode_sample(
            cls, data, target, options, backend=backend, frame_recovery=frame_recovery
        )
        asked = len(set(sample.frame_idx))
        if len(sample.valid) < asked:
            logger.warning(
                "%s video loading: expected %d frames but got %d", backend, asked, len(sample.valid)
            )
        return sample

    @classmethod
    def _metadata(cls, sample: DecodedSample, backend: str) -> VideoMetadata:
        return sample_metadata(cls, sample, f"{backend}{cls._sampling_suffix}")

    @classmethod
    def check_options(cls, options: Mapping[str, Any], *, name: str | None = None) -> None:
        accepted = cls.__dict__.get("sampling_options")
        check_codec_options(cls, options, accepted, name=name or cls.__qualname__)


_HF_METADATA_DETAILS = frozenset({"width", "height"})
"""Of a decode's details, those ``transformers.VideoMetadata`` takes as fields too."""


class DetailedVideoMetadata(dict[str, Any]):
    """A loader's metadata (vLLM's keys, and the frames' ``width`` and ``height``) and, as
    :attr:`details`, everything else the decode saw and did (``header_num_frames``, ``codec``,
    ``num_decoded_frames``, ...). Those stay out of the dict: vLLM's model files hand it to
    ``transformers.VideoMetadata(**metadata)`` (Qwen2.5-VL, Qwen3-VL, GLM-4.1V), which takes no
    other key, so a key vLLM's own loaders never set would fail the request there."""

    details: dict[str, Any]


def sample_metadata(
    loader: type[VideoLoader], sample: DecodedSample, video_backend: str
) -> VideoMetadata:
    """The loader's HF metadata for a decoded sample; what the decode saw is its ``details``
    (:class:`DetailedVideoMetadata`)."""
    metadata = DetailedVideoMetadata(
        loader.create_hf_metadata(
            source=sample.source, valid_frame_indices=sample.valid, video_backend=video_backend
        )
    )
    metadata.details = dict(sample.details)
    for key in _HF_METADATA_DETAILS & sample.details.keys():
        metadata.setdefault(key, sample.details[key])
    return metadata


@VIDEO_LOADER_REGISTRY.register("pyav")
class PyAVVideoBackend(VideoBackend):
    """Uniform sampling decoded with PyAV: mediaref's default ``VLLM_VIDEO_LOADER_BACKEND``.

    Sampling indexes the stream's packets first (exact frame count, no decode), then decodes
    only from the keyframe before each wanted frame when the gap is long; returning every frame
    decodes the stream once. The metadata holds vLLM's keys and the frames' size; what the decode
    saw and did (:mod:`mediaref.media.video.decoders.pyav`) is its ``details``
    (:class:`DetailedVideoMetadata`), so the dict is what HF's ``VideoMetadata`` takes.
    ``num_frames`` must be -1 or positive and ``fps`` a number (None or negative: no rate cap).
    """

    decoder_version: ClassVar[str] = "pyav/1"
    sampling_options: ClassVar[frozenset[str] | None] = frozenset()
    default_backend: ClassVar[VideoDecoderBackend] = "pyav"

    @classmethod
    def load_bytes(
        cls,
        data: bytes,
        num_frames: int = ALL_FRAMES,
        fps: float | None = None,
        max_duration: float = 300,
        frame_recovery: bool = False,
        *,
        backend: VideoDecoderBackend | None = None,
        **kwargs: Any,
    ) -> tuple[DecodedFrames, VideoMetadata]:
        num_frames = validate_num_frames(num_frames)
        rate = validate_fps(fps)
        return super().load_bytes(
            data,
            num_frames,
            -1 if rate is None else rate,
            max_duration,
            frame_recovery,
            backend=backend,
            **kwargs,
        )


@VIDEO_LOADER_REGISTRY.register("nemotron_vl")
class NemotronVLVideoBackend(VideoBackend):
    """Uniform sampling whose metadata also carries the encoded video (``original_video_bytes``):
    Nemotron-VL's processor reads the container again."""

    decoder_version: ClassVar[str] = "nemotron_vl/1"
    sampling_options: ClassVar[frozenset[str] | None] = frozenset()
    default_backend: ClassVar[VideoDecoderBackend] = "pyav"

    @classmethod
    def _finish(
        cls, data: bytes, frames: DecodedFrames, metadata: VideoMetadata
    ) -> tuple[DecodedFrames, VideoMetadata]:
        return frames, {**metadata, "original_video_bytes": data}


__all__ = [
    "DecodedSample",
    "DetailedVideoMetadata",
    "NemotronVLVideoBackend",
    "PyAVVideoBackend",
    "VideoBackend",
    "check_codec_options",
    "decode_sample",
    "default_codec",
]
