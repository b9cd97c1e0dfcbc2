"""Committed offsets and group persistence in ``__consumer_offsets``: commit, fetch, reload on
restart, retention expiry, DeleteGroups, loading -- under trio's autojump clock."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import pytest
import trio
import trio.testing
from group_harness import GROUP, assignment_bytes, clock_ms, join, join_and_sync_alone, make_config, running

from odradek.broker.group import (
    FIND_COORDINATOR_LOAD_WAIT_S,
    UNKNOWN_MEMBER_ID,
    GroupCoordinator,
    GroupState,
    InMemoryOffsetsLog,
    OffsetAndMetadata,
    partition_for,
)
from odradek.broker.group.schema import GroupKey, OffsetKey, decode_key, decode_offset_value, offset_key, offset_value
from odradek.broker.internal_topic import LogEntry
from odradek.errors import ErrorCode, KafkaError
from odradek.interfaces import TopicPartition

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


async def test_simple_consumer_commit_and_fetch(autojump_clock: trio.testing.MockClock) -> None:
    async with running() as (coordinator, _):
        result = await coordinator.commit_offsets(
            GROUP,
            UNKNOWN_MEMBER_ID,
            None,
            -1,
            {T0: OffsetAndMetadata(42, 3, "meta", clock_ms()), T1: OffsetAndMetadata(7)},
        )
        assert result == {T0: ErrorCode.NONE, T1: ErrorCode.NONE}
        error, offsets = coordinator.fetch_offsets(GROUP, [T0, T1, TopicPartition("t", 2)])
        assert error == ErrorCode.NONE
        assert (offsets[T0].offset, offsets[T0].leader_epoch, offsets[T0].metadata) == (42, 3, "meta")
        assert offsets[T1].offset == 7
        assert offsets[TopicPartition("t", 2)].offset == -1
        _, everything = coordinator.fetch_offsets(GROUP, None)
        assert set(everything) == {T0, T1}
        _, unknown_group = coordinator.fetch_offsets("nobody", [T0])
        assert unknown_group[T0].offset == -1
        group = coordinator.manager.get_group(GROUP)
        assert group is not None and group.state is GroupState.EMPTY and group.protocol_type is None


async def test_member_commit_needs_current_generation(autojump_clock: trio.testing.MockClock) -> None:
    async with running() as (coordinator, _):
        assert (await coordinator.commit_offsets("fresh", "m", None, 1, {T0: OffsetAndMetadata(1)})) == {
            T0: ErrorCode.ILLEGAL_GENERATION
        }
        a = await join_and_sync_alone(coordinator)
        ok = await coordinator.commit_offsets(GROUP, a.member_id, None, 1, {T0: OffsetAndMetadata(10)})
        assert ok == {T0: ErrorCode.NONE}
        assert coordinator.fetch_offsets(GROUP, [T0])[1][T0].offset == 10


async def test_metadata_too_large_and_append_errors(autojump_clock: trio.testing.MockClock) -> None:
    log = InMemoryOffsetsLog(num_partitions=4)
    async with running(log, offset_metadata_max_bytes=4) as (coordinator, _):
        result = await coordinator.commit_offsets(
            GROUP, "", None, -1, {T0: OffsetAndMetadata(1, metadata="too long"), T1: OffsetAndMetadata(2)}
        )
        assert result == {T0: ErrorCode.OFFSET_METADATA_TOO_LARGE, T1: ErrorCode.NONE}
        for appended, returned in [
            (ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.COORDINATOR_NOT_AVAILABLE),
            (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_COORDINATOR),
            (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.INVALID_COMMIT_OFFSET_SIZE),
        ]:
            log.fail_next = [appended]
            assert (await coordinator.commit_offsets(GROUP, "", None, -1, {T1: OffsetAndMetadata(99)})) == {
                T1: returned
            }
        assert coordinator.fetch_offsets(GROUP, [T1])[1][T1].offset == 2  # failed commits changed nothing


async def test_commits_are_records_in_exact_schema(autojump_clock: trio.testing.MockClock) -> None:
    log = InMemoryOffsetsLog(num_partitions=4)
    async with running(log) as (coordinator, _):
        await coordinator.commit_offsets(GROUP, "", None, -1, {T0: OffsetAndMetadata(5, -1, "", 123)})
        assert log.partitions is not None
        [(key, value)] = log.partitions[partition_for(GROUP, 4)]
        assert decode_key(key) == OffsetKey(GROUP, T0)
        assert value is not None and value[:2] == b"\x00\x03"  # OffsetCommitValue v3
        assert decode_offset_value(value).offset == 5


async def test_retention_time_sets_expire_timestamp(autojump_clock: trio.testing.MockClock) -> None:
    async with running(offsets_retention_check_interval_ms=1000) as (coordinator, _):
        now = clock_ms()
        await coordinator.commit_offsets(
            GROUP, "", None, -1, {T0: OffsetAndMetadata(5, commit_timestamp=now, expire_timestamp=now + 5000)}
        )
        await coordinator.commit_offsets(GROUP, "", None, -1, {T1: OffsetAndMetadata(6, commit_timestamp=now)})
        await trio.sleep(6.5)
        _, offsets = coordinator.fetch_offsets(GROUP, [T0, T1])
        assert offsets[T0].offset == -1  # its own retention passed
        assert offsets[T1].offset == 6  # the broker default (7 days) did not


async def test_empty_group_offsets_expire_after_retention(autojump_clock: trio.testing.MockClock) -> None:
    log = InMemoryOffsetsLog(num_partitions=4)
    async with running(log, offsets_retention_minutes=1, offsets_retention_check_interval_ms=10_000) as (
        coordinator,
        _,
    ):
        a = await join_and_sync_alone(coordinator)
        await coordinator.commit_offsets(
            GROUP, a.member_id, None, 1, {T0: OffsetAndMetadata(3, commit_timestamp=clock_ms())}
        )
        coordinator.leave_group(GROUP, [(a.member_id, None)])
        group = coordinator.manager.get_group(GROUP)
        assert group is not None and group.state is GroupState.EMPTY
        await trio.sleep(55)
        assert coordinator.fetch_offsets(GROUP, [T0])[1][T0].offset == 3
        await trio.sleep(20)
        assert coordinator.manager.get_group(GROUP) is None
        assert log.partitions is not None
        tail = log.partitions[partition_for(GROUP, 4)][-2:]
        assert [(decode_key(k), v) for k, v in tail] == [(OffsetKey(GROUP, T0), None), (GroupKey(GROUP), None)]


async def test_stable_group_keeps_offsets_of_subscribed_topics(autojump_clock: trio.testing.MockClock) -> None:
    async with running(offsets_retention_minutes=1, offsets_retention_check_interval_ms=10_000) as (coordinator, _):
        a = await join_and_sync_alone(coordinator, session_ms=300_000)
        other = TopicPartition("unsubscribed", 0)
        await coordinator.commit_offsets(
            GROUP,
            a.member_id,
            None,
            1,
            {
                T0: OffsetAndMetadata(3, commit_timestamp=clock_ms()),
                other: OffsetAndMetadata(1, commit_timestamp=clock_ms()),
            },
        )
        await trio.sleep(75)
        _, offsets = coordinator.fetch_offsets(GROUP, [T0, other])
        assert offsets[T0].offset == 3 and offsets[other].offset == -1


async def test_restart_reloads_offsets_and_stable_group(autojump_clock: trio.testing.MockClock) -> None:
    log = InMemoryOffsetsLog(num_partitions=4)
    async with running(log) as (coordinator, _):
        a = await join_and_sync_alone(coordinator, instance="inst")
        await coordinator.commit_offsets(GROUP, a.member_id, "inst", 1, {T0: OffsetAndMetadata(17, 2, "m")})
        await coordinator.commit_offsets("simple", "", None, -1, {T1: OffsetAndMetadata(8)})
        await coordinator.commit_offsets("simple", "", None, -1, {T1: OffsetAndMetadata(9)})
    # a new coordinator on the same log: a restarted broker
    async with running(log) as (restarted, _):
        _, offsets = restarted.fetch_offsets(GROUP, None)
        assert (offsets[T0].offset, offsets[T0].leader_epoch, offsets[T0].metadata) == (17, 2, "m")
        assert restarted.fetch_offsets("simple", [T1])[1][T1].offset == 9
        group = restarted.manager.get_group(GROUP)
        assert group is not None
        assert (group.state, group.generation_id, group.protocol_name, group.leader_id) == (
            GroupState.STABLE, 1, "range", a.member_id,
        )  # fmt: skip
        # the member resumes: its heartbeat and its assignment are still valid
        assert restarted.heartbeat(GROUP, a.member_id, "inst", 1) == ErrorCode.NONE
        synced = await restarted.sync_group(GROUP, 1, a.member_id, "inst", None, None, {})
        assert synced.assignment == assignment_bytes(0, 1)
        # a restarted static member takes its seat back without a rebalance
        again = await join(restarted, instance="inst")
        assert again.generation_id == 1 and group.state is GroupState.STABLE


async def test_reloaded_members_expire_without_heartbeats(autojump_clock: trio.testing.MockClock) -> None:
    log = InMemoryOffsetsLog(num_partitions=4)
    async with running(log) as (coordinator, _):
        await join_and_sync_alone(coordinator)
    async with running(log) as (restarted, _):
        await trio.sleep(11)
        group = restarted.manager.get_group(GROUP)
        assert group is not None and group.state is GroupState.EMPTY and group.generation_id == 2


async def test_delete_groups(autojump_clock: trio.testing.MockClock) -> None:
    log = InMemoryOffsetsLog(num_partitions=4)
    async with running(log) as (coordinator, _):
        await join_and_sync_alone(coordinator)
        await coordinator.commit_offsets("idle", "", None, -1, {T0: OffsetAndMetadata(1)})
        result = await coordinator.delete_groups([GROUP, "idle", "missing"])
        assert result == {
            GROUP: ErrorCode.NON_EMPTY_GROUP,
            "idle": ErrorCode.NONE,
            "missing": ErrorCode.GROUP_ID_NOT_FOUND,
        }
        assert coordinator.fetch_offsets("idle", [T0])[1][T0].offset == -1
        assert coordinator.describe_group("idle").state == "Dead"
    async with running(log) as (restarted, _):
        assert restarted.manager.get_group("idle") is None  # the tombstones survive a restart


class SlowLog(InMemoryOffsetsLog):
    """Reading a partition takes ``delay_s`` (a second): long enough to see the coordinator loading."""

    delay_s = 1.0

    async def read_entries(self, partition: int) -> AsyncIterator[LogEntry]:
        await trio.sleep(self.delay_s)
        async for entry in super().read_entries(partition):
            yield entry


async def test_groups_answer_load_in_progress_while_loading(autojump_clock: trio.testing.MockClock) -> None:
    log = SlowLog(num_partitions=4)
    async with running(log) as (coordinator, _):
        await coordinator.wait_for_loads()
        assert await coordinator.commit_offsets(GROUP, "", None, -1, {T0: OffsetAndMetadata(4)}) == {T0: ErrorCode.NONE}
    restarted = GroupCoordinator(log, make_config(), now_ms=clock_ms)
    async with trio.open_nursery() as nursery:
        await nursery.start(restarted.run)
        error, _ = restarted.fetch_offsets(GROUP, [T0])
        assert error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        assert restarted.heartbeat(GROUP, "m", None, 1) == ErrorCode.NONE  # Kafka answers blindly
        assert (
            await restarted.sync_group(GROUP, 1, "m", None, None, None, {})
        ).error == ErrorCode.REBALANCE_IN_PROGRESS
        assert restarted.list_groups()[0] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        await trio.sleep(5)
        error, offsets = restarted.fetch_offsets(GROUP, [T0])
        assert error == ErrorCode.NONE and offsets[T0].offset == 4
        nursery.cancel_scope.cancel()


class FailingOnceLog(InMemoryOffsetsLog):
    """The first read of each partition fails (its leader moved away mid-read, say)."""

    def __init__(self, num_partitions: int) -> None:
        super().__init__(num_partitions=num_partitions)
        self.failed: set[int] = set()

    async def read_entries(self, partition: int) -> AsyncIterator[LogEntry]:
        if partition not in self.failed:
            self.failed.add(partition)
            raise KafkaError("fetch failed", code=ErrorCode.NOT_LEADER_OR_FOLLOWER)
        async for entry in super().read_entries(partition):
            yield entry


async def test_a_load_failing_at_start_is_retried_and_the_coordinator_keeps_running(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A restarted coordinator's first loads failing (a read of the log that cannot reach its
    end raises) used to end the coordinator's nursery, and with it the broker; now the partition
    stays unowned, answers COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR, and the next ownership
    check loads it."""
    log = FailingOnceLog(num_partitions=4)
    log.failed.update(range(4))  # the first coordinator reads fine
    async with running(log) as (coordinator, _):
        assert await coordinator.commit_offsets(GROUP, "", None, -1, {T0: OffsetAndMetadata(4)}) == {T0: ErrorCode.NONE}
    log.failed.clear()
    restarted = GroupCoordinator(log, make_config(), now_ms=clock_ms)
    async with trio.open_nursery() as nursery:
        await nursery.start(restarted.run)
        await restarted.wait_for_loads()
        assert restarted.fetch_offsets(GROUP, [T0])[0] is not ErrorCode.NONE
        await trio.sleep(30)  # ownership checks
        error, offsets = restarted.fetch_offsets(GROUP, [T0])
        assert error == ErrorCode.NONE and offsets[T0].offset == 4
        nursery.cancel_scope.cancel()


