"""One request's processing state, from the refs it owns to the decodes it waits for.

Processing works on forks of the caller's refs (:func:`fork_media_refs`, made by
``build_inputs``), so the caller's refs stay usable; a ``ProcessorInputs`` built by hand owns none.
Phase 1 of a cached apply hashes, looks up the cache and submits the misses' decodes; the decodes
are drained off the processing worker (:meth:`MultiModalApplyState.wait_decodes` or its ``_async``
twin); phase 2 runs the HF processor. The state owns the request's forks
(``ProcessorInputs.owned_refs``): it is a context manager, and closing it drains every submitted
decode before releasing them, so no payload is freed while a worker thread may still read it.

vLLM's processor hooks take ``(inputs, timing_ctx)``, not a state: :class:`ApplyStates` is how a
processor finds the state of the inputs phase 2 is running.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mediaref.cache.claims import Claim, Waiter, wait_for_claims
from mediaref.inputs import MultiModalDataDict, MultiModalHashes
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
from mediaref.processing._timing import ApplyTimings, TimingContext

if TYPE_CHECKING:
    from mediaref.parse import MultiModalDataItems
    from mediaref.processing.inputs import ProcessorInputs

_MAX_NESTING = 3  # list -> (ref, metadata) tuple -> ref: deeper structures hold no media items


# -- the refs a request owns ----------------------------------------------------------------------


def fork_media_refs(mm_data: MultiModalDataDict) -> dict[str, Any]:
    """``mm_data`` with each ref replaced by a fork that processing owns and may release.

    The caller's refs stay usable: releasing a fork gives up only the fork's hold on the payload.
    """
    owned: dict[str, Any] = {}
    for modality, data in mm_data.items():
        if isinstance(data, MediaRef):
            owned[modality] = data.fork()
        elif isinstance(data, list):
            owned[modality] = [item.fork() if isinstance(item, MediaRef) else item for item in data]
        else:
            owned[modality] = data
    return owned


def release_media_refs(owned: Mapping[str, Any]) -> None:
    """Release every ref :func:`fork_media_refs` made."""
    for data in owned.values():
        for item in data if isinstance(data, list) else [data]:
            if isinstance(item, MediaRef):
                item.release()


def caller_ref_ids(mm_data: MultiModalDataDict) -> set[int]:
    """The identities of the refs the caller passed in ``mm_data``, wherever they sit (a list, a
    ``(ref, metadata)`` tuple): processing must never release one of these."""
    found: set[int] = set()

    def visit(value: object, depth: int) -> None:
        if isinstance(value, MediaRef):
            found.add(id(value))
        elif depth < _MAX_NESTING and isinstance(value, (list, tuple)):
            for inner in value:
                visit(inner, depth + 1)

    for data in mm_data.values():
        visit(data, 0)
    return found


def owned_refs_of(mm_items: MultiModalDataItems) -> list[MediaRef[Any]]:
    """Every ref the parsed items hold, read through ``get_raw`` so nothing decodes."""
    return [
        raw
        for items in mm_items.values()
        for raw in (items.get_raw(i) for i in range(items.get_count()))
        if isinstance(raw, MediaRef)
    ]


# -- one request between the phases --------------------------------------------------------------


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
    _claims: list[Claim] = field(default_factory=list)
    _waiters: list[Waiter] = field(default_factory=list)
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

    # -- claims (mediaref.cache.claims) -----------------------------------------------------

    def claim_misses(self, misses: Mapping[str, list[int]]) -> dict[str, list[int]]:
        """Claim the hashes of ``misses`` in the cache; the misses this request is to decode.

        All of them, if it gets any claim (a request holding a claim never waits, so no two
        requests wait for each other); none, if every one is another request's: it then waits
        for those (:meth:`wait_decodes_async`) and phase 2 finds them stored.
        """
        cache, hashes = self.inputs.cache, self.mm_hashes
        if cache is None or hashes is None or not any(misses.values()):
            return dict(misses)
        claims = cache.item_claims
        waiters: list[Waiter] = []
        mine: set[str] = set()  # an item twice in this request is this request's both times
        for modality, indices in misses.items():
            for index in indices:
                key = hashes[modality][index]
                if key in mine:
                    continue
                outcome = claims.claim(key)
                if isinstance(outcome, Claim):
                    self._claims.append(outcome)
                    mine.add(key)
                else:
                    waiters.append(outcome)
        if self._claims:
            return dict(misses)
        self._waiters.extend(waiters)
        return {}

    def release_claims(self) -> None:
        """Let the requests waiting for this one's items go on (their items are stored now, or
        this request failed). Idempotent."""
        claims, self._claims = self._claims, []
        for claim in claims:
            claim.release()

    def wait_decodes(self) -> None:
        """Drain the decodes submitted since the last wait; raise the first failure.

        A payload that will not decode is a 422 and a cap (this request's decoded-bytes budget
        included) a 413, both naming the item; a server-side failure propagates as itself.
        Claims met are not waited for here (this may be the thread their holder's phase 2
        needs): phase 2 processes what is still missing.
        """
        self._waiters = []
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
        waiters, self._waiters = self._waiters, []
        if waiters:  # another request processes these items; phase 2 looks them up again
            start = time.perf_counter()
            await wait_for_claims(waiters)
            self.timings.decode_wait_s += time.perf_counter() - start
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
        self.release_claims()
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


class ApplyStates:
    """The states of the requests a processor is running phase 2 for, found by their inputs."""

    def __init__(self) -> None:
        self._by_inputs: dict[int, MultiModalApplyState] = {}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def running(self, state: MultiModalApplyState) -> Iterator[None]:
        """Make ``state`` the one :meth:`find` gives for its inputs while the block runs."""
        key = id(state.inputs)
        with self._lock:
            self._by_inputs[key] = state
        try:
            yield
        finally:
            with self._lock:
                if self._by_inputs.get(key) is state:
                    del self._by_inputs[key]

    def find(self, inputs: ProcessorInputs) -> MultiModalApplyState | None:
        with self._lock:
            return self._by_inputs.get(id(inputs))


__all__ = [
    "ApplyStates",
    "MultiModalApplyState",
    "caller_ref_ids",
    "fork_media_refs",
    "owned_refs_of",
    "release_media_refs",
]
