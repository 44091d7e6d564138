"""The renderer: runs a request's multimodal processing on the single multimodal worker.

The async path splits the cached apply around the decode wait: phase 1 on the worker, the decode
wait on the event loop, phase 2 on the worker. While one request's media decodes on the media pool,
the worker runs other requests' phases. Processors that override the composed methods (see
``supports_two_phase_apply``) take the blocking path, which holds the worker through the decodes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from mediaref.inputs import MultiModalDataDict, MultiModalInputs, MultiModalUUIDDict
from mediaref.media.decode import await_drained
from mediaref.processing.context import ModelConfig
from mediaref.processing.inputs import ProcessorInputs
from mediaref.processing.processor import BaseMultiModalProcessor, MultiModalApplyState
from mediaref.processing.torch_threads import set_default_torch_num_threads
from mediaref.registry import MULTIMODAL_REGISTRY

logger = logging.getLogger(__name__)

_T = TypeVar("_T")


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


def _bounded_torch_threads(fn: Callable[..., _T], *args: Any) -> _T:
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


class BaseRenderer:
    """Turns requests with multimodal data into model inputs for one model."""

    def __init__(
        self,
        model_config: ModelConfig,
        *,
        mm_processor: BaseMultiModalProcessor[Any] | None = None,
    ) -> None:
        self.model_config = model_config
        if mm_processor is None:
            cache = MULTIMODAL_REGISTRY.processor_cache_from_config(model_config)
            mm_processor = MULTIMODAL_REGISTRY.create_processor(model_config, cache=cache)
        self.mm_processor = mm_processor
        # skip_mm_cache requests share the processing info (and so the loaded HF processor).
        self._uncached_mm_processor = type(mm_processor)(
            mm_processor.info, mm_processor.dummy_inputs, cache=None
        )
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

    # -- warmup and shutdown -----------------------------------------------------------------

    def start_mm_warmup(self) -> concurrent.futures.Future[None]:
        """Exercise the processor once on dummy inputs, in the background, on the mm worker."""
        if self._mm_warmup_future is None:
            self._mm_warmup_future = self._mm_executor.submit(
                _bounded_torch_threads, self._run_mm_warmup
            )
        return self._mm_warmup_future

    def _run_mm_warmup(self) -> None:
        processor = self._uncached_mm_processor
        counts = {modality: 1 for modality in processor.info.get_supported_mm_limits()}
        try:
            mm_data = processor.dummy_inputs.get_dummy_mm_data(seq_len=0, mm_counts=counts)
            prompt = processor.dummy_inputs.get_dummy_text(counts)
            processor.apply(processor.build_inputs(prompt, mm_data))
        except Exception:  # a failed warmup must not take the server down
            logger.warning("multimodal warmup failed", exc_info=True)

    def shutdown(self) -> None:
        self._mm_executor.shutdown(wait=True)

    # -- request preparation -----------------------------------------------------------------

    def _prepare_multimodal_inputs(
        self, request: MultiModalRequest
    ) -> tuple[BaseMultiModalProcessor[Any], ProcessorInputs, str]:
        """Pick the processor (cached or not), parse media and UUIDs; a request ID for logs."""
        processor = self._uncached_mm_processor if request.skip_mm_cache else self.mm_processor
        inputs = processor.build_inputs(
            request.prompt,
            request.mm_data,
            request.mm_processor_kwargs,
            tokenization_kwargs=request.tokenization_kwargs,
            mm_uuids=request.mm_uuids,
            media_io_kwargs=request.media_io_kwargs,
        )
        return processor, inputs, f"mm-{uuid.uuid4().hex[:12]}"

    def _phase1(
        self, request: MultiModalRequest
    ) -> tuple[BaseMultiModalProcessor[Any], MultiModalApplyState]:
        processor, inputs, request_id = self._prepare_multimodal_inputs(request)
        logger.debug("%s: phase 1 for %s", request_id, dict(inputs.mm_data_items.get_all_counts()))
        return processor, processor.apply_phase1(inputs)

    def _process_multimodal_blocking(self, request: MultiModalRequest) -> MultiModalInputs:
        processor, inputs, _ = self._prepare_multimodal_inputs(request)
        return processor.apply(inputs)

    # -- entry points ------------------------------------------------------------------------

    def process_multimodal(self, request: MultiModalRequest) -> MultiModalInputs:
        """Process one request from synchronous code (on the mm worker, holding it throughout)."""
        return self._mm_executor.submit(
            _bounded_torch_threads, self._process_multimodal_blocking, request
        ).result()

    async def process_multimodal_async(self, request: MultiModalRequest) -> MultiModalInputs:
        """Process one request; other requests' phases interleave while its media decodes."""
        if self.mm_processor.supports_two_phase_apply:
            return await self._process_multimodal_async(request)
        return await self._process_multimodal_blocking_async(request)

    def _run_on_mm_worker(self, fn: Callable[..., _T], *args: Any) -> asyncio.Future[_T]:
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
            return await await_drained(self._run_on_mm_worker(processor.apply_phase2, state))

    async def _process_multimodal_blocking_async(
        self, request: MultiModalRequest
    ) -> MultiModalInputs:
        return await await_drained(
            self._run_on_mm_worker(self._process_multimodal_blocking, request)
        )


__all__ = ["BaseRenderer", "MultiModalRequest"]
