"""confluent-kafka (librdkafka) against an ``odradek serve`` subprocess: produce with every
compression, delivery reports, assign+seek and subscribe consumers, long-poll, admin APIs."""

from __future__ import annotations

import re
import threading
import time
from typing import Any

import pytest
from client_helpers import TIMEOUT_S, consume, produce
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from odradek.testing import BrokerProcess, start_broker, unique_topic

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_produce_and_consume_with_each_compression(odradek_broker: BrokerProcess, compression: str) -> None:
    topic = unique_topic(compression)
    records = [(f"k{i}".encode(), f"value-{i}-".encode() * (i % 7 + 1)) for i in range(200)]
    delivered = produce(odradek_broker, topic, records, **{"compression.type": compression})
    # delivery reports carry the offsets the broker assigned: 0..199 in order on partition 0
    assert [m.offset() for m in delivered] == list(range(200))
    assert {m.partition() for m in delivered} == {0}
    # the default isolation.level (read_committed) reads them back
    got = consume(odradek_broker, topic, 200)
    assert [(m.key(), m.value(), m.offset()) for m in got] == [(k, v, i) for i, (k, v) in enumerate(records)]
    assert got[5].headers() == [("h", b"k5")]


def test_seek_into_the_middle_and_read_uncommitted(odradek_broker: BrokerProcess) -> None:
    topic = unique_topic("seek")
    produce(odradek_broker, topic, [(b"k", str(i).encode()) for i in range(30)], **{"batch.num.messages": 7})
    got = consume(odradek_broker, topic, 10, offset=20, **{"isolation.level": "read_uncommitted"})
    assert [m.offset() for m in got] == list(range(20, 30))
    assert [m.value() for m in got] == [str(i).encode() for i in range(20, 30)]


def test_admin_topics_configs_partitions_and_delete_records(odradek_broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": odradek_broker.bootstrap})
    topic = unique_topic("admin")
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=2, replication_factor=1, config={"retention.ms": "3600000"})]
    )
    futures[topic].result(TIMEOUT_S)
    metadata = admin.list_topics(topic, timeout=TIMEOUT_S)
    assert sorted(metadata.topics[topic].partitions) == [0, 1]
    # explicit partitions: delivery offsets are per partition
    producer = Producer({"bootstrap.servers": odradek_broker.bootstrap})
    reports: list[Any] = []
    for i in range(10):
        producer.produce(topic, value=b"v", partition=i % 2, on_delivery=lambda err, msg: reports.append((err, msg)))
    assert producer.flush(TIMEOUT_S) == 0
    assert all(err is None for err, _ in reports)
    assert sorted((m.partition(), m.offset()) for _, m in reports) == [(p, o) for p in (0, 1) for o in range(5)]
    # configs: describe, alter incrementally, describe again
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(TIMEOUT_S)
    assert configs["retention.ms"].value == "3600000"
    alter = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)],
    )
    admin.incremental_alter_configs([alter])[alter].result(TIMEOUT_S)
    configs = admin.describe_configs([resource])[resource].result(TIMEOUT_S)
    assert configs["cleanup.policy"].value == "compact"
    # the legacy AlterConfigs: the listed configs replace every override (retention.ms, the
    # compact policy revert to their defaults)
    replace = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={"segment.ms": "3600000"})
    admin.alter_configs([replace])[replace].result(TIMEOUT_S)
    configs = admin.describe_configs([resource])[resource].result(TIMEOUT_S)
    assert configs["segment.ms"].value == "3600000"
    assert (configs["cleanup.policy"].value, configs["retention.ms"].value) == ("delete", "604800000")
    # more partitions
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(TIMEOUT_S)
    assert sorted(admin.list_topics(topic, timeout=TIMEOUT_S).topics[topic].partitions) == [0, 1, 2]
    # delete records below offset 3 of partition 0: the low watermark moves
    deleted = admin.delete_records([TopicPartition(topic, 0, 3)])
    assert next(iter(deleted.values())).result(TIMEOUT_S).low_watermark == 3
    consumer = Consumer({"bootstrap.servers": odradek_broker.bootstrap, "group.id": unique_topic("g")})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT_S)
        assert (low, high) == (3, 5)
    finally:
        consumer.close()
    # delete the topic
    admin.delete_topics([topic])[topic].result(TIMEOUT_S)
    assert topic not in admin.list_topics(timeout=TIMEOUT_S).topics


