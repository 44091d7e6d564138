"""MultiModalFieldConfig and build_kwargs_items: a batch cut into items and put back unchanged.

(The field classes live in ``mediaref.inputs``, as in vLLM; ``mediaref.processing.fields``
re-exports them, and both paths are exercised here.)"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mediaref.inputs import (
    MultiModalBatchedField,
    MultiModalFlatField,
    MultiModalKwargsItem,
    MultiModalKwargsItems,
    MultiModalSharedField,
)
from mediaref.processing.fields import MultiModalFieldConfig, build_kwargs_items


def roundtrip(
    hf_inputs: dict[str, Any], config: dict[str, MultiModalFieldConfig]
) -> dict[str, Any]:
    return build_kwargs_items(hf_inputs, config).get_data()


# --- batched ---------------------------------------------------------------------------------


def test_batched_tensor_gives_one_row_per_item_and_stacks_back() -> None:
    batch = torch.arange(24, dtype=torch.float32).reshape(3, 2, 4)
    items = build_kwargs_items({"feat": batch}, {"feat": MultiModalFieldConfig.batched("audio")})

    assert list(items) == ["audio"]
    assert len(items["audio"]) == 3
    for i, item in enumerate(items["audio"]):
        assert torch.equal(item["feat"].data, batch[i])
        assert isinstance(item["feat"].field, MultiModalBatchedField)
    rebuilt = items.get_data()["feat"]
    assert isinstance(rebuilt, torch.Tensor)
    assert torch.equal(rebuilt, batch)


def test_ragged_batched_field_is_cut_per_item_and_comes_back_as_a_list() -> None:
    ragged = [torch.ones(2, 3), torch.zeros(5, 3), torch.full((1, 3), 7.0)]
    items = build_kwargs_items(
        {"embeds": ragged}, {"embeds": MultiModalFieldConfig.batched("image")}
    )

    assert [tuple(item["embeds"].data.shape) for item in items["image"]] == [(2, 3), (5, 3), (1, 3)]
    rebuilt = items.get_data()["embeds"]
    # Rows of different shapes cannot stack: the model receives them as a list, in item order.
    assert isinstance(rebuilt, list)
    assert len(rebuilt) == 3
    for got, want in zip(rebuilt, ragged, strict=True):
        assert torch.equal(got, want)


def test_batched_list_of_equal_shapes_stacks_into_one_tensor() -> None:
    rows = [torch.full((2, 2), float(i)) for i in range(4)]
    rebuilt = roundtrip({"x": rows}, {"x": MultiModalFieldConfig.batched("image")})["x"]
    assert torch.equal(rebuilt, torch.stack(rows))


def test_batched_numpy_rows_come_back_as_a_list_of_rows() -> None:
    batch = np.arange(6).reshape(3, 2)
    rebuilt = roundtrip({"x": batch}, {"x": MultiModalFieldConfig.batched("image")})["x"]
    assert isinstance(rebuilt, list)
    np.testing.assert_array_equal(np.stack(rebuilt), batch)


# --- flat ------------------------------------------------------------------------------------


def test_flat_slices_cut_rows_and_concatenate_back() -> None:
    batch = torch.arange(20).reshape(10, 2)
    config = MultiModalFieldConfig.flat("image", [slice(0, 3), slice(3, 4), slice(4, 10)])
    items = build_kwargs_items({"patches": batch}, {"patches": config})

    assert [item["patches"].data.shape[0] for item in items["image"]] == [3, 1, 6]
    assert torch.equal(items["image"][1]["patches"].data, batch[3:4])
    assert isinstance(items["image"][0]["patches"].field, MultiModalFlatField)
    assert torch.equal(items.get_data()["patches"], batch)


def test_flat_from_sizes_accepts_a_tensor_of_sizes_and_empty_items() -> None:
    batch = torch.randn(7, 5)
    config = MultiModalFieldConfig.flat_from_sizes("video", torch.tensor([4, 0, 3]))
    # As vLLM builds them: one index tuple per item, slice(None) for any leading dimensions.
    assert config.field.slices == [(slice(0, 4),), (slice(4, 4),), (slice(4, 7),)]

    items = build_kwargs_items({"pv": batch}, {"pv": config})
    assert [item["pv"].data.shape[0] for item in items["video"]] == [4, 0, 3]
    assert torch.equal(items.get_data()["pv"], batch)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=6), min_size=1, max_size=6))
def test_flat_from_sizes_roundtrip_property(sizes: list[int]) -> None:
    batch = torch.arange(sum(sizes) * 3).reshape(sum(sizes), 3)
    items = build_kwargs_items(
        {"pv": batch}, {"pv": MultiModalFieldConfig.flat_from_sizes("image", sizes)}
    )
    assert [item["pv"].data.shape[0] for item in items["image"]] == sizes
    assert torch.equal(items.get_data()["pv"], batch)


def test_flat_from_sizes_rejects_negative_sizes() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        MultiModalFieldConfig.flat_from_sizes("image", [2, -1])


@pytest.mark.parametrize(
    ("sizes", "rows"),
    [([2, 3], 6), ([2, 3], 4), ([], 3)],
    ids=["sizes-cover-too-few-rows", "sizes-cover-too-many-rows", "no-items-but-rows"],
)
def test_flat_sizes_that_do_not_cover_the_batch_are_an_error(sizes: list[int], rows: int) -> None:
    config = MultiModalFieldConfig.flat_from_sizes("image", sizes)
    with pytest.raises(ValueError, match="'pixel_values'"):
        build_kwargs_items({"pixel_values": torch.zeros(rows, 2)}, {"pixel_values": config})


# --- shared ----------------------------------------------------------------------------------


def test_shared_field_is_seen_whole_by_every_item_and_batched_once() -> None:
    value = torch.tensor([1.0, 2.0, 3.0])
    items = build_kwargs_items(
        {"scale": value}, {"scale": MultiModalFieldConfig.shared("audio", 4)}
    )

    assert len(items["audio"]) == 4
    assert all(item["scale"].data is value for item in items["audio"])
    assert all(isinstance(item["scale"].field, MultiModalSharedField) for item in items["audio"])
    # Not stacked four times: the model gets the one shared value.
    assert torch.equal(items.get_data()["scale"], value)


# --- several fields and modalities -----------------------------------------------------------


def qwen_like_batch() -> tuple[dict[str, Any], dict[str, MultiModalFieldConfig]]:
    """Two images (4 and 6 patches) and one video (8 patches), laid out like Qwen2-VL's output."""
    image_grid = torch.tensor([[1, 2, 2], [1, 2, 3]])
    video_grid = torch.tensor([[2, 2, 2]])
    hf_inputs = {
        "input_ids": torch.tensor([[1, 2, 3]]),  # from the dummy text: no config, must be dropped
        "attention_mask": torch.ones(1, 3),
        "pixel_values": torch.randn(10, 6),
        "image_grid_thw": image_grid,
        "pixel_values_videos": torch.randn(8, 6),
        "video_grid_thw": video_grid,
    }
    config = {
        "pixel_values": MultiModalFieldConfig.flat_from_sizes("image", image_grid.prod(-1)),
        "image_grid_thw": MultiModalFieldConfig.batched("image"),
        "pixel_values_videos": MultiModalFieldConfig.flat_from_sizes("video", video_grid.prod(-1)),
        "video_grid_thw": MultiModalFieldConfig.batched("video"),
        "second_per_grid_ts": MultiModalFieldConfig.batched("video"),  # configured, absent: skipped
    }
    return hf_inputs, config


