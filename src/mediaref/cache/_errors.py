"""The one error the multimodal caches raise on purpose."""

from __future__ import annotations

from collections.abc import Iterable

from mediaref.exceptions import MediaRefError


class MultiModalCacheMissError(MediaRefError, LookupError, RuntimeError):
    """Items were expected in the cache (sent as ``None``) but are not there.

    On the engine core this means the frontend's mirror and the engine-core cache have drifted
    apart: their ``get_and_update`` calls did not see the same requests in the same order (see
    :class:`~mediaref.cache.BaseMultiModalCache`). On the frontend it means a caller relied on a
    stale ``is_cached`` answer. ``mm_hashes`` lists every missing hash of the batch, in order, so
    one retry with the data attached recovers the whole request.

    A :class:`RuntimeError`, as vLLM's is, so callers catching that keep working; also a
    :class:`LookupError` (not :class:`KeyError`, whose ``str()`` quotes the message) because it
    is a failed lookup by key; a server error (500) because drift is never the client's fault.
    The engine answers it by having the frontend :meth:`invalidate` the hashes and the client
    retry with the data attached.
    """

    def __init__(self, mm_hashes: Iterable[str]) -> None:
        self.mm_hashes = list(dict.fromkeys(mm_hashes))  # de-duplicated, order kept
        super().__init__(
            f"multimodal cache miss: {', '.join(self.mm_hashes)} not cached and no data was "
            "given for them (the frontend and engine-core caches have drifted, or the cached "
            "apply ran out of order)"
        )
