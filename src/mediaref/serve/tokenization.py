"""``POST /tokenize`` and ``POST /detokenize``, as vLLM 0.33's render server answers them.

``/tokenize`` takes a completions-style body (``prompt``, ``add_special_tokens`` default true) or
a chat-style one (``messages`` and a chat request's fields; its media processed as a render
would, so the count holds each item's placeholder tokens) and answers vLLM's
``TokenizeResponse``::

    {"count": 7, "max_model_len": 32768, "tokens": [...], "token_strs": null}

with ``token_strs`` the tokens' strings when ``return_token_strs`` is true. ``/detokenize`` takes
``tokens`` (integers in [0, 2**63)) and answers ``{"prompt": "..."}``, the tokenizer's decoding
with special tokens kept. Both are 400 for a malformed body and 404 for an unknown ``model``,
like the render routes, and go through the same front door.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from mediaref.exceptions import VLLMValidationError
from mediaref.serve import _fields as f
from mediaref.serve.options import ServeOptions
from mediaref.serve.protocol import ChatRenderRequest, parse_chat_request
from mediaref.serve.service import RenderService

_INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class TokenizeRequest:
    """A ``/tokenize`` body: a chat (``chat``) or a text prompt (``prompt``)."""

    model: str | None
    request_id: str
    return_token_strs: bool
    chat: ChatRenderRequest | None = None
    prompt: str = ""
    add_special_tokens: bool = True


@dataclass(frozen=True)
class DetokenizeRequest:
    model: str | None
    request_id: str
    tokens: list[int]


def _object(body: object) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise VLLMValidationError("the request body must be a JSON object")
    return body


def parse_tokenize_request(
    body: object, options: ServeOptions, *, request_id: str | None = None
) -> TokenizeRequest:
    body = _object(body)
    model = f.get_str(body, "model", None)
    rid = request_id or uuid.uuid4().hex
    strs = bool(f.get_bool(body, "return_token_strs", False))
    if "messages" in body:
        chat = parse_chat_request({**body, "mm_payload": "none"}, options, request_id=rid)
        return TokenizeRequest(model, rid, strs, chat=chat)
    prompt = f.get_str(body, "prompt", None)
    if prompt is None:
        raise f.refuse("prompt", "a string (or give messages)", body.get("prompt"))
    add_special_tokens = bool(f.get_bool(body, "add_special_tokens", True))
    return TokenizeRequest(model, rid, strs, prompt=prompt, add_special_tokens=add_special_tokens)


def parse_detokenize_request(
    body: object, options: ServeOptions, *, request_id: str | None = None
) -> DetokenizeRequest:
    body = _object(body)
    tokens = f.get_int_list(body, "tokens")
    if tokens is None:
        raise f.refuse("tokens", "an array of token ids", None)
    if any(not 0 <= t <= _INT64_MAX for t in tokens):
        raise f.refuse("tokens", f"token ids in [0, {_INT64_MAX}]", tokens)
    return DetokenizeRequest(
        model=f.get_str(body, "model", None),
        request_id=request_id or uuid.uuid4().hex,
        tokens=tokens,
    )


async def tokenize(service: RenderService, request: TokenizeRequest, client: str) -> dict[str, Any]:
    """vLLM's ``TokenizeResponse`` for ``request``."""
    name, renderer = service.renderer_for(request)
    if request.chat is not None:
        rendered = await service.render_chat(request.chat, client=client)
        tokens: list[int] = rendered["token_ids"]
    else:
        tokens = await service.tokenize_text(
            name, request.prompt, add_special_tokens=request.add_special_tokens, client=client
        )
    strs = None
    if request.return_token_strs:
        strs = list(renderer.get_tokenizer().convert_ids_to_tokens(tokens))
    return {
        "count": len(tokens),
        "max_model_len": renderer.model_config.derived_max_model_len,
        "tokens": tokens,
        "token_strs": strs,
    }


async def detokenize(
    service: RenderService, request: DetokenizeRequest, client: str
) -> dict[str, Any]:
    """vLLM's ``DetokenizeResponse``: the tokens decoded, special tokens kept."""
    _, renderer = service.renderer_for(request)
    renderer.validate_token_ids(request.tokens, parameter="tokens")
    text = await service.pool.run(client, renderer.get_tokenizer().decode, request.tokens)
    return {"prompt": str(text)}


__all__ = [
    "DetokenizeRequest",
    "TokenizeRequest",
    "detokenize",
    "parse_detokenize_request",
    "parse_tokenize_request",
    "tokenize",
]
