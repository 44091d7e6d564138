"""Qwen2-VL's fused exact vision path: bit-identical to transformers' default processors.

The reference is the HF processor itself (the torchvision Qwen2-VL image and video processors the
built-in model loads), called on the same decoded item. Media is real where the issue asks: every
image scikit-image ships, matplotlib's grace_hopper.jpg when matplotlib is installed, generated odd
sizes and every mode, and a real H.264 clip through mediaref's decoder. End-to-end tests run the
whole processor with the fused path on and off (``MEDIAREF_QWEN2_VL_FUSED``), on pools of 1 and 4.
"""

from __future__ import annotations

import functools
import io
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from _image_samples import SKIMAGE_DATA
from _parity_references import IMAGE_PROMPT, VIDEO_PROMPT, video_bytes
from mediaref.media.executor import MEDIA_POOL_THREAD_PREFIX, shutdown_media_executor
from mediaref.models.builtin import builtin_model_path
from mediaref.models.qwen2_vl import _fused as fused
from mediaref.processing.context import ModelConfig
from mediaref.registry import MULTIMODAL_REGISTRY

QWEN2_VL = str(builtin_model_path("qwen2_vl"))
RAW = {"do_rescale": False, "do_normalize": False}
NORMALIZE_MODES = [pytest.param(RAW, id="uint8"), pytest.param({}, id="normalized")]


@functools.cache
def hf_processor() -> Any:
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(QWEN2_VL)


def real_images() -> list[Path]:
    """Every file in scikit-image's data directory that Pillow opens as an image."""
    paths = []
    for path in sorted(SKIMAGE_DATA.iterdir()):
        try:
            with Image.open(path) as image:
                image.load()
        except Exception:
            continue
        paths.append(path)
    return paths


def grace_hopper() -> list[Path]:
    try:
        import matplotlib.cbook
    except ImportError:
        return []
    return [Path(matplotlib.cbook.get_sample_data("grace_hopper.jpg", asfileobj=False))]


def assert_image_exact(image: Image.Image, kwargs: dict[str, Any]) -> None:
    settings = fused.image_settings(hf_processor().image_processor, kwargs)
    assert settings is not None
    target = fused.image_target(image, settings)
    assert target is not None, f"{image.mode} {image.size} should take the fused path"
    rows, grid = fused.image_rows(image, target, settings)
    expected = hf_processor().image_processor(images=[image], return_tensors="pt", **kwargs)
    assert rows.dtype == expected["pixel_values"].dtype
    assert torch.equal(rows, expected["pixel_values"])
    assert [list(grid)] == expected["image_grid_thw"].tolist()


# ---------------------------------------------------------------- images, one by one


def test_scikit_image_ships_enough_real_images() -> None:
    assert len(real_images()) >= 20


@pytest.mark.usefixtures("resize_path")
@pytest.mark.parametrize("kwargs", NORMALIZE_MODES)
@pytest.mark.parametrize(
    "path", [pytest.param(p, id=p.name) for p in real_images() + grace_hopper()]
)
def test_every_real_image_is_bit_exact(path: Path, kwargs: dict[str, Any]) -> None:
    with Image.open(path) as image:
        image.load()
        assert_image_exact(image, kwargs)


def generated(mode: str, width: int, height: int) -> Image.Image:
    rng = np.random.default_rng(width * 7919 + height)
    rgb = Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))
    if mode == "I;16":
        return Image.fromarray(rng.integers(0, 65536, (height, width), dtype=np.uint16))
    if mode == "P":
        return rgb.convert("P", palette=Image.Palette.ADAPTIVE)
    if mode == "P+transparency":
        palette = rgb.convert("P", palette=Image.Palette.ADAPTIVE)
        palette.info["transparency"] = 3
        return palette
    if mode in ("LA", "RGBA"):
        image = rgb.convert(mode)
        image.putalpha(Image.fromarray(rng.integers(0, 256, (height, width), dtype=np.uint8)))
        return image
    return rgb.convert(mode)


