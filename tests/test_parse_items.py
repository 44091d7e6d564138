"""Parsed items: decoded vs raw views, selection, original indices, video views, embeddings."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from _counting import CountingDecoder
from mediaref.inputs import MultiModalBatchedField, MultiModalFieldElem
from mediaref.media.base import DecodeSpec, MediaRef
from mediaref.parse import (
    AudioProcessorItems,
    DictEmbeddingItems,
    EmbeddingItems,
    ImageEmbeddingItems,
    ImageProcessorItems,
    ImageSize,
    ModalityDataItems,
    MultiModalDataItems,
    ProcessorBatchItems,
    VideoProcessorItems,
)
from mediaref.processing.fields import MultiModalFieldConfig


def counted_ref(value: object, tag: str = "x") -> tuple[MediaRef[Any], CountingDecoder]:
    decoder = CountingDecoder(value)
    return MediaRef(tag.encode(), decoder, DecodeSpec(modality="test", tag=tag)), decoder


def video_value(
    frames: int = 3, height: int = 4, width: int = 5, fps: float = 2.0
) -> tuple[np.ndarray, dict[str, Any]]:
    return np.zeros((frames, height, width, 3), np.uint8), {"fps": fps, "total_num_frames": frames}


# --- get / get_raw ----------------------------------------------------------------------------


def test_get_decodes_a_ref_and_get_raw_returns_it_undecoded() -> None:
    image = Image.new("RGB", (6, 4))
    ref, decoder = counted_ref(image)
    items = ImageProcessorItems([ref])
    assert items.get_raw(0) is ref
    assert decoder.calls == 0 and not ref.is_decoded
    assert items.get(0) is image and items[0] is image
    assert decoder.calls == 1


def test_get_raw_defaults_to_get_for_decoded_media_and_embeddings() -> None:
    image = Image.new("RGB", (2, 2))
    assert ImageProcessorItems([image]).get_raw(0) is image
    embeds = [torch.zeros(3, 8)]
    items = ImageEmbeddingItems(embeds)
    assert items.get_raw(0) is embeds[0] is items.get(0)


def test_repr_and_len_never_decode() -> None:
    ref, decoder = counted_ref("v")
    items = ImageProcessorItems([ref, ref])
    assert repr(items) == "ImageProcessorItems(modality='image', len=2)"
    assert len(items) == 2 and decoder.calls == 0


def test_iteration_and_get_all_yield_decoded_items() -> None:
    ref, _ = counted_ref("decoded")
    items = ImageProcessorItems([ref, "plain"])
    assert list(items) == ["decoded", "plain"] == items.get_all()
    assert items.get_all_raw() == [ref, "plain"]
    assert items.get_processor_data() == {"images": ["decoded", "plain"]}
    assert items.get_passthrough_data() == {}


def test_none_data_is_one_uuid_only_item() -> None:
    for cls in (ImageProcessorItems, AudioProcessorItems, VideoProcessorItems):
        items = cls(None)
        assert items.get_count() == 1 and items.get(0) is None and items.get_raw(0) is None


def test_decode_failure_propagates_unchanged() -> None:
    error = ValueError("Failed to load image: broken")

    def broken() -> object:
        raise error

    items = ImageProcessorItems([MediaRef(b"x", broken, DecodeSpec(modality="image"))])
    with pytest.raises(ValueError) as info:
        items.get(0)
    assert info.value is error


# --- select -----------------------------------------------------------------------------------


def test_select_keeps_class_raw_refs_and_request_positions() -> None:
    refs = [counted_ref(i, f"r{i}") for i in range(5)]
    items = ImageProcessorItems([ref for ref, _ in refs])
    selected = items.select([4, 1, 3])
    assert type(selected) is ImageProcessorItems and selected.modality == "image"
    assert [selected.get_raw(i) for i in range(3)] == [refs[4][0], refs[1][0], refs[3][0]]
    assert [selected.get_original_index(i) for i in range(3)] == [4, 1, 3]
    assert all(decoder.calls == 0 for _, decoder in refs)
    # The source is untouched: select rebinds, never mutates.
    assert items.get_count() == 5 and items.get_original_index(2) == 2


def test_original_index_survives_selection_of_a_selection() -> None:
    items = AudioProcessorItems([np.zeros(1), np.ones(1), np.full(1, 2.0), np.full(1, 3.0)])
    twice = items.select([3, 0, 2]).select([2, 0])
    assert [twice.get_original_index(i) for i in range(2)] == [2, 3]
    assert [float(twice.get(i)[0]) for i in range(2)] == [2.0, 3.0]


def test_select_does_not_revalidate() -> None:
    class Strict(ProcessorBatchItems[Any]):
        constructed = 0

        def __init__(self, data: list[Any]) -> None:
            type(self).constructed += 1
            super().__init__(data, "image")

    items = Strict([1, 2, 3])
    items.select([0, 2])
    assert Strict.constructed == 1


def test_select_rejects_out_of_range_indices() -> None:
    items = ImageProcessorItems(["a", "b"])
    with pytest.raises(IndexError, match="index 2 out of range for 2"):
        items.select([0, 2])
    with pytest.raises(IndexError):
        items.select([-1])
    with pytest.raises(IndexError):
        items.get_original_index(5)


def test_select_on_a_subclass_without_take_fails_clearly() -> None:
    class Custom(ModalityDataItems[list[int], int]):
        def get_count(self) -> int:
            return len(self.data)

        def get(self, index: int) -> int:
            return self.data[index]

        def get_processor_data(self) -> dict[str, object]:
            return {}

        def get_passthrough_data(self) -> dict[str, object]:
            return {}

    with pytest.raises(NotImplementedError, match="Custom does not support select"):
        Custom([1], "image").select([0])


def test_select_embeddings_tensor_and_list() -> None:
    batched = torch.arange(24, dtype=torch.float32).reshape(3, 2, 4)
    selected = ImageEmbeddingItems(batched).select([2, 0])
    assert type(selected) is ImageEmbeddingItems
    assert torch.equal(selected.get(0), batched[2]) and torch.equal(selected.get(1), batched[0])
    assert torch.equal(selected.get_passthrough_data()["image_embeds"], batched[[2, 0]])
    listed = EmbeddingItems([torch.zeros(1, 4), torch.ones(2, 4)], "audio").select([1])
    assert listed.get_feature_size(0) == 2 and listed.get_original_index(0) == 1


def test_multimodal_data_items_select_per_modality() -> None:
    items = MultiModalDataItems(
        {"image": ImageProcessorItems(["a", "b", "c"]), "audio": AudioProcessorItems([np.zeros(2)])}
    )
    selected = items.select({"image": [2]})
    assert list(selected) == ["image"] and selected["image"].get(0) == "c"
    assert selected["image"].get_original_index(0) == 2


# --- MultiModalDataItems ----------------------------------------------------------------------


def test_multimodal_data_items_counts_and_typed_access() -> None:
    items = MultiModalDataItems({"image": ImageProcessorItems(["a", "b"])})
    assert items.get_count("image") == 2 and items.get_all_counts() == {"image": 2}
    assert items.get_count("video", strict=False) == 0
    with pytest.raises(KeyError, match="Modality 'video' not found"):
        items.get_count("video")
    assert isinstance(
        items.get_items("image", (ImageProcessorItems, ImageEmbeddingItems)), ImageProcessorItems
    )
    with pytest.raises(TypeError, match="Invalid type of data items"):
        items.get_items("image", ImageEmbeddingItems)


# --- image and audio helpers ------------------------------------------------------------------


def test_image_size_of_pil_arrays_and_tensors() -> None:
    items = ImageProcessorItems(
        [
            Image.new("RGB", (7, 5)),
            np.zeros((5, 7, 3), np.uint8),  # HWC array
            torch.zeros(3, 5, 7),  # CHW tensor
            np.zeros((3, 5, 7), np.float32),  # CHW array: the channel axis is unambiguous
            np.zeros((5, 7), np.uint8),  # grayscale
        ]
    )
    assert {items.get_image_size(i) for i in range(5)} == {ImageSize(width=7, height=5)}


def test_image_size_of_a_ref_decodes_it_once() -> None:
    ref, decoder = counted_ref(Image.new("L", (3, 9)))
    items = ImageProcessorItems([ref])
    assert items.get_image_size(0) == ImageSize(3, 9) and items.get_image_size(0) == (3, 9)
    assert decoder.calls == 1


def test_audio_length_counts_samples_per_channel() -> None:
    items = AudioProcessorItems([np.zeros(100), np.zeros((2, 50)), np.zeros((40, 2)), [0.0] * 7])
    assert [items.get_audio_length(i) for i in range(4)] == [100, 50, 40, 7]


# --- embeddings -------------------------------------------------------------------------------


def test_embedding_validation_of_ndim_and_hidden_size() -> None:
    with pytest.raises(ValueError, match=r"Image embedding \[1\] must be 2D"):
        ImageEmbeddingItems([torch.zeros(2, 4), torch.zeros(4)])
    with pytest.raises(ValueError, match=r"must be 2D .* or 3D"):
        ImageEmbeddingItems(torch.zeros(1, 2, 3, 4))
    with pytest.raises(ValueError, match="hidden dimension mismatch: got 4, but model expects 8"):
        ImageEmbeddingItems(torch.zeros(1, 2, 4), expected_hidden_size=8)
    with pytest.raises(ValueError, match=r"embedding \[0\] hidden dimension mismatch"):
        ImageEmbeddingItems([torch.zeros(2, 4)], expected_hidden_size=8)
    ok = ImageEmbeddingItems([torch.zeros(2, 8)], expected_hidden_size=8)
    assert ok.get_passthrough_data()["image_embeds"][0].shape == (2, 8)
    assert ok.get_processor_data() == {}


class BatchedField:
    """A minimal field config: item ``i`` is row ``i`` (what ``MultiModalFieldConfig.batched`` does)."""

    def __init__(self, modality: str) -> None:
        self.modality = modality

    def build_elems(self, key: str, batch: Any) -> list[MultiModalFieldElem]:
        return [MultiModalFieldElem(row, MultiModalBatchedField()) for row in batch]


def make_dict_items() -> tuple[DictEmbeddingItems, dict[str, torch.Tensor]]:
    data = {
        "image_embeds": torch.arange(12, dtype=torch.float32).reshape(3, 2, 2),
        "image_grid_thw": torch.tensor([[1, 1, 2], [1, 2, 1], [1, 1, 1]]),
    }
    factory = lambda d: {key: BatchedField("image") for key in d}  # noqa: E731
    return DictEmbeddingItems(data, "image", {"image_embeds", "image_grid_thw"}, factory), data


def test_dict_embeddings_cut_into_items() -> None:
    items, data = make_dict_items()
    assert items.get_count() == 3
    assert torch.equal(items.get(1)["image_grid_thw"], data["image_grid_thw"][1])
    assert items.get_passthrough_data() is data and items.get_processor_data() == {}


def test_dict_embeddings_select_keeps_field_items_together() -> None:
    items, data = make_dict_items()
    selected = items.select([2, 0])
    assert type(selected) is DictEmbeddingItems and selected.get_count() == 2
    for position, original in enumerate([2, 0]):
        item = selected.get(position)
        assert torch.equal(item["image_embeds"], data["image_embeds"][original])
        assert torch.equal(item["image_grid_thw"], data["image_grid_thw"][original])
    passthrough = selected.get_passthrough_data()
    assert torch.equal(passthrough["image_grid_thw"], data["image_grid_thw"][[2, 0]])
    assert items.get_count() == 3  # the source keeps all of its items


def test_dict_embeddings_with_the_processing_field_config() -> None:
    data = {
        "image_embeds": torch.zeros(5, 4),
        "image_grid_thw": torch.tensor([[1, 1, 2], [1, 1, 3]]),
    }
    factory = lambda d: {  # noqa: E731
        "image_embeds": MultiModalFieldConfig.flat_from_sizes("image", [2, 3]),
        "image_grid_thw": MultiModalFieldConfig.batched("image"),
    }
    items = DictEmbeddingItems(data, "image", {"image_embeds"}, factory)
    assert items.get_count() == 2 and items.get(1)["image_embeds"].shape == (3, 4)
    assert items.select([1]).get_passthrough_data()["image_embeds"].shape == (3, 4)


def test_dict_embeddings_require_their_fields() -> None:
    factory = lambda d: {key: BatchedField("image") for key in d}  # noqa: E731
    with pytest.raises(ValueError, match="should contain the fields"):
        DictEmbeddingItems({"a": torch.zeros(1)}, "image", {"a", "b"}, factory)
    with pytest.raises(ValueError, match="should be a subset of"):
        DictEmbeddingItems(
            {"a": torch.zeros(1), "b": torch.zeros(1)},
            "image",
            {"a", "b"},
            lambda d: {"a": BatchedField("image")},
        )
    with pytest.raises(ValueError, match="Cannot merge different batch sizes"):
        DictEmbeddingItems({"a": torch.zeros(2), "b": torch.zeros(1)}, "image", {"a"}, factory)
