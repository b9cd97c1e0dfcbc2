"""The server-side ``range`` assignor: per topic, consecutive partition ranges to sorted members.

For each subscribed topic, its subscribers in :func:`~.base.member_order` and, with ``n``
partitions and ``c`` subscribers, the first ``n % c`` get ``n // c + 1`` partitions and the
rest ``n // c``, in partition order. Members subscribed to the same topics therefore get the same
partition numbers of each (co-partitioning: what joins of two topics keyed alike rely on), as
with Kafka's ``RangeAssignor``. Unlike ``uniform`` it is not sticky: a membership change can move
a partition between two members that both stay.

Racks (KIP-881's rule for the client-side range assignor, best effort): each member, in order,
first takes the free partitions with a replica in its rack (``rack_id`` against the replicas'
``broker.rack``), in partition order, up to its share; the partitions left go in order to the
members still below their share. When every partition has a replica in every member's rack, or
racks are unknown, this is exactly the plain ranges above; when racks restrict it, the counts
stay the same but co-partitioning is no longer guaranteed.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..interfaces import AssignmentMember, AssignmentTopic
from .base import frozen, rack_mismatch, subscribers_by_topic


class RangeServerAssignor:
    """Kafka's server-side ``range`` (co-partitioning) assignor."""

    name = "range"

    def assign(
        self, members: Mapping[str, AssignmentMember], topics: Mapping[str, AssignmentTopic]
    ) -> dict[str, dict[str, frozenset[int]]]:
        result: dict[str, dict[str, set[int]]] = {member_id: {} for member_id in members}
        for topic_id, subscribed in subscribers_by_topic(members, topics).items():
            topic = topics[topic_id]
            per_member, with_extra = divmod(topic.num_partitions, len(subscribed))
            share = {member_id: per_member + (1 if i < with_extra else 0) for i, member_id in enumerate(subscribed)}
            free = list(range(topic.num_partitions))
            for member_id in subscribed:  # the partitions in its rack (all of them without racks)
                mine = [p for p in free if not rack_mismatch(members[member_id], topic, p)][: share[member_id]]
                result[member_id][topic_id] = set(mine)
                free = [p for p in free if p not in result[member_id][topic_id]]
            for member_id in subscribed:  # the rest, in order, to those below their share
                missing = share[member_id] - len(result[member_id][topic_id])
                result[member_id][topic_id].update(free[:missing])
                free = free[max(missing, 0) :]
        return frozen(result)
