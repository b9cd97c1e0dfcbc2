"""In-memory state of a classic consumer group: members, generation, protocol, committed offsets.

Kafka's ``GroupMetadata``/``MemberMetadata``: plain synchronous state with the transition rules of
the group state machine, no I/O and no timers (the coordinator drives those). A member parked in
JoinGroup or SyncGroup holds a :class:`Waiter` that the coordinator completes when the rebalance
moves on; the request handler awaits it.
"""

from __future__ import annotations

import enum
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import trio

from ...errors import ErrorCode
from ...interfaces import TopicPartition

T = TypeVar("T")

#: member id of a member that has none yet (JoinGroup) / "not a group member" (OffsetCommit)
UNKNOWN_MEMBER_ID = ""
#: the generation simple (non-group) consumers commit with
NO_GENERATION = -1


class GroupState(enum.Enum):
    """The classic group states; ``.value`` is what DescribeGroups/ListGroups report."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.DEAD: frozenset(GroupState),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset({GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}),
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
}


class Waiter(Generic[T]):
    """A one-shot result slot: the coordinator sets it, a request handler awaits it."""

    __slots__ = ("_event", "_value")

    def __init__(self) -> None:
        self._event = trio.Event()
        self._value: T | None = None

    def set(self, value: T) -> None:
        if not self._event.is_set():
            self._value = value
            self._event.set()

    async def wait(self) -> T:
        await self._event.wait()
        assert self._value is not None
        return self._value


@dataclass(frozen=True, slots=True)
class JoinGroupMember:
    """One member as the leader sees it in the JoinGroup response."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupResult:
    error: ErrorCode
    member_id: str = UNKNOWN_MEMBER_ID
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: tuple[JoinGroupMember, ...] = ()
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncGroupResult:
    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A committed offset as stored in ``__consumer_offsets`` (OffsetCommitValue)."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int | None = None  # only commits with an explicit retention (v2-v4)


@dataclass(eq=False)
class MemberMetadata:
    """A group member: identity, timeouts, the protocols it supports, its assignment."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    supported_protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    awaiting_join: Waiter[JoinGroupResult] | None = None
    awaiting_sync: Waiter[SyncGroupResult] | None = None
    is_new: bool = False
    heartbeat_satisfied: bool = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def protocols(self) -> set[str]:
        return {name for name, _ in self.supported_protocols}

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.supported_protocols:
            if name == protocol:
                return data
        raise KeyError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: Sequence[tuple[str, bytes]]) -> bool:
        """Same protocols with the same metadata in the same order (a no-op rejoin)."""
        return list(protocols) == self.supported_protocols

    def vote(self, candidates: set[str]) -> str:
        """This member's most preferred protocol among those every member supports."""
        for name, _ in self.supported_protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    @property
    def has_satisfied_heartbeat(self) -> bool:
        """Kafka's rule: new members must heartbeat (by joining); members parked in a rebalance
        count as alive; everyone else needs a heartbeat since the last expiry was scheduled."""
        if self.is_new:
            return self.heartbeat_satisfied
        if self.awaiting_join is not None or self.awaiting_sync is not None:
            return True
        return self.heartbeat_satisfied


