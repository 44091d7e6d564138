"""One item's pixel work cut into pieces across the media pool, and futures drained whole.

The fused vision path (:mod:`mediaref.models.qwen2_vl._fused`) cuts a lone item's work into
runs of units (an image's merged-patch rows, a video's temporal groups or blocks): the first run
on the caller's thread, the others on the executor. Every piece is waited for before an error
propagates, so no worker is left reading an item (or writing rows) after the call.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, Future
from typing import TypeVar

__all__ = ["drain", "run_pieces", "runs"]

_T = TypeVar("_T")


def runs(first: int, stop: int, most: int) -> Iterator[tuple[int, int]]:
    """``[first, stop)`` as near-equal consecutive runs of at most ``most``."""
    count = -(-(stop - first) // most)
    cuts = [first + (stop - first) * i // count for i in range(count + 1)]
    return itertools.pairwise(cuts)


def run_pieces(
    executor: Executor | None, piece: Callable[[int, int], None], units: int, pieces: int
) -> None:
    """``piece(first, stop)`` over ``units`` cut into ``min(pieces, units)`` near-equal runs: the
    first on the caller's thread (which would otherwise only wait: one core's worth of work fewer
    to queue, one thread fewer to wake), the others on ``executor``; one call here without an
    executor or with a single piece. Returns when every run has finished; the first error in run
    order is raised then."""
    pieces = min(pieces, units)
    if executor is None or pieces < 2:
        piece(0, units)
        return
    bounds = [units * i // pieces for i in range(pieces + 1)]
    first, *others = itertools.pairwise(bounds)
    futures: list[Future[None]] = []
    here: Future[None] = Future()
    try:
        for run in others:
            futures.append(executor.submit(piece, *run))
        piece(*first)
        here.set_result(None)
    except BaseException as exc:  # drained with the others below, then raised in run order
        here.set_exception(exc)
    drain([here, *futures])


def drain(futures: Sequence[Future[_T]]) -> list[_T]:
    """Every future's result in order; every one is waited for before the first error
    propagates."""
    results: list[_T] = []
    error: BaseException | None = None
    for future in futures:
        try:
            results.append(future.result())
        except BaseException as exc:
            error = error or exc
    if error is not None:
        raise error
    return results
