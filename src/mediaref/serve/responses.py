"""The render routes' response shape: vLLM 0.33's ``GenerateRequest``, as JSON.

What ``/v1/chat/completions/render`` answers (and ``/v1/completions/render`` answers a list of,
one per prompt) is the request a generate server takes next::

    {"request_id": "chatcmpl-...", "token_ids": [...], "token_offsets": null,
     "features": {...} | null,          # mediaref.serve.features; null for text-only prompts
     "content_parts": null,
     "sampling_params": {...}, "model": ..., "reasoning_ended": null,
     "reasoning_parser_kwargs": null, "return_token_ids": ..., "output_mode": "tokens",
     "parse_context": {...} | null, "stream": false, "stream_options": null,
     "cache_salt": ..., "priority": 0, "kv_transfer_params": ..., "ec_transfer_params": ...}

``sampling_params`` is vLLM's ``SamplingParams`` as its render server writes it (msgspec's dump
with ``omit_defaults``): the request's values, validated and normalized as ``SamplingParams``
leaves them, over OpenAI's defaults, ``max_tokens`` resolved as vLLM's ``get_max_tokens`` does
(at most the context left after the prompt): :mod:`mediaref.serve.sampling`.
"""

from __future__ import annotations

from typing import Any

from mediaref.serve.protocol import ChatRenderRequest, RenderCommon
from mediaref.serve.sampling import sampling_params_json

COHERE_FORMAT = "cmd4"
"""vLLM's ``--cohere-format`` default, which its server puts in every chat request's
``chat_template_kwargs`` (only Cohere's templates read it)."""


def _history_tool_calls(messages: list[Any]) -> int:
    return sum(
        len(m.get("tool_calls") or ())
        for m in messages
        if m.get("role") == "assistant" and isinstance(m.get("tool_calls"), list)
    )


def parse_context(request: ChatRenderRequest) -> dict[str, Any]:
    """vLLM's ``ParseContext``: what a generate server needs to parse the chat's output."""
    return {
        "tools": request.tools,
        "tool_choice": request.tool_choice,
        "parallel_tool_calls": request.parallel_tool_calls,
        "include_reasoning": request.include_reasoning,
        "chat_template_kwargs": {
            # vLLM's server-wide default (its --cohere-format), the request's, then the two
            # the render settles: what its effective_chat_template_kwargs hands on.
            "cohere_format": COHERE_FORMAT,
            **request.chat_template_kwargs,
            "add_generation_prompt": request.add_generation_prompt,
            "continue_final_message": request.continue_final_message,
        },
        "history_tool_call_cnt": _history_tool_calls(request.messages),
    }


def generate_request(
    request: RenderCommon,
    *,
    request_id: str,
    token_ids: list[int],
    features: dict[str, Any] | None,
    max_model_len: int,
    context: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One ``GenerateRequest`` as JSON."""
    return {
        "request_id": request_id,
        "token_ids": token_ids,
        "token_offsets": None,
        "features": features,
        "content_parts": None,
        "sampling_params": sampling_params_json(
            request.sampling.resolve(len(token_ids), max_model_len), stream=request.stream
        ),
        "model": request.model,
        "reasoning_ended": None,
        "reasoning_parser_kwargs": None,
        "return_token_ids": request.return_token_ids,
        "output_mode": "tokens",
        "parse_context": context,
        "stream": request.stream,
        "stream_options": request.stream_options if request.stream else None,
        "cache_salt": request.cache_salt,
        "priority": request.priority,
        "kv_transfer_params": request.kv_transfer_params,
        "ec_transfer_params": request.ec_transfer_params,
    }


__all__ = [
    "COHERE_FORMAT",
    "generate_request",
    "parse_context",
]
