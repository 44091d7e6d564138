"""How a decoded frame is converted by swscale: on the calling thread, one frame at a time.

PyAV 17 and newer give each conversion a scaler that starts a thread per core, and PyAV builds a
new scaler for every frame it converts. For frames kept from a decode, that is a pool of threads
started and joined per frame while the decoder's own threads already hold the cores: measured on
a 2-core host (``docs/performance.md``), a 32-frame sample of a 480p clip decodes 1.2x faster
with one-thread conversions, a 1080p clip 1.1x, and the pixels are the same (each output row
depends on its own source rows only, however the rows are cut across threads).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import av


def _pyav_major() -> int:
    head = av.__version__.split(".", 1)[0]
    return int(head) if head.isdigit() else 0


SWSCALE_ONE_THREAD: Mapping[str, Any] = MappingProxyType(
    {"threads": 1} if _pyav_major() >= 17 else {}
)
"""Keyword arguments for ``VideoFrame.reformat`` / ``to_ndarray``: one scaler thread where PyAV
takes the argument (17 and newer), nothing on older releases, whose scalers are single-threaded."""

__all__ = ["SWSCALE_ONE_THREAD"]
