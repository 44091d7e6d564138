"""Precomputed embeddings: passed to the model as they are, never through the HF processor.

Because they bypass the processor, embeddings are *passthrough* data, and a request carrying them
cannot use the processor cache (``ProcessorInputs.can_use_cache``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence, Set
from typing import Any, Literal, TypeAlias

import torch

from mediaref.inputs import MultiModalFieldConfig, MultiModalKwargsItem, MultiModalKwargsItems
from mediaref.media.base import MediaWithBytes
from mediaref.parse._items import ModalityDataItems

EmbeddingFieldRole: TypeAlias = Literal["values", "metadata"]
"""What one field of a precomputed-embedding input carries: ``"values"``, the embeddings
themselves; ``"metadata"``, what sizes the prompt's placeholder range (e.g. token counts). A
deployment that receives the embeddings through an encoder-cache connector gets requests with the
metadata alone, so the values become optional there and the metadata stays required."""


def _shape(tensor: torch.Tensor) -> tuple[int, ...]:
    return tuple(tensor.shape)


def validate_embedding_ndim(tensor: torch.Tensor, modality: str, index: int | None = None) -> None:
    """Raise ``ValueError`` unless ``tensor`` is 2-D ``(seq_len, hidden_size)`` or 3-D
    ``(batch, seq_len, hidden_size)``; ``index`` places a list entry in the message."""
    if tensor.ndim not in (2, 3):
        where = f" [{index}]" if index is not None else ""
        raise ValueError(
            f"{modality.capitalize()} embedding{where} must be 2D (seq_len, hidden_size) or 3D "
            f"(batch, seq_len, hidden_size), got {tensor.ndim}D tensor with shape {_shape(tensor)}"
        )


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
            validate_embedding_ndim(self.data, self.modality)
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
        item = self.data[index]
        return item.media if isinstance(item, MediaWithBytes) else item  # type: ignore[no-any-return]

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


class DictEmbeddingItems(ModalityDataItems[Mapping[str, Any], Mapping[str, Any]]):
    """Items given as a dict of HF-output-like tensors, cut into items by their field configs.

    ``required_fields`` must be in ``data``; ``optional_fields`` may be missing (the embedding
    values on a deployment that receives them through a connector, see
    ``MultiModalDataParser.embedding_field_sets``). Every declared field needs a config from
    ``fields_factory``. Each item is the set of its field elements; :meth:`select` keeps those
    together, so a selected item has all of its fields and no other item's.
    """

    def __init__(
        self,
        data: Mapping[str, Any],
        modality: str,
        required_fields: Set[str],
        fields_factory: Callable[[Mapping[str, Any]], Mapping[str, MultiModalFieldConfig]],
        optional_fields: Set[str] = frozenset(),
    ) -> None:
        super().__init__(data, modality)
        if not required_fields:
            # Nothing would size the placeholder range: the items would parse into nothing and
            # the prompt come out silently wrong.
            raise ValueError(
                f"Cannot parse {modality!r} embeddings: every declared field is optional "
                f"({sorted(optional_fields)}), so nothing is left to size the placeholder range."
            )
        missing_data = set(required_fields) - data.keys()
        if missing_data:
            raise ValueError(
                f"The data should contain the fields: {set(required_fields)}, "
                f"but only found the following keys: {set(data.keys())}"
            )
        fields_config = fields_factory(data)
        declared = set(required_fields) | set(optional_fields)
        if not declared <= fields_config.keys():
            raise ValueError(
                f"declared_fields={declared} should be a subset of fields={set(fields_config)}"
            )
        self.fields_config = fields_config
        self.required_fields = set(required_fields)
        kwargs = MultiModalKwargsItems.from_hf_inputs(data, fields_config)
        self._items: list[MultiModalKwargsItem] = list(kwargs.get(modality, []))

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


def audio_embedding_items(
    data: Mapping[str, Any], required: Set[str], optional: Set[str]
) -> DictEmbeddingItems:
    """Audio given as ``audio_embeds`` (one ``(tokens, hidden)`` tensor per clip) with
    ``audio_num_tokens`` (one positive count per clip, as ``(n,)`` or ``(n, 1)`` integers), which
    sizes each clip's placeholder; the counts stay on the CPU."""
    counts = data.get("audio_num_tokens")
    if (
        not isinstance(counts, torch.Tensor)
        or counts.dtype not in (torch.int32, torch.int64)
        or counts.ndim not in (1, 2)
        or (counts.ndim == 2 and counts.shape[1] != 1)
        or not bool(torch.all(counts > 0))
    ):
        raise ValueError("audio_num_tokens must contain one positive integer per audio")
    counts = counts.flatten()
    embeds = data.get("audio_embeds")
    if embeds is not None and (
        len(embeds) != len(counts)
        or any(
            len(embedding) != int(count) for embedding, count in zip(embeds, counts, strict=True)
        )
    ):
        raise ValueError("audio_num_tokens does not match audio_embeds")
    return DictEmbeddingItems(
        {**data, "audio_num_tokens": counts},
        modality="audio",
        required_fields=required,
        optional_fields=optional,
        fields_factory=lambda _: {
            "audio_embeds": MultiModalFieldConfig.batched("audio"),
            "audio_num_tokens": MultiModalFieldConfig.batched("audio", keep_on_cpu=True),
        },
    )


__all__ = [
    "AudioEmbeddingItems",
    "DictEmbeddingItems",
    "EmbeddingFieldRole",
    "EmbeddingItems",
    "ImageEmbeddingItems",
    "VideoEmbeddingItems",
    "audio_embedding_items",
    "validate_embedding_ndim",
]
