"""Generate ``src/mediaref/assets/clip.mp4``, the shipped example request's video (run once).

A 2-second, 8 fps, 160x120 H.264 clip of a bright disc moving across a gradient: small (a few KB),
deterministic in content, and decodable by every video backend mediaref supports. The committed
file is what ``mediaref render`` (the Quick start) renders; rerun this only to change it::

    python scripts/make_example_clip.py
"""

from __future__ import annotations

import argparse
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

WIDTH, HEIGHT, FPS, SECONDS = 160, 120, 8, 2
OUT = Path(__file__).resolve().parent.parent / "src" / "mediaref" / "assets" / "clip.mp4"


def frame(index: int, total: int) -> np.ndarray:
    ys, xs = np.mgrid[0:HEIGHT, 0:WIDTH]
    pixels = np.empty((HEIGHT, WIDTH, 3), dtype=np.uint8)
    pixels[..., 0] = (xs * 255 // (WIDTH - 1)).astype(np.uint8)
    pixels[..., 1] = (ys * 255 // (HEIGHT - 1)).astype(np.uint8)
    pixels[..., 2] = 96
    cx = 20 + (WIDTH - 40) * index / max(total - 1, 1)
    disc = (xs - cx) ** 2 + (ys - HEIGHT / 2) ** 2 < 15**2
    pixels[disc] = 255
    return pixels


def write_clip(path: Path) -> int:
    total = FPS * SECONDS
    with av.open(str(path), mode="w", format="mp4") as output:
        stream = output.add_stream("libx264", rate=Fraction(FPS), options={"crf": "30"})
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        for index in range(total):
            video_frame = av.VideoFrame.from_ndarray(frame(index, total), format="rgb24")
            for packet in stream.encode(video_frame):
                output.mux(packet)
        for packet in stream.encode(None):
            output.mux(packet)
    return path.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    print(f"{args.out}: {write_clip(args.out)} bytes")


if __name__ == "__main__":
    main()
