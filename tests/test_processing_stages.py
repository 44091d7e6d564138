"""The four HF stages (vLLM's signatures): dummy text only where a family asks for it,
truncation, the audio rename, passthrough, postprocess, threads.

Most checks run a small processor over a recording stand-in for the HF processor, so each stage's
contribution to the call (or to the absence of a call) is visible. The last ones run the real
Qwen2-VL and Qwen2-Audio processors to show the same inputs reach a real ``ProcessorMixin``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

# huggingface_hub reads this when first imported; set before anything imports transformers.
os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np
import pytest
import torch
from PIL import Image
from transformers import BatchFeature

from mediaref.inputs import MultiModalKwargsItems
from mediaref.parse import MultiModalDataItems, MultiModalDataParser
from mediaref.processing.context import BaseProcessingInfo, InputProcessingContext, ModelConfig
from mediaref.processing.dummy_inputs import BaseDummyInputsBuilder
from mediaref.processing.fields import MultiModalFieldConfig, build_kwargs_items
from mediaref.processing.processor import (
    BaseMultiModalProcessor,
    HFMultiModalInputs,
    PromptUpdate,
)

# --- a small processor over a recording HF stand-in --------------------------------------------


class RecordingHfProcessor:
    """Records each call's kwargs and the torch thread count it ran under; answers per modality."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.threads_during_call: list[int] = []
        self.error: Exception | None = None

    def __call__(self, **kwargs: Any) -> BatchFeature:
        self.calls.append(kwargs)
        self.threads_during_call.append(torch.get_num_threads())
        if self.error is not None:
            raise self.error
        out: dict[str, Any] = {}
        if "images" in kwargs:
            out["pixel_values"] = torch.stack(
                [
                    torch.as_tensor(np.asarray(image), dtype=torch.float32)
                    for image in kwargs["images"]
                ]
            )
        if "audio" in kwargs:
            out["audio_values"] = torch.stack([torch.as_tensor(clip) for clip in kwargs["audio"]])
        if "text" in kwargs:
            out["input_ids"] = torch.tensor([[len(kwargs["text"])]])
        return BatchFeature(out)


class ToyInfo(BaseProcessingInfo):
    def __init__(self, hf_processor: RecordingHfProcessor) -> None:
        super().__init__(InputProcessingContext(ModelConfig(model="/nonexistent/toy")))
        self.hf_processor = hf_processor

    def get_hf_processor(self, **kwargs: Any) -> Any:
        return self.hf_processor

    def get_supported_mm_limits(self) -> Mapping[str, int | None]:
        return {"image": None, "audio": None}


class ToyDummyInputs(BaseDummyInputsBuilder[ToyInfo]):
    def __init__(self, info: ToyInfo) -> None:
        super().__init__(info)
        self.requested_counts: list[dict[str, int]] = []

    def get_dummy_text(self, mm_counts: Mapping[str, int]) -> str:
        self.requested_counts.append(dict(mm_counts))
        return "<image>" * mm_counts.get("image", 0) + "<audio>" * mm_counts.get("audio", 0)

    def get_dummy_mm_data(
        self, seq_len: int, mm_counts: Mapping[str, int], mm_options: Any = None
    ) -> dict[str, Any]:
        return {}


class ToyProcessor(BaseMultiModalProcessor[ToyInfo]):
    def _get_mm_fields_config(
        self, hf_inputs: BatchFeature, hf_processor_mm_kwargs: Mapping[str, object]
    ) -> Mapping[str, MultiModalFieldConfig]:
        return {
            "pixel_values": MultiModalFieldConfig.batched("image"),
            "image_embeds": MultiModalFieldConfig.batched("image"),
            "audio_values": MultiModalFieldConfig.batched("audio"),
        }

    def _get_prompt_updates(
        self,
        mm_items: MultiModalDataItems,
        hf_processor_mm_kwargs: Mapping[str, object],
        out_mm_kwargs: MultiModalKwargsItems,
    ) -> Sequence[PromptUpdate]:
        return []


class DummyTextProcessor(ToyProcessor):
    """A processor whose HF call needs text with one placeholder per item (vLLM's opt-in)."""

    def _get_hf_mm_text(self, mm_counts: Mapping[str, int]) -> str | None:
        return self.dummy_inputs.get_dummy_text(mm_counts)


