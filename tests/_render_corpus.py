"""The render parity corpus: requests rendered by ``vllm launch render`` and by ``mediaref serve``.

``scripts/vllm_render_parity.py`` sends every request here to vLLM 0.33.0's render server and
records what it answered (``tests/data/vllm_0_33_render_parity.json``);
``tests/test_render_parity.py`` sends the same requests to mediaref's server and compares, field by
field. Media are generated here, deterministically (seeded pixels and samples), and small (the
recorded bodies travel in the data file); each request's body is recorded with its answer, so a
test always sends exactly what vLLM was sent.

A response is reduced to what parity is about (:func:`summary`): every field as JSON, except the
random request id; each encoded item field by field, in name order: the sha256 of the field's own
wire bytes (its msgpack value: tensors, field kind and flags) and, to say where two differ, its
tensors' dtype, shape and sha256. Not the item's bytes as a whole: vLLM orders an item's fields by
iterating a set of their names (``MultiModalKwargsItems.from_hf_inputs``), so that order changes
with ``PYTHONHASHSEED`` from one vLLM process to the next.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import io
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import av
import numpy as np
import soundfile as sf  # type: ignore[import-untyped]
from PIL import Image

CHAT = "/v1/chat/completions/render"
COMPLETIONS = "/v1/completions/render"
TOKENIZE = "/tokenize"
DETOKENIZE = "/detokenize"
MESSAGES = "/v1/messages/render"
RESPONSES = "/v1/responses/render"
SERVER_FLAGS = ("--trust-request-mm-kwargs", "--trust-request-chat-template")
"""Flags both servers run with (each has them under the same names)."""


@dataclass(frozen=True)
class Case:
    name: str
    model: str  # a built-in model directory's name
    route: str
    body: dict[str, Any] = field(default_factory=dict)


def _jpeg(seed: int, size: tuple[int, int], quality: int = 90, mode: str = "RGB") -> bytes:
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    image = Image.fromarray(pixels).convert(mode)
    out = io.BytesIO()
    image.save(out, "JPEG", quality=quality)
    return out.getvalue()


def _png(seed: int, size: tuple[int, int], mode: str = "RGBA") -> bytes:
    rng = np.random.default_rng(seed)
    channels = len(mode)
    pixels = rng.integers(0, 256, (size[1], size[0], channels), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels.squeeze(), mode=mode).save(out, "PNG")
    return out.getvalue()


@functools.cache
def _photo() -> bytes:
    """A real photo: scikit-image's astronaut (public domain), 512x512, as JPEG."""
    from skimage import data

    out = io.BytesIO()
    Image.fromarray(data.astronaut()).save(out, "JPEG", quality=85)
    return out.getvalue()


def _clip(seed: int, frames: int, fps: int, size: tuple[int, int] = (96, 64)) -> bytes:
    rng = np.random.default_rng(seed)
    out = io.BytesIO()
    with av.open(out, mode="w", format="mp4") as container:
        stream = container.add_stream(
            "libx264", rate=Fraction(fps), options={"preset": "ultrafast"}
        )
        stream.width, stream.height, stream.pix_fmt = size[0], size[1], "yuv420p"
        for _ in range(frames):
            pixels = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return out.getvalue()


def _wav(seconds: float, rate: int = 16000, tone: float = 440.0) -> bytes:
    t = np.arange(int(seconds * rate), dtype=np.float32) / rate
    out = io.BytesIO()
    sf.write(out, 0.3 * np.sin(2 * np.pi * tone * t), rate, format="WAV", subtype="PCM_16")
    return out.getvalue()


def _url(payload: bytes, media_type: str) -> str:
    return f"data:{media_type};base64,{base64.b64encode(payload).decode()}"


def image(payload: bytes, media_type: str = "image/jpeg") -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": _url(payload, media_type)}}


def video(payload: bytes) -> dict[str, Any]:
    return {"type": "video_url", "video_url": {"url": _url(payload, "video/mp4")}}


def audio(payload: bytes) -> dict[str, Any]:
    return {"type": "audio_url", "audio_url": {"url": _url(payload, "audio/wav")}}


