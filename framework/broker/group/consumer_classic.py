"""Classic members in KIP-848 consumer groups, and conversions between the two group types.

KIP-848's upgrade path lets a consumer application move from ``group.protocol=classic`` to
``consumer`` one instance at a time (and back), as Kafka 4.x's ``GroupMetadataManager`` does:

- **Upgrade** (``group.consumer.migration.policy`` upgrade or bidirectional): a ConsumerGroupHeartbeat
  joining a classic group with members turns it into a consumer group
  (:func:`consumer_group_from_classic`): every classic member becomes a member using the classic
  protocol, at the generation as its epoch, keeping its assignment (the group's target), so the
  new member's arrival is an ordinary epoch bump. Kafka's refusals: a policy without upgrade, a
  group whose protocol type is not ``consumer``, more members than ``group.consumer.max.size``
  or a subscription that cannot be read leave it classic (GROUP_ID_NOT_FOUND, "not a consumer
  group").
- **Mixed groups**: classic members keep speaking JoinGroup/SyncGroup/Heartbeat/LeaveGroup
  (:class:`ClassicMembers`). JoinGroup is answered at once from the target assignment (the
  member's subscription and, for cooperative members, its owned partitions are reconciled like a
  heartbeat's; the generation is its member epoch, no leader, no member list); SyncGroup hands
  out its current assignment encoded in its subscription's version; Heartbeat answers
  REBALANCE_IN_PROGRESS when the group epoch moved past it, while it must revoke, or when
  partitions it waits for were released, so it rejoins. Timeouts: its own session timeout, a
  sync timeout and a join timeout (its rebalance timeout), each fencing it; no rebalance
  timeout while it revokes (as Kafka: it revokes by rejoining, which the join timeout bounds).
- **Downgrade** (downgrade or bidirectional): when the last member using the consumer protocol
  leaves or is fenced and classic members remain (no more than ``group.max.size``), the group
  becomes a classic group (:func:`classic_members_from_consumer`): its members, their
  protocols and their target assignments, at the group epoch as generation, then a rebalance.

Each conversion writes its records in the batch of the request or timer that caused it
(tombstones for one type, the other type's records) and touches the other type's in-memory
state only once that write succeeded.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ...consumer_protocol import Assignment, decode_assignment, decode_subscription, encode_assignment
from ...errors import ErrorCode
from ...interfaces import TopicPartition
from .consumer_group import (
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    HeartbeatError,
    MemberState,
    TopicIdPartitions,
    reconcile,
)
from .state import UNKNOWN_MEMBER_ID, GroupMetadata, JoinGroupResult, SyncGroupResult

if TYPE_CHECKING:
    from .consumer_coordinator import ConsumerGroupCoordinator

log = logging.getLogger(__name__)

CONSUMER_PROTOCOL_TYPE = "consumer"


def upgrade_enabled(policy: str) -> bool:
    return policy in ("upgrade", "bidirectional")


def downgrade_enabled(policy: str) -> bool:
    return policy in ("downgrade", "bidirectional")


class MalformedProtocol(Exception):
    """A classic member's embedded consumer protocol bytes cannot be read."""


def _subscription(protocols: Sequence[tuple[str, bytes]]) -> tuple[frozenset[str], list[TopicPartition], str | None]:
    """(topics, owned partitions, rack) of a classic member's first protocol's subscription."""
    if not protocols:
        raise MalformedProtocol("no protocols")
    try:
        sub = decode_subscription(protocols[0][1])
    except Exception as exc:
        raise MalformedProtocol(str(exc)) from exc
    return frozenset(sub.topics), list(sub.owned_partitions), sub.rack_id


def _by_id(partitions: Sequence[TopicPartition], topic_id: Callable[[str], str | None]) -> dict[str, frozenset[int]]:
    """Topic names to ids (partitions of topics that do not exist are left out)."""
    out: dict[str, set[int]] = {}
    for tp in partitions:
        tid = topic_id(tp.topic)
        if tid is not None:
            out.setdefault(tid, set()).add(tp.partition)
    return {tid: frozenset(parts) for tid, parts in out.items()}


