"""Chat-message parsing: OpenAI-style parts in, the conversation and lazy MediaRefs out.

What is pinned: every accepted part form and every malformed one (a 400 naming the parameter,
before anything is downloaded); decoders come from the model's processing info, with the
request's media_io_kwargs; refs come back encoded; limits and unsupported modalities; UUIDs
(UUID-only items included); use_audio_in_video downloads once; the async parser fetches
concurrently and reports the first failure in request order; sync and async agree; the chat
template places every item; and end to end, the renderer gives each item its placeholder and
matches the HF processor on the decoded image.
"""

from __future__ import annotations

import asyncio
import base64
import io
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import av
import numpy as np
import pytest

from _audio_samples import Tones, dominant_frequency_hz, encode_soundfile, sine
from _http_server import MediaServer
from _instrumented_decoding import image_bytes
from _parity_references import assert_matches_hf, reference_image
from _video_samples import make_clip
from mediaref.exceptions import (
    MediaNotAllowedError,
    MediaNotFoundError,
    VLLMValidationError,
)
from mediaref.media._transport.http_client import MediaHTTPClient
from mediaref.media.base import MediaIO, MediaRef
from mediaref.media.connector import MediaConnector
from mediaref.models.builtin import builtin_model_path
from mediaref.models.qwen2_vl import Qwen2VLProcessingInfo
from mediaref.processing.context import BaseProcessingInfo, ModelConfig
from mediaref.renderers import chat_utils
from mediaref.renderers.base import BaseRenderer, MultiModalRequest
from mediaref.renderers.chat_utils import (
    AUDIO_IN_VIDEO_UUID_SUFFIX,
    AsyncMultiModalItemTracker,
    MultiModalItemTracker,
    apply_chat_template,
    detect_content_format,
    parse_chat_messages,
    parse_chat_messages_async,
    resolve_chat_template_content_format,
)

WAIT_S = 10.0
VIDEO_IO_KWARGS = {"video": {"num_frames": 4}}


# -- models and media -------------------------------------------------------------------------


def vl_config() -> ModelConfig:
    return ModelConfig(model=str(builtin_model_path("qwen2_vl")))


def audio_config() -> ModelConfig:
    return ModelConfig(model=str(builtin_model_path("qwen2_audio")))


@pytest.fixture(scope="module")
def vl_renderer() -> Iterator[BaseRenderer]:
    renderer = BaseRenderer(vl_config())
    yield renderer
    renderer.shutdown()


@pytest.fixture(scope="module")
def audio_renderer() -> Iterator[BaseRenderer]:
    renderer = BaseRenderer(audio_config())
    yield renderer
    renderer.shutdown()


@pytest.fixture(scope="module")
def vl_info(vl_renderer: BaseRenderer) -> BaseProcessingInfo:
    """The renderer's processing info: parsing with it shares the loaded HF processor."""
    return vl_renderer.mm_processor.info


@pytest.fixture(scope="module")
def audio_info(audio_renderer: BaseRenderer) -> BaseProcessingInfo:
    return audio_renderer.mm_processor.info


class OmniLikeInfo(Qwen2VLProcessingInfo):
    """Qwen2-VL's decoders and template, taking audio too and with small per-prompt limits."""

    def get_supported_mm_limits(self) -> Mapping[str, int | None]:
        return {"image": 2, "video": 1, "audio": 1}


@pytest.fixture(scope="module")
def omni_info(vl_info: BaseProcessingInfo) -> OmniLikeInfo:
    return OmniLikeInfo(vl_info.ctx)


def data_url(media_type: str, data: bytes) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def wav_bytes(freq_hz: float = 440.0, seconds: float = 1.0) -> bytes:
    return encode_soundfile(sine(Tones((freq_hz,), (0.5,)), 16000, seconds), 16000, "WAV", "PCM_16")


def video_bytes() -> bytes:
    return make_clip("h264", num_frames=8, width=64, height=64)


def clip_with_audio(freq_hz: float = 440.0) -> bytes:
    """Four 32x32 frames and half a second of a sine, muxed into one MP4."""
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="mp4") as container:
        video = container.add_stream("mpeg4", rate=8)
        video.width, video.height, video.pix_fmt = 32, 32, "yuv420p"
        audio = container.add_stream("aac", rate=16000)
        audio.layout = "mono"
        for index in range(4):
            image = np.full((32, 32, 3), index * 50, dtype=np.uint8)
            for packet in video.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                container.mux(packet)
        tone = sine(Tones((freq_hz,), (0.5,)), 16000, 0.5)[None, :]
        frame = av.AudioFrame.from_ndarray(tone, format="fltp", layout="mono")
        frame.sample_rate = 16000
        for packet in audio.encode(frame):
            container.mux(packet)
        for stream in (video, audio):
            for packet in stream.encode(None):
                container.mux(packet)
    return buffer.getvalue()


