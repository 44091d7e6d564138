"""``POST /v1/responses/render``: an OpenAI Responses request, rendered as vLLM 0.33 renders it.

vLLM's render server (``render_responses_request``) turns the request's ``instructions`` and
``input`` into chat messages (``construct_input_messages``) and renders them with the chat
template; mediaref builds the chat route's request of them
(:func:`~mediaref.serve.protocol.parse_chat_request`, its checks included) and renders that:

- ``instructions`` is a system message first; ``input`` a string (one user message) or items:
  messages (``input_text`` / ``input_image`` parts, an assistant's ``output_text``),
  ``function_call`` (an assistant's tool call, joining the assistant message before it),
  ``function_call_output`` (a tool message), ``reasoning`` (an assistant's reasoning),
  ``custom_tool_call`` and its output; a last item still ``in_progress`` / ``incomplete`` is
  continued rather than answered;
- ``tools`` of type ``function`` are the template's tools (the built-in kinds are dropped, as vLLM
  drops them outside Harmony models), ``reasoning.effort`` the template's ``reasoning_effort``;
- ``max_output_tokens`` is the output budget, ``include: ["message.output_text.logprobs"]`` with
  ``top_logprobs`` the logprobs; the sampling fields are the chat route's.

The answer is vLLM's: the request's own ``request_id`` (``resp_...``, no prefix; an
``X-Request-Id`` header is not read), no ``parse_context``, ``extra_args`` in the sampling params.
``previous_response_id`` is refused as vLLM's stateless render refuses it. Refused because this
server cannot mirror them: ``text.format`` / ``structured_outputs`` (structured output),
``logit_bias``, ``custom`` and ``namespace`` tools, ``input_file`` parts and image ``file_id`` s.
``truncation: "auto"`` is taken, but a prompt over the context is refused, not truncated.

This module is the route's front: the converted request (:class:`ResponsesRenderRequest`), how a
body becomes one (:func:`parse_responses_request`) and how it renders (:func:`render_responses`).
Each step lives in a private module of its own, re-exported here so that this path stays the one
to import:

- :mod:`._responses_input`: ``instructions`` and ``input`` items as chat messages
  (:func:`input_messages`);
- :mod:`._responses_tools`: ``tools`` as chat function tools, ``tool_choice`` checked;
- :mod:`._responses_fields`: the fields with no chat counterpart (``include`` logprobs,
  ``reasoning.effort``, ``extra_args``) and those refused.
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mediaref.exceptions import VLLMValidationError
from mediaref.serve import _chat_bridge as bridge
from mediaref.serve import _fields as f
from mediaref.serve._responses_fields import (
    CHAT_FIELDS,
    LOGPROBS_INCLUDE,
    logprobs_fields,
    reasoning_effort,
    refuse_unmirrored,
    sampling_extra_args,
)
from mediaref.serve._responses_input import input_messages
from mediaref.serve._responses_tools import chat_tools, check_tool_choice
from mediaref.serve.options import ServeOptions
from mediaref.serve.protocol import parse_chat_request

if TYPE_CHECKING:
    from mediaref.serve.service import RenderService


@dataclass(frozen=True)
class ResponsesRenderRequest(bridge.BridgedRequest):
    """A ``/v1/responses/render`` body, checked and converted: the chat request it renders as,
    and what its answer has that a chat answer has not."""

    previous_response_id: str | None
    watermarking: bool | None
    extra_args: dict[str, Any] | None
    """``sampling_params.extra_args`` as vLLM writes it (None: left out)."""


def parse_responses_request(
    body: object, options: ServeOptions, *, request_id: str | None = None
) -> ResponsesRenderRequest:
    """A ``/v1/responses/render`` body, checked and converted. ``request_id`` (the X-Request-Id
    header) is not read: vLLM names a Responses request by its body's ``request_id`` only."""
    del request_id
    if not isinstance(body, dict):
        raise VLLMValidationError("the request body must be a JSON object")
    refuse_unmirrored(body)
    if "input" not in body:
        raise f.refuse("input", "a string or an array of input items", None)
    messages, continues = input_messages(f.get_str(body, "instructions", None), body["input"])
    if not messages:
        raise VLLMValidationError(
            "Cannot apply chat template to an empty conversation. Provide at least one message.",
            parameter="input",
        )
    tools = chat_tools(body)
    check_tool_choice(body, tools)
    f.get_choice(body, "truncation", ("auto", "disabled"), "disabled")
    f.refuse_nulls(body, ("request_id",))
    chat: dict[str, Any] = {
        "model": f.get_str(body, "model", None),
        "messages": messages,
        "add_generation_prompt": not continues,
        "continue_final_message": continues,
        "max_tokens": body.get("max_output_tokens"),
        "stream": body.get("stream"),
        **{name: body[name] for name in CHAT_FIELDS if name in body},
        **logprobs_fields(body),
    }
    bridge.pass_through(body, chat)
    chat["chat_template_kwargs"] = bridge.effort_kwargs(
        f.get_dict(body, "chat_template_kwargs"), reasoning_effort(body)
    )
    if tools:
        chat["tools"] = tools
    name = f.get_str(body, "request_id", None) or f"resp_{uuid.uuid4().int & (2**64 - 1):016x}"
    parsed = bridge.with_tools(parse_chat_request(chat, options, request_id=name), tools)
    # The output budget's errors name the Responses field, as vLLM's TokenizeParams does.
    sampling = dataclasses.replace(parsed.sampling, max_tokens_param="max_output_tokens")
    return ResponsesRenderRequest(
        chat=dataclasses.replace(parsed, sampling=sampling),
        previous_response_id=f.get_str(body, "previous_response_id", None),
        watermarking=f.get_bool(body, "watermarking", None),
        extra_args=sampling_extra_args(body),
    )


async def render_responses(
    service: RenderService, request: ResponsesRenderRequest, client: str
) -> dict[str, Any]:
    """The ``GenerateRequest`` of a Responses request (its model checked first, as vLLM does)."""
    service.renderer_for(request)
    if request.previous_response_id is not None:
        raise VLLMValidationError(
            "previous_response_id is not supported by the stateless render endpoint.",
            parameter="previous_response_id",
        )
    # vLLM's Responses rendering has no tool-choice check of the chat route's.
    answer = await service.render_chat(request.chat, client=client, check_tool_choice=False)
    answer["request_id"] = request.request_id
    answer["sampling_params"] = bridge.with_sampling_fields(
        answer["sampling_params"], watermarking=request.watermarking, extra_args=request.extra_args
    )
    answer["parse_context"] = None
    return answer


__all__ = [
    "LOGPROBS_INCLUDE",
    "ResponsesRenderRequest",
    "input_messages",
    "parse_responses_request",
    "render_responses",
]
