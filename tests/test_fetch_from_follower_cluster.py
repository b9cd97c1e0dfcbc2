"""Fetching from the closest replica (KIP-392) on three brokers in racks a, b and c.

One cluster for the module, on the session ZooKeeper: ``odradek serve`` x3 with ``broker.rack``
a/b/c and ``replica.selector.class`` set to Kafka's ``RackAwareReplicaSelector`` class name. Each
topic has replicas [1, 2, 3] (broker 1, rack a, leads), so a consumer in rack b is sent to broker
2, a follower: the brokers' own counters (``followerfetchrequests``, ``followerbytesout``,
``preferredreplicaredirects``, ``bytesout``) prove which broker served the records. Clients:
confluent-kafka (librdkafka), kafka-python and aiokafka, which all implement KIP-392
(``client.rack`` / ``client_rack``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as AioTopicPartition
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from test_replication_cluster import SESSION_MS, all_brokers_seen, partition_state, produce, wait_for

from odradek.testing.broker import BrokerProcess, sample, start_broker, unique_topic
from odradek.testing.servers import unique_chroot

RACKS = {1: "a", 2: "b", 3: "c"}
SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
READ_S = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper_server: Any) -> Iterator[dict[int, BrokerProcess]]:
    root = tmp_path_factory.mktemp("kip392")
    settings = {
        "metadata": "zookeeper",
        "zookeeper.connect": zookeeper_server.connect_string + unique_chroot("kip392"),
        "zookeeper.session.timeout.ms": SESSION_MS,
        "replica.lag.time.max.ms": 3000,
        "replica.fetch.wait.max.ms": 100,
        "metrics.prometheus.listener": "127.0.0.1:0",
        "replica.selector.class": SELECTOR,
        "auto.leader.rebalance.enable": "false",
    }
    with contextlib.ExitStack() as stack:
        brokers = {
            i: stack.enter_context(
                start_broker(Path(root) / f"b{i}", {**settings, "broker.id": i, "broker.rack": rack})
            )
            for i, rack in RACKS.items()
        }
        wait_for("three live brokers", lambda: all_brokers_seen(brokers))
        yield brokers


def bootstrap_of(brokers: dict[int, BrokerProcess], *ids: int) -> str:
    return ",".join(brokers[i].bootstrap for i in ids or brokers)


def led_by_1(brokers: dict[int, BrokerProcess], prefix: str, records: int) -> tuple[str, AdminClient, list[bytes]]:
    """A topic with replicas [1, 2, 3], its ISR full, holding ``records`` acknowledged records
    (once all three brokers are seen: a test before may have restarted some)."""
    wait_for("three live brokers", lambda: all_brokers_seen(brokers))
    admin = AdminClient({"bootstrap.servers": bootstrap_of(brokers)})
    topic = unique_topic(prefix)
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[1, 2, 3]])])[topic].result(15)
    wait_for("a full ISR led by 1", lambda: partition_state(admin, topic) == (1, [1, 2, 3]))
    values = [b"%s-%d" % (prefix.encode(), i) for i in range(records)]
    assert produce(bootstrap_of(brokers), topic, values) == set(values)
    return topic, admin, values


def counter(broker: BrokerProcess, name: str, topic: str) -> float:
    try:
        return sample(broker.metrics(), f"kafka_server_brokertopicmetrics_{name}_total", topic=topic)
    except AssertionError:
        return 0.0  # no fetch of the topic counted yet on that broker


def assert_served_by_follower_2(cluster: dict[int, BrokerProcess], topic: str) -> None:
    """The leader (1) sent no record of ``topic`` to a consumer; broker 2 did, as a follower."""
    assert counter(cluster[1], "bytesout", topic) == 0
    assert counter(cluster[2], "followerbytesout", topic) > 0


def poll_values(consumer: Consumer, expected: int, got: list[bytes]) -> list[bytes]:
    deadline = time.monotonic() + READ_S
    while len(got) < expected and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    return got


def test_librdkafka_reads_from_its_rack_and_follows_failures(cluster: dict[int, BrokerProcess]) -> None:
    topic, admin, first = led_by_1(cluster, "ffconf", 200)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_of(cluster),
            "group.id": "kip392-confluent",
            "client.rack": "b",
            "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 1000,
            "fetch.error.backoff.ms": 100,
        }
    )
    got: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        assert poll_values(consumer, 200, got) == first
        # every record came from broker 2 (rack b), a follower; the leader only redirected
        assert counter(cluster[1], "preferredreplicaredirects", topic) >= 1
        assert counter(cluster[1], "bytesout", topic) == 0
        assert counter(cluster[2], "followerfetchrequests", topic) >= 1
        assert counter(cluster[2], "followerbytesout", topic) == counter(cluster[2], "bytesout", topic) > 0
        assert counter(cluster[3], "bytesout", topic) == 0

        # the rack-b follower stops: the consumer goes back to the leader and reads on
        cluster[2].stop()
        wait_for("2 out of the ISR", lambda: partition_state(admin, topic) == (1, [1, 3]))
        second = [b"after-stop-%d" % i for i in range(100)]
        assert produce(bootstrap_of(cluster, 1, 3), topic, second) == set(second)
        assert poll_values(consumer, 300, got) == first + second
        assert counter(cluster[1], "bytesout", topic) > 0

        # broker 2 back in sync, then leadership moves away from 1: the consumer follows it
        cluster[2].start()
        wait_for("2 back in the ISR", lambda: (s := partition_state(admin, topic)) and 2 in s[1], timeout_s=30)
        cluster[1].stop()
        wait_for("a new leader", lambda: (s := partition_state(admin, topic)) and s[0] in (2, 3))
        third = [b"after-move-%d" % i for i in range(100)]
        assert produce(bootstrap_of(cluster, 2, 3), topic, third) == set(third)
        assert poll_values(consumer, 400, got) == first + second + third
    finally:
        consumer.close()
        for broker in (cluster[1], cluster[2]):  # the next tests want all three
            if broker.process is None or broker.process.poll() is not None:
                broker.start()
    for broker in cluster.values():
        assert not broker.log_problems(), broker.log_problems()


def test_kafka_python_reads_from_its_rack(cluster: dict[int, BrokerProcess]) -> None:
    topic, _, values = led_by_1(cluster, "ffkp", 50)
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap_of(cluster), client_rack="b", enable_auto_commit=False, consumer_timeout_ms=500
    )
    got: list[bytes] = []
    try:
        tp = KpTopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        deadline = time.monotonic() + READ_S
        while len(got) < len(values) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                got += [r.value for r in records]
    finally:
        consumer.close()
    assert got == values
    assert_served_by_follower_2(cluster, topic)


def test_aiokafka_reads_from_its_rack(cluster: dict[int, BrokerProcess]) -> None:
    topic, _, values = led_by_1(cluster, "ffaio", 50)

    async def main() -> list[bytes]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap_of(cluster), client_rack="b", enable_auto_commit=False)
        await consumer.start()
        got: list[bytes] = []
        try:
            tp = AioTopicPartition(topic, 0)
            consumer.assign([tp])
            consumer.seek(tp, 0)
            deadline = time.monotonic() + READ_S
            while len(got) < len(values) and time.monotonic() < deadline:
                batches = await consumer.getmany(tp, timeout_ms=200)
                got += [r.value for records in batches.values() for r in records if r.value is not None]
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(main()) == values
    assert_served_by_follower_2(cluster, topic)
