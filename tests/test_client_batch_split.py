"""The producer splits a batch the broker refuses as too large (Java's Sender does): against the
in-memory broker under trio's MockClock (sequence numbers with batches in flight behind the
split one), and against an ``odradek serve`` subprocess whose topic has a small
``max.message.bytes``."""

from __future__ import annotations

import time

import pytest
import trio
import trio.testing
from client_fakes import FakeBroker
from test_client_producer_unit import _producer

from odradek.client import Admin, Consumer, NewTopic, Producer, TopicPartition
from odradek.client.producer import RecordFuture
from odradek.errors import ErrorCode, KafkaError
from odradek.testing import BrokerProcess, unique_topic

TIMEOUT_S = 30.0


async def test_split_halves_take_the_sequence_and_later_in_flight_batches_follow(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Batch 1 (the 7 records of 100 bytes that batch.size=1000 holds, ~800 bytes) is refused by
    a 700-byte limit while batch 2 is in flight behind it (OUT_OF_ORDER_SEQUENCE_NUMBER, since
    batch 1 was not written): the halves take sequences 0 and 4, batch 2 keeps 7 and is resent
    after them; every record once, in order."""
    broker = FakeBroker({"t": 1}, max_message_bytes=700)
    tp = TopicPartition("t", 0)
    async with _producer(broker, **{"linger.ms": 1000, "batch.size": 1000}) as producer:
        await producer.partitions_for("t")
        # appended without yielding to the sender, so both batches are ready together and go
        # out pipelined on one connection
        appended = [
            producer.append_nowait("t", b"%02d" % i + (b"x" * 98 if i < 8 else b""), None, (), 0, None)
            for i in range(11)
        ]
        await producer.flush()
        futures = [RecordFuture(batch, index) for batch, index, _wake in filter(None, appended)]
        offsets = [(await f).offset for f in futures]
    assert offsets == list(range(11))
    assert [v[:2] for _, v in broker.logs[tp] if v is not None] == [b"%02d" % i for i in range(11)]
    sequences = [seq for _tp, seq, _values in broker.received]
    assert sequences[:2] == [0, 7]  # batch 1 refused, batch 2 out of order behind it
    assert sequences[2:] == [0, 4, 7]  # the halves, then batch 2 again


@pytest.mark.integration
@pytest.mark.parametrize("idempotent", [True, False])
def test_a_batch_too_large_for_the_topic_is_split_and_records_that_fit_are_written(
    odradek_broker: BrokerProcess, idempotent: bool
) -> None:
    """30 records of 100 bytes in one batch exceed max.message.bytes=2000 together, not alone:
    all failed with MESSAGE_TOO_LARGE. Now only a record too large by itself fails, the others
    are written once each and in order; with idempotence the halves' sequence numbers continue
    the partition's (the broker checks them, and later sends still succeed)."""
    topic = unique_topic("split")
    tp = TopicPartition(topic, 0)
    with Admin({"bootstrap.servers": odradek_broker.bootstrap}) as admin:
        assert admin.create_topics([NewTopic(topic, 1, 1, {"max.message.bytes": "2000"})])[topic] is None
    values = [b"%03d" % i + b"v" * 97 for i in range(60)]
    big = b"B" * 3000
    conf = {"bootstrap.servers": odradek_broker.bootstrap, "linger.ms": 50, "enable.idempotence": idempotent,
            "acks": "all" if idempotent else "1"}  # fmt: skip
    with Producer(conf) as producer:
        futures = [producer.send(topic, v, partition=0) for v in values[:30]]
        big_future = producer.send(topic, big, partition=0)
        futures += [producer.send(topic, v, partition=0) for v in values[30:]]
        producer.flush(TIMEOUT_S)
        offsets = [f.result(TIMEOUT_S).offset for f in futures]
        error = big_future.exception(TIMEOUT_S)
        assert isinstance(error, KafkaError) and error.code is ErrorCode.MESSAGE_TOO_LARGE
        assert len(set(offsets)) == 60
        if idempotent:  # without idempotence, as in Java, a resent batch may land after later ones
            assert offsets == sorted(offsets)
        # the producer goes on with its sequence numbers
        assert producer.send(topic, b"after", partition=0).result(TIMEOUT_S).offset > offsets[-1]
    got: list[bytes | None] = []
    with Consumer({"bootstrap.servers": odradek_broker.bootstrap, "auto.offset.reset": "earliest"}) as consumer:
        consumer.assign([tp])
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < 61 and time.monotonic() < deadline:
            got += [r.value for r in consumer.poll(0.5).get(tp, [])]
    assert (got if idempotent else sorted(got, key=lambda v: v or b"")) == [*values, b"after"]
