"""The ``sticky`` (eager) and ``cooperative-sticky`` (incremental, KIP-429) assignors.

Both run :func:`odradek.assignors.sticky_algorithm.sticky_assign`; they differ in where a member's
previous assignment comes from and in what the leader hands out:

- ``sticky`` is eager: members revoke everything before rejoining, so their subscriptions carry no
  owned partitions. Each member instead sends its last assignment and generation as user data
  (``StickyAssignorUserData`` v1, as Java and librdkafka do).
- ``cooperative-sticky`` keeps partitions across a rebalance: members report owned partitions and
  their generation in the subscription itself (v2+; for v0/v1 subscriptions the generation is in
  ``CooperativeStickyAssignorUserData``). The leader leaves out of this round every partition that
  changes owner; its owner revokes it, rejoins, and the next rebalance assigns it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from ..consumer_protocol import (
    DEFAULT_GENERATION,
    decode_cooperative_user_data,
    decode_sticky_user_data,
    encode_cooperative_user_data,
    encode_sticky_user_data,
)
from ..interfaces import GroupMember, MemberAssignment, TopicPartition
from .base import subscribed_partitions_per_topic, to_member_assignments
from .sticky_algorithm import StickyMember, sticky_assign

#: Where a member's previous partitions and their generation come from (user data or subscription).
MemberData = Callable[[GroupMember], tuple[tuple[TopicPartition, ...], int | None]]


def _run_sticky(
    partitions_per_topic: Mapping[str, int], members: Sequence[GroupMember], member_data: MemberData
) -> tuple[dict[str, list[TopicPartition]], dict[TopicPartition, str] | None]:
    """``sticky_assign`` over the subscribed topics, each member's history read by ``member_data``."""
    counts = subscribed_partitions_per_topic(partitions_per_topic, members)
    sticky_members = []
    for m in members:
        owned, generation = member_data(m)
        sticky_members.append(StickyMember(m.member_id, frozenset(m.topics), owned, generation, m.generation))
    return sticky_assign(counts, sticky_members)


class StickyAssignor:
    """Java's ``StickyAssignor`` (eager protocol, previous assignment in user data)."""

    name = "sticky"
    rebalance_protocol = "eager"

    def __init__(self) -> None:
        self._assigned: list[TopicPartition] | None = None
        self._generation = DEFAULT_GENERATION

    def subscription_user_data(
        self, topics: Sequence[str], owned: Sequence[TopicPartition], generation: int
    ) -> bytes | None:
        """The last assignment this member received and its generation; None before the first
        (or, when the caller tracks it instead, what it passes in)."""
        if self._assigned is not None:
            return encode_sticky_user_data(self._assigned, self._generation)
        if owned:
            return encode_sticky_user_data(owned, generation)
        return None

    def on_assignment(self, assignment: MemberAssignment, generation: int) -> None:
        self._assigned = list(assignment.partitions)
        self._generation = generation

    @staticmethod
    def member_data(member: GroupMember) -> tuple[tuple[TopicPartition, ...], int | None]:
        """(previous assignment, its generation) from the member's user data."""
        partitions, generation = decode_sticky_user_data(member.user_data)
        return tuple(partitions), generation

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[GroupMember]
    ) -> dict[str, MemberAssignment]:
        assignment, _ = _run_sticky(partitions_per_topic, members, self.member_data)
        return to_member_assignments(assignment)


class CooperativeStickyAssignor:
    """Java's ``CooperativeStickyAssignor`` (cooperative protocol, owned partitions in the
    subscription, transferring partitions withheld for one rebalance)."""

    name = "cooperative-sticky"
    rebalance_protocol = "cooperative"

    def __init__(self) -> None:
        self._generation = DEFAULT_GENERATION

    def subscription_user_data(
        self, topics: Sequence[str], owned: Sequence[TopicPartition], generation: int
    ) -> bytes | None:
        """The generation of the member's owned partitions (read only from v0/v1 subscriptions)."""
        return encode_cooperative_user_data(generation if generation != DEFAULT_GENERATION else self._generation)

    def on_assignment(self, assignment: MemberAssignment, generation: int) -> None:
        self._generation = generation

    @staticmethod
    def member_data(member: GroupMember) -> tuple[tuple[TopicPartition, ...], int | None]:
        """(owned partitions, their generation): the subscription's fields (v2+), else the
        generation from user data."""
        if member.generation >= 0:
            return tuple(member.owned_partitions), member.generation
        return tuple(member.owned_partitions), decode_cooperative_user_data(member.user_data)

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[GroupMember]
    ) -> dict[str, MemberAssignment]:
        assignment, transferring = _run_sticky(partitions_per_topic, members, self.member_data)
        if transferring is None:
            transferring = self._transferring(members, assignment)
        for tp, member_id in transferring.items():
            if tp in assignment[member_id]:
                assignment[member_id].remove(tp)
        return to_member_assignments(assignment)

    @staticmethod
    def _transferring(
        members: Sequence[GroupMember], assignment: Mapping[str, list[TopicPartition]]
    ) -> dict[TopicPartition, str]:
        """Partitions newly given to a member while another member still owns them."""
        added: dict[TopicPartition, str] = {}
        revoked: set[TopicPartition] = set()
        for m in members:
            owned = set(m.owned_partitions)
            assigned = set(assignment.get(m.member_id, ()))
            for tp in assignment.get(m.member_id, ()):
                if tp not in owned:
                    added[tp] = m.member_id
            revoked.update(tp for tp in m.owned_partitions if tp not in assigned)
        return {tp: member for tp, member in added.items() if tp in revoked}
