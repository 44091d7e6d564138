"""Taking ownership of a request's media and checking its shape before any work is done."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mediaref.exceptions import VLLMValidationError
from mediaref.inputs import MultiModalDataDict, MultiModalUUIDDict
from mediaref.media.base import MediaRef
from mediaref.parse import MultiModalDataItems
from mediaref.processing.inputs import mm_uuids_for


def _items_of(data: Any) -> list[Any]:
    return data if isinstance(data, list) else [data]


def fork_media_refs(mm_data: MultiModalDataDict) -> dict[str, Any]:
    """``mm_data`` with each ref replaced by a fork that processing owns and may release.

    The caller's refs stay usable: releasing a fork gives up only the fork's hold on the payload.
    """
    owned: dict[str, Any] = {}
    for modality, data in mm_data.items():
        if isinstance(data, MediaRef):
            owned[modality] = data.fork()
        elif isinstance(data, list):
            owned[modality] = [item.fork() if isinstance(item, MediaRef) else item for item in data]
        else:
            owned[modality] = data
    return owned


def release_media_refs(owned: Mapping[str, Any]) -> None:
    """Release every ref :func:`fork_media_refs` made."""
    for data in owned.values():
        for item in _items_of(data):
            if isinstance(item, MediaRef):
                item.release()


def validate_mm_counts(mm_items: MultiModalDataItems, limits: Mapping[str, int | None]) -> None:
    """Every modality is one the model takes, and no more items than its per-prompt limit."""
    for modality, count in mm_items.get_all_counts().items():
        if modality not in limits:
            raise VLLMValidationError(
                f"{modality} input is not supported by this model "
                f"(supported: {', '.join(sorted(limits)) or 'none'})",
                parameter=modality,
            )
        limit = limits[modality]
        if limit is not None and count > limit:
            raise VLLMValidationError(
                f"at most {limit} {modality} item(s) per prompt are supported, got {count}",
                parameter=modality,
            )


def validate_mm_uuids(mm_items: MultiModalDataItems, mm_uuids: MultiModalUUIDDict | None) -> None:
    """Client UUIDs, where given, come one per item of a modality the request has."""
    counts = mm_items.get_all_counts()
    for modality, uuids in (mm_uuids or {}).items():
        if uuids is None:
            continue
        if modality not in counts:
            raise VLLMValidationError(
                f"multi_modal_uuids[{modality!r}] is given but the request has no {modality} items",
                parameter="multi_modal_uuids",
            )
        mm_uuids_for(modality, mm_uuids, counts[modality])


__all__ = ["fork_media_refs", "release_media_refs", "validate_mm_counts", "validate_mm_uuids"]
