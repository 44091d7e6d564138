"""``file:`` URLs aimed at what is not a media file: directories, FIFOs, devices, long names.

Each is a clear client error, and none leaks a descriptor: before the fix a directory (the allowed
root itself, or any subdirectory) leaked one per request, so 200 requests exhausted a 128-fd limit.
"""

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
    MediaTooLargeError,
)
from mediaref.media._transport.http_client import MediaHTTPClient
from mediaref.media.connector import MediaConnector


def file_url(path: Path | str) -> str:
    return "file://" + quote(str(path))


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    allowed = tmp_path / "allowed"
    (allowed / "sub" / "deeper").mkdir(parents=True)
    (allowed / "a.bin").write_bytes(b"media")
    return allowed


@pytest.fixture
def local(root: Path, http_client: MediaHTTPClient) -> MediaConnector:
    return MediaConnector(http_client, allowed_local_media_path=str(root))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
@pytest.mark.parametrize("target", ["", "sub", "sub/deeper", "sub/../sub"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_directories_are_client_errors_and_leak_no_descriptor(
    local: MediaConnector, root: Path, target: str, mode: str
) -> None:
    url = file_url(root / target) if target else file_url(root)
    # Warm-up: one-time descriptors (the media pool's threads, the private loop) open here.
    with pytest.raises(MediaClientError, match="not a regular file"):
        local.fetch_image(url, RawMediaIO())
    before = open_descriptors()

    async def fetch_async() -> None:
        await local.fetch_image_async(url, RawMediaIO())

    for _ in range(200):
        with pytest.raises(MediaClientError, match="not a regular file") as caught:
            if mode == "sync":
                local.fetch_image(url, RawMediaIO())
            else:
                asyncio.run(fetch_async())
        assert type(caught.value) is MediaClientError
    assert open_descriptors() - before < 5  # not one per request


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_is_refused_without_blocking(local: MediaConnector, root: Path) -> None:
    fifo = root / "pipe"
    os.mkfifo(fifo)  # nobody ever writes: opening it for reading would block forever
    before = open_descriptors()
    with pytest.raises(MediaClientError, match="not a regular file"):
        local.fetch_image(file_url(fifo), RawMediaIO())
    assert open_descriptors() <= before


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_devices_are_refused(http_client: MediaHTTPClient) -> None:
    # An operator who allows /dev (or /) must still not stream /dev/zero into memory.
    request = MediaConnector(http_client, allowed_local_media_path="/dev")
    for device in ("/dev/zero", "/dev/urandom", "/dev/null"):
        with pytest.raises(MediaClientError, match="not a regular file"):
            request.fetch_image(file_url(device), RawMediaIO())


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc")
def test_proc_files_reporting_size_zero_are_still_capped(http_client: MediaHTTPClient) -> None:
    # /proc files report st_size 0, so the size check before reading cannot refuse them; the
    # read itself stops one byte past the cap.
    request = MediaConnector(http_client, allowed_local_media_path="/proc")
    with pytest.raises(MediaTooLargeError):
        request.fetch_image(file_url("/proc/self/status"), RawMediaIO(max_bytes=16))


@pytest.mark.parametrize("name", ["x" * 300, "sub/" + "y" * 5000], ids=["300", "5000"])
def test_a_file_name_too_long_is_a_client_error(
    local: MediaConnector, root: Path, name: str
) -> None:
    with pytest.raises(MediaClientError) as caught:
        local.fetch_image(file_url(root / name), RawMediaIO())
    # The client's URL is at fault (400), not this server (was: 502 "I/O error").
    assert type(caught.value) is MediaClientError
    assert "too long" in str(caught.value) or "not a regular file" in str(caught.value)


def test_a_name_too_long_outside_the_root_is_still_refused_first(local: MediaConnector) -> None:
    with pytest.raises(MediaNotAllowedError):
        local.fetch_image(file_url("/" + "x" * 5000), RawMediaIO())


def test_error_messages_do_not_reveal_server_paths(
    local: MediaConnector, root: Path, tmp_path: Path
) -> None:
    secret_dir = root / "sub"
    with pytest.raises(MediaClientError) as caught:
        local.fetch_image(file_url(secret_dir / ("x" * 300)), RawMediaIO())
    # The URL is named once, as the client sent it; no errno text carries another path.
    message = str(caught.value)
    assert message.count(str(tmp_path)) == 1
