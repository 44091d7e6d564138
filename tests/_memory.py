"""Measuring what a call allocates: the peak of Python-traced allocations (numpy's included), and
the pixel work Pillow does (which tracemalloc cannot see)."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest
from PIL import Image, ImageFile


def traced_peak(call: Callable[[], Any]) -> tuple[int, Any]:
    """The peak of traced allocations during ``call()`` over what was traced before it, and what
    the call returned or the exception it raised (for the test to judge)."""
    tracemalloc.start()
    try:
        baseline, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        try:
            outcome: Any = call()
        except Exception as exc:  # returned for the test to judge
            outcome = exc
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - baseline, outcome


class PixelWork:
    """Counts what rasterizing costs: ImageFile.load calls and image cores Pillow allocates.

    tracemalloc cannot see pixel buffers (Pillow allocates them with plain malloc), so the core
    count from Pillow's own allocator statistics is the witness that no pixels were allocated.
    Both counts run from construction, or from the latest :meth:`restart`. The ``pixel_work``
    fixture (conftest.py) gives a test one.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        original_load = ImageFile.ImageFile.load

        def counting_load(image: ImageFile.ImageFile) -> object:
            self.loads += 1
            return original_load(image)

        monkeypatch.setattr(ImageFile.ImageFile, "load", counting_load)
        self.restart()

    def restart(self) -> None:
        self.loads = 0
        self._cores_at_start = self._cores()

    @staticmethod
    def _cores() -> int:
        return int(Image.core.get_stats()["new_count"])  # type: ignore[attr-defined]

    @property
    def cores_allocated(self) -> int:
        return self._cores() - self._cores_at_start

    def work(self) -> tuple[int, int]:
        """``(loads, cores_allocated)`` since the start."""
        return self.loads, self.cores_allocated


__all__ = ["PixelWork", "traced_peak"]
