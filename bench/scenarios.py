"""The named bench scenarios and how one run of each is measured against a running broker.

Scenarios vary one factor at a time from a base case (100-byte records, one partition, acks=1, no
compression) instead of the full cross product, which would take an hour on two cores:

- ``produce-*``: kcat producing a pre-generated file (C client, librdkafka, linger 5 ms, 1 MB
  batches); the limit is the ``tcp_to_file`` baseline.
- ``consume-*``: kcat reading a topic filled beforehand (untimed) from the beginning; the limit is
  ``sendfile_to_tcp``.
- ``*-rdk`` (group ``rdk``): the same runs driven by bench/rdkperf.c, a small librdkafka program
  that does no per-record work beyond counting: kcat's own per-record work capped the 100-byte
  consume figure.
- ``*-wire``: bench/wireload.py, a generator with no per-record work at all (pipelined Produce of a
  pre-built batch; Fetch walking batch headers only): the broker's own ceiling, where kcat's is lower.
- ``produce-100b-ck``: ``odradek perf produce`` (librdkafka through Python) for send-to-ack latency.
- ``e2e``: ``odradek perf e2e`` at a fixed 10,000 records/s, acks=1: producer stamp -> consumer.
- ``partitions-1000``: one topic of 1,000 partitions, 10 kcat producer processes at once;
  ``partitions-1000-rdk`` the same with 10 rdkperf processes (null keys, as kcat's).
- ``storage``: bench/bench_storage.py (the storage engine without the broker), when present.

Each run uses a fresh topic, so a produce always appends to an empty partition and a run's
figures do not depend on how much the previous ones wrote.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import loadgen
from broker_process import Probe, Usage

COMPRESSIONS = ("gzip", "snappy", "lz4", "zstd")
MANY_PARTITIONS = 1000
MANY_PRODUCERS = 10


@dataclass(frozen=True)
class Scenario:
    """One named measurement: what to drive, how hard, and which baseline is its limit."""

    name: str
    kind: str  # produce | consume | {produce,consume}_{rdk,wire} | produce_ck | e2e | many[_rdk] | storage
    record_size: int = 100
    partitions: int = 1
    acks: str = "1"
    compression: str = "none"
    records: int = 0  # full run
    quick_records: int = 0  # --quick run
    limit: str = ""  # baseline name this scenario is a fraction of
    groups: tuple[str, ...] = ()
    rate: int = 10_000  # e2e: records/s
    producer_props: tuple[tuple[str, str], ...] = ()  # e2e: extra producer config

    def count(self, quick: bool) -> int:
        return self.quick_records if quick else self.records


def _sizes(record_size: int) -> tuple[int, int]:
    """(full, quick) record counts: ~1 GB / ~200 MB of 100-byte records, ~2 GB / ~400 MB of 1 KiB."""
    return (10_000_000, 2_000_000) if record_size <= 100 else (2_000_000, 400_000)


def _wire_sizes(record_size: int) -> tuple[int, int]:
    """The wire generator is several times faster than kcat: more records for runs of similar length."""
    return (20_000_000, 5_000_000) if record_size <= 100 else (3_000_000, 1_000_000)


def _label(record_size: int) -> str:
    return "100b" if record_size == 100 else "1k"


def all_scenarios() -> list[Scenario]:
    """Every scenario, in run order (produce first: its figures are the ones the goals name)."""
    out: list[Scenario] = []
    for kind, limit in (("produce", "tcp_to_file"), ("consume", "sendfile_to_tcp")):
        variants: list[dict[str, Any]] = []
        for size in (100, 1024):
            variants.append({"record_size": size})
            variants.append({"record_size": size, "partitions": 8})
            if kind == "produce":
                variants.append({"record_size": size, "acks": "all"})
        variants += [{"record_size": 1024, "compression": c} for c in COMPRESSIONS]
        for v in variants:
            size = v["record_size"]
            name = f"{kind}-{_label(size)}"
            if v.get("partitions", 1) != 1:
                name += f"-p{v['partitions']}"
            if v.get("acks", "1") != "1":
                name += f"-acks-{v['acks']}"
            if v.get("compression", "none") != "none":
                name += f"-{v['compression']}"
            full, quick = _sizes(size)
            out.append(Scenario(name, kind, records=full, quick_records=quick, limit=limit, groups=(kind,), **v))
    for kind, limit in (("produce_rdk", "tcp_to_file"), ("consume_rdk", "sendfile_to_tcp")):
        for size in (100, 1024):
            full, quick = _sizes(size)  # as the kcat runs, so the two generators read side by side
            name = f"{kind.split('_')[0]}-{_label(size)}-rdk"
            out.append(Scenario(name, kind, size, records=full, quick_records=quick, limit=limit, groups=("rdk",)))
    for kind, limit in (("produce_wire", "tcp_to_file"), ("consume_wire", "sendfile_to_tcp")):
        for size in (100, 1024):
            full, quick = _wire_sizes(size) if kind == "produce_wire" else _sizes(size)
            name = f"{kind.split('_')[0]}-{_label(size)}-wire"
            out.append(Scenario(name, kind, size, records=full, quick_records=quick, limit=limit, groups=("wire",)))
    out.append(
        Scenario(
            "produce-100b-ck",
            "produce_ck",
            records=2_000_000,
            quick_records=500_000,
            limit="tcp_to_file",
            groups=("latency",),
        )
    )
    out.append(Scenario("e2e", "e2e", records=100_000, quick_records=20_000, groups=("latency",)))
    # the producer waits for each ack before the next request (the Java client caps in-flight
    # requests at 5 by default; librdkafka at a million): records batch up while one is in flight
    out.append(
        Scenario(
            "e2e-inflight1",
            "e2e",
            records=100_000,
            quick_records=20_000,
            groups=("latency",),
            producer_props=(("max.in.flight", "1"),),
        )
    )
    out.append(Scenario("e2e-1k", "e2e", records=20_000, quick_records=5_000, groups=("latency",), rate=1_000))
    out.append(
        Scenario(
            "partitions-1000",
            "many",
            partitions=MANY_PARTITIONS,
            records=5_000_000,
            quick_records=1_000_000,
            limit="tcp_to_file",
            groups=("partitions",),
        )
    )
    out.append(
        Scenario(
            "partitions-1000-rdk",
            "many_rdk",
            partitions=MANY_PARTITIONS,
            records=5_000_000,
            quick_records=1_000_000,
            limit="tcp_to_file",
            groups=("partitions", "rdk"),
        )
    )
    out.append(Scenario("storage", "storage", groups=("storage",)))
    return out


@dataclass
class Run:
    """One measured run of a scenario."""

    records: int
    bytes: int
    seconds: float
    broker: Usage | None
    client_cpu_s: float
    client_wall_s: float  # the generator processes' lifetime (startup included), for client cores
    latency_ms: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    #: the scenario's limit (a baseline) measured moving the same bytes right next to this run
    paired_limit_mb_s: float | None = None

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e6 if self.seconds > 0 else 0.0


@dataclass
class Context:
    """What a scenario run needs: the broker's address and pid, a work dir, the profiling switch."""

    bootstrap: str
    broker_pid: int | None
    work_dir: Path
    quick: bool
    profile_dir: Path | None = None
    data_dir: Path | None = None  # the broker's log dir, when known: to wait for deletions
    timeout_s: float = 600.0
    #: (record size, partitions, compression, records) -> a topic filled once per bench run for consume scenarios
    filled: dict[tuple[int, int, str, int], str] = field(default_factory=dict)

    def topic(self, scenario: Scenario) -> str:
        return f"bench-{scenario.name}-{uuid.uuid4().hex[:8]}"

    def input_file(self, record_size: int, count: int) -> Path:
        return loadgen.make_input(self.work_dir / f"input-{record_size}x{count}.txt", record_size, count)


