"""The renderer's multimodal half: one worker thread runs every request's processor apply.

The async path splits the cached apply around the decode wait: phase 1 on the worker, the decode
wait on the event loop, phase 2 on the worker. While one request's media decodes on the media pool,
the worker runs other requests' phases. Processors that override the composed methods (see
``supports_two_phase_apply``) take the blocking path, which holds the worker through the decodes.
The processor cache's counters, invalidations and the warmup live here too: they touch the cache,
so they go through the same worker.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from mediaref.inputs import MultiModalDataDict, MultiModalInputs, MultiModalUUIDDict
from mediaref.media.decode import await_drained
from mediaref.processing.context import TimingContext
from mediaref.processing.inputs import ProcessorInputs
from mediaref.processing.processor import BaseMultiModalProcessor, MultiModalApplyState
from mediaref.processing.torch_threads import set_default_torch_num_threads
from mediaref.registry import MultiModalTimingRegistry
from mediaref.renderers._engine_inputs import EngineInput
from mediaref.renderers._params import ChatParams, MultiModalCacheStats

if TYPE_CHECKING:
    from collections.abc import Iterator

    from mediaref.cache import BaseMultiModalProcessorCache

logger = logging.getLogger("mediaref.renderers.base")

_R = TypeVar("_R")


@dataclass
class MultiModalRequest:
    """One request's multimodal processing arguments, as the renderer receives them."""

    prompt: str | list[int]
    mm_data: MultiModalDataDict
    mm_processor_kwargs: Mapping[str, object] = field(default_factory=dict)
    tokenization_kwargs: Mapping[str, object] = field(default_factory=dict)
    mm_uuids: MultiModalUUIDDict | None = None
    media_io_kwargs: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    skip_mm_cache: bool = False
    timing_ctx: TimingContext | None = None
    """Where this request's stage timings go (``decode_media``, ``apply_hf_processor``...), for a
    caller that reports them per request (the render server's metrics); None: the renderer's
    own registry (``enable_mm_processor_stats``)."""


def _bounded_torch_threads(fn: Callable[..., _R], *args: Any) -> _R:
    """Run one mm-worker job with torch's intra-op threads bounded, as vLLM's renderer does.

    HF preprocessing on all cores would compete with the media pool's decoders; the scope is
    shared safely with any other open one (see :mod:`mediaref.processing.torch_threads`).
    """
    with set_default_torch_num_threads():
        return fn(*args)


async def _close_after_drain(state: MultiModalApplyState) -> None:
    """Close a cancelled request's state once its decodes have drained, off the event loop.

    ``state.close()`` drains synchronously: called on the loop while a decode still runs, it
    would stall every other request for that decode's duration.
    """
    try:
        await state.wait_decodes_async()
    except Exception:  # the request is cancelled; its decode failure has no reader
        pass
    finally:
        state.close()