def test_delete_records_of_a_compacted_only_topic_is_a_policy_violation(odradek_broker: BrokerProcess) -> None:
    """As Kafka's ``deleteRecordsOnLeader``: records go only where ``cleanup.policy`` has
    ``delete``. A compact-only topic (``__consumer_offsets`` too) keeps its start offset and the
    client gets POLICY_VIOLATION; with ``compact,delete`` the low watermark moves."""
    admin = AdminClient({"bootstrap.servers": odradek_broker.bootstrap})
    compacted, both = unique_topic("drc"), unique_topic("drcd")
    futures = admin.create_topics(
        [
            NewTopic(compacted, 1, 1, config={"cleanup.policy": "compact"}),
            NewTopic(both, 1, 1, config={"cleanup.policy": "compact,delete"}),
        ]
    )
    for future in futures.values():
        future.result(TIMEOUT_S)
    for topic in (compacted, both):
        produce(odradek_broker, topic, [(b"k%d" % i, b"v") for i in range(5)])
    [refused] = admin.delete_records([TopicPartition(compacted, 0, 3)]).values()
    with pytest.raises(KafkaException) as caught:
        refused.result(TIMEOUT_S)
    assert caught.value.args[0].code() == KafkaError.POLICY_VIOLATION
    [allowed] = admin.delete_records([TopicPartition(both, 0, 3)]).values()
    assert allowed.result(TIMEOUT_S).low_watermark == 3
    consumer = Consumer({"bootstrap.servers": odradek_broker.bootstrap, "group.id": unique_topic("g")})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(compacted, 0), timeout=TIMEOUT_S) == (0, 5)
    finally:
        consumer.close()


def test_acks0_produce_refused_by_the_broker_closes_the_connection(odradek_broker: BrokerProcess) -> None:
    """acks=0 has no response to carry an error, so the broker closes the connection (as Kafka
    does): librdkafka sees the disconnect, reconnects, and later messages still arrive."""
    admin = AdminClient({"bootstrap.servers": odradek_broker.bootstrap})
    topic = unique_topic("acks0")
    admin.create_topics([NewTopic(topic, 1, 1, config={"cleanup.policy": "compact"})])[topic].result(TIMEOUT_S)
    errors: list[Any] = []
    producer = Producer(
        {"bootstrap.servers": odradek_broker.bootstrap, "acks": 0, "linger.ms": 0, "error_cb": errors.append}
    )
    producer.produce(topic, value=b"no key")  # a compacted topic refuses it: INVALID_RECORD
    assert producer.flush(TIMEOUT_S) == 0
    deadline = time.monotonic() + TIMEOUT_S
    closed = f"with acks=0 ({topic}-0: INVALID_RECORD)"
    while closed not in odradek_broker.log_path.read_text(errors="replace"):
        assert time.monotonic() < deadline, "the broker did not close the connection"
        time.sleep(0.1)
    # a record produced before librdkafka has seen the close would be written into the closing
    # socket and lost (acks=0 has no retry): wait for the client to report the disconnect
    down = (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT)
    while not any(e.code() in down for e in errors):
        assert time.monotonic() < deadline, f"librdkafka did not see the disconnect: {errors}"
        producer.poll(0.1)
    producer.produce(topic, key=b"k", value=b"keyed")
    assert producer.flush(TIMEOUT_S) == 0
    assert [(m.key(), m.value()) for m in consume(odradek_broker, topic, 1)] == [(b"k", b"keyed")]


def test_a_client_configured_for_sasl_fails_with_an_authentication_error(odradek_broker: BrokerProcess) -> None:
    """No listener has SASL: the handshake is answered ILLEGAL_SASL_STATE (as Kafka's KafkaApis
    does), so librdkafka reports an authentication error at once instead of retrying a closed
    connection."""
    errors: list[Any] = []
    producer = Producer(
        {
            "bootstrap.servers": odradek_broker.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "user",
            "sasl.password": "secret",
            "error_cb": errors.append,
            "log_level": 0,
        }
    )
    deadline = time.monotonic() + TIMEOUT_S
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors, "no error reported"
    assert errors[0].code() == KafkaError._AUTHENTICATION
    assert "Request not valid in current SASL state" in errors[0].str()


def test_long_poll_delivers_records_produced_later(odradek_broker: BrokerProcess) -> None:
    topic = unique_topic("longpoll")
    produce(odradek_broker, topic, [(b"k", b"first")])
    consumer = Consumer(
        {
            "bootstrap.servers": odradek_broker.bootstrap,
            "group.id": unique_topic("g"),
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 5000,  # the broker parks each fetch for up to 5 s
        }
    )
    received: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 1)])  # past the only record: nothing to read yet
        assert consumer.poll(1.0) is None

        def late_produce() -> None:
            time.sleep(0.5)
            produce(odradek_broker, topic, [(b"k", b"late")])

        thread = threading.Thread(target=late_produce)
        thread.start()
        deadline = time.monotonic() + TIMEOUT_S
        while not received and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                received.append(msg.value())
        thread.join()
    finally:
        consumer.close()
    assert received == [b"late"]


