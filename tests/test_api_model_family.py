"""A model family written the way a vLLM 0.33 model file writes one, run end to end on mediaref.

Everything the family uses is a vLLM name imported from mediaref's mirrored path
(``vllm.multimodal`` -> ``mediaref``, ``vllm.multimodal.processing`` -> ``mediaref.processing``...):
a ``BaseProcessingInfo`` reading its HF config and processor through the context, a
``BaseDummyInputsBuilder`` taking ``mm_options``, a ``BaseMultiModalProcessor`` declaring its
fields with ``MultiModalFieldConfig`` and its prompt updates with ``PromptReplacement`` /
``PromptUpdateDetails``, registered on a model class with
``MULTIMODAL_REGISTRY.register_processor``; a renderer-style caller builds ``ProcessorInputs``
and calls ``processor.apply(inputs, timing_ctx)``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image
from transformers import BatchFeature, Qwen2VLConfig, Qwen2VLProcessor

from mediaref import MULTIMODAL_REGISTRY
from mediaref.cache import MultiModalProcessorOnlyCache
from mediaref.inputs import MultiModalFieldConfig, MultiModalKwargsItems
from mediaref.models.builtin import builtin_model_path
from mediaref.parse import ImageProcessorItems, MultiModalDataItems
from mediaref.processing import (
    BaseDummyInputsBuilder,
    BaseMultiModalProcessor,
    BaseProcessingInfo,
    InputProcessingContext,
    ProcessorInputs,
    PromptReplacement,
    PromptUpdate,
    PromptUpdateDetails,
    TimingContext,
)
from mediaref.processing.context import ModelConfig
from mediaref.processing.dummy_inputs import BaseDummyOptions

ARCHITECTURE = "TinyVLForConditionalGeneration"

# -- the model file ------------------------------------------------------------------------------


class TinyVLProcessingInfo(BaseProcessingInfo):
    def get_hf_config(self) -> Qwen2VLConfig:
        return self.ctx.get_hf_config(Qwen2VLConfig)

    def get_hf_processor(self, **kwargs: object) -> Qwen2VLProcessor:
        return self.ctx.get_hf_processor(Qwen2VLProcessor, **kwargs)

    def get_supported_mm_limits(self) -> Mapping[str, int | None]:
        return {"image": 2}

    def get_num_image_tokens(self, grid_thw: torch.Tensor) -> int:
        merge_size = self.get_hf_processor().image_processor.merge_size
        return int(grid_thw.prod()) // merge_size**2


class TinyVLDummyInputsBuilder(BaseDummyInputsBuilder[TinyVLProcessingInfo]):
    def get_dummy_text(self, mm_counts: Mapping[str, int]) -> str:
        return "<|vision_start|><|image_pad|><|vision_end|>" * mm_counts.get("image", 0)

    def get_dummy_mm_data(
        self,
        seq_len: int,
        mm_counts: Mapping[str, int],
        mm_options: Mapping[str, BaseDummyOptions] | None = None,
    ) -> dict[str, Any]:
        return {
            "image": self._get_dummy_images(
                width=112,
                height=112,
                num_images=mm_counts.get("image", 0),
                overrides=(mm_options or {}).get("image"),  # type: ignore[arg-type]
            )
        }


class TinyVLMultiModalProcessor(BaseMultiModalProcessor[TinyVLProcessingInfo]):
    def _get_mm_fields_config(
        self, hf_inputs: BatchFeature, hf_processor_mm_kwargs: Mapping[str, object]
    ) -> Mapping[str, MultiModalFieldConfig]:
        grid = hf_inputs.get("image_grid_thw", torch.empty((0, 3), dtype=torch.long))
        return {
            "pixel_values": MultiModalFieldConfig.flat_from_sizes("image", grid.prod(-1)),
            "image_grid_thw": MultiModalFieldConfig.batched("image"),
        }

    def _get_prompt_updates(
        self,
        mm_items: MultiModalDataItems,
        hf_processor_mm_kwargs: Mapping[str, object],
        out_mm_kwargs: MultiModalKwargsItems,
    ) -> Sequence[PromptUpdate]:
        hf_config = self.info.get_hf_config()
        start, pad, end = (
            hf_config.vision_start_token_id,
            hf_config.image_token_id,
            hf_config.vision_end_token_id,
        )

        def get_replacement(item_idx: int) -> PromptUpdateDetails[Sequence[int]]:
            images = mm_items.get_items("image", ImageProcessorItems)
            assert images.get_count() > item_idx
            grid = out_mm_kwargs["image"][item_idx]["image_grid_thw"].data
            assert isinstance(grid, torch.Tensor)
            tokens = [start] + [pad] * self.info.get_num_image_tokens(grid) + [end]
            return PromptUpdateDetails.select_token_id(tokens, pad)

        return [PromptReplacement("image", target=[start, pad, end], replacement=get_replacement)]


@MULTIMODAL_REGISTRY.register_processor(
    TinyVLMultiModalProcessor, info=TinyVLProcessingInfo, dummy_inputs=TinyVLDummyInputsBuilder
)
class TinyVLForConditionalGeneration:
    """Stands for the model class a model file defines (its weights are not needed here)."""


# -- the deployment ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The built-in Qwen2-VL files, declaring the tiny architecture."""
    directory = tmp_path_factory.mktemp("tiny_vl")
    for source in Path(builtin_model_path("qwen2_vl")).iterdir():
        shutil.copy(source, directory / source.name)
    config = json.loads((directory / "config.json").read_text())
    config["architectures"] = [ARCHITECTURE]
    (directory / "config.json").write_text(json.dumps(config))
    return str(directory)


