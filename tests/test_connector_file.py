"""``file:`` URLs: only under the allowed local media path, resolved, and opened as validated."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from urllib.parse import quote

import pytest

from _raw_media import RawMediaIO
from mediaref.exceptions import (
    MediaClientError,
    MediaNotAllowedError,
    MediaNotFoundError,
    MediaTooLargeError,
)
from mediaref.media._transport.errors import transport_errors
from mediaref.media._transport.http_client import MediaHTTPClient
from mediaref.media._transport.local_file import LocalMediaRoot
from mediaref.media.connector import MediaConnector

PAYLOAD = os.urandom(2000)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """tmp/allowed/{a.bin, sub/b.bin, my photo.bin} and tmp/secret.bin outside."""
    allowed = tmp_path / "allowed"
    (allowed / "sub").mkdir(parents=True)
    (allowed / "a.bin").write_bytes(PAYLOAD)
    (allowed / "sub" / "b.bin").write_bytes(PAYLOAD[::-1])
    (allowed / "my photo.bin").write_bytes(PAYLOAD[:100])
    (tmp_path / "secret.bin").write_bytes(b"secret")
    return tmp_path


@pytest.fixture
def local(tree: Path, http_client: MediaHTTPClient) -> MediaConnector:
    return MediaConnector(http_client, allowed_local_media_path=str(tree / "allowed"))


def file_url(path: Path | str) -> str:
    return "file://" + quote(str(path))


def test_file_under_the_allowed_path_is_read(local: MediaConnector, tree: Path) -> None:
    assert local.fetch_image(file_url(tree / "allowed" / "a.bin"), RawMediaIO()).data == PAYLOAD
    assert (
        local.fetch_image(file_url(tree / "allowed" / "sub" / "b.bin"), RawMediaIO()).data
        == PAYLOAD[::-1]
    )


def test_sync_and_async_agree(local: MediaConnector, tree: Path) -> None:
    url = file_url(tree / "allowed" / "a.bin")
    assert (
        local.fetch_image(url, RawMediaIO()).key
        == asyncio.run(local.fetch_image_async(url, RawMediaIO())).key
    )


@pytest.mark.parametrize("encode", [True, False], ids=["percent-encoded", "raw-space"])
def test_spaces_in_names(local: MediaConnector, tree: Path, encode: bool) -> None:
    path = tree / "allowed" / "my photo.bin"
    url = file_url(path) if encode else f"file://{path}"
    assert local.fetch_image(url, RawMediaIO()).data == PAYLOAD[:100]


def test_relative_allowed_path_is_taken_against_the_working_directory(
    tree: Path, http_client: MediaHTTPClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tree)
    request = MediaConnector(http_client, allowed_local_media_path="allowed")
    monkeypatch.chdir("/")  # resolved at construction, not at each fetch
    assert request.fetch_image(file_url(tree / "allowed" / "a.bin"), RawMediaIO()).data == PAYLOAD


@pytest.mark.parametrize(
    "relative",
    [
        "../secret.bin",
        "sub/../../secret.bin",
        "%2e%2e/secret.bin",
    ],
)
def test_traversal_out_of_the_allowed_path_is_refused(
    local: MediaConnector, tree: Path, relative: str
) -> None:
    url = "file://" + quote(str(tree / "allowed")) + "/" + relative
    with pytest.raises(MediaNotAllowedError, match="outside the allowed local media path"):
        local.fetch_image(url, RawMediaIO())


def test_symlink_out_of_the_allowed_path_is_refused(local: MediaConnector, tree: Path) -> None:
    (tree / "allowed" / "escape.bin").symlink_to(tree / "secret.bin")
    with pytest.raises(MediaNotAllowedError, match="outside"):
        local.fetch_image(file_url(tree / "allowed" / "escape.bin"), RawMediaIO())


def test_symlink_within_the_allowed_path_is_followed(local: MediaConnector, tree: Path) -> None:
    (tree / "allowed" / "alias.bin").symlink_to(tree / "allowed" / "a.bin")
    assert local.fetch_image(file_url(tree / "allowed" / "alias.bin"), RawMediaIO()).data == PAYLOAD


def test_a_component_swapped_for_a_symlink_after_validation_is_not_followed(tree: Path) -> None:
    root = LocalMediaRoot(tree / "allowed")
    real = root.resolve(file_url(tree / "allowed" / "sub" / "b.bin"))
    # Between the check and the open, "sub" becomes a symlink to a directory outside.
    outside = tree / "outside"
    outside.mkdir()
    (outside / "b.bin").write_bytes(b"secret")
    (tree / "allowed" / "sub").rename(tree / "old-sub")
    (tree / "allowed" / "sub").symlink_to(outside)
    with (
        pytest.raises(MediaNotAllowedError, match="changed after it was validated"),
        transport_errors("file://x"),
    ):
        root.read(real, None)


def test_file_urls_are_refused_without_an_allowed_path(
    tree: Path, http_client: MediaHTTPClient
) -> None:
    with pytest.raises(MediaNotAllowedError, match="allowed_local_media_path"):
        MediaConnector(http_client).fetch_image(file_url(tree / "allowed" / "a.bin"), RawMediaIO())


def test_file_url_with_a_remote_host_is_refused(local: MediaConnector, tree: Path) -> None:
    with pytest.raises(MediaNotAllowedError, match="remote host"):
        local.fetch_image(
            "file://fileserver" + quote(str(tree / "allowed" / "a.bin")), RawMediaIO()
        )
    assert (
        local.fetch_image(
            "file://localhost" + quote(str(tree / "allowed" / "a.bin")), RawMediaIO()
        ).data
        == PAYLOAD
    )


@pytest.mark.parametrize(
    ("name", "error_type"),
    [
        ("missing.bin", MediaNotFoundError),
        ("sub", MediaClientError),  # a directory
        ("a.bin%00.png", MediaClientError),  # NUL byte
        ("a.bin?x=1", MediaClientError),
    ],
)
def test_unreadable_targets_map_to_client_errors(
    local: MediaConnector, tree: Path, name: str, error_type: type[Exception]
) -> None:
    with pytest.raises(error_type) as caught:
        local.fetch_image(file_url(tree / "allowed") + "/" + name, RawMediaIO())
    assert type(caught.value) is error_type


def test_oversized_file_is_refused_without_reading_it(
    local: MediaConnector, tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = file_url(tree / "allowed" / "a.bin")
    with pytest.raises(MediaTooLargeError):
        local.fetch_image(url, RawMediaIO(max_bytes=len(PAYLOAD) - 1))
    assert local.fetch_image(url, RawMediaIO(max_bytes=len(PAYLOAD))).data == PAYLOAD


def test_allowed_path_must_be_an_existing_directory(
    tree: Path, http_client: MediaHTTPClient
) -> None:
    with pytest.raises(ValueError, match="not an existing directory"):
        MediaConnector(http_client, allowed_local_media_path=str(tree / "allowed" / "a.bin"))
    with pytest.raises(ValueError, match="not an existing directory"):
        MediaConnector(http_client, allowed_local_media_path=str(tree / "nowhere"))