async def test_a_load_whose_leadership_moved_is_cancelled_not_installed(autojump_clock: trio.testing.MockClock) -> None:
    """A partition still loading when its leadership moves to another broker: the load is
    cancelled, its groups are never installed here (they were, and answered as coordinator
    until the next ownership check resigned them)."""
    log = SlowLog(num_partitions=4)
    log.delay_s = 0.0
    async with running(log) as (coordinator, _):
        assert await coordinator.commit_offsets(GROUP, "", None, -1, {T0: OffsetAndMetadata(4)}) == {T0: ErrorCode.NONE}
    log.delay_s = 10.0
    restarted = GroupCoordinator(log, make_config(), now_ms=clock_ms)
    installed: list[str] = []
    restarted.on_group_loaded = lambda group: installed.append(group.group_id)  # type: ignore[method-assign]
    async with trio.open_nursery() as nursery:
        await nursery.start(restarted.run)
        partition = restarted.partition_for(GROUP)
        assert partition in restarted.manager.loading
        log.node = dataclasses.replace(log.node, node_id=5)  # another broker leads it now
        await trio.sleep(20)  # ownership checks, and past the end of the slow read
        assert partition not in restarted.manager.owned | restarted.manager.loading
        assert installed == [], "groups of a leadership that had ended were installed"
        assert restarted.fetch_offsets(GROUP, [T0])[0] == ErrorCode.NOT_COORDINATOR
        nursery.cancel_scope.cancel()