def encode_member_assignment(
    assignment: TopicIdPartitions, protocols: Sequence[tuple[str, bytes]], topic_name: Callable[[str], str | None]
) -> bytes:
    """A ConsumerProtocolAssignment of ``assignment`` in the version of the member's
    subscription (what Kafka's ``prepareAssignment`` writes)."""
    version = int.from_bytes(protocols[0][1][:2], "big", signed=True) if protocols and len(protocols[0][1]) >= 2 else 0
    partitions = [
        TopicPartition(name, p)
        for tid, parts in sorted(assignment.items())
        if (name := topic_name(tid)) is not None
        for p in sorted(parts)
    ]
    return encode_assignment(Assignment(tuple(partitions)), max(0, version))


def consumer_group_from_classic(classic: GroupMetadata, topic_id: Callable[[str], str | None]) -> ConsumerGroup:
    """Kafka's ``ConsumerGroup.fromClassicGroup``: the members of a classic group as members
    using the classic protocol of a consumer group at epoch = generation, their assignments as
    the target (raises :class:`MalformedProtocol` for bytes that cannot be read)."""
    generation = classic.generation_id
    group = ConsumerGroup(classic.group_id, group_epoch=generation, assignment_epoch=generation)
    for m in classic.members.values():
        protocols = list(m.supported_protocols)
        if classic.protocol_name is not None and classic.protocol_name in m.protocols:
            # the group's protocol first: its subscription is the one the assignment was made from
            protocols.sort(key=lambda p: p[0] != classic.protocol_name)
        topics, _, rack = _subscription(protocols)
        try:
            assigned = _by_id(list(decode_assignment(m.assignment).partitions), topic_id)
        except Exception as exc:
            raise MalformedProtocol(str(exc)) from exc
        group.put_member(
            ConsumerGroupMember(
                m.member_id,
                instance_id=m.group_instance_id,
                rack_id=rack,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                subscribed_topic_names=topics,
                member_epoch=generation,
                previous_member_epoch=generation - 1,
                assigned=assigned,
                classic=ClassicMemberMetadata(m.session_timeout_ms, tuple(m.supported_protocols)),
            )
        )
        group.target[m.member_id] = assigned
    return group


@dataclass(frozen=True, slots=True)
class DowngradedMember:
    """A member of the classic group a consumer group turns into (Kafka's
    ``ClassicGroup.fromConsumerGroup``): its protocols and its target assignment, encoded."""

    member: ConsumerGroupMember
    protocols: tuple[tuple[str, bytes], ...]
    session_timeout_ms: int
    assignment: bytes


def classic_members_from_consumer(
    group: ConsumerGroup, leaving: str, topic_name: Callable[[str], str | None]
) -> list[DowngradedMember]:
    """The classic members ``group`` has once ``leaving`` is gone."""
    out = []
    for m in group.members.values():
        if m.member_id == leaving or m.classic is None:
            continue
        protocols = m.classic.protocols
        assignment = encode_member_assignment(group.target.get(m.member_id, {}), protocols, topic_name)
        out.append(DowngradedMember(m, protocols, m.classic.session_timeout_ms, assignment))
    return out


@dataclass(frozen=True, slots=True)
class ClassicJoin:
    """A JoinGroup to a consumer group, decoded."""

    group_id: str
    member_id: str
    instance_id: str | None
    require_known_member_id: bool
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]


