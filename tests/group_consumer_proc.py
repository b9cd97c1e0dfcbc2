"""A confluent-kafka (librdkafka) group consumer run as a subprocess by the group integration tests.

It prints one JSON line per event, flushed at once, with a wall-clock time so events of several
processes on one host can be ordered: ``assign``/``revoke`` (the partitions and what it owns after),
``msg`` (partition, offset), ``commit`` (partition, next offset) after each synchronous commit,
``commit_failed``, and ``closed``. SIGTERM closes the consumer cleanly (LeaveGroup unless static);
the tests also SIGKILL it to exercise session expiry. ``--protocol consumer`` makes it a KIP-848
member (``group.protocol=consumer``, ``--strategy`` naming the broker's assignor).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time

from confluent_kafka import Consumer, KafkaException, TopicPartition


def emit(event: str, **fields: object) -> None:
    sys.stdout.write(json.dumps({"ev": event, "t": time.time(), **fields}) + "\n")
    sys.stdout.flush()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--strategy", default="range")
    parser.add_argument("--instance-id")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    # "consumer": KIP-848 (group.protocol=consumer); --strategy then names the server-side assignor
    parser.add_argument("--protocol", default="classic")
    args = parser.parse_args()

    owned: set[tuple[str, int]] = set()
    stopping = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)

    def on_assign(consumer: Consumer, partitions: list[TopicPartition]) -> None:
        owned.update((p.topic, p.partition) for p in partitions)
        emit("assign", parts=sorted([p.topic, p.partition] for p in partitions), owned=sorted(owned))

    def on_revoke(consumer: Consumer, partitions: list[TopicPartition]) -> None:
        owned.difference_update((p.topic, p.partition) for p in partitions)
        emit("revoke", parts=sorted([p.topic, p.partition] for p in partitions), owned=sorted(owned))

    config = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "client.id": f"proc-{args.instance_id or 'dyn'}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": args.session_timeout_ms,
        "heartbeat.interval.ms": 500,
        "partition.assignment.strategy": args.strategy,
        "topic.metadata.refresh.interval.ms": 2000,
    }
    if args.protocol == "consumer":
        # the broker owns session timeout, heartbeat interval and assignor under KIP-848:
        # librdkafka refuses the classic settings for them
        for key in ("session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy"):
            del config[key]
        config["group.protocol"] = "consumer"
        config["group.remote.assignor"] = args.strategy
    if args.instance_id:
        config["group.instance.id"] = args.instance_id
    consumer = Consumer(config)
    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
    emit("started")
    try:
        while not stopping:
            msg = consumer.poll(0.1)
            if msg is None or msg.error() is not None:
                continue
            emit("msg", p=msg.partition(), o=msg.offset())
            try:
                consumer.commit(message=msg, asynchronous=False)
            except KafkaException as exc:
                emit("commit_failed", p=msg.partition(), o=msg.offset() + 1, error=str(exc))
            else:
                emit("commit", p=msg.partition(), o=msg.offset() + 1)
    finally:
        consumer.close()
        emit("closed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
