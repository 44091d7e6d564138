"""vLLM 0.33's chat API at ``mediaref.renderers.chat_utils``: names, signatures and results.

What is pinned, each against vLLM's documented behaviour: the canonical path and the old one as
an alias that holds no code; vLLM's positional signatures; the tracker's ``add`` /
``resolve_items`` / ``create_parser`` contract and its properties; what the content parsers track
for every part type (``input_image``, ``image_pil``, ``thinking``, ``tool_reference``, embeddings,
``prompt_embeds``); the string-format text builder; the message fields a conversation keeps
(tool calls parsed, tool text joined, reasoning, name, task, developer tools, unknown part fields
passed on, Claude Code's billing header dropped); ``has_non_text_content``; tool-call IDs; chat
template loading and validation; the unified ``vision_chunk`` modality.
"""

from __future__ import annotations

import base64
import dataclasses
import inspect
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
import torch
from PIL import Image

from _instrumented_decoding import image_bytes
from mediaref.exceptions import (
    MediaTooLargeError,
    VLLMUnprocessableEntityError,
    VLLMValidationError,
)
from mediaref.media.connector import MediaConnector
from mediaref.media.image import ImageEmbeddingMediaIO
from mediaref.models.builtin import builtin_model_path
from mediaref.models.qwen2_vl import Qwen2VLDataParser, Qwen2VLProcessingInfo
from mediaref.processing.context import BaseProcessingInfo, ModelConfig
from mediaref.registry import MULTIMODAL_REGISTRY
from mediaref.renderers import chat_utils
from mediaref.renderers.base import BaseRenderer, MultiModalRequest
from mediaref.renderers.chat_utils import (
    PROMPT_EMBEDS_PLACEHOLDER_TOKEN,
    AsyncMultiModalItemTracker,
    ChatTemplateConfig,
    MultiModalItemTracker,
    PILImage,
    get_tool_call_id_type,
    has_non_text_content,
    load_chat_template,
    make_tool_call_id,
    parse_chat_messages,
    parse_chat_messages_async,
    resolve_processing_info,
    validate_chat_template,
)
from mediaref.renderers.chat_utils.chat_message import (
    get_full_multimodal_text_prompt,
    parse_chat_message_content_mm_part,
)
from mediaref.renderers.chat_utils.content_parser import (
    AsyncMultiModalContentParser,
    MultiModalContentParser,
    make_prompt_embeds_placeholder,
)

VL_PLACEHOLDER = "<|vision_start|><|image_pad|><|vision_end|>"


def vl_path() -> str:
    return str(builtin_model_path("qwen2_vl"))


@dataclasses.dataclass(frozen=True)
class PromptEmbedsConfig(ModelConfig):
    """A config with vLLM's ``--enable-prompt-embeds`` on (mediaref's has no such field)."""

    enable_prompt_embeds: bool = True


@pytest.fixture(scope="module")
def vl_info() -> BaseProcessingInfo:
    return resolve_processing_info(ModelConfig(model=vl_path()))


@pytest.fixture(scope="module")
def embeds_info() -> BaseProcessingInfo:
    return resolve_processing_info(ModelConfig(model=vl_path(), enable_mm_embeds=True))


@pytest.fixture(scope="module")
def prompt_embeds_info() -> BaseProcessingInfo:
    return resolve_processing_info(PromptEmbedsConfig(model=vl_path()))


