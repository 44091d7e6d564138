"""vLLM 0.33's ``vllm.multimodal.inputs`` at ``mediaref.inputs``: fields, items, features, ranges.

Each test states a behaviour vLLM documents (docstrings and examples of its ``inputs.py``) and
checks mediaref's implementation against it.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch

import mediaref
from mediaref import inputs
from mediaref.inputs import (
    MultiModalBatchedField,
    MultiModalFeatureSpec,
    MultiModalFieldConfig,
    MultiModalFieldElem,
    MultiModalFlatField,
    MultiModalKwargsItem,
    MultiModalKwargsItems,
    MultiModalSharedField,
    PlaceholderRange,
    batched_tensors_equal,
    nested_tensors_equal,
)
from mediaref.processing import fields

# --- the package front door and the old path ------------------------------------------------------


def test_vllm_multimodal_front_door_names() -> None:
    assert mediaref.MultiModalKwargsItems is MultiModalKwargsItems
    assert mediaref.NestedTensors is inputs.NestedTensors
    assert mediaref.BatchedTensorInputs is inputs.BatchedTensorInputs
    assert isinstance(mediaref.MULTIMODAL_REGISTRY, mediaref.MultiModalRegistry)


def test_processing_fields_is_a_re_export_of_inputs() -> None:
    assert fields.MultiModalFieldConfig is MultiModalFieldConfig
    assert fields.MultiModalFieldElem is MultiModalFieldElem


# --- field configs: cutting a batch into items ----------------------------------------------------


def elems_data(config: MultiModalFieldConfig, batch: Any) -> list[Any]:
    return [elem.data for elem in config.build_elems("key", batch)]


def test_batched_cuts_rows_and_records_its_field() -> None:
    config = MultiModalFieldConfig.batched("image", keep_on_cpu=True)
    assert isinstance(config.field, MultiModalBatchedField) and config.field.keep_on_cpu
    assert config.modality == "image"
    rows = elems_data(config, torch.arange(6).reshape(3, 2))
    assert [row.tolist() for row in rows] == [[0, 1], [2, 3], [4, 5]]
    assert all(e.field is config.field for e in config.build_elems("key", [1, 2]))


def test_flat_along_dim_1_takes_tuples_of_slices() -> None:
    # vLLM's docstring example: items along dim 1, selected by (slice(None), slice(a, b)).
    data = torch.arange(9).reshape(1, 9)
    config = MultiModalFieldConfig.flat(
        "image",
        [(slice(None), slice(0, 3)), (slice(None), slice(3, 7)), (slice(None), slice(7, 9))],
        dim=1,
    )
    assert [e.tolist() for e in elems_data(config, data)] == [[[0, 1, 2]], [[3, 4, 5, 6]], [[7, 8]]]


def test_flat_from_sizes_along_dim_1_prefixes_full_slices() -> None:
    config = MultiModalFieldConfig.flat_from_sizes("audio", torch.tensor([3, 4, 2]), dim=1)
    assert config.field.slices == [
        (slice(None), slice(0, 3)),
        (slice(None), slice(3, 7)),
        (slice(None), slice(7, 9)),
    ]
    assert config.field.dim == 1
    data = torch.arange(18).reshape(2, 9)
    assert [e.shape for e in elems_data(config, data)] == [(2, 3), (2, 4), (2, 2)]


def test_flat_from_sizes_requires_a_1d_size_tensor() -> None:
    with pytest.raises(ValueError, match="size_per_item should be a 1-D tensor"):
        MultiModalFieldConfig.flat_from_sizes("image", torch.ones(2, 2, dtype=torch.long))


def test_flat_over_a_list_takes_plain_slices_but_dim_1_needs_a_tensor() -> None:
    config = MultiModalFieldConfig.flat_from_sizes("image", [1, 2])
    assert elems_data(config, ["a", "b", "c"]) == [["a"], ["b", "c"]]
    with pytest.raises(TypeError, match="needs a tensor"):
        MultiModalFieldConfig.flat("image", [(slice(None), slice(0, 1))], dim=1).build_elems(
            "k", [[1]]
        )


def test_shared_gives_every_item_the_same_value() -> None:
    value = torch.ones(2)
    config = MultiModalFieldConfig.shared("video", 3)
    assert isinstance(config.field, MultiModalSharedField) and config.field.batch_size == 3
    assert all(data is value for data in elems_data(config, value))


def test_fields_take_vllms_keyword_arguments() -> None:
    assert MultiModalFlatField(slices=[slice(0, 1)], dim=0, keep_on_cpu=True).keep_on_cpu
    assert MultiModalSharedField(batch_size=2).batch_size == 2
    assert MultiModalBatchedField(keep_on_cpu=True) == MultiModalBatchedField(keep_on_cpu=True)
    with pytest.raises(TypeError):
        inputs.BaseMultiModalField()  # type: ignore[abstract]


# --- reduce_data: merging items back ---------------------------------------------------------------


def elems(field: Any, *values: Any) -> list[MultiModalFieldElem]:
    return [MultiModalFieldElem(value, field) for value in values]


def test_batched_reduce_stacks_equal_shapes_and_lists_ragged_ones() -> None:
    field = MultiModalBatchedField()
    one = field.reduce_data(elems(field, torch.ones(2)))
    assert one.shape == (1, 2)  # a single item still gains the batch dimension
    assert field.reduce_data(elems(field, torch.ones(2), torch.zeros(2))).shape == (2, 2)
    ragged = field.reduce_data(elems(field, torch.ones(2), torch.zeros(3)))
    assert isinstance(ragged, list) and len(ragged) == 2


def test_flat_reduce_concatenates_and_zero_pads_other_dimensions() -> None:
    field = MultiModalFlatField([slice(0, 1)])
    assert field.reduce_data(elems(field, torch.ones(2, 3), torch.ones(1, 3))).shape == (3, 3)
    # Audio features of different lengths (the non-concatenated dim): padded with zeros.
    out = field.reduce_data(elems(field, torch.ones(1, 2), torch.full((2, 4), 2.0)))
    assert out.shape == (3, 4)
    assert out[0].tolist() == [1, 1, 0, 0] and out[1:].eq(2).all()
    along_1 = MultiModalFlatField([slice(0, 1)], dim=1)
    assert along_1.reduce_data(elems(along_1, torch.ones(2, 1), torch.ones(2, 3))).shape == (2, 4)
    nested = field.reduce_data(elems(field, [1, 2], [3]))
    assert nested == [1, 2, 3]


def test_shared_reduce_passes_the_value_once() -> None:
    field = MultiModalSharedField(2)
    value = torch.ones(3)
    assert field.reduce_data(elems(field, value, value)) is value


def test_reduce_refuses_mixed_field_kinds() -> None:
    batched, shared = MultiModalBatchedField(), MultiModalSharedField(1)
    mixed = elems(batched, torch.ones(1)) + elems(shared, torch.ones(1))
    with pytest.raises(ValueError, match="Cannot merge"):
        batched.reduce_data(mixed)


def test_reduce_to_a_device_keeps_keep_on_cpu_fields_on_the_cpu() -> None:
    field = MultiModalBatchedField(keep_on_cpu=True)
    out = field.reduce_data(elems(field, torch.ones(2)), device="meta")
    assert out.device.type == "cpu"
    moved = MultiModalBatchedField().reduce_data(
        elems(MultiModalBatchedField(), torch.ones(2)), device="meta"
    )
    assert moved.device.type == "meta"


# --- field elements and items ---------------------------------------------------------------------


def test_field_elems_compare_data_and_field_kind() -> None:
    a = MultiModalFieldElem(torch.ones(2), MultiModalBatchedField())
    assert a == MultiModalFieldElem(torch.ones(2), MultiModalBatchedField(keep_on_cpu=True))
    assert a != MultiModalFieldElem(torch.ones(2), MultiModalSharedField(1))
    assert a != MultiModalFieldElem(torch.zeros(2), MultiModalBatchedField())
    assert MultiModalFieldElem(None, MultiModalBatchedField()) == MultiModalFieldElem(  # type: ignore[arg-type]
        None,
        MultiModalBatchedField(),  # type: ignore[arg-type]
    )


def test_dummy_item_holds_nbytes_in_a_shared_field() -> None:
    item = MultiModalKwargsItem.dummy(64)
    assert list(item) == ["dummy"] and item["dummy"].data.nbytes == 64
    assert isinstance(item["dummy"].field, MultiModalSharedField)
    assert MultiModalKwargsItem.dummy().nbytes == 1


def qwen_like() -> tuple[dict[str, Any], dict[str, MultiModalFieldConfig]]:
    grid = torch.tensor([[1, 2, 2], [1, 2, 3]])
    hf = {"pixel_values": torch.randn(10, 3), "image_grid_thw": grid, "input_ids": torch.ones(5)}
    config = {
        "pixel_values": MultiModalFieldConfig.flat_from_sizes("image", grid.prod(-1)),
        "image_grid_thw": MultiModalFieldConfig.batched("image"),
        "absent": MultiModalFieldConfig.batched("image"),
    }
    return hf, config


def test_from_hf_inputs_cuts_items_skipping_unconfigured_and_absent_fields() -> None:
    hf, config = qwen_like()
    items = MultiModalKwargsItems.from_hf_inputs({**hf, "absent": None}, config)
    assert list(items) == ["image"] and len(items["image"]) == 2
    assert set(items["image"][1]) == {"pixel_values", "image_grid_thw"}
    assert items["image"][1]["pixel_values"].data.shape == (6, 3)
    assert torch.equal(items.get_data()["pixel_values"], hf["pixel_values"])


def test_from_hf_inputs_refuses_disagreeing_batch_sizes() -> None:
    hf, config = qwen_like()
    hf["image_grid_thw"] = hf["image_grid_thw"][:1]
    with pytest.raises(ValueError, match="Cannot merge different batch sizes for modality='image'"):
        MultiModalKwargsItems.from_hf_inputs(hf, config)


def test_missing_modality_names_the_available_ones() -> None:
    items = MultiModalKwargsItems({"image": []})
    with pytest.raises(
        KeyError, match=re.escape("Modality 'video' not found. Available modalities: {'image'}")
    ):
        items["video"]


def test_require_data_refuses_an_item_the_engine_core_holds() -> None:
    hf, config = qwen_like()
    items = MultiModalKwargsItems.from_hf_inputs(hf, config)
    assert items.require_data() is items
    items["image"][1] = None  # type: ignore[call-overload]
    with pytest.raises(RuntimeError, match=r"Found empty mm_items\[image\]\[1\]"):
        items.require_data()
    with pytest.raises(RuntimeError):
        items.get_data()


def test_get_data_needs_each_modality_to_form_one_batch() -> None:
    embeds = MultiModalKwargsItem(
        {"image_embeds": MultiModalFieldElem(torch.ones(2), MultiModalBatchedField())}
    )
    pixels = MultiModalKwargsItem(
        {"pixel_values": MultiModalFieldElem(torch.ones(2), MultiModalBatchedField())}
    )
    with pytest.raises(RuntimeError, match="cannot be merged into a single batch"):
        MultiModalKwargsItems({"image": [embeds, pixels]}).get_data()
    shared = [
        MultiModalKwargsItem(
            {"s": MultiModalFieldElem(torch.tensor([v]), MultiModalSharedField(1))}
        )
        for v in (1, 2)
    ]
    with pytest.raises(RuntimeError):  # different shared values cannot share one batch
        MultiModalKwargsItems({"audio": shared}).get_data()
    same = [shared[0], shared[0]]
    assert torch.equal(MultiModalKwargsItems({"audio": same}).get_data()["s"], torch.tensor([1]))


def test_feature_spec_gathers_kwargs_of_present_items() -> None:
    def item(value: int) -> MultiModalKwargsItem:
        return MultiModalKwargsItem(
            {"grid": MultiModalFieldElem(torch.tensor([value]), MultiModalBatchedField())}
        )

    position = PlaceholderRange(0, 1)
    features = [
        MultiModalFeatureSpec(item(1), "image", "id-1", position, mm_hash="h1"),
        MultiModalFeatureSpec(None, "image", "id-2", position),
        MultiModalFeatureSpec(item(3), "image", "id-3", position),
    ]
    gathered = MultiModalFeatureSpec.gather_kwargs(features, {"grid", "other"})
    assert list(gathered) == ["grid"] and [t.item() for t in gathered["grid"]] == [1, 3]
    assert features[1].mm_hash is None and features[0].mm_hash == "h1"


# --- placeholder ranges ---------------------------------------------------------------------------


def test_placeholder_examples_from_vllms_docs() -> None:
    mask = torch.tensor([False, True, False, True, True])
    placeholder = PlaceholderRange(offset=2, length=5, is_embed=mask)
    assert placeholder.embeds_cumsum == [0, 1, 1, 2, 3]
    assert placeholder.get_num_embeds() == 3
    assert placeholder.get_embeds_indices_in_range(3, 5) == (1, 3)
    assert placeholder.get_embeds_indices_in_range(0, 0) == (0, 0)
    assert placeholder.extract_embeds_range() == [(3, 3), (5, 6)]
    whole = PlaceholderRange(offset=2, length=5)
    assert whole.embeds_cumsum is None and whole.get_num_embeds() == 5
    assert whole.get_embeds_indices_in_range(1, 4) == (1, 4)
    assert whole.extract_embeds_range() == [(2, 6)]


def test_placeholder_edge_masks() -> None:
    assert PlaceholderRange(0, 0, torch.zeros(0, dtype=torch.bool)).get_num_embeds() == 0
    none_set = PlaceholderRange(4, 3, torch.zeros(3, dtype=torch.bool))
    assert none_set.extract_embeds_range() == []
    all_set = PlaceholderRange(4, 3, torch.ones(3, dtype=torch.bool))
    assert all_set.extract_embeds_range() == [(4, 6)]


def test_placeholder_is_frozen_and_compares_masks_by_value() -> None:
    a = PlaceholderRange(1, 2, torch.tensor([True, False]))
    assert a == PlaceholderRange(1, 2, torch.tensor([True, False]))
    assert a != PlaceholderRange(1, 2, torch.tensor([True, True]))
    assert a != PlaceholderRange(1, 2) and PlaceholderRange(1, 2) == PlaceholderRange(1, 2)
    assert hash(a) == hash(PlaceholderRange(1, 2, torch.tensor([True, False])))
    with pytest.raises(AttributeError):
        a.offset = 3  # type: ignore[misc]


# --- nested tensors -------------------------------------------------------------------------------


def test_nested_tensors_equal() -> None:
    assert nested_tensors_equal(
        [torch.ones(2), [torch.zeros(1)]], [torch.ones(2), [torch.zeros(1)]]
    )
    assert not nested_tensors_equal([torch.ones(2)], (torch.ones(2),))  # list is not tuple
    assert not nested_tensors_equal(torch.ones(2), torch.ones(2, dtype=torch.int64))
    assert nested_tensors_equal(torch.ones(2), torch.ones(2, dtype=torch.int64), check_dtype=False)
    assert not nested_tensors_equal([torch.ones(2)], [torch.ones(2), torch.ones(2)])
    assert nested_tensors_equal(3, 3) and not nested_tensors_equal(torch.ones(1), 1)  # type: ignore[arg-type]


def test_batched_tensors_equal_checks_the_keys_of_the_first() -> None:
    a = {"x": torch.ones(1)}
    assert batched_tensors_equal(a, {"x": torch.ones(1), "y": torch.zeros(1)})
    assert not batched_tensors_equal({**a, "z": torch.ones(1)}, a)


def test_vision_chunk_typed_dicts() -> None:
    assert set(inputs.VisionChunkVideo.__annotations__) == {
        "type",
        "video_chunk",
        "uuid",
        "prompt",
        "video_idx",
    }
    chunk: inputs.VisionChunkImage = {"type": "image", "image": None, "uuid": None}  # type: ignore[typeddict-item]
    assert chunk["type"] == "image"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_get_data_moves_batches_to_the_device_through_pinned_memory() -> None:
    grid = MultiModalFieldConfig.batched("image", keep_on_cpu=True)
    pixels = MultiModalFieldConfig.flat_from_sizes("image", [2, 3])
    hf = {"pixel_values": torch.randn(5, 4).t().contiguous().t(), "grid": torch.ones(2, 3)}
    items = MultiModalKwargsItems.from_hf_inputs(hf, {"pixel_values": pixels, "grid": grid})
    data = items.get_data(device="cuda", pin_memory=True)
    assert data["pixel_values"].device.type == "cuda"
    assert torch.equal(data["pixel_values"].cpu(), hf["pixel_values"])
    assert data["grid"].device.type == "cpu"  # keep_on_cpu: read on the host
    on_device = MultiModalBatchedField()
    moved = on_device.reduce_data(elems(on_device, torch.ones(2, device="cuda")), pin_memory=True)
    assert moved.device.type == "cuda"  # already on the device: nothing to pin
