"""Qwen2-Audio on the real ``transformers`` ``Qwen2AudioProcessor`` (a Whisper feature extractor).

Audio is resampled to 16 kHz mono by the parse layer (mapped onto the ref, so it happens during
the parallel decode and enters the key). Each clip becomes 128x3000 log-mel features; its
``<|AUDIO|>`` placeholder expands to one token per 40 ms of (at most 30 s of) audio.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from mediaref.inputs import MultiModalFieldConfig, MultiModalKwargsItems
from mediaref.parse import MultiModalDataItems, MultiModalDataParser
from mediaref.processing.context import BaseProcessingInfo
from mediaref.processing.dummy_inputs import (
    AudioDummyOptions,
    BaseDummyInputsBuilder,
    BaseDummyOptions,
)
from mediaref.processing.processor import (
    BaseMultiModalProcessor,
    HFMultiModalInputs,
    PromptReplacement,
    PromptUpdate,
)
from mediaref.registry import MULTIMODAL_REGISTRY

if TYPE_CHECKING:
    from transformers import BatchFeature


def num_audio_tokens(num_feature_frames: int) -> int:
    """Tokens for ``num_feature_frames`` mel frames: the encoder's conv stride, then 2x pooling."""
    after_conv = (num_feature_frames - 1) // 2 + 1
    return (after_conv - 2) // 2 + 1


class Qwen2AudioProcessingInfo(BaseProcessingInfo):
    def get_supported_mm_limits(self) -> Mapping[str, int | None]:
        return {"audio": None}

    def get_feature_extractor(self) -> Any:
        return self.get_hf_processor().feature_extractor

    def get_data_parser(self) -> MultiModalDataParser:
        # Whisper features want 16 kHz mono: resampling and downmixing are mapped onto the refs.
        return MultiModalDataParser(
            target_sr=float(self.get_feature_extractor().sampling_rate),
            target_channels=1,
            expected_hidden_size=self._get_expected_hidden_size(),
        )

    def get_audio_token_id(self) -> int:
        processor = self.get_hf_processor()
        return int(self.get_tokenizer().convert_tokens_to_ids(processor.audio_token))


class Qwen2AudioDummyInputsBuilder(BaseDummyInputsBuilder[Qwen2AudioProcessingInfo]):
    def get_dummy_text(self, mm_counts: Mapping[str, int]) -> str:
        return str(self.info.get_hf_processor().audio_token) * mm_counts.get("audio", 0)

    def get_dummy_mm_data(
        self,
        seq_len: int,
        mm_counts: Mapping[str, int],
        mm_options: Mapping[str, BaseDummyOptions] | None = None,
    ) -> dict[str, Any]:
        sampling_rate = int(self.info.get_feature_extractor().sampling_rate)
        overrides = (mm_options or {}).get("audio")
        return {
            "audio": self._get_dummy_audios(
                length=sampling_rate,
                num_audios=mm_counts.get("audio", 0),
                overrides=overrides if isinstance(overrides, AudioDummyOptions) else None,
            )
        }


@MULTIMODAL_REGISTRY.register_family(
    "qwen2_audio", info=Qwen2AudioProcessingInfo, dummy_inputs=Qwen2AudioDummyInputsBuilder
)
class Qwen2AudioMultiModalProcessor(BaseMultiModalProcessor[Qwen2AudioProcessingInfo]):
    def _get_hf_mm_text(self, mm_counts: Mapping[str, int]) -> str | None:
        # Qwen2AudioProcessor refuses audio without text holding one <|AUDIO|> per clip.
        return self.dummy_inputs.get_dummy_text(mm_counts)

    def _get_hf_mm_inputs(
        self, mm_items: MultiModalDataItems, hf_kwargs: Mapping[str, object]
    ) -> HFMultiModalInputs:
        hf_inputs = super()._get_hf_mm_inputs(mm_items, hf_kwargs)
        sampling_rate = self.info.get_feature_extractor().sampling_rate
        return hf_inputs._replace(hf_kwargs={"sampling_rate": sampling_rate, **hf_inputs.hf_kwargs})

    def _get_mm_fields_config(
        self, hf_inputs: BatchFeature, hf_processor_mm_kwargs: Mapping[str, object]
    ) -> Mapping[str, MultiModalFieldConfig]:
        return {
            "input_features": MultiModalFieldConfig.batched("audio"),
            "feature_attention_mask": MultiModalFieldConfig.batched("audio"),
        }

    def _get_prompt_updates(
        self,
        mm_items: MultiModalDataItems,
        hf_processor_mm_kwargs: Mapping[str, object],
        out_mm_kwargs: MultiModalKwargsItems,
    ) -> Sequence[PromptUpdate]:
        if mm_items.get_count("audio", strict=False) == 0:
            return []
        token_id = self.info.get_audio_token_id()

        def replacement(item_idx: int) -> list[int]:
            mask = out_mm_kwargs["audio"][item_idx]["feature_attention_mask"].data
            assert isinstance(mask, torch.Tensor)
            return [token_id] * num_audio_tokens(int(mask.sum()))

        return [PromptReplacement("audio", target=[token_id], replacement=replacement)]


__all__ = [
    "Qwen2AudioDummyInputsBuilder",
    "Qwen2AudioMultiModalProcessor",
    "Qwen2AudioProcessingInfo",
    "num_audio_tokens",
]