def _image_url(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def user(*parts: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": list(parts)}]


def _vl(name: str, messages: list[dict[str, Any]], **fields: Any) -> Case:
    return Case(name, "qwen2_vl", CHAT, {"messages": messages, **fields})


def _vision_cases() -> list[Case]:
    ask = text("What is in this picture?")
    return [
        _vl("image_small_jpeg", user(image(_jpeg(1, (64, 48))), ask)),
        _vl("image_odd_size", user(image(_jpeg(2, (123, 77))), ask)),
        _vl("image_photo", user(image(_photo()), ask)),
        _vl("image_png_rgba", user(image(_png(3, (80, 60)), "image/png"), ask)),
        _vl("image_grayscale_jpeg", user(image(_jpeg(4, (70, 70), mode="L")), ask)),
        _vl("image_low_quality", user(image(_jpeg(5, (100, 56), quality=20)), ask)),
        _vl("image_text_first", user(ask, image(_jpeg(6, (64, 64))))),
        _vl("two_images", user(image(_jpeg(7, (64, 48))), image(_jpeg(8, (90, 60))), ask)),
        _vl("three_images", user(*(image(_jpeg(9 + i, (56, 56))) for i in range(3)), ask)),
        _vl("same_image_twice", user(image(_jpeg(12, (64, 48))), image(_jpeg(12, (64, 48))), ask)),
        _vl(
            "images_in_two_turns",
            [
                *user(image(_jpeg(13, (64, 48))), ask),
                {"role": "assistant", "content": "A picture."},
                *user(image(_jpeg(14, (48, 64))), text("And this one?")),
            ],
        ),
        _vl("video_8_frames_4fps", user(video(_clip(20, 8, 4)), text("What moves?"))),
        _vl("video_16_frames_8fps", user(video(_clip(21, 16, 8)), text("What moves?"))),
        _vl("video_4_frames_2fps", user(video(_clip(22, 4, 2)), text("What moves?"))),
        _vl("image_and_video", user(image(_jpeg(23, (64, 48))), video(_clip(24, 8, 4)), ask)),
        _vl(
            "image_max_pixels",
            user(image(_photo()), ask),
            mm_processor_kwargs={"max_pixels": 56 * 56 * 4},
        ),
        _vl(
            "image_min_pixels",
            user(image(_jpeg(25, (64, 48))), ask),
            mm_processor_kwargs={"min_pixels": 112 * 112 * 4},
        ),
        _vl(
            "video_fps_kwarg",
            user(video(_clip(26, 16, 8)), text("What moves?")),
            mm_processor_kwargs={"fps": 1.0},
        ),
        _vl(
            "add_vision_id",
            user(image(_jpeg(27, (64, 48))), ask),
            chat_template_kwargs={"add_vision_id": True},
        ),
        _vl("mm_payload_none", user(image(_jpeg(28, (64, 48))), ask), mm_payload="none"),
        _vl("corrupt_image", user(image(b"\xff\xd8\xff\xe0 not a jpeg"), ask)),
        # data: URLs vLLM's parser refuses: no comma, not base64, "BASE64" (its strict grammar).
        _vl("data_url_no_comma", user(_image_url("data:image/png;base64"), ask)),
        _vl("data_url_not_base64", user(_image_url("data:image/png,hello"), ask)),
        _vl("data_url_uppercase_base64", user(_image_url("data:image/png;BASE64,aGVsbG8="), ask)),
        _vl("not_an_image", user(image(b"GIF89a" + bytes(20), "image/gif"), ask)),
    ]


def _text_cases() -> list[Case]:
    hello = user(text("Hello there."))
    return [
        _vl("text_only", hello),
        _vl("text_string_content", [{"role": "user", "content": "Hello there."}]),
        _vl(
            "system_and_turns",
            [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Hi."},
                {"role": "assistant", "content": "Hello."},
                {"role": "user", "content": "Tell me more."},
            ],
        ),
        _vl(
            "developer_role",
            [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Hi."},
                {"role": "developer", "content": "Answer in French."},
            ],
        ),
        _vl("no_generation_prompt", hello, add_generation_prompt=False),
        _vl(
            "continue_final_message",
            [*hello, {"role": "assistant", "content": "Well,"}],
            continue_final_message=True,
            add_generation_prompt=False,
        ),
        _vl("max_tokens", hello, max_tokens=7),
        _vl("max_completion_tokens", hello, max_completion_tokens=9),
        _vl("greedy", hello, temperature=0.0),
        _vl("sampling", hello, temperature=0.7, top_p=0.9, top_k=20, min_p=0.05, seed=3),
        _vl(
            "penalties", hello, presence_penalty=0.5, frequency_penalty=0.2, repetition_penalty=1.1
        ),
        _vl("stop_strings", hello, stop=["\n", "END"], stop_token_ids=[7]),
        _vl("n_two", hello, n=2, temperature=0.8),
        _vl("logprobs", hello, logprobs=True, top_logprobs=3),
        _vl("min_tokens", hello, min_tokens=2, max_tokens=10),
        _vl("ignore_eos", hello, ignore_eos=True, max_tokens=4),
        _vl(
            "tools_auto",
            hello,
            tools=[
                {
                    "type": "function",
                    "function": {
                        "name": "get_weather",
                        "description": "Weather for a city",
                        "parameters": {
                            "type": "object",
                            "properties": {"city": {"type": "string"}},
                        },
                    },
                }
            ],
        ),
        _vl("cache_salt_priority", hello, cache_salt="tenant-a", priority=3),
        _vl("stream", hello, stream=True, stream_options={"include_usage": True}),
        _vl("bad_temperature", hello, temperature=7.0),
        _vl("bad_n", hello, n=0),
        _vl("empty_messages", []),
        # kv_transfer_params: empty is none; a prefill's forwarded prompt_token_ids are the
        # prompt of a text-only chat (disaggregated serving), ignored beside media, checked.
        _vl("kv_transfer_empty", hello, kv_transfer_params={}, ec_transfer_params={}),
        _vl(
            "kv_reused_prompt_ids",
            hello,
            kv_transfer_params={"prompt_token_ids": [390, 82, 88, 13], "do_remote_decode": True},
        ),
        _vl(
            "kv_reused_ids_beside_an_image",
            user(image(_jpeg(30, (64, 48))), text("What is it?")),
            kv_transfer_params={"prompt_token_ids": [1, 2, 3]},
        ),
        _vl("kv_reused_ids_malformed", hello, kv_transfer_params={"prompt_token_ids": [5, -1]}),
        _vl("kv_reused_ids_null", hello, kv_transfer_params={"prompt_token_ids": None}),
    ]


def _completion_cases() -> list[Case]:
    def cmpl(name: str, **body: Any) -> Case:
        return Case(name, "qwen2_vl", COMPLETIONS, body)

    return [
        cmpl("completion_text", prompt="Once upon a time"),
        cmpl("completion_token_ids", prompt=[71, 72, 73, 74], max_tokens=3),
        cmpl("completion_two_prompts", prompt=["Hello", "World"]),
        cmpl("completion_kv_transfer_empty", prompt="Hello", kv_transfer_params={}),
        cmpl("completion_no_special_tokens", prompt="Hello", add_special_tokens=False),
        cmpl("completion_echo", prompt="Hi", echo=True, max_tokens=2),
        cmpl("completion_bad_token", prompt=[10**9]),
    ]


def _audio_cases() -> list[Case]:
    def aud(name: str, messages: list[dict[str, Any]], **fields: Any) -> Case:
        return Case(name, "qwen2_audio", CHAT, {"messages": messages, **fields})

    ask = text("What do you hear?")
    return [
        aud("audio_one_second", user(audio(_wav(1.0)), ask)),
        aud("audio_short", user(audio(_wav(0.3, tone=880.0)), ask)),
        aud("audio_two_clips", user(audio(_wav(0.5)), audio(_wav(0.7, tone=660.0)), ask)),
        aud("audio_8khz", user(audio(_wav(1.0, rate=8000)), ask)),
        aud("audio_text_only", user(text("Hello."))),
        Case("audio_completion", "qwen2_audio", COMPLETIONS, {"prompt": "Hello"}),
    ]


def _tokenizer_cases() -> list[Case]:
    def tok(name: str, route: str, **body: Any) -> Case:
        return Case(name, "qwen2_vl", route, body)

    hello = [{"role": "user", "content": "Hello there."}]
    return [
        tok("tokenize_prompt", TOKENIZE, prompt="hello world"),
        tok("tokenize_prompt_strs", TOKENIZE, prompt="hello world", return_token_strs=True),
        tok("tokenize_no_special", TOKENIZE, prompt="hello", add_special_tokens=False),
        tok("tokenize_chat", TOKENIZE, messages=hello),
        tok("tokenize_chat_no_prompt", TOKENIZE, messages=hello, add_generation_prompt=False),
        tok("tokenize_chat_image", TOKENIZE, messages=user(image(_jpeg(30, (64, 48))), text("Hi"))),
        tok("detokenize", DETOKENIZE, tokens=[257, 359, 285, 78, 81, 75, 67]),
        tok("detokenize_special", DETOKENIZE, tokens=[390, 82, 88, 391]),
    ]


def _b64(payload: bytes) -> str:
    return base64.b64encode(payload).decode()


def _messages_cases() -> list[Case]:
    """Anthropic Messages requests (``model`` is required there)."""

    def msg(name: str, messages: list[dict[str, Any]], **fields: Any) -> Case:
        body = {"model": "qwen2_vl", "max_tokens": 64, "messages": messages, **fields}
        return Case(name, "qwen2_vl", MESSAGES, body)

    ask = text("What is in this picture?")
    jpeg = {"type": "base64", "media_type": "image/jpeg", "data": _b64(_jpeg(40, (64, 48)))}
    png_url = {"type": "url", "url": _url(_png(41, (80, 60)), "image/png")}
    weather = {
        "name": "get_weather",
        "description": "Weather for a city",
        "input_schema": {"properties": {"city": {"type": "string"}}},
    }
    return [
        msg("messages_text_only", [{"role": "user", "content": "Hello there."}]),
        msg(
            "messages_system_blocks",
            [{"role": "user", "content": [text("Hi."), text(" Be brief.")]}],
            system=[
                text("x-anthropic-billing-header: cc_version=1.0; cch=abc;"),
                text("You are terse."),
                text(" Answer in English."),
            ],
            temperature=0.3,
            top_p=0.9,
            top_k=20,
            stop_sequences=["END", "\n\n"],
        ),
        msg(
            "messages_turns",
            [
                {"role": "user", "content": "Hi."},
                {"role": "assistant", "content": [text("Hello.")]},
                {"role": "user", "content": "Tell me more."},
            ],
            system="You are terse.",
        ),
        msg(
            "messages_image_base64",
            [{"role": "user", "content": [{"type": "image", "source": jpeg}, ask]}],
        ),
        msg(
            "messages_image_data_url",
            [{"role": "user", "content": [ask, {"type": "image", "source": png_url}]}],
            mm_payload="none",
        ),
        msg(
            "messages_tool_use",
            [
                {"role": "user", "content": "Weather in Paris?"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "Ask the tool.", "signature": "sig"},
                        text("Let me check."),
                        {
                            "type": "tool_use",
                            "id": "toolu_1",
                            "name": "get_weather",
                            "input": {"city": "Paris"},
                        },
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "toolu_1",
                            "content": [text("Sunny,"), text("20 C")],
                        },
                        text("Thanks. And this picture?"),
                        {"type": "image", "source": jpeg},
                    ],
                },
            ],
            tools=[weather],
            tool_choice={"type": "none"},
        ),
        msg(
            "messages_tool_result_image",
            [
                {"role": "user", "content": "Take a photo."},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": "toolu_2", "name": "camera", "input": {}}
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "toolu_2",
                            "content": [text("Done."), {"type": "image", "source": jpeg}],
                        }
                    ],
                },
            ],
        ),
        msg(
            "messages_inline_system",
            [
                {"role": "user", "content": "Hi."},
                {"role": "system", "content": [text("Reminder: be terse.")]},
                {"role": "user", "content": "Again."},
            ],
            system="You are terse.",
        ),
        msg(
            "messages_thinking_enabled",
            [{"role": "user", "content": "Hello there."}],
            max_tokens=2048,
            thinking={"type": "enabled", "budget_tokens": 1024},
            stream=True,
        ),
        msg(
            "messages_thinking_disabled",
            [{"role": "user", "content": "Hello there."}],
            thinking={"type": "disabled"},
            chat_template_kwargs={"add_vision_id": True},
        ),
        msg("messages_bad_role", [{"role": "tool", "content": "Hello there."}]),
        msg("messages_bad_max_tokens", [{"role": "user", "content": "Hi."}], max_tokens=0),
    ]


