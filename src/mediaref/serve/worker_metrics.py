"""``/metrics`` of a server with ``--workers N``: every worker's figures, summed.

Each worker counts what it serves in its own registry (:mod:`mediaref.serve.metrics`). Whichever
worker a scrape reaches asks its siblings for theirs over a private Unix socket each (in the
server's run directory, mode 0700: the public port never exposes one worker's figures alone) and
sums every sample with the same name and labels: requests and cache lookups add up, as do bytes
held by the workers' local caches and requests in flight. A sibling that does not answer within
:data:`SIBLING_TIMEOUT_S` (restarting, say) is left out of that scrape and the sum says so in
``mediaref_workers_reporting``.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path

import aiohttp
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

SELF_ROUTE = "/metrics/self"
SIBLING_TIMEOUT_S = 2.0


def worker_socket(run_dir: str, index: int) -> str:
    """Where worker ``index`` answers for its own figures."""
    return str(Path(run_dir) / f"worker-{index}.sock")


@contextlib.asynccontextmanager
async def own_metrics_site(path: str, render: Callable[[], bytes]) -> AsyncIterator[None]:
    """Answer ``GET /metrics/self`` with ``render()`` on the Unix socket ``path``."""

    async def own(request: web.Request) -> web.Response:
        body = await asyncio.get_running_loop().run_in_executor(None, render)
        return web.Response(body=body, content_type="text/plain")

    app = web.Application()
    app.router.add_get(SELF_ROUTE, own)
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    try:
        await web.UnixSite(runner, path).start()
        yield
    finally:
        await runner.cleanup()


async def _sibling(path: str) -> bytes | None:
    try:
        connector = aiohttp.UnixConnector(path=path)
        timeout = aiohttp.ClientTimeout(total=SIBLING_TIMEOUT_S)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            async with session.get(f"http://worker{SELF_ROUTE}") as response:
                return await response.read() if response.status == 200 else None
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
        return None


async def siblings(paths: Iterable[str]) -> list[bytes | None]:
    """Each sibling's own exposition (None for one that did not answer)."""
    return list(await asyncio.gather(*(_sibling(path) for path in paths)))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _format(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if not float(value).is_integer() else f"{value:.1f}"


def merge(expositions: Iterable[bytes], *, expected: int) -> bytes:
    """The Prometheus text exposition of the summed samples (``*_created``: the earliest)."""
    families: dict[str, tuple[str, str]] = {}
    samples: dict[tuple[str, str, tuple[tuple[str, str], ...]], float] = {}
    reporting = 0
    for text in expositions:
        reporting += 1
        for family in text_string_to_metric_families(text.decode()):
            families.setdefault(family.name, (family.type, family.documentation))
            for sample in family.samples:
                key = (family.name, sample.name, tuple(sorted(sample.labels.items())))
                if key not in samples:
                    samples[key] = sample.value
                elif sample.name.endswith("_created"):
                    samples[key] = min(samples[key], sample.value)
                else:
                    samples[key] += sample.value
    lines: list[str] = []
    for name, (kind, doc) in families.items():
        lines.append(f"# HELP {name} {doc}")
        lines.append(f"# TYPE {name} {kind}")
        for (of_family, sample_name, labels), value in samples.items():
            if of_family != name:
                continue
            rendered = ",".join(f'{key}="{_escape(label)}"' for key, label in labels)
            lines.append(
                f"{sample_name}{{{rendered}}} {_format(value)}"
                if labels
                else f"{sample_name} {_format(value)}"
            )
    lines.append("# HELP mediaref_workers_reporting Workers whose figures this scrape sums")
    lines.append("# TYPE mediaref_workers_reporting gauge")
    lines.append(f"mediaref_workers_reporting {reporting:.1f}")
    lines.append("# HELP mediaref_workers Worker processes this server runs")
    lines.append("# TYPE mediaref_workers gauge")
    lines.append(f"mediaref_workers {expected:.1f}")
    return ("\n".join(lines) + "\n").encode()


__all__ = ["SELF_ROUTE", "merge", "own_metrics_site", "siblings", "worker_socket"]