MODES = ["RGB", "L", "LA", "P", "P+transparency", "RGBA", "CMYK", "I;16", "I", "F", "1"]
ODD_SIZES = [(1, 1), (3, 3), (27, 1000), (4000, 30), (1009, 1013), (200, 1), (28, 28)]


@pytest.mark.usefixtures("resize_path")
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("size", ODD_SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_odd_sizes_and_modes_are_bit_exact(size: tuple[int, int], mode: str) -> None:
    assert_image_exact(generated(mode, *size), RAW)


@pytest.mark.usefixtures("resize_path")
@pytest.mark.parametrize("mode", ["RGBA", "I;16", "CMYK"])
def test_modes_are_bit_exact_when_normalized(mode: str) -> None:
    assert_image_exact(generated(mode, 97, 61), {})


@pytest.mark.parametrize(
    "pixels",
    [
        {"max_pixels": 256 * 28 * 28},
        {"min_pixels": 512 * 28 * 28},
        {"min_pixels": 4, "max_pixels": 3136},
    ],
)
@pytest.mark.filterwarnings("ignore:Passing `min_pixels` and `max_pixels`:FutureWarning")
def test_min_and_max_pixels_are_honoured_exactly(pixels: dict[str, int]) -> None:
    with Image.open(SKIMAGE_DATA / "astronaut.png") as image:
        image.load()
        assert_image_exact(image, {**RAW, **pixels})
    frames = clip_frames(3, 300, 400)
    kwargs = {**RAW, **pixels, "do_sample_frames": False}
    settings = fused.video_settings(hf_processor().video_processor, kwargs)
    assert settings is not None
    target = fused.video_target(frames, settings)
    assert target is not None
    rows, _ = fused.video_rows(frames, target, settings)
    expected = hf_processor().video_processor(videos=[frames], return_tensors="pt", **kwargs)
    assert torch.equal(rows, expected["pixel_values_videos"])


@pytest.mark.usefixtures("resize_path")
def test_a_large_prime_sized_image_is_bit_exact() -> None:
    # 4001 x 3001 is over max_pixels' 12.8 MP: smart_resize shrinks it.
    assert_image_exact(generated("RGB", 4001, 3001), RAW)


def test_an_aspect_ratio_hf_refuses_takes_the_hf_path_and_its_error() -> None:
    settings = fused.image_settings(hf_processor().image_processor, RAW)
    assert settings is not None
    assert fused.image_target(generated("RGB", 201, 1), settings) is None
    with pytest.raises(ValueError, match="aspect ratio"):
        hf_processor().image_processor(images=[generated("RGB", 201, 1)], **RAW)


@pytest.mark.parametrize(
    ("configure", "kwargs"),
    [
        (lambda p: setattr(p, "resample", 2), RAW),
        (lambda p: setattr(p, "do_resize", False), RAW),
        (lambda p: None, {"do_rescale": True, "do_normalize": False}),
        (lambda p: None, {**RAW, "size": {"shortest_edge": 1, "longest_edge": 9}}),
        (lambda p: None, {**RAW, "device": "cpu"}),
    ],
    ids=["bilinear", "no-resize", "rescale-only", "per-request-size", "device"],
)
def test_settings_off_the_path_send_items_to_hf(configure: Any, kwargs: dict[str, Any]) -> None:
    from transformers import AutoImageProcessor

    processor = AutoImageProcessor.from_pretrained(QWEN2_VL)
    configure(processor)
    assert fused.image_settings(processor, kwargs) is None


def test_the_slow_pil_processor_is_not_fused() -> None:
    from transformers import AutoImageProcessor

    slow = AutoImageProcessor.from_pretrained(QWEN2_VL, backend="pil")
    assert slow.backend == "pil"
    assert fused.image_settings(slow, RAW) is None


def test_non_pil_images_take_the_hf_path() -> None:
    settings = fused.image_settings(hf_processor().image_processor, RAW)
    assert settings is not None
    assert fused.image_target(np.zeros((32, 32, 3), np.uint8), settings) is None


# ---------------------------------------------------------------- videos


def clip_frames(count: int, height: int, width: int) -> np.ndarray:
    rng = np.random.default_rng(count)
    return rng.integers(0, 256, (count, height, width, 3), dtype=np.uint8)


@pytest.mark.usefixtures("resize_path")
@pytest.mark.parametrize("kwargs", NORMALIZE_MODES)
@pytest.mark.parametrize("count", [1, 4, 5])
def test_video_frames_are_bit_exact(count: int, kwargs: dict[str, Any]) -> None:
    call_kwargs = {**kwargs, "do_sample_frames": False}
    settings = fused.video_settings(hf_processor().video_processor, call_kwargs)
    assert settings is not None
    frames = clip_frames(count, 97, 131)
    target = fused.video_target(frames, settings)
    assert target is not None
    rows, grid = fused.video_rows(frames, target, settings)
    expected = hf_processor().video_processor(videos=[frames], return_tensors="pt", **call_kwargs)
    assert torch.equal(rows, expected["pixel_values_videos"])
    assert [list(grid)] == expected["video_grid_thw"].tolist()


def test_videos_hf_would_sample_or_arrays_it_cannot_take_go_to_hf() -> None:
    video = hf_processor().video_processor
    assert fused.video_settings(video, {**RAW, "do_sample_frames": True}) is None
    settings = fused.video_settings(video, {**RAW, "do_sample_frames": False})
    assert settings is not None
    assert fused.video_target(clip_frames(2, 30, 30).astype(np.float32), settings) is None
    assert fused.video_target(clip_frames(2, 30, 30)[..., :1], settings) is None


# ---------------------------------------------------------------- the whole processor


@pytest.fixture(params=[1, 4], ids=["pool1", "pool4"])
def pool_size(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    monkeypatch.setenv("VLLM_MEDIA_LOADING_THREAD_COUNT", str(request.param))
    shutdown_media_executor()
    yield int(request.param)
    shutdown_media_executor()


def test_an_item_hf_refuses_fails_as_it_fails_on_the_hf_path(
    monkeypatch: pytest.MonkeyPatch, pool_size: int
) -> None:
    monkeypatch.setenv("MEDIAREF_QWEN2_VL_FUSED", "1")
    proc = MULTIMODAL_REGISTRY.create_processor(ModelConfig(model=QWEN2_VL))
    images = [generated("RGB", 64, 64), generated("RGB", 201, 1)]
    with pytest.raises(ValueError, match="aspect ratio"):
        proc.apply(proc.build_inputs(IMAGE_PROMPT * 2, {"image": images}))


@pytest.mark.parametrize("toggle", [None, False], ids=["device-normalize", "cpu-normalize"])
def test_mixed_items_match_the_hf_path_item_for_item(
    monkeypatch: pytest.MonkeyPatch, pool_size: int, toggle: bool | None
) -> None:
    from mediaref.media.image import ImageMediaIO

    def outputs(fused_on: bool) -> dict[str, torch.Tensor]:
        monkeypatch.setenv("MEDIAREF_QWEN2_VL_FUSED", "1" if fused_on else "0")
        config = ModelConfig(model=QWEN2_VL, mm_device_do_normalize=toggle, mm_processor_cache_gb=0)
        proc = MULTIMODAL_REGISTRY.create_processor(config)
        images: list[Any] = [
            ImageMediaIO().load_bytes_ref((SKIMAGE_DATA / name).read_bytes())
            for name in ("coffee.png", "rocket.jpg")
        ]
        # An ndarray takes the HF path between fused items; two equal shapes make an HF group.
        images += [np.asarray(generated("RGB", 90, 70)), generated("LA", 64, 48)]
        images += [generated("RGB", 300, 200), generated("P", 300, 200)]
        video = proc.info.get_media_io("video", {"num_frames": 5}).load_bytes_ref(video_bytes("b"))
        prompt = IMAGE_PROMPT * len(images) + VIDEO_PROMPT
        result = proc.apply(proc.build_inputs(prompt, {"image": images, "video": [video]}))
        data = result["mm_kwargs"].get_data()
        return {key: value for key, value in data.items() if isinstance(value, torch.Tensor)}

    from mediaref.models.qwen2_vl import _routing as routing

    taken: list[tuple[bool, int]] = []
    real_fused_rows = routing.fused_rows

    def spy(items: Any, *args: Any, video: bool, **kwargs: Any) -> Any:
        taken.append((video, len(items)))
        return real_fused_rows(items, *args, video=video, **kwargs)

    monkeypatch.setattr(routing, "fused_rows", spy)
    fused_out = outputs(True)
    # Every item but the ndarray was fused (five images, the clip); none with the path off.
    assert sorted(taken) == [(False, 5), (True, 1)]
    hf_out = outputs(False)
    assert len(taken) == 2
    assert set(fused_out) == set(hf_out) >= {"pixel_values", "pixel_values_videos"}
    for key, value in hf_out.items():
        assert fused_out[key].dtype == value.dtype, key
        assert torch.equal(fused_out[key], value), key


@pytest.mark.parametrize("kwargs", NORMALIZE_MODES)
@pytest.mark.parametrize("video", [False, True], ids=["images", "videos"])
def test_a_batch_s_rows_are_one_buffer_joined_without_a_copy(
    pool_size: int, kwargs: dict[str, Any], video: bool
) -> None:
    processor = hf_processor().video_processor if video else hf_processor().image_processor
    if video:
        kwargs = {**kwargs, "do_sample_frames": False}
        items: list[Any] = [clip_frames(count, 61, 87 + count) for count in (3, 4, 1)]
        settings = fused.video_settings(processor, kwargs)
        check: Any = fused.video_target
    else:
        items = [generated(mode, 97 + i, 61) for i, mode in enumerate(("RGB", "L", "RGBA"))]
        settings = fused.image_settings(processor, kwargs)
        check = fused.image_target
    assert settings is not None
    targets = [check(item, settings) for item in items]
    with ThreadPoolExecutor(pool_size) as pool:
        rows = [
            r for r, _ in fused.fused_rows(items, targets, settings, video=video, executor=pool)
        ]
    joined = fused.joined_rows(rows)
    assert joined.data_ptr() == rows[0].data_ptr()  # the buffer itself, no copy
    assert torch.equal(joined, torch.cat(rows))
    key = "videos" if video else "images"
    expected = processor(**{key: items}, return_tensors="pt", **kwargs)
    assert torch.equal(joined, expected["pixel_values_videos" if video else "pixel_values"])


def test_rows_that_are_not_one_buffer_are_joined_by_a_copy() -> None:
    whole = torch.arange(24, dtype=torch.uint8).view(6, 4)
    apart = [whole[:2], torch.zeros(2, 4, dtype=torch.uint8), whole[2:4]]
    for rows in (
        apart,
        [whole[2:4], whole[:2]],
        [whole[:2], whole[3:]],
    ):  # other, out of order, gap
        joined = fused.joined_rows(rows)
        assert torch.equal(joined, torch.cat(rows))
        assert joined.data_ptr() != rows[0].data_ptr()
    single = whole[1:3]
    assert fused.joined_rows([single]) is single
    assert fused.joined_rows([whole[:2], whole[2:5]]).data_ptr() == whole.data_ptr()


@pytest.mark.filterwarnings("ignore:Passing `min_pixels` and `max_pixels`:FutureWarning")
def test_a_deployments_pixel_bounds_stay_on_the_fused_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``mm_processor_kwargs={"max_pixels": ...}`` (how deployments bound the token count) is
    honoured by the fused path, which stays exact."""
    from mediaref.media.image import ImageMediaIO
    from mediaref.models.qwen2_vl import _routing as routing

    taken: list[int] = []
    real_fused_rows = routing.fused_rows

    def spy(items: Any, *args: Any, **kwargs: Any) -> Any:
        taken.append(len(items))
        return real_fused_rows(items, *args, **kwargs)

    monkeypatch.setattr(routing, "fused_rows", spy)

    def pixels(fused_on: bool) -> torch.Tensor:
        monkeypatch.setenv("MEDIAREF_QWEN2_VL_FUSED", "1" if fused_on else "0")
        config = ModelConfig(
            model=QWEN2_VL, mm_processor_cache_gb=0, mm_processor_kwargs={"max_pixels": 200_000}
        )
        proc = MULTIMODAL_REGISTRY.create_processor(config)
        ref = ImageMediaIO().load_bytes_ref((SKIMAGE_DATA / "retina.jpg").read_bytes())
        out = proc.apply(proc.build_inputs(IMAGE_PROMPT, {"image": [ref]}))
        return out["mm_kwargs"]["image"][0]["pixel_values"].data

    fused_pixels = pixels(True)
    assert taken == [1]
    hf_pixels = pixels(False)
    assert taken == [1] and fused_pixels.shape[0] < 200_000 // 196
    assert torch.equal(fused_pixels, hf_pixels)


def test_called_from_a_pool_thread_the_items_run_inline(pool_size: int) -> None:
    """A pool thread waiting on jobs queued behind it could deadlock a saturated pool."""
    from mediaref.media.executor import get_media_executor

    settings = fused.image_settings(hf_processor().image_processor, RAW)
    assert settings is not None
    images = [generated("RGB", 90 + i, 60) for i in range(pool_size + 2)]
    targets = [fused.image_target(image, settings) for image in images]
    pool = get_media_executor()
    assert pool._thread_name_prefix == MEDIA_POOL_THREAD_PREFIX

    def nested() -> list[Any]:
        return fused.fused_rows(images, targets, settings, video=False, executor=pool)  # type: ignore[arg-type]

    # Every pool thread busy with a nested call: fanning out from them would never finish.
    futures = [pool.submit(nested) for _ in range(pool_size)]
    results = [future.result(timeout=120) for future in futures]
    direct = fused.fused_rows(images, targets, settings, video=False, executor=pool)  # type: ignore[arg-type]
    for rows in results:
        assert all(torch.equal(a[0], b[0]) for a, b in zip(rows, direct, strict=True))


def test_a_failing_item_fails_as_on_the_hf_path_once_every_job_is_drained(
    monkeypatch: pytest.MonkeyPatch, pool_size: int
) -> None:
    """A PIL image that fails to load (a truncated JPEG a caller passed unloaded) is a
    ValueError, as the HF call's failures are, raised only after its siblings finished."""
    import threading

    from mediaref.models.qwen2_vl import _routing as routing

    buffer = io.BytesIO()
    generated("RGB", 300, 200).save(buffer, "JPEG")
    data = buffer.getvalue()
    truncated = Image.open(io.BytesIO(data[: len(data) // 2]))  # opened, never loaded
    finished: list[int] = []
    lock = threading.Lock()
    real_image_rows = fused.image_rows

    def slow_rows(image: Any, *args: Any, **kwargs: Any) -> Any:
        if image is truncated:
            return real_image_rows(image, *args, **kwargs)
        time.sleep(0.05)  # the siblings outlive the failure
        rows = real_image_rows(image, *args, **kwargs)
        with lock:
            finished.append(image.width)
        return rows

    monkeypatch.setattr(fused, "image_rows", slow_rows)
    monkeypatch.setattr(routing, "fused_rows", fused.fused_rows)
    proc = MULTIMODAL_REGISTRY.create_processor(ModelConfig(model=QWEN2_VL))
    images = [truncated, generated("RGB", 64, 64), generated("RGB", 65, 64)]
    with pytest.raises(ValueError, match="Failed to apply"):
        proc.apply(proc.build_inputs(IMAGE_PROMPT * 3, {"image": images}))
    assert sorted(finished) == [64, 65]
