"""Fuzzing the transport's parsers and policies: only documented errors, no hang, no overshoot.

Properties:
- ``parse_data_url`` / ``DataURL.decode`` raise nothing the error table does not map, never
  return more than the cap, and refuse an over-cap payload without decoding it;
- ``parse_http_url`` / ``resolve_redirect`` / ``check_url`` raise only mapped errors and return
  only http(s) URLs with a host, which both URL parsers read alike;
- the address policy answers for every IPv4 and IPv6 address (scoped ones too) without raising;
- the body decoder, fed any bytes in any chunking as gzip or deflate, raises only mapped errors
  and never yields more than the cap.

"No hang" is each example's deadline: generous, it only catches a parser stuck in a loop.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import zlib
from urllib.parse import urlsplit

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from mediaref.media._transport import data_url as data_url_module
from mediaref.media._transport import http_body
from mediaref.media._transport.addresses import embedded_ipv4, is_public_address
from mediaref.media._transport.data_url import parse_data_url
from mediaref.media._transport.errors import BadResponseError, TooLargeError, classify
from mediaref.media._transport.url_policy import (
    URLPolicy,
    canonical_host,
    check_url,
    parse_http_url,
    resolve_redirect,
)

FUZZ = settings(
    max_examples=300,
    deadline=datetime.timedelta(seconds=5),
    suppress_health_check=[HealthCheck.too_slow],
)


def assert_documented(exc: BaseException) -> None:
    """Raised errors must be ones the transport's table maps to a public error."""
    assert classify(exc) is not None, f"unmapped {type(exc).__name__}: {exc!r}"
    assert not isinstance(exc, (TypeError, AttributeError, IndexError, KeyError)), repr(exc)


# --- data: URLs ------------------------------------------------------------------------------

_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="
_header_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=40)
_payload_text = st.one_of(
    st.text(alphabet=_B64, max_size=400),
    st.text(max_size=100),
    st.binary(max_size=200).map(lambda raw: base64.b64encode(raw).decode()),
)


@st.composite
def data_urls(draw: st.DrawFn) -> str:
    prefix = draw(st.sampled_from(["data:", "DATA:", "Data:", "data", "dat:", ""]))
    media_type = draw(st.sampled_from(["", "image/png", "video/jpeg", "IMAGE/PNG "]))
    media_type += draw(st.one_of(st.just(""), _header_text))
    params = draw(st.lists(st.sampled_from(["charset=utf-8", "a=b", "noeq", "", " base64"])))
    tail = draw(st.sampled_from([";base64,", ";BASE64,", ",", ";base64", ";base64 ,"]))
    return prefix + media_type + "".join(";" + p for p in params) + tail + draw(_payload_text)


@FUZZ
@given(
    url=st.one_of(data_urls(), st.text(max_size=300)),
    cap=st.one_of(st.none(), st.integers(0, 400)),
)
@example(url="data:;base64,", cap=0)
@example(url="data:image/png;base64,====", cap=10)
@example(url="data:image/png;base64,A", cap=None)
def test_data_urls_raise_only_documented_errors_and_respect_the_cap(
    url: str, cap: int | None
) -> None:
    try:
        parsed = parse_data_url(url)
    except Exception as exc:
        assert_documented(exc)
        return
    assert parsed.media_type == parsed.media_type.strip().lower()
    bound = parsed.decoded_size_upper_bound()
    assert bound >= 0
    try:
        data = parsed.decode(cap)
    except TooLargeError:
        assert cap is not None and bound > cap
        return
    except Exception as exc:
        assert_documented(exc)
        return
    assert len(data) <= bound  # the bound used to refuse really is an upper bound
    assert cap is None or len(data) <= cap


@FUZZ
@given(quads=st.integers(0, 1250), cap=st.integers(0, 3000))
def test_an_over_cap_payload_is_never_decoded(
    quads: int, cap: int, monkeypatch_decoder: list[int]
) -> None:
    parsed = parse_data_url("data:image/png;base64," + "AAAA" * quads)
    calls_before = len(monkeypatch_decoder)
    if parsed.decoded_size_upper_bound() > cap:
        with pytest.raises(TooLargeError):
            parsed.decode(cap)
        assert len(monkeypatch_decoder) == calls_before  # refused from the length alone
    else:
        assert len(parsed.decode(cap)) <= cap


@pytest.fixture(scope="module")
def monkeypatch_decoder() -> list[int]:
    """Counts calls of the base64 decoder the data: URL module uses."""
    calls: list[int] = []
    real = data_url_module.pybase64.b64decode

    def counting(text: str, *args: object, **kwargs: object) -> bytes:
        calls.append(len(text))
        return real(text, *args, **kwargs)  # type: ignore[arg-type]

    patcher = pytest.MonkeyPatch()
    patcher.setattr(data_url_module.pybase64, "b64decode", counting)
    yield calls
    patcher.undo()


# --- http(s) URLs and redirects ----------------------------------------------------------------

_URL_PIECES = st.sampled_from(
    [
        "http://",
        "https://",
        "HTTP://",
        "ftp://",
        "//",
        "http:",
        "@",
        ":",
        "[",
        "]",
        "::1",
        "127.0.0.1",
        "0x7f.1",
        "example.com",
        "EXAMPLE.com.",
        "\\",
        "/",
        "?",
        "#",
        "%00",
        "%2e",
        ":80",
        ":+80",
        ":99999",
        " ",
        "\t",
        "\n",
        "\u3002",
        "\u00e9",
        "xn--",
        "a" * 70,
        ".",
        "..",
        "user:pass@",
        "[::ffff:127.0.0.1]",
        "[fe80::1%25eth0]",
        "bücher.de",
    ]
)
_url_text = st.one_of(
    st.lists(_URL_PIECES, max_size=8).map("".join),
    st.text(max_size=120),
    st.builds(lambda a, b: a + b, st.sampled_from(["http://", "https://"]), st.text(max_size=60)),
)


