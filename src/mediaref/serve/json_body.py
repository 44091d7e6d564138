"""Response JSON with megabytes of base64 in it, written without ``json.dumps`` scanning them.

A rendered 1080p image's tensors are ~17 MB of base64; ``json.dumps`` spends ~50 ms escaping a
string that needs no escaping. :func:`dump_json` writes every ``bytes`` value (base64, so plain
ASCII: what :mod:`mediaref.serve.features` encodes) as a JSON string as it is: the rest of the
payload is dumped with a placeholder in each such place, then the blobs are spliced in.

The rest is written by msgspec (a routing answer's ~5,000 token ids: 0.02 ms against
``json.dumps``' 0.26), cheap enough to run on the event loop. Its output is vLLM's JSON read
back value for value; as vLLM's server writes (``ensure_ascii=False``), text other than ASCII is
UTF-8, not escaped. A value msgspec cannot write goes to ``json.dumps``.

**A client must take its response.** Written to a client that stops reading, a response would
wait forever, holding its megabytes and its connection; :class:`JsonPiecesPayload` holds each
write to a :class:`~mediaref.serve.client_limits.TransferPace` (``--send-timeout``,
``--min-send-rate-kb``) and closes the connection of a client too slow for it.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
from aiohttp.abc import AbstractStreamWriter
from aiohttp.payload import Payload

from mediaref.serve.client_limits import TransferPace

_ENCODER = msgspec.json.Encoder()

WRITE_SLICE_BYTES = 1024 * 1024
"""The most of a response body handed to the socket at once (see :meth:`JsonPiecesPayload.write`)."""


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


def dump_json_pieces(payload: Any) -> list[bytes]:
    """``payload`` as compact JSON, in pieces whose concatenation is the document: each
    ``bytes`` value (ASCII) is a piece of its own, as it is, between its quotes. The pieces are
    written one after the other (:class:`JsonPiecesPayload`): joining them would copy every
    blob once more (a fifth of a hit's time for a 1080p image's 17 MB)."""
    blobs: list[bytes] = []
    # A fresh marker per call: no string a client sent can look like one.
    marker = f"mediaref-blob-{uuid.uuid4().hex}-"
    text = _encode(_swap_bytes(payload, blobs, marker))
    if not blobs:
        return [text]
    pieces = text.split(f'"{marker}'.encode())
    out = [pieces[0]]
    for piece in pieces[1:]:
        index, rest = piece.split(b'"', 1)
        out.extend((b'"', blobs[int(index)], b'"', rest))
    return out


def _encode(value: Any) -> bytes:
    try:
        return _ENCODER.encode(value)
    except (TypeError, msgspec.EncodeError):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def dump_json(payload: Any) -> bytes:
    """``payload`` as compact JSON bytes; each ``bytes`` value (ASCII) becomes a string."""
    return b"".join(dump_json_pieces(payload))


class ResponseNotTaken(ConnectionResetError):
    """The client took its response slower than its :class:`TransferPace`; the connection is
    closed (a ``ConnectionError``: aiohttp treats it as the client gone)."""


class JsonPiecesPayload(Payload):
    """A response body of :func:`dump_json_pieces`' pieces, written piece by piece, each write
    within ``pace`` when one is given (``on_cut`` is called for a connection it closes)."""

    _value: list[bytes]

    def __init__(
        self,
        pieces: list[bytes],
        pace: TransferPace | None = None,
        on_cut: Callable[[], None] = lambda: None,
    ) -> None:
        super().__init__(pieces, content_type="application/json")
        self._size = sum(len(piece) for piece in pieces)
        self._pace = pace
        self._on_cut = on_cut

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return b"".join(self._value).decode(encoding, errors)

    async def as_bytes(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        return b"".join(self._value)

    def _slices(self) -> Iterator[bytes | memoryview]:
        # A blob goes out a slice at a time, each awaited: handed over whole, what the socket
        # cannot take at once (most of 17 MB) is copied into the transport's buffer first.
        for piece in self._value:
            if len(piece) <= WRITE_SLICE_BYTES:
                yield piece
                continue
            view = memoryview(piece)
            for start in range(0, len(view), WRITE_SLICE_BYTES):
                yield view[start : start + WRITE_SLICE_BYTES]

    async def write(self, writer: AbstractStreamWriter) -> None:
        transport = getattr(writer, "transport", None)
        if self._pace is None or transport is None:
            for chunk in self._slices():
                await writer.write(chunk)
            return
        # The pace holds slice by slice: the kernel's buffers take the first megabytes at once
        # whether the client reads or not, so an average from the first byte would let a
        # client that reads nothing bank that credit. Each slice gets the grace and what the
        # minimum rate allows for its size; the whole response gets the timeout. Past either,
        # a timer aborts the connection (dropping what is buffered, which close() would wait
        # to send), and the awaited write fails with the connection lost.
        loop = asyncio.get_running_loop()
        start = loop.time()
        last = start + self._pace.timeout_seconds
        sent = 0
        cut = False

        def abort() -> None:
            nonlocal cut
            cut = True
            transport.abort()
            self._on_cut()

        try:
            for chunk in self._slices():
                timer = loop.call_at(
                    min(loop.time() + self._pace.deadline(len(chunk)), last), abort
                )
                try:
                    await writer.write(chunk)
                finally:
                    timer.cancel()
                sent += len(chunk)
            # The last slice is taken too, not left in the transport's buffer for the
            # connection to wait on after this request.
            timer = loop.call_at(min(loop.time() + self._pace.deadline(0), last), abort)
            try:
                await writer.drain()
            finally:
                timer.cancel()
        except ConnectionError:
            if not cut:
                raise
            raise ResponseNotTaken(
                f"the client took {sent} of {self._size} response bytes in "
                f"{loop.time() - start:.1f} s (--send-timeout, --min-send-rate-kb)"
            ) from None


__all__ = ["JsonPiecesPayload", "ResponseNotTaken", "dump_json", "dump_json_pieces"]
