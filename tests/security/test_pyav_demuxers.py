"""Issue 9, hole 1: payloads that make FFmpeg read other files or URLs must be refused.

FFmpeg's ``concat`` demuxer reads the files a script names (relative to the server's working
directory), ``hls`` fetches a playlist's segments, ``image2`` expands file-name patterns and
``sdp`` opens sockets. Every PyAV open goes through ``mediaref.media._pyav_open.open_input``,
which admits only each modality's allow-list of demuxers and no protocol at all.
"""

from __future__ import annotations

import ast
from pathlib import Path

import av
import numpy as np
import pybase64
import pytest
import soundfile as sf  # type: ignore[import-untyped]
from PIL import Image

from _audio_samples import encode_pyav
from _http_server import MediaServer
from _image_samples import encode
from _video_samples import make_clip
from mediaref.exceptions import MediaTooLargeError
from mediaref.media._pyav_open import (
    AUDIO_DEMUXERS,
    VIDEO_DEMUXERS,
    UnsupportedContainerError,
    open_input,
)
from mediaref.media.audio import AudioMediaIO
from mediaref.media.audio import _pyav as _audio_pyav
from mediaref.media.audio._caps import AudioLimits
from mediaref.media.connector import MediaConnector
from mediaref.media.image import ImageMediaIO
from mediaref.media.video import VideoMediaIO

SRC = Path(__file__).resolve().parents[2] / "src" / "mediaref"
VICTIM_TONE = 0.5