def user(*parts: Any) -> list[dict[str, Any]]:
    return [{"role": "user", "content": list(parts)}]


def image_part(url: str | None, **extra: Any) -> dict[str, Any]:
    return {"type": "image_url", "image_url": None if url is None else {"url": url}, **extra}


def all_refs(mm_data: Mapping[str, Any] | None) -> list[MediaRef[Any]]:
    assert mm_data is not None
    return [item for items in mm_data.values() for item in items if item is not None]


def ref_identities(mm_data: Mapping[str, Any] | None) -> dict[str, list[Any]]:
    assert mm_data is not None
    return {
        modality: [None if ref is None else (ref.key, ref.spec, ref.data) for ref in items]
        for modality, items in mm_data.items()
    }


@pytest.fixture
def file_connector(tmp_path: Path, http_client: MediaHTTPClient) -> MediaConnector:
    return MediaConnector(
        http_client, allowed_local_media_path=str(tmp_path), allow_private_ips=True
    )


def file_url(directory: Path, name: str, data: bytes) -> str:
    (directory / name).write_bytes(data)
    return "file://" + quote(str(directory / name))


# -- a full message, per family ----------------------------------------------------------------


def test_text_two_images_and_a_video_for_qwen2_vl(
    vl_info: BaseProcessingInfo,
    media_server: MediaServer,
    file_connector: MediaConnector,
    tmp_path: Path,
) -> None:
    http_image = media_server.add_file("a.png", image_bytes(1))
    video = file_url(tmp_path, "clip.mp4", video_bytes())
    messages = [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Compare"},
                image_part(http_image, detail="high"),
                {"type": "image_url", "image_url": data_url("image/png", image_bytes(2))},
                {"type": "video_url", "video_url": {"url": video}},
                "and say which is brighter.",
            ],
        },
    ]
    conversation, mm_data, mm_uuids = parse_chat_messages(
        messages, vl_info, connector=file_connector, media_io_kwargs=VIDEO_IO_KWARGS
    )

    assert conversation == [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Compare"},
                {"type": "image", "detail": "high"},  # as vLLM: fields no part type has pass on
                {"type": "image"},
                {"type": "video"},
                {"type": "text", "text": "and say which is brighter."},
            ],
        },
    ]
    assert mm_data is not None and set(mm_data) == {"image", "video"}
    assert [ref.data for ref in mm_data["image"]] == [image_bytes(1), image_bytes(2)]
    (video_ref,) = mm_data["video"]
    assert video_ref.data == video_bytes()
    # The decoder is the model's: its video backend, with the request's frame count.
    assert video_ref.spec == vl_info.get_media_io("video", {"num_frames": 4}).get_decode_spec()
    assert video_ref.spec.settings["num_frames"] == 4
    assert not any(ref.is_decoded for ref in all_refs(mm_data))
    assert mm_uuids == {"image": [None, None], "video": [None]}  # as vLLM: one entry per item
    assert media_server.count("/files/a.png") == 1


def test_audio_url_and_input_audio_for_qwen2_audio(
    audio_info: BaseProcessingInfo, media_server: MediaServer, connector: MediaConnector
) -> None:
    url = media_server.add_file("tone.wav", wav_bytes(440.0))
    inline = wav_bytes(880.0)
    messages = user(
        {"type": "audio_url", "audio_url": {"url": url}},
        {
            "type": "input_audio",
            "input_audio": {"data": base64.b64encode(inline).decode(), "format": "wav"},
        },
        {"type": "text", "text": "What are these tones?"},
    )
    conversation, mm_data, _ = parse_chat_messages(messages, audio_info, connector=connector)

    assert conversation[0]["content"] == [
        {"type": "audio"},
        {"type": "audio"},
        {"type": "text", "text": "What are these tones?"},
    ]
    assert mm_data is not None and list(mm_data) == ["audio"]
    first, second = mm_data["audio"]
    assert (first.data, second.data) == (wav_bytes(440.0), inline)  # input_audio: base64-decoded
    assert not first.is_decoded and not second.is_decoded
    assert first.spec == audio_info.get_media_io("audio").get_decode_spec()
    samples, rate = second.decode()
    assert abs(dominant_frequency_hz(samples, rate) - 880.0) < 20


def test_a_model_config_resolves_to_one_shared_processing_info() -> None:
    first = chat_utils.resolve_processing_info(audio_config())
    assert chat_utils.resolve_processing_info(audio_config()) is first  # an equal config
    other = ModelConfig(model=str(builtin_model_path("qwen2_audio")), media_io_kwargs={"audio": {}})
    assert chat_utils.resolve_processing_info(other) is not first
    conversation, mm_data, _ = parse_chat_messages(
        user({"type": "audio_url", "audio_url": data_url("audio/wav", wav_bytes())}), audio_config()
    )  # no connector given: one is built from MEDIA_CONNECTOR_REGISTRY
    assert conversation[0]["content"] == [{"type": "audio"}]
    assert mm_data is not None and mm_data["audio"][0].data == wav_bytes()


