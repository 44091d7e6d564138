"""``POST /v1/messages/render``: an Anthropic Messages request, rendered as vLLM 0.33 renders it.

vLLM's render server converts the request to a chat completions request
(``AnthropicServingMessages.to_chat_completion_request``) and renders that as
``/v1/chat/completions/render`` does; so does this module, into the chat route's own request
(:func:`~mediaref.serve.protocol.parse_chat_request`, every check of that route included). The
request is first checked as vLLM's ``AnthropicMessagesRequest`` checks it (a 400 naming the
field), then converted:

- ``system`` (a string or text blocks; a block starting ``x-anthropic-billing-header`` is dropped)
  becomes the first message, its texts joined; a ``system``-role message in ``messages`` stays
  where it is, unless the model's template refuses a system message past the first (it is then
  merged into the first: vLLM probes the template once, :func:`merges_inline_system`);
- text blocks are text parts (one alone: a string), image blocks ``image_url`` parts (a base64
  source as a ``data:`` URL), ``tool_use`` blocks an assistant's tool calls (arguments as JSON),
  ``thinking`` blocks its ``reasoning``; a user's ``tool_result`` is a ``tool`` message ahead of
  the user's own (its images in a user message after it), an assistant's a text part;
- ``tools`` (with ``tool_addition`` / ``tool_removal`` blocks of system messages applied) are
  function tools, ``tool_choice`` ``auto`` / ``any`` / ``tool`` / ``none`` the chat's ``auto`` /
  ``required`` / a named tool / ``none``;
- ``max_tokens`` is the output budget, ``stop_sequences`` ``stop``, ``thinking`` and
  ``output_config.effort`` a reasoning effort for the template (``thinking.type: disabled``: the
  effort the model's template tells from thinking, :func:`disabled_thinking_effort`),
  ``thinking.budget_tokens`` the sampling params' ``thinking_token_budget``.

``output_config.format`` (structured output) is refused: this server writes no guided-decoding
params.

This module is the route's front: the converted request (:class:`MessagesRenderRequest`), how a
body becomes one (:func:`parse_messages_request`) and how it renders (:func:`render_messages`).
Each step lives in a private module of its own, re-exported here so that this path stays the one
to import:

- :mod:`._anthropic_shapes`: the body checked as ``AnthropicMessagesRequest`` checks it;
- :mod:`._anthropic_blocks`: content blocks as chat messages (:func:`convert_messages`);
- :mod:`._anthropic_tools`: ``tools`` resolved and converted, ``tool_choice`` converted
  (:func:`resolve_tools`);
- :mod:`._anthropic_template`: what depends on the model's template, probed once per template.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mediaref.exceptions import VLLMValidationError
from mediaref.serve import _anthropic_shapes as shapes
from mediaref.serve import _chat_bridge as bridge
from mediaref.serve import _fields as f
from mediaref.serve._anthropic_blocks import BILLING_HEADER, convert_messages
from mediaref.serve._anthropic_template import (
    disabled_thinking_effort,
    merges_inline_system,
    processing_info,
    template_source,
)
from mediaref.serve._anthropic_tools import chat_tool, chat_tool_choice, resolve_tools
from mediaref.serve.options import ServeOptions
from mediaref.serve.protocol import parse_chat_request

if TYPE_CHECKING:
    from mediaref.serve.service import RenderService


@dataclass(frozen=True)
class MessagesRenderRequest(bridge.BridgedRequest):
    """A ``/v1/messages/render`` body, checked and converted: the chat request it renders as,
    and what depends on the model's template or has no chat field."""

    merged_messages: list[dict[str, Any]] | None
    """The messages with every system message merged into the first (None: no inline system
    message, nothing to merge)."""
    thinking_disabled: bool
    """``thinking.type`` is ``disabled``: the template gets the effort it tells from thinking."""
    template_kwargs: dict[str, Any]
    """The request's ``chat_template_kwargs`` (the disabled-thinking effort goes over these)."""
    watermarking: bool | None
    extra_args: dict[str, Any] | None
    thinking_token_budget: int | None