def test_multi_field_multi_modality_roundtrip_drops_unconfigured_fields() -> None:
    hf_inputs, config = qwen_like_batch()
    items = build_kwargs_items(hf_inputs, config)

    assert {m: len(v) for m, v in items.items()} == {"image": 2, "video": 1}
    first_image = items["image"][0]
    assert set(first_image) == {"pixel_values", "image_grid_thw"}
    assert torch.equal(first_image["pixel_values"].data, hf_inputs["pixel_values"][:4])
    assert torch.equal(first_image["image_grid_thw"].data, hf_inputs["image_grid_thw"][0])

    rebuilt = items.get_data()
    assert set(rebuilt) == {
        "pixel_values",
        "image_grid_thw",
        "pixel_values_videos",
        "video_grid_thw",
    }
    for key, value in rebuilt.items():
        assert torch.equal(value, hf_inputs[key]), key


def test_items_reassembled_from_a_cache_mix_batch_like_one_processor_call() -> None:
    """Items from two separate HF calls, merged per modality, batch like a single call's output."""
    hf_inputs, config = qwen_like_batch()
    items = build_kwargs_items(hf_inputs, config)
    merged = MultiModalKwargsItems(
        {
            "image": [items["image"][0], MultiModalKwargsItem(items["image"][1])],
            "video": items["video"],
        }
    )
    assert torch.equal(merged.get_data()["pixel_values"], hf_inputs["pixel_values"])


def test_inconsistent_item_counts_within_a_modality_are_rejected() -> None:
    config = {
        "pixel_values": MultiModalFieldConfig.flat_from_sizes("image", [2, 2, 2]),
        "image_grid_thw": MultiModalFieldConfig.batched("image"),
    }
    hf_inputs = {"pixel_values": torch.zeros(6, 2), "image_grid_thw": torch.zeros(2, 3)}
    with pytest.raises(
        ValueError, match=r"'image_grid_thw' has 2 image items, other fields have 3"
    ):
        build_kwargs_items(hf_inputs, config)


def test_shared_batch_size_must_match_the_other_fields_of_its_modality() -> None:
    config = {
        "feat": MultiModalFieldConfig.batched("audio"),
        "scale": MultiModalFieldConfig.shared("audio", 3),
    }
    with pytest.raises(ValueError, match="'scale' has 3 audio items"):
        build_kwargs_items({"feat": torch.zeros(2, 4), "scale": torch.ones(1)}, config)