@contextlib.contextmanager
def measuring(ctx: Context, label: str) -> Iterator[list[Usage]]:
    """Probe the broker (and, with --profile, py-spy it) around a block; yields a list it fills."""
    out: list[Usage] = []
    probe = Probe(ctx.broker_pid) if ctx.broker_pid else None
    spy = _start_py_spy(ctx, label) if ctx.profile_dir and ctx.broker_pid else None
    if probe:
        probe.start()
    try:
        yield out
    finally:
        if probe:
            out.append(probe.stop())
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            try:
                spy.wait(timeout=60)
            except subprocess.TimeoutExpired:
                spy.kill()
                spy.wait()


def _start_py_spy(ctx: Context, label: str) -> subprocess.Popen[bytes]:
    assert ctx.profile_dir is not None
    py_spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or "py-spy"
    out = ctx.profile_dir / f"{label}.collapsed"
    cmd = [py_spy, "record", "--pid", str(ctx.broker_pid), "--format", "raw", "--rate", "250", "-o", str(out)]
    log = open(ctx.profile_dir / f"{label}.py-spy.log", "wb")  # noqa: SIM115 -- the child holds it
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    time.sleep(0.5)  # let py-spy attach before the load starts
    return proc


def split_setting(item: str) -> tuple[str, str]:
    """``KEY=VALUE`` -> (key, value) for --broker-set."""
    key, sep, value = item.partition("=")
    if not sep:
        raise SystemExit(f"--broker-set expects KEY=VALUE, got {item!r}")
    return key.strip(), value


