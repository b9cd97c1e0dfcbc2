"""KIP-848 consumer groups: group and member state, and reconciliation (sans-IO).

A consumer group (``group.protocol=consumer`` clients, ConsumerGroupHeartbeat) has no join or
sync phase. Its state is three layers, as in Kafka's ``ConsumerGroup``:

- the *group epoch*, bumped whenever what the assignment depends on changes (a member joins,
  leaves or changes its subscription, a subscribed topic gains partitions);
- the *target assignment* and its epoch, computed by a server-side assignor
  (:class:`odradek.interfaces.ServerAssignor`) when the group epoch has moved past it;
- each member's *current assignment* and *member epoch*, moved towards the target one heartbeat
  at a time by :func:`reconcile` (Kafka's ``CurrentAssignmentBuilder``): a member first gives up
  the partitions it must lose (they stay *pending revocation*, still owned, and its epoch stays
  behind), then reaches the target epoch, and receives a partition only once no other member
  owns it any more (until then it is *unreleased*).

Everything here is plain data and pure functions; :mod:`.consumer_coordinator` drives them from
heartbeats and timers.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from ...errors import ErrorCode

#: topic id (32 hex digits) -> partitions
TopicIdPartitions = Mapping[str, frozenset[int]]

#: a member's epoch on joining, and the epochs a leaving member sends (Kafka's constants)
JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2


class HeartbeatError(Exception):
    """A consumer group request refused with a Kafka error code (and the message Kafka would give)."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message


class MemberState(enum.Enum):
    """Where a member is in its reconciliation (Kafka's ``MemberState``)."""

    STABLE = "stable"
    #: it must revoke ``pending_revocation`` before it moves to the next epoch
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    #: at the target epoch, but some target partitions are still owned by other members
    UNRELEASED_PARTITIONS = "unreleased_partitions"


