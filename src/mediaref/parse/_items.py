"""Parsed multimodal items: a decoded view for the HF processor, a raw view for everything else.

``get(index)`` returns what the HF processor must see: HF helpers such as ``is_valid_image`` do
isinstance checks, so a :class:`MediaRef` is decoded here (by the time the processor asks, the
batch decode has run and this is a cache read). ``get_raw(index)`` returns the item as stored —
for fetched media, the ref itself — and is what hashing, cache-miss selection and byte release
read, so none of them pays for a decode.

``select(indices)`` cuts existing items down without parsing them again: each kept item keeps its
decode transforms, its key and its position in the request (:meth:`get_original_index`).
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections import UserDict
from collections.abc import Iterator, Mapping, Sequence, Set
from typing import Any, Generic, NamedTuple, TypeVar

import numpy as np
import torch
from PIL.Image import Image

from mediaref.media.base import MediaRef, MediaWithBytes

_T = TypeVar("_T")
_I = TypeVar("_I")
_ItemsT = TypeVar("_ItemsT", bound="ModalityDataItems[Any, Any]")
_D = TypeVar("_D", bound="ModalityDataItems[Any, Any]")


class ModalityDataItems(ABC, Generic[_T, _I]):
    """The parsed items of one modality, in request order."""

    def __init__(self, data: _T, modality: str) -> None:
        self.data: _T = data
        self.modality = modality
        # Positions in the request of this object's items; None while it holds the request's own.
        self._original_indices: tuple[int, ...] | None = None

    def __repr__(self) -> str:
        # Never shows items: repr must not decode a ref.
        return f"{type(self).__name__}(modality={self.modality!r}, len={len(self)})"

    def __len__(self) -> int:
        return self.get_count()

    def __getitem__(self, index: int) -> _I:
        return self.get(index)

    def __iter__(self) -> Iterator[_I]:
        return (self.get(index) for index in range(self.get_count()))

    @abstractmethod
    def get_count(self) -> int:
        """The number of items."""

    @abstractmethod
    def get(self, index: int) -> _I:
        """The item as the HF processor sees it: decoded."""

    def get_raw(self, index: int) -> Any:
        """The item as stored: for fetched media the :class:`MediaRef`, which this never decodes."""
        return self.get(index)

    def get_all(self) -> list[_I]:
        return [self.get(index) for index in range(self.get_count())]

    def get_all_raw(self) -> list[Any]:
        return [self.get_raw(index) for index in range(self.get_count())]

    def get_item_for_hash(self, index: int) -> object:
        """What the hasher reads for item ``index``: the raw item (vLLM's name for
        :meth:`get_raw`), so a ref hashes as its key and a ``MediaWithBytes`` as its bytes."""
        return self.get_raw(index)

    def get_all_items_for_hash(self) -> list[object]:
        return [self.get_item_for_hash(index) for index in range(self.get_count())]

    @abstractmethod
    def get_processor_data(self) -> Mapping[str, object]:
        """The data to pass to the HF processor."""

    @abstractmethod
    def get_passthrough_data(self) -> Mapping[str, object]:
        """The data passed to the model directly, bypassing the HF processor (embeddings)."""

    def _check_index(self, index: int) -> int:
        count = self.get_count()
        if not 0 <= index < count:
            raise IndexError(f"{self.modality} item index {index} out of range for {count} items")
        return index

    def get_original_index(self, index: int) -> int:
        """The request position of item ``index``, through any number of selections."""
        self._check_index(index)
        return index if self._original_indices is None else self._original_indices[index]

    def select(self: _ItemsT, indices: Sequence[int]) -> _ItemsT:
        """The items at ``indices``, as the same class, neither validated nor normalized again.

        Raw refs are kept as they are (same objects, same keys, same mapped transforms), so a
        selected miss decodes exactly as it would have in the full batch.
        """
        positions = [self._check_index(index) for index in indices]
        selected = copy.copy(self)
        selected._original_indices = tuple(self.get_original_index(i) for i in positions)
        selected._take(positions)
        return selected

    def _take(self, positions: list[int]) -> None:
        """Keep only the items at ``positions``, on a shallow copy: rebind, never mutate.

        Subclasses holding per-item state override this and select that state too.
        """
        raise NotImplementedError(f"{type(self).__name__} does not support select()")


class ProcessorBatchItems(ModalityDataItems[Sequence[_T], _T]):
    """Items kept as a list, each a decoded object, a :class:`MediaRef` or ``None`` (UUID only)."""

    def __init__(self, data: Sequence[_T], modality: str) -> None:
        super().__init__(list(data), modality)

    def get_count(self) -> int:
        return len(self.data)

    def get_raw(self, index: int) -> Any:
        return self.data[index]

    def _decoded(self, index: int) -> Any:
        item = self.data[index]
        if isinstance(item, MediaRef):
            return item.decode()
        if isinstance(item, MediaWithBytes):  # HF sees the media; the hasher reads the bytes
            return item.media
        return item

    def get(self, index: int) -> _T:
        return self._decoded(index)  # type: ignore[no-any-return]

    def get_processor_data(self) -> Mapping[str, object]:
        return {f"{self.modality}s": self.get_all()}

    def get_passthrough_data(self) -> Mapping[str, object]:
        return {}

    def _take(self, positions: list[int]) -> None:
        self.data = [self.data[i] for i in positions]


class ImageSize(NamedTuple):
    width: int
    height: int


_CHANNEL_COUNTS = (1, 3, 4)


def array_image_size(image: np.ndarray | torch.Tensor) -> ImageSize:
    """The size of one image held as an array: ``(H, W)``, ``(H, W, C)`` or ``(C, H, W)``.

    As vLLM decides: a 3-D array whose last axis could be channels (1, 3 or 4) is channels-last
    (``np.asarray(pil_image)``), any other is channels-first; a 2-D array is grayscale.
    """
    shape = tuple(image.shape)
    if len(shape) == 2:
        return ImageSize(width=shape[1], height=shape[0])
    if len(shape) != 3:
        raise ValueError(f"an image array must be 2-D or 3-D, got shape {shape}")
    if shape[-1] in _CHANNEL_COUNTS:
        return ImageSize(width=shape[1], height=shape[0])
    return ImageSize(width=shape[2], height=shape[1])


def image_size_of(image: object) -> ImageSize:
    if isinstance(image, Image):
        return ImageSize(*image.size)
    if isinstance(image, (np.ndarray, torch.Tensor)):
        return array_image_size(image)
    raise TypeError(f"cannot tell the size of an image of type {type(image).__name__}")


class ImageProcessorItems(ProcessorBatchItems[Any]):
    """Images: PIL images, arrays, tensors or refs that decode to PIL images."""

    def __init__(self, data: Sequence[Any] | None) -> None:
        super().__init__([None] if data is None else data, "image")

    def get_image_size(self, item_idx: int) -> ImageSize:
        """The image's size; a ref is decoded to learn it (the decode is memoized)."""
        image = self.get(item_idx)
        if image is None:
            raise ValueError(f"Cannot get size of cached image at {item_idx}")
        return image_size_of(image)


