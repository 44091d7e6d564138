"""The shapes prompts take on their way to the engine (vLLM's ``vllm.inputs``), and building them.

A request's prompt is a dict: ``{"prompt": text}``, ``{"prompt_token_ids": ids}`` or
``{"prompt_embeds": tensor}`` (with ``multi_modal_data`` and friends alongside), or
``{"encoder_prompt": ..., "decoder_prompt": ...}`` for an encoder-decoder model. The renderer
turns it into an engine input: ``{"type": "token" | "embeds" | "multimodal" | "enc_dec", ...}``.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from typing_extensions import TypedDict  # pydantic on Python < 3.12, as vLLM's

from mediaref.exceptions import VLLMValidationError

DictPrompt = dict[str, Any]
"""A prompt as a dict (text, token ids or embeddings; or an encoder-decoder pair)."""

EngineInput = dict[str, Any]
"""What the renderer hands the engine (``"type"`` says which kind)."""


class TokensInput(TypedDict, total=False):
    type: Literal["token"]
    prompt_token_ids: list[int]
    prompt: str
    cache_salt: str
    arrival_time: float


class EmbedsInput(TypedDict, total=False):
    type: Literal["embeds"]
    prompt_embeds: torch.Tensor
    prompt: str
    cache_salt: str
    prompt_token_ids: list[int]
    is_token_ids: list[bool]
    arrival_time: float


def tokens_input(
    prompt_token_ids: list[int], *, prompt: str | None = None, cache_salt: str | None = None
) -> TokensInput:
    out = TokensInput(type="token", prompt_token_ids=prompt_token_ids)
    if prompt is not None:
        out["prompt"] = prompt
    if cache_salt is not None:
        out["cache_salt"] = cache_salt
    return out


def embeds_input(
    prompt_embeds: torch.Tensor,
    *,
    cache_salt: str | None = None,
    prompt_token_ids: list[int] | None = None,
    is_token_ids: list[bool] | None = None,
) -> EmbedsInput:
    out = EmbedsInput(type="embeds", prompt_embeds=prompt_embeds)
    if cache_salt is not None:
        out["cache_salt"] = cache_salt
    if prompt_token_ids is not None:
        out["prompt_token_ids"] = prompt_token_ids
    if is_token_ids is not None:
        out["is_token_ids"] = is_token_ids
    return out


def build_enc_dec_input(
    encoder_input: EngineInput,
    decoder_input: EngineInput | None,
    decoder_start_token_id: int,
    skip_decoder_start_token: bool = False,
) -> EngineInput:
    """An encoder-decoder engine input; a multimodal encoder input moves its media to the
    decoder side (the encoder keeps its token ids), and the decoder starts with its start token."""
    for side in (encoder_input, decoder_input):
        if side is not None and side["type"] == "embeds":
            raise VLLMValidationError(
                "Embedding inputs are not supported for encoder-decoder models"
            )
    if encoder_input["type"] == "multimodal" and "encoder_prompt_token_ids" not in encoder_input:
        raise RuntimeError(
            "You should register an encoder-decoder multi-modal processor for "
            "encoder-decoder models."
        )
    decoder = encoder_input if decoder_input is None else decoder_input
    if encoder_input["type"] == "multimodal":
        encoder: EngineInput = dict(
            tokens_input(
                encoder_input["encoder_prompt_token_ids"],
                prompt=encoder_input.get("encoder_prompt"),
            )
        )
        new_decoder: EngineInput = {
            "type": "multimodal",
            "prompt_token_ids": decoder["prompt_token_ids"],
            "mm_kwargs": encoder_input["mm_kwargs"],
            "mm_hashes": encoder_input["mm_hashes"],
            "mm_placeholders": encoder_input["mm_placeholders"],
        }
        if "prompt" in decoder:
            new_decoder["prompt"] = decoder["prompt"]
    else:
        encoder = dict(tokens_input([]))
        new_decoder = dict(decoder)
    if not skip_decoder_start_token:
        ids = list(new_decoder["prompt_token_ids"])
        if not ids or ids[0] != decoder_start_token_id:
            ids = [decoder_start_token_id, *ids]
        new_decoder["prompt_token_ids"] = ids
    if cache_salt := encoder_input.get("cache_salt"):
        new_decoder["cache_salt"] = cache_salt
    return {"type": "enc_dec", "encoder_prompt": encoder, "decoder_prompt": new_decoder}


__all__ = [
    "DictPrompt",
    "EmbedsInput",
    "EngineInput",
    "TokensInput",
    "build_enc_dec_input",
    "embeds_input",
    "tokens_input",
]
