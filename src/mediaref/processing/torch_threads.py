"""Bounding torch's intra-op threads while multimodal processing runs (vLLM's
``set_default_torch_num_threads``), without one caller's scope undoing another's.

torch's thread count is process-wide for every thread but the main one: ``torch.set_num_threads``
on a worker thread changes what every other worker thread (and every thread started later) uses.
vLLM's version saves the count, sets it and restores it on exit; two scopes that overlap on
different threads then restore in the wrong order, and the process is left at 1 thread for good.

Here overlapping scopes share one setting: the first scope to enter records the count and applies
its own, later ones (nested or on other threads) only join, and the last one to leave restores
what the first recorded. While any scope is open, torch runs with the first scope's count; a
scope asking for a different count meanwhile joins without changing it (logged once).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator

import torch

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_open_scopes = 0
_restore_to = 0
_applied = 0
_warned_mismatch = False


def default_num_threads() -> int:
    """``OMP_NUM_THREADS`` when it is a positive integer, else 1 (vLLM's default)."""
    raw = os.environ.get("OMP_NUM_THREADS", "")
    try:
        value = int(raw)
    except ValueError:
        return 1
    return value if value > 0 else 1


@contextlib.contextmanager
def set_default_torch_num_threads(num_threads: int | None = None) -> Iterator[None]:
    """Run the block with torch limited to ``num_threads`` (None: :func:`default_num_threads`).

    Re-entrant and safe across threads: see the module docstring.
    """
    global _open_scopes, _restore_to, _applied, _warned_mismatch
    wanted = default_num_threads() if num_threads is None else num_threads
    if wanted < 1:
        raise ValueError(f"num_threads must be >= 1, got {wanted}")
    with _lock:
        if _open_scopes == 0:
            _restore_to = torch.get_num_threads()
            _applied = wanted
            if wanted != _restore_to:
                torch.set_num_threads(wanted)
        elif wanted != _applied and not _warned_mismatch:
            _warned_mismatch = True
            logger.debug(
                "torch thread scopes overlap with different counts (%d open, %d asked); "
                "keeping %d until the last one closes",
                _applied,
                wanted,
                _applied,
            )
        _open_scopes += 1
    try:
        yield
    finally:
        with _lock:
            _open_scopes -= 1
            if _open_scopes == 0 and torch.get_num_threads() != _restore_to:
                torch.set_num_threads(_restore_to)


__all__ = ["default_num_threads", "set_default_torch_num_threads"]
