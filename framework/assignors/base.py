"""What every assignor shares: Java's member order and the partitions worth assigning."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..consumer_protocol import java_string_key
from ..interfaces import GroupMember, MemberAssignment, TopicPartition


def member_sort_key(member: GroupMember) -> tuple[int, bytes]:
    """Java's ``MemberInfo`` order: static members (by ``group.instance.id``) before dynamic
    members (by member id), strings compared as Java compares them."""
    if member.group_instance_id is not None:
        return (0, java_string_key(member.group_instance_id))
    return (1, java_string_key(member.member_id))


def subscribed_partitions_per_topic(
    partitions_per_topic: Mapping[str, int], members: Sequence[GroupMember]
) -> dict[str, int]:
    """Partition counts of the topics some member subscribes to and that exist with at least one
    partition (Java's ``AbstractPartitionAssignor.assign`` drops the others before assigning)."""
    wanted = {t for m in members for t in m.topics}
    return {t: n for t, n in partitions_per_topic.items() if t in wanted and n > 0}


def to_member_assignments(assignment: Mapping[str, Sequence[TopicPartition]]) -> dict[str, MemberAssignment]:
    return {member_id: MemberAssignment(tuple(parts)) for member_id, parts in assignment.items()}


class EagerAssignor:
    """Base of the stateless eager assignors (range, roundrobin): no user data, nothing to remember."""

    name = ""
    rebalance_protocol = "eager"

    def subscription_user_data(
        self, topics: Sequence[str], owned: Sequence[TopicPartition], generation: int
    ) -> bytes | None:
        return None

    def on_assignment(self, assignment: MemberAssignment, generation: int) -> None:
        return None
