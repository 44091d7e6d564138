"""Processed multimodal inputs: per-item kwargs, grouped by modality, their batching, and the
engine's view of one item.

The HF processor returns one batch per field; the processor cache works per item. A
:class:`MultiModalKwargsItem` holds one item's elements (field name -> element), and
:class:`MultiModalKwargsItems` holds the items of a request by modality, in request order. An item
is ``None`` where a frontend (sender) cache hit left it to the engine core, which holds it; the
engine tracks each item, with its prompt position and cache identities, as a
:class:`MultiModalFeatureSpec`.
"""

from __future__ import annotations

from collections import UserDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, TypedDict

import torch

from mediaref.inputs._field_config import MultiModalFieldConfig
from mediaref.inputs._fields import (
    MultiModalFieldElem,
    MultiModalFlatField,
    MultiModalSharedField,
)
from mediaref.inputs._nested import (
    BatchedTensorInputs,
    NestedTensors,
    estimate_nbytes,
    nested_tensors_equal,
)
from mediaref.inputs._placeholders import PlaceholderRange


class MultiModalKwargsItem(UserDict[str, MultiModalFieldElem]):
    """The processed model inputs of one multimodal item: field name -> element."""

    @staticmethod
    def dummy(nbytes: int = 1) -> MultiModalKwargsItem:
        """An item of ``nbytes`` uninitialized bytes under the key ``"dummy"`` (for tests and
        cache sizing)."""
        elem = MultiModalFieldElem(
            data=torch.empty(nbytes, dtype=torch.uint8), field=MultiModalSharedField(1)
        )
        return MultiModalKwargsItem({"dummy": elem})

    def get_data(self) -> dict[str, NestedTensors]:
        """Field name -> this item's value."""
        return {key: elem.data for key, elem in self.items()}

    @property
    def nbytes(self) -> int:
        """The bytes this item's values hold (mediaref addition)."""
        return sum(estimate_nbytes(elem.data) for elem in self.values())


def _same_batch(left: MultiModalKwargsItem, right: MultiModalKwargsItem) -> bool:
    """Whether two items can be merged into one batch: the same fields, of the same kinds, and
    equal values for every shared field (a shared value is passed once for the whole batch)."""
    if left.keys() != right.keys():
        return False
    for key, elem in left.items():
        other = right[key]
        if type(elem.field) is not type(other.field):
            return False
        if isinstance(elem.field, MultiModalSharedField) and not nested_tensors_equal(
            elem.data, other.data
        ):
            return False
    return True


def _merge_items(
    items: Sequence[MultiModalKwargsItem], *, device: torch.types.Device, pin_memory: bool
) -> BatchedTensorInputs:
    by_key: dict[str, list[MultiModalFieldElem]] = {}
    for item in items:
        for key, elem in item.items():
            by_key.setdefault(key, []).append(elem)
    return {
        key: elems[0].field.reduce_data(elems, device=device, pin_memory=pin_memory)
        for key, elems in by_key.items()
    }


def batch_items(
    items: Sequence[MultiModalKwargsItem],
    *,
    device: torch.types.Device = None,
    pin_memory: bool = False,
) -> Iterator[tuple[int, BatchedTensorInputs]]:
    """Runs of consecutive items that can share one batch, each merged: ``(items, kwargs)``.

    A run ends where the next item has other fields or field kinds, or a different shared value.
    """
    start = 0
    for end in range(1, len(items) + 1):
        if end < len(items) and _same_batch(items[end - 1], items[end]):
            continue
        yield end - start, _merge_items(items[start:end], device=device, pin_memory=pin_memory)
        start = end


