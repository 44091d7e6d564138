"""Precomputed embeddings: passed to the model as they are, never through the HF processor.

Because they bypass the processor, embeddings are *passthrough* data, and a request carrying them
cannot use the processor cache (``ProcessorInputs.can_use_cache``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import torch

from mediaref.inputs import MultiModalFieldElem, MultiModalKwargsItem, MultiModalKwargsItems
from mediaref.parse._items import ModalityDataItems


def _shape(tensor: torch.Tensor) -> tuple[int, ...]:
    return tuple(tensor.shape)


class EmbeddingItems(ModalityDataItems[Any, torch.Tensor]):
    """A batched ``(items, tokens, hidden)`` tensor or a list of ``(tokens, hidden)`` tensors.

    ``expected_hidden_size`` rejects embeddings whose last dimension the model cannot take, here
    rather than as a shape error deep inside the forward pass.
    """

    def __init__(
        self,
        data: torch.Tensor | Sequence[torch.Tensor],
        modality: str,
        expected_hidden_size: int | None = None,
    ) -> None:
        super().__init__(data if isinstance(data, torch.Tensor) else list(data), modality)
        self._validate_ndim()
        if expected_hidden_size is not None:
            self._validate_hidden_size(expected_hidden_size)

    def _label(self, index: int | None = None) -> str:
        where = f" [{index}]" if index is not None else ""
        return f"{self.modality.capitalize()} embedding{where}"

    def _validate_ndim(self) -> None:
        if isinstance(self.data, torch.Tensor):
            if self.data.ndim not in (2, 3):
                raise ValueError(
                    f"{self._label()} must be 2D (seq_len, hidden_size) or 3D "
                    f"(batch, seq_len, hidden_size), got {self.data.ndim}D tensor "
                    f"with shape {_shape(self.data)}"
                )
            return
        for index, tensor in enumerate(self.data):
            if not isinstance(tensor, torch.Tensor) or tensor.ndim != 2:
                got = (
                    f"{tensor.ndim}D tensor with shape {_shape(tensor)}"
                    if isinstance(tensor, torch.Tensor)
                    else type(tensor).__name__
                )
                raise ValueError(
                    f"{self._label(index)} must be 2D (seq_len, hidden_size), got {got}"
                )

    def _validate_hidden_size(self, expected: int) -> None:
        tensors = [self.data] if isinstance(self.data, torch.Tensor) else self.data
        for index, tensor in enumerate(tensors):
            if tensor.shape[-1] != expected:
                label = self._label(None if isinstance(self.data, torch.Tensor) else index)
                raise ValueError(
                    f"{label} hidden dimension mismatch: got {tensor.shape[-1]}, but model expects "
                    f"{expected}. Embedding shape: {_shape(tensor)}"
                )

    def get_count(self) -> int:
        return len(self.data)

    def get(self, index: int) -> torch.Tensor:
        return self.data[index]  # type: ignore[no-any-return]

    def get_processor_data(self) -> Mapping[str, object]:
        return {}

    def get_passthrough_data(self) -> Mapping[str, object]:
        return {f"{self.modality}_embeds": self.data}

    def get_feature_size(self, item_idx: int) -> int:
        return len(self.get(item_idx))

    def _take(self, positions: list[int]) -> None:
        if isinstance(self.data, torch.Tensor):
            self.data = self.data[torch.tensor(positions, dtype=torch.long)]
        else:
            self.data = [self.data[i] for i in positions]


class ImageEmbeddingItems(EmbeddingItems):
    def __init__(
        self, data: torch.Tensor | Sequence[torch.Tensor], expected_hidden_size: int | None = None
    ) -> None:
        super().__init__(data, "image", expected_hidden_size)


class VideoEmbeddingItems(EmbeddingItems):
    def __init__(
        self, data: torch.Tensor | Sequence[torch.Tensor], expected_hidden_size: int | None = None
    ) -> None:
        super().__init__(data, "video", expected_hidden_size)


class AudioEmbeddingItems(EmbeddingItems):
    def __init__(
        self, data: torch.Tensor | Sequence[torch.Tensor], expected_hidden_size: int | None = None
    ) -> None:
        super().__init__(data, "audio", expected_hidden_size)


class FieldConfigLike(Protocol):
    """What :class:`DictEmbeddingItems` needs of a field config (``MultiModalFieldConfig``)."""

    def build_elems(self, key: str, batch: Any) -> Sequence[MultiModalFieldElem]: ...


class DictEmbeddingItems(ModalityDataItems[Mapping[str, Any], Mapping[str, Any]]):
    """Items given as a dict of HF-output-like tensors, cut into items by their field configs.

    Each item is the set of its field elements; :meth:`select` keeps those together, so a selected
    item has all of its fields and no other item's.
    """

    def __init__(
        self,
        data: Mapping[str, Any],
        modality: str,
        required_fields: set[str],
        fields_factory: Callable[[Mapping[str, Any]], Mapping[str, FieldConfigLike]],
    ) -> None:
        super().__init__(data, modality)
        missing_data = required_fields - data.keys()
        if missing_data:
            raise ValueError(
                f"The data should contain the fields: {required_fields}, "
                f"but only found the following keys: {set(data.keys())}"
            )
        fields_config = fields_factory(data)
        missing_config = required_fields - fields_config.keys()
        if missing_config:
            raise ValueError(
                f"required_fields={required_fields} should be a subset of "
                f"fields={set(fields_config.keys())}"
            )
        self.fields_config = fields_config
        self.required_fields = required_fields
        self._items = self._cut_into_items(data, fields_config)

    def _cut_into_items(
        self, data: Mapping[str, Any], fields_config: Mapping[str, FieldConfigLike]
    ) -> list[MultiModalKwargsItem]:
        per_item: list[list[MultiModalFieldElem]] | None = None
        for key, config in fields_config.items():
            if key not in data:
                continue
            elems = config.build_elems(key, data[key])
            if per_item is None:
                per_item = [[] for _ in elems]
            if len(elems) != len(per_item):
                raise ValueError(
                    f"{self.modality} field {key!r} has {len(elems)} items, "
                    f"other fields have {len(per_item)}"
                )
            for item_elems, elem in zip(per_item, elems, strict=True):  # lengths checked above
                item_elems.append(elem)
        return [MultiModalKwargsItem.from_elems(elems) for elems in per_item or []]

    def get_count(self) -> int:
        return len(self._items)

    def get(self, index: int) -> Mapping[str, Any]:
        return self._items[index].get_data()

    def get_processor_data(self) -> Mapping[str, object]:
        return {}

    def get_passthrough_data(self) -> Mapping[str, object]:
        return self.data

    def _take(self, positions: list[int]) -> None:
        self._items = [self._items[i] for i in positions]
        # The passthrough batch is rebuilt from the kept items, batched as their fields say.
        self.data = MultiModalKwargsItems({self.modality: list(self._items)}).get_data()


__all__ = [
    "AudioEmbeddingItems",
    "DictEmbeddingItems",
    "EmbeddingItems",
    "FieldConfigLike",
    "ImageEmbeddingItems",
    "VideoEmbeddingItems",
]
