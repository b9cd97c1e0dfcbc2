"""Committed offsets where Kafka's group coordinator is subtle: commits outside group management
into an empty group, transactional offsets against plain commits in log order, pending
transactional offsets under OffsetDelete, DeleteGroups and expiry, and groups loaded over
``group.max.size`` -- under trio's autojump clock."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing
from group_harness import GROUP, assignment_bytes, join, join_and_sync_alone, running, spawn

from odradek.broker.group import UNKNOWN_MEMBER_ID, GroupState, InMemoryOffsetsLog, OffsetAndMetadata
from odradek.broker.group.schema import offset_key, offset_value
from odradek.broker.internal_topic import LogEntry
from odradek.broker.txn.offsets import PendingTxnOffsets
from odradek.errors import ErrorCode
from odradek.interfaces import TopicPartition
from odradek.records import ControlRecordType

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
PID = 1000


async def test_a_commit_outside_group_management_into_an_empty_group_is_accepted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Kafka's ClassicGroup.validateOffsetCommit: generation -1 into an Empty group is accepted
    whatever member or instance id comes with it (librdkafka sends its group.instance.id, and
    keeps a stale member id, on commits of an assign()ed consumer); a group with members still
    wants one of them."""
    async with running() as (coordinator, _):
        commit = coordinator.commit_offsets
        assert await commit(GROUP, UNKNOWN_MEMBER_ID, "inst-1", -1, {T0: OffsetAndMetadata(5)}) == {T0: ErrorCode.NONE}
        assert await commit(GROUP, "stale", None, -1, {T0: OffsetAndMetadata(6)}) == {T0: ErrorCode.NONE}
        assert await commit(GROUP, "stale", "inst-1", -1, {T0: OffsetAndMetadata(7)}) == {T0: ErrorCode.NONE}
        assert coordinator.fetch_offsets(GROUP, [T0])[1][T0].offset == 7
        member = await join_and_sync_alone(coordinator)
        assert await commit(GROUP, "stale", None, -1, {T0: OffsetAndMetadata(8)}) == {T0: ErrorCode.UNKNOWN_MEMBER_ID}
        assert await commit(GROUP, UNKNOWN_MEMBER_ID, None, -1, {T0: OffsetAndMetadata(8)}) == {
            T0: ErrorCode.UNKNOWN_MEMBER_ID
        }
        ok = await commit(GROUP, member.member_id, None, member.generation_id, {T0: OffsetAndMetadata(9)})
        assert ok == {T0: ErrorCode.NONE}


async def test_a_later_plain_commit_wins_over_an_earlier_transactional_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Kafka keeps whichever offset record is later in the log: a transaction's COMMIT marker
    does not bring back its offset over a plain commit written after it; one written before
    it does give way."""
    async with running() as (coordinator, _):
        manager = coordinator.manager
        assert await manager.store_txn_offsets(GROUP, PID, 0, {T0: OffsetAndMetadata(10)}) == {T0: ErrorCode.NONE}
        await coordinator.commit_offsets(GROUP, UNKNOWN_MEMBER_ID, None, -1, {T0: OffsetAndMetadata(20)})
        await coordinator.commit_offsets(GROUP, UNKNOWN_MEMBER_ID, None, -1, {T1: OffsetAndMetadata(30)})
        await manager.store_txn_offsets(GROUP, PID, 0, {T1: OffsetAndMetadata(40)})
        assert manager.complete_txn(PID, True) == 1
        _, offsets = coordinator.fetch_offsets(GROUP, [T0, T1])
        assert (offsets[T0].offset, offsets[T1].offset) == (20, 40)


async def test_loading_applies_a_transactional_offset_only_over_earlier_records(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The loader's rule is the same, by the records' places in the log."""
    log = InMemoryOffsetsLog(num_partitions=4)
    await log.ensure_topic()
    assert log.entries is not None
    async with running(log) as (coordinator, _):
        p = coordinator.manager.partition_for(GROUP)

    def record(tp: TopicPartition, offset: int, producer_id: int = -1) -> LogEntry:
        value = offset_value(OffsetAndMetadata(offset))
        return LogEntry(offset_key(GROUP, tp), value, producer_id, transactional=producer_id >= 0)

    log.entries[p] += [
        record(T0, 10, PID),  # txn, then a plain commit, then the marker: the plain one stays
        record(T1, 30),  # plain, then txn, then the marker: the transactional one wins
        record(T1, 40, PID),
        record(T0, 20),
        LogEntry(None, None, PID, transactional=True, control=ControlRecordType.COMMIT),
    ]
    async with running(log) as (restarted, _):
        _, offsets = restarted.fetch_offsets(GROUP, [T0, T1])
        assert (offsets[T0].offset, offsets[T1].offset) == (20, 40)
        # the numbering carries on past the load: a later transaction over a loaded commit
        await restarted.manager.store_txn_offsets(GROUP, PID + 1, 0, {T0: OffsetAndMetadata(50)})
        restarted.manager.complete_txn(PID + 1, True)
        assert restarted.fetch_offsets(GROUP, [T0])[1][T0].offset == 50