# -- malformed requests: 400 naming the parameter, before any download ---------------------------


@pytest.mark.parametrize(
    ("bad_part", "parameter"),
    [
        ({"type": "image", "image": "x"}, "messages[0].content[1].type"),
        ({"type": 7}, "messages[0].content[1].type"),
        ({"foo": "bar"}, "messages[0].content[1].type"),
        (42, "messages[0].content[1]"),
        ({"type": "image_url"}, "messages[0].content[1].image_url.url"),
        (
            {"type": "image_url", "image_url": {"detail": "auto"}},
            "messages[0].content[1].image_url.url",
        ),
        ({"type": "image_url", "image_url": ["x"]}, "messages[0].content[1].image_url"),
        ({"type": "video_url", "video_url": {"url": ""}}, "messages[0].content[1].video_url.url"),
        ({"type": "text", "text": 5}, "messages[0].content[1].text"),
        ({"type": "image_url", "image_url": None, "uuid": 5}, "messages[0].content[1].uuid"),
        (
            {"type": "input_audio", "input_audio": {"format": "wav"}},
            "messages[0].content[1].input_audio.data",
        ),
        (
            {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav;x=1"}},
            "messages[0].content[1].input_audio.format",
        ),
        ({"type": "input_audio", "input_audio": "AAAA"}, "messages[0].content[1].input_audio"),
    ],
)
def test_a_malformed_part_is_a_400_naming_it_and_nothing_is_fetched(
    vl_info: BaseProcessingInfo,
    media_server: MediaServer,
    connector: MediaConnector,
    bad_part: Any,
    parameter: str,
) -> None:
    good = image_part(media_server.add_file("ok.png", image_bytes(3)))
    with pytest.raises(VLLMValidationError) as info:
        parse_chat_messages(user(good, bad_part), vl_info, connector=connector)
    assert info.value.parameter == parameter
    assert info.value.status_code == 400
    assert media_server.total_requests() == 0


@pytest.mark.parametrize(
    ("messages", "parameter"),
    [
        ("hello", "messages"),
        ([["user", "hi"]], "messages[0]"),
        ([{"content": "hi"}], "messages[0].role"),
        ([{"role": "user", "content": 3}], "messages[0].content"),
    ],
)
async def test_a_malformed_message_is_a_400_naming_it(
    vl_info: BaseProcessingInfo, connector: MediaConnector, messages: Any, parameter: str
) -> None:
    with pytest.raises(VLLMValidationError) as sync_info:
        parse_chat_messages(messages, vl_info, connector=connector)
    with pytest.raises(VLLMValidationError) as async_info:
        await parse_chat_messages_async(messages, vl_info, connector=connector)
    assert sync_info.value.parameter == async_info.value.parameter == parameter


def test_parts_without_type_and_plain_string_urls_are_recognised(
    vl_info: BaseProcessingInfo, connector: MediaConnector
) -> None:
    url = data_url("image/png", image_bytes(4))
    conversation, mm_data, _ = parse_chat_messages(
        user({"image_url": url}, {"text": "what is it?"}, {"type": "text", "text": None}),
        vl_info,
        connector=connector,
    )
    assert conversation[0]["content"] == [
        {"type": "image"},
        {"type": "text", "text": "what is it?"},
    ]
    assert mm_data is not None and mm_data["image"][0].data == image_bytes(4)


# -- limits and modalities ---------------------------------------------------------------------


def test_an_unsupported_modality_is_a_400_before_any_download(
    vl_info: BaseProcessingInfo, media_server: MediaServer, connector: MediaConnector
) -> None:
    image = image_part(media_server.add_file("a.png", image_bytes(5)))
    audio = {"type": "audio_url", "audio_url": {"url": media_server.add_file("a.wav", wav_bytes())}}
    with pytest.raises(VLLMValidationError, match="does not accept audio input") as info:
        parse_chat_messages(user(image, audio), vl_info, connector=connector)
    assert info.value.parameter == "messages[0].content[1].audio_url"
    assert media_server.total_requests() == 0


def test_the_models_per_prompt_limit_is_enforced_before_any_download(
    omni_info: OmniLikeInfo, media_server: MediaServer, connector: MediaConnector
) -> None:
    urls = [media_server.add_file(f"{i}.png", image_bytes(10 + i)) for i in range(3)]
    with pytest.raises(VLLMValidationError, match=r"At most 2 image\(s\)") as info:
        parse_chat_messages(
            [
                {"role": "user", "content": [image_part(urls[0])]},
                {"role": "user", "content": ["more", image_part(urls[1]), image_part(urls[2])]},
            ],
            omni_info,
            connector=connector,
        )
    assert info.value.parameter == "messages[1].content[2].image_url"
    assert media_server.total_requests() == 0
    _, mm_data, _ = parse_chat_messages(
        user(image_part(urls[0]), image_part(urls[1])), omni_info, connector=connector
    )
    assert mm_data is not None and len(mm_data["image"]) == 2  # at the limit is fine


async def test_limit_mm_per_prompt_tightens_the_models_limit(
    vl_info: BaseProcessingInfo, connector: MediaConnector
) -> None:
    url = data_url("image/png", image_bytes(6))
    tracker = MultiModalItemTracker(vl_info, connector=connector, limit_mm_per_prompt={"image": 1})
    # video: the config's limit_mm_per_prompt, vLLM's default 999 when unset
    assert (tracker.get_limit("image"), tracker.get_limit("video")) == (1, 999)
    with pytest.raises(VLLMValidationError, match=r"At most 1 image\(s\)") as info:
        await parse_chat_messages_async(
            user(image_part(url), image_part(url)),
            vl_info,
            connector=connector,
            limit_mm_per_prompt={"image": 1},
        )
    assert info.value.parameter == "messages[0].content[1].image_url"


# -- decoders: the model's, with the request's settings --------------------------------------


def test_get_media_io_delegates_to_the_models_processing_info(
    vl_info: BaseProcessingInfo, connector: MediaConnector
) -> None:
    calls: list[tuple[str, dict[str, Any]]] = []

    class RecordingInfo(Qwen2VLProcessingInfo):
        def get_media_io(
            self, modality: str, media_io_kwargs: Mapping[str, Any] | None = None
        ) -> MediaIO[Any]:
            calls.append((modality, dict(media_io_kwargs or {})))
            return super().get_media_io(modality, media_io_kwargs)

    tracker = MultiModalItemTracker(
        RecordingInfo(vl_info.ctx), {"video": {"num_frames": 6}}, connector=connector
    )
    video_io = tracker.get_media_io("video")
    assert calls == [("video", {"num_frames": 6})]
    assert video_io.num_frames == 6
    # The loader registered for Qwen2VLVideoProcessor, as in vLLM.
    assert video_io.video_backend == "qwen2_vl"
    assert tracker.get_media_io("video") is video_io  # resolved once per request and modality


def test_bad_media_io_kwargs_are_a_400_before_any_download(
    audio_info: BaseProcessingInfo, media_server: MediaServer, connector: MediaConnector
) -> None:
    url = media_server.add_file("a.wav", wav_bytes())
    with pytest.raises(VLLMValidationError, match="media_io_kwargs") as info:
        parse_chat_messages(
            user({"type": "audio_url", "audio_url": url}),
            audio_info,
            connector=connector,
            media_io_kwargs={"audio": {"audio_backend": "nope"}},
        )
    assert info.value.parameter == "media_io_kwargs"
    assert media_server.total_requests() == 0


# -- UUIDs ---------------------------------------------------------------------------------------


async def test_uuids_per_part_and_uuid_only_items(
    vl_info: BaseProcessingInfo, audio_info: BaseProcessingInfo, connector: MediaConnector
) -> None:
    url = data_url("image/png", image_bytes(7))
    conversation, mm_data, mm_uuids = await parse_chat_messages_async(
        user(
            image_part(url, uuid="cat"),
            image_part(url),
            image_part(None, uuid="dog"),
            {"image_url": None, "uuid": "bird"},
        ),
        vl_info,
        connector=connector,
    )
    assert conversation[0]["content"] == [{"type": "image"}] * 4
    assert mm_uuids == {"image": ["cat", None, "dog", "bird"]}
    assert mm_data is not None
    first, second, uuid_only, typeless = mm_data["image"]
    assert first is not None and second is not None and first.key == second.key
    assert (uuid_only, typeless) == (None, None)

    _, audio_data, audio_uuids = parse_chat_messages(
        user(
            {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}, "uuid": "clip-1"}
        ),
        audio_info,
        connector=connector,
    )
    assert (audio_data, audio_uuids) == ({"audio": [None]}, {"audio": ["clip-1"]})