def data_url(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def user(*parts: Any) -> list[dict[str, Any]]:
    return [{"role": "user", "content": list(parts)}]


def b64_tensor(tensor: torch.Tensor) -> str:
    return ImageEmbeddingMediaIO().encode_base64(tensor)


# -- paths and signatures ------------------------------------------------------------------------


def test_the_old_path_is_an_alias_holding_no_code() -> None:
    from mediaref.entrypoints import chat_utils as old

    assert old.parse_chat_messages is chat_utils.parse_chat_messages
    assert set(old.__all__) == set(chat_utils.__all__)
    source = Path(old.__file__).read_text()
    assert not re.search(r"^\s*(def|class) ", source, re.M)


def test_vllms_positional_signatures(vl_info: BaseProcessingInfo) -> None:
    params = list(inspect.signature(parse_chat_messages).parameters)
    assert params[:5] == [
        "messages",
        "model_config",
        "content_format",
        "media_io_kwargs",
        "mm_processor_kwargs",
    ]
    tracker = MultiModalItemTracker(vl_info, {"image": {}})
    assert tracker.media_io_kwargs == {"image": {}}
    assert inspect.iscoroutinefunction(AsyncMultiModalItemTracker.resolve_items)


# -- the tracker ---------------------------------------------------------------------------------


def test_the_tracker_adds_items_and_answers_vllms_questions(vl_info: BaseProcessingInfo) -> None:
    tracker = MultiModalItemTracker(vl_info)
    assert tracker.resolve_items() == (None, None)
    image = Image.new("RGB", (8, 8))
    # vLLM's callers add (item, uuid) pairs themselves; add answers the model's placeholder.
    assert tracker.add("image", (image, "u1")) == VL_PLACEHOLDER
    assert tracker.add("image", (None, "u2")) == VL_PLACEHOLDER
    assert tracker.get_num_items("image") == 2 and tracker.get_num_items("video") == 0
    assert tracker.resolve_items() == ({"image": [image, None]}, {"image": ["u1", "u2"]})

    assert tracker.model_config.model == vl_path()
    assert tracker.model_cls.get_placeholder_str("video", 1) == (
        "<|vision_start|><|video_pad|><|vision_end|>"
    )
    assert tracker.mm_registry is MULTIMODAL_REGISTRY
    assert tracker.mm_processor.info is vl_info  # built over the tracker's info: no reload
    assert tracker.video_processor_name == "Qwen2VLVideoProcessor"
    assert tracker.use_unified_vision_chunk_modality is False
    assert (tracker.allowed_local_media_path, tracker.allowed_media_domains) == ("", None)
    assert tracker.media_io_kwargs is None
    assert isinstance(tracker.create_parser(), MultiModalContentParser)
    assert isinstance(
        AsyncMultiModalItemTracker(vl_info).create_parser(), AsyncMultiModalContentParser
    )


def test_the_config_limit_and_an_unsupported_modality_refuse_an_item() -> None:
    info = resolve_processing_info(ModelConfig(model=vl_path(), limit_mm_per_prompt={"image": 1}))
    tracker = MultiModalItemTracker(info)
    tracker.add("image", (None, "a"))
    with pytest.raises(VLLMValidationError, match=r"At most 1 image\(s\)"):
        tracker.add("image", (None, "b"))
    with pytest.raises(VLLMValidationError, match="does not accept audio"):
        tracker.add("audio", (None, "c"))
    # prompt_embeds skip the limits and have no placeholder of the model's.
    assert tracker.add("prompt_embeds", (torch.zeros(1, 64), None)) is None


def test_the_parser_records_placeholders_by_marker(vl_info: BaseProcessingInfo) -> None:
    tracker = MultiModalItemTracker(vl_info)
    parser = tracker.create_parser()
    parser.parse_image(None, "u")
    parser.parse_video(None, "v")
    assert parser.mm_placeholder_storage() == {
        "<##IMAGE##>": [VL_PLACEHOLDER],
        "<##VIDEO##>": ["<|vision_start|><|video_pad|><|vision_end|>"],
    }
    assert parser.model_config is tracker.model_config


async def test_an_async_tracker_with_no_items_resolves_to_none(vl_info: BaseProcessingInfo) -> None:
    assert await AsyncMultiModalItemTracker(vl_info).resolve_items() == (None, None)


def test_each_tracker_has_its_own_budgets(vl_info: BaseProcessingInfo) -> None:
    first, second = MultiModalItemTracker(vl_info), MultiModalItemTracker(vl_info)
    assert first.download_budget is not second.download_budget
    assert first.decoded_budget is not second.decoded_budget
    assert first.connector.download_budget is first.download_budget


# -- part types ----------------------------------------------------------------------------------


def test_part_types_are_read_as_vllm_reads_them() -> None:
    image_url = {"type": "image_url", "image_url": {"url": "https://x/a.png"}}
    assert parse_chat_message_content_mm_part(image_url) == ("image_url", "https://x/a.png")
    assert parse_chat_message_content_mm_part({"audio_url": "https://x/a.wav"}) == (
        "audio_url",
        "https://x/a.wav",
    )
    assert parse_chat_message_content_mm_part({"type": "thinking", "thinking": "hm"}) == (
        "thinking",
        "hm",
    )
    assert parse_chat_message_content_mm_part({"type": "file", "file": {}}) == (
        "file",
        "unknown part_type content",
    )
    for bad in ({"type": 3}, {"foo": 1}):
        with pytest.raises(VLLMValidationError) as info:
            parse_chat_message_content_mm_part(bad)
        assert info.value.parameter == "type"


async def test_input_image_image_pil_and_text_like_parts(vl_info: BaseProcessingInfo) -> None:
    pil = Image.new("RGB", (16, 16), "red")
    messages = user(
        {"type": "input_text", "text": "a"},
        {"type": "thinking", "thinking": "b", "closed": True},
        {"type": "refusal", "refusal": "c"},
        {"type": "input_image", "image_url": data_url(image_bytes(1))},
        {"type": "image_pil", "image_pil": pil},
        {"image_pil": PILImage(image_pil=pil), "uuid": "p"},
        {"type": "tool_reference", "name": "get_weather"},
    )
    for parse in ("sync", "async"):
        if parse == "sync":
            conversation, mm_data, mm_uuids = parse_chat_messages(messages, vl_info, "openai")
        else:
            conversation, mm_data, mm_uuids = await parse_chat_messages_async(
                messages, vl_info, "openai"
            )
        assert conversation[0]["content"] == [
            {"type": "text", "text": "a"},
            {"type": "text", "text": "b"},
            {"type": "text", "text": "c"},
            {"type": "image"},
            {"type": "image"},
            {"type": "image"},
            {"type": "tool_reference", "name": "get_weather"},
        ]
        assert mm_data is not None
        first, second, third = mm_data["image"]
        assert first.data == image_bytes(1) and not first.is_decoded  # a lazy ref
        assert second is pil and third is pil  # decoded already: passed as given
        assert mm_uuids == {"image": [None, None, "p"]}
    string_conv, _, _ = parse_chat_messages(messages, vl_info, "string")
    assert string_conv[0]["content"] == "\n".join(
        [VL_PLACEHOLDER] * 3 + ["a", "b", "c", "get_weather"]
    )


def test_a_pil_image_is_charged_to_the_requests_decoded_budget(
    vl_info: BaseProcessingInfo, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES", str(100 * 100 * 4))
    small, big = Image.new("RGB", (50, 50)), Image.new("RGB", (90, 90))
    parse_chat_messages(user({"image_pil": small}), vl_info, "openai")
    with pytest.raises(MediaTooLargeError):
        parse_chat_messages(user({"image_pil": small}, {"image_pil": big}), vl_info, "openai")


def test_unknown_part_fields_reach_the_template(vl_info: BaseProcessingInfo) -> None:
    cache = {"type": "ephemeral"}
    conversation, _, _ = parse_chat_messages(
        user(
            {"type": "text", "text": "hi", "cache_control": cache},
            {
                "type": "image_url",
                "image_url": {"url": data_url(image_bytes(2))},
                "cache_control": cache,
            },
        ),
        vl_info,
        "openai",
    )
    assert conversation[0]["content"] == [
        {"type": "text", "text": "hi", "cache_control": cache},
        {"type": "image", "cache_control": cache},
    ]


# -- embeddings ----------------------------------------------------------------------------------


def test_embeddings_need_enable_mm_embeds(vl_info: BaseProcessingInfo) -> None:
    part = {"type": "image_embeds", "image_embeds": b64_tensor(torch.zeros(4, 64))}
    with pytest.raises(VLLMValidationError, match="enable-mm-embeds") as info:
        parse_chat_messages(user(part), vl_info, "openai")
    assert info.value.parameter == "messages[0].content[0].image_embeds"


class GridParser(Qwen2VLDataParser):
    """Qwen2-VL's parser declaring its grids as metadata, as vLLM's does."""

    embedding_fields: ClassVar[dict[str, dict[str, Any]]] = {
        "image": {"image_embeds": "values", "image_grid_thw": "metadata"},
        "video": {"video_embeds": "values", "video_grid_thw": "metadata"},
    }


class GridInfo(Qwen2VLProcessingInfo):
    def get_data_parser(self) -> Any:
        return GridParser(self.get_merge_size())


async def test_embedding_dicts_merge_as_the_processor_batches_them(
    embeds_info: BaseProcessingInfo,
) -> None:
    info = GridInfo(embeds_info.ctx)
    # Two images of four tokens each: the same shape, yet Qwen2-VL batches image_embeds flat.
    parts = [
        {
            "type": "image_embeds",
            "image_embeds": {
                "image_embeds": b64_tensor(torch.full((4, 64), float(i))),
                "image_grid_thw": [1, 4, 4],
            },
            "uuid": f"e{i}",
        }
        for i in range(2)
    ]
    conversation, mm_data, mm_uuids = await parse_chat_messages_async(
        user(*parts, "what?"), info, "string"
    )
    assert conversation[0]["content"] == "\n".join([VL_PLACEHOLDER, VL_PLACEHOLDER, "what?"])
    assert mm_data is not None and mm_uuids == {"image": ["e0", "e1"]}
    merged = mm_data["image"]
    assert merged["image_embeds"].shape == (8, 64)  # concatenated, not stacked
    assert merged["image_embeds"][4:].eq(1.0).all()
    assert merged["image_grid_thw"].dtype == torch.int64
    assert merged["image_grid_thw"].tolist() == [[1, 4, 4], [1, 4, 4]]


def test_embeddings_refuse_mixing_and_bad_metadata(embeds_info: BaseProcessingInfo) -> None:
    info = GridInfo(embeds_info.ctx)
    raw = {"type": "image_url", "image_url": data_url(image_bytes(3))}
    embeds = {"type": "image_embeds", "image_embeds": b64_tensor(torch.zeros(4, 64))}
    with pytest.raises(VLLMValidationError, match="Mixing raw image and embedding"):
        parse_chat_messages(user(raw, embeds), embeds_info, "openai")
    bad = {
        "type": "image_embeds",
        "image_embeds": {
            "image_embeds": b64_tensor(torch.zeros(4, 64)),
            "image_grid_thw": [1, "x"],
        },
    }
    with pytest.raises(VLLMValidationError, match="finite numeric array"):
        parse_chat_messages(user(bad), info, "openai")
    undeclared = {
        "type": "image_embeds",
        "image_embeds": {"image_embeds": b64_tensor(torch.zeros(4, 64)), "extra": [1, 2]},
    }
    with pytest.raises(VLLMValidationError, match="only supported for metadata: extra"):
        parse_chat_messages(user(undeclared), info, "openai")


def test_tensor_embeddings_stack_when_alike_and_stay_a_list_when_ragged(
    embeds_info: BaseProcessingInfo,
) -> None:
    def parts(*lengths: int) -> list[dict[str, Any]]:
        return [
            {"type": "audio_embeds", "audio_embeds": b64_tensor(torch.zeros(n, 8))} for n in lengths
        ]

    class AudioInfo(Qwen2VLProcessingInfo):
        def get_supported_mm_limits(self) -> dict[str, int | None]:
            return {"image": None, "video": None, "audio": None}

    info = AudioInfo(embeds_info.ctx)
    _, alike, _ = parse_chat_messages(user(*parts(3, 3)), info, "openai")
    assert alike is not None and alike["audio"].shape == (2, 3, 8)
    _, ragged, _ = parse_chat_messages(user(*parts(3, 5)), info, "openai")
    assert ragged is not None and [t.shape[0] for t in ragged["audio"]] == [3, 5]


# -- prompt_embeds -------------------------------------------------------------------------------


async def test_prompt_embeds_are_loaded_and_marked_where_they_stood(
    prompt_embeds_info: BaseProcessingInfo,
) -> None:
    tensor = torch.randn(3, 64, dtype=torch.float32)
    part = {"type": "prompt_embeds", "data": b64_tensor(tensor)}
    conversation, mm_data, mm_uuids = await parse_chat_messages_async(
        user("before", part, "after", part), prompt_embeds_info, "openai"
    )
    assert conversation[0]["content"] == [
        {"type": "text", "text": "before"},
        {"type": "text", "text": make_prompt_embeds_placeholder(0)},
        {"type": "text", "text": "after"},
        {"type": "text", "text": make_prompt_embeds_placeholder(1)},
    ]
    assert mm_data is not None and torch.equal(mm_data["prompt_embeds"][0], tensor)
    assert mm_uuids == {}  # prompt_embeds carry no UUIDs
    assert make_prompt_embeds_placeholder(1) == "<prompt_embeds>__vllm_prompt_embed_1__"


@pytest.mark.parametrize(
    ("tensor", "match"),
    [
        (torch.zeros(3, 32), "hidden_size 32 does not match"),
        (torch.zeros(2, 3, 64), "must be a 2D tensor"),
        (torch.zeros(3, 64, dtype=torch.int32), "not a floating-point"),
    ],
)
def test_prompt_embeds_of_the_wrong_shape_or_dtype_are_a_400(
    prompt_embeds_info: BaseProcessingInfo, tensor: torch.Tensor, match: str
) -> None:
    part = {"type": "prompt_embeds", "data": b64_tensor(tensor)}
    with pytest.raises(VLLMValidationError, match=match) as info:
        parse_chat_messages(user(part), prompt_embeds_info, "openai")
    assert info.value.parameter == "prompt_embeds"


@pytest.mark.parametrize(
    "part", [{"type": "prompt_embeds"}, {"type": "prompt_embeds", "uuid": "u"}]
)
def test_prompt_embeds_without_data_are_refused_in_vllms_words(
    prompt_embeds_info: BaseProcessingInfo, part: dict[str, str]
) -> None:
    # vLLM's tests match its message; a UUID does not stand in for prompt embeddings.
    with pytest.raises(VLLMValidationError, match="requires a non-empty `data` field") as info:
        parse_chat_messages(user(part), prompt_embeds_info, "openai")
    assert info.value.parameter == "messages[0].content[0].data"


def test_prompt_embeds_need_enabling_and_their_token_is_reserved(
    vl_info: BaseProcessingInfo, prompt_embeds_info: BaseProcessingInfo
) -> None:
    part = {"type": "prompt_embeds", "data": b64_tensor(torch.zeros(1, 64))}
    with pytest.raises(VLLMValidationError, match="enable-prompt-embeds"):
        parse_chat_messages(user(part), vl_info, "openai")
    with pytest.raises(VLLMValidationError, match="reserved placeholder"):
        parse_chat_messages(
            user(f"x {PROMPT_EMBEDS_PLACEHOLDER_TOKEN}"), prompt_embeds_info, "openai"
        )
    # Without prompt embeds the token is ordinary text.
    parse_chat_messages(user(f"x {PROMPT_EMBEDS_PLACEHOLDER_TOKEN}"), vl_info, "openai")


# -- the string format ---------------------------------------------------------------------------


def test_the_text_builder_puts_each_placeholder_in_once() -> None:
    storage = {"<##IMAGE##>": ["<img>", "<img>"], "<##AUDIO##>": ["<aud>"]}
    assert get_full_multimodal_text_prompt(storage, ["hi"], False) == "<img>\n<img>\n<aud>\nhi"
    # A placeholder the client wrote into its text is not added again.
    assert get_full_multimodal_text_prompt(storage, ["<img> hi"], False) == "<img>\n<aud>\n<img> hi"
    interleaved = get_full_multimodal_text_prompt(
        storage, ["a", "<##IMAGE##>", "b", "<##IMAGE##>"], True
    )
    assert interleaved == "<aud>\na\n<img>\nb\n<img>"
    assert get_full_multimodal_text_prompt(storage, [], False, " ") == "<img> <img> <aud>"
    with pytest.raises(VLLMValidationError, match="more '<img>' placeholders"):
        get_full_multimodal_text_prompt(storage, ["<img><img><img>"], False)
    with pytest.raises(VLLMValidationError, match="more '<##IMAGE##>' placeholders"):
        get_full_multimodal_text_prompt({"<##IMAGE##>": ["<img>"]}, ["<##IMAGE##>"] * 2, True)


# -- message fields ------------------------------------------------------------------------------


def test_message_fields_the_templates_read(vl_info: BaseProcessingInfo) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}
    messages = [
        {"role": "system", "content": "x-anthropic-billing-header: cch=123\nBe brief."},
        {"role": "developer", "content": "d", "tools": [{"type": "function"}]},
        {"role": "user", "content": "hi", "name": "ann", "task": "ocr", "extra": 1},
        {"role": "assistant", "content": None, "tool_calls": [call], "reasoning": "think"},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "1"}, "2"]},
        {"role": "assistant", "content": "ok", "tool_calls": []},
    ]
    conversation, _, _ = parse_chat_messages(messages, vl_info, "openai")
    system, developer, user_msg, assistant, tool, last = conversation
    assert system == {"role": "system", "content": [{"type": "text", "text": "Be brief."}]}
    assert developer["tools"] == [{"type": "function"}]
    assert user_msg == {
        "role": "user",
        "content": [{"type": "text", "text": "hi"}],
        "name": "ann",
        "task": "ocr",
    }
    assert assistant["tool_calls"] == [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}
    ]
    assert assistant["reasoning"] == assistant["reasoning_content"] == "think"
    assert call["function"]["arguments"] == '{"x": 1}'  # the caller's request is not touched
    assert tool == {"role": "tool", "content": "1\n2", "tool_call_id": "c1"}
    assert "tool_calls" not in last  # an empty list takes the template's plain path


