"""vLLM's ``vllm.multimodal.media`` surface at ``mediaref.media``, and ``vllm.exceptions``' errors.

What vLLM 0.33.0 documents, checked on mediaref's implementation: the package re-exports,
``MediaWithBytes``, ``MediaIO.merge_kwargs`` and ``merge_media_io_kwargs``, ``MODALITY_IO_MAP``,
``ImageMediaIO(image_mode=None)``, the embedding decoders and ``MediaConnector``'s vLLM-style
calls (no decoder passed, ``fetch_*_embedding``).
"""

from __future__ import annotations

import asyncio
import copy
import io
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pybase64
import pytest
import torch
from PIL import Image

from _audio_samples import Tones, encode_soundfile, sine
from _http_server import MediaServer
from _image_samples import encode, semi_transparent_rgba
from mediaref.exceptions import (
    MediaClientError,
    MediaNotImplementedError,
    MediaServerError,
    MediaTooLargeError,
    VLLMClientError,
    VLLMError,
    VLLMServerError,
    VLLMUnprocessableEntityError,
    VLLMValidationError,
)
from mediaref.media import connector as connector_module
from mediaref.media.audio import AudioEmbeddingMediaIO
from mediaref.media.base import MediaDecodedBudget, MediaIO, MediaRef, MediaWithBytes
from mediaref.media.connector import MediaConnector, merge_media_io_kwargs
from mediaref.media.executor import get_media_executor
from mediaref.media.image import MAGIC_NUMPY_PREFIX, ImageEmbeddingMediaIO, ImageMediaIO

# --- errors ------------------------------------------------------------------------------------


def test_errors_follow_vllms_client_server_split() -> None:
    assert issubclass(VLLMValidationError, VLLMClientError)
    assert issubclass(VLLMUnprocessableEntityError, VLLMClientError)
    assert issubclass(MediaTooLargeError, VLLMClientError)
    assert issubclass(MediaServerError, VLLMServerError)
    assert issubclass(VLLMClientError, VLLMError) and issubclass(VLLMServerError, VLLMError)
    assert issubclass(VLLMValidationError, ValueError)  # older vLLM servers map ValueError to 400
    assert issubclass(VLLMUnprocessableEntityError, ValueError)


def test_unprocessable_entity_is_not_a_validation_error_as_in_vllm() -> None:
    # vLLM's create_error_response checks VLLMValidationError (400) before
    # VLLMUnprocessableEntityError (422): were the second a subclass of the first, every 422
    # would be answered 400 once mediaref's classes stand for vllm.exceptions.
    assert not issubclass(VLLMUnprocessableEntityError, VLLMValidationError)
    assert not issubclass(VLLMValidationError, VLLMUnprocessableEntityError)


def test_not_implemented_is_outside_vllms_client_server_split() -> None:
    # vLLM answers a NotImplementedError 501 only after its client and server classes and its
    # ValueError fallback: a data: URL not in base64 must be none of those to keep vLLM's 501.
    assert issubclass(MediaNotImplementedError, NotImplementedError)
    for other in (VLLMClientError, VLLMServerError, ValueError):
        assert not issubclass(MediaNotImplementedError, other)
    error = MediaNotImplementedError("Only base64 data URLs are supported", url="data:,x")
    assert (error.status_code, error.url) == (501, "data:,x")


def test_the_rest_of_vllms_exception_classes_are_here() -> None:
    import mediaref.exceptions as errors

    assert issubclass(errors.LoRAAdapterNotFoundError, errors.VLLMNotFoundError)
    assert issubclass(errors.VLLMNotFoundError, VLLMClientError)
    assert issubclass(errors.ChatTemplateResolutionError, VLLMClientError)
    assert errors.RetryableRequestError().status_code == 503
    assert errors.GenerationError().status_code == 500
    assert str(errors.LoRAAdapterNotFoundError("a", "/p")) == (
        "Loading lora a failed: No adapter found for /p"
    )
    assert errors.QueueOverflowError().http_status == 503
    assert errors.MaxQueuedTokensError().http_status == 503
    assert errors.ProfilerAlreadyActiveError().http_status == 409
    assert not issubclass(errors.GracefulHTTPError, (VLLMClientError, VLLMServerError))


