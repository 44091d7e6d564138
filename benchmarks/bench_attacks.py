"""What single hostile payloads cost: peak RSS, outcome and time, one fresh process per attack.

    python benchmarks/bench_attacks.py                    # this checkout's src/
    python benchmarks/bench_attacks.py --src OLD/src      # another tree, e.g. before a fix:
                                                          #   git archive 40e810c src | tar -x -C OLD

Attacks:
  gzip_bomb    an HTTP body of ~1 MB gzip inflating to 1 GiB, decoder cap 64 MiB (loopback origin)
  h264_bomb    51 KB of H.264: 32 black 4096x4096 frames, every frame asked for (num_frames=-1)
  jpeg_frames  a video/jpeg data payload of 40 2048x2048 JPEG frames, num_frames=-1
  flac_bomb    476 KB of FLAC: 300 s of 8-channel 192 kHz silence (5.5 GB of float32 PCM)
  pool_starve  120 fetches stalled on one origin, then 3 fetches to fresh healthy origins

Each attack runs in its own interpreter, so its peak RSS (``ru_maxrss``) is its own. Payloads are
built before the baseline is read; "peak" is what fetching and decoding added. The test suite's
media helpers (``tests/``) make the payloads and the loopback origins.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ATTACKS = ("gzip_bomb", "h264_bomb", "jpeg_frames", "flac_bomb", "pool_starve")

# The child: builds one payload, then measures fetching/decoding it.
CHILD = r'''
import asyncio, base64, io, resource, sys, time, zlib
sys.path.insert(0, TESTS)
case = sys.argv[1]
MIB = 1 << 20

def peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

def outcome_of(fn):
    start = time.perf_counter()
    try:
        result = fn()
        outcome = f"ok: {result}"
    except Exception as exc:
        outcome = f"{type(exc).__name__}: {str(exc)[:90]}"
    return outcome, time.perf_counter() - start

if case == "gzip_bomb":
    from _http_server import MediaServer
    from _raw_media import RawMediaIO
    from mediaref.media.connector import MediaConnector
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    body = b"".join([compressor.compress(bytes(MIB)) for _ in range(1024)] + [compressor.flush()])
    server = MediaServer().start()
    url = server.add_encoded("bomb", body, "gzip")
    base = peak_mib()
    outcome, seconds = outcome_of(lambda: len(MediaConnector(allow_private_ips=True).fetch_image(
        url, RawMediaIO(max_bytes=64 * MIB)).data))
    extra = f", {server.count('/encoded/bomb')} request(s) to the origin"
    server.stop()
elif case == "pool_starve":
    from _http_server import MediaServer
    from _raw_media import RawMediaIO
    from mediaref.media._transport.http_client import MediaHTTPClient
    from mediaref.media.connector import MediaConnector

    async def healthy(connector):
        times = []
        for _ in range(3):
            fresh = MediaServer().start()
            url = fresh.add_file("x.bin", b"x" * 100_000)
            start = time.perf_counter()
            try:
                await connector.load_from_url_async(url, RawMediaIO(), fetch_timeout=5)
                times.append(f"{(time.perf_counter() - start) * 1e3:.1f} ms")
            except Exception as exc:
                times.append(f"{type(exc).__name__} after {time.perf_counter() - start:.1f} s")
            fresh.stop()
        return times

    async def main():
        stalled_origin = MediaServer().start()
        client = MediaHTTPClient()
        connector = MediaConnector(client, allow_private_ips=True)
        stalled = [asyncio.create_task(connector.load_from_url_async(
            stalled_origin.url("/slow"), RawMediaIO(), fetch_timeout=120)) for _ in range(120)]
        deadline = time.monotonic() + 10
        while stalled_origin.count("/slow") < 32 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.5)
        held = stalled_origin.count("/slow")
        times = await healthy(connector)
        for task in stalled:
            task.cancel()
        await asyncio.gather(*stalled, return_exceptions=True)
        await client.close()
        stalled_origin.stop()
        return f"stalled origin holds {held} connections; healthy fetches: {', '.join(times)}"

    base = peak_mib()
    outcome, seconds = outcome_of(lambda: asyncio.run(main()))
    extra = ""
else:
    from mediaref.media.audio import AudioMediaIO
    from mediaref.media.image import ImageMediaIO
    from mediaref.media.video import VideoMediaIO
    if case == "h264_bomb":
        from _video_samples import make_black_clip
        data = make_black_clip(4096, 4096, 32)
        run = lambda: VideoMediaIO(ImageMediaIO(), num_frames=-1).load_bytes(data)[0].shape
    elif case == "jpeg_frames":
        from PIL import Image
        buffer = io.BytesIO()
        Image.new("RGB", (2048, 2048)).save(buffer, "JPEG", quality=50)
        text = ",".join([base64.b64encode(buffer.getvalue()).decode()] * 40)
        data = text.encode()
        run = lambda: VideoMediaIO(ImageMediaIO(), num_frames=-1).load_base64("video/jpeg", text)[0].shape
    else:
        import numpy as np
        import soundfile as sf
        buffer = io.BytesIO()
        block = np.zeros((192_000, 8), np.int16)
        with sf.SoundFile(buffer, "w", 192_000, 8, format="FLAC", subtype="PCM_16") as out:
            for _ in range(300):
                out.write(block)
        data = buffer.getvalue()
        run = lambda: AudioMediaIO().load_bytes_ref(data).decode()[0].shape
    base = peak_mib()
    outcome, seconds = outcome_of(run)
    extra = f", payload {len(data) / 1e3:.0f} KB"
print(f"{case:12} peak RSS +{peak_mib() - base:6.0f} MiB  {seconds:6.2f} s  {outcome}{extra}")
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", type=Path, default=REPO / "src", help="the mediaref tree to attack")
    parser.add_argument("attacks", nargs="*", metavar="ATTACK", help=f"some of {', '.join(ATTACKS)}")
    args = parser.parse_args()
    unknown = sorted(set(args.attacks) - set(ATTACKS))
    if unknown:
        parser.error(f"unknown attacks {unknown}; choose from {', '.join(ATTACKS)}")
    print(f"mediaref from {args.src}")
    child = CHILD.replace("TESTS", repr(str(REPO / "tests")))
    env_path = str(args.src.resolve())
    for attack in args.attacks or ATTACKS:
        subprocess.run(
            [sys.executable, "-c", f"import sys; sys.path.insert(0, {env_path!r})\n{child}", attack],
            check=False,
            timeout=900,
        )


if __name__ == "__main__":
    main()