@pytest.mark.parametrize(
    ("arguments", "parsed"), [("not json", {}), ("[1]", {}), ("", {}), ({"a": 1}, {"a": 1})]
)
def test_tool_call_arguments_that_are_no_object_become_empty(
    vl_info: BaseProcessingInfo, arguments: Any, parsed: dict[str, Any]
) -> None:
    call = {"type": "function", "function": {"name": "f", "arguments": arguments}}
    conversation, _, _ = parse_chat_messages(
        [{"role": "assistant", "content": "", "tool_calls": [call]}], vl_info, "openai"
    )
    assert conversation[0]["tool_calls"][0]["function"]["arguments"] == parsed


def test_tool_calls_that_are_not_functions_are_a_400(vl_info: BaseProcessingInfo) -> None:
    for calls in ([{"type": "custom", "custom": {}}], ["x"]):
        with pytest.raises(VLLMValidationError) as info:
            parse_chat_messages([{"role": "assistant", "tool_calls": calls}], vl_info, "openai")
        assert info.value.parameter == "tool_calls"


def test_has_non_text_content() -> None:
    assert not has_non_text_content([{"role": "user", "content": "hi"}])
    assert not has_non_text_content(
        [{"role": "user", "content": [{"type": "text", "text": "a"}, {"text": "b"}]}]
    )
    assert not has_non_text_content(iter([{"content": [{"image_url": "x"}]}]))  # not a list
    assert has_non_text_content([{"role": "user", "content": [{"image_url": "x"}]}])
    assert has_non_text_content([{"role": "user", "content": [{"type": "video_url"}]}])
    assert has_non_text_content([{"role": "user", "content": [{"type": "mystery"}]}])
    assert has_non_text_content(
        [{"role": "assistant", "reasoning": {"type": "prompt_embeds", "data": "x"}}]
    )


