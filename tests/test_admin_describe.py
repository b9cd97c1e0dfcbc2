"""DescribeCluster, DescribeLogDirs and ListOffsets v6-8 with real clients (confluent-kafka and
kafka-python) against real brokers: a single broker, and a three-broker ZooKeeper cluster."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, IsolationLevel, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    OffsetSpec,
)
from kafka.admin import KafkaAdminClient
from kafka.admin import OffsetSpec as KafkaPythonOffsetSpec
from kafka.structs import TopicPartition as KafkaPythonTopicPartition
from test_replication_cluster import all_brokers_seen, three_brokers, wait_for

from odradek.testing import BrokerProcess, start_broker, unique_topic
from odradek.testing.servers import unique_chroot

pytestmark = pytest.mark.integration

#: DescribeCluster's cluster operations without an authorizer: CREATE, ALTER, DESCRIBE,
#: CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE
CLUSTER_OPERATIONS = {
    "CREATE",
    "ALTER",
    "DESCRIBE",
    "CLUSTER_ACTION",
    "DESCRIBE_CONFIGS",
    "ALTER_CONFIGS",
    "IDEMPOTENT_WRITE",
}
#: a topic's: READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS
TOPIC_OPERATIONS = {"READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _kp_admin(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)


def _create(admin: AdminClient, topic: str, partitions: int = 1, **config: str) -> None:
    admin.create_topics([NewTopic(topic, partitions, 1, config=config)])[topic].result(15)


def _produce(bootstrap: str, topic: str, rows: list[tuple[bytes, int]], partition: int = 0) -> None:
    """One batch per record (a flush after each), with the given timestamps."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for value, ts in rows:
        producer.produce(topic, value, partition=partition, timestamp=ts)
        assert producer.flush(15) == 0


def _list(admin: AdminClient, topic: str, spec: OffsetSpec, **kwargs: Any) -> tuple[int, int]:
    tp = TopicPartition(topic, 0)
    info = admin.list_offsets({tp: spec}, request_timeout=15, **kwargs)[tp].result()
    return info.offset, info.timestamp


def _set_topic_config(admin: AdminClient, topic: str, name: str, value: str) -> None:
    entry = ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
    admin.incremental_alter_configs([resource])[resource].result(15)


# -- DescribeCluster ----------------------------------------------------------------------------


def test_describe_cluster_with_both_clients(odradek_broker: BrokerProcess) -> None:
    admin = _admin(odradek_broker.bootstrap)
    md = admin.list_topics(timeout=10)
    desc = admin.describe_cluster(request_timeout=10).result()
    assert desc.cluster_id == md.cluster_id and desc.cluster_id
    assert desc.controller is not None and desc.controller.id == md.controller_id
    host, port = odradek_broker.bootstrap.rsplit(":", 1)
    assert [(n.id, n.host, n.port) for n in desc.nodes] == [(md.controller_id, host, int(port))]
    assert desc.authorized_operations is None  # not asked for
    # asked for: no authorizer, so every operation of the resource type (from Metadata v8+)
    asked = admin.describe_cluster(include_authorized_operations=True, request_timeout=10).result()
    assert {op.name for op in asked.authorized_operations} == CLUSTER_OPERATIONS
    topic = unique_topic("ops")
    _create(admin, topic)
    (described,) = admin.describe_topics(
        TopicCollection([topic]), include_authorized_operations=True, request_timeout=10
    ).values()
    assert {op.name for op in described.result().authorized_operations} == TOPIC_OPERATIONS
    # (librdkafka answers describe_cluster from Metadata v8+, not DescribeCluster; kafka-python
    # sends DescribeCluster v2, asking for the cluster's authorized operations)

    kp = _kp_admin(odradek_broker.bootstrap)
    try:
        kdesc = kp.describe_cluster()
    finally:
        kp.close()
    assert kdesc["cluster_id"] == md.cluster_id
    assert kdesc["controller_id"] == md.controller_id
    assert [(b["broker_id"], b["host"], b["port"], b["rack"]) for b in kdesc["brokers"]] == [
        (md.controller_id, host, int(port), None)
    ]
    assert set(kdesc["authorized_operations"]) == CLUSTER_OPERATIONS


