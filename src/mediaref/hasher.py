"""Content hashes of multimodal items and their processing kwargs; fetched media is never decoded.

A :class:`~mediaref.MediaRef` hashes, in a branch checked before every other, as what vLLM's hasher
reads of the same item when its decoder knows that without decoding (``MediaRef.hash_view``: a
fetched image's bytes and ``io_config``, so the digest is vLLM's), else as its precomputed
``key`` (encoded payload + decode spec: videos, audio, an image keyed by a trusted EXIF ImageID). Every other value — media that user code supplies already
decoded (PIL images, tensors, arrays, :class:`~mediaref.media.base.MediaWithBytes`), bytes,
strings, numbers, containers — hashes to **exactly the digest vLLM 0.33 computes**, so a mediaref
frontend and a vLLM frontend in front of one engine agree on item hashes
(``tests/data/vllm_0_33_hash_vectors.json`` pins it).

**The stream** fed to the digest is self-delimiting: every byte chunk is preceded by its length
(8 bytes, little-endian) and every value by a one-byte tag, so distinct structures cannot collide
by re-partitioning their content::

    entry  := framed(key) value                      (hash_kwargs: entries sorted by key)
    value  := 0x00                                   None
            | 0x01 u64le(n) value{n}                 list or tuple
            | 0x02 u64le(n) (framed(str(k)) value){n}  dict, in insertion order
            | 0x03 leaf                              anything else
            | 0x04 framed(ref.key)                   a MediaRef without a hash view (mediaref's tag)
    framed(chunk) := u64le(len(chunk)) chunk

A leaf is ``framed`` raw bytes (bytes, memoryview, UTF-8 str, ``numpy.array(number)`` bytes, an
image's EXIF ImageID UUID, a pickle) or, for arrays, tensors and images, the ``entry`` of a tag
(``"ndarray"``, ``"tensor"``, ``"image"``, ``"video"``) and a dict of their parts. vLLM's choices
carry over with the digest: a list and a tuple of the same elements hash alike, as do ``"a"`` and
``b"a"``, and ``{1: x}`` and ``{"1": x}``; dict order counts.

Where vLLM's digest is not reproducible or vLLM raises, mediaref picks a deterministic encoding of
its own: integers beyond 64 bits and object arrays (vLLM hashes their pointers), tensors that
require grad, carry a conjugate or negative bit, or have a dtype numpy lacks (vLLM raises).
"""

from __future__ import annotations

import hashlib
import logging
import pickle
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal, Protocol

import numpy as np
import torch
from PIL import ExifTags
from PIL.Image import Image

from mediaref.media.base import EncodedImageHashView, MediaRef, MediaWithBytes

logger = logging.getLogger(__name__)

MMHasherAlgorithm = Literal["blake3", "sha256", "sha512"]

Chunk = bytes | memoryview

_TAG_NONE = b"\x00"
_TAG_SEQUENCE = b"\x01"
_TAG_MAPPING = b"\x02"
_TAG_LEAF = b"\x03"
_TAG_MEDIA_REF = b"\x04"

_INT64_MIN, _UINT64_MAX = -(1 << 63), (1 << 64) - 1


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


def _length(value: int) -> bytes:
    return value.to_bytes(8, "little")


def _framed(chunk: Chunk) -> Iterator[Chunk]:
    yield _length(chunk.nbytes if isinstance(chunk, memoryview) else len(chunk))
    yield chunk


def _pickled(obj: object) -> Iterator[Chunk]:
    logger.warning("No serialization method found for %s. Falling back to pickle.", type(obj))
    return _framed(pickle.dumps(obj))


def _number_bytes(number: int | float) -> bytes | None:
    """``numpy.array(number).tobytes()`` — vLLM's encoding of a number — when that is the value's
    own bytes; ``None`` for an integer numpy can only hold as an object pointer."""
    if isinstance(number, int) and not _INT64_MIN <= number <= _UINT64_MAX:
        return None
    return np.array(number).tobytes()


def _image_id_bytes(image: Image) -> bytes | None:
    """The EXIF ImageID, when it is a :class:`uuid.UUID`: the identity the image declares."""
    try:
        value = image.getexif().get(ExifTags.Base.ImageID)
    except Exception:  # a malformed EXIF block: hash the pixels instead
        return None
    return value.bytes if isinstance(value, uuid.UUID) else None