def parse_messages_request(
    body: object, options: ServeOptions, *, request_id: str | None = None
) -> MessagesRenderRequest:
    """A ``/v1/messages/render`` body, checked and converted; ``request_id``: the X-Request-Id
    (the body's own ``request_id`` is no Anthropic field: without the header, a random one)."""
    if not isinstance(body, dict):
        raise VLLMValidationError("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise VLLMValidationError("Model is required", parameter="model")
    messages = shapes.check_messages(body)
    max_tokens = shapes.check_max_tokens(body)
    system = body.get("system")
    if system is not None:  # checked as a user's: tool changes belong to system messages
        shapes.check_content(system, "system", role="user")
    tools_given = f.get_list(body, "tools")
    tools = (
        None
        if tools_given is None
        else [shapes.check_tool(t, f"tools[{i}]") for i, t in enumerate(tools_given)]
    )
    tools = resolve_tools(tools, messages)
    choice = shapes.check_tool_choice(body)
    thinking = shapes.check_thinking(body, max_tokens)
    f.get_dict(body, "metadata")
    chat: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "max_completion_tokens": max_tokens,
        "stop": shapes.check_stop_sequences(body),
        **{name: body.get(name) for name in ("temperature", "top_p", "top_k")},
        "tool_choice": chat_tool_choice(choice, tools),
    }
    bridge.pass_through(body, chat)
    template_kwargs = f.get_dict(body, "chat_template_kwargs") or {}
    chat["chat_template_kwargs"] = bridge.effort_kwargs(template_kwargs, shapes.check_effort(body))
    if f.get_bool(body, "stream", False):
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    if choice is not None:
        chat["parallel_tool_calls"] = not choice.get("disable_parallel_tool_use")
    if tools:
        chat["tools"] = [chat_tool(tool) for tool in tools]
    chat["messages"] = convert_messages(system, messages, merge_inline_system=False)
    if not chat["messages"]:
        raise VLLMValidationError(
            "Cannot apply chat template to an empty conversation. Provide at least one message.",
            parameter="messages",
        )
    has_inline_system = any(m["role"] == "system" for m in messages)
    return MessagesRenderRequest(
        chat=bridge.with_tools(parse_chat_request(chat, options, request_id=request_id), tools),
        merged_messages=(
            convert_messages(system, messages, merge_inline_system=True)
            if has_inline_system
            else None
        ),
        thinking_disabled=thinking is not None and thinking["type"] == "disabled",
        template_kwargs=chat["chat_template_kwargs"],
        watermarking=f.get_bool(body, "watermarking", None),
        extra_args=bridge.vllm_xargs(body),
        thinking_token_budget=(
            thinking["budget_tokens"] if thinking and thinking["type"] == "enabled" else None
        ),
    )


async def render_messages(
    service: RenderService, request: MessagesRenderRequest, client: str
) -> dict[str, Any]:
    """The ``GenerateRequest`` of a Messages request: its chat request, settled against the
    model's template, rendered as the chat route renders it."""
    _, renderer = service.renderer_for(request)
    chat = request.chat
    if request.merged_messages is not None or request.thinking_disabled:
        info = processing_info(renderer)
        if request.merged_messages is not None and merges_inline_system(template_source(info)):
            chat = dataclasses.replace(chat, messages=request.merged_messages)
        if request.thinking_disabled:
            kwargs = bridge.effort_kwargs(request.template_kwargs, disabled_thinking_effort(info))
            chat = dataclasses.replace(chat, chat_template_kwargs=kwargs)
    answer = await service.render_chat(chat, client=client)
    answer["sampling_params"] = bridge.with_sampling_fields(
        answer["sampling_params"],
        watermarking=request.watermarking,
        extra_args=request.extra_args,
        thinking_token_budget=request.thinking_token_budget,
    )
    return answer


__all__ = [
    "BILLING_HEADER",
    "MessagesRenderRequest",
    "convert_messages",
    "disabled_thinking_effort",
    "merges_inline_system",
    "parse_messages_request",
    "render_messages",
    "resolve_tools",
]
