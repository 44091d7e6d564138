"""Non-public address ranges, including the ones ``ipaddress.is_global`` calls global.

Before the fix local-use NAT64 and SIIT addresses carrying 169.254.169.254 passed as public, and
``fec0::/10``, ``192.0.0.0/24`` and ``3fff::/20`` were dialled.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket

import pytest

from _raw_media import RawMediaIO
from mediaref.exceptions import MediaNotAllowedError
from mediaref.media._transport import addresses
from mediaref.media._transport.errors import AddressRefusedError
from mediaref.media._transport.http_client import MediaHTTPClient
from mediaref.media.connector import MediaConnector

NON_PUBLIC = [
    "64:ff9b:1::a9fe:a9fe",  # local-use NAT64 (RFC 8215) carrying 169.254.169.254
    "64:ff9b:1:0:a9:fea9:fe00:0",  # the same, RFC 6052 /48 layout
    "64:ff9b:1::808:808",  # local-use NAT64 even of a public address: the operator's own
    "::ffff:0:a9fe:a9fe",  # SIIT ::ffff:0:a.b.c.d carrying 169.254.169.254
    "::ffff:0:7f00:1",  # SIIT carrying 127.0.0.1
    "64:ff9b::a9fe:a9fe",  # well-known NAT64 of the metadata address
    "fec0::1",  # deprecated site-local
    "feff::1",
    "192.0.0.1",  # IETF protocol assignments
    "192.0.0.9",  # ... whose anycast entries is_global calls global
    "192.0.0.170",
    "3fff::1",  # documentation (RFC 9637)
    "3fff:fff:ffff::1",
    "2001:db8::1",
    "5f00::1",  # SRv6 SIDs
    "100::1",  # discard-only
    "2001:2::1",  # benchmarking
    "2001:10::1",  # ORCHID
    "2001:20::1",  # ORCHIDv2 (inside the IETF assignments)
    "192.88.99.1",  # 6to4 relay anycast
    "198.18.0.1",  # benchmarking
    "192.0.2.1",
    "198.51.100.1",
    "203.0.113.1",
    "240.0.0.1",
    "255.255.255.255",
    "0.1.2.3",
    "::5db8:d822",  # IPv4-compatible, even of a public address: deprecated
    "2002:a9fe:a9fe::1",  # 6to4 of the metadata address
    "2001:0:4136:e378:8000:63bf:5601:fefe",  # Teredo whose client is 169.254.1.1 (obfuscated)
    "fd00:ec2::254",
    "ff02::1",
    "224.0.0.251",
]

PUBLIC = [
    "8.8.8.8",
    "93.184.216.34",
    "1.1.1.1",
    "2606:4700:4700::1111",
    "2a00:1450:4001:82a::200e",
    "::ffff:8.8.8.8",  # IPv4-mapped public address
    "64:ff9b::808:808",  # well-known NAT64 of a public address (DNS64 networks rely on it)
    "::ffff:0:808:808",  # SIIT of a public address
    "2002:808:808::1",  # 6to4 of a public address
]


@pytest.mark.parametrize("address", NON_PUBLIC)
def test_non_public_ranges_are_refused(address: str) -> None:
    assert addresses.is_public_address(ipaddress.ip_address(address)) is False


@pytest.mark.parametrize("address", PUBLIC)
def test_public_controls_are_allowed(address: str) -> None:
    assert addresses.is_public_address(ipaddress.ip_address(address)) is True


@pytest.mark.parametrize("address", NON_PUBLIC)
def test_the_table_holds_even_if_is_global_says_global(
    address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A Python whose is_global is more generous must not reopen a hole.
    always_global = property(lambda self: True)
    monkeypatch.setattr(ipaddress.IPv4Address, "is_global", always_global)
    monkeypatch.setattr(ipaddress.IPv6Address, "is_global", always_global)
    assert addresses.is_public_address(ipaddress.ip_address(address)) is False


def test_every_table_network_is_refused_at_both_ends() -> None:
    for network in (*addresses.REFUSED_IPV4, *addresses.REFUSED_IPV6):
        for address in (network.network_address, network.broadcast_address):
            if isinstance(address, ipaddress.IPv6Address) and addresses.embedded_ipv4(address):
                continue  # judged by what it carries (checked above)
            assert not addresses.is_public_address(address), address


@pytest.mark.parametrize(
    "host",
    ["[64:ff9b:1::a9fe:a9fe]", "[::ffff:0:a9fe:a9fe]", "[fec0::1]", "192.0.0.1", "[3fff::1]"],
)
def test_literal_hosts_in_these_ranges_are_refused_before_any_request(
    http_client: MediaHTTPClient, host: str
) -> None:
    with pytest.raises(MediaNotAllowedError, match="is a non-public address"):
        MediaConnector(http_client).fetch_image(f"http://{host}/latest/meta-data", RawMediaIO())


async def test_a_hostname_resolving_into_these_ranges_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answer = [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("::ffff:0:a9fe:a9fe", 80, 0, 0))]

    async def fake_getaddrinfo(*args: object, **kwargs: object) -> list[object]:
        return answer  # type: ignore[return-value]

    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", fake_getaddrinfo)
    with pytest.raises(AddressRefusedError) as caught:
        await addresses.PolicyResolver().resolve("metadata.attacker.example", 80)
    assert "a9fe" not in str(caught.value) and "169.254" not in str(caught.value)
