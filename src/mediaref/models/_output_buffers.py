"""New output tensors of many megabytes, on transparent huge pages where the kernel grants them.

The fused path's output is new memory every call, handed to the caller: a 1080p image's uint8
rows are 12 MB, a batch of eight ~100 MB (four times that normalized to fp32). Memory that size
comes from fresh pages, each faulted in on first write: measured here, writing 97 MB of fresh
4 KiB pages took 40-51 ms (24,800 faults), more than the pixel work that fills it. Where Linux
offers transparent huge pages on request (``/sys/kernel/mm/transparent_hugepage/enabled`` is
``madvise``, the common default, or ``always``), :func:`empty` asks for them on the buffer's whole
2 MiB-aligned interior (``madvise(MADV_HUGEPAGE)``): the same write took 11 ms (305 faults). Only
memory the buffer owns is advised, so nothing else changes; elsewhere (other systems, THP off, a
refused call) the buffer is an ordinary ``torch.empty``.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from pathlib import Path

import torch

__all__ = ["HUGE_PAGE", "empty"]

HUGE_PAGE = 2 << 20
"""The huge page size advised for (x86-64's and arm64's usual transparent huge page)."""

_MADV_HUGEPAGE = 14  # <sys/mman.h> on Linux, every architecture
_THP_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")


@functools.cache
def _madvise() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    """libc's ``madvise`` where huge pages can be asked for, else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        setting = _THP_SETTING.read_text()
    except OSError:
        return None
    if "[never]" in setting or "[" not in setting:
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    function.restype = ctypes.c_int
    return function


def empty(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """``torch.empty(shape, dtype=dtype)``, its whole 2 MiB-aligned interior advised for huge
    pages where that is offered (nothing is advised for a buffer without one)."""
    tensor = torch.empty(shape, dtype=dtype)
    madvise = _madvise()
    if madvise is None:
        return tensor
    address = tensor.data_ptr()
    first = -(-address // HUGE_PAGE) * HUGE_PAGE
    stop = (address + tensor.nbytes) // HUGE_PAGE * HUGE_PAGE
    if stop > first:
        # A refusal (an old kernel, a seccomp filter) leaves ordinary pages: nothing to handle.
        madvise(first, stop - first, _MADV_HUGEPAGE)
    return tensor
