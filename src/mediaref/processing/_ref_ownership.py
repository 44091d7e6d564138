"""Taking ownership of a request's media: processing works on forks of the caller's refs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mediaref.inputs import MultiModalDataDict
from mediaref.media.base import MediaRef

_MAX_NESTING = 3  # list -> (ref, metadata) tuple -> ref: deeper structures hold no media items


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


def caller_ref_ids(mm_data: MultiModalDataDict) -> set[int]:
    """The identities of the refs the caller passed in ``mm_data``, wherever they sit (a list, a
    ``(ref, metadata)`` tuple): processing must never release one of these."""
    found: set[int] = set()

    def visit(value: object, depth: int) -> None:
        if isinstance(value, MediaRef):
            found.add(id(value))
        elif depth < _MAX_NESTING and isinstance(value, (list, tuple)):
            for inner in value:
                visit(inner, depth + 1)

    for data in mm_data.values():
        visit(data, 0)
    return found


__all__ = ["caller_ref_ids", "fork_media_refs", "release_media_refs"]