@pytest.fixture
def server_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory holding files a client must never read: uploads/victim.{wav,mp4}."""
    uploads = tmp_path / "uploads"
    uploads.mkdir()
    sf.write(uploads / "victim.wav", np.full(8000, VICTIM_TONE, np.float32), 8000)
    (uploads / "victim.mp4").write_bytes(make_clip())
    for index in range(3):
        Image.new("RGB", (32, 32), (index * 80, 0, 0)).save(uploads / f"frame{index:03d}.png")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _decode_audio(payload: bytes) -> object:
    return AudioMediaIO().load_bytes_ref(payload).decode()


def _decode_video(payload: bytes) -> object:
    return VideoMediaIO(ImageMediaIO(), num_frames=-1).load_bytes_ref(payload).decode()


# Scripts that name local files, directly or through a protocol prefix.
LOCAL_FILE_SCRIPTS = {
    "ffconcat": b"ffconcat version 1.0\nfile uploads/victim.wav\n",
    "ffconcat-file-protocol": b"ffconcat version 1.0\nfile 'file:uploads/victim.wav'\n",
    "ffconcat-subfile": b"ffconcat version 1.0\nfile 'subfile,,start,0,end,0,,:uploads/victim.wav'\n",
    "hls-local": (
        b"#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1.0,\nuploads/victim.wav\n#EXT-X-ENDLIST\n"
    ),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(LOCAL_FILE_SCRIPTS))
def test_audio_scripts_naming_local_files_fail_to_decode(server_cwd: Path, name: str) -> None:
    with pytest.raises(ValueError, match=r"^Failed to decode audio: ") as failure:
        _decode_audio(LOCAL_FILE_SCRIPTS[name])
    assert not isinstance(failure.value, MediaTooLargeError)


@pytest.mark.timeout(60)
def test_pyav_audio_backend_alone_refuses_ffconcat(server_cwd: Path) -> None:
    # The hole sat in the fallback: soundfile refuses the script, PyAV then read the victim.
    with pytest.raises(UnsupportedContainerError, match="not a supported audio container"):
        _audio_pyav.decode_with_pyav(LOCAL_FILE_SCRIPTS["ffconcat"], AudioLimits())


@pytest.mark.timeout(60)
def test_input_audio_data_url_cannot_read_server_files(
    server_cwd: Path, connector: MediaConnector
) -> None:
    # The chat path's input_audio becomes exactly this data: URL.
    script = pybase64.b64encode(LOCAL_FILE_SCRIPTS["ffconcat"]).decode("ascii")
    ref = connector.fetch_audio(f"data:audio/wav;base64,{script}", AudioMediaIO())

    with pytest.raises(ValueError, match=r"^Failed to decode audio: "):
        ref.decode()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "script",
    [
        b"ffconcat version 1.0\nfile uploads/victim.mp4\n",
        b"ffconcat version 1.0\nfile 'file:uploads/victim.mp4'\n",
        b"#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1.0,\nuploads/victim.mp4\n#EXT-X-ENDLIST\n",
        # image2: a pattern expands to a numbered sequence of files.
        b"ffconcat version 1.0\nfile 'uploads/frame%03d.png'\n",
    ],
    ids=["ffconcat", "ffconcat-file-protocol", "hls-local", "image2-pattern"],
)
def test_video_scripts_naming_local_files_fail_to_decode(server_cwd: Path, script: bytes) -> None:
    with pytest.raises(ValueError, match=r"^Failed to decode video: "):
        _decode_video(script)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("modality", ["audio", "video"])
def test_hls_playlist_never_reaches_the_network(media_server: MediaServer, modality: str) -> None:
    url = media_server.add_file("segment.ts", make_clip("h264", "mpegts"))
    playlist = (f"#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1.0,\n{url}\n#EXT-X-ENDLIST\n").encode()

    with pytest.raises(ValueError, match=rf"^Failed to decode {modality}: "):
        (_decode_audio if modality == "audio" else _decode_video)(playlist)
    assert media_server.total_requests() == 0


@pytest.mark.timeout(60)
@pytest.mark.parametrize("modality", ["audio", "video"])
def test_sdp_description_opens_no_socket(modality: str) -> None:
    # The sdp demuxer would bind UDP ports and wait for RTP packets.
    sdp = b"v=0\no=- 0 0 IN IP4 127.0.0.1\ns=x\nc=IN IP4 127.0.0.1\nt=0 0\nm=audio 5004 RTP/AVP 0\n"
    with pytest.raises(ValueError, match=rf"^Failed to decode {modality}: "):
        (_decode_audio if modality == "audio" else _decode_video)(sdp)


def test_a_still_image_is_not_a_video() -> None:
    # Image demuxers (jpeg_pipe, png_pipe, ...) are off the video list: a picture is an image.
    png = encode(Image.new("RGB", (64, 48)), "PNG")
    with pytest.raises(ValueError, match=r"^Failed to decode video: "):
        _decode_video(png)


@pytest.mark.parametrize(
    ("modality", "payload"),
    [
        ("audio", encode_pyav(np.zeros(8000, np.float32), 8000, "mp4", "aac")),
        ("audio", encode_pyav(np.zeros(8000, np.float32), 8000, "adts", "aac")),
        ("audio", encode_pyav(np.zeros(8000, np.float32), 48000, "webm", "libopus")),
        ("video", make_clip("h264", "mp4")),
        ("video", make_clip("h264", "matroska")),
        ("video", make_clip("h264", "mpegts")),
    ],
    ids=["m4a", "adts", "webm-opus", "mp4", "mkv", "mpegts"],
)
def test_the_allow_lists_admit_ordinary_containers(modality: str, payload: bytes) -> None:
    with open_input(payload, modality) as container:  # type: ignore[arg-type]
        assert container.streams


def test_allow_lists_name_real_demuxers_and_no_reader_of_other_files() -> None:
    for name in (*AUDIO_DEMUXERS, *VIDEO_DEMUXERS):
        assert av.ContainerFormat(name).is_input, name
    dangerous = {"concat", "hls", "dash", "image2", "lavfi", "sdp", "rtp", "rtsp", "ffmetadata"}
    assert not dangerous & {*AUDIO_DEMUXERS, *VIDEO_DEMUXERS}


def _av_open_calls(tree: ast.AST) -> list[int]:
    """Lines that call av.open / av.container.open, or import open from av."""
    lines = []
    for node in ast.walk(tree):
        imports_open = (
            isinstance(node, ast.ImportFrom)
            and node.module in ("av", "av.container")
            and any(alias.name == "open" for alias in node.names)
        )
        calls_open = (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "open"
            and ast.unparse(node.func.value) in ("av", "av.container")
        )
        if imports_open or calls_open:
            lines.append(node.lineno)
    return lines


def test_every_pyav_open_in_the_package_goes_through_the_helper() -> None:
    found = {
        str(path.relative_to(SRC)): lines
        for path in sorted(SRC.rglob("*.py"))
        if (lines := _av_open_calls(ast.parse(path.read_text(), str(path))))
    }
    assert found == {"media/_pyav_open.py": found.get("media/_pyav_open.py", [])}
    assert len(found["media/_pyav_open.py"]) == 1
