"""``mediaref serve`` against ``vllm launch render``: throughput and latency, side by side.

Both render servers serve the built-in Qwen2-VL directory at their defaults, one after the
other, each pinned to the same core (``--server-cores``, default the first one this process may
use); this process, the load generator, runs on the others. vLLM 0.33.0 runs from its own
interpreter (``--vllm-python``) on the CPU (``VLLM_TARGET_DEVICE=cpu``). Every request is a chat
request with one 1080p JPEG as a ``data:`` URL and a line of text, the processed tensors in the
response (``mm_payload`` at its default, ``tensors``, vLLM's wire format on both sides), sent
``--in-flight`` at a time and timed from sending to the last byte read:

- **cold**: every image distinct (``--requests`` of them);
- **hot**: ``--pool`` images, each sent once beforehand, then repeated (``--requests`` in all);
- **routing**: what a router asks (llm-d's workload): four distinct 720p JPEGs a request,
  ``mm_payload: "none"`` (token ids, hashes and placeholders only), every image distinct.

``--servers vllm,vllm_on_mediaref`` measures vLLM's own render server stock and run by
``mediaref-vllm`` (mediaref in place of ``vllm.multimodal``; the vLLM interpreter needs mediaref
installed). Reports requests/s and p50/p99 per server and workload, the CPU the server and the
load generator used (a share near 100% of a core says which side was the bound), and each
server's ratios over stock vLLM's. The
issue's targets (27): >= 3x vLLM's throughput cold, >= 8x hot, hot p99 under vLLM's hot p50;
>= 20x on the routing workload.

    python benchmarks/bench_render_vs_vllm.py --vllm-python VLLM_VENV/bin/python
        [--requests 120] [--pool 8] [--in-flight 4] [--json out.json] [--chart PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

import _charts
from _bench_media import HD, PHOTO_NAMES, encode_image, load_photo, photo_variant
from bench_render import drive, summary

SERVERS = ("mediaref", "vllm")
WORKLOADS = ("cold", "hot", "routing")
ROUTING_IMAGES = 4
STARTUP_S = 600


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class RenderServer:
    """One render server of the built-in model on a free port, pinned to ``cores``."""

    def __init__(self, kind: str, cores: set[int], vllm_python: str, *extra: str) -> None:
        from mediaref.models.builtin import builtin_model_path

        port = _free_port()
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        if kind in ("vllm", "vllm_on_mediaref"):
            env["VLLM_TARGET_DEVICE"] = "cpu"
            model = builtin_model_path("qwen2_vl")
            # vllm_on_mediaref: vLLM's own server with mediaref in place (mediaref-vllm).
            cli = (
                ["-c", "from mediaref.vllm_hook import main; main()"]
                if kind == "vllm_on_mediaref"
                else ["-m", "vllm.entrypoints.cli.main"]
            )
            command = [vllm_python, *cli, "launch", "render"]
            command += [model.name, "--host", "127.0.0.1", "--port", str(port)]
            cwd: Path | None = model.parent
        else:
            command = [sys.executable, "-m", "mediaref", "serve", "--port", str(port), *extra]
            cwd = None
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=lambda: os.sched_setaffinity(0, cores),
        )
        assert self.process.stderr is not None
        # Drained, so the server never blocks on a full pipe; kept for a failed start's message.
        self.log: list[bytes] = []
        threading.Thread(target=self.log.extend, args=(self.process.stderr,), daemon=True).start()
        self.url = f"http://127.0.0.1:{port}"
        self._wait_healthy()

    def _wait_healthy(self) -> None:
        import urllib.request

        deadline = time.monotonic() + STARTUP_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(b"".join(self.log[-40:]).decode(errors="replace"))
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        raise SystemExit("the server never answered /health")

    def cpu_seconds(self) -> float:
        """CPU time the server's process has used, all its threads together."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        import signal

        os.killpg(self.process.pid, signal.SIGTERM)
        self.process.wait(60)


def chat_body(*jpegs: bytes, **fields: Any) -> bytes:
    content: list[dict[str, Any]] = [
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64," + b64}}
        for b64 in (base64.b64encode(jpeg).decode("ascii") for jpeg in jpegs)
    ]
    content.append({"type": "text", "text": "What is in this image?"})
    return json.dumps({"messages": [{"role": "user", "content": content}], **fields}).encode()


def make_images(count: int, seed: int, size: tuple[int, int] | None = None) -> list[bytes]:
    """``count`` distinct JPEGs, 1080p unless ``size`` (random crops of scikit-image's photos)."""
    rng = np.random.default_rng(seed)
    photos = [load_photo(name) for name in PHOTO_NAMES]
    extra = {} if size is None else {"size": size}
    return [
        encode_image(photo_variant(photos[i % len(photos)], rng, **extra), "JPEG", quality=90)
        for i in range(count)
    ]


def routing_bodies(count: int, seed: int) -> list[bytes]:
    """``count`` requests of four distinct 720p JPEGs each, ``mm_payload: "none"``."""
    images = make_images(count * ROUTING_IMAGES, seed, size=HD)
    return [
        chat_body(*images[i * ROUTING_IMAGES : (i + 1) * ROUTING_IMAGES], mm_payload="none")
        for i in range(count)
    ]


