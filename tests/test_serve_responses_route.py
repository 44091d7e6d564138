"""``POST /v1/responses/render``: an OpenAI Responses request rendered as vLLM 0.33's
``render_responses_request`` renders it (its input items become chat messages as
``construct_input_messages`` makes them).

The conversion is checked here item by item, the answer's shape (the body's own request id, no
``parse_context``, ``extra_args``) and each refusal by its status and message;
``tests/test_render_parity.py`` holds the route's answers to vLLM's own (the ``responses_*`` cases
of ``tests/_render_corpus.py``).
"""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestClient

import test_serve
from mediaref.serve.app import CHAT_ROUTE, RESPONSES_ROUTE
from mediaref.serve.responses_api import input_messages

# test_serve's server (the built-in qwen2_vl) and its request helper.
service = test_serve.service
client = test_serve.client
post = test_serve.post


def said(text: str, **fields: Any) -> dict[str, Any]:
    """An assistant's output message, as a client echoes it back."""
    content = [{"type": "output_text", "text": text, "annotations": []}]
    return {"type": "message", "role": "assistant", "content": content, **fields}


# --- the conversion ------------------------------------------------------------------------


def test_a_string_input_is_one_user_message_after_the_instructions() -> None:
    assert input_messages("Be terse.", "Hi.") == (
        [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi."}],
        False,
    )
    assert input_messages(None, "Hi.") == ([{"role": "user", "content": "Hi."}], False)


def test_reasoning_text_and_calls_join_one_assistant_message() -> None:
    items = [
        {"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "s"}]},
        said("Checking."),
        {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{}"},
        {
            "type": "function_call",
            "call_id": "c2",
            "name": "time",
            "arguments": "{}",
            "namespace": "clock",
        },
        {"type": "function_call_output", "call_id": "c1", "output": "Sunny"},
        {"type": "custom_tool_call", "call_id": "c3", "name": "shell", "input": "ls -l é"},
        {"type": "custom_tool_call_output", "call_id": "c3", "output": "a.txt"},
        said("Done."),
    ]
    messages, continues = input_messages(None, items)
    assert not continues

    def call(call_id: str, name: str, arguments: str = "{}") -> dict[str, Any]:
        return {
            "id": call_id,
            "function": {"name": name, "arguments": arguments},
            "type": "function",
        }

    assert messages == [
        items[0],
        {
            "role": "assistant",
            "reasoning": "s",  # no reasoning content: the summary stands in
            "content": "Checking.",
            # a namespaced function is called by its flat name
            "tool_calls": [call("c1", "weather"), call("c2", "clock__time")],
        },
        {"role": "tool", "content": "Sunny", "tool_call_id": "c1"},
        # after a tool message, a call starts an assistant message of its own; a custom tool's
        # text is vLLM's one-string-argument shim (not ASCII-escaped)
        {"role": "assistant", "tool_calls": [call("c3", "shell", '{"input": "ls -l é"}')]},
        {"role": "tool", "content": "a.txt", "tool_call_id": "c3"},
        {"role": "assistant", "content": "Done."},
    ]


def test_an_unfinished_last_message_is_continued() -> None:
    base = [{"role": "user", "content": "Count."}]
    for status, continued in (("incomplete", True), ("in_progress", True), ("completed", False)):
        _, continues = input_messages(None, [*base, said("One,", status=status)])
        assert continues is continued, status
    _, continues = input_messages(None, [*base, said("One,")])
    assert not continues
    reasoning = {"type": "reasoning", "summary": [], "status": "in_progress"}
    assert input_messages(None, [*base, reasoning])[1]
    assert not input_messages(
        None,
        [
            *base,
            {"type": "function_call_output", "call_id": "c", "output": "x", "status": "incomplete"},
        ],
    )[1]


def test_reasoning_content_wins_over_its_summary() -> None:
    item = {
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "summary"}],
        "content": [{"type": "reasoning_text", "text": "full"}],
    }
    assert input_messages(None, [item])[0] == [{"role": "assistant", "reasoning": "full"}]


# --- the route -----------------------------------------------------------------------------


async def test_the_answer_is_vllms_responses_generate_request(client: TestClient[Any, Any]) -> None:
    body = {
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "Hi."}]}],
        "instructions": "Be terse.",
        "max_output_tokens": 9,
        "temperature": 0.5,
        "request_id": "resp_mine",
        "include": ["message.output_text.logprobs"],
        "top_logprobs": 2,
        "tools": [
            {"type": "function", "name": "f", "parameters": {"type": "object"}},
            {"type": "web_search"},  # no function the model is shown: dropped, as vLLM drops it
        ],
        "reasoning": {"effort": "low"},
        "stream": True,
        "truncation": "auto",
    }
    response = await client.post(RESPONSES_ROUTE, json=body, headers={"X-Request-Id": "ignored"})
    answer = await response.json()
    assert response.status == 200, answer
    assert answer["request_id"] == "resp_mine"  # the body's, unprefixed; the header is not read
    assert answer["parse_context"] is None
    assert answer["stream"] is True and answer["stream_options"] is None
    params = answer["sampling_params"]
    assert params["max_tokens"] == 9 and params["temperature"] == 0.5 and params["logprobs"] == 2
    assert params["extra_args"] == {}  # vLLM's Responses params always carry it
    assert list(params)[list(params).index("bad_words") - 1] == "extra_args"

    chat = {
        "messages": [{"role": "system", "content": "Be terse."}, body["input"][0]],
        "tools": [
            {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
        ],
        "tool_choice": "none",  # the chat route's default server refuses "auto"; same template
    }
    status, expected = await post(client, CHAT_ROUTE, chat)
    assert status == 200, expected
    assert answer["token_ids"] == expected["token_ids"]


async def test_a_random_request_id_is_vllms_shape(client: TestClient[Any, Any]) -> None:
    status, answer = await post(client, RESPONSES_ROUTE, {"input": "Hi."})
    assert status == 200, answer
    assert answer["request_id"].startswith("resp_") and len(answer["request_id"]) == 21
    assert answer["model"] is None
    assert "logprobs" not in answer["sampling_params"]


async def test_extra_args_follow_vllms_transfer_params(client: TestClient[Any, Any]) -> None:
    body = {"input": "Hi.", "kv_transfer_params": {"do_remote_decode": True}, "watermarking": False}
    status, answer = await post(client, RESPONSES_ROUTE, body)
    assert status == 200, answer
    assert answer["kv_transfer_params"] == {"do_remote_decode": True}
    assert "extra_args" not in answer["sampling_params"]  # hoisted out, nothing left
    assert answer["sampling_params"]["watermarking"] is False
    body = {"input": "Hi.", "vllm_xargs": {"q": 2}, "kv_transfer_params": {}}
    status, answer = await post(client, RESPONSES_ROUTE, body)
    assert status == 200, answer
    assert answer["sampling_params"]["extra_args"] == {"q": 2}
    assert answer["kv_transfer_params"] is None


async def test_an_unfinished_message_is_continued_not_answered(
    client: TestClient[Any, Any],
) -> None:
    body = {"input": [{"role": "user", "content": "Count."}, said("One,", status="incomplete")]}
    status, answer = await post(client, RESPONSES_ROUTE, body)
    assert status == 200, answer
    chat = {
        "messages": [
            {"role": "user", "content": "Count."},
            {"role": "assistant", "content": "One,"},
        ],
        "continue_final_message": True,
        "add_generation_prompt": False,
    }
    status, expected = await post(client, CHAT_ROUTE, chat)
    assert status == 200, expected
    assert answer["token_ids"] == expected["token_ids"]


async def test_an_image_renders_and_its_parts_keep_only_openais_keys(
    client: TestClient[Any, Any],
) -> None:
    url = test_serve.data_url(test_serve.jpeg_bytes(7))
    image = {"type": "input_image", "image_url": url, "uuid": "client-chosen"}
    body = {
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "What?"}, image]}]
    }
    status, answer = await post(client, RESPONSES_ROUTE, body)
    # A part's uuid is no field of OpenAI's input_image: dropped (as vLLM's validation drops
    # it), never a cache identity the server was not told to trust.
    assert status == 200, answer
    (digest,) = answer["features"]["mm_hashes"]["image"]
    assert digest != "client-chosen"
    chat = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What?"},
                    {"type": "image_url", "image_url": {"url": url}},
                ],
            }
        ]
    }
    status, expected = await post(client, CHAT_ROUTE, chat)
    assert status == 200, expected
    assert answer["token_ids"] == expected["token_ids"]
    assert answer["features"] == expected["features"]


