"""Shared test configuration and the fixtures more than one test module requests.

Loading this file puts ``tests/`` on ``sys.path`` (pytest's prepend import mode), so test modules
in subdirectories such as ``tests/security/`` import the shared helpers (``_http_server``,
``_image_samples``, ...) the same way top-level test modules do. Helpers (plain functions and
classes) live in those ``_*.py`` modules and are imported; fixtures live here (or, when only the
security tests use them, in ``security/conftest.py``) and are requested by name, never imported.

Nothing here imports transformers at import time: several test modules set ``HF_HUB_OFFLINE``
before their first transformers import, which must stay the first one in the process.
"""

from __future__ import annotations

import collections
import concurrent.futures
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from _http_server import MediaServer
from _memory import PixelWork
from mediaref.media._transport.http_client import MediaHTTPClient
from mediaref.media._transport.loop_thread import run_sync
from mediaref.media.connector import MediaConnector

if TYPE_CHECKING:
    from mediaref.renderers.base import BaseRenderer

# --- transport: settings, client, connector, a loopback origin ---------------------------------

# Settings the connector reads; each test starts from their defaults and no proxy.
_TRANSPORT_ENV = (
    "VLLM_IMAGE_FETCH_TIMEOUT",
    "VLLM_VIDEO_FETCH_TIMEOUT",
    "VLLM_AUDIO_FETCH_TIMEOUT",
    "VLLM_MEDIA_FETCH_MAX_RETRIES",
    "VLLM_MEDIA_URL_ALLOW_REDIRECTS",
    "MEDIAREF_MEDIA_URL_ALLOW_PRIVATE_IPS",
    "MEDIAREF_MEDIA_REQUEST_MAX_CONNECTIONS",
    "VLLM_MEDIA_CONNECTOR",
    "VLLM_MEDIA_CACHE",
    "VLLM_MEDIA_CACHE_MAX_SIZE_MB",
    "VLLM_MEDIA_CACHE_TTL_HOURS",
    "VLLM_MAX_MEDIA_REQUEST_DOWNLOAD_SIZE_MB",
    "VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
)


@pytest.fixture(autouse=True)
def clean_transport_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts from the transport settings' defaults, with no proxy.

    Autouse for the whole suite (it only removes settings): a developer's shell that exports a
    proxy or a ``VLLM_MEDIA_*`` setting cannot change what a test sees. A test or fixture that
    wants a setting sets it with ``monkeypatch`` afterwards.
    """
    for name in _TRANSPORT_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def http_client() -> Iterator[MediaHTTPClient]:
    client = MediaHTTPClient()
    yield client
    # Sessions opened by the synchronous API live on the private loop; close them there.
    # Sessions opened on a test's own loop are closed when that loop shuts down.
    run_sync(client.close())


@pytest.fixture
def connector(http_client: MediaHTTPClient) -> MediaConnector:
    """A connector that may reach the loopback test server."""
    return MediaConnector(http_client, allow_private_ips=True)


@pytest.fixture
def media_server() -> Iterator[MediaServer]:
    """The aiohttp test origin on 127.0.0.1 (see ``_http_server`` for its routes)."""
    server = MediaServer().start()
    try:
        yield server
    finally:
        server.stop()


# --- decode ------------------------------------------------------------------------------------


@pytest.fixture
def pixel_work(monkeypatch: pytest.MonkeyPatch) -> PixelWork:
    """Counts Pillow's rasterizing (loads, image cores) from here to the end of the test."""
    return PixelWork(monkeypatch)


@pytest.fixture
def decoder_feeds(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[int]]:
    """The size of every feed Pillow hands a decoder, in order, by decoder name ("jpeg", "zip")."""
    from PIL import Image

    feeds: dict[str, list[int]] = collections.defaultdict(list)
    real_getdecoder = Image._getdecoder

    class CountingDecoder:
        def __init__(self, decoder: object, name: str) -> None:
            self._decoder, self._name = decoder, name

        def __getattr__(self, name: str) -> object:
            return getattr(self._decoder, name)

        def decode(self, data: bytes) -> tuple[int, int]:
            feeds[self._name].append(len(data))
            return self._decoder.decode(data)  # type: ignore[attr-defined, no-any-return]

    def getdecoder(mode: str, name: str, args: object, extra: tuple[object, ...] = ()) -> object:
        return CountingDecoder(real_getdecoder(mode, name, args, extra), name)

    monkeypatch.setattr(Image, "_getdecoder", getdecoder)
    return feeds