def test_no_media_gives_no_mm_data(vl_info: BaseProcessingInfo, connector: MediaConnector) -> None:
    conversation, mm_data, mm_uuids = parse_chat_messages(
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "name": "bot"}],
        vl_info,
        connector=connector,
    )
    assert conversation == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": [], "name": "bot"},  # other fields pass through
    ]
    assert (mm_data, mm_uuids) == (None, None)


# -- use_audio_in_video: one download, two decoders ------------------------------------------


@pytest.mark.parametrize("entry", ["sync", "async"])
async def test_use_audio_in_video_downloads_once(
    entry: str, omni_info: OmniLikeInfo, media_server: MediaServer, connector: MediaConnector
) -> None:
    url = media_server.add_file("clip.mp4", clip_with_audio(440.0))
    messages = user({"type": "video_url", "video_url": {"url": url}, "uuid": "v1"}, "listen")
    kwargs: dict[str, Any] = {"mm_processor_kwargs": {"use_audio_in_video": True}}
    if entry == "sync":
        conversation, mm_data, mm_uuids = parse_chat_messages(
            messages, omni_info, connector=connector, **kwargs
        )
    else:
        conversation, mm_data, mm_uuids = await parse_chat_messages_async(
            messages, omni_info, connector=connector, **kwargs
        )

    assert media_server.count("/files/clip.mp4") == 1
    assert conversation[0]["content"] == [{"type": "video"}, {"type": "text", "text": "listen"}]
    assert mm_data is not None
    (video,), (audio,) = mm_data["video"], mm_data["audio"]
    assert video.data == audio.data == clip_with_audio(440.0)
    assert video.key != audio.key and not video.is_decoded and not audio.is_decoded
    # Distinct UUIDs: the audio item must not collide with the video's in the processor cache.
    assert mm_uuids == {"video": ["v1"], "audio": ["v1" + AUDIO_IN_VIDEO_UUID_SUFFIX]}
    frames, _metadata = video.decode()
    samples, rate = audio.decode()
    assert np.asarray(frames).shape[1:] == (32, 32, 3)
    assert abs(dominant_frequency_hz(samples, rate) - 440.0) < 20


