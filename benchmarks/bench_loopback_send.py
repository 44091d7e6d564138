"""What writing one hot render response costs the server's core: the loopback send alone.

A hot render response is ~16.9 MB of JSON (vLLM's wire format: the tensors as base64). This
sends that many bytes over a loopback TCP connection, a slice at a time, to a reader process on
another core, and reports the CPU the sending thread spent per response (``time.thread_time``:
the kernel's copy into socket buffers is charged to the sender) beside the wall time. That is a
floor under a hot request's cost on the server's one core, whatever the server does around it.

    python benchmarks/bench_loopback_send.py [--mb 16.9] [--responses 100]
"""

from __future__ import annotations

import argparse
import os
import socket
import time


def sender_cost(size: int, slice_bytes: int, responses: int) -> tuple[float, float]:
    """(sender CPU seconds, wall seconds) per response of ``size`` bytes."""
    cores = sorted(os.sched_getaffinity(0))
    listener = socket.create_server(("127.0.0.1", 0))
    reader = os.fork()
    if reader == 0:  # the client: reads and drops everything, on another core when there is one
        os.sched_setaffinity(0, {cores[-1]})
        connection = socket.create_connection(listener.getsockname())
        buffer = bytearray(1 << 22)
        while connection.recv_into(buffer):
            pass
        os._exit(0)
    connection, _ = listener.accept()
    os.sched_setaffinity(0, {cores[0]})
    view = memoryview(os.urandom(size))
    cpu, wall = time.thread_time(), time.perf_counter()
    for _ in range(responses):
        for start in range(0, size, slice_bytes):
            connection.sendall(view[start : start + slice_bytes])
    cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
    connection.close()
    os.waitpid(reader, 0)
    return cpu / responses, wall / responses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=16.9, help="response size, MB")
    parser.add_argument("--responses", type=int, default=100)
    args = parser.parse_args()
    size = int(args.mb * 1e6)
    print(f"{args.mb} MB responses over loopback, {args.responses} of them")
    for slice_kib in (256, 1024, 4096):
        cpu, wall = sender_cost(size, slice_kib * 1024, args.responses)
        print(
            f"  {slice_kib:>5} KiB slices: sender CPU {cpu * 1e3:5.2f} ms, wall {wall * 1e3:5.2f} ms"
        )


if __name__ == "__main__":
    main()
