"""vLLM 0.33's processing API at mediaref's paths, behaving as vLLM documents it: TimingContext and
the timing registry, the processing context and info, ProcessorInputs built by hand, the
token-match functions, the encoder-decoder processor, the registry's factories and kwargs merging.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from transformers import BatchFeature, Qwen2AudioProcessor, Qwen2VLConfig, Qwen2VLProcessor

from _counting import CountingDecoder
from mediaref.exceptions import VLLMValidationError
from mediaref.inputs import MultiModalFieldConfig, MultiModalKwargsItems
from mediaref.media.base import DecodeSpec, MediaRef
from mediaref.models.builtin import builtin_model_path
from mediaref.parse import MultiModalDataItems, MultiModalDataParser
from mediaref.processing import (
    BaseDummyInputsBuilder,
    BaseProcessingInfo,
    EncDecMultiModalProcessor,
    InputProcessingContext,
    ProcessorInputs,
    PromptReplacement,
    TimingContext,
    cached_encode,
)
from mediaref.processing.context import ModelConfig, TokenizeParams
from mediaref.processing.dummy_inputs import ImageDummyOptions
from mediaref.processing.processor import (
    PlaceholderFeaturesInfo,
    PromptIndex,
    PromptIndexTargets,
    PromptInsertion,
    PromptTargetMatch,
    PromptUpdate,
    apply_token_matches,
    find_mm_placeholders,
    full_groupby_modality,
    iter_token_matches,
    replace_token_matches,
)
from mediaref.processing.prompt_updates import resolve_prompt_updates
from mediaref.registry import MultiModalRegistry, MultiModalTimingRegistry

QWEN2_VL = str(builtin_model_path("qwen2_vl"))
QWEN2_AUDIO = str(builtin_model_path("qwen2_audio"))


# -- TimingContext and its registry --------------------------------------------------------------


def test_timing_context_adds_up_repeated_stages_and_reports_them() -> None:
    timing = TimingContext()
    for _ in range(2):
        with timing.record("apply_hf_processor"):
            pass
    with pytest.raises(RuntimeError), timing.record("failing"):
        raise RuntimeError("recorded all the same")
    assert set(timing.stage_secs) == {"apply_hf_processor", "failing"}
    stats = timing.get_stats_dict()
    assert set(stats) == {"apply_hf_processor_secs", "failing_secs", "preprocessor_total_secs"}
    assert stats["preprocessor_total_secs"] == pytest.approx(sum(timing.stage_secs.values()))

    disabled = TimingContext(enabled=False)
    with disabled.record("anything"):
        pass
    assert disabled.stage_secs == {} and disabled.total_secs == 0


def test_timing_registry_collects_per_request_only_when_enabled() -> None:
    class Observability:
        enable_mm_processor_stats = True

    registry = MultiModalTimingRegistry(Observability())
    with registry.get("r1").record("stage"):
        pass
    assert registry.get("r1") is registry.get("r1")
    assert set(registry.stat()) == {"r1"}
    assert registry.stat() == {}  # read once

    off = MultiModalTimingRegistry(None)
    assert off.get("r1").enabled is False and off.stat() == {}


# -- the processing context ----------------------------------------------------------------------


def test_context_loads_typed_config_and_processor_and_refuses_the_wrong_type() -> None:
    ctx = InputProcessingContext(ModelConfig(model=QWEN2_VL))
    assert isinstance(ctx.get_hf_config(Qwen2VLConfig), Qwen2VLConfig)
    assert isinstance(ctx.get_hf_processor(Qwen2VLProcessor), Qwen2VLProcessor)
    with pytest.raises(TypeError, match="Invalid type of HuggingFace config"):
        ctx.get_hf_config(str)
    with pytest.raises(TypeError, match="Invalid type of HuggingFace processor"):
        ctx.get_hf_processor((Qwen2AudioProcessor,))
    assert ctx.get_hf_image_processor_config()["merge_size"] == 2
    assert ctx.get_tokenizer() is ctx.get_hf_processor().tokenizer


def test_context_without_a_tokenizer_refuses_text_and_the_processor_needs_one() -> None:
    ctx = InputProcessingContext(ModelConfig(model=QWEN2_VL), None)
    assert ctx.tokenizer is None and not ctx.has_tokenizer()
    with pytest.raises(ValueError, match="skip_tokenizer_init"):
        ctx.get_tokenizer()
    from mediaref.models.qwen2_vl import (
        Qwen2VLDummyInputsBuilder,
        Qwen2VLMultiModalProcessor,
        Qwen2VLProcessingInfo,
    )

    info = Qwen2VLProcessingInfo(ctx)
    with pytest.raises(ValueError, match="requires a tokenizer"):
        Qwen2VLMultiModalProcessor(info, Qwen2VLDummyInputsBuilder(info))


def test_an_explicit_tokenizer_is_the_one_the_processor_shares() -> None:
    tokenizer = InputProcessingContext(ModelConfig(model=QWEN2_VL)).get_tokenizer()
    ctx = InputProcessingContext(ModelConfig(model=QWEN2_VL), tokenizer)
    assert ctx.tokenizer is tokenizer
    assert ctx.get_hf_processor().tokenizer is tokenizer


def test_merged_kwargs_follow_vllm_s_precedence_and_scope_routing() -> None:
    ctx = InputProcessingContext(
        ModelConfig(
            model=QWEN2_AUDIO,
            mm_processor_kwargs={
                "size": {"shortest_edge": 256},
                "videos_kwargs": {"size": {"longest_edge": 1024}, "num_frames": 16},
            },
        )
    )
    merged = ctx.get_merged_mm_kwargs({"size": {"shortest_edge": 512}, "videos_kwargs": {"fps": 4}})
    # The flat "size" is carried by the videos scope, so it leaves the flat namespace.
    assert merged == {
        "videos_kwargs": {
            "size": {"shortest_edge": 512, "longest_edge": 1024},
            "num_frames": 16,
            "fps": 4,
        }
    }
    routed = ctx.get_merged_mm_kwargs(
        {"max_pixels": 9, "unknown": 1, "images_kwargs": {"max_pixels": 4}},
        supported_mm_processor_kwargs={"images_kwargs": {"max_pixels"}},
    )
    assert routed["images_kwargs"] == {"max_pixels": 4}  # the scoped value wins
    assert routed["unknown"] == 1 and "max_pixels" not in routed  # routed keys leave the flat ones


def test_init_processor_merges_the_configured_kwargs() -> None:
    config = ModelConfig(model=QWEN2_VL, mm_processor_kwargs={"a": 1}, mm_device_do_normalize=False)
    assert InputProcessingContext(config).init_processor(dict, b=2) == {"a": 1, "b": 2}
    # With normalization on the device (Qwen2-VL's default), the CPU flags are forced off.
    on_device = InputProcessingContext(ModelConfig(model=QWEN2_VL))
    assert on_device.init_processor(dict, do_rescale=True) == {
        "do_rescale": False,
        "do_normalize": False,
    }


def test_call_hf_processor_casts_to_the_model_dtype_and_names_a_failure() -> None:
    ctx = InputProcessingContext(ModelConfig(model=QWEN2_VL, dtype=torch.bfloat16))

    def hf(images: Any, **kwargs: Any) -> BatchFeature:
        assert kwargs["return_tensors"] == "pt"
        return BatchFeature(
            {"pixel_values": torch.ones(2, 3), "grid": torch.ones(1, 3, dtype=torch.long)}
        )

    out = ctx.call_hf_processor(hf, {"images": [1]})
    assert out["pixel_values"].dtype == torch.bfloat16 and out["grid"].dtype == torch.long

    def failing(**kwargs: Any) -> BatchFeature:
        raise KeyError("size")

    with pytest.raises(ValueError, match="Failed to apply function"):
        ctx.call_hf_processor(failing, {"images": [np.zeros((2, 2, 3))]})


# -- the processing info -------------------------------------------------------------------------


def test_limits_are_the_smaller_of_the_model_s_and_the_configured_ones() -> None:
    info = _vl_info(limit_mm_per_prompt={"image": 1, "video": {"count": 3, "num_frames": 4}})
    assert info.supported_mm_limits == {"image": None, "video": None}
    assert info.allowed_mm_limits == {"image": 1, "video": 3}
    info.validate_num_items("video", 3)
    with pytest.raises(VLLMValidationError, match=r"At most 1 image\(s\)") as caught:
        info.validate_num_items("image", 2)
    assert caught.value.parameter == "image"
    assert _vl_info(language_model_only=True).allowed_mm_limits == {"image": 0, "video": 0}


def test_parse_mm_data_refuses_embeddings_unless_enabled_and_can_skip_validation() -> None:
    embeds = {"image_embeds": torch.zeros(4, 8), "image_grid_thw": torch.tensor([[1, 4, 4]])}
    with pytest.raises(VLLMValidationError, match="--enable-mm-embeds"):
        _vl_info().parse_mm_data({"image": embeds})
    assert _vl_info().parse_mm_data({"image": embeds}, validate=False).get_all_counts() == {
        "image": 1
    }
    assert _vl_info(enable_mm_embeds=True).parse_mm_data({"image": embeds}).get_count("image") == 1


def test_info_defaults_tokenization_and_kwargs_support() -> None:
    info = _vl_info(max_model_len=64)
    params = info.default_tok_params
    assert params.max_total_tokens == 64 and params.add_special_tokens is True
    assert info.get_mm_max_tokens_per_item(64, {"image": 1}) is None
    supported = info.supported_mm_processor_kwargs
    assert {"text_kwargs", "images_kwargs", "videos_kwargs"} == set(supported)
    assert "max_pixels" in supported["images_kwargs"] and "fps" in supported["videos_kwargs"]
    assert info.skip_prompt_length_check is False and info.allow_missing_mm_embeddings is False


def _vl_info(**config: Any) -> BaseProcessingInfo:
    from mediaref.models.qwen2_vl import Qwen2VLProcessingInfo

    return Qwen2VLProcessingInfo(InputProcessingContext(ModelConfig(model=QWEN2_VL, **config)))


# -- ProcessorInputs built by hand -----------------------------------------------------------------


def test_hand_built_inputs_keep_the_callers_refs(qwen2_vl_processor: Any) -> None:
    # Processing owns only the forks build_inputs makes; refs handed over in a hand-built
    # ProcessorInputs are the caller's, and stay usable after the apply.
    from _instrumented_decoding import image_bytes
    from mediaref.media.image import ImageMediaIO

    ref = ImageMediaIO().load_bytes_ref(image_bytes(7))
    items = qwen2_vl_processor.info.parse_mm_data({"image": [ref]})
    prompt = "<|vision_start|><|image_pad|><|vision_end|>"
    out = qwen2_vl_processor.apply(ProcessorInputs(prompt, items), TimingContext())
    assert len(out["mm_placeholders"]["image"]) == 1
    assert not ref.is_released and ref.data
    again = qwen2_vl_processor.apply(ProcessorInputs(prompt, items))
    assert again["prompt_token_ids"] == out["prompt_token_ids"]


def test_build_inputs_releases_only_its_forks(qwen2_vl_processor: Any) -> None:
    from _instrumented_decoding import image_bytes
    from mediaref.media.image import ImageMediaIO

    ref = ImageMediaIO().load_bytes_ref(image_bytes(8))
    inputs = qwen2_vl_processor.build_inputs(
        "<|vision_start|><|image_pad|><|vision_end|>", {"image": [ref]}
    )
    [fork] = inputs.owned_refs
    assert fork is not ref
    qwen2_vl_processor.apply(inputs)
    assert fork.is_released and not ref.is_released and ref.data


def test_refs_the_caller_passed_anywhere_are_never_counted_as_processings() -> None:
    from mediaref.processing._apply_state import caller_ref_ids

    refs = [
        MediaRef(bytes([i]), CountingDecoder(None), DecodeSpec(modality="video")) for i in range(3)
    ]
    mm_data = {"video": [(refs[0], {"fps": 1.0}), refs[1]], "audio": (refs[2], 16000)}
    assert caller_ref_ids(mm_data) == {id(ref) for ref in refs}


# -- the token-match functions -------------------------------------------------------------------


def test_iter_and_replace_token_matches_skip_overlaps_and_empty_targets() -> None:
    assert list(iter_token_matches([1, 1, 1, 2, 1, 1], [1, 1])) == [
        PromptTargetMatch(0, 2),
        PromptTargetMatch(4, 6),
    ]
    assert list(iter_token_matches([1, 1, 1], [1], start_idx=2)) == [PromptTargetMatch(2, 3)]
    assert list(iter_token_matches([1, 2], [])) == []
    with pytest.raises(ValueError, match="non-negative"):
        list(iter_token_matches([1], [1], start_idx=-1))
    assert replace_token_matches([5, 1, 2, 1, 2], [1, 2], [9]) == [5, 9, 9]
    assert replace_token_matches([5], [], [9]) == [5]


def test_apply_token_matches_reports_the_alternative_each_item_used() -> None:
    updates = resolve_prompt_updates(
        [
            PromptReplacement("image", [7], [70, 70]),
            PromptReplacement("image", [8], [80]),
            PromptReplacement("audio", [6], [60]),
        ],
        {"image": 2, "audio": 1},
    )
    new_ids, result = apply_token_matches([1, 8, 7], updates)
    assert new_ids == [1, 80, 70, 70]
    assert result == {"image": [1, 0], "audio": [None]}


def test_an_update_with_empty_content_gets_no_placeholder_as_in_vllm() -> None:
    from mediaref.processing.processor import _apply_token_matches_with_placeholders

    updates = resolve_prompt_updates(
        [PromptReplacement("image", [7], [70]), PromptReplacement("audio", [6], [])],
        {"image": 1, "audio": 1},
    )
    new_ids, result, placeholders = _apply_token_matches_with_placeholders([6, 7], updates)
    assert (new_ids, result) == ([70], {"image": [0], "audio": [0]})
    assert placeholders["audio"] == [] and [p.tokens for p in placeholders["image"]] == [[70]]


def test_vllms_private_apply_matches_cuts_the_new_ids_into_segments() -> None:
    from mediaref.processing.processor import _apply_matches

    updates = resolve_prompt_updates(
        [PromptReplacement("image", [7], [70, 70]), PromptReplacement("image", [8], [80])],
        {"image": 2},
    )
    # The prompt's ids before each content, the content, ..., the ids after the last.
    assert _apply_matches([1, 8, 2, 7], updates) == (
        [[1], [80], [2], [70, 70], []],
        {"image": [1, 0]},
    )
    start = resolve_prompt_updates(
        [PromptInsertion("image", PromptIndexTargets.start(), [9])], {"image": 1}
    )
    assert _apply_matches([1, 2], start) == ([[], [9], [1, 2]], {"image": [0]})
    missing = resolve_prompt_updates([PromptReplacement("image", [5], [1])], {"image": 1})
    assert _apply_matches([1, 2], missing) == ([[1, 2]], {"image": [None]})


def test_find_mm_placeholders_groups_what_it_finds_and_gives_an_empty_dict_for_nothing() -> None:
    updates = resolve_prompt_updates(
        [PromptReplacement("video", [6], [60]), PromptReplacement("image", [7], [70, 70])],
        {"video": 1, "image": 1},
    )
    assert find_mm_placeholders([1, 2, 3], updates) == {}
    found = find_mm_placeholders([70, 70, 60], updates)
    assert list(found) == ["image", "video"]  # in prompt order, as vLLM groups them
    [image_info] = found["image"]
    assert image_info == PlaceholderFeaturesInfo("image", 0, 0, [70, 70], None)
    assert image_info.length == 2 and image_info.to_range().offset == 0


def test_full_groupby_modality_keeps_first_appearance_order() -> None:
    updates: list[PromptUpdate] = [
        PromptReplacement("video", [1], [1]),
        PromptReplacement("image", [2], [2]),
        PromptReplacement("video", [3], [3]),
    ]
    groups = dict(full_groupby_modality(updates))
    assert list(groups) == ["video", "image"] and len(groups["video"]) == 2


def test_a_prompt_index_built_from_callables_places_an_insertion() -> None:
    after_first = PromptIndex(lambda prompt, start_idx=0: 1, lambda tok, prompt, start_idx=0: 1)
    updates = resolve_prompt_updates([PromptInsertion("image", after_first, [9, 9])], {"image": 1})
    assert apply_token_matches([5, 6], updates)[0] == [5, 9, 9, 6]


def test_cached_encode_remembers_and_hands_out_fresh_lists() -> None:
    tokenizer = InputProcessingContext(ModelConfig(model=QWEN2_VL)).get_tokenizer()
    first = cached_encode(tokenizer, "hello world", add_special_tokens=False)
    first.append(-1)
    assert cached_encode(tokenizer, "hello world", add_special_tokens=False) == tokenizer.encode(
        "hello world", add_special_tokens=False
    )


# -- an encoder-decoder processor ----------------------------------------------------------------


class _EchoHf:
    def __call__(self, **kwargs: Any) -> BatchFeature:
        return BatchFeature({"features": torch.ones(len(kwargs["audio"]), 3)})


class _EncDecInfo(BaseProcessingInfo):
    def get_hf_processor(self, **kwargs: object) -> Any:
        return _EchoHf()

    def get_supported_mm_limits(self) -> Mapping[str, int | None]:
        return {"audio": 1}


class _EncDecDummy(BaseDummyInputsBuilder[_EncDecInfo]):
    def get_dummy_text(self, mm_counts: Mapping[str, int]) -> str:
        return ""

    def get_dummy_mm_data(
        self, seq_len: int, mm_counts: Mapping[str, int], mm_options: Any = None
    ) -> dict[str, Any]:
        return {"audio": self._get_dummy_audios(length=8, num_audios=mm_counts.get("audio", 0))}


class _WhisperLike(EncDecMultiModalProcessor[_EncDecInfo]):
    skip_decoder_start_token = True

    def create_encoder_prompt(self, prompt: list[int], mm_items: MultiModalDataItems) -> list[int]:
        return [0]  # the encoder sees one audio placeholder

    def _get_mm_fields_config(
        self, hf_inputs: BatchFeature, hf_processor_mm_kwargs: Mapping[str, object]
    ) -> Mapping[str, MultiModalFieldConfig]:
        return {"features": MultiModalFieldConfig.batched("audio")}

    def _get_prompt_updates(
        self,
        mm_items: MultiModalDataItems,
        hf_processor_mm_kwargs: Mapping[str, object],
        out_mm_kwargs: MultiModalKwargsItems,
    ) -> Sequence[PromptUpdate]:
        return [PromptReplacement("audio", [0], [0, 0, 0])]


def test_enc_dec_processor_applies_updates_to_the_encoder_prompt(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "whisper_like"}))
    info = _EncDecInfo(InputProcessingContext(ModelConfig(model=str(tmp_path)), object()))
    processor = _WhisperLike(info, _EncDecDummy(info))
    items = MultiModalDataParser().parse_mm_data({"audio": [np.zeros(8, np.float32)]})
    out = processor.apply(ProcessorInputs([50, 51], items), TimingContext())
    assert out["encoder_prompt_token_ids"] == [0, 0, 0]
    assert out["prompt_token_ids"] == [50, 51]  # the decoder gets the request's prompt
    assert [(r.offset, r.length) for r in out["mm_placeholders"]["audio"]] == [(0, 3)]
    assert processor.create_decoder_prompt([1], items) == [1]


# -- the registry's factories ----------------------------------------------------------------------


def test_register_processor_takes_factories_and_decorates_a_model_class(tmp_path: Path) -> None:
    registry = MultiModalRegistry()
    built: list[InputProcessingContext] = []

    def build_info(ctx: InputProcessingContext) -> _EncDecInfo:  # a function, like llava's
        built.append(ctx)
        return _EncDecInfo(ctx)

    @registry.register_processor(_WhisperLike, info=build_info, dummy_inputs=_EncDecDummy)
    class WhisperLikeForConditionalGeneration:
        supports_mm_device_do_normalize = True

    (tmp_path / "config.json").write_text(
        json.dumps({"architectures": ["WhisperLikeForConditionalGeneration"], "model_type": "x"})
    )
    config = ModelConfig(model=str(tmp_path))
    tokenizer = object()
    processor = registry.create_processor(config, tokenizer=tokenizer)
    assert isinstance(processor, _WhisperLike) and built[0].tokenizer is tokenizer
    assert isinstance(registry.get_processing_info(config), _EncDecInfo)
    assert registry.supports_mm_device_do_normalize(config)
    with pytest.raises(TypeError, match="register_family"):
        registry.register_processor("x", info=build_info, dummy_inputs=_EncDecDummy)  # type: ignore[arg-type]


def test_registering_a_model_class_twice_warns(caplog: pytest.LogCaptureFixture) -> None:
    registry = MultiModalRegistry()

    class Model:
        pass

    registry.register_processor(_WhisperLike, info=_EncDecInfo, dummy_inputs=_EncDecDummy)(Model)
    with caplog.at_level(logging.WARNING, logger="mediaref.registry"):
        registry.register_processor(_WhisperLike, info=_EncDecInfo, dummy_inputs=_EncDecDummy)(
            Model
        )
    assert "already has a multi-modal processor" in caplog.text


# -- dummy options and tokenization params ---------------------------------------------------------


def test_dummy_overrides_only_shrink(caplog: pytest.LogCaptureFixture) -> None:
    builder = _EncDecDummy(_EncDecInfo(InputProcessingContext(ModelConfig(model="/x"), object())))
    [small] = builder._get_dummy_images(
        width=64, height=64, num_images=1, overrides=ImageDummyOptions(width=32, height=128)
    )
    assert small.size == (32, 64)
    assert "exceeds the model's maximum" in caplog.text
    assert builder._get_dummy_audios(length=8, num_audios=2)[0].shape == (8,)
    with pytest.raises(ValueError, match="width"):
        ImageDummyOptions(width=0)


def test_tokenize_params_bound_encoding_and_truncate_from_the_asked_side() -> None:
    params = TokenizeParams(max_total_tokens=10)
    assert params.get_encode_kwargs() == {
        "truncation": True,
        "max_length": 11,
        "add_special_tokens": True,
    }
    with pytest.raises(VLLMValidationError, match="maximum context length is 10"):
        params.apply_post_tokenization(None, {"prompt_token_ids": list(range(11))})
    left = TokenizeParams(max_total_tokens=10, truncate_prompt_tokens=3, truncation_side="left")
    assert left.apply_post_tokenization(None, {"prompt_token_ids": [1, 2, 3, 4, 5]}) == {
        "prompt_token_ids": [3, 4, 5]
    }
    with pytest.raises(VLLMValidationError, match="truncation_side"):
        TokenizeParams(max_total_tokens=10, truncation_side="middle")  # type: ignore[arg-type]
    lowered = TokenizeParams(max_total_tokens=None, do_lower_case=True)
    assert lowered.apply_pre_tokenization(None, {"prompt": "ABC"}) == {"prompt": "abc"}


class _PadTokenizer:
    pad_token_id = 0
    truncation_side = "right"
    max_chars_per_token = 4


def test_tokenize_params_take_vllms_tokenizer_kwargs() -> None:
    # vLLM's renderer, offline entrypoints and model files call with_kwargs on the model's
    # defaults (tests/test_vllm_input_processor.py runs vLLM's input processor on them).
    base = TokenizeParams(max_total_tokens=100, max_output_tokens=10, return_token_offsets=True)
    bounded = base.with_kwargs(max_length=30, truncation=True, padding="max_length")
    assert (bounded.max_output_tokens, bounded.truncate_prompt_tokens) == (70, 30)
    assert bounded.pad_prompt_tokens == 30
    assert bounded.return_token_offsets is False  # not carried over, as in vLLM
    kept = base.with_kwargs(truncation=False, padding=False, add_special_tokens=False)
    assert (kept.truncate_prompt_tokens, kept.pad_prompt_tokens) == (None, None)
    assert (kept.max_output_tokens, kept.add_special_tokens) == (10, False)
    undone = bounded.with_kwargs(truncation="do_not_truncate", padding="do_not_pad")
    assert (undone.truncate_prompt_tokens, undone.pad_prompt_tokens) == (None, None)
    assert base.with_kwargs(stride=4) == TokenizeParams(max_total_tokens=100, max_output_tokens=10)


def test_tokenize_params_truncate_then_pad_and_cut_what_runs_beside_the_tokens() -> None:
    params = TokenizeParams(
        max_total_tokens=10, pad_prompt_tokens=6, truncate_prompt_tokens=4, truncation_side="left"
    )
    prompt = {"prompt_token_ids": [1, 2, 3, 4, 5], "prompt_is_token_ids": [1, 1, 0, 0, 0]}
    assert params.apply_post_tokenization(_PadTokenizer(), prompt) == {
        "prompt_token_ids": [2, 3, 4, 5, 0, 0],
        "prompt_is_token_ids": [1, 0, 0, 0],
    }
    with pytest.raises(VLLMValidationError, match="skip_tokenizer_init"):
        params.apply_post_tokenization(None, {"prompt_token_ids": [1]})
    named = TokenizeParams(max_total_tokens=5, max_output_tokens_param="max_tokens")
    with pytest.raises(VLLMValidationError, match="max_tokens=9"):
        TokenizeParams(**{**named.__dict__, "max_output_tokens": 9})


def test_tokenize_params_say_how_much_a_left_cut_removed_from_the_text() -> None:
    left = TokenizeParams(max_total_tokens=3, truncate_prompt_tokens=2, truncation_side="left")
    text = "x" * 20  # 3 tokens of at most 4 characters hold 12: 8 are cut from the left
    assert left._get_text_truncation_offset(_PadTokenizer(), text) == 8
    assert left.apply_pre_tokenization(_PadTokenizer(), {"prompt": text}) == {"prompt": "x" * 12}
    right = TokenizeParams(max_total_tokens=3, truncate_prompt_tokens=2, truncation_side="right")
    assert right._get_text_truncation_offset(_PadTokenizer(), text) == 0
    assert left._truncation_slice(None, 5) == slice(3, 5)