def test_use_audio_in_video_needs_a_model_that_takes_audio(
    vl_info: BaseProcessingInfo, media_server: MediaServer, connector: MediaConnector
) -> None:
    url = media_server.add_file("clip.mp4", clip_with_audio())
    with pytest.raises(VLLMValidationError, match="does not accept audio"):
        parse_chat_messages(
            user({"type": "video_url", "video_url": url}),
            vl_info,
            connector=connector,
            mm_processor_kwargs={"use_audio_in_video": True},
        )
    with pytest.raises(VLLMValidationError) as info:
        parse_chat_messages(
            [], vl_info, connector=connector, mm_processor_kwargs={"use_audio_in_video": "yes"}
        )
    assert info.value.parameter == "mm_processor_kwargs"
    assert media_server.total_requests() == 0


# -- sync and async ---------------------------------------------------------------------------


async def test_sync_and_async_parse_to_the_same_result(
    vl_info: BaseProcessingInfo,
    media_server: MediaServer,
    file_connector: MediaConnector,
    tmp_path: Path,
) -> None:
    messages = [
        {
            "role": "user",
            "content": [
                image_part(media_server.add_file("a.png", image_bytes(20)), uuid="a"),
                {
                    "type": "video_url",
                    "video_url": {"url": file_url(tmp_path, "v.mp4", video_bytes())},
                },
                {"type": "text", "text": "and"},
            ],
        },
        {"role": "assistant", "content": "ok"},
        {
            "role": "user",
            "content": [
                image_part(data_url("image/png", image_bytes(21))),
                image_part(None, uuid="z"),
            ],
        },
    ]
    kwargs: dict[str, Any] = {"media_io_kwargs": VIDEO_IO_KWARGS}
    sync_conv, sync_data, sync_uuids = await asyncio.to_thread(
        parse_chat_messages, messages, vl_info, connector=file_connector, **kwargs
    )
    async_conv, async_data, async_uuids = await parse_chat_messages_async(
        messages, vl_info, connector=file_connector, **kwargs
    )
    assert sync_conv == async_conv
    assert sync_uuids == async_uuids == {"image": ["a", None, "z"], "video": [None]}
    assert ref_identities(sync_data) == ref_identities(async_data)
    assert not any(ref.is_decoded for ref in all_refs(sync_data) + all_refs(async_data))


class GatedConnector(MediaConnector):
    """Each async image fetch waits until ``expected`` fetches have started (bounded)."""

    def __init__(self, expected: int) -> None:
        super().__init__()
        self.expected = expected
        self.started = 0
        self.sync_calls = 0
        self.all_started = asyncio.Event()

    async def fetch_image_async(self, image_url: str, media_io: MediaIO[Any]) -> MediaRef[Any]:
        self.started += 1
        if self.started == self.expected:
            self.all_started.set()
        await asyncio.wait_for(self.all_started.wait(), WAIT_S)  # times out if fetched one by one
        return await super().fetch_image_async(image_url, media_io)

    def fetch_image(self, image_url: str, media_io: MediaIO[Any]) -> MediaRef[Any]:
        self.sync_calls += 1
        return super().fetch_image(image_url, media_io)


