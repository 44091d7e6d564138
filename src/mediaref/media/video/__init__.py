"""Video decoding: ``VideoMediaIO``, the loader registry, its loaders and codecs.

- :class:`VideoMediaIO` (vLLM's ``vllm.multimodal.media.video``) decodes with a loader from
  ``VIDEO_LOADER_REGISTRY``; :class:`VideoEmbeddingMediaIO` loads pre-computed embeddings;
  :class:`RawBytesVideoMediaIO` hands models the container itself.
- :mod:`~mediaref.media.video.loader_registry`: the registry and the :class:`VideoLoader` base.
- The loaders vLLM registers, under vLLM's names, each sampling as its model's HF video
  processor does (:class:`VideoBackend` and its subclasses, :class:`Molmo2VideoBackend`,
  :class:`OpenCVDynamicOpenPanguVideoBackend`), plus ``pyav``
  (:class:`PyAVVideoBackend`), mediaref's default.
- :mod:`~mediaref.media.video.decoders`: the codecs they decode with (``pyav`` by default;
  ``opencv`` and ``torchcodec`` when their packages are installed).
- :class:`FrameScaling` (mediaref's own, opt-in): ``VideoMediaIO(..., frame_scaling=...)``
  decodes frames straight to a target size with FFmpeg's scaler (approximate; never a default).

``mediaref.video`` and ``mediaref.video_decoders`` are vLLM's public paths for these names.
Importing this package registers every built-in loader.
"""

from __future__ import annotations

from mediaref.media.base import MediaIO, MediaWithBytes
from mediaref.media.image import MAGIC_NUMPY_PREFIX, ImageMediaIO
from mediaref.media.sparse_utils import (  # vLLM's modules hold it too; one function for all
    check_sparse_tensor_invariants_threadsafe as check_sparse_tensor_invariants_threadsafe,
)
from mediaref.media.video._backend import NemotronVLVideoBackend, PyAVVideoBackend, VideoBackend
from mediaref.media.video._backends_glm import (
    DynamicVideoBackend,
    Glm5NextVideoBackend,
    GLM46VVideoBackend,
    GLMGAVideoBackend,
)
from mediaref.media.video._backends_misc import (
    EmbeddingGemma2VideoBackend,
    OpenCVDynamicOpenPanguVideoBackend,
)
from mediaref.media.video._backends_molmo2 import Molmo2VideoBackend
from mediaref.media.video._backends_qwen import (
    ClefOmniVideoBackend,
    Qwen2VLVideoBackend,
    Qwen3VLVideoBackend,
)
from mediaref.media.video._frame_scaling import FrameScaling
from mediaref.media.video._frames_ops import (
    rescale_video_size,
    resize_video,
    sample_frames_from_video,
)
from mediaref.media.video._jpeg_frames import DEFAULT_JPEG_FRAMES_FPS, load_jpeg_frames
from mediaref.media.video._media_io import VideoEmbeddingMediaIO, VideoMediaIO
from mediaref.media.video._raw_bytes import RawBytesVideoMediaIO
from mediaref.media.video._sampling import sample_frame_indices
from mediaref.media.video.decoders import incompatible_backend_options
from mediaref.media.video.loader_registry import (
    VIDEO_LOADER_REGISTRY,
    DecodedFrames,
    VideoFrames,
    VideoLoader,
    VideoLoaderRegistry,
    VideoMetadata,
    get_video_loader_backend_for_processor,
)

__all__ = [
    "DEFAULT_JPEG_FRAMES_FPS",
    "MAGIC_NUMPY_PREFIX",
    "VIDEO_LOADER_REGISTRY",
    "ClefOmniVideoBackend",
    "DecodedFrames",
    "DynamicVideoBackend",
    "EmbeddingGemma2VideoBackend",
    "FrameScaling",
    "GLM46VVideoBackend",
    "GLMGAVideoBackend",
    "Glm5NextVideoBackend",
    "ImageMediaIO",
    "MediaIO",
    "MediaWithBytes",
    "Molmo2VideoBackend",
    "NemotronVLVideoBackend",
    "OpenCVDynamicOpenPanguVideoBackend",
    "PyAVVideoBackend",
    "Qwen2VLVideoBackend",
    "Qwen3VLVideoBackend",
    "RawBytesVideoMediaIO",
    "VideoBackend",
    "VideoEmbeddingMediaIO",
    "VideoFrames",
    "VideoLoader",
    "VideoLoaderRegistry",
    "VideoMediaIO",
    "VideoMetadata",
    "get_video_loader_backend_for_processor",
    "incompatible_backend_options",
    "load_jpeg_frames",
    "rescale_video_size",
    "resize_video",
    "sample_frame_indices",
    "sample_frames_from_video",
]
