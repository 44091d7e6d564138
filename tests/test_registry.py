"""MultiModalRegistry: family lookup and its errors, cache sizing, registration, item limits."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# huggingface_hub reads this when first imported; set before anything imports transformers.
os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np
import pytest
import torch
from transformers import BatchFeature

from mediaref.cache import MultiModalProcessorOnlyCache
from mediaref.exceptions import VLLMValidationError
from mediaref.inputs import MultiModalKwargsItems
from mediaref.media.base import DecodeSpec, MediaRef
from mediaref.models.builtin import builtin_model_path
from mediaref.models.qwen2_audio import Qwen2AudioMultiModalProcessor
from mediaref.models.qwen2_vl import Qwen2VLMultiModalProcessor, Qwen2VLProcessingInfo
from mediaref.models.qwen2_vl_raw_video import (
    Qwen2VLRawVideoMultiModalProcessor,
    Qwen2VLRawVideoProcessingInfo,
)
from mediaref.parse import MultiModalDataItems
from mediaref.processing.context import BaseProcessingInfo, ModelConfig
from mediaref.processing.dummy_inputs import BaseDummyInputsBuilder
from mediaref.processing.fields import MultiModalFieldConfig
from mediaref.processing.processor import BaseMultiModalProcessor, PromptUpdate
from mediaref.registry import MULTIMODAL_REGISTRY, MultiModalRegistry

QWEN2_VL = str(builtin_model_path("qwen2_vl"))
QWEN2_AUDIO = str(builtin_model_path("qwen2_audio"))


def model_dir(tmp_path: Path, config: object | None, *, raw: str | None = None) -> str:
    """A model directory whose config.json holds ``config`` (or ``raw``); none if both are None."""
    directory = tmp_path / "model"
    directory.mkdir()
    if raw is not None:
        (directory / "config.json").write_text(raw)
    elif config is not None:
        (directory / "config.json").write_text(json.dumps(config))
    return str(directory)


# --- a tiny family with a limit -------------------------------------------------------------------


class LimitedInfo(BaseProcessingInfo):
    def get_supported_mm_limits(self) -> Mapping[str, int | None]:
        return {"image": 2, "video": None}


class LimitedDummyInputs(BaseDummyInputsBuilder[LimitedInfo]):
    def get_dummy_text(self, mm_counts: Mapping[str, int]) -> str:
        return "<image>" * mm_counts.get("image", 0)

    def get_dummy_mm_data(
        self, seq_len: int, mm_counts: Mapping[str, int], mm_options: Any = None
    ) -> dict[str, Any]:
        return {}


class LimitedProcessor(BaseMultiModalProcessor[LimitedInfo]):
    def _get_mm_fields_config(
        self, hf_inputs: BatchFeature, hf_processor_mm_kwargs: Mapping[str, object]
    ) -> Mapping[str, MultiModalFieldConfig]:
        return {}

    def _get_prompt_updates(
        self,
        mm_items: MultiModalDataItems,
        hf_processor_mm_kwargs: Mapping[str, object],
        out_mm_kwargs: MultiModalKwargsItems,
    ) -> Sequence[PromptUpdate]:
        return []


@pytest.fixture
def limited_registry() -> MultiModalRegistry:
    registry = MultiModalRegistry(builtin_modules=())
    registered = registry.register_family(
        "limited", info=LimitedInfo, dummy_inputs=LimitedDummyInputs
    )(LimitedProcessor)
    assert registered is LimitedProcessor  # the decorator hands the class back unchanged
    return registry


@pytest.fixture
def limited(limited_registry: MultiModalRegistry, tmp_path: Path) -> BaseMultiModalProcessor[Any]:
    return limited_registry.create_processor(
        ModelConfig(model=model_dir(tmp_path, {"model_type": "limited"}), enable_mm_embeds=True)
    )


def image(seed: int = 0) -> np.ndarray:
    return np.full((4, 4, 3), seed, dtype=np.uint8)


# --- families and lookup --------------------------------------------------------------------------


def test_builtin_families_are_listed() -> None:
    families = MULTIMODAL_REGISTRY.families
    assert {"qwen2_vl", "qwen2_audio", "qwen2_vl_raw_video"} <= set(families)
    assert families == sorted(families)


def test_family_comes_from_config_json_model_type_unless_configured() -> None:
    assert MULTIMODAL_REGISTRY.get_family(ModelConfig(model=QWEN2_VL)) == "qwen2_vl"
    assert MULTIMODAL_REGISTRY.get_family(ModelConfig(model=QWEN2_AUDIO)) == "qwen2_audio"

    factories = MULTIMODAL_REGISTRY.get_factories(ModelConfig(model=QWEN2_VL))
    assert factories.processor is Qwen2VLMultiModalProcessor
    assert factories.info is Qwen2VLProcessingInfo

    raw = MULTIMODAL_REGISTRY.get_factories(
        ModelConfig(model=QWEN2_VL, family="qwen2_vl_raw_video")
    )
    assert raw.processor is Qwen2VLRawVideoMultiModalProcessor
    assert raw.info is Qwen2VLRawVideoProcessingInfo


def test_create_processor_builds_the_family_with_the_given_cache() -> None:
    cache = MultiModalProcessorOnlyCache(0.001)
    processor = MULTIMODAL_REGISTRY.create_processor(ModelConfig(model=QWEN2_AUDIO), cache=cache)
    assert type(processor) is Qwen2AudioMultiModalProcessor
    assert processor.cache is cache
    assert processor.dummy_inputs.info is processor.info
    assert processor.info.ctx.model_config.model == QWEN2_AUDIO


def test_unknown_model_type_names_it_and_the_registered_families(tmp_path: Path) -> None:
    config = ModelConfig(model=model_dir(tmp_path, {"model_type": "no_such_family"}))
    with pytest.raises(VLLMValidationError, match="'no_such_family'") as info:
        MULTIMODAL_REGISTRY.create_processor(config)
    assert "qwen2_vl" in str(info.value)
    assert info.value.parameter == "model"
    assert info.value.status_code == 400
    assert MULTIMODAL_REGISTRY.supports_multimodal_inputs(config) is False


def test_unknown_configured_family_is_rejected_the_same_way() -> None:
    with pytest.raises(VLLMValidationError, match="'not_registered'"):
        MULTIMODAL_REGISTRY.get_factories(ModelConfig(model=QWEN2_VL, family="not_registered"))


@pytest.mark.parametrize(
    ("config", "raw", "reason"),
    [
        (None, None, "No such file"),
        (None, "{not json", "Expecting property name"),
        ({"architectures": ["X"]}, None, "'model_type'"),
    ],
    ids=["missing-config-json", "invalid-json", "no-model-type"],
)
def test_unreadable_model_type_is_a_validation_error_naming_config_json(
    tmp_path: Path, config: object, raw: str | None, reason: str
) -> None:
    model = ModelConfig(model=model_dir(tmp_path, config, raw=raw))
    with pytest.raises(VLLMValidationError, match=r"config\.json") as info:
        MULTIMODAL_REGISTRY.create_processor(model)
    assert reason in str(info.value)
    assert info.value.parameter == "model"


def test_supports_multimodal_inputs_for_a_builtin_family() -> None:
    assert MULTIMODAL_REGISTRY.supports_multimodal_inputs(ModelConfig(model=QWEN2_VL)) is True


# --- processor cache sizing -----------------------------------------------------------------------


def test_zero_gb_disables_the_processor_cache() -> None:
    assert (
        MULTIMODAL_REGISTRY.processor_cache_from_config(
            ModelConfig(model=QWEN2_VL, mm_processor_cache_gb=0)
        )
        is None
    )


def test_a_positive_budget_gives_a_processor_only_cache() -> None:
    cache = MULTIMODAL_REGISTRY.processor_cache_from_config(
        ModelConfig(model=QWEN2_VL, mm_processor_cache_gb=0.01)
    )
    assert isinstance(cache, MultiModalProcessorOnlyCache)


def test_unset_budget_reads_the_env_at_use(monkeypatch: pytest.MonkeyPatch) -> None:
    config = ModelConfig(model=QWEN2_VL)  # mm_processor_cache_gb=None
    monkeypatch.setenv("MEDIAREF_MM_PROCESSOR_CACHE_GB", "0")
    assert MULTIMODAL_REGISTRY.processor_cache_from_config(config) is None
    monkeypatch.setenv("MEDIAREF_MM_PROCESSOR_CACHE_GB", "0.5")
    assert isinstance(
        MULTIMODAL_REGISTRY.processor_cache_from_config(config), MultiModalProcessorOnlyCache
    )


def test_negative_budget_is_rejected() -> None:
    with pytest.raises(VLLMValidationError, match="mm_processor_cache_gb"):
        MULTIMODAL_REGISTRY.processor_cache_from_config(
            ModelConfig(model=QWEN2_VL, mm_processor_cache_gb=-1)
        )


# --- registering a family -------------------------------------------------------------------------


def test_register_processor_on_a_fresh_registry(
    limited_registry: MultiModalRegistry, tmp_path: Path
) -> None:
    assert limited_registry.families == ["limited"]
    cache = MultiModalProcessorOnlyCache(0.001)
    config = ModelConfig(model=model_dir(tmp_path, {"model_type": "limited"}))
    assert limited_registry.supports_multimodal_inputs(config)

    processor = limited_registry.create_processor(config, cache=cache)
    assert type(processor) is LimitedProcessor
    assert type(processor.info) is LimitedInfo
    assert type(processor.dummy_inputs) is LimitedDummyInputs
    assert processor.cache is cache
    assert processor.info.ctx.model_config is config
    # The process-wide registry is untouched.
    assert "limited" not in MULTIMODAL_REGISTRY.families
    with pytest.raises(VLLMValidationError, match="'limited'"):
        MULTIMODAL_REGISTRY.get_factories(config)


def test_registering_a_family_again_replaces_it(limited_registry: MultiModalRegistry) -> None:
    class Replacement(LimitedProcessor):
        pass

    limited_registry.register_family("limited", info=LimitedInfo, dummy_inputs=LimitedDummyInputs)(
        Replacement
    )
    assert (
        limited_registry.get_factories(ModelConfig(model="unused", family="limited")).processor
        is Replacement
    )


# --- build_inputs: supported modalities and limits ------------------------------------------------


def test_items_up_to_the_limit_are_accepted(limited: BaseMultiModalProcessor[Any]) -> None:
    inputs = limited.build_inputs([1, 2], {"image": [image(0), image(1)]})
    assert inputs.mm_data_items.get_all_counts() == {"image": 2}


def test_more_items_than_the_limit_are_rejected(limited: BaseMultiModalProcessor[Any]) -> None:
    with pytest.raises(
        VLLMValidationError, match=r"At most 2 image\(s\) may be provided in one prompt"
    ) as info:
        limited.build_inputs([1], {"image": [image(0), image(1), image(2)]})
    assert info.value.parameter == "image"


def test_embeddings_count_towards_the_limit(limited: BaseMultiModalProcessor[Any]) -> None:
    with pytest.raises(VLLMValidationError, match="At most 2 image"):
        limited.build_inputs([1], {"image": torch.zeros(3, 2, 4)})


def test_a_modality_without_a_limit_takes_any_number(limited: BaseMultiModalProcessor[Any]) -> None:
    videos = [np.zeros((2, 4, 4, 3), dtype=np.uint8) for _ in range(6)]
    assert limited.build_inputs([1], {"video": videos}).mm_data_items.get_all_counts() == {
        "video": 6
    }


def test_an_unsupported_modality_is_rejected_naming_the_supported_ones(
    limited: BaseMultiModalProcessor[Any],
) -> None:
    clip = np.zeros(16, dtype=np.float32)
    with pytest.raises(
        VLLMValidationError,
        match=r"audio input is not supported by this model \(supported: image, video\)",
    ) as info:
        limited.build_inputs([1], {"audio": [clip]})
    assert info.value.parameter == "audio"


def test_qwen2_audio_rejects_images() -> None:
    processor = MULTIMODAL_REGISTRY.create_processor(ModelConfig(model=QWEN2_AUDIO))
    with pytest.raises(
        VLLMValidationError, match=r"image input is not supported.*supported: audio"
    ):
        processor.build_inputs("<|AUDIO|>", {"image": [image()]})


def test_a_rejected_request_leaves_the_callers_refs_undecoded_and_usable(
    limited: BaseMultiModalProcessor[Any],
) -> None:
    decodes: list[int] = []

    def decoder() -> np.ndarray:
        decodes.append(1)
        return image()

    refs = [MediaRef(f"img{i}".encode(), decoder, DecodeSpec(modality="image")) for i in range(3)]
    with pytest.raises(VLLMValidationError, match="At most 2"):
        limited.build_inputs([1], {"image": refs})
    assert decodes == []
    assert not any(ref.is_released for ref in refs)
    assert refs[0].decode().shape == (4, 4, 3)


# --- under vLLM: its model files register as they are imported ------------------------------------


def test_under_vllm_a_model_file_is_imported_to_find_its_processor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # vLLM's registry finds a model's processor by importing the class vLLM resolves for it
    # (get_model_architecture), whose file's @register_processor then runs; with mediaref in
    # place of vllm.multimodal that registration lands here, so this registry must import it too.
    import sys
    import types

    registry = MultiModalRegistry(builtin_modules=())

    class TinyVlForConditionalGeneration:
        pass

    imported: list[object] = []

    def get_model_architecture(model_config: object) -> tuple[type, str]:
        imported.append(model_config)  # the model file's import, and its decorator:
        registry.register_processor(
            LimitedProcessor, info=LimitedInfo, dummy_inputs=LimitedDummyInputs
        )(TinyVlForConditionalGeneration)
        return TinyVlForConditionalGeneration, "TinyVlForConditionalGeneration"

    loader = types.ModuleType("vllm.model_executor.model_loader")
    loader.get_model_architecture = get_model_architecture  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm.model_executor.model_loader", loader)
    directory = model_dir(
        tmp_path, {"model_type": "tiny_vl", "architectures": ["TinyVlForConditionalGeneration"]}
    )
    VllmModelConfig = type("ModelConfig", (), {"__module__": "vllm.config.model"})
    vllm_config = VllmModelConfig()
    vllm_config.model = directory  # type: ignore[attr-defined]

    factories = registry.get_factories(vllm_config)  # type: ignore[arg-type]
    assert factories.processor is LimitedProcessor and imported == [vllm_config]
    # mediaref's own config never reaches into vLLM: a family must be registered for it.
    with pytest.raises(VLLMValidationError, match="'tiny_vl'"):
        MultiModalRegistry(builtin_modules=()).get_factories(ModelConfig(model=directory))


def test_a_config_that_says_it_is_not_multimodal_is_refused_by_its_served_name(
    tmp_path: Path,
) -> None:
    # vLLM's create_processor checks ModelConfig.is_multimodal_model first and names the served
    # model; the model directory is never read (here there is none).
    import types

    config = types.SimpleNamespace(
        model=str(tmp_path / "missing"),
        served_model_name="friendly-model-name",
        is_multimodal_model=False,
    )
    with pytest.raises(
        VLLMValidationError, match=r"^friendly-model-name is not a multimodal model"
    ):
        MULTIMODAL_REGISTRY.create_processor(config)  # type: ignore[arg-type]
