"""Producer and consumer throughput of Python Kafka clients against one odradek broker, in one run.

Usage::

    .venv/bin/python bench/bench_clients.py [--records N] [--size BYTES] [--bootstrap HOST:PORT]

Clients: odradek (sync facade and trio API), kafka-python, aiokafka, confluent-kafka (librdkafka).
Every client runs in its own subprocess (so its peak RSS is its own) against the same broker
(``odradek serve`` on a free port with a temp data dir, unless ``--bootstrap`` names one).

Produce: N records of SIZE bytes, keyless, acks=1, no idempotence (the same work for every
client), the client's own batching defaults otherwise; timed from the first send to the end of
flush. A second odradek row uses its defaults (acks=all, idempotent). Consume: the same N records
(written once by librdkafka) read from the beginning of a one-partition topic by direct
assignment, timed from the first poll (after the client connected and resolved its position) to
the N-th record. Output: records/s, MB/s, ratio to
kafka-python, peak RSS of the worker.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

PRODUCERS = ["odradek", "odradek-trio", "odradek-idempotent", "kafka-python", "aiokafka", "confluent-kafka"]
CONSUMERS = ["odradek", "odradek-trio", "kafka-python", "aiokafka", "confluent-kafka"]


# -- workers (run in a subprocess each) -----------------------------------------------------------


def produce(client: str, bootstrap: str, topic: str, n: int, size: int) -> float:
    value = b"x" * size
    if client in ("odradek", "odradek-idempotent"):
        from odradek.client import Producer

        conf: dict[str, Any] = {"bootstrap.servers": bootstrap}
        if client == "odradek":
            conf.update({"acks": "1", "enable.idempotence": False})
        with Producer(conf) as producer:
            producer.partitions_for(topic)
            start = time.perf_counter()
            send = producer.send
            for _ in range(n):
                send(topic, value)
            producer.flush()
            return time.perf_counter() - start
    if client == "odradek-trio":
        import trio

        from odradek.client.aio import AsyncProducer

        async def run() -> float:
            conf = {"bootstrap.servers": bootstrap, "acks": "1", "enable.idempotence": False}
            async with AsyncProducer(conf) as producer:
                await producer.partitions_for(topic)
                start = time.perf_counter()
                send = producer.send
                for _ in range(n):
                    await send(topic, value)
                await producer.flush()
                return time.perf_counter() - start

        return trio.run(run)
    if client == "kafka-python":
        from kafka import KafkaProducer

        kp = KafkaProducer(bootstrap_servers=bootstrap, acks=1, enable_idempotence=False)
        kp.partitions_for(topic)
        start = time.perf_counter()
        for _ in range(n):
            kp.send(topic, value)
        kp.flush()
        elapsed = time.perf_counter() - start
        kp.close()
        return elapsed
    if client == "aiokafka":
        from aiokafka import AIOKafkaProducer

        async def arun() -> float:
            ap = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, enable_idempotence=False)
            await ap.start()
            try:
                await ap.partitions_for(topic)
                start = time.perf_counter()
                for _ in range(n):
                    await ap.send(topic, value)
                await ap.flush()
                return time.perf_counter() - start
            finally:
                await ap.stop()

        return asyncio.run(arun())
    if client == "confluent-kafka":
        import confluent_kafka

        cp = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": 1, "enable.idempotence": False})
        cp.list_topics(topic)
        start = time.perf_counter()
        for i in range(n):
            while True:
                try:
                    cp.produce(topic, value)
                    break
                except BufferError:
                    cp.poll(0.001)
            if i % 10000 == 0:
                cp.poll(0)
        cp.flush()
        return time.perf_counter() - start
    raise SystemExit(f"unknown producer {client}")


def consume(client: str, bootstrap: str, topic: str, n: int) -> float:
    if client == "odradek":
        from odradek.client import Consumer, TopicPartition

        with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"}) as consumer:
            consumer.assign([TopicPartition(topic, 0)])
            consumer.position(TopicPartition(topic, 0))  # connected, offset resolved: as for the others
            count = 0
            start = time.perf_counter()
            while count < n:
                for records in consumer.poll(1.0).values():
                    count += len(records)
            return time.perf_counter() - start
    if client == "odradek-trio":
        import trio

        from odradek.client.aio import AsyncConsumer

        async def run() -> float:
            async with AsyncConsumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"}) as consumer:
                consumer.assign([(topic, 0)])
                await consumer.position((topic, 0))
                count = 0
                start = time.perf_counter()
                while count < n:
                    for records in (await consumer.poll(1.0)).values():
                        count += len(records)
                return time.perf_counter() - start

        return trio.run(run)
    if client == "kafka-python":
        from kafka import KafkaConsumer
        from kafka import TopicPartition as KTP

        kc = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False)
        kc.assign([KTP(topic, 0)])
        kc.position(KTP(topic, 0))
        count = 0
        start = time.perf_counter()
        while count < n:
            for records in kc.poll(1000).values():
                count += len(records)
        elapsed = time.perf_counter() - start
        kc.close()
        return elapsed
    if client == "aiokafka":
        from aiokafka import AIOKafkaConsumer
        from aiokafka import TopicPartition as ATP

        async def arun() -> float:
            ac = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False)
            await ac.start()
            try:
                ac.assign([ATP(topic, 0)])
                await ac.position(ATP(topic, 0))
                count = 0
                start = time.perf_counter()
                while count < n:
                    for records in (await ac.getmany(timeout_ms=1000)).values():
                        count += len(records)
                return time.perf_counter() - start
            finally:
                await ac.stop()

        return asyncio.run(arun())
    if client == "confluent-kafka":
        import confluent_kafka

        cc = confluent_kafka.Consumer(
            {"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False}
        )
        cc.get_watermark_offsets(confluent_kafka.TopicPartition(topic, 0))  # connected before the clock
        cc.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
        count = 0
        start = time.perf_counter()
        while count < n:
            count += sum(1 for m in cc.consume(10000, 1.0) if m.error() is None)
        elapsed = time.perf_counter() - start
        cc.close()
        return elapsed
    raise SystemExit(f"unknown consumer {client}")


def worker(args: argparse.Namespace) -> None:
    if args.worker == "produce":
        elapsed = produce(args.client, args.bootstrap, args.topic, args.records, args.size)
    else:
        elapsed = consume(args.client, args.bootstrap, args.topic, args.records)
    print(json.dumps({"elapsed": elapsed, "rss_mib": peak_rss_mib()}))


def peak_rss_mib() -> float:
    """This process's peak RSS (VmHWM: unlike ru_maxrss it is not inherited from the parent)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


