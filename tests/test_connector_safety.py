"""Safety: redirects checked per hop, non-public addresses refused, confusable URLs rejected."""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
from urllib.parse import quote

import pytest

from _http_server import MediaServer
from _raw_media import RawMediaIO
from mediaref.exceptions import MediaClientError, MediaNotAllowedError
from mediaref.media._transport import addresses
from mediaref.media._transport.errors import AddressRefusedError
from mediaref.media._transport.http_client import MediaHTTPClient
from mediaref.media._transport.url_policy import canonical_host
from mediaref.media.connector import MediaConnector

PAYLOAD = os.urandom(1000)


def redirect_url(server: MediaServer, target: str, *, status: int = 302) -> str:
    return server.url(f"/redirect?status={status}&to={quote(target, safe='')}")


# --- redirects --------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_redirect_to_an_allowed_domain_is_followed(
    media_server: MediaServer, http_client: MediaHTTPClient, status: int
) -> None:
    target = media_server.add_file("a.bin", PAYLOAD)
    request = MediaConnector(
        http_client, allowed_media_domains=["127.0.0.1"], allow_private_ips=True
    )
    assert (
        request.fetch_image(redirect_url(media_server, target, status=status), RawMediaIO()).data
        == PAYLOAD
    )
    assert media_server.count("/files/a.bin") == 1


def test_relative_redirect_is_resolved_against_the_hop(
    media_server: MediaServer, connector: MediaConnector
) -> None:
    media_server.add_file("a.bin", PAYLOAD)
    assert (
        connector.fetch_image(redirect_url(media_server, "/files/a.bin"), RawMediaIO()).data
        == PAYLOAD
    )


def test_redirect_to_a_refused_domain_sends_it_nothing(
    media_server: MediaServer, http_client: MediaHTTPClient
) -> None:
    # One server under two names: "localhost" is a different domain from "127.0.0.1".
    target = media_server.url("/files/a.bin", host="localhost")
    media_server.add_file("a.bin", PAYLOAD)
    request = MediaConnector(
        http_client, allowed_media_domains=["127.0.0.1"], allow_private_ips=True
    )
    with pytest.raises(MediaNotAllowedError, match=r"'localhost'.*allowed_media_domains"):
        request.fetch_image(redirect_url(media_server, target), RawMediaIO())
    assert media_server.count("/redirect") == 1
    assert media_server.count("/files/a.bin") == 0


def test_first_url_of_a_refused_domain_sends_nothing(
    media_server: MediaServer, http_client: MediaHTTPClient
) -> None:
    url = media_server.add_file("a.bin", PAYLOAD)
    request = MediaConnector(
        http_client, allowed_media_domains=["example.com"], allow_private_ips=True
    )
    with pytest.raises(MediaNotAllowedError):
        request.fetch_image(url, RawMediaIO())
    assert media_server.total_requests() == 0


def test_allowed_domains_compare_canonical_hosts(
    media_server: MediaServer, http_client: MediaHTTPClient
) -> None:
    url = media_server.add_file("a.bin", PAYLOAD).replace("127.0.0.1", "LocalHost")
    request = MediaConnector(
        http_client, allowed_media_domains=["LOCALHOST."], allow_private_ips=True
    )
    assert request.fetch_image(url, RawMediaIO()).data == PAYLOAD


@pytest.mark.parametrize(
    ("host", "canonical"),
    [
        ("Example.COM.", "example.com"),
        ("bücher.de", "xn--bcher-kva.de"),
        ("[0:0::1]", "::1"),
        ("127.0.0.1", "127.0.0.1"),
    ],
)
def test_canonical_host(host: str, canonical: str) -> None:
    assert canonical_host(host) == canonical


