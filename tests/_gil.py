"""Whether a call holds the GIL: a thread running Python cannot advance while it does."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def python_progress_during(call: Callable[[], T]) -> tuple[T, int]:
    """``call()``'s result, and how many steps a thread running Python made during it (0: none).

    Code on a decoding thread that lets go of the GIL waits a switch interval to take it back
    whenever another thread runs Python; this shows whether it does. With a long switch interval,
    taken up after a sleep (so no hand-over requested before is pending), nothing makes the
    calling thread hand the GIL over during ``call`` but ``call`` itself.
    """
    ticks = [0]
    ticking, stop = threading.Event(), threading.Event()

    def tick() -> None:
        ticking.set()
        while not stop.is_set():
            ticks[0] += 1

    thread = threading.Thread(target=tick)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.5)
    thread.start()
    try:
        assert ticking.wait(10)
        time.sleep(0.01)
        before = ticks[0]
        result = call()
        after = ticks[0]
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(interval)
    return result, after - before


def python_progress_in_some_call(call: Callable[[], T], attempts: int = 5) -> tuple[T, int]:
    """:func:`python_progress_during`, repeated until a call shows progress (at most ``attempts``).

    A loaded machine can keep the ticking thread off every core for a whole call, so one call
    without progress proves nothing; a call that holds the GIL shows none in any attempt, so
    asserting progress over a few attempts still fails for it.
    """
    result, progress = python_progress_during(call)
    for _ in range(attempts - 1):
        if progress > 0:
            break
        result, progress = python_progress_during(call)
    return result, progress