def test_subscribe_commit_and_resume(odradek_broker: BrokerProcess) -> None:
    """The full consumer-group flow librdkafka runs: FindCoordinator, Join/Sync, OffsetCommit/Fetch."""
    topic = unique_topic("group")
    group = unique_topic("g")
    produce(odradek_broker, topic, [(b"k", str(i).encode()) for i in range(20)])
    conf = {
        "bootstrap.servers": odradek_broker.bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
    }
    first = Consumer(conf)
    try:
        first.subscribe([topic])
        got: list[Any] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < 12 and time.monotonic() < deadline:
            msg = first.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg)
        assert len(got) >= 12
        first.commit(message=got[11], asynchronous=False)  # commits offset 12
    finally:
        first.close()
    second = Consumer(conf)
    try:
        second.subscribe([topic])
        deadline = time.monotonic() + TIMEOUT_S
        msg = None
        while msg is None and time.monotonic() < deadline:
            candidate = second.poll(0.5)
            if candidate is not None and candidate.error() is None:
                msg = candidate
        assert msg is not None and msg.offset() == 12
    finally:
        second.close()


def test_compacted_tombstones_keep_their_timestamps_and_wait_for_their_horizon() -> None:
    """Compaction stamps a delete horizon into a batch holding a tombstone (KIP-534: the batch's
    firstTimestamp becomes the horizon, records keep their timestamps as deltas from it).
    librdkafka reads such batches with every record's own timestamp, sees the tombstone until
    delete.retention.ms after the round that stamped it, and not after; the tombstone was
    written days in the past, which must not make it go early."""
    days_ago = int(time.time() * 1000) - 3 * 86_400_000  # inside retention.ms (7 days)
    retention_ms = 6000
    with start_broker(settings={"log.cleaner.backoff.ms": 100}) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        topic = unique_topic("horizon")
        config = {
            "cleanup.policy": "compact",
            "segment.bytes": "2000",
            "min.cleanable.dirty.ratio": "0.01",
            "delete.retention.ms": str(retention_ms),
        }
        admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(TIMEOUT_S)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "batch.num.messages": 1})  # one per batch
        sent = [
            (b"a", b"1", days_ago),
            (b"b", b"1", days_ago + 1),
            (b"a", None, days_ago + 2),
            (b"c", b"2", days_ago + 3),
        ]
        sent += [(b"filler", b"x" * 100, days_ago + 4 + i) for i in range(40)]  # rolls segments
        written_at = time.time_ns() // 1_000_000  # before the tombstone exists: no round can stamp it earlier
        for key, value, ts in sent:
            producer.produce(topic, key=key, value=value, timestamp=ts)
        assert producer.flush(TIMEOUT_S) == 0

        def read_all() -> list[tuple[int, bytes | None, bytes | None, int]]:
            end = 44  # every offset was written; compaction leaves gaps, so read to the end
            consumer = Consumer(
                {"bootstrap.servers": broker.bootstrap, "group.id": unique_topic("g"), "enable.partition.eof": True}
            )
            try:
                consumer.assign([TopicPartition(topic, 0, 0)])
                out: list[tuple[int, bytes | None, bytes | None, int]] = []
                deadline = time.monotonic() + TIMEOUT_S
                while time.monotonic() < deadline:
                    msg = consumer.poll(0.5)
                    if msg is None:
                        continue
                    if msg.error() is not None:
                        assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                        if msg.offset() >= end:
                            return out
                        continue
                    out.append((msg.offset(), msg.key(), msg.value(), msg.timestamp()[1]))
                raise AssertionError(f"did not reach offset {end}: {out}")
            finally:
                consumer.close()

        deadline = time.monotonic() + TIMEOUT_S
        while (0, b"a", b"1", days_ago) in (rows := read_all()):  # until the first round ran
            assert time.monotonic() < deadline, f"the cleaner never ran: {rows[:5]}"
            time.sleep(0.2)
        first_round_seen_at = time.time() * 1000
        # a's old value is gone; the tombstone stays, with b and c and their own timestamps
        assert [r for r in rows if r[1] != b"filler"] == [
            (1, b"b", b"1", days_ago + 1),
            (2, b"a", None, days_ago + 2),
            (3, b"c", b"2", days_ago + 3),
        ]
        # the horizon the cleaner stamped, from its log: a round's own clock plus
        # delete.retention.ms (not the tombstone's days-old timestamp), the same in every round
        # that kept the tombstone (logged once the round's last swap is synced: maybe after the
        # read)
        stamped = re.compile(rf"{re.escape(topic)}-0: compacted .* delete horizon (\d+)")
        while not (horizons := {int(h) for h in stamped.findall(broker.log_path.read_text(errors="replace"))}):
            assert time.monotonic() < deadline, "the cleaner logged no delete horizon"
            time.sleep(0.1)
        assert len(horizons) == 1, horizons
        horizon = horizons.pop()
        assert written_at + retention_ms <= horizon <= first_round_seen_at + retention_ms
        # the tombstone is read until the horizon passes: a read that ended before it saw it
        while (2, b"a", None, days_ago + 2) in (rows := read_all()):
            assert time.monotonic() < deadline + 10, "the tombstone never went"
            time.sleep(0.2)
        assert time.time() * 1000 >= horizon, "the tombstone went before its delete horizon"
        assert [r for r in rows if r[1] != b"filler"] == [(1, b"b", b"1", days_ago + 1), (3, b"c", b"2", days_ago + 3)]
        assert broker.log_problems() == []