@pytest.fixture
def pool() -> Iterator[concurrent.futures.ThreadPoolExecutor]:
    """A four-thread executor for decode jobs, shut down (after its jobs) when the test ends."""
    with concurrent.futures.ThreadPoolExecutor(4) as executor:
        yield executor


# --- the built-in Qwen2 models: tokenizer, HF processors, mediaref processors, renderers -------


@pytest.fixture(scope="session")
def qwen2_vl_tokenizer() -> Any:
    """The built-in Qwen2-VL tokenizer, as ``AutoTokenizer`` loads it (once per session).

    Tests that change it do so through ``monkeypatch``; a test that needs a tokenizer loaded with
    other options, or one it may change for good, loads its own.
    """
    from transformers import AutoTokenizer

    from mediaref.models.builtin import builtin_model_path

    return AutoTokenizer.from_pretrained(str(builtin_model_path("qwen2_vl")))


def _hf_processor(name: str) -> Any:
    from transformers import AutoProcessor

    from mediaref.models.builtin import builtin_model_path

    return AutoProcessor.from_pretrained(builtin_model_path(name), local_files_only=True)


# The reference HF processors are loaded on their own, not taken from the instances mediaref's
# processors hold, so nothing mediaref does to its instance can leak into the reference.
@pytest.fixture(scope="session")
def hf_vl() -> Any:
    """HF's Qwen2-VL processor for the built-in model: the reference parity tests compare with."""
    return _hf_processor("qwen2_vl")


@pytest.fixture(scope="session")
def hf_audio() -> Any:
    """HF's Qwen2-Audio processor for the built-in model: the reference parity tests compare with."""
    return _hf_processor("qwen2_audio")


def _mediaref_processor(name: str) -> Any:
    from mediaref.models.builtin import builtin_model_path
    from mediaref.processing.context import ModelConfig
    from mediaref.registry import MULTIMODAL_REGISTRY

    return MULTIMODAL_REGISTRY.create_processor(ModelConfig(model=str(builtin_model_path(name))))


@pytest.fixture(scope="session")
def qwen2_vl_processor() -> Any:
    """mediaref's Qwen2-VL processor on the built-in model, uncached (so it holds no results)."""
    return _mediaref_processor("qwen2_vl")


@pytest.fixture(scope="session")
def qwen2_audio_processor() -> Any:
    """mediaref's Qwen2-Audio processor on the built-in model, uncached."""
    return _mediaref_processor("qwen2_audio")


@pytest.fixture
def make_renderer() -> Iterator[Callable[[Any], BaseRenderer]]:
    """Builds Qwen2-VL renderers around given processors; shuts every one down after the test."""
    from _instrumented_decoding import model_config
    from mediaref.renderers.base import BaseRenderer

    made: list[BaseRenderer] = []

    def make(processor: Any) -> BaseRenderer:
        renderer = BaseRenderer(model_config(), mm_processor=processor)
        made.append(renderer)
        return renderer

    yield make
    for renderer in made:
        renderer.shutdown()


# --- the fused vision path ---------------------------------------------------------------------


@pytest.fixture
def torch_resize(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fused path on torch's resize kernel, then the rows: its path where the native resize
    does not give torch's bytes."""
    from mediaref.models.qwen2_vl import _fused as fused

    monkeypatch.setattr(fused, "resize_in_rows", lambda: False)


@pytest.fixture
def native_resize(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fused path on the native resize + rows pass, its default where
    :func:`~mediaref.models.qwen2_vl._patch_rows.resize_in_rows` holds (skipped where it does not, which
    ``test_patch_rows_native.py`` refuses on x86-64)."""
    from mediaref.models.qwen2_vl import _fused as fused
    from mediaref.models.qwen2_vl import _patch_rows

    if not _patch_rows.resize_in_rows():
        pytest.skip("the native resize does not give torch's bytes here")
    monkeypatch.setattr(fused, "resize_in_rows", lambda: True)


@pytest.fixture(params=["native_resize", "torch_resize"])
def resize_path(request: pytest.FixtureRequest) -> str:
    """Each of the fused path's two resizes in turn (:func:`native_resize`, :func:`torch_resize`)."""
    request.getfixturevalue(request.param)
    return str(request.param)
