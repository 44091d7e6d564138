"""vLLM's ``vllm.multimodal.image`` helpers at ``mediaref.image`` and ``vllm.multimodal.utils`` at
``mediaref.utils``, checked against vLLM 0.33.0's documented behaviour."""

from __future__ import annotations

import io
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pybase64
import pytest
import torch
from PIL import Image, UnidentifiedImageError

from _image_samples import encode, exif_block, gradient_rgb, semi_transparent_rgba
from mediaref import utils
from mediaref.image import (
    ALLOWED_IMAGE_FORMATS,
    convert_image_mode,
    normalize_image,
    open_image,
    rescale_image_size,
    rgba_to_rgb,
)
from mediaref.inputs import (
    MultiModalFeatureSpec,
    MultiModalFieldConfig,
    MultiModalKwargsItem,
    PlaceholderRange,
)
from mediaref.media.audio import AudioMediaIO
from mediaref.media.connector import MediaConnector
from mediaref.media.image._header import ACCEPTED_FORMATS

# --- mediaref.image ----------------------------------------------------------------------------


def test_open_image_accepts_only_the_decoders_formats() -> None:
    assert ALLOWED_IMAGE_FORMATS is ACCEPTED_FORMATS  # one list for the helper and the decoder
    with open_image(io.BytesIO(encode(gradient_rgb(5, 4), "PNG"))) as image:
        assert image.format == "PNG" and image.size == (5, 4)
    with pytest.raises(UnidentifiedImageError):
        open_image(io.BytesIO(encode(gradient_rgb(5, 4), "TIFF")))


def test_rescale_image_size_truncates_and_transposes() -> None:
    image = gradient_rgb(10, 7)
    assert rescale_image_size(image, 0.5).size == (5, 3)
    turned = rescale_image_size(image, 2.0, transpose=int(Image.Transpose.ROTATE_90))
    assert turned.size == (14, 20)
    assert np.array_equal(
        np.asarray(turned), np.asarray(image.resize((20, 14)).transpose(Image.Transpose.ROTATE_90))
    )


def test_normalize_image_applies_the_exif_orientation() -> None:
    upright = gradient_rgb(6, 4)
    stored = upright.transpose(Image.Transpose.ROTATE_90)  # orientation 6 turns it back
    with Image.open(io.BytesIO(encode(stored, "PNG", exif=exif_block(orientation=6)))) as image:
        image.load()
        fixed = normalize_image(image)
    assert fixed.size == (6, 4) and np.array_equal(np.asarray(fixed), np.asarray(upright))
    plain = gradient_rgb(3, 2)
    assert normalize_image(plain) is plain


def test_normalize_image_leaves_unreadable_metadata_alone() -> None:
    image = gradient_rgb(3, 2)
    image.info["exif"] = b"Exif\x00\x00garbage"
    assert normalize_image(image) is image


def test_rgba_to_rgb_and_convert_image_mode() -> None:
    rgba = semi_transparent_rgba()
    rgb = rgba_to_rgb(rgba, (0, 0, 0))
    assert rgb.mode == "RGB"
    assert np.asarray(rgb)[0].tolist() == [[255, 0, 0], [0, 128, 0], [0, 0, 0], [255, 255, 255]]
    with pytest.raises(ValueError, match="RGBA"):
        rgba_to_rgb(gradient_rgb(2, 2))
    white = convert_image_mode(rgba, "RGB")
    assert np.asarray(white)[0, 2].tolist() == [255, 255, 255]  # transparent: the background
    assert convert_image_mode(rgba, "RGBA") is rgba
    grey = convert_image_mode(gradient_rgb(4, 4), "L")
    assert grey.mode == "L"


# --- utils: encoders ---------------------------------------------------------------------------


def test_encode_image_url_round_trips_through_the_connector(connector: MediaConnector) -> None:
    image = gradient_rgb(9, 5)
    url = utils.encode_image_url(image)
    assert url.startswith("data:image/png;base64,")
    assert np.array_equal(np.asarray(connector.fetch_image(url).decode()), np.asarray(image))
    rgba = semi_transparent_rgba()
    kept = utils.encode_image_base64(rgba, image_mode=None)
    with Image.open(io.BytesIO(pybase64.b64decode(kept))) as decoded:
        assert decoded.mode == "RGBA"
    jpeg = utils.encode_image_url(image, format="JPEG")
    assert jpeg.startswith("data:image/jpeg;base64,")


def test_encode_audio_url_round_trips() -> None:
    tone = np.sin(np.arange(8000, dtype=np.float32) / 5) * 0.5
    url = utils.encode_audio_url(tone, 8000)
    header, _, payload = url.partition(",")
    assert header.startswith("data:audio/") and header.endswith(";base64")
    samples, rate = AudioMediaIO().load_base64("audio/wav", payload)
    assert rate == 8000 and np.allclose(samples, tone, atol=1e-4)