def test_describe_cluster_of_three_brokers_follows_the_controller(tmp_path: Path, zookeeper_server: Any) -> None:
    """Every broker names the same, elected controller; once it is gone, the new one."""
    metadata = {"metadata": "zookeeper", "zookeeper.connect": zookeeper_server.connect_string + unique_chroot("dc")}
    with three_brokers(tmp_path, metadata) as brokers:
        wait_for("three live brokers", lambda: all_brokers_seen(brokers))
        answers = []
        for b in brokers.values():
            admin = _admin(b.bootstrap)  # kept: a collected client cancels its requests
            desc = admin.describe_cluster(request_timeout=10).result()
            answers.append((desc.cluster_id, desc.controller.id, sorted(n.id for n in desc.nodes)))
            kp = _kp_admin(b.bootstrap)
            try:
                kdesc = kp.describe_cluster()
            finally:
                kp.close()
            assert (kdesc["cluster_id"], kdesc["controller_id"]) == answers[-1][:2]
        assert len(set(map(str, answers))) == 1, answers
        _, controller, nodes = answers[0]
        assert nodes == [1, 2, 3] and controller in nodes
        brokers[controller].stop()
        survivor = _admin(next(b for i, b in brokers.items() if i != controller).bootstrap)

        def new_controller() -> int | None:
            try:
                desc = survivor.describe_cluster(request_timeout=5).result()
            except KafkaException:
                return None
            ids = sorted(n.id for n in desc.nodes)
            ok = desc.controller is not None and desc.controller.id != controller and controller not in ids
            return desc.controller.id if ok else None

        assert wait_for("a new controller", new_controller) in set(brokers) - {controller}


# -- DescribeLogDirs ----------------------------------------------------------------------------


def test_describe_log_dirs_with_kafka_python(odradek_broker: BrokerProcess) -> None:
    admin = _admin(odradek_broker.bootstrap)
    topic = unique_topic("logdirs")
    _create(admin, topic, 2)
    now = int(time.time() * 1000)
    _produce(odradek_broker.bootstrap, topic, [(b"x" * 100, now), (b"y" * 100, now)])
    kp = _kp_admin(odradek_broker.bootstrap)
    try:
        (named,) = kp.describe_log_dirs({topic: [0, 1, 7], "no-such-topic-here": [0]})
        (everything,) = kp.describe_log_dirs()
    finally:
        kp.close()
    data_dir = str(odradek_broker.data_dir.resolve())
    (d,) = named["log_dirs"]
    assert d["log_dir"] == data_dir and d["error_code"] == 0
    assert d["total_bytes"] >= d["usable_bytes"] > 0
    (t,) = d["topics"]  # the unknown topic and partition 7 are left out
    assert t["name"] == topic
    sizes = {p["partition_index"]: (p["partition_size"], p["offset_lag"], p["is_future_key"]) for p in t["partitions"]}
    assert sizes.keys() == {0, 1}
    assert sizes[1] == (0, 0, False)
    assert sizes[0][0] > 200 and sizes[0][1:] == (0, False)
    (d_all,) = everything["log_dirs"]
    assert topic in {t["name"] for t in d_all["topics"]}
    assert "__consumer_offsets" in {t["name"] for t in d_all["topics"]} or len(d_all["topics"]) >= 1


def test_an_offline_log_dir_is_a_storage_error(tmp_path: Path) -> None:
    second = tmp_path / "second"
    with start_broker(tmp_path / "b", {"log.dirs": f"{tmp_path / 'first'},{second}"}) as broker:
        admin = _admin(broker.bootstrap)
        _create(admin, unique_topic("offline"))
        shutil.rmtree(second)  # the volume is gone
        kp = _kp_admin(broker.bootstrap)
        try:
            (answer,) = kp.describe_log_dirs()
        finally:
            kp.close()
        by_dir = {d["log_dir"]: d for d in answer["log_dirs"]}
        assert by_dir[str(second.resolve())]["error_code"] == 56  # KAFKA_STORAGE_ERROR
        assert by_dir[str(second.resolve())]["topics"] == []
        assert by_dir[str((tmp_path / "first").resolve())]["error_code"] == 0
        broker.check_alive()


# -- ListOffsets v7-8 ---------------------------------------------------------------------------


