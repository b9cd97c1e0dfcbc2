"""Benchmark of broker failover as a topic's partition count grows, on ZooKeeper and etcd.

When a broker stops or dies, the controller elects new leaders for the partitions it led and
takes it out of every ISR: one compare-and-set per partition, each seen by every broker through
its metadata watch. Moving P partitions should take about P times what one takes; any step that
re-reads or re-decides a whole topic per changed partition turns it into O(P^2), and a broker
failure on a large topic then leaves its partitions without a leader for minutes. On three
brokers (``odradek serve`` processes) and one topic of P partitions with replication factor 3,
for each P in ``--partitions`` this times, as Metadata from a surviving broker shows it:

- **stop**: a clean stop (SIGTERM, Kafka's controlled shutdown) of a broker that is not the
  controller, until no partition names it as leader or in its ISR;
- **rejoin**: its start again, until it is back in every ISR;
- **kill**: a ``kill -9`` of the same broker, from the moment the surviving brokers no longer
  list it (its session or lease expired: ``--session-ms``) until no partition names it. Before
  it, a preferred ElectLeaders gives the broker back the third of the partitions it prefers (the
  controller's leader-imbalance check would, but only every
  ``leader.imbalance.check.interval.seconds``), so the controller elects as well as shrinks;
- **rejoin after kill**: its start again (recovery of its logs included), until it is back in
  every ISR.

Each figure is also given per partition; "ratio" divides the largest size's per-partition figure
by the smallest's (1.0: no slowdown as partitions grow).

Run: ``.venv/bin/python bench/bench_failover.py [--stores zookeeper,etcd] [--partitions 500,1000]
[--session-ms 6000] [--json] [--keep-logs DIR]``
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from confluent_kafka import ElectionType
from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console
from rich.table import Table

from odradek.testing.broker import BrokerProcess
from odradek.testing.servers import start_etcd, start_zookeeper, unique_chroot

TIMEOUT_S = 600.0
TOPIC = "failover"
TXN_OPS = 20_000
PHASES = ("stop", "rejoin", "kill", "rejoin after kill")


@contextmanager
def store_settings(store: str, session_ms: int) -> Iterator[dict[str, str]]:
    """Broker settings for ``store`` (its server running for the duration)."""
    if store == "zookeeper":
        with start_zookeeper() as zk:
            yield {
                "metadata": "zookeeper",
                "zookeeper.connect": zk.connect_string + unique_chroot("bench"),
                "zookeeper.session.timeout.ms": str(session_ms),
            }
    elif store == "etcd":
        # a topic's creation is one transaction of a write per partition: past etcd's default 128
        with start_etcd(max_txn_ops=TXN_OPS) as etcd:
            yield {
                "metadata": "etcd",
                "etcd.endpoints": etcd.endpoint,
                "etcd.namespace": unique_chroot("bench"),
                "etcd.lease.ttl.ms": str(session_ms),
                "etcd.max.txn.ops": str(TXN_OPS),
            }
    else:
        raise SystemExit(f"unknown store {store!r}: zookeeper or etcd (failover needs a cluster)")


def wait_until(admin: AdminClient, what: str, done: Callable[[Any], bool]) -> float:
    """Poll the topic's Metadata until ``done(topic_metadata)``; the monotonic time it held."""
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            meta = admin.list_topics(TOPIC, timeout=30).topics.get(TOPIC)
        except Exception:  # the broker asked may be the one just stopped: ask again
            meta = None
        if meta is not None and meta.partitions and done(meta):
            return time.monotonic()
        time.sleep(0.02)
    raise SystemExit(f"timed out waiting for {what}")


def gone_from(broker: int) -> Callable[[Any], bool]:
    return lambda meta: all(p.leader != broker and broker not in p.isrs for p in meta.partitions.values())


def preferred_lead(meta: Any) -> bool:
    return all(p.leader == p.replicas[0] for p in meta.partitions.values())


def back_in(broker: int) -> Callable[[Any], bool]:
    return lambda meta: all(broker in p.isrs for p in meta.partitions.values())


def live_brokers(admin: AdminClient) -> set[int]:
    try:
        return {b.id for b in admin.describe_cluster(request_timeout=10).result().nodes}
    except Exception:
        return set()


