"""KIP-848 heartbeats are answered after their records are in ``__consumer_offsets`` (Kafka's
coordinator runtime), sans-IO under trio's autojump clock: a slow log holds the answer (and the
group's next heartbeat) back, a failed write undoes the change and answers the mapped error, a
heartbeat that changes nothing writes nothing and waits for nothing, and a timer whose write
failed tries again."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from group_harness import GROUP, running, spawn
from test_consumer_groups import ORDERS, count, hb, lookup, reset_topics

from odradek.broker.group import InMemoryOffsetsLog
from odradek.broker.group.consumer_group import ConsumerGroupState
from odradek.errors import ErrorCode


class GatedLog(InMemoryOffsetsLog):
    """An in-memory ``__consumer_offsets`` whose appends wait for :attr:`gate` while it is set
    (a slow replication: the high watermark does not move)."""

    def __init__(self) -> None:
        super().__init__(num_partitions=4)
        self.gate: trio.Event | None = None

    async def append(self, *args: Any, **kwargs: Any) -> ErrorCode:
        if self.gate is not None:
            await self.gate.wait()
        return await super().append(*args, **kwargs)


def written_keys(log: InMemoryOffsetsLog) -> int:
    return sum(len(entries) for entries in (log.entries or {}).values())


async def test_a_heartbeat_waits_for_its_records(autojump_clock: trio.testing.MockClock) -> None:
    reset_topics()
    log = GatedLog()
    async with running(log, topics=lookup) as (coordinator, nursery):
        assert (await hb(coordinator, "o1", 0, group="other")).member_epoch == 1
        log.gate = trio.Event()
        joining = spawn(nursery, hb, coordinator, "m1", 0)
        await trio.sleep(30)
        assert not joining.done.is_set()  # its records are not written: no answer yet
        # the group's next heartbeat waits behind that write; another group's is not held up
        again = spawn(nursery, hb, coordinator, "m1", 1)
        with trio.fail_after(1):
            assert (await hb(coordinator, "o1", 1, group="other")).error == ErrorCode.NONE
        await trio.sleep(1)
        assert not again.done.is_set()
        log.gate.set()
        first = await joining.result()
        assert first.error == ErrorCode.NONE and first.member_epoch == 1
        assert first.assignment == {ORDERS: frozenset(range(6))}
        assert (await again.result()).member_epoch == 1


async def test_a_heartbeat_without_changes_writes_nothing(autojump_clock: trio.testing.MockClock) -> None:
    reset_topics()
    log = GatedLog()
    async with running(log, topics=lookup) as (coordinator, _):
        assert (await hb(coordinator, "m1", 0)).member_epoch == 1
        appends, keys = log.appends, written_keys(log)
        log.gate = trio.Event()  # a write would now hang: these heartbeats must not write
        for _ in range(3):
            with trio.fail_after(1):
                assert (await hb(coordinator, "m1", 1)).error == ErrorCode.NONE
        assert (log.appends, written_keys(log)) == (appends, keys)


async def test_a_failed_write_is_undone_and_answered_with_its_error(autojump_clock: trio.testing.MockClock) -> None:
    reset_topics()
    log = InMemoryOffsetsLog(num_partitions=4)
    async with running(log, topics=lookup) as (coordinator, _):
        m1 = await hb(coordinator, "m1", 0)
        assert count(m1.assignment) == 6
        group = coordinator.manager.consumer_groups[GROUP]
        before = (group.group_epoch, group.assignment_epoch, dict(group.target), dict(group.members))
        # m2 joins, but the write fails: it is not a member, and m1 keeps everything
        log.fail_next = [ErrorCode.NOT_ENOUGH_REPLICAS]
        failed = await hb(coordinator, "m2", 0)
        assert failed.error == ErrorCode.COORDINATOR_NOT_AVAILABLE and failed.assignment is None
        group = coordinator.manager.consumer_groups[GROUP]
        assert (group.group_epoch, group.assignment_epoch, dict(group.target), dict(group.members)) == before
        assert "m2" not in group.members and ("cg-session", GROUP, "m2") not in coordinator.timers
        kept = await hb(coordinator, "m1", 1, owned=m1.assignment)
        assert kept.member_epoch == 1 and count(kept.assignment) == 6  # no revocation was asked
        # a write that fails because this broker no longer leads the partition: NOT_COORDINATOR
        log.fail_next = [ErrorCode.NOT_LEADER_OR_FOLLOWER]
        assert (await hb(coordinator, "m2", 0)).error == ErrorCode.NOT_COORDINATOR
        # the member retries and gets in; what it is told is what the log says
        joined = await hb(coordinator, "m2", 0)
        assert joined.error == ErrorCode.NONE and joined.member_epoch == 2
    async with running(log, topics=lookup) as (restarted, _):
        loaded = restarted.manager.consumer_groups[GROUP]
        assert set(loaded.members) == {"m1", "m2"} and loaded.group_epoch == 2


async def test_a_new_group_whose_write_fails_does_not_exist(autojump_clock: trio.testing.MockClock) -> None:
    reset_topics()
    log = InMemoryOffsetsLog(num_partitions=4)
    async with running(log, topics=lookup) as (coordinator, _):
        log.fail_next = [ErrorCode.REQUEST_TIMED_OUT]
        assert (await hb(coordinator, "m1", 0)).error == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert GROUP not in coordinator.manager.consumer_groups
        assert GROUP not in coordinator.manager.consumer_written
        assert ("cg-session", GROUP, "m1") not in coordinator.timers
        first = await hb(coordinator, "m1", 0)
        assert first.error == ErrorCode.NONE and first.member_epoch == 1


async def test_a_leave_whose_write_fails_keeps_the_member(autojump_clock: trio.testing.MockClock) -> None:
    reset_topics()
    log = InMemoryOffsetsLog(num_partitions=4)
    async with running(log, topics=lookup) as (coordinator, _):
        await hb(coordinator, "m1", 0)
        log.fail_next = [ErrorCode.NOT_ENOUGH_REPLICAS]
        assert (await hb(coordinator, "m1", -1)).error == ErrorCode.COORDINATOR_NOT_AVAILABLE
        group = coordinator.manager.consumer_groups[GROUP]
        assert set(group.members) == {"m1"} and ("cg-session", GROUP, "m1") in coordinator.timers
        assert (await hb(coordinator, "m1", -1)).error == ErrorCode.NONE
        assert coordinator.manager.consumer_groups[GROUP].state is ConsumerGroupState.EMPTY


async def test_a_session_timeout_whose_write_fails_is_retried(autojump_clock: trio.testing.MockClock) -> None:
    reset_topics()
    log = InMemoryOffsetsLog(num_partitions=4)
    async with running(log, topics=lookup, group_consumer_session_timeout_ms=10_000) as (coordinator, _):
        await hb(coordinator, "m1", 0)
        log.fail_next = [ErrorCode.NOT_ENOUGH_REPLICAS]
        await trio.sleep(10.2)  # expired; its fencing could not be written, so it is undone
        group = coordinator.manager.consumer_groups[GROUP]
        assert set(group.members) == {"m1"} and log.fail_next == []
        await trio.sleep(0.5)  # tried again
        assert coordinator.manager.consumer_groups[GROUP].members == {}
    async with running(log, topics=lookup) as (restarted, _):
        assert restarted.manager.consumer_groups[GROUP].members == {}


async def test_deleting_a_group_whose_tombstones_fail_keeps_it(autojump_clock: trio.testing.MockClock) -> None:
    reset_topics()
    log = InMemoryOffsetsLog(num_partitions=4)
    async with running(log, topics=lookup) as (coordinator, _):
        await hb(coordinator, "m1", 0)
        await hb(coordinator, "m1", -1)
        log.fail_next = [ErrorCode.NOT_LEADER_OR_FOLLOWER]
        assert (await coordinator.delete_groups([GROUP]))[GROUP] == ErrorCode.NOT_COORDINATOR
        assert GROUP in coordinator.manager.consumer_groups
        assert (await coordinator.delete_groups([GROUP]))[GROUP] == ErrorCode.NONE
        assert GROUP not in coordinator.manager.consumer_groups


async def test_an_operation_that_raises_is_undone(autojump_clock: trio.testing.MockClock) -> None:
    """A bug in an operation half-way through leaves the group as last written (and a timer's
    operation that raises does not stop the coordinator)."""
    reset_topics()
    async with running(topics=lookup) as (coordinator, _):
        await hb(coordinator, "m1", 0)
        epoch = coordinator.manager.consumer_groups[GROUP].group_epoch

        def broken() -> None:
            coordinator.consumer.remove(coordinator.manager.consumer_groups[GROUP], "m1")
            raise RuntimeError("a bug")

        with pytest.raises(RuntimeError):
            await coordinator.consumer_writer.run(GROUP, broken)
        assert set(coordinator.manager.consumer_groups[GROUP].members) == {"m1"}
        assert coordinator.manager.consumer_groups[GROUP].group_epoch == epoch == 1
        coordinator.consumer.submit(GROUP, broken, lambda: None)
        await trio.sleep(1)
        assert (await hb(coordinator, "m1", 1)).error == ErrorCode.NONE  # still serving
