"""Unclean leader election on three odradek brokers, driven by confluent-kafka (and odradek's
admin client for the cluster-wide broker config, which confluent-kafka cannot name).

An RF=2 partition on the two brokers that are not the controller: records on both, then its
follower stops (out of the ISR), ``lost*`` records go to the leader alone, and the leader
stops too. The stale follower comes back.

- With ``unclean.leader.election.enable=false`` (the default) the partition stays offline: the
  controller decides it again when the follower registers and elects nobody, Metadata names no
  leader, and a Produce to the follower is NOT_LEADER_OR_FOLLOWER. When the ISR member comes
  back it leads again and nothing is lost; the follower catches up and rejoins the ISR.
- Setting it as the cluster-wide dynamic broker default (IncrementalAlterConfigs on the empty
  broker name, as ``kafka-configs --entity-default`` does: Kafka's update mode for this key is
  cluster-wide) elects the stale follower at once, at a new leader epoch and an ISR of itself.
  The records only the former leader had are what is lost, as Kafka's semantics allow; when the
  former leader returns it truncates them (diverging epoch), follows and rejoins the ISR, and
  every replica serves the same records. Before, the broker-level key was static: odradek
  refused the dynamic update and only a topic override or a restart of the controller's broker
  could bring the partition back.

ElectLeaders' UNCLEAN election (test_elect_leaders_cluster.py) and the topic-level switch
(test_broker_controller.py) are tested elsewhere.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_fencing_cluster import connect, fixed_leaders, metadata_on, produce_error, produce_frame
from test_replication_cluster import (
    all_brokers_seen,
    consume_all,
    leader_alone_then_gone,
    produce,
    three_brokers,
    wait_for,
)

from odradek.client import Admin
from odradek.errors import ErrorCode
from odradek.testing.broker import BrokerProcess

UNCLEAN = "unclean.leader.election.enable"


def _offline_when_the_stale_follower_is_back(
    brokers: dict[int, BrokerProcess], controller: int, topic: str, behind: int
) -> None:
    """Restart the stale follower; the controller decides the partition again (its broker came
    back) and elects nobody: no leader in Metadata, Produce to it NOT_LEADER_OR_FOLLOWER."""
    log = brokers[controller].log_path
    seen = len(log.read_text().splitlines())
    brokers[behind].start()
    wait_for(
        "the controller deciding again on the follower's return",
        lambda: any(f"brokers [{behind}] came back" in line for line in log.read_text().splitlines()[seen:]),
    )
    for broker in (brokers[controller], brokers[behind]):
        answer = metadata_on(broker, topic)
        assert answer is not None and answer[1][0][0] == -1, answer
    with connect(brokers[behind]) as sock:
        sock.sendall(produce_frame(topic, b"refused", 21))
        assert produce_error(sock, 21) == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_without_unclean_election_the_partition_waits_for_its_isr_member(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    with three_brokers(tmp_path, fixed_leaders("zookeeper", request, "clean")) as brokers:
        wait_for("three live brokers", lambda: all_brokers_seen(brokers))
        topic, controller, first, behind, _, _ = leader_alone_then_gone(brokers, "clean")
        _offline_when_the_stale_follower_is_back(brokers, controller, topic, behind)

        brokers[first].start()
        wait_for(
            "the ISR member leading again, the follower back in the ISR",
            lambda: (
                (a := metadata_on(brokers[controller], topic)) and a[1][0][0] == first and a[1][0][2] == [first, behind]
            ),
            timeout_s=30,
        )
        values = consume_all(brokers[behind].bootstrap, topic, 70)
        assert values == [b"k%d" % i for i in range(50)] + [b"lost%d" % i for i in range(20)]
        for b in brokers.values():
            assert not b.log_problems(), b.log_problems()


@pytest.mark.parametrize("kind", ["zookeeper", "etcd"])
def test_unclean_election_enabled_cluster_wide_elects_the_stale_replica(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    with three_brokers(tmp_path, fixed_leaders(kind, request, "unclean")) as brokers:
        wait_for("three live brokers", lambda: all_brokers_seen(brokers))
        topic, controller, first, behind, _, _ = leader_alone_then_gone(brokers, "unclean")
        _offline_when_the_stale_follower_is_back(brokers, controller, topic, behind)
        answer = metadata_on(brokers[controller], topic)
        assert answer is not None
        epoch = answer[1][0][1]

        with Admin({"bootstrap.servers": brokers[controller].bootstrap}) as admin:
            assert admin.incremental_alter_configs({(4, ""): [(UNCLEAN, 0, "true")]}) == {(4, ""): None}
        wait_for(
            "the stale replica elected",
            lambda: (a := metadata_on(brokers[controller], topic)) and a[1][0] == (behind, epoch + 1, [behind]),
        )
        after = produce(brokers[behind].bootstrap, topic, [b"new%d" % i for i in range(30)])
        assert len(after) == 30
        expected = [b"k%d" % i for i in range(50)] + [b"new%d" % i for i in range(30)]
        assert consume_all(brokers[behind].bootstrap, topic, 80) == expected  # the lost* records are gone

        brokers[first].start()
        wait_for(
            "the former leader back in the ISR",
            lambda: (a := metadata_on(brokers[controller], topic)) and a[1][0] == (behind, epoch + 1, [first, behind]),
            timeout_s=30,
        )
        log = brokers[first].log_path.read_text()
        assert f"{topic}-0: diverging from the leader" in log, log[-3000:]
        with Admin({"bootstrap.servers": brokers[controller].bootstrap}) as admin:
            assert admin.incremental_alter_configs({(4, ""): [(UNCLEAN, 1, None)]}) == {(4, ""): None}
        brokers[behind].stop()  # the former leader leads again: it serves what the new leader had
        wait_for(
            "the former leader leading",
            lambda: (a := metadata_on(brokers[controller], topic)) and a[1][0][0] == first,
        )
        assert consume_all(brokers[first].bootstrap, topic, 80) == expected
        for b in brokers.values():
            assert not b.log_problems(), b.log_problems()