# -- tool-call IDs ---------------------------------------------------------------------------------


def test_tool_call_ids() -> None:
    assert re.fullmatch(r"chatcmpl-tool-[0-9a-f]{16}", make_tool_call_id())
    assert make_tool_call_id() != make_tool_call_id()
    assert make_tool_call_id("kimi_k2", "get_weather", 3) == "functions.get_weather:3"
    assert get_tool_call_id_type(ModelConfig(model=vl_path())) == "random"
    assert get_tool_call_id_type(ModelConfig(model=vl_path(), family="kimi_k25")) == "kimi_k2"
    vllm_like = SimpleNamespace(hf_config=SimpleNamespace(model_type="kimi_k3"))
    assert get_tool_call_id_type(vllm_like) == "kimi_k2"
    assert (
        get_tool_call_id_type(SimpleNamespace(hf_overrides={"model_type": "kimi_k2"})) == "kimi_k2"
    )


# -- chat templates --------------------------------------------------------------------------------


def test_load_chat_template(tmp_path: Path) -> None:
    path = tmp_path / "t.jinja"
    path.write_text("{{ messages }}")
    assert load_chat_template(str(path)) == "{{ messages }}"
    assert load_chat_template(path) == "{{ messages }}"
    assert load_chat_template("{{ literal }}") == "{{ literal }}"
    assert load_chat_template(str(path), is_literal=True) == str(path)
    assert load_chat_template(None) is None
    builtin = (builtin_model_path("qwen2_vl") / "chat_template.jinja").read_text()
    assert load_chat_template("qwen2_vl") == builtin
    with pytest.raises(VLLMValidationError) as info:
        load_chat_template("no_such_template.jinja")
    assert info.value.parameter == "chat_template"
    with pytest.raises(OSError):
        load_chat_template(tmp_path / "missing.jinja")
    with pytest.raises(TypeError):
        load_chat_template(path, is_literal=True)


