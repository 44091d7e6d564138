"""Running the render server: bind, announce, serve until SIGTERM/SIGINT, drain, exit.

**Draining.** On SIGTERM (or SIGINT) the server stops accepting connections, answers ``/health``
with 503, and lets every request it already accepted finish (up to ``shutdown_timeout``
seconds; then the stragglers are cut off and the exit status is 1). Requests arriving on a
connection that was already open are still served, each answer closing its connection. Only then
are the connections closed and the models' workers shut down.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from typing import TextIO

from aiohttp import web

from mediaref.serve.app import STATE_KEY, build_app
from mediaref.serve.options import ServeOptions
from mediaref.serve.service import RenderService

# Idle keep-alive connections are closed at once at shutdown; this bounds the wait for a handler
# that is somehow still running after the drain (it only is when the drain timed out).
_CLEANUP_TIMEOUT_S = 1.0


async def serve(options: ServeOptions, *, log: TextIO = sys.stderr) -> int:
    """Serve until a SIGTERM or SIGINT, then drain; the exit status (0: nothing was cut off)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    drained = False
    service = await asyncio.to_thread(RenderService, options)
    try:
        await asyncio.to_thread(service.warmup)
        app = build_app(service)
        runner = web.AppRunner(
            app, handle_signals=False, shutdown_timeout=_CLEANUP_TIMEOUT_S, access_log=None
        )
        await runner.setup()
        try:
            site = web.TCPSite(runner, options.host, options.port)
            await site.start()
            host, port = runner.addresses[0][:2]
            print(
                f"mediaref serve: listening on http://{host}:{port} "
                f"(models: {', '.join(options.models)})",
                file=log,
                flush=True,
            )
            await stop.wait()
            state = app[STATE_KEY]
            state.draining = True
            pending = state.in_flight
            await site.stop()  # no new connections from here on
            print(f"mediaref serve: draining {pending} in-flight requests", file=log, flush=True)
            drained = await state.wait_idle(options.shutdown_timeout)
            if not drained:
                print(
                    f"mediaref serve: {state.in_flight} requests still running after "
                    f"{options.shutdown_timeout}s; cutting them off",
                    file=log,
                    flush=True,
                )
        finally:
            await runner.cleanup()
    finally:
        await asyncio.to_thread(service.close)
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
    print("mediaref serve: stopped", file=log, flush=True)
    return 0 if drained else 1


def run_server(options: ServeOptions) -> int:
    """:func:`serve` on a fresh event loop (the CLI's entry)."""
    return asyncio.run(serve(options))


__all__ = ["run_server", "serve"]