def _admin(ctx: Context) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": ctx.bootstrap, "log_level": 0})


def create_topic(ctx: Context, topic: str, partitions: int) -> None:
    from odradek.perf import ensure_topic

    ensure_topic(ctx.bootstrap, topic, partitions)


def delete_topic(ctx: Context, topic: str) -> None:
    """Delete a run's topic (keeps the data dir from growing a GB per run) and wait until its files
    are gone: the broker removes them in the background, and truncating a GB of page cache costs
    CPU that must not be charged to the next run."""
    admin = _admin(ctx)  # keep a reference: a collected AdminClient fails its futures with _DESTROY
    try:
        admin.delete_topics([topic], operation_timeout=30)[topic].result(timeout=60)
    except Exception as exc:
        print(f"  (could not delete topic {topic}: {exc})", flush=True)
        return
    if ctx.data_dir is None:
        time.sleep(1.0)
        return
    deadline = time.monotonic() + 60
    prefix = f"{topic}-"
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if not any(e.name.startswith(prefix) for e in os.scandir(ctx.data_dir)):
                return
        time.sleep(0.1)


def _check_count(ctx: Context, topic: str, expected: int) -> None:
    got = loadgen.topic_record_count(ctx.bootstrap, topic)
    if got != expected:
        raise RuntimeError(f"topic {topic} holds {got} records, expected {expected}")


def _check_ok(run: loadgen.ProcessRun, what: str) -> None:
    bad = [c for c in run.returncodes if c != 0]
    if bad:
        raise RuntimeError(f"{what} exited with {bad}: {run.stderr[-1500:]}")
    if "failed" in run.stderr.lower() or "error" in run.stderr.lower():
        # kcat reports delivery failures on stderr but may still exit 0
        raise RuntimeError(f"{what} reported errors: {run.stderr[-1500:]}")


def run_produce(ctx: Context, sc: Scenario, index: int) -> Run:
    count = sc.count(ctx.quick)
    infile = ctx.input_file(sc.record_size, count)
    topic = ctx.topic(sc)
    create_topic(ctx, topic, sc.partitions)
    cmd = loadgen.kcat_produce(ctx.bootstrap, topic, infile, acks=sc.acks, compression=sc.compression)
    with measuring(ctx, f"{sc.name}-{index}") as usage:
        proc = loadgen.run_processes([cmd], ctx.timeout_s)
    _check_ok(proc, "kcat -P")
    _check_count(ctx, topic, count)
    delete_topic(ctx, topic)
    return Run(count, count * sc.record_size, proc.wall_s, usage[0] if usage else None, proc.cpu_s, proc.wall_s)


