"""A zero-copy numpy view of an RGB Pillow image's pixels, through Pillow's Arrow export.

``np.asarray(image)`` goes through ``Image.tobytes()``: Pillow stores an RGB pixel in 4 bytes
(RGBX), so the export repacks every pixel to 3 bytes, in 64 KiB chunks that are then joined
(two full copies; 1.2 to 2 ms for a 1080p image). Pillow (11.2+) also exports its storage through
the Arrow C data interface, without a copy, when the image sits in one block (Pillow allocates
in 16 MiB blocks, so up to about 4 megapixels); :func:`rgbx_view` wraps that storage as an
``(H, W, 4)`` uint8 array whose first three channels are the RGB values and whose fourth is
Pillow's padding byte.

The Arrow C data interface is a fixed ABI (the ``ArrowSchema`` / ``ArrowArray`` structs below),
so it is read with ctypes. The array capsule holds a reference to Pillow's pixel memory until it
is released; the view keeps the capsule, so the memory lives as long as the view (or any array
derived from it) does, whatever becomes of the image. The view is read-only, except for the one
writer that fills a new image before anyone else holds it (the JPEG decoder of
:mod:`mediaref.media.image._jpeg_turbo`).
"""

from __future__ import annotations

import ctypes

import numpy as np
from PIL import Image

__all__ = ["rgbx_view"]


class _ArrowSchema(ctypes.Structure):
    pass


_ArrowSchema._fields_ = [
    ("format", ctypes.c_char_p),
    ("name", ctypes.c_char_p),
    ("metadata", ctypes.c_char_p),
    ("flags", ctypes.c_int64),
    ("n_children", ctypes.c_int64),
    ("children", ctypes.POINTER(ctypes.POINTER(_ArrowSchema))),
    ("dictionary", ctypes.c_void_p),
    ("release", ctypes.c_void_p),
    ("private_data", ctypes.c_void_p),
]


class _ArrowArray(ctypes.Structure):
    pass


_ArrowArray._fields_ = [
    ("length", ctypes.c_int64),
    ("null_count", ctypes.c_int64),
    ("offset", ctypes.c_int64),
    ("n_buffers", ctypes.c_int64),
    ("n_children", ctypes.c_int64),
    ("buffers", ctypes.POINTER(ctypes.c_void_p)),
    ("children", ctypes.POINTER(ctypes.POINTER(_ArrowArray))),
    ("dictionary", ctypes.c_void_p),
    ("release", ctypes.c_void_p),
    ("private_data", ctypes.c_void_p),
]

# A private prototype rather than ctypes.pythonapi's shared function object, whose argtypes and
# restype other code may set differently.
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)
_PIXEL_BYTES = 4
# An RGB image exports as fixed-size lists of 4 bytes (RGBX), one list a pixel.
_PIXEL_FORMAT = f"+w:{_PIXEL_BYTES}".encode()
_BYTE_FORMAT = b"C"


class _PinnedPixels:
    """Exposes the exported bytes to numpy and keeps their capsule (hence the memory) alive."""

    __slots__ = ("__array_interface__", "_capsule")

    def __init__(
        self, capsule: object, address: int, height: int, width: int, *, writable: bool
    ) -> None:
        self._capsule = capsule
        self.__array_interface__ = {
            "version": 3,
            "shape": (height, width, _PIXEL_BYTES),
            "typestr": "|u1",
            "data": (address, not writable),  # the flag is "read-only"
        }


def rgbx_view(image: Image.Image, *, writable: bool = False) -> np.ndarray | None:
    """``(H, W, 4)`` uint8 over ``image``'s own storage, RGB in the first three channels.

    ``writable``: a view that writes into the image, only for filling a new image that no one
    else holds yet (Pillow assumes nothing changes its pixels behind its back).

    None when there is no such view: an image not in mode RGB, one spread over several blocks
    (Pillow refuses to export it), a Pillow without Arrow export, or an export laid out otherwise
    than expected. The caller then copies the pixels out the ordinary way.
    """
    if image.mode != "RGB" or image.width < 1 or image.height < 1:
        return None
    try:
        schema_capsule, array_capsule = image.__arrow_c_array__()
    except (AttributeError, ValueError):
        return None
    schema = _ArrowSchema.from_address(_capsule_pointer(schema_capsule, b"arrow_schema"))
    array = _ArrowArray.from_address(_capsule_pointer(array_capsule, b"arrow_array"))
    pixels = image.width * image.height
    if not (
        schema.format == _PIXEL_FORMAT
        and schema.n_children == 1
        and schema.children[0].contents.format == _BYTE_FORMAT
        and array.length == pixels
        and array.offset == 0
        and array.null_count == 0
        and array.n_children == 1
    ):
        return None
    values = array.children[0].contents
    if not (
        values.length == pixels * _PIXEL_BYTES
        and values.offset == 0
        and values.null_count == 0
        and values.n_buffers == 2
        and values.buffers[1]
    ):
        return None
    address = int(values.buffers[1])
    return np.asarray(
        _PinnedPixels(array_capsule, address, image.height, image.width, writable=writable)
    )
