"""A least-recently-used map bounded by bytes, not by entry count.

Built on :class:`cachetools.LRUCache` with a ``getsizeof`` hook, in the cachetools style: an
entry larger than the whole budget is served by the caller but never stored, and storing it
evicts nothing (cachetools itself would raise ``ValueError("value too large")``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import cachetools

from mediaref import envs
from mediaref.exceptions import VLLMValidationError
from mediaref.inputs import estimate_nbytes

_K = TypeVar("_K", bound=Hashable)
_V = TypeVar("_V")

GiB_bytes = 1 << 30


def capacity_bytes_from_gb(mm_processor_cache_gb: float | None) -> int:
    """The byte budget for ``mm_processor_cache_gb`` (``None``: ``MEDIAREF_MM_PROCESSOR_CACHE_GB``)."""
    if mm_processor_cache_gb is None:
        mm_processor_cache_gb = float(envs.MEDIAREF_MM_PROCESSOR_CACHE_GB)
    if not mm_processor_cache_gb >= 0 or mm_processor_cache_gb == float("inf"):  # catches NaN
        raise VLLMValidationError(
            f"mm_processor_cache_gb must be a finite number >= 0, got {mm_processor_cache_gb!r}",
            parameter="mm_processor_cache_gb",
            value=mm_processor_cache_gb,
        )
    return int(mm_processor_cache_gb * GiB_bytes)


@dataclass(frozen=True)
class _Sized(Generic[_V]):
    """A stored value with its size, measured once: cachetools asks ``getsizeof`` on every
    insert, and measuring a kwargs item walks all of its fields."""

    value: _V
    nbytes: int


def _sized_nbytes(entry: _Sized[Any]) -> int:
    return entry.nbytes


class ByteBudgetLRU(Generic[_K, _V]):
    """Key -> value, evicting the least recently used entries once ``capacity_bytes`` is exceeded.

    Not thread-safe: the caches that own one serialize access with their own lock.
    """

    def __init__(
        self, capacity_bytes: int, getsizeof: Callable[[_V], int] = estimate_nbytes
    ) -> None:
        if capacity_bytes < 0:
            raise ValueError(f"capacity_bytes must be >= 0, got {capacity_bytes}")
        self._getsizeof = getsizeof
        # cachetools refuses maxsize 0 only for oversize values; a 0 budget also refuses
        # empty ones (see put), so the floor of 1 here is never reached by a stored entry.
        self._entries: cachetools.LRUCache[_K, _Sized[_V]] = cachetools.LRUCache(
            maxsize=max(capacity_bytes, 1), getsizeof=_sized_nbytes
        )
        self._capacity_bytes = capacity_bytes

    @property
    def capacity_bytes(self) -> int:
        return self._capacity_bytes

    @property
    def maxsize(self) -> int:
        """The byte budget (cachetools' name for it)."""
        return self._capacity_bytes

    def getsizeof(self, value: _V) -> int:
        """The size ``value`` would count against the budget."""
        return self._getsizeof(value)

    @property
    def size_bytes(self) -> int:
        """The bytes currently stored."""
        return int(self._entries.currsize)

    @property
    def currsize(self) -> int:
        """:attr:`size_bytes` under cachetools' name, which vLLM's cache has."""
        return self.size_bytes

    def __setitem__(self, key: _K, value: _V) -> None:
        """``cache[key] = value``, as on vLLM's cache (a cachetools ``LRUCache``): a value over
        the budget is a ``ValueError`` there, where :meth:`put` returns ``False``."""
        if not self.put(key, value):
            raise ValueError("value too large")

    def __getitem__(self, key: _K) -> _V:
        entry = self._entries[key]  # KeyError when absent, as a mapping's
        return entry.value

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        """Membership without touching: the eviction order is unchanged."""
        return key in self._entries

    def keys(self) -> set[_K]:
        return set(self._entries.keys())

    def get(self, key: _K) -> _V | None:
        """The value, marked most recently used; ``None`` when absent."""
        entry = self._entries.get(key)
        return None if entry is None else entry.value

    def touch(self, key: _K) -> bool:
        """Mark ``key`` most recently used; ``False`` when it is not stored."""
        return self._entries.get(key) is not None

    def put(self, key: _K, value: _V) -> bool:
        """Store ``value``, evicting least recently used entries until it fits.

        Returns ``False``, storing and evicting nothing, when ``value`` alone exceeds the budget
        (or the budget is 0): the caller serves it uncached.
        """
        nbytes = self._getsizeof(value)
        if self._capacity_bytes == 0 or nbytes > self._capacity_bytes:
            return False
        self._entries[key] = _Sized(value, nbytes)
        return True

    put_if_fits = put

    def pop(self, key: _K, default: _V | None = None) -> _V | None:
        entry = self._entries.pop(key, None)
        return default if entry is None else entry.value

    def clear(self) -> None:
        self._entries.clear()
