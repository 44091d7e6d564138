"""Every field the render routes read, refused where vLLM 0.33 refuses it and accepted where it
accepts it (``mediaref.serve.protocol``, ``mediaref.serve.sampling``).

The findings of the outside attack on ``mediaref serve`` these pin:

- loose numbers: ``temperature: Infinity`` and ``n: 1e9`` were accepted (JSON's ``Infinity`` /
  ``NaN`` reach the parser as floats, and JSON integers have no size limit);
- wrong shapes (``tools: [1, 2, 3]``, ``tool_calls: 5``) were 500s with a traceback.

Each refusal is a 400 (``VLLMValidationError``) naming the field, checked with a default
``ServeOptions()`` through the same path the server takes: ``parse_*_request``, then the response's
``generate_request`` (some checks need the prompt's length). The accepted cases are vLLM's
boundaries and the message shapes its ``ChatCompletionMessageParam`` union accepts, with the
values vLLM's ``SamplingParams`` would hold.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from mediaref.exceptions import VLLMValidationError
from mediaref.serve.options import ServeOptions
from mediaref.serve.protocol import parse_chat_request, parse_completion_request
from mediaref.serve.responses import generate_request

MAX_MODEL_LEN = 4096
PROMPT_LEN = 10
HUGE = 10**400  # a JSON integer past float's range (json.loads takes up to 4300 digits)
INT64_MAX = 2**63 - 1
USER = {"role": "user", "content": "hi"}
TOOL = {"type": "function", "function": {"name": "f"}}


def render(body: dict[str, Any], *, chat: bool = True, prompt_len: int = PROMPT_LEN) -> Any:
    """The ``GenerateRequest`` the server would answer for ``body``, minus the rendering."""
    if chat:
        request: Any = parse_chat_request({"messages": [USER], **body}, ServeOptions())
    else:
        request = parse_completion_request({"prompt": "hi", **body}, ServeOptions())
    return generate_request(
        request,
        request_id="r",
        token_ids=[1] * prompt_len,
        features=None,
        max_model_len=MAX_MODEL_LEN,
        context=None,
    )


def refused(body: dict[str, Any], *, chat: bool = True, prompt_len: int = PROMPT_LEN) -> str:
    with pytest.raises(VLLMValidationError) as caught:
        render(body, chat=chat, prompt_len=prompt_len)
    assert caught.value.status_code == 400, caught.value
    return str(caught.value.parameter)


def sampling(body: dict[str, Any], *, chat: bool = True) -> dict[str, Any]:
    """The resolved sampling fields, every one (the response writes only those vLLM's dump
    keeps: ``tests/test_render_parity.py`` holds that)."""
    if chat:
        request: Any = parse_chat_request({"messages": [USER], **body}, ServeOptions())
    else:
        request = parse_completion_request({"prompt": "hi", **body}, ServeOptions())
    params: dict[str, Any] = request.sampling.resolve(PROMPT_LEN, MAX_MODEL_LEN)
    return params


# --- numbers: JSON's Infinity / NaN, sizes past int64 and float, ranges of SamplingParams -------

NUMBERS_REFUSED = [
    *[
        pytest.param({"temperature": v}, "temperature", id=f"temperature-{v}")
        for v in (-0.5, 2.0000001, HUGE)
    ],
    *[pytest.param({"top_p": v}, "top_p", id=f"top_p-{v}") for v in (0, -0.1, 1.5)],
    *[pytest.param({"min_p": v}, "min_p", id=f"min_p-{v}") for v in (-0.1, 1.1, math.inf)],
    *[
        pytest.param({name: v}, name, id=f"{name}-{v}")
        for name in ("presence_penalty", "frequency_penalty")
        for v in (2.5, -2.5, math.inf, HUGE)
    ],
    *[
        pytest.param({"repetition_penalty": v}, "repetition_penalty", id=f"repetition-{v}")
        for v in (0, -1.0, math.inf)
    ],
    pytest.param({"n": 2, "temperature": 0}, "n", id="n-2-greedy"),
    pytest.param({"top_k": -2}, "top_k", id="top_k--2"),
    pytest.param({"min_tokens": None}, "min_tokens", id="min_tokens-null"),
    pytest.param({"min_tokens": 8, "max_tokens": 7}, "min_tokens", id="min_tokens-over-max"),
    pytest.param({"min_tokens": 4087}, "min_tokens", id="min_tokens-over-context-left"),
    pytest.param({"max_tokens": 0}, "max_tokens", id="max_tokens-0"),
    pytest.param({"max_tokens": MAX_MODEL_LEN + 1}, "max_tokens", id="max_tokens-over-context"),
    pytest.param({"max_completion_tokens": 0}, "max_completion_tokens", id="max_completion-0"),
    pytest.param(
        {"max_completion_tokens": MAX_MODEL_LEN + 1, "max_tokens": 5},
        "max_completion_tokens",
        id="max_completion-over-context",
    ),
    pytest.param({"priority": None}, "priority", id="priority-null"),
]


@pytest.mark.parametrize(("body", "parameter"), NUMBERS_REFUSED)
def test_a_number_vllm_refuses_is_a_400_naming_it(body: dict[str, Any], parameter: str) -> None:
    assert refused(body) == parameter


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(json.loads('{"temperature": Infinity}'), id="json-Infinity"),
        pytest.param(json.loads('{"temperature": -Infinity}'), id="json--Infinity"),
        pytest.param(json.loads('{"temperature": NaN}'), id="json-NaN"),
        pytest.param(json.loads('{"temperature": 1e400}'), id="json-1e400"),
    ],
)
def test_a_temperature_that_is_not_finite_gets_vllms_refusal(body: dict[str, Any]) -> None:
    with pytest.raises(VLLMValidationError, match="temperature must be a finite number"):
        render(body)


@pytest.mark.parametrize("n", [16385, 1e9, 10**9, 10**30], ids=["16385", "1e9", "10^9", "10^30"])
def test_n_is_held_to_vllms_bound(n: float) -> None:
    with pytest.raises(VLLMValidationError, match="n must be at most 16384") as caught:
        render({"n": n})
    assert caught.value.parameter == "n"


def test_a_prompt_that_fills_the_context_leaves_no_output_token() -> None:
    assert refused({}, prompt_len=MAX_MODEL_LEN) == "max_tokens"


# --- words, token ids, switches, logprobs -------------------------------------------------------

FIELDS_REFUSED = [
    pytest.param({"stop": ["a", "b", "c", "d", "e"]}, "stop", id="stop-five"),
    pytest.param({"stop": ""}, "stop", id="stop-empty"),
    pytest.param({"stop": ["a", ""]}, "stop", id="stop-empty-item"),
    pytest.param({"bad_words": "x"}, "bad_words", id="bad_words-string"),
    pytest.param({"bad_words": [""]}, "bad_words", id="bad_words-empty-item"),
    pytest.param({"bad_words": None}, "bad_words", id="bad_words-null"),
    pytest.param({"stop_token_ids": [10**30]}, "stop_token_ids", id="stop_ids-huge"),
    pytest.param({"allowed_token_ids": [2**64]}, "allowed_token_ids", id="allowed-huge"),
    pytest.param({"top_logprobs": 5}, "top_logprobs", id="top_logprobs-without-logprobs"),
    pytest.param({"top_logprobs": -1}, "top_logprobs", id="top_logprobs-all-without"),
    pytest.param({"prompt_logprobs": -2}, "prompt_logprobs", id="prompt_logprobs--2"),
    pytest.param(
        {"prompt_logprobs": 2, "stream": True}, "prompt_logprobs", id="prompt_logprobs-stream"
    ),
    pytest.param({"ignore_eos": None}, "ignore_eos", id="ignore_eos-null"),
    pytest.param(
        {"spaces_between_special_tokens": None},
        "spaces_between_special_tokens",
        id="spaces-null",
    ),
    pytest.param({"use_beam_search": True}, "use_beam_search", id="beam-search"),
    pytest.param({"echo": None}, "echo", id="echo-null"),
    pytest.param(
        {"stream_options": {"include_usage": "yes"}, "stream": True},
        "stream_options.include_usage",
        id="stream_options-include_usage",
    ),
    pytest.param({"kv_transfer_params": {"x": [2**64]}}, "kv_transfer_params", id="kv-huge"),
    pytest.param(
        {"ec_transfer_params": {"x": {"y": -(2**63) - 1}}}, "ec_transfer_params", id="ec-huge"
    ),
    pytest.param({"request_id": None}, "request_id", id="request_id-null"),
    pytest.param({"mm_payload": None}, "mm_payload", id="mm_payload-null"),
    pytest.param({"return_mm_kwargs": "no"}, "return_mm_kwargs", id="return_mm_kwargs-str"),
]


@pytest.mark.parametrize(("body", "parameter"), FIELDS_REFUSED)
def test_a_field_vllm_refuses_is_a_400_naming_it(body: dict[str, Any], parameter: str) -> None:
    assert refused(body) == parameter


# --- the chat request's own fields: tools, tool_choice, messages, template switches ------------

CHAT_REFUSED = [
    pytest.param({"tools": [1, 2, 3]}, "tools[0]", id="tools-ints"),
    pytest.param({"tools": []}, "tools", id="tools-empty"),
    pytest.param({"tools": [{}]}, "tools[0].function", id="tool-no-function"),
    pytest.param({"tools": [{"function": "f"}]}, "tools[0].function", id="tool-function-str"),
    pytest.param({"tools": [{"function": {}}]}, "tools[0].function.name", id="tool-no-name"),
    pytest.param(
        {"tools": [{"function": {"name": 5}}]}, "tools[0].function.name", id="tool-name-int"
    ),
    pytest.param(
        {"tools": [TOOL, {"type": "custom", "function": {"name": "g"}}]},
        "tools[1].type",
        id="tool-type-custom",
    ),
    pytest.param(
        {"tools": [{"function": {"name": "f", "parameters": []}}]},
        "tools[0].function.parameters",
        id="tool-parameters-array",
    ),
    pytest.param(
        {"tools": [{"function": {"name": "f", "description": 5}}]},
        "tools[0].function.description",
        id="tool-description-int",
    ),
    pytest.param(
        {"tools": [{"function": {"name": "f", "strict": "yes"}}]},
        "tools[0].function.strict",
        id="tool-strict-string",
    ),
    pytest.param(
        {"tools": [{**TOOL, "defer_loading": 1}]}, "tools[0].defer_loading", id="tool-defer-1"
    ),
    pytest.param({"tool_choice": "auto"}, "tool_choice", id="tool_choice-without-tools"),
    pytest.param({"tools": [TOOL], "tool_choice": "bogus"}, "tool_choice", id="choice-bogus"),
    pytest.param({"tools": [TOOL], "tool_choice": 5}, "tool_choice", id="choice-int"),
    pytest.param(
        {"tools": [TOOL], "tool_choice": {"function": 5}},
        "tool_choice.function",
        id="choice-function-int",
    ),
    pytest.param(
        {"tools": [TOOL], "tool_choice": {"function": {}}},
        "tool_choice.function.name",
        id="choice-no-name",
    ),
    pytest.param(
        {"tools": [TOOL], "tool_choice": {"function": {"name": ""}}},
        "tool_choice.function.name",
        id="choice-empty-name",
    ),
    pytest.param(
        {"tools": [TOOL], "tool_choice": {"function": {"name": "g"}}},
        "tool_choice",
        id="choice-no-such-tool",
    ),
    pytest.param(
        {"tools": [TOOL], "tool_choice": {"type": "custom", "function": {"name": "f"}}},
        "tool_choice.type",
        id="choice-type-custom",
    ),
    pytest.param({"include_reasoning": None}, "include_reasoning", id="include_reasoning-null"),
    pytest.param(
        {"add_generation_prompt": None}, "add_generation_prompt", id="generation_prompt-null"
    ),
]


@pytest.mark.parametrize(("body", "parameter"), CHAT_REFUSED)
def test_a_chat_field_vllm_refuses_is_a_400_naming_it(body: dict[str, Any], parameter: str) -> None:
    assert refused(body) == parameter


def call(**function: Any) -> dict[str, Any]:
    return {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"} | function}


MESSAGES_REFUSED = [
    pytest.param([1], "messages[0]", id="int-message"),
    pytest.param([{"content": "x"}], "messages[0].role", id="no-role"),
    pytest.param([{"role": 1, "content": "x"}], "messages[0].role", id="role-int"),
    pytest.param([{"role": "user", "content": 5}], "messages[0].content", id="content-int"),
    pytest.param([{"role": "user", "content": {"a": 1}}], "messages[0].content", id="content-obj"),
    pytest.param([{"role": "user", "content": None}], "messages[0].content", id="user-null"),
    pytest.param([{"role": "system", "content": None}], "messages[0].content", id="system-null"),
    pytest.param([{"role": "user", "content": [1]}], "messages[0].content[0]", id="part-int"),
    pytest.param([{"role": "user", "content": [None]}], "messages[0].content[0]", id="part-null"),
    pytest.param(
        [USER, {"role": "user", "content": "x", "name": 5}], "messages[1].name", id="name"
    ),
    pytest.param([{**USER, "name": None}], "messages[0].name", id="name-null"),
    pytest.param(
        [{"role": "assistant", "tool_calls": 5}], "messages[0].tool_calls", id="calls-int"
    ),
    pytest.param([{**USER, "tool_calls": 5}], "messages[0].tool_calls", id="user-calls-int"),
    pytest.param(
        [{"role": "assistant", "tool_calls": "abc"}], "messages[0].tool_calls", id="calls-str"
    ),
    pytest.param(
        [{"role": "assistant", "tool_calls": {"a": 1}}], "messages[0].tool_calls", id="calls-obj"
    ),
    pytest.param(
        [{"role": "narrator", "content": "x", "tool_calls": "abc"}],
        "messages[0].tool_calls",
        id="custom-role-calls-str",
    ),
    pytest.param(
        [{"role": "assistant", "tool_calls": [1]}], "messages[0].tool_calls[0]", id="call-int"
    ),
    pytest.param(
        [{"role": "assistant", "tool_calls": [{**call(), "id": None}]}],
        "messages[0].tool_calls[0].id",
        id="call-no-id",
    ),
    pytest.param(
        [{"role": "assistant", "tool_calls": [{**call(), "type": None}]}],
        "messages[0].tool_calls[0].type",
        id="call-no-type",
    ),
    pytest.param(
        [{"role": "assistant", "tool_calls": [{**call(), "function": 5}]}],
        "messages[0].tool_calls[0].function",
        id="call-function-int",
    ),
    pytest.param(
        [{"role": "assistant", "tool_calls": [call(name=5)]}],
        "messages[0].tool_calls[0].function.name",
        id="call-name-int",
    ),
    pytest.param(
        [{"role": "assistant", "tool_calls": [call(arguments={"x": 1})]}],
        "messages[0].tool_calls[0].function.arguments",
        id="call-arguments-object",
    ),
]


@pytest.mark.parametrize(("messages", "parameter"), MESSAGES_REFUSED)
def test_a_message_shape_vllm_refuses_is_a_400_naming_it(messages: Any, parameter: str) -> None:
    with pytest.raises(VLLMValidationError) as caught:
        parse_chat_request({"messages": messages}, ServeOptions())
    assert caught.value.status_code == 400
    assert caught.value.parameter == parameter


COMPLETION_REFUSED = [
    pytest.param({"n": None}, "n", id="n-null"),
    pytest.param({"temperature": math.inf}, "temperature", id="temperature-inf"),
    pytest.param({"max_tokens": 0}, "max_tokens", id="max_tokens-0"),
    pytest.param({"max_tokens": MAX_MODEL_LEN + 1}, "max_tokens", id="max_tokens-over-context"),
    pytest.param({"echo": "yes"}, "echo", id="echo-string"),
    pytest.param({"add_special_tokens": None}, "add_special_tokens", id="special-null"),
]


@pytest.mark.parametrize(("body", "parameter"), COMPLETION_REFUSED)
def test_a_completions_field_vllm_refuses_is_a_400_naming_it(
    body: dict[str, Any], parameter: str
) -> None:
    assert refused(body, chat=False) == parameter


# --- what vLLM accepts stays accepted, holding the values vLLM's SamplingParams would hold ------

ACCEPTED = [
    pytest.param({"temperature": 0}, {"temperature": 0.0, "top_p": 1.0, "top_k": 0}, id="t-0"),
    pytest.param(
        {"temperature": 0, "top_p": 0.5, "top_k": 5, "min_p": 0.5},
        {"top_p": 1.0, "top_k": 0, "min_p": 0.0},  # greedy: SamplingParams resets them
        id="greedy-resets",
    ),
    pytest.param({"temperature": 2}, {"temperature": 2.0}, id="t-2"),
    pytest.param({"temperature": 1e-6}, {"temperature": 0.01}, id="t-raised-to-0.01"),
    pytest.param({"top_p": 1}, {"top_p": 1.0}, id="top_p-1"),
    pytest.param({"top_p": 1e-9}, {"top_p": 1e-9}, id="top_p-tiny"),
    pytest.param({"top_k": -1}, {"top_k": -1}, id="top_k--1"),
    pytest.param({"top_k": 0}, {"top_k": 0}, id="top_k-0"),
    pytest.param({"top_k": INT64_MAX}, {"top_k": INT64_MAX}, id="top_k-int64"),
    pytest.param({"min_p": 0}, {"min_p": 0.0}, id="min_p-0"),
    pytest.param({"min_p": 1}, {"min_p": 1.0}, id="min_p-1"),
    pytest.param({"n": 1}, {"n": 1}, id="n-1"),
    pytest.param({"n": 16384}, {"n": 16384}, id="n-16384"),
    pytest.param({"n": 2.0}, {"n": 2}, id="n-2.0"),
    pytest.param({"n": None}, {"n": 1}, id="n-null"),
    pytest.param({"presence_penalty": -2, "frequency_penalty": 2}, {}, id="penalties-edges"),
    pytest.param({"repetition_penalty": 1e-9}, {"repetition_penalty": 1e-9}, id="repetition"),
    pytest.param({"seed": -1}, {"seed": None}, id="seed--1-is-none"),
    pytest.param({"seed": -(2**63)}, {"seed": -(2**63)}, id="seed-int64-min"),
    pytest.param({"seed": INT64_MAX}, {"seed": INT64_MAX}, id="seed-int64-max"),
    pytest.param({"stop": "x"}, {"stop": ["x"]}, id="stop-string"),
    pytest.param({"stop": ["a", "b", "c", "d"]}, {"stop": ["a", "b", "c", "d"]}, id="stop-four"),
    pytest.param({"stop_token_ids": [3, 3, 1]}, {"stop_token_ids": [3, 1]}, id="stop-ids-dedup"),
    pytest.param({"bad_words": ["a", "a"]}, {"bad_words": ["a"]}, id="bad-words-dedup"),
    pytest.param({"max_tokens": 1}, {"max_tokens": 1}, id="max_tokens-1"),
    pytest.param({"max_tokens": 2.0}, {"max_tokens": 2}, id="max_tokens-2.0"),
    pytest.param(
        {"max_tokens": 0, "max_completion_tokens": 5}, {"max_tokens": 5}, id="max_completion-wins"
    ),
    pytest.param({"max_tokens": MAX_MODEL_LEN}, {"max_tokens": 4086}, id="max_tokens-capped"),
    pytest.param({"min_tokens": 7, "max_tokens": 7}, {"min_tokens": 7}, id="min_tokens-eq-max"),
    pytest.param({"logprobs": True, "top_logprobs": -1}, {"logprobs": -1}, id="logprobs-all"),
    pytest.param({"logprobs": True, "top_logprobs": None}, {"logprobs": 0}, id="top-null"),
    pytest.param({"logprobs": False, "top_logprobs": 0}, {"logprobs": None}, id="logprobs-off"),
    pytest.param({"prompt_logprobs": 0, "stream": True}, {"prompt_logprobs": 0}, id="prompt-0"),
    pytest.param({"echo": True}, {"prompt_logprobs": 0}, id="echo-prompt-logprobs"),
    pytest.param({"stream_options": {}}, {}, id="empty-stream-options"),
    pytest.param({"cache_salt": "a" * 128}, {}, id="cache_salt-128"),
    pytest.param({"kv_transfer_params": {"x": [2**64 - 1, -(2**63)]}}, {}, id="kv-edges"),
    pytest.param({"unknown_field": [1, {"x": math.inf}]}, {}, id="extra-field-ignored"),
]


@pytest.mark.parametrize(("body", "expected"), ACCEPTED)
def test_what_vllm_accepts_is_accepted_as_vllm_holds_it(
    body: dict[str, Any], expected: dict[str, Any]
) -> None:
    params = sampling(body)
    assert {name: params[name] for name in expected} == expected


COMPLETION_ACCEPTED = [
    pytest.param({}, {"n": 1, "max_tokens": 16}, id="defaults"),
    pytest.param({"max_tokens": None}, {"max_tokens": 16}, id="max_tokens-null-is-16"),
    pytest.param({"max_tokens": 0, "echo": True}, {"max_tokens": 1}, id="echo-only"),
    pytest.param({"logprobs": -1}, {"logprobs": -1}, id="logprobs-all"),
    pytest.param({"logprobs": 2, "echo": True}, {"prompt_logprobs": 2}, id="echo-logprobs"),
    pytest.param({"prompt": [1.0, 2.0]}, {}, id="integral-float-ids"),
]


@pytest.mark.parametrize(("body", "expected"), COMPLETION_ACCEPTED)
def test_what_vllm_accepts_in_completions_is_accepted(
    body: dict[str, Any], expected: dict[str, Any]
) -> None:
    params = sampling(body, chat=False)
    assert {name: params[name] for name in expected} == expected


MESSAGES_ACCEPTED = [
    pytest.param([{"role": "assistant", "content": None}], id="assistant-null-content"),
    pytest.param([{"role": "function", "content": None, "name": "f"}], id="function-null"),
    pytest.param([{"role": "user"}], id="no-content"),
    pytest.param([{"role": "user", "content": ["hi", {"type": "text", "text": "x"}]}], id="strs"),
    pytest.param([{"role": "narrator", "content": "x"}], id="custom-role"),
    pytest.param([{**USER, "extra": {"any": 1}}], id="extra-keys"),
    pytest.param([{**USER, "tool_calls": [1]}], id="user-ignores-tool-calls"),
    pytest.param([{"role": "tool", "content": "x", "tool_call_id": "c1", "name": 5}], id="tool"),
    pytest.param([{"role": "assistant", "tool_calls": []}], id="no-calls"),
    pytest.param([{"role": "assistant", "tool_calls": [call()]}], id="call"),
]


@pytest.mark.parametrize("messages", MESSAGES_ACCEPTED)
def test_a_message_shape_vllm_accepts_is_accepted(messages: list[Any]) -> None:
    parse_chat_request({"messages": messages}, ServeOptions())


def test_tools_come_out_as_vllm_dumps_them_and_default_the_choice_to_auto() -> None:
    tool = {"function": {"name": "f", "x": 1}, "defer_loading": True, "y": 2}
    parsed = parse_chat_request({"messages": [USER], "tools": [tool]}, ServeOptions())
    assert parsed.tools == [
        {
            "type": "function",
            "function": {
                "name": "f",
                "description": None,
                "parameters": None,
                "defer_loading": True,
            },
            "defer_loading": True,
        }
    ]
    assert parsed.tool_choice == "auto"


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        pytest.param("none", "none", id="none"),
        pytest.param(None, None, id="null"),
        pytest.param("auto", "auto", id="auto"),
        pytest.param("required", "required", id="required"),
        pytest.param(
            {"function": {"name": "f"}}, {"function": {"name": "f"}, "type": "function"}, id="named"
        ),
    ],
)
def test_each_tool_choice_vllm_accepts_is_accepted(choice: Any, expected: Any) -> None:
    body = {"messages": [USER], "tools": [TOOL], "tool_choice": choice}
    assert parse_chat_request(body, ServeOptions()).tool_choice == expected


def test_stream_options_come_out_as_vllm_dumps_them() -> None:
    body = {"messages": [USER], "stream": True, "stream_options": {"include_usage": True}}
    response = render({k: v for k, v in body.items() if k != "messages"})
    assert response["stream_options"] == {"include_usage": True, "continuous_usage_stats": False}
