"""ProcessorInputs: per-item hashes (UUIDs, media_io_kwargs, scoping), cache eligibility, no decode."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from _counting import CountingDecoder
from _image_samples import encode
from mediaref.exceptions import VLLMValidationError
from mediaref.hasher import MultiModalHasher
from mediaref.media.audio import AudioMediaIO
from mediaref.media.base import DecodeSpec, MediaRef
from mediaref.media.image import ImageMediaIO
from mediaref.media.video import VideoMediaIO
from mediaref.parse import ImageProcessorItems, MultiModalDataItems, MultiModalDataParser
from mediaref.processing.inputs import ProcessorInputs


def image_ref(tag: str = "img", decoder: CountingDecoder | None = None) -> MediaRef[Any]:
    decoder = decoder or CountingDecoder(Image.new("RGB", (2, 2)))
    return MediaRef(tag.encode(), decoder, DecodeSpec(modality="image", tag=tag))


def inputs(mm_data: dict[str, Any], **kwargs: Any) -> ProcessorInputs:
    kwargs.setdefault("mm_uuid_items", kwargs.pop("mm_uuids", None))
    return ProcessorInputs([1, 2, 3], MultiModalDataParser().parse_mm_data(mm_data), **kwargs)


# --- no decode over a large batch -------------------------------------------------------------------


def test_hashing_and_miss_selection_of_100_refs_decode_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MEDIAREF_MAX_MEDIA_ITEMS_PER_REQUEST", "100")  # the default cap is 64
    decoder = CountingDecoder(None)
    images = [MediaRef(f"i{i}".encode(), decoder, DecodeSpec(modality="image")) for i in range(40)]
    videos = [MediaRef(f"v{i}".encode(), decoder, DecodeSpec(modality="video")) for i in range(30)]
    audios = [MediaRef(f"a{i}".encode(), decoder, DecodeSpec(modality="audio")) for i in range(30)]
    parser = MultiModalDataParser(target_sr=16000, target_channels=1, video_needs_metadata=True)
    items = parser.parse_mm_data({"image": images, "video": videos, "audio": audios})

    hashes = ProcessorInputs([0], items).get_mm_hashes("model")
    assert sum(len(h) for h in hashes.values()) == 100
    assert len({h for hs in hashes.values() for h in hs}) == 100

    # Cache lookup: every other item misses; select those, then select again.
    misses = {modality: list(range(0, len(h), 2)) for modality, h in hashes.items()}
    selected = items.select(misses)
    again = selected.select({m: [0, 1] for m in selected})
    for modality, sel in selected.items():
        for i in range(sel.get_count()):
            assert sel.get_raw(i) is items[modality].get_raw(misses[modality][i])
            assert sel.get_original_index(i) == misses[modality][i]
        assert again[modality].get_original_index(1) == 2
    # Hashing the selection gives the hashes of the same items.
    assert ProcessorInputs([0], selected).get_mm_hashes("model")["image"] == hashes["image"][::2]
    assert decoder.calls == 0


# --- hash factors ------------------------------------------------------------------------------------


def test_media_ref_hash_ignores_media_io_kwargs_without_a_uuid() -> None:
    ref = image_ref()
    plain = inputs({"image": ref}).get_mm_hashes("m")
    with_kwargs = inputs(
        {"image": ref}, media_io_kwargs={"image": {"image_mode": "L"}}
    ).get_mm_hashes("m")
    assert plain == with_kwargs


def test_decoded_item_hash_includes_media_io_kwargs() -> None:
    image = Image.new("RGB", (2, 2))
    plain = inputs({"image": image}).get_mm_hashes("m")
    with_kwargs = inputs(
        {"image": image}, media_io_kwargs={"image": {"image_mode": "L"}}
    ).get_mm_hashes("m")
    assert plain != with_kwargs


def test_media_io_kwargs_of_other_modalities_do_not_matter() -> None:
    image = Image.new("RGB", (2, 2))
    plain = inputs({"image": image}).get_mm_hashes("m")
    other = inputs({"image": image}, media_io_kwargs={"video": {"num_frames": 16}}).get_mm_hashes(
        "m"
    )
    assert plain == other


def test_uuid_alone_is_the_hash_when_there_are_no_factors() -> None:
    ref = image_ref()
    hashes = inputs({"image": ref}, mm_uuids={"image": ["client-id"]}).get_mm_hashes("m")
    assert hashes == {"image": ["client-id"]}


def test_uuid_with_factors_hashes_every_factor_including_media_io_kwargs() -> None:
    ref = image_ref()
    h16 = inputs(
        {"video": ref}, mm_uuids={"video": ["vid"]}, media_io_kwargs={"video": {"num_frames": 16}}
    )
    h32 = inputs(
        {"video": ref}, mm_uuids={"video": ["vid"]}, media_io_kwargs={"video": {"num_frames": 32}}
    )
    a, b = h16.get_mm_hashes("m")["video"][0], h32.get_mm_hashes("m")["video"][0]
    assert a != b and "vid" not in (a, b)
    # The key is never consulted: another ref with the same UUID and kwargs hashes the same.
    h16_other = inputs(
        {"video": image_ref("other")},
        mm_uuids={"video": ["vid"]},
        media_io_kwargs={"video": {"num_frames": 16}},
    )
    assert h16_other.get_mm_hashes("m")["video"][0] == a


def test_uuid_with_processor_kwargs_depends_on_the_model_and_kwargs() -> None:
    ref = image_ref()
    base = inputs(
        {"image": ref}, mm_uuids={"image": "u"}, hf_processor_mm_kwargs={"max_pixels": 100}
    )
    assert base.get_mm_hashes("m") != base.get_mm_hashes("n")
    other = inputs(
        {"image": ref}, mm_uuids={"image": "u"}, hf_processor_mm_kwargs={"max_pixels": 200}
    )
    assert base.get_mm_hashes("m") != other.get_mm_hashes("m")


def test_partial_uuid_list_uses_given_uuids_and_hashes_the_rest() -> None:
    refs = [image_ref("a"), image_ref("b")]
    hashes = inputs({"image": refs}, mm_uuids={"image": [None, "second"]}).get_mm_hashes("m")[
        "image"
    ]
    assert hashes[1] == "second"
    assert hashes[0] == inputs({"image": refs[:1]}).get_mm_hashes("m")["image"][0]


def test_none_item_needs_a_uuid() -> None:
    with pytest.raises(ValueError, match="image item given as None has no UUID"):
        inputs({"image": None}).get_mm_hashes("m")
    assert inputs({"image": None}, mm_uuids={"image": ["u"]}).get_mm_hashes("m") == {"image": ["u"]}


def test_uuid_list_length_must_match() -> None:
    with pytest.raises(VLLMValidationError, match=r"has 2 entries for 1 image item\(s\)") as caught:
        inputs({"image": image_ref()}, mm_uuids={"image": ["a", "b"]}).get_mm_hashes("m")
    assert caught.value.parameter == "multi_modal_uuids"


def test_model_id_enters_every_hash() -> None:
    one = inputs({"image": image_ref()})
    assert one.get_mm_hashes("m") != one.get_mm_hashes("n")


def test_processor_kwargs_are_scoped_to_their_modality() -> None:
    image = image_ref()
    plain = inputs({"image": image}).get_mm_hashes("m")
    videos_only = inputs(
        {"image": image}, hf_processor_mm_kwargs={"videos_kwargs": {"fps": 2}}
    ).get_mm_hashes("m")
    images_own = inputs(
        {"image": image}, hf_processor_mm_kwargs={"images_kwargs": {"max_pixels": 9}}
    ).get_mm_hashes("m")
    shared = inputs({"image": image}, hf_processor_mm_kwargs={"max_pixels": 9}).get_mm_hashes("m")
    assert plain == videos_only
    assert plain != images_own and plain != shared


def test_tokenization_kwargs_stay_out_of_the_hash() -> None:
    # They shape how a text prompt is encoded, never an item's processed output (vLLM hashes
    # only the processor and media_io kwargs).
    image = image_ref()
    assert inputs({"image": image}).get_mm_hashes("m") == inputs(
        {"image": image}, tokenization_kwargs={"truncation": True}
    ).get_mm_hashes("m")


def test_decoded_item_hash_has_vllm_s_factors() -> None:
    # vLLM 0.33 hashes media_io_kwargs as {modality: its kwargs} and drops the other modalities'
    # processor scopes; with the same hasher, a vLLM frontend computes the same digest.
    image = Image.new("RGB", (2, 2), (1, 2, 3))
    got = inputs(
        {"image": image},
        media_io_kwargs={"image": {"image_mode": "L"}, "video": {"num_frames": 4}},
        hf_processor_mm_kwargs={"max_pixels": 9, "videos_kwargs": {"fps": 2}},
    ).get_mm_hashes("m", "sha256")
    expected = MultiModalHasher.hash_kwargs(
        "sha256",
        model_id="m",
        image=image,
        media_io_kwargs={"image": {"image_mode": "L"}},
        mm_processor_kwargs={"max_pixels": 9},
    )
    assert got == {"image": [expected]}


def test_a_modality_without_a_scope_hashes_every_factor() -> None:
    kwargs = {"media_io_kwargs": {"video": {"num_frames": 4}}, "hf_processor_mm_kwargs": {"x": 1}}
    items = MultiModalDataItems({"vision_chunk": ImageProcessorItems([Image.new("RGB", (1, 1))])})
    got = ProcessorInputs([0], items, **kwargs).get_mm_hashes("m", "sha256")  # type: ignore[arg-type]
    expected = MultiModalHasher.hash_kwargs(
        "sha256",
        model_id="m",
        vision_chunk=items["vision_chunk"].get_raw(0),
        media_io_kwargs={"video": {"num_frames": 4}},
        mm_processor_kwargs={"x": 1},
    )
    assert got == {"vision_chunk": [expected]}


def test_item_hash_is_the_hasher_over_model_item_and_factors() -> None:
    ref = image_ref()
    expected = MultiModalHasher.hash_kwargs(
        "sha256", model_id="m", image=ref, mm_processor_kwargs={"max_pixels": 9}
    )
    got = inputs({"image": ref}, hf_processor_mm_kwargs={"max_pixels": 9}).get_mm_hashes(
        "m", "sha256"
    )
    assert got == {"image": [expected]}


def test_audio_refs_hash_with_their_mapped_key() -> None:
    decoder = CountingDecoder((np.zeros(10, np.float32), 8000.0))
    ref = MediaRef(b"wav", decoder, DecodeSpec(modality="audio"))
    at16 = ProcessorInputs([0], MultiModalDataParser(target_sr=16000).parse_mm_data({"audio": ref}))
    at24 = ProcessorInputs([0], MultiModalDataParser(target_sr=24000).parse_mm_data({"audio": ref}))
    assert at16.get_mm_hashes("m") != at24.get_mm_hashes("m")
    assert decoder.calls == 0


# --- can_use_cache -------------------------------------------------------------------------------------


def test_can_use_cache_needs_a_cache() -> None:
    assert inputs({"image": image_ref()}, cache=object()).can_use_cache()
    assert not inputs({"image": image_ref()}).can_use_cache()


def test_passthrough_embeddings_disable_the_cache() -> None:
    assert not inputs({"image": torch.zeros(1, 2, 4)}, cache=object()).can_use_cache()
    mixed = inputs({"image": image_ref(), "video": [torch.zeros(2, 4)]}, cache=object())
    assert not mixed.can_use_cache()


def test_can_use_cache_does_not_decode() -> None:
    decoder = CountingDecoder(Image.new("RGB", (1, 1)))
    assert inputs({"image": [image_ref("x", decoder)] * 3}, cache=object()).can_use_cache()
    assert decoder.calls == 0


def test_vllm_s_positional_order_and_uuid_items() -> None:
    # ProcessorInputs(prompt, mm_data_items, mm_uuid_items, hf_processor_mm_kwargs,
    # media_io_kwargs, cache), as vLLM's renderer builds it.
    items = MultiModalDataParser().parse_mm_data({"image": [image_ref("a"), image_ref("b")]})
    cache = object()
    built = ProcessorInputs([7], items, {"image": [None, "u"]}, {"k": 1}, {"image": {}}, cache)  # type: ignore[arg-type]
    assert built.mm_uuid_items == {"image": [None, "u"]}
    assert built.hf_processor_mm_kwargs == {"k": 1} and built.cache is cache
    assert built.owned_refs == []  # built by hand: processing owns none of the caller's refs
    # The processor kwargs are a factor, so even the UUID'd item is hashed with them.
    assert built.get_mm_hashes("m")["image"][1] not in ("u", built.get_mm_hashes("m")["image"][0])


def test_prompt_may_be_text() -> None:
    items = MultiModalDataItems({"image": ImageProcessorItems([Image.new("RGB", (1, 1))])})
    assert ProcessorInputs("describe <image>", items).prompt == "describe <image>"


# --- real decoders end to end ------------------------------------------------------------------------


def _png(color: tuple[int, int, int]) -> bytes:
    return encode(Image.new("RGB", (8, 6), color), "PNG")


def _clip(frames: int = 4, width: int = 32, height: int = 24) -> bytes:
    import io

    import av

    buffer = io.BytesIO()
    with av.open(buffer, "w", format="mp4") as container:
        stream = container.add_stream("mpeg4", rate=4)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for i in range(frames):
            frame = av.VideoFrame.from_ndarray(
                np.full((height, width, 3), i * 40, np.uint8), format="rgb24"
            )
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return buffer.getvalue()


def _wav(seconds: float = 0.1, rate: int = 8000) -> bytes:
    import io

    import soundfile

    buffer = io.BytesIO()
    soundfile.write(buffer, np.zeros((int(seconds * rate), 2), np.float32), rate, format="WAV")
    return buffer.getvalue()


def test_real_refs_are_parsed_hashed_and_selected_undecoded_then_decode_to_hf_views() -> None:
    image_io = ImageMediaIO()
    images = [image_io.load_bytes_ref(_png((i, 0, 0))) for i in range(3)]
    video = VideoMediaIO(image_io, num_frames=2).load_bytes_ref(_clip())
    audio = AudioMediaIO().load_bytes_ref(_wav())
    parser = MultiModalDataParser(target_sr=16000, target_channels=1, video_needs_metadata=True)
    items = parser.parse_mm_data({"image": images, "video": video, "audio": audio})

    processor_inputs = ProcessorInputs([0], items, media_io_kwargs={"video": {"num_frames": 2}})
    hashes = processor_inputs.get_mm_hashes("m")
    selected = items.select({"image": [2], "video": [0], "audio": [0]})
    raws = [items[m].get_raw(i) for m in items for i in range(items[m].get_count())]
    assert not any(ref.is_decoded for ref in [*images, video, audio, *raws])
    assert len(set(hashes["image"])) == 3

    assert selected["image"].get(0).getpixel((0, 0)) == (2, 0, 0)
    frames, metadata = selected["video"].get(0)
    assert frames.shape == (2, 24, 32, 3) and metadata["total_num_frames"] == 4
    assert selected["audio"].get(0).shape == (1600,)