def _responses_cases() -> list[Case]:
    def resp(name: str, request_input: Any, **fields: Any) -> Case:
        return Case(name, "qwen2_vl", RESPONSES, {"input": request_input, **fields})

    def said(value: str) -> dict[str, Any]:
        return {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": value}],
        }

    photo = {"type": "input_image", "image_url": _url(_jpeg(42, (64, 48)), "image/jpeg")}
    return [
        resp("responses_text", "Hello there."),
        resp(
            "responses_instructions_and_options",
            "Hello there.",
            instructions="You are terse.",
            max_output_tokens=9,
            temperature=0.5,
            top_p=0.9,
            truncation="auto",
            reasoning={"effort": "low"},
            include=["message.output_text.logprobs"],
            top_logprobs=2,
            stream=True,
        ),
        resp(
            "responses_image",
            [
                {
                    "role": "user",
                    "content": [{"type": "input_text", "text": "What is in this picture?"}, photo],
                }
            ],
        ),
        resp(
            "responses_turns",
            [
                {"role": "user", "content": "Hi."},
                said("Hello."),
                {"role": "user", "content": [{"type": "input_text", "text": "Tell me more."}]},
            ],
            instructions="You are terse.",
        ),
        resp(
            "responses_tool_call",
            [
                {"role": "user", "content": "Weather in Paris?"},
                {
                    "type": "reasoning",
                    "summary": [],
                    "content": [{"type": "reasoning_text", "text": "Ask the tool."}],
                },
                {
                    "type": "function_call",
                    "call_id": "call_1",
                    "name": "get_weather",
                    "arguments": '{"city": "Paris"}',
                },
                {"type": "function_call_output", "call_id": "call_1", "output": "Sunny"},
            ],
            tools=[
                {
                    "type": "function",
                    "name": "get_weather",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                }
            ],
        ),
        resp(
            "responses_continue_partial",
            [
                {"role": "user", "content": "Count to three."},
                {**said("One, two,"), "status": "incomplete"},
            ],
        ),
        resp(
            "responses_transfer_params",
            "Hi.",
            kv_transfer_params={"do_remote_decode": True},
            cache_salt="tenant-a",
            priority=2,
        ),
        resp("responses_previous_response_id", "Hi.", previous_response_id="resp_123"),
        resp("responses_bad_input", 5),
        resp("responses_unsupported_item", [{"type": "item_reference", "id": "msg_1"}]),
        resp("responses_too_many_output_tokens", "Hi.", max_output_tokens=10**6),
    ]


