"""Strings and paths as media items are refused: the HF processor would fetch or open them itself.

Handed a URL string, transformers' image loading downloads it (no address policy, no cap); handed
a path, it opens the file (no allowed-path check). mediaref's item types are decoded media and
refs only, so a location anywhere in ``multi_modal_data`` is a 400 before any work is done.
"""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np
import pytest
from PIL import Image

from _http_server import MediaServer
from _image_samples import encode
from _instrumented_decoding import IMAGE_PROMPT, make_processor
from mediaref.exceptions import VLLMValidationError
from mediaref.parse import MultiModalDataParser

VIDEO_PROMPT = "<|vision_start|><|video_pad|><|vision_end|>"


def _png() -> bytes:
    return encode(Image.new("RGB", (32, 32), (200, 10, 10)), "PNG")


def _cases(url: str, path: pathlib.Path) -> list[tuple[str, Any, str]]:
    frame = np.zeros((28, 28, 3), dtype=np.uint8)
    return [
        ("image", url, ""),
        ("image", [url], "[0]"),
        ("image", str(path), ""),
        ("image", path, ""),
        ("image", [Image.new("RGB", (28, 28)), str(path)], "[1]"),
        ("video", [str(path), str(path)], "[0]"),  # a video given as a list of frame paths
        ("video", [[frame, str(path)]], "[0][1]"),
        ("video", (url, {"fps": 1.0}), "[0]"),
        ("audio", (str(path), 16000), "[0]"),
        ("audio", [url], "[0]"),
    ]


def test_location_items_are_refused_before_anything_reads_them(
    media_server: MediaServer, tmp_path: pathlib.Path
) -> None:
    url = media_server.add_file("secret.png", _png())
    path = tmp_path / "secret.png"
    path.write_bytes(_png())
    parser = MultiModalDataParser()
    for modality, data, where in _cases(url, path):
        with pytest.raises(VLLMValidationError) as caught:
            parser.parse_mm_data({modality: data})
        message = str(caught.value)
        assert f"multi_modal_data[{modality!r}]{where} is a string or path" in message
        assert caught.value.status_code == 400 and caught.value.parameter == modality
    assert media_server.total_requests() == 0


def test_the_processor_refuses_a_url_string_without_fetching_it(media_server: MediaServer) -> None:
    url = media_server.add_file("secret.png", _png())
    processor = make_processor(cached=False)
    with pytest.raises(VLLMValidationError, match="is a string or path"):
        processor.apply(processor.build_inputs(IMAGE_PROMPT, {"image": [url]}))
    with pytest.raises(VLLMValidationError, match="is a string or path"):
        processor.apply(processor.build_inputs(VIDEO_PROMPT, {"video": [url]}))
    assert media_server.count("/files/secret.png") == 0


def test_decoded_media_and_embedding_dicts_still_parse() -> None:
    parser = MultiModalDataParser()
    image = Image.new("RGB", (28, 28))
    items = parser.parse_mm_data(
        {
            "image": [image, np.zeros((28, 28, 3), dtype=np.uint8)],
            "video": [np.zeros((2, 28, 28, 3), dtype=np.uint8)],
            "audio": [(np.zeros(160, dtype=np.float32), 16000)],
        }
    )
    assert items.get_all_counts() == {"image": 2, "video": 1, "audio": 1}
