"""Benchmark of topic creation as the topic count grows, on each metadata store.

Creating a topic should cost about the same whether it is the 10th or the 1,000th: every
per-change cost that grows with the number of topics (a whole-tree re-read per watch event, a
decision pass over every partition, re-encoding every key per commit) turns creating N topics
into O(N^2). This creates ``--topics`` one-partition topics in requests of ``--chunk`` through
confluent-kafka's AdminClient against ``odradek serve`` on each store (``local``, and a real
ZooKeeper or etcd started for the run) and reports:

- the total time until every topic has a leader in a Metadata response;
- the time per chunk for the first and the last fifth of the topics, and their ratio (1.0:
  creation does not slow as topics accumulate; the figure to compare across machines);
- the time a clean stop of every broker takes, and the time a start then takes until every
  topic has a leader again;
- the time deleting them all takes (``--chunk`` a request) until Metadata lists none.

Run: ``.venv/bin/python bench/bench_topics.py [--stores local,zookeeper,etcd] [--topics 1000]
[--chunk 50] [--brokers 1] [--json]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console
from rich.table import Table

from odradek.testing.broker import BrokerProcess
from odradek.testing.servers import start_etcd, start_zookeeper, unique_chroot


@contextmanager
def store_settings(store: str) -> Iterator[dict[str, str]]:
    """Broker settings for ``store``, with its server running for the duration."""
    if store == "local":
        yield {}
    elif store == "zookeeper":
        with start_zookeeper() as zk:
            yield {"metadata": "zookeeper", "zookeeper.connect": zk.connect_string + unique_chroot("bench")}
    elif store == "etcd":
        with start_etcd() as etcd:
            yield {"metadata": "etcd", "etcd.endpoints": etcd.endpoint, "etcd.namespace": unique_chroot("bench")}
    else:
        raise SystemExit(f"unknown store {store!r}: local, zookeeper or etcd")


def create_topics(store: str, topics: int, chunk: int, brokers: int) -> dict[str, Any]:
    with store_settings(store) as settings, tempfile.TemporaryDirectory(prefix="bench-topics-") as tmp:
        procs = [BrokerProcess(Path(tmp) / str(i), {"broker.id": str(i), **settings}) for i in range(brokers)]
        try:
            for proc in procs:
                proc.start()
            admin = AdminClient({"bootstrap.servers": procs[0].bootstrap, "log_level": 0})
            rf = min(3, brokers)
            chunk_s: list[float] = []
            start = time.monotonic()
            for first in range(0, topics, chunk):
                t0 = time.monotonic()
                names = [f"bench-{i}" for i in range(first, min(topics, first + chunk))]
                for future in admin.create_topics([NewTopic(n, 1, rf) for n in names], operation_timeout=120).values():
                    future.result()
                chunk_s.append(time.monotonic() - t0)
            wait_for_leaders(admin, topics)
            total = time.monotonic() - start
            start = time.monotonic()
            for proc in procs:
                proc.stop()
            stop = time.monotonic() - start
            start = time.monotonic()
            for proc in procs:
                proc.start()
            admin = AdminClient({"bootstrap.servers": procs[0].bootstrap, "log_level": 0})
            wait_for_leaders(admin, topics)
            restart = time.monotonic() - start
            start = time.monotonic()
            for first in range(0, topics, chunk):
                names = [f"bench-{i}" for i in range(first, min(topics, first + chunk))]
                for future in admin.delete_topics(names, operation_timeout=120).values():
                    future.result()
            while any(name.startswith("bench-") for name in admin.list_topics(timeout=30).topics):
                time.sleep(0.05)
            delete = time.monotonic() - start
        finally:
            for proc in procs:
                proc.stop()
    fifth = max(1, len(chunk_s) // 5)
    early, late = statistics.median(chunk_s[:fifth]), statistics.median(chunk_s[-fifth:])
    return {
        "store": store,
        "topics": topics,
        "brokers": brokers,
        "total_s": total,
        "first_chunk_s": early,
        "last_chunk_s": late,
        "slowdown": late / early,
        "stop_s": stop,
        "start_s": restart,
        "delete_s": delete,
    }


def wait_for_leaders(admin: AdminClient, topics: int) -> None:
    """Until Metadata names a leader for every partition of the ``topics`` bench topics."""
    while True:
        md = admin.list_topics(timeout=30)
        led = sum(
            1
            for name, t in md.topics.items()
            if name.startswith("bench-") and t.partitions and all(p.leader >= 0 for p in t.partitions.values())
        )
        if led >= topics:
            return
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stores", default="local,zookeeper,etcd")
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--chunk", type=int, default=50)
    parser.add_argument("--brokers", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    stores = [store.strip() for store in args.stores.split(",")]
    if args.brokers > 1 and "local" in stores:
        parser.error("the local store serves one broker: with --brokers > 1 use --stores zookeeper,etcd")
    results = [create_topics(store.strip(), args.topics, args.chunk, args.brokers) for store in args.stores.split(",")]
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    table = Table(
        title=f"{args.topics:,} topics, {args.chunk} a request, {args.brokers} broker(s); "
        f"'first 1/5' and 'last 1/5': s per request"
    )
    for column in ("store", "create s", "first 1/5", "last 1/5", "slowdown", "stop s", "start s", "delete s"):
        table.add_column(column, justify="left" if column == "store" else "right", no_wrap=True)
    for r in results:
        table.add_row(
            r["store"],
            f"{r['total_s']:.1f}",
            f"{r['first_chunk_s']:.2f}",
            f"{r['last_chunk_s']:.2f}",
            f"{r['slowdown']:.1f}x",
            f"{r['stop_s']:.1f}",
            f"{r['start_s']:.1f}",
            f"{r['delete_s']:.1f}",
        )
    Console(width=max(Console().width, 120)).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
