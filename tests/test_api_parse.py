"""vLLM 0.33's ``vllm.multimodal.parse`` additions at ``mediaref.parse``.

UUID normalization, embedding validation and field roles, vision chunks, the hash view of items
(``get_item_for_hash``) and selecting modalities.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pytest
import torch
from PIL import Image

from _counting import CountingDecoder
from mediaref.media.base import DecodeSpec, MediaRef, MediaWithBytes
from mediaref.parse import (
    AudioProcessorItems,
    DictEmbeddingItems,
    EmbeddingFieldRole,
    ImageProcessorItems,
    ImageSize,
    MultiModalDataItems,
    MultiModalDataParser,
    VideoProcessorItems,
    VisionChunkProcessorItems,
    parse_mm_uuids,
    validate_embedding_ndim,
)
from mediaref.processing.fields import MultiModalFieldConfig

# --- UUIDs ----------------------------------------------------------------------------------------


def test_parse_mm_uuids_lists_every_modality() -> None:
    assert parse_mm_uuids(None) == {}
    assert parse_mm_uuids({"image": "u1", "video": ["v1", None]}) == {
        "image": ["u1"],
        "video": ["v1", None],
    }


# --- embeddings -----------------------------------------------------------------------------------


def test_validate_embedding_ndim_accepts_2d_and_3d_only() -> None:
    validate_embedding_ndim(torch.zeros(3, 4), "image")
    validate_embedding_ndim(torch.zeros(2, 3, 4), "image")
    with pytest.raises(
        ValueError, match=r"Audio embedding \[2\] must be 2D .* got 1D tensor with shape \(4,\)"
    ):
        validate_embedding_ndim(torch.zeros(4), "audio", index=2)
    with pytest.raises(ValueError, match=r"^Video embedding must be 2D"):
        validate_embedding_ndim(torch.zeros(1, 1, 1, 1), "video")


def batched_config(_: Any) -> dict[str, MultiModalFieldConfig]:
    return {
        "audio_embeds": MultiModalFieldConfig.batched("audio"),
        "audio_num_tokens": MultiModalFieldConfig.batched("audio", keep_on_cpu=True),
    }


def test_dict_embeddings_may_omit_optional_fields_but_need_a_required_one() -> None:
    counts = torch.tensor([2, 3])
    items = DictEmbeddingItems(
        {"audio_num_tokens": counts},
        "audio",
        {"audio_num_tokens"},
        batched_config,
        {"audio_embeds"},
    )
    assert items.get_count() == 2 and items.get(1)["audio_num_tokens"] == 3
    with pytest.raises(ValueError, match="every declared field is optional"):
        DictEmbeddingItems({"audio_num_tokens": counts}, "audio", set(), batched_config, {"x"})
    with pytest.raises(ValueError, match="should be a subset of"):
        DictEmbeddingItems(
            {"audio_num_tokens": counts}, "audio", {"audio_num_tokens"}, batched_config, {"other"}
        )


class AudioEmbeddingParser(MultiModalDataParser):
    embedding_fields: ClassVar[dict[str, dict[str, EmbeddingFieldRole]]] = {
        "audio": {"audio_embeds": "values", "audio_num_tokens": "metadata"}
    }


def test_embedding_field_roles_decide_what_a_request_must_carry() -> None:
    assert MultiModalDataParser.placeholder_metadata_fields("audio") == set()
    assert AudioEmbeddingParser.placeholder_metadata_fields("audio") == {"audio_num_tokens"}
    assert AudioEmbeddingParser().embedding_field_sets("audio") == (
        {"audio_embeds", "audio_num_tokens"},
        set(),
    )
    consumer = AudioEmbeddingParser(allow_missing_mm_embeddings=True)
    assert consumer.embedding_field_sets("audio") == ({"audio_num_tokens"}, {"audio_embeds"})


def test_audio_embeddings_given_as_a_dict_with_token_counts() -> None:
    embeds = [torch.zeros(2, 8), torch.zeros(3, 8)]
    data = {"audio_embeds": embeds, "audio_num_tokens": torch.tensor([[2], [3]])}
    items = AudioEmbeddingParser().parse_mm_data({"audio": data})["audio"]
    assert isinstance(items, DictEmbeddingItems) and items.get_count() == 2
    assert items.get(1)["audio_embeds"].shape == (3, 8)
    with pytest.raises(ValueError, match="does not match audio_embeds"):
        AudioEmbeddingParser().parse_mm_data(
            {"audio": {"audio_embeds": embeds, "audio_num_tokens": torch.tensor([2, 2])}}
        )
    for bad in (torch.tensor([2.0, 3.0]), torch.tensor([0, 3]), [2, 3]):
        with pytest.raises(ValueError, match="one positive integer per audio"):
            AudioEmbeddingParser().parse_mm_data({"audio": {"audio_num_tokens": bad}})
    # On a consumer the embeddings may be missing; the counts alone size the placeholders.
    consumer = AudioEmbeddingParser(allow_missing_mm_embeddings=True)
    only_counts = consumer.parse_mm_data({"audio": {"audio_num_tokens": torch.tensor([4])}})
    assert only_counts["audio"].get(0)["audio_num_tokens"] == 4
    with pytest.raises(ValueError, match="should contain the fields"):
        AudioEmbeddingParser().parse_mm_data({"audio": {"audio_num_tokens": torch.tensor([4])}})


# --- vision chunks --------------------------------------------------------------------------------


def test_vision_chunks_parse_into_their_own_items() -> None:
    image = Image.new("RGB", (2, 2))
    chunk = {"type": "image", "image": image, "uuid": None}
    video = {
        "type": "video_chunk",
        "video_chunk": [image],
        "uuid": "v",
        "prompt": "p",
        "video_idx": 0,
    }
    parsed = MultiModalDataParser().parse_mm_data({"vision_chunk": chunk})["vision_chunk"]
    assert isinstance(parsed, VisionChunkProcessorItems) and parsed.modality == "vision_chunk"
    assert parsed.get(0) is chunk
    two = MultiModalDataParser().parse_mm_data({"vision_chunk": [chunk, video]})["vision_chunk"]
    assert two.get_count() == 2 and two.get_processor_data() == {"vision_chunks": [chunk, video]}
    with pytest.raises(ValueError, match="Do not support embedding data for vision_chunk"):
        MultiModalDataParser().parse_mm_data({"vision_chunk": torch.zeros(1, 2, 3)})


# --- the hash view ----------------------------------------------------------------------------------


def test_items_for_hash_are_the_raw_items() -> None:
    ref = MediaRef(b"png", CountingDecoder(Image.new("RGB", (1, 1))), DecodeSpec(modality="image"))
    wrapped = MediaWithBytes(Image.new("RGB", (3, 2)), b"png bytes")
    items = ImageProcessorItems([ref, wrapped])
    assert items.get_all_items_for_hash() == [ref, wrapped] and not ref.is_decoded
    assert items.get(1) is wrapped.media  # HF sees the media, the hasher the bytes
    assert items.get_image_size(1) == ImageSize(3, 2)


def test_video_for_hash_pairs_a_wrapped_video_with_its_given_metadata() -> None:
    frames = np.zeros((2, 4, 4, 3), np.uint8)
    wrapped = MediaWithBytes(frames, b"mp4")
    items = VideoProcessorItems([wrapped, frames], metadata=[{"fps": 2.0}, {"fps": 1.0}])
    assert items.get_item_for_hash(0) == (wrapped, {"fps": 2.0})
    assert items.get_item_for_hash(1) is frames  # not wrapped: the frames themselves
    assert items.get_frames(0) is frames and items.get_num_frames(0) == 2


def test_cached_items_have_no_size() -> None:
    with pytest.raises(ValueError, match="Cannot get size of cached image at 0"):
        ImageProcessorItems([None]).get_image_size(0)
    with pytest.raises(ValueError, match="Cannot get length of cached audio at 0"):
        AudioProcessorItems([None]).get_audio_length(0)
    with pytest.raises(ValueError, match="Cannot get frames of cached video at 0"):
        VideoProcessorItems([None]).get_num_frames(0)


def test_image_size_reads_a_trailing_channel_axis_as_vllm_does() -> None:
    # (3, 5, 4): the last axis could be RGBA channels, so the array is read channels-last.
    assert ImageProcessorItems([torch.zeros(3, 5, 4)]).get_image_size(0) == ImageSize(5, 3)
    assert ImageProcessorItems([torch.zeros(2, 5, 7)]).get_image_size(0) == ImageSize(7, 5)


# --- selecting modalities -----------------------------------------------------------------------------


def test_select_takes_a_set_of_modalities_or_indices_per_modality() -> None:
    parsed = MultiModalDataParser().parse_mm_data(
        {"image": [Image.new("RGB", (1, 1))] * 3, "audio": [np.zeros(4)]}
    )
    only_audio = parsed.select({"audio"})
    assert isinstance(only_audio, MultiModalDataItems) and set(only_audio) == {"audio"}
    assert only_audio["audio"] is parsed["audio"]
    picked = parsed.select({"image": [2, 0]})
    assert picked["image"].get_count() == 2 and picked["image"].get_original_index(0) == 2
    with pytest.raises(KeyError, match="Modality 'video' not found"):
        parsed.select({"video"})
