"""Malformed base64 handed to a decoder is a 400 client error, the same one a ``data:`` URL gets.

``MediaIO.load_base64`` and ``load_base64_ref`` decode strict base64; ``binascii.Error`` used to
escape from them unmapped (a server error to a framework that maps only the hierarchy in
``mediaref.exceptions``). It is now :class:`MediaClientError` with the reason the connector gives
for the same text in a ``data:`` URL, "invalid base64 payload".
"""

from __future__ import annotations

import binascii

import pybase64
import pytest

from _image_samples import encode, gradient_rgb
from mediaref.exceptions import MediaClientError
from mediaref.media.audio import AudioMediaIO
from mediaref.media.base import MediaIO
from mediaref.media.connector import MediaConnector
from mediaref.media.image import ImageMediaIO

MALFORMED = [
    pytest.param("****", id="not-the-alphabet"),
    pytest.param("iVBORw0KGgo", id="bad-padding"),
    pytest.param("iVBO Rw0K", id="whitespace"),
    pytest.param("iVBORw0KGgo=\n", id="newline"),
    pytest.param("ÿÿÿÿ", id="non-ascii"),
]
DECODERS = [
    pytest.param(ImageMediaIO, id="image"),
    pytest.param(AudioMediaIO, id="audio"),
]


@pytest.mark.parametrize("make_io", DECODERS)
@pytest.mark.parametrize("text", MALFORMED)
def test_malformed_base64_is_a_client_error(make_io: type[MediaIO[object]], text: str) -> None:
    media_io = make_io()
    for load in (media_io.load_base64_ref, media_io.load_base64):
        with pytest.raises(MediaClientError, match="invalid base64 payload") as caught:
            load("application/octet-stream", text)
        error = caught.value
        assert type(error) is MediaClientError and error.status_code == 400
        assert f"for {media_io.modality}" in str(error)
        assert isinstance(error.__cause__, ValueError)  # binascii's reason is kept as the cause


@pytest.mark.parametrize("text", MALFORMED)
def test_the_connectors_data_url_refuses_the_same_text_the_same_way(text: str) -> None:
    with pytest.raises(MediaClientError, match="invalid base64 payload") as from_url:
        MediaConnector().fetch_image(f"data:image/png;base64,{text}", ImageMediaIO())
    with pytest.raises(MediaClientError, match="invalid base64 payload") as from_decoder:
        ImageMediaIO().load_base64_ref("image/png", text)
    assert type(from_url.value) is type(from_decoder.value) is MediaClientError
    assert from_url.value.status_code == from_decoder.value.status_code == 400


def test_well_formed_base64_still_decodes() -> None:
    data = encode(gradient_rgb(9, 7), "PNG")
    text = pybase64.b64encode(data).decode("ascii")
    assert ImageMediaIO().load_base64_ref("image/png", text).decode().size == (9, 7)
    assert ImageMediaIO().load_base64("image/png", text).size == (9, 7)


def test_binascii_errors_no_longer_escape() -> None:
    with pytest.raises(MediaClientError) as caught:
        ImageMediaIO().load_base64_ref("image/png", "****")
    assert not isinstance(caught.value, binascii.Error)
