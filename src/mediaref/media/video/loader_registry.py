"""The video loader registry (backend name -> loader class) and the loader base class.

A loader turns an encoded container into ``(frames, metadata)``: frames a uint8 RGB array of
shape (T, H, W, 3), metadata a dict with vLLM's keys (``total_num_frames``, ``fps``,
``duration``, ``video_backend``, ``frames_indices``, ``do_sample_frames``). Most loaders split
the work as vLLM's do: a *sampling rule* (:meth:`VideoLoader.compute_frames_index_to_sample`,
which sees only the container's frame count, rate and duration) and a *codec* that opens the
payload and decodes the chosen frames (``pyav``, ``opencv``, ``torchcodec``: see
:mod:`mediaref.media.video.decoders`). Registering a loader may bind it to HF video processor
classes, so a model's processor picks its sampling rule::

    @VIDEO_LOADER_REGISTRY.register("mine", video_processor="MyVideoProcessor")
    class MyLoader(VideoBackend):
        decoder_version = "mine/1"

        @classmethod
        def compute_frames_index_to_sample(cls, source, target, **kwargs): ...

``decoder_version`` names a loader's algorithm in the cache key: bump it when the same settings
start returning different frames. It is read from the class itself, never inherited, so two
sampling rules never share keys; a loader without one is keyed by its qualified name.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

import numpy as np
import numpy.typing as npt

from mediaref.media.extensions import ExtensionManager
from mediaref.media.video.decoders.base import VideoSourceMetadata, VideoTargetMetadata

if TYPE_CHECKING:
    import torch

_R = TypeVar("_R", bound=type)

VideoFrames = npt.NDArray[np.uint8]
"""Decoded frames on the host: uint8 RGB, shape (num_frames, height, width, 3)."""

DecodedFrames: TypeAlias = "npt.NDArray[Any] | torch.Tensor"
"""Decoded frames as a loader returns them: a host array, or a device tensor when a GPU codec
decoded them (torchcodec with ``device="cuda"``)."""

VideoMetadata = dict[str, Any]
"""vLLM's keys: total_num_frames, fps, duration, video_backend, frames_indices, do_sample_frames."""


class VideoLoader:
    """The base of video loaders: every method is a classmethod, so the class serves the calls.

    A subclass implements :meth:`load_bytes`; one that samples with a codec implements
    :meth:`compute_frames_index_to_sample` and may adjust the container's figures first
    (:meth:`_prepare_source`). :meth:`check_options` vets ``--media-io-kwargs`` when a
    :class:`~mediaref.media.video.VideoMediaIO` is built, so a bad option fails at configuration
    time rather than on the first request.
    """

    @classmethod
    def compute_frames_index_to_sample(
        cls, source: VideoSourceMetadata, target: VideoTargetMetadata, **kwargs: Any
    ) -> list[int]:
        """The indices of the frames to decode; a sampling loader overrides this hook."""
        raise NotImplementedError(
            f"{cls.__qualname__} has no sampling rule: override compute_frames_index_to_sample"
        )

    @classmethod
    def _prepare_source(cls, source: VideoSourceMetadata) -> VideoSourceMetadata:
        # A rule that fills in what a container leaves out (an unknown rate or duration) says so
        # here; the codec hands the adjusted figures to the rule and to the metadata.
        return source

    @classmethod
    def read_frames(
        cls,
        cap: Any,
        frame_idx: list[int],
        total_frames_num: int,
        *,
        frame_recovery: bool = False,
    ) -> tuple[VideoFrames, list[int]]:
        """Read ``frame_idx`` from an open ``cv2.VideoCapture`` (the OpenCV codec's read)."""
        from mediaref.media.video.decoders.opencv import OpenCVVideoBackendMixin

        return OpenCVVideoBackendMixin.read_frames(
            cap, frame_idx, total_frames_num, frame_recovery=frame_recovery
        )

    @classmethod
    def load_bytes(cls, data: bytes, **kwargs: Any) -> tuple[DecodedFrames, VideoMetadata]:
        """``(frames, metadata)`` of the encoded video ``data``; every loader implements this."""
        raise NotImplementedError(f"{cls.__qualname__} does not implement load_bytes")

    @classmethod
    def create_hf_metadata(
        cls,
        source: VideoSourceMetadata,
        valid_frame_indices: list[int],
        video_backend: str,
    ) -> VideoMetadata:
        """vLLM's metadata for the frames kept: the source's figures, which frames they are,
        and ``do_sample_frames`` True only when every frame was kept (HF may still sample)."""
        return {
            "total_num_frames": source.total_frames_num,
            "fps": source.original_fps,
            "duration": source.duration,
            "video_backend": video_backend,
            "frames_indices": list(valid_frame_indices),
            "do_sample_frames": len(valid_frame_indices) == source.total_frames_num,
        }

    @classmethod
    def check_options(cls, options: Mapping[str, Any], *, name: str | None = None) -> None:
        """Refuse options :meth:`load_bytes` cannot take (``num_frames`` and ``fps`` aside).

        A loader whose ``load_bytes`` takes ``**kwargs`` answers for its options itself, at
        decode time, as vLLM's do; subclasses that know their options override this.
        """
        check_signature_options(cls.load_bytes, options, name=name or cls.__qualname__)