class ConsumerGroupState(enum.Enum):
    """A consumer group's state as DescribeGroups/ConsumerGroupDescribe/ListGroups report it."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """What a member speaking the classic protocol (JoinGroup/SyncGroup/Heartbeat) in a consumer
    group joined with (Kafka's ``ClassicMemberMetadata``): its session timeout and its
    protocols (name, subscription bytes) in preference order."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]

    @property
    def protocol_name(self) -> str:
        """The protocol its JoinGroup and SyncGroup answers name (its first, as Kafka's)."""
        return self.protocols[0][0]


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    """One member; replaced (``dataclasses.replace``) rather than mutated, so a heartbeat can
    compare the member before and after."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = 0
    subscribed_topic_names: frozenset[str] = frozenset()
    server_assignor: str | None = None
    member_epoch: int = JOIN_GROUP_MEMBER_EPOCH
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: TopicIdPartitions = field(default_factory=dict)
    pending_revocation: TopicIdPartitions = field(default_factory=dict)
    #: a regular expression subscription (KIP-848; Python's ``re``, matched against whole names)
    subscribed_topic_regex: str | None = None
    #: set for a member using the classic protocol in this consumer group (online migration)
    classic: ClassicMemberMetadata | None = None

    def is_reconciled_to(self, epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == epoch


@dataclass(frozen=True, slots=True)
class SubscribedTopic:
    """A subscribed topic as the last target assignment saw it (Kafka's subscription metadata)."""

    topic_id: str
    num_partitions: int


@dataclass
class ConsumerGroup:
    """A KIP-848 consumer group (Kafka's ``ConsumerGroup``)."""

    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerGroupMember] = field(default_factory=dict)
    #: member id -> its partitions in the target assignment
    target: dict[str, TopicIdPartitions] = field(default_factory=dict)
    #: topic name -> what the group's subscriptions resolved to when the group epoch last moved
    subscription_metadata: dict[str, SubscribedTopic] = field(default_factory=dict)
    #: instance id -> member id of static members
    static_members: dict[str, str] = field(default_factory=dict)
    #: (topic id, partition) -> the member owning it (assigned, or pending revocation)
    owners: dict[tuple[str, int], str] = field(default_factory=dict)
    dead: bool = False
    #: regex -> the topic names it matched when the subscriptions were last resolved
    resolved_regexes: dict[str, frozenset[str]] = field(default_factory=dict)

    @property
    def state(self) -> ConsumerGroupState:
        """Kafka's rule: Empty without members, Assigning while the target lags the group epoch,
        Reconciling while a member lags the target, else Stable."""
        if self.dead:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def copy(self) -> ConsumerGroup:
        """A copy to go back to when a heartbeat fails half-way (members are immutable, so
        copying the mappings is enough)."""
        return ConsumerGroup(
            self.group_id, self.group_epoch, self.assignment_epoch, dict(self.members), dict(self.target),
            dict(self.subscription_metadata), dict(self.static_members), dict(self.owners), self.dead,
            dict(self.resolved_regexes),
        )  # fmt: skip

    def member_topics(self, member: ConsumerGroupMember) -> frozenset[str]:
        """The topic names a member subscribes to: its names and what its regex matched."""
        if member.subscribed_topic_regex is None:
            return member.subscribed_topic_names
        return member.subscribed_topic_names | self.resolved_regexes.get(member.subscribed_topic_regex, frozenset())

    def subscribed_topic_names(self) -> set[str]:
        return {t for m in self.members.values() for t in self.member_topics(m)}

    def regexes(self) -> set[str]:
        return {m.subscribed_topic_regex for m in self.members.values() if m.subscribed_topic_regex is not None}

    def classic_members(self) -> list[ConsumerGroupMember]:
        return [m for m in self.members.values() if m.classic is not None]

    def all_classic_except(self, member_id: str) -> bool:
        """Whether every member but ``member_id`` uses the classic protocol (Kafka's
        ``allMembersUseClassicProtocolExcept``): its leaving may turn the group classic."""
        member = self.members.get(member_id)
        return (
            member is not None
            and member.classic is None
            and all(m.classic is not None for m in self.members.values() if m.member_id != member_id)
        )

    def supports_classic_protocols(self, protocol_type: str, names: set[str]) -> bool:
        """Kafka's ``supportsClassicProtocols``: a classic member may join if its protocol type is
        ``consumer`` and one of its protocols is one every classic member supports."""
        if protocol_type != "consumer" or not names:
            return False
        classic = self.classic_members()
        if not self.members or not classic:
            return True
        common = set.intersection(*({n for n, _ in m.classic.protocols} for m in classic if m.classic is not None))
        return bool(common & names)

    def waiting_on_unreleased(self, member: ConsumerGroupMember) -> bool:
        """Whether a member's target partitions it does not have yet are still owned by others
        (Kafka's ``waitingOnUnreleasedPartition``; when not, a classic member rejoins for them)."""
        if member.state is not MemberState.UNRELEASED_PARTITIONS:
            return False
        for topic_id, parts in self.target.get(member.member_id, {}).items():
            have = member.assigned.get(topic_id, frozenset())
            if any(p not in have and self.owner(topic_id, p) is not None for p in parts):
                return True
        return False

    def owner(self, topic_id: str, partition: int) -> str | None:
        return self.owners.get((topic_id, partition))

    def put_member(self, member: ConsumerGroupMember) -> None:
        """Add or replace a member, keeping the partition owners and static ids in step."""
        old = self.members.get(member.member_id)
        if old is not None:
            self._release(old)
        self.members[member.member_id] = member
        for topic_id, partition in _pairs(member.assigned, member.pending_revocation):
            self.owners[(topic_id, partition)] = member.member_id
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id

    def remove_member(self, member_id: str) -> ConsumerGroupMember | None:
        """Forget a member, its target assignment and ownership (its partitions become free)."""
        member = self.members.pop(member_id, None)
        self.target.pop(member_id, None)
        if member is not None:
            self._release(member)
            if member.instance_id is not None and self.static_members.get(member.instance_id) == member_id:
                del self.static_members[member.instance_id]
        return member

    def _release(self, member: ConsumerGroupMember) -> None:
        for key in _pairs(member.assigned, member.pending_revocation):
            if self.owners.get(key) == member.member_id:
                del self.owners[key]


def _pairs(*assignments: TopicIdPartitions) -> Iterable[tuple[str, int]]:
    for assignment in assignments:
        for topic_id, parts in assignment.items():
            for p in parts:
                yield topic_id, p


def owns_any(owned: TopicIdPartitions, partitions: TopicIdPartitions) -> bool:
    """Whether ``owned`` (what a member reports) still holds any of ``partitions``."""
    return any(owned.get(topic_id, frozenset()) & parts for topic_id, parts in partitions.items())


def is_subset(owned: TopicIdPartitions | None, assigned: TopicIdPartitions) -> bool:
    """Kafka's ``isSubset``: a member reporting nothing (None) is never a subset."""
    if owned is None:
        return False
    return all(parts <= assigned.get(topic_id, frozenset()) for topic_id, parts in owned.items())


def _clean(assignment: Mapping[str, Iterable[int]]) -> dict[str, frozenset[int]]:
    return {topic_id: frozenset(parts) for topic_id, parts in assignment.items() if parts}


def reconcile(
    member: ConsumerGroupMember,
    target_epoch: int,
    target: TopicIdPartitions,
    owner: Callable[[str, int], str | None],
    owned: TopicIdPartitions | None,
) -> ConsumerGroupMember:
    """One step of the member towards the target assignment (Kafka's ``CurrentAssignmentBuilder``).

    ``owner`` tells who currently owns a partition; ``owned`` is what the member reported in
    this heartbeat (None: it did not say). A member revoking partitions stays where it is until
    it reports that it no longer owns them."""
    if member.state is MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next_assignment(member, target_epoch, target, owner)
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        if owned is None or owns_any(owned, member.pending_revocation):
            return member
        return _next_assignment(member, target_epoch, target, owner)
    return _next_assignment(member, target_epoch, target, owner)


def _next_assignment(
    member: ConsumerGroupMember,
    target_epoch: int,
    target: TopicIdPartitions,
    owner: Callable[[str, int], str | None],
) -> ConsumerGroupMember:
    keep: dict[str, set[int]] = {}
    revoke: dict[str, set[int]] = {}
    newly: dict[str, set[int]] = {}
    unreleased = False
    for topic_id in set(target) | set(member.assigned):
        wanted = target.get(topic_id, frozenset())
        current = member.assigned.get(topic_id, frozenset())
        keep[topic_id] = set(current & wanted)
        revoke[topic_id] = set(current - wanted)
        for p in wanted - current:
            if owner(topic_id, p) in (None, member.member_id):
                newly.setdefault(topic_id, set()).add(p)
            else:
                unreleased = True
    if any(revoke.values()):
        # revoke first: no new partitions, and the epoch stays until the member confirms
        return replace(
            member,
            state=MemberState.UNREVOKED_PARTITIONS,
            assigned=_clean(keep),
            pending_revocation=_clean(revoke),
        )
    for topic_id, parts in newly.items():
        keep.setdefault(topic_id, set()).update(parts)
    return replace(
        member,
        state=MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE,
        previous_member_epoch=member.member_epoch,
        member_epoch=target_epoch,
        assigned=_clean(keep),
        pending_revocation={},
    )


__all__ = [
    "JOIN_GROUP_MEMBER_EPOCH",
    "LEAVE_GROUP_MEMBER_EPOCH",
    "LEAVE_GROUP_STATIC_MEMBER_EPOCH",
    "ClassicMemberMetadata",
    "ConsumerGroup",
    "ConsumerGroupMember",
    "ConsumerGroupState",
    "HeartbeatError",
    "MemberState",
    "SubscribedTopic",
    "TopicIdPartitions",
    "is_subset",
    "owns_any",
    "reconcile",
]
