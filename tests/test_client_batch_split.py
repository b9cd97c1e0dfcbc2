"""The producer splits a batch the broker refuses as too large (Java's Sender does), against an
``odradek serve`` subprocess whose topic has a small ``max.message.bytes``."""

from __future__ import annotations

import time

import pytest

from odradek.client import Admin, Consumer, NewTopic, Producer, TopicPartition
from odradek.errors import ErrorCode, KafkaError
from odradek.testing import BrokerProcess, unique_topic

pytestmark = pytest.mark.integration
TIMEOUT_S = 30.0


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
