"""Benchmark of the data path on one topic with many partitions, for P and 2P partitions.

A request naming every partition of a topic should cost about the same per partition whether the
topic has 2,500 partitions or 5,000 (past the 4,096 files the segment engine keeps open by
default); so should an append while a consumer's fetch of every partition is parked. Any
per-partition step that walks every partition (a cache of open files scanned per file opened, a
parked fetch re-reading all of its partitions on each append) turns these into O(P^2). Against
``odradek serve`` (or ``--bootstrap`` any broker) this creates a topic of each size in
``--partitions`` and times, with confluent-kafka (librdkafka) unless said otherwise:

- **produce all**: one record to every partition, acks=all, then ``flush`` (librdkafka packs
  them into a few Produce requests naming many partitions each);
- **consume all**: a consumer assigned every partition from offset 0 reads those records
  (Fetch requests naming every partition);
- **appends while parked**: a Fetch (odradek's protocol-level client) of every partition from
  its end, with a ``min_bytes`` it never reaches (a consumer with a high ``fetch.min.bytes``),
  stays parked while a producer appends ``--appends`` records one at a time (each flushed) to
  different partitions.

Each figure is also given per partition (per append for the last); "ratio" divides the largest
size's per-partition figure by the smallest's (1.0: no slowdown as partitions grow).

Run: ``.venv/bin/python bench/bench_partitions.py [--partitions 2500,5000] [--appends 100] [--json]``
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import trio
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console
from rich.table import Table

from odradek.testing.broker import BrokerProcess

TIMEOUT_S = 300.0


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create the topic and wait until every partition has a leader."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=TIMEOUT_S)[topic].result()
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        meta = admin.list_topics(topic, timeout=30).topics.get(topic)
        if (
            meta is not None
            and len(meta.partitions) == partitions
            and all(p.leader >= 0 for p in meta.partitions.values())
        ):
            return
        time.sleep(0.1)
    raise TimeoutError(f"{topic} has no leader for every partition")


def produce_all(bootstrap: str, topic: str, partitions: int) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 50, "log_level": 0})
    start = time.monotonic()
    for p in range(partitions):
        producer.produce(topic, value=b"x" * 100, partition=p)
    if producer.flush(TIMEOUT_S) != 0:
        raise TimeoutError("records not acknowledged")
    return time.monotonic() - start


def consume_all(bootstrap: str, topic: str, partitions: int) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                        "log_level": 0})  # fmt: skip
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        start = time.monotonic()
        got = 0
        while got < partitions:
            if time.monotonic() - start > TIMEOUT_S:
                raise TimeoutError(f"read {got} of {partitions} records")
            got += sum(1 for m in consumer.consume(10_000, 0.01) if m.error() is None)
        return time.monotonic() - start
    finally:
        consumer.close()


def _park_fetch(
    host: str, port: int, topic: str, partitions: int, parked: threading.Event, stop: threading.Event
) -> None:
    """Hold one Fetch of every partition from offset 1 (each has one record) with a
    ``min_bytes`` no append reaches, until ``stop``; a protocol-level client, since librdkafka
    does not keep such a fetch parked."""
    from odradek.client.connection import BrokerConnection
    from odradek.client.requests import make_request
    from odradek.plugins.transport_tcp.client import TcpConnector
    from odradek.protocol import ApiKey

    async def run() -> None:
        async with trio.open_nursery() as nursery:
            conn = await BrokerConnection.open(nursery, TcpConnector(), -1, host, port, client_id="bench-parked",
                                               connect_timeout_s=10, request_timeout_s=TIMEOUT_S)  # fmt: skip
            wanted = [{"partition": p, "current_leader_epoch": -1, "fetch_offset": 1, "log_start_offset": -1,
                       "partition_max_bytes": 1 << 20} for p in range(partitions)]  # fmt: skip
            request = make_request(ApiKey.FETCH, conn.version(ApiKey.FETCH, max_version=11), replica_id=-1,
                                   max_wait=int(TIMEOUT_S * 1000), min_bytes=1 << 30, max_bytes=1 << 30,
                                   isolation_level=0, session_id=0, session_epoch=-1,
                                   topics=[{"topic": topic, "partitions": wanted}], forgotten_topics_data=[],
                                   rack_id="")  # fmt: skip
            nursery.start_soon(functools.partial(conn.request, request, timeout_s=TIMEOUT_S))
            await trio.sleep(2)  # the broker read the request and parked it
            parked.set()
            while not stop.is_set():
                await trio.sleep(0.05)
            nursery.cancel_scope.cancel()

    trio.run(run)


def appends_while_parked(bootstrap: str, topic: str, partitions: int, appends: int) -> float:
    """Seconds for ``appends`` flushed single-record produces while a fetch of every partition waits."""
    host, port = bootstrap.rsplit(":", 1)
    parked, stop = threading.Event(), threading.Event()
    thread = threading.Thread(target=_park_fetch, args=(host, int(port), topic, partitions, parked, stop))
    thread.start()
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0, "log_level": 0})
    try:
        if not parked.wait(TIMEOUT_S):
            raise TimeoutError("the fetch was not sent")
        step = max(1, partitions // appends)
        start = time.monotonic()
        for i in range(appends):
            producer.produce(topic, value=b"y" * 100, partition=(i * step) % partitions)
            if producer.flush(TIMEOUT_S) != 0:
                raise TimeoutError("record not acknowledged")
        return time.monotonic() - start
    finally:
        stop.set()
        thread.join()


def run_size(bootstrap: str | None, partitions: int, appends: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-partitions-") as tmp:
        proc = None
        if bootstrap is None:
            proc = BrokerProcess(Path(tmp), {"offsets.topic.replication.factor": "1"})
            proc.start()
            bootstrap = proc.bootstrap
        try:
            topic = f"wide-{partitions}-{int(time.time())}"
            create_topic(bootstrap, topic, partitions)
            return {
                "partitions": partitions,
                "produce_all_s": produce_all(bootstrap, topic, partitions),
                "consume_all_s": consume_all(bootstrap, topic, partitions),
                "appends_parked_s": appends_while_parked(bootstrap, topic, partitions, appends),
                "appends": appends,
            }
        finally:
            if proc is not None:
                proc.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", default="2500,5000", help="comma-separated topic sizes")
    parser.add_argument("--appends", type=int, default=100)
    parser.add_argument("--bootstrap", help="bench this broker instead of starting odradek serve")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.partitions.split(",")]
    results = [run_size(args.bootstrap, p, args.appends) for p in sizes]
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    table = Table(title="one topic, many partitions (per partition: ms; appends: ms each)")
    for column in ("partitions", "produce all s", "ms/partition", "consume all s", "ms/partition",
                   "appends while parked s", "ms/append"):  # fmt: skip
        table.add_column(column, justify="right")
    for r in results:
        p = r["partitions"]
        table.add_row(
            f"{p:,}",
            f"{r['produce_all_s']:.2f}",
            f"{r['produce_all_s'] / p * 1000:.3f}",
            f"{r['consume_all_s']:.2f}",
            f"{r['consume_all_s'] / p * 1000:.3f}",
            f"{r['appends_parked_s']:.2f}",
            f"{r['appends_parked_s'] / r['appends'] * 1000:.1f}",
        )
    if len(results) > 1:
        first, last = results[0], results[-1]

        def ratio(key: str, per: str) -> str:
            a, b = first[key] / first[per], last[key] / last[per]
            return f"{b / a:.1f}x"

        table.add_row("ratio", "", ratio("produce_all_s", "partitions"), "", ratio("consume_all_s", "partitions"),
                      "", ratio("appends_parked_s", "appends"))  # fmt: skip
    Console(width=140).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
