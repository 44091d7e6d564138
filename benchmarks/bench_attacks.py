"""What single hostile payloads cost: peak RSS, outcome and time, one fresh process per attack.

    python benchmarks/bench_attacks.py                    # this checkout's src/
    python benchmarks/bench_attacks.py --src OLD/src      # another tree, e.g. before a fix:
                                                          #   git archive 40e810c src | tar -x -C OLD
    python benchmarks/bench_attacks.py --before OLD/src --chart docs/img/attacks.png
                                                          # both trees, and the peak RSS chart

Attacks:
  gzip_bomb    an HTTP body of ~1 MB gzip inflating to 1 GiB, decoder cap 64 MiB (loopback origin)
  h264_bomb    51 KB of H.264: 32 black 4096x4096 frames, every frame asked for (num_frames=-1)
  jpeg_frames  a video/jpeg data payload of 40 2048x2048 JPEG frames, num_frames=-1
  flac_bomb    476 KB of FLAC: 300 s of 8-channel 192 kHz silence (5.5 GB of float32 PCM)
  pool_starve  120 fetches stalled on one origin, then 3 fetches to fresh healthy origins

Each attack runs in its own interpreter, so its peak RSS (``ru_maxrss``) is its own. Payloads are
built before the baseline is read; "peak" is what fetching and decoding added. The test suite's
media helpers (``tests/``) make the payloads and the loopback origins. ``--before OLD/src`` runs
every attack on that tree first, then on ``--src``; ``--chart PATH`` draws each memory attack's
peak RSS per tree as a PNG (``pool_starve`` is about connections, not memory, so it is left out).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import _charts

REPO = Path(__file__).resolve().parent.parent
ATTACKS = ("gzip_bomb", "h264_bomb", "jpeg_frames", "flac_bomb", "pool_starve")
MEMORY_ATTACKS = ATTACKS[:4]
# The child's report line: "<case> peak RSS +<MiB> MiB  <seconds> s  <outcome>".
_REPORT = re.compile(r"^(\w+)\s+peak RSS \+\s*(-?\d+) MiB\s+([\d.]+) s\s+(.*)$")

# The child: builds one payload, then measures fetching/decoding it.
CHILD = r"""
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
"""


def run_attacks(src: Path, attacks: list[str]) -> dict[str, tuple[float, float, str]]:
    """Each attack in a fresh interpreter on ``src``: case -> (peak RSS MiB, seconds, outcome)."""
    print(f"mediaref from {src}", flush=True)
    child = CHILD.replace("TESTS", repr(str(REPO / "tests")))
    env_path = str(src.resolve())
    results: dict[str, tuple[float, float, str]] = {}
    for attack in attacks:
        completed = subprocess.run(
            [
                sys.executable,
                "-c",
                f"import sys; sys.path.insert(0, {env_path!r})\n{child}",
                attack,
            ],
            check=False,
            timeout=900,
            capture_output=True,
            text=True,
        )
        print(completed.stdout, end="", flush=True)
        if completed.returncode:
            print(completed.stderr[-2000:], end="", file=sys.stderr)
        for line in completed.stdout.splitlines():
            match = _REPORT.match(line)
            if match:
                results[match[1]] = (float(match[2]), float(match[3]), match[4])
    return results


def tree_label(src: Path) -> str:
    """What a chart calls a tree: its folder's name (``OLD/src`` -> ``OLD``)."""
    resolved = src.resolve()
    return "this checkout" if resolved == (REPO / "src").resolve() else resolved.parent.name


def draw_chart(path: Path, runs: dict[str, dict[str, tuple[float, float, str]]]) -> None:
    attacks = [a for a in MEMORY_ATTACKS if all(a in results for results in runs.values())]
    series = {label: [max(r[a][0], 0.0) for a in attacks] for label, r in runs.items()}
    bar_labels = {label: [f"+{v:,.0f} MiB" for v in values] for label, values in series.items()}
    ratios: list[float | str | None] | None = None
    if len(runs) == 2:
        before, after = series.values()
        ratios = [
            f"{_charts.format_ratio(b / a)} less" if a >= 1 else "refused before\nallocating"
            for b, a in zip(before, after, strict=True)
        ]
    _charts.grouped_bars(
        path,
        title="Peak RSS one hostile payload adds, one fresh process per attack",
        groups=attacks,
        series=series,
        bar_labels=bar_labels,
        ratios=ratios,
        ylabel="peak RSS over baseline (MiB)",
        footnote=_charts.machine_note(),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--src", type=Path, default=REPO / "src", help="the mediaref tree to attack"
    )
    parser.add_argument(
        "--before", type=Path, help="also attack this tree first (e.g. OLD/src, before the fixes)"
    )
    _charts.add_chart_argument(parser)
    parser.add_argument(
        "attacks", nargs="*", metavar="ATTACK", help=f"some of {', '.join(ATTACKS)}"
    )
    args = parser.parse_args()
    unknown = sorted(set(args.attacks) - set(ATTACKS))
    if unknown:
        parser.error(f"unknown attacks {unknown}; choose from {', '.join(ATTACKS)}")
    attacks = args.attacks or list(ATTACKS)
    runs: dict[str, dict[str, tuple[float, float, str]]] = {}
    if args.before is not None:
        runs[f"before: {tree_label(args.before)}"] = run_attacks(args.before, attacks)
    runs[f"after: {tree_label(args.src)}" if args.before else tree_label(args.src)] = run_attacks(
        args.src, attacks
    )
    if args.chart:
        draw_chart(args.chart, runs)


if __name__ == "__main__":
    main()