@dataclass(eq=False)
class GroupMetadata:
    """One group on its coordinator (Kafka's ``GroupMetadata``)."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    current_state_timestamp: int | None = None
    members: dict[str, MemberMetadata] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    pending_members: set[str] = field(default_factory=set)  # got MEMBER_ID_REQUIRED, not joined yet
    pending_sync_members: set[str] = field(default_factory=set)
    supported_protocols: Counter[str] = field(default_factory=Counter)
    num_members_awaiting_join: int = 0
    new_member_added: bool = False
    subscribed_topics: set[str] | None = None
    offsets: dict[TopicPartition, OffsetAndMetadata] = field(default_factory=dict)
    pending_offset_commits: Counter[TopicPartition] = field(default_factory=Counter)

    # -- state machine ---------------------------------------------------------------------------
    def is_state(self, *states: GroupState) -> bool:
        return self.state in states

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise RuntimeError(f"group {self.group_id}: illegal transition {self.state.value} -> {state.value}")
        self.state = state
        self.current_state_timestamp = now_ms

    def can_rebalance(self) -> bool:
        return self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY)

    # -- membership -------------------------------------------------------------------------------
    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def get(self, member_id: str) -> MemberMetadata:
        return self.members[member_id]

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def add(self, member: MemberMetadata, waiter: Waiter[JoinGroupResult] | None) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        self.supported_protocols.update(member.protocols)
        if self.leader_id is None:
            self.leader_id = member.member_id
        if waiter is not None:
            member.awaiting_join = waiter
            self.num_members_awaiting_join += 1
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self.supported_protocols.subtract(member.protocols)
            self.supported_protocols += Counter()  # drop non-positive counts
            if member.awaiting_join is not None:
                self.num_members_awaiting_join -= 1
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_members.discard(member_id)
        self.pending_sync_members.discard(member_id)

    def update_member(
        self,
        member: MemberMetadata,
        protocols: Sequence[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        waiter: Waiter[JoinGroupResult] | None,
    ) -> None:
        self.supported_protocols.subtract(member.protocols)
        self.supported_protocols += Counter()
        member.supported_protocols = list(protocols)
        self.supported_protocols.update(member.protocols)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if waiter is not None:
            if member.awaiting_join is None:
                self.num_members_awaiting_join += 1
            elif member.awaiting_join is not waiter:
                # a duplicate JoinGroup of one member: answer the superseded request so its
                # connection (responses go back in order) is not blocked behind it
                member.awaiting_join.set(JoinGroupResult(ErrorCode.REBALANCE_IN_PROGRESS, member.member_id))
            member.awaiting_join = waiter
        elif member.awaiting_join is not None:
            self.num_members_awaiting_join -= 1
            member.awaiting_join = None

    def invoke_join(self, member: MemberMetadata, result: JoinGroupResult) -> None:
        if member.awaiting_join is not None:
            member.awaiting_join.set(result)
            member.awaiting_join = None
            self.num_members_awaiting_join -= 1

    def invoke_sync(self, member: MemberMetadata, result: SyncGroupResult) -> bool:
        if member.awaiting_sync is not None:
            member.awaiting_sync.set(result)
            member.awaiting_sync = None
            return True
        return False

    def generate_member_id(self, client_id: str, group_instance_id: str | None) -> str:
        return f"{group_instance_id if group_instance_id is not None else client_id}-{uuid.uuid4()}"

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_members_awaiting_join and not self.pending_members

    def not_yet_rejoined_members(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if m.awaiting_join is None]

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # -- static membership (KIP-345) --------------------------------------------------------------
    def static_member_id(self, group_instance_id: str | None) -> str | None:
        return None if group_instance_id is None else self.static_members.get(group_instance_id)

    def is_static_member_fenced(self, group_instance_id: str | None, member_id: str) -> bool:
        """A static member whose instance id now maps to another member id (a newer instance)."""
        current = self.static_member_id(group_instance_id)
        return current is not None and current != member_id

    def replace_static_member(self, group_instance_id: str, old_member_id: str, new_member_id: str) -> MemberMetadata:
        """A restarted static member takes over its old identity; a request still parked for the
        old member id is fenced (FENCED_INSTANCE_ID)."""
        member = self.members.pop(old_member_id)
        self.invoke_join(member, JoinGroupResult(ErrorCode.FENCED_INSTANCE_ID, old_member_id))
        self.invoke_sync(member, SyncGroupResult(ErrorCode.FENCED_INSTANCE_ID))
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        self.static_members[group_instance_id] = new_member_id
        return member

    # -- protocol selection -----------------------------------------------------------------------
    def supports_protocols(self, protocol_type: str, protocols: Iterable[str]) -> bool:
        names = set(protocols)
        if self.state is GroupState.EMPTY and not self.members:
            return bool(protocol_type) and bool(names)
        return self.protocol_type == protocol_type and any(
            self.supported_protocols[p] == len(self.members) for p in names
        )

    def candidate_protocols(self) -> set[str]:
        return {p for p, n in self.supported_protocols.items() if n == len(self.members)}

    def select_protocol(self) -> str:
        """Kafka's vote: each member votes for its favourite protocol all members support; the
        most votes wins (ties: the protocol the earliest member voted for)."""
        candidates = self.candidate_protocols()
        if not candidates:
            raise RuntimeError(f"group {self.group_id}: no protocol supported by all members")
        votes = [m.vote(candidates) for m in self.members.values()]
        counts = Counter(votes)
        best = max(counts.values())
        return next(v for v in votes if counts[v] == best)

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY, now_ms)
        self.subscribed_topics = self.compute_subscribed_topics()
        self.pending_sync_members.clear()

    def compute_subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to, when the protocol is the consumer protocol (used to
        keep offsets of subscribed topics from expiring while the group is Stable)."""
        if self.protocol_type != "consumer" or self.protocol_name is None or not self.members:
            return None if self.members else set()
        from ...consumer_protocol import decode_subscription  # local: only consumer groups need it

        topics: set[str] = set()
        try:
            for m in self.members.values():
                topics.update(decode_subscription(m.metadata(self.protocol_name)).topics)
        except Exception:  # a client with non-standard metadata: fall back to "unknown"
            return None
        return topics

    def current_member_metadata(self) -> tuple[JoinGroupMember, ...]:
        assert self.protocol_name is not None
        return tuple(
            JoinGroupMember(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
            for m in self.members.values()
        )

    # -- offsets ----------------------------------------------------------------------------------
    def has_offsets(self) -> bool:
        return bool(self.offsets) or bool(+self.pending_offset_commits)
