"""The per-request media caps: items per request, encoded bytes per item and per request.

As in sglang-mm's driver: 64 items, 64 MiB per item and 256 MiB per request by default, over
every modality and every source form (``data:`` URLs, files and downloads alike: the transport
caps bound downloads only, and a ``data:`` payload arrives already in memory). Read when a
request's data is parsed, before any item is hashed or decoded; 0 or less turns a cap off.

- ``MEDIAREF_MAX_MEDIA_ITEMS_PER_REQUEST`` (64): items of all modalities together;
- ``MEDIAREF_MAX_MEDIA_ITEM_SIZE_MB`` (64): one item's encoded payload;
- ``MEDIAREF_MAX_MEDIA_REQUEST_SIZE_MB`` (256): all items' encoded payloads together.

Only encoded payloads count (a :class:`~mediaref.media.base.MediaRef`'s bytes, a
``MediaWithBytes``' original bytes): media a caller hands over decoded has no encoded size.
Over a cap is :class:`~mediaref.exceptions.MediaTooLargeError` (HTTP 413).
"""

from __future__ import annotations

from collections.abc import Iterable

from mediaref import envs
from mediaref.exceptions import MediaTooLargeError
from mediaref.media.base import MediaRef, MediaWithBytes

__all__ = ["check_request_caps", "encoded_size"]

_MIB = 1024 * 1024


def encoded_size(item: object) -> int:
    """The encoded payload size of one raw item; 0 when it carries none."""
    if isinstance(item, MediaRef):
        return len(item.data)
    if isinstance(item, MediaWithBytes):
        return len(item.original_bytes)
    return 0


def check_request_caps(items: Iterable[tuple[str, int, object]]) -> None:
    """Refuse a request whose ``(modality, index, raw item)`` triples exceed a cap."""
    max_items = int(envs.MEDIAREF_MAX_MEDIA_ITEMS_PER_REQUEST)
    max_item = envs.size_cap_bytes("MEDIAREF_MAX_MEDIA_ITEM_SIZE_MB")
    max_request = envs.size_cap_bytes("MEDIAREF_MAX_MEDIA_REQUEST_SIZE_MB")
    count = total = 0
    for modality, index, item in items:
        count += 1
        if max_items > 0 and count > max_items:
            raise MediaTooLargeError(
                f"the request has more than {max_items} media items "
                "(MEDIAREF_MAX_MEDIA_ITEMS_PER_REQUEST)",
                modality=modality,
                index=index,
            )
        size = encoded_size(item)
        if max_item is not None and size > max_item:
            raise MediaTooLargeError(
                f"{modality} item {index} is {size / _MIB:.1f} MiB encoded, over "
                f"MEDIAREF_MAX_MEDIA_ITEM_SIZE_MB ({max_item / _MIB:g} MiB)",
                modality=modality,
                index=index,
            )
        total += size
        if max_request is not None and total > max_request:
            raise MediaTooLargeError(
                f"the request's media exceed MEDIAREF_MAX_MEDIA_REQUEST_SIZE_MB "
                f"({max_request / _MIB:g} MiB encoded)",
                modality=modality,
                index=index,
            )
