"""Requests that cost the server too much or mislead an engine: refused cheaply, clearly, early.

Each test pins one finding of the outside attack on ``mediaref serve``:

- megabytes of plain text were templated, tokenized and processed on the model's worker before
  the context length was checked;
- the HF processor's refusals (extreme aspect ratios, ``do_resize: false``) were 500s with a
  logged traceback;
- a 400 named the server's model directory;
- placeholder tokens typed in text came back as token ids that stand for no media item.
"""

from __future__ import annotations

import base64
import io
import logging
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import soundfile as sf  # type: ignore[import-untyped]
from PIL import Image

from _front_door import Server, post, session_from, warmed
from _image_samples import encode
from mediaref.processing import _tokenize_params
from mediaref.renderers.base import BaseRenderer
from mediaref.serve.app import COMPLETIONS_ROUTE
from mediaref.serve.options import ServeOptions
from mediaref.serve.service import RenderService

OPTIONS = ServeOptions(
    models=("qwen2_vl", "qwen2_audio"),
    port=0,
    max_request_body_mb=8.0,
    trust_request_mm_kwargs=True,
    access_log=False,
)


@pytest.fixture(scope="module")
def service() -> Iterator[RenderService]:
    with warmed(OPTIONS) as service:
        yield service


def png_url(width: int, height: int) -> str:
    payload = encode(Image.new("RGB", (width, height), (90, 30, 9)), "PNG")
    return "data:image/png;base64," + base64.b64encode(payload).decode()


