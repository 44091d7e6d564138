"""vLLM's ``mm_serde`` when vLLM runs on mediaref: the same two functions, each item encoded once.

vLLM's render server writes every processed item of every response with
``vllm.entrypoints.scale_out.token_in_token_out.mm_serde.encode_mm_kwargs_item`` (base64 of its
engine's msgpack). For a repeated image that is most of its work: the processor cache hands the
same item back, and vLLM encodes it again on every request (~60% of the render server's main
thread on a hot 1080p workload). Under ``mediaref-vllm`` the import hook answers that module with
this one:

- :func:`encode_mm_kwargs_item` writes the same bytes (mediaref's writer of vLLM's format,
  :mod:`mediaref.serve.mm_serde`, held to vectors vLLM wrote), and keeps the encoding of each
  item object it saw, within ``MEDIAREF_HOOK_ENCODED_CACHE_MB``: an item the cache hands out
  again is not encoded again. An entry is the item's identity and its elements' (a weak
  reference, so a freed item's id taken by another object never matches): an item whose
  elements were replaced is encoded afresh. Items are not changed in place once processed (the
  processor cache shares them between requests on the same assumption);
- :func:`decode_mm_kwargs_item` is mediaref's reader of the same format.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Hashable

import cachetools

from mediaref import envs
from mediaref.inputs import MultiModalKwargsItem
from mediaref.serve.mm_serde import decode_mm_kwargs_item
from mediaref.serve.mm_serde import encode_mm_kwargs_item as _encode

_Entry = tuple["weakref.ref[MultiModalKwargsItem]", Hashable, str]


def _fingerprint(item: MultiModalKwargsItem) -> Hashable:
    return tuple((key, id(elem), id(elem.data), id(elem.field)) for key, elem in item.items())


class _EncodedItems:
    """Encodings by item object, least recently used first out past ``capacity_bytes``."""

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()
        self._entries: cachetools.LRUCache[int, _Entry] = cachetools.LRUCache(
            maxsize=max(capacity_bytes, 1), getsizeof=lambda entry: len(entry[2])
        )

    def encode(self, item: MultiModalKwargsItem) -> str:
        fingerprint = _fingerprint(item)
        with self._lock:
            entry = self._entries.get(id(item))
            if entry is not None and entry[0]() is item and entry[1] == fingerprint:
                self.hits += 1
                return entry[2]
            self.misses += 1
        encoded = _encode(item)  # outside the lock: other responses keep reading
        if 0 < len(encoded) <= self.capacity_bytes:
            with self._lock:
                self._entries[id(item)] = (weakref.ref(item), fingerprint, encoded)
        return encoded


_encoded = _EncodedItems(envs.size_cap_bytes("MEDIAREF_HOOK_ENCODED_CACHE_MB") or 0)


def encode_mm_kwargs_item(item: MultiModalKwargsItem) -> str:
    """``item`` as vLLM's render server writes it (vLLM's function of the same name)."""
    return _encoded.encode(item)


__all__ = ["decode_mm_kwargs_item", "encode_mm_kwargs_item"]
