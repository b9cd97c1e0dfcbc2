"""A follower's replica moved to another of its log dirs (KIP-113) in a three-broker ZooKeeper
cluster: the move changes no assignment, the follower keeps fetching and stays in the ISR, and
after the leader and the other follower stop it leads with every acknowledged record."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.errors import NoError
from kafka.structs import TopicPartitionReplica
from test_replication_cluster import all_brokers_seen, consume_all, partition_state, produce, wait_for

from odradek.testing import start_broker, unique_topic
from odradek.testing.servers import unique_chroot

pytestmark = pytest.mark.integration


def _placement(bootstrap: str, broker_id: int, topic: str) -> dict[str, tuple[bool, int]]:
    """Broker ``broker_id``'s log dirs holding ``topic``-0 -> (is the future replica, offset lag)."""
    kp = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    try:
        (answer,) = kp.describe_log_dirs({topic: [0]}, brokers=[broker_id])
    finally:
        kp.close()
    return {
        d["log_dir"]: (p["is_future_key"], p["offset_lag"])
        for d in answer["log_dirs"]
        for t in d["topics"]
        for p in t["partitions"]
    }


def test_a_followers_replica_moves_between_its_log_dirs(tmp_path: Path, zookeeper_server: Any) -> None:
    settings = {
        "metadata": "zookeeper",
        "zookeeper.connect": zookeeper_server.connect_string + unique_chroot("movedir"),
        "zookeeper.session.timeout.ms": 2000,
        "replica.fetch.wait.max.ms": 200,
        "log.segment.bytes": 65536,
    }
    with contextlib.ExitStack() as stack:
        brokers = {
            i: stack.enter_context(
                start_broker(
                    tmp_path / f"b{i}",
                    {
                        **settings,
                        "broker.id": i,
                        "log.dirs": f"{tmp_path / f'b{i}' / 'd1'},{tmp_path / f'b{i}' / 'd2'}",
                    },
                )
            )
            for i in (1, 2, 3)
        }
        bootstrap = ",".join(b.bootstrap for b in brokers.values())
        admin = AdminClient({"bootstrap.servers": bootstrap})
        wait_for("three live brokers", lambda: all_brokers_seen(brokers))
        topic = unique_topic("movedir")
        admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})])[topic].result(15)
        leader, _ = wait_for("a full ISR", lambda: (s := partition_state(admin, topic)) and len(s[1]) == 3 and s)
        acked = produce(bootstrap, topic, [b"before-%d" % i + b"x" * 500 for i in range(500)])
        follower_id = next(i for i in brokers if i != leader)
        follower = brokers[follower_id]
        (here,) = _placement(follower.bootstrap, follower_id, topic)
        target = str(Path(here).with_name("d2" if here.endswith("d1") else "d1"))
        during: set[bytes] = set()
        producing = threading.Thread(
            target=lambda: during.update(produce(bootstrap, topic, [b"during-%d" % i for i in range(2000)]))
        )
        kp = KafkaAdminClient(bootstrap_servers=follower.bootstrap, request_timeout_ms=10_000)
        try:
            replica = TopicPartitionReplica(topic, 0, follower_id)
            producing.start()
            assert kp.alter_replica_log_dirs({replica: target}) == {replica: NoError}
        finally:
            kp.close()
            producing.join(60)
        assert len(during) == 2000
        wait_for("the move", lambda: _placement(follower.bootstrap, follower_id, topic) == {target: (False, 0)}, 30)
        assert partition_state(admin, topic) == (leader, [1, 2, 3])  # assignment and ISR as they were
        acked |= during
        for i in brokers:
            if i != follower_id:
                brokers[i].stop()
        wait_for("the moved follower leading", lambda: (s := partition_state(admin, topic)) and s[0] == follower_id)
        assert acked <= set(consume_all(follower.bootstrap, topic, len(acked)))
        assert not follower.log_problems(), follower.log_problems()
