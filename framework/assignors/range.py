"""The range assignor (``range``): per topic, consecutive partition ranges to sorted members.

For each topic the subscribed members are sorted (Java's ``MemberInfo`` order) and the first
``n % c`` members get ``n // c + 1`` partitions, the rest ``n // c``, in partition order. It is
the seeds' rebalance algorithm (``j*N`` to ``(j+1)*N - 1``) and the Java and librdkafka default;
co-partitioned topics land on the same member, which joins rely on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..consumer_protocol import java_string_key
from ..interfaces import GroupMember, MemberAssignment, TopicPartition
from .base import EagerAssignor, member_sort_key, subscribed_partitions_per_topic, to_member_assignments


class RangeAssignor(EagerAssignor):
    """Java's ``RangeAssignor`` without rack matching (odradek's assignors see no replica racks)."""

    name = "range"

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[GroupMember]
    ) -> dict[str, MemberAssignment]:
        counts = subscribed_partitions_per_topic(partitions_per_topic, members)
        result: dict[str, list[TopicPartition]] = {m.member_id: [] for m in members}
        for topic in sorted(counts, key=java_string_key):
            consumers = sorted((m for m in members if topic in m.topics), key=member_sort_key)
            n, c = counts[topic], len(consumers)
            per_consumer, with_extra = divmod(n, c)
            for i, member in enumerate(consumers):
                start = per_consumer * i + min(i, with_extra)
                length = per_consumer + (1 if i < with_extra else 0)
                result[member.member_id].extend(TopicPartition(topic, p) for p in range(start, start + length))
        return to_member_assignments(result)
