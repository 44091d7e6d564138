"""A few bytes of MP4 sample table must not make FFmpeg allocate gigabytes while it opens.

FFmpeg's ``mov`` demuxer indexes every sample a track declares (~37 bytes each) inside
``avformat_open_input``; a constant-size ``stsz`` declares 80 million samples in four bytes.
``open_input`` reads the declared counts from the box headers first and charges the index to the
request's decoded-bytes budget, refusing it before the demuxer runs.
"""

from __future__ import annotations

import io
import struct
import subprocess
import sys
from pathlib import Path

import av
import numpy as np
import pytest

from _video_samples import declare_mp4_samples, make_clip
from mediaref.exceptions import MediaTooLargeError
from mediaref.media._pyav_mp4_index import (
    INDEX_BYTES_PER_SAMPLE,
    ContainerIndexError,
    declared_index_bytes,
)
from mediaref.media.audio import AudioMediaIO
from mediaref.media.decode_budget import MediaDecodedBudget, decode_budget_scope
from mediaref.media.image import ImageMediaIO
from mediaref.media.video import VideoMediaIO

MiB = 1 << 20


@pytest.fixture(autouse=True)
def _default_caps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES", raising=False)


def _box(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I4s", 8 + len(body), kind) + body


@pytest.mark.timeout(120)
@pytest.mark.parametrize("decoder", ["video", "audio"])
def test_millions_of_declared_samples_are_refused_before_the_demuxer_allocates(
    tmp_path: Path, decoder: str
) -> None:
    payload = declare_mp4_samples(make_clip("mpeg4", "mp4", num_frames=3), 80_000_000)
    assert len(payload) < 4096
    path = tmp_path / "bomb.mp4"
    path.write_bytes(payload)
    # In a subprocess: FFmpeg's allocations are invisible to tracemalloc, but not to the
    # process's peak resident size (2.8 GB before the fix).
    script = f"""
import resource
from mediaref.exceptions import MediaTooLargeError
from mediaref.media.audio import AudioMediaIO
from mediaref.media.image import ImageMediaIO
from mediaref.media.video import VideoMediaIO
decoder = VideoMediaIO(ImageMediaIO(), num_frames=4) if {decoder!r} == "video" else AudioMediaIO()
payload = open({str(path)!r}, "rb").read()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    decoder.load_bytes(payload)
    outcome = "decoded"
except MediaTooLargeError as exc:
    outcome = "refused" if "sample index" in str(exc) else repr(exc)
grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(outcome, grown_kib)
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=100, check=False
    )

    assert result.returncode == 0, result.stderr[-2000:]
    outcome, grown_kib = result.stdout.split()
    assert outcome == "refused"
    assert int(grown_kib) < 100 * 1024


def test_a_moderate_sample_index_is_charged_to_the_request() -> None:
    payload = declare_mp4_samples(make_clip("mpeg4", "mp4", num_frames=3), 100_000)
    budget = MediaDecodedBudget(limit_bytes=10**9)

    with decode_budget_scope(budget), pytest.raises(ValueError, match=r"^Failed to decode video"):
        # The declared samples point at bytes that are not frames: nothing decodes.
        VideoMediaIO(ImageMediaIO(), num_frames=4).load_bytes(payload)

    assert budget.used == 100_000 * INDEX_BYTES_PER_SAMPLE  # charged once, for three opens


def test_ordinary_files_declare_their_samples() -> None:
    assert declared_index_bytes(make_clip(num_frames=30)) == 30 * INDEX_BYTES_PER_SAMPLE
    assert declared_index_bytes(make_clip("h264", "matroska")) == 0  # not ISO BMFF
    assert declared_index_bytes(b"") == declared_index_bytes(b"\0" * 7) == 0


def test_fragmented_mp4_counts_every_fragment() -> None:
    buffer = io.BytesIO()
    with av.open(
        buffer, "w", format="mp4", options={"movflags": "frag_keyframe+empty_moov"}
    ) as out:
        stream = out.add_stream("mpeg4", rate=10)
        stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv420p"
        stream.codec_context.gop_size = 5
        for index in range(20):
            image = np.full((32, 32, 3), index * 10, np.uint8)
            frame = av.VideoFrame.from_ndarray(image, format="rgb24")
            frame.pts = index
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    data = buffer.getvalue()
    assert data.count(b"moof") >= 4

    assert declared_index_bytes(data) == 20 * INDEX_BYTES_PER_SAMPLE
    frames, _ = VideoMediaIO(ImageMediaIO(), num_frames=-1).load_bytes(data)
    assert len(frames) == 20


def test_a_fragment_declaring_four_billion_samples_is_refused() -> None:
    trun = _box(b"trun", struct.pack(">II", 0, 2**32 - 1))
    data = _box(b"ftyp", b"isom\0\0\0\0") + _box(b"moof", _box(b"traf", trun))

    assert declared_index_bytes(data) == (2**32 - 1) * INDEX_BYTES_PER_SAMPLE
    with pytest.raises(MediaTooLargeError, match="sample index"):
        VideoMediaIO(ImageMediaIO(), num_frames=4).load_bytes(data)


def test_a_compressed_movie_header_is_refused() -> None:
    # cmov: a zlib-deflated moov, which hides its sample tables and inflates to a stated size.
    cmov = _box(b"cmov", _box(b"dcom", b"zlib") + _box(b"cmvd", struct.pack(">I", 2**31)))
    data = _box(b"ftyp", b"qt  \0\0\0\0") + _box(b"moov", cmov)

    with pytest.raises(ContainerIndexError, match="cmov"):
        declared_index_bytes(data)
    with pytest.raises(ValueError, match=r"^Failed to decode video: .*cmov"):
        VideoMediaIO(ImageMediaIO(), num_frames=4).load_bytes(data)
    with pytest.raises(ValueError, match=r"^Failed to decode audio: .*cmov"):
        AudioMediaIO().load_bytes(data)


def test_a_box_count_bomb_is_refused_without_walking_it_all() -> None:
    data = _box(b"ftyp", b"isom\0\0\0\0") + _box(b"moov", _box(b"free", b"") * 300_000)

    with pytest.raises(ContainerIndexError, match="boxes"):
        declared_index_bytes(data)


@pytest.mark.parametrize(
    "data",
    [
        _box(b"ftyp", b"isom") + struct.pack(">I4s", 1, b"moov"),  # 64-bit size cut short
        _box(b"ftyp", b"isom") + struct.pack(">I4sQ", 1, b"moov", 16) + b"x" * 8,
        _box(b"ftyp", b"isom") + struct.pack(">I4s", 0, b"moov") + _box(b"trak", b""),
        _box(b"ftyp", b"isom") + struct.pack(">I4s", 4, b"moov"),  # smaller than its header
        _box(b"ftyp", b"isom") + _box(b"moov", _box(b"trak", struct.pack(">I4s", 99, b"mdia"))),
        _box(b"ftyp", b"isom") + _box(b"moof", _box(b"traf", _box(b"trun", b"\0\0"))),
    ],
)
def test_broken_boxes_are_walked_without_error(data: bytes) -> None:
    assert declared_index_bytes(data) >= 0
