"""Cold start of vLLM 0.33.0's render server, stock and on mediaref (``mediaref-vllm``).

For each side, ``--runs`` times: start ``vllm launch render`` on the built-in Qwen2-VL directory
(CPU, ``VLLM_TARGET_DEVICE=cpu``; stock through ``vllm.entrypoints.cli.main``, on mediaref through
``mediaref.vllm_hook``), time it from the start of the process to ``/health`` answering 200 and
to the answer of its first request (one 1080p JPEG chat request, tensors in the response), and
read its resident memory (VmRSS of the server's process tree) once that answer is in. The vLLM
interpreter must have mediaref installed (``pip install -e . --no-deps`` there).

    python benchmarks/bench_vllm_cold_start.py --vllm-python VLLM_VENV/bin/python [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent)]

from bench_render_vs_vllm import chat_body, make_images  # noqa: E402
from mediaref.models.builtin import builtin_model_path  # noqa: E402

SIDES = {
    "vLLM 0.33.0": ["-m", "vllm.entrypoints.cli.main"],
    "vLLM on mediaref": ["-c", "from mediaref.vllm_hook import main; main()"],
}


def _rss_bytes(pid: int) -> int:
    total, pending = 0, [pid]
    while pending:
        current = pending.pop()
        try:
            with open(f"/proc/{current}/status") as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
            with open(f"/proc/{current}/task/{current}/children") as children:
                pending.extend(int(child) for child in children.read().split())
        except OSError:
            continue
    return total


def cold_start(python: str, cli: list[str], body: bytes) -> dict[str, float]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    model = builtin_model_path("qwen2_vl")
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    process = subprocess.Popen(
        [python, *cli, "launch", "render", model.name, "--port", str(port)],
        cwd=model.parent,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        while True:
            if process.poll() is not None:
                raise SystemExit("the server exited before answering /health")
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                time.sleep(0.05)
        healthy = time.perf_counter() - start
        request = urllib.request.Request(
            url + "/v1/chat/completions/render",
            data=body,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=300) as response:
            response.read()
        answered = time.perf_counter() - start
        return {
            "health_s": healthy,
            "first_answer_s": answered,
            "rss_mib": _rss_bytes(process.pid) / 2**20,
        }
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-python", required=True, help="a vLLM 0.33.0 interpreter")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    body = chat_body(make_images(1, seed=7)[0])
    results: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
    for _ in range(args.runs):  # alternating, so both sides see the same machine
        for side, cli in SIDES.items():
            results[side].append(cold_start(args.vllm_python, cli, body))
    print(f"{args.runs} cold starts each (median), built-in Qwen2-VL, CPU, one 1080p JPEG request")
    print(f"{'server':<18} {'/health':>9} {'1st answer':>11} {'RSS MiB':>8}")
    for side, runs in results.items():
        median = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        print(
            f"{side:<18} {median['health_s']:8.1f}s {median['first_answer_s']:10.1f}s "
            f"{median['rss_mib']:8.0f}"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
