"""Spark connector benchmark: batch read throughput (vs Parquet, Arrow vs tuples) and streaming latency.

    .venv/bin/python bench/bench_spark.py                       # embedded broker, 1,000,000 records
    .venv/bin/python bench/bench_spark.py --records 200000 --stream-seconds 10
    .venv/bin/python bench/bench_spark.py --bootstrap 127.0.0.1:9092 --json

1. Loads ``--records`` records of ``--size`` bytes into a topic of ``--partitions`` partitions.
2. Batch: ``count()`` and a simple aggregation (per-partition count and summed value length) read
   through format ``odradek``, then the same rows from a Parquet file written from them, in the
   same run: rows/s each and the ratio. The same read through a variant data source whose
   ``read()`` yields tuples instead of Arrow batches shows what yielding Arrow buys.
3. Streaming: a producer at ``--stream-rate`` records/s and a streaming query on the topic; per
   micro-batch the trigger duration and the end-to-end latency (batch done minus the newest and
   oldest record timestamps in it), percentiles over the batches after warm-up.
Spark runs local[2] on this machine's 2 cores: absolute figures are modest; the ratios are the point.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "page_visits"))

from run import embedded_broker  # the example's `odradek serve` launcher

from odradek.client import Admin, NewTopic, Producer


def load(bootstrap: str, topic: str, *, records: int, size: int, partitions: int) -> float:
    """Produce the benchmark's records; returns records/s of the load (for the log only)."""
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    rnd = random.Random(1)
    payloads = [rnd.randbytes(size) for _ in range(1024)]
    errors: list[BaseException] = []

    def on_delivery(_metadata: Any, error: BaseException | None) -> None:
        if error is not None:
            errors.append(error)

    start = time.perf_counter()
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 262144}) as producer:
        for i in range(records):
            producer.send(topic, payloads[i & 1023], callback=on_delivery)
        producer.flush()
    elapsed = time.perf_counter() - start
    if errors:
        raise RuntimeError(f"{len(errors)} records failed to load: {errors[0]!r}")
    return records / elapsed


def session() -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from odradek.plugins.spark import register

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench-spark")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    spark.dataSource.register(tuple_source_class())
    return spark


def tuple_source_class() -> type:
    """Format ``odradek_tuples``: the same source, but ``read()`` yields one tuple per record."""
    import datetime as dt

    from odradek.plugins.spark import access
    from odradek.plugins.spark.reader import OdradekBatchReader, OffsetRangePartition
    from odradek.plugins.spark.source import OdradekDataSource

    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)

    class TupleReader(OdradekBatchReader):
        def read(self, partition: Any) -> Iterator[tuple[Any, ...]]:  # type: ignore[override]
            if not isinstance(partition, OffsetRangePartition):
                return
            rng = partition.offset_range
            for records in access.fetch_records(partition.options, rng):
                for r in records:
                    ts = epoch + dt.timedelta(milliseconds=r.timestamp)
                    yield (r.key, r.value, rng.topic, rng.partition, r.offset, ts, r.timestamp_type)

    class TupleSource(OdradekDataSource):
        @classmethod
        def name(cls) -> str:
            return "odradek_tuples"

        def reader(self, schema: Any) -> Any:
            return TupleReader(super().reader(schema).options)  # type: ignore[attr-defined]

    return TupleSource


