"""``mediaref serve --workers N`` as a subprocess: one port, N processes, one cache.

What a fleet operator relies on: a repeat is a hit whichever worker takes it, ``/metrics`` counts
every worker, a worker that dies is replaced while the others keep serving (its own in-flight
requests end at once, none hangs), and SIGTERM drains every worker before the server exits 0.
"""

from __future__ import annotations

import base64
import http.client
import io
import json
import os
import re
import signal
import socket
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from PIL import Image

from _serve_process import ServerProcess

CHAT = "/v1/chat/completions/render"


def _jpeg(seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "JPEG")
    return buffer.getvalue()


def _chat(jpeg: bytes) -> bytes:
    url = "data:image/jpeg;base64," + base64.b64encode(jpeg).decode()
    content = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "Hi"}]
    return json.dumps({"messages": [{"role": "user", "content": content}]}).encode()


def _request(url: str, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    """One request on a connection of its own (so the kernel picks a worker for each)."""
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def _metric(text: str, name: str) -> float:
    """The sum of a metric's samples (0 when absent)."""
    return sum(
        float(v) for v in re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M)
    )


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as handle:
        return [int(child) for child in handle.read().split()]


def _worker_holding(server: ServerProcess, client: socket.socket) -> int:
    """The worker process whose descriptor is the server's end of ``client``'s connection."""
    server_port = int(server.url.rsplit(":", 1)[1])
    client_port = client.getsockname()[1]
    inode = None
    with open("/proc/net/tcp") as table:
        for line in table.readlines()[1:]:
            fields = line.split()
            local, remote = fields[1], fields[2]
            if (
                int(local.split(":")[1], 16) == server_port
                and int(remote.split(":")[1], 16) == client_port
            ):
                inode = fields[9]
    assert inode is not None, "the connection was not accepted"
    for child in _children(server.process.pid):
        for fd in os.listdir(f"/proc/{child}/fd"):
            try:
                if os.readlink(f"/proc/{child}/fd/{fd}") == f"socket:[{inode}]":
                    return child
            except OSError:
                continue
    raise AssertionError("no worker holds the connection")


def _half_sent(url: str, body: bytes) -> socket.socket:
    """A connection that sent a request's headers and half its body, and waits."""
    host, port = url.removeprefix("http://").split(":")
    client = socket.create_connection((host, int(port)), timeout=30)
    head = (
        f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    client.sendall(head + body[: len(body) // 2])
    return client


def _finish(client: socket.socket, body: bytes) -> bytes:
    client.sendall(body[len(body) // 2 :])
    answer = b""
    while chunk := client.recv(1 << 16):
        answer += chunk
        if b"\r\n\r\n" in answer:
            head, _, rest = answer.partition(b"\r\n\r\n")
            length = int(re.search(rb"Content-Length: (\d+)", head, re.I).group(1))  # type: ignore[union-attr]
            if len(rest) >= length:
                break
    return answer


@pytest.fixture
def server() -> Iterator[ServerProcess]:
    process = ServerProcess(
        "--workers", "2", "--body-timeout", "120", "--min-body-rate-kb", "0.001"
    )
    yield process
    process.stop()


def _wait_for(predicate: Any, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError("timed out")


def test_a_repeat_is_a_hit_whichever_worker_takes_it(server: ServerProcess) -> None:
    assert "2 workers" in "".join(server.lines)
    body = _chat(_jpeg(1))
    host, port = server.url.removeprefix("http://").split(":")
    first_connection = http.client.HTTPConnection(host, int(port), timeout=60)
    first_connection.request("POST", CHAT, body=body, headers={"Content-Type": "application/json"})
    response = first_connection.getresponse()
    first = response.read()
    assert response.status == 200, first
    first_worker = _worker_holding(server, first_connection.sock)
    # The kernel may hand every fresh connection to the same worker; stopping the first one
    # leaves the other as the only one that can accept, so the repeat surely reaches it.
    os.kill(first_worker, signal.SIGSTOP)
    try:
        status, answer = _request(server.url, "POST", CHAT, body)
    finally:
        os.kill(first_worker, signal.SIGCONT)
        first_connection.close()
    assert status == 200 and json.loads(answer)["features"] == json.loads(first)["features"]
    _, metrics = _request(server.url, "GET", "/metrics")
    text = metrics.decode()
    assert _metric(text, "mediaref_worker_cache_hits_total") >= 1  # found in the shared store
    assert _metric(text, "mediaref_workers") == 2
    assert _metric(text, "mediaref_workers_reporting") == 2
    assert _metric(text, "mediaref_decodes_total") == 1  # one decode for the whole server
    requests = _metric(text, "mediaref_requests_total")
    assert requests >= 2  # every worker's requests are counted, not the answering one's


def test_a_dead_worker_is_replaced_and_only_its_requests_fail(server: ServerProcess) -> None:
    body = _chat(_jpeg(2))
    waiting = [_half_sent(server.url, body) for _ in range(6)]
    _wait_for(lambda: all(_safe_holder(server, c) for c in waiting), 10)
    holders = {client: _worker_holding(server, client) for client in waiting}
    victim = next(iter(holders.values()))
    os.kill(victim, signal.SIGKILL)
    for client, holder in holders.items():
        if holder == victim:
            client.settimeout(5)  # the kernel ends the dead worker's connections at once
            try:
                assert client.recv(1) == b""
            except ConnectionResetError:
                pass
        else:
            answer = _finish(client, body)
            assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
        client.close()
    assert _request(server.url, "GET", "/health")[0] == 200  # the other worker serves meanwhile
    _wait_for(lambda: "restarting" in "".join(server.lines), 10)
    _wait_for(
        lambda: (
            _metric(
                _request(server.url, "GET", "/metrics")[1].decode(), "mediaref_workers_reporting"
            )
            == 2
        ),
        120,
    )
    assert _request(server.url, "POST", CHAT, body)[0] == 200


def _safe_holder(server: ServerProcess, client: socket.socket) -> bool:
    try:
        _worker_holding(server, client)
    except AssertionError:
        return False
    return True


def _segments() -> set[str]:
    return {name for name in os.listdir("/dev/shm") if name.startswith("mediaref")}


def test_sigterm_drains_every_worker_then_exits_0() -> None:
    before = _segments()
    server = ServerProcess("--workers", "2", "--body-timeout", "120", "--min-body-rate-kb", "0.001")
    body = _chat(_jpeg(3))
    waiting = [_half_sent(server.url, body) for _ in range(4)]
    _wait_for(lambda: all(_safe_holder(server, c) for c in waiting), 10)
    assert _segments() - before  # the workers' shared store
    server.process.send_signal(signal.SIGTERM)
    time.sleep(1.0)
    for client in waiting:  # accepted before the signal: each is answered
        assert _finish(client, body).startswith(b"HTTP/1.1 200")
        client.close()
    assert server.stop() == 0
    assert not _segments() - before  # and it went with the server