def test_validate_chat_template(tmp_path: Path) -> None:
    validate_chat_template(None)
    validate_chat_template("{{ x }}")
    validate_chat_template("qwen2_audio")
    validate_chat_template(tmp_path)
    with pytest.raises(FileNotFoundError):
        validate_chat_template(tmp_path / "missing")
    with pytest.raises(VLLMValidationError, match="appears path-like"):
        validate_chat_template("missing.jinja")
    with pytest.raises(VLLMValidationError, match="not a valid chat template type"):
        validate_chat_template(3)  # type: ignore[arg-type]
    assert ChatTemplateConfig() == ChatTemplateConfig(None, "auto", False, False)


# -- the unified vision_chunk modality -------------------------------------------------------------


class ChunkInfo(Qwen2VLProcessingInfo):
    """A model taking images and videos as one ``vision_chunk`` modality."""

    def get_hf_config(self) -> Any:
        return SimpleNamespace(use_unified_vision_chunk=True, get_text_config=lambda: None)

    def get_supported_mm_limits(self) -> dict[str, int | None]:
        return {"vision_chunk": None}

    def get_placeholder_str(self, modality: str, ordinal: int) -> str:
        return f"<chunk-{modality}-{ordinal}>"


@pytest.mark.parametrize("entry", ["sync", "async"])
async def test_vision_chunks_are_decoded_for_the_renderer(
    entry: str, vl_info: BaseProcessingInfo
) -> None:
    info = ChunkInfo(vl_info.ctx)
    messages = user(
        {"type": "image_url", "image_url": data_url(image_bytes(5)), "uuid": "a"},
        {"type": "image_url", "image_url": data_url(image_bytes(6))},
    )
    if entry == "sync":
        _, mm_data, mm_uuids = parse_chat_messages(messages, info, "string")
    else:
        _, mm_data, mm_uuids = await parse_chat_messages_async(messages, info, "string")
    assert mm_data is not None and list(mm_data) == ["vision_chunk"]
    first, second = mm_data["vision_chunk"]
    assert first["type"] == "image" and first["uuid"] == "a"
    assert isinstance(first["image"], Image.Image) and second["uuid"] is None
    assert mm_uuids == {"vision_chunk": ["a", None]}


