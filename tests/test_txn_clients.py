"""Kafka transactions with unmodified clients against an ``odradek serve`` subprocess:
confluent-kafka commit and abort, read_committed vs read_uncommitted, consume-transform-produce
with send_offsets_to_transaction, fencing by a second producer with the same transactional.id,
and kafka-python's transactional producer."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest
from client_helpers import TIMEOUT_S, consume
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer

from odradek.testing import BrokerProcess, start_broker, unique_topic

pytestmark = pytest.mark.integration


def _create(broker: BrokerProcess, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(TIMEOUT_S)
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:  # wait for leaders (metadata can lag CreateTopics briefly)
        md = admin.list_topics(topic, timeout=TIMEOUT_S).topics[topic]
        if len(md.partitions) == partitions and all(p.leader >= 0 for p in md.partitions.values()):
            return
        time.sleep(0.05)
    raise AssertionError(f"{topic} has no leaders")


def _txn_producer(broker: BrokerProcess, txn_id: str, **conf: Any) -> Producer:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id, "linger.ms": 5, **conf})
    producer.init_transactions(TIMEOUT_S)
    return producer


def _values(messages: list[Any]) -> list[bytes]:
    return [m.value() for m in messages]


def test_commit_and_abort_seen_by_read_committed_and_uncommitted(odradek_broker: BrokerProcess) -> None:
    topic = unique_topic("txn")
    _create(odradek_broker, topic)
    producer = _txn_producer(odradek_broker, unique_topic("tid"))
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, key=b"k", value=f"committed-{i}".encode())
    producer.commit_transaction(TIMEOUT_S)
    producer.begin_transaction()
    for i in range(2):
        producer.produce(topic, key=b"k", value=f"aborted-{i}".encode())
    producer.flush(TIMEOUT_S)
    producer.abort_transaction(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(topic, key=b"k", value=b"committed-3")
    producer.commit_transaction(TIMEOUT_S)
    committed = [b"committed-0", b"committed-1", b"committed-2", b"committed-3"]
    # log: 3 records, COMMIT marker, 2 records, ABORT marker, 1 record, COMMIT marker
    got = consume(odradek_broker, topic, 4, **{"isolation.level": "read_committed"})
    assert _values(got) == committed
    assert [m.offset() for m in got] == [0, 1, 2, 7]
    everything = consume(odradek_broker, topic, 6, **{"isolation.level": "read_uncommitted"})
    assert _values(everything) == [*committed[:3], b"aborted-0", b"aborted-1", b"committed-3"]


def test_open_transaction_holds_back_read_committed(odradek_broker: BrokerProcess) -> None:
    topic = unique_topic("lso")
    _create(odradek_broker, topic)
    producer = _txn_producer(odradek_broker, unique_topic("tid"))
    producer.begin_transaction()
    producer.produce(topic, value=b"pending")
    producer.flush(TIMEOUT_S)
    # read_uncommitted sees the open transaction's record at once, read_committed must not
    assert _values(consume(odradek_broker, topic, 1, **{"isolation.level": "read_uncommitted"})) == [b"pending"]
    consumer = Consumer(
        {
            "bootstrap.servers": odradek_broker.bootstrap,
            "group.id": unique_topic("g"),
            "isolation.level": "read_committed",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        msg = consumer.poll(1.0)
        assert msg is None or msg.error() is not None, "read_committed saw a record of an open transaction"
        producer.commit_transaction(TIMEOUT_S)  # the parked fetch wakes on the LSO move
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                break
        assert msg is not None and msg.error() is None and msg.value() == b"pending"
    finally:
        consumer.close()


def test_consume_transform_produce_commits_offsets_with_the_transaction(odradek_broker: BrokerProcess) -> None:
    source, sink, group = unique_topic("src"), unique_topic("sink"), unique_topic("ctp")
    _create(odradek_broker, source)
    _create(odradek_broker, sink)
    feeder = Producer({"bootstrap.servers": odradek_broker.bootstrap})
    for i in range(6):
        feeder.produce(source, value=str(i).encode())
    assert feeder.flush(TIMEOUT_S) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": odradek_broker.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    producer = _txn_producer(odradek_broker, unique_topic("tid"))
    tp = TopicPartition(source, 0)
    try:
        consumer.assign([TopicPartition(source, 0, 0)])
        seen: list[Any] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(seen) < 6 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen.append(msg)
        assert len(seen) == 6

        def transform(batch: list[Any], commit: bool) -> None:
            producer.begin_transaction()
            for m in batch:
                producer.produce(sink, value=m.value() * 2)
            offsets = [TopicPartition(source, 0, batch[-1].offset() + 1)]
            producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), TIMEOUT_S)
            if commit:
                producer.commit_transaction(TIMEOUT_S)
            else:
                producer.abort_transaction(TIMEOUT_S)

        transform(seen[:3], commit=True)
        assert consumer.committed([tp], TIMEOUT_S)[0].offset == 3
        transform(seen[3:], commit=False)
        # the aborted transaction's offsets never become visible
        assert consumer.committed([tp], TIMEOUT_S)[0].offset == 3
        transform(seen[3:5], commit=True)
        assert consumer.committed([tp], TIMEOUT_S)[0].offset == 5
    finally:
        consumer.close()
    got = consume(odradek_broker, sink, 5, **{"isolation.level": "read_committed"})
    assert _values(got) == [b"00", b"11", b"22", b"33", b"44"]


def test_admin_require_stable_sees_offsets_held_by_an_open_transaction(odradek_broker: BrokerProcess) -> None:
    """confluent-kafka's list_consumer_group_offsets(require_stable=True) (librdkafka: OffsetFetch
    v7+, KIP-447) while a transaction holds offsets of the group: UNSTABLE_OFFSET_COMMIT for that
    partition; without require_stable the last committed offset (none yet); after the commit,
    the transaction's offset. A read_committed consumer's committed() waits for it, as with Kafka."""
    source, group = unique_topic("stable"), unique_topic("stable-g")
    _create(odradek_broker, source, partitions=2)
    admin = AdminClient({"bootstrap.servers": odradek_broker.bootstrap})
    consumer = Consumer({"bootstrap.servers": odradek_broker.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "isolation.level": "read_committed"})  # fmt: skip
    producer = _txn_producer(odradek_broker, unique_topic("tid"))
    partitions = [TopicPartition(source, 0), TopicPartition(source, 1)]

    def listed(require_stable: bool) -> list[tuple[int, int | None]]:
        request = [ConsumerGroupTopicPartitions(group, partitions)]
        result = admin.list_consumer_group_offsets(request, require_stable=require_stable)[group].result(TIMEOUT_S)
        return [(tp.offset, tp.error.code() if tp.error else None) for tp in result.topic_partitions]

    try:
        consumer.commit(offsets=[TopicPartition(source, 1, 4)], asynchronous=False)
        producer.begin_transaction()
        producer.send_offsets_to_transaction(
            [TopicPartition(source, 0, 3)], consumer.consumer_group_metadata(), TIMEOUT_S
        )
        invalid = -1001  # librdkafka's OFFSET_INVALID: no committed offset
        assert listed(require_stable=True) == [(invalid, KafkaError.UNSTABLE_OFFSET_COMMIT), (4, None)]
        assert listed(require_stable=False) == [(invalid, None), (4, None)]
        with pytest.raises(KafkaException) as waited:  # librdkafka retries UNSTABLE until stable
            consumer.committed(partitions, timeout=1.5)
        assert waited.value.args[0].code() == KafkaError._TIMED_OUT
        producer.commit_transaction(TIMEOUT_S)
        assert listed(require_stable=True) == [(3, None), (4, None)]
        assert [tp.offset for tp in consumer.committed(partitions, timeout=TIMEOUT_S)] == [3, 4]
    finally:
        consumer.close()


def test_second_producer_with_the_same_transactional_id_fences_the_first(odradek_broker: BrokerProcess) -> None:
    topic = unique_topic("fence")
    _create(odradek_broker, topic)
    txn_id = unique_topic("tid")
    first = _txn_producer(odradek_broker, txn_id)
    first.begin_transaction()
    first.produce(topic, value=b"from-first")
    first.flush(TIMEOUT_S)
    # re-initialising the id aborts the first producer's open transaction and fences it
    second = _txn_producer(odradek_broker, txn_id)
    with pytest.raises(KafkaException) as raised:
        first.commit_transaction(TIMEOUT_S)
    assert raised.value.args[0].fatal() or not raised.value.args[0].retriable()
    second.begin_transaction()
    second.produce(topic, value=b"from-second")
    second.commit_transaction(TIMEOUT_S)
    got = consume(odradek_broker, topic, 1, **{"isolation.level": "read_committed"})
    assert _values(got) == [b"from-second"]


def test_kafka_python_transactional_producer(odradek_broker: BrokerProcess) -> None:
    topic = unique_topic("kp")
    _create(odradek_broker, topic)
    producer = KafkaProducer(bootstrap_servers=odradek_broker.bootstrap, transactional_id=unique_topic("tid"))
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"kp-aborted")
        producer.flush()
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic, b"kp-committed")
        producer.commit_transaction()
    finally:
        producer.close(timeout=5)
    got = consume(odradek_broker, topic, 1, **{"isolation.level": "read_committed"})
    assert _values(got) == [b"kp-committed"]


def test_aiokafka_transactions_and_read_committed_consumer(odradek_broker: BrokerProcess) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as AioTopicPartition

    topic = unique_topic("aio")
    _create(odradek_broker, topic)

    async def run() -> tuple[list[bytes], list[bytes]]:
        producer = AIOKafkaProducer(bootstrap_servers=odradek_broker.bootstrap, transactional_id=unique_topic("tid"))
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send_and_wait(topic, b"aio-1")
            await producer.begin_transaction()
            await producer.send_and_wait(topic, b"aio-aborted")
            await producer.abort_transaction()
            async with producer.transaction():
                await producer.send_and_wait(topic, b"aio-2")
        finally:
            await producer.stop()
        seen: dict[str, list[bytes]] = {}
        for level, count in (("read_committed", 2), ("read_uncommitted", 3)):
            consumer = AIOKafkaConsumer(bootstrap_servers=odradek_broker.bootstrap, isolation_level=level)
            await consumer.start()
            try:
                tp = AioTopicPartition(topic, 0)
                consumer.assign([tp])
                consumer.seek(tp, 0)
                values: list[bytes] = []
                async with asyncio.timeout(TIMEOUT_S):
                    while len(values) < count:
                        batch = await consumer.getmany(tp, timeout_ms=500)
                        values.extend(m.value for m in batch.get(tp, []))
                seen[level] = values
            finally:
                await consumer.stop()
        return seen["read_committed"], seen["read_uncommitted"]

    committed, everything = asyncio.run(run())
    assert committed == [b"aio-1", b"aio-2"]
    assert everything == [b"aio-1", b"aio-aborted", b"aio-2"]


def test_abort_after_a_timed_out_batch_bumps_the_epoch_and_the_producer_goes_on() -> None:
    """KIP-360: a batch that times out in flight (the broker hangs, then crashes) leaves the
    producer's sequence unknown, so librdkafka needs an epoch bump: abort_transaction() sends
    InitProducerId v3+ with its producer id and epoch, the coordinator aborts the transaction and
    bumps the epoch, and the same producer commits the next transaction. With InitProducerId
    v0-1 only, librdkafka made this a fatal error and the producer had to be thrown away."""
    settings = {"offsets.topic.num.partitions": 1, "transaction.state.log.num.partitions": 1}
    with start_broker(settings=settings) as broker:
        topic = unique_topic("kip360")
        _create(broker, topic)
        producer = _txn_producer(broker, unique_topic("tid"), **{"message.timeout.ms": 2000})
        producer.begin_transaction()
        producer.produce(topic, b"committed-0")
        producer.commit_transaction(TIMEOUT_S)
        producer.begin_transaction()
        producer.produce(topic, b"aborted-0")
        assert producer.flush(TIMEOUT_S) == 0
        assert broker.process is not None
        errors: list[Any] = []
        os.kill(broker.process.pid, signal.SIGSTOP)  # the next Produce is sent and never answered
        try:
            producer.produce(topic, b"timed-out", on_delivery=lambda err, _msg: errors.append(err))
            # returns once message.timeout.ms (2 s) failed the batch: no fixed 4 s for a loaded machine
            producer.flush(TIMEOUT_S)
        finally:
            broker.kill()  # SIGKILL ends a stopped process too
        assert [e.code() for e in errors] == [KafkaError._MSG_TIMED_OUT]
        broker.start()
        producer.abort_transaction(TIMEOUT_S)  # the epoch bump (raised a fatal error before)
        producer.begin_transaction()
        producer.produce(topic, b"committed-1")
        producer.commit_transaction(TIMEOUT_S)
        got = consume(broker, topic, 2, **{"isolation.level": "read_committed"})
        assert _values(got) == [b"committed-0", b"committed-1"]
