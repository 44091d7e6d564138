"""Qwen2-VL's fused exact vision path against HF's processors, and a cold request against vLLM.

    python benchmarks/bench_fast_path.py [--repeat 9] [--cold-repeat 41] [--batch 8]
        [--threads N] [--pin-malloc] [--skip-cold] [--approx] [--chart PATH]

Parts, each side by side in one run: every path once a round, the order flipped every round;
times are medians, ratios the median (and quartiles) of the rounds' own ratios, so the load of
the shared host, which moves a time by up to 30% from minute to minute, cancels out of them;
minor page faults per call beside:

1. **Encoded bytes -> ``pixel_values``**, decode included on every side: a 1920x1080 JPEG (q90,
   a scikit-image photo) and a 32-frame 854x480 H.264 clip. ``fused`` is mediaref's path (its
   decoders: ``ImageMediaIO``, whose RGB JPEG decode is one libjpeg-turbo call, and PyAV; then
   :mod:`mediaref.models.qwen2_vl._fused`); ``hf-torchvision`` is Pillow's decode (PyAV's for
   the clip) then transformers' default Qwen2-VL processor (torchvision backend); ``hf-pil`` the
   PIL ("slow") image processor (images only: transformers has no PIL video processor). All run
   with rescale + normalize off (Qwen2-VL's device-normalize default: uint8 out); the fused
   output is checked bit-identical to hf-torchvision's before timing. One item at a time
   (latency; as the processor runs a lone item, the fused path cuts its pixel work across the
   cores on the media pool, while HF's runs on torch's threads), then ``--batch`` images
   at once (throughput, images/s): every side decodes on the media pool, then the fused path
   fans the items out on it, their rows written into one buffer handed out whole (as the
   processor does), while the HF paths make one HF call.
2. **A cold request**, fetch of a ``data:`` URL + processor miss (``apply`` with no cache), the
   built-in Qwen2-VL model: mediaref (fused on, its default) against vLLM 0.33.0 when it imports
   (run with the vLLM venv's interpreter: docs/performance.md, "The vLLM 0.33.0 side"),
   ``--cold-repeat`` rounds of one call each. Then mediaref with the fused path off
   (``MEDIAREF_QWEN2_VL_FUSED=0``), for reference, in rounds of its own: interleaved, its HF
   call's freed temporaries would serve whichever call follows it. For the image, mediaref with
   Pillow's JPEG decoder (``MEDIAREF_TURBO_JPEG=0``) joins the paired rounds: what the one-call
   decode saves a whole request; for both, mediaref with torch's resize kernel then the rows
   (``MEDIAREF_NATIVE_RESIZE=0``) instead of the one native resize + rows pass
   (``models/qwen2_vl/_aa_resize.c``), where that pass is on: what it saves. Both libraries sample 32
   frames uniformly (vLLM's default loader; its Qwen loader would sample 2 frames a second).
   vLLM decodes the clip with OpenCV, mediaref with PyAV: pixels may differ, shapes match.
3. ``--approx``: the approximate modes against the exact path (wall time, the CPU-time ratio,
   PSNR, max and mean abs diff of the uint8 rows): ``jpeg_draft`` on a 12 MP JPEG and two real
   scikit-image JPEGs, and ``video_scale`` (32 frames of the 854x480 clip and of a 1920x1080 one
   decoded straight to their target by the PyAV codec's frame collector,
   :mod:`mediaref.media.video._frame_scaling`), each from the encoded bytes.

By default no thread count is pinned: every side at its defaults, the protocol of the ratios
docs/performance.md quotes against vLLM and HF (docs/notes/measuring_against_vllm.md).
``--threads N`` sets torch's (and OMP's) thread count for everything, before torch loads: a
comparison at N threads on every side.
``--pin-malloc`` fixes glibc's mmap and trim thresholds (64 / 256 MiB) before anything runs. By
default glibc moves its mmap threshold up to the largest block freed so far, so whether a
library's large temporaries come from reused heap memory or from fresh pages (each page faulted
in, ~3 us here) depends on what the process did before: vLLM's side of a cold 1080p request
took 27 ms in some processes and 39-49 ms in others (6,000-7,300 faults a call), the same code.
Pinned, neither side faults fresh pages: the steadiest state, and the best case for vLLM.
"""

