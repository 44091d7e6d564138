"""Video views: HF view per video_needs_metadata, frames, per-video metadata, whole-batch metadata."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from _counting import CountingDecoder
from mediaref.media.base import DecodeSpec, MediaRef
from mediaref.parse import ImageSize, MultiModalDataParser, VideoProcessorItems


def decoded_video(
    frames: int = 3, height: int = 4, width: int = 6, fps: float = 2.0
) -> tuple[np.ndarray, dict[str, Any]]:
    array = np.arange(frames * height * width * 3, dtype=np.uint8).reshape(frames, height, width, 3)
    return array, {"fps": fps, "total_num_frames": frames, "duration": frames / fps}


def video_ref(value: object, tag: str = "v") -> tuple[MediaRef[Any], CountingDecoder]:
    decoder = CountingDecoder(value)
    return MediaRef(tag.encode(), decoder, DecodeSpec(modality="video", tag=tag)), decoder


def test_hf_view_is_frames_alone_without_video_needs_metadata() -> None:
    value = decoded_video()
    ref, _ = video_ref(value)
    items = VideoProcessorItems([ref])
    assert items.get(0) is value[0]
    assert items.get_processor_data()["videos"][0] is value[0]


def test_hf_view_is_frames_and_metadata_with_video_needs_metadata() -> None:
    value = decoded_video(fps=5.0)
    ref, _ = video_ref(value)
    items = VideoProcessorItems([ref], video_needs_metadata=True)
    frames, metadata = items.get(0)
    assert frames is value[0] and metadata["fps"] == 5.0


def test_get_frames_is_frames_whatever_the_view() -> None:
    value = decoded_video(frames=4)
    for needs in (False, True):
        ref, _ = video_ref(value)
        items = VideoProcessorItems([ref], video_needs_metadata=needs)
        assert items.get_frames(0) is value[0]
        assert items.get_num_frames(0) == 4  # frames, not len((frames, metadata)) == 2
        assert items.get_frame_size(0) == ImageSize(width=6, height=4)


def test_get_metadata_decodes_only_that_video() -> None:
    pairs = [video_ref(decoded_video(fps=float(i + 1)), f"v{i}") for i in range(3)]
    items = VideoProcessorItems([ref for ref, _ in pairs])
    assert items.get_metadata(1)["fps"] == 2.0
    assert [decoder.calls for _, decoder in pairs] == [0, 1, 0]


def test_metadata_property_resolves_the_whole_batch() -> None:
    pairs = [video_ref(decoded_video(fps=float(i + 1)), f"v{i}") for i in range(3)]
    items = VideoProcessorItems([pairs[0][0], np.zeros((1, 2, 2, 3), np.uint8), pairs[2][0]])
    assert [m["fps"] if m else None for m in items.metadata] == [1.0, None, 3.0]


def test_given_metadata_supplies_metadata_for_bare_frames_and_is_selected_along() -> None:
    frames = [np.zeros((1, 2, 2, 3), np.uint8), np.ones((2, 2, 2, 3), np.uint8)]
    items = VideoProcessorItems(
        frames, metadata=[{"fps": 1.0}, {"fps": 9.0}], video_needs_metadata=True
    )
    selected = items.select([1])
    selected_frames, metadata = selected.get(0)
    assert selected_frames is frames[1] and metadata == {"fps": 9.0}
    assert selected.metadata == [{"fps": 9.0}]


def test_given_metadata_must_match_the_videos() -> None:
    with pytest.raises(ValueError, match="2 metadata entries were given for 1 videos"):
        VideoProcessorItems([np.zeros((1, 2, 2, 3))], metadata=[{}, {}])
    with pytest.raises(ValueError, match="one metadata dict was given for 2 videos"):
        VideoProcessorItems([np.zeros((1, 2, 2, 3))] * 2, metadata={"fps": 1.0})
    one = VideoProcessorItems([np.zeros((1, 2, 2, 3))], metadata={"fps": 3.0})
    assert one.get_metadata(0) == {"fps": 3.0}


def test_selection_keeps_the_raw_pair_so_metadata_survives_a_frames_only_view() -> None:
    pairs = [video_ref(decoded_video(fps=float(i + 1)), f"v{i}") for i in range(3)]
    items = VideoProcessorItems([ref for ref, _ in pairs])  # HF sees frames alone
    selected = items.select([2])
    assert selected.get_raw(0) is pairs[2][0]
    assert selected.get_metadata(0)["fps"] == 3.0 and selected.get_original_index(0) == 2


def test_missing_metadata_when_needed_raises() -> None:
    items = VideoProcessorItems([np.zeros((1, 2, 2, 3), np.uint8)], video_needs_metadata=True)
    with pytest.raises(ValueError, match="Video metadata is required"):
        items.get(0)


def test_frame_size_of_pil_frames_and_channels_first_tensors() -> None:
    pil = VideoProcessorItems([[Image.new("RGB", (8, 3))] * 2])
    assert pil.get_frame_size(0) == ImageSize(8, 3) and pil.get_num_frames(0) == 2
    tensor = VideoProcessorItems([torch.zeros(2, 3, 5, 7)])  # (T, C, H, W)
    assert tensor.get_frame_size(0) == ImageSize(7, 5)
    with pytest.raises(ValueError, match="Cannot get size of empty video at 0"):
        VideoProcessorItems([np.zeros((0, 2, 2, 3))]).get_frame_size(0)


# --- the parser's video handling --------------------------------------------------------------


def test_parser_keeps_video_refs_undecoded_and_unchanged_without_needs_metadata() -> None:
    ref, decoder = video_ref(decoded_video())
    items = MultiModalDataParser().parse_mm_data({"video": [ref]})["video"]
    assert items.get_raw(0) is ref and decoder.calls == 0


def test_parser_defers_the_metadata_check_to_decode_time() -> None:
    ref, decoder = video_ref(np.zeros((2, 2, 2, 3), np.uint8))  # a decoder that yields no metadata
    items = MultiModalDataParser(video_needs_metadata=True).parse_mm_data({"video": ref})["video"]
    raw = items.get_raw(0)
    assert decoder.calls == 0
    assert raw.key == ref.key  # the check changes nothing about a video that passes it
    with pytest.raises(ValueError, match="Video metadata is required"):
        raw.decode()


def test_parser_metadata_check_passes_decoded_pairs_through() -> None:
    value = decoded_video(fps=7.0)
    ref, _ = video_ref(value)
    items = MultiModalDataParser(video_needs_metadata=True).parse_mm_data({"video": ref})["video"]
    assert items.get_raw(0).decode()[0] is value[0]
    assert items.get(0)[1]["fps"] == 7.0


def test_parser_subclass_metadata_defaults_apply_to_fetched_videos() -> None:
    class DefaultFps(MultiModalDataParser):
        def _get_video_with_metadata(self, video: Any) -> tuple[Any, dict[str, Any] | None]:
            frames, metadata = super()._get_video_with_metadata(video)
            return frames, metadata if metadata is not None else {"fps": 1.0}

    ref, _ = video_ref(np.zeros((2, 2, 2, 3), np.uint8))
    items = DefaultFps(video_needs_metadata=True).parse_mm_data({"video": ref})["video"]
    assert items.get(0)[1] == {"fps": 1.0}


def test_parser_rejects_decoded_videos_without_metadata_at_parse_time() -> None:
    parser = MultiModalDataParser(video_needs_metadata=True)
    with pytest.raises(ValueError, match="Video metadata is required"):
        parser.parse_mm_data({"video": np.zeros((2, 2, 2, 3), np.uint8)})


def test_parser_video_shapes() -> None:
    parser = MultiModalDataParser()
    frames = [Image.new("RGB", (4, 2)) for _ in range(3)]
    one = parser.parse_mm_data({"video": frames})["video"]
    assert one.get_count() == 1 and one.get_frames(0).shape == (3, 2, 4, 3)
    array_frames = [np.zeros((2, 4, 3), np.uint8)] * 5
    assert parser.parse_mm_data({"video": array_frames})["video"].get_num_frames(0) == 5
    assert parser.parse_mm_data({"video": np.zeros((3, 2, 4, 3))})["video"].get_count() == 1
    assert parser.parse_mm_data({"video": np.zeros((2, 3, 2, 4, 3))})["video"].get_count() == 2
    pair = decoded_video()
    parsed = parser.parse_mm_data({"video": pair})["video"]
    assert parsed.get_count() == 1 and parsed.get_metadata(0)["fps"] == 2.0
    assert parser.parse_mm_data({"video": [pair, pair]})["video"].get_count() == 2
