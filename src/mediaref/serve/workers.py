"""``mediaref serve --workers N``: N processes serving one port, sharing each model's items.

One process holds one event loop and one processing worker: on a machine of several cores the
others sit idle, and an event loop busy with one client's traffic is busy for everyone. With
``--workers N`` the process ``mediaref serve`` started as becomes a supervisor:

- it binds the listening socket once and starts N worker processes (``spawn``: nothing of the
  supervisor's state is inherited but what it hands over), each running the single-process
  server (:func:`mediaref.serve.server.serve`) on that socket. Every worker waits in ``accept``
  on the same socket and the kernel gives each connection to one of them, so an idle worker takes
  the next connection and a busy one takes fewer;
- it creates one shared-memory store per model (:class:`~mediaref.cache.worker_store.
  WorkerSharedStore`, ``--mm-processor-cache-gb`` large) and hands its name and secret to the
  workers: each keeps a private front cache of 1/N of that size, and an item one worker processed
  is a hit for every other (:class:`~mediaref.cache.layered.LayeredProcessorCache`);
- it restarts a worker that dies (at most :data:`MAX_QUICK_DEATHS` deaths in a row within
  :data:`QUICK_DEATH_S` of their start, then the server stops with status 1). The kernel resets
  the connections of a dead worker at once: its in-flight requests fail, none hangs; the others
  never notice;
- on SIGTERM (or SIGINT) it closes its copy of the socket and forwards the signal: each worker
  drains as a single server does (no new connections, every accepted request answered), and the
  supervisor exits 0 once every worker has exited 0.

``/metrics`` sums every worker's figures (:mod:`mediaref.serve.worker_metrics`). The front
door's limits (connections, render slots, body memory, each with its per-client share) are each
worker's own: a server of N workers holds up to N times each.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from typing import Any, TextIO

from mediaref import envs
from mediaref.serve.options import ServeOptions
from mediaref.serve.server import run_server
from mediaref.serve.worker_plan import WorkerPlan

MAX_QUICK_DEATHS = 5
QUICK_DEATH_S = 30.0
_RESTART_PAUSE_S = 1.0
_STARTUP_TIMEOUT_S = 600.0
_BACKLOG = 2048
_SHM_SHARE_OF_FREE = 0.5  # of /dev/shm's free space, at most, for the stores together


def _worker_main(options: ServeOptions, plan: WorkerPlan) -> None:
    sys.exit(run_server(options, plan=plan))


def _store_capacity(options: ServeOptions) -> int:
    """Each model's store: ``--mm-processor-cache-gb``, within half of /dev/shm's free space
    (the store reserves its pages when it is created: a full tmpfs would otherwise kill a
    writer with SIGBUS)."""
    gigabytes = options.mm_processor_cache_gb
    if gigabytes is None:
        gigabytes = envs.MEDIAREF_MM_PROCESSOR_CACHE_GB
    wanted = int(gigabytes * 2**30)
    try:
        stat = os.statvfs("/dev/shm")
        room = int(stat.f_bavail * stat.f_frsize * _SHM_SHARE_OF_FREE) // len(options.models)
    except OSError:
        room = wanted
    return max(0, min(wanted, room))


class Supervisor:
    """The workers of one server (see the module docstring)."""

    def __init__(self, options: ServeOptions, log: TextIO) -> None:
        self.options = options
        self.log = log
        self._context = multiprocessing.get_context("spawn")
        self._ready = self._context.SimpleQueue()
        self._stop = threading.Event()
        self._workers: dict[int, Any] = {}
        self._started: dict[int, float] = {}
        self._quick_deaths = 0
        self.sock = socket.create_server((options.host, options.port), backlog=_BACKLOG)
        self.run_dir = tempfile.mkdtemp(prefix="mediaref-serve-")  # mode 0700
        self.secret = secrets.token_bytes(32)  # handed to the workers, never put in a segment
        self.stores: dict[str, Any] = {}

    def _say(self, message: str) -> None:
        print(f"mediaref serve: {message}", file=self.log, flush=True)

    def _create_stores(self) -> None:
        from mediaref.cache.worker_store import MIN_CAPACITY, WorkerSharedStore

        capacity = _store_capacity(self.options)
        try:
            if capacity < MIN_CAPACITY:
                raise OSError("no room in /dev/shm")
            for model in self.options.models:
                self.stores[model] = WorkerSharedStore.create(capacity, secret=self.secret)
        except OSError as exc:  # the workers go on without it: each has its own cache
            for store in self.stores.values():
                store.close()
            self.stores.clear()
            self._say(f"the workers share no processed items ({exc})")

    def _plan(self, index: int) -> WorkerPlan:
        return WorkerPlan(
            index=index,
            count=self.options.workers,
            sock=self.sock,
            stores={model: store.name for model, store in self.stores.items()},
            secret=self.secret,
            run_dir=self.run_dir,
            ready=self._ready,
        )

    def _start(self, index: int) -> None:
        process = self._context.Process(
            target=_worker_main,
            args=(self.options, self._plan(index)),
            name=f"mediaref-worker-{index}",
        )
        process.start()
        self._workers[index] = process
        self._started[index] = time.monotonic()

    def _wait_ready(self) -> bool:
        """Whether every worker came up; False as soon as one exits first."""
        waiting = set(self._workers)
        deadline = time.monotonic() + _STARTUP_TIMEOUT_S
        while waiting and time.monotonic() < deadline and not self._stop.is_set():
            while not self._ready.empty():
                waiting.discard(self._ready.get())
            if any(self._workers[i].exitcode is not None for i in waiting):
                return False
            time.sleep(0.05)
        return not waiting

    def _watch(self) -> int:
        """Restart workers that die until asked to stop; the status to exit with."""
        while not self._stop.is_set():
            sentinels = [process.sentinel for process in self._workers.values()]
            multiprocessing.connection.wait(sentinels, timeout=0.2)
            while not self._ready.empty():
                self._ready.get()  # a restarted worker's readiness
            for index, process in list(self._workers.items()):
                if process.exitcode is None or self._stop.is_set():
                    continue
                lived = time.monotonic() - self._started[index]
                self._quick_deaths = self._quick_deaths + 1 if lived < QUICK_DEATH_S else 0
                self._say(f"worker {index} exited with status {process.exitcode}; restarting it")
                if self._quick_deaths >= MAX_QUICK_DEATHS:
                    self._say(
                        f"{MAX_QUICK_DEATHS} workers died within {QUICK_DEATH_S:g} s of starting"
                    )
                    return 1
                process.close()
                time.sleep(_RESTART_PAUSE_S)
                self._start(index)
        return 0

    def _stop_workers(self) -> bool:
        """SIGTERM to every worker, then wait for them to drain; whether all exited 0."""
        for process in self._workers.values():
            if process.exitcode is None and process.pid is not None:
                os.kill(process.pid, signal.SIGTERM)
        clean = True
        for process in self._workers.values():
            process.join(self.options.shutdown_timeout + 15)
            if process.exitcode is None:
                process.kill()
                process.join(5)
            clean = clean and process.exitcode == 0
        return clean

    def run(self) -> int:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: self._stop.set())
        status = 1
        try:
            self._create_stores()
            for index in range(self.options.workers):
                self._start(index)
            if not self._wait_ready():
                self._say("a worker did not start; stopping")
                self._stop.set()
            else:
                host, port = self.sock.getsockname()[:2]
                self._say(
                    f"listening on http://{host}:{port} (models: "
                    f"{', '.join(self.options.models)}; {self.options.workers} workers)"
                )
                status = self._watch()
        finally:
            self.sock.close()  # no new connections: queued ones are reset, not left waiting
            clean = self._stop_workers()
            for store in self.stores.values():
                store.close()
            shutil.rmtree(self.run_dir, ignore_errors=True)
        if status == 0 and self._stop.is_set():
            self._say("stopped")
            return 0 if clean else 1
        return status or 1


def run_supervisor(options: ServeOptions, log: TextIO = sys.stderr) -> int:
    """Serve with ``options.workers`` processes until SIGTERM or SIGINT; the exit status."""
    return Supervisor(options, log).run()


__all__ = ["MAX_QUICK_DEATHS", "QUICK_DEATH_S", "Supervisor", "run_supervisor"]