class ClassicMembers:
    """JoinGroup, SyncGroup, Heartbeat and LeaveGroup of classic members in a consumer group
    (Kafka's ``classicGroup*ToConsumerGroup``). Synchronous operations on the group: the
    caller runs them through the group's writer, which persists what they changed."""

    def __init__(self, consumer: ConsumerGroupCoordinator) -> None:
        self.cc = consumer

    # -- JoinGroup ---------------------------------------------------------------------------
    def join(self, r: ClassicJoin) -> JoinGroupResult:
        cc = self.cc
        group = cc.groups[r.group_id]
        member_id = r.member_id if r.member_id != UNKNOWN_MEMBER_ID else str(uuid.uuid4())
        if (
            member_id not in group.members
            and len(group.members) >= cc.max_size
            and (r.instance_id is None or r.instance_id not in group.static_members)
        ):
            return JoinGroupResult(ErrorCode.GROUP_MAX_SIZE_REACHED, member_id)
        if not group.supports_classic_protocols(r.protocol_type, {name for name, _ in r.protocols}):
            return JoinGroupResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
        if r.require_known_member_id and r.member_id == UNKNOWN_MEMBER_ID and r.instance_id is None:
            return JoinGroupResult(ErrorCode.MEMBER_ID_REQUIRED, member_id)
        try:
            topics, owned, rack = _subscription(r.protocols)
        except MalformedProtocol as exc:
            log.info("classic member %s of consumer group %s: unreadable subscription: %s", member_id, r.group_id, exc)
            return JoinGroupResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
        member, error = self._member_for_join(group, r, member_id)
        if member is None:
            return JoinGroupResult(error, member_id)
        saved = group.copy()
        replaced = None
        if r.instance_id is not None:
            current = group.static_members.get(r.instance_id)
            if current is not None and current != member.member_id:
                replaced = group.members[current]
                # the instance is back under a new id: it takes over the old member's partitions
                target = group.target.get(current, {})
                group.remove_member(current)
                cc._cancel_timers(group.group_id, current)
                group.target[member.member_id] = target
                # Kafka copies it under the new id at epoch 0: reconciliation moves it on
                member = replace(replaced, member_id=member.member_id, member_epoch=0, previous_member_epoch=0,
                                 state=MemberState.STABLE, pending_revocation={})  # fmt: skip
        updated = replace(
            member,
            instance_id=r.instance_id if r.instance_id is not None else member.instance_id,
            rack_id=rack if rack is not None else member.rack_id,
            rebalance_timeout_ms=r.rebalance_timeout_ms,
            server_assignor=None,
            subscribed_topic_names=topics,
            client_id=r.client_id,
            client_host=r.client_host,
            classic=ClassicMemberMetadata(r.session_timeout_ms, r.protocols),
        )
        group.put_member(updated)
        joined = replaced is None and member.member_id not in saved.members
        bump = updated.subscribed_topic_names != member.subscribed_topic_names or joined
        try:
            cc.advance(group, bump, replaced, updated.member_id)
        except HeartbeatError as exc:
            cc.restore(group.group_id, saved)
            return JoinGroupResult(exc.code, member_id)
        owned_ids = _by_id(owned, cc.topic_id)
        before = group.members[updated.member_id]
        after = reconcile(before, group.assignment_epoch, group.target.get(updated.member_id, {}), group.owner,
                          owned_ids)  # fmt: skip
        group.put_member(after)
        # no rebalance timeout for a classic member (as Kafka): its join and sync timeouts bound it
        cc.timers.cancel(("cg-join", group.group_id, after.member_id))
        cc._schedule_session_timeout(group.group_id, after.member_id)
        self._schedule_sync_timeout(group.group_id, after)
        cc.on_change(group)
        if replaced is not None and replaced.classic is None and cc.can_downgrade_after_replacement(group):
            # the last consumer-protocol member was this static member's previous incarnation:
            # the group turns classic, the new incarnation holding its partitions, no rebalance
            cc.downgrade(group, "", rebalance=False)
        return JoinGroupResult(
            ErrorCode.NONE,
            after.member_id,
            after.member_epoch,
            CONSUMER_PROTOCOL_TYPE,
            r.protocols[0][0],
            leader_id="",
        )

    def _member_for_join(
        self, group: ConsumerGroup, r: ClassicJoin, member_id: str
    ) -> tuple[ConsumerGroupMember | None, ErrorCode]:
        if r.instance_id is None:
            member = group.members.get(member_id)
            if member is None:  # as Kafka, a member id it does not know joins as a new member
                return ConsumerGroupMember(member_id), ErrorCode.NONE
            if member.classic is None:
                return None, ErrorCode.UNKNOWN_MEMBER_ID  # a consumer-protocol member's id
            return member, ErrorCode.NONE
        current = group.static_members.get(r.instance_id)
        if current is None:
            return group.members.get(member_id) or ConsumerGroupMember(member_id), ErrorCode.NONE
        if r.member_id == UNKNOWN_MEMBER_ID:
            return ConsumerGroupMember(member_id), ErrorCode.NONE  # replaces the old incarnation
        if current != r.member_id:
            return None, ErrorCode.FENCED_INSTANCE_ID
        return group.members[current], ErrorCode.NONE

    # -- SyncGroup, Heartbeat ----------------------------------------------------------------
    def _validate(
        self, group: ConsumerGroup, member_id: str, instance_id: str | None, generation_id: int
    ) -> tuple[ConsumerGroupMember | None, ErrorCode]:
        """Kafka's ``validateConsumerGroupMember``, classic protocol and generation checks."""
        if instance_id is None:
            member = group.members.get(member_id)
        else:
            current = group.static_members.get(instance_id)
            if current is None:
                return None, ErrorCode.UNKNOWN_MEMBER_ID
            if current != member_id:
                return None, ErrorCode.FENCED_INSTANCE_ID
            member = group.members[current]
        if member is None or member.classic is None:
            return None, ErrorCode.UNKNOWN_MEMBER_ID
        if member.member_epoch != generation_id:
            return None, ErrorCode.ILLEGAL_GENERATION
        return member, ErrorCode.NONE

    def _rejoin_needed(self, group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
        return (
            member.member_epoch < group.group_epoch
            or member.state is MemberState.UNREVOKED_PARTITIONS
            or (member.state is MemberState.UNRELEASED_PARTITIONS and not group.waiting_on_unreleased(member))
        )

    def sync(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        generation_id: int,
        protocol_type: str | None,
        protocol_name: str | None,
    ) -> SyncGroupResult:
        cc = self.cc
        group = cc.groups[group_id]
        member, error = self._validate(group, member_id, instance_id, generation_id)
        if member is None or member.classic is None:
            return SyncGroupResult(error)
        if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE) or (
            protocol_name is not None and protocol_name != member.classic.protocol_name
        ):
            return SyncGroupResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if group.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
            self._schedule_join_timeout(group_id, member)
            return SyncGroupResult(ErrorCode.REBALANCE_IN_PROGRESS)
        cc.timers.cancel(("cg-sync", group_id, member.member_id))
        cc._schedule_session_timeout(group_id, member.member_id)
        assignment = encode_member_assignment(member.assigned, member.classic.protocols, cc.topic_name)
        return SyncGroupResult(ErrorCode.NONE, assignment, CONSUMER_PROTOCOL_TYPE, member.classic.protocol_name)

    def heartbeat(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int) -> ErrorCode:
        cc = self.cc
        group = cc.groups[group_id]
        member, error = self._validate(group, member_id, instance_id, generation_id)
        if member is None:
            return error
        cc._schedule_session_timeout(group_id, member.member_id)
        if self._rejoin_needed(group, member):
            self._schedule_join_timeout(group_id, member)
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    # -- LeaveGroup --------------------------------------------------------------------------
    def leave(self, group_id: str, members: Sequence[tuple[str, str | None]]) -> list[ErrorCode]:
        """Kafka's ``classicGroupLeaveToConsumerGroup``: each classic member named leaves."""
        cc = self.cc
        group = cc.groups[group_id]
        errors = []
        for member_id, instance_id in members:
            if instance_id is None:
                member = group.members.get(member_id)
            else:
                current = group.static_members.get(instance_id)
                member = group.members.get(current) if current is not None else None
                if member is not None and member_id != UNKNOWN_MEMBER_ID and member.member_id != member_id:
                    errors.append(ErrorCode.FENCED_INSTANCE_ID)
                    continue
            if member is None or member.classic is None:
                errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
                continue
            log.info("classic member %s left consumer group %s", member.member_id, group_id)
            cc.remove(group, member.member_id)
            errors.append(ErrorCode.NONE)
        return errors

    # -- timers -------------------------------------------------------------------------------
    def _schedule_sync_timeout(self, group_id: str, member: ConsumerGroupMember) -> None:
        self._fence_after(("cg-sync", group_id, member.member_id), member, "did not sync within its rebalance timeout")

    def _schedule_join_timeout(self, group_id: str, member: ConsumerGroupMember) -> None:
        key = ("cg-join", group_id, member.member_id)
        if key not in self.cc.timers:
            self._fence_after(key, member, "did not rejoin within its rebalance timeout")

    def _fence_after(self, key: tuple[str, str, str], member: ConsumerGroupMember, why: str) -> None:
        self.cc.schedule_fence(key, member.member_id, member.rebalance_timeout_ms, why)


__all__ = [
    "ClassicJoin",
    "ClassicMembers",
    "DowngradedMember",
    "MalformedProtocol",
    "classic_members_from_consumer",
    "consumer_group_from_classic",
    "downgrade_enabled",
    "encode_member_assignment",
    "upgrade_enabled",
]
