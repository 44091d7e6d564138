"""Measuring what a call allocates: the peak of Python-traced allocations (numpy's included)."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any


def traced_peak(call: Callable[[], Any]) -> tuple[int, Any]:
    """The peak of traced allocations during ``call()`` over what was traced before it, and what
    the call returned or the exception it raised (for the test to judge)."""
    tracemalloc.start()
    try:
        baseline, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        try:
            outcome: Any = call()
        except Exception as exc:  # noqa: BLE001 - returned for the test to judge
            outcome = exc
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - baseline, outcome


__all__ = ["traced_peak"]
