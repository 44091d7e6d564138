"""Parity: the mediaref processor's output equals calling the HF processor on the decoded media.

For each request, the reference is one direct call of a separately loaded HF processor (the
``hf_vl`` and ``hf_audio`` fixtures, see conftest.py) on media
decoded outside mediaref's processor, with the same prompt (HF expands the placeholders itself).
Token ids, placeholder ranges, ``pixel_values``, ``image_grid_thw``, video and audio features
must agree. Images and videos must agree exactly: both sides run the same deterministic HF code
on the same pixels. Audio is compared with a small tolerance, explained at ``AUDIO_FEATURES_ATOL``.
"""

from __future__ import annotations

import os

# huggingface_hub reads this when first imported; set before anything imports transformers.
os.environ["HF_HUB_OFFLINE"] = "1"

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from _parity_references import (
    AUDIO_NAMES,
    AUDIO_PROMPT,
    AUDIO_SAMPLE_RATE,
    IMAGE_NAMES,
    IMAGE_PROMPT,
    VIDEO_PROMPT,
    assert_matches_hf,
    assert_same_item,
    assert_same_outputs,
    audio_bytes,
    image_bytes,
    reference_audio,
    reference_image,
    video_bytes,
)
from mediaref.cache import (
    BaseMultiModalProcessorCache,
    MultiModalProcessorOnlyCache,
    MultiModalProcessorSenderCache,
)
from mediaref.inputs import MultiModalInputs
from mediaref.media.audio import AudioMediaIO
from mediaref.media.base import MediaRef
from mediaref.media.image import ImageMediaIO
from mediaref.media.video import VideoMediaIO
from mediaref.models.builtin import builtin_model_path
from mediaref.models.qwen2_vl_raw_video import DEFAULT_NUM_FRAMES
from mediaref.processing.context import ModelConfig
from mediaref.processing.processor import BaseMultiModalProcessor
from mediaref.registry import MULTIMODAL_REGISTRY

# Audio is the one place where the two sides need not run the very same float operations on the
# very same samples. soundfile.read seeks to frame 0 before reading, the decoder reads a freshly
# opened file, and libsndfile's MP3 decoder (mpg123) returns samples one float32 ulp apart in
# those two cases; the log-mel transform amplifies that to ~5e-5 at quiet bins (measured:
# 5.2e-5 for the MP3 clip, 0.0 for the WAV and FLAC ones). Features are normalized log-mels of
# order 1: a wrong channel mix, or even another resampler (scipy's polyphase), moves them by far
# more than this (test_audio_tolerance_detects_a_wrong_channel_mix pins the former).
AUDIO_FEATURES_ATOL = 1e-3

VL_FIELDS_IMAGE = ("pixel_values", "image_grid_thw")
VL_FIELDS_VIDEO = ("pixel_values_videos", "video_grid_thw")
AUDIO_FIELDS = ("input_features", "feature_attention_mask")

ProcessorFactory = Callable[[BaseMultiModalProcessorCache | None], BaseMultiModalProcessor[Any]]
VideoSpec = tuple[str, int]  # (clip variant, frames to sample)


def _factory(base: BaseMultiModalProcessor[Any]) -> ProcessorFactory:
    # A processor per cache, all sharing one processing info, so the HF processor loads once.
    return lambda cache: type(base)(base.info, base.dummy_inputs, cache=cache)


def _builtin_processor(name: str, family: str | None = None) -> ProcessorFactory:
    # The CPU-normalized path, the one a plain HF call takes. The device path (Qwen2-VL's default,
    # raw uint8 pixels) has its own parity tests in test_mm_device_normalize.py.
    config = ModelConfig(
        model=str(builtin_model_path(name)), family=family, mm_device_do_normalize=False
    )
    return _factory(MULTIMODAL_REGISTRY.create_processor(config))


@pytest.fixture(scope="module")
def make_vl() -> ProcessorFactory:
    return _builtin_processor("qwen2_vl")


@pytest.fixture(scope="module")
def make_raw_video() -> ProcessorFactory:
    return _builtin_processor("qwen2_vl", family="qwen2_vl_raw_video")


@pytest.fixture(scope="module")
def make_audio() -> ProcessorFactory:
    return _builtin_processor("qwen2_audio")


def _apply(
    processor: BaseMultiModalProcessor[Any], prompt: str | list[int], mm_data: Any, **kwargs: Any
) -> MultiModalInputs:
    return processor.apply(processor.build_inputs(prompt, mm_data, **kwargs))


