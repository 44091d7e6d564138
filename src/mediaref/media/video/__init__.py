"""Video decoding: a registered loader backend turns a container into frames and metadata.

:class:`VideoMediaIO` resolves its backend (``video_backend``, else ``VLLM_VIDEO_LOADER_BACKEND``)
and validates every option when it is built, so a misspelled option or an unknown backend fails
at configuration time rather than on the first request. The decode spec, hence the key, holds the
backend, its version tag, ``num_frames``, ``fps`` and every other loader option. Refs are built
from the bytes alone: reading a container header costs a demuxer open, and nothing in it is
needed before decode time (the caps below are checked from the headers when the decode starts,
before any frame is decoded). A payload that will not decode fails at decode time::

    ValueError("Failed to decode video: <reason>")

``video/jpeg`` payloads are the other form vLLM accepts: base64 JPEG frames joined by commas, of
which the first ``num_frames`` are kept (vLLM's memory protection), decoded frame by frame with
the ``image_io`` decoder; their metadata names the backend ``jpeg_sequence``.
:class:`RawBytesVideoMediaIO` is the decoder for models that want the container itself.

Caps (``MediaTooLargeError``, HTTP 413): every frame, of a container or of a ``video/jpeg``
sequence, is an image under ``VLLM_MAX_IMAGE_PIXELS``, checked from headers before decoding; the
kept frames' RGB bytes are charged to the request's ``VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES`` budget
before they are allocated (to ``image_io.decoded_budget`` when it is set, as in vLLM). Containers
open through the video allow-list of demuxers
(:mod:`mediaref.media._pyav_open`), so a payload naming other files or URLs is refused.
"""

from __future__ import annotations

import inspect
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from PIL import Image

from mediaref import envs
from mediaref.media.base import (
    JPEG_FRAMES_MEDIA_TYPE,
    DecodeSpec,
    MediaIO,
    MediaRef,
    is_jpeg_frames,
)
from mediaref.media.decode_budget import MediaDecodedBudget, decode_budget_scope
from mediaref.media.video._jpeg_frames import (
    DEFAULT_JPEG_FRAMES_FPS,
    JPEG_FRAMES_BACKEND,
    load_jpeg_frames,
)
from mediaref.media.video._pyav import PyAVVideoBackend  # importing it registers "pyav"
from mediaref.media.video._raw_bytes import (
    RawBytesVideoMediaIO,
    video_max_bytes,
)
from mediaref.media.video._sampling import sample_frame_indices, validate_fps, validate_num_frames
from mediaref.media.video.loader_registry import (
    VIDEO_LOADER_REGISTRY,
    VideoFrames,
    VideoLoader,
    VideoLoaderRegistry,
    VideoMetadata,
)

if TYPE_CHECKING:
    from mediaref.media.image import ImageMediaIO