def test_encode_video_url_is_a_jpeg_sequence_the_decoder_reads() -> None:
    frames = np.stack([np.asarray(gradient_rgb(16, 8))] * 3)
    url = utils.encode_video_url(frames)
    assert url.startswith("data:video/jpeg;base64,")
    assert len(utils.encode_video_base64(frames).split(",")) == 3


def test_fetch_image_offline_reads_local_files(tmp_path: Path) -> None:
    # vLLM's offline helpers may read any local file (they are for user code, not servers).
    path = tmp_path / "local image.png"
    path.write_bytes(encode(gradient_rgb(4, 3), "PNG"))
    assert utils.fetch_image("file://" + quote(str(path))).size == (4, 3)


# --- utils: items in the prompt ----------------------------------------------------------------


def _feature(offset: int, length: int, data: MultiModalKwargsItem | None) -> MultiModalFeatureSpec:
    return MultiModalFeatureSpec(
        data=data,
        modality="image",
        identifier=f"id{offset}",
        mm_position=PlaceholderRange(offset=offset, length=length),
    )


def _item(**fields: tuple[MultiModalFieldConfig, torch.Tensor]) -> MultiModalKwargsItem:
    return MultiModalKwargsItem(
        {key: config.build_elems(key, value)[0] for key, (config, value) in fields.items()}
    )


def test_argsort_mm_positions_orders_items_by_offset() -> None:
    positions = {
        "image": [PlaceholderRange(offset=10, length=2), PlaceholderRange(offset=0, length=3)],
        "audio": [PlaceholderRange(offset=5, length=1)],
    }
    assert utils.argsort_mm_positions(positions) == [("image", 1), ("audio", 0), ("image", 0)]
    assert utils.argsort_mm_positions({}) == []


def test_get_mm_features_in_window() -> None:
    features = [_feature(0, 4, None), _feature(10, 4, None), _feature(20, 4, None)]
    assert utils.get_mm_features_in_window(features, 0, 30) == (0, 3)
    assert utils.get_mm_features_in_window(features, 4, 10) == (1, 1)  # between two items
    assert utils.get_mm_features_in_window(features, 3, 11) == (0, 2)  # touches both ends
    assert utils.get_mm_features_in_window(features, 24, 40) == (3, 3)


def test_strip_covered_mm_data() -> None:
    grid = MultiModalFieldConfig.batched("image", keep_on_cpu=True)
    pixels = MultiModalFieldConfig.batched("image")
    data = _item(
        image_grid_thw=(grid, torch.tensor([[1, 2, 2]])), pixel_values=(pixels, torch.ones(1, 8))
    )
    features = [_feature(0, 4, data), _feature(10, 4, data), _feature(20, 4, None)]
    assert utils.strip_covered_mm_data(features, 0) is features
    stripped = utils.strip_covered_mm_data(features, 12)
    assert stripped[0].data is None and stripped[1] is features[1] and stripped[2] is features[2]
    assert features[0].data is data  # the caller's list is not changed
    mrope = utils.strip_covered_mm_data(features, 14, uses_mrope=True)
    assert mrope[0].data is not None and set(mrope[0].data) == {"image_grid_thw"}
    assert mrope[1].data is not None and set(mrope[1].data) == {"image_grid_thw"}
    shm = MultiModalKwargsItem({"address": data["pixel_values"]})
    assert utils.strip_covered_mm_data([_feature(0, 4, shm)], 10)[0].data is shm


# --- utils: batching ---------------------------------------------------------------------------


def test_group_and_batch_splits_where_fields_or_shared_values_differ() -> None:
    batched = MultiModalFieldConfig.batched("image")
    shared = MultiModalFieldConfig.shared("image", 1)
    a = _item(x=(batched, torch.ones(1, 2)), s=(shared, torch.tensor([1])))
    b = _item(x=(batched, torch.zeros(1, 2)), s=(shared, torch.tensor([1])))
    c = _item(x=(batched, torch.ones(1, 2)), s=(shared, torch.tensor([2])))
    d = _item(y=(batched, torch.ones(1, 3)))
    groups = list(utils.group_and_batch_mm_items([a, b, c, d]))
    assert [count for count, _ in groups] == [2, 1, 1]
    assert groups[0][1]["x"].shape == (2, 2) and torch.equal(groups[0][1]["s"], torch.tensor([1]))
    by_modality = list(
        utils.group_and_batch_mm_kwargs([("image", a), ("image", b), ("video", b), ("image", a)])
    )
    assert [(m, n) for m, n, _ in by_modality] == [("image", 2), ("video", 1), ("image", 1)]


def test_embedding_modality_tags() -> None:
    image, audio = torch.zeros(2, 4), torch.zeros(3, 4)
    assert utils.set_mm_embedding_modality(image, "image") is image
    copied = utils.copy_mm_embedding_modality(image, audio.clone())
    assert utils.get_mm_embedding_modalities([image, copied]) == ["image", "image"]
    untouched = torch.zeros(1)
    assert utils.copy_mm_embedding_modality(torch.zeros(1), untouched) is untouched
    with pytest.raises(ValueError, match="index 1"):
        utils.get_mm_embedding_modalities([image, untouched])
