"""Run the page-visits pipeline end to end with one command.

    .venv/bin/python examples/page_visits/run.py                      # embedded broker, 20 s
    .venv/bin/python examples/page_visits/run.py --seconds 60 --rate 5000
    .venv/bin/python examples/page_visits/run.py --bootstrap 127.0.0.1:9092

Without ``--bootstrap`` it starts ``odradek serve`` on a free loopback port with a temporary data
directory, and stops it at the end. Then, for a bounded time, the seeds' producer sends page-visit
events (``"<ms>,www.example.com,<ip>"`` keyed by IP) while the Spark job (job.py) counts visits per
/24 subnet per minute into an odradek topic and Parquet; finally it waits for the job to catch up
and prints a summary that checks every produced visit was counted exactly once.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from job import final_counts, start_job

SOURCE_TOPIC = "page_visits"
SINK_TOPIC = "visits_per_subnet"


# -- the embedded broker ----------------------------------------------------------------------------
_LISTENING = re.compile(r"listening on \w+://([^\s:]+):(\d+)")


@contextlib.contextmanager
def embedded_broker(data_dir: Path, partitions: int, timeout_s: float = 30.0) -> Iterator[str]:
    """``odradek serve`` on a free loopback port (it binds port 0 and logs the port it got) with its
    data in ``data_dir``; yields the bootstrap address and stops the broker afterwards."""
    command = [sys.executable, "-m", "odradek", "serve"]
    settings = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(data_dir), "num.partitions": str(partitions)}
    for key, value in settings.items():
        command += ["--set", f"{key}={value}"]
    log_path = data_dir.parent / "broker.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + timeout_s
        while (match := _LISTENING.search(log_path.read_text(errors="replace"))) is None:
            if process.poll() is not None:
                raise RuntimeError(f"odradek serve exited with code {process.returncode}; see {log_path}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"odradek serve did not start within {timeout_s:.0f} s; see {log_path}")
            time.sleep(0.05)
        bootstrap = f"{match.group(1)}:{match.group(2)}"
        print(f"embedded broker: {bootstrap}, data in {data_dir}")
        yield bootstrap
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# -- the seeds' producer ----------------------------------------------------------------------------
def produce_visits(
    bootstrap: str, *, rate: int, seconds: float, subnets: int, topic: str = SOURCE_TOPIC, seed: int = 7
) -> int:
    """Send ``rate`` page visits per second for ``seconds`` (IPs in ``subnets`` /24 subnets); returns the count."""
    from odradek.client import Producer

    rnd = random.Random(seed)
    sent = 0
    errors: list[BaseException] = []

    def on_delivery(_metadata: object, error: BaseException | None) -> None:
        if error is not None:
            errors.append(error)

    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 5}) as producer:
        start = time.monotonic()
        while (elapsed := time.monotonic() - start) < seconds:
            due = int(elapsed * rate) + 1
            while sent < due:
                ip = f"192.168.{rnd.randrange(subnets)}.{rnd.randrange(255)}"
                runtime = int(time.time() * 1000)
                producer.send(topic, f"{runtime},www.example.com,{ip}", key=ip, callback=on_delivery)
                sent += 1
            time.sleep(0.005)
        producer.flush()
    if errors:
        raise RuntimeError(f"{len(errors)} visits were not delivered; first error: {errors[0]!r}")
    return sent


# -- Spark --------------------------------------------------------------------------------------------
def local_spark() -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from odradek.plugins.spark import register

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("page-visits")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def run(
    bootstrap: str,
    workdir: Path,
    *,
    seconds: float,
    rate: int,
    subnets: int,
    source_topic: str = SOURCE_TOPIC,
    sink_topic: str = SINK_TOPIC,
    spark: Any = None,
) -> dict[str, int]:
    """Producer + job for ``seconds``, then catch up, stop, and summarise; returns the summary figures."""
    spark = spark or local_spark()
    parquet_dir = workdir / "visits_per_subnet.parquet"
    query = start_job(
        spark,
        bootstrap=bootstrap,
        source_topic=source_topic,
        sink_topic=sink_topic,
        parquet_dir=str(parquet_dir),
        checkpoint_dir=str(workdir / "checkpoint"),
    )
    try:
        # the job runs in Spark's threads meanwhile, one micro-batch per second
        produced = produce_visits(bootstrap, rate=rate, seconds=seconds, subnets=subnets, topic=source_topic)
        query.processAllAvailable()
    finally:
        query.stop()
    finals = final_counts(spark, str(parquet_dir))
    rows = finals.collect()
    counted = sum(r["visits"] for r in rows)
    changelog = (
        spark.read.format("odradek")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", sink_topic)
        .load()
        .count()
    )
    print(f"\nproduced {produced} visits in {seconds:.0f} s; counted {counted} in {len(rows)} (minute, subnet) cells")
    print(f"{sink_topic}: {changelog} update records; Parquet: {parquet_dir}")
    print("\nbusiest subnets per minute:")
    finals.orderBy("minute", finals.visits.desc()).show(12, truncate=False)
    return {"produced": produced, "counted": counted, "cells": len(rows), "changelog": changelog}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", help="an existing broker (default: start an embedded one)")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long to produce (default 20)")
    parser.add_argument("--rate", type=int, default=2000, help="page visits per second (default 2000)")
    parser.add_argument("--subnets", type=int, default=8, help="distinct /24 subnets of visitors (default 8)")
    parser.add_argument("--partitions", type=int, default=4, help="partitions of the embedded broker's topics")
    parser.add_argument("--workdir", help="where Parquet and the checkpoint go (default: a temp dir, removed)")
    args = parser.parse_args(argv)
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="page-visits-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        with contextlib.ExitStack() as stack:
            bootstrap = args.bootstrap
            if bootstrap is None:
                data_dir = workdir / "broker-data"
                data_dir.mkdir(exist_ok=True)
                bootstrap = stack.enter_context(embedded_broker(data_dir, args.partitions))
            summary = run(bootstrap, workdir, seconds=args.seconds, rate=args.rate, subnets=args.subnets)
        ok = summary["counted"] == summary["produced"]
        print("every visit counted exactly once" if ok else "MISMATCH between produced and counted visits")
        return 0 if ok else 1
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
