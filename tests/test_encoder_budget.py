"""MultiModalBudget and get_mm_max_toks_per_item (vLLM's ``vllm.multimodal.encoder_budget``).

The budget arithmetic is checked against a processor whose token counts are known, then once end
to end on the built-in Qwen2-VL model, whose counts come from processing dummy inputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from mediaref.cache import MultiModalProcessorOnlyCache
from mediaref.encoder_budget import MultiModalBudget, get_mm_max_toks_per_item
from mediaref.inputs import MultiModalKwargsItem, MultiModalKwargsItems, PlaceholderRange
from mediaref.models.builtin import builtin_model_path
from mediaref.processing.context import ModelConfig
from mediaref.registry import MULTIMODAL_REGISTRY


class FakeProcessor:
    """A processor with fixed per-item token counts and limits (what the budget reads of one)."""

    def __init__(
        self, model_config: Any, known: Mapping[str, int] | None, limits: Mapping[str, int]
    ):
        self.known = known
        self.info = SimpleNamespace(
            ctx=SimpleNamespace(model_config=model_config),
            supported_mm_limits=dict.fromkeys(limits),
            allowed_mm_limits=dict(limits),
            get_mm_max_tokens_per_item=self._max_tokens,
        )
        self.asked: list[Mapping[str, int]] = []
        self.dummy_calls = 0

    def _max_tokens(self, seq_len: int, mm_counts: Mapping[str, int]) -> Mapping[str, int] | None:
        self.asked.append(dict(mm_counts))
        if self.known is None:
            return None
        return {modality: self.known[modality] for modality in mm_counts}

    def get_dummy_mm_inputs(self, mm_counts: Mapping[str, int], *, cache: Any = None) -> Any:
        self.dummy_calls += 1
        mask = torch.tensor([False, True, True, False])  # 2 embedding positions of 4 tokens
        return {
            "mm_placeholders": {
                m: [PlaceholderRange(0, 4, mask)] * n for m, n in mm_counts.items()
            },
            "mm_kwargs": MultiModalKwargsItems(
                {m: [MultiModalKwargsItem.dummy(8)] * n for m, n in mm_counts.items()}
            ),
        }


def deployment(
    known: Mapping[str, int] | None,
    limits: Mapping[str, int],
    *,
    enable_mm_embeds: bool = False,
    chunked_prefill: bool = False,
    disable_chunked_mm_input: bool = False,
) -> tuple[Any, Any]:
    multimodal = SimpleNamespace(enable_mm_embeds=enable_mm_embeds, mm_processor_cache_gb=0.001)
    model_config = SimpleNamespace(max_model_len=1000, get_multimodal_config=lambda: multimodal)
    scheduler = SimpleNamespace(
        max_num_seqs=8,
        max_num_batched_tokens=250,
        enable_chunked_prefill=chunked_prefill,
        disable_chunked_mm_input=disable_chunked_mm_input,
        max_num_encoder_input_tokens=400,
        encoder_cache_size=300,
    )
    processor = FakeProcessor(model_config, known, limits)
    registry = SimpleNamespace(create_processor=lambda config: processor)
    return SimpleNamespace(model_config=model_config, scheduler_config=scheduler), registry


def test_budget_arithmetic_follows_the_scheduler_limits() -> None:
    config, registry = deployment(
        {"image": 100, "audio": 30, "video": 50}, {"image": 4, "audio": 2, "video": 0}
    )
    budget = MultiModalBudget(config, registry)
    assert budget.processor.asked == [{"image": 1, "audio": 1}]  # video is off (limit 0)
    assert budget.get_encoder_budget() == 300  # min(compute 400, cache 300)
    assert budget.mm_max_toks_per_item == {"image": 100, "audio": 30}
    # image: 4 per prompt (limit; 1000 // 100 = 10 fit); per batch min(300 // 100 by the
    # encoder, 2 requests (250 // 100 without chunked prefill) x 4 by the decoder) = 3.
    assert budget.mm_max_items_per_prompt == {"image": 4, "audio": 2}
    assert budget.mm_max_items_per_batch == {"image": 3, "audio": 10}
    assert budget.get_modality_with_max_tokens() == "image"


def test_chunked_prefill_lifts_the_per_step_request_cap() -> None:
    config, registry = deployment({"image": 100}, {"image": 4}, chunked_prefill=True)
    assert MultiModalBudget(config, registry).mm_max_items_per_batch == {
        "image": 3
    }  # encoder-bound
    config.scheduler_config.encoder_cache_size = 10_000
    config.scheduler_config.max_num_encoder_input_tokens = 10_000
    assert MultiModalBudget(config, registry).mm_max_items_per_batch == {"image": 32}  # 8 x 4


def test_embedding_only_modalities_count_towards_the_encoder_cache() -> None:
    config, registry = deployment(
        {"image": 100, "video": 600}, {"image": 4, "video": 0}, enable_mm_embeds=True
    )
    budget = MultiModalBudget(config, registry)
    assert budget.processor.asked == [{"image": 1, "video": 1}]
    assert budget.encoder_cache_size == 600 and budget.encoder_compute_budget == 600
    assert budget.mm_max_toks_per_item == {"image": 100}  # no tower items for video


def test_an_item_larger_than_a_step_needs_chunked_mm_input() -> None:
    config, registry = deployment({"image": 300}, {"image": 1}, disable_chunked_mm_input=True)
    with pytest.raises(
        ValueError,
        match=r"max_tokens_per_mm_item \(300\) is larger than max_num_batched_tokens \(250\)",
    ):
        MultiModalBudget(config, registry)


def test_without_modalities_there_is_no_budget_and_no_profile_input() -> None:
    config, registry = deployment({"image": 100}, {"image": 0})
    budget = MultiModalBudget(config, registry)
    assert budget.get_encoder_budget() == 0 and budget.mm_max_toks_per_item == {}
    assert budget.get_dummy_encoder_profile_inputs() == []


def test_counts_come_from_dummy_inputs_when_the_model_does_not_state_them() -> None:
    config, registry = deployment(None, {"image": 4})
    processor = registry.create_processor(config.model_config)
    assert get_mm_max_toks_per_item(processor, {"image": 1, "audio": 2}, None) == {
        "image": 2,
        "audio": 4,
    }
    budget = MultiModalBudget(config, registry)
    assert budget.mm_max_toks_per_item == {"image": 2}


def test_profile_inputs_repeat_one_dummy_item_and_the_cache_can_be_reset() -> None:
    config, registry = deployment({"image": 100, "audio": 30}, {"image": 4, "audio": 2})
    budget = MultiModalBudget(config, registry)
    assert isinstance(budget.cache, MultiModalProcessorOnlyCache)
    batch = budget.get_dummy_encoder_profile_inputs()
    assert len(batch) == 3 and {modality for modality, _ in batch} == {"image"}
    assert all(item is batch[0][1] for _, item in batch)
    assert len(budget.get_dummy_encoder_profile_inputs("audio", 5)) == 5
    budget.cache.get_and_update([(MultiModalKwargsItem.dummy(), [])], ["h"])
    budget.reset_cache()
    assert budget.cache.is_cached(["h"]) == [False]
    assert MultiModalBudget(config, registry, enable_cache=False).cache is None


def test_qwen2_vl_end_to_end() -> None:
    model_config = ModelConfig(
        model=str(builtin_model_path("qwen2_vl")),
        max_model_len=4096,
        limit_mm_per_prompt={"image": 2, "video": 0},
    )
    scheduler = SimpleNamespace(
        max_num_seqs=8,
        max_num_batched_tokens=2048,
        enable_chunked_prefill=True,
        disable_chunked_mm_input=False,
        max_num_encoder_input_tokens=2048,
        encoder_cache_size=2048,
    )
    config = SimpleNamespace(model_config=model_config, scheduler_config=scheduler)
    budget = MultiModalBudget(config, MULTIMODAL_REGISTRY)
    tokens = budget.mm_max_toks_per_item["image"]
    assert list(budget.mm_max_toks_per_item) == ["image"] and tokens > 0
    assert budget.mm_max_items_per_prompt == {"image": 2}
    assert budget.mm_max_items_per_batch == {"image": min(2048 // tokens, 8 * 2)}
    [(modality, item), *_] = budget.get_dummy_encoder_profile_inputs()
    assert modality == "image"
    # The dummy item is the largest image: its patches merge 2x2 into the counted tokens.
    assert item["pixel_values"].data.shape[0] == 4 * tokens
