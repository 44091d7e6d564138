"""Pin torch's and OpenMP's thread counts from ``--threads N`` before torch is imported; leave
them alone without it.

The figures docs/performance.md quotes against vLLM and HF are taken at defaults: no
``--threads``, so neither ``OMP_NUM_THREADS`` nor torch's count is touched and every library does
what it does in a user's process (docs/notes/measuring_against_vllm.md). ``--threads N`` asks a
narrower question, a comparison at N threads on every side: OMP_NUM_THREADS is read once, when
torch loads its OpenMP runtime, so it must be set from the command line before the first
``import torch``: ``import _torch_threads`` first, then torch, then :func:`pin_torch`. argparse
still declares ``--threads`` for ``--help``; this only reads it early.
"""

from __future__ import annotations

import os
import sys

__all__ = ["THREADS", "describe", "pin_torch"]


def _threads_from_argv() -> int | None:
    for i, arg in enumerate(sys.argv):
        if arg == "--threads" and i + 1 < len(sys.argv):
            return int(sys.argv[i + 1])
        if arg.startswith("--threads="):
            return int(arg.split("=", 1)[1])
    return None


THREADS = _threads_from_argv()
if THREADS is not None:
    # mediaref's processing scope reads OMP_NUM_THREADS; vLLM's frontend uses torch's
    # process-wide count (set by pin_torch).
    os.environ["OMP_NUM_THREADS"] = str(THREADS)


def pin_torch() -> None:
    """Set torch's process-wide thread count to ``--threads``; nothing at defaults."""
    if THREADS is not None:
        import torch

        torch.set_num_threads(THREADS)


def describe() -> str:
    """The thread setting, for a report's header or a chart's title."""
    import torch

    if THREADS is None:
        return f"torch threads at defaults ({torch.get_num_threads()} in this process)"
    return f"{THREADS} torch thread{'s' if THREADS != 1 else ''} on every side (--threads)"