def test_disabled_redirects_refuse_the_redirect(
    media_server: MediaServer, connector: MediaConnector, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_MEDIA_URL_ALLOW_REDIRECTS", "0")
    target = media_server.add_file("a.bin", PAYLOAD)
    with pytest.raises(MediaNotAllowedError, match="redirects are disabled"):
        connector.fetch_image(redirect_url(media_server, target), RawMediaIO())
    assert media_server.count("/files/a.bin") == 0


def test_redirect_hops_are_capped(media_server: MediaServer, connector: MediaConnector) -> None:
    with pytest.raises(MediaNotAllowedError, match="more than 10 redirects"):
        connector.fetch_image(media_server.url("/loop"), RawMediaIO())
    assert media_server.count("/loop") == 11


@pytest.mark.parametrize(
    "target", ["file:///etc/passwd", "data:image/png;base64,AAAA", "ftp://example.com/x"]
)
def test_redirect_off_http_is_refused(
    media_server: MediaServer, connector: MediaConnector, target: str
) -> None:
    with pytest.raises(MediaNotAllowedError, match="redirect to"):
        connector.fetch_image(redirect_url(media_server, target), RawMediaIO())


# --- non-public addresses ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "message"),
    [
        ("127.0.0.1", r"127\.0\.0\.1 is a non-public address"),
        ("localhost", r"localhost resolves to a non-public address$"),
    ],
)
def test_loopback_is_refused_by_default(
    media_server: MediaServer, http_client: MediaHTTPClient, host: str, message: str
) -> None:
    url = media_server.add_file("a.bin", PAYLOAD).replace("127.0.0.1", host)
    with pytest.raises(MediaNotAllowedError, match=message):
        MediaConnector(http_client).fetch_image(url, RawMediaIO())
    assert media_server.total_requests() == 0


