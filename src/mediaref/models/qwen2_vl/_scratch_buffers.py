"""Reusable byte buffers for the large temporaries of the fused pixel path.

A 1080p image's resize goes through two ~8 MB temporaries (the horizontal pass, then the
resized image the patch rows are read from), freed a few milliseconds later. Left to the C
allocator, memory of that size is often handed back to the kernel when freed (glibc trims the
top of its heap, or unmaps a block) and must be faulted in again, page by page, by the next
request: on a small VM a page fault costs ~3 us, so 16 MB of fresh pages is ~13 ms, as much
as the whole rest of the request. Leased from here, the same pages serve request after request.

The pool is process-wide and bounded: it keeps at most :data:`RETAINED_BYTES` of idle buffers
(a buffer returned past that is freed), and a request larger than that is served by a fresh
allocation that is never kept. A lease is exclusive until it is returned, so concurrent calls
never share a buffer; a buffer's contents are whatever its last user left (callers overwrite
every byte they read).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["RETAINED_BYTES", "channels_last", "idle_bytes", "lease"]

RETAINED_BYTES = 64 << 20
"""Idle buffer bytes the pool keeps: a 1080p image's two temporaries ~17 MB, a 4K one's ~67 MB."""

_lock = threading.Lock()
_idle: list[torch.Tensor] = []


def _take(nbytes: int) -> torch.Tensor:
    with _lock:
        fits = [i for i, buffer in enumerate(_idle) if buffer.numel() >= nbytes]
        if fits:
            # By position: tensors compare elementwise, so ``list.remove`` cannot find one.
            return _idle.pop(min(fits, key=lambda i: _idle[i].numel()))
    return torch.empty(nbytes, dtype=torch.uint8)


def _give_back(buffer: torch.Tensor) -> None:
    if buffer.numel() > RETAINED_BYTES:
        return
    with _lock:
        _idle.append(buffer)
        # Over the bound: free the smallest idle buffers first (the larger serve any request).
        _idle.sort(key=torch.Tensor.numel, reverse=True)
        while sum(kept.numel() for kept in _idle) > RETAINED_BYTES:
            _idle.pop()


@contextmanager
def lease(nbytes: int) -> Iterator[torch.Tensor]:
    """A 1-D uint8 tensor of exactly ``nbytes``, this caller's alone until the block exits."""
    buffer = _take(nbytes)
    try:
        yield buffer[:nbytes]
    finally:
        _give_back(buffer)


def channels_last(buffer: torch.Tensor, shape: tuple[int, int, int, int]) -> torch.Tensor:
    """``buffer`` (1-D uint8, at least the shape's size) as an ``(N, C, H, W)`` tensor laid out
    channels-last, the layout torch's resize kernel reads and writes."""
    frames, channels, height, width = shape
    pixels = buffer[: frames * height * width * channels].view(frames, height, width, channels)
    return pixels.permute(0, 3, 1, 2)


def idle_bytes() -> int:
    """Bytes the pool holds idle now."""
    with _lock:
        return sum(buffer.numel() for buffer in _idle)
