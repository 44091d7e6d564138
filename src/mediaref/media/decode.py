"""Parallel decode of media refs on the shared media pool: submit now, collect later.

Shared by the processor's two-phase apply and by any other caller that must materialize refs.
The contract that keeps payloads safe: every submitted future is recorded in the caller's job list
the moment it exists, and collection drains *every* future before it raises, so no caller releases
bytes a worker thread may still be reading.

Collection raises the first failure in request order, sorted once, here:

- a ``ValueError`` (the payload will not decode) -> :class:`VLLMUnprocessableEntityError`, 422;
- a :class:`MediaTooLargeError` (a cap: pixels, the request's decoded bytes, duration) -> a
  :class:`MediaTooLargeError`, 413;

both naming the modality and the item's index within it (through the caller's error factory).
Anything else (``MemoryError``, ``TypeError``, ``OSError``, ``KeyboardInterrupt``...) is not the
client's: it is logged with the item's position and propagates as itself.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from mediaref.exceptions import MediaTooLargeError, VLLMUnprocessableEntityError
from mediaref.media.base import MediaRef
from mediaref.media.decode_budget import MediaDecodedBudget, decode_budget_scope
from mediaref.media.executor import get_media_executor

_T = TypeVar("_T")

logger = logging.getLogger(__name__)

DecodeErrorFactory = Callable[[str, int, BaseException], BaseException]
"""``(modality, index within the modality, decoder exception) -> the error to raise``.

Called only for the client's failures: a ``ValueError`` (a :class:`MediaTooLargeError` included).
"""


@dataclass(frozen=True)
class MediaDecodeJob:
    """One submitted decode and the request position it reports failures at."""

    modality: str
    index: int
    ref: MediaRef[Any]
    future: concurrent.futures.Future[Any]


def unprocessable_media_error(modality: str, index: int, exc: BaseException) -> BaseException:
    """The default error: HTTP 422 (413 for a cap) naming the modality and the item's index."""
    if isinstance(exc, MediaTooLargeError):
        return MediaTooLargeError(
            f"{modality} media at index {index} is too large to decode: {exc}",
            modality=modality,
            index=index,
        )
    return VLLMUnprocessableEntityError(
        f"{modality} media at index {index} could not be decoded: {exc}",
        modality=modality,
        index=index,
    )


def is_client_decode_error(exc: BaseException) -> bool:
    """Whether a decoder's exception is the client's: the payload or a cap, never the server."""
    return isinstance(exc, ValueError)


def _decode_charging(ref: MediaRef[_T], budget: MediaDecodedBudget | None) -> _T:
    with decode_budget_scope(budget):
        return ref.decode()


def submit_media_decodes(
    items: Iterable[tuple[str, int, MediaRef[Any]]],
    jobs: list[MediaDecodeJob],
    *,
    executor: concurrent.futures.Executor | None = None,
    budget: MediaDecodedBudget | None = None,
) -> list[MediaDecodeJob]:
    """Submit ``ref.decode`` for each ``(modality, index, ref)``, appending each job to ``jobs`` at once.

    Appending before the next submit means that if a later submit fails (a shut-down pool, say),
    the caller's list already holds every decode that is running, and it can drain them.
    Each decode charges ``budget`` (the request's decoded bytes) from whichever thread runs it.
    Returns the jobs this call submitted.
    """
    pool = executor if executor is not None else get_media_executor()
    submitted: list[MediaDecodeJob] = []
    for modality, index, ref in items:
        job = MediaDecodeJob(modality, index, ref, pool.submit(_decode_charging, ref, budget))
        jobs.append(job)
        submitted.append(job)
    return submitted


def _raise_first_failure(jobs: list[MediaDecodeJob], error_factory: DecodeErrorFactory) -> None:
    failures = [(job, job.future.exception()) for job in jobs]  # every job is done by now
    for job, exc in failures:
        if isinstance(exc, Exception) and not is_client_decode_error(exc):
            # Logged whether or not it is the one raised: only the first failure propagates.
            # (An interrupt or exit is not a failure to report; it simply propagates.)
            logger.error(
                "decoding %s media at index %d failed on the server's side",
                job.modality,
                job.index,
                exc_info=exc,
            )
    for job, exc in failures:  # request order, whatever order the workers finished in
        if exc is None:
            continue
        if not is_client_decode_error(exc):
            raise exc
        raise error_factory(job.modality, job.index, exc) from exc


async def await_drained(future: asyncio.Future[_T]) -> _T:
    """Await ``future`` to its end even if the caller is cancelled, then re-raise the cancellation.

    For work running on threads: cancelling the await cannot stop it, and the caller's cleanup
    (releasing payloads) must not run while a thread may still be reading them.
    """
    cancelled = False
    while not future.done():
        try:
            await asyncio.shield(future)
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return future.result()


def collect_media_decodes(
    jobs: list[MediaDecodeJob], error_factory: DecodeErrorFactory = unprocessable_media_error
) -> None:
    """Wait for every job, then raise the first failure in request order (mapped by ``error_factory``)."""
    concurrent.futures.wait([job.future for job in jobs])
    _raise_first_failure(jobs, error_factory)


async def collect_media_decodes_async(
    jobs: list[MediaDecodeJob], error_factory: DecodeErrorFactory = unprocessable_media_error
) -> None:
    """:func:`collect_media_decodes` without blocking the event loop.

    Cancellation does not cut the drain short: the wait is shielded and resumed until every
    decode has finished, however often the caller is cancelled, and only then is the
    cancellation re-raised, so the caller's cleanup never races a worker still reading bytes.
    """
    if not jobs:
        return
    await await_drained(
        asyncio.gather(*(asyncio.wrap_future(job.future) for job in jobs), return_exceptions=True)
    )
    _raise_first_failure(jobs, error_factory)


__all__ = [
    "DecodeErrorFactory",
    "MediaDecodeJob",
    "await_drained",
    "collect_media_decodes",
    "collect_media_decodes_async",
    "is_client_decode_error",
    "submit_media_decodes",
    "unprocessable_media_error",
]
