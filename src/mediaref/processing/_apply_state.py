"""The state one request carries between the two phases of a cached apply.

Phase 1 hashes, looks up the cache and submits the misses' decodes; the decodes are drained off
the processing worker (:meth:`MultiModalApplyState.wait_decodes` or its ``_async`` twin); phase 2
runs the HF processor. The state owns the refs processing forked for the request
(``ProcessorInputs.owned_refs``; none for inputs built by hand, whose refs stay the caller's): it
is a context manager, and closing it drains every submitted decode before releasing them, so no
payload is freed while a worker thread may still be reading it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mediaref.inputs import MultiModalHashes
from mediaref.media.base import MediaRef
from mediaref.media.decode import (
    DecodeErrorFactory,
    MediaDecodeJob,
    collect_media_decodes,
    collect_media_decodes_async,
    submit_media_decodes,
    unprocessable_media_error,
)
from mediaref.media.decode_budget import MediaDecodedBudget
from mediaref.registry import TimingContext

if TYPE_CHECKING:
    from mediaref.parse import MultiModalDataItems
    from mediaref.processing.inputs import ProcessorInputs


def owned_refs_of(mm_items: MultiModalDataItems) -> list[MediaRef[Any]]:
    """Every ref the parsed items hold, read through ``get_raw`` so nothing decodes."""
    return [
        raw
        for items in mm_items.values()
        for raw in (items.get_raw(i) for i in range(items.get_count()))
        if isinstance(raw, MediaRef)
    ]


@dataclass
class ApplyTimings:
    """Where one request's processing time went, in seconds."""

    phase1_s: float = 0.0
    decode_wait_s: float = 0.0
    phase2_s: float = 0.0
    hf_processor_s: float = 0.0
    num_hits: int = 0
    num_misses: int = 0

    def phase(self, name: str) -> _PhaseTimer:
        """Add the block's wall time to the ``name`` field (``"phase1_s"``...)."""
        return _PhaseTimer(self, name)


class _PhaseTimer:
    """A plain context manager (no generator frame: every request enters a few)."""

    __slots__ = ("_name", "_start", "_timings")

    def __init__(self, timings: ApplyTimings, name: str) -> None:
        self._timings, self._name, self._start = timings, name, 0.0

    def __enter__(self) -> None:
        self._start = time.perf_counter()

    def __exit__(self, *exc_info: object) -> None:
        elapsed = time.perf_counter() - self._start
        setattr(self._timings, self._name, getattr(self._timings, self._name) + elapsed)


@dataclass
class MultiModalApplyState:
    """Inputs, hashes, cache eligibility and decode jobs of one request between the phases."""

    inputs: ProcessorInputs
    use_cache: bool
    timing_ctx: TimingContext = field(default_factory=lambda: TimingContext(enabled=False))
    """The request's stage timings (vLLM's stages, plus ``decode_media`` for the decode wait)."""
    mm_hashes: MultiModalHashes | None = None
    jobs: list[MediaDecodeJob] = field(default_factory=list)
    timings: ApplyTimings = field(default_factory=ApplyTimings)
    error_factory: DecodeErrorFactory = unprocessable_media_error
    decoded_budget: MediaDecodedBudget = field(default_factory=MediaDecodedBudget)
    """The request's decoded bytes (``VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES``, read when the state is
    made), charged by every decode this state submits, on whichever worker runs it."""
    _pending: list[MediaDecodeJob] = field(default_factory=list)
    _owned: list[MediaRef[Any]] = field(default_factory=list)
    _closed: bool = False

    def __post_init__(self) -> None:
        self._owned = list(self.inputs.owned_refs)

    # -- decodes ---------------------------------------------------------------------------

    def submit_decodes(self, modality: str, indices: list[int]) -> None:
        """Submit the decodes of the given items' refs that are neither decoded nor submitted."""
        if not indices:  # all hits: the common case on a warm cache
            return
        items = self.inputs.mm_data_items[modality]
        submitted = {id(job.ref) for job in self.jobs}
        wanted = []
        for index in indices:
            raw = items.get_raw(index)
            if isinstance(raw, MediaRef) and not raw.is_decoded and id(raw) not in submitted:
                wanted.append((modality, items.get_original_index(index), raw))
        self._pending.extend(submit_media_decodes(wanted, self.jobs, budget=self.decoded_budget))

    def wait_decodes(self) -> None:
        """Drain the decodes submitted since the last wait; raise the first failure.

        A payload that will not decode is a 422 and a cap (this request's decoded-bytes budget
        included) a 413, both naming the item; a server-side failure propagates as itself.
        """
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        start = time.perf_counter()
        try:
            with self.timing_ctx.record("decode_media"):
                collect_media_decodes(pending, self.error_factory)
        finally:
            self.timings.decode_wait_s += time.perf_counter() - start

    async def wait_decodes_async(self) -> None:
        """:meth:`wait_decodes` off the event loop; shielded, it drains even through cancellation."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        start = time.perf_counter()
        try:
            with self.timing_ctx.record("decode_media"):
                await collect_media_decodes_async(pending, self.error_factory)
        finally:
            self.timings.decode_wait_s += time.perf_counter() - start

    # -- ownership -------------------------------------------------------------------------

    @property
    def owned_refs(self) -> list[MediaRef[Any]]:
        return list(self._owned)

    def close(self) -> None:
        """Drain every submitted decode, then release the refs this state owns. Idempotent."""
        if self._closed:
            return
        self._closed = True
        # Failures were already reported by wait_decodes; here only completion matters.
        for job in self.jobs:
            try:
                job.future.result()
            except BaseException:  # drained, reported elsewhere
                pass
        self._release_refs()

    def _release_refs(self) -> None:
        for ref in self._owned:
            ref.release()

    def __enter__(self) -> MultiModalApplyState:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


__all__ = ["ApplyTimings", "MultiModalApplyState", "owned_refs_of"]
