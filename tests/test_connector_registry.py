"""MEDIA_CONNECTOR_REGISTRY and plugins, and the offline helpers in mediaref.utils."""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pybase64
import pytest
import soundfile as sf  # type: ignore[import-untyped]
from PIL import Image

from _http_server import MediaServer
from _image_samples import encode
from _raw_media import RawMediaIO
from mediaref import utils
from mediaref.media._transport.http_client import MediaHTTPClient
from mediaref.media.base import MediaIO, MediaRef
from mediaref.media.connector import MEDIA_CONNECTOR_REGISTRY, MediaConnector, load_media_connector


@pytest.fixture(autouse=True)
def isolated_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registrations made by a test disappear after it."""
    monkeypatch.setattr(
        MEDIA_CONNECTOR_REGISTRY, "name2class", dict(MEDIA_CONNECTOR_REGISTRY.name2class)
    )


class TaggingConnector(MediaConnector):
    """A plugin as the docs describe it: it overrides fetch_image, keeps the caller's decoder and
    delegates to load_from_url, then adds its own behaviour (here: it records the URL)."""

    def __init__(self, *args: Any, label: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.label = label
        self.seen: list[str] = []

    def fetch_image(self, image_url: str, media_io: MediaIO[Any]) -> MediaRef[Any]:
        self.seen.append(image_url)
        return self.load_from_url(image_url, media_io)


def test_http_is_the_default_connector() -> None:
    assert MEDIA_CONNECTOR_REGISTRY.get("http") is MediaConnector
    assert type(load_media_connector()) is MediaConnector
    assert type(MEDIA_CONNECTOR_REGISTRY.load("http")) is MediaConnector


def test_environment_selects_a_registered_plugin_with_constructor_arguments(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    MEDIA_CONNECTOR_REGISTRY.register("tagging")(TaggingConnector)
    monkeypatch.setenv("VLLM_MEDIA_CONNECTOR", "tagging")
    loaded = load_media_connector(allowed_local_media_path=str(tmp_path), label="x")
    assert isinstance(loaded, TaggingConnector) and loaded.label == "x"
    assert loaded.allowed_local_media_path == str(tmp_path)
    assert "tagging" in MEDIA_CONNECTOR_REGISTRY and "tagging" in MEDIA_CONNECTOR_REGISTRY.names()


def test_plugin_keeps_the_callers_decoder_and_key(connector: MediaConnector) -> None:
    url = "data:image/png;base64," + pybase64.b64encode(b"payload").decode()
    plugin = TaggingConnector(allow_private_ips=True)
    io_ = RawMediaIO(tag="special")
    ref = plugin.fetch_image(url, io_)
    assert plugin.seen == [url]
    assert ref.spec == io_.get_decode_spec()
    assert ref.key == connector.fetch_image(url, RawMediaIO(tag="special")).key


class RewritingConnector(MediaConnector):
    """The docs' example shape: rewrite the URL in load_from_url(_async), delegate the rest."""

    def __init__(self, *args: Any, base_url: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.base_url = base_url

    def _rewrite(self, url: str) -> str:
        return url.replace("media://", self.base_url + "/files/", 1)

    def load_from_url(self, url: str, media_io: MediaIO[Any], **kwargs: Any) -> MediaRef[Any]:
        return super().load_from_url(self._rewrite(url), media_io, **kwargs)

    async def load_from_url_async(
        self, url: str, media_io: MediaIO[Any], **kwargs: Any
    ) -> MediaRef[Any]:
        return await super().load_from_url_async(self._rewrite(url), media_io, **kwargs)


async def test_every_single_decoder_fetch_goes_through_load_from_url(
    media_server: MediaServer, http_client: MediaHTTPClient
) -> None:
    media_server.add_file("a.bin", b"payload")
    plugin = RewritingConnector(http_client, base_url=media_server.url(""), allow_private_ips=True)
    for fetch in ("fetch_image", "fetch_video", "fetch_audio"):
        assert getattr(plugin, fetch)("media://a.bin", RawMediaIO()).data == b"payload"
        ref = await getattr(plugin, fetch + "_async")("media://a.bin", RawMediaIO())
        assert ref.data == b"payload"
    assert media_server.count("/files/a.bin") == 6


def test_unknown_connector_name_lists_the_registered_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_MEDIA_CONNECTOR", "nope")
    with pytest.raises(ValueError, match="unknown media connector 'nope'; registered: 'http'"):
        load_media_connector()
    with pytest.raises(AssertionError, match="Extension class nope not found"):  # as in vLLM
        MEDIA_CONNECTOR_REGISTRY.load("nope")


def test_a_name_cannot_be_taken_by_a_second_class() -> None:
    MEDIA_CONNECTOR_REGISTRY.register("http")(MediaConnector)  # the same class again is fine
    with pytest.raises(ValueError, match="already registered"):
        MEDIA_CONNECTOR_REGISTRY.register("http")(TaggingConnector)


# --- offline helpers --------------------------------------------------------------------------


def png_bytes() -> bytes:
    image = Image.fromarray(np.arange(48 * 32 * 3, dtype=np.uint8).reshape(32, 48, 3) % 251)
    return encode(image, "PNG")


def test_fetch_image_returns_a_decoded_image_from_a_data_url() -> None:
    url = "data:image/png;base64," + pybase64.b64encode(png_bytes()).decode()
    image = utils.fetch_image(url)
    assert isinstance(image, Image.Image) and image.size == (48, 32) and image.mode == "RGB"
    assert utils.fetch_image(url, {"image_mode": "L"}).mode == "L"


def test_fetch_image_over_http_with_a_given_connector(
    media_server: MediaServer, connector: MediaConnector
) -> None:
    url = media_server.add_file("a.png", png_bytes())
    image = utils.fetch_image(url, connector=connector)
    assert np.array_equal(
        np.asarray(image), np.asarray(Image.open(io.BytesIO(png_bytes())).convert("RGB"))
    )


def test_fetch_image_uses_the_connector_the_environment_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[str] = []

    class Recording(MediaConnector):
        def fetch_image(self, image_url: str, media_io: MediaIO[Any]) -> MediaRef[Any]:
            seen.append(image_url)
            return super().fetch_image(image_url, media_io)

    MEDIA_CONNECTOR_REGISTRY.register("recording")(Recording)
    monkeypatch.setenv("VLLM_MEDIA_CONNECTOR", "recording")
    url = "data:image/png;base64," + pybase64.b64encode(png_bytes()).decode()
    utils.fetch_image(url)
    assert seen == [url]


def test_fetch_audio_returns_samples_and_rate(tmp_path: Path, http_client: MediaHTTPClient) -> None:
    tone = (0.25 * np.sin(2 * np.pi * 440 * np.arange(8000) / 8000)).astype(np.float32)
    path = tmp_path / "tone.wav"
    sf.write(path, tone, 8000, format="WAV", subtype="FLOAT")
    local = MediaConnector(http_client, allowed_local_media_path=str(tmp_path))
    samples, rate = utils.fetch_audio("file://" + quote(str(path)), connector=local)
    assert rate == 8000 and np.allclose(samples, tone)


def test_fetch_video_returns_frames_and_metadata(tmp_path: Path) -> None:
    from test_connector_video_audio import encode_clip_with_audio

    url = "data:video/mp4;base64," + pybase64.b64encode(encode_clip_with_audio()).decode()
    frames, metadata = utils.fetch_video(url, {"num_frames": 2})
    assert frames.shape == (2, 32, 32, 3) and isinstance(metadata, dict)
    assert not math.isnan(float(metadata.get("fps", 0.0)))