def bench_batch(spark: Any, bootstrap: str, topic: str, rows: int, workdir: Path, repeat: int) -> dict[str, Any]:
    """Best of ``repeat`` rounds; each round measures every reader in turn, so a load spike from
    elsewhere on the machine hits them alike. A warm-up round first starts the Python workers."""
    from pyspark.sql import functions as F

    def reader(fmt: str) -> Any:
        return spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic).load()

    parquet_path = str(workdir / "bench.parquet")
    reader("odradek").write.mode("overwrite").parquet(parquet_path)
    frames = {
        "odradek_arrow": reader("odradek"),
        "odradek_tuples": reader("odradek_tuples"),
        "parquet": spark.read.parquet(parquet_path),
    }

    def count(df: Any) -> None:
        assert df.count() == rows

    def aggregate(df: Any) -> None:
        result = df.groupBy("partition").agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("bytes"))
        assert sum(r["n"] for r in result.collect()) == rows

    best: dict[str, dict[str, float]] = {name: {"count_s": 1e9, "agg_s": 1e9} for name in frames}
    for round_ in range(repeat + 1):
        for name, df in frames.items():
            for what, fn in (("count_s", count), ("agg_s", aggregate)):
                start = time.perf_counter()
                fn(df)
                if round_:  # round 0 warms up
                    best[name][what] = min(best[name][what], time.perf_counter() - start)
    out: dict[str, Any] = {
        name: {**t, "count_rows_per_s": rows / t["count_s"], "agg_rows_per_s": rows / t["agg_s"]}
        for name, t in best.items()
    }
    arrow, tuples, parquet = out["odradek_arrow"], out["odradek_tuples"], out["parquet"]
    out["ratio_count_odradek_vs_parquet"] = arrow["count_rows_per_s"] / parquet["count_rows_per_s"]
    out["ratio_agg_odradek_vs_parquet"] = arrow["agg_rows_per_s"] / parquet["agg_rows_per_s"]
    out["ratio_count_arrow_vs_tuples"] = arrow["count_rows_per_s"] / tuples["count_rows_per_s"]
    out["ratio_agg_arrow_vs_tuples"] = arrow["agg_rows_per_s"] / tuples["agg_rows_per_s"]
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bench_stream(spark: Any, bootstrap: str, *, rate: int, seconds: float, partitions: int, workdir: Path) -> dict:
    from pyspark.sql import functions as F

    topic = f"bench-stream-{os.getpid()}"
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    batches: list[dict[str, float]] = []

    def observe(batch: Any, batch_id: int) -> None:
        row = batch.agg(
            F.count("*").alias("n"),
            F.min(F.unix_millis("timestamp")).alias("oldest"),
            F.max(F.unix_millis("timestamp")).alias("newest"),
        ).collect()[0]
        done_ms = time.time() * 1000
        if row["n"]:
            batches.append(
                {
                    "id": batch_id,
                    "n": row["n"],
                    "lag_newest_ms": done_ms - row["newest"],
                    "lag_oldest_ms": done_ms - row["oldest"],
                }
            )

    query = (
        spark.readStream.format("odradek")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
        .writeStream.foreachBatch(observe)
        .option("checkpointLocation", str(workdir / "stream-checkpoint"))
        .start()
    )
    stop = threading.Event()
    sent = [0]

    def produce() -> None:
        value = b"x" * 100
        with Producer({"bootstrap.servers": bootstrap, "linger.ms": 5}) as producer:
            start = time.monotonic()
            while not stop.is_set() and (elapsed := time.monotonic() - start) < seconds:
                due = int(elapsed * rate)
                while sent[0] < due:
                    producer.send(topic, value)
                    sent[0] += 1
                time.sleep(0.002)
            producer.flush()

    time.sleep(3)  # let the query start before the load begins
    thread = threading.Thread(target=produce)
    thread.start()
    thread.join()
    query.processAllAvailable()
    progress = query.recentProgress
    query.stop()
    steady = batches[2:] if len(batches) > 4 else batches
    triggers = [p["durationMs"]["triggerExecution"] for p in progress if p["numInputRows"]][2:]
    return {
        "rate_records_per_s": rate,
        "records": sent[0],
        "micro_batches": len(batches),
        "rows_per_batch_median": statistics.median(b["n"] for b in steady) if steady else 0,
        "trigger_ms_p50": percentile(triggers, 0.5) if triggers else None,
        "trigger_ms_p95": percentile(triggers, 0.95) if triggers else None,
        "latency_newest_ms_p50": percentile([b["lag_newest_ms"] for b in steady], 0.5) if steady else None,
        "latency_oldest_ms_p50": percentile([b["lag_oldest_ms"] for b in steady], 0.5) if steady else None,
        "latency_oldest_ms_p95": percentile([b["lag_oldest_ms"] for b in steady], 0.95) if steady else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", help="an existing broker (default: start an embedded one)")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100, help="value bytes per record")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3, help="measured rounds of batch reads (best is kept)")
    parser.add_argument("--stream-rate", type=int, default=10_000, help="records/s for the latency run")
    parser.add_argument("--stream-seconds", type=float, default=20.0)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON only")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="bench-spark-"))
    try:
        with embedded_or(args.bootstrap, workdir, args.partitions) as bootstrap:
            topic = f"bench-batch-{os.getpid()}"
            load_rate = load(bootstrap, topic, records=args.records, size=args.size, partitions=args.partitions)
            spark = session()
            figures = {
                "records": args.records,
                "value_bytes": args.size,
                "partitions": args.partitions,
                "load_records_per_s": load_rate,
                "batch": bench_batch(spark, bootstrap, topic, args.records, workdir, args.repeat),
                "stream": bench_stream(
                    spark,
                    bootstrap,
                    rate=args.stream_rate,
                    seconds=args.stream_seconds,
                    partitions=args.partitions,
                    workdir=workdir,
                ),
            }
            spark.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        report(figures)
    return 0


def embedded_or(bootstrap: str | None, workdir: Path, partitions: int) -> Any:
    import contextlib

    if bootstrap:
        return contextlib.nullcontext(bootstrap)
    data = workdir / "broker-data"
    data.mkdir()
    return embedded_broker(data, partitions)


def report(f: dict[str, Any]) -> None:
    b, s = f["batch"], f["stream"]
    print(
        f"\n{f['records']:,} records of {f['value_bytes']} B in {f['partitions']} partitions "
        f"(loaded at {f['load_records_per_s']:,.0f} records/s)\n"
    )
    print(f"{'batch read (local[2])':32} {'count rows/s':>14} {'agg rows/s':>14}")
    for name in ("odradek_arrow", "odradek_tuples", "parquet"):
        print(f"{name:32} {b[name]['count_rows_per_s']:>14,.0f} {b[name]['agg_rows_per_s']:>14,.0f}")
    print(
        f"\nodradek / Parquet: count {b['ratio_count_odradek_vs_parquet']:.3f}, "
        f"aggregation {b['ratio_agg_odradek_vs_parquet']:.3f}; Arrow / tuples: count "
        f"{b['ratio_count_arrow_vs_tuples']:.2f}x, aggregation {b['ratio_agg_arrow_vs_tuples']:.2f}x"
    )
    print(
        f"\nstreaming at {s['rate_records_per_s']:,} records/s: {s['micro_batches']} micro-batches, "
        f"median {s['rows_per_batch_median']:,.0f} rows; trigger p50 {s['trigger_ms_p50']} ms, "
        f"p95 {s['trigger_ms_p95']} ms; end-to-end latency p50 {s['latency_newest_ms_p50']:.0f}-"
        f"{s['latency_oldest_ms_p50']:.0f} ms (newest-oldest record), oldest p95 {s['latency_oldest_ms_p95']:.0f} ms"
    )


if __name__ == "__main__":
    sys.exit(main())