class MultiModalHasher:
    """Hashes multimodal items together with the settings that shape their processing."""

    @classmethod
    def serialize_item(cls, obj: object) -> Iterable[Chunk]:
        """The chunks of one leaf value (what follows its tag in the stream)."""
        if isinstance(obj, MediaRef):  # first: never decode to hash
            view = obj.hash_view()
            return _framed(obj.key) if view is None else cls.serialize_item(view)
        if isinstance(obj, EncodedImageHashView):
            return cls._serialize_encoded_image(obj.data, obj.io_config, None)
        if isinstance(obj, bytes):
            return _framed(obj)
        if isinstance(obj, memoryview):
            return _framed(obj if obj.c_contiguous else obj.tobytes())
        if isinstance(obj, str):
            return _framed(obj.encode("utf-8"))
        if isinstance(obj, (int, float)):
            raw = _number_bytes(obj)
            return _pickled(obj) if raw is None else _framed(raw)
        if isinstance(obj, Image):
            return cls._serialize_image(obj)
        if isinstance(obj, MediaWithBytes):
            chunks = cls._serialize_media_with_bytes(obj)
            if chunks is not None:
                return chunks
        if isinstance(obj, torch.Tensor):
            return cls._serialize_tensor(obj)
        if isinstance(obj, np.ndarray):
            return cls._serialize_array(obj)
        return _pickled(obj)

    @classmethod
    def _serialize_image(cls, image: Image) -> Iterable[Chunk]:
        image_id = _image_id_bytes(image)
        if image_id is not None:
            return _framed(image_id)
        # The mode is read before the pixels, the palette after: loading can replace it.
        parts: dict[str, Any] = {"mode": image.mode, "data": np.asarray(image)}
        palette = image.palette
        if palette is not None:
            parts["palette"] = palette.palette
            if palette.rawmode is not None:
                parts["palette_rawmode"] = palette.rawmode
        return cls.iter_item_to_bytes("image", parts)

    @classmethod
    def _serialize_media_with_bytes(cls, wrapped: MediaWithBytes[Any]) -> Iterable[Chunk] | None:
        media = wrapped.media
        if isinstance(media, Image):
            return cls._serialize_encoded_image(
                wrapped.original_bytes, wrapped.io_config, _image_id_bytes(media)
            )
        if isinstance(media, (np.ndarray, torch.Tensor)):
            # Decoded frames smaller than the file they came from are cheaper to hash.
            if media.nbytes < len(wrapped.original_bytes):
                return cls.iter_item_to_bytes("video", media)
            return cls.iter_item_to_bytes("video", wrapped.original_bytes)
        return None  # other media: the wrapper is hashed like any other object

    @classmethod
    def _serialize_encoded_image(
        cls, data: bytes, io_config: dict[str, Any] | None, image_id: bytes | None
    ) -> Iterable[Chunk]:
        # vLLM's MediaWithBytes image: its EXIF ImageID, else its bytes (with io_config if any).
        if image_id is not None:
            return _framed(image_id)
        if io_config:
            return cls.iter_item_to_bytes("image", {"io_config": io_config, "data": data})
        return cls.iter_item_to_bytes("image", data)

    @classmethod
    def _serialize_tensor(cls, tensor: torch.Tensor) -> Iterable[Chunk]:
        tensor = tensor.detach().cpu()
        if tensor.is_conj() or tensor.is_neg():
            tensor = tensor.resolve_conj().resolve_neg()
        try:
            array = None if tensor.dtype == torch.bfloat16 else tensor.numpy()
        except TypeError:  # a dtype numpy lacks (float8...): hashed as bfloat16 is, by its bytes
            array = None
        if array is not None:
            return cls.iter_item_to_bytes("tensor", array)
        raw = tensor.contiguous().reshape(-1).view(torch.uint8).numpy()
        return cls.iter_item_to_bytes(
            "tensor",
            {
                "original_dtype": str(tensor.dtype),
                "original_shape": tuple(tensor.shape),
                "data": raw,
            },
        )

    @classmethod
    def _serialize_array(cls, array: np.ndarray) -> Iterable[Chunk]:
        data: object
        if array.ndim == 0:
            data = array.item()
        elif array.dtype.hasobject:
            data = array.tolist()  # the elements, not their pointers (mediaref's encoding)
        else:
            # C-order bytes, the same for a strided view as for its contiguous copy.
            data = np.ascontiguousarray(array).view(np.uint8).data
        return cls.iter_item_to_bytes(
            "ndarray", {"dtype": array.dtype.str, "shape": array.shape, "data": data}
        )

    @classmethod
    def iter_item_to_bytes(cls, key: str, obj: object) -> Iterable[Chunk]:
        """The chunks of the entry ``key: obj``."""
        yield from _framed(key.encode("utf-8"))
        yield from cls.iter_value_to_bytes(obj)

    @classmethod
    def iter_value_to_bytes(cls, obj: object) -> Iterable[Chunk]:
        """The chunks of one value, tagged by its kind (see the module docstring)."""
        if isinstance(obj, MediaRef):
            view = obj.hash_view()  # what vLLM reads of the item, if the ref knows it
            yield _TAG_MEDIA_REF if view is None else _TAG_LEAF
            yield from _framed(obj.key) if view is None else cls.serialize_item(view)
        elif obj is None:
            yield _TAG_NONE
        elif isinstance(obj, (list, tuple)):
            yield _TAG_SEQUENCE
            yield _length(len(obj))
            for element in obj:
                yield from cls.iter_value_to_bytes(element)
        elif isinstance(obj, dict):
            yield _TAG_MAPPING
            yield _length(len(obj))
            for key, value in obj.items():
                yield from _framed(str(key).encode("utf-8"))
                yield from cls.iter_value_to_bytes(value)
        else:
            yield _TAG_LEAF
            yield from cls.serialize_item(obj)

    @classmethod
    def hash_kwargs(cls, algorithm: MMHasherAlgorithm | str, /, **kwargs: object) -> str:
        """The hex digest, under ``algorithm``, of ``kwargs``' entries sorted by key."""
        try:
            digest = _HASHER_FACTORIES[algorithm]()
        except KeyError:
            raise ValueError(
                f"Unsupported hash algorithm: {algorithm!r}; choose one of "
                f"{sorted(_HASHER_FACTORIES)}"
            ) from None
        for key in sorted(kwargs):
            for chunk in cls.iter_item_to_bytes(key, kwargs[key]):
                digest.update(chunk)
        return digest.hexdigest()


__all__ = ["MMHasherAlgorithm", "MultiModalHasher"]
