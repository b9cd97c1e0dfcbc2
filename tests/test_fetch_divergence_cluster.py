"""A former leader rejoining with records nobody else has truncates them through the fetch
(Fetch v12 ``diverging_epoch``, KIP-320 as KIP-595 moved it), on three odradek brokers on
ZooKeeper, driven by confluent-kafka.

An RF=2 partition loses its follower, takes records on its leader alone, then loses its leader;
the follower comes back and is elected uncleanly (a new epoch) and takes other records. The
former leader restarts as a follower: its fetch names its latest epoch, the new leader answers
that this epoch ended before the former leader's log end, and the former leader truncates there
and copies the new leader's records. Leading again, it serves exactly what the new leader had."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient
from test_replication_cluster import (
    all_brokers_seen,
    consume_all,
    elect_the_follower_uncleanly,
    leader_alone_then_gone,
    partition_state,
    produce,
    three_brokers,
    wait_for,
)

from odradek.testing.servers import unique_chroot


def test_a_former_leader_truncates_its_unreplicated_records_on_a_diverging_epoch(
    tmp_path: Path, zookeeper_server: Any
) -> None:
    metadata = {
        "metadata": "zookeeper",
        "zookeeper.connect": zookeeper_server.connect_string + unique_chroot("diverge"),
        "auto.leader.rebalance.enable": "false",
    }
    with three_brokers(tmp_path, metadata) as brokers:
        wait_for("three live brokers", lambda: all_brokers_seen(brokers))
        topic, controller, first, behind, kept, live = leader_alone_then_gone(brokers, "diverge")
        admin = AdminClient({"bootstrap.servers": ",".join(b.bootstrap for b in brokers.values())})
        elect_the_follower_uncleanly(brokers, topic, behind, live)
        now = ",".join(brokers[i].bootstrap for i in (controller, behind))
        fresh = produce(now, topic, [b"n%d" % i for i in range(30)])
        assert len(fresh) == 30

        brokers[first].start()  # holds k0..k49 and lost0..lost19 under the old epoch
        wait_for(
            "the former leader back in the ISR",
            lambda: partition_state(admin, topic) == (behind, sorted([first, behind])),
            30,
        )
        log = brokers[first].log_path.read_text(errors="replace")
        assert "diverging from the leader" in log and "truncating from 70 to 50" in log, log[-3000:]

        brokers[behind].stop()  # the former leader, in sync, leads again
        wait_for("the former leader leading", lambda: partition_state(admin, topic) == (first, [first]), 15)
        here = ",".join(brokers[i].bootstrap for i in (controller, first))
        got = consume_all(here, topic, len(kept) + len(fresh))
        assert len(got) == len(set(got)) == 80 and set(got) == kept | fresh, sorted(set(got) ^ (kept | fresh))
        for i in (controller, first):
            assert not brokers[i].log_problems(), brokers[i].log_problems()
