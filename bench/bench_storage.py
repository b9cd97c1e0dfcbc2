"""Benchmarks of the segment storage engine (issue 3), each against a plain-syscall baseline
measured in the same run on the same disk, since absolute figures on a shared VM mislead:

- append: ``append_as_leader`` MB/s for 1 KiB, 16 KiB and 1 MiB batches (one batch per call,
  the worst case) as a ratio to sequential ``write()`` of the same bytes in the same sizes
  (goal >= 0.8 from 16 KiB). Each batch carries a newer timestamp than the last, as a
  producer's do, so the time index takes an entry wherever the offset index does. The engine
  reserves blocks ahead of its appends (``storage.segment.reserve.bytes``) and the plain file
  does not: that is part of what is measured; ``--reserve-bytes 0`` measures without it;
- read: fetches of 1 MiB through ``read()`` + ``file_range()`` + ``os.sendfile`` to a loopback
  TCP socket, as a ratio to plain ``sendfile`` of the same segment file in 1 MiB chunks (goal >= 0.9);
- rss: a fresh process with 1,000 partitions, RSS after each GB appended, then after a restart and
  a read of every partition (goal: flat, independent of the log size);
- recovery: a writer flushes a base, appends an unflushed tail and is killed with SIGKILL; the
  time ``open()`` takes afterwards, for several tails and bases (goal: grows with the tail only).

Every ratio is per run (ours and the baseline back to back, order alternating, ``sync`` before
each), reported as median with min..max over ``--runs``.

Run: ``.venv/bin/python bench/bench_storage.py [--runs 5] [--quick] [--only append,read,rss,recovery]
[--dir PATH] [--json] [--reserve-bytes N]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio
from rich.console import Console
from rich.table import Table

from odradek import records
from odradek.config import default_config
from odradek.interfaces import TopicPartition
from odradek.plugins.storage_segment.storage import SegmentLogStorage

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def fmt(s: dict[str, float], digits: int = 2) -> str:
    return f"{s['median']:.{digits}f} ({s['min']:.{digits}f}..{s['max']:.{digits}f})"


def make_batch(size: int) -> bytearray:
    """One batch of about ``size`` bytes (a single record, as a big producer batch would be)."""
    value = os.urandom(max(1, size - records.HEADER_SIZE - 16))
    return bytearray(records.build_batch([(b"key", value, [], int(time.time() * 1000))]))


#: ``--reserve-bytes``: the step of ``storage.segment.reserve.bytes`` (None: the engine's default)
RESERVE_BYTES: int | None = None


async def open_storage(path: Path, **overrides: Any) -> SegmentLogStorage:
    storage = SegmentLogStorage(default_config(log_dirs=[str(path)], **overrides))
    if RESERVE_BYTES is not None:
        storage.ctx.reserve_bytes = RESERVE_BYTES
    await storage.open()
    return storage


# -- append ---------------------------------------------------------------------------------------


async def bench_append(root: Path, runs: int, chunk: int) -> list[dict[str, Any]]:
    """Per batch size, ``4 * runs`` pairs of chunks: ``chunk`` bytes appended to one growing log,
    then the same bytes written to one growing plain file (order alternating per pair). Fine
    interleaving makes both sides see the same background load of a shared machine."""
    out = []
    storage = await open_storage(root / "append")
    for size in (KIB, 16 * KIB, MIB):
        data = make_batch(size)
        metas = records.validate_batches(data)
        count = max(4, chunk // len(data))
        log = storage.get_or_create_log(TopicPartition("append", size), storage.config.topic_config())
        log.append_as_leader(data, metas, 0)  # the first append maps the indexes
        append = log.append_as_leader
        path = root / "append" / "plain.bin"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        write = os.write
        write(fd, data)
        os.sync()

        clock = iter(range(int(time.time() * 1000), 1 << 62))

        def newer_metas() -> list[list[records.BatchMeta]]:
            """The batch's metadata with a newer max timestamp per append (built untimed; the
            log reads the timestamp from the metadata, so the bytes can stay the same)."""
            return [[metas[0]._replace(max_timestamp=next(clock))] for _ in range(count)]  # noqa: B023

        def ours() -> float:
            seq = newer_metas()
            start = time.perf_counter()
            for batch_metas in seq:
                append(data, batch_metas, 0)  # noqa: B023 -- runs before the loop variables change
            return time.perf_counter() - start

        def plain() -> float:
            seq = newer_metas()  # the same loop over the same list, for the same loop overhead
            start = time.perf_counter()
            for _ in seq:
                write(fd, data)  # noqa: B023
            return time.perf_counter() - start

        ours_rates, plain_rates, ratios = [], [], []
        mb = count * len(data) / 1e6
        for pair in range(4 * runs):
            timings: dict[str, float] = {}
            order: list[tuple[str, Callable[[], float]]] = [("ours", ours), ("plain", plain)]
            for name, fn in order if pair % 2 == 0 else order[::-1]:
                timings[name] = fn()
            ours_rates.append(mb / timings["ours"])
            plain_rates.append(mb / timings["plain"])
            ratios.append(timings["plain"] / timings["ours"])
        os.close(fd)
        path.unlink()
        await storage.delete_log(TopicPartition("append", size))
        out.append(
            {
                "batch_bytes": len(data),
                "appends_per_chunk": count,
                "pairs": 4 * runs,
                "ours_mb_s": spread(ours_rates),
                "write_mb_s": spread(plain_rates),
                "ratio": spread(ratios),
                "goal": 0.8 if size >= 16 * KIB else None,
            }
        )
    await storage.close()
    return out


# -- read -----------------------------------------------------------------------------------------


class Drain:
    """A loopback TCP connection whose receiving end a thread drains as fast as it can."""

    def __init__(self) -> None:
        server = socket.create_server(("127.0.0.1", 0))
        self.sender = socket.create_connection(server.getsockname())
        self.receiver, _ = server.accept()
        server.close()
        self.received = 0
        self._want = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        buf = bytearray(4 * MIB)
        while True:
            n = self.receiver.recv_into(buf)
            if not n:
                return
            self.received += n
            if self.received >= self._want:
                self._done.set()

    def expect(self, total: int) -> None:
        self._done.clear()
        self._want = self.received + total

    def wait(self) -> None:
        self._done.wait()

    def close(self) -> None:
        self.sender.close()  # the receiver sees EOF and its thread ends
        self._thread.join()
        self.receiver.close()


def sendfile_all(sock: socket.socket, fd: int, position: int, length: int) -> None:
    out = sock.fileno()
    while length:
        sent = os.sendfile(out, fd, position, length)
        position += sent
        length -= sent


async def bench_read(root: Path, runs: int, total: int) -> dict[str, Any]:
    storage = await open_storage(root / "read")
    log = storage.get_or_create_log(TopicPartition("read", 0), storage.config.topic_config())
    data = make_batch(16 * KIB)
    metas = records.validate_batches(data)
    while log.size_in_bytes < total:
        log.append_as_leader(data, metas, 0)
    segment = log.segments[0]
    size = segment.size
    drain = Drain()
    fetch = MIB

    def ours() -> float:
        drain.expect(size)
        start = time.perf_counter()
        offset = 0
        end = log.log_end_offset
        while offset < end:
            fetched = log.read(offset, fetch)
            span = fetched.file_range()
            assert span is not None
            sendfile_all(drain.sender, span.fd, span.position, span.length)
            offset += span.length // len(data)  # equal batches: the next offset without parsing
            fetched.release()
        drain.wait()
        return time.perf_counter() - start

    def plain() -> float:
        fd = os.open(segment.log.path, os.O_RDONLY)
        drain.expect(size)
        start = time.perf_counter()
        position = 0
        while position < size:
            length = min(fetch, size - position)
            sendfile_all(drain.sender, fd, position, length)
            position += length
        drain.wait()
        elapsed = time.perf_counter() - start
        os.close(fd)
        return elapsed

    ours()
    plain()  # warm both paths and the page cache
    ratios, ours_rates, plain_rates = [], [], []
    for run in range(runs):
        timings = {}
        for name, fn in [("ours", ours), ("plain", plain)] if run % 2 == 0 else [("plain", plain), ("ours", ours)]:
            timings[name] = fn()
        ours_rates.append(size / 1e6 / timings["ours"])
        plain_rates.append(size / 1e6 / timings["plain"])
        ratios.append(timings["plain"] / timings["ours"])
    drain.close()
    await storage.close()
    return {
        "log_bytes": size,
        "fetch_bytes": fetch,
        "batch_bytes": len(data),
        "ours_mb_s": spread(ours_rates),
        "sendfile_mb_s": spread(plain_rates),
        "ratio": spread(ratios),
        "goal": 0.9,
    }


# -- rss (in a child process, so the figure is the engine's alone) ------------------------------------

RSS_CHILD = r"""
import json, os, sys, time, trio
from odradek import records
from odradek.config import default_config
from odradek.interfaces import TopicPartition
from odradek.plugins.storage_segment.storage import SegmentLogStorage

