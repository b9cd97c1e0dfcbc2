"""The round-robin assignor (``roundrobin``): all partitions dealt to sorted members in turn.

Partitions of every subscribed topic (topics sorted, partitions ascending) are dealt one at a time
to members in Java's ``MemberInfo`` order, skipping a member not subscribed to the partition's
topic -- Java's ``RoundRobinAssignor`` and librdkafka's ``roundrobin``. With equal subscriptions
member partition counts differ by at most one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..consumer_protocol import java_string_key
from ..interfaces import GroupMember, MemberAssignment, TopicPartition
from .base import EagerAssignor, member_sort_key, subscribed_partitions_per_topic, to_member_assignments


class RoundRobinAssignor(EagerAssignor):
    """Java's ``RoundRobinAssignor``."""

    name = "roundrobin"

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[GroupMember]
    ) -> dict[str, MemberAssignment]:
        counts = subscribed_partitions_per_topic(partitions_per_topic, members)
        result: dict[str, list[TopicPartition]] = {m.member_id: [] for m in members}
        ring = sorted(members, key=member_sort_key)
        subscribed = [set(m.topics) for m in ring]
        at = 0
        for topic in sorted(counts, key=java_string_key):
            for partition in range(counts[topic]):
                while topic not in subscribed[at]:  # someone subscribes: counts holds only such topics
                    at = (at + 1) % len(ring)
                result[ring[at].member_id].append(TopicPartition(topic, partition))
                at = (at + 1) % len(ring)
        return to_member_assignments(result)