def test_unprocessable_entity_takes_vllms_parameter_and_value() -> None:
    error = VLLMUnprocessableEntityError("cannot fetch", parameter="image_url", value="http://x")
    assert (error.parameter, error.value, error.status_code) == ("image_url", "http://x", 422)
    assert str(error) == "cannot fetch (parameter=image_url, value=http://x)"
    assert str(VLLMValidationError("bad", parameter="model")) == "bad (parameter=model)"
    assert str(VLLMUnprocessableEntityError("plain", modality="image", index=2)) == "plain"


# --- the package -------------------------------------------------------------------------------


def test_the_package_re_exports_vllms_names() -> None:
    import mediaref.media as media
    from mediaref.media import MediaConnector as exported

    assert exported is MediaConnector
    for name in media.__all__:
        assert getattr(media, name) is not None, name
    assert media.MediaWithBytes is MediaWithBytes and media.MediaDecodedBudget is MediaDecodedBudget
    with pytest.raises(AttributeError):
        _ = media.nope  # type: ignore[attr-defined]


def test_importing_one_submodule_does_not_load_the_decoders() -> None:
    code = (
        "import sys, mediaref.media.base, mediaref.media.connector; "
        "print([m for m in ('PIL', 'av', 'soundfile') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- MediaWithBytes ----------------------------------------------------------------------------


def test_media_with_bytes_stands_in_for_its_media() -> None:
    image = Image.new("RGB", (4, 3), (1, 2, 3))
    wrapped = MediaWithBytes(image, b"png bytes", {"image_mode": "RGB"})
    assert wrapped.size == (4, 3) and wrapped.mode == "RGB"  # attributes reach the image
    assert np.asarray(wrapped).shape == (3, 4, 3)
    assert np.array(wrapped, dtype=np.float32).dtype == np.float32
    frames = MediaWithBytes((np.zeros((2, 4, 4, 3), np.uint8), {"fps": 2.0}), b"mp4")
    video, metadata = frames  # unpacks like the (frames, metadata) tuple it wraps
    assert video.shape == (2, 4, 4, 3) and metadata == {"fps": 2.0} and frames[1] is metadata
    assert "original_bytes" not in repr(wrapped).split("media=")[0]
    with pytest.raises(AttributeError):
        _ = wrapped.no_such_attribute


def test_media_with_bytes_survives_copy_and_pickle() -> None:
    wrapped = MediaWithBytes(np.arange(4), b"raw", None)
    for twin in (copy.copy(wrapped), copy.deepcopy(wrapped), pickle.loads(pickle.dumps(wrapped))):
        assert twin.original_bytes == b"raw" and np.array_equal(twin.media, np.arange(4))


def test_a_media_ref_still_forwards_nothing() -> None:
    for name in ("__getattr__", "__iter__", "__getitem__", "__array__"):
        assert not hasattr(MediaRef, name), name


# --- merging media_io_kwargs -------------------------------------------------------------------


def test_merge_kwargs_is_a_shallow_merge_where_the_request_wins() -> None:
    defaults = {"num_frames": 8, "nested": {"a": 1}}
    runtime = {"nested": {"b": 2}}
    merged = MediaIO.merge_kwargs(defaults, runtime)
    assert merged == {"num_frames": 8, "nested": {"b": 2}}
    assert defaults == {"num_frames": 8, "nested": {"a": 1}}  # inputs untouched
    assert MediaIO.merge_kwargs(None, None) == {}
    assert ImageMediaIO.merge_kwargs({"image_mode": "L"}, None) == {"image_mode": "L"}


def test_merge_media_io_kwargs_merges_each_modality_with_its_class(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert merge_media_io_kwargs(None, None) is None
    assert merge_media_io_kwargs({}, {}) is None
    merged = merge_media_io_kwargs(
        {"image": {"image_mode": "L"}, "audio": {"audio_backend": "pyav"}},
        {"image": {"image_mode": "RGBA"}, "custom": {"x": 1}},
    )
    assert merged == {
        "image": {"image_mode": "RGBA"},
        "audio": {"audio_backend": "pyav"},
        "custom": {"x": 1},
    }

    class Exclusive(MediaIO[Any]):
        @classmethod
        def merge_kwargs(
            cls, default_kwargs: Any, runtime_kwargs: Any
        ) -> dict[str, Any]:  # the request replaces everything
            return dict(runtime_kwargs or default_kwargs or {})

    io_map = connector_module.MODALITY_IO_MAP
    assert set(io_map) >= {"image", "audio", "video"} and io_map["image"] is ImageMediaIO
    monkeypatch.setitem(io_map, "custom", Exclusive)
    assert merge_media_io_kwargs({"custom": {"a": 1}}, {"custom": {"b": 2}}) == {"custom": {"b": 2}}


def test_global_thread_pool_is_the_media_pool() -> None:
    assert connector_module.global_thread_pool is get_media_executor()
    with pytest.raises(AttributeError):
        _ = connector_module.no_such_name  # type: ignore[attr-defined]


# --- ImageMediaIO(image_mode=None) -------------------------------------------------------------


@pytest.mark.parametrize(
    "image",
    [
        semi_transparent_rgba(),
        Image.new("LA", (8, 8), (100, 50)),
        Image.new("L", (8, 8), 7),
        Image.new("P", (8, 8), 3),
    ],
    ids=["RGBA", "LA", "L", "P"],
)
def test_image_mode_none_keeps_the_original_mode(image: Image.Image) -> None:
    data = encode(image, "PNG")
    media_io = ImageMediaIO(image_mode=None)
    for decoded in (media_io.load_bytes(data), media_io.load_bytes_ref(data).decode()):
        assert decoded.mode == image.mode
        # (A palette may be renumbered by the PNG encoder: compare the colours.)
        assert np.array_equal(
            np.asarray(decoded.convert("RGBA")), np.asarray(image.convert("RGBA"))
        )
    assert media_io.get_decode_spec().settings["image_mode"] is None
    assert media_io.load_bytes_ref(data).key != ImageMediaIO().load_bytes_ref(data).key


def test_encode_base64_with_image_mode_none_keeps_alpha_and_unwraps() -> None:
    rgba = semi_transparent_rgba()
    encoded = ImageMediaIO(None).encode_base64(MediaWithBytes(rgba, b""))
    with Image.open(io.BytesIO(pybase64.b64decode(encoded))) as written:
        assert written.mode == "RGBA"
        assert np.array_equal(np.asarray(written), np.asarray(rgba))


# --- embeddings --------------------------------------------------------------------------------


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def _torch_save(value: object) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


@pytest.mark.parametrize("io_class", [ImageEmbeddingMediaIO, AudioEmbeddingMediaIO])
def test_embeddings_load_from_npy_and_torch_save(io_class: type[Any], tmp_path: Path) -> None:
    media_io = io_class()
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert _npy(array)[:6] == MAGIC_NUMPY_PREFIX
    assert torch.equal(media_io.load_bytes(_npy(array)), torch.from_numpy(array))
    tensor = torch.randn(2, 5, dtype=torch.bfloat16)
    assert torch.equal(media_io.load_base64("", media_io.encode_base64(tensor)), tensor)
    sparse = torch.eye(3).to_sparse()
    assert torch.equal(media_io.load_bytes(_torch_save(sparse)), torch.eye(3))
    path = tmp_path / "embeds.npy"
    path.write_bytes(_npy(array))
    assert torch.equal(media_io.load_file(path), torch.from_numpy(array))


def test_embedding_errors_name_the_request_field() -> None:
    with pytest.raises(
        VLLMValidationError, match=r"did not deserialize to a torch\.Tensor"
    ) as info:
        AudioEmbeddingMediaIO().load_bytes(_torch_save({"not": torch.zeros(1)}))
    assert info.value.parameter == "audio_embeds" and info.value.status_code == 400
    with pytest.raises(VLLMValidationError, match="image_embeds") as garbage:
        ImageEmbeddingMediaIO().load_bytes(b"definitely not a tensor")
    assert garbage.value.parameter == "image_embeds"
    with pytest.raises(MediaClientError, match="base64"):
        ImageEmbeddingMediaIO().load_base64("", "not base64!")
    with pytest.raises(VLLMValidationError, match="image_embeds"):
        ImageEmbeddingMediaIO().load_bytes(_npy(np.array(["text"])))  # no tensor dtype


# --- MediaConnector: vLLM's calls ---------------------------------------------------------------


def test_fetch_without_a_decoder_uses_vllms_defaults(
    media_server: MediaServer, connector: MediaConnector
) -> None:
    url = media_server.add_file("a.png", encode(semi_transparent_rgba(), "PNG"))
    ref = connector.fetch_image(url)
    assert isinstance(ref, MediaRef) and not ref.is_decoded  # still lazy
    assert ref.decode().mode == "RGB"
    assert connector.fetch_image(url, image_mode=None).decode().mode == "RGBA"
    wav = encode_soundfile(sine(Tones((440.0,), (0.5,)), 8000, 0.25), 8000, "WAV", "PCM_16")
    samples, rate = connector.fetch_audio(media_server.add_file("a.wav", wav)).decode()
    assert rate == 8000 and samples.shape == (2000,)


async def test_async_fetch_without_a_decoder(
    media_server: MediaServer, connector: MediaConnector
) -> None:
    url = media_server.add_file("b.png", encode(semi_transparent_rgba(), "PNG"))
    ref = await connector.fetch_image_async(url, image_mode="L")
    assert ref.decode().mode == "L"


def test_default_decoders_charge_the_connectors_budget(http_client: Any) -> None:
    budget = MediaDecodedBudget(limit_bytes=10_000)
    budgeted = MediaConnector(http_client, decoded_budget=budget)
    url = (
        "data:image/png;base64,"
        + pybase64.b64encode(encode(Image.new("RGB", (40, 40)), "PNG")).decode()
    )
    budgeted.fetch_image(url).decode()
    assert budget.used >= 40 * 40 * 4
    big = (
        "data:image/png;base64,"
        + pybase64.b64encode(encode(Image.new("RGB", (100, 100)), "PNG")).decode()
    )
    with pytest.raises(MediaTooLargeError):
        budgeted.fetch_image(big).decode()


def test_fetch_embeddings_sync_and_async(connector: MediaConnector) -> None:
    tensor = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    encoded = ImageEmbeddingMediaIO().encode_base64(tensor)
    assert torch.equal(connector.fetch_image_embedding(encoded), tensor)
    assert torch.equal(connector.fetch_audio_embedding(encoded), tensor)
    assert torch.equal(connector.fetch_video_embedding(encoded), tensor)

    async def fetch_all() -> list[torch.Tensor]:
        return await asyncio.gather(
            connector.fetch_image_embedding_async(encoded),
            connector.fetch_audio_embedding_async(encoded),
            connector.fetch_video_embedding_async(encoded),
        )

    assert all(torch.equal(t, tensor) for t in asyncio.run(fetch_all()))


def test_fetch_video_without_a_decoder_binds_the_processors_backend(
    connector: MediaConnector,
) -> None:
    from _video_samples import make_clip

    url = "data:video/mp4;base64," + pybase64.b64encode(make_clip(num_frames=8)).decode()
    frames, _ = connector.fetch_video(url).decode()
    assert frames.ndim == 4 and frames.shape[-1] == 3
    bound = connector.fetch_video(url, video_processor="Qwen2VLVideoProcessor")
    assert bound.spec.settings.get("video_backend") == "qwen2_vl"
    assert bound.key != connector.fetch_video(url).key
