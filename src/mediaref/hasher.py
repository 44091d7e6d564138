"""Content hashes of multimodal items and their processing kwargs; fetched media is never decoded.

A :class:`~mediaref.MediaRef` hashes as its precomputed ``key`` (encoded payload + decode spec),
in a branch checked before every other. The other branches cover media that user code supplies
already decoded — PIL images, tensors, arrays, bytes, strings, numbers — plus a pickle fallback.

The byte stream fed to the digest is self-delimiting, so distinct structures cannot collide by
re-partitioning their content. Every value is written as a *type tag*, a *count*, then its parts,
and every one of those atoms is preceded by its length::

    value  := tag count part*          (count = number of parts that follow)
    list   := "list"  n value{n}        dict := "dict" n (encoded-key value){n}, keys sorted
    atom on the wire := u64be(len(atom)) atom

Hence ``{"ab": "c"}`` differs from ``{"a": "bc"}``, a nested dict from a dotted key, a list from an
index-keyed dict, ``None`` from ``""``, shape ``()`` from ``(1,)``.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import pickle
import struct
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal, Protocol

import numpy as np
import torch
from PIL import ExifTags
from PIL.Image import Image

from mediaref.media.base import MediaRef

logger = logging.getLogger(__name__)

MMHasherAlgorithm = Literal["blake3", "sha256", "sha512"]

Atom = bytes | bytearray | memoryview


class _Digest(Protocol):
    def update(self, data: Any, /) -> object: ...

    def hexdigest(self) -> str: ...


def _blake3() -> _Digest:
    from blake3 import blake3

    return blake3()


_HASHER_FACTORIES: dict[str, Callable[[], _Digest]] = {
    "blake3": _blake3,
    "sha256": hashlib.sha256,
    "sha512": hashlib.sha512,
}


def _u64(value: int) -> bytes:
    return value.to_bytes(8, "big")


def _shape_atom(shape: tuple[int, ...]) -> bytes:
    return _u64(len(shape)) + b"".join(_u64(dim) for dim in shape)


def _exif_image_id(image: Image) -> uuid.UUID | None:
    """The EXIF ImageID, when it is a UUID: an identity the image declares for itself."""
    value = image.getexif().get(ExifTags.Base.ImageID)
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, str):
        try:
            return uuid.UUID(value.strip("\x00 "))
        except ValueError:
            return None
    return None


def _serialize_image(image: Image) -> tuple[bytes, tuple[Atom, ...]]:
    # Mode and size go in even with an ImageID: a converted or resized copy keeps the EXIF block.
    header = (image.mode.encode("ascii"), _shape_atom(image.size))
    image_id = _exif_image_id(image)
    if image_id is not None:
        return b"pil-image-id", (image_id.bytes, *header)
    image.load()
    palette: tuple[Atom, ...] = ()
    if image.palette is not None and image.mode in ("P", "PA"):
        raw = image.getpalette(rawmode=None) or []
        palette = (image.palette.mode.encode("ascii"), bytes(raw))
    return b"pil-image", (*header, *palette, image.tobytes())


def _serialize_tensor(tensor: torch.Tensor) -> tuple[bytes, tuple[Atom, ...]]:
    tensor = tensor.detach().cpu().resolve_conj().resolve_neg().contiguous()
    # Viewed as bytes, every dtype works, including those numpy lacks (bfloat16, float8).
    raw = tensor.reshape(-1).view(torch.uint8).numpy()
    return b"tensor", (
        str(tensor.dtype).encode("ascii"),
        _shape_atom(tuple(tensor.shape)),
        raw.data,
    )


def _serialize_array(array: np.ndarray) -> tuple[bytes, tuple[Atom, ...]]:
    if array.dtype.hasobject:  # pointers are not content: encode the elements instead
        return b"ndarray-object", (
            _shape_atom(array.shape),
            *_encoded_atoms(array.ravel().tolist()),
        )
    # A strided view and its contiguous copy hold the same array, so they must hash the same.
    contiguous = np.ascontiguousarray(array)
    raw = contiguous.reshape(-1).view(np.uint8)
    # dtype.str alone would hide a structured dtype's field names and types.
    dtype = array.dtype.str if array.dtype.fields is None else repr(array.dtype.descr)
    return b"ndarray", (dtype.encode("utf-8"), _shape_atom(array.shape), raw.data)


def _serialize_leaf(obj: object) -> tuple[bytes, tuple[Atom, ...]]:
    """``(type tag, parts)`` of a non-container value."""
    if isinstance(obj, MediaRef):  # first: the key is the identity, and decoding is never needed
        return b"media-ref", (obj.key,)
    if obj is None:
        return b"none", ()
    if isinstance(obj, str):
        return b"str", (obj.encode("utf-8"),)
    if isinstance(obj, (bytes, bytearray, memoryview)):
        view = memoryview(obj)
        return b"bytes", (view.cast("B") if view.c_contiguous else view.tobytes(),)
    if isinstance(obj, bool):
        return b"bool", (b"\x01" if obj else b"\x00",)
    if isinstance(obj, int):
        return b"int", (str(obj).encode("ascii"),)
    if isinstance(obj, float):
        return b"float", (struct.pack(">d", obj),)
    if isinstance(obj, Image):
        return _serialize_image(obj)
    if isinstance(obj, torch.Tensor):
        return _serialize_tensor(obj)
    if isinstance(obj, (np.ndarray, np.generic)):
        return _serialize_array(np.asarray(obj))
    logger.warning("No serialization method for %s; falling back to pickle.", type(obj).__name__)
    return b"pickle", (pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL),)


def _frame(out: list[Atom], atom: Atom) -> None:
    out.append(_u64(atom.nbytes if isinstance(atom, memoryview) else len(atom)))
    out.append(atom)


def _append_framed(obj: object, out: list[Atom]) -> None:
    """Append ``obj``'s framed atoms (each preceded by its length) to ``out``.

    Appending to one list rather than chaining generators: hashing runs once per item per
    request, and nested generators were most of its cost.
    """
    if isinstance(obj, MediaRef):
        _append_leaf(obj, out)
    elif isinstance(obj, (list, tuple)):
        _frame(out, b"tuple" if isinstance(obj, tuple) else b"list")
        _frame(out, _u64(len(obj)))
        for element in obj:
            _append_framed(element, out)
    elif isinstance(obj, Mapping):
        # Equal dicts hash equal whatever their insertion order: entries sort by encoded key.
        entries = sorted(
            ((_encoded_key(key), value) for key, value in obj.items()), key=lambda e: e[0]
        )
        _frame(out, b"dict")
        _frame(out, _u64(len(entries)))
        for key_bytes, value in entries:
            _frame(out, key_bytes)  # the key's own framed encoding, as one atom
            _append_framed(value, out)
    elif isinstance(obj, (set, frozenset)):
        _frame(out, b"set")
        _frame(out, _u64(len(obj)))
        for element_bytes in sorted(_encoded(element) for element in obj):
            _frame(out, element_bytes)
    else:
        _append_leaf(obj, out)


def _append_leaf(obj: object, out: list[Atom]) -> None:
    tag, parts = _serialize_leaf(obj)
    _frame(out, tag)
    _frame(out, _u64(len(parts)))
    for part in parts:
        _frame(out, part)


def _framed_atoms(obj: object) -> list[Atom]:
    out: list[Atom] = []
    _append_framed(obj, out)
    return out


def _encoded(obj: object) -> bytes:
    return b"".join(_framed_atoms(obj))


_CACHED_KEY_CHARS = 64


@functools.lru_cache(maxsize=1024)
def _encoded_str(key: str) -> bytes:
    return _encoded(key)


def _encoded_key(key: object) -> bytes:
    # Dict keys are mostly a few short names ("model_id", "image", kwarg names) seen on every
    # request; long ones are not cached, so the cache stays small whatever the keys.
    if type(key) is str and len(key) <= _CACHED_KEY_CHARS:
        return _encoded_str(key)
    return _encoded(key)


def _encoded_atoms(values: list[Any]) -> tuple[bytes, ...]:
    return tuple(_encoded(value) for value in values)


class MultiModalHasher:
    """Hashes multimodal items together with the settings that shape their processing."""

    @classmethod
    def serialize_item(cls, obj: object) -> tuple[Atom, ...]:
        """The content parts of one value; a :class:`MediaRef` yields just its key."""
        if isinstance(obj, (list, tuple, Mapping, set, frozenset)):
            return (_encoded(obj),)
        return _serialize_leaf(obj)[1]

    @classmethod
    def iter_item_to_bytes(cls, key: str, obj: object) -> Iterator[Atom]:
        """The framed atoms of the entry ``key: obj`` within :meth:`hash_kwargs`' stream."""
        out: list[Atom] = []
        _frame(out, _encoded_key(key))
        _append_framed(obj, out)
        yield from out

    @classmethod
    def hash_kwargs(cls, algorithm: MMHasherAlgorithm | str = "blake3", **kwargs: object) -> str:
        """The hex digest of ``kwargs`` (keys sorted) under ``algorithm``."""
        try:
            digest = _HASHER_FACTORIES[algorithm]()
        except KeyError:
            raise ValueError(
                f"unknown multimodal hash algorithm {algorithm!r}; "
                f"choose one of {sorted(_HASHER_FACTORIES)}"
            ) from None
        for atom in _framed_atoms(kwargs):
            digest.update(atom)
        return digest.hexdigest()


__all__ = ["MMHasherAlgorithm", "MultiModalHasher"]
