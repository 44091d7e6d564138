"""Qwen2-VL's processing info, data parser, dummy inputs and processor: the ``qwen2_vl`` family.

The processor hands its HF call to :func:`~mediaref.models.qwen2_vl._routing.call_with_fused_path`,
which takes the items the fused exact path can compute and calls HF for the rest; the package's
docstring (:mod:`mediaref.models.qwen2_vl`) describes the family, and re-exports the names here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import torch

from mediaref.exceptions import VLLMValidationError
from mediaref.inputs import (
    ModalityData,
    MultiModalFieldConfig,
    MultiModalKwargsItems,
)
from mediaref.media.base import MediaIO
from mediaref.media.image import ImageMediaIO
from mediaref.media.video import VideoMediaIO
from mediaref.models.qwen2_vl._approx import (
    JPEG_DRAFT,
    VIDEO_SCALE,
    DraftingImageMediaIO,
    approx_modes,
    smart_resize_scaling,
)
from mediaref.models.qwen2_vl._fused_settings import image_settings, video_settings
from mediaref.models.qwen2_vl._layout import image_grids_from_headers
from mediaref.models.qwen2_vl._routing import call_with_fused_path
from mediaref.parse import (
    DictEmbeddingItems,
    ModalityDataItems,
    MultiModalDataItems,
    MultiModalDataParser,
)
from mediaref.processing.context import BaseProcessingInfo, device_normalize_kwargs
from mediaref.processing.dummy_inputs import (
    BaseDummyInputsBuilder,
    BaseDummyOptions,
    ImageDummyOptions,
    VideoDummyOptions,
)
from mediaref.processing.processor import (
    BaseMultiModalProcessor,
    PromptReplacement,
    PromptUpdate,
)
from mediaref.registry import MULTIMODAL_REGISTRY

if TYPE_CHECKING:
    from transformers import BatchFeature

_MODALITIES = ("image", "video")


class Qwen2VLProcessingInfo(BaseProcessingInfo):
    # Frames are sampled by the loader registered for Qwen2VLVideoProcessor (``qwen2_vl``, as in
    # vLLM); HF's own sampling stays off: do_sample_frames=False.
    supports_mm_device_do_normalize = True

    def get_supported_mm_limits(self) -> Mapping[str, int | None]:
        return {"image": None, "video": None}

    def get_data_parser(self) -> MultiModalDataParser:
        return Qwen2VLDataParser(
            self.get_merge_size(), expected_hidden_size=self._get_expected_hidden_size()
        )

    def get_media_io(
        self, modality: str, media_io_kwargs: Mapping[str, Any] | None = None
    ) -> MediaIO[Any]:
        """The base's decoders; with ``MEDIAREF_QWEN2_VL_APPROX=jpeg_draft``, images decode
        through :class:`~mediaref.models.qwen2_vl._approx.DraftingImageMediaIO`; with
        ``video_scale``, videos decode straight to their target size
        (:func:`~mediaref.models.qwen2_vl._approx.smart_resize_scaling`)."""
        media_io = super().get_media_io(modality, media_io_kwargs)
        if modality == "video" and type(media_io) is VideoMediaIO:
            return self._scaled_video_io(media_io)
        if modality != "image" or type(media_io) is not ImageMediaIO:
            return media_io
        if JPEG_DRAFT not in approx_modes():
            return media_io
        processor = self.get_hf_processor().image_processor
        sizing = image_settings(processor, self.ctx.get_merged_mm_kwargs({}))
        if sizing is None:
            return media_io  # the exact path would not take these images either
        return DraftingImageMediaIO(
            media_io.image_mode,
            rgba_background_color=media_io.rgba_background_color,
            trust_exif_image_id=media_io.trust_exif_image_id,
            decoded_budget=media_io.decoded_budget,
            factor=sizing.factor,
            min_pixels=sizing.min_pixels,
            max_pixels=sizing.max_pixels,
            **media_io.kwargs,
        )

    def _scaled_video_io(self, media_io: VideoMediaIO) -> VideoMediaIO:
        if VIDEO_SCALE not in approx_modes() or not media_io.supports_frame_scaling():
            return media_io  # off, or a loader whose codec cannot scale: the exact decode
        processor = self.get_hf_processor().video_processor
        # As the processor call will be made: HF's own frame sampling off, the deployment's kwargs.
        kwargs = {"do_sample_frames": False, **self.ctx.get_merged_mm_kwargs({})}
        sizing = video_settings(processor, kwargs)
        if sizing is None:
            return media_io  # the exact path would not take these videos either
        return media_io.with_frame_scaling(
            smart_resize_scaling(
                factor=sizing.factor, min_pixels=sizing.min_pixels, max_pixels=sizing.max_pixels
            )
        )

    def get_merge_size(self) -> int:
        return int(self.get_hf_processor().image_processor.merge_size)

    def get_placeholder_token_id(self, modality: str) -> int:
        processor = self.get_hf_processor()
        token = processor.image_token if modality == "image" else processor.video_token
        return int(self.get_tokenizer().convert_tokens_to_ids(token))


class Qwen2VLDummyInputsBuilder(BaseDummyInputsBuilder[Qwen2VLProcessingInfo]):
    def get_dummy_text(self, mm_counts: Mapping[str, int]) -> str:
        processor = self.info.get_hf_processor()
        text: str = processor.image_token * mm_counts.get(
            "image", 0
        ) + processor.video_token * mm_counts.get("video", 0)
        return text

    def get_dummy_mm_data(
        self,
        seq_len: int,
        mm_counts: Mapping[str, int],
        mm_options: Mapping[str, BaseDummyOptions] | None = None,
    ) -> dict[str, Any]:
        options = mm_options or {}
        image_options, video_options = options.get("image"), options.get("video")
        return {
            "image": self._get_dummy_images(
                width=224,
                height=224,
                num_images=mm_counts.get("image", 0),
                overrides=image_options if isinstance(image_options, ImageDummyOptions) else None,
            ),
            "video": self._get_dummy_videos(
                width=112,
                height=112,
                num_frames=4,
                num_videos=mm_counts.get("video", 0),
                overrides=video_options if isinstance(video_options, VideoDummyOptions) else None,
            ),
        }


def _embedding_fields(
    modality: str, merge_length: int
) -> Callable[[Mapping[str, Any]], Mapping[str, MultiModalFieldConfig]]:
    def fields(data: Mapping[str, Any]) -> Mapping[str, MultiModalFieldConfig]:
        grid = data[f"{modality}_grid_thw"]
        return {
            f"{modality}_embeds": MultiModalFieldConfig.flat_from_sizes(
                modality, grid.prod(-1) // merge_length
            ),
            f"{modality}_grid_thw": MultiModalFieldConfig.batched(modality, keep_on_cpu=True),
        }

    return fields


class Qwen2VLDataParser(MultiModalDataParser):
    """Precomputed embeddings come as ``{"image_embeds", "image_grid_thw"}`` (or ``video_*``):
    the grid says how many tokens each item's rows are, which a bare tensor cannot."""

    def __init__(self, merge_size: int, *, expected_hidden_size: int | None = None) -> None:
        super().__init__(video_needs_metadata=False, expected_hidden_size=expected_hidden_size)
        self._merge_length = merge_size**2

    def _parse_embedding_dict(
        self, modality: str, data: ModalityData[Any]
    ) -> ModalityDataItems[Any, Any] | None:
        if isinstance(data, Mapping):
            return DictEmbeddingItems(
                data,
                modality,
                {f"{modality}_embeds", f"{modality}_grid_thw"},
                _embedding_fields(modality, self._merge_length),
            )
        if self.is_embeddings(data):
            raise VLLMValidationError(
                f"Qwen2-VL takes {modality} embeddings as a dict with '{modality}_embeds' and "
                f"'{modality}_grid_thw', not a bare tensor",
                parameter=modality,
            )
        return None

    def _parse_image_data(self, data: ModalityData[Any]) -> ModalityDataItems[Any, Any] | None:
        return self._parse_embedding_dict("image", data) or super()._parse_image_data(data)

    def _parse_video_data(self, data: ModalityData[Any]) -> ModalityDataItems[Any, Any] | None:
        return self._parse_embedding_dict("video", data) or super()._parse_video_data(data)