async def test_the_async_parser_fetches_concurrently_through_the_connectors_methods(
    vl_info: BaseProcessingInfo,
) -> None:
    urls = [data_url("image/png", image_bytes(30 + i)) for i in range(3)]
    gated = GatedConnector(expected=3)
    _, mm_data, _ = await parse_chat_messages_async(
        user(*map(image_part, urls)), vl_info, connector=gated
    )
    assert gated.started == 3
    assert mm_data is not None and [ref.data for ref in mm_data["image"]] == [
        image_bytes(30 + i) for i in range(3)
    ]
    await asyncio.to_thread(
        parse_chat_messages, user(image_part(urls[0])), vl_info, connector=gated
    )
    assert gated.sync_calls == 1


@pytest.mark.parametrize("entry", ["sync", "async"])
async def test_fetch_errors_propagate_first_in_request_order(
    entry: str, vl_info: BaseProcessingInfo, media_server: MediaServer, connector: MediaConnector
) -> None:
    # The refused scheme fails at once; the 404 needs a round trip, yet it is the first part.
    messages = user(
        image_part(media_server.url("/status/404")), image_part("ftp://example.com/a.png")
    )
    with pytest.raises(MediaNotFoundError) as info:
        if entry == "sync":
            parse_chat_messages(messages, vl_info, connector=connector)
        else:
            await parse_chat_messages_async(messages, vl_info, connector=connector)
    assert info.value.status_code == 404
    with pytest.raises(MediaNotAllowedError):
        await parse_chat_messages_async(
            user(image_part("ftp://example.com/a.png")), vl_info, connector=connector
        )


async def test_a_tracker_fetches_only_when_its_items_resolve(
    vl_info: BaseProcessingInfo, media_server: MediaServer, connector: MediaConnector
) -> None:
    url = media_server.add_file("late.png", image_bytes(40))
    tracker = AsyncMultiModalItemTracker(vl_info, connector=connector)
    tracker.create_parser().parse_image(url, "u")
    assert tracker.get_num_items("image") == 1
    assert media_server.total_requests() == 0  # planned, not fetched
    mm_data, mm_uuids = await tracker.resolve_items()
    assert mm_data is not None and mm_data["image"][0].data == image_bytes(40)
    assert mm_uuids == {"image": ["u"]}
    assert media_server.count("/files/late.png") == 1


def test_vllms_positional_content_format_and_a_positional_connector(
    vl_info: BaseProcessingInfo, connector: MediaConnector
) -> None:
    # vLLM's signature: (messages, model_config, content_format, media_io_kwargs, mm_processor_kwargs)
    conversation, mm_data, mm_uuids = parse_chat_messages(
        [{"role": "user", "content": "hi"}], vl_info, "string", None, None
    )
    assert conversation == [{"role": "user", "content": "hi"}] and (mm_data, mm_uuids) == (
        None,
        None,
    )
    with pytest.raises(TypeError, match="connector= by keyword"):
        parse_chat_messages([], vl_info, connector)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="connector= by keyword"):
        MultiModalItemTracker(vl_info, connector)  # type: ignore[arg-type]


# -- the chat template ---------------------------------------------------------------------------


def test_content_format_detection() -> None:
    for name in ("qwen2_vl", "qwen2_audio"):
        template = (builtin_model_path(name) / "chat_template.jinja").read_text()
        assert detect_content_format(template) == "openai"
    assert (
        detect_content_format("{% for m in messages %}{{ m['content'] }}{% endfor %}") == "string"
    )
    aliased = "{% for m in messages %}{% set parts = m.content %}{% for p in parts %}{{ p.text }}{% endfor %}{% endfor %}"
    assert detect_content_format(aliased) == "openai"
    assert detect_content_format("{% for p in message['content'] | list %}{% endfor %}") == "openai"
    # Tags only the tokenizer's environment knows: the loop header is read off the source.
    generation = "{% for m in messages %}{% generation %}{% for p in m['content'] %}{% endfor %}{% endgeneration %}{% endfor %}"
    assert detect_content_format(generation) == "openai"
    assert (
        detect_content_format("{% generation %}{{ messages[0]['content'] }}{% endgeneration %}")
        == "string"
    )


STRING_TEMPLATE = (
    "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}[assistant] {% endif %}"
)


