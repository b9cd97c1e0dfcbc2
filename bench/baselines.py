"""The machine's own limits, measured in the same run as the broker figures they are compared with.

A Python broker is only worth running if it stays near what the machine can do without it, so every
bench figure is also reported as a fraction of one of these ceilings, all moving the same number of
bytes in the same chunk size between two processes over loopback TCP:

- ``tcp``: raw loopback TCP, sender ``sendall`` -> receiver ``recv_into`` (nothing stored);
- ``file_write``: sequential ``write()`` of the bytes to a file on the broker's data disk (page
  cache, no fsync: the broker does not fsync per request either);
- ``tcp_to_file``: loopback TCP into a receiver that appends every chunk to a file on that disk --
  the ceiling of *produce* (what a broker with zero per-request work would reach);
- ``sendfile_to_tcp``: ``os.sendfile`` of that file to a loopback socket, receiver discarding --
  the ceiling of *consume* (zero-copy fetch with zero per-request work).

Run alone: ``.venv/bin/python bench/baselines.py [--mib 512] [--repeat 3] [--dir DIR]``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import socket
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

MIB = 1024 * 1024
CHUNK = MIB  # a full librdkafka request is about 1 MB; reads and writes move this much at a time

#: Name -> what the baseline is the ceiling of; used in report footnotes.
DESCRIPTIONS = {
    "tcp": "loopback TCP, sendall -> recv_into, 1 MiB chunks",
    "file_write": "sequential write() to the data disk (page cache, no fsync), 1 MiB chunks",
    "tcp_to_file": "loopback TCP into a process appending to a file on the data disk (produce ceiling)",
    "sendfile_to_tcp": "os.sendfile of a file on the data disk to loopback TCP (consume ceiling)",
}


@dataclass
class Baseline:
    """One baseline over ``repeat`` runs: MB/s (10^6 bytes/s) median and spread."""

    name: str
    description: str
    bytes: int
    mb_per_s: float
    min: float
    max: float
    runs: list[float]


def _receiver(port_conn: mp.connection.Connection, total: int, path: str | None) -> None:
    """Child process: accept one connection, read ``total`` bytes (appending to ``path`` if given), ack."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port_conn.send(server.getsockname()[1])
        conn, _ = server.accept()
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) if path else -1
    got = 0
    with conn:
        while got < total:
            n = conn.recv_into(buf)
            if n == 0:
                break
            if fd >= 0:
                written = 0
                while written < n:
                    written += os.write(fd, view[written:n])
            got += n
        if fd >= 0:
            os.close(fd)
        conn.sendall(b"k" if got == total else b"x")


def _transfer(total: int, path: str | None, send: Callable[[socket.socket], None]) -> float:
    """Seconds to move ``total`` bytes with ``send`` to a fresh receiver process, until its ack."""
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_receiver, args=(child, total, path), daemon=True)
    proc.start()
    try:
        port = parent.recv()
        with socket.create_connection(("127.0.0.1", port)) as sock:
            start = time.perf_counter()
            send(sock)
            ack = sock.recv(1)
            elapsed = time.perf_counter() - start
        if ack != b"k":
            raise RuntimeError("baseline receiver got fewer bytes than were sent")
        return elapsed
    finally:
        proc.join(timeout=30)


def _sendall(total: int) -> Callable[[socket.socket], None]:
    chunk = memoryview(os.urandom(CHUNK))

    def send(sock: socket.socket) -> None:
        left = total
        while left > 0:
            sock.sendall(chunk[: min(left, CHUNK)])
            left -= CHUNK

    return send


def tcp(total: int, directory: Path) -> float:
    return _transfer(total, None, _sendall(total))


def tcp_to_file(total: int, directory: Path) -> float:
    path = directory / "baseline-tcp-to-file.bin"
    try:
        return _transfer(total, str(path), _sendall(total))
    finally:
        path.unlink(missing_ok=True)


def file_write(total: int, directory: Path) -> float:
    path = directory / "baseline-file-write.bin"
    chunk = memoryview(os.urandom(CHUNK))
    start = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        left = total
        while left > 0:
            left -= os.write(fd, chunk[: min(left, CHUNK)])
    finally:
        os.close(fd)
    elapsed = time.perf_counter() - start
    path.unlink()
    return elapsed


def sendfile_to_tcp(total: int, directory: Path) -> float:
    path = directory / "baseline-sendfile.bin"
    chunk = os.urandom(CHUNK)
    with open(path, "wb") as f:
        for _ in range(0, total, CHUNK):
            f.write(chunk)
    size = path.stat().st_size

    def send(sock: socket.socket) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            offset = 0
            while offset < size:
                offset += os.sendfile(sock.fileno(), fd, offset, min(CHUNK, size - offset))
        finally:
            os.close(fd)

    try:
        return _transfer(size, None, send)
    finally:
        path.unlink(missing_ok=True)


BASELINES: dict[str, Callable[[int, Path], float]] = {
    "tcp": tcp,
    "file_write": file_write,
    "tcp_to_file": tcp_to_file,
    "sendfile_to_tcp": sendfile_to_tcp,
}


def measure_all(total: int, directory: Path, repeat: int) -> dict[str, Baseline]:
    """Every baseline ``repeat`` times, interleaved so slow phases of a noisy machine hit them all."""
    rates: dict[str, list[float]] = {name: [] for name in BASELINES}
    for _ in range(repeat):
        for name, fn in BASELINES.items():
            rates[name].append(total / fn(total, directory) / 1e6)
    return {
        name: Baseline(name, DESCRIPTIONS[name], total, statistics.median(r), min(r), max(r), r)
        for name, r in rates.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the machine's loopback and disk ceilings")
    parser.add_argument("--mib", type=int, default=512, help="MiB moved per run (default 512)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="directory on the disk to measure (default: temp)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        results = measure_all(args.mib * MIB, Path(tmp), args.repeat)
    print(json.dumps({name: asdict(b) for name, b in results.items()}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
