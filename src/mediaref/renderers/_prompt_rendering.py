"""Turning request prompts into engine inputs, in vLLM's four steps (the renderer's non-media half).

1. :meth:`render_prompt` — raw input to a prompt dict (base64 embeddings are loaded);
2. :meth:`tokenize_prompt` — text to token ids under :class:`TokenizeParams` (lower-casing,
   length checks, truncation);
3. ``prompt_extras`` — extra keys added to every prompt;
4. :meth:`process_for_engine` — token ids (and media) to an engine input; multimodal prompts go
   through the processor on the renderer's single multimodal worker.

``render_cmpl`` and ``render_chat`` compose them (:mod:`._compositions`). Each ``_async`` twin
runs the same steps; tokenization runs on a thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from mediaref.exceptions import VLLMValidationError
from mediaref.processing.context import TokenizeParams
from mediaref.renderers._engine_inputs import (
    DictPrompt,
    EngineInput,
    build_enc_dec_input,
    embeds_input,
    load_prompt_embeds,
    tokens_input,
)

if TYPE_CHECKING:
    from mediaref.processing.processor import BaseMultiModalProcessor

_MM_PROMPT_KEYS = (
    "multi_modal_data",
    "mm_processor_kwargs",
    "multi_modal_uuids",
    "media_io_kwargs",
)


class PromptRendering:
    """The prompt steps of :class:`~mediaref.renderers.base.BaseRenderer`."""

    if TYPE_CHECKING:  # supplied by the renderer
        model_config: Any
        mm_processor: BaseMultiModalProcessor[Any] | None

        @property
        def tokenizer(self) -> Any | None: ...

        def get_tokenizer(self) -> Any: ...

        def get_dec_start_token_id(self) -> int: ...

        def _process_multimodal(
            self, prompt: list[int], fields: dict[str, Any], *, skip_mm_cache: bool
        ) -> EngineInput: ...

        async def _process_multimodal_prompt_async(
            self, prompt: list[int], fields: dict[str, Any], *, skip_mm_cache: bool
        ) -> EngineInput: ...

    # -- step 1 --------------------------------------------------------------------------------

    def render_prompt(self, prompt: DictPrompt | bytes) -> DictPrompt:
        """A prompt dict; base64 ``torch.save`` bytes become ``{"prompt_embeds": tensor}``."""
        if isinstance(prompt, bytes):
            enabled = bool(getattr(self.model_config, "enable_prompt_embeds", False))
            return {"prompt_embeds": load_prompt_embeds(enabled, prompt)}
        return prompt

    def render_prompts(self, prompts: Sequence[DictPrompt | bytes]) -> list[DictPrompt]:
        if len(prompts) == 0:
            raise VLLMValidationError("You must pass at least one prompt", parameter="prompt")
        return [self.render_prompt(prompt) for prompt in prompts]

    async def render_prompts_async(self, prompts: Sequence[DictPrompt | bytes]) -> list[DictPrompt]:
        if len(prompts) == 0:
            raise VLLMValidationError("You must pass at least one prompt", parameter="prompt")
        # Loading embeddings deserializes a payload: off the event loop.
        return await asyncio.to_thread(self.render_prompts, prompts)

    # -- step 2 --------------------------------------------------------------------------------

    def _tokenize_singleton(self, prompt: DictPrompt, params: TokenizeParams) -> DictPrompt:
        prompt = dict(prompt)
        if "prompt_token_ids" not in prompt and "prompt_embeds" not in prompt:
            if not isinstance(prompt.get("prompt"), str):
                raise TypeError(
                    "Expected prompt['prompt'] to be a string before tokenization; "
                    "use 'prompt_token_ids' for token ID inputs"
                )
            prompt = params.apply_pre_tokenization(self.tokenizer, prompt)
            params.check_text_tokens(self.tokenizer, prompt["prompt"])
            encoded = self.get_tokenizer().encode(prompt["prompt"], **params.get_encode_kwargs())
            prompt["prompt_token_ids"] = list(encoded)
        prompt = params.apply_post_tokenization(self.tokenizer, prompt)
        if params.needs_detokenization and "prompt" not in prompt:
            if "prompt_token_ids" not in prompt:
                raise RuntimeError("Cannot run detokenization on embeddings")
            prompt["prompt"] = self.get_tokenizer().decode(prompt["prompt_token_ids"])
        return prompt

    def tokenize_prompt(self, prompt: DictPrompt, params: TokenizeParams) -> DictPrompt:
        """Text to token ids (a token or embeddings prompt is only checked)."""
        if "encoder_prompt" in prompt:
            decoder = prompt.get("decoder_prompt")
            return {
                "encoder_prompt": self._tokenize_singleton(prompt["encoder_prompt"], params),
                "decoder_prompt": None
                if decoder is None
                else self._tokenize_singleton(decoder, params),
            }
        return self._tokenize_singleton(prompt, params)

    def tokenize_prompts(
        self, prompts: Sequence[DictPrompt], params: TokenizeParams
    ) -> list[DictPrompt]:
        return [self.tokenize_prompt(prompt, params) for prompt in prompts]

    async def tokenize_prompt_async(self, prompt: DictPrompt, params: TokenizeParams) -> DictPrompt:
        return await asyncio.to_thread(self.tokenize_prompt, prompt, params)

    async def tokenize_prompts_async(
        self, prompts: Sequence[DictPrompt], params: TokenizeParams
    ) -> list[DictPrompt]:
        return list(await asyncio.gather(*(self.tokenize_prompt_async(p, params) for p in prompts)))

    # -- step 3 --------------------------------------------------------------------------------

    @staticmethod
    def _apply_prompt_extras(
        prompts: Sequence[DictPrompt], prompt_extras: dict[str, Any] | None
    ) -> None:
        if not prompt_extras:
            return
        for prompt in prompts:
            # An encoder-decoder prompt's media belong to its encoder prompt.
            target = prompt["encoder_prompt"] if "encoder_prompt" in prompt else prompt
            target.update(prompt_extras)

    # -- step 4 --------------------------------------------------------------------------------

    def _finish_tokens(
        self, engine_input: EngineInput, prompt: DictPrompt, params: TokenizeParams | None
    ) -> EngineInput:
        if prompt_text := prompt.get("prompt"):
            engine_input["prompt"] = prompt_text
        if cache_salt := prompt.get("cache_salt"):
            engine_input["cache_salt"] = cache_salt
        self._truncate_expanded_prompt(engine_input, params)
        return engine_input

    def _process_embeds(self, prompt: DictPrompt) -> EngineInput:
        if not getattr(self.model_config, "enable_prompt_embeds", False):
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

    def _truncate_expanded_prompt(
        self, engine_input: EngineInput, params: TokenizeParams | None
    ) -> None:
        """Truncate again after placeholders expanded; refuse to cut through an item's tokens."""
        if engine_input["type"] != "multimodal" or params is None:
            return
        token_ids = engine_input["prompt_token_ids"]
        cut = params.truncation_slice(len(token_ids), self.tokenizer)
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

    @staticmethod
    def _mm_fields(prompt: DictPrompt) -> dict[str, Any]:
        return {key: prompt.get(key) for key in _MM_PROMPT_KEYS}

    def _process_singleton(
        self, prompt: DictPrompt, *, skip_mm_cache: bool, tok_params: TokenizeParams | None
    ) -> EngineInput:
        if "prompt_embeds" in prompt:
            return self._process_embeds(prompt)
        ids = list(prompt["prompt_token_ids"])
        if prompt.get("multi_modal_data"):
            engine_input = self._process_multimodal(
                ids, self._mm_fields(prompt), skip_mm_cache=skip_mm_cache
            )
        else:
            engine_input = dict(tokens_input(ids))
        return self._finish_tokens(engine_input, prompt, tok_params)

    async def _process_singleton_async(
        self, prompt: DictPrompt, *, skip_mm_cache: bool, tok_params: TokenizeParams | None
    ) -> EngineInput:
        if "prompt_embeds" in prompt or not prompt.get("multi_modal_data"):
            return self._process_singleton(
                prompt, skip_mm_cache=skip_mm_cache, tok_params=tok_params
            )
        engine_input = await self._process_multimodal_prompt_async(
            list(prompt["prompt_token_ids"]), self._mm_fields(prompt), skip_mm_cache=skip_mm_cache
        )
        return self._finish_tokens(engine_input, prompt, tok_params)

    def _skip_decoder_start_token(self) -> bool:
        return bool(getattr(self.mm_processor, "skip_decoder_start_token", False))

    def process_for_engine(
        self,
        prompt: DictPrompt,
        arrival_time: float,
        *,
        skip_mm_cache: bool = False,
        tok_params: TokenizeParams | None = None,
    ) -> EngineInput:
        """A tokenized prompt as an engine input (media processed), stamped ``arrival_time``."""
        if "encoder_prompt" in prompt:
            decoder = prompt["decoder_prompt"]
            engine_input = build_enc_dec_input(
                self._process_singleton(
                    prompt["encoder_prompt"], skip_mm_cache=skip_mm_cache, tok_params=None
                ),
                None
                if decoder is None
                else self._process_singleton(decoder, skip_mm_cache=skip_mm_cache, tok_params=None),
                self.get_dec_start_token_id(),
                self._skip_decoder_start_token(),
            )
        else:
            engine_input = self._process_singleton(
                prompt, skip_mm_cache=skip_mm_cache, tok_params=tok_params
            )
        engine_input["arrival_time"] = arrival_time
        return engine_input

    async def process_for_engine_async(
        self,
        prompt: DictPrompt,
        arrival_time: float,
        *,
        skip_mm_cache: bool = False,
        tok_params: TokenizeParams | None = None,
    ) -> EngineInput:
        """:meth:`process_for_engine`; the media wait off the event loop."""
        if "encoder_prompt" in prompt:
            decoder = prompt["decoder_prompt"]
            encoder_input = await self._process_singleton_async(
                prompt["encoder_prompt"], skip_mm_cache=skip_mm_cache, tok_params=None
            )
            decoder_input = (
                None
                if decoder is None
                else await self._process_singleton_async(
                    decoder, skip_mm_cache=skip_mm_cache, tok_params=None
                )
            )
            engine_input = build_enc_dec_input(
                encoder_input,
                decoder_input,
                self.get_dec_start_token_id(),
                self._skip_decoder_start_token(),
            )
        else:
            engine_input = await self._process_singleton_async(
                prompt, skip_mm_cache=skip_mm_cache, tok_params=tok_params
            )
        engine_input["arrival_time"] = arrival_time
        return engine_input


__all__ = ["PromptRendering"]
