"""Every codec reads only payloads the video allow-list of demuxers admits.

OpenCV and torchcodec hand the bytes to their own FFmpeg with every demuxer enabled: an
``ffconcat`` script or an HLS playlist in a request would make it read the server's files (or
fetch URLs) as the video. PyAV's codec opens payloads with the allow-list; the other codecs
must pass the same gate before their FFmpeg sees the bytes.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from _video_samples import make_clip
from mediaref.media.image import ImageMediaIO
from mediaref.media.video import VideoMediaIO

SCRIPTS = {
    "ffconcat": b"ffconcat version 1.0\nfile uploads/victim.mp4\n",
    "hls-local": b"#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1.0,\nuploads/victim.mp4\n#EXT-X-ENDLIST\n",
}


@pytest.fixture
def server_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory holding a video a client must never read: uploads/victim.mp4."""
    (tmp_path / "uploads").mkdir()
    (tmp_path / "uploads" / "victim.mp4").write_bytes(make_clip())
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_opencv_never_follows_a_script_to_a_local_file(server_cwd: Path, name: str) -> None:
    pytest.importorskip("cv2")
    decoder = VideoMediaIO(ImageMediaIO(), num_frames=-1, video_backend="opencv")
    # Without the gate OpenCV opens the ffconcat script and returns victim.mp4's frames.
    with pytest.raises(ValueError, match=r"^Failed to decode video: "):
        decoder.load_bytes_ref(SCRIPTS[name]).decode()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_torchcodec_never_sees_a_script(
    server_cwd: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[bytes] = []

    class RecordingDecoder:
        def __init__(self, data: bytes, **options: Any) -> None:
            opened.append(data)
            raise AssertionError("the payload reached torchcodec")

    package, decoders = types.ModuleType("torchcodec"), types.ModuleType("torchcodec.decoders")
    decoders.VideoDecoder = RecordingDecoder  # type: ignore[attr-defined]
    package.decoders = decoders  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torchcodec", package)
    monkeypatch.setitem(sys.modules, "torchcodec.decoders", decoders)
    decoder = VideoMediaIO(ImageMediaIO(), num_frames=-1, backend="torchcodec")

    with pytest.raises(ValueError, match=r"^Failed to decode video: "):
        decoder.load_bytes_ref(SCRIPTS[name]).decode()
    assert opened == []