from __future__ import annotations

import argparse
import base64
import ctypes
import ctypes.util
import gc
import io
import os
import platform
import resource
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# First: it sets OMP_NUM_THREADS from --threads, which torch reads once when it loads.
import _torch_threads

# isort: split
import torch
from PIL import Image

import _bench_media as bm
import _charts

_torch_threads.pin_torch()

from mediaref.media.connector import MediaConnector  # noqa: E402
from mediaref.media.executor import get_media_executor  # noqa: E402
from mediaref.media.image import ImageMediaIO  # noqa: E402
from mediaref.media.video import VideoMediaIO  # noqa: E402
from mediaref.models.builtin import builtin_model_path  # noqa: E402
from mediaref.models.qwen2_vl import _fused as fused  # noqa: E402
from mediaref.models.qwen2_vl import _patch_rows  # noqa: E402
from mediaref.processing.context import ModelConfig  # noqa: E402
from mediaref.registry import MULTIMODAL_REGISTRY  # noqa: E402

MODEL = str(builtin_model_path("qwen2_vl"))
RAW = {"do_rescale": False, "do_normalize": False}
PROMPTS = {
    "image": "<|vision_start|><|image_pad|><|vision_end|>Describe this image.",
    "video": "<|vision_start|><|video_pad|><|vision_end|>Describe this video.",
}
PIXELS = {"image": "pixel_values", "video": "pixel_values_videos"}


def make_media(frames: int) -> dict[str, bytes]:
    photo = bm.load_photo("astronaut.png")
    jpeg = bm.encode_image(bm.upscale(photo, bm.FULL_HD), "JPEG", quality=90)
    clip = bm.encode_pan_clip(bm.load_photo("coffee.png"), seconds=4.0, size=(854, 480))
    return {"image": jpeg, "video": clip, "frames": str(frames).encode()}


def decode_image(data: bytes) -> Image.Image:
    """The HF paths' decode: Pillow's, as a transformers user decodes."""
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


def mediaref_decode_image(data: bytes) -> Image.Image:
    """The fused path's decode: mediaref's (the header caps, then an RGB JPEG's one-call
    libjpeg-turbo decode into Pillow's storage), as a fetched image is decoded."""
    return ImageMediaIO().load_bytes(data)


def decode_clip(data: bytes, frames: int) -> Any:
    video = VideoMediaIO(ImageMediaIO(), num_frames=frames).load_bytes_ref(data).decode()
    return video[0] if isinstance(video, tuple) else video


def pixel_paths(media: dict[str, bytes], batch: int) -> dict[str, dict[str, Callable[[], Any]]]:
    from transformers import AutoImageProcessor, AutoVideoProcessor

    fast = AutoImageProcessor.from_pretrained(MODEL)
    slow = AutoImageProcessor.from_pretrained(MODEL, backend="pil")
    video_processor = AutoVideoProcessor.from_pretrained(MODEL)
    image_settings = fused.image_settings(fast, RAW)
    video_kwargs = {**RAW, "do_sample_frames": False}
    video_settings = fused.video_settings(video_processor, video_kwargs)
    assert image_settings is not None and video_settings is not None
    jpeg, clip, frames = media["image"], media["video"], int(media["frames"])
    pool = get_media_executor()

    cores = len(os.sched_getaffinity(0))

    def fused_image(data: bytes, pieces: int) -> torch.Tensor:
        image = mediaref_decode_image(data)
        target = fused.image_target(image, image_settings)
        assert target is not None
        # As the processor runs a lone image: its resize and bands cut across cores on the pool.
        return fused.image_rows(image, target, image_settings, executor=pool, pieces=pieces)[0]

    def fused_batch() -> torch.Tensor:
        # As the processor runs a batch: decoded on the pool, then the items fanned out on it,
        # their rows written into one buffer, handed out whole.
        images = list(pool.map(mediaref_decode_image, [jpeg] * batch))
        targets = [fused.image_target(image, image_settings) for image in images]
        rows = fused.fused_rows(images, targets, image_settings, video=False, executor=pool)
        return fused.joined_rows([pixels for pixels, _ in rows])

    def fused_video() -> torch.Tensor:
        pixels = decode_clip(clip, frames)
        target = fused.video_target(pixels, video_settings)
        assert target is not None
        # As the processor runs it: the clip's frames cut into pieces, one a core, on the pool.
        return fused.video_rows(pixels, target, video_settings, executor=pool, pieces=cores)[0]

    def hf_batch(processor: Any) -> Callable[[], Any]:
        def run() -> Any:
            images = list(pool.map(decode_image, [jpeg] * batch))
            return processor(images=images, return_tensors="pt", **RAW)["pixel_values"]

        return run

    return {
        "image": {
            "fused": lambda: fused_image(jpeg, cores),
            "hf-torchvision": lambda: fast(images=[decode_image(jpeg)], return_tensors="pt", **RAW)[
                "pixel_values"
            ],
            "hf-pil": lambda: slow(images=[decode_image(jpeg)], return_tensors="pt", **RAW)[
                "pixel_values"
            ],
        },
        f"{batch} images": {
            "fused": fused_batch,
            "hf-torchvision": hf_batch(fast),
            "hf-pil": hf_batch(slow),
        },
        "video": {
            "fused": fused_video,
            "hf-torchvision": lambda: video_processor(
                videos=[decode_clip(clip, frames)], return_tensors="pt", **video_kwargs
            )["pixel_values_videos"],
        },
    }