def test_max_timestamp_across_segments_retention_and_an_empty_log(tmp_path: Path) -> None:
    settings = {"log.retention.check.interval.ms": 200, "log.message.timestamp.after.max.ms": 3_600_000}
    with start_broker(tmp_path / "b", settings) as broker:
        admin = _admin(broker.bootstrap)
        topic = unique_topic("maxts")
        _create(admin, topic, **{"segment.bytes": "1000"})
        assert _list(admin, topic, OffsetSpec.max_timestamp()) == (-1, -1)  # empty log
        base = int(time.time() * 1000) - 600_000
        stamps = [base + 1000, base + 9000, base + 2000, base + 3000, base + 4000]
        _produce(broker.bootstrap, topic, [(b"v" * 700, ts) for ts in stamps])  # a segment each
        assert _list(admin, topic, OffsetSpec.max_timestamp()) == (1, base + 9000)
        assert _list(admin, topic, OffsetSpec.latest()) == (5, -1)
        # size retention deletes the two oldest segments, the one holding the max among them
        _set_topic_config(admin, topic, "retention.bytes", "2000")
        wait_for("retention", lambda: _list(admin, topic, OffsetSpec.earliest())[0] == 2)
        assert _list(admin, topic, OffsetSpec.max_timestamp()) == (4, base + 4000)

        # EARLIEST_LOCAL (-4, ListOffsets v8): no tiered storage, so the log start offset
        kp = _kp_admin(broker.bootstrap)
        try:
            tp = KafkaPythonTopicPartition(topic, 0)
            answer = kp.list_partition_offsets({tp: KafkaPythonOffsetSpec.EARLIEST_LOCAL})
        finally:
            kp.close()
        assert answer[tp].offset == 2 and answer[tp].timestamp == -1


def test_an_idle_topic_past_retention_ms_is_emptied_and_appends_go_on(tmp_path: Path) -> None:
    """As Kafka: when every record of a partition is past retention.ms, its active segment is
    rolled and deleted too; the log start moves up to the log end, and the next record takes
    the next offset (a consumer from the beginning sees only it)."""
    with start_broker(tmp_path / "b", {"log.retention.check.interval.ms": 200}) as broker:
        admin = _admin(broker.bootstrap)
        topic = unique_topic("idle-retention")
        _create(admin, topic)
        old = int(time.time() * 1000) - 60_000
        _produce(broker.bootstrap, topic, [(b"old", old), (b"older", old - 1000), (b"oldest", old - 2000)])
        assert _list(admin, topic, OffsetSpec.earliest())[0] == 0
        _set_topic_config(admin, topic, "retention.ms", "30000")
        wait_for("retention of the active segment", lambda: _list(admin, topic, OffsetSpec.earliest())[0] == 3)
        assert _list(admin, topic, OffsetSpec.latest())[0] == 3
        _produce(broker.bootstrap, topic, [(b"new", int(time.time() * 1000))])
        assert _list(admin, topic, OffsetSpec.latest())[0] == 4
        consumer = Consumer(
            {"bootstrap.servers": broker.bootstrap, "group.id": unique_topic("g"), "auto.offset.reset": "earliest"}
        )
        try:
            consumer.assign([TopicPartition(topic, 0, 0)])  # offset 0 is gone: the reset applies
            got = None
            deadline = time.monotonic() + 15
            while got is None and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    got = msg
        finally:
            consumer.close()
        assert got is not None and (got.offset(), got.value()) == (3, b"new")
        broker.check_alive()


def test_max_timestamp_read_committed_stops_at_the_last_stable_offset(odradek_broker: BrokerProcess) -> None:
    """As Kafka: the record with the largest timestamp is found first, then dropped when it is
    not below the LSO -- read_committed gets -1 while its transaction is open, not an earlier
    committed record."""
    admin = _admin(odradek_broker.bootstrap)
    topic = unique_topic("maxts-txn")
    _create(admin, topic)
    now = int(time.time() * 1000)
    _produce(odradek_broker.bootstrap, topic, [(b"committed", now - 5000)])
    producer = Producer({"bootstrap.servers": odradek_broker.bootstrap, "transactional.id": unique_topic("txn")})
    producer.init_transactions(15)
    producer.begin_transaction()
    producer.produce(topic, b"open", partition=0, timestamp=now + 60_000)
    assert producer.flush(15) == 0
    committed = IsolationLevel.READ_COMMITTED
    assert _list(admin, topic, OffsetSpec.max_timestamp(), isolation_level=committed) == (-1, -1)
    assert _list(admin, topic, OffsetSpec.max_timestamp()) == (1, now + 60_000)
    producer.commit_transaction(15)
    wait_for("the commit", lambda: _list(admin, topic, OffsetSpec.latest(), isolation_level=committed)[0] == 3)
    assert _list(admin, topic, OffsetSpec.max_timestamp(), isolation_level=committed) == (1, now + 60_000)
