"""ConsumerGroupHeartbeat (KIP-848): the consumer group protocol on the group coordinator.

One request does everything the classic protocol spreads over JoinGroup, SyncGroup, Heartbeat
and LeaveGroup: a member joins with epoch 0, heartbeats with its current epoch every
``group.consumer.heartbeat.interval.ms`` (what the response tells it) and leaves with -1 (a
static member with -2, keeping its partitions for its session timeout). Each heartbeat follows
Kafka's ``GroupMetadataManager.consumerGroupHeartbeat``:

1. the member is created or updated; a changed subscription (topic names, a regex matched
   against whole topic names, the assignor), or subscribed topics that appeared or gained
   partitions, bump the group epoch;
2. when the group epoch is past the target assignment's, the server-side assignor computes a
   new target (the member's ``group.remote.assignor``, else the first of
   ``group.consumer.assignors``);
3. the member's current assignment moves one step towards its target
   (:func:`.consumer_group.reconcile`), and the response carries it when it changed, when the
   member joined, or when it reported what it owns.

Timers (trio clock): a member not heard from for ``group.consumer.session.timeout.ms`` is fenced
(removed, group epoch bumped); a member that does not revoke within its rebalance timeout is
fenced too, so its partitions can move on.

Group ids are shared with classic groups: a heartbeat for a classic group that has members
upgrades it to a consumer group when ``group.consumer.migration.policy`` allows it, else gets
GROUP_ID_NOT_FOUND ("not a consumer group", as Kafka answers); classic members of a consumer
group are served by :class:`.consumer_classic.ClassicMembers`, and the last consumer-protocol
member leaving such a group downgrades it (the group coordinator's ``on_downgrade``). Every
change is marked with ``on_change`` and written by the group coordinator's
:class:`.consumer_runtime.ConsumerGroupWriter` before the request is answered. Committed
offsets of a consumer group live where classic groups keep theirs (an Empty classic
``GroupMetadata`` of the same id holds them), so OffsetCommit/OffsetFetch/OffsetDelete and
expiry work unchanged.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ...errors import ErrorCode
from ...interfaces import AssignmentMember, AssignmentTopic, ServerAssignor
from .consumer_classic import (
    CONSUMER_PROTOCOL_TYPE,
    ClassicMembers,
    MalformedProtocol,
    consumer_group_from_classic,
    downgrade_enabled,
    upgrade_enabled,
)
from .consumer_group import (
    JOIN_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroup,
    ConsumerGroupMember,
    HeartbeatError,
    MemberState,
    SubscribedTopic,
    TopicIdPartitions,
    is_subset,
    reconcile,
)
from .state import GroupMetadata, GroupState
from .timers import Timers

if TYPE_CHECKING:
    from ...config import Config
    from .metadata_manager import GroupMetadataManager

log = logging.getLogger(__name__)

#: name -> (topic id, partition count) of an existing topic, None for a topic that does not exist
TopicLookup = Callable[[str], "tuple[str, int] | None"]
#: name -> partition -> the racks of its replicas (empty: no rack known)
PartitionRacks = Callable[[str], Mapping[int, frozenset[str]]]

#: ``submit(group_id, operation, retry)``: runs a timer's operation on a group
Submit = Callable[[str, Callable[[], None], Callable[[], None]], None]


def _run_now(group_id: str, operation: Callable[[], None], retry: Callable[[], None]) -> None:
    """A coordinator without a writer (embedding, unit tests) runs timer operations at once."""
    operation()


#: how soon a timer whose write failed (its change undone) tries again (Kafka's timer retry backoff)
TIMER_RETRY_S = 0.5

CONSUMER_PROTOCOL = "consumer"
CLASSIC_PROTOCOL = "classic"


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """ConsumerGroupHeartbeat's fields, decoded (None: not sent, unchanged since last time)."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: Sequence[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    #: what the member owns (None: not reported in this heartbeat)
    owned: TopicIdPartitions | None = None
    client_id: str = ""
    client_host: str = ""
    #: v0 lets the coordinator make the member id; from v1 the client makes it
    api_version: int = 1


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    #: the member's assignment, when the response carries one
    assignment: TopicIdPartitions | None = None


