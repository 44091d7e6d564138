"""An image decode on a pool thread while another thread runs Python: what the GIL costs it.

The media pool decodes while the rest of the process keeps running Python (the renderer's
worker, the event loop, a tokenizer). A decode thread needs the GIL back after every piece of
the payload Pillow feeds its decoder, and a thread running Python gives it up only every switch
interval (5 ms). Pillow feeds 64 KiB at a time, and a PNG one IDAT chunk at a time (its encoder
writes 64 KiB chunks); mediaref feeds up to ``DECODE_FEED_BYTES`` (4 MiB) and joins a PNG's
chunks first (``png_with_one_idat``), most images in one feed. Measured here, in one process, on
the same 1080p photo (scikit-image's astronaut, upscaled) as a JPEG (q=90) and as a PNG, each
decode submitted to a one-thread pool and waited for, as the processor waits for a miss:

* alone, and beside a thread running a pure-Python loop (the worst case of a busy neighbour);
* mediaref's ``ImageMediaIO`` ref decode as it ships (the ref made beforehand, as at fetch
  time; an RGB JPEG decoded by one libjpeg-turbo call, ``media/image/_jpeg_turbo.py``), the
  JPEG through Pillow's decoder instead (``MEDIAREF_TURBO_JPEG=0``), Pillow's decoder with
  Pillow's feeds (64 KiB, a PNG's chunks as they are), and vLLM 0.33.0's
  ``ImageMediaIO.load_bytes`` (its whole decode) when vLLM is importable.

Run: ``python benchmarks/bench_decode_gil.py [--repeat N]``. Medians over N decodes.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import _bench_media as bm
from mediaref.media.image import ImageMediaIO, _header, _pixels

PILLOW_FEED_BYTES = 64 << 10
"""Pillow's own feed (``ImageFile.MAXBLOCK``)."""


@contextmanager
def busy_python_thread() -> Iterator[None]:
    """A thread running Python bytecode (holding the GIL but for the forced switches)."""
    stop = threading.Event()

    def spin() -> None:
        total = 0
        while not stop.is_set():
            for i in range(1000):
                total += i

    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@contextmanager
def pillow_decoder() -> Iterator[None]:
    """mediaref's decode with every JPEG left to Pillow's decoder (``MEDIAREF_TURBO_JPEG=0``)."""
    previous = os.environ.get("MEDIAREF_TURBO_JPEG")
    os.environ["MEDIAREF_TURBO_JPEG"] = "0"
    try:
        yield
    finally:
        if previous is None:
            del os.environ["MEDIAREF_TURBO_JPEG"]
        else:
            os.environ["MEDIAREF_TURBO_JPEG"] = previous


@contextmanager
def pillow_feeds() -> Iterator[None]:
    """mediaref's decode through Pillow's decoder with Pillow's own feeding: 64 KiB feeds, a
    PNG's chunks as they are."""
    feed, merge = _pixels.DECODE_FEED_BYTES, _header.png_with_one_idat
    _pixels.DECODE_FEED_BYTES = PILLOW_FEED_BYTES
    _header.png_with_one_idat = lambda data: data
    try:
        with pillow_decoder():
            yield
    finally:
        _pixels.DECODE_FEED_BYTES, _header.png_with_one_idat = feed, merge


def paths(data: bytes) -> dict[str, Callable[[], Callable[[], Any]]]:
    """Per path, a maker of one decode call (a fresh ref each: a ref memoizes its decode; the
    ref's fetch-time work, its key and header checks, is not the decode's)."""
    mediaref_io = ImageMediaIO()

    def mediaref() -> Callable[[], Any]:
        return mediaref_io.load_bytes_ref(data).decode

    def within(setting: Callable[[], AbstractContextManager[None]]) -> Callable[[], Any]:
        decode = mediaref()

        def call() -> Any:
            with setting():
                return decode()

        return call

    calls: dict[str, Callable[[], Callable[[], Any]]] = {"mediaref": mediaref}
    if data.startswith(b"\xff\xd8"):  # an RGB JPEG: its one-call decode against Pillow's
        calls["mediaref, Pillow's decoder"] = lambda: within(pillow_decoder)
    calls["mediaref, Pillow's decoder and feeds"] = lambda: within(pillow_feeds)
    try:
        from vllm.multimodal.media.image import (  # type: ignore[import-not-found]
            ImageMediaIO as VllmImageMediaIO,
        )
    except ImportError:
        return calls
    vllm_io = VllmImageMediaIO()
    calls["vllm 0.33.0"] = lambda: lambda: vllm_io.load_bytes(data)
    return calls


def median_on_pool(
    pool: ThreadPoolExecutor, make_call: Callable[[], Callable[[], Any]], repeat: int
) -> float:
    samples = bm.Samples()
    pool.submit(make_call()).result()  # warm-up
    for _ in range(repeat):
        call = make_call()
        start = time.perf_counter()
        pool.submit(call).result()
        samples.add(time.perf_counter() - start)
    return samples.median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    photo = bm.upscale(bm.load_photo("astronaut.png"), bm.FULL_HD)
    print(f"1080p photo; median of {args.repeat} decodes on a pool thread")
    rows = []
    with ThreadPoolExecutor(1) as pool:
        for image_format in ("JPEG", "PNG"):
            data = bm.encode_image(photo, image_format)
            image = f"{image_format}, {bm.fmt_bytes(len(data))}"
            for name, fn in paths(data).items():
                alone = median_on_pool(pool, fn, args.repeat)
                with busy_python_thread():
                    beside = median_on_pool(pool, fn, args.repeat)
                rows.append(
                    [
                        image,
                        name,
                        bm.fmt_seconds(alone),
                        bm.fmt_seconds(beside),
                        f"{beside / alone:.2f}x",
                    ]
                )
    bm.print_table(["image", "decode", "alone", "beside busy Python", "slowdown"], rows)


if __name__ == "__main__":
    main()
