"""Pin torch's and OpenMP's thread counts from ``--threads N`` before torch is imported.

OMP_NUM_THREADS is read once, when torch loads its OpenMP runtime, so a benchmark that compares
libraries at a fixed thread count must set it from the command line before its first ``import
torch``: ``import _torch_threads`` first, then torch. argparse still declares ``--threads`` for
``--help``; this only reads it early.
"""

from __future__ import annotations

import os
import sys

__all__ = ["THREADS"]


def _threads_from_argv(default: int = 1) -> int:
    for i, arg in enumerate(sys.argv):
        if arg == "--threads" and i + 1 < len(sys.argv):
            return int(sys.argv[i + 1])
        if arg.startswith("--threads="):
            return int(arg.split("=", 1)[1])
    return default


THREADS = _threads_from_argv()
# mediaref's processing scope reads OMP_NUM_THREADS; vLLM's frontend uses torch's process-wide
# count (set by the importer with torch.set_num_threads(THREADS)).
os.environ["OMP_NUM_THREADS"] = str(THREADS)
