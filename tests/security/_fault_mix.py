"""A mix of good and hostile chat requests against loopback origins, run through the real stack.

Shared by ``tests/security/test_fault_mix.py`` (300 requests, bounded) and
``benchmarks/bench_fault_mix.py`` (the same mix at scale, with latency figures). Each request goes
the way a server's does: ``parse_chat_messages_async`` with a per-request connector (lazy refs),
``apply_chat_template``, then ``BaseRenderer.process_multimodal_async`` (phase 1, parallel decodes,
phase 2). Its outcome is an HTTP status read off the exception's ``status_code`` (500 for an
exception that has none: a bug).

The origin serves every kind of trouble a media URL can bring: stalls, dropped connections,
oversized bodies, gzip/deflate bombs, a redirect to a refused host, corrupt payloads, and decode
bombs (a PNG declaring 30000x30000, an H.264 stream of 4096x4096 frames, a FLAC clip whose PCM is
over the audio decode cap).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import io
import os
import random
import threading
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import av
import numpy as np
import soundfile as sf  # type: ignore[import-untyped]
import torch
from aiohttp import web
from PIL import Image

from _image_samples import encode, png_bomb
from mediaref.inputs import MultiModalInputs
from mediaref.media._transport.http_client import MediaHTTPClient
from mediaref.media.connector import MediaConnector
from mediaref.models.builtin import builtin_model_path
from mediaref.processing.context import ModelConfig
from mediaref.renderers.base import BaseRenderer, MultiModalRequest
from mediaref.renderers.chat_utils import (
    apply_chat_template,
    parse_chat_messages_async,
)

WAIT_S = 60.0
BOMB_DECODED_BYTES = 256 * 1024 * 1024

# Settings the mix runs under: short fetch timeouts so stalls end quickly, small caps so the
# oversized bodies and bombs are refused by the caps under test, and a per-request decode budget
# the video bomb exceeds while every good item fits.
MIX_ENV: Mapping[str, str] = {
    "VLLM_IMAGE_FETCH_TIMEOUT": "1",
    "VLLM_VIDEO_FETCH_TIMEOUT": "1",
    "VLLM_AUDIO_FETCH_TIMEOUT": "1",
    "VLLM_MEDIA_FETCH_MAX_RETRIES": "2",
    "MEDIAREF_MAX_IMAGE_FILESIZE_MB": "2",
    "VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES": str(64 * 1024 * 1024),
}


# -- media ------------------------------------------------------------------------------------


def jpeg(seed: int, size: tuple[int, int] = (64, 48)) -> bytes:
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    return encode(Image.fromarray(pixels), "JPEG", quality=90)


@functools.cache
def small_clip() -> bytes:
    return _h264(num_frames=4, width=64, height=48, black=False)


@functools.cache
def video_bomb() -> bytes:
    """Eight black 4096x4096 H.264 frames: ~50 KB encoded, 400 MB as RGB frames."""
    return _h264(num_frames=8, width=4096, height=4096, black=True)


def _h264(*, num_frames: int, width: int, height: int, black: bool) -> bytes:
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format="mp4") as output:
        stream = output.add_stream("libx264", rate=Fraction(4), options={"preset": "ultrafast"})
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for index in range(num_frames):
            value = 0 if black else 40 * index
            pixels = np.full((height, width, 3), value, dtype=np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")):
                output.mux(packet)
        for packet in stream.encode(None):
            output.mux(packet)
    return buffer.getvalue()


@functools.cache
def small_wav() -> bytes:
    t = np.arange(16000, dtype=np.float32) / 16000
    buffer = io.BytesIO()
    sf.write(buffer, 0.3 * np.sin(2 * np.pi * 440 * t), 16000, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


@functools.cache
def audio_bomb() -> bytes:
    """60 s of 8-channel 192 kHz silence as FLAC: small encoded, 368 MB of float32 PCM."""
    buffer = io.BytesIO()
    block = np.zeros((192_000, 8), dtype=np.int16)
    with sf.SoundFile(buffer, "w", 192_000, 8, format="FLAC", subtype="PCM_16") as out:
        for _ in range(60):
            out.write(block)
    return buffer.getvalue()


@functools.cache
def compressed_bomb(encoding: str) -> bytes:
    """``BOMB_DECODED_BYTES`` of zeros, gzip- or deflate-encoded (a few hundred KB)."""
    wbits = 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS
    compressor = zlib.compressobj(9, zlib.DEFLATED, wbits)
    chunk = bytes(1024 * 1024)
    parts = [compressor.compress(chunk) for _ in range(BOMB_DECODED_BYTES // len(chunk))]
    parts.append(compressor.flush())
    return b"".join(parts)


def corrupt_jpeg(seed: int) -> bytes:
    rng = random.Random(seed)
    return b"\xff\xd8\xff\xe0" + bytes(rng.randrange(256) for _ in range(2000))


# -- the origin -------------------------------------------------------------------------------


class FaultOrigin:
    """An aiohttp server on 127.0.0.1, on its own thread, serving the mix's URLs."""

    def __init__(self) -> None:
        self.files: dict[str, tuple[bytes, str]] = {}
        self.hits: dict[str, int] = {}
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stopping: asyncio.Event | None = None
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._serve, name="fault-origin", daemon=True)
        self.port = 0

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def add(self, name: str, data: bytes, content_type: str = "application/octet-stream") -> str:
        self.files[name] = (data, content_type)
        return self.url(f"/files/{name}")

    def hits_for(self, path: str) -> int:
        with self._lock:
            return self.hits.get(path, 0)

    def __enter__(self) -> FaultOrigin:
        self._thread.start()
        assert self._ready.wait(WAIT_S), "origin did not start"
        return self

    def __exit__(self, *exc_info: object) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(WAIT_S)
        self._thread.join(WAIT_S)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._startup())
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    async def _startup(self) -> None:
        self._stopping = asyncio.Event()
        app = web.Application(middlewares=[self._count])
        app.router.add_get("/files/{name}", self._file)
        app.router.add_get("/stall", self._stall)
        app.router.add_get("/drop", self._drop)
        app.router.add_get("/redirect-refused", self._redirect_refused)
        app.router.add_get("/bomb/{encoding}", self._bomb)
        # Keep-alive connections from the client pool would hold a graceful shutdown for 60 s.
        self._runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _shutdown(self) -> None:
        assert self._stopping is not None and self._runner is not None
        self._stopping.set()
        await self._runner.cleanup()
        # Stopping on the next iteration lets this coroutine's result reach the waiting thread.
        self._loop.call_soon(self._loop.stop)

    @web.middleware
    async def _count(self, request: web.Request, handler: Any) -> web.StreamResponse:
        with self._lock:
            self.hits[request.path] = self.hits.get(request.path, 0) + 1
        response: web.StreamResponse = await handler(request)
        return response

    async def _file(self, request: web.Request) -> web.Response:
        data, content_type = self.files[request.match_info["name"]]
        return web.Response(body=data, content_type=content_type)

    async def _stall(self, request: web.Request) -> web.Response:
        assert self._stopping is not None
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), WAIT_S)
        return web.Response(body=b"late")

    async def _drop(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Length": "100000"})
        await response.prepare(request)
        await response.write(b"\xff\xd8\xff\xe0" + bytes(6))
        assert request.transport is not None
        request.transport.close()
        return response

    async def _redirect_refused(self, request: web.Request) -> web.Response:
        # localhost is not in the mix's allowed_media_domains: the hop must be refused unsent.
        raise web.HTTPFound(self.url("/files/good-0.jpg", host="localhost"))

    async def _bomb(self, request: web.Request) -> web.Response:
        encoding = request.match_info["encoding"]
        body = compressed_bomb(encoding)
        return web.Response(
            body=body,
            headers={"Content-Encoding": encoding, "Content-Type": "image/jpeg"},
        )


# -- the requests -----------------------------------------------------------------------------


@dataclass(frozen=True)
class MixRequest:
    kind: str
    model: str  # "vl" or "audio"
    modality: str
    url: str
    expected_status: int

    @property
    def good(self) -> bool:
        return self.expected_status == 200

    def messages(self) -> list[dict[str, Any]]:
        part = {"type": f"{self.modality}_url", f"{self.modality}_url": {"url": self.url}}
        return [{"role": "user", "content": [part, {"type": "text", "text": "describe"}]}]


# kind -> (model, modality, expected status); the URL is made per request below.
KINDS: Mapping[str, tuple[str, str, int]] = {
    "image_repeat": ("vl", "image", 200),
    "image_unique": ("vl", "image", 200),
    "video": ("vl", "video", 200),
    "audio": ("audio", "audio", 200),
    "corrupt_image": ("vl", "image", 422),
    "oversized_image": ("vl", "image", 413),
    "stalled_origin": ("vl", "image", 504),
    "dropped_connection": ("vl", "image", 502),
    "redirect_to_refused_host": ("vl", "image", 403),
    "gzip_bomb": ("vl", "image", 413),
    "deflate_bomb": ("vl", "image", 413),
    "pixel_bomb": ("vl", "image", 413),
    "video_decode_bomb": ("vl", "video", 413),
    "audio_decode_bomb": ("audio", "audio", 413),
    "bad_base64": ("vl", "image", 400),
}
GOOD_KINDS = ("image_repeat", "image_unique", "video", "audio")


def build_mix(
    origin: FaultOrigin, total: int, *, bad_fraction: float, seed: int = 0
) -> list[MixRequest]:
    """``total`` requests: the good kinds, and every bad kind about equally often."""
    rng = random.Random(seed)
    origin.add("good-0.jpg", jpeg(0), "image/jpeg")
    origin.add("clip.mp4", small_clip(), "video/mp4")
    origin.add("tone.wav", small_wav(), "audio/wav")
    origin.add("oversized.jpg", jpeg(1) + bytes(3 * 1024 * 1024), "image/jpeg")
    origin.add("pixel-bomb.png", png_bomb(30000, 30000), "image/png")
    origin.add("video-bomb.mp4", video_bomb(), "video/mp4")
    origin.add("audio-bomb.flac", audio_bomb(), "audio/flac")
    for encoding in ("gzip", "deflate"):
        compressed_bomb(encoding)  # built here, not in the origin's handler (it would stall it)
    bad_kinds = [k for k in KINDS if k not in GOOD_KINDS]
    requests: list[MixRequest] = []
    for index in range(total):
        if rng.random() < bad_fraction:
            kind = bad_kinds[index % len(bad_kinds)]
        else:
            kind = GOOD_KINDS[rng.randrange(len(GOOD_KINDS))]
        model, modality, status = KINDS[kind]
        requests.append(MixRequest(kind, model, modality, _url_for(origin, kind, index), status))
    return requests


def _url_for(origin: FaultOrigin, kind: str, index: int) -> str:
    if kind == "image_unique":
        return origin.add(f"unique-{index}.jpg", jpeg(1000 + index), "image/jpeg")
    if kind == "corrupt_image":
        return origin.add(f"corrupt-{index}.jpg", corrupt_jpeg(index), "image/jpeg")
    paths = {
        "image_repeat": "/files/good-0.jpg",
        "video": "/files/clip.mp4",
        "audio": "/files/tone.wav",
        "oversized_image": "/files/oversized.jpg",
        "stalled_origin": "/stall",
        "dropped_connection": "/drop",
        "redirect_to_refused_host": "/redirect-refused",
        "gzip_bomb": "/bomb/gzip",
        "deflate_bomb": "/bomb/deflate",
        "pixel_bomb": "/files/pixel-bomb.png",
        "video_decode_bomb": "/files/video-bomb.mp4",
        "audio_decode_bomb": "/files/audio-bomb.flac",
    }
    if kind == "bad_base64":
        return "data:image/jpeg;base64,/9j/4AAQ!!not*base64"
    return origin.url(paths[kind])


# -- running ----------------------------------------------------------------------------------


@dataclass
class Outcome:
    request: MixRequest
    status: int
    seconds: float
    output: MultiModalInputs | None = None
    error: str = ""


class Stack:
    """The two renderers (vision-language and audio models) and the shared HTTP client."""

    def __init__(self) -> None:
        self.configs = {
            "vl": ModelConfig(model=str(builtin_model_path("qwen2_vl"))),
            "audio": ModelConfig(model=str(builtin_model_path("qwen2_audio"))),
        }
        self.renderers = {name: BaseRenderer(config) for name, config in self.configs.items()}
        self.http_client = MediaHTTPClient()

    def connector(self, origin: FaultOrigin) -> MediaConnector:
        # Loopback origins need private addresses allowed; the domain list is what refuses the
        # redirect to "localhost".
        return MediaConnector(
            self.http_client, allowed_media_domains=["127.0.0.1"], allow_private_ips=True
        )

    async def run_one(self, origin: FaultOrigin, request: MixRequest) -> Outcome:
        config = self.configs[request.model]
        start = time.perf_counter()
        try:
            conversation, mm_data, mm_uuids = await parse_chat_messages_async(
                request.messages(), config, connector=self.connector(origin)
            )
            prompt = apply_chat_template(config, conversation)
            output = await self.renderers[request.model].process_multimodal_async(
                MultiModalRequest(prompt, mm_data or {}, mm_uuids=mm_uuids)
            )
        except Exception as exc:  # the outcome is the status it maps to
            status = int(getattr(exc, "status_code", 500))
            return Outcome(
                request, status, time.perf_counter() - start, error=f"{type(exc).__name__}: {exc}"
            )
        return Outcome(request, 200, time.perf_counter() - start, output=output)

    async def run_all(
        self, origin: FaultOrigin, requests: list[MixRequest], *, concurrency: int
    ) -> list[Outcome]:
        gate = asyncio.Semaphore(concurrency)

        async def bounded(request: MixRequest) -> Outcome:
            async with gate:
                return await self.run_one(origin, request)

        return list(await asyncio.gather(*(bounded(r) for r in requests)))

    async def close(self) -> None:
        await self.http_client.close()
        for renderer in self.renderers.values():
            renderer.shutdown()


def same_output(a: MultiModalInputs, b: MultiModalInputs) -> bool:
    if a["prompt_token_ids"] != b["prompt_token_ids"] or a["mm_hashes"] != b["mm_hashes"]:
        return False
    left, right = a["mm_kwargs"].get_data(), b["mm_kwargs"].get_data()
    return left.keys() == right.keys() and all(
        torch.equal(left[k], right[k]) if isinstance(left[k], torch.Tensor) else left[k] == right[k]
        for k in left
    )


# -- resources --------------------------------------------------------------------------------


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def rss_bytes() -> int:
    with open("/proc/self/statm", "rb") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@dataclass
class PeakRSS:
    """Samples the process's RSS every few milliseconds on a thread, keeping the maximum."""

    interval_s: float = 0.005
    peak: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> PeakRSS:
        self.peak = rss_bytes()
        self._thread = threading.Thread(target=self._sample, name="rss-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(WAIT_S)

    def _sample(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.peak = max(self.peak, rss_bytes())


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


__all__ = [
    "GOOD_KINDS",
    "KINDS",
    "MIX_ENV",
    "FaultOrigin",
    "MixRequest",
    "Outcome",
    "PeakRSS",
    "Stack",
    "build_mix",
    "open_fds",
    "percentile",
    "rss_bytes",
    "same_output",
]
