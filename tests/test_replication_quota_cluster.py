"""Replication throttles (KIP-73) on three odradek brokers on the session ZooKeeper.

A cluster-wide default throttle rate set with confluent-kafka's IncrementalAlterConfigs through
one broker is described by another as DYNAMIC_DEFAULT_BROKER_CONFIG (it travelled through the
store's watch). Then ``odradek partitions reassign --throttle --wait`` copies a 1.5 MB partition
to a new broker under a 500 KB/s throttle: a replica is held back at least once, the copy
completes with every record, and the throttle is gone afterwards.

The brokers run with ``replication.quota.window.num=2`` so the rate is measured over 1-2 s and
the copy waits about a second, not ten. Nothing asserts how long anything took.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)
from test_replication_cluster import all_brokers_seen, metadata_settings, three_brokers, wait_for

from odradek.cli import main
from odradek.client import Admin
from odradek.testing.broker import BrokerProcess, sample, unique_topic

pytestmark = pytest.mark.integration

RECORDS = 1500
VALUE = b"x" * 1000
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_RATE = "leader.replication.throttled.rate"


def _broker_config(admin: AdminClient, broker_id: int, name: str) -> tuple[str, int]:
    resource = ConfigResource(ResourceType.BROKER, str(broker_id))
    entries = admin.describe_configs([resource])[resource].result(timeout=30)
    entry = entries[name]
    return entry.value, entry.source


def _held_back(broker: BrokerProcess) -> float:
    samples = broker.metrics()
    return sample(samples, "odradek_replication_leader_held_back") + sample(
        samples, "odradek_replication_follower_held_back"
    )


def test_a_throttled_reassignment(
    tmp_path: Path, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    metadata = {**metadata_settings("zookeeper", request, "throttle"), "replication.quota.window.num": "2"}
    with three_brokers(tmp_path, metadata) as brokers:
        wait_for("every broker to see the others", lambda: all_brokers_seen(brokers))
        admin = AdminClient({"bootstrap.servers": brokers[1].bootstrap})
        other = AdminClient({"bootstrap.servers": brokers[3].bootstrap})

        # a cluster default (the empty broker name, which confluent-kafka cannot send) set
        # through broker 1 is in force on broker 3
        with Admin({"bootstrap.servers": brokers[1].bootstrap}) as odradek_admin:
            done = odradek_admin.incremental_alter_configs({(4, ""): [(FOLLOWER_RATE, 0, "123456789")]})
            assert done == {(4, ""): None}
            wanted = ("123456789", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
            wait_for("broker 3 to see the default", lambda: _broker_config(other, 3, FOLLOWER_RATE) == wanted)
            # and a per-broker value through confluent-kafka wins over it there
            mine = ConfigResource(
                ResourceType.BROKER,
                "3",
                incremental_configs=[ConfigEntry(FOLLOWER_RATE, "777", incremental_operation=AlterConfigOpType.SET)],
            )
            other.incremental_alter_configs([mine])[mine].result(timeout=30)
            assert _broker_config(other, 3, FOLLOWER_RATE) == ("777", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
            done = odradek_admin.incremental_alter_configs(
                {(4, ""): [(FOLLOWER_RATE, 1, None)], (4, "3"): [(FOLLOWER_RATE, 1, None)]}
            )
            assert done == {(4, ""): None, (4, "3"): None}

        # a partition on broker 1 alone, 1.5 MB of records
        topic = unique_topic("throttled")
        admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[1]])])[topic].result(timeout=30)
        producer = Producer({"bootstrap.servers": brokers[1].bootstrap, "linger.ms": 20})
        for i in range(RECORDS):
            producer.produce(topic, VALUE, key=b"%d" % i)
            producer.poll(0)
        assert producer.flush(60) == 0

        # moved to [1, 2] under a throttle of 500 KB/s
        capsys.readouterr()
        code = main(
            [
                "partitions",
                "reassign",
                "--bootstrap-server",
                brokers[1].bootstrap,
                "--topic",
                topic,
                "--partition",
                "0",
                "--replicas",
                "1,2",
                "--throttle",
                "500000",
                "--wait",
                "--timeout",
                "120",
            ]
        )
        out = capsys.readouterr()
        assert code == 0, out.err
        assert out.out.splitlines() == [
            "The inter-broker throttle limit was set to 500000 B/s on brokers 1,2.",
            f"Reassignment of partition {topic}-0 started to 1,2.",
            f"Reassignment of partition {topic}-0 is completed.",
            "Throttle was removed.",
        ]
        # the copy was held back at least once, and broker 2 has every record
        assert _held_back(brokers[1]) + _held_back(brokers[2]) > 0
        end = sample(brokers[2].metrics(), "kafka_log_log_logendoffset", topic=topic, partition="0")
        assert end == RECORDS
        # no throttle is left, on the brokers or the topic
        for broker_id in (1, 2):
            assert _broker_config(admin, broker_id, LEADER_RATE)[1] == ConfigSource.DEFAULT_CONFIG.value
        resource = ConfigResource(ResourceType.TOPIC, topic)
        configs = admin.describe_configs([resource])[resource].result(timeout=30)
        assert configs["leader.replication.throttled.replicas"].value == ""
        assert configs["follower.replication.throttled.replicas"].value == ""
        for broker in brokers.values():
            assert not broker.log_problems(), broker.log_problems()
