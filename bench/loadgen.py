"""Load generators for the bench: kcat and bench/rdkperf.c (C, librdkafka) for rate, ``odradek perf`` for latency.

The load generator must not be the bottleneck, so the highest-rate produce and consume runs use
kcat, which hands librdkafka lines of a pre-generated file with no per-record interpreter work, and
rdkperf (bench/rdkperf.c, built here on demand), which does not even that: kcat still does work
of its own per record (per consumed message, and splitting its input into lines), and at 100-byte
records that work, not the broker, set kcat's consume rate.
Latency runs use ``odradek perf`` (librdkafka through confluent-kafka), whose per-record Python
callbacks cost throughput but measure send-to-ack and end-to-end time. Every generator runs as a
child process, so its CPU seconds come from ``RUSAGE_CHILDREN`` and can be shown next to the
broker's: a generator near 100% of a core is a warning that the figure is the client's.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KCAT = shutil.which("kcat") or "/usr/bin/kcat"
_LETTERS = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
#: bytes.translate table mapping any byte to a letter: random, semi-compressible (~5.7 bits/byte).
_TO_LETTERS = bytes(_LETTERS[i % len(_LETTERS)] for i in range(256))


@dataclass
class ProcessRun:
    """One load-generator process (or group of them): wall seconds and CPU seconds spent."""

    wall_s: float
    cpu_s: float
    stdout: str = ""
    stderr: str = ""
    returncodes: list[int] = field(default_factory=list)


def make_input(path: Path, record_size: int, count: int) -> Path:
    """A file of ``count`` lines of ``record_size`` random letters each (kcat ``-l`` input).

    Every record differs, like real data, so compression ratios are not inflated by repetition.
    """
    if path.exists() and path.stat().st_size == count * (record_size + 1):
        return path
    lines_per_chunk = max(1, (4 << 20) // (record_size + 1))
    with open(path, "wb") as f:
        left = count
        while left > 0:
            n = min(left, lines_per_chunk)
            raw = os.urandom(n * record_size).translate(_TO_LETTERS)
            f.write(b"\n".join(raw[i : i + record_size] for i in range(0, len(raw), record_size)))
            f.write(b"\n")
            left -= n
    return path


def run_processes(commands: list[list[str]], timeout_s: float, stdout_path: Path | None = None) -> ProcessRun:
    """Start ``commands`` at once, wait for all; wall time from first start to last exit."""
    usage0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    procs: list[subprocess.Popen[bytes]] = []
    sinks = []
    if stdout_path is not None:
        stdout_path.write_bytes(b"")  # the processes append to it (whole lines: see json_summaries)
    start = time.perf_counter()
    for cmd in commands:
        out = open(stdout_path or os.devnull, "ab")  # noqa: SIM115 -- closed below
        sinks.append(out)
        procs.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE))
    errs: list[bytes] = []
    try:
        for p in procs:
            _, err = p.communicate(timeout=max(1.0, timeout_s - (time.perf_counter() - start)))
            errs.append(err)
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
            p.wait()
        raise RuntimeError(f"load generator did not finish within {timeout_s:.0f} s: {commands[0][:3]}") from None
    finally:
        for out in sinks:
            out.close()
    wall = time.perf_counter() - start
    usage1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime)
    stdout = stdout_path.read_text(errors="replace") if stdout_path else ""
    return ProcessRun(wall, cpu, stdout, b"".join(errs).decode(errors="replace"), [p.returncode for p in procs])


def kcat_produce(
    bootstrap: str,
    topic: str,
    input_file: Path,
    *,
    acks: str = "1",
    compression: str = "none",
    batch_size: int = 1_000_000,
    linger_ms: int = 5,
) -> list[str]:
    """kcat producing every line of ``input_file`` (null keys: librdkafka's sticky partitioner)."""
    return [
        KCAT,
        "-P",
        "-b",
        bootstrap,
        "-t",
        topic,
        "-l",
        str(input_file),
        "-z",
        compression,
        "-X",
        f"acks={acks}",
        "-X",
        f"linger.ms={linger_ms}",
        "-X",
        f"batch.size={batch_size}",
        "-X",
        "queue.buffering.max.messages=2000000",
        "-X",
        "queue.buffering.max.kbytes=2097151",
        "-X",
        "enable.idempotence=false",
    ]


def kcat_consume(bootstrap: str, topic: str, count: int) -> list[str]:
    """kcat reading ``count`` records from the beginning of every partition, printing nothing per record."""
    return [
        KCAT,
        "-C",
        "-b",
        bootstrap,
        "-t",
        topic,
        "-o",
        "beginning",
        "-e",
        "-c",
        str(count),
        "-f",
        "",
        "-X",
        "fetch.message.max.bytes=10485760",
        "-X",
        "fetch.max.bytes=52428800",
        "-X",
        "queued.max.messages.kbytes=1048576",
        "-X",
        "check.crcs=false",
    ]


def perf_command(mode: str, bootstrap: str, topic: str, num_records: int, **options: Any) -> list[str]:
    """``odradek perf MODE ... --json`` as a child process (options spelt like the CLI, ``_`` -> ``-``)."""
    odradek = shutil.which("odradek", path=str(Path(sys.executable).parent)) or "odradek"
    cmd = [odradek, "perf", mode, "--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(num_records)]
    for key, value in options.items():
        cmd += [f"--{key.replace('_', '-')}", str(value)]
    return [*cmd, "--json"]


def parse_json_summary(stdout: str, what: str) -> dict[str, Any]:
    """The JSON summary a generator (``what``) prints last on stdout."""
    start = stdout.find("{")
    if start < 0:
        raise RuntimeError(f"{what} printed no JSON summary: {stdout[-500:]!r}")
    result: dict[str, Any] = json.loads(stdout[start:])
    return result


def json_summaries(stdout: str, what: str, count: int) -> list[dict[str, Any]]:
    """The one-line JSON summaries of ``count`` generator processes that shared a stdout file
    (each prints its line with one write at exit, appended: lines never interleave)."""
    found = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    if len(found) != count:
        raise RuntimeError(f"{count} {what} processes printed {len(found)} JSON summaries: {stdout[-500:]!r}")
    return found


def parse_perf_json(stdout: str) -> dict[str, Any]:
    """The JSON summary ``odradek perf --json`` prints last."""
    return parse_json_summary(stdout, "odradek perf")


_EOF = re.compile(r"Reached end of topic \S+ \[(\d+)\] at offset (\d+)")


def kcat_eof_offsets(stderr: str) -> dict[int, int]:
    """Partition -> end offset from kcat's ``-e`` messages (how much it read, from offset 0)."""
    return {int(p): int(o) for p, o in _EOF.findall(stderr)}


def topic_record_count(bootstrap: str, topic: str) -> int:
    """Records appended to a fresh ``topic``: the sum of its partitions' high watermarks."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "odradek-bench-count", "log_level": 0})
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        total = 0
        for p in meta.partitions:
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            total += high
        return total
    finally:
        consumer.close()


_MOCK_CLUSTER = """
import sys, time, confluent_kafka
p = confluent_kafka.Producer({"bootstrap.servers": "", "test.mock.num.brokers": 1, "log_level": 0})
b = next(iter(p.list_topics(timeout=10).brokers.values()))
print(f"{b.host}:{b.port}", flush=True)
sys.stdin.read()
"""


class MockCluster:
    """librdkafka's built-in mock broker in a child process: a broker that costs (almost) nothing.

    kcat producing into it shows how fast the load generator itself can go on this machine, which
    is the ceiling of every kcat figure against a real broker. It keeps only a bounded tail of each
    partition, so it serves produce ceilings only.
    """

    def __enter__(self) -> MockCluster:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _MOCK_CLUSTER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert self.process.stdout is not None
        self.bootstrap = self.process.stdout.readline().decode().strip()
        if not self.bootstrap:
            raise RuntimeError("librdkafka's mock cluster did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def wireload_command(mode: str, bootstrap: str, topic: str, records: int, **options: Any) -> list[str]:
    """bench/wireload.py as a child process (options spelt like its CLI, ``_`` -> ``-``)."""
    cmd = [sys.executable, str(Path(__file__).with_name("wireload.py")), mode, "--bootstrap", bootstrap]
    cmd += ["--topic", topic, "--records", str(records)]
    for key, value in options.items():
        cmd += [f"--{key.replace('_', '-')}", str(value)]
    return cmd


RDKPERF_SOURCE = Path(__file__).with_name("rdkperf.c")
#: under bench/results/, which .gitignore keeps out of the repository
RDKPERF_BUILD_DIR = Path(__file__).with_name("results") / "build"
_RDKPERF_PREREQUISITES = "install them with `apt-get install librdkafka-dev build-essential`"


def rdkperf_binary(build_dir: Path = RDKPERF_BUILD_DIR) -> Path:
    """bench/rdkperf.c compiled into ``build_dir``, (re)built when missing or older than the source.

    Built on demand rather than shipped, so the bench needs only librdkafka's headers and a C
    compiler, and an edit to the source is never benchmarked with a stale binary. The binary is
    written under a temporary name and renamed, so a bench killed mid-build leaves no half file.
    """
    binary = build_dir / "rdkperf"
    if binary.exists() and binary.stat().st_mtime >= RDKPERF_SOURCE.stat().st_mtime:
        return binary
    cc = shutil.which("cc")
    if cc is None:
        raise RuntimeError(f"no C compiler (cc) to build {RDKPERF_SOURCE}: {_RDKPERF_PREREQUISITES}")
    build_dir.mkdir(parents=True, exist_ok=True)
    partial = build_dir / f"rdkperf.{os.getpid()}.partial"
    cmd = [cc, "-O2", "-Wall", str(RDKPERF_SOURCE), "-lrdkafka", "-o", str(partial)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        missing = "rdkafka.h" in done.stderr or "-lrdkafka" in done.stderr
        cause = "librdkafka's headers or library are missing" if missing else "the compiler failed"
        raise RuntimeError(
            f"building {RDKPERF_SOURCE.name} failed ({cause}); {_RDKPERF_PREREQUISITES}\n"
            f"$ {' '.join(cmd)}\n{done.stderr[-1500:]}"
        )
    os.replace(partial, binary)
    return binary


def _rdkperf(mode: str, bootstrap: str, topic: str, count: int) -> list[str]:
    return [str(rdkperf_binary()), mode, "-b", bootstrap, "-t", topic, "-c", str(count)]


def rdkperf_produce(
    bootstrap: str,
    topic: str,
    count: int,
    record_size: int,
    *,
    partitions: int | None = None,
    acks: str = "1",
    compression: str = "none",
    batch_size: int = 1_000_000,
    linger_ms: int = 5,
) -> list[str]:
    """rdkperf producing ``count`` random-letter records, as :func:`kcat_produce` configures kcat.

    Without ``partitions`` the keys are null (librdkafka's sticky partitioner); with it the records
    go round-robin to partitions 0..partitions-1 named explicitly, which spares librdkafka running
    its partitioner per record.
    """
    cmd = [*_rdkperf("produce", bootstrap, topic, count), "-s", str(record_size)]
    if partitions:
        cmd += ["-p", str(partitions)]
    settings = {"acks": acks, "compression.type": compression, "batch.size": batch_size, "linger.ms": linger_ms}
    for key, value in settings.items():
        cmd += ["-X", f"{key}={value}"]
    return cmd


def rdkperf_consume(bootstrap: str, topic: str, count: int) -> list[str]:
    """rdkperf reading ``count`` records from the beginning of every partition (its defaults are
    kcat_consume's fetch sizes, check.crcs=false, and a prefetch queue of up to 1M records)."""
    return _rdkperf("consume", bootstrap, topic, count)


def parse_rdkperf_json(stdout: str) -> dict[str, Any]:
    """The one-line JSON summary rdkperf prints at the end: records, bytes, seconds, errors, ..."""
    return parse_json_summary(stdout, "rdkperf")
