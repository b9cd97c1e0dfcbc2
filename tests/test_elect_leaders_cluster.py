"""ElectLeaders on three odradek brokers (ZooKeeper and etcd), driven by confluent-kafka's
``AdminClient.elect_leaders`` and kafka-python's ``KafkaAdminClient.elect_leaders``.

With ``auto.leader.rebalance.enable=false`` (so only the request moves leadership back):

- preferred: the preferred leader of an RF=3 topic stops, another replica takes over, the
  preferred one comes back into the ISR; a PREFERRED election makes it leader again (a second
  one is ELECTION_NOT_NEEDED) and produce/consume go on with every acknowledged record;
- unclean: an RF=2 partition whose follower was stopped (out of the ISR, behind) loses its only
  ISR member too; with no replica alive the UNCLEAN election is ELIGIBLE_LEADERS_NOT_AVAILABLE,
  once the follower is back it leads (ISR just itself) and a consumer reads from it.

Each store runs both elections; the two clients swap roles between the stores.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ElectionType, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka.admin import KafkaAdminClient
from test_replication_cluster import (
    all_brokers_seen,
    consume_all,
    leader_alone_then_gone,
    partition_state,
    produce,
    replicated_topic,
    three_brokers,
    wait_for,
)

from odradek.errors import ErrorCode
from odradek.testing.broker import BrokerProcess
from odradek.testing.servers import unique_chroot


def confluent_elect(bootstrap: str, kind: ElectionType, topic: str) -> int:
    """The error code confluent-kafka reports for partition 0 (0: elected)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    result = admin.elect_leaders(kind, [TopicPartition(topic, 0)]).result(30)
    [(tp, error)] = result.items()
    assert (tp.topic, tp.partition) == (topic, 0)
    return 0 if error is None else int(error.code())


def kafka_python_elect(bootstrap: str, kind: ElectionType, topic: str) -> int:
    """The error code kafka-python's answer holds for partition 0 (0: elected)."""
    client = KafkaAdminClient(bootstrap_servers=bootstrap.split(","), request_timeout_ms=30000)
    try:
        response = client.elect_leaders(kind.value, {topic: [0]}, timeout_ms=20000, raise_errors=False)
    finally:
        client.close()
    assert int(response.error_code) == 0
    [[partition]] = [list(r.partition_result) for r in response.replica_election_results]
    assert partition.partition_id == 0
    return int(partition.error_code)


ELECT = {"confluent": confluent_elect, "kafka-python": kafka_python_elect}


def replicas_of(admin: AdminClient, topic: str) -> list[int]:
    return list(admin.list_topics(topic, timeout=5).topics[topic].partitions[0].replicas)


def preferred_election(brokers: dict[int, BrokerProcess], elect: Any, check: Any) -> None:
    bootstrap, admin, topic, leader = replicated_topic(brokers, "pref")
    assert replicas_of(admin, topic)[0] == leader  # the first leader is the preferred replica
    acked = produce(bootstrap, topic, [b"a%d" % i for i in range(100)])
    brokers[leader].stop()
    survivors = ",".join(b.bootstrap for i, b in brokers.items() if i != leader)
    others = AdminClient({"bootstrap.servers": survivors})
    wait_for("another leader", lambda: (s := partition_state(others, topic)) and s[0] != leader)
    acked |= produce(survivors, topic, [b"b%d" % i for i in range(100)])
    brokers[leader].start()
    wait_for("the preferred replica back in sync", lambda: (s := partition_state(admin, topic)) and len(s[1]) == 3)
    state = partition_state(admin, topic)
    assert state is not None and state[0] != leader  # nothing moved it back by itself

    assert elect(bootstrap, ElectionType.PREFERRED, topic) == ErrorCode.NONE
    wait_for("the preferred leader", lambda: (s := partition_state(admin, topic)) and s[0] == leader, 10)
    assert check(bootstrap, ElectionType.PREFERRED, topic) == ErrorCode.ELECTION_NOT_NEEDED
    assert check(bootstrap, ElectionType.UNCLEAN, topic) == ErrorCode.ELECTION_NOT_NEEDED
    acked |= produce(bootstrap, topic, [b"c%d" % i for i in range(100)])
    got = consume_all(bootstrap, topic, len(acked))
    assert acked <= set(got) and len(acked) == 300, f"lost {len(acked - set(got))} acknowledged records"
    assert len(got) == len(set(got))


def unclean_election(brokers: dict[int, BrokerProcess], elect: Any, check: Any) -> None:
    topic, controller, _first, behind, kept, live = leader_alone_then_gone(brokers, "unclean")
    alive = brokers[controller].bootstrap
    assert check(alive, ElectionType.UNCLEAN, topic) == ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE

    brokers[behind].start()
    wait_for("the follower registered", lambda: len(live.list_topics(timeout=5).brokers) == 2)
    assert partition_state(live, topic) is None  # unclean.leader.election.enable is false
    assert elect(alive, ElectionType.UNCLEAN, topic) == ErrorCode.NONE
    wait_for("the follower leading", lambda: partition_state(live, topic) == (behind, [behind]), 10)
    assert check(alive, ElectionType.PREFERRED, topic) == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE

    now = ",".join(brokers[i].bootstrap for i in (controller, behind))
    fresh = produce(now, topic, [b"n%d" % i for i in range(20)])
    got = set(consume_all(now, topic, len(kept) + len(fresh)))
    assert kept | fresh <= got  # what the follower had, and what its leadership took since
    assert not any(v.startswith(b"lost") for v in got)  # an unclean election loses the rest


@pytest.mark.parametrize("store", ["zookeeper", "etcd"])
def test_elect_leaders(tmp_path: Path, store: str, request: pytest.FixtureRequest) -> None:
    if store == "zookeeper":
        server = request.getfixturevalue("zookeeper_server")
        metadata = {"metadata": "zookeeper", "zookeeper.connect": server.connect_string + unique_chroot("elect")}
        elect, check = ELECT["confluent"], ELECT["kafka-python"]
    else:
        server = request.getfixturevalue("etcd_server")
        metadata = {"metadata": "etcd", "etcd.endpoints": server.endpoint, "etcd.namespace": unique_chroot("elect")}
        elect, check = ELECT["kafka-python"], ELECT["confluent"]
    with three_brokers(tmp_path, {**metadata, "auto.leader.rebalance.enable": "false"}) as brokers:
        wait_for("three live brokers", lambda: all_brokers_seen(brokers))
        preferred_election(brokers, elect, check)
        unclean_election(brokers, elect, check)
        for b in brokers.values():
            assert not b.log_problems(), b.log_problems()
