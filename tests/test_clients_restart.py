"""A broker restarted between produce and consume keeps every record, and offsets continue."""

from __future__ import annotations

import pytest
from client_helpers import TIMEOUT_S, consume, produce
from confluent_kafka import Producer

from odradek.testing import start_broker, unique_topic

pytestmark = pytest.mark.integration


def test_restart_between_produce_and_consume() -> None:
    topic = unique_topic("restart")
    with start_broker() as broker:
        first = produce(broker, topic, [(b"k", b"before-%d" % i) for i in range(30)], **{"enable.idempotence": True})
        assert [m.offset() for m in first] == list(range(30))
        broker.restart()
        got = consume(broker, topic, 30)
        assert [m.value() for m in got] == [b"before-%d" % i for i in range(30)]
        after = produce(broker, topic, [(b"k", b"after-%d" % i) for i in range(5)])
        assert [m.offset() for m in after] == list(range(30, 35))
        # a crash (SIGKILL) loses nothing that was acknowledged with acks=all either
        broker.kill()
        broker.start()
        got = consume(broker, topic, 35)
        assert got[-1].value() == b"after-4" and got[-1].offset() == 34
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce(topic, b"x")
        assert producer.flush(TIMEOUT_S) == 0