def test_string_format_places_the_models_placeholders(
    audio_info: BaseProcessingInfo, vl_info: BaseProcessingInfo, connector: MediaConnector
) -> None:
    wav = data_url("audio/wav", wav_bytes())
    messages = user(
        "first",
        {"type": "audio_url", "audio_url": wav},
        "then",
        {"type": "audio_url", "audio_url": wav},
    )
    assert (
        resolve_chat_template_content_format(audio_info, chat_template=STRING_TEMPLATE) == "string"
    )
    conversation, mm_data, _ = parse_chat_messages(
        messages, audio_info, connector=connector, chat_template=STRING_TEMPLATE
    )
    # Read off the model's own template, numbering included, though the request brought another.
    audio_1 = "Audio 1: <|audio_bos|><|AUDIO|><|audio_eos|>\n"
    audio_2 = "Audio 2: <|audio_bos|><|AUDIO|><|audio_eos|>\n"
    assert conversation[0]["content"] == "\n".join([audio_1, audio_2, "first", "then"])
    interleaved, _, _ = parse_chat_messages(
        messages, audio_info, connector=connector, content_format="string", interleave_strings=True
    )
    assert interleaved[0]["content"] == "\n".join(["first", audio_1, "then", audio_2])
    prompt = apply_chat_template(audio_info, conversation, chat_template=STRING_TEMPLATE)
    assert prompt == f"[user] {conversation[0]['content']}\n[assistant] "

    vl_conversation, _, _ = parse_chat_messages(
        user(image_part(data_url("image/png", image_bytes(50))), "x"),
        vl_info,
        connector=connector,
        content_format="string",
    )
    assert vl_conversation[0]["content"] == "<|vision_start|><|image_pad|><|vision_end|>\nx"
    assert mm_data is not None and len(mm_data["audio"]) == 2


def test_string_format_without_a_placeholder_for_the_modality_is_a_400(
    omni_info: OmniLikeInfo, connector: MediaConnector
) -> None:
    # Qwen2-VL's template writes nothing for audio parts, so audio cannot be placed in a string.
    with pytest.raises(VLLMValidationError, match="no placeholder for audio") as info:
        parse_chat_messages(
            user(
                {
                    "type": "input_audio",
                    "input_audio": {
                        "data": base64.b64encode(wav_bytes()).decode(),
                        "format": "wav",
                    },
                }
            ),
            omni_info,
            connector=connector,
            content_format="string",
        )
    assert info.value.parameter == "chat_template_content_format"
    with pytest.raises(VLLMValidationError) as bad_format:
        parse_chat_messages([], omni_info, connector=connector, content_format="xml")  # type: ignore[arg-type]
    assert bad_format.value.parameter == "chat_template_content_format"


def test_a_processing_infos_placeholder_hook_wins(
    vl_info: BaseProcessingInfo, connector: MediaConnector
) -> None:
    class HookedInfo(Qwen2VLProcessingInfo):
        def get_placeholder_str(self, modality: str, ordinal: int) -> str:
            return f"<{modality}-{ordinal}>"

    conversation, _, _ = parse_chat_messages(
        user(image_part(data_url("image/png", image_bytes(51))), image_part(None, uuid="u")),
        HookedInfo(vl_info.ctx),
        connector=connector,
        content_format="string",
        interleave_strings=True,
    )
    assert conversation[0]["content"] == "<image-1>\n<image-2>"


def test_apply_chat_template_options_and_errors(vl_info: BaseProcessingInfo) -> None:
    conversation = [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "hi"}]}
    ]
    prompt = apply_chat_template(
        vl_info, conversation, chat_template_kwargs={"add_vision_id": True}
    )
    assert "Picture 1: <|vision_start|><|image_pad|><|vision_end|>hi" in prompt
    assert prompt.endswith("<|im_start|>assistant\n")
    assert not apply_chat_template(vl_info, conversation, add_generation_prompt=False).endswith(
        "assistant\n"
    )

    cases: list[tuple[dict[str, Any], str]] = [
        ({"continue_final_message": True}, "continue_final_message"),
        ({"chat_template_kwargs": {"tokenize": True}}, "chat_template_kwargs"),
        ({"chat_template": "{% for m in messages %}"}, "chat_template"),
        ({"chat_template": "{{ raise_exception('roles must alternate') }}"}, "messages"),
    ]
    for kwargs, parameter in cases:
        with pytest.raises(VLLMValidationError) as info:
            apply_chat_template(vl_info, conversation, **kwargs)
        assert info.value.parameter == parameter, kwargs


# -- end to end: parse -> chat template -> renderer ---------------------------------------------


