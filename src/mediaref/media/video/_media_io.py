"""vLLM's ``vllm.multimodal.media.video``: ``VideoMediaIO`` and ``VideoEmbeddingMediaIO``.

``VideoMediaIO``: a registered loader turns a container into frames and metadata.

The loader is ``video_backend`` (a registry name), else ``VLLM_VIDEO_LOADER_BACKEND``; its
options, and the codec's, are vetted when the decoder is built, so a misspelled option, an
unknown backend or a codec that cannot run here fails at configuration time rather than on the
first request. The decode spec, hence the key, holds the backend, its version tag,
``num_frames``, ``fps`` and every other loader option. Refs are built from the bytes alone.

``video/jpeg`` payloads are the other form vLLM accepts: base64 JPEG frames joined by commas,
of which the first ``num_frames`` are kept (vLLM's memory protection), decoded frame by frame
with the ``image_io`` decoder; their metadata names the backend ``jpeg_sequence``, takes
``fps`` (1 by default, as vLLM's) as the sequence's rate, and may be told the sampling the
client did: ``frames_indices``, ``total_num_frames``, ``duration``, ``do_sample_frames``.

Caps (``MediaTooLargeError``, HTTP 413): every frame, of a container or of a ``video/jpeg``
sequence, is an image under ``VLLM_MAX_IMAGE_PIXELS``; the kept frames' RGB bytes are charged
to the request's ``VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES`` budget before they are allocated (to
``image_io.decoded_budget`` when it is set, as in vLLM). Containers open through the video
allow-list of demuxers, whatever the codec.

``frame_scaling`` (keyword-only, a :class:`~mediaref.media.video._frame_scaling.FrameScaling`;
never set by default, and not settable by a request) is an opt-in approximate mode: the PyAV
codec decodes the kept frames straight to the scaling's target size with FFmpeg's scaler, under
the same caps (the budget is charged for the target frames). It is in the decode spec, so scaled
and exact decodes never share a cache entry; a loader that does not decode with PyAV refuses it.

``VideoEmbeddingMediaIO`` loads pre-computed video embeddings sent in place of a video, on the
embedding loader every modality shares (:mod:`mediaref.media._embedding_io`).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from PIL import Image

from mediaref import envs
from mediaref.media._embedding_io import EmbeddingMediaIO
from mediaref.media.base import (
    JPEG_FRAMES_MEDIA_TYPE,
    DecodeSpec,
    MediaIO,
    MediaRef,
    is_jpeg_frames,
)
from mediaref.media.decode_budget import MediaDecodedBudget, decode_budget_scope
from mediaref.media.video._backend import VideoBackend, default_codec
from mediaref.media.video._frame_scaling import SCALING_CODECS, FrameScaling, frame_scaling_scope
from mediaref.media.video._jpeg_frames import (
    JPEG_FRAMES_BACKEND,
    JPEG_METADATA_OPTIONS,
    check_jpeg_metadata_options,
    load_jpeg_frames,
)
from mediaref.media.video._raw_bytes import video_max_bytes
from mediaref.media.video._sampling import validate_fps, validate_num_frames
from mediaref.media.video.decoders import incompatible_backend_options
from mediaref.media.video.loader_registry import (
    VIDEO_LOADER_REGISTRY,
    DecodedFrames,
    VideoMetadata,
    check_loader_options,
)

if TYPE_CHECKING:
    from mediaref.media.image import ImageMediaIO

logger = logging.getLogger(__name__)

# Options a request may not change: GPU decoder sizing (its memory is reserved at startup) and
# the decode device (it decides where the processor pipeline runs); mediaref's opt-in frame
# scaling (a deployment's choice, and no JSON value could carry its rule anyway).
_STARTUP_ONLY_OPTIONS = (
    "hw_decoders",
    "max_width",
    "max_height",
    "pool_size",
    "device",
    "frame_scaling",
)
_warned_gpu_backends: set[tuple[str, str]] = set()


class VideoMediaIO(MediaIO[tuple[DecodedFrames, VideoMetadata]]):
    """Decodes videos into ``(frames, metadata)`` with a loader from ``VIDEO_LOADER_REGISTRY``.

    ``num_frames``: -1 for every frame, N > 0 for at most N frames (the loader's rule decides
    which; rate-driven loaders ignore it). ``kwargs``: ``video_backend`` (a registry name),
    ``fps`` (the loader's rate; for ``video/jpeg``, the sequence's rate; None or negative: the
    loader's default), the ``video/jpeg`` metadata options, ``backend`` (the codec: ``pyav``,
    ``opencv``, ``torchcodec``) and the loader's and codec's own options.
    """

    modality: ClassVar[str] = "video"

    @classmethod
    def merge_kwargs(
        cls, default_kwargs: Mapping[str, Any] | None, runtime_kwargs: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        """The deployment's ``default_kwargs`` with a request's ``runtime_kwargs`` on top, as vLLM
        merges them: a request cannot change startup-only options nor select a GPU loader or
        codec the deployment did not; setting one of ``num_frames`` and ``fps`` drops the
        default of the other (they interact); choosing another codec drops the defaults only
        the previous codec takes."""
        defaults = dict(default_kwargs or {})
        runtime = {
            k: v for k, v in (runtime_kwargs or {}).items() if k not in _STARTUP_ONLY_OPTIONS
        }
        for key in ("video_backend", "backend"):
            requested = runtime.get(key)
            if (
                requested
                and VIDEO_LOADER_REGISTRY.backend_requires_gpu(requested)
                and defaults.get(key) != requested
            ):
                if (key, requested) not in _warned_gpu_backends:
                    _warned_gpu_backends.add((key, requested))
                    logger.warning(
                        "ignoring the request's %s=%r: a GPU video backend the server was not "
                        "started with",
                        key,
                        requested,
                    )
                del runtime[key]
        merged = super().merge_kwargs(defaults, runtime)
        if runtime:
            if "num_frames" in runtime and "fps" not in runtime:
                merged.pop("fps", None)
            elif "fps" in runtime and "num_frames" not in runtime:
                merged.pop("num_frames", None)
            codec = runtime.get("backend")
            if codec and codec != defaults.get("backend"):
                for name in incompatible_backend_options(defaults.get("backend"), codec):
                    merged.pop(name, None)
        return merged

    def __init__(
        self,
        image_io: ImageMediaIO,
        num_frames: int = 32,
        *,
        frame_scaling: FrameScaling | None = None,
        **kwargs: Any,
    ) -> None:
        self.image_io = image_io
        self.num_frames = validate_num_frames(num_frames)
        backend = kwargs.pop("video_backend", None)
        self.video_backend: str = backend or envs.VLLM_VIDEO_LOADER_BACKEND
        self.fps = validate_fps(kwargs.pop("fps", None))
        self.video_loader: type[Any] = VIDEO_LOADER_REGISTRY.get(self.video_backend)
        self.jpeg_metadata = check_jpeg_metadata_options(
            {k: kwargs.pop(k) for k in JPEG_METADATA_OPTIONS if k in kwargs}
        )
        self.kwargs = kwargs
        check_loader_options(self.video_loader, kwargs, name=self.video_backend)
        self._spec = DecodeSpec(
            modality=self.modality,
            decoder=_decoder_version(self.video_loader),
            video_backend=self.video_backend,
            num_frames=self.num_frames,
            fps=self.fps,
            loader_kwargs=kwargs,
        )
        self.frame_scaling: FrameScaling | None = None
        if frame_scaling is not None:
            self._set_frame_scaling(frame_scaling)

    def with_frame_scaling(self, frame_scaling: FrameScaling) -> VideoMediaIO:
        """A copy of this decoder that decodes frames straight to ``frame_scaling``'s target
        (``ValueError`` when its loader does not decode with PyAV)."""
        scaled = copy.copy(self)
        scaled.kwargs = dict(self.kwargs)
        scaled._set_frame_scaling(frame_scaling)
        return scaled

    def supports_frame_scaling(self) -> bool:
        """Whether this decoder's loader decodes with a codec that honours a frame scaling."""
        loader = self.video_loader
        if not (isinstance(loader, type) and issubclass(loader, VideoBackend)):
            return False  # a loader of its own: its codec (if any) is unknown
        codec = self.kwargs.get("backend", default_codec(self.video_loader))
        return codec in SCALING_CODECS

    def _set_frame_scaling(self, frame_scaling: FrameScaling) -> None:
        if not isinstance(frame_scaling, FrameScaling):
            raise ValueError(
                f"frame_scaling must be a FrameScaling, got {type(frame_scaling).__name__}"
            )
        if not self.supports_frame_scaling():
            raise ValueError(
                f"frame_scaling needs a loader that decodes with PyAV; the "
                f"{self.video_backend!r} loader here does not"
            )
        self.frame_scaling = frame_scaling
        # Only a scaled decoder's spec names it: exact decoders keep their keys.
        self._spec = self._spec.extend(frame_scaling=frame_scaling.spec_settings())

    def get_decode_spec(self) -> DecodeSpec:
        return self._spec

    def get_max_bytes(self) -> int | None:
        return video_max_bytes()

    def load_bytes(self, data: bytes) -> tuple[DecodedFrames, VideoMetadata]:
        options = dict(self.kwargs)
        if self.fps is not None:  # otherwise the loader's own default rate applies
            options["fps"] = self.fps
        # An exact decoder sets None too: a decode nested in a scaled one stays exact.
        with self._budget_scope(), frame_scaling_scope(self.frame_scaling):
            video: tuple[DecodedFrames, VideoMetadata] = self.video_loader.load_bytes(
                data, num_frames=self.num_frames, **options
            )
            return video

    def load_base64(self, media_type: str, data: str) -> tuple[DecodedFrames, VideoMetadata]:
        if is_jpeg_frames(media_type):
            return self._load_jpeg_frames(data.encode("utf-8"))
        return super().load_base64(media_type, data)

    def load_base64_ref(
        self, media_type: str, data: str
    ) -> MediaRef[tuple[DecodedFrames, VideoMetadata]]:
        if not is_jpeg_frames(media_type):
            return super().load_base64_ref(media_type, data)
        # Keyed by the base64 text itself: splitting and decoding the frames is decode work.
        payload = data.encode("utf-8")
        self.check_encoded_size(len(payload))
        return MediaRef(payload, lambda: self._load_jpeg_frames(payload), self._jpeg_frames_spec())

    def _load_jpeg_frames(self, payload: bytes) -> tuple[DecodedFrames, VideoMetadata]:
        with self._budget_scope():
            return load_jpeg_frames(
                payload, self.image_io, self.fps, self.num_frames, self.jpeg_metadata
            )

    def _budget_scope(self) -> AbstractContextManager[None]:
        # vLLM charges a video's frames to its image decoder's decoded_budget when one is set;
        # otherwise the decode charges the running request's budget (decode_budget).
        budget = getattr(self.image_io, "decoded_budget", None)
        if isinstance(budget, MediaDecodedBudget):
            return decode_budget_scope(budget)
        return nullcontext()

    def encode_base64(self, media: Any, *, video_format: str = "JPEG") -> str:
        """``media`` (frames) as a ``video/jpeg`` payload: base64 JPEG frames joined by commas."""
        if video_format.upper() != "JPEG":
            raise ValueError(f"video_format must be 'JPEG', got {video_format!r}")
        return ",".join(
            self.image_io.encode_base64(Image.fromarray(np.asarray(frame)), image_format="JPEG")
            for frame in media
        )

    def _jpeg_frames_spec(self) -> DecodeSpec:
        # The container backend does not apply; num_frames does (the first num_frames are kept).
        return DecodeSpec(
            modality=self.modality,
            decoder=f"{JPEG_FRAMES_BACKEND}/1",
            video_backend=JPEG_FRAMES_BACKEND,
            media_type=JPEG_FRAMES_MEDIA_TYPE,
            num_frames=self.num_frames,
            fps=self.fps,
            image=self.image_io.get_decode_spec().settings,
            **({"metadata": self.jpeg_metadata} if self.jpeg_metadata else {}),
        )

    def __repr__(self) -> str:
        options = "".join(f", {k}={v!r}" for k, v in self.kwargs.items())
        if self.frame_scaling is not None:
            options += f", frame_scaling={self.frame_scaling.spec_settings()!r}"
        return (
            f"VideoMediaIO(num_frames={self.num_frames}, video_backend={self.video_backend!r}, "
            f"fps={self.fps!r}{options})"
        )


def _decoder_version(loader: type[Any]) -> str:
    # Read from the class itself: a subclass with another sampling rule must not share its
    # parent's keys. A loader without a tag is keyed by its qualified name.
    version = loader.__dict__.get("decoder_version")
    return version if isinstance(version, str) else f"{loader.__module__}.{loader.__qualname__}"


class VideoEmbeddingMediaIO(EmbeddingMediaIO):
    """Loads ``video_embeds``: a ``.npy`` array (no pickle) or a ``torch.save``'d tensor (zip
    format, ``weights_only``; a sparse one is checked and densified), its declared size checked
    against ``VLLM_MAX_EMBED_DECODE_BYTES`` before anything is allocated. Every refusal is
    :class:`~mediaref.exceptions.VLLMValidationError` naming ``video_embeds``
    (:mod:`mediaref.media._embedding_io`)."""

    modality: ClassVar[str] = "video"
    parameter: ClassVar[str] = "video_embeds"

    def __init__(self) -> None:
        super().__init__()


__all__ = ["VideoEmbeddingMediaIO", "VideoMediaIO"]