# -- Qwen2-VL helpers -----------------------------------------------------------------------------


def _vl_token_ids(hf: Any) -> dict[str, int]:
    tokens = {"image": "<|image_pad|>", "video": "<|video_pad|>"}
    return {modality: int(hf.tokenizer.convert_tokens_to_ids(t)) for modality, t in tokens.items()}


def _image_ref(name: str) -> MediaRef[Any]:
    return ImageMediaIO().load_bytes_ref(image_bytes(name))


def _video_ref(processor: BaseMultiModalProcessor[Any], spec: VideoSpec) -> MediaRef[Any]:
    # PyAV with num_frames, as a request naming both would ask for it (the model's bound
    # qwen2_vl loader samples by fps and ignores num_frames; its indices have their own tests).
    variant, num_frames = spec
    media_io = processor.info.get_media_io(
        "video", {"num_frames": num_frames, "video_backend": "pyav"}
    )
    return media_io.load_bytes_ref(video_bytes(variant))


def _reference_frames(spec: VideoSpec) -> np.ndarray:
    variant, num_frames = spec
    loader = VideoMediaIO(ImageMediaIO(), num_frames=num_frames, video_backend="pyav")
    frames, _metadata = loader.load_bytes(video_bytes(variant))
    return np.asarray(frames)


def _vl_request(
    processor: BaseMultiModalProcessor[Any],
    prompt: str | list[int],
    images: Sequence[str] = (),
    videos: Sequence[VideoSpec] = (),
) -> tuple[MultiModalInputs, list[MediaRef[Any]]]:
    """``processor`` applied to fresh refs of the named media; the output, and the refs
    (images first)."""
    image_refs = [_image_ref(name) for name in images]
    video_refs = [_video_ref(processor, spec) for spec in videos]
    mm_data: dict[str, Any] = {}
    if image_refs:
        mm_data["image"] = image_refs
    if video_refs:
        mm_data["video"] = video_refs
    return _apply(processor, prompt, mm_data), [*image_refs, *video_refs]


def _hf_vl(
    hf: Any, prompt: str, images: Sequence[str] = (), videos: Sequence[VideoSpec] = ()
) -> Any:
    """One direct HF call on the decoded media; HF expands the placeholders itself."""
    kwargs: dict[str, Any] = {}
    if images:
        kwargs["images"] = [reference_image(image_bytes(name)) for name in images]
    if videos:
        kwargs["videos"] = [_reference_frames(spec) for spec in videos]
    return hf(text=[prompt], return_tensors="pt", **kwargs)


def _vl_fields(images: Sequence[str], videos: Sequence[VideoSpec]) -> tuple[str, ...]:
    return (VL_FIELDS_IMAGE if images else ()) + (VL_FIELDS_VIDEO if videos else ())


def _check_vl_parity(
    processor: BaseMultiModalProcessor[Any],
    hf: Any,
    prompt: str,
    images: Sequence[str] = (),
    videos: Sequence[VideoSpec] = (),
) -> tuple[MultiModalInputs, list[MediaRef[Any]]]:
    out, refs = _vl_request(processor, prompt, images, videos)
    expected = _hf_vl(hf, prompt, images, videos)
    assert_matches_hf(out, expected, _vl_fields(images, videos), _vl_token_ids(hf))
    return out, refs


# -- images and video -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", IMAGE_NAMES)
def test_one_image_matches_hf(make_vl: ProcessorFactory, hf_vl: Any, name: str) -> None:
    prompt = IMAGE_PROMPT + "Describe this picture."
    _check_vl_parity(make_vl(MultiModalProcessorOnlyCache(1)), hf_vl, prompt, images=[name])


def test_interleaved_images_match_hf(make_vl: ProcessorFactory, hf_vl: Any) -> None:
    prompt = f"Compare {IMAGE_PROMPT} with {IMAGE_PROMPT}, then {IMAGE_PROMPT}. Which is warmest?"
    names = ["astronaut", "sample.jpg", "coffee"]
    out, _ = _check_vl_parity(make_vl(MultiModalProcessorOnlyCache(1)), hf_vl, prompt, names)
    assert len(out["mm_placeholders"]["image"]) == 3


def test_images_and_videos_in_one_prompt_match_hf(make_vl: ProcessorFactory, hf_vl: Any) -> None:
    prompt = f"First {VIDEO_PROMPT}, then {IMAGE_PROMPT}, then {VIDEO_PROMPT} and {IMAGE_PROMPT}."
    _check_vl_parity(
        make_vl(MultiModalProcessorOnlyCache(1)),
        hf_vl,
        prompt,
        images=["chelsea", "astronaut"],
        videos=[("a", 4), ("b", 6)],
    )


