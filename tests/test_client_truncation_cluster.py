"""odradek's consumer meets a truncated leader (KIP-320 through Fetch), on three odradek brokers
on ZooKeeper, as the Java consumer would: it read records that only the old leader had, the
leader went away and a replica without them was elected uncleanly. Its next Fetch names the
epoch of the last record it read; the new leader answers that this epoch ended at offset 50, before
the consumer's position 70. With ``auto.offset.reset=earliest`` the consumer moves back to 50 and
reads the new leader's records from there; with ``none`` its poll() raises LogTruncationError
naming offset 50."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from test_replication_cluster import (
    all_brokers_seen,
    elect_the_follower_uncleanly,
    leader_alone_then_gone,
    produce,
    three_brokers,
    wait_for,
)

from odradek.client import Consumer, LogTruncationError, TopicPartition
from odradek.testing.servers import unique_chroot


def _read(consumer: Consumer, count: int) -> list[tuple[int, bytes]]:
    """Poll until ``count`` records came back: (offset, value) pairs."""
    got: list[tuple[int, bytes]] = []

    def more() -> bool:
        for records in consumer.poll(0.5).values():
            got.extend((r.offset, r.value) for r in records)
        return len(got) >= count

    wait_for(f"{count} records", more, 30)
    return got


def test_odradek_consumer_moves_back_or_raises_on_a_truncated_leader(tmp_path: Path, zookeeper_server: Any) -> None:
    metadata = {
        "metadata": "zookeeper",
        "zookeeper.connect": zookeeper_server.connect_string + unique_chroot("ctrunc"),
        "auto.leader.rebalance.enable": "false",
    }
    bootstrap: list[str] = []
    consumers: list[Consumer] = []

    def read_the_lost_records(topic: str) -> None:
        """Both consumers read offsets 0-69, the last 20 of which only the leader has."""
        config = {"bootstrap.servers": bootstrap[0], "metadata.max.age.ms": 500, "retry.backoff.max.ms": 200}
        for reset in ("earliest", "none"):
            consumer = Consumer({**config, "auto.offset.reset": reset})
            consumers.append(consumer)
            consumer.assign([TopicPartition(topic, 0)])
            consumer.seek(TopicPartition(topic, 0), 0)
            assert [o for o, _ in _read(consumer, 70)] == list(range(70))

    with three_brokers(tmp_path, metadata) as brokers, contextlib.ExitStack() as closing:
        wait_for("three live brokers", lambda: all_brokers_seen(brokers))
        bootstrap.append(",".join(b.bootstrap for b in brokers.values()))
        topic, controller, _, behind, _, live = leader_alone_then_gone(brokers, "ctrunc", read_the_lost_records)
        resetting, strict = (closing.enter_context(c) for c in consumers)
        tp = TopicPartition(topic, 0)
        elect_the_follower_uncleanly(brokers, topic, behind, live)
        now = ",".join(brokers[i].bootstrap for i in (controller, behind))
        assert len(produce(now, topic, [b"n%d" % i for i in range(30)])) == 30

        # back to the first offset known to diverge: the new leader's records, none lost
        assert _read(resetting, 30) == [(50 + i, b"n%d" % i) for i in range(30)]

        def raised() -> LogTruncationError | None:
            try:
                strict.poll(0.5)
            except LogTruncationError as exc:
                return exc
            return None

        error = wait_for("a LogTruncationError", raised, 30)
        assert list(error.divergent_offsets) == [tp] and error.divergent_offsets[tp][0] == 50
        assert strict.position(tp) == 70  # the user decides where to go on
        strict.seek(tp, error.divergent_offsets[tp][0])
        assert [v for _, v in _read(strict, 30)] == [b"n%d" % i for i in range(30)]
