"""Issue 9, hole 2 (``video/jpeg``): 40 base64 JPEGs of 2048x2048 took over 1 GB.

The sequence keeps only the first ``num_frames`` frames (vLLM's memory protection), reads every
kept frame's header before decoding any pixel (each frame is an image under
``VLLM_MAX_IMAGE_PIXELS``), charges ``frames x height x width x 3`` to the request's budget, and
decodes into one preallocated array rather than a list of arrays and then their stack.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pybase64
import pytest
from PIL import Image

from _image_samples import encode
from _memory import traced_peak
from mediaref.exceptions import MediaTooLargeError
from mediaref.media.decode_budget import MediaDecodedBudget, decode_budget_scope
from mediaref.media.image import ImageMediaIO
from mediaref.media.video import VideoMediaIO

MiB = 1 << 20


@pytest.fixture(autouse=True)
def _default_caps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_MAX_IMAGE_PIXELS", raising=False)
    monkeypatch.delenv("VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES", raising=False)


def jpeg_base64(size: int, shade: int = 0) -> str:
    data = encode(Image.new("RGB", (size, size), (shade, shade, shade)), "JPEG", quality=50)
    return pybase64.b64encode(data).decode("ascii")


def decode(text: str, **kwargs: Any) -> Any:
    return VideoMediaIO(ImageMediaIO(), **kwargs).load_base64_ref("video/jpeg", text).decode()


@pytest.mark.timeout(60)
def test_red_team_sequence_is_refused_before_any_pixel_is_decoded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 40 frames of 2048x2048: 503 MB of RGB kept, under the default 715 MB request limit, but
    # not under a tighter one.
    monkeypatch.setenv("VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES", str(400 * MiB))
    text = ",".join([jpeg_base64(2048)] * 40)

    peak, outcome = traced_peak(lambda: decode(text, num_frames=-1))

    assert isinstance(outcome, MediaTooLargeError), outcome
    assert str(40 * 2048 * 2048 * 3) in str(outcome)
    # The text as bytes and its split parts; headers read, no frame decoded (one is 12 MB).
    assert peak < 3 * len(text) + 2 * MiB


@pytest.mark.timeout(60)
def test_a_frame_over_the_pixel_cap_stops_the_sequence_before_decoding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("VLLM_MAX_IMAGE_PIXELS", str(1024 * 1024))
    text = ",".join([jpeg_base64(1024)] * 20 + [jpeg_base64(2048)])

    peak, outcome = traced_peak(lambda: decode(text, num_frames=-1))

    assert isinstance(outcome, MediaTooLargeError), outcome
    assert peak < 3 * len(text) + 2 * MiB  # the 20 good frames were never decoded


@pytest.mark.timeout(60)
def test_the_stack_is_the_only_full_size_copy() -> None:
    text = ",".join(jpeg_base64(1024, shade) for shade in range(0, 240, 30))  # 8 frames
    stack_bytes = 8 * 1024 * 1024 * 3

    peak, outcome = traced_peak(lambda: decode(text, num_frames=-1))

    frames, metadata = outcome
    assert frames.shape == (8, 1024, 1024, 3)
    assert [int(frame.mean()) // 10 for frame in frames] == [s // 10 for s in range(0, 240, 30)]
    # A list of frames and then np.stack held two copies. Now: the stack, plus one frame in
    # flight (Pillow's tobytes and numpy's array of it: a few frames' worth, not eight).
    assert peak < stack_bytes + 4 * 1024 * 1024 * 3 + len(text)
    assert metadata["video_backend"] == "jpeg_sequence"


def test_the_stack_is_charged_to_the_request_budget() -> None:
    text = ",".join([jpeg_base64(64)] * 5)
    budget = MediaDecodedBudget(limit_bytes=6 * 64 * 64 * 3)

    with decode_budget_scope(budget):
        frames, _ = decode(text, num_frames=3)
        assert budget.used == frames.nbytes == 3 * 64 * 64 * 3
        with pytest.raises(MediaTooLargeError):
            decode(text, num_frames=-1, fps=4.0)  # another 5 frames: over the limit


def test_frames_are_charged_once_not_again_by_the_image_decoder() -> None:
    # Each frame's raster is transient; the stack is what the sequence keeps and charges.
    text = ",".join([jpeg_base64(64)] * 4)
    budget = MediaDecodedBudget(limit_bytes=10**9)

    with decode_budget_scope(budget):
        frames, _ = decode(text, num_frames=-1)

    assert budget.used == frames.nbytes


def test_only_the_first_num_frames_are_split_and_read() -> None:
    # What follows the kept frames is neither split nor decoded: a 2048x2048 frame there is not
    # even looked at, and neither is garbage.
    text = ",".join([jpeg_base64(64)] * 2 + [jpeg_base64(2048)]) + ",@@@"

    peak, outcome = traced_peak(lambda: decode(text, num_frames=2))

    frames, _ = outcome
    assert frames.shape == (2, 64, 64, 3)
    assert peak < MiB


@pytest.mark.parametrize("bad", ["@@@", "", pybase64.b64encode(b"not an image").decode()])
def test_a_bad_frame_is_a_decode_error_naming_it(bad: str) -> None:
    text = ",".join([jpeg_base64(64), bad])

    with pytest.raises(ValueError, match=r"^Failed to decode video: JPEG frame 1: ") as failure:
        decode(text, num_frames=-1)
    assert not isinstance(failure.value, MediaTooLargeError)


def test_frames_of_different_sizes_are_refused_before_decoding() -> None:
    text = ",".join([jpeg_base64(64), jpeg_base64(32)])

    with pytest.raises(ValueError, match=r"^Failed to decode video: JPEG frames differ in size"):
        decode(text, num_frames=-1)


def test_grayscale_frames_join_an_rgb_stack() -> None:
    data = encode(Image.fromarray(np.full((16, 16), 90, np.uint8), "L"), "JPEG")
    text = pybase64.b64encode(data).decode()

    frames, _ = decode(f"{text},{text}", num_frames=-1)

    assert frames.shape == (2, 16, 16, 3)
