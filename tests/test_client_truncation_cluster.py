"""odradek's consumer meets a truncated leader (KIP-320 through Fetch), on three odradek brokers
on ZooKeeper, as the Java consumer would: it read records that only the old leader had, the
leader went away and a replica without them was elected uncleanly. Its next Fetch names the
epoch of the last record it read; the new leader answers that this epoch ended at offset 50, before
the consumer's position 70. With ``auto.offset.reset=earliest`` the consumer moves back to 50 and
reads the new leader's records from there; with ``none`` its poll() raises LogTruncationError
naming offset 50."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from confluent_kafka import ElectionType
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from test_replication_cluster import all_brokers_seen, partition_state, produce, three_brokers, wait_for

from odradek.client import Consumer, LogTruncationError, TopicPartition
from odradek.testing.broker import unique_topic
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
    with three_brokers(tmp_path, metadata) as brokers:
        wait_for("three live brokers", lambda: all_brokers_seen(brokers))
        bootstrap = ",".join(b.bootstrap for b in brokers.values())
        admin = AdminClient({"bootstrap.servers": bootstrap})
        controller = admin.list_topics(timeout=5).controller_id
        first, behind = (i for i in brokers if i != controller)
        topic = unique_topic("ctrunc")
        admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[first, behind]])])[topic].result(15)
        wait_for("a full ISR", lambda: partition_state(admin, topic) == (first, sorted([first, behind])))
        assert len(produce(bootstrap, topic, [b"k%d" % i for i in range(50)])) == 50
        brokers[behind].stop()
        wait_for("the follower out of the ISR", lambda: partition_state(admin, topic) == (first, [first]))
        assert len(produce(bootstrap, topic, [b"lost%d" % i for i in range(20)])) == 20  # on the leader alone

        tp = TopicPartition(topic, 0)
        config = {"bootstrap.servers": bootstrap, "metadata.max.age.ms": 500, "retry.backoff.max.ms": 200}
        resetting = Consumer({**config, "auto.offset.reset": "earliest"})
        strict = Consumer({**config, "auto.offset.reset": "none"})
        with resetting, strict:
            for consumer in (resetting, strict):
                consumer.assign([tp])
                consumer.seek(tp, 0)
                assert [o for o, _ in _read(consumer, 70)] == list(range(70))  # lost0..lost19 too

            brokers[first].stop()
            live = AdminClient({"bootstrap.servers": brokers[controller].bootstrap})
            wait_for("no leader", lambda: partition_state(live, topic) is None)
            brokers[behind].start()
            wait_for("the follower registered", lambda: len(live.list_topics(timeout=5).brokers) == 2)
            elected = live.elect_leaders(ElectionType.UNCLEAN, [KafkaTopicPartition(topic, 0)]).result(30)
            assert list(elected.values()) == [None]
            wait_for("the follower leading", lambda: partition_state(live, topic) == (behind, [behind]), 10)
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
