"""What the supervisor of ``mediaref serve --workers N`` hands each worker (:mod:`.workers`)."""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mediaref.serve.worker_metrics import worker_socket


@dataclass(frozen=True)
class WorkerPlan:
    """What the supervisor hands one worker (picklable: it crosses ``spawn``)."""

    index: int
    count: int
    sock: socket.socket
    stores: Mapping[str, str]
    """Each served model's shared-memory store (its segment's name)."""
    secret: bytes
    run_dir: str
    ready: Any
    """A ``multiprocessing`` queue the worker puts its index on once it accepts connections."""

    @property
    def metrics_socket(self) -> str:
        return worker_socket(self.run_dir, self.index)

    def sibling_sockets(self) -> list[str]:
        return [worker_socket(self.run_dir, i) for i in range(self.count) if i != self.index]


__all__ = ["WorkerPlan"]
