"""Tiered storage (KIP-405) with real clients against a real broker: a topic with a small
``segment.bytes`` and ``local.retention.bytes=0`` keeps only its active segment locally once the
others are copied to the directory remote storage, and confluent-kafka and kafka-python
consumers reading from offset 0 still get every record, in order, before and after a restart.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from client_helpers import TIMEOUT_S, consume, kafka_python_read, produce
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.testing import BrokerProcess, start_broker, unique_topic
from odradek.testing.broker import sample

pytestmark = pytest.mark.integration

RECORDS = 400


def tiered_settings(workdir: Path) -> dict[str, str]:
    """A broker tiering to ``workdir/remote``, copying and applying retention every 100 ms."""
    return {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.dir": str(workdir / "remote"),
        "remote.log.manager.task.interval.ms": "100",
        "log.retention.check.interval.ms": "100",
        "metrics.prometheus.listener": "127.0.0.1:0",
    }


@pytest.fixture(scope="module")
def tiered_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    workdir = tmp_path_factory.mktemp("tiered-broker")
    with start_broker(workdir, tiered_settings(workdir)) as broker:
        yield broker


def local_segments(broker: BrokerProcess, topic: str) -> list[str]:
    return sorted(p.name for p in (broker.data_dir / f"{topic}-0").glob("*.log"))


def wait_until_tiered(broker: BrokerProcess, topic: str) -> None:
    """Until local retention has deleted the first segment (so offset 0 is in remote storage only)."""
    deadline = time.monotonic() + TIMEOUT_S
    while local_segments(broker, topic)[0] == f"{0:020d}.log":
        assert time.monotonic() < deadline, f"offset 0 still local: {local_segments(broker, topic)}"
        broker.check_alive()
        time.sleep(0.1)


def remote_segments(broker: BrokerProcess, topic: str) -> list[Path]:
    return sorted((broker.workdir / "remote" / f"{topic}-0").glob("*.log"))


def tiered_topic_written(broker: BrokerProcess, prefix: str) -> tuple[str, list[tuple[bytes, bytes]]]:
    """A new tiered topic keeping only its active segment locally, written with RECORDS records
    (returned) and waited for until offset 0 is in remote storage only."""
    topic = unique_topic(prefix)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    config = {"remote.storage.enable": "true", "segment.bytes": "8192", "local.retention.bytes": "0"}
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1, config=config)])[topic].result(
        TIMEOUT_S
    )
    expected = [(b"k%d" % i, b"value-%05d-" % i + b"x" * 64) for i in range(RECORDS)]
    delivered = produce(broker, topic, expected, **{"batch.size": 2048})
    assert [m.offset() for m in delivered] == list(range(RECORDS))
    wait_until_tiered(broker, topic)
    return topic, expected


def test_consumers_read_from_the_start_across_tiers_and_a_restart(tiered_broker: BrokerProcess) -> None:
    broker = tiered_broker
    topic, expected = tiered_topic_written(broker, "tiered")
    assert len(remote_segments(broker, topic)) >= 2

    def check_confluent() -> None:
        got = consume(broker, topic, RECORDS, offset=0, **{"max.partition.fetch.bytes": 2048})
        assert [(m.offset(), m.key(), m.value()) for m in got] == [(i, k, v) for i, (k, v) in enumerate(expected)]
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique_topic("g")})
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT_S)
        finally:
            consumer.close()
        assert (low, high) == (0, RECORDS)

    def check_kafka_python() -> None:
        from kafka import KafkaConsumer
        from kafka import TopicPartition as KpTopicPartition

        consumer = KafkaConsumer(
            bootstrap_servers=broker.bootstrap,
            enable_auto_commit=False,
            consumer_timeout_ms=TIMEOUT_S * 1000,
            max_partition_fetch_bytes=2048,
        )
        assert consumer.beginning_offsets([KpTopicPartition(topic, 0)]) == {KpTopicPartition(topic, 0): 0}
        got = [(r.offset, r.key, r.value) for r in kafka_python_read(consumer, topic, RECORDS)]
        assert got == [(i, k, v) for i, (k, v) in enumerate(expected)]

    check_confluent()
    check_kafka_python()
    samples = broker.metrics()
    assert sample(samples, "kafka_server_brokertopicmetrics_remotecopysegments") >= 2
    assert sample(samples, "kafka_server_brokertopicmetrics_remotefetchrequests") >= 2  # both clients read remotely
    assert sample(samples, "kafka_server_brokertopicmetrics_remotefetcherrors") == 0
    broker.restart()
    assert local_segments(broker, topic)[0] != f"{0:020d}.log"
    check_confluent()
    check_kafka_python()
    more = produce(broker, topic, [(b"k", b"after-restart")])
    assert [m.offset() for m in more] == [RECORDS]
    assert broker.log_problems() == []


def test_turning_tiering_off_through_confluent_and_odradeks_admin(tiered_broker: BrokerProcess) -> None:
    """KIP-950 through IncrementalAlterConfigs: confluent-kafka's AdminClient is refused with
    Kafka's message, then odradek's admin turns tiering off with remote.log.delete.on.disable:
    the remote segments go and the partition starts at its local log start."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    from odradek.client import Admin, AlterConfigOp, ConfigResourceType

    broker = tiered_broker
    topic, expected = tiered_topic_written(broker, "untiered")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert remote_segments(broker, topic)
    off = ConfigEntry("remote.storage.enable", "false", incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[off])
    with pytest.raises(KafkaException, match="It is invalid to disable remote storage without deleting remote data"):
        admin.incremental_alter_configs([resource])[resource].result(TIMEOUT_S)
    assert remote_segments(broker, topic)
    with Admin({"bootstrap.servers": broker.bootstrap}) as odradek_admin:
        result = odradek_admin.incremental_alter_configs(
            {
                (ConfigResourceType.TOPIC, topic): [
                    ("remote.storage.enable", AlterConfigOp.SET, "false"),
                    ("remote.log.delete.on.disable", AlterConfigOp.SET, "true"),
                ]
            },
            timeout=TIMEOUT_S,
        )
        assert list(result.values()) == [None]
        local_start = int(local_segments(broker, topic)[0].removesuffix(".log"))  # local retention stopped at once
        assert local_start > 0

        def earliest() -> int:
            found = odradek_admin.list_offsets({(topic, 0): "earliest"}, timeout=TIMEOUT_S)
            return next(iter(found.values())).offset

        deadline = time.monotonic() + TIMEOUT_S
        while remote_segments(broker, topic) or earliest() != local_start:
            assert time.monotonic() < deadline, f"remote data still there: {remote_segments(broker, topic)}"
            time.sleep(0.1)
        for spec in ("earliest", "earliest-local"):  # the log now starts where the local log does
            found = odradek_admin.list_offsets({(topic, 0): spec}, timeout=TIMEOUT_S)
            assert [r.offset for r in found.values()] == [local_start], spec
        tiered = odradek_admin.list_offsets({(topic, 0): "latest-tiered"}, timeout=TIMEOUT_S)
        assert [r.offset for r in tiered.values()] == [-1]
    got = consume(broker, topic, RECORDS - local_start, offset=local_start)
    assert [(m.offset(), m.key(), m.value()) for m in got] == [(i, *expected[i]) for i in range(local_start, RECORDS)]
    assert broker.log_problems() == []
