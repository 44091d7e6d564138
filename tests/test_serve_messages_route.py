"""``POST /v1/messages/render``: an Anthropic Messages request converted as vLLM 0.33 converts it
(``AnthropicServingMessages.to_chat_completion_request``), rendered as the chat route renders it.

The conversion is checked here piece by piece, the answers against the chat route's for the same
conversation, and each refusal by its status and message; ``tests/test_render_parity.py`` holds
the route's answers to vLLM's own (the ``messages_*`` cases of ``tests/_render_corpus.py``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

import test_serve
from mediaref.models.builtin import builtin_model_path
from mediaref.serve.anthropic_messages import (
    convert_messages,
    merges_inline_system,
    resolve_tools,
)
from mediaref.serve.app import CHAT_ROUTE, MESSAGES_ROUTE, build_app
from mediaref.serve.options import ServeOptions
from mediaref.serve.service import RenderService

# test_serve's server (the built-in qwen2_vl) and its request helper.
service = test_serve.service
client = test_serve.client
post = test_serve.post

IMAGE_SOURCE = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}
IMAGE_URL = "data:image/png;base64,iVBORw0KGgo="  # the data: URL a base64 source becomes
HELLO = [{"role": "user", "content": "Hello there."}]

# A template that refuses a system message past the first (as Qwen2.5's does) and tells
# thinking apart: the two things vLLM probes a model's template for.
STRICT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'system' and not loop.first %}"
    "{{ raise_exception('System message must be at the beginning.') }}{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if enable_thinking is defined and not enable_thinking %}<|im_start|>no-think\n{% endif %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def anthropic(messages: list[dict[str, Any]] = HELLO, **fields: Any) -> dict[str, Any]:
    return {"model": "qwen2_vl", "max_tokens": 16, "messages": messages, **fields}


# --- the conversion ------------------------------------------------------------------------


def test_system_blocks_join_without_the_billing_header() -> None:
    system = [
        {"type": "text", "text": "x-anthropic-billing-header: cc_version=1; cch=0;"},
        {"type": "text", "text": "You are terse."},
        {"type": "image", "source": IMAGE_SOURCE},  # not text: no part of the system prompt
        {"type": "text", "text": " Answer briefly."},
    ]
    assert convert_messages(system, HELLO, merge_inline_system=False) == [
        {"role": "system", "content": "You are terse. Answer briefly."},
        *HELLO,
    ]
    assert convert_messages("Be kind.", HELLO, merge_inline_system=False)[0] == {
        "role": "system",
        "content": "Be kind.",
    }
    assert convert_messages("", HELLO, merge_inline_system=False) == HELLO


def test_blocks_become_chat_parts_calls_and_reasoning() -> None:
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Look:"},
                {"type": "image", "source": IMAGE_SOURCE},
                {"type": "image", "source": {"type": "url", "url": "data:image/gif;base64,R0lG"}},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Hm.", "signature": "s"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "tool_use", "id": "t1", "name": "f", "input": {"x": [1, "é"]}},
            ],
        },
    ]
    user, assistant = convert_messages(None, messages, merge_inline_system=False)
    assert user == {
        "role": "user",
        "content": [
            {"type": "text", "text": "Look:"},
            {"type": "image_url", "image_url": {"url": IMAGE_URL}},
            {"type": "image_url", "image_url": {"url": "data:image/gif;base64,R0lG"}},
        ],
    }
    # No content at all: the assistant message carries its reasoning and calls only.
    assert assistant == {
        "role": "assistant",
        "reasoning": "Hm.",
        "tool_calls": [
            {
                "id": "t1",
                "type": "function",
                # json.dumps' own defaults, as vLLM writes the arguments (ASCII escapes).
                "function": {"name": "f", "arguments": '{"x": [1, "\\u00e9"]}'},
            }
        ],
    }


def test_a_users_tool_result_is_a_tool_message_ahead_of_its_text() -> None:
    result = {
        "type": "tool_result",
        "tool_use_id": "t1",
        "content": [
            {"type": "text", "text": "Sunny,"},
            {"type": "image", "source": IMAGE_SOURCE},
            {"type": "text", "text": "20 C"},
            {"type": "tool_reference", "tool_name": "g"},
        ],
    }
    converted = convert_messages(
        None,
        [{"role": "user", "content": [result, {"type": "text", "text": "Thanks."}]}],
        merge_inline_system=False,
    )
    assert converted == [
        {"role": "tool", "tool_call_id": "t1", "content": "Sunny,\n20 C"},
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": IMAGE_URL}}],
        },
        {
            "role": "tool",
            "tool_call_id": "t1",
            "content": [{"type": "tool_reference", "name": "g"}],
        },
        {"role": "user", "content": "Thanks."},
    ]
    # A user message of tool results only leaves no user message of its own.
    only = convert_messages(
        None,
        [{"role": "user", "content": [{**result, "content": "ok"}]}],
        merge_inline_system=False,
    )
    assert only == [{"role": "tool", "tool_call_id": "t1", "content": "ok"}]


def test_an_assistants_tool_result_is_text() -> None:
    block = {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "r"}]}
    (message,) = convert_messages(
        None, [{"role": "assistant", "content": [block]}], merge_inline_system=False
    )
    # Python's str() of the blocks, as vLLM writes it.
    assert message == {
        "role": "assistant",
        "content": "Tool result: [{'type': 'text', 'text': 'r'}]",
    }


def test_inline_system_messages_stay_unless_the_template_needs_them_first() -> None:
    messages = [
        {"role": "user", "content": "Hi."},
        {
            "role": "system",
            "content": [
                {"type": "text", "text": "x-anthropic-billing-header: cch=1;"},
                {"type": "text", "text": "Reminder."},
            ],
        },
        {"role": "system", "content": "x-anthropic-billing-header: z"},
        {"role": "user", "content": "Again."},
    ]
    assert convert_messages("Top.", messages, merge_inline_system=False) == [
        {"role": "system", "content": "Top."},
        {"role": "user", "content": "Hi."},
        {"role": "system", "content": "Reminder."},
        {"role": "user", "content": "Again."},
    ]
    assert convert_messages("Top.", messages, merge_inline_system=True) == [
        {"role": "system", "content": "Top.Reminder."},
        {"role": "user", "content": "Hi."},
        {"role": "user", "content": "Again."},
    ]


def test_merges_inline_system_probes_the_template_as_vllm_does() -> None:
    qwen2_vl = (builtin_model_path("qwen2_vl") / "chat_template.jinja").read_text()
    assert merges_inline_system(qwen2_vl) is False
    assert merges_inline_system(STRICT_TEMPLATE) is True  # raise_exception is no sandbox global
    assert merges_inline_system(None) is True


def tool(name: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "description": None,
        "input_schema": {"type": "object"},
        "strict": None,
        "defer_loading": fields.get("defer_loading"),
    }


def test_tool_changes_of_system_messages_resolve_the_tools() -> None:
    def changes(*blocks: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"role": "system", "content": list(blocks)}]

    added = {"type": "tool_definition", "definition": {"name": "g", "input_schema": {}}}
    tools = resolve_tools(
        [tool("f", defer_loading=True), tool("h")],
        changes(
            {"type": "tool_addition", "tool": added},
            {"type": "tool_addition", "tool": {"type": "tool_reference", "name": "f"}},
            {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "h"}},
        ),
    )
    assert tools == [tool("f"), tool("g")]  # f no longer deferred, g declared, h removed
    with pytest.raises(ValueError, match="references tool 'zz', which is not declared"):
        resolve_tools(
            None,
            changes({"type": "tool_removal", "tool": {"type": "tool_reference", "name": "zz"}}),
        )
    assert resolve_tools(None, HELLO) is None


# --- the route -----------------------------------------------------------------------------


async def test_the_answer_is_the_chat_routes_for_the_converted_request(
    client: TestClient[Any, Any],
) -> None:
    system = [{"type": "text", "text": "You are terse."}]
    body = anthropic(
        [
            {"role": "user", "content": [{"type": "text", "text": "Hi."}]},
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": "More."},
        ],
        system=system,
        temperature=0.5,
        top_k=3,
        stop_sequences=["END"],
    )
    status, answer = await post(client, MESSAGES_ROUTE, body)
    assert status == 200, answer
    chat = {
        "model": "qwen2_vl",
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Hi."},
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": "More."},
        ],
        "max_tokens": 16,
        "max_completion_tokens": 16,
        "temperature": 0.5,
        "top_k": 3,
        "stop": ["END"],
        "tool_choice": None,  # vLLM's conversion leaves it unset without tools
    }
    status, expected = await post(client, CHAT_ROUTE, chat)
    assert status == 200, expected
    assert answer.pop("request_id").startswith("chatcmpl-")
    expected.pop("request_id")
    assert answer == expected
    assert answer["parse_context"]["tool_choice"] is None
    assert answer["model"] == "qwen2_vl"


async def test_tools_thinking_stream_and_engine_fields(client: TestClient[Any, Any]) -> None:
    weather = {"name": "get_weather", "input_schema": {"properties": {}}, "strict": True}
    body = anthropic(
        max_tokens=2048,
        tools=[weather],
        tool_choice={"type": "none", "disable_parallel_tool_use": True},
        thinking={"type": "enabled", "budget_tokens": 1024},
        stream=True,
        watermarking=True,
        vllm_xargs={"tenant": "a", "ids": [1, 2]},
        kv_transfer_params={},
    )
    status, answer = await post(client, MESSAGES_ROUTE, body)
    assert status == 200, answer
    context = answer["parse_context"]
    assert context["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": None,
                "parameters": {"properties": {}, "type": "object"},  # the type Anthropic implies
                "strict": True,
            },
        }
    ]
    assert context["tool_choice"] == "none"
    assert context["parallel_tool_calls"] is False
    assert answer["stream"] is True
    assert answer["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert answer["kv_transfer_params"] is None  # an empty one is none, as in vLLM's answer
    params = answer["sampling_params"]
    names = list(params)
    # SamplingParams' field order: watermarking after temperature, extra_args before bad_words,
    # thinking_token_budget last.
    assert names[names.index("temperature") + 1] == "watermarking"
    assert names[names.index("bad_words") - 1] == "extra_args"
    assert names[-1] == "thinking_token_budget"
    assert params["watermarking"] is True
    assert params["extra_args"] == {"tenant": "a", "ids": [1, 2]}
    assert params["thinking_token_budget"] == 1024
    assert params["max_tokens"] == 2048
    assert params["output_kind"] == 1  # streamed: deltas


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        (None, "auto"),  # tools without a tool_choice: vLLM's conversion says "auto"
        ({"type": "auto"}, "auto"),
        ({"type": "any"}, "required"),
        ({"type": "none"}, "none"),
        ({"type": "tool", "name": "f"}, {"function": {"name": "f"}, "type": "function"}),
    ],
)
async def test_tool_choices_become_the_chats(choice: dict[str, Any] | None, expected: Any) -> None:
    body = anthropic(tools=[{"name": "f", "input_schema": {"type": "object"}}])
    if choice is not None:
        body["tool_choice"] = choice
    # A server that serves every tool choice (vLLM's flags); the default refuses all but "none".
    service = RenderService(ServeOptions(enable_auto_tool_choice=True, tool_call_parser="hermes"))
    try:
        async with TestClient(TestServer(build_app(service))) as client:
            status, answer = await post(client, MESSAGES_ROUTE, body)
    finally:
        service.close()
    assert status == 200, answer
    assert answer["parse_context"]["tool_choice"] == expected
    assert answer["parse_context"]["parallel_tool_calls"] is True


async def test_efforts_reach_the_template(client: TestClient[Any, Any]) -> None:
    body = anthropic(output_config={"effort": "high"}, chat_template_kwargs={"add_vision_id": True})
    status, answer = await post(client, MESSAGES_ROUTE, body)
    assert status == 200, answer
    kwargs = answer["parse_context"]["chat_template_kwargs"]
    assert kwargs["reasoning_effort"] == "high" and kwargs["enable_thinking"] is True
    assert kwargs["add_vision_id"] is True
    # Qwen2-VL's template renders thinking and not alike: disabled thinking sends "low".
    status, answer = await post(client, MESSAGES_ROUTE, anthropic(thinking={"type": "disabled"}))
    assert status == 200, answer
    kwargs = answer["parse_context"]["chat_template_kwargs"]
    assert kwargs["reasoning_effort"] == "low" and kwargs["enable_thinking"] is True


@pytest.fixture(scope="module")
def strict_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Qwen2-VL's files with :data:`STRICT_TEMPLATE` for its chat template."""
    directory = tmp_path_factory.mktemp("strict") / "strict_model"
    shutil.copytree(builtin_model_path("qwen2_vl"), directory)
    (directory / "chat_template.jinja").write_text(STRICT_TEMPLATE)
    config = json.loads((directory / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory


async def test_a_template_that_needs_the_system_first_gets_them_merged(strict_model: Path) -> None:
    service = RenderService(ServeOptions(models=(str(strict_model),)))
    try:
        async with TestClient(TestServer(build_app(service))) as client:
            body = anthropic(
                [
                    {"role": "user", "content": "Hi."},
                    {"role": "system", "content": "Reminder."},
                    {"role": "user", "content": "Again."},
                ],
                model=str(strict_model),
                system="Top.",
                thinking={"type": "disabled"},
            )
            status, answer = await post(client, MESSAGES_ROUTE, body)
            assert status == 200, answer
            tokenizer = service.renderers[str(strict_model)].tokenizer
            text = tokenizer.decode(answer["token_ids"])
            assert text.startswith("<|im_start|>system\nTop.Reminder.<|im_end|>")
            assert text.count("<|im_start|>system") == 1
            # The template tells "none" from the thinking efforts: disabled thinking is "none".
            kwargs = answer["parse_context"]["chat_template_kwargs"]
            assert kwargs["reasoning_effort"] == "none" and kwargs["enable_thinking"] is False
            assert "no-think" in text
    finally:
        service.close()


async def test_an_x_request_id_names_the_request(client: TestClient[Any, Any]) -> None:
    response = await client.post(MESSAGES_ROUTE, json=anthropic(), headers={"X-Request-Id": "r1"})
    assert (await response.json())["request_id"] == "chatcmpl-r1"


REFUSED = [
    ({"model": None}, "Model is required"),
    ({"max_tokens": 0}, "max_tokens must be positive"),
    ({"max_tokens": None}, "max_tokens must be an integer"),
    ({"messages": "hi"}, "messages must be an array of message objects"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role must be"),
    ({"messages": [{"role": "user"}]}, "messages[0].content must be a string or an array"),
    ({"messages": [{"role": "user", "content": [{"type": "video"}]}]}, "content[0].type must be"),
    (
        {"messages": [{"role": "user", "content": [{"type": "text", "text": 3}]}]},
        "text must be a string",
    ),
    ({"messages": []}, "Cannot apply chat template to an empty conversation"),
    (
        {"messages": [{"role": "user", "content": [{"type": "image", "source": "x"}]}]},
        "source must be an object",
    ),
    (
        {"messages": [{"role": "user", "content": [{"type": "tool_addition"}]}]},
        "tool is required for tool_addition blocks",
    ),
    (
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "f"}}
                    ],
                }
            ]
        },
        'tool_removal blocks are only allowed in messages with role "system"',
    ),
    ({"system": 5}, "system must be a string or an array of content blocks"),
    ({"tools": [{"name": "f"}]}, "tools[0].input_schema must be an object"),
    ({"tool_choice": {"type": "tool"}}, "tool_choice.name is required when type is 'tool'"),
    ({"tool_choice": {"type": "sometimes"}}, "tool_choice.type must be"),
    ({"thinking": {"type": "enabled", "budget_tokens": 512}}, "thinking.budget_tokens must be"),
    (
        {"thinking": {"type": "enabled", "budget_tokens": 2048}},
        "thinking.budget_tokens must be less than max_tokens",
    ),
    ({"thinking": {"type": "maybe"}}, "thinking.type must be"),
    ({"stop_sequences": ["a", "b", "c", "d", "e"]}, "stop_sequences may hold at most 4 strings"),
    ({"stop_sequences": [""]}, "stop cannot contain an empty string."),
    ({"temperature": 7.0}, "temperature must be in [0, 2], got 7.0."),
    ({"top_k": "3"}, "top_k must be an integer"),
    (
        {"output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}}},
        "output_config.format is not supported by this render server",
    ),
    ({"output_config": {"effort": "extreme"}}, "output_config.effort must be one of"),
    ({"vllm_xargs": {"a": {"b": 1}}}, "vllm_xargs.a must be a string, a number"),
    ({"vllm_xargs": {"a": 2**70}}, "extra_args integers must be between"),
    ({"stream": "yes"}, "stream must be a boolean"),
    ({"cache_salt": "a/b"}, "Parameter 'cache_salt' must be at most 128 characters"),
]


@pytest.mark.parametrize(("change", "message"), REFUSED, ids=[m for _, m in REFUSED])
async def test_refused_input_is_a_400_saying_why(
    client: TestClient[Any, Any], change: dict[str, Any], message: str
) -> None:
    body = {**anthropic(), **change}
    body = {key: value for key, value in body.items() if value is not None}
    status, answer = await post(client, MESSAGES_ROUTE, body)
    assert status == 400, answer
    assert message in answer["error"]["message"]


async def test_refusals_beyond_the_request_model(client: TestClient[Any, Any]) -> None:
    # A tool change naming no declared tool is refused by the conversion, as in vLLM.
    change = {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "zz"}}
    body = anthropic([*HELLO, {"role": "system", "content": [change]}])
    status, answer = await post(client, MESSAGES_ROUTE, body)
    assert status == 400 and "not declared in tools" in answer["error"]["message"]
    status, answer = await post(client, MESSAGES_ROUTE, anthropic(model="nope"))
    assert status == 404 and "`nope` does not exist" in answer["error"]["message"]
    status, answer = await post(client, MESSAGES_ROUTE, [anthropic()])
    assert status == 400 and "JSON object" in answer["error"]["message"]