async def test_a_vision_chunk_that_will_not_decode_is_a_422(vl_info: BaseProcessingInfo) -> None:
    info = ChunkInfo(vl_info.ctx)
    bad = data_url(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64)
    messages = user(
        {"type": "image_url", "image_url": data_url(image_bytes(7))}, {"image_url": bad}
    )
    with pytest.raises(VLLMUnprocessableEntityError) as info_:
        await parse_chat_messages_async(messages, info, "openai")
    assert (info_.value.modality, info_.value.index) == ("vision_chunk", 1)


def test_a_connector_is_built_only_for_media(
    vl_info: BaseProcessingInfo, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[MediaConnector] = []
    original = chat_utils.item_tracker.load_media_connector

    def counting(*args: Any, **kwargs: Any) -> MediaConnector:
        built.append(original(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(chat_utils.item_tracker, "load_media_connector", counting)
    parse_chat_messages(user("just text"), vl_info, "openai")
    assert built == []
    parse_chat_messages(user({"image_url": data_url(image_bytes(8))}), vl_info, "openai")
    assert len(built) == 1


async def test_end_to_end_embeddings_from_chat_reach_their_placeholders(
    embeds_info: BaseProcessingInfo,
) -> None:
    info = GridInfo(embeds_info.ctx)
    parts = [
        {
            "type": "image_embeds",
            "image_embeds": {
                "image_embeds": b64_tensor(torch.full((n, 64), float(n))),
                "image_grid_thw": [1, 2, 2 * n],
            },
        }
        for n in (4, 6)
    ]
    conversation, mm_data, mm_uuids = await parse_chat_messages_async(
        user(*parts, "describe"), info, "auto"
    )
    prompt = chat_utils.apply_chat_template(info, conversation)
    assert mm_data is not None
    renderer = BaseRenderer(info.ctx.model_config)
    try:
        out = await renderer.process_multimodal_async(
            MultiModalRequest(prompt, mm_data, mm_uuids=mm_uuids)
        )
    finally:
        renderer.shutdown()
    assert [p.length for p in out["mm_placeholders"]["image"]] == [4, 6]


# -- the developer role (vLLM 0.33's renderers/hf.py: a template without it gets system) --------


def test_a_developer_message_renders_as_system_when_the_template_has_no_developer_role(
    vl_info: BaseProcessingInfo,
) -> None:
    # Qwen2-VL's template knows no "developer": vLLM renders the message as a system one (not
    # "<|im_start|>developer"); the same tokens as the system message, as on vLLM's server.
    ask = {"role": "user", "content": "Hi"}
    as_developer = chat_utils.apply_chat_template(
        vl_info, [{"role": "developer", "content": "Be terse.", "tools": []}, ask]
    )
    as_system = chat_utils.apply_chat_template(
        vl_info, [{"role": "system", "content": "Be terse."}, ask]
    )
    assert as_developer == as_system
    assert "developer" not in as_developer


def test_system_messages_are_merged_first_once_a_developer_one_joins_them(
    vl_info: BaseProcessingInfo,
) -> None:
    conversation = [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "Hi"},
        {"role": "developer", "content": [{"type": "text", "text": "Answer in French."}]},
    ]
    prompt = chat_utils.apply_chat_template(vl_info, conversation)
    assert prompt.startswith("<|im_start|>system\nBe terse.\n\nAnswer in French.<|im_end|>\n")
    assert prompt.count("<|im_start|>system") == 1


def test_a_template_that_knows_the_developer_role_gets_it_as_it_is(
    vl_info: BaseProcessingInfo,
) -> None:
    template = (
        "{% for m in messages %}{% if m['role'] == 'developer' %}[dev]{% endif %}"
        "{{ m['role'] }}:{{ m['content'] }};{% endfor %}"
    )
    conversation = [{"role": "developer", "content": "x"}, {"role": "user", "content": "y"}]
    prompt = chat_utils.apply_chat_template(vl_info, conversation, chat_template=template)
    assert prompt == "[dev]developer:x;user:y;"


def test_text_parses_with_a_parser_not_built_on_mediarefs_base() -> None:
    # vLLM's tests hand parse_chat_message_content a tracker whose parser answers only what
    # vLLM's code reads (model_config, mm_placeholder_storage); mediaref's own bookkeeping of
    # unplaced items is not asked of it.
    from types import SimpleNamespace

    from mediaref.renderers.chat_utils import parse_chat_message_content

    parser = SimpleNamespace(
        model_config=SimpleNamespace(enable_prompt_embeds=False),
        mm_placeholder_storage=dict,
        unplaced_modalities=["image"],  # not mediaref's list: not read
    )
    tracker = SimpleNamespace(create_parser=lambda **_: parser)
    [message] = parse_chat_message_content(
        {"role": "assistant", "content": "4", "reasoning": "2+2"},
        tracker,  # type: ignore[arg-type]
        content_format="string",
        interleave_strings=False,
    )
    assert message["content"] == "4"
    assert message.get("reasoning_content") == "2+2"
