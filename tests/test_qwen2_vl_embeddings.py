"""Qwen2-VL takes precomputed embeddings as {"image_embeds", "image_grid_thw"}; a bare tensor is a 400."""

from __future__ import annotations

import pytest
import torch

from mediaref.exceptions import VLLMValidationError
from mediaref.media.base import DecodeSpec, MediaRef


def test_embedding_dict_passes_through_with_placeholders_from_the_grid(qwen2_vl_processor) -> None:
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


def test_bare_embedding_tensor_is_a_clear_validation_error(qwen2_vl_processor) -> None:
    with pytest.raises(VLLMValidationError, match=r"image_embeds.*image_grid_thw"):
        qwen2_vl_processor.build_inputs("<|image_pad|>", {"image": torch.zeros(1, 4, 32)})


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
