"""The renderer's model side: its config, tokenizer and multimodal processor, and the worker that
runs the processor.

:class:`RendererModel` is the lower of the renderer's two levels (the prompt flow,
:class:`~mediaref.renderers.base.BaseRenderer`, builds on it): the construction vLLM's
``BaseRenderer.__init__`` does, the tokenizer and model facts, and vLLM's multimodal methods
(processing, the processor cache's upkeep, the warmup), which delegate to the composed
:class:`~mediaref.renderers._mm_worker.MultiModalWorker`. It needs nothing from the level above.
"""

from __future__ import annotations

import concurrent.futures
import functools
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from mediaref.cache.factories import processor_cache_from_config, processor_only_cache_from_config
from mediaref.exceptions import VLLMValidationError
from mediaref.inputs import MultiModalInputs
from mediaref.processing.context import ModelConfig, TokenizeParams
from mediaref.processing.processor import BaseMultiModalProcessor
from mediaref.registry import MULTIMODAL_REGISTRY, MultiModalTimingRegistry
from mediaref.renderers._mm_worker import MultiModalRequest, MultiModalWorker
from mediaref.renderers._params import MultiModalCacheStats
from mediaref.renderers._prompt_steps import require_tokenizer

_T = TypeVar("_T")


class _LoadFromModel:
    def __repr__(self) -> str:
        return "<the model's own tokenizer>"


_FROM_MODEL: Any = _LoadFromModel()


class RendererModel(Generic[_T]):
    """A renderer's model: config, tokenizer, multimodal processor and its worker.

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
        self._mm_timing_registry = MultiModalTimingRegistry(
            getattr(config, "observability_config", None)
        )
        self._mm = MultiModalWorker(
            mm_processor,
            processor_only_cache=processor_only_cache_from_config(config),
            timing_registry=self._mm_timing_registry,
            scheduler_config=getattr(config, "scheduler_config", None),
        )
        # vLLM's attribute: the one thread every multimodal apply runs on (the worker's).
        self._mm_executor: concurrent.futures.ThreadPoolExecutor = self._mm.executor

    # -- tokenizer and model facts -------------------------------------------------------------

    @property
    def tokenizer(self) -> Any | None:
        if self._tokenizer is _FROM_MODEL:
            return None if self.mm_processor is None else self.mm_processor.info.ctx.tokenizer
        return self._tokenizer

    def get_tokenizer(self) -> Any:
        return require_tokenizer(self.tokenizer)

    def get_mm_processor(self) -> BaseMultiModalProcessor[Any]:
        return self._mm.require_processor()

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
        for token_id in (min(token_ids), max(token_ids)):
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

    # -- the multimodal worker -----------------------------------------------------------------

    def process_multimodal(self, request: MultiModalRequest) -> MultiModalInputs:
        """Process one request from synchronous code (on the mm worker, holding it throughout)."""
        return self._mm.process(request)

    async def process_multimodal_async(self, request: MultiModalRequest) -> MultiModalInputs:
        """Process one request; other requests' phases interleave while its media decodes."""
        if self.get_mm_processor().supports_two_phase_apply:
            return await self._process_multimodal_async(request)
        return await self._process_multimodal_blocking_async(request)

    async def _process_multimodal_async(self, request: MultiModalRequest) -> MultiModalInputs:
        return await self._mm.process_split_async(request)

    async def _process_multimodal_blocking_async(
        self, request: MultiModalRequest
    ) -> MultiModalInputs:
        return await self._mm.process_blocking_async(request)

    @staticmethod
    def _request_from(
        prompt: list[int], fields: dict[str, Any], *, skip_mm_cache: bool
    ) -> MultiModalRequest:
        return MultiModalRequest(
            prompt,
            fields["multi_modal_data"],
            fields.get("mm_processor_kwargs") or {},
            mm_uuids=fields.get("multi_modal_uuids"),
            media_io_kwargs=fields.get("media_io_kwargs") or {},
            skip_mm_cache=skip_mm_cache,
        )

    def _process_multimodal(
        self, prompt: list[int], fields: dict[str, Any], *, skip_mm_cache: bool
    ) -> dict[str, Any]:
        """A tokenized prompt's multimodal fields, processed: its engine input."""
        request = self._request_from(prompt, fields, skip_mm_cache=skip_mm_cache)
        return dict(self.process_multimodal(request))

    async def _process_multimodal_prompt_async(
        self, prompt: list[int], fields: dict[str, Any], *, skip_mm_cache: bool
    ) -> dict[str, Any]:
        request = self._request_from(prompt, fields, skip_mm_cache=skip_mm_cache)
        return dict(await self.process_multimodal_async(request))

    @property
    def mm_processor_cache(self) -> Any | None:
        return self._mm.cache

    def stat_mm_cache(self) -> MultiModalCacheStats | None:
        """The cache counters since the last call (None without a cache)."""
        return self._mm.stat_cache()

    def update_mm_cache_stats(self) -> None:
        self._mm.update_cache_stats()

    def clear_mm_cache(self) -> None:
        self._mm.clear_cache()

    async def clear_mm_cache_async(self) -> None:
        """:meth:`clear_mm_cache` on the multimodal worker, so no apply runs while it clears."""
        await self._mm.clear_cache_async()

    def queue_mm_cache_invalidations(self, mm_hashes: Sequence[str]) -> None:
        """Forget these items before the next request is processed (those the cache holds)."""
        self._mm.queue_invalidations(mm_hashes)

    def warmup_mm(self) -> None:
        """Process dummy inputs once (one item per allowed modality), at most once per renderer;
        a failure only logs."""
        self._mm.warmup()

    @property
    def _mm_warmup_done(self) -> bool:
        # vLLM's attribute name; the worker owns the flag.
        return self._mm.warmup_done

    def start_mm_warmup_in_background(self) -> None:
        """Run :meth:`warmup_mm` on the multimodal worker, behind nothing and before requests."""
        self.start_mm_warmup()

    def start_mm_warmup(self) -> concurrent.futures.Future[None]:
        """:meth:`start_mm_warmup_in_background`, returning its future (mediaref)."""
        return self._mm.start_warmup(self.warmup_mm)

    def shutdown(self) -> None:
        self._mm.shutdown()


__all__ = ["RendererModel"]