def cases() -> list[Case]:
    """Every request of the corpus, in a fixed order."""
    return [
        *_vision_cases(),
        *_text_cases(),
        *_completion_cases(),
        *_audio_cases(),
        *_tokenizer_cases(),
        *_messages_cases(),
        *_responses_cases(),
    ]


def _digest(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        raw = value.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        return [
            str(value.dtype).removeprefix("torch."),
            list(value.shape),
            hashlib.sha256(raw).hexdigest(),
        ]
    if isinstance(value, list):
        return [_digest(v) for v in value]
    return value


CPU_DEPENDENT_FIELDS = frozenset({"input_features"})
"""Fields whose last bits depend on the CPU that computes them, on vLLM's side as on mediaref's:
Whisper-style log-mel features come from numpy inside the HF feature extractor, whose ``log10``
and FFT take SIMD paths chosen by the CPU (one machine's AVX-512, another's AVX2). Each such
field's summary also carries a profile (its means along the last axis), which tells a real
difference from a CPU's rounding when the digests differ (``tests/test_render_parity.py``)."""


def _profile(value: Any) -> list[float]:
    return [round(float(v), 6) for v in value.double().mean(dim=-1).reshape(-1)]


def _item_summary(encoded: str | None) -> Any:
    if encoded is None:
        return None
    import msgspec

    from mediaref.serve.mm_serde import decode_mm_kwargs_item

    decoded = decode_mm_kwargs_item(encoded)
    wire = msgspec.msgpack.decode(base64.b64decode(encoded), type=dict[str, msgspec.Raw])
    out = {}
    for key in sorted(decoded):
        out[key] = {
            "wire_sha256": hashlib.sha256(bytes(wire[key])).hexdigest(),
            "data": _digest(decoded[key].data),
        }
        if key in CPU_DEPENDENT_FIELDS:
            out[key]["profile"] = _profile(decoded[key].data)
    return out


def _features_summary(features: dict[str, Any] | None) -> Any:
    if not features:
        return features
    out = dict(features)
    for part in ("kwargs_data", "mm_metadata"):
        if out.get(part) is not None:
            out[part] = {m: [_item_summary(i) for i in items] for m, items in out[part].items()}
    return out


def _request_summary(response: dict[str, Any]) -> dict[str, Any]:
    out = {key: value for key, value in response.items() if key != "request_id"}
    if "features" in response:
        out["features"] = _features_summary(response["features"])
    return out


def summary(status: int, body: Any) -> dict[str, Any]:
    """What parity compares of one answer (see the module docstring)."""
    if status != 200:
        return {"status": status}
    if isinstance(body, list):
        return {"status": status, "body": [_request_summary(r) for r in body]}
    return {"status": status, "body": _request_summary(body)}


__all__ = [
    "CHAT",
    "COMPLETIONS",
    "DETOKENIZE",
    "MESSAGES",
    "RESPONSES",
    "SERVER_FLAGS",
    "TOKENIZE",
    "Case",
    "cases",
    "summary",
]
