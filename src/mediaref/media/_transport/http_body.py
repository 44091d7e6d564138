"""One response body, read under the size cap, with the content codings we decode ourselves.

Sessions never decode (``auto_decompress=False``, see ``http_client``): aiohttp's decoder has no
output cap, so an honest 1 MB gzip body could inflate to gigabytes before any check ran. We ask
for ``Accept-Encoding: identity``; an origin that compresses anyway is handled here:

- no ``Content-Encoding`` or ``identity``: the bytes as sent;
- ``gzip`` / ``x-gzip`` / ``deflate`` (zlib-wrapped or raw, as aiohttp accepts it): decoded by
  zlib while streaming, in steps of at most 256 KiB that never ask for more output than the cap
  still allows (``decompressobj``'s ``max_length``), so a bomb stops at cap + 1 decoded bytes
  whatever its ratio;
- anything else (``br``, ``zstd``, ``compress``, stacked codings): refused as a bad response
  (HTTP 502, not retried). Decoding them needs optional libraries and they are not worth the
  surface for payloads that are compressed media already.

Both counts are held to the cap: the bytes on the wire (``Content-Length`` is checked before the
body is read) and the decoded bytes. The request's budget is charged as bytes arrive, with the
larger of the two. A body that ends before its compressed stream does, carries data after it, or
does not match its ``Content-Length`` is a bad response, never retried.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence

import aiohttp

from mediaref.media._transport.errors import BadResponseError, TooLargeError

_IDENTITY = "identity"
_ZLIB_CODINGS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": None}
_ZLIB_METHOD = 8  # the low nibble of a zlib header's first byte; raw deflate has no header
_STEP_BYTES = 256 * 1024  # the most one inflate step produces


class _Identity:
    def feed(self, chunk: bytes, room: int | None) -> bytes:
        return chunk

    def finish(self) -> None:
        return None


class _ZlibDecoder:
    """Streams one gzip or deflate body, never producing more than ``room`` + 1 bytes a feed."""

    def __init__(self, coding: str) -> None:
        self._coding = coding
        self._wbits = _ZLIB_CODINGS[coding]
        self._inflater: zlib._Decompress | None = None

    def _start(self, first: bytes) -> zlib._Decompress:
        wbits = self._wbits
        if wbits is None:  # deflate: zlib-wrapped per RFC 9110, but raw in the wild
            wbits = zlib.MAX_WBITS if first[0] & 0x0F == _ZLIB_METHOD else -zlib.MAX_WBITS
        return zlib.decompressobj(wbits)

    def feed(self, chunk: bytes, room: int | None) -> bytes:
        if not chunk:
            return b""
        if self._inflater is None:
            self._inflater = self._start(chunk)
        inflater = self._inflater
        pieces: list[bytes] = []
        produced = 0
        data = chunk
        if inflater.eof:  # the stream ended in an earlier chunk
            raise BadResponseError(f"data after the end of the {self._coding} body")
        while True:
            # Small steps, one past the room at most: an overflow shows without inflating more,
            # and no single step allocates much (a bomb's first step could otherwise be the cap).
            limit = _STEP_BYTES if room is None else min(_STEP_BYTES, room - produced + 1)
            try:
                piece = inflater.decompress(data, limit)
            except zlib.error as exc:
                raise BadResponseError(f"corrupt {self._coding} body: {exc}") from None
            produced += len(piece)
            if room is not None and produced > room:
                raise TooLargeError("decoded body exceeds the cap")  # read_body names the cap
            pieces.append(piece)
            if inflater.eof:
                if inflater.unused_data:  # a second gzip member, or garbage after the stream
                    raise BadResponseError(f"data after the end of the {self._coding} body")
                break
            data = inflater.unconsumed_tail
            # A full step may have left output inside zlib even with the input used up.
            if not data and len(piece) < limit:
                break
        return b"".join(pieces)

    def finish(self) -> None:
        if self._inflater is None or not self._inflater.eof:
            raise BadResponseError(f"the {self._coding} body ends before its compressed stream")


def _decoder_for(content_encodings: Sequence[str]) -> _Identity | _ZlibDecoder:
    codings = [
        token.strip().lower()
        for header in content_encodings
        for token in header.split(",")
        if token.strip() and token.strip().lower() != _IDENTITY
    ]
    if not codings:
        return _Identity()
    if len(codings) == 1 and codings[0] in _ZLIB_CODINGS:
        return _ZlibDecoder(codings[0])
    shown = ", ".join(codings)[:64]
    raise BadResponseError(f"unsupported Content-Encoding {shown!r} (identity was requested)")


async def read_body(
    response: aiohttp.ClientResponse, max_bytes: int | None, charge: Callable[[int], None]
) -> bytes:
    """The decoded body, within ``max_bytes`` on the wire and decoded; ``charge`` as it arrives.

    The response is closed (the connection dropped, so the origin stops sending) on any failure.
    """
    try:
        return await _read(response, max_bytes, charge)
    except BaseException:
        response.close()
        raise


async def _read(
    response: aiohttp.ClientResponse, max_bytes: int | None, charge: Callable[[int], None]
) -> bytes:
    declared = response.content_length
    if max_bytes is not None and declared is not None and declared > max_bytes:
        raise TooLargeError(
            f"Content-Length of {declared} bytes exceeds the {max_bytes}-byte limit"
        )
    decoder = _decoder_for(response.headers.getall("Content-Encoding", ()))
    if declared is not None and isinstance(decoder, _Identity):
        # The common case: the bytes as sent, their length known and within the cap. aiohttp
        # stops at the declared length, so the body is read into one buffer (joining chunks
        # would copy the whole payload once more), charged before it is read.
        charge(declared)
        body = await response.read()
        if len(body) != declared:
            raise BadResponseError(f"body of {len(body)} bytes, but Content-Length said {declared}")
        return body
    pieces: list[bytes] = []
    wire = decoded = charged = 0
    async for chunk in response.content.iter_any():
        wire += len(chunk)
        if max_bytes is not None and wire > max_bytes:
            raise TooLargeError(f"body exceeds the {max_bytes}-byte limit")
        try:
            piece = decoder.feed(chunk, None if max_bytes is None else max_bytes - decoded)
        except TooLargeError:
            raise TooLargeError(f"decoded body exceeds the {max_bytes}-byte limit") from None
        decoded += len(piece)
        high = max(wire, decoded)
        charge(high - charged)
        charged = high
        if piece:
            pieces.append(piece)
    decoder.finish()
    if declared is not None and wire != declared:
        raise BadResponseError(f"body of {wire} bytes, but Content-Length said {declared}")
    # One piece (the common case for a small body) is returned as is, without a copy.
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


__all__ = ["read_body"]