async def test_find_coordinator_does_not_wait_out_a_long_load(autojump_clock: trio.testing.MockClock) -> None:
    """As Kafka's: a partition that takes long to load (a big __consumer_offsets partition after
    a failover) is loaded in the background; FindCoordinator answers after at most
    FIND_COORDINATOR_LOAD_WAIT_S (it used to wait for the whole load, past clients' request
    timeouts), other partitions' lookups are not held up, and the group's requests get
    COORDINATOR_LOAD_IN_PROGRESS until the load ends."""
    log = SlowLog(num_partitions=4)
    log.delay_s = 60
    coordinator = GroupCoordinator(log, make_config(), now_ms=clock_ms)
    async with trio.open_nursery() as nursery:
        await nursery.start(coordinator.run)
        start = trio.current_time()
        found = await coordinator.find_coordinator(GROUP)
        assert found.error == ErrorCode.NONE
        assert trio.current_time() - start == pytest.approx(FIND_COORDINATOR_LOAD_WAIT_S)
        other = next(g for g in (f"g{i}" for i in range(100)) if partition_for(g, 4) != partition_for(GROUP, 4))
        start = trio.current_time()
        assert (await coordinator.find_coordinator(other)).error == ErrorCode.NONE
        assert trio.current_time() - start <= FIND_COORDINATOR_LOAD_WAIT_S  # loading too, in parallel
        assert coordinator.fetch_offsets(GROUP, [T0])[0] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        assert (await join(coordinator)).error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        await coordinator.wait_for_loads()
        assert trio.current_time() - start < 61  # the partitions loaded side by side
        assert coordinator.fetch_offsets(GROUP, [T0])[0] == ErrorCode.NONE
        nursery.cancel_scope.cancel()


