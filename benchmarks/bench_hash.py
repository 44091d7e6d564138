"""Hashing a fetched item: as a MediaRef (never decoded) vs vLLM 0.33's decode-then-hash.

vLLM 0.33 decodes fetched media at fetch, on every request, hit or miss, and then hashes what its
decoder returns (``MediaWithBytes``): an image's encoded bytes, a video's bytes (or its sampled
frames when those are smaller) with the frames' metadata. mediaref hashes a fetched image as
vLLM does, from the bytes, without decoding (the digest is vLLM's), and a video by the ref's
key, derived from the encoded bytes at fetch time. Both run here, in one process, on the same
payloads:

* a real photo (scikit-image's astronaut) upscaled to 1920x1080, as JPEG (q=90) and PNG;
* a 2 s, 30 fps, 1280x720 H.264 clip panning across that photo, decoded to 32 frames (vLLM's
  default ``num_frames``).

Run: ``python benchmarks/bench_hash.py [--repeat N] [--chart PATH]``. Timings are medians over N
runs; ``--chart PATH`` draws the three costs per item (log scale) as a PNG.
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import skimage
from PIL import Image

import _charts
from mediaref.hasher import MultiModalHasher
from mediaref.media.base import MediaWithBytes
from mediaref.media.image import ImageMediaIO
from mediaref.media.video import VideoMediaIO

MODEL_ID = "Qwen/Qwen2-VL-2B-Instruct"


def photo_1080p() -> Image.Image:
    # The file ships inside scikit-image, so no download is needed.
    path = Path(skimage.__file__).parent / "data" / "astronaut.png"
    with Image.open(path) as image:
        photo: Image.Image = image.convert("RGB").resize((1920, 1080), Image.Resampling.LANCZOS)
        return photo


def encode_image(image: Image.Image, fmt: str) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return buffer.getvalue()


def encode_clip_720p(photo: Image.Image, seconds: float = 2.0, fps: int = 30) -> bytes:
    import av

    source = np.asarray(photo)  # 1080 x 1920: pan a 720 x 1280 window across it
    frames = int(seconds * fps)
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = 1280, 720, "yuv420p"
        stream.options = {"preset": "veryfast", "crf": "23"}
        for i in range(frames):
            x = (source.shape[1] - 1280) * i // max(frames - 1, 1)
            y = (source.shape[0] - 720) * i // max(frames - 1, 1)
            window = np.ascontiguousarray(source[y : y + 720, x : x + 1280])
            for packet in stream.encode(av.VideoFrame.from_ndarray(window, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return buffer.getvalue()


def median_seconds(fn: Callable[[], Any], repeat: int) -> float:
    fn()  # warm-up: imports, first-call allocations
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def bench_item(name: str, modality: str, data: bytes, media_io: Any, repeat: int) -> dict[str, Any]:
    ref = media_io.load_bytes_ref(data)  # fetch time: header parse + key derivation, once

    def lazy_hash() -> str:
        return MultiModalHasher.hash_kwargs("blake3", model_id=MODEL_ID, **{modality: ref})

    def derive_key() -> Any:
        return media_io.load_bytes_ref(data)

    def decode() -> Any:
        return media_io.load_bytes(data)

    decoded = decode()

    wrapped = (
        MediaWithBytes(decoded, data)
        if modality == "image"
        else (MediaWithBytes(decoded[0], data), decoded[1])
    )

    def hash_decoded() -> str:
        return MultiModalHasher.hash_kwargs("blake3", model_id=MODEL_ID, **{modality: wrapped})

    def vllm_item() -> Any:  # what vLLM's decoder hands its hasher
        if modality == "image":
            return MediaWithBytes(decode(), data)
        frames, metadata = decode()
        return (MediaWithBytes(frames, data), metadata)

    def eager_hash() -> str:  # vLLM 0.33: decode every request, then hash its MediaWithBytes
        return MultiModalHasher.hash_kwargs("blake3", model_id=MODEL_ID, **{modality: vllm_item()})

    result: dict[str, Any] = {
        "item": name,
        "payload_kib": len(data) / 1024,
        "lazy_hash_s": median_seconds(lazy_hash, repeat * 20),
        "key_derivation_s": median_seconds(derive_key, repeat),
        "eager_hash_s": median_seconds(eager_hash, repeat),
        "decode_s": median_seconds(decode, repeat),
        "decoded_hash_s": median_seconds(hash_decoded, repeat),
    }
    result["ratio"] = result["eager_hash_s"] / result["lazy_hash_s"]
    result["ratio_incl_key"] = result["eager_hash_s"] / (
        result["lazy_hash_s"] + result["key_derivation_s"]
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    _charts.add_chart_argument(parser)
    args = parser.parse_args()

    photo = photo_1080p()
    image_io = ImageMediaIO()
    video_io = VideoMediaIO(image_io, num_frames=32)
    items = [
        ("1080p JPEG", "image", encode_image(photo, "JPEG"), image_io),
        ("1080p PNG", "image", encode_image(photo, "PNG"), image_io),
        ("720p H.264, 2 s, 32 frames", "video", encode_clip_720p(photo), video_io),
    ]
    header = (
        f"{'item':<28}{'payload':>10}{'MediaRef hash':>15}{'key (once)':>12}"
        f"{'decode+hash':>13}{'(decode)':>11}{'(hash)':>10}{'ratio':>10}{'ratio w/ key':>14}"
    )
    print(header)
    print("-" * len(header))
    results = []
    for name, modality, data, media_io in items:
        r = bench_item(name, modality, data, media_io, args.repeat)
        results.append(r)
        print(
            f"{r['item']:<28}{r['payload_kib']:>8.0f}KiB{r['lazy_hash_s'] * 1e6:>13.1f}us"
            f"{r['key_derivation_s'] * 1e3:>10.2f}ms{r['eager_hash_s'] * 1e3:>11.2f}ms"
            f"{r['decode_s'] * 1e3:>9.2f}ms{r['decoded_hash_s'] * 1e3:>8.2f}ms"
            f"{r['ratio']:>9.0f}x{r['ratio_incl_key']:>13.1f}x"
        )
    print(
        "\nMediaRef hash: hash_kwargs on the ref (an image: its bytes, vLLM's digest; a video: its\n"
        "key). key (once): load_bytes_ref, paid at fetch. decode+hash: vLLM 0.33's per-request\n"
        "cost. ratio = decode+hash / MediaRef hash; "
        "'w/ key' adds the one-time key derivation to the MediaRef side."
    )
    if args.chart:
        draw_chart(args.chart, results, args.repeat)


def draw_chart(path: Path, results: list[dict[str, Any]], repeat: int) -> None:
    _charts.grouped_bars(
        path,
        title="Hashing a fetched item: MediaRef (never decoded) vs vLLM's decode + hash",
        ratio_caption="decode + hash / MediaRef hash, medians",
        groups=[r["item"].replace(", 2 s, ", "\n2 s, ") for r in results],
        series={
            "MediaRef hash (mediaref)": [r["lazy_hash_s"] for r in results],
            "decode + hash (vLLM 0.33, every request)": [r["eager_hash_s"] for r in results],
            "key derivation (mediaref, once at fetch)": [r["key_derivation_s"] for r in results],
        },
        ylabel="time per item (median)",
        seconds=True,
        footnote=_charts.machine_note(),
    )


if __name__ == "__main__":
    main()
