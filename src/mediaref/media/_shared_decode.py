"""One memoized decode of one payload, shared by a :class:`~mediaref.media.base.MediaRef`'s forks.

What is remembered is a *verdict on the payload*, nothing else:

- a value, handed to every caller;
- a ``ValueError`` that is not a cap refusal (the payload will not decode: the same failure for
  every caller, so a corrupt payload is decoded once);

and what is not:

- :class:`~mediaref.exceptions.MediaTooLargeError`: a cap (pixel cap, the request's decoded-bytes
  budget, an audio duration) depends on settings and on the request, not on the payload alone;
- anything else (``MemoryError``, ``OSError``, ``TypeError``, ``KeyboardInterrupt``...): the
  server's trouble, perhaps transient. It propagates to the caller that ran the decode, the
  decoder is kept, and the next ``decode()`` tries again.

Two locks. The decode lock is held while the decoder runs, so concurrent callers decode once. The
bookkeeping lock is only ever held for a few assignments: it orders "is a decode running?" against
"notify me when it ends", so releasing a ref never waits for a decode (see :meth:`notify_when_done`).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

from mediaref.exceptions import MediaTooLargeError

_T = TypeVar("_T")

Listener = Callable[[_T], None]


def is_payload_verdict(exc: BaseException) -> bool:
    """Whether a decoder's exception is a verdict on the payload, to be memoized."""
    return isinstance(exc, ValueError) and not isinstance(exc, MediaTooLargeError)


class SharedDecode(Generic[_T]):
    """The payload, its decoder, and the memoized outcome of running it (see the module docstring)."""

    __slots__ = (
        "_decode_lock",
        "_decoder",
        "_done",
        "_error",
        "_listeners",
        "_running",
        "_state_lock",
        "_value",
        "data",
    )

    def __init__(self, data: bytes, decoder: Callable[[], _T]) -> None:
        self.data = data
        self._decoder: Callable[[], _T] | None = decoder
        self._decode_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._running = False
        self._done = False
        self._value: _T | None = None
        self._error: BaseException | None = None
        self._listeners: list[weakref.WeakMethod[Listener[_T]]] = []

    @property
    def succeeded(self) -> bool:
        return self._done and self._error is None

    def run(self) -> _T:
        """The decoded value, decoding on first use; raises the memoized verdict or a fresh failure."""
        if not self._done:
            with self._decode_lock:
                if not self._done:
                    self._attempt()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]

    def _attempt(self) -> None:
        decoder = self._decoder
        assert decoder is not None  # dropped only once the outcome is memoized
        with self._state_lock:
            self._running = True
        try:
            value = decoder()
        except BaseException as exc:
            if not is_payload_verdict(exc):
                with self._state_lock:
                    self._running = False  # listeners stay registered for the next attempt
                raise
            self._publish(None, exc)
        else:
            self._publish(value, None)

    def _publish(self, value: _T | None, error: BaseException | None) -> None:
        with self._state_lock:
            # Value and error before _done: run()'s unlocked fast path reads _done first.
            self._value, self._error = value, error
            # The closure may pin a second copy of the payload; the outcome replaces it.
            self._decoder = None
            self._done = True
            self._running = False
            listeners, self._listeners = self._listeners, []
            if error is None:
                for listener in listeners:
                    method = listener()
                    if method is not None:
                        method(value)  # type: ignore[arg-type]

    def notify_when_done(self, listener: Listener[_T]) -> None:
        """Hand ``listener`` the value of a decode that succeeded or is running; never blocks.

        Called with the value at once if the decode has succeeded, on the decoding thread when a
        running decode succeeds, and never if no decode is running (or the one running fails).
        The listener is held weakly: a bound method of an object nobody else keeps is dropped.
        """
        with self._state_lock:
            if self._done:
                if self._error is None:
                    listener(self._value)  # type: ignore[arg-type]
                return
            if self._running:
                self._listeners = [ref for ref in self._listeners if ref() is not None]
                self._listeners.append(weakref.WeakMethod(listener))


__all__ = ["Listener", "SharedDecode", "is_payload_verdict"]
