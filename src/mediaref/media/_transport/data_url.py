"""RFC 2397 ``data:`` URLs, base64 only.

The form is ``data:[<media type>][;<param>=<value>]*;base64,<payload>``.

Parameters such as ``charset`` are accepted and ignored. A missing comma, another encoding (the
percent-encoded form) or a payload that is not strict base64 is an error, never a guess.
"""

from __future__ import annotations

from dataclasses import dataclass

import pybase64

from mediaref.media._transport.errors import TooLargeError

_DEFAULT_MEDIA_TYPE = "text/plain"  # RFC 2397's default when the type is omitted


@dataclass(frozen=True)
class DataURL:
    media_type: str  # lowercase, without parameters
    base64_text: str

    def decoded_size_upper_bound(self) -> int:
        """The decoded length, known without decoding: three bytes per four characters."""
        text = self.base64_text
        padding = text[-2:].count("=")
        return max(0, len(text) // 4 * 3 - padding)

    def decode(self, max_bytes: int | None) -> bytes:
        """The payload bytes; an oversized payload is refused before a byte is decoded."""
        size = self.decoded_size_upper_bound()
        if max_bytes is not None and size > max_bytes:
            raise TooLargeError(f"payload of about {size} bytes exceeds the {max_bytes}-byte limit")
        return pybase64.b64decode(self.base64_text, validate=True)


def parse_data_url(url: str) -> DataURL:
    if url[:5].lower() != "data:":
        raise ValueError("not a data: URL")
    comma = url.find(",")
    if comma < 0:
        raise ValueError("data: URL has no comma separating its header from the payload")
    media_type, *params = url[5:comma].split(";")
    if not params or params[-1].strip().lower() != "base64":
        raise ValueError("only base64 data: URLs are supported (header must end in ';base64')")
    for param in params[:-1]:
        if "=" not in param:
            raise ValueError(f"data: URL parameter {param!r} is not name=value")
    return DataURL(media_type.strip().lower() or _DEFAULT_MEDIA_TYPE, url[comma + 1 :])


__all__ = ["DataURL", "parse_data_url"]
