"""The fused path reads an RGB image's pixels in place (Pillow's RGBX storage, through its Arrow
export) and resizes all four channels: the first three must be exactly what the 3-byte export and
a 3-channel resize give, the view must outlive the image safely, and anything the export cannot
give falls back to the copy. Whole-image parity with HF is pinned by ``test_fast_path.py``."""

from __future__ import annotations

import gc
import io

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from mediaref.media.image.pillow_storage import rgbx_view
from mediaref.models.qwen2_vl._patch_rows import resize_frames, rgb_pixels, to_planes


def noise_image(width: int, height: int, seed: int = 0, mode: str = "RGB") -> Image.Image:
    rng = np.random.default_rng(seed)
    rgb = Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))
    return rgb if mode == "RGB" else rgb.convert(mode)


@pytest.mark.parametrize("size", [(1, 1), (3, 2), (7, 5), (1, 300), (1921, 1081)])
def test_view_holds_the_rgb_values_in_place(size: tuple[int, int]) -> None:
    image = noise_image(*size)
    view = rgbx_view(image)
    assert view is not None
    assert view.shape == (size[1], size[0], 4) and view.dtype == np.uint8
    assert not view.flags.writeable
    np.testing.assert_array_equal(view[..., :3], np.asarray(image))


def test_a_decoded_jpeg_is_viewed() -> None:
    buffer = io.BytesIO()
    noise_image(640, 480).save(buffer, "JPEG", quality=90)
    with Image.open(io.BytesIO(buffer.getvalue())) as image:
        image.load()
        view = rgbx_view(image)
        assert view is not None
        np.testing.assert_array_equal(view[..., :3], np.asarray(image))


@pytest.mark.parametrize("mode", ["L", "RGBA", "P", "CMYK", "I;16"])
def test_other_modes_have_no_view(mode: str) -> None:
    assert rgbx_view(noise_image(8, 8, mode=mode)) is None


def test_an_image_in_several_blocks_falls_back_to_the_copy() -> None:
    # Over Pillow's 16 MiB block: its Arrow export refuses it, so the pixels are copied out.
    image = noise_image(2100, 2100)
    assert rgbx_view(image) is None
    pixels = rgb_pixels(image)
    assert pixels.shape == (2100, 2100, 3)
    np.testing.assert_array_equal(pixels, np.asarray(image))


def test_the_view_keeps_the_pixels_alive_after_the_image_goes() -> None:
    image = noise_image(300, 200, seed=1)
    expected = np.asarray(image).copy()
    view = rgbx_view(image)
    assert view is not None
    del image
    gc.collect()
    # Fresh images of the same size would reuse freed pixel memory, overwriting the values.
    others = [Image.new("RGB", (300, 200), (7, 7, 7)) for _ in range(8)]
    np.testing.assert_array_equal(view[..., :3], expected)
    planes = to_planes(resize_frames(view[None], 100, 150), 3)
    del view
    gc.collect()
    np.testing.assert_array_equal(
        planes, to_planes(resize_frames(expected[None], 100, 150))
    )  # the derived tensor is independent
    assert len(others) == 8


@pytest.mark.parametrize("mode", ["RGB", "L", "P", "CMYK"])
def test_rgb_pixels_reads_the_converted_storage(mode: str) -> None:
    image = noise_image(33, 17, seed=2, mode=mode)
    pixels = rgb_pixels(image)
    assert pixels.shape == (17, 33, 4)
    np.testing.assert_array_equal(pixels[..., :3], np.asarray(image.convert("RGB")))


def test_rgb_pixels_composites_transparency_before_the_view() -> None:
    rgba = noise_image(20, 10, seed=3, mode="RGBA")
    rgba.putalpha(Image.linear_gradient("L").resize((20, 10)))
    white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    expected = np.asarray(Image.alpha_composite(white, rgba).convert("RGB"))
    pixels = rgb_pixels(rgba)
    np.testing.assert_array_equal(pixels[..., :3], expected)


@settings(max_examples=40, deadline=None)
@given(
    width=st.integers(1, 90),
    height=st.integers(1, 90),
    target_width=st.integers(1, 120),
    target_height=st.integers(1, 120),
    seed=st.integers(0, 2**16),
)
def test_a_fourth_channel_never_changes_the_other_three(
    width: int, height: int, target_width: int, target_height: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    rgb = rng.integers(0, 256, (1, height, width, 3), dtype=np.uint8)
    # Random padding, not Pillow's constant: the three channels must not depend on it at all.
    rgbx = np.concatenate([rgb, rng.integers(0, 256, (1, height, width, 1), dtype=np.uint8)], -1)
    three = to_planes(resize_frames(rgb, target_height, target_width))
    four = to_planes(resize_frames(rgbx, target_height, target_width), 3)
    assert four.shape == three.shape == (1, 3, target_height, target_width)
    assert torch.equal(four, three)
    assert all(four[0, c].is_contiguous() for c in range(3))


def test_at_its_target_size_the_padding_plane_is_dropped_without_a_resize() -> None:
    image = noise_image(56, 28, seed=4)
    view = rgbx_view(image)
    assert view is not None
    planes = to_planes(resize_frames(view[None], 28, 56), 3)
    assert planes.shape == (1, 3, 28, 56) and planes.is_contiguous()
    assert torch.equal(planes, torch.from_numpy(np.asarray(image)).permute(2, 0, 1)[None])