def _assert_agreed(url: object) -> None:
    from yarl import URL

    assert isinstance(url, URL)
    assert url.scheme in ("http", "https") and url.raw_host
    split = urlsplit(str(url))
    assert canonical_host(split.hostname or "") == canonical_host(url.raw_host)


@FUZZ
@given(raw=_url_text)
@example(raw="http://[::1")
@example(raw="http://a.com\\@b.com/")
@example(raw="http://[::ffff:127.0.0.1]@")  # yarl raised IndexError
def test_parse_http_url_raises_only_documented_errors(raw: str) -> None:
    try:
        url = parse_http_url(raw)
    except Exception as exc:
        assert_documented(exc)
        return
    _assert_agreed(url)


@FUZZ
@given(location=_url_text)
@example(location="/" + "a" * 100_000)
@example(location="//[::1]:0/")
@example(location="HTTP:")  # a hop without a host
def test_resolve_redirect_raises_only_documented_errors(location: str) -> None:
    current = parse_http_url("https://media.example/a/b.png?x=1")
    try:
        url = resolve_redirect(current, location)
    except Exception as exc:
        assert_documented(exc)
        return
    _assert_agreed(url)


@FUZZ
@given(
    raw=_url_text,
    domains=st.one_of(st.none(), st.lists(st.sampled_from(["example.com", "127.0.0.1", "::1"]))),
    allow_private=st.booleans(),
)
def test_check_url_raises_only_documented_errors(
    raw: str, domains: list[str] | None, allow_private: bool
) -> None:
    try:
        url = parse_http_url(raw)
    except Exception:  # covered above
        return
    policy = URLPolicy.build(domains, allow_private_ips=allow_private)
    try:
        check_url(url, policy)
    except Exception as exc:
        assert_documented(exc)


# --- addresses --------------------------------------------------------------------------------


@FUZZ
@given(value=st.integers(0, 2**32 - 1))
def test_every_ipv4_address_gets_an_answer(value: int) -> None:
    address = ipaddress.IPv4Address(value)
    assert isinstance(is_public_address(address), bool)
    if is_public_address(address):
        assert address.is_global and not address.is_multicast


@FUZZ
@given(
    value=st.one_of(
        st.integers(0, 2**128 - 1),
        st.integers(0, 2**32 - 1).map(lambda v: (0xFFFF << 32) | v),  # IPv4-mapped
        st.integers(0, 2**32 - 1).map(lambda v: (0xFFFF << 48) | v),  # SIIT
        st.integers(0, 2**32 - 1).map(lambda v: (0x64FF9B << 96) | v),  # NAT64
        st.integers(0, 2**80 - 1).map(lambda v: (0x0064_FF9B_0001 << 80) | v),  # local NAT64
        st.integers(0, 2**112 - 1).map(lambda v: (0x2002 << 112) | v),  # 6to4
        st.integers(0, 2**96 - 1).map(lambda v: (0x2001_0000 << 96) | v),  # Teredo
    ),
    scoped=st.booleans(),
)
def test_every_ipv6_address_gets_an_answer(value: int, scoped: bool) -> None:
    address = ipaddress.IPv6Address(value)
    if scoped:
        address = ipaddress.IPv6Address(f"{address}%eth0")
    verdict = is_public_address(address)
    assert isinstance(verdict, bool)
    carried = embedded_ipv4(address)
    if verdict and carried is not None:
        assert all(is_public_address(inner) for inner in carried)
    if scoped:
        assert verdict is False


# --- compressed bodies ------------------------------------------------------------------------


@st.composite
def compressed_bodies(draw: st.DrawFn) -> tuple[str, bytes]:
    coding = draw(st.sampled_from(["gzip", "x-gzip", "deflate"]))
    if draw(st.booleans()):
        return coding, draw(st.binary(max_size=300))  # garbage
    plain = draw(st.binary(max_size=2000)) * draw(st.integers(1, 50))
    wbits = {"deflate": draw(st.sampled_from([zlib.MAX_WBITS, -zlib.MAX_WBITS]))}.get(coding, 31)
    compressor = zlib.compressobj(draw(st.integers(0, 9)), zlib.DEFLATED, wbits)
    body = compressor.compress(plain) + compressor.flush()
    cut = draw(st.integers(0, len(body)))
    return coding, body[:cut] if draw(st.booleans()) else body + draw(st.binary(max_size=5))


@FUZZ
@given(
    body=compressed_bodies(),
    cap=st.one_of(st.none(), st.integers(0, 50_000)),
    chunk=st.integers(1, 700),
)
def test_the_body_decoder_never_overshoots_and_raises_only_documented_errors(
    body: tuple[str, bytes], cap: int | None, chunk: int
) -> None:
    coding, raw = body
    decoder = http_body._decoder_for([coding])
    produced = 0
    try:
        for start in range(0, len(raw), chunk):
            room = None if cap is None else cap - produced
            piece = decoder.feed(raw[start : start + chunk], room)
            assert cap is None or len(piece) <= room  # type: ignore[operator]
            produced += len(piece)
        decoder.finish()
    except (BadResponseError, TooLargeError) as exc:
        assert_documented(exc)
    assert cap is None or produced <= cap
