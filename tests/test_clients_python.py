"""kafka-python (defaults: idempotent producer, so InitProducerId) and aiokafka against an
``odradek serve`` subprocess."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioTopicPartition
from client_helpers import kafka_python_read
from kafka import KafkaConsumer, KafkaProducer

from odradek.testing import BrokerProcess, unique_topic

pytestmark = pytest.mark.integration

TIMEOUT_S = 20


def test_kafka_python_defaults_produce_and_consume(odradek_broker: BrokerProcess) -> None:
    topic = unique_topic("kp")
    producer = KafkaProducer(bootstrap_servers=odradek_broker.bootstrap)  # enable_idempotence defaults on
    try:
        futures = [producer.send(topic, key=b"k%d" % i, value=b"v%d" % i) for i in range(25)]
        producer.flush(TIMEOUT_S)
        offsets = [f.get(TIMEOUT_S).offset for f in futures]
    finally:
        producer.close(TIMEOUT_S)
    assert offsets == list(range(25))

    consumer = KafkaConsumer(
        bootstrap_servers=odradek_broker.bootstrap, enable_auto_commit=False, consumer_timeout_ms=TIMEOUT_S * 1000
    )
    got = [(r.offset, r.key, r.value) for r in kafka_python_read(consumer, topic, 25)]
    assert got == [(i, b"k%d" % i, b"v%d" % i) for i in range(25)]


def test_aiokafka_produce_and_consume(odradek_broker: BrokerProcess) -> None:
    topic = unique_topic("aio")

    async def main() -> list[tuple[int, bytes | None]]:
        producer = AIOKafkaProducer(bootstrap_servers=odradek_broker.bootstrap, compression_type="gzip")
        await producer.start()
        try:
            metas = [await producer.send_and_wait(topic, b"value-%d" % i, key=b"k") for i in range(10)]
            batch = producer.create_batch()
            for i in range(10, 20):
                batch.append(key=None, value=b"value-%d" % i, timestamp=None)
            await producer.send_batch(batch, topic, partition=0)
            await producer.flush()
        finally:
            await producer.stop()
        assert [m.offset for m in metas] == list(range(10))

        consumer = AIOKafkaConsumer(bootstrap_servers=odradek_broker.bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = AioTopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got: list[tuple[int, bytes | None]] = []
            while len(got) < 20:
                batches = await asyncio.wait_for(consumer.getmany(tp, timeout_ms=1000), TIMEOUT_S)
                for record in batches.get(tp, []):
                    got.append((record.offset, record.value))
            return got
        finally:
            await consumer.stop()

    got = asyncio.run(main())
    assert got == [(i, b"value-%d" % i) for i in range(20)]
