"""The opt-in frame scaling (Qwen2-VL's ``video_scale``) keeps the video decoders' guarantees.

A scaled decode opens payloads through the same demuxer allow-list (no concat scripts or
playlists reading the server's files), checks every *source* frame against
``VLLM_MAX_IMAGE_PIXELS`` from the header and inside FFmpeg's decoder (the decoder allocates the
source frame, however small the target), and never turns a refused frame into a scaled one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from _memory import traced_peak
from _video_samples import make_black_clip, make_clip
from mediaref.exceptions import MediaTooLargeError
from mediaref.media.image import ImageMediaIO
from mediaref.media.video import VideoMediaIO
from mediaref.models.qwen2_vl._approx import smart_resize_scaling

MiB = 1 << 20
SCALING = smart_resize_scaling(factor=28, min_pixels=56 * 56, max_pixels=64 * 28 * 28)
LOCAL_FILE_SCRIPTS = {
    "ffconcat": b"ffconcat version 1.0\nfile victim.mp4\n",
    "ffconcat-file-protocol": b"ffconcat version 1.0\nfile 'file:victim.mp4'\n",
    "hls-local": b"#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1.0,\nvictim.mp4\n#EXT-X-ENDLIST\n",
}


@pytest.fixture(autouse=True)
def _default_caps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_MAX_IMAGE_PIXELS", raising=False)
    monkeypatch.delenv("VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES", raising=False)


def scaled_io(num_frames: int = -1) -> VideoMediaIO:
    return VideoMediaIO(ImageMediaIO(), num_frames=num_frames, frame_scaling=SCALING)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(LOCAL_FILE_SCRIPTS))
def test_scripts_naming_local_files_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    (tmp_path / "victim.mp4").write_bytes(make_clip(num_frames=8, width=448, height=336))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"^Failed to decode video: ") as failure:
        scaled_io().load_bytes_ref(LOCAL_FILE_SCRIPTS[name]).decode()
    assert not isinstance(failure.value, MediaTooLargeError)


@pytest.mark.timeout(60)
def test_a_source_frame_over_the_pixel_cap_is_refused_however_small_its_target(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("VLLM_MAX_IMAGE_PIXELS", "1000000")
    assert SCALING.target_size(4096, 4096) == (224, 224)  # the kept frames would be tiny
    data = make_black_clip(4096, 4096, 4)

    peak, outcome = traced_peak(lambda: scaled_io(1).load_bytes(data))

    assert isinstance(outcome, MediaTooLargeError), outcome
    assert "video frame of 4096x4096" in str(outcome)
    assert peak < 2 * MiB


@pytest.mark.timeout(60)
def test_frames_that_grow_midway_stay_bound_inside_the_decoder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 10 small frames, then 2 of 4096x4096 the decoder must refuse rather than hand to the scaler.
    small = make_clip("h264", "mpegts", num_frames=10, width=448, height=336)
    huge = make_black_clip(4096, 4096, 2, "mpegts")
    monkeypatch.setenv("VLLM_MAX_IMAGE_PIXELS", "1000000")

    frames, metadata = scaled_io().load_bytes(small + huge)

    assert metadata.details["num_skipped_packets"] >= 1
    assert metadata.details["num_decoded_frames"] <= 10
    assert frames.shape[1:] == (*SCALING.target_size(448, 336)[::-1], 3)
