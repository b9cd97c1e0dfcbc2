"""KIP-951 with a real client on three brokers: librdkafka (confluent-kafka 2.16, Produce v10)
producing to a partition whose leadership moves while the old leader stays up gets
NOT_LEADER_OR_FOLLOWER with the current leader and its endpoint, reads them (its
``METADATAUPDATE`` debug lines come from that answer), and goes on producing to the new leader
with every record acknowledged.

What librdkafka then does with the fields: it applies them to its metadata cache, which held no
entry for the topic here ("Topic ... not found in cache"), so it also asks Metadata, as before
KIP-951. The broker's side, the fields themselves, is checked field by field in
tests/test_produce_flexible.py and tests/test_fetch_flexible.py. odradek's own producer (Produce
v11) and consumer (Fetch v16) follow the hint on the same cluster."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ElectionType, Producer, TopicPartition
from test_replication_cluster import partition_state, replicated_topic, three_brokers, wait_for

from odradek.client import Consumer as OdradekConsumer
from odradek.client import Producer as OdradekProducer
from odradek.client import TopicPartition as OdradekTopicPartition
from odradek.testing.servers import unique_chroot

pytestmark = pytest.mark.integration


class _Lines(logging.Handler):
    """librdkafka's log lines, as its ``logger`` hands them over."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextlib.contextmanager
def _leader_off_the_preferred_replica(tmp_path: Path, zookeeper_server: Any) -> Iterator[tuple[str, Any, str, int]]:
    """Three brokers and an RF=3 topic led by another replica than its preferred one, which is
    a follower again: (bootstrap, admin, topic, preferred); a preferred election moves it back."""
    metadata = {
        "metadata": "zookeeper",
        "zookeeper.connect": zookeeper_server.connect_string + unique_chroot("kip951"),
        "auto.leader.rebalance.enable": "false",  # only the election below moves the leader
    }
    with three_brokers(tmp_path, metadata) as brokers:
        bootstrap, admin, topic, preferred = replicated_topic(brokers, "kip951")
        # leadership leaves the preferred replica while it restarts; it comes back as a follower
        brokers[preferred].stop()
        brokers[preferred].start()
        wait_for(
            "a full ISR led by another replica",
            lambda: (s := partition_state(admin, topic)) and s[0] != preferred and len(s[1]) == 3,
        )
        yield bootstrap, admin, topic, preferred


def _elect_preferred(admin: Any, topic: str, preferred: int) -> None:
    elected = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]).result(30)
    assert list(elected.values()) == [None]
    wait_for("the preferred replica leading", lambda: (s := partition_state(admin, topic)) and s[0] == preferred)


def test_librdkafka_reads_the_current_leader_from_the_old_leaders_produce_answer(
    tmp_path: Path, zookeeper_server: Any
) -> None:
    with _leader_off_the_preferred_replica(tmp_path, zookeeper_server) as (bootstrap, admin, topic, preferred):
        lines = _Lines()
        logger = logging.getLogger(f"librdkafka.{topic}")
        logger.addHandler(lines)
        logger.setLevel(logging.DEBUG)
        errors: list[Any] = []
        producer = Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
             "debug": "metadata,topic,msg", "logger": logger}
        )  # fmt: skip

        def send(tag: bytes) -> None:
            for i in range(10):
                producer.produce(topic, tag + b"%d" % i, on_delivery=lambda err, _msg: errors.append(err))
            assert producer.flush(30) == 0

        send(b"a")
        before = len(lines.lines)
        _elect_preferred(admin, topic, preferred)
        send(b"b")  # first to the old leader, which answers NOT_LEADER_OR_FOLLOWER with the new one
        assert errors == [None] * 20
        after = lines.lines[before:]
        assert any("Not leader for partition" in line for line in after), after
        assert any(line.startswith("METADATAUPDATE") and topic in line for line in after), after
        assert any(f"leader is {preferred}" in line for line in after), after


def test_odradek_producer_follows_the_current_leader_of_the_old_leaders_produce_answer(
    tmp_path: Path, zookeeper_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """odradek's producer (Produce v11) takes the new leader from the NOT_LEADER_OR_FOLLOWER
    answer into its metadata at once (its log says so: the hint, not a Metadata answer, moved
    the partition) and its retried batch goes there: every record acknowledged, in order."""
    with _leader_off_the_preferred_replica(tmp_path, zookeeper_server) as (bootstrap, admin, topic, preferred):
        config = {"bootstrap.servers": bootstrap, "linger.ms": 0, "metadata.max.age.ms": 600000}
        with OdradekProducer(config) as producer, caplog.at_level(logging.INFO, logger="odradek.client"):
            first = [producer.send(topic, b"a%d" % i) for i in range(10)]
            assert [f.result(30).offset for f in first] == list(range(10))
            _elect_preferred(admin, topic, preferred)
            assert not [r for r in caplog.records if "KIP-951" in r.getMessage()]
            second = [producer.send(topic, b"b%d" % i) for i in range(10)]
            assert [f.result(30).offset for f in second] == list(range(10, 20))
        hints = [r.getMessage() for r in caplog.records if "KIP-951" in r.getMessage()]
        assert hints and f"{topic}-0 led by {preferred} " in hints[0], hints


def test_odradek_consumer_follows_the_current_leader_of_the_old_leaders_fetch_answer(
    tmp_path: Path, zookeeper_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """odradek's consumer (Fetch v16, by topic id) reading from the leader when leadership
    moves: the old leader's NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH answer names the new
    leader, which the consumer takes into its metadata at once (its log says the hint moved the
    partition, not a Metadata answer: Metadata is not refreshed on its own here) and fetches
    from: every record read once, in order. librdkafka produces, so that the only odradek
    client in the test is the consumer."""
    with _leader_off_the_preferred_replica(tmp_path, zookeeper_server) as (bootstrap, admin, topic, preferred):
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
        config = {"bootstrap.servers": bootstrap, "metadata.max.age.ms": 600000, "auto.offset.reset": "earliest"}
        with OdradekConsumer(config) as consumer, caplog.at_level(logging.INFO, logger="odradek.client"):
            consumer.assign([OdradekTopicPartition(topic, 0)])

            def send_and_read(tag: bytes, first: int) -> None:
                for i in range(10):
                    producer.produce(topic, tag + b"%d" % i, partition=0)
                assert producer.flush(30) == 0
                got: list[tuple[int, bytes | None]] = []
                wait_for("10 records", lambda: got.extend(_offsets_values(consumer.poll(0.5))) or len(got) >= 10, 30)
                assert got == [(first + i, tag + b"%d" % i) for i in range(10)]

            send_and_read(b"a", 0)
            assert not [r for r in caplog.records if "KIP-951" in r.getMessage()]
            _elect_preferred(admin, topic, preferred)
            send_and_read(b"b", 10)
        hints = [r.getMessage() for r in caplog.records if "KIP-951" in r.getMessage()]
        assert hints and f"{topic}-0 led by {preferred} " in hints[0], hints


def _offsets_values(polled: dict[Any, list[Any]]) -> list[tuple[int, bytes | None]]:
    return [(r.offset, r.value) for records in polled.values() for r in records]
