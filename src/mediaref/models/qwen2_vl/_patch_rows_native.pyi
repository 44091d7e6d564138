from typing import Any

import numpy as np
from typing_extensions import Buffer

# Any C-contiguous buffer: numpy arrays are typed apart, their buffer protocol being in the
# stubs only from Python 3.12.
_Bytes = Buffer | np.ndarray[Any, Any]

def patch_rows(
    pixels: _Bytes,
    frames: int,
    height: int,
    width: int,
    pixel_bytes: int,
    channels: int,
    patch: int,
    merge: int,
    temporal: int,
    out: _Bytes,
    /,
) -> None: ...
def resize_patch_rows(
    pixels: _Bytes,
    frames: int,
    height: int,
    width: int,
    pixel_bytes: int,
    channels: int,
    out_height: int,
    out_width: int,
    patch: int,
    merge: int,
    temporal: int,
    first: int,
    stop: int,
    out: _Bytes,
    /,
) -> None: ...
def simd_level() -> int: ...
def set_simd_level(level: int, /) -> int: ...