async def test_end_to_end_every_item_gets_its_placeholders(
    vl_renderer: BaseRenderer,
    vl_info: BaseProcessingInfo,
    media_server: MediaServer,
    connector: MediaConnector,
) -> None:
    messages = user(
        "Compare",
        image_part(media_server.add_file("e1.png", image_bytes(60))),
        image_part(data_url("image/png", image_bytes(61, size=84))),
        {"type": "video_url", "video_url": {"url": media_server.add_file("e.mp4", video_bytes())}},
    )
    conversation, mm_data, mm_uuids = await parse_chat_messages_async(
        messages, vl_info, connector=connector, media_io_kwargs=VIDEO_IO_KWARGS
    )
    prompt = apply_chat_template(vl_info, conversation)
    assert prompt.count("<|image_pad|>") == 2 and prompt.count("<|video_pad|>") == 1
    assert mm_data is not None
    out = await vl_renderer.process_multimodal_async(
        MultiModalRequest(prompt, mm_data, mm_uuids=mm_uuids, media_io_kwargs=VIDEO_IO_KWARGS)
    )

    placeholders = out["mm_placeholders"]
    assert [len(placeholders["image"]), len(placeholders["video"])] == [2, 1]
    tokenizer = vl_info.get_tokenizer()
    ids = out["prompt_token_ids"]
    for modality, token in (("image", "<|image_pad|>"), ("video", "<|video_pad|>")):
        token_id = tokenizer.convert_tokens_to_ids(token)
        grids = out["mm_kwargs"].get_data()[f"{modality}_grid_thw"]
        for placeholder, grid in zip(placeholders[modality], grids, strict=True):
            assert placeholder.length == int(grid.prod()) // 4
            assert set(ids[placeholder.offset : placeholder.offset + placeholder.length]) == {
                token_id
            }
    assert [p.length for p in placeholders["image"]] == [
        4,
        9,
    ]  # 56 px and 84 px: 4x4 and 6x6 patches
    assert all(ref.data for ref in all_refs(mm_data))  # the caller's refs stay usable


async def test_end_to_end_one_image_equals_hf_on_the_decoded_image(
    vl_renderer: BaseRenderer,
    vl_info: BaseProcessingInfo,
    media_server: MediaServer,
    connector: MediaConnector,
) -> None:
    data = image_bytes(70, size=112)
    messages = user(
        image_part(media_server.add_file("p.png", data), uuid="photo-70"), "Describe it."
    )
    conversation, mm_data, mm_uuids = await parse_chat_messages_async(
        messages, vl_info, connector=connector
    )
    prompt = apply_chat_template(vl_info, conversation)
    assert mm_data is not None
    out = await vl_renderer.process_multimodal_async(
        MultiModalRequest(prompt, mm_data, mm_uuids=mm_uuids)
    )

    # Qwen2-VL's default is mm_device_do_normalize (issue 12): raw uint8 pixels, as HF emits them
    # with its rescale and normalize off; the model normalizes on the device.
    assert out["mm_device_do_normalize"] is True
    hf_out = vl_info.get_hf_processor()(
        text=[prompt],
        images=[reference_image(data)],
        return_tensors="pt",
        do_rescale=False,
        do_normalize=False,
    )
    token_id = vl_info.get_tokenizer().convert_tokens_to_ids("<|image_pad|>")
    assert_matches_hf(out, hf_out, ["pixel_values", "image_grid_thw"], {"image": token_id})
    assert out["mm_hashes"] == {"image": ["photo-70"]}

    # The client may now send the image by its UUID alone: the renderer serves it from its cache.
    uuid_conversation, uuid_data, uuid_uuids = parse_chat_messages(
        user(image_part(None, uuid="photo-70"), "Describe it."), vl_info, connector=connector
    )
    assert uuid_data == {"image": [None]}
    again = await vl_renderer.process_multimodal_async(
        MultiModalRequest(
            apply_chat_template(vl_info, uuid_conversation), uuid_data, mm_uuids=uuid_uuids
        )
    )
    assert again["prompt_token_ids"] == out["prompt_token_ids"]
    assert again["mm_hashes"] == out["mm_hashes"]


async def test_end_to_end_audio_items_get_their_placeholders(
    audio_renderer: BaseRenderer,
    audio_info: BaseProcessingInfo,
    media_server: MediaServer,
    connector: MediaConnector,
) -> None:
    messages = user(
        {
            "type": "audio_url",
            "audio_url": {"url": media_server.add_file("t.wav", wav_bytes(440.0, 1.0))},
        },
        {
            "type": "input_audio",
            "input_audio": {
                "data": base64.b64encode(wav_bytes(660.0, 2.0)).decode(),
                "format": "wav",
            },
        },
        "Which is longer?",
    )
    conversation, mm_data, mm_uuids = await parse_chat_messages_async(
        messages, audio_info, connector=connector
    )
    prompt = apply_chat_template(audio_info, conversation)
    assert "Audio 1: <|audio_bos|><|AUDIO|><|audio_eos|>\nAudio 2: " in prompt
    assert mm_data is not None
    out = await audio_renderer.process_multimodal_async(
        MultiModalRequest(prompt, mm_data, mm_uuids=mm_uuids)
    )
    one_second, two_seconds = out["mm_placeholders"]["audio"]
    assert (one_second.length, two_seconds.length) == (25, 50)  # one token per 40 ms
