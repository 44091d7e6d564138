"""Client-supplied item identities, normalized to one list per modality."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias

from mediaref.inputs import MultiModalUUIDDict

MultiModalUUIDItems: TypeAlias = dict[str, Sequence[str | None]]
"""``MultiModalUUIDDict`` with every modality's entry a list (``None``: no UUID for that item)."""


def parse_mm_uuids(mm_uuids: MultiModalUUIDDict | None) -> MultiModalUUIDItems:
    """Per modality, the UUIDs as a list: a single string becomes a one-item list; ``None``
    (no UUIDs at all) becomes ``{}``. Lists are kept as given."""
    if mm_uuids is None:
        return {}
    return {
        modality: [uuids] if isinstance(uuids, str) else uuids  # type: ignore[misc]
        for modality, uuids in mm_uuids.items()
    }


__all__ = ["MultiModalUUIDItems", "parse_mm_uuids"]