def run_size(store: str, partitions: int, session_ms: int, keep_logs: Path | None = None) -> dict[str, Any]:
    with store_settings(store, session_ms) as settings, tempfile.TemporaryDirectory(prefix="bench-failover-") as tmp:
        procs = [BrokerProcess(Path(tmp) / str(i), {"broker.id": str(i), **settings}) for i in range(3)]
        try:
            for proc in procs:
                proc.start()
            bootstrap = ",".join(p.bootstrap for p in procs)
            admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
            admin.create_topics([NewTopic(TOPIC, partitions, 3)], operation_timeout=TIMEOUT_S)[TOPIC].result()
            wait_until(admin, "the topic's leaders and full ISRs", lambda m: len(m.partitions) == partitions
                       and all(p.leader >= 0 and len(p.isrs) == 3 for p in m.partitions.values()))  # fmt: skip
            controller = admin.describe_cluster(request_timeout=30).result().controller.id
            victim = next(i for i in (2, 1, 0) if i != controller)
            proc = procs[victim]
            others = AdminClient(
                {"bootstrap.servers": ",".join(p.bootstrap for i, p in enumerate(procs) if i != victim), "log_level": 0}
            )
            figures: dict[str, float] = {}
            t0 = time.monotonic()
            proc.stop()
            figures["stop"] = wait_until(others, "the stopped broker to leave", gone_from(victim)) - t0
            t0 = time.monotonic()
            proc.start()
            figures["rejoin"] = wait_until(others, "the broker to rejoin every ISR", back_in(victim)) - t0
            admin.elect_leaders(ElectionType.PREFERRED, None).result(TIMEOUT_S)
            wait_until(admin, "the preferred leaders", preferred_lead)
            proc.kill()
            while victim in live_brokers(others):
                time.sleep(0.02)
            t0 = time.monotonic()
            figures["kill"] = wait_until(others, "the killed broker to leave", gone_from(victim)) - t0
            t0 = time.monotonic()
            proc.start()
            figures["rejoin after kill"] = (
                wait_until(others, "the killed broker to rejoin every ISR", back_in(victim)) - t0
            )
            problems = [line for p in procs for line in p.log_problems()]
        finally:
            for p in procs:
                p.stop()
            if keep_logs is not None:  # each broker's log, for a phase that took long
                keep_logs.mkdir(parents=True, exist_ok=True)
                for i, p in enumerate(procs):
                    if p.log_path.exists():
                        shutil.copy(p.log_path, keep_logs / f"{store}-{partitions}-broker{i}.log")
    return {"store": store, "partitions": partitions, **figures, "log_problems": problems[:20]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stores", default="zookeeper,etcd")
    parser.add_argument("--partitions", default="500,1000", help="comma-separated topic sizes")
    parser.add_argument("--session-ms", type=int, default=6000, help="ZooKeeper session timeout / etcd lease TTL")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--keep-logs", type=Path, help="copy each broker's log into this directory")
    args = parser.parse_args(argv)
    sizes = sorted(int(p) for p in args.partitions.split(","))
    results: list[dict[str, Any]] = []
    for store in args.stores.split(","):
        for size in sizes:
            results.append(run_size(store.strip(), size, args.session_ms, args.keep_logs))
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)  # progress: a run takes minutes
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    table = Table(title="failover of one of 3 brokers: s until Metadata shows it (ms per partition)")
    for column in ("store", "partitions", *PHASES):
        table.add_column(column, justify="left" if column == "store" else "right", no_wrap=True)
    for r in results:
        table.add_row(
            r["store"], f"{r['partitions']:,}",
            *(f"{r[ph]:.1f} ({1000 * r[ph] / r['partitions']:.1f})" for ph in PHASES),
        )  # fmt: skip
    for store in dict.fromkeys(r["store"] for r in results):
        rows = [r for r in results if r["store"] == store]
        if len(rows) > 1:
            small, large = rows[0], rows[-1]
            table.add_row(
                store, "ratio",
                *(f"{(large[ph] / large['partitions']) / (small[ph] / small['partitions']):.1f}x" for ph in PHASES),
            )  # fmt: skip
    Console(width=max(Console().width, 120)).print(table)
    for r in results:
        for line in r["log_problems"]:
            print(f"{r['store']} {r['partitions']}: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