class MultiModalKwargsItems(UserDict[str, list[MultiModalKwargsItem]]):
    """Modality -> its processed items, in request order (``None`` for a sender-cache hit)."""

    @staticmethod
    def from_hf_inputs(
        hf_inputs: Mapping[str, Any], config_by_key: Mapping[str, MultiModalFieldConfig]
    ) -> MultiModalKwargsItems:
        """Cut an HF processor's output into items, as ``config_by_key`` says each field batches.

        Fields without a config, and configured fields absent (or ``None``) in the output, are
        skipped. Raises ``ValueError`` when the fields of one modality disagree on the number of
        items.
        """
        elems_by_modality: dict[str, dict[str, Sequence[MultiModalFieldElem]]] = {}
        for key, config in config_by_key.items():
            batch = hf_inputs.get(key)
            if batch is None:
                continue
            elems = config.build_elems(key, batch)
            if len(elems) > 0:
                elems_by_modality.setdefault(config.modality, {})[key] = elems
        items: dict[str, list[MultiModalKwargsItem]] = {}
        for modality, elems_by_key in elems_by_modality.items():
            counts = {key: len(elems) for key, elems in elems_by_key.items()}
            if len(set(counts.values())) > 1:
                raise ValueError(
                    f"Cannot merge different batch sizes for modality={modality!r}! Found: "
                    f"batch_sizes={counts}"
                )
            count = next(iter(counts.values()))
            items[modality] = [
                MultiModalKwargsItem({key: elems[i] for key, elems in elems_by_key.items()})
                for i in range(count)
            ]
        return MultiModalKwargsItems(items)

    def __getitem__(self, modality: str) -> list[MultiModalKwargsItem]:
        if modality not in self.data:
            raise KeyError(
                f"Modality {modality!r} not found. Available modalities: {set(self.keys())}"
            )
        return self.data[modality]

    def require_data(self) -> MultiModalKwargsItems:
        """``self``, once checked to hold every item (``RuntimeError`` names a ``None`` one)."""
        for modality, items in self.items():
            for index, item in enumerate(items):
                if item is None:
                    raise RuntimeError(f"Found empty mm_items[{modality}][{index}]")
        return self

    def get_data(
        self, *, device: torch.types.Device = None, pin_memory: bool = False
    ) -> dict[str, Any]:
        """Every field batched across the items, as the model takes them.

        Each modality's items must form one batch (``RuntimeError`` otherwise: mixed fields, or
        different shared values); every item must be present (:meth:`require_data`). The result
        is a :data:`~mediaref.inputs.BatchedTensorInputs`, typed loosely so callers can index the
        tensors the model's fields are known to hold.
        """
        batches = {
            modality: list(batch_items(items, device=device, pin_memory=pin_memory))
            for modality, items in self.require_data().items()
            if len(items) > 0
        }
        out: dict[str, Any] = {}
        for runs in batches.values():
            if len(runs) != 1:
                counts = {modality: len(runs) for modality, runs in batches.items()}
                raise RuntimeError(
                    f"Some modalities cannot be merged into a single batch "
                    f"(num_batches_by_modality={counts})"
                )
            out.update(runs[0][1])
        return out


MultiModalKwargsOptionalItems: TypeAlias = MultiModalKwargsItems
"""Items by modality where an item may be ``None`` (held by the engine core)."""


def _check_flat_coverage(key: str, config: MultiModalFieldConfig, batch: object) -> None:
    field = config.field
    if not isinstance(field, MultiModalFlatField):
        return
    if isinstance(batch, torch.Tensor):
        total = batch.shape[field.dim] if batch.ndim > field.dim else 0
    else:
        total = len(batch)  # type: ignore[arg-type]
    covered = field.rows_covered()
    # No items must mean no rows too: otherwise rows would be dropped silently.
    if covered != total:
        raise ValueError(f"field {key!r}: item sizes cover {covered} rows of {total}")


def build_kwargs_items(
    hf_inputs: Mapping[str, Any], fields_config: Mapping[str, MultiModalFieldConfig]
) -> MultiModalKwargsItems:
    """:meth:`MultiModalKwargsItems.from_hf_inputs`, strict (mediaref addition).

    Also rejects flat fields whose item sizes do not cover the batch exactly, and keeps a
    configured modality whose fields hold zero items (as an empty list). Fields without a config
    (``input_ids``, ``attention_mask`` from the dummy text) are dropped.
    """
    per_modality: dict[str, list[dict[str, MultiModalFieldElem]]] = {}
    for key, config in fields_config.items():
        if key not in hf_inputs:
            continue
        _check_flat_coverage(key, config, hf_inputs[key])
        elems = config.build_elems(key, hf_inputs[key])
        items = per_modality.setdefault(config.modality, [{} for _ in elems])
        if len(items) != len(elems):
            raise ValueError(
                f"field {key!r} has {len(elems)} {config.modality} items, "
                f"other fields have {len(items)}"
            )
        for item, elem in zip(items, elems, strict=True):  # lengths checked above
            item[key] = elem
    return MultiModalKwargsItems(
        {
            modality: [MultiModalKwargsItem(item) for item in items]
            for modality, items in per_modality.items()
        }
    )


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


@dataclass
class MultiModalFeatureSpec:
    """A request's item: its processed data, modality, cache identities and prompt position.

    ``data`` is ``None`` when the frontend found the item cached and sent nothing (the engine-core
    cache fills it in). ``identifier`` keys the encoder-output cache (it may carry a LoRA prefix);
    ``mm_hash``, when set, keys the processor cache, shared across LoRAs.
    """

    data: MultiModalKwargsItem | None
    modality: str
    identifier: str
    mm_position: PlaceholderRange
    mm_hash: str | None = None

    @staticmethod
    def gather_kwargs(
        features: list[MultiModalFeatureSpec], keys: set[str]
    ) -> dict[str, list[NestedTensors]]:
        """For each of ``keys``, the values the features' items hold, in feature order (features
        without data, and items without the key, are skipped)."""
        gathered: dict[str, list[NestedTensors]] = {}
        for feature in features:
            if feature.data is None:
                continue
            for key in keys:
                if key in feature.data:
                    gathered.setdefault(key, []).append(feature.data[key].data)
        return gathered


__all__ = [
    "MultiModalFeatureSpec",
    "MultiModalHashes",
    "MultiModalInputs",
    "MultiModalKwargsItem",
    "MultiModalKwargsItems",
    "MultiModalKwargsOptionalItems",
    "MultiModalPlaceholderDict",
    "batch_items",
    "build_kwargs_items",
]