def rss():
    fields = {}
    for line in open("/proc/self/status"):
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile"):
            fields[key] = int(value.split()[0]) * 1024
    return fields

async def main(path, partitions, gib_steps):
    cfg = default_config(log_dirs=[path], log_segment_bytes=64 << 20)
    storage = SegmentLogStorage(cfg)
    await storage.open()
    tps = [TopicPartition("rss", p) for p in range(partitions)]
    logs = [storage.get_or_create_log(tp, cfg.topic_config()) for tp in tps]
    data = bytearray(records.build_batch([(b"k", os.urandom(64 * 1024 - 90), [], int(time.time() * 1000))]))
    metas = records.validate_batches(data)
    out = [{"log_bytes": 0, **rss()}]
    written = 0
    for step in range(1, gib_steps + 1):
        while written < step << 30:
            for log in logs:
                log.append_as_leader(data, metas, 0)
                written += len(data)
        out.append({"log_bytes": written, **rss()})
    await storage.close()
    storage = SegmentLogStorage(cfg)
    await storage.open()
    for tp in tps:
        fetched = storage.get_log(tp).read(0, 1 << 20)
        fetched.to_bytes()
        fetched.release()
    out.append({"log_bytes": written, "after": "restart + one fetch per partition", **rss()})
    await storage.close()
    print(json.dumps(out))

