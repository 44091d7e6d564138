"""RFC 2397 ``data:`` URLs, base64 only.

The form is ``data:[<media type>][;<param>=<value>]*;base64,<payload>``.

Parameters such as ``charset`` are accepted and ignored. A missing comma, a non-ASCII URL or a
payload that is not strict base64 is an error, never a guess; a header that does not end in
``;base64`` exactly (the percent-encoded form, ``;BASE64``) is vLLM's ``NotImplementedError``
(``MediaNotImplementedError``, 501, as vLLM's server answers).

A data: URL arrives whole in the request, so it can be hundreds of megabytes. Parsing touches
only the header (at most ``MAX_HEADER_CHARS``, so a URL without a comma is not scanned to its
end), and the decoded size is bounded from the payload's length before the payload is copied out
of the URL or decoded: an oversized payload costs neither a copy nor a decode.
"""

from __future__ import annotations

import binascii
from dataclasses import dataclass, field

import pybase64

from mediaref.exceptions import MediaNotImplementedError, describe_url
from mediaref.media._transport.errors import TooLargeError

_PREFIX = "data:"
_DEFAULT_MEDIA_TYPE = "text/plain"  # RFC 2397's default when the type is omitted
MAX_HEADER_CHARS = 1024  # media type and parameters; real ones are a few dozen characters


@dataclass(frozen=True)
class DataURL:
    media_type: str  # lowercase, without parameters
    url: str = field(repr=False)  # the whole URL: the payload is sliced out only when used
    payload_start: int = field(repr=False)

    @property
    def base64_text(self) -> str:
        """The payload text (a copy of that part of the URL)."""
        return self.url[self.payload_start :]

    def decoded_size_upper_bound(self) -> int:
        """The decoded length, known without decoding: three bytes per four characters."""
        chars = len(self.url) - self.payload_start
        padding = self.url[-2:].count("=") if chars >= 2 else 0
        return max(0, chars // 4 * 3 - padding)

    def check_size(self, max_bytes: int | None) -> None:
        size = self.decoded_size_upper_bound()
        if max_bytes is not None and size > max_bytes:
            raise TooLargeError(f"payload of about {size} bytes exceeds the {max_bytes}-byte limit")

    def decode(self, max_bytes: int | None) -> bytes:
        """The payload bytes; an oversized payload is refused before it is copied or decoded."""
        self.check_size(max_bytes)
        return pybase64.b64decode(self.base64_text, validate=True)


def parse_data_url(url: str) -> DataURL:
    if url[: len(_PREFIX)].lower() != _PREFIX:
        raise ValueError("not a data: URL")
    # O(1) in CPython (a flag on the string): base64 is ASCII, and so is a well-formed URL.
    if not url.isascii():
        raise binascii.Error("non-ASCII character in the data: URL")
    comma = url.find(",", 0, len(_PREFIX) + MAX_HEADER_CHARS + 1)
    if comma < 0:
        raise ValueError(  # vLLM's wording, with where this parser looks
            f"Invalid data URL {url[:32]!r}: missing ',' separator "
            f"within {MAX_HEADER_CHARS} characters of its start"
        )
    # vLLM's grammar: the header ends in ";base64", exactly (lower case, no spaces); any other
    # parameters before it are ignored.
    media_type, *params = url[len(_PREFIX) : comma].split(";")
    if not params or params[-1] != "base64":
        raise MediaNotImplementedError(
            f"Failed to fetch {describe_url(url)}: Only base64 data URLs are supported for now "
            "(the header must end in ';base64')",
            url=url,
        )
    return DataURL(media_type.strip().lower() or _DEFAULT_MEDIA_TYPE, url, comma + 1)


__all__ = ["MAX_HEADER_CHARS", "DataURL", "parse_data_url"]