@MULTIMODAL_REGISTRY.register_family(
    "qwen2_vl", info=Qwen2VLProcessingInfo, dummy_inputs=Qwen2VLDummyInputsBuilder
)
class Qwen2VLMultiModalProcessor(BaseMultiModalProcessor[Qwen2VLProcessingInfo]):
    # No dummy text (the base's default): Qwen2-VL's pixel outputs do not depend on the text, and
    # the prompt is tokenized apart, so a dummy text would only make HF expand and tokenize
    # grid.prod() // 4 placeholder tokens per item (2,691 for a 1080p image) for ids dropped.

    def _call_hf_processor(
        self, hf_data: Mapping[str, object], hf_kwargs: Mapping[str, object]
    ) -> BatchFeature:
        if "videos" in hf_data:
            # Our loader already sampled the frames; HF must not sample them again.
            hf_kwargs = {"do_sample_frames": False, **hf_kwargs}
        if self.info.mm_device_do_normalize:
            hf_kwargs = device_normalize_kwargs(hf_kwargs)
        call_hf = super()._call_hf_processor
        return call_with_fused_path(
            hf_data,
            self.info.ctx.get_merged_mm_kwargs(hf_kwargs),
            hf_processor=self.info.get_hf_processor(**hf_kwargs),
            dtype=self.info.ctx.model_config.dtype,
            call_hf=lambda data: call_hf(data, hf_kwargs),
        )

    def _get_layout_hf_inputs(
        self, mm_items: MultiModalDataItems, hf_processor_mm_kwargs: Mapping[str, object]
    ) -> Mapping[str, torch.Tensor] | None:
        # Images only: a clip's frame count needs its container and the sampling rule.
        if set(mm_items) != {"image"}:
            return None
        hf_kwargs = hf_processor_mm_kwargs
        if self.info.mm_device_do_normalize:
            hf_kwargs = device_normalize_kwargs(hf_kwargs)
        grids = image_grids_from_headers(
            getattr(self.info.get_hf_processor(**hf_kwargs), "image_processor", None),
            self.info.ctx.get_merged_mm_kwargs(hf_kwargs),
            self.info.ctx.model_config.dtype,
            mm_items["image"].get_all_raw(),
        )
        return None if grids is None else {"image_grid_thw": grids}

    def _get_mm_fields_config(
        self, hf_inputs: BatchFeature, hf_processor_mm_kwargs: Mapping[str, object]
    ) -> Mapping[str, MultiModalFieldConfig]:
        image_grid = hf_inputs.get("image_grid_thw", torch.empty((0, 3), dtype=torch.long))
        video_grid = hf_inputs.get("video_grid_thw", torch.empty((0, 3), dtype=torch.long))
        merge_length = self.info.get_merge_size() ** 2
        return {
            "pixel_values": MultiModalFieldConfig.flat_from_sizes("image", image_grid.prod(-1)),
            "image_embeds": MultiModalFieldConfig.flat_from_sizes(
                "image", image_grid.prod(-1) // merge_length
            ),
            # The grids stay on the CPU (vLLM's flags): M-RoPE positions are computed from them,
            # and the render server sends them as mm_metadata.
            "image_grid_thw": MultiModalFieldConfig.batched("image", keep_on_cpu=True),
            "pixel_values_videos": MultiModalFieldConfig.flat_from_sizes(
                "video", video_grid.prod(-1)
            ),
            "video_embeds": MultiModalFieldConfig.flat_from_sizes(
                "video", video_grid.prod(-1) // merge_length
            ),
            "video_grid_thw": MultiModalFieldConfig.batched("video", keep_on_cpu=True),
        }

    def _get_prompt_updates(
        self,
        mm_items: MultiModalDataItems,
        hf_processor_mm_kwargs: Mapping[str, object],
        out_mm_kwargs: MultiModalKwargsItems,
    ) -> Sequence[PromptUpdate]:
        merge_length = self.info.get_merge_size() ** 2

        def replacement(item_idx: int, *, modality: str, token_id: int) -> list[int]:
            grid_thw = out_mm_kwargs[modality][item_idx][f"{modality}_grid_thw"].data
            assert isinstance(grid_thw, torch.Tensor)
            return [token_id] * (int(grid_thw.prod()) // merge_length)

        updates: list[PromptUpdate] = []
        for modality in _MODALITIES:
            if mm_items.get_count(modality, strict=False) == 0:
                continue
            token_id = self.info.get_placeholder_token_id(modality)
            updates.append(
                PromptReplacement(
                    modality,
                    target=[token_id],
                    replacement=partial(replacement, modality=modality, token_id=token_id),
                )
            )
        return updates