trio.run(main, sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
"""


def bench_rss(root: Path, partitions: int, gib_steps: int) -> list[dict[str, Any]]:
    path = root / "rss"
    path.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", RSS_CHILD, str(path), str(partitions), str(gib_steps)],
        capture_output=True,
        text=True,
        check=True,
    )
    shutil.rmtree(path)
    result: list[dict[str, Any]] = json.loads(proc.stdout)
    return result


# -- recovery --------------------------------------------------------------------------------------

WRITER_CHILD = r"""
import os, sys, time, trio
from odradek import records
from odradek.config import default_config
from odradek.interfaces import TopicPartition
from odradek.plugins.storage_segment.storage import SegmentLogStorage

async def main(path, base, tail):
    cfg = default_config(log_dirs=[path], log_segment_bytes=64 << 20)
    storage = SegmentLogStorage(cfg)
    await storage.open()
    log = storage.get_or_create_log(TopicPartition("recovery", 0), cfg.topic_config())
    data = bytearray(records.build_batch([(b"k", os.urandom(64 * 1024 - 90), [], int(time.time() * 1000))]))
    metas = records.validate_batches(data)
    while log.size_in_bytes < base:
        log.append_as_leader(data, metas, 0)
    await storage.flush_all()
    await storage.write_own_checkpoints()
    flushed = log.size_in_bytes
    while log.size_in_bytes < flushed + tail:
        log.append_as_leader(data, metas, 0)
    print("ready", flushed, log.size_in_bytes - flushed, flush=True)
    await trio.sleep_forever()

trio.run(main, sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
"""

RECOVER_CHILD = r"""
import logging, sys, time, trio
from odradek.config import default_config
from odradek.plugins.storage_segment.storage import SegmentLogStorage

async def main(path):
    storage = SegmentLogStorage(default_config(log_dirs=[path], log_segment_bytes=64 << 20))
    start = time.perf_counter()
    await storage.open()
    print(time.perf_counter() - start)
    await storage.close()

trio.run(main, sys.argv[1])
"""


def bench_recovery(root: Path, bases: list[int], tails: list[int], runs: int) -> list[dict[str, Any]]:
    """Per base size, one log that only grows: each round a writer tops it up to the base,
    flushes, appends a tail and is SIGKILLed; a fresh process times ``open()`` (and closes
    cleanly, so the next round's flushed part includes this tail)."""
    out = []
    for base in bases:
        path = root / "recovery"
        path.mkdir()
        for tail in tails:
            times, flushed_sizes = [], []
            for _ in range(runs):
                writer = subprocess.Popen(
                    [sys.executable, "-c", WRITER_CHILD, str(path), str(base), str(tail)],
                    stdout=subprocess.PIPE,
                    text=True,
                )
                assert writer.stdout is not None
                ready = writer.stdout.readline().split()
                assert ready and ready[0] == "ready", ready
                writer.send_signal(signal.SIGKILL)
                writer.wait()
                writer.stdout.close()
                done = subprocess.run(
                    [sys.executable, "-c", RECOVER_CHILD, str(path)], capture_output=True, text=True, check=True
                )
                times.append(float(done.stdout.strip()))
                flushed_sizes.append(int(ready[1]))
            out.append(
                {
                    "flushed_bytes": statistics.median(flushed_sizes),
                    "unflushed_bytes": tail,
                    "open_seconds": spread(times),
                }
            )
        shutil.rmtree(path)
    return out


# -- report -----------------------------------------------------------------------------------------


def render(results: dict[str, Any], console: Console) -> None:
    if "append" in results:
        t = Table(title="append_as_leader vs write() (MB/s, median (min..max))")
        for col in ("batch", "odradek MB/s", "write() MB/s", "ratio", "goal"):
            t.add_column(col)
        for r in results["append"]:
            goal = r["goal"]
            t.add_row(
                f"{r['batch_bytes']:,} B",
                fmt(r["ours_mb_s"], 0),
                fmt(r["write_mb_s"], 0),
                fmt(r["ratio"]),
                "-" if goal is None else ("met" if r["ratio"]["median"] >= goal else f"missed (>= {goal})"),
            )
        console.print(t)
    if "read" in results:
        r = results["read"]
        t = Table(title=f"fetch via file range + sendfile vs plain sendfile ({r['log_bytes'] / 1e6:.0f} MB log)")
        for col in ("odradek MB/s", "sendfile MB/s", "ratio", "goal"):
            t.add_column(col)
        t.add_row(
            fmt(r["ours_mb_s"], 0),
            fmt(r["sendfile_mb_s"], 0),
            fmt(r["ratio"]),
            "met" if r["ratio"]["median"] >= r["goal"] else f"missed (>= {r['goal']})",
        )
        console.print(t)
    if "rss" in results:
        t = Table(title="RSS of a process with 1,000 partitions")
        for col in ("log size", "VmRSS MB", "RssAnon MB", "RssFile MB", "when"):
            t.add_column(col)
        for r in results["rss"]:
            t.add_row(
                f"{r['log_bytes'] / GIB:.2f} GiB",
                f"{r['VmRSS'] / 1e6:.1f}",
                f"{r.get('RssAnon', 0) / 1e6:.1f}",
                f"{r.get('RssFile', 0) / 1e6:.1f}",
                r.get("after", "after appending"),
            )
        console.print(t)
    if "recovery" in results:
        t = Table(title="open() after kill -9 (seconds, median (min..max))")
        for col in ("flushed", "unflushed tail", "open() s"):
            t.add_column(col)
        for r in results["recovery"]:
            t.add_row(
                f"{r['flushed_bytes'] / MIB:.0f} MiB",
                f"{r['unflushed_bytes'] / MIB:.0f} MiB",
                fmt(r["open_seconds"], 3),
            )
        console.print(t)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument("--only", default="append,read,rss,recovery")
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir under the repo's disk)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    parser.add_argument(
        "--reserve-bytes",
        type=int,
        default=None,
        help="storage.segment.reserve.bytes for the engine (default: its default; 0: appends reserve no blocks ahead)",
    )
    args = parser.parse_args()
    global RESERVE_BYTES
    RESERVE_BYTES = args.reserve_bytes
    only = set(args.only.split(","))
    console = Console(stderr=args.json)
    root = Path(tempfile.mkdtemp(prefix="bench-storage-", dir=args.dir or Path(__file__).resolve().parent))
    results: dict[str, Any] = {"runs": args.runs, "quick": args.quick, "reserve_bytes": args.reserve_bytes}
    try:
        if "append" in only:
            console.print("append ...")
            results["append"] = trio.run(bench_append, root, args.runs, (4 if args.quick else 8) * MIB)
        if "read" in only:
            console.print("read ...")
            results["read"] = trio.run(bench_read, root, args.runs, (64 if args.quick else 512) * MIB)
        if "rss" in only:
            console.print("rss ...")
            results["rss"] = bench_rss(root, 1000, 1 if args.quick else 3)
        if "recovery" in only:
            console.print("recovery ...")
            bases = [256 * MIB] if args.quick else [512 * MIB, 3 * GIB]
            tails = [0, 16 * MIB] if args.quick else [0, 64 * MIB, 256 * MIB, 1 * GIB]
            results["recovery"] = bench_recovery(root, bases, tails, 2 if args.quick else 3)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    render(results, console)
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