def _filled_topic(ctx: Context, sc: Scenario) -> str:
    """A topic laid out as ``sc`` reads it, filled once per bench run by kcat (not timed).

    kcat writes it, so the consumers read the batches a real producer makes (linger 5 ms).
    """
    key = (sc.record_size, sc.partitions, sc.compression, sc.count(ctx.quick))
    if key not in ctx.filled:
        count = sc.count(ctx.quick)
        topic = f"bench-fill-{sc.record_size}-p{sc.partitions}-{sc.compression}-{uuid.uuid4().hex[:8]}"
        create_topic(ctx, topic, sc.partitions)
        infile = ctx.input_file(sc.record_size, count)
        proc = loadgen.run_processes(
            [loadgen.kcat_produce(ctx.bootstrap, topic, infile, compression=sc.compression)], ctx.timeout_s
        )
        _check_ok(proc, "kcat -P (fill)")
        _check_count(ctx, topic, count)
        ctx.filled[key] = topic
    return ctx.filled[key]


def run_consume(ctx: Context, sc: Scenario, index: int) -> Run:
    count = sc.count(ctx.quick)
    topic = _filled_topic(ctx, sc)
    cmd = loadgen.kcat_consume(ctx.bootstrap, topic, count)
    with measuring(ctx, f"{sc.name}-{index}") as usage:
        proc = loadgen.run_processes([cmd], ctx.timeout_s)
    if any(proc.returncodes):
        raise RuntimeError(f"kcat -C exited with {proc.returncodes}: {proc.stderr[-1500:]}")
    return Run(count, count * sc.record_size, proc.wall_s, usage[0] if usage else None, proc.cpu_s, proc.wall_s)


def delete_filled(ctx: Context) -> None:
    """Delete the consume scenarios' topics at the end of the bench run."""
    for topic in ctx.filled.values():
        delete_topic(ctx, topic)
    ctx.filled.clear()


def run_produce_rdk(ctx: Context, sc: Scenario, index: int) -> Run:
    """bench/rdkperf.c producing slices of one pre-generated buffer into a fresh topic.

    The partitions are named explicitly (round-robin), which for one partition sends what null
    keys would and spares librdkafka its per-record partitioner call."""
    count = sc.count(ctx.quick)
    topic = ctx.topic(sc)
    create_topic(ctx, topic, sc.partitions)
    cmd = loadgen.rdkperf_produce(
        ctx.bootstrap,
        topic,
        count,
        sc.record_size,
        partitions=sc.partitions,
        acks=sc.acks,
        compression=sc.compression,
    )
    return _run_generator(ctx, sc, index, cmd, topic, check=True)


def run_consume_rdk(ctx: Context, sc: Scenario, index: int) -> Run:
    """bench/rdkperf.c reading the filled topic from the beginning, only counting the records."""
    topic = _filled_topic(ctx, sc)
    cmd = loadgen.rdkperf_consume(ctx.bootstrap, topic, sc.count(ctx.quick))
    return _run_generator(ctx, sc, index, cmd, topic, check=False)


def run_produce_wire(ctx: Context, sc: Scenario, index: int) -> Run:
    """bench/wireload.py: pipelined ~1 MB Produce requests of one pre-built batch (no client-side work)."""
    count = sc.count(ctx.quick)
    topic = ctx.topic(sc)
    create_topic(ctx, topic, sc.partitions)
    cmd = loadgen.wireload_command(
        "produce", ctx.bootstrap, topic, count, record_size=sc.record_size, partitions=sc.partitions, acks=sc.acks
    )
    return _run_generator(ctx, sc, index, cmd, topic, check=True)


