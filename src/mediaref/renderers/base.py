"""The renderer: a model's prompts to engine inputs, multimodal processing on one worker.

vLLM's ``BaseRenderer``, whose public methods are vLLM's, read as one flow:

1. render: :meth:`~BaseRenderer.render_prompt` (base64 embeddings loaded) or, for chat,
   :meth:`~BaseRenderer.render_messages` (messages parsed, media fetched as lazy refs, the chat
   template applied);
2. tokenize: :meth:`~BaseRenderer.tokenize_prompt`, under :class:`TokenizeParams`;
3. ``prompt_extras`` added to every prompt;
4. process: :meth:`~BaseRenderer.process_for_engine`, multimodal prompts through the processor.

``render_cmpl`` and ``render_chat`` compose the four; each ``_async`` twin runs the same steps,
with tokenization on a thread and the media wait off the event loop. The work is done by stages:
the prompt steps that need no media (:mod:`._prompt_steps`: functions over the prompt, its params
and the tokenizer) and, one level down (:class:`~._renderer_model.RendererModel`: construction,
tokenizer and model facts, vLLM's multimodal methods), the multimodal worker
(:class:`~._mm_worker.MultiModalWorker`: the one processing thread, the processor caches, the
warmup).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any, TypeVar

from mediaref.cache import (
    BaseMultiModalProcessorCache,
    processor_cache_from_config,
    processor_only_cache_from_config,
)
from mediaref.exceptions import VLLMValidationError
from mediaref.parse import MultiModalDataItems, MultiModalUUIDItems, parse_mm_uuids
from mediaref.processing import BaseMultiModalProcessor
from mediaref.processing import ProcessorInputs as MMProcessorInputs
from mediaref.processing.context import TokenizeParams
from mediaref.registry import MULTIMODAL_REGISTRY as mm_registry
from mediaref.registry import MultiModalTimingRegistry
from mediaref.renderers._engine_inputs import (
    DictPrompt,
    EngineInput,
    build_enc_dec_input,
    tokens_input,
)
from mediaref.renderers._mm_worker import MultiModalRequest
from mediaref.renderers._params import ChatParams, MultiModalCacheStats
from mediaref.renderers._prompt_steps import (
    MM_PROMPT_KEYS,
    apply_prompt_extras,
    embeds_engine_input,
    finish_tokens,
    tokenize_singleton,
)
from mediaref.renderers._renderer_model import RendererModel
from mediaref.renderers.embed_utils import safe_load_prompt_embeds

logger = logging.getLogger(__name__)

_T = TypeVar("_T")


class BaseRenderer(RendererModel[_T]):
    """Turns a model's prompts, with their multimodal data, into engine inputs.

    ``config`` is a :class:`~mediaref.processing.context.ModelConfig` or a ``VllmConfig``-shaped
    object (``.model_config``, and optionally ``.observability_config``, ``.scheduler_config``,
    ``.parallel_config``); ``tokenizer`` defaults to the model's own, and ``None`` means none
    (token-id prompts only).
    """

    # vLLM's name for step 3 (a renderer may override it).
    _apply_prompt_extras = staticmethod(apply_prompt_extras)

    # -- the compositions ----------------------------------------------------------------------

    def render_cmpl(
        self,
        prompts: Sequence[DictPrompt | bytes],
        tok_params: TokenizeParams | None = None,
        *,
        prompt_extras: dict[str, Any] | None = None,
        skip_mm_cache: bool = False,
    ) -> list[EngineInput]:
        """Completion prompts to engine inputs."""
        arrival_time = time.time()
        params = tok_params or self.default_cmpl_tok_params
        tokenized = self.tokenize_prompts(self.render_prompts(prompts), params)
        self._apply_prompt_extras(tokenized, prompt_extras)
        return [
            self.process_for_engine(p, arrival_time, skip_mm_cache=skip_mm_cache, tok_params=params)
            for p in tokenized
        ]

    async def render_cmpl_async(
        self,
        prompts: Sequence[DictPrompt | bytes],
        tok_params: TokenizeParams | None = None,
        *,
        prompt_extras: dict[str, Any] | None = None,
        skip_mm_cache: bool = False,
    ) -> list[EngineInput]:
        arrival_time = time.time()
        params = tok_params or self.default_cmpl_tok_params
        rendered = await self.render_prompts_async(prompts)
        tokenized = await self.tokenize_prompts_async(rendered, params)
        self._apply_prompt_extras(tokenized, prompt_extras)
        return await self._process_all_async(tokenized, arrival_time, skip_mm_cache, params)

    def render_chat(
        self,
        conversations: Sequence[list[Any]],
        chat_params: ChatParams,
        tok_params: TokenizeParams | None = None,
        *,
        prompt_extras: dict[str, Any] | None = None,
        skip_mm_cache: bool = False,
    ) -> tuple[list[list[Any]], list[EngineInput]]:
        """Chat conversations to (their parsed conversations, engine inputs)."""
        arrival_time = time.time()
        params = tok_params or self.default_chat_tok_params
        rendered = [self.render_messages(messages, chat_params) for messages in conversations]
        tokenized = self.tokenize_prompts([prompt for _, prompt in rendered], params)
        self._apply_prompt_extras(tokenized, _chat_extras(chat_params, prompt_extras))
        engine_inputs = [
            self.process_for_engine(p, arrival_time, skip_mm_cache=skip_mm_cache, tok_params=params)
            for p in tokenized
        ]
        return [conversation for conversation, _ in rendered], engine_inputs

    async def render_chat_async(
        self,
        conversations: Sequence[list[Any]],
        chat_params: ChatParams,
        tok_params: TokenizeParams | None = None,
        *,
        prompt_extras: dict[str, Any] | None = None,
        skip_mm_cache: bool = False,
    ) -> tuple[list[list[Any]], list[EngineInput]]:
        arrival_time = time.time()
        params = tok_params or self.default_chat_tok_params
        rendered = await asyncio.gather(
            *(self.render_messages_async(messages, chat_params) for messages in conversations)
        )
        tokenized = await self.tokenize_prompts_async([prompt for _, prompt in rendered], params)
        self._apply_prompt_extras(tokenized, _chat_extras(chat_params, prompt_extras))
        engine_inputs = await self._process_all_async(
            tokenized, arrival_time, skip_mm_cache, params
        )
        return [conversation for conversation, _ in rendered], engine_inputs

    async def _process_all_async(
        self,
        prompts: list[DictPrompt],
        arrival_time: float,
        skip_mm_cache: bool,
        params: TokenizeParams,
    ) -> list[EngineInput]:
        return list(
            await asyncio.gather(
                *(
                    self.process_for_engine_async(
                        p, arrival_time, skip_mm_cache=skip_mm_cache, tok_params=params
                    )
                    for p in prompts
                )
            )
        )

    # -- 1. render -----------------------------------------------------------------------------

    def render_prompt(self, prompt: DictPrompt | bytes) -> DictPrompt:
        """A prompt dict; base64 ``torch.save`` bytes become ``{"prompt_embeds": tensor}``."""
        if isinstance(prompt, bytes):
            return {"prompt_embeds": safe_load_prompt_embeds(self.model_config, prompt)}
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

    def render_messages(
        self, messages: list[Any], params: ChatParams
    ) -> tuple[list[Any], DictPrompt]:
        """Chat messages to (the conversation, a text prompt with lazy media)."""
        from mediaref.renderers.chat_utils import parse_chat_messages

        conversation, mm_data, mm_uuids = parse_chat_messages(
            messages,
            self._chat_model(),
            params.chat_template_content_format,  # type: ignore[arg-type]
            params.media_io_kwargs,
            params.mm_processor_kwargs,
            chat_template=params.chat_template,
        )
        return conversation, self._rendered_prompt(conversation, mm_data, mm_uuids, params)

    async def render_messages_async(
        self, messages: list[Any], params: ChatParams
    ) -> tuple[list[Any], DictPrompt]:
        """:meth:`render_messages`, fetching the media concurrently, off the event loop."""
        from mediaref.renderers.chat_utils import parse_chat_messages_async

        conversation, mm_data, mm_uuids = await parse_chat_messages_async(
            messages,
            self._chat_model(),
            params.chat_template_content_format,  # type: ignore[arg-type]
            params.media_io_kwargs,
            params.mm_processor_kwargs,
            chat_template=params.chat_template,
        )
        prompt = await asyncio.to_thread(
            self._rendered_prompt, conversation, mm_data, mm_uuids, params
        )
        return conversation, prompt

    def _chat_model(self) -> Any:
        # The processing info shares the renderer's loaded HF processor and tokenizer.
        return self.mm_processor.info if self.mm_processor is not None else self.model_config

    def _rendered_prompt(
        self, conversation: list[Any], mm_data: Any, mm_uuids: Any, params: ChatParams
    ) -> DictPrompt:
        from mediaref.renderers.chat_utils import apply_chat_template

        kwargs = dict(params.chat_template_kwargs)
        text = apply_chat_template(
            self._chat_model(),
            conversation,
            chat_template=params.chat_template,
            add_generation_prompt=bool(kwargs.pop("add_generation_prompt", True)),
            continue_final_message=bool(kwargs.pop("continue_final_message", False)),
            tools=kwargs.pop("tools", None),
            chat_template_kwargs=kwargs,
        )
        prompt: DictPrompt = {"prompt": text}
        if mm_data is not None:
            prompt["multi_modal_data"] = mm_data
        if mm_uuids is not None:
            prompt["multi_modal_uuids"] = mm_uuids
        return prompt

    # -- 2. tokenize ---------------------------------------------------------------------------

    def tokenize_prompt(self, prompt: DictPrompt, params: TokenizeParams) -> DictPrompt:
        """Text to token ids (a token or embeddings prompt is only checked)."""
        tokenizer = self.tokenizer
        if "encoder_prompt" in prompt:
            decoder = prompt.get("decoder_prompt")
            return {
                "encoder_prompt": tokenize_singleton(prompt["encoder_prompt"], params, tokenizer),
                "decoder_prompt": None
                if decoder is None
                else tokenize_singleton(decoder, params, tokenizer),
            }
        return tokenize_singleton(prompt, params, tokenizer)

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

    # -- 4. process ----------------------------------------------------------------------------

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
            encoder_input = self._process_singleton(
                prompt["encoder_prompt"], skip_mm_cache=skip_mm_cache, tok_params=None
            )
            decoder_input = (
                None
                if decoder is None
                else self._process_singleton(decoder, skip_mm_cache=skip_mm_cache, tok_params=None)
            )
            engine_input = self._enc_dec_input(encoder_input, decoder_input)
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
            engine_input = self._enc_dec_input(encoder_input, decoder_input)
        else:
            engine_input = await self._process_singleton_async(
                prompt, skip_mm_cache=skip_mm_cache, tok_params=tok_params
            )
        engine_input["arrival_time"] = arrival_time
        return engine_input

    def _process_singleton(
        self, prompt: DictPrompt, *, skip_mm_cache: bool, tok_params: TokenizeParams | None
    ) -> EngineInput:
        if "prompt_embeds" in prompt:
            return embeds_engine_input(prompt, self._prompt_embeds_enabled())
        ids = list(prompt["prompt_token_ids"])
        if prompt.get("multi_modal_data"):
            engine_input = self._process_multimodal(
                ids, _mm_fields(prompt), skip_mm_cache=skip_mm_cache
            )
        else:
            engine_input = dict(tokens_input(ids))
        return finish_tokens(engine_input, prompt, tok_params, self.tokenizer)

    async def _process_singleton_async(
        self, prompt: DictPrompt, *, skip_mm_cache: bool, tok_params: TokenizeParams | None
    ) -> EngineInput:
        if "prompt_embeds" in prompt or not prompt.get("multi_modal_data"):
            return self._process_singleton(
                prompt, skip_mm_cache=skip_mm_cache, tok_params=tok_params
            )
        engine_input = await self._process_multimodal_prompt_async(
            list(prompt["prompt_token_ids"]), _mm_fields(prompt), skip_mm_cache=skip_mm_cache
        )
        return finish_tokens(engine_input, prompt, tok_params, self.tokenizer)

    def _prompt_embeds_enabled(self) -> bool:
        return bool(getattr(self.model_config, "enable_prompt_embeds", False))

    def _enc_dec_input(
        self, encoder_input: EngineInput, decoder_input: EngineInput | None
    ) -> EngineInput:
        skip_start = bool(getattr(self.mm_processor, "skip_decoder_start_token", False))
        return build_enc_dec_input(
            encoder_input, decoder_input, self.get_dec_start_token_id(), skip_start
        )

    def warmup(self, chat_params: ChatParams) -> None:
        """Warm the chat template (a one-message render), then the multimodal processor."""
        try:
            self.render_messages([{"role": "user", "content": "warmup"}], chat_params)
        except Exception:
            logger.warning("Chat template warmup failed", exc_info=True)
        self._mm.join_warmup()
        self.warmup_mm()


def _chat_extras(chat_params: ChatParams, prompt_extras: dict[str, Any] | None) -> dict[str, Any]:
    return {**(prompt_extras or {}), "media_io_kwargs": chat_params.media_io_kwargs or {}}


def _mm_fields(prompt: DictPrompt) -> dict[str, Any]:
    return {key: prompt.get(key) for key in MM_PROMPT_KEYS}


__all__ = [
    "BaseMultiModalProcessor",
    "BaseMultiModalProcessorCache",
    "BaseRenderer",
    "ChatParams",
    "DictPrompt",
    "EngineInput",
    "MMProcessorInputs",
    "MultiModalCacheStats",
    "MultiModalDataItems",
    "MultiModalRequest",
    "MultiModalTimingRegistry",
    "MultiModalUUIDItems",
    "TokenizeParams",
    "mm_registry",
    "parse_mm_uuids",
    "processor_cache_from_config",
    "processor_only_cache_from_config",
]
