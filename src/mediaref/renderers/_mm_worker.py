"""The renderer's multimodal worker: one thread runs every request's processor apply.

:class:`MultiModalWorker` is a stage object the renderer delegates to; it owns the thread, the
processor's two caches and their counters, the queued invalidations and the warmup's state, and
knows nothing of the renderer: it is given the processor, the caches and the timing registry,
and the warmup to run (the renderer's overridable ``warmup_mm``).

The async path splits the cached apply around the decode wait: phase 1 on the worker, the decode
wait on the event loop, phase 2 on the worker. While one request's media decodes on the media pool,
the worker runs other requests' phases. Processors that override the composed methods (see
``supports_two_phase_apply``) take the blocking path, which holds the worker through the decodes.
The cache's counters, invalidations and the warmup live here too: they touch the cache, so they go
through the same worker.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
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
from mediaref.processing.layout import apply_layout
from mediaref.processing.processor import BaseMultiModalProcessor, MultiModalApplyState
from mediaref.processing.torch_threads import set_default_torch_num_threads
from mediaref.registry import MultiModalTimingRegistry
from mediaref.renderers._params import MultiModalCacheStats

if TYPE_CHECKING:
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
    layout_only: bool = False
    """Whether the caller needs only the token ids, hashes and placeholders: where the model can
    place every item from its header, nothing is decoded or processed
    (:mod:`mediaref.processing.layout`); the ``mm_kwargs`` then hold no tensor to send."""
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
    """Multimodal processing on one worker thread, and the processor cache's upkeep.

    ``cache`` is the main processor cache (None: none); ``processor_only_cache`` serves
    ``skip_mm_cache`` requests and the warmup, which must not change what the main cache (and
    any engine-core mirror of it) holds.
    """

    def __init__(
        self,
        processor: BaseMultiModalProcessor[Any] | None,
        *,
        processor_only_cache: BaseMultiModalProcessorCache | None,
        timing_registry: MultiModalTimingRegistry,
        scheduler_config: Any | None = None,
    ) -> None:
        self.processor = processor
        self.cache = None if processor is None else processor.cache
        self._processor_only_cache = processor_only_cache
        self.timing_registry = timing_registry
        self._scheduler_config = scheduler_config
        self._cache_stats = MultiModalCacheStats() if self.cache else None
        self._pending_invalidations: set[str] = set()
        self._invalidation_lock = threading.Lock()
        self._request_ids = itertools.count(1)
        # ONE worker, and it must stay one; two independent reasons:
        # 1. The frontend processor cache's get_and_update must run in the same order as the
        #    engine-core cache's, so both evict alike and the frontend can predict what the core
        #    holds without asking (see mediaref.cache.BaseMultiModalCache). That holds only if
        #    one thread at a time runs the cached apply.
        # 2. HF preprocessing can enter numba's workqueue parallel region (Kimi K2.5 vision in
        #    vLLM), which is not thread-safe and aborts the process on concurrent entry; the
        #    background warmup is submitted to this same executor so it can never overlap.
        self.executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="mediaref-mm"
        )
        self._warmup_future: concurrent.futures.Future[None] | None = None
        self.warmup_done = False

    def require_processor(self) -> BaseMultiModalProcessor[Any]:
        if self.processor is None:
            raise ValueError("Multi-modal processor not available for text-only models")
        return self.processor

    # -- the processor cache -------------------------------------------------------------------

    def stat_cache(self) -> MultiModalCacheStats | None:
        """The cache counters since the last call (None without a cache)."""
        stats = self._cache_stats
        if stats is None:
            return None
        self._cache_stats = MultiModalCacheStats()
        return stats

    def update_cache_stats(self) -> None:
        cache, stats = self.cache, self._cache_stats
        if cache is not None and stats is not None:
            delta = cache.make_stats(delta=True)
            stats.record(delta.total, delta.hits)

    def clear_cache(self) -> None:
        if self.cache is not None:
            self.cache.clear_cache()
        if self._cache_stats is not None:
            self._cache_stats.reset = True

    async def clear_cache_async(self) -> None:
        """:meth:`clear_cache` on the worker, so no apply runs while it clears."""
        await asyncio.get_running_loop().run_in_executor(self.executor, self.clear_cache)

    def queue_invalidations(self, mm_hashes: Sequence[str]) -> None:
        """Forget these items before the next request is processed (those the cache holds)."""
        cache = self.cache
        if cache is None or not mm_hashes:
            return
        pending = {h for h in mm_hashes if cache.is_cached_item(h)}
        if pending:
            with self._invalidation_lock:
                self._pending_invalidations |= pending

    def _drain_invalidations(self) -> None:
        cache = self.cache
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

    def warmup(self) -> None:
        """Process dummy inputs once (one item per allowed modality), at most once per worker;
        a failure only logs."""
        if self.warmup_done:
            return
        try:
            processor = self.processor
            if processor is None:
                return
            cache = self._processor_only_cache
            limits = {m: 1 for m, n in processor.info.allowed_mm_limits.items() if n > 0}
            start = time.perf_counter()
            try:
                with set_default_torch_num_threads(1):
                    processor.get_dummy_mm_inputs(
                        limits, cache=cache, scheduler_config=self._scheduler_config
                    )
                logger.info("Multi-modal warmup completed in %.3fs", time.perf_counter() - start)
            except Exception:  # a failed warmup must not take the server down
                logger.warning("Multi-modal warmup failed", exc_info=True)
            finally:
                if cache is not None:
                    cache.clear_cache()
        finally:
            self.warmup_done = True

    def start_warmup(self, warmup: Callable[[], None]) -> concurrent.futures.Future[None]:
        """Run ``warmup`` (the renderer's ``warmup_mm``, which a renderer may override) on the
        worker, behind nothing and before requests, once; its future."""
        if self._warmup_future is None:
            self._warmup_future = self.executor.submit(warmup)
        return self._warmup_future

    def join_warmup(self) -> None:
        future, self._warmup_future = self._warmup_future, None
        if future is not None:
            future.result()

    def shutdown(self) -> None:
        self.join_warmup()
        self.executor.shutdown(wait=True)
        for cache in (self.cache, self._processor_only_cache):
            if cache is not None:
                cache.close()

    # -- multimodal processing -----------------------------------------------------------------

    def _prepare(
        self, request: MultiModalRequest
    ) -> tuple[BaseMultiModalProcessor[Any], ProcessorInputs, TimingContext]:
        """Parse media and UUIDs, pick the cache (``skip_mm_cache``: the processor-only one),
        and the request's timing context."""
        processor = self.require_processor()
        self._drain_invalidations()
        inputs = processor.build_inputs(
            request.prompt,
            request.mm_data,
            request.mm_processor_kwargs,
            tokenization_kwargs=request.tokenization_kwargs,
            mm_uuids=request.mm_uuids,
            media_io_kwargs=request.media_io_kwargs,
        )
        inputs.cache = self._processor_only_cache if request.skip_mm_cache else self.cache
        request_id = f"renderer-mm-{next(self._request_ids)}"
        if request.timing_ctx is not None:
            return processor, inputs, request.timing_ctx
        return processor, inputs, self.timing_registry.get(request_id)

    def _phase1(
        self, request: MultiModalRequest
    ) -> tuple[BaseMultiModalProcessor[Any], MultiModalApplyState]:
        processor, inputs, timing_ctx = self._prepare(request)
        # The decode wait runs on the event loop: waiting there for another request's claim
        # leaves the worker free for that request's phase 2.
        return processor, processor.apply_phase1(inputs, timing_ctx, claim_misses=True)

    def _phase2(
        self, processor: BaseMultiModalProcessor[Any], state: MultiModalApplyState
    ) -> MultiModalInputs:
        out = processor.apply_phase2(state)
        self.update_cache_stats()
        return out

    def _process_blocking(self, request: MultiModalRequest) -> MultiModalInputs:
        processor, inputs, timing_ctx = self._prepare(request)
        out = processor.apply(inputs, timing_ctx)
        self.update_cache_stats()
        return out

    def _run(self, fn: Callable[..., _R], *args: Any) -> asyncio.Future[_R]:
        return asyncio.get_running_loop().run_in_executor(
            self.executor, _bounded_torch_threads, fn, *args
        )

    def process(self, request: MultiModalRequest) -> MultiModalInputs:
        """Process one request from synchronous code (on the worker, holding it throughout)."""
        return self.executor.submit(
            _bounded_torch_threads, self._process_blocking, request
        ).result()

    def _layout(self, request: MultiModalRequest) -> MultiModalInputs | None:
        processor, inputs, _ = self._prepare(request)
        return apply_layout(processor, inputs)

    async def process_split_async(self, request: MultiModalRequest) -> MultiModalInputs:
        """Phase 1 on the worker, the decode wait here, phase 2 on the worker (or, for a
        ``layout_only`` request the model can place from headers, the layout alone)."""
        if request.layout_only:
            layout = await await_drained(self._run(self._layout, request))
            if layout is not None:
                return layout
        phase1 = self._run(self._phase1, request)
        try:
            processor, state = await await_drained(phase1)
        except asyncio.CancelledError:
            if phase1.done() and not phase1.cancelled() and phase1.exception() is None:
                # Phase 1 finished, so its state is ours to close; its decodes may still run.
                await _close_after_drain(phase1.result()[1])
            raise
        with state:
            await state.wait_decodes_async()
            return await await_drained(self._run(self._phase2, processor, state))

    async def process_blocking_async(self, request: MultiModalRequest) -> MultiModalInputs:
        """The whole apply on the worker, which it holds through the decodes."""
        return await await_drained(self._run(self._process_blocking, request))


__all__ = ["MultiModalRequest", "MultiModalWorker"]
