"""The disk cache never serves an entry to a request whose policy would not have fetched it.

Before the fix entries were keyed by URL alone and the cache was consulted after checking only the
URL and IP-literal hosts: a body fetched from ``http://localhost/...`` by a connector that allowed
private addresses was served to a default-policy connector, and an entry reached through a
redirect was served to a request whose allow-list (or redirect setting) refused a hop.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import quote

import pytest

from _http_server import MediaServer
from _raw_media import RawMediaIO
from mediaref.exceptions import MediaNotAllowedError
from mediaref.media._transport.disk_cache import ENTRY_SUFFIX
from mediaref.media._transport.http_client import MediaHTTPClient
from mediaref.media.connector import MediaConnector

PAYLOAD = os.urandom(2000)


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "media-cache"
    monkeypatch.setenv("VLLM_MEDIA_CACHE", str(directory))
    return directory


def entries(directory: Path) -> int:
    return len(list(directory.glob(f"*{ENTRY_SUFFIX}")))


def test_an_entry_fetched_from_a_private_host_is_not_served_to_the_default_policy(
    media_server: MediaServer, http_client: MediaHTTPClient, cache_dir: Path
) -> None:
    url = media_server.add_file("a.bin", PAYLOAD).replace("127.0.0.1", "localhost")
    MediaConnector(http_client, allow_private_ips=True).fetch_image(url, RawMediaIO())
    assert entries(cache_dir) == 1
    with pytest.raises(MediaNotAllowedError, match="localhost resolves to a non-public address"):
        MediaConnector(http_client).fetch_image(url, RawMediaIO())
    assert media_server.count("/files/a.bin") == 1  # refused before any request, as uncached


def test_an_entry_reached_through_a_refused_domain_is_not_served(
    media_server: MediaServer, http_client: MediaHTTPClient, cache_dir: Path
) -> None:
    media_server.add_file("a.bin", PAYLOAD)
    hop = media_server.url("/files/a.bin", host="localhost")
    url = media_server.url(f"/redirect?to={quote(hop, safe='')}")
    MediaConnector(http_client, allow_private_ips=True).fetch_image(url, RawMediaIO())
    strict = MediaConnector(
        http_client, allowed_media_domains=["127.0.0.1"], allow_private_ips=True
    )
    # The requested URL's domain is allowed; the hop it redirected through is not.
    with pytest.raises(MediaNotAllowedError, match=r"'localhost'.*allowed_media_domains"):
        strict.fetch_image(url, RawMediaIO())
    assert media_server.count("/redirect") == 2  # fetched afresh under the stricter policy
    assert media_server.count("/files/a.bin") == 1


def test_an_entry_reached_through_a_redirect_is_not_served_when_redirects_are_off(
    media_server: MediaServer,
    http_client: MediaHTTPClient,
    cache_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    target = media_server.add_file("a.bin", PAYLOAD)
    url = media_server.url(f"/redirect?to={quote(target, safe='')}")
    connector = MediaConnector(http_client, allow_private_ips=True)
    connector.fetch_image(url, RawMediaIO())
    monkeypatch.setenv("VLLM_MEDIA_URL_ALLOW_REDIRECTS", "0")
    with pytest.raises(MediaNotAllowedError, match="redirects are disabled"):
        connector.fetch_image(url, RawMediaIO())


def test_the_same_policy_shares_entries_however_it_is_spelled(
    media_server: MediaServer, http_client: MediaHTTPClient, cache_dir: Path
) -> None:
    url = media_server.add_file("a.bin", PAYLOAD)
    first = MediaConnector(
        http_client, allowed_media_domains=["127.0.0.1", "Example.COM."], allow_private_ips=True
    )
    second = MediaConnector(
        http_client, allowed_media_domains=["example.com", "127.0.0.1"], allow_private_ips=True
    )
    first.fetch_image(url, RawMediaIO())
    assert second.fetch_image(url, RawMediaIO()).data == PAYLOAD
    assert media_server.count("/files/a.bin") == 1
    assert entries(cache_dir) == 1


def test_different_policies_keep_separate_entries(
    media_server: MediaServer, http_client: MediaHTTPClient, cache_dir: Path
) -> None:
    url = media_server.add_file("a.bin", PAYLOAD)
    MediaConnector(http_client, allow_private_ips=True).fetch_image(url, RawMediaIO())
    restricted = MediaConnector(
        http_client, allowed_media_domains=["127.0.0.1"], allow_private_ips=True
    )
    assert restricted.fetch_image(url, RawMediaIO()).data == PAYLOAD
    assert restricted.fetch_image(url, RawMediaIO()).data == PAYLOAD
    assert media_server.count("/files/a.bin") == 2  # once per policy
    assert entries(cache_dir) == 2
