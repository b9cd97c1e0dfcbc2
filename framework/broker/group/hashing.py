"""Which ``__consumer_offsets`` partition (and so which coordinator) owns a group.

Kafka places a group on partition ``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions``
and the leader of that partition is the group's coordinator. Clients never compute this (they ask
FindCoordinator), but odradek must agree with Kafka so that a ``__consumer_offsets`` topic written
by one stays readable by the other, and so the spread of groups over partitions is the same.
"""

from __future__ import annotations

_MASK32 = 0xFFFFFFFF
_INT_MIN = -(2**31)


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units, as a
    signed 32-bit int (characters outside the BMP count as two surrogate units, as in Java)."""
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & _MASK32
    return h - (1 << 32) if h & 0x80000000 else h


def java_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: ``Math.abs`` except that Integer.MIN_VALUE maps to 0."""
    return 0 if n == _INT_MIN else abs(n)


def partition_for(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition holding ``group_id``'s offsets and metadata."""
    return java_abs(java_string_hash(group_id)) % num_partitions
