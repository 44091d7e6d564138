"""A decoder that counts its calls and can hold until released: proves what decodes, and when."""

from __future__ import annotations

import threading


class CountingDecoder:
    """Returns ``value``; counts calls; with a ``gate``, blocks until the gate opens (10 s cap)."""

    def __init__(self, value: object = "decoded", *, gate: threading.Event | None = None) -> None:
        self.value = value
        self.calls = 0
        self.gate = gate
        self.started = threading.Event()
        self._lock = threading.Lock()

    def __call__(self) -> object:
        with self._lock:
            self.calls += 1
        self.started.set()
        if self.gate is not None:
            assert self.gate.wait(10), "test gate never opened"
        return self.value