@pytest.fixture(scope="module")
def processor(model_dir: str) -> TinyVLMultiModalProcessor:
    built = MULTIMODAL_REGISTRY.create_processor(ModelConfig(model=model_dir))
    assert isinstance(built, TinyVLMultiModalProcessor)
    return built


def image(shade: int, size: tuple[int, int] = (56, 84)) -> Image.Image:
    return Image.new("RGB", size, (shade, 255 - shade, 40))


def ids(processor: TinyVLMultiModalProcessor, text: str) -> list[int]:
    return list(processor.info.get_tokenizer().encode(text, add_special_tokens=False))


def test_the_registry_finds_the_model_class_by_its_architecture(model_dir: str) -> None:
    config = ModelConfig(model=model_dir)
    assert TinyVLForConditionalGeneration._processor_factory.info is TinyVLProcessingInfo  # type: ignore[attr-defined]
    info = MULTIMODAL_REGISTRY.get_processing_info(config)
    assert isinstance(info, TinyVLProcessingInfo)
    assert isinstance(info.ctx, InputProcessingContext) and info.ctx.model_config is config
    assert isinstance(info.get_hf_processor(), Qwen2VLProcessor)
    assert MULTIMODAL_REGISTRY.supports_multimodal_inputs(config)


def test_apply_with_a_timing_context_runs_the_family_end_to_end(
    processor: TinyVLMultiModalProcessor,
) -> None:
    info = processor.info
    prompt = ids(processor, "Compare <|vision_start|><|image_pad|><|vision_end|> and ") + ids(
        processor, "<|vision_start|><|image_pad|><|vision_end|>."
    )
    items = info.parse_mm_data({"image": [image(10), image(200, (112, 56))]})
    cache = MultiModalProcessorOnlyCache(0.01)
    timing = TimingContext()

    out = processor.apply(ProcessorInputs(prompt, items, cache=cache), timing)

    grids = [item["image_grid_thw"].data for item in out["mm_kwargs"]["image"]]
    sizes = [int(g.prod()) // 4 for g in grids]  # merge_size 2: four patches per token
    pad = info.get_hf_config().image_token_id
    ranges = out["mm_placeholders"]["image"]
    assert [r.length for r in ranges] == [s + 2 for s in sizes]
    for placeholder, size in zip(ranges, sizes, strict=True):
        run = out["prompt_token_ids"][placeholder.offset : placeholder.offset + placeholder.length]
        assert run[1:-1] == [pad] * size
        assert placeholder.is_embed is not None
        assert placeholder.is_embed.tolist() == [False] + [True] * size + [False]
    assert out["prompt_token_ids"].count(pad) == sum(sizes)
    pixels = [item["pixel_values"].data for item in out["mm_kwargs"]["image"]]
    assert [p.shape[0] for p in pixels] == [int(g.prod()) for g in grids]
    assert len(out["mm_hashes"]["image"]) == 2
    assert {"get_mm_hashes", "apply_hf_processor", "apply_prompt_updates"} <= set(timing.stage_secs)
    assert timing.get_stats_dict()["preprocessor_total_secs"] == pytest.approx(timing.total_secs)

    # The same items again: served from the cache, the HF processor not called.
    again_timing = TimingContext()
    again = processor.apply(
        ProcessorInputs(
            prompt, info.parse_mm_data({"image": [image(10), image(200, (112, 56))]}), cache=cache
        ),
        again_timing,
    )
    assert "apply_hf_processor" not in again_timing.stage_secs
    assert again["prompt_token_ids"] == out["prompt_token_ids"]
    assert again["mm_hashes"] == out["mm_hashes"]


def test_the_processor_is_callable_with_a_text_prompt(processor: TinyVLMultiModalProcessor) -> None:
    items = processor.info.parse_mm_data({"image": [image(90)]})
    out = processor("<|vision_start|><|image_pad|><|vision_end|>hi", items)
    assert out["type"] == "multimodal" and len(out["mm_placeholders"]["image"]) == 1


def test_dummy_inputs_for_profiling_honour_the_options_and_pad_to_the_context(
    processor: TinyVLMultiModalProcessor,
) -> None:
    dummy = processor.get_dummy_inputs(128, {"image": 1}, {"image": _small_images()})
    [dummy_image] = [dummy.mm_data_items["image"].get(0)]
    assert dummy_image.size == (56, 56)  # the override shrank the model's 112x112
    profiled = processor.get_dummy_mm_inputs({"image": 1})
    max_model_len = processor.info.ctx.model_config.derived_max_model_len
    assert len(profiled["prompt_token_ids"]) == max_model_len


def test_profiling_calls_the_dummy_inputs_hook_by_keyword_as_vllm_does(
    processor: TinyVLMultiModalProcessor, monkeypatch: pytest.MonkeyPatch
) -> None:
    # vLLM's get_dummy_mm_inputs passes seq_len, mm_counts and mm_options by name; an override
    # (a vLLM model's, or a test's stand-in) may take them so.
    seen: dict[str, Any] = {}
    real = processor.get_dummy_inputs

    def by_keyword_only(*, seq_len: int, mm_counts: Any, mm_options: Any = None) -> Any:
        seen.update(seq_len=seq_len, mm_counts=dict(mm_counts))
        return real(seq_len, mm_counts, mm_options)

    monkeypatch.setattr(processor, "get_dummy_inputs", by_keyword_only)
    processor.get_dummy_mm_inputs({"image": 1})
    assert seen == {
        "seq_len": processor.info.ctx.model_config.derived_max_model_len,
        "mm_counts": {"image": 1},
    }


def _small_images() -> BaseDummyOptions:
    from mediaref.processing.dummy_inputs import ImageDummyOptions

    return ImageDummyOptions(count=1, width=56, height=56)


def test_more_images_than_the_family_takes_is_a_400(processor: TinyVLMultiModalProcessor) -> None:
    from mediaref.exceptions import VLLMValidationError

    with pytest.raises(VLLMValidationError, match="At most 2 image"):
        processor.info.parse_mm_data({"image": [image(1), image(2), image(3)]})