class RecordingPostprocessProcessor(DummyTextProcessor):
    """Doubles the image embeddings after the merge, which only works if they were merged first."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.keys_seen: list[set[str]] = []

    def _postprocess_hf_mm_data(
        self,
        mm_inputs: Mapping[str, object],
        hf_processor_mm_kwargs: Mapping[str, object],
        processed: BatchFeature,
    ) -> BatchFeature:
        self.keys_seen.append(set(processed))
        if "image_embeds" in processed:
            processed["image_embeds"] = processed["image_embeds"] * 2
        return processed


def make_processor(cls: type[ToyProcessor] = ToyProcessor) -> ToyProcessor:
    info = ToyInfo(RecordingHfProcessor())
    return cls(info, ToyDummyInputs(info))


def hf_of(processor: ToyProcessor) -> RecordingHfProcessor:
    return processor.info.hf_processor


def dummy_of(processor: ToyProcessor) -> ToyDummyInputs:
    dummy = processor.dummy_inputs
    assert isinstance(dummy, ToyDummyInputs)
    return dummy


def parse(mm_data: dict[str, Any]) -> MultiModalDataItems:
    return MultiModalDataParser().parse_mm_data(mm_data)


def images(n: int) -> list[np.ndarray]:
    return [np.full((4, 4, 3), i, dtype=np.uint8) for i in range(n)]


def clips(n: int) -> list[np.ndarray]:
    return [np.full((8,), float(i), dtype=np.float32) for i in range(n)]


def run_main(
    processor: ToyProcessor, mm_data: dict[str, Any], hf_kwargs: Mapping[str, object] | None = None
) -> BatchFeature:
    return processor._apply_hf_processor_main(parse(mm_data), hf_kwargs or {})


@pytest.fixture
def restore_torch_threads() -> Iterator[int]:
    """Run with a known thread count other than 1, and leave the process as it was."""
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        yield 3
    finally:
        torch.set_num_threads(before)


# --- stage 1: inputs ---------------------------------------------------------------------------


def test_by_default_the_hf_processor_gets_no_text_and_no_truncation() -> None:
    # vLLM's default: a family passes dummy text only when its HF processor needs it.
    processor = make_processor()
    assert processor._get_hf_mm_text({"image": 1}) is None
    run_main(processor, {"image": images(1)}, hf_kwargs={"max_length": 3})

    [call] = hf_of(processor).calls
    assert "text" not in call
    assert "truncation" not in call
    assert call["max_length"] == 3  # the caller's own kwargs are not dropped
    assert len(call["images"]) == 1
    assert dummy_of(processor).requested_counts == []


def test_dummy_text_comes_from_get_dummy_text_with_the_item_counts() -> None:
    processor = make_processor(DummyTextProcessor)
    run_main(processor, {"image": images(2), "audio": clips(1)})

    assert dummy_of(processor).requested_counts == [{"image": 2, "audio": 1}]
    [call] = hf_of(processor).calls
    assert call["text"] == "<image><image><audio>"
    assert call["truncation"] is False
    assert call["return_tensors"] == "pt"


def test_dummy_text_keeps_a_callers_truncation_and_other_kwargs() -> None:
    # vLLM puts truncation=False under the caller's kwargs: an explicit setting wins.
    processor = make_processor(DummyTextProcessor)
    run_main(processor, {"image": images(1)}, hf_kwargs={"do_resize": False, "max_length": 3})
    [call] = hf_of(processor).calls
    assert call["truncation"] is False
    assert call["max_length"] == 3
    assert call["do_resize"] is False
    processor = make_processor(DummyTextProcessor)
    run_main(processor, {"image": images(1)}, hf_kwargs={"truncation": True})
    assert hf_of(processor).calls[0]["truncation"] is True


def test_audios_is_renamed_to_the_hf_audio_keyword() -> None:
    processor = make_processor()
    data = clips(2)
    out = run_main(processor, {"audio": data})

    [call] = hf_of(processor).calls
    assert "audios" not in call
    assert len(call["audio"]) == 2
    np.testing.assert_array_equal(call["audio"][1], data[1])
    assert torch.equal(out["audio_values"], torch.as_tensor(np.stack(data)))


def test_stage1_inputs_without_processor_data_carry_no_text_and_no_truncation() -> None:
    processor = make_processor(DummyTextProcessor)
    inputs = processor._get_hf_mm_inputs(parse({"image": torch.zeros(2, 3, 5)}), {"max_length": 3})

    assert isinstance(inputs, HFMultiModalInputs)
    assert inputs.hf_data == {}
    assert inputs.hf_kwargs == {"max_length": 3}
    assert set(inputs.passthrough_data) == {"image_embeds"}
    assert dummy_of(processor).requested_counts == []


def test_a_failing_hf_processor_is_a_value_error_naming_it_without_the_payload() -> None:
    processor = make_processor()
    hf_of(processor).error = RuntimeError("bad size")
    with pytest.raises(ValueError, match="RecordingHfProcessor") as caught:
        run_main(processor, {"image": images(1)})
    assert "bad size" in str(caught.value) and "array(" not in str(caught.value)


# --- stages 2-4: the call, the merge, the postprocess --------------------------------------------


def test_only_embeddings_never_call_the_hf_processor_and_still_yield_a_batch_feature() -> None:
    processor = make_processor()
    embeds = torch.randn(2, 3, 5)
    out = run_main(processor, {"image": embeds})

    assert hf_of(processor).calls == []
    assert isinstance(out, BatchFeature)
    assert set(out) == {"image_embeds"}
    assert torch.equal(out["image_embeds"], embeds)


def test_no_items_at_all_give_an_empty_batch_feature_without_a_call() -> None:
    processor = make_processor()
    out = processor._apply_hf_processor_main(MultiModalDataItems(), {})
    assert isinstance(out, BatchFeature)
    assert dict(out) == {}
    assert hf_of(processor).calls == []


def test_passthrough_embeddings_merge_with_the_processed_output() -> None:
    processor = make_processor(DummyTextProcessor)
    embeds = torch.randn(2, 3, 5)
    out = run_main(processor, {"image": embeds, "audio": clips(1)})

    # The embeddings bypass the processor: only the audio was counted for the dummy text.
    assert dummy_of(processor).requested_counts == [{"audio": 1}]
    [call] = hf_of(processor).calls
    assert call["text"] == "<audio>"
    assert "images" not in call
    assert set(out) == {"audio_values", "input_ids", "image_embeds"}

    items = build_kwargs_items(out, processor._get_mm_fields_config(out, {}))
    assert {m: len(v) for m, v in items.items()} == {"image": 2, "audio": 1}
    assert torch.equal(items["image"][1]["image_embeds"].data, embeds[1])


def test_postprocess_runs_after_the_passthrough_merge() -> None:
    processor = make_processor(RecordingPostprocessProcessor)
    assert isinstance(processor, RecordingPostprocessProcessor)
    embeds = torch.ones(1, 2, 4)
    out = run_main(processor, {"image": embeds, "audio": clips(1)})

    assert processor.keys_seen == [{"audio_values", "input_ids", "image_embeds"}]
    assert torch.equal(out["image_embeds"], embeds * 2)


def test_postprocess_also_runs_when_nothing_was_processed() -> None:
    processor = make_processor(RecordingPostprocessProcessor)
    assert isinstance(processor, RecordingPostprocessProcessor)
    out = run_main(processor, {"image": torch.ones(1, 2, 4)})
    assert processor.keys_seen == [{"image_embeds"}]
    assert torch.equal(out["image_embeds"], torch.full((1, 2, 4), 2.0))


# --- torch threads -------------------------------------------------------------------------------


def test_the_processor_leaves_torch_threads_alone(restore_torch_threads: int) -> None:
    # Bounding threads is the renderer's job (tests/test_torch_threads.py); library code run
    # directly must not change process-wide torch state on every call.
    processor = make_processor()
    run_main(processor, {"image": images(1)})
    assert hf_of(processor).threads_during_call == [restore_torch_threads]
    assert torch.get_num_threads() == restore_torch_threads


# --- the same inputs reach the real Qwen2 processors ---------------------------------------------


class CallRecorder:
    """Wraps a real HF processor: records each call; other attributes come from the real one."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def __call__(self, **kwargs: Any) -> Any:
        with self._lock:
            self.calls.append(kwargs)
        return self.inner(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def record_hf_calls(
    processor: BaseMultiModalProcessor[Any], monkeypatch: pytest.MonkeyPatch
) -> CallRecorder:
    recorder = CallRecorder(processor.info.get_hf_processor())
    monkeypatch.setattr(processor.info, "get_hf_processor", lambda **kwargs: recorder)
    monkeypatch.setattr(processor.info.ctx, "get_hf_processor", lambda *a, **kwargs: recorder)
    return recorder


def test_qwen2_audio_receives_audio_dummy_text_and_no_truncation(
    qwen2_audio_processor: BaseMultiModalProcessor[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = record_hf_calls(qwen2_audio_processor, monkeypatch)
    tone = np.sin(np.linspace(0, 400 * np.pi, 16_000)).astype(np.float32)
    prompt = "<|audio_bos|><|AUDIO|><|audio_eos|>" * 2 + "hello"
    out = qwen2_audio_processor.apply(
        qwen2_audio_processor.build_inputs(prompt, {"audio": [(tone, 16_000), (tone, 16_000)]})
    )

    [call] = recorder.calls
    assert "audios" not in call
    assert len(call["audio"]) == 2
    assert call["text"] == qwen2_audio_processor.dummy_inputs.get_dummy_text({"audio": 2})
    assert call["text"] == "<|AUDIO|><|AUDIO|>"
    assert call["truncation"] is False
    assert call["sampling_rate"] == 16_000
    assert out["mm_kwargs"].get_data()["input_features"].shape[0] == 2
    # input_ids / attention_mask of the dummy text have no field config: not in the model inputs.
    assert set(out["mm_kwargs"].get_data()) == {"input_features", "feature_attention_mask"}


def test_qwen2_vl_receives_no_dummy_text(
    qwen2_vl_processor: BaseMultiModalProcessor[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Qwen2-VL's pixels do not depend on the text (issue 12): no dummy text, so HF neither expands
    # nor tokenizes placeholders, and no truncation setting is needed to protect them. The fused
    # path (issue 14, on by default) calls no HF processor at all: this pins the HF path's call.
    monkeypatch.setenv("MEDIAREF_QWEN2_VL_FUSED", "0")
    recorder = record_hf_calls(qwen2_vl_processor, monkeypatch)
    prompt = "<|vision_start|><|image_pad|><|vision_end|>describe"
    image = Image.new("RGB", (56, 56), color=(10, 200, 30))
    out = qwen2_vl_processor.apply(qwen2_vl_processor.build_inputs(prompt, {"image": [image]}))

    [call] = recorder.calls
    assert "text" not in call
    assert "truncation" not in call
    assert len(call["images"]) == 1
    assert "videos" not in call
    assert "do_sample_frames" not in call  # only video calls switch HF's frame sampling off
    data = out["mm_kwargs"].get_data()
    assert set(data) == {"pixel_values", "image_grid_thw"}
    assert data["pixel_values"].shape[0] == int(data["image_grid_thw"].prod())


def test_a_model_files_token_match_override_places_the_items(
    qwen2_vl_processor: BaseMultiModalProcessor[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # vLLM's model files override _apply_token_matches_with_placeholders (Gemma 3 merges the
    # newlines it puts beside an image, as its tokenizer would): the prompt and the placeholders
    # are the override's, as in vLLM, not the base placement's.
    processor = qwen2_vl_processor
    real = processor._apply_token_matches_with_placeholders
    results: list[Any] = []

    def overriding(token_ids: list[int], updates: Any) -> Any:
        new_ids, result, placeholders = real(token_ids, updates)
        results.append(result)
        return [*new_ids, 7], result, placeholders  # a token the base placement would not add

    monkeypatch.setattr(processor, "_apply_token_matches_with_placeholders", overriding)
    prompt = "<|vision_start|><|image_pad|><|vision_end|>describe"
    image = Image.new("RGB", (56, 56), color=(10, 200, 30))
    out = processor.apply(processor.build_inputs(prompt, {"image": [image]}))

    assert results == [{"image": [0]}]
    assert out["prompt_token_ids"][-1] == 7
    [placeholder] = out["mm_placeholders"]["image"]
    assert (
        out["prompt_token_ids"][placeholder.offset] == processor.info.get_hf_config().image_token_id
    )


def test_matched_updates_are_each_items_chosen_update() -> None:
    processor = make_processor()
    first, second = object(), object()
    updates: Any = {"image": [[first, second], [first]]}
    matched = processor._matched_updates_from_result(updates, {"image": [1, 0]})
    assert matched == {"image": [[second], [first]]}
    with pytest.raises(RuntimeError, match=r"mm_items\['image'\]\[1\]"):
        processor._matched_updates_from_result(updates, {"image": [0, None]})