def run_consume_wire(ctx: Context, sc: Scenario, index: int) -> Run:
    """bench/wireload.py: Fetch from the beginning, counting records from batch headers only."""
    count = sc.count(ctx.quick)
    topic = _filled_topic(ctx, sc)
    cmd = loadgen.wireload_command(
        "fetch", ctx.bootstrap, topic, count, record_size=sc.record_size, partitions=sc.partitions
    )
    return _run_generator(ctx, sc, index, cmd, topic, check=False)


#: kind -> (what the generator is called in errors, summary fields kept as the run's extras)
_GENERATORS = {
    "produce_wire": ("wireload", ("requests",)),
    "consume_wire": ("wireload", ("requests",)),
    "produce_rdk": ("rdkperf", ("seconds_from_start",)),
    "consume_rdk": ("rdkperf", ("seconds_from_start",)),
}


def _run_generator(ctx: Context, sc: Scenario, index: int, cmd: list[str], topic: str, *, check: bool) -> Run:
    """Run one of our own generators, which time themselves and print a JSON summary (records,
    bytes, seconds): their clock starts at the first request (wireload), the first produce call
    or the first record consumed (rdkperf), so process start-up and, for rdkperf, building its
    payload buffer are left out; ``check`` verifies a produced topic's count and deletes it."""
    what, extras = _GENERATORS[sc.kind]
    out = ctx.work_dir / f"{what}-stdout.json"
    with measuring(ctx, f"{sc.name}-{index}") as usage:
        proc = loadgen.run_processes([cmd], ctx.timeout_s, stdout_path=out)
    if any(proc.returncodes):
        raise RuntimeError(f"{what} exited with {proc.returncodes}: {proc.stderr[-1500:]}")
    summary = loadgen.parse_json_summary(proc.stdout, what)
    if check:
        _check_count(ctx, topic, summary["records"])
        delete_topic(ctx, topic)
    return Run(
        summary["records"],
        summary["bytes"],
        summary["seconds"],
        usage[0] if usage else None,
        proc.cpu_s,
        proc.wall_s,
        extra={key: summary[key] for key in extras},
    )


def run_perf(ctx: Context, sc: Scenario, index: int) -> Run:
    """``odradek perf produce`` (send-to-ack latency) or ``e2e`` (fixed-rate end-to-end latency)."""
    count = sc.count(ctx.quick)
    topic = ctx.topic(sc)
    create_topic(ctx, topic, sc.partitions)
    if sc.kind == "e2e":
        cmd = loadgen.perf_command(
            "e2e", ctx.bootstrap, topic, count, record_size=sc.record_size, throughput=sc.rate, acks=sc.acks
        )
        for key, value in sc.producer_props:
            cmd[-1:-1] = ["--producer-property", f"{key}={value}"]  # before the trailing --json
    else:
        cmd = loadgen.perf_command(
            "produce", ctx.bootstrap, topic, count, record_size=sc.record_size, acks=sc.acks, latency_every=10
        )
    with measuring(ctx, f"{sc.name}-{index}") as usage:
        proc = loadgen.run_processes([cmd], ctx.timeout_s, stdout_path=ctx.work_dir / "perf-stdout.json")
    if any(proc.returncodes):
        raise RuntimeError(f"odradek perf exited with {proc.returncodes}: {proc.stderr[-1500:]}")
    summary = loadgen.parse_perf_json(proc.stdout)
    delete_topic(ctx, topic)
    latency = {k: v for k, v in summary.get("latency_ms", {}).items() if k != "samples"}
    return Run(
        summary["records"],
        summary["bytes"],
        summary["seconds"],
        usage[0] if usage else None,
        proc.cpu_s,
        proc.wall_s,
        latency_ms=latency,
    )


