"""A processor miss, side by side: mediaref with ``mm_device_do_normalize`` on and off, and vLLM 0.33.0.

    python benchmarks/bench_processor_miss.py [--repeat 15] [--threads 1] [--json PATH] [--chart PATH]

What a miss costs once the media is decoded: the whole ``apply`` of one request (hash, HF
processor, prompt updates) on the built-in Qwen2-VL model (the real ``Qwen2VLProcessor`` with
Qwen2-VL-2B's configs, so a 1080p image is processed at full size), with no processor cache, so
every call is a miss. Items: a 1920x1080 JPEG (q90, a scikit-image photo) and a 32-frame 854x480
H.264 clip panning across one, decoded once, before timing, by mediaref's decoders; both libraries
get the same decoded pixels. mediaref gets them as a decoded ``MediaRef`` (it hashes the key, its
design), vLLM as the PIL image / ``(frames, metadata)`` it decodes at fetch (it hashes the pixels,
its design). The paths run round-robin, one call each per round, so load drift hits all alike.

Rows: ``mediaref/device`` (the default for Qwen2-VL: HF skips rescale + normalize, uint8 out),
``mediaref/cpu`` (``mm_device_do_normalize=False``: HF normalizes, fp32 out), and, when vLLM
imports, ``vllm/device`` and ``vllm/cpu`` (vLLM's config as ``vllm serve MODEL_DIR`` builds it,
``EngineArgs(...).create_model_config()``, with ``mm_device_do_normalize`` set; its cpu path also
casts to bf16). The ratio column is vLLM's time over mediaref's for the same toggle: above 1 means
mediaref's miss is faster. By default neither library's threads are pinned, the protocol of the
ratios docs/performance.md quotes; ``--threads N`` sets ``OMP_NUM_THREADS`` and torch's count
before either library loads, a comparison at N threads each
(docs/notes/measuring_against_vllm.md).

Environments: the mediaref rows run in mediaref's own venv (``pip install -e ".[bench]"``). The
vLLM rows need vLLM 0.33.0 and mediaref together in a second venv outside the repository, and this
script run with that venv's interpreter; docs/performance.md ("The vLLM 0.33.0 side") gives the
recipe. With that venv one directory up::

    VLLM_TARGET_DEVICE=cpu $VLLM_VENV/bin/python benchmarks/bench_processor_miss.py

(vLLM goes into that venv with ``--no-deps``, after the torch it is built against: a plain
``pip install vllm`` would replace torch with the wheel's pinned build. Where vLLM does not
import, this script and ``bench_fast_path.py`` print "no vLLM rows" and the error, which names
the module still missing.)

vLLM's multimodal layer runs on the CPU there (no GPU is needed). The main test suite never
imports vLLM. ``--chart PATH`` draws each item's miss per toggle, mediaref beside vLLM, as a PNG
(matplotlib must be installed in the venv that runs the script).
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# First: it sets OMP_NUM_THREADS from --threads, which torch reads once when it loads.
import _torch_threads

# isort: split
import torch

import _bench_media as bm
import _charts

_torch_threads.pin_torch()

from mediaref.media.image import ImageMediaIO  # noqa: E402
from mediaref.media.video import VideoMediaIO  # noqa: E402
from mediaref.models.builtin import builtin_model_path  # noqa: E402
from mediaref.processing.context import ModelConfig  # noqa: E402
from mediaref.registry import MULTIMODAL_REGISTRY  # noqa: E402

PROMPTS = {
    "image": "<|vision_start|><|image_pad|><|vision_end|>Describe this image.",
    "video": "<|vision_start|><|video_pad|><|vision_end|>Describe this video.",
}
PIXEL_FIELDS = {"image": "pixel_values", "video": "pixel_values_videos"}
TOGGLES = {"device": True, "cpu": False}


def make_items(video_frames: int) -> dict[str, tuple[Any, Any]]:
    """modality -> (a decoded MediaRef for mediaref, the decoded value for vLLM)."""
    photo = bm.load_photo("astronaut.png")
    jpeg = bm.encode_image(bm.upscale(photo, bm.FULL_HD), "JPEG", quality=90)
    clip = bm.encode_pan_clip(bm.load_photo("coffee.png"), seconds=4.0, size=(854, 480))
    image_ref = ImageMediaIO().load_bytes_ref(jpeg)
    video_ref = VideoMediaIO(ImageMediaIO(), num_frames=video_frames).load_bytes_ref(clip)
    return {"image": (image_ref, image_ref.decode()), "video": (video_ref, video_ref.decode())}


def mediaref_call(toggle: bool, modality: str, ref: Any) -> Callable[[], Any]:
    config = ModelConfig(
        model=str(builtin_model_path("qwen2_vl")),
        mm_processor_cache_gb=0,
        mm_device_do_normalize=toggle,
    )
    processor = MULTIMODAL_REGISTRY.create_processor(config)
    assert processor.info.mm_device_do_normalize is toggle

    def run() -> Any:
        out = processor.apply(processor.build_inputs(PROMPTS[modality], {modality: [ref]}))
        return out["mm_kwargs"][modality][0][PIXEL_FIELDS[modality]].data

    return run


@functools.cache
def vllm_modules() -> tuple[Any, Any] | None:
    """vLLM's ``EngineArgs`` and multimodal registry; None, said once, where vLLM does not
    import (it is installed only in the comparison venv: see the docstring)."""
    try:
        from vllm.engine.arg_utils import EngineArgs  # type: ignore[import-not-found]
        from vllm.multimodal import MULTIMODAL_REGISTRY  # type: ignore[import-not-found]
    except ImportError as exc:  # not installed, or a package its multimodal layer imports is not
        print(f"no vLLM rows: {exc!r}")
        return None
    return EngineArgs, MULTIMODAL_REGISTRY


def vllm_call(toggle: bool, modality: str, value: Any) -> Callable[[], Any] | None:
    modules = vllm_modules()
    if modules is None:
        return None
    EngineArgs, VLLM_REGISTRY = modules
    # The config `vllm serve MODEL_DIR` builds (its engine arguments' defaults), with the cache
    # off so every call is a miss and the toggle under test: what mediaref's side sets too.
    config = EngineArgs(
        model=str(builtin_model_path("qwen2_vl")),
        mm_processor_cache_gb=0,
        mm_device_do_normalize=toggle,
    ).create_model_config()
    assert config.multimodal_config is not None
    assert config.multimodal_config.mm_device_do_normalize is toggle
    processor = VLLM_REGISTRY.create_processor(config)

    def run() -> Any:
        items = processor.info.parse_mm_data({modality: value})  # the request's parse, as served
        out = processor(PROMPTS[modality], items)
        return out["mm_kwargs"][modality][0][PIXEL_FIELDS[modality]].data

    return run


def check_outputs(outputs: dict[str, torch.Tensor]) -> None:
    """Outside the timed region: every path made the same pixels, up to its dtype."""
    reference = outputs["mediaref/cpu"].float()
    for name, pixels in outputs.items():
        assert pixels.shape == reference.shape, (name, pixels.shape, reference.shape)
        expected_dtype = torch.uint8 if name.endswith("/device") else None
        assert expected_dtype is None or pixels.dtype == expected_dtype, (name, pixels.dtype)
    if "vllm/device" in outputs:
        assert torch.equal(outputs["vllm/device"], outputs["mediaref/device"])


def run_modality(modality: str, items: dict[str, tuple[Any, Any]], repeat: int) -> dict[str, Any]:
    ref, value = items[modality]
    calls: dict[str, Callable[[], Any]] = {}
    for label, toggle in TOGGLES.items():
        calls[f"mediaref/{label}"] = mediaref_call(toggle, modality, ref)
        vllm = vllm_call(toggle, modality, value)
        if vllm is not None:
            calls[f"vllm/{label}"] = vllm
    outputs = {name: fn() for name, fn in calls.items()}  # warm-up, and the outputs to compare
    check_outputs(outputs)
    samples: dict[str, bm.Samples] = {name: bm.Samples() for name in calls}
    for _ in range(repeat):
        for name, fn in calls.items():
            gc.collect()
            start = time.perf_counter()
            fn()
            samples[name].add(time.perf_counter() - start)
    medians = {name: s.median for name, s in samples.items()}
    result: dict[str, Any] = {
        "median_s": medians,
        "pixel_bytes": {n: o.nbytes for n, o in outputs.items()},
    }
    result["device_vs_cpu_speedup"] = medians["mediaref/cpu"] / medians["mediaref/device"]
    if "vllm/device" in medians:
        result["vllm_over_mediaref"] = {
            label: medians[f"vllm/{label}"] / medians[f"mediaref/{label}"] for label in TOGGLES
        }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--repeat", type=int, default=15, help="timed rounds (each path once per round)"
    )
    parser.add_argument("--video-frames", type=int, default=32)
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="pin torch threads on both sides (set before import); default: leave them alone",
    )
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    _charts.add_chart_argument(parser)
    args = parser.parse_args()

    try:
        import vllm  # type: ignore[import-not-found]  # optional, as above

        vllm_version: str | None = vllm.__version__
    except ImportError:
        vllm_version = None
    print(
        f"python {platform.python_version()}, torch {torch.__version__} ({_torch_threads.describe()}), "
        f"vllm {vllm_version or 'not importable: mediaref rows only'}, median of {args.repeat}"
    )
    items = make_items(args.video_frames)
    report: dict[str, Any] = {
        "vllm": vllm_version,
        "torch": torch.__version__,
        "repeat": args.repeat,
        "video_frames": args.video_frames,
        "threads": _torch_threads.describe(),
    }
    for modality in ("image", "video"):
        result = run_modality(modality, items, args.repeat)
        report[modality] = result
        rows = []
        for name, median in result["median_s"].items():
            label = name.split("/")[1]
            ratio = (
                result.get("vllm_over_mediaref", {}).get(label)
                if name.startswith("mediaref")
                else None
            )
            rows.append([name, bm.fmt_seconds(median), bm.fmt_bytes(result["pixel_bytes"][name]),
                         f"{ratio:.2f}x" if ratio is not None else ""])  # fmt: skip
        print(
            f"\n{modality}: mediaref device path {result['device_vs_cpu_speedup']:.2f}x its CPU path"
        )
        bm.print_table(["path", "miss", "pixels", "vllm / mediaref"], rows)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(report, handle, indent=2)
    if args.chart:
        draw_chart(args.chart, report)


def draw_chart(path: Path, report: dict[str, Any]) -> None:
    items = {"image": "1080p JPEG", "video": f"{report['video_frames']}-frame 480p clip"}
    groups, mine, theirs = [], [], []
    for modality, item in items.items():
        medians = report[modality]["median_s"]
        for toggle in TOGGLES:
            groups.append(f"{item}\n{toggle}")
            mine.append(medians[f"mediaref/{toggle}"])
            theirs.append(medians.get(f"vllm/{toggle}", 0.0))
    series = {"mediaref": mine}
    if report["vllm"]:
        series[f"vLLM {report['vllm']}"] = theirs
    _charts.grouped_bars(
        path,
        title=(f"A processor miss on Qwen2-VL (decoded media, no cache), {report['threads']}"),
        ratio_caption="vLLM / mediaref, medians; device = mm_device_do_normalize on (the default)",
        groups=groups,
        series=series,
        ylabel="one apply (median)",
        seconds=True,
        log=False,
        footnote=_charts.machine_note(),
    )


if __name__ == "__main__":
    main()
