"""One fetch, two decoders: ``fetch_video_and_audio`` downloads, reads or base64-decodes once."""

from __future__ import annotations

import asyncio
import io
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

import av
import numpy as np
import pybase64
import pytest

from _http_server import MediaServer
from _raw_media import RawAudioIO, RawVideoIO
from mediaref.exceptions import MediaTimeoutError, MediaTooLargeError
from mediaref.media._transport import data_url
from mediaref.media._transport.http_client import MediaHTTPClient
from mediaref.media._transport.local_file import LocalMediaRoot
from mediaref.media.connector import MediaConnector

PAYLOAD = os.urandom(5000)


def test_one_download_serves_both_decoders(
    media_server: MediaServer, connector: MediaConnector
) -> None:
    url = media_server.add_file("clip.mp4", PAYLOAD)
    video_io, audio_io = RawVideoIO(), RawAudioIO(tag="audio")
    video, audio = connector.fetch_video_and_audio(url, video_io, audio_io)
    assert video.data == audio.data == PAYLOAD
    assert video.key != audio.key  # two decode specs, two identities
    assert media_server.count("/files/clip.mp4") == 1
    assert (video_io.bytes_refs, audio_io.bytes_refs) == (1, 1)


async def test_one_download_serves_both_decoders_async(
    media_server: MediaServer, connector: MediaConnector
) -> None:
    url = media_server.add_file("clip.mp4", PAYLOAD)
    video, audio = await connector.fetch_video_and_audio_async(
        url, RawVideoIO(), RawAudioIO(tag="audio")
    )
    assert video.data == audio.data == PAYLOAD
    assert media_server.count("/files/clip.mp4") == 1


@pytest.mark.parametrize("capped", ["video", "audio"])
def test_the_shared_download_takes_the_strictest_cap(
    media_server: MediaServer, connector: MediaConnector, capped: str
) -> None:
    url = media_server.add_file("clip.mp4", PAYLOAD) + "?chunked=1"
    small = len(PAYLOAD) - 1
    video_io = RawVideoIO(max_bytes=small if capped == "video" else None)
    audio_io = RawAudioIO(max_bytes=small if capped == "audio" else None)
    with pytest.raises(MediaTooLargeError, match=f"{small}-byte limit"):
        connector.fetch_video_and_audio(url, video_io, audio_io)
    # Refused by the transport itself, before either decoder saw the payload.
    assert (video_io.bytes_refs, audio_io.bytes_refs) == (0, 0)


def test_the_shared_download_uses_the_video_timeout(
    media_server: MediaServer, connector: MediaConnector, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_VIDEO_FETCH_TIMEOUT", "0.3")
    monkeypatch.setenv("VLLM_AUDIO_FETCH_TIMEOUT", "60")
    monkeypatch.setenv("VLLM_IMAGE_FETCH_TIMEOUT", "60")
    monkeypatch.setenv("VLLM_MEDIA_FETCH_MAX_RETRIES", "1")
    with pytest.raises(MediaTimeoutError):
        connector.fetch_video_and_audio(media_server.url("/slow"), RawVideoIO(), RawAudioIO())


def test_a_data_url_is_base64_decoded_once(
    connector: MediaConnector, monkeypatch: pytest.MonkeyPatch
) -> None:
    decodes: list[int] = []
    real_decode = pybase64.b64decode

    def counting_decode(*args: Any, **kwargs: Any) -> bytes:
        decodes.append(1)
        return real_decode(*args, **kwargs)

    monkeypatch.setattr(data_url.pybase64, "b64decode", counting_decode)
    url = "data:video/mp4;base64," + pybase64.b64encode(PAYLOAD).decode()
    video, audio = connector.fetch_video_and_audio(url, RawVideoIO(), RawAudioIO(tag="audio"))
    assert video.data == audio.data == PAYLOAD
    assert len(decodes) == 1


def test_a_file_url_is_read_once(
    tmp_path: Path, http_client: MediaHTTPClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "clip.mp4").write_bytes(PAYLOAD)
    reads: list[int] = []
    real_read = LocalMediaRoot.read

    def counting_read(self: LocalMediaRoot, real_path: str, max_bytes: int | None) -> bytes:
        reads.append(1)
        return real_read(self, real_path, max_bytes)

    monkeypatch.setattr(LocalMediaRoot, "read", counting_read)
    request = MediaConnector(http_client, allowed_local_media_path=str(tmp_path))
    url = "file://" + quote(str(tmp_path / "clip.mp4"))
    video, audio = asyncio.run(
        request.fetch_video_and_audio_async(url, RawVideoIO(), RawAudioIO(tag="audio"))
    )
    assert video.data == audio.data == PAYLOAD
    assert len(reads) == 1


def encode_clip_with_audio(frequency_hz: float = 440.0, sample_rate: int = 16000) -> bytes:
    """Three 32x32 video frames and half a second of a sine, muxed into one MP4."""
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="mp4") as container:
        video = container.add_stream("mpeg4", rate=10)
        video.width, video.height, video.pix_fmt = 32, 32, "yuv420p"
        audio = container.add_stream("aac", rate=sample_rate)
        audio.layout = "mono"
        for index in range(3):
            image = np.full((32, 32, 3), index * 60, dtype=np.uint8)
            for packet in video.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                container.mux(packet)
        t = np.arange(sample_rate // 2, dtype=np.float32) / sample_rate
        tone = (0.5 * np.sin(2 * np.pi * frequency_hz * t)).astype(np.float32)[None, :]
        frame = av.AudioFrame.from_ndarray(tone, format="fltp", layout="mono")
        frame.sample_rate = sample_rate
        for packet in audio.encode(frame):
            container.mux(packet)
        for stream in (video, audio):
            for packet in stream.encode(None):
                container.mux(packet)
    return buffer.getvalue()


def test_real_video_and_audio_decoders_share_one_download(
    media_server: MediaServer, connector: MediaConnector
) -> None:
    from mediaref.media.audio import AudioMediaIO
    from mediaref.media.image import ImageMediaIO
    from mediaref.media.video import VideoMediaIO

    url = media_server.add_file("clip.mp4", encode_clip_with_audio())
    video_ref, audio_ref = connector.fetch_video_and_audio(
        url, VideoMediaIO(ImageMediaIO(), num_frames=-1), AudioMediaIO()
    )
    frames, _metadata = video_ref.decode()
    samples, sample_rate = audio_ref.decode()
    assert frames.shape == (3, 32, 32, 3)
    assert sample_rate == 16000 and samples.ndim == 1
    spectrum = np.abs(np.fft.rfft(samples))
    assert abs(np.fft.rfftfreq(len(samples), 1 / sample_rate)[np.argmax(spectrum)] - 440) < 20
    assert media_server.count("/files/clip.mp4") == 1
