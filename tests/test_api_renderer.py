"""``BaseRenderer``'s vLLM surface on mediaref: prompts rendered, tokenized and processed into
engine inputs (completions and chats, sync and async), the processor-cache counters and
invalidations, warmup, token-id checks."""

from __future__ import annotations

import asyncio
import base64
import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from PIL import Image

from mediaref.exceptions import VLLMValidationError
from mediaref.models.builtin import builtin_model_path
from mediaref.processing.context import ModelConfig, TokenizeParams
from mediaref.renderers.base import BaseRenderer, ChatParams

QWEN2_VL = str(builtin_model_path("qwen2_vl"))
IMAGE_TEXT = "<|vision_start|><|image_pad|><|vision_end|>"


@dataclass
class _Observability:
    enable_mm_processor_stats: bool = True


@dataclass
class _VllmConfig:
    model_config: ModelConfig
    observability_config: Any = None


@pytest.fixture
def renderer() -> Iterator[BaseRenderer[Any]]:
    made = BaseRenderer(_VllmConfig(ModelConfig(model=QWEN2_VL), _Observability()))
    yield made
    made.shutdown()


def picture(shade: int) -> Image.Image:
    return Image.new("RGB", (56, 56), (shade, 30, 90))


def data_url(shade: int) -> str:
    buffer = io.BytesIO()
    picture(shade).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def test_completion_prompts_become_engine_inputs(renderer: BaseRenderer[Any]) -> None:
    text_only, with_image = renderer.render_cmpl(
        [
            {"prompt": "hello"},
            {"prompt": f"{IMAGE_TEXT} what?", "multi_modal_data": {"image": [picture(1)]}},
        ]
    )
    assert text_only["type"] == "token" and text_only["prompt"] == "hello"
    assert text_only["prompt_token_ids"] == renderer.get_tokenizer().encode("hello")
    assert with_image["type"] == "multimodal"
    assert len(with_image["mm_placeholders"]["image"]) == 1
    assert with_image["arrival_time"] == text_only["arrival_time"]
    with pytest.raises(VLLMValidationError, match="at least one prompt"):
        renderer.render_cmpl([])


def test_async_completion_matches_sync(renderer: BaseRenderer[Any]) -> None:
    prompt = {"prompt": f"{IMAGE_TEXT}!", "multi_modal_data": {"image": [picture(2)]}}
    [sync_out] = renderer.render_cmpl([dict(prompt)])
    [async_out] = asyncio.run(renderer.render_cmpl_async([dict(prompt)]))
    assert async_out["prompt_token_ids"] == sync_out["prompt_token_ids"]
    assert async_out["mm_hashes"] == sync_out["mm_hashes"]


def test_chat_messages_render_through_the_template(renderer: BaseRenderer[Any]) -> None:
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": data_url(3)}},
                {"type": "text", "text": "describe"},
            ],
        }
    ]
    conversations, [engine_input] = renderer.render_chat([messages], ChatParams())
    assert conversations[0][0]["role"] == "user"
    assert engine_input["type"] == "multimodal"
    assert "describe" in engine_input["prompt"]
    _, [again] = asyncio.run(renderer.render_chat_async([messages], ChatParams()))
    assert again["prompt_token_ids"] == engine_input["prompt_token_ids"]


def test_tokenization_truncates_and_bounds_the_prompt(renderer: BaseRenderer[Any]) -> None:
    params = TokenizeParams(max_total_tokens=100, truncate_prompt_tokens=2, truncation_side="left")
    tokenized = renderer.tokenize_prompt({"prompt": "one two three four"}, params)
    full = renderer.get_tokenizer().encode("one two three four")
    assert tokenized["prompt_token_ids"] == full[-2:]
    with pytest.raises(VLLMValidationError, match="maximum context length is 3"):
        renderer.tokenize_prompt({"prompt_token_ids": [1, 2, 3, 4]}, TokenizeParams(3))
    with pytest.raises(TypeError, match="prompt_token_ids"):
        renderer.tokenize_prompt({"prompt": [1, 2]}, params)


