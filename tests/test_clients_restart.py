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


def test_admin_metadata_calls_wait_out_a_broker_restart() -> None:
    """odradek's admin client retries Metadata through a broker that is down for a few seconds,
    as Kafka's AdminClient does until default.api.timeout.ms; it failed at once with a network
    error, which stopped a Spark streaming query on any broker restart."""
    import threading
    import time

    from odradek.client import Admin

    topic = unique_topic("admin-restart")
    with start_broker() as broker:
        produce(broker, topic, [(b"k", b"v")])
        with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
            assert admin.list_topics()[topic] == 1
            broker.stop()
            restarter = threading.Thread(target=lambda: (time.sleep(2), broker.start()))
            restarter.start()
            try:
                described = admin.describe_topics([topic], timeout=TIMEOUT_S)
                assert [p.partition for p in described[topic].partitions] == [0]  # type: ignore[union-attr]
                assert admin.list_topics(timeout=TIMEOUT_S)[topic] == 1
            finally:
                restarter.join()
