"""Response JSON with megabytes of base64 in it, written without ``json.dumps`` scanning them.

A rendered 1080p image's tensors are ~17 MB of base64; ``json.dumps`` spends ~50 ms escaping a
string that needs no escaping. :func:`dump_json` writes every ``bytes`` value (base64, so plain
ASCII: what :mod:`mediaref.serve.features` encodes) as a JSON string as it is: the rest of the
payload is dumped with a placeholder in each such place, then the blobs are spliced in.
"""

from __future__ import annotations

import json
import uuid
from typing import Any


def _swap_bytes(value: Any, blobs: list[bytes], marker: str) -> Any:
    if isinstance(value, bytes):
        blobs.append(value)
        return f"{marker}{len(blobs) - 1}"
    if isinstance(value, dict):
        return {key: _swap_bytes(item, blobs, marker) for key, item in value.items()}
    if isinstance(value, list):
        if value and isinstance(value[0], int):
            return value  # token ids: nothing to swap, and long
        return [_swap_bytes(item, blobs, marker) for item in value]
    return value


def dump_json(payload: Any) -> bytes:
    """``payload`` as compact JSON bytes; each ``bytes`` value (ASCII) becomes a string."""
    blobs: list[bytes] = []
    # A fresh marker per call: no string a client sent can look like one.
    marker = f"mediaref-blob-{uuid.uuid4().hex}-"
    text = json.dumps(_swap_bytes(payload, blobs, marker), separators=(",", ":"))
    if not blobs:
        return text.encode()
    pieces = text.split(f'"{marker}')
    out = [pieces[0].encode()]
    for piece in pieces[1:]:
        index, rest = piece.split('"', 1)
        out.extend((b'"', blobs[int(index)], b'"', rest.encode()))
    return b"".join(out)


__all__ = ["dump_json"]