async def test_offset_delete_and_delete_groups_take_pending_transactional_offsets(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Kafka's removeOffsets: a deleted offset, or a deleted group's, does not come back when
    the transaction that held it commits."""
    async with running() as (coordinator, _):
        manager = coordinator.manager
        await coordinator.commit_offsets(GROUP, UNKNOWN_MEMBER_ID, None, -1, {T0: OffsetAndMetadata(1)})
        await manager.store_txn_offsets(GROUP, PID, 0, {T0: OffsetAndMetadata(10), T1: OffsetAndMetadata(11)})
        error, result = await coordinator.delete_offsets(GROUP, [T0])
        assert (error, result) == (ErrorCode.NONE, {T0: ErrorCode.NONE})
        assert not manager.has_pending_txn(GROUP, T0) and manager.has_pending_txn(GROUP, T1)
        manager.complete_txn(PID, True)
        _, offsets = coordinator.fetch_offsets(GROUP, [T0, T1])
        assert (offsets[T0].offset, offsets[T1].offset) == (-1, 11)

        await manager.store_txn_offsets(GROUP, PID, 1, {T0: OffsetAndMetadata(12)})
        assert await coordinator.delete_groups([GROUP, GROUP]) == {GROUP: ErrorCode.NONE}  # named twice
        assert manager.get_group(GROUP) is None and not manager.has_pending_txn(GROUP, T0)
        manager.complete_txn(PID, True)
        assert manager.get_group(GROUP) is None
        assert coordinator.fetch_offsets(GROUP, [T0])[1][T0].offset == -1


async def test_an_empty_group_with_an_open_transactions_offsets_does_not_expire(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Kafka counts pending transactional offsets as the group's: neither they nor their group
    expire while the transaction is open, so the marker finds the group as it was."""
    async with running(offsets_retention_minutes=1) as (coordinator, _):
        manager = coordinator.manager
        member = await join_and_sync_alone(coordinator)
        await coordinator.commit_offsets(
            GROUP, member.member_id, None, member.generation_id, {T1: OffsetAndMetadata(3)}
        )
        coordinator.leave_group(GROUP, [(member.member_id, None)])
        await manager.store_txn_offsets(GROUP, PID, 0, {T0: OffsetAndMetadata(10), T1: OffsetAndMetadata(4)})
        await trio.sleep(120)
        await manager.expire_offsets()
        group = manager.get_group(GROUP)
        assert group is not None and group.state is GroupState.EMPTY and group.generation_id == 2
        assert T1 in group.offsets  # held by the open transaction
        manager.complete_txn(PID, True)
        _, offsets = coordinator.fetch_offsets(GROUP, [T0, T1])
        assert (offsets[T0].offset, offsets[T1].offset) == (10, 4)
        assert manager.get_group(GROUP) is group and group.protocol_type == "consumer"


async def test_a_transactional_commit_creates_a_simple_group(autojump_clock: trio.testing.MockClock) -> None:
    """As Kafka's coordinator: DescribeGroups says Empty, not Dead, while the transaction is open."""
    async with running() as (coordinator, _):
        offsets = PendingTxnOffsets(lambda: coordinator)
        result = await offsets.commit("eos", PID, 0, "", None, -1, {T0: OffsetAndMetadata(10)})
        assert result == {T0: ErrorCode.NONE}
        assert coordinator.describe_group("eos").state == GroupState.EMPTY.value
        assert "eos" in [g.group_id for g in coordinator.list_groups()[1]]


async def test_a_group_loaded_over_its_max_size_rebalances(autojump_clock: trio.testing.MockClock) -> None:
    """Kafka's onGroupLoaded: a group.max.size lowered below a stored group's size is enforced
    when the group loads (a rebalance at once), not at some later rebalance."""
    log = InMemoryOffsetsLog(num_partitions=4)
    async with running(log) as (coordinator, nursery):
        a = await join_and_sync_alone(coordinator)
        b_join = spawn(nursery, join, coordinator)
        await trio.testing.wait_all_tasks_blocked()
        a2 = await join(coordinator, a.member_id)
        b = await b_join.result()
        b_sync = spawn(nursery, coordinator.sync_group, GROUP, 2, b.member_id, None, "consumer", "range", {})
        assignments = {a.member_id: assignment_bytes(0), b.member_id: assignment_bytes(1)}
        await coordinator.sync_group(GROUP, a2.generation_id, a.member_id, None, "consumer", "range", assignments)
        await b_sync.result()
        assert coordinator.manager.get_group(GROUP).is_state(GroupState.STABLE)
    async with running(log, group_max_size=2) as (same, _):
        assert same.manager.get_group(GROUP).is_state(GroupState.STABLE)
    async with running(log, group_max_size=1) as (lowered, _):
        group = lowered.manager.get_group(GROUP)
        assert group is not None and group.is_state(GroupState.PREPARING_REBALANCE)
        assert lowered.heartbeat(GROUP, a.member_id, None, 2) == ErrorCode.REBALANCE_IN_PROGRESS


async def test_deleted_pending_offsets_stay_deleted_across_a_reload(autojump_clock: trio.testing.MockClock) -> None:
    """OffsetDelete and DeleteGroups write a tombstone for a partition that only has a pending
    transactional offset too, and loading applies a tombstone to the open transactions before
    it (Kafka's deleteOffsets and its replay): a coordinator that reloads the partition before
    the transaction's COMMIT marker does not bring the deleted offsets back."""
    log = InMemoryOffsetsLog(num_partitions=4)
    other = next(g for g in (f"g{i}" for i in range(100)) if g != GROUP)
    async with running(log) as (coordinator, _):
        txn = PendingTxnOffsets(lambda: coordinator)
        await txn.commit(GROUP, PID, 0, "", None, -1, {T0: OffsetAndMetadata(10), T1: OffsetAndMetadata(11)})
        await txn.commit(other, PID, 0, "", None, -1, {T0: OffsetAndMetadata(12)})
        assert await coordinator.delete_offsets(GROUP, [T0]) == (ErrorCode.NONE, {T0: ErrorCode.NONE})
        assert await coordinator.delete_groups([other]) == {other: ErrorCode.NONE}
        partitions = {coordinator.manager.partition_for(g) for g in (GROUP, other)}
    assert log.entries is not None
    for p in partitions:  # the marker lands after the reload's read
        log.entries[p].append(LogEntry(None, None, PID, transactional=True, control=ControlRecordType.COMMIT))
    async with running(log) as (reloaded, _):
        _, offsets = reloaded.fetch_offsets(GROUP, [T0, T1])
        assert (offsets[T0].offset, offsets[T1].offset) == (-1, 11)
        assert reloaded.fetch_offsets(other, [T0])[1][T0].offset == -1


class _HeldCommitsLog(InMemoryOffsetsLog):
    """Holds the next plain (non-transactional) append in the log until ``release`` is set."""

    def __init__(self) -> None:
        super().__init__(num_partitions=4)
        self.hold = False
        self.release = trio.Event()

    async def append(self, partition: int, records: Any, timestamp_ms: int, **kw: Any) -> ErrorCode:
        error = await super().append(partition, records, timestamp_ms, **kw)
        if self.hold and not kw.get("transactional"):
            self.hold = False
            await self.release.wait()
        return error


async def test_a_commit_in_flight_when_its_offset_is_deleted_stays_deleted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The commit's record is in the log before the tombstone: when its append completes after
    the deletion, the offset stays deleted, as a reload would have it (Kafka drops the pending
    commit in removeOffsets)."""
    log = _HeldCommitsLog()
    async with running(log) as (coordinator, nursery):
        await coordinator.commit_offsets(GROUP, UNKNOWN_MEMBER_ID, None, -1, {T0: OffsetAndMetadata(1)})
        log.hold = True
        in_flight = spawn(nursery, coordinator.commit_offsets, GROUP, UNKNOWN_MEMBER_ID, None, -1,
                          {T0: OffsetAndMetadata(5)})  # fmt: skip
        await trio.testing.wait_all_tasks_blocked()
        assert await coordinator.delete_offsets(GROUP, [T0]) == (ErrorCode.NONE, {T0: ErrorCode.NONE})
        log.release.set()
        assert await in_flight.result() == {T0: ErrorCode.NONE}
        assert coordinator.fetch_offsets(GROUP, [T0])[1][T0].offset == -1
