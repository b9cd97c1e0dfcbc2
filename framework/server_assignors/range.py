"""The server-side ``range`` assignor: per topic, consecutive partition ranges to sorted members.

For each subscribed topic, its subscribers in :func:`~.base.member_order` and, with ``n``
partitions and ``c`` subscribers, the first ``n % c`` get ``n // c + 1`` partitions and the
rest ``n // c``, in partition order. Members subscribed to the same topics therefore get the same
partition numbers of each (co-partitioning: what joins of two topics keyed alike rely on), as
with Kafka's ``RangeAssignor``. Unlike ``uniform`` it is not sticky: a membership change can move
a partition between two members that both stay.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..interfaces import AssignmentMember, AssignmentTopic
from .base import frozen, subscribers_by_topic


class RangeServerAssignor:
    """Kafka's server-side ``range`` (co-partitioning) assignor."""

    name = "range"

    def assign(
        self, members: Mapping[str, AssignmentMember], topics: Mapping[str, AssignmentTopic]
    ) -> dict[str, dict[str, frozenset[int]]]:
        result: dict[str, dict[str, set[int]]] = {member_id: {} for member_id in members}
        for topic_id, subscribed in subscribers_by_topic(members, topics).items():
            per_member, with_extra = divmod(topics[topic_id].num_partitions, len(subscribed))
            for i, member_id in enumerate(subscribed):
                start = per_member * i + min(i, with_extra)
                length = per_member + (1 if i < with_extra else 0)
                if length:
                    result[member_id][topic_id] = set(range(start, start + length))
        return frozen(result)
