"""The request's download budget belongs to the request; every download has its own cap.

Before the fix the "per-request" budget lived on the connector and never reset, so a long-lived
connector (``connector = MediaConnector(...)``, reused as the README shows) failed its third 100 KB
fetch under a 0.25 MB budget; and ``VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB`` was not applied.
"""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest
from PIL import Image

from _http_server import MediaServer
from _image_samples import encode
from _raw_media import RawMediaIO
from mediaref.exceptions import MediaTooLargeError
from mediaref.media._transport.http_client import MediaHTTPClient
from mediaref.media.connector import (
    MediaConnector,
    MediaRequestDownloadBudget,
    MediaRequestDownloadSizeExceededError,
)
from mediaref.models.builtin import builtin_model_path
from mediaref.processing.context import ModelConfig
from mediaref.renderers.chat_utils import MultiModalItemTracker

MIB = 1024 * 1024
KB_100 = os.urandom(100 * 1024)


def test_a_reused_connector_is_not_a_request(
    media_server: MediaServer, http_client: MediaHTTPClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_MAX_MEDIA_REQUEST_DOWNLOAD_SIZE_MB", "0.25")
    url = media_server.add_file("a.bin", KB_100)
    connector = MediaConnector(http_client, allow_private_ips=True)
    for _ in range(10):  # 1 MB through one connector; failed on the third before the fix
        assert connector.fetch_image(url, RawMediaIO()).data == KB_100


def test_a_budget_given_to_the_connector_spans_its_downloads(
    media_server: MediaServer, http_client: MediaHTTPClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_MAX_MEDIA_REQUEST_DOWNLOAD_SIZE_MB", "0.25")
    url = media_server.add_file("a.bin", KB_100)
    budget = MediaRequestDownloadBudget()
    connector = MediaConnector(http_client, allow_private_ips=True, download_budget=budget)
    connector.fetch_image(url, RawMediaIO())
    connector.fetch_image(url, RawMediaIO())
    with pytest.raises(MediaTooLargeError, match=r"budget.*including retried attempts") as caught:
        connector.fetch_image(url, RawMediaIO())
    assert url in str(caught.value)
    assert budget.used <= 256 * 1024


def test_the_budget_mirrors_vllms_interface() -> None:
    budget = MediaRequestDownloadBudget(100)
    budget.charge(60)
    assert budget.used == 60
    with pytest.raises(MediaRequestDownloadSizeExceededError) as caught:
        budget.charge(41)
    assert budget.used == 60  # a refused charge takes nothing
    assert isinstance(caught.value, ValueError)  # as vLLM's, a ValueError (and our 413)
    assert caught.value.status_code == 413
    with pytest.raises(TypeError):
        MediaRequestDownloadBudget(1.5)  # type: ignore[arg-type]


def test_concurrent_charges_never_overshoot() -> None:
    budget = MediaRequestDownloadBudget(10_000)
    refused = []

    def charge_many() -> None:
        for _ in range(1000):
            try:
                budget.charge(7)
            except MediaRequestDownloadSizeExceededError:
                refused.append(1)

    threads = [threading.Thread(target=charge_many) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert budget.used <= 10_000 and budget.used + 7 > 10_000
    assert budget.used // 7 + len(refused) == 8000


# --- the per-download cap (VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB) ------------------------------------


def test_the_download_cap_applies_when_the_decoder_has_none(
    media_server: MediaServer, connector: MediaConnector, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB", "1")
    for declare in ("&declare=1", ""):
        url = media_server.url(f"/stream?total={4 * MIB}{declare}")
        with pytest.raises(MediaTooLargeError, match=f"{MIB}-byte limit"):
            connector.fetch_image(url, RawMediaIO())


def test_the_smaller_cap_wins(
    media_server: MediaServer, connector: MediaConnector, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB", "1")
    url = media_server.url(f"/stream?total={2 * MIB}&declare=1")
    with pytest.raises(MediaTooLargeError, match="102400-byte limit"):
        connector.fetch_image(url, RawMediaIO(max_bytes=100 * 1024))  # the decoder's is smaller
    with pytest.raises(MediaTooLargeError, match=f"{MIB}-byte limit"):
        connector.fetch_image(url, RawMediaIO(max_bytes=10 * MIB))  # the download cap is


def test_the_download_cap_defaults_to_vllms_and_zero_disables_it(
    media_server: MediaServer, connector: MediaConnector, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = media_server.url(f"/stream?total={300 * MIB}&declare=1")
    with pytest.raises(MediaTooLargeError, match=f"{256 * MIB}-byte limit"):
        connector.fetch_image(url, RawMediaIO())
    monkeypatch.setenv("VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB", "0")
    small = media_server.url(f"/stream?total={2 * MIB}&declare=1")
    assert len(connector.fetch_image(small, RawMediaIO()).data) == 2 * MIB


def test_the_download_cap_is_for_downloads_only(
    connector: MediaConnector, monkeypatch: pytest.MonkeyPatch
) -> None:
    # data: URLs arrive in the request; their size is the decoder's business, as in vLLM.
    monkeypatch.setenv("VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB", "0.001")
    url = "data:image/png;base64," + "A" * 4000
    assert len(connector.fetch_image(url, RawMediaIO()).data) == 3000


# --- one budget per chat request ----------------------------------------------------------------


def _png(size: int, seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    return encode(Image.fromarray(pixels), "PNG", compress_level=0)


def test_the_chat_tracker_gives_each_request_its_own_budget(
    media_server: MediaServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEDIAREF_MEDIA_URL_ALLOW_PRIVATE_IPS", "1")
    monkeypatch.setenv("VLLM_MAX_MEDIA_REQUEST_DOWNLOAD_SIZE_MB", "0.25")
    url = media_server.add_file("a.png", _png(160, 0))  # about 77 KB
    config = ModelConfig(model=str(builtin_model_path("qwen2_vl")))

    first = MultiModalItemTracker(config)
    second = MultiModalItemTracker(config)
    assert first.download_budget is not second.download_budget
    assert first.connector.download_budget is first.download_budget
    parser = first.create_parser()
    for _ in range(2):
        parser.parse_image(url)
    first.resolve_items()
    assert first.download_budget.used == 2 * len(_png(160, 0))
    # Requests do not share: the next one starts from zero.
    second.create_parser().parse_image(url)
    second.resolve_items()
    assert second.download_budget.used == len(_png(160, 0))
    over = MultiModalItemTracker(config)
    over_parser = over.create_parser()
    for _ in range(2):
        over_parser.parse_image(media_server.add_file("b.png", _png(220, 1)))  # about 145 KB each
    with pytest.raises(MediaTooLargeError, match="VLLM_MAX_MEDIA_REQUEST_DOWNLOAD_SIZE_MB"):
        over.resolve_items()