REFUSED = [
    (
        {"previous_response_id": "resp_1"},
        "previous_response_id is not supported by the stateless render endpoint.",
    ),
    ({"input": None}, "input must be a string or an array of input items"),
    ({"input": 5}, "input must be a string or an array of input items"),
    ({"input": []}, "Cannot apply chat template to an empty conversation"),
    (
        {"input": [{"type": "item_reference", "id": "x"}]},
        "Unsupported input item type: item_reference",
    ),
    ({"input": [{"content": "no role"}]}, "Unsupported input item type: None"),
    ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role must be"),
    (
        {"input": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]},
        "input[0].content[0].type must be",
    ),
    (
        {"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]},
        "file_id is not supported",
    ),
    (
        {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
        "is not supported by this render server",
    ),
    (
        {"input": [{"type": "reasoning", "summary": [], "encrypted_content": "zz"}]},
        "Encrypted content is not supported.",
    ),
    (
        {"input": [{"type": "function_call", "call_id": "c", "name": "f"}]},
        "input[0].arguments must be a string",
    ),
    ({"input": [said("x", content=[])]}, "input[0].content must be a string or a non-empty array"),
    ({"prompt": {"id": "p"}}, "prompt template is not supported"),
    ({"background": True, "store": False}, "background can only be used when `store` is true"),
    (
        {"text": {"format": {"type": "json_object"}}},
        "text.format is not supported by this render server",
    ),
    ({"structured_outputs": {"json": {}}}, "structured_outputs is not supported"),
    ({"logit_bias": {"1": 2.0}}, "logit_bias is not supported"),
    ({"tools": [{"type": "custom", "name": "c"}]}, "is not supported by this render server"),
    ({"tools": [{"type": "teleport"}]}, "tools[0].type must be"),
    ({"tools": [{"type": "function"}]}, "tools[0].name must be a string"),
    (
        {"tool_choice": "required"},
        "Tool choice 'required' must be specified with 'tools' parameter.",
    ),
    (
        {"tool_choice": {"type": "function", "name": "g"}},
        "Tool choice 'function' not found in 'tools' parameter.",
    ),
    (
        {"max_output_tokens": 10**6},
        "max_output_tokens=1000000 cannot be greater than max_model_len",
    ),
    ({"max_output_tokens": 0}, "max_tokens must be at least 1, got 0."),
    ({"reasoning": {"effort": "huge"}}, "reasoning.effort must be one of"),
    ({"include": ["everything"]}, "include[0] must be one of"),
    ({"truncation": "sometimes"}, "truncation must be one of"),
    ({"request_id": None}, "request_id may be omitted but must not be null"),
    ({"temperature": -1.0}, "temperature must be non-negative, got -1.0."),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop may hold at most 4 strings"),
    ({"chat_template_kwargs": {"tools": []}}, "chat_template_kwargs may not set tools"),
    ({"mm_processor_kwargs": {"max_pixels": 1}}, "--trust-request-mm-kwargs"),
    ({"vllm_xargs": {"kv_transfer_params": 1}}, "vllm_xargs may not carry kv_transfer_params"),
]


@pytest.mark.parametrize(("change", "message"), REFUSED, ids=[m for _, m in REFUSED])
async def test_refused_input_is_a_400_saying_why(
    client: TestClient[Any, Any], change: dict[str, Any], message: str
) -> None:
    status, answer = await post(client, RESPONSES_ROUTE, {"input": "Hi.", **change})
    assert status == 400, answer
    assert message in answer["error"]["message"]


async def test_an_unknown_model_is_a_404_before_previous_response_id(
    client: TestClient[Any, Any],
) -> None:
    body = {"input": "Hi.", "model": "nope", "previous_response_id": "resp_1"}
    status, answer = await post(client, RESPONSES_ROUTE, body)
    assert status == 404 and "`nope` does not exist" in answer["error"]["message"]
