"""The renderer's prompt steps that need no media: tokenizing a prompt, loading and checking prompt
embeddings, and finishing a token prompt into an engine input.

Plain functions over explicit arguments (the prompt, its :class:`TokenizeParams`, the tokenizer),
so :class:`~mediaref.renderers.base.BaseRenderer` holds the flow and these hold the work.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from mediaref.exceptions import VLLMValidationError
from mediaref.processing.context import TokenizeParams
from mediaref.renderers._engine_inputs import DictPrompt, EngineInput, embeds_input

MM_PROMPT_KEYS = ("multi_modal_data", "mm_processor_kwargs", "multi_modal_uuids", "media_io_kwargs")
"""A prompt's multimodal fields, handed to multimodal processing together."""


def require_tokenizer(tokenizer: Any | None) -> Any:
    if tokenizer is None:
        raise ValueError("Tokenizer not available when `skip_tokenizer_init=True`")
    return tokenizer


def tokenize_singleton(
    prompt: DictPrompt, params: TokenizeParams, tokenizer: Any | None
) -> DictPrompt:
    """One prompt's text to token ids under ``params`` (a token or embeddings prompt is only
    checked and post-processed)."""
    prompt = dict(prompt)
    if "prompt_token_ids" not in prompt and "prompt_embeds" not in prompt:
        if not isinstance(prompt.get("prompt"), str):
            raise TypeError(
                "Expected prompt['prompt'] to be a string before tokenization; "
                "use 'prompt_token_ids' for token ID inputs"
            )
        prompt = params.apply_pre_tokenization(tokenizer, prompt)
        params.check_text_tokens(tokenizer, prompt["prompt"])
        encoded = require_tokenizer(tokenizer).encode(
            prompt["prompt"], **params.get_encode_kwargs()
        )
        prompt["prompt_token_ids"] = list(encoded)
    prompt = params.apply_post_tokenization(tokenizer, prompt)
    if params.needs_detokenization and "prompt" not in prompt:
        if "prompt_token_ids" not in prompt:
            raise RuntimeError("Cannot run detokenization on embeddings")
        prompt["prompt"] = require_tokenizer(tokenizer).decode(prompt["prompt_token_ids"])
    return prompt


def apply_prompt_extras(
    prompts: Sequence[DictPrompt], prompt_extras: dict[str, Any] | None
) -> None:
    """Add ``prompt_extras`` to every prompt (an encoder-decoder prompt's media belong to its
    encoder prompt)."""
    if not prompt_extras:
        return
    for prompt in prompts:
        target = prompt["encoder_prompt"] if "encoder_prompt" in prompt else prompt
        target.update(prompt_extras)


def embeds_engine_input(prompt: DictPrompt, enable_prompt_embeds: bool) -> EngineInput:
    """An embeddings prompt as an engine input: a ``(seq_len, hidden_size)`` tensor on the CPU."""
    if not enable_prompt_embeds:
        raise VLLMValidationError(
            "You must set `--enable-prompt-embeds` to input `prompt_embeds`.",
            parameter="prompt_embeds",
        )
    embeds = prompt["prompt_embeds"]
    if embeds.ndim == 3:
        embeds = embeds.squeeze(dim=0)  # a batch of one is unambiguous
    if embeds.ndim != 2:
        raise VLLMValidationError(
            "prompt_embeds must be of shape (seq_len, hidden_size).", parameter="prompt_embeds"
        )
    return dict(
        embeds_input(
            embeds.cpu(),
            cache_salt=prompt.get("cache_salt"),
            prompt_token_ids=prompt.get("prompt_token_ids"),
            is_token_ids=prompt.get("prompt_is_token_ids"),
        )
    )


def finish_tokens(
    engine_input: EngineInput,
    prompt: DictPrompt,
    params: TokenizeParams | None,
    tokenizer: Any | None,
) -> EngineInput:
    """Carry the prompt's text and cache salt over, and truncate what placeholders expanded."""
    if prompt_text := prompt.get("prompt"):
        engine_input["prompt"] = prompt_text
    if cache_salt := prompt.get("cache_salt"):
        engine_input["cache_salt"] = cache_salt
    _truncate_expanded_prompt(engine_input, params, tokenizer)
    return engine_input


def _truncate_expanded_prompt(
    engine_input: EngineInput, params: TokenizeParams | None, tokenizer: Any | None
) -> None:
    """Truncate again after placeholders expanded; refuse to cut through an item's tokens."""
    if engine_input["type"] != "multimodal" or params is None:
        return
    token_ids = engine_input["prompt_token_ids"]
    cut = params.truncation_slice(len(token_ids), tokenizer)
    if cut is None:
        return
    start, stop, _ = cut.indices(len(token_ids))
    for modality, ranges in engine_input["mm_placeholders"].items():
        for placeholder in ranges:
            end = placeholder.offset + placeholder.length
            if placeholder.offset < start or end > stop:
                raise VLLMValidationError(
                    f"truncate_prompt_tokens={params.truncate_prompt_tokens} would split or "
                    f"drop a(n) {modality} item, which spans tokens {placeholder.offset} to "
                    f"{end} of the {len(token_ids)}-token prompt.",
                    parameter="truncate_prompt_tokens",
                    value=params.truncate_prompt_tokens,
                )
    if start:
        engine_input["mm_placeholders"] = {
            m: [replace(p, offset=p.offset - start) for p in ranges]
            for m, ranges in engine_input["mm_placeholders"].items()
        }
    engine_input["prompt_token_ids"] = token_ids[cut]


__all__ = [
    "MM_PROMPT_KEYS",
    "apply_prompt_extras",
    "embeds_engine_input",
    "finish_tokens",
    "require_tokenizer",
    "tokenize_singleton",
]
