"""Running the render server: bind, announce, serve until SIGTERM/SIGINT, drain, exit.

**The heap.** Once the models are loaded and warmed up, the objects alive then are frozen out of
the garbage collector (:func:`freeze_startup_heap`), so a collection only walks the requests'
own objects.

**Draining.** On SIGTERM (or SIGINT) the server stops accepting connections, answers ``/health``
with 503, and lets every request it already accepted finish (up to ``shutdown_timeout``
seconds; then the stragglers are cut off and the exit status is 1). Requests arriving on a
connection that was already open are still served, each answer closing its connection. Only then
are the connections closed and the models' workers shut down.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import sys
from collections.abc import AsyncIterator
from typing import TextIO

from aiohttp import web

from mediaref.serve.app import STATE_KEY, build_app
from mediaref.serve.connections import GuardedTCPSite
from mediaref.serve.logs import AccessLog, access_logger, configure_logging
from mediaref.serve.options import ServeOptions
from mediaref.serve.service import RenderService
from mediaref.serve.worker_metrics import own_metrics_site
from mediaref.serve.worker_plan import WorkerPlan

# Idle keep-alive connections are closed at once at shutdown; this bounds the wait for a handler
# that is somehow still running after the drain (it only is when the drain timed out).
_CLEANUP_TIMEOUT_S = 1.0


async def serve(
    options: ServeOptions, *, log: TextIO = sys.stderr, plan: WorkerPlan | None = None
) -> int:
    """Serve until a SIGTERM or SIGINT, then drain; the exit status (0: nothing was cut off).
    ``plan``: serve as one worker of a supervisor's (:mod:`mediaref.serve.workers`), on its socket."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    drained = False
    log_writer = configure_logging(options.log_level)
    raise_descriptor_limit()
    service = await asyncio.to_thread(RenderService, options, shared=plan)
    try:
        await asyncio.to_thread(service.warmup)
        freeze_startup_heap()
        async with listening(service, plan) as (app, site, host, port):
            if plan is None:
                print(
                    f"mediaref serve: listening on http://{host}:{port} "
                    f"(models: {', '.join(options.models)})",
                    file=log,
                    flush=True,
                )
            else:
                plan.ready.put(plan.index)
            await stop.wait()
            state = app[STATE_KEY]
            state.draining = True
            pending = state.in_flight
            await site.stop()  # no new connections from here on
            who = "" if plan is None else f" (worker {plan.index})"
            print(
                f"mediaref serve: draining {pending} in-flight requests{who}", file=log, flush=True
            )
            drained = await state.wait_idle(options.shutdown_timeout)
            if not drained:
                print(
                    f"mediaref serve: {state.in_flight} requests still running after "
                    f"{options.shutdown_timeout}s; cutting them off",
                    file=log,
                    flush=True,
                )
    finally:
        await asyncio.to_thread(service.close)
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        log_writer.stop()
    if plan is None:
        print("mediaref serve: stopped", file=log, flush=True)
    return 0 if drained else 1


@contextlib.asynccontextmanager
async def listening(
    service: RenderService, plan: WorkerPlan | None = None
) -> AsyncIterator[tuple[web.Application, GuardedTCPSite, str, int]]:
    """``service``'s application accepting connections on its options' host and port (the
    bound port when that is 0), or on a worker's inherited socket, until the block ends."""
    options = service.options
    app = build_app(service, siblings=plan.sibling_sockets() if plan is not None else ())
    runner = web.AppRunner(
        app,
        handle_signals=False,
        shutdown_timeout=_CLEANUP_TIMEOUT_S,
        # The keep-alive timer also closes a connection that has not sent a whole request line
        # and headers by the time it fires (mediaref.serve.connections).
        keepalive_timeout=options.header_timeout_seconds(),
        # A body left unread (a refused or timed-out request) is not drained: the connection
        # closes once the answer is written.
        lingering_time=0,
        # A client that hangs up stops its render: its slot, its fetches and its place on the
        # pool go to requests someone is waiting for.
        handler_cancellation=True,
        access_log=access_logger if options.access_log else None,
        access_log_class=AccessLog,
    )
    await runner.setup()
    try:
        site = GuardedTCPSite(
            runner,
            options.host,
            options.port,
            app[STATE_KEY].connections,
            sock=plan.sock if plan is not None else None,
        )
        await site.start()
        host, port = runner.addresses[0][:2]
        if plan is None:
            yield app, site, str(host), int(port)
        else:
            async with own_metrics_site(plan.metrics_socket, service.metrics.render):
                yield app, site, str(host), int(port)
    finally:
        await runner.cleanup()


def freeze_startup_heap() -> None:
    """Move every object alive after startup (the models, torch, transformers: ~450k objects)
    out of the garbage collector's reach, as vLLM's server does: a full collection over them
    took 235 ms, a stall of every request whenever the requests' garbage triggered one."""
    gc.collect()
    gc.freeze()


def raise_descriptor_limit() -> None:
    """Lift the soft descriptor limit to the hard one: every connection, every fetch and every
    open file needs one, and the server's own bounds (``--max-connections`` and the fetches'
    connection slots) are what should bind, not a default of 1024."""
    try:
        import resource
    except ImportError:  # not on POSIX
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def run_server(options: ServeOptions, *, plan: WorkerPlan | None = None) -> int:
    """:func:`serve` on a fresh event loop: the CLI's entry with one worker, each worker's
    with several (:mod:`mediaref.serve.workers` supervises them)."""
    return asyncio.run(serve(options, plan=plan))


__all__ = [
    "freeze_startup_heap",
    "listening",
    "raise_descriptor_limit",
    "run_server",
    "serve",
]