def data_url(data: bytes, mime: str) -> str:
    return f"data:{mime};base64," + base64.b64encode(data).decode()


def cold_paths(media: dict[str, bytes]) -> dict[str, dict[str, Callable[[], Any]]]:
    frames = int(media["frames"])
    urls = {
        "image": data_url(media["image"], "image/jpeg"),
        "video": data_url(media["video"], "video/mp4"),
    }
    config = ModelConfig(model=MODEL, mm_processor_cache_gb=0)
    processor = MULTIMODAL_REGISTRY.create_processor(config)
    connector = MediaConnector()
    decoders = {
        "image": processor.info.get_media_io("image"),
        # Uniform num_frames, as vLLM's side below: the model's bound qwen2_vl loader would
        # sample 2 frames a second instead.
        "video": processor.info.get_media_io(
            "video", {"num_frames": frames, "video_backend": "pyav"}
        ),
    }

    def mediaref_cold(
        modality: str, fused_on: bool, turbo_jpeg: bool = True, native_resize: bool = True
    ) -> Callable[[], Any]:
        def run() -> Any:
            os.environ["MEDIAREF_QWEN2_VL_FUSED"] = "1" if fused_on else "0"
            os.environ["MEDIAREF_TURBO_JPEG"] = "1" if turbo_jpeg else "0"
            os.environ["MEDIAREF_NATIVE_RESIZE"] = "1" if native_resize else "0"
            ref = connector.load_from_url(urls[modality], decoders[modality])
            out = processor.apply(processor.build_inputs(PROMPTS[modality], {modality: [ref]}))
            return out["mm_kwargs"][modality][0][PIXELS[modality]].data

        return run

    paths: dict[str, dict[str, Callable[[], Any]]] = {}
    for modality in ("image", "video"):
        paths[modality] = {
            "mediaref": mediaref_cold(modality, True),
            "mediaref fused off": mediaref_cold(modality, False),
        }
        if modality == "image":  # the one-call JPEG decode's share
            paths[modality]["mediaref, Pillow's decoder"] = mediaref_cold(modality, True, False)
        if _patch_rows.resize_in_rows():  # the native resize + rows pass's share
            paths[modality]["mediaref, torch's resize"] = mediaref_cold(
                modality, True, native_resize=False
            )
        vllm = vllm_cold(modality, urls[modality], frames)
        if vllm is not None:
            paths[modality]["vllm"] = vllm
    return paths


