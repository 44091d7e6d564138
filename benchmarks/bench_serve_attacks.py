"""Good requests' latency against a render server, alone and beside each attack of the mix.

Three kinds of process, so that no client's work delays another's measurement: the server (a
subprocess: ``mediaref serve``, or vLLM 0.33's ``vllm launch render`` with ``--server vllm``), one
attacker process per scenario (this script with ``--attacker NAME``, every attack of
``tests/security/_serve_attacks.py`` from its own loopback address), and this process, which sends
the good traffic (small JPEG and text chat requests, ``--in-flight`` at a time) and polls
``/health`` every 50 ms, each from an address of its own. The stalling media origin runs in a
process of its own too.

Scenarios: the good traffic alone; each attack alone at full strength (``FLOOD``: one client
pushing as hard as it can); the standing mix (``MIX``: every attack at once, each at the strength
the outside attack used); and every attack at full strength at once. Attackers are niced (an
attacker on another machine does not take the server's cores).

For each scenario: the good requests' p50 and p99 and their ratio to the clean run's, how many
failed, ``/health``'s worst and p99 latency, and what the attacker got back. Then the server's
descriptors, threads and RSS once the attack has stopped, against the clean run's.

    python benchmarks/bench_serve_attacks.py [--requests 120] [--in-flight 4]
        [--attacks slow_bodies,long_text,...|all] [--server mediaref|vllm]
        [--vllm-python PATH] [--json out.json] [--chart PATH [--against vllm.json]]

Targets (issue 26): every good request succeeds; their p99 within 3x of the clean run's; /health
under 100 ms. The script prints whether each scenario meets them; it asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path[:0] = [str(_TESTS / "security"), str(_TESTS)]

import _charts  # noqa: E402
from _serve_attacks import (  # type: ignore[import-not-found]  # noqa: E402 - tests/security
    ATTACKS,
    FLOOD,
    MIX,
    Attack,
    StallingOrigin,
    good_requests,
    poll_health,
    run_good_traffic,
)
from _serve_process import ServerProcess  # type: ignore[import-not-found]  # noqa: E402

SCENARIOS = list(ATTACKS)
SERVER_ARGS = (
    "--allowed-media-domains", "127.0.0.1",
    "--media-url-allow-private-ips",
    "--max-request-body-mb", "32",
    "--header-timeout", "2",
    "--body-timeout", "10",
)  # fmt: skip
SERVER_ENV = {"VLLM_IMAGE_FETCH_TIMEOUT": "2", "VLLM_MEDIA_FETCH_MAX_RETRIES": "3"}
WARMUP_S = 3.0


# -- the attacker process ----------------------------------------------------------------------


async def _attack_until_signalled(
    name: str, level: int, url: str, stall_url: str, source: str
) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    attack = Attack(url, source, stop, level, stall_url)
    await ATTACKS[name](attack)
    print(json.dumps(dict(attack.outcomes)), flush=True)


def origin_main() -> int:
    """The stalling origin in a process of its own: prints its URL, serves until SIGTERM."""
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    with StallingOrigin() as origin:
        print(origin.url, flush=True)
        stopped.wait()
    return 0


@contextlib.contextmanager
def _origin_process() -> Iterator[str]:
    """A stalling origin's URL, served by its own (niced) process: a media origin is another
    machine, and in this process its thousands of connections would slow the measuring client."""
    process = subprocess.Popen(
        ["nice", "-n", "19", sys.executable, __file__, "--origin"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        yield process.stdout.readline().strip()
    finally:
        process.terminate()
        process.wait(60)


def attacker_main(args: argparse.Namespace) -> int:
    asyncio.run(
        _attack_until_signalled(args.attacker, args.level, args.url, args.stall_url, args.source)
    )
    return 0


# -- the measuring process ---------------------------------------------------------------------


class VllmRenderServer:
    """``vllm launch render`` of the built-in model on a free port, as :class:`ServerProcess`."""

    def __init__(self, python: str, model: str) -> None:
        import socket

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"}
        env.update(SERVER_ENV)
        command = [python, "-m", "vllm.entrypoints.cli.main", "launch", "render", model]
        self.process = subprocess.Popen(
            [*command, "--host", "127.0.0.1", "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        self.url = f"http://127.0.0.1:{port}"
        _wait_healthy(self.url, self.process)

    # Counted as for mediaref's server: the process and its descendants.
    pids = ServerProcess.pids
    status = ServerProcess.status
    fds = ServerProcess.fds

    def stop(self) -> None:
        os.killpg(self.process.pid, signal.SIGTERM)
        self.process.wait(60)


def _wait_healthy(url: str, process: subprocess.Popen[bytes]) -> None:
    import urllib.request

    for _ in range(600):
        if process.poll() is not None:
            raise RuntimeError("the server exited before answering /health")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError("the server never answered /health")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def _start_attacker(
    name: str, level: int, url: str, stall_url: str, source: str
) -> subprocess.Popen[str]:
    command = [sys.executable, __file__, "--attacker", name, "--level", str(level), "--url", url]
    # Niced: an attacker on another machine does not take the server's cores.
    return subprocess.Popen(
        ["nice", "-n", "19", *command, "--stall-url", stall_url, "--source", source],
        stdout=subprocess.PIPE,
        text=True,
    )


async def _scenario(
    server: Any,
    name: str,
    levels: dict[str, int],
    stall_url: str,
    bodies: list[bytes],
    in_flight: int,
) -> dict[str, Any]:
    attackers = [
        _start_attacker(attack, level, server.url, stall_url, f"127.0.0.{20 + index}")
        for index, (attack, level) in enumerate(levels.items())
    ]
    if attackers:
        await asyncio.sleep(WARMUP_S)  # every attacker connected and sending
    stop, health = asyncio.Event(), []
    poller = asyncio.create_task(poll_health(server.url, stop, health))
    good = await run_good_traffic(server.url, bodies, in_flight)
    stop.set()
    await poller
    outcomes: Counter[str] = Counter()
    for process in attackers:
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=180)
        if out.strip():
            outcomes.update(json.loads(out.strip().splitlines()[-1]))
    await asyncio.sleep(3)  # what the attack held is let go
    health_seconds = [seconds for _, seconds in health]
    return {
        "scenario": name,
        "good": len(good.statuses),
        "good_failed": sum(1 for status in good.statuses if status != 200),
        "good_p50_ms": good.percentile(50) * 1e3,
        "good_p99_ms": good.percentile(99) * 1e3,
        "health_failed": sum(1 for status, _ in health if status != 200),
        "health_p99_ms": _percentile(health_seconds, 99) * 1e3,
        "health_max_ms": max(health_seconds, default=float("nan")) * 1e3,
        "attack_outcomes": dict(outcomes),
        "fds": server.fds(),
        "threads": server.status("Threads"),
        "rss_mib": server.status("VmRSS") / 2**20,
    }


def _report(rows: list[dict[str, Any]]) -> None:
    clean = rows[0]
    print(
        f"{'scenario':<24} {'failed':>6} {'p50 ms':>8} {'p99 ms':>8} {'p99 x':>6} "
        f"{'health max':>10} {'fds':>5} {'thr':>4} {'RSS MiB':>8}  attack got"
    )
    for row in rows:
        row["p99_ratio"] = row["good_p99_ms"] / clean["good_p99_ms"]
        row["meets_targets"] = (
            row["good_failed"] == 0
            and row["health_failed"] == 0
            and row["p99_ratio"] <= 3.0
            and row["health_max_ms"] < 100.0
        )
        print(
            f"{row['scenario']:<24} {row['good_failed']:>6} {row['good_p50_ms']:>8.1f} "
            f"{row['good_p99_ms']:>8.1f} {row['p99_ratio']:>6.2f} {row['health_max_ms']:>10.1f} "
            f"{row['fds']:>5} {row['threads']:>4} {row['rss_mib']:>8.0f}  "
            f"{row['attack_outcomes'] or ''}{'' if row['meets_targets'] else '  (misses a target)'}"
        )


def _chart(path: Path, rows: list[dict[str, Any]], against: list[dict[str, Any]] | None) -> None:
    """The good requests' p99 per scenario; beside vLLM's (``against``) when given."""
    groups = [row["scenario"] for row in rows]
    series = {"mediaref serve: good p99": [row["good_p99_ms"] / 1e3 for row in rows]}
    ratios: list[float | str | None] = [f"{row['p99_ratio']:.1f}x clean" for row in rows]
    caption = "labels: good p99 over the clean run's"
    if against is not None:
        theirs = {row["scenario"]: row for row in against}
        series["vllm launch render: good p99"] = [
            theirs[g]["good_p99_ms"] / 1e3 if g in theirs else float("nan") for g in groups
        ]
        ratios = [
            theirs[row["scenario"]]["good_p99_ms"] / row["good_p99_ms"]
            if row["scenario"] in theirs
            else None
            for row in rows
        ]
        caption = "labels: vLLM's good p99 over mediaref's (same requests, same attacks)"
    _charts.grouped_bars(
        path,
        title="Good requests' p99 beside each attack (render servers, 2 cores, loopback)",
        groups=groups,
        series=series,
        ylabel="good requests' p99",
        seconds=True,
        ratios=ratios,
        ratio_caption=caption,
        footnote=_charts.machine_note(),
    )


async def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    scenarios: list[tuple[str, dict[str, int]]] = [("clean", {})]
    if args.attacks == "mix":
        scenarios.append(("mix", MIX))
    elif args.attacks == "mix-ablation":
        scenarios.append(("mix", MIX))
        scenarios += [
            (f"mix - {left_out}", {name: level for name, level in MIX.items() if name != left_out})
            for left_out in MIX
        ]
    else:
        names = SCENARIOS if args.attacks == "all" else args.attacks.split(",")
        scenarios += [(name, {name: FLOOD[name]}) for name in names]
    if args.attacks == "all":
        scenarios += [("mix", MIX), ("all floods", dict(FLOOD))]
    bodies = good_requests(args.requests)
    if args.server == "vllm":
        from mediaref.models.builtin import builtin_model_path

        server: Any = VllmRenderServer(args.vllm_python, str(builtin_model_path("qwen2_vl")))
    else:
        server = ServerProcess(*SERVER_ARGS, "--workers", str(args.workers), env=SERVER_ENV)
    rows = []
    try:
        with _origin_process() as origin_url:
            await run_good_traffic(server.url, bodies, args.in_flight)  # caches warm, as a server's
            for name, levels in scenarios:
                rows.append(
                    await _scenario(server, name, levels, origin_url, bodies, args.in_flight)
                )
                print(f"  {rows[-1]['scenario']}: done", file=sys.stderr, flush=True)
    finally:
        server.stop()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=120, help="good requests a scenario")
    parser.add_argument("--in-flight", type=int, default=4, help="good requests at once")
    parser.add_argument(
        "--attacks",
        default="all",
        help="comma-separated, all (each alone at full strength, then the standing mix, then "
        "every attack at full strength at once), mix (the standing mix alone), or mix-ablation (the mix, then the mix "
        "without each attack in turn: what each one costs the good requests)",
    )
    parser.add_argument("--server", choices=("mediaref", "vllm"), default="mediaref")
    parser.add_argument(
        "--workers", type=int, default=1, help="mediaref serve --workers (default: 1)"
    )
    parser.add_argument("--vllm-python", default="python", help="the vLLM venv's interpreter")
    parser.add_argument("--json", type=Path, help="write the rows here")
    _charts.add_chart_argument(parser)
    parser.add_argument(
        "--against",
        type=Path,
        help="another run's --json (vLLM's): the chart puts its p99 beside this run's",
    )
    # The attacker processes this script starts.
    parser.add_argument("--attacker", help=argparse.SUPPRESS)
    parser.add_argument("--level", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--stall-url", help=argparse.SUPPRESS)
    parser.add_argument("--source", help=argparse.SUPPRESS)
    parser.add_argument("--origin", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.origin:
        return origin_main()
    if args.attacker:
        return attacker_main(args)
    rows = asyncio.run(measure(args))
    _report(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    if args.chart:
        against = json.loads(args.against.read_text()) if args.against else None
        _chart(args.chart, rows, against)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