# -- driver -------------------------------------------------------------------------------------


def run_worker(kind: str, client: str, bootstrap: str, topic: str, records: int, size: int) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--worker", kind, "--client", client, "--bootstrap", bootstrap,
           "--topic", topic, "--records", str(records), "--size", str(size)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1]}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def create_topics(bootstrap: str, names: list[str]) -> None:
    from odradek.client import Admin, NewTopic

    with Admin({"bootstrap.servers": bootstrap}) as admin:
        for name, error in admin.create_topics([NewTopic(n, 1, 1) for n in names]).items():
            if error is not None:
                raise SystemExit(f"cannot create {name}: {error}")


def fill(bootstrap: str, topic: str, n: int, size: int) -> None:
    import confluent_kafka

    cp = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    value = b"x" * size
    for i in range(n):
        while True:
            try:
                cp.produce(topic, value)
                break
            except BufferError:
                cp.poll(0.001)
        if i % 10000 == 0:
            cp.poll(0)
    if cp.flush(120) != 0:
        raise SystemExit("could not fill the consume topic")


def table(title: str, rows: list[tuple[str, dict[str, Any]]], n: int, size: int) -> str:
    base = next((r["elapsed"] for c, r in rows if c == "kafka-python" and "elapsed" in r), None)
    lines = [f"### {title} ({n:,} records of {size} B)", "",
             "| client | records/s | MB/s | vs kafka-python | peak RSS MiB |", "|---|---:|---:|---:|---:|"]  # fmt: skip
    for client, r in rows:
        if "error" in r:
            lines.append(f"| {client} | error: {r['error']} | | | |")
            continue
        rate = n / r["elapsed"]
        ratio = f"{base / r['elapsed']:.2f}x" if base else "-"
        lines.append(f"| {client} | {rate:,.0f} | {rate * size / 1e6:.1f} | {ratio} | {r['rss_mib']:.0f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--bootstrap", help="use this broker instead of starting odradek serve")
    parser.add_argument("--only", choices=("produce", "consume"), help="run one half only")
    parser.add_argument("--clients", help="comma-separated subset of clients (default: all)")
    parser.add_argument("--worker", choices=("produce", "consume"), help=argparse.SUPPRESS)
    parser.add_argument("--client", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    sys.path.insert(0, str(REPO))
    from odradek.testing.broker import start_broker

    wanted = set(args.clients.split(",")) if args.clients else None
    producers = [c for c in PRODUCERS if wanted is None or c in wanted]
    consumers = [c for c in CONSUMERS if wanted is None or c in wanted]

    def bench(bootstrap: str) -> None:
        run_id = uuid.uuid4().hex[:6]
        consume_topic = f"bench-consume-{run_id}"
        produce_topics = {c: f"bench-produce-{c}-{run_id}" for c in producers}
        create_topics(bootstrap, [consume_topic, *produce_topics.values()])
        produced = []
        for client in producers if args.only != "consume" else ():
            produced.append(
                (client, run_worker("produce", client, bootstrap, produce_topics[client], args.records, args.size))
            )
            print(f"produce {client}: {produced[-1][1]}", file=sys.stderr)
        consumed = []
        if args.only != "produce":
            fill(bootstrap, consume_topic, args.records, args.size)
        for client in consumers if args.only != "produce" else ():
            consumed.append((client, run_worker("consume", client, bootstrap, consume_topic, args.records, args.size)))
            print(f"consume {client}: {consumed[-1][1]}", file=sys.stderr)
        if produced:
            print(table("Producers", produced, args.records, args.size))
            print()
        if consumed:
            print(table("Consumers", consumed, args.records, args.size))

    if args.bootstrap:
        bench(args.bootstrap)
    else:
        with start_broker() as broker:
            bench(broker.bootstrap)


if __name__ == "__main__":
    main()