def num_audio_samples(audio: object) -> int:
    """Samples per channel: the length of a 1-D clip, the longer axis of a 2-D one."""
    if isinstance(audio, (np.ndarray, torch.Tensor)):
        shape = tuple(audio.shape)
        if len(shape) == 1:
            return int(shape[0])
        if len(shape) == 2:
            return int(max(shape))
        raise ValueError(f"audio must be 1-D or 2-D, got shape {shape}")
    return len(audio)  # type: ignore[arg-type]


class AudioProcessorItems(ProcessorBatchItems[Any]):
    """Audio clips as samples at the model's rate (refs decode and normalize to that)."""

    def __init__(self, data: Sequence[Any] | None) -> None:
        super().__init__([None] if data is None else data, "audio")

    def get_audio_length(self, item_idx: int) -> int:
        audio = self.get(item_idx)
        if audio is None:
            raise ValueError(f"Cannot get length of cached audio at {item_idx}")
        return num_audio_samples(audio)


class VisionChunkProcessorItems(ProcessorBatchItems[Any]):
    """Items of the unified ``vision_chunk`` modality: images and chunks of videos
    (:class:`~mediaref.inputs.VisionChunk`), already decoded by the request parser."""

    def __init__(self, data: Sequence[Any]) -> None:
        super().__init__(data, "vision_chunk")


class MultiModalDataItems(UserDict[str, ModalityDataItems[Any, Any]]):
    """Like ``MultiModalDataDict``, normalized so that each modality holds a list of items."""

    def _require(self, modality: str) -> ModalityDataItems[Any, Any]:
        if modality not in self:
            raise KeyError(
                f"Modality {modality!r} not found. Available modalities: {set(self.keys())}"
            )
        return self[modality]

    def get_count(self, modality: str, *, strict: bool = True) -> int:
        """The number of items of ``modality``; 0 for an absent one unless ``strict``."""
        if modality not in self and not strict:
            return 0
        return self._require(modality).get_count()

    def get_all_counts(self) -> Mapping[str, int]:
        return {modality: items.get_count() for modality, items in self.items()}

    def get_items(self, modality: str, typ: type[_D] | tuple[type[_D], ...]) -> _D:
        """The items of ``modality``, which must be an instance of ``typ``."""
        items = self._require(modality)
        if not isinstance(items, typ):
            raise TypeError(
                f"Invalid type of data items for modality={modality!r}. "
                f"Expected type: {typ}, but found type: {type(items)}"
            )
        return items

    def select(self, modalities: Set[str] | Mapping[str, Sequence[int]]) -> MultiModalDataItems:
        """A subset, without parsing anything again.

        ``modalities`` a set of modality names (vLLM's form): those modalities' items, whole.
        A mapping of modality -> indices (mediaref's cache-miss selection): per modality named,
        the items at those indices, each keeping its decode transforms, key and request position
        (:meth:`ModalityDataItems.select`).
        """
        if isinstance(modalities, Mapping):
            return MultiModalDataItems(
                {
                    modality: self._require(modality).select(kept)
                    for modality, kept in modalities.items()
                }
            )
        return MultiModalDataItems({modality: self._require(modality) for modality in modalities})


__all__ = [
    "AudioProcessorItems",
    "ImageProcessorItems",
    "ImageSize",
    "ModalityDataItems",
    "MultiModalDataItems",
    "ProcessorBatchItems",
    "VisionChunkProcessorItems",
    "array_image_size",
    "image_size_of",
    "num_audio_samples",
]