def check_signature_options(
    load_bytes: Callable[..., Any], options: Mapping[str, Any], *, name: str
) -> None:
    """TypeError naming the options ``load_bytes``'s signature has no parameter for."""
    parameters = inspect.signature(load_bytes).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return
    accepted = {
        p.name
        for p in parameters
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    } - {"data", "num_frames", "fps"}
    refuse_unknown_options(options, accepted, name=name)


def refuse_unknown_options(options: Mapping[str, Any], accepted: set[str], *, name: str) -> None:
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise TypeError(
            f"video backend {name!r} does not accept the option(s) {unknown}; "
            f"its options are {sorted(accepted)} besides num_frames, fps and video_backend"
        )


def check_loader_options(loader: type[Any], options: Mapping[str, Any], *, name: str) -> None:
    """Vet ``options`` for ``loader``: its own :meth:`VideoLoader.check_options` when it has one
    (a plugin need not subclass :class:`VideoLoader`), else its ``load_bytes`` signature."""
    check = getattr(loader, "check_options", None)
    if callable(check):
        check(options, name=name)
    else:
        check_signature_options(loader.load_bytes, options, name=name)


class VideoLoaderRegistry(ExtensionManager[Any]):
    """Backend name -> loader class (vLLM's ``VideoLoaderRegistry``).

    ``get(name)`` gives the class, ``load(name)`` builds an instance as vLLM's does (loaders'
    methods are classmethods, so either serves the same calls). Beyond vLLM's, a registration
    is refused when its name or one of its HF video processor classes is already bound to
    another loader, and nothing is recorded then; ``unregister`` drops every binding of a name.
    """

    def __init__(self) -> None:
        super().__init__("video loader backend")
        self.processor2backend: dict[str, str] = {}
        self._requires_gpu: dict[str, bool] = {}

    def register(
        self,
        name: str,
        *,
        video_processor: str | tuple[str, ...] | None = None,
        requires_gpu: bool = False,
    ) -> Callable[[_R], _R]:
        """Class decorator: register the class as ``name``, bound to the HF video processor
        class name(s) ``video_processor``; ``requires_gpu`` marks a loader that decodes on a GPU
        (a request may not select it unless the server was started with it)."""
        processors = _processor_names(video_processor)

        def wrap(cls: _R) -> _R:
            self._check_name_free(name, cls)
            for processor in processors:
                bound = self.processor2backend.get(processor)
                if bound is not None and bound != name:
                    raise ValueError(
                        f"video processor {processor!r} is already bound to the video loader "
                        f"backend {bound!r}; unregister it first"
                    )
            self.name2class[name] = cls
            self._requires_gpu[name] = requires_gpu
            for processor in processors:
                self.processor2backend[processor] = name
            return cls

        return wrap

    def unregister(self, name: str) -> None:
        super().unregister(name)
        self._requires_gpu.pop(name, None)
        for processor in [p for p, bound in self.processor2backend.items() if bound == name]:
            del self.processor2backend[processor]

    def get_backend_for_video_processor(self, video_processor: str | None) -> str | None:
        """The backend bound to the HF video processor class named ``video_processor``, if any."""
        if video_processor is None:
            return None
        return self.processor2backend.get(video_processor)

    def register_gpu_codec(self, name: str) -> None:
        """Mark ``name`` as decoding on a GPU, without registering a loader under it."""
        self._requires_gpu[name] = True

    def backend_requires_gpu(self, name: str) -> bool:
        return self._requires_gpu.get(name, False)


def _processor_names(video_processor: str | tuple[str, ...] | None) -> tuple[str, ...]:
    if video_processor is None:
        return ()
    if isinstance(video_processor, str):
        return (video_processor,)
    if isinstance(video_processor, tuple) and all(isinstance(p, str) for p in video_processor):
        return video_processor
    raise TypeError("video_processor must be a class name or a tuple of class names")


VIDEO_LOADER_REGISTRY = VideoLoaderRegistry()
# vLLM's GPU codecs: NVDEC through PyNvVideoCodec or DeepStream. Neither is part of mediaref
# (docs/compat.md), but a request naming one is still recognised as asking for a GPU decode.
VIDEO_LOADER_REGISTRY.register_gpu_codec("pynvvideocodec")
VIDEO_LOADER_REGISTRY.register_gpu_codec("deepstream")


def get_video_loader_backend_for_processor(video_processor: str | None) -> str | None:
    """The loader backend bound to the HF video processor class named ``video_processor``."""
    return VIDEO_LOADER_REGISTRY.get_backend_for_video_processor(video_processor)


__all__ = [
    "VIDEO_LOADER_REGISTRY",
    "DecodedFrames",
    "VideoFrames",
    "VideoLoader",
    "VideoLoaderRegistry",
    "VideoMetadata",
    "check_loader_options",
    "check_signature_options",
    "get_video_loader_backend_for_processor",
    "refuse_unknown_options",
]
