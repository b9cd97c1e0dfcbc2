"""The broker's :class:`GroupCoordinator`: membership, offsets, admin APIs, loading, expiry.

One coordinator per broker. It owns the groups of the ``__consumer_offsets`` partitions this
broker leads (all of them on a single node): on start it reloads them from the log, answering
COORDINATOR_LOAD_IN_PROGRESS for their groups until done, and it follows leadership changes (a
partition led here is loaded, one led elsewhere is given up); the topic itself is created on the
first FindCoordinator, as Kafka does. A periodic task removes offsets past
``offsets.retention.minutes`` (``offsets.retention.check.interval.ms``), and the offsets of a
deleted topic go when the metadata cache sees the deletion (:meth:`GroupCoordinator.on_topic_deleted`).

Transports hold it as ``broker.group_coordinator`` and call it with decoded requests; see
:mod:`odradek.broker.group.coordinator` for the membership protocol it inherits.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import trio

from ...errors import ErrorCode
from ...interfaces import TopicPartition
from ..internal_topic import PartitionLeader
from ..load_failures import FailedLoads
from .consumer_classic import ClassicJoin, classic_members_from_consumer
from .consumer_coordinator import (
    ConsumerGroupCoordinator,
    HeartbeatRequest,
    HeartbeatResult,
    PartitionRacks,
    TopicLookup,
    builtin_server_assignors,
)
from .consumer_group import ConsumerGroup
from .consumer_runtime import ConsumerGroupWriter
from .coordinator import MembershipProtocol
from .metadata_manager import GroupMetadataManager, PartitionOffset
from .offsets_log import OFFSETS_TOPIC
from .schema import group_key, group_value
from .state import GroupMetadata, GroupState, JoinGroupResult, MemberMetadata, OffsetAndMetadata, SyncGroupResult

if TYPE_CHECKING:
    from ...config import Config
    from ...interfaces import ServerAssignor
    from .offsets_log import OffsetsLog

log = logging.getLogger(__name__)

T = TypeVar("T")

#: how often the coordinator checks which ``__consumer_offsets`` partitions this broker leads
OWNERSHIP_REFRESH_S = 0.5
#: how long FindCoordinator waits for the load of its group's partition before it answers (the
#: group's requests then get COORDINATOR_LOAD_IN_PROGRESS until the load ends, and clients retry)
FIND_COORDINATOR_LOAD_WAIT_S = 1.0
#: the protocol type of Kafka consumers' groups (the subscriptions the coordinator can read)
CONSUMER_PROTOCOL_TYPE = "consumer"


@dataclass(frozen=True, slots=True)
class FindCoordinatorResult:
    error: ErrorCode
    node_id: int = -1
    host: str = ""
    port: int = -1
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """DescribeGroups for one group, as Kafka 4.x's coordinator answers v6: a group that is not a
    classic one (a KIP-848 consumer group, mixed or not) or none at all is GROUP_ID_NOT_FOUND in
    state "Dead" with a message; the handler turns that into "Dead" without error for v0-v5."""

    group_id: str
    error: ErrorCode
    state: str = GroupState.DEAD.value
    protocol_type: str = ""
    protocol: str = ""
    members: tuple[MemberDescription, ...] = ()
    error_message: str | None = None


#: Kafka's names of a group joined with JoinGroup/SyncGroup and of a KIP-848 group
#: (``GroupType.CLASSIC``, ``GroupType.CONSUMER``); ListGroups v5 reports and filters by them
CLASSIC_GROUP_TYPE = "classic"
CONSUMER_GROUP_TYPE = "consumer"


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = CLASSIC_GROUP_TYPE


class GroupCoordinator(MembershipProtocol):
    """Kafka's group coordinator over an :class:`~.offsets_log.OffsetsLog`."""

    def __init__(
        self,
        offsets_log: OffsetsLog,
        config: Config,
        *,
        node_id: int | None = None,
        now_ms: Callable[[], int] | None = None,
        server_assignors: Mapping[str, ServerAssignor] | None = None,
        topics: TopicLookup | None = None,
        all_topics: Callable[[], Iterable[str]] = tuple,
        partition_racks: PartitionRacks = lambda name: {},
    ) -> None:
        super().__init__(GroupMetadataManager(offsets_log, config, self._now), config, now_ms)
        #: KIP-848 consumer groups (ConsumerGroupHeartbeat); ``topics`` resolves subscribed topic
        #: names and ``all_topics`` lists what regexes may match (the broker passes its metadata
        #: cache; ``partition_racks`` its replicas' racks), ``server_assignors`` are the
        #: ``group.consumer.assignors`` (the built-ins when not given)
        self.consumer = ConsumerGroupCoordinator(
            self.manager,
            self.timers,
            config,
            self.now_ms,
            server_assignors
            if server_assignors is not None
            else builtin_server_assignors(list(config["group.consumer.assignors"])),
            topics if topics is not None else (lambda name: None),
            all_topics,
            partition_racks,
        )
        #: a consumer group's changes reach ``__consumer_offsets`` before the request is answered
        self.consumer_writer = ConsumerGroupWriter(self.manager, self.consumer.restore)
        self.consumer.on_change = self.consumer_writer.mark
        self.consumer.submit = self._submit_consumer_operation
        self.consumer.on_upgrade = self._on_upgrade
        self.consumer.on_downgrade = self._on_downgrade
        self.consumer.on_undo = self.consumer_writer.discard
        self.log = offsets_log
        self.node_id = config.broker_id if node_id is None else node_id
        self.retention_check_interval_ms = int(config["offsets.retention.check.interval.ms"])
        self._ownership_lock = trio.Lock()
        #: the leader epoch each owned partition was loaded under
        self._loaded_epochs: dict[int, int] = {}
        #: partitions being loaded in the background (by :meth:`refresh_ownership`): set when done
        #: partitions loading in the background: the event set when the load ends, and its
        #: cancel scope (a load under a leadership that ended is cancelled, never installed)
        self._loads: dict[int, tuple[trio.Event, trio.CancelScope]] = {}
        #: partitions whose last load failed, and how each was logged
        self._failed_loads = FailedLoads(log, OFFSETS_TOPIC)

    def _now(self) -> int:
        return self.now_ms()

    def partition_for(self, group_id: str) -> int:
        return self.manager.partition_for(group_id)

    # -- lifecycle -----------------------------------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Load the owned partitions (in the background), serve, expire offsets; until cancelled."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await nursery.start(self.timers.run)
                to_load = await self._partitions_to_own() if await self.log.exists() else {}
                self.manager.loading.update(to_load)  # before serving: their groups answer "loading"
                self.active = True
                task_status.started()
                for partition, leader_epoch in sorted(to_load.items()):
                    self._loaded_epochs[partition] = leader_epoch
                    self._start_load(partition)  # a read that fails is retried, not fatal
                nursery.start_soon(self._expire_offsets_loop)
                nursery.start_soon(self._ownership_loop)
        finally:
            self.active = False
            self._nursery = None

    def _submit_consumer_operation(
        self, group_id: str, operation: Callable[[], None], retry: Callable[[], None]
    ) -> None:
        """A consumer group timer fired: run its operation through the writer in the background
        (``retry`` when its write failed, as Kafka's coordinator timers retry)."""

        async def run() -> None:
            try:
                _, error = await self.consumer_writer.run(group_id, operation)
            except Exception:  # a broken expiry must not stop the coordinator (as Timers.run)
                log.exception("consumer group %s: a timer's operation failed", group_id)
                return
            if error != ErrorCode.NONE and group_id in self.manager.consumer_groups:
                retry()

        if self._nursery is None:  # stopped: nothing is written any more
            return
        self._spawn(run)

    async def _partitions_to_own(self) -> dict[int, int]:
        """The partitions this broker leads, with their leader epochs."""
        leaders = await self.log.leaders()
        return {p: node.leader_epoch for p, node in leaders.items() if node.node_id == self.node_id}

    async def _load(self, partition: int) -> None:
        started = trio.current_time()
        count = await self.manager.load_partition(partition, self.on_group_loaded, self.consumer.on_group_loaded)
        if count:
            log.info(
                "loaded %d groups from %s-%d in %.0f ms",
                count, OFFSETS_TOPIC, partition, (trio.current_time() - started) * 1000,
            )  # fmt: skip

    async def refresh_ownership(self) -> None:
        """Own the ``__consumer_offsets`` partitions this broker now leads (their loads start in
        the background: :meth:`wait_for_loads`), and forget the groups of partitions it no longer
        leads. Called after the topic is created and
        whenever leadership may have moved."""
        async with self._ownership_lock:
            leaders = await self.log.leaders()
            mine = {p for p, node in leaders.items() if node.node_id == self.node_id}
            # only a leader elsewhere moves a partition away; "no leader right now" keeps the
            # groups. A new leader epoch here means the leadership went away and came back
            # between two checks: commits made on the other leader meanwhile are in the log,
            # not in the cached groups, so the partition is loaded again (as the transaction
            # coordinator does)
            moved = {
                p
                for p in self.manager.owned | self.manager.loading
                if p in leaders and (p not in mine or self._loaded_epochs.get(p) != leaders[p].leader_epoch)
            }
            for partition in sorted(moved):
                self.on_resigned(partition)
            for partition in sorted(mine - self.manager.owned - self.manager.loading):
                self.manager.loading.add(partition)
                self._loaded_epochs[partition] = leaders[partition].leader_epoch
                self._start_load(partition)

    def _start_load(self, partition: int) -> None:
        """Load ``partition`` in the coordinator's nursery: the ownership lock is not held for
        the load, so FindCoordinator of other partitions is answered meanwhile (as Kafka's
        ``onElection`` schedules the load), and several partitions load side by side. A load
        that fails leaves the partition unowned; the next ownership check tries again."""
        assert self._nursery is not None, "the coordinator is not running"
        done, scope = trio.Event(), trio.CancelScope()
        self._loads[partition] = (done, scope)

        async def load() -> None:
            try:
                with scope:  # cancelled by on_resigned: the leadership this load was for is over
                    await self._load(partition)
                    self._failed_loads.loaded(partition)
            except Exception as exc:  # retried every ownership check
                self._failed_loads.failed(partition, exc, trio.current_time())
            finally:
                if self._loads.get(partition, (None,))[0] is done:
                    del self._loads[partition]
                done.set()

        self._nursery.start_soon(load)

    async def wait_for_loads(self) -> None:
        """Until the loads started so far have ended (embedded use and tests)."""
        for done, _ in list(self._loads.values()):
            await done.wait()

    def on_resigned(self, partition: int) -> None:
        """This broker stopped leading ``partition``: drop its groups (members get NOT_COORDINATOR
        on their next request and find the new coordinator)."""
        self.manager.owned.discard(partition)
        self._loaded_epochs.pop(partition, None)
        load = self._loads.get(partition)
        if load is not None:
            load[1].cancel()
        self.manager.forget_pending_txn(partition)
        for group in list(self.manager.groups.values()):
            if self.manager.partition_for(group.group_id) == partition:
                for member in list(group.members.values()):
                    self._cancel_heartbeat(group, member.member_id)
                self.timers.cancel(("join", group.group_id))
                self.timers.cancel(("sync", group.group_id))
                group.transition_to(GroupState.DEAD, self.now_ms())
                for member in group.members.values():
                    group.invoke_sync(member, SyncGroupResult(ErrorCode.NOT_COORDINATOR))
                    group.invoke_join(member, JoinGroupResult(ErrorCode.NOT_COORDINATOR, member.member_id))
                del self.manager.groups[group.group_id]
                self._store_failures.pop(group.group_id, None)  # a later load starts without backoff
        for group_id in [g for g in self.manager.consumer_groups if self.manager.partition_for(g) == partition]:
            self.consumer.forget(group_id)
            self.manager.consumer_written.pop(group_id, None)

    async def _ownership_loop(self) -> None:
        """Follow leadership of ``__consumer_offsets``: at start this broker leads nothing until it
        is registered and elected, and in a cluster leadership moves."""
        while True:
            await trio.sleep(OWNERSHIP_REFRESH_S)
            try:
                if await self.log.exists():
                    await self.refresh_ownership()
            except Exception as exc:  # the metadata store away, say: the next check tries again
                log.warning("checking the ownership of %s failed: %r; retrying", OFFSETS_TOPIC, exc)

    async def _expire_offsets_loop(self) -> None:
        while True:
            await trio.sleep(self.retention_check_interval_ms / 1000)
            removed = await self.manager.expire_offsets()
            if removed:
                log.info("removed %d expired offsets", removed)

    # -- FindCoordinator ------------------------------------------------------------------------------
    async def find_coordinator(
        self, group_id: str, listener_name: str | None = None, *, load_wait_until: float | None = None
    ) -> FindCoordinatorResult:
        """The leader of the group's ``__consumer_offsets`` partition (creating the topic on
        first use, as Kafka does); COORDINATOR_NOT_AVAILABLE while there is none. A load of the
        partition here is waited for until ``load_wait_until`` (trio time; by default
        FIND_COORDINATOR_LOAD_WAIT_S from now: a batch of keys passes one deadline for all)."""
        if not self.active:
            return FindCoordinatorResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message="coordinator not started")
        if not await self.log.exists() and not await self.log.ensure_topic():
            return FindCoordinatorResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message="creating offsets topic")
        partition = self.partition_for(group_id)
        leaders = await self.log.leaders(listener_name)
        node: PartitionLeader | None = leaders.get(partition)
        if node is None:
            return FindCoordinatorResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message="no leader")
        if node.node_id == self.node_id:
            if partition not in self.manager.owned | self.manager.loading:
                await self.refresh_ownership()
            load = self._loads.get(partition)
            if load is not None:  # a short load (a new or small partition) is waited out
                if load_wait_until is None:
                    load_wait_until = trio.current_time() + FIND_COORDINATOR_LOAD_WAIT_S
                with trio.move_on_at(load_wait_until):
                    await load[0].wait()
        return FindCoordinatorResult(ErrorCode.NONE, node.node_id, node.host, node.port)

    # -- OffsetFetch -----------------------------------------------------------------------------------
    def fetch_offsets(
        self,
        group_id: str,
        partitions: Sequence[TopicPartition] | None,
        require_stable: bool = False,
        *,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> tuple[ErrorCode, dict[TopicPartition, PartitionOffset]]:
        """Committed offsets of ``partitions`` (all the group has when None). OffsetFetch v9
        names the member (KIP-848): a consumer group's member must be known and at its epoch
        (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH), as Kafka's ``validateOffsetFetch`` checks."""
        error = self.validate_group(group_id, allow_empty=True)
        if error is None and member_id is not None and member_epoch >= 0:
            consumer_group = self.manager.consumer_groups.get(group_id)
            if consumer_group is not None:
                error = self._check_consumer_member(
                    consumer_group, member_id, member_epoch, ErrorCode.STALE_MEMBER_EPOCH
                )
        if error is not None:
            return error, {tp: PartitionOffset(error=error) for tp in partitions or ()}
        return ErrorCode.NONE, self.manager.get_offsets(group_id, partitions, require_stable)

    # -- KIP-848 consumer groups -------------------------------------------------------------------------
    # -- online migration between the classic and consumer protocols (KIP-848) -----------------
    def _on_upgrade(self, classic: GroupMetadata, group: ConsumerGroup) -> None:
        """A classic group became a consumer group: its record goes (a tombstone in the same
        batch), and once written its members' pending joins and syncs are told to rejoin and
        its classic timers stop; it stays, Empty, as the holder of the group's offsets."""

        def retire() -> None:
            for member in list(classic.members.values()):
                self._cancel_heartbeat(classic, member.member_id)
                classic.invoke_join(member, JoinGroupResult(ErrorCode.REBALANCE_IN_PROGRESS, member.member_id))
                classic.invoke_sync(member, SyncGroupResult(ErrorCode.REBALANCE_IN_PROGRESS))
            self.timers.cancel(("join", classic.group_id))
            self.timers.cancel(("sync", classic.group_id))
            classic.members.clear()
            classic.static_members.clear()
            classic.pending_members.clear()
            classic.pending_sync_members.clear()
            classic.supported_protocols.clear()
            classic.num_members_awaiting_join = 0
            classic.leader_id = None
            classic.protocol_name = None
            classic.state, classic.current_state_timestamp = GroupState.EMPTY, self.now_ms()

        self.consumer_writer.after_write(group.group_id, [(group_key(group.group_id), None)], retire)

    def _on_downgrade(self, group: ConsumerGroup, leaving: str, rebalance: bool) -> None:
        """The last consumer-protocol member of ``group`` leaves and classic members remain: the
        group becomes a classic group at generation = group epoch with their target assignments
        (Kafka's ``convertToClassicGroup``), written with the consumer group's tombstones; once
        written it is installed and, when a member left, rebalances, so its members rejoin as a
        classic group."""
        members = classic_members_from_consumer(group, leaving, self.consumer.topic_name)
        classic = GroupMetadata(
            group.group_id,
            GroupState.STABLE,
            group.group_epoch,
            CONSUMER_PROTOCOL_TYPE,
            current_state_timestamp=self.now_ms(),
        )
        for d in members:
            m = d.member
            metadata = MemberMetadata(
                m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                d.session_timeout_ms, CONSUMER_PROTOCOL_TYPE, list(d.protocols), assignment=d.assignment,
            )  # fmt: skip
            classic.add(metadata, None)
        classic.protocol_name = classic.select_protocol()
        classic.subscribed_topics = classic.compute_subscribed_topics()
        assignments = {d.member.member_id: d.assignment for d in members}
        record = (group_key(group.group_id), group_value(self.manager.group_record(classic, assignments)))
        self.consumer.forget(group.group_id)
        self.consumer.on_change(group)  # the consumer group's records become tombstones
        log.info("consumer group %s downgraded to a classic group at generation %d with %d members",
                 group.group_id, classic.generation_id, len(members))  # fmt: skip

        def install() -> None:
            # the Empty classic group holding the offsets takes the members (commits under way
            # still find it), else the new one is the group
            holder = self.manager.get_group(group.group_id)
            if holder is None or holder.is_state(GroupState.DEAD):
                self.manager.groups[group.group_id] = holder = classic
            else:
                holder.generation_id = classic.generation_id
                holder.protocol_type = classic.protocol_type
                holder.protocol_name = classic.protocol_name
                holder.leader_id = classic.leader_id
                holder.members = classic.members
                holder.static_members = classic.static_members
                holder.supported_protocols = classic.supported_protocols
                holder.subscribed_topics = classic.subscribed_topics
                # set, not transitioned: like a group loaded from its record, it is Stable at once
                holder.state, holder.current_state_timestamp = GroupState.STABLE, self.now_ms()
            for member in holder.members.values():
                self.complete_and_schedule_heartbeat(holder, member)
            if rebalance:  # a member left; a static member's new incarnation keeps the assignment
                self._prepare_rebalance(holder, f"downgrade of consumer group {group.group_id} to a classic group")

        self.consumer_writer.after_write(group.group_id, [record], install)

    def _active_consumer_group(self, group_id: str) -> bool:
        return self.validate_group(group_id) is None and self.consumer.has_active_group(group_id)

    async def consumer_group_join(self, join: ClassicJoin) -> JoinGroupResult | None:
        """JoinGroup to a consumer group with members: a classic member of it (answered from
        the target assignment, KIP-848's migration). An Empty consumer group gives way (it is
        deleted, its tombstones written first, as Kafka turns an empty consumer group into a
        classic one when a classic member joins; its committed offsets stay with the classic
        group); None: the classic protocol answers."""
        group_id = join.group_id
        result, error = await self._classic_in_consumer_group(group_id, lambda: self.consumer.classic.join(join))
        if error != ErrorCode.NONE:
            return JoinGroupResult(error, join.member_id)
        if result is not None:
            return result
        if group_id in self.manager.consumer_groups and not self.consumer.has_active_group(group_id):
            _, error = await self.delete_consumer_group(group_id)
            if error != ErrorCode.NONE:
                return JoinGroupResult(error, join.member_id)
        return None

    def _in_consumer_group(self, group_id: str, operation: Callable[[], T]) -> T | None:
        """``operation`` if ``group_id`` is (still) a consumer group with members, else None."""
        return operation() if self.consumer.has_active_group(group_id) else None

    async def _classic_in_consumer_group(self, group_id: str, operation: Callable[[], T]) -> tuple[T | None, ErrorCode]:
        """Run a classic member's request in the consumer group ``group_id`` when it is one with
        members (after the group's writes under way): (its answer or None, the write error)."""
        await self.consumer_writer.settled(group_id)
        if not self._active_consumer_group(group_id):
            return None, ErrorCode.NONE
        return await self.consumer_writer.run(group_id, lambda: self._in_consumer_group(group_id, operation))

    async def consumer_group_sync(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int,
        protocol_type: str | None, protocol_name: str | None,
    ) -> SyncGroupResult | None:  # fmt: skip
        result, error = await self._classic_in_consumer_group(group_id, lambda: self.consumer.classic.sync(
            group_id, member_id, group_instance_id, generation_id, protocol_type, protocol_name))  # fmt: skip
        return SyncGroupResult(error) if error != ErrorCode.NONE else result

    async def member_heartbeat(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        """Heartbeat of a classic member, in a classic group or in a consumer group."""
        result, error = await self._classic_in_consumer_group(
            group_id, lambda: self.consumer.classic.heartbeat(group_id, member_id, group_instance_id, generation_id)
        )
        if error != ErrorCode.NONE:
            return error
        return result if result is not None else self.heartbeat(group_id, member_id, group_instance_id, generation_id)

    async def member_leave(
        self, group_id: str, members: Sequence[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """LeaveGroup of classic members, of a classic group or of a consumer group."""
        result, error = await self._classic_in_consumer_group(
            group_id, lambda: self.consumer.classic.leave(group_id, members)
        )
        if error != ErrorCode.NONE:
            return error, [error] * len(members)
        return (ErrorCode.NONE, result) if result is not None else self.leave_group(group_id, members)

    async def delete_consumer_group(self, group_id: str) -> tuple[None, ErrorCode]:
        """Delete a consumer group and write its tombstones (kept when they cannot be written)."""
        return await self.consumer_writer.run(group_id, lambda: self.consumer.delete(group_id))

    async def consumer_group_heartbeat(self, request: HeartbeatRequest) -> HeartbeatResult:
        """ConsumerGroupHeartbeat: placement checks (NOT_COORDINATOR, ...), then the protocol;
        answered once the records it generated are in ``__consumer_offsets`` (a failed write
        undoes the change and answers its error, as Kafka's coordinator runtime)."""
        error = self.validate_group(request.group_id)
        if error is not None and request.group_id:
            return HeartbeatResult(error)
        result, error = await self.consumer_writer.run(request.group_id, lambda: self.consumer.heartbeat(request))
        if result is None:
            return HeartbeatResult(error, f"The coordinator could not store the group's new state: {error.name}.")
        return result

    def describe_consumer_group(self, group_id: str) -> tuple[ErrorCode, str | None, ConsumerGroup | None]:
        """ConsumerGroupDescribe: (error, message, the group); a classic group or none at all
        is GROUP_ID_NOT_FOUND, as Kafka answers (clients then fall back to DescribeGroups)."""
        error = self.validate_group(group_id, allow_empty=True)
        if error is not None:
            return error, None, None
        group = self.manager.consumer_groups.get(group_id)
        if group is None:
            classic = self.manager.get_group(group_id)
            message = f"Group {group_id} is not a consumer group." if classic is not None else None
            return ErrorCode.GROUP_ID_NOT_FOUND, message or f"Group {group_id} not found.", None
        return ErrorCode.NONE, None, group

    @staticmethod
    def _check_consumer_member(
        group: ConsumerGroup, member_id: str, member_epoch: int, stale: ErrorCode
    ) -> ErrorCode | None:
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return stale
        return None

    def _validate_consumer_commit(
        self, group: ConsumerGroup, member_id: str, member_epoch: int, *, transactional: bool, api_version: int | None
    ) -> ErrorCode | None:
        """Kafka's ``ConsumerGroup.validateOffsetCommit``: without a member epoch only into a
        group without members (admin tools, ``assign()`` users); a member's commit needs
        OffsetCommit v9+ and its current epoch (STALE_MEMBER_EPOCH; ILLEGAL_GENERATION for
        TxnOffsetCommit, which older producers understand)."""
        if member_epoch < 0 and not group.members:
            return None
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member.classic is not None:  # a classic member commits with its generation (= epoch)
            return None if member_epoch == member.member_epoch else ErrorCode.ILLEGAL_GENERATION
        if not transactional and api_version is not None and api_version < 9:
            return ErrorCode.UNSUPPORTED_VERSION
        stale = ErrorCode.ILLEGAL_GENERATION if transactional else ErrorCode.STALE_MEMBER_EPOCH
        return self._check_consumer_member(group, member_id, member_epoch, stale)

    def validate_offset_commit(
        self, group: GroupMetadata, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode | None:
        """TxnOffsetCommit's check (OffsetCommit goes through :meth:`commit_offsets`)."""
        consumer_group = self.manager.consumer_groups.get(group.group_id)
        if consumer_group is not None:
            return self._validate_consumer_commit(
                consumer_group, member_id, generation_id, transactional=True, api_version=None
            )
        return super().validate_offset_commit(group, generation_id, member_id, group_instance_id)

    async def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        *,
        api_version: int | None = None,
    ) -> dict[TopicPartition, ErrorCode]:
        """OffsetCommit; for a KIP-848 group ``generation_id`` is the member epoch (v9+)."""
        consumer_group = self.manager.consumer_groups.get(group_id)
        if consumer_group is None or self.validate_group(group_id, allow_empty=True) is not None:
            return await super().commit_offsets(group_id, member_id, group_instance_id, generation_id, offsets)
        error = self._validate_consumer_commit(
            consumer_group, member_id, generation_id, transactional=False, api_version=api_version
        )
        if error is not None:
            return dict.fromkeys(offsets, error)
        holder = self.manager.get_group(group_id) or self.manager.add_group(
            GroupMetadata(group_id, current_state_timestamp=self.now_ms())
        )
        return await self.manager.store_offsets(holder, offsets)

    # -- admin APIs ------------------------------------------------------------------------------------
    def describe_group(self, group_id: str) -> GroupDescription:
        """DescribeGroups for one group as of v6 (see :class:`GroupDescription`)."""
        error = self.validate_group(group_id, allow_empty=True)
        if error is not None:
            return GroupDescription(group_id, error)
        if group_id in self.manager.consumer_groups:
            # Kafka 4.x's message; clients describe it with ConsumerGroupDescribe instead
            message = f"Group {group_id} is not a classic group."
            return GroupDescription(group_id, ErrorCode.GROUP_ID_NOT_FOUND, error_message=message)
        group = self.manager.get_group(group_id)
        if group is None:
            return GroupDescription(
                group_id, ErrorCode.GROUP_ID_NOT_FOUND, error_message=f"Group {group_id} not found."
            )
        stable = group.is_state(GroupState.STABLE) and group.protocol_name is not None
        members = tuple(
            MemberDescription(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.metadata(group.protocol_name) if stable and group.protocol_name is not None else b"",
                m.assignment if stable else b"",
            )
            for m in group.members.values()
        )
        return GroupDescription(
            group_id,
            ErrorCode.NONE,
            group.state.value,
            group.protocol_type or "",
            (group.protocol_name or "") if stable else "",
            members,
        )

    def list_groups(self, states: Sequence[str] = (), types: Sequence[str] = ()) -> tuple[ErrorCode, list[ListedGroup]]:
        """Groups of the owned partitions, classic and KIP-848 ``consumer`` ones; ``states``
        (ListGroups v4) and ``types`` (v5, KIP-848) filter, case-insensitively."""
        if not self.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        wanted = {s.lower() for s in states}
        kinds = {t.lower() for t in types} or {CLASSIC_GROUP_TYPE, CONSUMER_GROUP_TYPE}
        consumer_groups = self.manager.consumer_groups
        groups = []
        if CLASSIC_GROUP_TYPE in kinds:
            groups += [
                ListedGroup(g.group_id, g.protocol_type or "", g.state.value)
                for g in self.manager.local_groups()
                if g.group_id not in consumer_groups and (not wanted or g.state.value.lower() in wanted)
            ]
        if CONSUMER_GROUP_TYPE in kinds:
            groups += [
                ListedGroup(g.group_id, CONSUMER_PROTOCOL_TYPE, g.state.value, CONSUMER_GROUP_TYPE)
                for g in consumer_groups.values()
                if self.manager.is_local(g.group_id) and (not wanted or g.state.value.lower() in wanted)
            ]
        return self._list_error(), groups

    def _list_error(self) -> ErrorCode:
        """ListGroups' top-level error: the groups of partitions still loading are missing."""
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self.manager.loading else ErrorCode.NONE

    async def delete_groups(self, group_ids: Sequence[str]) -> dict[str, ErrorCode]:
        """Delete empty groups with their offsets (tombstones in ``__consumer_offsets``)."""
        result: dict[str, ErrorCode] = {}
        eligible: list[GroupMetadata] = []
        for group_id in dict.fromkeys(group_ids):  # a name given twice is deleted once (Kafka: distinct)
            error = self.validate_group(group_id, allow_empty=True)
            if error is not None:
                result[group_id] = error
                continue
            consumer_group = self.manager.consumer_groups.get(group_id)
            if consumer_group is not None:
                if consumer_group.members:
                    result[group_id] = ErrorCode.NON_EMPTY_GROUP
                    continue
                _, deleted = await self.delete_consumer_group(group_id)
                if deleted != ErrorCode.NONE:
                    result[group_id] = deleted
                    continue
            group = self.manager.get_group(group_id)
            if consumer_group is not None and (group is None or group.is_state(GroupState.DEAD)):
                result[group_id] = ErrorCode.NONE  # an empty consumer group without offsets
            elif group is None or group.is_state(GroupState.DEAD):
                result[group_id] = ErrorCode.GROUP_ID_NOT_FOUND
            elif group.is_state(GroupState.EMPTY):
                group.transition_to(GroupState.DEAD, self.now_ms())
                eligible.append(group)
                result[group_id] = ErrorCode.NONE
            else:
                result[group_id] = ErrorCode.NON_EMPTY_GROUP
        if eligible:
            await self.manager.cleanup_group_metadata(eligible, lambda g: list(g.offsets))
        return result

    async def delete_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete (KIP-496, ``kafka-consumer-groups --delete-offsets``): remove committed
        offsets without deleting the group. An empty group loses any of them; a consumer group
        with members only those of topics it is not subscribed to (the others get
        GROUP_SUBSCRIBED_TO_TOPIC: its members would commit them again); any other group with
        members refuses (NON_EMPTY_GROUP). Returns the group error and, when it is NONE, one
        error per partition."""
        error = self.validate_group(group_id)
        if error is not None:
            return error, {}
        group = self.manager.get_group(group_id)
        if group is None or group.is_state(GroupState.DEAD):
            return ErrorCode.GROUP_ID_NOT_FOUND, {}
        result: dict[TopicPartition, ErrorCode] = {}
        consumer_group = self.manager.consumer_groups.get(group_id)
        if consumer_group is not None and consumer_group.members:
            subscribed_names = consumer_group.subscribed_topic_names()
            result = {tp: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC for tp in partitions if tp.topic in subscribed_names}
            deletable = {tp for tp in partitions if tp not in result}
        elif group.is_state(GroupState.EMPTY):
            deletable = set(partitions)
        elif group.protocol_type == CONSUMER_PROTOCOL_TYPE:
            subscribed = group.subscribed_topics  # None: not known, so every topic counts as subscribed
            for tp in partitions:
                if subscribed is None or tp.topic in subscribed:
                    result[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
            deletable = {tp for tp in partitions if tp not in result}
        else:
            return ErrorCode.NON_EMPTY_GROUP, {}
        if deletable:
            await self.manager.cleanup_group_metadata([group], lambda g: list(deletable))
        return ErrorCode.NONE, {tp: result.get(tp, ErrorCode.NONE) for tp in partitions}

    # -- topic deletion --------------------------------------------------------------------------------
    def on_topic_deleted(self, topic: str) -> None:
        """A topic was deleted: remove every local group's offsets of it (tombstones), as
        Kafka's coordinator does on partition deletion, so a topic created later under the same
        name starts with no committed offsets and tools do not list partitions that are gone.
        A group left empty with no offsets goes, as after expiry."""
        if self._nursery is not None and self.active:
            self._spawn(self._remove_offsets_of_topic, topic)

    async def _remove_offsets_of_topic(self, topic: str) -> None:
        def of_topic(group: GroupMetadata) -> list[TopicPartition]:
            held = set(group.offsets) | self.manager.pending_txn_partitions(group.group_id)
            return [tp for tp in held if tp.topic == topic]

        groups = [g for g in self.manager.local_groups() if of_topic(g)]
        if not groups:
            return
        removed = await self.manager.cleanup_group_metadata(groups, of_topic)
        log.info("removed %d committed offsets of deleted topic %s from %d group(s)", removed, topic, len(groups))


__all__ = [
    "FindCoordinatorResult",
    "GroupCoordinator",
    "GroupDescription",
    "ListedGroup",
    "MemberDescription",
]
