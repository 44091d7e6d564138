"""The decoded-bytes budget of one request (``VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES``).

A few kilobytes of encoded media can declare gigabytes of pixels or samples, and per-item caps
do not bound a request that carries many items. Decoders therefore charge what they are about to
allocate (a raster, a frame stack, a PCM buffer) *before* allocating it, and the charge fails once
the request's decoded bytes would pass the limit (default 715,827,880: one image at the default
pixel cap, 4 bytes a pixel; 0 or less disables it).

Which budget a decode charges:

1. one handed to the decoder explicitly (vLLM's ``decoded_budget=`` argument);
2. else the budget of the request whose decode is running: the processor decodes a request's
   misses inside :func:`decode_budget_scope`, so every decode of that request charges one budget
   whichever thread runs it;
3. else none is in scope (an offline ``decode()``): the item alone must fit within the limit.

A refusal is :class:`~mediaref.exceptions.MediaTooLargeError` (HTTP 413). It depends on the
request, not on the payload, so a memoized decode does not remember it: the next request's decode
of the same ref tries again under its own budget. A payload shared by two requests decodes once,
charged to the request whose decode ran it; the other reads the memoized value for free.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Iterator

from mediaref import envs
from mediaref.exceptions import MediaTooLargeError

_SETTING = "VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES"


def request_decode_limit_bytes() -> int | None:
    """``VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES``, or None when it is 0 or less (no limit)."""
    limit = int(envs.VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES)
    return limit if limit > 0 else None


def _exceeded(limit: int, total: int) -> MediaTooLargeError:
    return MediaTooLargeError(
        f"the request's decoded media would take {total} bytes, over the {limit}-byte limit "
        f"({_SETTING})"
    )


class MediaDecodedBudget:
    """A thread-safe count of one request's decoded bytes, against a limit.

    The limit is read from ``VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES`` when the budget is made (one
    request, one limit), unless ``limit_bytes`` is given; None or a value <= 0 means no limit.

    :meth:`charge` takes bytes about to be allocated. :meth:`reserve` and :meth:`settle` serve a
    decoder that knows only an upper bound before it decodes: it reserves the bound (waiting for
    other in-flight reservations to settle when they are what stands in the way), then settles
    the reservation with the bytes it really produced.
    """

    def __init__(self, *, limit_bytes: int | None = None) -> None:
        if limit_bytes is None:
            self.limit_bytes = request_decode_limit_bytes()
        else:
            self.limit_bytes = limit_bytes if limit_bytes > 0 else None
        self.used = 0
        self._reserved = 0
        self._changed = threading.Condition()

    def charge(self, decoded_bytes: int) -> None:
        """Count ``decoded_bytes``, or raise :class:`MediaTooLargeError` without counting them."""
        limit = self.limit_bytes
        if limit is None or decoded_bytes <= 0:
            return
        with self._changed:
            # Others' reservations are upper bounds; wait for them to settle when only they stand
            # between this charge and the limit.
            while self._reserved and self.used + decoded_bytes <= limit < (
                self.used + self._reserved + decoded_bytes
            ):
                self._changed.wait()
            total = self.used + self._reserved + decoded_bytes
            if total > limit:
                raise _exceeded(limit, total)
            self.used += decoded_bytes

    def reserve(self, max_bytes: int) -> int:
        """Hold up to ``max_bytes`` for a decode in flight; returns how many bytes are held.

        Holds less than asked when less is left and no other reservation could free more; raises
        when nothing is left. A decode holding a reservation must settle it before it charges or
        reserves this budget again: both wait for reservations to settle, its own included.
        """
        limit = self.limit_bytes
        if limit is None:
            return max_bytes
        max_bytes = max(0, max_bytes)
        with self._changed:
            while True:
                available = limit - self.used - self._reserved
                if available >= max_bytes or not self._reserved:
                    if available <= 0:
                        raise _exceeded(limit, self.used + self._reserved + max_bytes)
                    held = min(max_bytes, available)
                    self._reserved += held
                    return held
                self._changed.wait()

    def settle(self, reserved: int, decoded_bytes: int) -> None:
        """Replace a reservation of ``reserved`` bytes with the ``decoded_bytes`` really used."""
        limit = self.limit_bytes
        if limit is None:
            return
        with self._changed:
            self._reserved -= reserved
            self._changed.notify_all()
            total = self.used + decoded_bytes
            if decoded_bytes > reserved or total > limit:
                raise _exceeded(limit, total)
            self.used = total

    def __repr__(self) -> str:
        return f"MediaDecodedBudget(used={self.used}, limit_bytes={self.limit_bytes})"


_current_budget: contextvars.ContextVar[MediaDecodedBudget | None] = contextvars.ContextVar(
    "mediaref_decode_budget", default=None
)


@contextlib.contextmanager
def decode_budget_scope(budget: MediaDecodedBudget | None) -> Iterator[None]:
    """Decodes run inside this block (on this thread) charge ``budget``."""
    token = _current_budget.set(budget)
    try:
        yield
    finally:
        _current_budget.reset(token)


def current_decode_budget() -> MediaDecodedBudget | None:
    """The budget of the request whose decode runs on this thread, if any."""
    return _current_budget.get()


def charge_decoded_bytes(decoded_bytes: int, budget: MediaDecodedBudget | None = None) -> None:
    """Charge ``decoded_bytes`` about to be allocated by a decode (see the module docstring).

    Call it before the allocation, with the size the headers promise, so a refused decode has
    allocated nothing.
    """
    chosen = budget if budget is not None else _current_budget.get()
    if chosen is not None:
        chosen.charge(decoded_bytes)
        return
    limit = request_decode_limit_bytes()
    if limit is not None and decoded_bytes > limit:
        raise _exceeded(limit, decoded_bytes)


__all__ = [
    "MediaDecodedBudget",
    "charge_decoded_bytes",
    "current_decode_budget",
    "decode_budget_scope",
    "request_decode_limit_bytes",
]