@pytest.mark.parametrize("spec", [("a", 4), ("b", 5)])
def test_video_alone_matches_hf(make_vl: ProcessorFactory, hf_vl: Any, spec: VideoSpec) -> None:
    # 5 frames: an odd count, which HF pads to whole temporal patches.
    prompt = VIDEO_PROMPT + "What happens?"
    _check_vl_parity(make_vl(MultiModalProcessorOnlyCache(1)), hf_vl, prompt, videos=[spec])


def test_prompt_as_token_ids_matches_hf(make_vl: ProcessorFactory, hf_vl: Any) -> None:
    prompt = f"{IMAGE_PROMPT}and{VIDEO_PROMPT}: same scene?"
    prompt_ids = list(hf_vl.tokenizer.encode(prompt))
    images, videos = ["coffee"], [("a", 4)]
    out, _ = _vl_request(make_vl(MultiModalProcessorOnlyCache(1)), prompt_ids, images, videos)
    expected = _hf_vl(hf_vl, prompt, images, videos)
    assert_matches_hf(out, expected, _vl_fields(images, videos), _vl_token_ids(hf_vl))


# -- the cache does not change the output ---------------------------------------------------------


def test_cache_miss_then_hit_give_identical_outputs(make_vl: ProcessorFactory, hf_vl: Any) -> None:
    processor = make_vl(MultiModalProcessorOnlyCache(1))
    prompt = f"{IMAGE_PROMPT}{VIDEO_PROMPT}Describe both."
    images, videos = ["sample.jpg"], [("b", 4)]
    miss, miss_refs = _check_vl_parity(processor, hf_vl, prompt, images, videos)
    hit, hit_refs = _vl_request(processor, prompt, images, videos)

    assert all(ref.is_decoded for ref in miss_refs)
    assert not any(ref.is_decoded for ref in hit_refs), "the second request missed the cache"
    assert_same_outputs(hit, miss)


def test_mixing_cached_and_uncached_items_matches_the_uncached_path(
    make_vl: ProcessorFactory, hf_vl: Any
) -> None:
    cached = make_vl(MultiModalProcessorOnlyCache(1))
    _vl_request(cached, f"{IMAGE_PROMPT}{VIDEO_PROMPT}", ["coffee"], [("a", 4)])

    prompt = f"{IMAGE_PROMPT} {VIDEO_PROMPT} {IMAGE_PROMPT} {VIDEO_PROMPT} {IMAGE_PROMPT} end"
    # The cached image sits between two misses; the cached video comes after a miss.
    images, videos = ["astronaut", "coffee", "chelsea"], [("b", 4), ("a", 4)]
    mixed, mixed_refs = _check_vl_parity(cached, hf_vl, prompt, images, videos)
    uncached, _ = _vl_request(make_vl(None), prompt, images, videos)

    assert [ref.is_decoded for ref in mixed_refs] == [True, False, True, True, False]
    assert_same_outputs(mixed, uncached)


def test_sender_cache_hit_sends_no_item_but_the_same_prompt(make_vl: ProcessorFactory) -> None:
    sender = make_vl(MultiModalProcessorSenderCache(1))
    first, _ = _vl_request(sender, IMAGE_PROMPT, ["chelsea"])
    assert first["mm_kwargs"]["image"][0] is not None  # a miss is sent in full

    prompt = f"{IMAGE_PROMPT} then {IMAGE_PROMPT}"
    hit_and_miss, _ = _vl_request(sender, prompt, ["chelsea", "astronaut"])
    uncached, _ = _vl_request(make_vl(None), prompt, ["chelsea", "astronaut"])

    hit_item, miss_item = hit_and_miss["mm_kwargs"]["image"]
    assert hit_item is None
    assert_same_item(miss_item.get_data(), uncached["mm_kwargs"]["image"][1].get_data())
    assert hit_and_miss["prompt_token_ids"] == uncached["prompt_token_ids"]
    assert dict(hit_and_miss["mm_placeholders"]) == dict(uncached["mm_placeholders"])
    assert hit_and_miss["mm_hashes"] == uncached["mm_hashes"]


# -- raw-bytes video ------------------------------------------------------------------------------


