"""A Qwen2-VL family whose processor takes encoded video containers and opens them itself.

Some models want the container rather than frames (their processor reads timestamps or samples
on its own schedule). They declare it through the decoder hook: ``get_media_io("video")``
returns :class:`~mediaref.media.video.RawBytesVideoMediaIO`, whose "decode" is the identity and
whose spec says ``video_decode: "raw_bytes"``. The choice therefore lives in the key, so a cache
hit and a miss hand the processor the same thing, and nothing reaches for ``MediaRef.data``.

Select it with ``ModelConfig(model=<a Qwen2-VL directory>, family="qwen2_vl_raw_video")``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from mediaref.media.base import MediaIO
from mediaref.media.video import VIDEO_LOADER_REGISTRY, RawBytesVideoMediaIO
from mediaref.models.qwen2_vl import (
    Qwen2VLDummyInputsBuilder,
    Qwen2VLMultiModalProcessor,
    Qwen2VLProcessingInfo,
)
from mediaref.registry import MULTIMODAL_REGISTRY

if TYPE_CHECKING:
    from transformers import BatchFeature

DEFAULT_NUM_FRAMES = 8


class Qwen2VLRawVideoProcessingInfo(Qwen2VLProcessingInfo):
    def get_media_io(
        self, modality: str, media_io_kwargs: Mapping[str, Any] | None = None
    ) -> MediaIO[Any]:
        if modality == "video":
            return RawBytesVideoMediaIO()
        return super().get_media_io(modality, media_io_kwargs)


def open_container_frames(container: bytes, num_frames: int) -> Any:
    """The processor's own container read: ``num_frames`` uniformly sampled RGB frames."""
    frames, _metadata = VIDEO_LOADER_REGISTRY.get("pyav").load_bytes(
        container, num_frames=num_frames
    )
    return frames


@MULTIMODAL_REGISTRY.register_family(
    "qwen2_vl_raw_video", info=Qwen2VLRawVideoProcessingInfo, dummy_inputs=Qwen2VLDummyInputsBuilder
)
class Qwen2VLRawVideoMultiModalProcessor(Qwen2VLMultiModalProcessor):
    def _call_hf_processor(
        self, hf_data: Mapping[str, object], hf_kwargs: Mapping[str, object]
    ) -> BatchFeature:
        videos = hf_data.get("videos")
        if videos is not None:
            kwargs = dict(hf_kwargs)
            num_frames = int(kwargs.pop("num_frames", DEFAULT_NUM_FRAMES))  # type: ignore[call-overload]
            opened = [
                open_container_frames(bytes(v), num_frames)
                if isinstance(v, (bytes, bytearray))
                else v
                for v in cast("list[Any]", videos)
            ]
            hf_data, hf_kwargs = {**hf_data, "videos": opened}, kwargs
        return super()._call_hf_processor(hf_data, hf_kwargs)


__all__ = [
    "Qwen2VLRawVideoMultiModalProcessor",
    "Qwen2VLRawVideoProcessingInfo",
    "open_container_frames",
]
