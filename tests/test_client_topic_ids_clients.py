"""odradek's consumer on topic ids against a real broker: it reads through Fetch v16 by topic id
(the broker's per-version request metrics count it: Fetch v16 and Metadata v12 only), and a topic
deleted and created again under its name while the consumer is assigned to it is noticed by its
new id and handled as the Java consumer does."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest
from client_helpers import grown_versions, requests_by_version

from odradek.client import Admin, Consumer, LogTruncationError, Producer, TopicPartition
from odradek.client.admin import NewTopic
from odradek.testing import BrokerProcess, start_broker, unique_topic

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    """A broker whose metrics (requests per API and version) are served."""
    with start_broker(settings={"metrics.prometheus.listener": "127.0.0.1:0"}) as process:
        yield process


def _produce(broker: BrokerProcess, topic: str, values: list[bytes]) -> list[int]:
    with Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0}) as producer:
        return [f.result(30).offset for f in [producer.send(topic, v, partition=0) for v in values]]


def _read(consumer: Consumer, count: int, timeout_s: float = 30.0) -> list[tuple[int, bytes | None]]:
    """Poll until ``count`` records came back: (offset, value) pairs."""
    got: list[tuple[int, bytes | None]] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count:
        assert time.monotonic() < deadline, f"only {got} of {count} records"
        for records in consumer.poll(0.5).values():
            got.extend((r.offset, r.value) for r in records)
    return got


def _create(admin: Admin, topic: str) -> None:
    deadline = time.monotonic() + 30
    while (error := admin.create_topics([NewTopic(topic, 1, 1)])[topic]) is not None:
        # TOPIC_ALREADY_EXISTS while the deletion before is still under way
        assert time.monotonic() < deadline, error
        time.sleep(0.1)


def test_odradek_consumer_fetches_at_v16_by_topic_id(broker: BrokerProcess) -> None:
    topic = unique_topic("ids")
    metadata_before = requests_by_version(broker, "Metadata")
    values = [b"v%d" % i for i in range(20)]
    assert _produce(broker, topic, values) == list(range(20))
    fetch_before = requests_by_version(broker, "Fetch")
    with Consumer({"bootstrap.servers": broker.bootstrap, "auto.offset.reset": "earliest"}) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        assert _read(consumer, 20) == list(enumerate(values))
    assert grown_versions(fetch_before, requests_by_version(broker, "Fetch")) == {16}
    assert grown_versions(metadata_before, requests_by_version(broker, "Metadata")) == {12}


@pytest.mark.parametrize("reset", ["earliest", "none"])
def test_a_topic_created_again_under_its_name_is_fetched_by_its_new_id(
    broker: BrokerProcess, reset: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The Java consumer keeps its position across the recreation (positions are by name) and
    fetches the new topic from there, naming the epoch of the last record it read: the new
    leader's log ends that epoch before the position, so the consumer moves back to that end
    -- the new topic's records before it are not read -- or, with ``auto.offset.reset=none``,
    raises LogTruncationError."""
    topic = unique_topic("recreated")
    tp = TopicPartition(topic, 0)
    config = {"bootstrap.servers": broker.bootstrap, "auto.offset.reset": reset}
    with (
        Admin({"bootstrap.servers": broker.bootstrap}) as admin,
        Consumer(config) as consumer,
        caplog.at_level(logging.INFO, logger="odradek.client"),
    ):
        _create(admin, topic)
        _produce(broker, topic, [b"old%d" % i for i in range(10)])
        consumer.assign([tp])
        consumer.seek(tp, 0)
        assert [o for o, _ in _read(consumer, 10)] == list(range(10))
        consumer.pause([tp])
        assert admin.delete_topics([topic])[topic] is None
        _create(admin, topic)
        assert _produce(broker, topic, [b"new%d" % i for i in range(3)]) == [0, 1, 2]
        consumer.resume([tp])
        if reset == "none":
            with pytest.raises(LogTruncationError) as raised:
                _read(consumer, 1, 10)
            assert raised.value.divergent_offsets == {tp: (3, 0)}
        else:
            more = _produce(broker, topic, [b"new%d" % i for i in range(3, 5)])
            assert _read(consumer, 2) == [(o, b"new%d" % o) for o in more]
    messages = [r.getMessage() for r in caplog.records]
    assert any(f"topic {topic} has a new topic id" in m for m in messages), messages
    assert any(f"{topic}-0 replaced (the topic id changed)" in m for m in messages), messages
