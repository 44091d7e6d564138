"""Qwen2-VL takes precomputed embeddings as {"image_embeds", "image_grid_thw"} when
``enable_mm_embeds`` is set (vLLM's ``--enable-mm-embeds``; refused otherwise); a bare tensor is a 400."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from mediaref.exceptions import VLLMValidationError
from mediaref.media.base import DecodeSpec, MediaRef
from mediaref.models.builtin import builtin_model_path
from mediaref.processing.context import ModelConfig
from mediaref.registry import MULTIMODAL_REGISTRY


@pytest.fixture(scope="module")
def embeds_processor() -> Any:
    config = ModelConfig(model=str(builtin_model_path("qwen2_vl")), enable_mm_embeds=True)
    return MULTIMODAL_REGISTRY.create_processor(config)


def embedding_dict() -> dict[str, torch.Tensor]:
    return {"image_embeds": torch.randn(6, 32), "image_grid_thw": torch.tensor([[1, 4, 4]])}


def test_embeddings_are_refused_unless_enabled(qwen2_vl_processor: Any) -> None:
    with pytest.raises(VLLMValidationError, match="--enable-mm-embeds") as caught:
        qwen2_vl_processor.build_inputs("<|image_pad|>", {"image": embedding_dict()})
    assert caught.value.parameter == "image"


def test_embedding_dict_passes_through_with_placeholders_from_the_grid(
    embeds_processor: Any,
) -> None:
    qwen2_vl_processor = embeds_processor
    grid = torch.tensor([[1, 4, 4], [1, 2, 4]])  # 16 and 8 patches -> 4 and 2 tokens (merge 2x2)
    embeds = torch.randn(6, 32)
    out = qwen2_vl_processor.apply(
        qwen2_vl_processor.build_inputs(
            "<|image_pad|>a<|image_pad|>",
            {"image": {"image_embeds": embeds, "image_grid_thw": grid}},
        )
    )
    assert [(p.offset, p.length) for p in out["mm_placeholders"]["image"]] == [(0, 4), (5, 2)]
    data = out["mm_kwargs"].get_data()
    assert torch.equal(data["image_embeds"], embeds)
    assert torch.equal(data["image_grid_thw"], grid)
    assert [item["image_embeds"].data.shape[0] for item in out["mm_kwargs"]["image"]] == [4, 2]


def test_bare_embedding_tensor_is_a_clear_validation_error(embeds_processor: Any) -> None:
    with pytest.raises(VLLMValidationError, match=r"image_embeds.*image_grid_thw"):
        embeds_processor.build_inputs("<|image_pad|>", {"image": torch.zeros(1, 4, 32)})


def test_rejected_request_releases_its_forks_and_keeps_the_callers_ref(
    qwen2_vl_processor, monkeypatch: pytest.MonkeyPatch
) -> None:
    released: list[MediaRef] = []
    real_release = MediaRef.release

    def spy(self: MediaRef) -> None:
        released.append(self)
        real_release(self)

    monkeypatch.setattr(MediaRef, "release", spy)
    ref = MediaRef(b"payload", lambda: pytest.fail("must not decode"), DecodeSpec(modality="image"))
    with pytest.raises(VLLMValidationError, match="not supported"):
        qwen2_vl_processor.build_inputs("<|AUDIO|>", {"image": [ref], "audio": [ref]})
    assert len(released) == 2 and all(r is not ref and r.is_released for r in released)
    assert ref.data == b"payload" and not ref.is_released