def test_private_addresses_can_be_allowed_by_the_environment(
    media_server: MediaServer, http_client: MediaHTTPClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEDIAREF_MEDIA_URL_ALLOW_PRIVATE_IPS", "1")
    url = media_server.add_file("a.bin", PAYLOAD).replace("127.0.0.1", "localhost")
    assert MediaConnector(http_client).fetch_image(url, RawMediaIO()).data == PAYLOAD
    # The constructor option wins over the environment.
    with pytest.raises(MediaNotAllowedError):
        MediaConnector(http_client, allow_private_ips=False).fetch_image(url, RawMediaIO())


@pytest.fixture
def only_127_0_0_2_is_private(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make loopback "public" except 127.0.0.2, so a loopback server can stand in for the web."""
    blocked = ipaddress.ip_address("127.0.0.2")
    monkeypatch.setattr(addresses, "is_public_address", lambda address: address != blocked)


def second_loopback_server(media_server: MediaServer) -> str:
    """A URL on 127.0.0.2 that would reach a listener if the policy let it."""
    return f"http://127.0.0.2:{media_server.port}/files/a.bin"


def test_every_redirect_hop_is_held_to_the_address_policy(
    media_server: MediaServer, http_client: MediaHTTPClient, only_127_0_0_2_is_private: None
) -> None:
    media_server.add_file("a.bin", PAYLOAD)
    request = MediaConnector(http_client)  # private addresses refused
    assert request.fetch_image(media_server.url("/files/a.bin"), RawMediaIO()).data == PAYLOAD
    with pytest.raises(MediaNotAllowedError, match=r"127\.0\.0\.2"):
        request.fetch_image(
            redirect_url(media_server, second_loopback_server(media_server)), RawMediaIO()
        )
    assert media_server.count("/files/a.bin") == 1


async def test_resolver_refuses_a_host_with_any_private_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    AddrInfo = tuple[int, int, int, str, tuple[str, int]]
    answers: list[AddrInfo] = [
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", 80)),
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.7", 80)),
    ]

    async def fake_getaddrinfo(*args: object, **kwargs: object) -> list[AddrInfo]:
        return answers

    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", fake_getaddrinfo)
    with pytest.raises(AddressRefusedError) as caught:
        await addresses.PolicyResolver().resolve("rebind.example", 80)
    # The client learns that the host is refused, not what it resolves to inside the network.
    assert str(caught.value) == "rebind.example resolves to a non-public address"
    assert str(caught.value.address) == "10.0.0.7"  # kept for the debug log
    answers.pop()
    (result,) = await addresses.PolicyResolver().resolve("rebind.example", 80)
    assert result["host"] == "93.184.216.34" and result["hostname"] == "rebind.example"


def test_proxied_request_still_checks_the_target_address(
    media_server: MediaServer, http_client: MediaHTTPClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("http_proxy", media_server.url(""))
    with pytest.raises(MediaNotAllowedError, match="non-public"):
        MediaConnector(http_client).fetch_image("http://localhost/files/a.bin", RawMediaIO())
    assert media_server.total_requests() == 0


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("93.184.216.34", True),
        ("2606:2800:220:1:248:1893:25c8:1946", True),
        ("127.0.0.1", False),
        ("10.1.2.3", False),
        ("172.16.0.1", False),
        ("192.168.1.1", False),
        ("169.254.169.254", False),  # cloud metadata
        ("100.64.0.1", False),  # carrier-grade NAT
        ("100.100.100.200", False),  # a cloud metadata address inside 100.64/10
        ("0.0.0.0", False),
        ("224.0.1.1", False),
        ("255.255.255.255", False),
        ("::1", False),
        ("::", False),
        ("fe80::1", False),
        ("fd00:ec2::254", False),  # cloud metadata over IPv6
        ("::ffff:127.0.0.1", False),  # IPv4-mapped
        ("::ffff:93.184.216.34", True),
        ("::127.0.0.1", False),  # IPv4-compatible
        ("64:ff9b::a00:1", False),  # NAT64 of 10.0.0.1
        ("2002:7f00:1::", False),  # 6to4 of 127.0.0.1
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", False),  # Teredo of 127.0.0.1
    ],
)
def test_is_public_address(address: str, public: bool) -> None:
    assert addresses.is_public_address(ipaddress.ip_address(address)) is public


# --- confusable and malformed URLs ------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://evil.example\\@127.0.0.1/x",  # urllib reads host 127.0.0.1, yarl refuses
        "http://127.0.0.1\\@evil.example/x",
        "http://127.0.0.1\t/x",
        "http://127.0.0.1/x\r\nHost: evil",
        "http://2130706433/x",  # decimal IPv4
        "http://127.1/x",  # shortened IPv4
        "http://0x7f.0.0.1/x",  # hex IPv4
        "http://[::1/x",
        "http:///x",
        "http://exa mple.com/x",
        "http://127.0.0.1\u2003@evil.example/x",  # Unicode whitespace in the authority
        "http://exa\u00a0mple.com/x",
    ],
)
def test_confusable_or_malformed_urls_are_rejected_before_any_request(
    media_server: MediaServer, connector: MediaConnector, url: str
) -> None:
    with pytest.raises(MediaClientError):
        connector.fetch_image(url, RawMediaIO())
    assert media_server.total_requests() == 0


@pytest.mark.parametrize("port_text", ["+{port}", " {port}", "{port}_"])
def test_a_port_only_one_parser_accepts_is_rejected(
    media_server: MediaServer, connector: MediaConnector, port_text: str
) -> None:
    # yarl reads "+8080" (and "80_80") as a port, urllib does not: the URL is ambiguous.
    media_server.add_file("a.bin", PAYLOAD)
    port = port_text.format(port=media_server.port)
    with pytest.raises(MediaClientError):
        connector.fetch_image(f"http://127.0.0.1:{port}/files/a.bin", RawMediaIO())
    assert media_server.total_requests() == 0


def test_userinfo_does_not_hide_the_real_host(
    media_server: MediaServer, http_client: MediaHTTPClient
) -> None:
    # Both parsers read the host after '@', so the allow-list sees the host actually contacted.
    url = f"http://127.0.0.1:{media_server.port}@example.com/files/a.bin"
    request = MediaConnector(
        http_client, allowed_media_domains=["127.0.0.1"], allow_private_ips=True
    )
    with pytest.raises(MediaNotAllowedError, match=r"'example\.com'"):
        request.fetch_image(url, RawMediaIO())
