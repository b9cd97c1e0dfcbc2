"""KIP-951 on the client side, without sockets: which leader hints of a Produce answer the
client's metadata takes (``ClusterSnapshot.with_leaders``, as the Java client's
``Metadata.updatePartitionLeadership``): only a newer epoch, only a known broker."""

from __future__ import annotations

from odradek.client.cluster import BrokerInfo, ClusterSnapshot, PartitionInfo, TopicInfo
from odradek.errors import ErrorCode
from odradek.interfaces import TopicPartition


def _snapshot() -> ClusterSnapshot:
    partitions = {i: PartitionInfo("t", i, 1, 5, (1, 2, 3), (1, 2, 3)) for i in range(3)}
    brokers = {i: BrokerInfo(i, f"h{i}", 9090 + i) for i in (1, 2)}
    return ClusterSnapshot(brokers, {"t": TopicInfo("t", ErrorCode.NONE, False, partitions)}, 1, "c")


def test_a_newer_epoch_moves_the_partition_and_adds_its_broker() -> None:
    before = _snapshot()
    hints = {TopicPartition("t", 0): (3, 6), TopicPartition("t", 1): (2, 6)}
    after, moved = before.with_leaders(hints, [BrokerInfo(3, "h3", 9093, "r")])
    assert moved == {TopicPartition("t", 0), TopicPartition("t", 1)}
    assert [after.leader_for(TopicPartition("t", i)) for i in range(3)] == [3, 2, 1]
    assert after.topics["t"].partitions[0].leader_epoch == 6 and after.brokers[3].host == "h3"
    assert before.leader_for(TopicPartition("t", 0)) == 1  # snapshots stay immutable
    assert after.partitions_for("t") == 3


def test_an_old_epoch_an_unknown_broker_or_partition_changes_nothing() -> None:
    before = _snapshot()
    hints = {
        TopicPartition("t", 0): (2, 5),  # the same epoch: not newer
        TopicPartition("t", 1): (2, 4),  # older
        TopicPartition("t", 2): (7, 9),  # broker 7 is named nowhere
        TopicPartition("u", 0): (2, 9),  # a topic the client does not know
        TopicPartition("t", 9): (2, 9),
    }
    after, moved = before.with_leaders(hints, [])
    assert (after, moved) == (before, set())
