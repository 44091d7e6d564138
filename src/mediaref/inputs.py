"""The shapes of multimodal data on its way in (items) and on its way out (processed inputs).

A :class:`~mediaref.media.base.MediaRef` is a legal item everywhere a decoded object is: fetched
media stays encoded until the processor decides it must decode it.
"""

from __future__ import annotations

import sys
from collections import UserDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, TypedDict, TypeVar, Union

import numpy as np
import torch

from mediaref.media.base import MediaRef

if TYPE_CHECKING:
    from PIL.Image import Image

_T = TypeVar("_T")

HfImageItem = Union["Image", np.ndarray, torch.Tensor]
"""An image the HF processor accepts: PIL, an (H, W, C) array or a (C, H, W) tensor."""

HfVideoItem = list["Image"] | np.ndarray | torch.Tensor | list[np.ndarray] | list[torch.Tensor]
"""A video the HF processor accepts: its frames, as a list or a (T, H, W, C) array."""

HfAudioItem = list[float] | np.ndarray | torch.Tensor
"""Audio samples the HF processor accepts."""

ImageItem = HfImageItem | MediaRef[Any]
"""An image, decoded or as a lazy reference (which decodes to a PIL image)."""

VideoItem = HfVideoItem | tuple[HfVideoItem, dict[str, Any]] | MediaRef[Any]
"""A video: frames, ``(frames, metadata)``, or a lazy reference decoding to ``(frames, metadata)``."""

AudioItem = HfAudioItem | tuple[HfAudioItem, float] | MediaRef[Any]
"""Audio: samples, ``(samples, sample_rate)``, or a lazy reference decoding to the latter."""

# Explicit TypeAlias: mypy reads a bare ``_T | ...`` assignment as a variable, not a generic alias.
ModalityData: TypeAlias = _T | list[_T | None] | None
"""One item, a list of items (``None`` for an item the client identifies by UUID), or nothing."""

MultiModalDataDict = Mapping[str, ModalityData[Any]]
"""Modality name (``"image"``, ``"video"``, ``"audio"``, ...) to its data."""

MultiModalUUIDDict = Mapping[str, Sequence[str | None] | str | None]
"""Client-supplied identities, per modality and item, that replace content hashing."""


@dataclass
class PlaceholderRange:
    """Where one item's placeholder tokens sit in the prompt.

    ``is_embed`` marks, within the range, the tokens that receive the item's embeddings (others
    are structural tokens such as ``<|vision_start|>``); ``None`` means all of them do.
    """

    offset: int
    length: int
    is_embed: torch.Tensor | None = None

    def get_num_embeds(self) -> int:
        if self.is_embed is None:
            return self.length
        return int(self.is_embed.sum().item())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PlaceholderRange):
            return NotImplemented
        if (self.offset, self.length) != (other.offset, other.length):
            return False
        if self.is_embed is None or other.is_embed is None:
            return self.is_embed is None and other.is_embed is None
        return bool(torch.equal(self.is_embed, other.is_embed))


FieldKind = Literal["batched", "flat", "shared"]
"""How a field batches: stacked per item, concatenated along dim 0, or shared by every item."""


@dataclass(frozen=True)
class MultiModalFieldElem:
    """One item's slice of one HF output field, and how it batches with the other items' slices."""

    modality: str
    key: str
    data: Any
    kind: FieldKind


def estimate_nbytes(value: object) -> int:
    """The bytes ``value`` holds: the one estimate the processor caches budget with.

    Tensors and arrays count their buffers (``sys.getsizeof`` sees only a tensor's Python shell),
    objects with an ``nbytes`` (a :class:`MultiModalKwargsItem`) report it, containers sum their
    contents, and anything else counts as ``sys.getsizeof``.
    """
    if isinstance(value, torch.Tensor):
        return value.element_size() * value.nelement()
    nbytes = getattr(value, "nbytes", None)
    if isinstance(nbytes, (int, np.integer)):
        return int(nbytes)
    if isinstance(value, Mapping):
        return sum(estimate_nbytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(estimate_nbytes(v) for v in value)
    return sys.getsizeof(value)


class MultiModalKwargsItem(UserDict[str, MultiModalFieldElem]):
    """The processed model inputs of one multimodal item: field name -> element."""

    @classmethod
    def from_elems(cls, elems: Sequence[MultiModalFieldElem]) -> MultiModalKwargsItem:
        return cls({elem.key: elem for elem in elems})

    @property
    def modality(self) -> str:
        modalities = {elem.modality for elem in self.data.values()}
        if len(modalities) != 1:
            raise ValueError(f"an item must have exactly one modality, found {sorted(modalities)}")
        return next(iter(modalities))

    def get_data(self) -> dict[str, Any]:
        return {key: elem.data for key, elem in self.data.items()}

    @property
    def nbytes(self) -> int:
        return sum(estimate_nbytes(elem.data) for elem in self.data.values())


def _batch_field(elems: Sequence[MultiModalFieldElem]) -> Any:
    kind = elems[0].kind
    values = [elem.data for elem in elems]
    if kind == "shared":
        return values[0]
    if not all(isinstance(v, torch.Tensor) for v in values):
        return values
    if kind == "flat":
        return torch.cat(values, dim=0)
    if len({tuple(v.shape) for v in values}) == 1:
        return torch.stack(values, dim=0)
    return values  # ragged batched fields stay a list, as in vLLM


class MultiModalKwargsItems(UserDict[str, list[MultiModalKwargsItem]]):
    """Modality -> its processed items, in request order.

    An item is None where a sender (frontend) cache hit left it to the engine core, which holds it.
    """

    def get_data(self) -> dict[str, Any]:
        """Batch every field across all present items, the way the model consumes them."""
        by_key: dict[str, list[MultiModalFieldElem]] = {}
        for items in self.data.values():
            for item in items:
                if item is None:  # a sender-cache hit
                    continue
                for key, elem in item.items():
                    by_key.setdefault(key, []).append(elem)
        return {key: _batch_field(elems) for key, elems in by_key.items()}


MultiModalHashes = dict[str, list[str]]
MultiModalPlaceholderDict = Mapping[str, Sequence[PlaceholderRange]]


class MultiModalInputs(TypedDict, total=False):
    """What the processor hands the engine for one request."""

    type: Literal["multimodal"]
    prompt_token_ids: list[int]
    mm_kwargs: MultiModalKwargsItems
    mm_hashes: MultiModalHashes
    mm_placeholders: MultiModalPlaceholderDict
    cache_salt: str
    mm_device_do_normalize: bool
    """True: pixel fields (``pixel_values``, ``pixel_values_videos``) are raw ``uint8`` and the
    model must apply ``mediaref.ops.mm_input_norm.build_mm_input_norm``'s module; False or absent:
    the processor rescaled and normalized them on the CPU (mediaref addition)."""


__all__ = [
    "AudioItem",
    "FieldKind",
    "HfAudioItem",
    "HfImageItem",
    "HfVideoItem",
    "ImageItem",
    "ModalityData",
    "MultiModalDataDict",
    "MultiModalFieldElem",
    "MultiModalHashes",
    "MultiModalInputs",
    "MultiModalKwargsItem",
    "MultiModalKwargsItems",
    "MultiModalPlaceholderDict",
    "MultiModalUUIDDict",
    "PlaceholderRange",
    "VideoItem",
    "estimate_nbytes",
]
