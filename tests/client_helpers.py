"""Shared helpers for the real-client integration tests (confluent-kafka produce/consume)."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from odradek.testing import BrokerProcess, unique_topic

TIMEOUT_S = 20


def requests_by_version(broker: BrokerProcess, request: str) -> dict[int, float]:
    """kafka_network_requestmetrics_requests_total of ``request`` (Produce, Fetch, ...) per version."""
    counts: dict[int, float] = {}
    for (name, labels), value in broker.metrics().items():
        fields = dict(labels)
        if name == "kafka_network_requestmetrics_requests_total" and fields["request"] == request:
            counts[int(fields["version"])] = value
    return counts


def grown_versions(before: dict[int, float], after: dict[int, float]) -> set[int]:
    """The versions whose request count grew from ``before`` to ``after``."""
    return {v for v, n in after.items() if n > before.get(v, 0)}


def produce(broker: BrokerProcess, topic: str, records: list[tuple[bytes, bytes]], **conf: Any) -> list[Any]:
    """Produce and return the delivery reports' messages (in delivery order); errors fail."""
    delivered: list[Any] = []
    errors: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        (errors if err is not None else delivered).append(err or msg)

    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, **conf})
    for key, value in records:
        producer.produce(topic, value=value, key=key, headers=[("h", key)], on_delivery=on_delivery)
    assert producer.flush(TIMEOUT_S) == 0, "messages left undelivered"
    assert not errors, errors
    return delivered


def consume(
    broker: BrokerProcess, topic: str, count: int, *, partition: int = 0, offset: int = 0, **conf: Any
) -> list[Any]:
    """assign + seek, then poll until ``count`` messages arrived."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": unique_topic("g"),
            "enable.auto.commit": False,
            **conf,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, partition, offset)])
        out: list[Any] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(out) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None or msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
            if msg.error() is None:
                out.append(msg)
        assert len(out) == count, f"consumed {len(out)} of {count}"
        return out
    finally:
        consumer.close()


def kafka_python_read(consumer: Any, topic: str, count: int) -> list[Any]:
    """With a kafka-python ``KafkaConsumer``: assign partition 0 of ``topic``, seek to the
    beginning and read ``count`` records (fewer if ``consumer_timeout_ms`` passes); closes it."""
    from kafka import TopicPartition as KpTopicPartition

    try:
        tp = KpTopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got: list[Any] = []
        for record in consumer:
            got.append(record)
            if len(got) == count:
                break
        return got
    finally:
        consumer.close()


def fetch_v11_frame(
    correlation_id: int,
    partitions: list[tuple[str, int, int]],
    *,
    session_id: int = 0,
    session_epoch: int = -1,
    max_wait_ms: int = 0,
    min_bytes: int = 1,
    forgotten: list[tuple[str, int]] | None = None,
) -> bytes:
    """A size-prefixed consumer Fetch v11 request of ``(topic, partition, fetch offset)`` entries,
    in one topic entry per topic run (what a client's fetch session sends)."""
    import struct

    def string(s: str) -> bytes:
        return struct.pack(">h", len(s)) + s.encode()

    body = struct.pack(">iiiib", -1, max_wait_ms, min_bytes, 1 << 20, 0) + struct.pack(">ii", session_id, session_epoch)
    runs: list[tuple[str, list[tuple[int, int]]]] = []
    for topic, partition, offset in partitions:
        if runs and runs[-1][0] == topic:
            runs[-1][1].append((partition, offset))
        else:
            runs.append((topic, [(partition, offset)]))
    body += struct.pack(">i", len(runs))
    for topic, entries in runs:
        body += string(topic) + struct.pack(">i", len(entries))
        for partition, offset in entries:
            body += struct.pack(">iiqqi", partition, -1, offset, -1, 1 << 20)
    forgotten = forgotten or []
    body += struct.pack(">i", len(forgotten))
    for topic, partition in forgotten:
        body += string(topic) + struct.pack(">ii", 1, partition)
    body += string("")  # rack id
    frame = struct.pack(">hhi", 1, 11, correlation_id) + string("helpers") + body
    return struct.pack(">i", len(frame)) + frame


def read_response(sock: Any) -> bytes:
    """One response frame (without its size) from a blocking socket."""
    import struct

    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            assert chunk, "the broker closed the connection"
            data += chunk
        return data

    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


def aiokafka_round_trip(
    bootstrap: str, topic: str, values: list[bytes], timeout_s: float = 20, **conf: Any
) -> list[Any]:
    """With aiokafka: produce ``values`` to partition 0 of ``topic`` one by one, then read that
    many records back from the beginning; ``conf`` goes to both clients (security settings)."""
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as AioTopicPartition

    async def main() -> list[Any]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **conf)
        await producer.start()
        try:
            for value in values:
                await producer.send_and_wait(topic, value, partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **conf)
        await consumer.start()
        try:
            tp = AioTopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got: list[Any] = []
            while len(got) < len(values):
                batches = await asyncio.wait_for(consumer.getmany(tp, timeout_ms=1000), timeout_s)
                got += [r.value for r in batches.get(tp, [])]
            return got
        finally:
            await consumer.stop()

    return asyncio.run(main())
