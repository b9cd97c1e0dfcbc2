"""The group coordinator: Kafka's classic consumer-group protocol, protocol-agnostic.

Transports decode JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch,
DescribeGroups, ListGroups, DeleteGroups and FindCoordinator and call the methods here with plain
values; results carry Kafka error codes. The rebalance state machine (Empty ->
PreparingRebalance -> CompletingRebalance -> Stable, Dead when deleted) follows Kafka's
``GroupCoordinator`` decision for decision: who may join, when a rebalance starts, when the join
phase completes (every member rejoined, or the rebalance timeout passed and laggards are dropped),
the initial rebalance delay of new groups, session expiry, pending member ids (the v4+
MEMBER_ID_REQUIRED round trip), pending syncs, static members (KIP-345) and fencing errors.

Concurrency: everything runs on one trio thread, so state changes are synchronous and atomic; a
JoinGroup or SyncGroup that must wait parks a :class:`~.state.Waiter` on its member and awaits
it. Appends to ``__consumer_offsets`` run in the coordinator's own nursery so that a client
disconnecting mid-rebalance cannot cancel what other members wait for. Timeouts are
:class:`~.timers.Timers` deadlines on trio's clock.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import trio

from ...errors import ErrorCode
from ...interfaces import TopicPartition
from .consumer_classic import ClassicJoin
from .offsets_log import wall_clock_ms
from .state import (
    NO_GENERATION,
    UNKNOWN_MEMBER_ID,
    GroupMetadata,
    GroupState,
    JoinGroupResult,
    MemberMetadata,
    OffsetAndMetadata,
    SyncGroupResult,
    Waiter,
)
from .timers import Timers

if TYPE_CHECKING:
    from ...config import Config
    from .metadata_manager import GroupMetadataManager

log = logging.getLogger(__name__)

#: a new member's JoinGroup expires after this if the rebalance never completes (Kafka's value)
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000
#: after storing a group's assignment failed (a full disk), the next join phase lasts at least
#: this long, doubling with each consecutive failure up to the maximum. Kafka answers the same
#: NOT_COORDINATOR, but its failed log dir then goes offline and FindCoordinator fails, so
#: clients back off; here the coordinator stays, and members that rejoin at once (librdkafka
#: does) would otherwise rebalance in a loop of a millisecond a round.
STORE_FAILURE_BACKOFF_MS = 1_000
STORE_FAILURE_BACKOFF_MAX_MS = 30_000


class MembershipProtocol:
    """JoinGroup, SyncGroup, Heartbeat and LeaveGroup over a :class:`GroupMetadataManager`.

    :class:`~.api.GroupCoordinator` adds offsets, admin APIs, loading and the run loop.
    """

    def __init__(self, manager: GroupMetadataManager, config: Config, now_ms: Callable[[], int] | None) -> None:
        self.manager = manager
        self.config = config
        self.now_ms = now_ms or wall_clock_ms
        self.timers = Timers()
        self.min_session_timeout_ms = int(config["group.min.session.timeout.ms"])
        self.max_session_timeout_ms = int(config["group.max.session.timeout.ms"])
        self.initial_rebalance_delay_ms = int(config["group.initial.rebalance.delay.ms"])
        self.max_group_size = int(config["group.max.size"])
        self.active = False
        self._nursery: trio.Nursery | None = None
        self._initial_join: set[str] = set()
        #: group -> (consecutive failed assignment stores, trio time before which its join
        #: phase does not complete early)
        self._store_failures: dict[str, tuple[int, float]] = {}

    # -- plumbing ------------------------------------------------------------------------------------
    async def consumer_group_join(self, join: ClassicJoin) -> JoinGroupResult | None:
        """A JoinGroup answered by a KIP-848 consumer group of that id (its classic member),
        None when the classic protocol answers it; the coordinator with consumer groups
        overrides it."""
        return None

    async def consumer_group_sync(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int,
        protocol_type: str | None, protocol_name: str | None,
    ) -> SyncGroupResult | None:  # fmt: skip
        """The same for SyncGroup."""
        return None

    def _spawn(self, fn: Callable[..., object], *args: object) -> None:
        if self._nursery is None:
            raise RuntimeError("group coordinator is not running")
        self._nursery.start_soon(fn, *args)  # type: ignore[arg-type]

    def validate_group(self, group_id: str | None, *, allow_empty: bool = False) -> ErrorCode | None:
        """Kafka's ``validateGroupStatus``: id, coordinator running, loaded, owning the group."""
        if group_id is None or (not group_id and not allow_empty):
            return ErrorCode.INVALID_GROUP_ID
        if not self.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if self.manager.is_loading(group_id):
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if not self.manager.is_local(group_id):
            return ErrorCode.NOT_COORDINATOR
        return None

    # -- heartbeats ----------------------------------------------------------------------------------
    def _heartbeat_key(self, group: GroupMetadata, member_id: str) -> tuple[str, str, str]:
        return ("heartbeat", group.group_id, member_id)

    def complete_and_schedule_heartbeat(
        self, group: GroupMetadata, member: MemberMetadata, timeout_ms: int | None = None
    ) -> None:
        """The member is alive now; it must show up again within its session timeout."""
        member.heartbeat_satisfied = False
        timeout = member.session_timeout_ms if timeout_ms is None else timeout_ms
        group_id, member_id = group.group_id, member.member_id
        self.timers.schedule(
            self._heartbeat_key(group, member_id),
            timeout / 1000,
            lambda: self._on_expire_heartbeat(group_id, member_id),
        )

    def _cancel_heartbeat(self, group: GroupMetadata, member_id: str) -> None:
        self.timers.cancel(self._heartbeat_key(group, member_id))

    def _on_expire_heartbeat(self, group_id: str, member_id: str) -> None:
        group = self.manager.get_group(group_id)
        if group is None or not group.has(member_id):
            return
        member = group.get(member_id)
        if not member.has_satisfied_heartbeat:
            log.info("member %s of group %s has failed (session timeout), removing it", member_id, group_id)
            self._remove_member_and_update_group(group, member)

    def _schedule_pending_member_expiry(self, group: GroupMetadata, member_id: str, timeout_ms: int) -> None:
        group_id = group.group_id

        def expire() -> None:
            g = self.manager.get_group(group_id)
            if g is not None and member_id in g.pending_members:
                g.remove(member_id)
                if g.is_state(GroupState.PREPARING_REBALANCE):
                    self._try_complete_join(g)

        self.timers.schedule(self._heartbeat_key(group, member_id), timeout_ms / 1000, expire)

    def on_group_loaded(self, group: GroupMetadata) -> None:
        """Members loaded from the log must heartbeat within their session timeout. A group
        loaded with more members than ``group.max.size`` (the limit was lowered) rebalances at
        once, as Kafka's ``onGroupLoaded``: the members past the limit get GROUP_MAX_SIZE_REACHED
        when they rejoin, after a chance to commit their offsets."""
        if len(group.members) > self.max_group_size and group.can_rebalance():
            self._prepare_rebalance(group, f"freshly loaded group is over group.max.size={self.max_group_size}")
        for member in group.members.values():
            self.complete_and_schedule_heartbeat(group, member)

    # -- JoinGroup -----------------------------------------------------------------------------------
    async def join_group(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        require_known_member_id: bool,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        *,
        supports_skip_assignment: bool = False,
    ) -> JoinGroupResult:
        """Join (or rejoin) a group; returns when this member's part of the join phase is over.
        ``supports_skip_assignment``: the client sent JoinGroup v9+ (KIP-814), so a static leader
        rejoining a Stable group can be told to skip the assignment (see
        :meth:`_persist_static_member`)."""
        error = self.validate_group(group_id)
        if error is not None:
            return JoinGroupResult(error, member_id)
        if not self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms:
            return JoinGroupResult(ErrorCode.INVALID_SESSION_TIMEOUT, member_id)
        diverted = await self.consumer_group_join(
            ClassicJoin(group_id, member_id, group_instance_id, require_known_member_id, client_id, client_host,
                        rebalance_timeout_ms, session_timeout_ms, protocol_type, tuple(protocols))
        )  # fmt: skip
        if diverted is not None:  # a KIP-848 consumer group of this id with members
            return diverted
        is_unknown = member_id == UNKNOWN_MEMBER_ID
        group = self.manager.get_group(group_id)
        if group is None:
            if not is_unknown:
                return JoinGroupResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id)
            group = self.manager.add_group(GroupMetadata(group_id, current_state_timestamp=self.now_ms()))
        if not self._accept_joining_member(group, member_id):
            group.remove(member_id)
            return JoinGroupResult(ErrorCode.GROUP_MAX_SIZE_REACHED, UNKNOWN_MEMBER_ID)
        waiter: Waiter[JoinGroupResult] = Waiter()
        protocols = list(protocols)
        args = (client_id, client_host, rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols, waiter)
        if is_unknown:
            immediate = self._new_member_join(
                group, group_instance_id, require_known_member_id, *args, skip_ok=supports_skip_assignment
            )
        else:
            immediate = self._current_member_join(group, member_id, group_instance_id, *args)
        if group.is_state(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group)
        if immediate is not None:
            return immediate
        return await waiter.wait()

    def _accept_joining_member(self, group: GroupMetadata, member_id: str) -> bool:
        if group.is_state(GroupState.EMPTY, GroupState.DEAD):
            return True
        if group.is_state(GroupState.PREPARING_REBALANCE):
            rejoining = group.has(member_id) and group.get(member_id).awaiting_join is not None
            return rejoining or group.num_members_awaiting_join < self.max_group_size
        return group.has(member_id) or len(group.members) < self.max_group_size

    def _new_member_join(
        self,
        group: GroupMetadata,
        group_instance_id: str | None,
        require_known_member_id: bool,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        waiter: Waiter[JoinGroupResult],
        *,
        skip_ok: bool,
    ) -> JoinGroupResult | None:
        if group.is_state(GroupState.DEAD):
            return JoinGroupResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, UNKNOWN_MEMBER_ID)
        if not group.supports_protocols(protocol_type, (name for name, _ in protocols)):
            return JoinGroupResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, UNKNOWN_MEMBER_ID)
        new_member_id = group.generate_member_id(client_id, group_instance_id)
        member_args = (client_id, client_host, rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols)
        if group_instance_id is not None:
            old_member_id = group.static_member_id(group_instance_id)
            if old_member_id is None:
                self._add_member_and_rebalance(group, new_member_id, group_instance_id, *member_args, waiter)
                return None
            return self._update_static_member_and_rebalance(
                group, old_member_id, new_member_id, group_instance_id, protocols,
                rebalance_timeout_ms, session_timeout_ms, waiter, skip_ok=skip_ok,
            )  # fmt: skip
        if require_known_member_id:
            # KIP-394: hand out the id first; the member joins for real with it
            group.pending_members.add(new_member_id)
            self._schedule_pending_member_expiry(group, new_member_id, session_timeout_ms)
            return JoinGroupResult(ErrorCode.MEMBER_ID_REQUIRED, new_member_id)
        self._add_member_and_rebalance(group, new_member_id, None, *member_args, waiter)
        return None

    def _current_member_join(
        self,
        group: GroupMetadata,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        waiter: Waiter[JoinGroupResult],
    ) -> JoinGroupResult | None:
        if group.is_state(GroupState.DEAD):
            return JoinGroupResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id)
        if not group.supports_protocols(protocol_type, (name for name, _ in protocols)):
            return JoinGroupResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
        if member_id in group.pending_members:
            # the second JoinGroup of the MEMBER_ID_REQUIRED round trip (never a static member)
            self._add_member_and_rebalance(
                group, member_id, group_instance_id, client_id, client_host,
                rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols, waiter,
            )  # fmt: skip
            return None
        if group.is_static_member_fenced(group_instance_id, member_id):
            return JoinGroupResult(ErrorCode.FENCED_INSTANCE_ID, member_id)
        if not group.has(member_id) or (
            group_instance_id is not None and group.static_member_id(group_instance_id) is None
        ):
            return JoinGroupResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id)
        member = group.get(member_id)
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            self._update_member_and_rebalance(
                group, member, protocols, rebalance_timeout_ms, session_timeout_ms, waiter
            )
        elif state is GroupState.COMPLETING_REBALANCE:
            if member.matches(protocols):
                # the member missed the JoinGroup response: answer again for this generation
                return self._join_result(group, member, with_members=group.is_leader(member_id))
            self._update_member_and_rebalance(
                group, member, protocols, rebalance_timeout_ms, session_timeout_ms, waiter
            )
        elif state is GroupState.STABLE:
            if group.is_leader(member_id) or not member.matches(protocols):
                # the leader rejoining forces a rebalance (e.g. it saw new partitions); so does
                # a member whose subscription changed
                self._update_member_and_rebalance(
                    group, member, protocols, rebalance_timeout_ms, session_timeout_ms, waiter
                )
            else:
                return self._join_result(group, member, with_members=False)
        else:  # Empty with a known member id: let it reset and rejoin
            return JoinGroupResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id)
        return None

    def _join_result(self, group: GroupMetadata, member: MemberMetadata, *, with_members: bool) -> JoinGroupResult:
        return JoinGroupResult(
            ErrorCode.NONE,
            member.member_id,
            group.generation_id,
            group.protocol_type,
            group.protocol_name,
            group.leader_id or "",
            group.current_member_metadata() if with_members else (),
        )

    def _add_member_and_rebalance(
        self,
        group: GroupMetadata,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        waiter: Waiter[JoinGroupResult],
    ) -> None:
        member = MemberMetadata(
            member_id, group_instance_id, client_id, client_host,
            rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols,
        )  # fmt: skip
        member.is_new = True
        if group.is_state(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True  # lets the initial rebalance delay extend itself
        group.add(member, waiter)
        # a new member cannot heartbeat until it has an id; its join expires instead
        self.complete_and_schedule_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(group, f"adding new member {member_id}")

    def _update_member_and_rebalance(
        self,
        group: GroupMetadata,
        member: MemberMetadata,
        protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        waiter: Waiter[JoinGroupResult],
    ) -> None:
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, waiter)
        self._maybe_prepare_rebalance(group, f"member {member.member_id} rejoining")

    def _update_static_member_and_rebalance(
        self,
        group: GroupMetadata,
        old_member_id: str,
        new_member_id: str,
        group_instance_id: str,
        protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        waiter: Waiter[JoinGroupResult],
        *,
        skip_ok: bool,
    ) -> JoinGroupResult | None:
        """A static member restarted (unknown member id, known instance id): it takes over its old
        identity and assignment; a Stable group whose protocol would not change skips the rebalance."""
        current_leader = group.leader_id
        old = group.get(old_member_id)
        old_protocols, old_rebalance, old_session = (
            list(old.supported_protocols),
            old.rebalance_timeout_ms,
            old.session_timeout_ms,
        )
        member = group.replace_static_member(group_instance_id, old_member_id, new_member_id)
        self._cancel_heartbeat(group, old_member_id)
        self.complete_and_schedule_heartbeat(group, member)
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, waiter)
        if group.is_state(GroupState.STABLE):
            if group.protocol_name == group.select_protocol():
                restore = (old_member_id, old_protocols, old_rebalance, old_session)
                self._spawn(
                    self._persist_static_member, group, member, group_instance_id, current_leader, restore, skip_ok
                )
            else:
                self._maybe_prepare_rebalance(group, f"static member {group_instance_id} changed protocols")
        elif group.is_state(GroupState.COMPLETING_REBALANCE):
            # the leader may be assigning with the old member id: start over
            self._prepare_rebalance(group, f"static member {group_instance_id} rejoined while completing")
        return None

    async def _persist_static_member(
        self,
        group: GroupMetadata,
        member: MemberMetadata,
        group_instance_id: str,
        current_leader: str | None,
        restore: tuple[str, list[tuple[str, bytes]], int, int],
        skip_ok: bool,
    ) -> None:
        """Write the group with the static member's new id, then answer its JoinGroup at the
        current generation. Kafka's answer to a restarted leader (KIP-814): from JoinGroup v9 it
        is the leader, gets every member's metadata and ``skip_assignment`` (it must not assign,
        but may need the metadata, as Kafka Streams does); before v9 it is told the old leader
        id, so it takes itself for a follower and does not reassign either. Followers get the
        leader id and no members either way."""
        assignment = {m.member_id: m.assignment for m in group.members.values()}
        error = await self.manager.store_group(group, assignment)
        if error == ErrorCode.NONE:
            if skip_ok and group.is_leader(member.member_id):
                answer = self._join_result(group, member, with_members=True)
                answer = dataclasses.replace(answer, skip_assignment=True)
            else:
                answer = JoinGroupResult(
                    ErrorCode.NONE, member.member_id, group.generation_id, group.protocol_type,
                    group.protocol_name, current_leader or "",
                )  # fmt: skip
            group.invoke_join(member, answer)
            return
        log.warning("persisting static member %s of group %s failed: %s", group_instance_id, group.group_id, error)
        old_member_id, old_protocols, old_rebalance, old_session = restore
        waiter = member.awaiting_join
        group.update_member(member, old_protocols, old_rebalance, old_session, None)
        if group.static_member_id(group_instance_id) == member.member_id:
            new_member_id = member.member_id
            reverted = group.replace_static_member(group_instance_id, new_member_id, old_member_id)
            self._cancel_heartbeat(group, new_member_id)
            self.complete_and_schedule_heartbeat(group, reverted)
        if waiter is not None:
            waiter.set(
                JoinGroupResult(
                    error, UNKNOWN_MEMBER_ID, group.generation_id, group.protocol_type,
                    group.protocol_name, current_leader or "",
                )
            )  # fmt: skip

    # -- rebalance phases ------------------------------------------------------------------------------
    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.is_state(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, ErrorCode.REBALANCE_IN_PROGRESS)
        self.timers.cancel(("sync", group.group_id))
        join_key = ("join", group.group_id)
        group_id = group.group_id
        if group.is_state(GroupState.EMPTY):
            delay = self.initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            self._initial_join.add(group_id)
            self.timers.schedule(
                join_key, delay / 1000, lambda: self._on_initial_join_expire(group_id, delay, remaining)
            )
            initial = True
        else:
            self._initial_join.discard(group_id)
            self.timers.schedule(join_key, group.rebalance_timeout_ms() / 1000, lambda: self._on_join_expire(group_id))
            initial = False
        group.transition_to(GroupState.PREPARING_REBALANCE, self.now_ms())
        log.info("preparing to rebalance group %s in generation %d (%s)", group_id, group.generation_id, reason)
        if not initial:
            self._try_complete_join(group)

    def _on_initial_join_expire(self, group_id: str, delay_ms: int, remaining_ms: int) -> None:
        """The initial delay of a new group: keep waiting while members keep arriving, up to the
        rebalance timeout (Kafka's ``InitialDelayedJoin``)."""
        group = self.manager.get_group(group_id)
        if group is None:
            return
        if group.new_member_added and remaining_ms != 0:
            group.new_member_added = False
            delay = min(delay_ms, remaining_ms)
            left = max(remaining_ms - delay, 0)
            self.timers.schedule(
                ("join", group_id), delay / 1000, lambda: self._on_initial_join_expire(group_id, delay_ms, left)
            )
            return
        self._initial_join.discard(group_id)
        self._on_complete_join(group)

    def _on_join_expire(self, group_id: str) -> None:
        group = self.manager.get_group(group_id)
        if group is not None:
            self._on_complete_join(group)

    def _try_complete_join(self, group: GroupMetadata) -> None:
        """Complete the join phase early once everyone is in (not during the initial delay)."""
        key = ("join", group.group_id)
        if key in self.timers and group.group_id not in self._initial_join and group.has_all_members_joined():
            failed = self._store_failures.get(group.group_id)
            if failed is not None and failed[1] > trio.current_time():
                # the last assignment could not be stored: complete when the backoff ends
                group_id = group.group_id
                self.timers.schedule(key, failed[1] - trio.current_time(), lambda: self._on_join_expire(group_id))
                return
            self.timers.cancel(key)
            self._on_complete_join(group)

    def _on_complete_join(self, group: GroupMetadata) -> None:
        for member in group.not_yet_rejoined_members():
            if not member.is_static:  # static members keep their seat until their session expires
                group.remove(member.member_id)
                self._cancel_heartbeat(group, member.member_id)
        if group.is_state(GroupState.DEAD):
            return
        if not self._maybe_elect_new_joined_leader(group) and group.members:
            # nobody rejoined (only absent static members remain): wait another rebalance timeout
            group_id = group.group_id
            self.timers.schedule(
                ("join", group_id), group.rebalance_timeout_ms() / 1000, lambda: self._on_join_expire(group_id)
            )
            return
        group.init_next_generation(self.now_ms())
        if group.is_state(GroupState.EMPTY):
            log.info("group %s with generation %d is now empty", group.group_id, group.generation_id)
            self._spawn(self._store_empty_group, group)
            return
        log.info(
            "stabilized group %s generation %d with %d members", group.group_id, group.generation_id, len(group.members)
        )
        for member in group.members.values():
            group.invoke_join(member, self._join_result(group, member, with_members=group.is_leader(member.member_id)))
            self.complete_and_schedule_heartbeat(group, member)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        group_id, generation = group.group_id, group.generation_id
        self.timers.schedule(
            ("sync", group_id),
            group.rebalance_timeout_ms() / 1000,
            lambda: self._on_expire_pending_sync(group_id, generation),
        )

    async def _store_empty_group(self, group: GroupMetadata) -> None:
        error = await self.manager.store_group(group, {})
        if error != ErrorCode.NONE:
            log.warning("storing empty group %s failed: %s", group.group_id, ErrorCode(error).name)

    def _maybe_elect_new_joined_leader(self, group: GroupMetadata) -> bool:
        if group.leader_id is None:
            return False
        leader = group.members.get(group.leader_id)
        if leader is not None and leader.awaiting_join is not None:
            return True
        for member in group.members.values():
            if member.awaiting_join is not None:
                group.leader_id = member.member_id
                return True
        return False

    def _on_expire_pending_sync(self, group_id: str, generation: int) -> None:
        """Members that got their JoinGroup answer but never sent SyncGroup in time are dropped."""
        group = self.manager.get_group(group_id)
        if group is None or group.generation_id != generation:
            return
        if group.is_state(GroupState.COMPLETING_REBALANCE, GroupState.STABLE) and group.pending_sync_members:
            pending = sorted(group.pending_sync_members)
            for member_id in pending:
                group.remove(member_id)
                self._cancel_heartbeat(group, member_id)
            self._prepare_rebalance(group, f"removing {pending} on pending sync expiry")

    def _remove_member_and_update_group(self, group: GroupMetadata, member: MemberMetadata) -> None:
        group.invoke_join(member, JoinGroupResult(ErrorCode.UNKNOWN_MEMBER_ID, UNKNOWN_MEMBER_ID))
        group.invoke_sync(member, SyncGroupResult(ErrorCode.UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        if group.is_state(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, f"removing member {member.member_id}")
        elif group.is_state(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group)

    # -- SyncGroup ---------------------------------------------------------------------------------------
    async def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: Mapping[str, bytes],
    ) -> SyncGroupResult:
        """Followers wait for the leader's assignment; the leader's is stored, then handed out."""
        error = self.validate_group(group_id)
        if error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            # the rebalance's state is lost with the reload: make the member start over at JoinGroup
            return SyncGroupResult(ErrorCode.REBALANCE_IN_PROGRESS)
        if error is not None:
            return SyncGroupResult(error)
        diverted = await self.consumer_group_sync(
            group_id, member_id, group_instance_id, generation_id, protocol_type, protocol_name
        )
        if diverted is not None:
            return diverted
        group = self.manager.get_group(group_id)
        if group is None:
            return SyncGroupResult(ErrorCode.UNKNOWN_MEMBER_ID)
        if group.is_state(GroupState.DEAD):
            return SyncGroupResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if group.is_static_member_fenced(group_instance_id, member_id):
            return SyncGroupResult(ErrorCode.FENCED_INSTANCE_ID)
        if not group.has(member_id):
            return SyncGroupResult(ErrorCode.UNKNOWN_MEMBER_ID)
        if generation_id != group.generation_id:
            return SyncGroupResult(ErrorCode.ILLEGAL_GENERATION)
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            return SyncGroupResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        member = group.get(member_id)
        if group.is_state(GroupState.EMPTY):
            return SyncGroupResult(ErrorCode.UNKNOWN_MEMBER_ID)
        if group.is_state(GroupState.PREPARING_REBALANCE):
            return SyncGroupResult(ErrorCode.REBALANCE_IN_PROGRESS)
        if group.is_state(GroupState.STABLE):
            self._remove_pending_sync_member(group, member_id)
            self.complete_and_schedule_heartbeat(group, member)
            return SyncGroupResult(ErrorCode.NONE, member.assignment, group.protocol_type, group.protocol_name)
        # CompletingRebalance
        waiter: Waiter[SyncGroupResult] = Waiter()
        if member.awaiting_sync is not None:
            member.awaiting_sync.set(SyncGroupResult(ErrorCode.REBALANCE_IN_PROGRESS))
        member.awaiting_sync = waiter
        self._remove_pending_sync_member(group, member_id)
        if group.is_leader(member_id):
            assignment = {m: assignments.get(m, b"") for m in group.members}
            self._spawn(self._store_assignment, group, group.generation_id, assignment)
        return await waiter.wait()

    def _remove_pending_sync_member(self, group: GroupMetadata, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members:
            self.timers.cancel(("sync", group.group_id))

    async def _store_assignment(self, group: GroupMetadata, generation: int, assignment: dict[str, bytes]) -> None:
        error = await self.manager.store_group(group, assignment)
        if not (group.is_state(GroupState.COMPLETING_REBALANCE) and group.generation_id == generation):
            return  # the group moved on while we were writing
        if error != ErrorCode.NONE:
            failures = self._store_failures.get(group.group_id, (0, 0.0))[0] + 1
            backoff_ms = min(STORE_FAILURE_BACKOFF_MS << min(failures - 1, 16), STORE_FAILURE_BACKOFF_MAX_MS)
            self._store_failures[group.group_id] = (failures, trio.current_time() + backoff_ms / 1000)
            self._reset_and_propagate_assignment_error(group, error)
            self._maybe_prepare_rebalance(
                group, f"storing the assignment failed ({error.name}); the next join phase lasts >= {backoff_ms} ms"
            )
            return
        self._store_failures.pop(group.group_id, None)
        for member in group.members.values():
            member.assignment = assignment.get(member.member_id, b"")
        self._propagate_assignment(group, ErrorCode.NONE)
        group.transition_to(GroupState.STABLE, self.now_ms())

    def _propagate_assignment(self, group: GroupMetadata, error: ErrorCode) -> None:
        ok = error == ErrorCode.NONE
        for member in group.members.values():
            result = SyncGroupResult(
                error, member.assignment, group.protocol_type if ok else None, group.protocol_name if ok else None
            )
            if group.invoke_sync(member, result):
                self.complete_and_schedule_heartbeat(group, member)

    def _reset_and_propagate_assignment_error(self, group: GroupMetadata, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    # -- Heartbeat ----------------------------------------------------------------------------------------
    def heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int) -> ErrorCode:
        error = self.validate_group(group_id)
        if error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            return ErrorCode.NONE  # Kafka answers blindly while loading; the member will learn later
        if error is not None:
            return error
        group = self.manager.get_group(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_state(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if group.is_static_member_fenced(group_instance_id, member_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if not group.has(member_id):
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if group.is_state(GroupState.EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        self.complete_and_schedule_heartbeat(group, group.get(member_id))
        if group.is_state(GroupState.PREPARING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    # -- LeaveGroup ---------------------------------------------------------------------------------------
    def leave_group(
        self, group_id: str, members: Sequence[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """Remove members (member id, or instance id alone for an admin removal); returns the
        request error and one error per member (v3 batch leave)."""
        error = self.validate_group(group_id)
        if error is not None:
            return error, [error] * len(members)
        group = self.manager.get_group(group_id)
        if group is None:
            return ErrorCode.NONE, [ErrorCode.UNKNOWN_MEMBER_ID] * len(members)
        if group.is_state(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, [ErrorCode.COORDINATOR_NOT_AVAILABLE] * len(members)
        errors = []
        for member_id, instance_id in members:
            if member_id == UNKNOWN_MEMBER_ID:
                current = group.static_member_id(instance_id)
                if current is None:
                    errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
                else:
                    self._remove_current_member(group, current)
                    errors.append(ErrorCode.NONE)
            elif member_id in group.pending_members:
                group.remove(member_id)
                self._cancel_heartbeat(group, member_id)
                if group.is_state(GroupState.PREPARING_REBALANCE):
                    self._try_complete_join(group)
                errors.append(ErrorCode.NONE)
            elif group.is_static_member_fenced(instance_id, member_id):
                errors.append(ErrorCode.FENCED_INSTANCE_ID)
            elif group.has(member_id):
                self._remove_current_member(group, member_id)
                errors.append(ErrorCode.NONE)
            else:
                errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
        return ErrorCode.NONE, errors

    def _remove_current_member(self, group: GroupMetadata, member_id: str) -> None:
        log.info("member %s leaves group %s", member_id, group.group_id)
        self._remove_member_and_update_group(group, group.get(member_id))
        self._cancel_heartbeat(group, member_id)

    # -- offsets: member validation -------------------------------------------------------------------------
    def validate_offset_commit(
        self, group: GroupMetadata, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode | None:
        if group.is_state(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.is_state(GroupState.EMPTY):
            # a commit outside group management (an admin client, a consumer using assign())
            # into a group without members, whatever member or instance id it carries: Kafka's
            # ClassicGroup.validateOffsetCommit accepts it first (librdkafka sends its
            # group.instance.id, and keeps a stale member id, on such commits)
            return None
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
            if group.is_static_member_fenced(group_instance_id, member_id):
                return ErrorCode.FENCED_INSTANCE_ID
            if not group.has(member_id):
                return ErrorCode.UNKNOWN_MEMBER_ID
            if generation_id != group.generation_id:
                return ErrorCode.ILLEGAL_GENERATION
            return None
        if not group.is_state(GroupState.EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID  # only members commit for a non-empty group
        return None

    async def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
    ) -> dict[TopicPartition, ErrorCode]:
        """OffsetCommit: members of the current generation, or anyone (generation -1, no member id)
        for a group without members (simple consumers that only store offsets here)."""
        error = self.validate_group(group_id, allow_empty=True)
        if error is not None:
            return dict.fromkeys(offsets, error)
        group = self.manager.get_group(group_id)
        if group is None:
            if generation_id >= 0:
                return dict.fromkeys(offsets, ErrorCode.ILLEGAL_GENERATION)
            group = self.manager.add_group(GroupMetadata(group_id, current_state_timestamp=self.now_ms()))
        error = self.validate_offset_commit(group, generation_id, member_id, group_instance_id)
        if error is not None:
            return dict.fromkeys(offsets, error)
        if group.is_state(GroupState.COMPLETING_REBALANCE):
            return dict.fromkeys(offsets, ErrorCode.REBALANCE_IN_PROGRESS)
        if group.is_state(GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            # commits are allowed while preparing: the heartbeat tells the member to rejoin
            self.complete_and_schedule_heartbeat(group, group.get(member_id))
        return await self.manager.store_offsets(group, offsets)


__all__ = ["NEW_MEMBER_JOIN_TIMEOUT_MS", "NO_GENERATION", "MembershipProtocol"]