def vllm_cold(modality: str, url: str, frames: int) -> Callable[[], Any] | None:
    try:
        from vllm.engine.arg_utils import EngineArgs  # type: ignore[import-not-found]
        from vllm.multimodal import MULTIMODAL_REGISTRY as VLLM_REGISTRY  # type: ignore[import-not-found]
        from vllm.multimodal.media.connector import (  # type: ignore[import-not-found]
            MediaConnector as VllmConnector,
        )
    except ImportError as exc:  # not installed, or a package its multimodal layer imports is not
        print(f"no vLLM rows: {exc!r}")
        return None
    # The config `vllm serve MODEL_DIR` builds (its engine arguments' defaults), the cache off
    # so every call is a miss, as on mediaref's side.
    config = EngineArgs(model=MODEL, mm_processor_cache_gb=0).create_model_config()
    processor = VLLM_REGISTRY.create_processor(config)
    connector = VllmConnector(media_io_kwargs={"video": {"num_frames": frames}})

    def run() -> Any:
        if modality == "image":
            value: Any = connector.fetch_image(url)
        else:
            # vLLM's default loader with num_frames=32, as mediaref samples: naming the Qwen2-VL
            # processor would pick vLLM's Qwen loader, which samples 2 frames a second (8 here),
            # a quarter of the work.
            value = connector.fetch_video(url)
        # A list of items, as vLLM's chat parsing hands them over.
        items = processor.info.parse_mm_data({modality: [value]})
        out = processor(PROMPTS[modality], items)
        return out["mm_kwargs"][modality][0][PIXELS[modality]].data

    return run


def approx_report(media: dict[str, bytes], repeat: int) -> dict[str, dict[str, float]]:
    """Each approximate mode against the exact path: time, PSNR and max abs diff of the rows."""
    import numpy as np
    from transformers import AutoImageProcessor, AutoVideoProcessor

    from mediaref.models.qwen2_vl import _approx as approx

    sizing = {"max_pixels": 1280 * 28 * 28}  # vLLM's usual Qwen2-VL cap (1,280 tokens)
    photo = bm.load_photo("astronaut.png").resize((4032, 3024), Image.Resampling.BICUBIC)
    jpegs = {  # name -> (JPEG bytes, max_pixels): each drafted at 1/2 or less
        "12 MP JPEG (upscaled photo), 1280 tokens": (
            bm.encode_image(photo, "JPEG", quality=92),
            sizing["max_pixels"],
        ),
        "retina.jpg 1411x1411, 256 tokens": (bm.photo_path("retina.jpg").read_bytes(), 256 * 784),
        "hubble_deep_field.jpg 1000x872, 256 tokens": (
            bm.photo_path("hubble_deep_field.jpg").read_bytes(),
            256 * 784,
        ),
    }
    processor = AutoImageProcessor.from_pretrained(MODEL)

    def image_case(data: bytes, max_pixels: int) -> tuple[Callable[[], Any], Callable[[], Any]]:
        settings = fused.image_settings(processor, {**RAW, "max_pixels": max_pixels})
        assert settings is not None
        drafting = approx.DraftingImageMediaIO(
            factor=settings.factor, min_pixels=settings.min_pixels, max_pixels=max_pixels
        )

        def rows(image: Image.Image) -> torch.Tensor:
            target = fused.image_target(image, settings)
            assert target is not None
            return fused.image_rows(image, target, settings)[0]

        return (
            lambda: rows(ImageMediaIO().load_bytes(data)),
            lambda: rows(drafting.load_bytes(data)),
        )

    frames_count = int(media["frames"])
    video_processor = AutoVideoProcessor.from_pretrained(MODEL)
    clips = {  # name -> H.264 clip; 32 frames sampled from each
        "854x480": media["video"],
        "1920x1080": bm.encode_pan_clip(
            bm.load_photo("astronaut.png"), seconds=2.0, size=bm.FULL_HD
        ),
    }

    def video_case(clip: bytes, max_pixels: int) -> tuple[Callable[[], Any], Callable[[], Any]]:
        settings = fused.video_settings(
            video_processor, {**RAW, "max_pixels": max_pixels, "do_sample_frames": False}
        )
        assert settings is not None
        exact_decoder = VideoMediaIO(ImageMediaIO(), num_frames=frames_count)
        # As MEDIAREF_QWEN2_VL_APPROX=video_scale builds it: the same loader, its frames decoded
        # straight to their smart_resize target by the PyAV codec's frame collector.
        scaled_decoder = exact_decoder.with_frame_scaling(
            approx.smart_resize_scaling(
                factor=settings.factor,
                min_pixels=settings.min_pixels,
                max_pixels=settings.max_pixels,
            )
        )
        exact_target = fused.video_target(exact_decoder.load_bytes(clip)[0], settings)
        scaled = scaled_decoder.load_bytes(clip)[0]
        # At their target already (the fused path's resize is a no-op), so the same grid.
        assert scaled.shape[1:3] == exact_target
        assert fused.video_target(scaled, settings) == exact_target

        def rows(decoder: VideoMediaIO) -> torch.Tensor:
            frames = decoder.load_bytes(clip)[0]  # from the encoded bytes, as a cold request
            target = fused.video_target(frames, settings)
            assert target is not None
            return fused.video_rows(frames, target, settings)[0]

        return lambda: rows(exact_decoder), lambda: rows(scaled_decoder)

    calls: dict[str, Callable[[], Any]] = {}
    pairs: list[tuple[str, str, str]] = []
    for name, (data, max_pixels) in jpegs.items():
        calls[f"exact {name}"], calls[f"draft {name}"] = image_case(data, max_pixels)
        pairs.append((f"jpeg_draft: {name}", f"exact {name}", f"draft {name}"))
    for size, clip in clips.items():
        for tokens in (1280, 256):
            name = f"{frames_count}-frame {size} clip, {tokens} tokens"
            calls[f"exact {name}"], calls[f"scaled {name}"] = video_case(clip, tokens * 28 * 28)
            pairs.append((f"video_scale: {name}", f"exact {name}", f"scaled {name}"))
    outputs = {name: fn() for name, fn in calls.items()}
    medians = measure(calls, repeat)
    # CPU time too (every thread of the process): on a loaded host, or a server whose media pool
    # runs items side by side, the work saved counts as much as the latency.
    cpu = measure(calls, repeat, clock=time.process_time)
    report: dict[str, dict[str, float]] = {}
    for label, exact, fast in pairs:
        a, b = outputs[exact].numpy().astype(np.int16), outputs[fast].numpy().astype(np.int16)
        assert a.shape == b.shape, (a.shape, b.shape)
        mse = float(np.mean((a - b).astype(np.float64) ** 2))
        report[label] = {
            "exact_s": medians[exact],
            "approx_s": medians[fast],
            "exact_cpu_s": cpu[exact],
            "approx_cpu_s": cpu[fast],
            "psnr_db": 10 * np.log10(255.0**2 / mse) if mse else float("inf"),
            "max_abs_diff": float(np.abs(a - b).max()),
            "mean_abs_diff": float(np.abs(a - b).mean()),
        }
    return report


