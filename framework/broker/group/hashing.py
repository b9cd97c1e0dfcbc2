"""Which ``__consumer_offsets`` partition (and so which coordinator) owns a group.

Kafka places a group on partition ``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions``
and the leader of that partition is the group's coordinator. Clients never compute this (they ask
FindCoordinator), but odradek must agree with Kafka so that a ``__consumer_offsets`` topic written
by one stays readable by the other, and so the spread of groups over partitions is the same.
"""

from __future__ import annotations

from ...kafka_types import java_string_hash

_INT_MIN = -(2**31)


def java_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: ``Math.abs`` except that Integer.MIN_VALUE maps to 0."""
    return 0 if n == _INT_MIN else abs(n)


__all__ = ["java_abs", "java_string_hash", "partition_for"]


def partition_for(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition holding ``group_id``'s offsets and metadata."""
    return java_abs(java_string_hash(group_id)) % num_partitions