def chat(*parts: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": list(parts)}], "mm_payload": "none", **fields}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def image(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


async def chat_status(server: Server, body: dict[str, Any]) -> tuple[int, Any]:
    async with session_from("127.0.0.1") as session:
        return await post(session, server, body)


class Spies:
    """Counts what the model's renderer and tokenizer are asked to do."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, renderer: BaseRenderer[Any]) -> None:
        self.processed = 0
        self.encoded_chars = 0
        real_process = renderer.process_multimodal_async
        tokenizer = renderer.get_tokenizer()
        real_encode = tokenizer.encode

        async def process(request: Any) -> Any:
            self.processed += 1
            return await real_process(request)

        def encode_text(text: str, *args: Any, **kwargs: Any) -> Any:
            self.encoded_chars += len(text)
            return real_encode(text, *args, **kwargs)

        real_count = _tokenize_params._count_tokens

        def count_tokens(tokenizer: Any, text: str) -> int:
            self.encoded_chars += len(text)
            return real_count(tokenizer, text)

        monkeypatch.setattr(renderer, "process_multimodal_async", process)
        monkeypatch.setattr(tokenizer, "encode", encode_text)
        monkeypatch.setattr(_tokenize_params, "_count_tokens", count_tokens)


# -- long text -------------------------------------------------------------------------------------


async def test_text_longer_than_any_tokenization_fits_is_refused_before_any_work(
    server: Server, service: RenderService, monkeypatch: pytest.MonkeyPatch
) -> None:
    spies = Spies(monkeypatch, service.renderers["qwen2_vl"])
    status, body = await chat_status(server, chat(text("a" * 4_000_000)))
    assert status == 400, body
    assert "maximum context length" in body["error"]["message"]
    assert spies.processed == 0 and spies.encoded_chars == 0


async def test_long_text_is_refused_after_encoding_a_prefix_not_all_of_it(
    server: Server, service: RenderService, monkeypatch: pytest.MonkeyPatch
) -> None:
    renderer = service.renderers["qwen2_vl"]
    params = renderer.default_chat_tok_params
    max_chars = params.max_input_chars(renderer.tokenizer)
    assert max_chars is not None
    words = "the quick brown fox jumps over a lazy dog " * (max_chars // 42)
    spies = Spies(monkeypatch, renderer)
    status, body = await chat_status(server, chat(text(words[: max_chars - 2000])))
    assert status == 400, body
    assert "maximum context length" in body["error"]["message"]
    assert spies.processed == 0
    assert 0 < spies.encoded_chars < len(words) // 2


@pytest.mark.parametrize("words", ["the quick brown fox jumps over a lazy dog ", "漢字かな "])
def test_an_over_long_text_costs_about_a_contexts_worth_of_encoding(
    service: RenderService, monkeypatch: pytest.MonkeyPatch, words: str
) -> None:
    # Encoded piece by piece, sized by the rate seen so far: about the context's worth of
    # characters once (the doubling prefixes of before encoded up to 3x the context's tokens).
    renderer = service.renderers["qwen2_vl"]
    params = renderer.default_chat_tok_params
    limit = params.max_input_tokens
    assert limit is not None
    tokenizer = renderer.get_tokenizer()
    per_word = len(tokenizer.encode(words * 100, add_special_tokens=False)) / 100
    context_chars = limit / per_word * len(words)  # the characters the context holds
    spies = Spies(monkeypatch, renderer)
    with pytest.raises(ValueError, match="maximum context length"):
        params.check_text_tokens(tokenizer, words * int(4 * limit / per_word))
    # The first piece is a character per allowed token: for a script of several tokens a
    # character (CJK here) it alone is over the context, and all that is encoded.
    assert spies.encoded_chars < max(1.5 * context_chars, limit + 2)


def test_a_text_that_fits_passes_the_piecewise_count(service: RenderService) -> None:
    renderer = service.renderers["qwen2_vl"]
    params = renderer.default_chat_tok_params
    tokenizer = renderer.get_tokenizer()
    limit = params.max_input_tokens
    assert limit is not None
    word = "hello world "
    per_word = len(tokenizer.encode(word * 100, add_special_tokens=False)) / 100
    text = word * int((limit - 40) / per_word)
    assert limit - 200 < len(tokenizer.encode(text, add_special_tokens=False)) <= limit
    params.check_text_tokens(tokenizer, text)  # just under the context: not refused


async def test_a_completions_prompt_too_long_is_refused_the_same_way(
    server: Server, service: RenderService, monkeypatch: pytest.MonkeyPatch
) -> None:
    spies = Spies(monkeypatch, service.renderers["qwen2_vl"])
    async with session_from("127.0.0.1") as session:
        status, body = await post(
            session, server, {"prompt": "token " * 600_000}, route=COMPLETIONS_ROUTE
        )
    assert status == 400, body
    assert spies.encoded_chars < 600_000 * 6 // 2


async def test_text_that_fits_still_renders(server: Server) -> None:
    status, body = await chat_status(server, chat(text("hello " * 2000)))
    assert status == 200, body


# -- the processor's refusals ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("part", "fields"),
    [
        (image(png_url(1, 5000)), {}),
        (image(png_url(700, 3)), {}),
        (image(png_url(65, 67)), {"mm_processor_kwargs": {"do_resize": False}}),
    ],
    ids=["1x5000", "700x3", "do_resize-false"],
)
async def test_what_the_processor_refuses_is_a_400_without_a_traceback(
    server: Server, part: dict[str, Any], fields: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, "mediaref"):
        status, body = await chat_status(server, chat(part, text("What is it?"), **fields))
    assert status == 400, body
    assert "Failed to apply" in body["error"]["message"]
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    refused = [r for r in caplog.records if r.getMessage().startswith("refused 400")]
    assert len(refused) == 1


# -- what a client may read --------------------------------------------------------------------------


def wav_url() -> str:
    out = io.BytesIO()
    sf.write(out, np.zeros(1600, dtype=np.float32), 16000, format="WAV")
    return "data:audio/wav;base64," + base64.b64encode(out.getvalue()).decode()


async def test_messages_name_the_served_model_never_its_directory(
    server: Server, service: RenderService
) -> None:
    audio = {"type": "audio_url", "audio_url": {"url": wav_url()}}
    status, body = await chat_status(server, chat(audio, text("hi"), model="qwen2_vl"))
    assert status == 400, body
    message = body["error"]["message"]
    directory = service.renderers["qwen2_vl"].model_config.model
    assert directory not in message and "models/data" not in message
    assert "'qwen2_vl'" in message


# -- placeholder tokens ------------------------------------------------------------------------------


async def test_placeholder_tokens_typed_in_text_are_refused(server: Server) -> None:
    status, body = await chat_status(server, chat(text("<|image_pad|>" * 10_000)))
    assert status == 400, body
    assert "<|image_pad|>" in body["error"]["message"]


async def test_vision_markers_typed_beside_a_real_image_are_refused(server: Server) -> None:
    typed = text("<|vision_start|><|image_pad|><|vision_end|> and this")
    status, body = await chat_status(server, chat(image(png_url(56, 56)), typed))
    assert status == 400, body


async def test_placeholder_token_ids_in_a_completions_prompt_are_refused(
    server: Server, service: RenderService
) -> None:
    image_pad = service.renderers["qwen2_vl"].get_tokenizer().convert_tokens_to_ids("<|image_pad|>")
    async with session_from("127.0.0.1") as session:
        for prompt in ([1, 2, image_pad, 3], "look: <|image_pad|>"):
            status, body = await post(session, server, {"prompt": prompt}, route=COMPLETIONS_ROUTE)
            assert status == 400, body


async def test_an_image_with_its_own_placeholder_renders(server: Server) -> None:
    status, body = await chat_status(server, chat(image(png_url(56, 56)), text("What is it?")))
    assert status == 200, body
    assert body["features"]["mm_placeholders"]["image"]


@pytest.mark.parametrize("name", ["messages", "documents"])
async def test_template_kwargs_naming_the_templates_own_variables_are_a_400(
    server: Server, name: str
) -> None:
    status, body = await chat_status(server, chat(text("hi"), chat_template_kwargs={name: 5}))
    assert status == 400, body
    assert body["error"]["param"] == "chat_template_kwargs"


async def test_a_placeholder_token_smuggled_past_the_text_check_is_refused(server: Server) -> None:
    # The role is client text too, which the template writes into the prompt: the check of the
    # token ids the processor returns catches what the scan of the message text does not.
    body = chat(text("hi"))
    body["messages"][0]["role"] = "user<|image_pad|><|image_pad|><|image_pad|>"
    status, body = await chat_status(server, body)
    assert status == 400, body
    assert "3 media placeholder" in body["error"]["message"]


@pytest.mark.parametrize(
    ("token_ids", "ranges", "strays"),
    [
        ([1, 9, 9, 2], [(1, 2)], 0),  # every placeholder in its item's range
        ([9, 1, 9, 9, 2], [(2, 2)], 1),  # one before the item
        ([1, 9, 9, 9, 2], [(1, 2), (2, 2)], 0),  # overlapping ranges covering every one
        ([9, 9, 1, 9], [(0, 2), (1, 1)], 1),  # overlap: counts alone would hide the stray
    ],
)
def test_the_placeholder_check_finds_every_stray(
    token_ids: list[int], ranges: list[tuple[int, int]], strays: int
) -> None:
    from mediaref.exceptions import VLLMValidationError
    from mediaref.inputs import PlaceholderRange
    from mediaref.serve.prompt_checks import PlaceholderTokens

    check = PlaceholderTokens.__new__(PlaceholderTokens)
    check.by_id = {9: "<|image_pad|>"}
    placeholders = {"image": [PlaceholderRange(offset=o, length=n) for o, n in ranges]}
    for ids in (token_ids, tuple(token_ids)):  # the counting path and the array path
        if strays:
            with pytest.raises(VLLMValidationError, match=f"{strays} media placeholder"):
                check.check(ids, placeholders, parameter="messages")
        else:
            check.check(ids, placeholders, parameter="messages")