class VideoMediaIO(MediaIO[tuple[VideoFrames, VideoMetadata]]):
    """Decodes videos into ``(frames, metadata)`` with a loader from ``VIDEO_LOADER_REGISTRY``.

    ``num_frames``: -1 for every frame, N > 0 for N frames spread uniformly over the video.
    ``kwargs``: ``video_backend`` (a registry name), ``fps`` (sample at most this many frames per
    second of video; for ``video/jpeg``, the rate of the frame sequence) and the backend's own
    options, which must be in its ``load_bytes`` signature.
    """

    modality: ClassVar[str] = "video"

    def __init__(self, image_io: ImageMediaIO, num_frames: int = 32, **kwargs: Any) -> None:
        self.image_io = image_io
        self.num_frames = validate_num_frames(num_frames)
        backend = kwargs.pop("video_backend", None)
        self.video_backend: str = backend or envs.VLLM_VIDEO_LOADER_BACKEND
        self.fps = validate_fps(kwargs.pop("fps", None))
        self.video_loader: type[VideoLoader] = VIDEO_LOADER_REGISTRY.get(self.video_backend)
        self.kwargs = kwargs
        _check_loader_options(self.video_loader, self.video_backend, kwargs)
        self._spec = DecodeSpec(
            modality=self.modality,
            decoder=_decoder_version(self.video_loader),
            video_backend=self.video_backend,
            num_frames=self.num_frames,
            fps=self.fps,
            loader_kwargs=kwargs,
        )

    def get_decode_spec(self) -> DecodeSpec:
        return self._spec

    def get_max_bytes(self) -> int | None:
        return video_max_bytes()

    def load_bytes(self, data: bytes) -> tuple[VideoFrames, VideoMetadata]:
        with self._budget_scope():
            return self.video_loader.load_bytes(
                data, num_frames=self.num_frames, fps=self.fps, **self.kwargs
            )

    def load_base64(self, media_type: str, data: str) -> tuple[VideoFrames, VideoMetadata]:
        if is_jpeg_frames(media_type):
            return self._load_jpeg_frames(data.encode("utf-8"))
        return super().load_base64(media_type, data)

    def load_base64_ref(
        self, media_type: str, data: str
    ) -> MediaRef[tuple[VideoFrames, VideoMetadata]]:
        if not is_jpeg_frames(media_type):
            return super().load_base64_ref(media_type, data)
        # Keyed by the base64 text itself: splitting and decoding the frames is decode work.
        payload = data.encode("utf-8")
        self.check_encoded_size(len(payload))
        return MediaRef(payload, lambda: self._load_jpeg_frames(payload), self._jpeg_frames_spec())

    def _load_jpeg_frames(self, payload: bytes) -> tuple[VideoFrames, VideoMetadata]:
        with self._budget_scope():
            return load_jpeg_frames(payload, self.image_io, self.fps, self.num_frames)

    def _budget_scope(self) -> AbstractContextManager[None]:
        # vLLM charges a video's frames to its image decoder's decoded_budget when one is set;
        # otherwise the decode charges the running request's budget (decode_budget).
        budget = getattr(self.image_io, "decoded_budget", None)
        if isinstance(budget, MediaDecodedBudget):
            return decode_budget_scope(budget)
        return nullcontext()

    def encode_base64(self, media: VideoFrames, *, video_format: str = "JPEG") -> str:
        """``media`` as a ``video/jpeg`` payload: base64 JPEG frames joined by commas."""
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
        )

    def __repr__(self) -> str:
        options = "".join(f", {k}={v!r}" for k, v in self.kwargs.items())
        return (
            f"VideoMediaIO(num_frames={self.num_frames}, video_backend={self.video_backend!r}, "
            f"fps={self.fps!r}{options})"
        )


def _decoder_version(loader: type[VideoLoader]) -> str:
    # A loader written for vLLM's registry has no version tag; its qualified name still keeps
    # its keys apart from other backends'.
    version = getattr(loader, "decoder_version", None)
    return version if isinstance(version, str) else f"{loader.__module__}.{loader.__qualname__}"


def _check_loader_options(loader: type[VideoLoader], backend: str, options: dict[str, Any]) -> None:
    parameters = inspect.signature(loader.load_bytes).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return  # the loader takes any option and answers for them itself
    accepted = {
        p.name
        for p in parameters
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    } - {"data", "num_frames", "fps"}
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise TypeError(
            f"video backend {backend!r} does not accept the option(s) {unknown}; "
            f"its options are {sorted(accepted)} besides num_frames, fps and video_backend"
        )


__all__ = [
    "DEFAULT_JPEG_FRAMES_FPS",
    "VIDEO_LOADER_REGISTRY",
    "PyAVVideoBackend",
    "RawBytesVideoMediaIO",
    "VideoFrames",
    "VideoLoader",
    "VideoLoaderRegistry",
    "VideoMediaIO",
    "VideoMetadata",
    "load_jpeg_frames",
    "sample_frame_indices",
]
