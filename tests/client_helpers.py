"""Shared helpers for the real-client integration tests (confluent-kafka produce/consume)."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from odradek.testing import BrokerProcess, unique_topic

TIMEOUT_S = 20


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