def single_partition_reference(ctx: Context, sc: Scenario, index: int) -> float:
    """Records/s of one producer of the same kind (kcat, or rdkperf with null keys, as in the
    ``many`` run) producing the same records into a one-partition topic: what a ``many`` run is
    compared with, measured next to it (the machine drifts over a bench run)."""
    rdk = sc.kind == "many_rdk"
    reference = Scenario(
        f"{sc.name}-reference",
        "produce_rdk" if rdk else "produce",
        sc.record_size,
        acks=sc.acks,
        records=sc.records,
        quick_records=sc.quick_records,
    )
    if not rdk:
        return run_produce(ctx, reference, index).records_per_s
    topic = ctx.topic(reference)
    create_topic(ctx, topic, 1)
    cmd = loadgen.rdkperf_produce(ctx.bootstrap, topic, reference.count(ctx.quick), sc.record_size, acks=sc.acks)
    return _run_generator(ctx, reference, index, cmd, topic, check=True).records_per_s


def run_many(ctx: Context, sc: Scenario, index: int) -> Run:
    """1,000 partitions, 10 producers at once (kcat, or rdkperf for ``many_rdk``), null keys.

    kcat's rate runs from the first start to the last exit; rdkperf's from the earliest first
    produce call to the latest end, from the monotonic times each process prints (start-up and
    building each process's payload buffer left out, as in its one-process reference). Each run
    also measures the single-partition reference (:func:`single_partition_reference`), before
    the run on odd runs and after it on even ones; ``extra`` carries the per-run ratio."""
    rdk = sc.kind == "many_rdk"
    single = single_partition_reference(ctx, sc, index) if index % 2 == 1 else None
    count = sc.count(ctx.quick)
    per_producer = count // MANY_PRODUCERS
    topic = ctx.topic(sc)
    t0 = time.perf_counter()
    create_topic(ctx, topic, sc.partitions)
    create_s = time.perf_counter() - t0
    if rdk:
        cmd = loadgen.rdkperf_produce(ctx.bootstrap, topic, per_producer, sc.record_size, acks=sc.acks)
        out: Path | None = ctx.work_dir / "rdkperf-many-stdout.json"
    else:
        infile = ctx.input_file(sc.record_size, per_producer)
        cmd = loadgen.kcat_produce(ctx.bootstrap, topic, infile, acks=sc.acks)
        out = None
    with measuring(ctx, f"{sc.name}-{index}") as usage:
        proc = loadgen.run_processes([cmd] * MANY_PRODUCERS, ctx.timeout_s, stdout_path=out)
    _check_ok(proc, f"{'rdkperf' if rdk else 'kcat -P'} x{MANY_PRODUCERS}")
    total, seconds = per_producer * MANY_PRODUCERS, proc.wall_s
    if rdk:
        summaries = loadgen.json_summaries(proc.stdout, "rdkperf", MANY_PRODUCERS)
        total = sum(int(x["records"]) for x in summaries)
        seconds = max(x["end_mono"] for x in summaries) - min(x["first_mono"] for x in summaries)
    _check_count(ctx, topic, total)
    delete_topic(ctx, topic)
    if single is None:
        single = single_partition_reference(ctx, sc, index)
    return Run(
        total,
        total * sc.record_size,
        seconds,
        usage[0] if usage else None,
        proc.cpu_s,
        proc.wall_s,
        extra={
            "create_topic_s": create_s,
            "single_partition_records_per_s": single,
            "fraction_of_single_partition": total / seconds / single if seconds > 0 and single > 0 else 0.0,
        },
    )


RUNNERS = {
    "produce": run_produce,
    "consume": run_consume,
    "produce_ck": run_perf,
    "e2e": run_perf,
    "many": run_many,
    "many_rdk": run_many,
    "produce_rdk": run_produce_rdk,
    "consume_rdk": run_consume_rdk,
    "produce_wire": run_produce_wire,
    "consume_wire": run_consume_wire,
}