def pin_malloc_thresholds() -> None:
    """glibc's mmap threshold at 64 MiB and trim threshold at 256 MiB, no longer moving."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    m_trim_threshold, m_mmap_threshold = -1, -3  # malloc.h
    if not (libc.mallopt(m_mmap_threshold, 64 << 20) and libc.mallopt(m_trim_threshold, 256 << 20)):
        raise SystemExit("mallopt refused the thresholds (not glibc?)")


def measure(
    calls: dict[str, Callable[[], Any]],
    repeat: int,
    *,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, float]:
    samples = {name: bm.Samples() for name in calls}
    for _ in range(repeat):
        for name, fn in calls.items():
            gc.collect()
            start = clock()
            fn()
            samples[name].add(clock() - start)
    return {name: s.median for name, s in samples.items()}


class PairedRounds:
    """Per-call seconds and minor page faults of paths measured round by round, each path once a
    round, the order flipped every round (neither side always runs on the heap the other just
    left); ``collect_garbage``: a ``gc.collect()`` before every call, outside its time."""

    def __init__(
        self, calls: dict[str, Callable[[], Any]], repeat: int, *, collect_garbage: bool = False
    ) -> None:
        self.seconds: dict[str, list[float]] = {name: [] for name in calls}
        self.faults: dict[str, list[int]] = {name: [] for name in calls}
        names = list(calls)
        for round_index in range(repeat):
            for name in names if round_index % 2 == 0 else names[::-1]:
                if collect_garbage:
                    gc.collect()
                faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                start = time.perf_counter()
                calls[name]()
                self.seconds[name].append(time.perf_counter() - start)
                self.faults[name].append(
                    resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
                )

    def median(self, name: str) -> float:
        return statistics.median(self.seconds[name])

    def median_faults(self, name: str) -> float:
        return statistics.median(self.faults[name])

    def ratio(self, name: str, base: str) -> tuple[float, float, float]:
        """Median, first and third quartile of the rounds' own ``name / base`` ratios: a round's
        calls see the same machine, so the load of a shared host cancels out of them."""
        ratios = [a / b for a, b in zip(self.seconds[name], self.seconds[base], strict=True)]
        q1, median, q3 = statistics.quantiles(ratios, n=4)
        return median, q1, q3

    def ratio_text(self, name: str, base: str) -> str:
        if name == base:
            return "1.00x"
        median, q1, q3 = self.ratio(name, base)
        return f"{median:.2f}x ({q1:.2f}-{q3:.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9, help="timed rounds (each path once)")
    parser.add_argument(
        "--cold-repeat", type=int, default=41, help="rounds of the cold requests (paired)"
    )
    parser.add_argument("--batch", type=int, default=8, help="images per throughput call")
    parser.add_argument("--video-frames", type=int, default=32)
    parser.add_argument(
        "--threads", type=int, default=None, help="pin torch threads (default: leave them alone)"
    )
    parser.add_argument("--skip-cold", action="store_true", help="only the pixel paths")
    parser.add_argument(
        "--approx", action="store_true", help="also the approximate modes' speed and deviation"
    )
    parser.add_argument(
        "--pin-malloc",
        action="store_true",
        help="fix glibc's mmap/trim thresholds: no side's temporaries fault in fresh pages",
    )
    _charts.add_chart_argument(parser)
    args = parser.parse_args()
    if args.pin_malloc:
        pin_malloc_thresholds()
    try:
        import vllm  # type: ignore[import-not-found]

        vllm_version: str | None = vllm.__version__
    except ImportError:
        vllm_version = None
    import transformers

    print(
        f"python {platform.python_version()}, torch {torch.__version__} "
        f"({_torch_threads.describe()}, CPU kernels "
        f"{torch.backends.cpu.get_cpu_capability()}), transformers {transformers.__version__}, "
        f"media pool {get_media_executor()._max_workers} threads, "
        f"vllm {vllm_version or 'not importable'}, median of {args.repeat}, "
        f"malloc thresholds {'pinned' if args.pin_malloc else 'glibc defaults'}"
    )
    media = make_media(args.video_frames)
    results: dict[str, dict[str, float]] = {}
    paired: dict[str, float] = {}  # each chart group's paired ratio (HF torchvision or vLLM)
    for case, calls in pixel_paths(media, args.batch).items():
        outputs = {name: fn() for name, fn in calls.items()}  # warm-up, and the bytes
        assert torch.equal(outputs["fused"], outputs["hf-torchvision"]), case
        rounds = PairedRounds(calls, args.repeat, collect_garbage=True)
        results[case] = {name: rounds.median(name) for name in calls}
        paired[case] = rounds.ratio("hf-torchvision", "fused")[0]
        items = args.batch if case.endswith("images") else 1
        rows = [
            [name, bm.fmt_seconds(rounds.median(name)), f"{items / rounds.median(name):.1f}/s",
             bm.fmt_bytes(outputs[name].nbytes // items), rounds.ratio_text(name, "fused"),
             f"{rounds.median_faults(name):.0f}"]
            for name in calls
        ]  # fmt: skip
        print(
            f"\n{case} (encoded bytes -> pixel_values, decode included; {args.repeat} rounds; "
            "paired ratios: median and quartiles of the rounds')"
        )
        bm.print_table(["path", "time", "items/s", "bytes/item", "vs fused", "faults/call"], rows)
    cold: dict[str, dict[str, float]] = {}
    if not args.skip_cold:
        for modality, calls in cold_paths(media).items():
            outputs = {name: fn() for name, fn in calls.items()}
            for name, out in outputs.items():
                if name.startswith("mediaref"):
                    assert torch.equal(out, outputs["mediaref"]), (modality, name)
            fused_off = calls.pop("mediaref fused off")
            rounds = PairedRounds(calls, args.cold_repeat)
            reference = PairedRounds({"mediaref fused off": fused_off}, args.cold_repeat)
            cold[modality] = {name: rounds.median(name) for name in calls}
            if "vllm" in calls:
                paired[f"cold {modality}"] = rounds.ratio("vllm", "mediaref")[0]
            rows = []
            for measured in (rounds, reference):
                for name in measured.seconds:
                    if measured is rounds:
                        ratio = rounds.ratio_text(name, "mediaref")
                    else:  # its own rounds: a ratio of medians
                        ratio = f"{measured.median(name) / rounds.median('mediaref'):.2f}x"
                    # vLLM decodes a clip with its own backend (OpenCV for Qwen2-VL) and
                    # sampling, so its pixels (even its frame count) may differ: shapes beside.
                    rows.append(
                        [name, bm.fmt_seconds(measured.median(name)), ratio,
                         f"{measured.median_faults(name):.0f}",
                         "x".join(map(str, outputs[name].shape))]
                    )  # fmt: skip
            print(
                f"\ncold request, {modality} (fetch a data: URL + processor miss; "
                f"{args.cold_repeat} rounds; paired ratios: median and quartiles of the rounds')"
            )
            bm.print_table(["path", "time", "vs mediaref", "faults/call", "pixel_values"], rows)
    os.environ.pop("MEDIAREF_QWEN2_VL_FUSED", None)
    os.environ.pop("MEDIAREF_TURBO_JPEG", None)
    os.environ.pop("MEDIAREF_NATIVE_RESIZE", None)
    if args.approx:
        rows = [
            [mode, bm.fmt_seconds(r["exact_s"]), bm.fmt_seconds(r["approx_s"]),
             f"{r['exact_s'] / r['approx_s']:.2f}x",
             f"{r['exact_cpu_s'] / r['approx_cpu_s']:.2f}x", f"{r['psnr_db']:.1f} dB",
             f"{r['max_abs_diff']:.0f}", f"{r['mean_abs_diff']:.2f}"]
            for mode, r in approx_report(media, args.repeat).items()
        ]  # fmt: skip
        print("\napproximate modes against the exact path (uint8 rows; token budget = max_pixels)")
        bm.print_table(
            ["mode", "exact", "approx", "speed-up", "CPU", "PSNR", "max |diff|", "mean |diff|"],
            rows,
        )
    if args.chart:
        draw_chart(args.chart, results, cold, paired, vllm_version, args.batch)


def draw_chart(
    path: Path,
    results: dict[str, dict[str, float]],
    cold: dict[str, dict[str, float]],
    paired: dict[str, float],
    vllm_version: str | None,
    batch: int,
) -> None:
    groups, mine, torchvision, other = [], [], [], []
    ratios: list[float | None] = []
    labels = {
        "image": "1080p JPEG",
        f"{batch} images": f"{batch} x 1080p JPEG",
        "video": "32-frame 480p clip",
    }
    for case, label in labels.items():
        groups.append(f"{label}\nbytes -> pixels")
        mine.append(results[case]["fused"])
        torchvision.append(results[case]["hf-torchvision"])
        other.append(results[case].get("hf-pil", 0.0))
        ratios.append(paired.get(case))
    for modality, medians in cold.items():
        groups.append(f"{labels[modality]}\ncold request")
        mine.append(medians["mediaref"])
        torchvision.append(medians.get("vllm", 0.0))
        other.append(0.0)
        ratios.append(paired.get(f"cold {modality}"))
    series = {
        "mediaref (fused, exact)": mine,
        f"HF torchvision / vLLM {vllm_version or '(absent)'}": torchvision,
        "HF PIL": other,
    }
    # A bar with nothing behind it (no PIL video processor; the PIL path is not a request)
    # says so rather than "0".
    bar_labels = {
        name: [_charts.format_seconds(v) if v > 0 else "n/a" for v in values]
        for name, values in series.items()
    }
    _charts.grouped_bars(
        path,
        title=(
            "Qwen2-VL's fused exact path: bytes -> pixel_values, and a cold request; "
            + _torch_threads.describe()
        ),
        ratios=ratios,
        ratio_caption=(
            "ratio: the second bar's over mediaref's (HF torchvision; vLLM for a cold request), "
            "paired: the median of the rounds' own ratios"
        ),
        groups=groups,
        series=series,
        bar_labels=bar_labels,
        ylabel="median time",
        seconds=True,
        footnote=_charts.machine_note(),
    )


if __name__ == "__main__":
    main()