async def measure(args: argparse.Namespace) -> dict[str, dict[str, dict[str, float]]]:
    cores = sorted(os.sched_getaffinity(0))
    server_cores = set(args.server_cores or cores[:1])
    client_cores = set(cores) - server_cores or set(cores)
    os.sched_setaffinity(0, client_cores)
    # One set of images for both servers: the same requests, in the same order.
    pool = [chat_body(jpeg) for jpeg in make_images(args.pool, seed=1)]
    hot = [pool[i % len(pool)] for i in range(args.requests)]
    results: dict[str, dict[str, dict[str, float]]] = {}
    for kind in args.servers:
        cold = [chat_body(jpeg) for jpeg in make_images(args.requests, seed=2)]
        routing = routing_bodies(args.requests, seed=4)
        warm = [chat_body(jpeg) for jpeg in make_images(4, seed=3)] + routing_bodies(2, seed=5)
        server = RenderServer(kind, server_cores, args.vllm_python)
        try:
            await drive(server.url, warm + pool, args.in_flight, f"{kind} warm-up")
            results[kind] = {}
            workloads = {"cold": cold, "hot": hot, "routing": routing}
            for name, bodies in ((n, workloads[n]) for n in args.workloads):
                cpu_before = time.process_time(), server.cpu_seconds()
                wall, latencies = await drive(server.url, bodies, args.in_flight, f"{kind} {name}")
                results[kind][name] = summary(wall, latencies)
                # Which side was the bound: a share near 100% of its core(s).
                results[kind][name]["client_cpu"] = (time.process_time() - cpu_before[0]) / wall
                results[kind][name]["server_cpu"] = (server.cpu_seconds() - cpu_before[1]) / wall
        finally:
            server.stop()
    return results


def report(results: dict[str, dict[str, dict[str, float]]], args: argparse.Namespace) -> None:
    fmt = _charts.format_seconds
    print(
        f"{args.requests} requests per workload, {args.in_flight} in flight, one 1080p JPEG "
        f"(data: URL) a request, tensors in the response; each server pinned to the same core"
    )
    print(
        f"routing: {ROUTING_IMAGES} distinct 720p JPEGs a request, mm_payload none "
        "(token ids, hashes and placeholders only)"
    )
    header = f"{'workload':<8} {'server':<9} {'req/s':>8} {'p50':>9} {'p99':>9}"
    print(f"{header} {'server CPU':>11} {'client CPU':>11}")
    for name in args.workloads:
        for kind in args.servers:
            r = results[kind][name]
            print(
                f"{name:<8} {kind:<9} {r['requests_per_s']:8.1f} {fmt(r['p50_s']):>9} "
                f"{fmt(r['p99_s']):>9} {r['server_cpu']:>11.0%} {r['client_cpu']:>11.0%}"
            )
        for kind in (k for k in args.servers if k != "vllm" and "vllm" in results):
            ours, theirs = results[kind][name], results["vllm"][name]
            print(
                f"{'':<8} {kind} / vLLM: {ours['requests_per_s'] / theirs['requests_per_s']:.2f}x "
                f"throughput, p99 {theirs['p99_s'] / ours['p99_s']:.2f}x lower"
            )


def chart(results: dict[str, dict[str, dict[str, float]]], path: Path) -> None:
    workloads = list(results["mediaref"])
    _charts.grouped_bars(
        path,
        title="Render servers, JPEG chat requests (routing: 4 x 720p, no tensors), one core",
        groups=[f"{name}\nreq/s" for name in workloads],
        series={
            "mediaref serve": [results["mediaref"][n]["requests_per_s"] for n in workloads],
            "vllm launch render": [results["vllm"][n]["requests_per_s"] for n in workloads],
        },
        ylabel="requests per second",
        ratios=[
            results["mediaref"][n]["requests_per_s"] / results["vllm"][n]["requests_per_s"]
            for n in workloads
        ],
        ratio_caption="mediaref / vLLM throughput",
        footnote=_charts.machine_note(),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-python", default="python", help="a vLLM 0.33.0 interpreter")
    parser.add_argument(
        "--servers",
        default=",".join(SERVERS),
        help="mediaref,vllm or one; vllm_on_mediaref: vLLM's server run by mediaref-vllm",
    )
    parser.add_argument("--requests", type=int, default=120, help="requests per workload")
    parser.add_argument("--pool", type=int, default=8, help="distinct images the hot run repeats")
    parser.add_argument("--in-flight", type=int, default=4)
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="cold,hot,routing or some")
    parser.add_argument(
        "--server-cores", type=lambda text: [int(c) for c in text.split(",")], default=None
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    _charts.add_chart_argument(parser)
    args = parser.parse_args()
    args.servers = tuple(args.servers.split(","))
    args.workloads = tuple(args.workloads.split(","))
    results: Any = asyncio.run(measure(args))
    report(results, args)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    if args.chart and set(SERVERS) <= set(results):
        chart(results, args.chart)


if __name__ == "__main__":
    main()