class MultiModalWorker:
    """Multimodal processing on the renderer's single worker, and the processor cache's upkeep."""

    if TYPE_CHECKING:  # supplied by the renderer
        config: Any
        mm_processor: BaseMultiModalProcessor[Any] | None
        _mm_processor_cache: BaseMultiModalProcessorCache | None
        _mm_processor_only_cache: BaseMultiModalProcessorCache | None
        _mm_cache_stats: MultiModalCacheStats | None
        _pending_invalidations: set[str]
        _invalidation_lock: threading.Lock
        _mm_timing_registry: MultiModalTimingRegistry
        _mm_request_ids: Iterator[int]
        _mm_executor: concurrent.futures.ThreadPoolExecutor
        _mm_warmup_future: concurrent.futures.Future[None] | None
        _mm_warmup_done: bool

        def get_mm_processor(self) -> BaseMultiModalProcessor[Any]: ...

        def render_messages(self, messages: list[Any], params: ChatParams) -> Any: ...

    # -- the processor cache -------------------------------------------------------------------

    @property
    def mm_processor_cache(self) -> Any | None:
        return self._mm_processor_cache

    def stat_mm_cache(self) -> MultiModalCacheStats | None:
        """The cache counters since the last call (None without a cache)."""
        stats = self._mm_cache_stats
        if stats is None:
            return None
        self._mm_cache_stats = MultiModalCacheStats()
        return stats

    def update_mm_cache_stats(self) -> None:
        cache, stats = self._mm_processor_cache, self._mm_cache_stats
        if cache is not None and stats is not None:
            delta = cache.make_stats(delta=True)
            stats.record(delta.total, delta.hits)

    def clear_mm_cache(self) -> None:
        if self._mm_processor_cache is not None:
            self._mm_processor_cache.clear_cache()
        if self._mm_cache_stats is not None:
            self._mm_cache_stats.reset = True

    async def clear_mm_cache_async(self) -> None:
        """:meth:`clear_mm_cache` on the multimodal worker, so no apply runs while it clears."""
        await asyncio.get_running_loop().run_in_executor(self._mm_executor, self.clear_mm_cache)

    def queue_mm_cache_invalidations(self, mm_hashes: Sequence[str]) -> None:
        """Forget these items before the next request is processed (those the cache holds)."""
        cache = self._mm_processor_cache
        if cache is None or not mm_hashes:
            return
        pending = {h for h in mm_hashes if cache.is_cached_item(h)}
        if pending:
            with self._invalidation_lock:
                self._pending_invalidations |= pending

    def _drain_mm_cache_invalidations(self) -> None:
        cache = self._mm_processor_cache
        if cache is None:
            return
        with self._invalidation_lock:
            pending, self._pending_invalidations = self._pending_invalidations, set()
        while pending:
            mm_hash = pending.pop()
            try:
                cache.invalidate(mm_hash)
            except Exception:
                with self._invalidation_lock:  # retried before the next request
                    self._pending_invalidations |= pending | {mm_hash}
                raise

    # -- warmup and shutdown -------------------------------------------------------------------

    def warmup_mm(self) -> None:
        """Process dummy inputs once (one item per allowed modality), at most once per renderer;
        a failure only logs."""
        if self._mm_warmup_done:
            return
        try:
            processor = self.mm_processor
            if processor is None:
                return
            cache = self._mm_processor_only_cache
            limits = {m: 1 for m, n in processor.info.allowed_mm_limits.items() if n > 0}
            start = time.perf_counter()
            try:
                with set_default_torch_num_threads(1):
                    processor.get_dummy_mm_inputs(
                        limits,
                        cache=cache,
                        scheduler_config=getattr(self.config, "scheduler_config", None),
                    )
                logger.info("Multi-modal warmup completed in %.3fs", time.perf_counter() - start)
            except Exception:  # a failed warmup must not take the server down
                logger.warning("Multi-modal warmup failed", exc_info=True)
            finally:
                if cache is not None:
                    cache.clear_cache()
        finally:
            self._mm_warmup_done = True

    def start_mm_warmup_in_background(self) -> None:
        """Run :meth:`warmup_mm` on the multimodal worker, behind nothing and before requests."""
        self.start_mm_warmup()

    def start_mm_warmup(self) -> concurrent.futures.Future[None]:
        """:meth:`start_mm_warmup_in_background`, returning its future (mediaref)."""
        if self._mm_warmup_future is None:
            self._mm_warmup_future = self._mm_executor.submit(self.warmup_mm)
        return self._mm_warmup_future

    def _join_mm_warmup(self) -> None:
        future, self._mm_warmup_future = self._mm_warmup_future, None
        if future is not None:
            future.result()

    def warmup(self, chat_params: ChatParams) -> None:
        """Warm the chat template (a one-message render), then the multimodal processor."""
        try:
            self.render_messages([{"role": "user", "content": "warmup"}], chat_params)
        except Exception:
            logger.warning("Chat template warmup failed", exc_info=True)
        self._join_mm_warmup()
        self.warmup_mm()

    def shutdown(self) -> None:
        self._join_mm_warmup()
        self._mm_executor.shutdown(wait=True)
        for cache in (self._mm_processor_cache, self._mm_processor_only_cache):
            if cache is not None:
                cache.close()

    # -- multimodal processing -----------------------------------------------------------------

    def _prepare_multimodal_inputs(
        self, request: MultiModalRequest
    ) -> tuple[BaseMultiModalProcessor[Any], ProcessorInputs, TimingContext]:
        """Parse media and UUIDs, pick the cache (``skip_mm_cache``: the processor-only one),
        and the request's timing context."""
        processor = self.get_mm_processor()
        self._drain_mm_cache_invalidations()
        inputs = processor.build_inputs(
            request.prompt,
            request.mm_data,
            request.mm_processor_kwargs,
            tokenization_kwargs=request.tokenization_kwargs,
            mm_uuids=request.mm_uuids,
            media_io_kwargs=request.media_io_kwargs,
        )
        inputs.cache = (
            self._mm_processor_only_cache if request.skip_mm_cache else self._mm_processor_cache
        )
        request_id = f"renderer-mm-{next(self._mm_request_ids)}"
        if request.timing_ctx is not None:
            return processor, inputs, request.timing_ctx
        return processor, inputs, self._mm_timing_registry.get(request_id)

    def _phase1(
        self, request: MultiModalRequest
    ) -> tuple[BaseMultiModalProcessor[Any], MultiModalApplyState]:
        processor, inputs, timing_ctx = self._prepare_multimodal_inputs(request)
        return processor, processor.apply_phase1(inputs, timing_ctx)

    def _phase2(
        self, processor: BaseMultiModalProcessor[Any], state: MultiModalApplyState
    ) -> MultiModalInputs:
        out = processor.apply_phase2(state)
        self.update_mm_cache_stats()
        return out

    def _process_multimodal_blocking(self, request: MultiModalRequest) -> MultiModalInputs:
        processor, inputs, timing_ctx = self._prepare_multimodal_inputs(request)
        out = processor.apply(inputs, timing_ctx)
        self.update_mm_cache_stats()
        return out

    def process_multimodal(self, request: MultiModalRequest) -> MultiModalInputs:
        """Process one request from synchronous code (on the mm worker, holding it throughout)."""
        return self._mm_executor.submit(
            _bounded_torch_threads, self._process_multimodal_blocking, request
        ).result()

    async def process_multimodal_async(self, request: MultiModalRequest) -> MultiModalInputs:
        """Process one request; other requests' phases interleave while its media decodes."""
        if self.get_mm_processor().supports_two_phase_apply:
            return await self._process_multimodal_async(request)
        return await self._process_multimodal_blocking_async(request)

    def _run_on_mm_worker(self, fn: Callable[..., _R], *args: Any) -> asyncio.Future[_R]:
        return asyncio.get_running_loop().run_in_executor(
            self._mm_executor, _bounded_torch_threads, fn, *args
        )

    async def _process_multimodal_async(self, request: MultiModalRequest) -> MultiModalInputs:
        phase1 = self._run_on_mm_worker(self._phase1, request)
        try:
            processor, state = await await_drained(phase1)
        except asyncio.CancelledError:
            if phase1.done() and not phase1.cancelled() and phase1.exception() is None:
                # Phase 1 finished, so its state is ours to close; its decodes may still run.
                await _close_after_drain(phase1.result()[1])
            raise
        with state:
            await state.wait_decodes_async()
            return await await_drained(self._run_on_mm_worker(self._phase2, processor, state))

    async def _process_multimodal_blocking_async(
        self, request: MultiModalRequest
    ) -> MultiModalInputs:
        return await await_drained(
            self._run_on_mm_worker(self._process_multimodal_blocking, request)
        )

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
    ) -> EngineInput:
        request = self._request_from(prompt, fields, skip_mm_cache=skip_mm_cache)
        return dict(self.process_multimodal(request))

    async def _process_multimodal_prompt_async(
        self, prompt: list[int], fields: dict[str, Any], *, skip_mm_cache: bool
    ) -> EngineInput:
        request = self._request_from(prompt, fields, skip_mm_cache=skip_mm_cache)
        return dict(await self.process_multimodal_async(request))


__all__ = ["MultiModalRequest", "MultiModalWorker"]