@pytest.mark.parametrize("num_frames", [None, 4])
def test_raw_bytes_video_matches_qwen2_vl_on_pyav_frames(
    make_raw_video: ProcessorFactory,
    make_vl: ProcessorFactory,
    hf_vl: Any,
    num_frames: int | None,
) -> None:
    sampled = DEFAULT_NUM_FRAMES if num_frames is None else num_frames
    raw = make_raw_video(MultiModalProcessorOnlyCache(1))
    hf_kwargs = {} if num_frames is None else {"num_frames": num_frames}
    prompt = VIDEO_PROMPT + "Summarize."

    def raw_request() -> tuple[MultiModalInputs, MediaRef[Any]]:
        ref = raw.info.get_media_io("video").load_bytes_ref(video_bytes("a"))
        return _apply(raw, prompt, {"video": [ref]}, hf_processor_mm_kwargs=hf_kwargs), ref

    miss, _ = raw_request()
    expected = _hf_vl(hf_vl, prompt, videos=[("a", sampled)])
    assert_matches_hf(miss, expected, VL_FIELDS_VIDEO, _vl_token_ids(hf_vl))

    # The same frames through the frame-decoding family give the same model inputs.
    decoded, _ = _vl_request(make_vl(None), prompt, videos=[("a", sampled)])
    raw_data, decoded_data = miss["mm_kwargs"].get_data(), decoded["mm_kwargs"].get_data()
    assert_same_item(raw_data, decoded_data)

    hit, hit_ref = raw_request()
    assert not hit_ref.is_decoded
    assert_same_outputs(hit, miss)


# -- audio ----------------------------------------------------------------------------------------


def _audio_token_ids(hf: Any) -> dict[str, int]:
    return {"audio": int(hf.tokenizer.convert_tokens_to_ids("<|AUDIO|>"))}


def _audio_request(
    processor: BaseMultiModalProcessor[Any], prompt: str, names: Sequence[str]
) -> MultiModalInputs:
    refs = [AudioMediaIO().load_bytes_ref(audio_bytes(name)) for name in names]
    return _apply(processor, prompt, {"audio": refs})


def _hf_audio(hf: Any, prompt: str, clips: list[np.ndarray]) -> Any:
    return hf(text=[prompt], audio=clips, sampling_rate=AUDIO_SAMPLE_RATE, return_tensors="pt")


def _check_audio_parity(
    processor: BaseMultiModalProcessor[Any], hf: Any, prompt: str, names: Sequence[str]
) -> MultiModalInputs:
    out = _audio_request(processor, prompt, names)
    expected = _hf_audio(hf, prompt, [reference_audio(audio_bytes(name)) for name in names])
    assert_matches_hf(
        out,
        expected,
        AUDIO_FIELDS,
        _audio_token_ids(hf),
        atol={"input_features": AUDIO_FEATURES_ATOL},
    )
    return out


@pytest.mark.parametrize("name", AUDIO_NAMES)
def test_one_audio_matches_hf(make_audio: ProcessorFactory, hf_audio: Any, name: str) -> None:
    prompt = AUDIO_PROMPT + "What is this sound?"
    _check_audio_parity(make_audio(MultiModalProcessorOnlyCache(1)), hf_audio, prompt, [name])


def test_two_audios_match_hf(make_audio: ProcessorFactory, hf_audio: Any) -> None:
    prompt = f"Clip one: {AUDIO_PROMPT} clip two: {AUDIO_PROMPT} Which is higher?"
    names = ["wav_stereo_44k", "mp3_mono_22k"]
    out = _check_audio_parity(make_audio(MultiModalProcessorOnlyCache(1)), hf_audio, prompt, names)
    lengths = [placeholder.length for placeholder in out["mm_placeholders"]["audio"]]
    assert lengths[0] != lengths[1]  # 1.0 s and 1.5 s clips: each item expands to its own length


def test_audio_tolerance_detects_a_wrong_channel_mix(
    make_audio: ProcessorFactory, hf_audio: Any
) -> None:
    """The tolerance is far below what a wrong mono mix (the left channel alone) changes."""
    out = _audio_request(make_audio(None), AUDIO_PROMPT, ["wav_stereo_44k"])
    left_only = reference_audio(audio_bytes("wav_stereo_44k"), mix="first")
    wrong = _hf_audio(hf_audio, AUDIO_PROMPT, [left_only])["input_features"]
    ours = out["mm_kwargs"].get_data()["input_features"]
    assert (ours - wrong).abs().max().item() > 100 * AUDIO_FEATURES_ATOL