def test_truncation_may_not_cut_through_an_item(renderer: BaseRenderer[Any]) -> None:
    # Three tokens fit the limit of four before the placeholder expands, not after.
    prompt = {"prompt": IMAGE_TEXT, "multi_modal_data": {"image": [picture(4)]}}
    params = TokenizeParams(max_total_tokens=100, truncate_prompt_tokens=4, truncation_side="right")
    with pytest.raises(VLLMValidationError, match="would split or drop a\\(n\\) image item"):
        renderer.render_cmpl([prompt], params)


def test_prompt_embeds_need_enabling_and_load_as_a_tensor() -> None:
    buffer = io.BytesIO()
    torch.save(torch.ones(3, 64), buffer)  # the built-in model's text width
    payload = base64.b64encode(buffer.getvalue())
    off = BaseRenderer(ModelConfig(model=QWEN2_VL))
    try:
        with pytest.raises(VLLMValidationError, match="--enable-prompt-embeds"):
            off.render_prompt(payload)
    finally:
        off.shutdown()
    on = BaseRenderer(ModelConfig(model=QWEN2_VL, enable_prompt_embeds=True))
    try:
        [engine_input] = on.render_cmpl([payload])
        assert engine_input["type"] == "embeds"
        assert torch.equal(engine_input["prompt_embeds"], torch.ones(3, 64))
        with pytest.raises(VLLMValidationError, match="could not be deserialized"):
            on.render_prompt(base64.b64encode(b"not a tensor"))
    finally:
        on.shutdown()


def test_cache_counters_invalidations_and_clearing(
    renderer: BaseRenderer[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    prompt = {"prompt": IMAGE_TEXT, "multi_modal_data": {"image": [picture(5)]}}
    [first] = renderer.render_cmpl([dict(prompt)])
    renderer.render_cmpl([dict(prompt)])
    stats = renderer.stat_mm_cache()
    assert stats is not None and (stats.requests, stats.queries, stats.hits) == (2, 2, 1)
    assert renderer.stat_mm_cache().requests == 0  # read once

    [mm_hash] = first["mm_hashes"]["image"]
    cache = renderer.mm_processor_cache
    assert cache is not None and cache.is_cached_item(mm_hash)
    invalidated: list[str] = []
    monkeypatch.setattr(cache, "invalidate", invalidated.append)
    renderer.queue_mm_cache_invalidations([mm_hash, "never-cached"])  # only what it holds
    renderer.render_cmpl([{"prompt": "text only"}])  # no media: nothing processed, nothing drained
    assert invalidated == []
    renderer.render_cmpl([{"prompt": IMAGE_TEXT, "multi_modal_data": {"image": [picture(6)]}}])
    assert invalidated == [mm_hash]

    asyncio.run(renderer.clear_mm_cache_async())
    cleared = renderer.stat_mm_cache()
    assert cleared is not None and cleared.reset


def test_per_request_stage_timings_when_stats_are_on(renderer: BaseRenderer[Any]) -> None:
    renderer.render_cmpl([{"prompt": IMAGE_TEXT, "multi_modal_data": {"image": [picture(7)]}}])
    [stats] = renderer._mm_timing_registry.stat().values()
    assert {"get_mm_hashes_secs", "apply_prompt_updates_secs"} <= set(stats)


def test_warmup_runs_once_and_leaves_the_main_cache_empty(renderer: BaseRenderer[Any]) -> None:
    renderer.start_mm_warmup_in_background()
    renderer.warmup(ChatParams())
    assert renderer._mm_warmup_done
    cache = renderer.mm_processor_cache
    assert cache is not None and cache.make_stats().total == 0


def test_token_facts_and_checks(renderer: BaseRenderer[Any]) -> None:
    tokenizer = renderer.get_tokenizer()
    assert renderer.get_eos_token_id() == tokenizer.eos_token_id
    assert renderer.get_bos_token_id() == tokenizer.bos_token_id
    assert renderer.render_completion_suffix("a", "b") is None
    assert renderer.default_cmpl_tok_params.add_special_tokens is True
    renderer.validate_token_ids([0, 1, 2])
    for bad in (-1, len(tokenizer) + 10**6):
        with pytest.raises(VLLMValidationError, match="out of vocabulary") as caught:
            renderer.validate_token_ids([0, bad], parameter="prompt")
        assert caught.value.parameter == "prompt"
    assert renderer.get_mm_processor() is renderer.mm_processor