async def test_a_leadership_lost_and_regained_between_checks_reloads_the_partition(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The __consumer_offsets partition's leadership went to another broker and came back
    between two ownership checks (its leader epoch moved on): commits made on the other leader
    are in the log, not in this coordinator's cached groups, so it loads the partition again,
    as the transaction coordinator does. It kept the stale offsets."""
    log = InMemoryOffsetsLog(num_partitions=4)
    async with running(log) as (coordinator, _):
        assert await coordinator.commit_offsets(GROUP, UNKNOWN_MEMBER_ID, None, -1, {T0: OffsetAndMetadata(5)}) == {
            T0: ErrorCode.NONE
        }
        p = partition_for(GROUP, 4)
        await log.append(p, [(offset_key(GROUP, T0), offset_value(OffsetAndMetadata(9)))], clock_ms())
        await coordinator.refresh_ownership()  # same leader epoch: nothing to reload
        assert coordinator.fetch_offsets(GROUP, [T0])[1][T0].offset == 5
        log.node = dataclasses.replace(log.node, leader_epoch=log.node.leader_epoch + 2)
        await coordinator.refresh_ownership()
        assert coordinator.fetch_offsets(GROUP, [T0])[0] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        await coordinator.wait_for_loads()
        assert coordinator.fetch_offsets(GROUP, [T0])[1][T0].offset == 9
