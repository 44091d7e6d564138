"""Large ``data:`` URLs: refused from their length, before a copy or a decode.

A data: URL arrives whole in the request. Before the fix the payload was sliced out of the URL (a
copy the size of the URL) before its size was checked, and the header was split wherever the
first comma happened to be, however far into the URL.
"""

from __future__ import annotations

import tracemalloc

import pybase64
import pytest

from _raw_media import RawMediaIO, RawVideoIO
from mediaref.exceptions import MediaClientError, MediaTooLargeError
from mediaref.media._transport.data_url import MAX_HEADER_CHARS, parse_data_url
from mediaref.media.connector import MediaConnector

MIB = 1024 * 1024
BIG_CHARS = 64 * MIB  # stands for the 200 MB of the issue; the behaviour does not depend on it


def _peak_bytes_while(action: object) -> int:
    tracemalloc.start()
    try:
        try:
            action()  # type: ignore[operator]
        except (MediaClientError, MediaTooLargeError):
            pass
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.fixture(scope="module")
def big_url() -> str:
    return "data:image/png;base64," + "A" * BIG_CHARS


@pytest.mark.parametrize("io_type", [RawMediaIO, RawVideoIO])
def test_an_oversized_payload_is_refused_without_a_copy(
    connector: MediaConnector, big_url: str, io_type: type[RawMediaIO]
) -> None:
    io_ = io_type(max_bytes=MIB)
    with pytest.raises(MediaTooLargeError, match="exceeds the 1048576-byte limit"):
        connector.fetch_image(big_url, io_)
    peak = _peak_bytes_while(lambda: connector.fetch_image(big_url, io_))
    assert peak < MIB, peak  # neither the 64 MiB payload text nor its 48 MiB decoded form
    assert io_.bytes_refs == 0


def test_an_oversized_base64_frames_payload_is_refused_without_a_copy(
    connector: MediaConnector,
) -> None:
    url = "data:video/jpeg;base64," + "A" * BIG_CHARS
    io_ = RawVideoIO(max_bytes=MIB)
    peak = _peak_bytes_while(lambda: connector.fetch_video(url, io_))
    assert peak < MIB, peak
    assert io_.base64_refs == 0


def test_a_url_without_a_comma_is_not_scanned_or_copied(connector: MediaConnector) -> None:
    url = "data:" + "a" * BIG_CHARS
    with pytest.raises(MediaClientError, match=f"within {MAX_HEADER_CHARS} characters"):
        connector.fetch_image(url, RawMediaIO())
    assert _peak_bytes_while(lambda: connector.fetch_image(url, RawMediaIO())) < MIB


def test_a_header_past_the_limit_is_refused_without_splitting_it(
    connector: MediaConnector,
) -> None:
    url = "data:image/png;" + "p=v;" * (BIG_CHARS // 4) + "base64,AAAA"
    with pytest.raises(MediaClientError):
        connector.fetch_image(url, RawMediaIO())
    assert _peak_bytes_while(lambda: connector.fetch_image(url, RawMediaIO())) < MIB


def test_a_header_at_the_limit_is_accepted() -> None:
    params = ";".join(["x=y"] * ((MAX_HEADER_CHARS - 20) // 4))
    url = f"data:image/png;{params};base64,AAAA"
    assert parse_data_url(url).decode(None) == b"\x00\x00\x00"


def test_the_size_bound_needs_no_copy() -> None:
    parsed = parse_data_url("data:image/png;base64," + "QUJD" * 1000 + "QQ==")
    assert parsed.decoded_size_upper_bound() == 3001
    assert len(parsed.decode(3001)) == 3001
    with pytest.raises(Exception, match="exceeds"):
        parsed.decode(3000)


@pytest.mark.parametrize(
    "url",
    [
        "data:image/png;base64,QUJD\u00e9",
        "data:image/p\u00e9ng;base64,QUJD",
        "data:image/png;base64,QUJD\u0000",
    ],
)
def test_non_ascii_or_control_characters_are_client_errors(
    connector: MediaConnector, url: str
) -> None:
    with pytest.raises(MediaClientError) as caught:
        connector.fetch_image(url, RawMediaIO())
    assert type(caught.value) is MediaClientError


def test_a_payload_at_the_cap_decodes(connector: MediaConnector) -> None:
    payload = bytes(range(256)) * 4
    url = "data:application/octet-stream;base64," + pybase64.b64encode(payload).decode()
    assert connector.fetch_image(url, RawMediaIO(max_bytes=len(payload))).data == payload
