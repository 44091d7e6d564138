"""The renderer: a model's prompts to engine inputs, multimodal processing on one worker.

vLLM's ``BaseRenderer`` surface over mediaref's multimodal path, assembled from one concern per
module: the prompt steps (:mod:`._prompt_rendering`: render, tokenize, process for the engine),
their compositions (:mod:`._compositions`: ``render_cmpl``, ``render_chat``), and the single
multimodal worker (:mod:`._mm_worker`: :meth:`BaseRenderer.process_multimodal` / ``_async`` take
a :class:`MultiModalRequest`; the async path splits the cached apply around the decode wait, so
the worker runs other requests' phases while one request's media decodes). This module holds the
construction, the tokenizer and model facts, and chat rendering.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import itertools
import threading
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from mediaref.cache.factories import processor_cache_from_config, processor_only_cache_from_config
from mediaref.exceptions import VLLMValidationError
from mediaref.processing.context import ModelConfig, TokenizeParams
from mediaref.processing.processor import BaseMultiModalProcessor
from mediaref.registry import MULTIMODAL_REGISTRY, MultiModalTimingRegistry
from mediaref.renderers._compositions import RenderCompositions
from mediaref.renderers._engine_inputs import DictPrompt, EngineInput
from mediaref.renderers._mm_worker import MultiModalRequest, MultiModalWorker
from mediaref.renderers._params import ChatParams, MultiModalCacheStats

_T = TypeVar("_T")


class _LoadFromModel:
    def __repr__(self) -> str:
        return "<the model's own tokenizer>"


_FROM_MODEL: Any = _LoadFromModel()


class BaseRenderer(RenderCompositions, MultiModalWorker, Generic[_T]):
    """Turns a model's prompts, with their multimodal data, into engine inputs.

    ``config`` is a :class:`~mediaref.processing.context.ModelConfig` or a ``VllmConfig``-shaped
    object (``.model_config``, and optionally ``.observability_config``, ``.scheduler_config``,
    ``.parallel_config``); ``tokenizer`` defaults to the model's own, and ``None`` means none
    (token-id prompts only).
    """

    def __init__(
        self,
        config: Any,
        tokenizer: _T | None = _FROM_MODEL,
        *,
        mm_processor: BaseMultiModalProcessor[Any] | None = None,
    ) -> None:
        self.config = config
        self.model_config: ModelConfig = getattr(config, "model_config", config)
        self._tokenizer = tokenizer
        if mm_processor is None:
            explicit = None if tokenizer is _FROM_MODEL else tokenizer
            mm_processor = MULTIMODAL_REGISTRY.create_processor(
                self.model_config,
                tokenizer=explicit,
                cache=processor_cache_from_config(config),
            )
        self.mm_processor: BaseMultiModalProcessor[Any] | None = mm_processor
        self._mm_processor_cache = mm_processor.cache
        # skip_mm_cache requests (and the warmup) use their own cache: they must not change
        # what the main cache (and any engine-core mirror of it) holds.
        self._mm_processor_only_cache = processor_only_cache_from_config(config)
        self._mm_cache_stats = MultiModalCacheStats() if self._mm_processor_cache else None
        self._pending_invalidations: set[str] = set()
        self._invalidation_lock = threading.Lock()
        self._mm_timing_registry = MultiModalTimingRegistry(
            getattr(config, "observability_config", None)
        )
        self._mm_request_ids = itertools.count(1)
        # ONE worker, and it must stay one; two independent reasons:
        # 1. The frontend processor cache's get_and_update must run in the same order as the
        #    engine-core cache's, so both evict alike and the frontend can predict what the core
        #    holds without asking (see mediaref.cache.BaseMultiModalCache). That holds only if
        #    one thread at a time runs the cached apply.
        # 2. HF preprocessing can enter numba's workqueue parallel region (Kimi K2.5 vision in
        #    vLLM), which is not thread-safe and aborts the process on concurrent entry; the
        #    background warmup is submitted to this same executor so it can never overlap.
        self._mm_executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="mediaref-mm"
        )
        self._mm_warmup_future: concurrent.futures.Future[None] | None = None
        self._mm_warmup_done = False

    # -- tokenizer and model facts -------------------------------------------------------------

    @property
    def tokenizer(self) -> Any | None:
        if self._tokenizer is _FROM_MODEL:
            return None if self.mm_processor is None else self.mm_processor.info.ctx.tokenizer
        return self._tokenizer

    def get_tokenizer(self) -> Any:
        tokenizer = self.tokenizer
        if tokenizer is None:
            raise ValueError("Tokenizer not available when `skip_tokenizer_init=True`")
        return tokenizer

    def get_mm_processor(self) -> BaseMultiModalProcessor[Any]:
        if self.mm_processor is None:
            raise ValueError("Multi-modal processor not available for text-only models")
        return self.mm_processor

    def render_completion_suffix(self, prompt: str, suffix: str) -> str | None:
        """The prompt with a fill-in-the-middle suffix; None: this renderer has no FIM format."""
        return None

    def get_bos_token_id(self) -> int | None:
        tokenizer = self.tokenizer
        return None if tokenizer is None else tokenizer.bos_token_id

    def get_eos_token_id(self) -> int | None:
        tokenizer = self.tokenizer
        return None if tokenizer is None else tokenizer.eos_token_id

    def get_dec_start_token_id(self) -> int:
        """The decoder start token of an encoder-decoder model (BOS when it names none)."""
        start = getattr(self.model_config.hf_config, "decoder_start_token_id", None)
        if start is None:
            start = self.get_bos_token_id()
        if start is None:
            raise RuntimeError("Cannot find decoder start token id or <BOS>")
        return int(start)

    def validate_token_ids(self, token_ids: Sequence[int], *, parameter: str | None = None) -> None:
        """Refuse a token id outside both the model's and the tokenizer's vocabulary."""
        if not token_ids:
            return
        max_token_id = self.model_config.get_vocab_size() - 1
        tokenizer = self.tokenizer
        if tokenizer is not None:
            max_token_id = max(max_token_id, len(tokenizer) - 1)
        lowest, highest = min(token_ids), max(token_ids)
        for token_id in (lowest, highest):
            if token_id < 0 or token_id > max_token_id:
                raise VLLMValidationError(
                    f"Token id {token_id} is out of vocabulary", parameter=parameter
                )

    def _model_tok_params(self, *, add_special_tokens: bool) -> TokenizeParams:
        if self.mm_processor is not None:
            params: TokenizeParams = self.mm_processor.info.default_tok_params
            return params
        encoder_config = self.model_config.encoder_config or {}
        return TokenizeParams(
            max_total_tokens=self.model_config.derived_max_model_len,
            do_lower_case=bool(encoder_config.get("do_lower_case", False)),
            add_special_tokens=add_special_tokens,
        )

    @functools.cached_property
    def default_cmpl_tok_params(self) -> TokenizeParams:
        return self._model_tok_params(add_special_tokens=True)

    @functools.cached_property
    def default_chat_tok_params(self) -> TokenizeParams:
        # The chat template writes the special tokens itself.
        return self._model_tok_params(add_special_tokens=False)

    # -- chat ----------------------------------------------------------------------------------

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


__all__ = [
    "BaseRenderer",
    "ChatParams",
    "DictPrompt",
    "EngineInput",
    "MultiModalCacheStats",
    "MultiModalRequest",
    "TokenizeParams",
]
