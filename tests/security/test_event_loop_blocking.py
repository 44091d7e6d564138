"""Async request parsing never stalls the event loop, and per-request template work is memoized.

On a server every request shares one event loop: a millisecond of template parsing per request,
or seconds of loading a tokenizer from disk on a model's first request, delays every other
request's I/O by as much.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import jinja2

from mediaref.models.builtin import builtin_model_path
from mediaref.models.qwen2_vl import Qwen2VLProcessingInfo
from mediaref.processing.context import InputProcessingContext, ModelConfig
from mediaref.renderers.chat_utils import _template as _chat_template
from mediaref.renderers.chat_utils import parse_chat_messages_async

STALL_S = 0.5
TICK_S = 0.01

MESSAGES = [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]


class SlowLoadingInfo(Qwen2VLProcessingInfo):
    """Its tokenizer takes ``STALL_S`` to load, as a real one from a cold disk would."""

    def __init__(self, ctx: InputProcessingContext) -> None:
        super().__init__(ctx)
        self.loaded_on: list[str] = []

    def get_tokenizer(self) -> Any:
        if not self.loaded_on:
            self.loaded_on.append(threading.current_thread().name)
            threading.Event().wait(STALL_S)  # blocks whichever thread asked
        return super().get_tokenizer()


async def count_ticks_during(coro: Any) -> tuple[Any, int]:
    ticks = 0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not done.is_set():
            await asyncio.sleep(TICK_S)
            ticks += 1

    task = asyncio.create_task(ticker())
    try:
        result = await coro
    finally:
        done.set()
        await task
    return result, ticks


async def test_a_slow_first_load_runs_off_the_event_loop() -> None:
    info = SlowLoadingInfo(
        InputProcessingContext(ModelConfig(model=str(builtin_model_path("qwen2_vl"))))
    )
    (conversation, mm_data, _), ticks = await count_ticks_during(
        parse_chat_messages_async(MESSAGES, info)
    )
    assert conversation[0]["content"] == [{"type": "text", "text": "hello"}] and mm_data is None
    assert info.loaded_on and info.loaded_on[0] != threading.current_thread().name
    # Blocked on the loop, the ticker could not have run at all during the stall.
    assert ticks >= 5


def test_content_format_detection_parses_each_template_once(monkeypatch: Any) -> None:
    parses: list[str] = []
    original = jinja2.Environment.parse

    def counting_parse(self: jinja2.Environment, source: str, *args: Any, **kwargs: Any) -> Any:
        parses.append(source)
        return original(self, source, *args, **kwargs)

    monkeypatch.setattr(jinja2.Environment, "parse", counting_parse)
    template = (
        "{% for m in messages %}{% for part in m['content'] %}{{ part }}{% endfor %}{% endfor %}"
    )
    template += "{# unique to this test #}"
    assert [_chat_template.detect_content_format(template) for _ in range(5)] == ["openai"] * 5
    assert parses.count(template) == 1


def test_probed_placeholders_are_read_once_per_template(monkeypatch: Any) -> None:
    info = Qwen2VLProcessingInfo(
        InputProcessingContext(ModelConfig(model=str(builtin_model_path("qwen2_vl"))))
    )
    monkeypatch.setattr(_chat_template, "_probed_placeholders", {})
    renders: list[int] = []
    original = _chat_template.ModelChatTemplate.render

    def counting_render(self: Any, *args: Any, **kwargs: Any) -> str:
        renders.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(_chat_template.ModelChatTemplate, "render", counting_render)
    for _ in range(3):  # three requests, each with its own per-request template object
        template = _chat_template.ModelChatTemplate(info)
        assert template._probe("image", 1) == "<|vision_start|><|image_pad|><|vision_end|>"
    assert len(renders) == 1