def builtin_server_assignors(names: Sequence[str]) -> dict[str, ServerAssignor]:
    """The built-in assignors ``names`` picks, in order (what a coordinator made without the
    broker's plugins uses: embedding, unit tests)."""
    from ...server_assignors import RangeServerAssignor, UniformServerAssignor

    known: dict[str, type[ServerAssignor]] = {"uniform": UniformServerAssignor, "range": RangeServerAssignor}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown server assignor(s) {unknown} in group.consumer.assignors (built-in: uniform, range)")
    return {n: known[n]() for n in names}


class ConsumerGroupCoordinator:
    """The consumer groups of one group coordinator (shares its manager, timers and clock)."""

    def __init__(
        self,
        manager: GroupMetadataManager,
        timers: Timers,
        config: Config,
        now_ms: Callable[[], int],
        assignors: Mapping[str, ServerAssignor],
        topics: TopicLookup,
        all_topics: Callable[[], Iterable[str]] = tuple,
        partition_racks: PartitionRacks = lambda name: {},
    ) -> None:
        self.manager = manager
        self.timers = timers
        self.now_ms = now_ms
        self.assignors = dict(assignors)
        if not self.assignors:
            raise ValueError("group.consumer.assignors names no assignor")
        self.default_assignor = next(iter(self.assignors))
        self.topics = topics
        #: every topic a regex subscription may match (not the internal ones)
        self.all_topics = all_topics
        #: a topic's partitions -> the racks of their replicas (rack-aware assignment)
        self.partition_racks = partition_racks
        self.session_timeout_ms = int(config["group.consumer.session.timeout.ms"])
        self.heartbeat_interval_ms = int(config["group.consumer.heartbeat.interval.ms"])
        self.max_size = int(config["group.consumer.max.size"])
        self.enabled = CONSUMER_PROTOCOL in {p.lower() for p in config["group.coordinator.rebalance.protocols"]}
        self.migration_policy = str(config["group.consumer.migration.policy"]).lower()
        self.classic_max_size = int(config["group.max.size"])
        #: classic members of consumer groups (JoinGroup/SyncGroup/Heartbeat/LeaveGroup)
        self.classic = ClassicMembers(self)
        #: topic id -> name of the topics seen (classic members' assignments name topics)
        self._topic_names: dict[str, str] = {}
        #: conversions between group types, set by the group coordinator (which owns the classic
        #: groups): ``on_upgrade(classic_group, consumer_group)`` after a classic group became a
        #: consumer group, ``on_downgrade(group, leaving_member_id, rebalance)`` to turn one classic
        self.on_upgrade: Callable[[GroupMetadata, ConsumerGroup], None] = lambda classic, group: None
        self.on_downgrade: Callable[[ConsumerGroup, str, bool], None] | None = None
        #: an operation on a group was undone: what it arranged to write with it is dropped
        self.on_undo: Callable[[str], None] = lambda group_id: None
        #: called with a group after every change, a deletion included (the group coordinator's
        #: :class:`.consumer_runtime.ConsumerGroupWriter` writes the records when the operation ends)
        self.on_change: Callable[[ConsumerGroup], None] = lambda group: None
        #: runs a timer's operation on a group (``submit(group_id, operation, retry)``): the group
        #: coordinator runs it through its writer, and calls ``retry`` if the write failed (the
        #: change was undone); by default, at once and without persistence
        self.submit: Submit = _run_now

    @property
    def groups(self) -> dict[str, ConsumerGroup]:
        return self.manager.consumer_groups

    def get(self, group_id: str) -> ConsumerGroup | None:
        return self.groups.get(group_id)

    def has_active_group(self, group_id: str) -> bool:
        """Whether ``group_id`` is a consumer group with members (classic requests go to it)."""
        group = self.groups.get(group_id)
        return group is not None and bool(group.members)

    # -- the request -----------------------------------------------------------------------------
    def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResult:
        """Answer one ConsumerGroupHeartbeat (the group's coordinator was checked by the caller)."""
        before = self.groups.get(request.group_id)
        saved = before.copy() if before is not None else None
        try:
            self._validate(request)
            if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._leave(request)
            return self._heartbeat(request)
        except HeartbeatError as exc:
            # a refused heartbeat changes nothing (Kafka applies a request's records only when
            # it succeeds): the group as it was, or none if this request created it
            self.restore(request.group_id, saved)
            log.debug("ConsumerGroupHeartbeat of %s in group %s refused: %s %s", request.member_id, request.group_id,
                      exc.code.name, exc.message)  # fmt: skip
            return HeartbeatResult(exc.code, exc.message, member_epoch=0)

    def restore(self, group_id: str, saved: ConsumerGroup | None) -> None:
        """Put a group back as it was before an operation that failed (refused, or its records
        could not be written): ``saved`` is its copy from before, None when the operation
        created it. Timers follow the restored members: those the operation added lose theirs,
        those it removed or replaced get a session timeout again, and a member restored while
        revoking gets a rebalance timeout."""
        self.on_undo(group_id)
        current = self.groups.get(group_id)
        if saved is None:
            self.groups.pop(group_id, None)
        else:
            self.groups[group_id] = saved
        for member_id in current.members if current is not None else ():
            if saved is None or member_id not in saved.members:
                self._cancel_timers(group_id, member_id)
        for member_id, member in saved.members.items() if saved is not None else ():
            if ("cg-session", group_id, member_id) not in self.timers:
                self._schedule_session_timeout(group_id, member_id)
            if member.state is not MemberState.UNREVOKED_PARTITIONS or member.classic is not None:
                self._cancel_rebalance_timeout(group_id, member_id)
            elif ("cg-rebalance", group_id, member_id) not in self.timers:
                self._schedule_rebalance_timeout(group_id, member)

    def _validate(self, r: HeartbeatRequest) -> None:
        """Kafka's ``throwIfConsumerGroupHeartbeatRequestIsInvalid``."""
        if not self.enabled:
            raise HeartbeatError(
                ErrorCode.UNSUPPORTED_VERSION,
                "the consumer group protocol is disabled on this broker (group.coordinator.rebalance.protocols)",
            )
        if not r.group_id:
            raise HeartbeatError(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
        if r.api_version >= 1 and not r.member_id:
            raise HeartbeatError(ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
        if r.instance_id is not None and not r.instance_id:
            raise HeartbeatError(ErrorCode.INVALID_REQUEST, "InstanceId can't be empty.")
        if r.rack_id is not None and not r.rack_id:
            raise HeartbeatError(ErrorCode.INVALID_REQUEST, "RackId can't be empty.")
        if r.member_epoch == JOIN_GROUP_MEMBER_EPOCH:
            if r.rebalance_timeout_ms == -1:
                raise HeartbeatError(ErrorCode.INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request.")
            if r.owned is None or any(r.owned.values()):
                raise HeartbeatError(ErrorCode.INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining.")
            if r.subscribed_topic_names is None and not r.subscribed_topic_regex:
                raise HeartbeatError(
                    ErrorCode.INVALID_REQUEST,
                    "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
                )
        elif r.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if r.instance_id is None:
                raise HeartbeatError(ErrorCode.INVALID_REQUEST, "InstanceId can't be null.")
        elif r.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise HeartbeatError(ErrorCode.INVALID_REQUEST, f"MemberEpoch is invalid: {r.member_epoch}.")
        if r.subscribed_topic_regex:  # "" clears a regex (librdkafka sends it with topic names)
            try:
                re.compile(r.subscribed_topic_regex)
            except re.error as exc:
                raise HeartbeatError(
                    ErrorCode.INVALID_REGULAR_EXPRESSION, f"SubscribedTopicRegex is invalid: {exc}."
                ) from None
        if r.server_assignor is not None and r.server_assignor not in self.assignors:
            raise HeartbeatError(
                ErrorCode.UNSUPPORTED_ASSIGNOR,
                f"ServerAssignor {r.server_assignor} is not supported. Supported assignors: "
                f"{', '.join(self.assignors)}.",
            )

    # -- leaving ---------------------------------------------------------------------------------
    def _leave(self, r: HeartbeatRequest) -> HeartbeatResult:
        group = self._group(r.group_id, create=False)
        if r.instance_id is None:
            member = self._member(group, r.member_id)
            log.info("member %s left consumer group %s", r.member_id, group.group_id)
            self.fence(group, member.member_id)
        else:
            member = self._static_member(group, r.instance_id, r.member_id)
            if r.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                # it comes back within its session timeout with the same instance id and takes
                # its partitions back; until then nobody else gets them
                log.info("static member %s (%s) of group %s left temporarily", member.member_id, r.instance_id,
                         group.group_id)  # fmt: skip
                group.put_member(replace(member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, pending_revocation={}))
                self._cancel_rebalance_timeout(group.group_id, member.member_id)
                self.on_change(group)
            else:
                self.fence(group, member.member_id)
        return HeartbeatResult(ErrorCode.NONE, member_id=r.member_id, member_epoch=r.member_epoch)

    def fence(self, group: ConsumerGroup, member_id: str) -> None:
        """Remove a member (it left, or its session or rebalance timeout passed): its partitions
        are free for others, and the group epoch moves so the next heartbeat reassigns. When it
        was the last member using the consumer protocol and classic members remain, the group
        turns classic instead (Kafka's ``validateOnlineDowngradeWithFencedMember``)."""
        if self.on_downgrade is not None and self._can_downgrade(group, member_id):
            self._cancel_timers(group.group_id, member_id)
            self.downgrade(group, member_id, rebalance=True)
            return
        self.remove(group, member_id)

    def downgrade(self, group: ConsumerGroup, leaving: str, *, rebalance: bool) -> None:
        """Turn ``group`` classic without ``leaving`` (the group coordinator's ``on_downgrade``)."""
        if self.on_downgrade is not None:
            self.on_downgrade(group, leaving, rebalance)

    def can_downgrade_after_replacement(self, group: ConsumerGroup) -> bool:
        """Kafka's ``validateOnlineDowngradeWithReplacedMemberId``: a classic static member
        replaced the last member using the consumer protocol."""
        return (
            self.on_downgrade is not None
            and all(m.classic is not None for m in group.members.values())
            and self._downgrade_allowed(group, len(group.members))
        )

    def _can_downgrade(self, group: ConsumerGroup, member_id: str) -> bool:
        if not group.all_classic_except(member_id) or len(group.members) <= 1:
            return False
        return self._downgrade_allowed(group, len(group.members) - 1)

    def _downgrade_allowed(self, group: ConsumerGroup, size: int) -> bool:
        if not downgrade_enabled(self.migration_policy):
            log.info("cannot downgrade consumer group %s to a classic group: the online downgrade is disabled "
                     "(group.consumer.migration.policy=%s)", group.group_id, self.migration_policy)  # fmt: skip
            return False
        if size > self.classic_max_size:
            log.info("cannot downgrade consumer group %s to a classic group: more members than group.max.size",
                     group.group_id)  # fmt: skip
            return False
        return True

    def remove(self, group: ConsumerGroup, member_id: str) -> None:
        """Remove a member and bump the group epoch (no conversion: a classic LeaveGroup)."""
        if group.remove_member(member_id) is None:
            return
        self._cancel_timers(group.group_id, member_id)
        group.subscription_metadata = self._subscription_metadata(group)
        group.group_epoch += 1
        log.info("consumer group %s is at epoch %d without member %s", group.group_id, group.group_epoch, member_id)
        self.on_change(group)

    # -- lookups -----------------------------------------------------------------------------------
    def _group(self, group_id: str, *, create: bool) -> ConsumerGroup:
        group = self.groups.get(group_id)
        if group is not None:
            return group
        classic = self.manager.get_group(group_id)
        if classic is not None and not classic.is_state(GroupState.EMPTY, GroupState.DEAD):
            if create and self._can_upgrade(classic):
                return self._upgrade(classic)
            raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        if not create:
            raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
        group = ConsumerGroup(group_id)
        self.groups[group_id] = group
        return group

    def _can_upgrade(self, classic: GroupMetadata) -> bool:
        """Kafka's ``validateOnlineUpgrade``."""
        why = None
        if not upgrade_enabled(self.migration_policy):
            why = f"the online upgrade is disabled (group.consumer.migration.policy={self.migration_policy})"
        elif classic.protocol_type != CONSUMER_PROTOCOL_TYPE:
            why = "the group does not use the consumer embedded protocol"
        elif len(classic.members) > self.max_size:
            why = "the group size exceeds the consumer group maximum size"
        if why is not None:
            log.info("cannot upgrade classic group %s to a consumer group: %s", classic.group_id, why)
            return False
        return True

    def _upgrade(self, classic: GroupMetadata) -> ConsumerGroup:
        """Turn a classic group with members into a consumer group (Kafka's ``convertToConsumerGroup``)."""
        try:
            group = consumer_group_from_classic(classic, self.topic_id)
        except MalformedProtocol as exc:
            log.warning("cannot upgrade classic group %s: its embedded consumer protocol is malformed: %s",
                        classic.group_id, exc)  # fmt: skip
            raise HeartbeatError(
                ErrorCode.GROUP_ID_NOT_FOUND,
                f"Cannot upgrade the classic group {classic.group_id} to consumer group because the embedded "
                "consumer protocol is malformed.",
            ) from None
        group.subscription_metadata = self._subscription_metadata(group)
        self.groups[group.group_id] = group
        for member_id in group.members:
            self._schedule_session_timeout(group.group_id, member_id)
        log.info("classic group %s upgraded to a consumer group at epoch %d with %d members",
                 group.group_id, group.group_epoch, len(group.members))  # fmt: skip
        self.on_upgrade(classic, group)
        self.on_change(group)
        return group

    def topic_id(self, name: str) -> str | None:
        found = self.topics(name)
        if found is None:
            return None
        self._topic_names[found[0]] = name
        return found[0]

    def topic_name(self, topic_id: str) -> str | None:
        return self._topic_names.get(topic_id)

    @staticmethod
    def _member(group: ConsumerGroup, member_id: str) -> ConsumerGroupMember:
        member = group.members.get(member_id)
        if member is None:
            raise HeartbeatError(
                ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group.group_id}."
            )
        return member

    @staticmethod
    def _static_member(group: ConsumerGroup, instance_id: str, member_id: str) -> ConsumerGroupMember:
        current = group.static_members.get(instance_id)
        if current is None:
            raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
        if current != member_id:
            raise HeartbeatError(
                ErrorCode.FENCED_INSTANCE_ID,
                f"Static member {member_id} with instance id {instance_id} was fenced by member {current}.",
            )
        return group.members[current]

    @staticmethod
    def _check_epoch(member: ConsumerGroupMember, epoch: int, owned: TopicIdPartitions | None) -> None:
        """Kafka's ``throwIfMemberEpochIsInvalid``: an epoch ahead is fenced; one behind only
        when it is the previous epoch and the member owns no more than it is assigned (the
        response that moved it on was lost)."""
        if epoch > member.member_epoch:
            raise HeartbeatError(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"The consumer group member has a greater member epoch ({epoch}) than the one known by the group "
                f"coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.",
            )
        if epoch < member.member_epoch and (
            epoch != member.previous_member_epoch or not is_subset(owned, member.assigned)
        ):
            raise HeartbeatError(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"The consumer group member has a smaller member epoch ({epoch}) than the one known by the group "
                f"coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.",
            )

    # -- a regular heartbeat -------------------------------------------------------------------------
    def _heartbeat(self, r: HeartbeatRequest) -> HeartbeatResult:
        joining = r.member_epoch == JOIN_GROUP_MEMBER_EPOCH
        group = self._group(r.group_id, create=joining)
        member_id = r.member_id or str(uuid.uuid4())  # v0: the coordinator names new members
        if joining and member_id not in group.members and len(group.members) >= self.max_size:
            raise HeartbeatError(
                ErrorCode.GROUP_MAX_SIZE_REACHED,
                f"The consumer group has reached its maximum capacity of {self.max_size} members.",
            )
        member, replaced = self._member_for(group, r, member_id)
        updated = replace(
            member,
            instance_id=r.instance_id if r.instance_id is not None else member.instance_id,
            rack_id=r.rack_id if r.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=r.rebalance_timeout_ms
            if r.rebalance_timeout_ms != -1
            else member.rebalance_timeout_ms,
            server_assignor=r.server_assignor if r.server_assignor is not None else member.server_assignor,
            subscribed_topic_names=(
                frozenset(r.subscribed_topic_names)
                if r.subscribed_topic_names is not None
                else member.subscribed_topic_names
            ),
            subscribed_topic_regex=(
                (r.subscribed_topic_regex or None)
                if r.subscribed_topic_regex is not None
                else member.subscribed_topic_regex
            ),
            client_id=r.client_id,
            client_host=r.client_host,
        )
        changed = updated != member
        group.put_member(updated)
        bump = (
            updated.subscribed_topic_names != member.subscribed_topic_names
            or updated.subscribed_topic_regex != member.subscribed_topic_regex
            or updated.server_assignor != member.server_assignor
        )
        bump = self.advance(group, bump, replaced, member_id)
        before = group.members[member_id]
        after = reconcile(before, group.assignment_epoch, group.target.get(member_id, {}), group.owner, r.owned)
        if after != before:
            group.put_member(after)
            if after.state is MemberState.UNREVOKED_PARTITIONS:
                self._schedule_rebalance_timeout(group.group_id, after)
            else:
                self._cancel_rebalance_timeout(group.group_id, member_id)
        self._schedule_session_timeout(group.group_id, member_id)
        if changed or bump or after != before:
            self.on_change(group)
        send_assignment = r.owned is not None or joining or after.assigned != member.assigned
        return HeartbeatResult(
            ErrorCode.NONE,
            member_id=member_id,
            member_epoch=after.member_epoch,
            heartbeat_interval_ms=self.heartbeat_interval_ms,
            assignment=after.assigned if send_assignment else None,
        )

    def advance(self, group: ConsumerGroup, bump: bool, replaced: ConsumerGroupMember | None, member_id: str) -> bool:
        """Steps 1-2 of Kafka's heartbeat after a member's update (``bump``: its subscription
        changed): bump the group epoch when the subscriptions resolve to other topics too, and
        compute a new target assignment when the epoch moved past it (or a static member was
        replaced). Returns whether the epoch was bumped; raises :class:`HeartbeatError`."""
        metadata = self._subscription_metadata(group)
        if metadata != group.subscription_metadata:
            group.subscription_metadata = metadata
            bump = True
        if bump:
            group.group_epoch += 1
            log.info("consumer group %s bumped to epoch %d (member %s)", group.group_id, group.group_epoch, member_id)
        if group.group_epoch > group.assignment_epoch or replaced is not None:
            self._compute_target(group, replaced)
        return bump

    def _member_for(
        self, group: ConsumerGroup, r: HeartbeatRequest, member_id: str
    ) -> tuple[ConsumerGroupMember, ConsumerGroupMember | None]:
        """The member this heartbeat is about (created on joining) and, when a static member
        rejoins under a new member id, the old member it replaces."""
        joining = r.member_epoch == JOIN_GROUP_MEMBER_EPOCH
        if r.instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                if not joining:
                    self._member(group, member_id)  # raises UNKNOWN_MEMBER_ID
                log.info("member %s joins consumer group %s", member_id, group.group_id)
                return ConsumerGroupMember(member_id), None
            if joining and member.member_epoch != JOIN_GROUP_MEMBER_EPOCH:
                # it lost its state (fenced, restarted) and rejoins under its id: it owns nothing
                # now, so whatever it held is free, and it reconciles from scratch
                log.info("member %s rejoins consumer group %s", member_id, group.group_id)
                return replace(member, member_epoch=0, previous_member_epoch=-1, state=MemberState.STABLE,
                               assigned={}, pending_revocation={}), None  # fmt: skip
            self._check_epoch(member, r.member_epoch, r.owned)
            return member, None
        current_id = group.static_members.get(r.instance_id)
        if not joining:
            member = self._static_member(group, r.instance_id, member_id)
            self._check_epoch(member, r.member_epoch, r.owned)
            return member, None
        if current_id is None:
            log.info("static member %s (%s) joins consumer group %s", member_id, r.instance_id, group.group_id)
            return group.members.get(member_id) or ConsumerGroupMember(member_id), None
        old = group.members[current_id]
        if current_id == member_id:  # the same member rejoining: as for a dynamic member
            return replace(old, member_epoch=0, previous_member_epoch=-1, state=MemberState.STABLE,
                           assigned={}, pending_revocation={}), None  # fmt: skip
        if old.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise HeartbeatError(
                ErrorCode.UNRELEASED_INSTANCE_ID,
                f"Static member {member_id} with instance id {r.instance_id} cannot join the group because the "
                f"instance id is owned by {current_id} member.",
            )
        # the instance is back under a new member id: it takes over the old member's partitions
        log.info("static member %s (%s) rejoins consumer group %s, replacing %s",
                 member_id, r.instance_id, group.group_id, current_id)  # fmt: skip
        target = group.target.get(current_id, {})
        group.remove_member(current_id)
        self._cancel_timers(group.group_id, current_id)
        group.target[member_id] = target
        fresh = ConsumerGroupMember(
            member_id,
            instance_id=old.instance_id,
            rack_id=old.rack_id,
            rebalance_timeout_ms=old.rebalance_timeout_ms,
            subscribed_topic_names=old.subscribed_topic_names,
            server_assignor=old.server_assignor,
            subscribed_topic_regex=old.subscribed_topic_regex,
            assigned=old.assigned,
        )
        return fresh, old

    # -- the target assignment ---------------------------------------------------------------------
    def _subscription_metadata(self, group: ConsumerGroup) -> dict[str, SubscribedTopic]:
        """What the subscriptions resolve to now (regexes matched against the existing topics,
        internal ones left out, as Kafka's); a change bumps the group epoch."""
        regexes = group.regexes()
        if regexes:
            names = list(self.all_topics())
            group.resolved_regexes = {
                regex: frozenset(n for n in names if re.fullmatch(regex, n)) for regex in sorted(regexes)
            }
        else:
            group.resolved_regexes = {}
        out: dict[str, SubscribedTopic] = {}
        for name in sorted(group.subscribed_topic_names()):
            found = self.topics(name)
            if found is not None:
                out[name] = SubscribedTopic(found[0], found[1])
                self._topic_names[found[0]] = name
        return out

    def preferred_assignor(self, group: ConsumerGroup) -> str:
        """The assignor most members name (ties: the earlier in ``group.consumer.assignors``),
        else the default (Kafka's ``computePreferredServerAssignor``)."""
        votes: dict[str, int] = {}
        for m in group.members.values():
            if m.server_assignor is not None:
                votes[m.server_assignor] = votes.get(m.server_assignor, 0) + 1
        if not votes:
            return self.default_assignor
        order = list(self.assignors)
        return max(votes, key=lambda name: (votes[name], -order.index(name)))

    def _compute_target(self, group: ConsumerGroup, replaced: ConsumerGroupMember | None) -> None:
        topics = {
            t.topic_id: AssignmentTopic(t.topic_id, name, t.num_partitions, self.partition_racks(name))
            for name, t in group.subscription_metadata.items()
        }
        ids = {name: t.topic_id for name, t in group.subscription_metadata.items()}
        members = {
            m.member_id: AssignmentMember(
                m.member_id,
                m.instance_id,
                m.rack_id,
                frozenset(ids[t] for t in group.member_topics(m) if t in ids),
                group.target.get(m.member_id, {}),
            )
            for m in group.members.values()
        }
        name = self.preferred_assignor(group)
        try:
            target = self.assignors[name].assign(members, topics)
        except Exception as exc:
            log.exception("server assignor %s failed for group %s", name, group.group_id)
            raise HeartbeatError(
                ErrorCode.UNKNOWN_SERVER_ERROR,
                f"Failed to compute a new target assignment for epoch {group.group_epoch}: {exc}",
            ) from exc
        problem = _target_problem(target, members, topics)
        if problem is not None:
            log.error("server assignor %s gave group %s an invalid assignment: %s", name, group.group_id, problem)
            raise HeartbeatError(
                ErrorCode.UNKNOWN_SERVER_ERROR,
                f"Failed to compute a new target assignment for epoch {group.group_epoch}: {problem}",
            )
        group.target = {member_id: dict(target.get(member_id, {})) for member_id in group.members}
        group.assignment_epoch = group.group_epoch
        log.info("consumer group %s: target assignment for epoch %d by %s", group.group_id, group.group_epoch, name)

    # -- timers ----------------------------------------------------------------------------------------
    def schedule_fence(self, key: tuple[str, str, str], member_id: str, timeout_ms: int, why: str) -> None:
        """Fence ``member_id`` of group ``key[1]`` after ``timeout_ms`` unless ``key`` is
        cancelled or rescheduled first (classic members' sync and join timeouts)."""
        group_id = key[1]

        def fence_late() -> None:
            group = self.groups.get(group_id)
            if group is not None and member_id in group.members:
                log.info("member %s of consumer group %s fenced: it %s", member_id, group_id, why)
                self.fence(group, member_id)

        def expire() -> None:
            self.submit(group_id, fence_late, lambda: self.timers.schedule(key, TIMER_RETRY_S, expire))

        self.timers.schedule(key, timeout_ms / 1000, expire)

    def _schedule_session_timeout(self, group_id: str, member_id: str) -> None:
        key = ("cg-session", group_id, member_id)
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        timeout_ms = member.classic.session_timeout_ms if member is not None and member.classic else None

        def fence_expired() -> None:
            group = self.groups.get(group_id)
            if group is not None and member_id in group.members:
                log.info("member %s of consumer group %s fenced: its session expired", member_id, group_id)
                self.fence(group, member_id)

        def expire() -> None:  # a write that failed is tried again soon (Kafka's timer retry)
            self.submit(group_id, fence_expired, lambda: self.timers.schedule(key, TIMER_RETRY_S, expire))

        self.timers.schedule(key, (timeout_ms or self.session_timeout_ms) / 1000, expire)

    def _schedule_rebalance_timeout(self, group_id: str, member: ConsumerGroupMember) -> None:
        member_id, epoch = member.member_id, member.member_epoch
        key = ("cg-rebalance", group_id, member_id)

        def fence_late() -> None:
            group = self.groups.get(group_id)
            current = group.members.get(member_id) if group is not None else None
            if group is not None and current is not None and current.member_epoch == epoch:
                log.info("member %s of consumer group %s fenced: it did not revoke within %d ms",
                         member_id, group_id, member.rebalance_timeout_ms)  # fmt: skip
                self.fence(group, member_id)

        def expire() -> None:
            self.submit(group_id, fence_late, lambda: self.timers.schedule(key, TIMER_RETRY_S, expire))

        self.timers.schedule(key, member.rebalance_timeout_ms / 1000, expire)

    def _cancel_rebalance_timeout(self, group_id: str, member_id: str) -> None:
        self.timers.cancel(("cg-rebalance", group_id, member_id))

    def _cancel_timers(self, group_id: str, member_id: str) -> None:
        for kind in ("cg-session", "cg-sync", "cg-join"):
            self.timers.cancel((kind, group_id, member_id))
        self._cancel_rebalance_timeout(group_id, member_id)

    def delete(self, group_id: str) -> None:
        """DeleteGroups of a consumer group without members."""
        group = self.groups.get(group_id)
        if group is not None:
            self.forget(group_id)
            self.on_change(group)

    def forget(self, group_id: str) -> None:
        """Drop a group (its partition moved away, or it was deleted), cancelling its timers."""
        group = self.groups.pop(group_id, None)
        if group is not None:
            group.dead = True
            for member_id in group.members:
                self._cancel_timers(group_id, member_id)

    def on_group_loaded(self, group: ConsumerGroup) -> None:
        """Members of a group loaded from the log must heartbeat within their session timeout."""
        for member_id in group.members:
            self._schedule_session_timeout(group.group_id, member_id)


def _target_problem(
    target: object, members: Mapping[str, AssignmentMember], topics: Mapping[str, AssignmentTopic]
) -> str | None:
    """Why an assignor's result cannot be used (None: it can); the coordinator never hands out a
    partition twice, nor one of a topic the member does not subscribe to."""
    if not isinstance(target, Mapping):
        return f"it returned {type(target).__name__}, not a mapping"
    seen: set[tuple[str, int]] = set()
    for member_id, by_topic in target.items():
        if member_id not in members:
            return f"it names {member_id!r}, which is not a member"
        if not isinstance(by_topic, Mapping):
            return f"{member_id}'s assignment is {type(by_topic).__name__}, not a mapping"
        for topic_id, parts in by_topic.items():
            if topic_id not in members[member_id].subscribed_topic_ids or topic_id not in topics:
                return f"{member_id} was given topic id {topic_id}, which it does not subscribe to"
            for p in parts:
                if not isinstance(p, int) or not 0 <= p < topics[topic_id].num_partitions:
                    return f"{member_id} was given partition {p!r} of {topics[topic_id].name}, which does not exist"
                if (topic_id, p) in seen:
                    return f"partition {p} of {topics[topic_id].name} was given twice"
                seen.add((topic_id, p))
    return None


__all__ = [
    "CLASSIC_PROTOCOL",
    "CONSUMER_PROTOCOL",
    "ConsumerGroupCoordinator",
    "HeartbeatError",
    "HeartbeatRequest",
    "HeartbeatResult",
    "PartitionRacks",
    "TopicLookup",
    "builtin_server_assignors",
]
