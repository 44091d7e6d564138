"""``python -m mediaref serve`` as a subprocess on a free loopback port, and its resources.

The subprocess tests (``test_serve_load.py``, ``test_serve_under_attack.py``) read the server's
descriptors, threads and memory from ``/proc`` while clients load it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping

WAIT_S = 120.0


class ServerProcess:
    """``python -m mediaref serve`` on a free loopback port; its stderr collected."""

    def __init__(self, *args: str, env: Mapping[str, str] | None = None) -> None:
        settings = {**os.environ, **(env or {}), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        for name in ("MEDIAREF_MEDIA_URL_ALLOW_PRIVATE_IPS", "VLLM_MEDIA_CACHE", "http_proxy"):
            settings.pop(name, None)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mediaref", "serve", "--port", "0", *args],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            env=settings,
        )
        self.lines: list[str] = []
        self._listening = threading.Event()
        self._reader = threading.Thread(target=self._read, name="server-stderr", daemon=True)
        self._reader.start()
        assert self._listening.wait(WAIT_S), "".join(self.lines)
        (port,) = re.findall(r"listening on http://127\.0\.0\.1:(\d+)", "".join(self.lines))
        self.url = f"http://127.0.0.1:{port}"

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)
            if "listening on" in line:
                self._listening.set()
        self._listening.set()

    def pids(self) -> list[int]:
        """The server's process and its descendants (``--workers``' workers)."""
        found, pending = [], [self.process.pid]
        while pending:
            pid = pending.pop()
            found.append(pid)
            try:
                with open(f"/proc/{pid}/task/{pid}/children") as children:
                    pending.extend(int(child) for child in children.read().split())
            except OSError:
                continue
        return found

    def cpu_seconds(self) -> float:
        """CPU time (user and system) the server's processes have used, summed over :meth:`pids`."""
        ticks = 0
        for pid in self.pids():
            try:
                with open(f"/proc/{pid}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue  # a worker that just exited
            ticks += int(fields[11]) + int(fields[12])
        return ticks / os.sysconf("SC_CLK_TCK")

    def status(self, field: str) -> int:
        """A ``/proc/<pid>/status`` field in bytes (kB fields) or as a count, summed over
        :meth:`pids`."""
        total = 0
        for pid in self.pids():
            try:
                with open(f"/proc/{pid}/status") as status:
                    for line in status:
                        if line.startswith(field + ":"):
                            value = line.split()[1]
                            total += int(value) * (1024 if line.rstrip().endswith("kB") else 1)
            except OSError:
                continue
        return total

    def fds(self) -> int:
        total = 0
        for pid in self.pids():
            try:
                total += len(os.listdir(f"/proc/{pid}/fd"))
            except OSError:
                continue
        return total

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(WAIT_S)
        self._reader.join(WAIT_S)
        return code
