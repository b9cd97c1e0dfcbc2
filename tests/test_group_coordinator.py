"""The group coordinator's rebalance protocol under trio's autojump clock (no sleeping).

Each test runs a real GroupCoordinator on an in-memory ``__consumer_offsets`` and drives it the
way clients do: concurrent JoinGroups parked until the join phase completes, SyncGroups waiting
for the leader, heartbeats, leaves, session and rebalance timeouts passing in virtual time.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing
from group_harness import (
    GROUP,
    SESSION_MS,
    assignment_bytes,
    clock_ms,
    join,
    join_and_sync_alone,
    make_config,
    protocols,
    running,
    spawn,
)

from odradek.broker.group import UNKNOWN_MEMBER_ID, GroupCoordinator, GroupState, InMemoryOffsetsLog, OffsetAndMetadata
from odradek.errors import ErrorCode
from odradek.interfaces import TopicPartition


async def test_single_member_join_sync_heartbeat(autojump_clock: trio.testing.MockClock) -> None:
    async with running() as (coordinator, _):
        joined = await join(coordinator)
        assert joined.error == ErrorCode.NONE
        assert joined.generation_id == 1
        assert joined.leader_id == joined.member_id
        assert joined.member_id.startswith("client-")
        assert joined.protocol_name == "range"
        assert [m.member_id for m in joined.members] == [joined.member_id]
        group = coordinator.manager.get_group(GROUP)
        assert group is not None and group.state is GroupState.COMPLETING_REBALANCE
        synced = await coordinator.sync_group(
            GROUP, 1, joined.member_id, None, "consumer", "range", {joined.member_id: assignment_bytes(0, 1)}
        )
        assert synced.error == ErrorCode.NONE
        assert synced.assignment == assignment_bytes(0, 1)
        assert group.state is GroupState.STABLE
        assert coordinator.heartbeat(GROUP, joined.member_id, None, 1) == ErrorCode.NONE


async def test_member_id_required_round_trip(autojump_clock: trio.testing.MockClock) -> None:
    async with running() as (coordinator, _):
        first = await join(coordinator, require_known=True)
        assert first.error == ErrorCode.MEMBER_ID_REQUIRED
        assert first.member_id.startswith("client-")
        group = coordinator.manager.get_group(GROUP)
        assert group is not None and first.member_id in group.pending_members
        second = await join(coordinator, first.member_id, require_known=True)
        assert second.error == ErrorCode.NONE
        assert second.member_id == first.member_id
        assert not group.pending_members


async def test_pending_member_expires_after_session_timeout(autojump_clock: trio.testing.MockClock) -> None:
    async with running() as (coordinator, _):
        first = await join(coordinator, require_known=True)
        await trio.sleep(SESSION_MS / 1000 + 1)
        group = coordinator.manager.get_group(GROUP)
        assert group is not None and not group.pending_members
        late = await join(coordinator, first.member_id, require_known=True)
        assert late.error == ErrorCode.UNKNOWN_MEMBER_ID


async def test_second_member_triggers_rebalance_and_both_get_assignments(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with running() as (coordinator, nursery):
        a = await join_and_sync_alone(coordinator)
        b_join = spawn(nursery, join, coordinator)
        await trio.testing.wait_all_tasks_blocked()
        assert coordinator.heartbeat(GROUP, a.member_id, None, 1) == ErrorCode.REBALANCE_IN_PROGRESS
        a2 = await join(coordinator, a.member_id)
        b = await b_join.result()
        assert a2.error == b.error == ErrorCode.NONE
        assert a2.generation_id == b.generation_id == 2
        assert a2.leader_id == a.member_id == b.leader_id
        assert {m.member_id for m in a2.members} == {a.member_id, b.member_id}
        assert b.members == ()
        b_sync = spawn(nursery, coordinator.sync_group, GROUP, 2, b.member_id, None, "consumer", "range", {})
        await trio.testing.wait_all_tasks_blocked()
        assert not b_sync.done.is_set()  # followers wait for the leader's assignment
        leader_sync = await coordinator.sync_group(
            GROUP, 2, a.member_id, None, "consumer", "range",
            {a.member_id: assignment_bytes(0), b.member_id: assignment_bytes(1)},
        )  # fmt: skip
        assert leader_sync.assignment == assignment_bytes(0)
        assert (await b_sync.result()).assignment == assignment_bytes(1)


async def test_session_timeout_removes_silent_member_and_rebalances(autojump_clock: trio.testing.MockClock) -> None:
    async with running() as (coordinator, nursery):
        a = await join_and_sync_alone(coordinator)
        b_join = spawn(nursery, join, coordinator)
        await trio.testing.wait_all_tasks_blocked()
        a2 = await join(coordinator, a.member_id)
        b = await b_join.result()
        spawn(nursery, coordinator.sync_group, GROUP, 2, b.member_id, None, None, None, {})
        await coordinator.sync_group(GROUP, 2, a.member_id, None, None, None, {a.member_id: b"", b.member_id: b""})
        group = coordinator.manager.get_group(GROUP)
        assert group is not None and group.state is GroupState.STABLE
        # b keeps heartbeating, a goes silent: a expires after its session timeout
        start = trio.current_time()
        while trio.current_time() - start < SESSION_MS / 1000 * 1.5:
            error = coordinator.heartbeat(GROUP, b.member_id, None, 2)
            if error != ErrorCode.NONE:
                break
            await trio.sleep(1)
        assert error == ErrorCode.REBALANCE_IN_PROGRESS
        assert not group.has(a2.member_id)
        assert SESSION_MS / 1000 <= trio.current_time() - start <= SESSION_MS / 1000 + 1.5
        b2 = await join(coordinator, b.member_id)
        assert b2.generation_id == 3 and b2.leader_id == b.member_id


async def test_last_member_expiring_leaves_group_empty(autojump_clock: trio.testing.MockClock) -> None:
    async with running() as (coordinator, _):
        await join_and_sync_alone(coordinator)
        await trio.sleep(SESSION_MS / 1000 + 0.1)
        group = coordinator.manager.get_group(GROUP)
        assert group is not None and group.state is GroupState.EMPTY
        assert group.generation_id == 2 and not group.members


async def test_rebalance_timeout_drops_members_that_do_not_rejoin(autojump_clock: trio.testing.MockClock) -> None:
    async with running() as (coordinator, _nursery):
        a = await join_and_sync_alone(coordinator, session_ms=60_000, rebalance_ms=5_000)
        start = trio.current_time()
        b = await join(coordinator, session_ms=60_000, rebalance_ms=5_000)  # a never rejoins
        assert trio.current_time() - start == pytest.approx(5.0, abs=0.01)
        assert b.error == ErrorCode.NONE and b.generation_id == 2
        assert b.leader_id == b.member_id  # leadership moved to a member that rejoined
        assert coordinator.heartbeat(GROUP, a.member_id, None, 1) == ErrorCode.UNKNOWN_MEMBER_ID


async def test_initial_rebalance_delay_collects_members(autojump_clock: trio.testing.MockClock) -> None:
    async with running(group_initial_rebalance_delay_ms=3000) as (coordinator, nursery):
        start = trio.current_time()
        first = spawn(nursery, join, coordinator)
        await trio.sleep(2)
        second = spawn(nursery, join, coordinator)
        a, b = await first.result(), await second.result()
        # at the end of the first 3 s delay a member had arrived: Kafka waits another full delay
        assert trio.current_time() - start == pytest.approx(6.0, abs=0.01)
        assert a.generation_id == b.generation_id == 1
        assert len(a.members or b.members) == 2


async def test_protocol_vote_and_inconsistent_protocols(autojump_clock: trio.testing.MockClock) -> None:
    async with running() as (coordinator, nursery):
        calls = [
            spawn(nursery, join, coordinator, protos=protocols("range", "roundrobin")),
            spawn(nursery, join, coordinator, protos=protocols("roundrobin", "range")),
            spawn(nursery, join, coordinator, protos=protocols("roundrobin")),
        ]
        results = [await c.result() for c in calls]
        assert {r.protocol_name for r in results} == {"roundrobin"}
        bad = await join(coordinator, protos=protocols("sticky"))
        assert bad.error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        other_type = await join(coordinator, protocol_type="connect", protos=protocols("roundrobin"))
        assert other_type.error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


async def test_fencing_errors(autojump_clock: trio.testing.MockClock) -> None:
    async with running(group_max_size=1) as (coordinator, _):
        assert (await join(coordinator, session_ms=500)).error == ErrorCode.INVALID_SESSION_TIMEOUT
        assert (await join(coordinator, group="")).error == ErrorCode.INVALID_GROUP_ID
        assert (await join(coordinator, "nobody", group="other")).error == ErrorCode.UNKNOWN_MEMBER_ID
        a = await join_and_sync_alone(coordinator)
        assert (await join(coordinator)).error == ErrorCode.GROUP_MAX_SIZE_REACHED
        assert coordinator.heartbeat(GROUP, a.member_id, None, 7) == ErrorCode.ILLEGAL_GENERATION
        assert coordinator.heartbeat(GROUP, "nobody", None, 1) == ErrorCode.UNKNOWN_MEMBER_ID
        assert coordinator.heartbeat("other", a.member_id, None, 1) == ErrorCode.UNKNOWN_MEMBER_ID
        wrong_gen = await coordinator.sync_group(GROUP, 5, a.member_id, None, None, None, {})
        assert wrong_gen.error == ErrorCode.ILLEGAL_GENERATION
        wrong_proto = await coordinator.sync_group(GROUP, 1, a.member_id, None, "consumer", "sticky", {})
        assert wrong_proto.error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        tp = TopicPartition("t", 0)
        commit = await coordinator.commit_offsets(GROUP, a.member_id, None, 3, {tp: OffsetAndMetadata(5)})
        assert commit == {tp: ErrorCode.ILLEGAL_GENERATION}
        outsider = await coordinator.commit_offsets(GROUP, UNKNOWN_MEMBER_ID, None, -1, {tp: OffsetAndMetadata(5)})
        assert outsider == {tp: ErrorCode.UNKNOWN_MEMBER_ID}  # only members commit for a live group
        # the leader rejoins: rebalance; a SyncGroup during it is refused
        await join(coordinator, a.member_id)  # completes at once: a is the only member
        assert (await coordinator.commit_offsets(GROUP, a.member_id, None, 2, {tp: OffsetAndMetadata(5)})) == {
            tp: ErrorCode.REBALANCE_IN_PROGRESS
        }


async def test_sync_during_preparing_rebalance(autojump_clock: trio.testing.MockClock) -> None:
    async with running() as (coordinator, nursery):
        a = await join_and_sync_alone(coordinator)
        spawn(nursery, join, coordinator)
        await trio.testing.wait_all_tasks_blocked()
        early = await coordinator.sync_group(GROUP, 1, a.member_id, None, None, None, {})
        assert early.error == ErrorCode.REBALANCE_IN_PROGRESS


async def test_static_member_restart_keeps_assignment_without_rebalance(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with running() as (coordinator, nursery):
        a = await join(coordinator, instance="app-1")
        assert a.member_id.startswith("app-1-")
        b_join = spawn(nursery, join, coordinator, instance="app-2")
        await trio.testing.wait_all_tasks_blocked()
        a = await join(coordinator, a.member_id, instance="app-1")
        b = await b_join.result()
        assert a.generation_id == b.generation_id == 2
        leader, follower = (a, b) if a.leader_id == a.member_id else (b, a)
        plan = {leader.member_id: assignment_bytes(0, 1), follower.member_id: assignment_bytes(2, 3)}
        follower_sync = spawn(nursery, coordinator.sync_group, GROUP, 2, follower.member_id, None, None, None, {})
        await coordinator.sync_group(GROUP, 2, leader.member_id, None, None, None, plan)
        await follower_sync.result()
        group = coordinator.manager.get_group(GROUP)
        assert group is not None and group.state is GroupState.STABLE
        # the follower's process restarts: same instance id, no member id
        follower_instance = "app-1" if follower is a else "app-2"
        rejoined = await join(coordinator, instance=follower_instance)
        assert rejoined.error == ErrorCode.NONE
        assert rejoined.member_id != follower.member_id
        assert rejoined.generation_id == 2  # no rebalance
        assert rejoined.leader_id == leader.member_id
        assert group.state is GroupState.STABLE
        synced = await coordinator.sync_group(GROUP, 2, rejoined.member_id, follower_instance, None, None, {})
        assert synced.assignment == assignment_bytes(2, 3)
        # the old incarnation is fenced
        fenced = coordinator.heartbeat(GROUP, follower.member_id, follower_instance, 2)
        assert fenced == ErrorCode.FENCED_INSTANCE_ID
        assert coordinator.heartbeat(GROUP, leader.member_id, None, 2) == ErrorCode.NONE


async def test_static_leader_restart_does_not_make_it_assign(autojump_clock: trio.testing.MockClock) -> None:
    async with running() as (coordinator, _):
        a = await join_and_sync_alone(coordinator, instance="solo")
        again = await join(coordinator, instance="solo")
        assert again.generation_id == a.generation_id
        assert again.leader_id == a.member_id != again.member_id
        assert again.members == ()


async def test_static_member_survives_rebalance_while_away(autojump_clock: trio.testing.MockClock) -> None:
    async with running() as (coordinator, _nursery):
        a = await join_and_sync_alone(coordinator, instance="s1", session_ms=60_000, rebalance_ms=5_000)
        b = await join(coordinator, session_ms=60_000, rebalance_ms=5_000)  # a does not rejoin in time
        assert b.generation_id == 2
        group = coordinator.manager.get_group(GROUP)
        assert group is not None and group.has(a.member_id)  # static members keep their seat


async def test_batch_leave_and_leave_by_instance_id(autojump_clock: trio.testing.MockClock) -> None:
    async with running() as (coordinator, _nursery):
        a = await join_and_sync_alone(coordinator, instance="i1")
        error, per_member = coordinator.leave_group(GROUP, [("", "i1"), ("ghost", None), ("other-id", "i1")])
        assert error == ErrorCode.NONE
        assert per_member == [ErrorCode.NONE, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.UNKNOWN_MEMBER_ID]
        group = coordinator.manager.get_group(GROUP)
        assert group is not None and not group.has(a.member_id)
        assert group.state is GroupState.EMPTY
        b = await join_and_sync_alone(coordinator, instance="i2")
        error, per_member = coordinator.leave_group(GROUP, [("stale", "i2")])
        assert per_member == [ErrorCode.FENCED_INSTANCE_ID]
        error, per_member = coordinator.leave_group(GROUP, [(b.member_id, "i2")])
        assert per_member == [ErrorCode.NONE]


async def test_leave_wakes_up_join_phase(autojump_clock: trio.testing.MockClock) -> None:
    async with running() as (coordinator, nursery):
        a = await join_and_sync_alone(coordinator)
        start = trio.current_time()
        b_join = spawn(nursery, join, coordinator)
        await trio.testing.wait_all_tasks_blocked()
        coordinator.leave_group(GROUP, [(a.member_id, None)])
        b = await b_join.result()
        assert trio.current_time() == start  # no waiting for the rebalance timeout
        assert b.generation_id == 2 and b.leader_id == b.member_id


async def test_pending_sync_expiry_removes_members_that_never_sync(autojump_clock: trio.testing.MockClock) -> None:
    async with running() as (coordinator, nursery):
        a = await join_and_sync_alone(coordinator, rebalance_ms=5_000)
        b_join = spawn(nursery, join, coordinator, rebalance_ms=5_000)
        await trio.testing.wait_all_tasks_blocked()
        await join(coordinator, a.member_id, rebalance_ms=5_000)
        b = await b_join.result()
        await coordinator.sync_group(GROUP, 2, a.member_id, None, None, None, {})  # the leader syncs, b never does
        await trio.sleep(5.1)
        group = coordinator.manager.get_group(GROUP)
        assert group is not None and not group.has(b.member_id)
        assert group.state is GroupState.PREPARING_REBALANCE


async def test_duplicate_join_answers_superseded_request(autojump_clock: trio.testing.MockClock) -> None:
    async with running() as (coordinator, nursery):
        a_join, c_join = spawn(nursery, join, coordinator), spawn(nursery, join, coordinator)
        a, c = await a_join.result(), await c_join.result()
        spawn(nursery, coordinator.sync_group, GROUP, 1, c.member_id, None, None, None, {})
        await coordinator.sync_group(GROUP, 1, a.member_id, None, None, None, {})
        spawn(nursery, join, coordinator)  # b: a rebalance starts; c is slow to rejoin
        await trio.testing.wait_all_tasks_blocked()
        first = spawn(nursery, join, coordinator, a.member_id, protos=protocols("range", topics=("x",)))
        await trio.testing.wait_all_tasks_blocked()
        second = spawn(nursery, join, coordinator, a.member_id)
        assert (await first.result()).error == ErrorCode.REBALANCE_IN_PROGRESS
        await join(coordinator, c.member_id)
        assert (await second.result()).error == ErrorCode.NONE


async def test_assignment_store_failure_is_returned_to_members(autojump_clock: trio.testing.MockClock) -> None:
    log = InMemoryOffsetsLog(num_partitions=4)
    async with running(log) as (coordinator, _):
        joined = await join(coordinator)
        log.fail_next = [ErrorCode.NOT_ENOUGH_REPLICAS]
        synced = await coordinator.sync_group(GROUP, 1, joined.member_id, None, None, None, {joined.member_id: b"x"})
        assert synced.error == ErrorCode.COORDINATOR_NOT_AVAILABLE
        group = coordinator.manager.get_group(GROUP)
        assert group is not None and group.state is GroupState.PREPARING_REBALANCE


async def test_describe_and_list_groups(autojump_clock: trio.testing.MockClock) -> None:
    async with running() as (coordinator, _):
        assert coordinator.describe_group("nope").state == "Dead"
        a = await join_and_sync_alone(coordinator)
        described = coordinator.describe_group(GROUP)
        assert (described.state, described.protocol_type, described.protocol) == ("Stable", "consumer", "range")
        [member] = described.members
        assert member.member_id == a.member_id and member.client_host == "/127.0.0.1"
        assert member.assignment == assignment_bytes(0, 1)
        error, groups = coordinator.list_groups()
        assert error == ErrorCode.NONE
        assert [(g.group_id, g.protocol_type, g.state) for g in groups] == [(GROUP, "consumer", "Stable")]
        assert coordinator.list_groups(["empty"])[1] == []
        assert [g.group_type for g in coordinator.list_groups(types=["CLASSIC"])[1]] == ["classic"]
        assert coordinator.list_groups(types=["consumer", "share"]) == (ErrorCode.NONE, [])


async def test_find_coordinator_creates_topic_and_points_here(autojump_clock: trio.testing.MockClock) -> None:
    log = InMemoryOffsetsLog(num_partitions=4)
    coordinator = GroupCoordinator(log, make_config(), now_ms=clock_ms)
    async with trio.open_nursery() as nursery:
        await nursery.start(coordinator.run)
        assert await coordinator.find_coordinator("x") is not None
        assert log.partitions is not None and len(log.partitions) == 4
        found = await coordinator.find_coordinator("x")
        assert (found.error, found.node_id, found.host, found.port) == (ErrorCode.NONE, 0, "127.0.0.1", 9092)
        assert coordinator.manager.owned == {0, 1, 2, 3}
        nursery.cancel_scope.cancel()


async def test_requests_before_start_get_coordinator_not_available() -> None:
    coordinator = GroupCoordinator(InMemoryOffsetsLog(4), make_config())
    assert coordinator.heartbeat(GROUP, "m", None, 1) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert (await coordinator.find_coordinator(GROUP)).error == ErrorCode.COORDINATOR_NOT_AVAILABLE


async def test_assignment_store_failing_on_a_full_disk_does_not_rebalance_in_a_loop(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A full disk fails every store of the group's assignment (KAFKA_STORAGE_ERROR): the leader
    and the waiting follower get Kafka's NOT_COORDINATOR, the group goes back to
    PreparingRebalance once, and members that rejoin at once (librdkafka does, after
    NOT_COORDINATOR) find the next join phase held back: a few rebalances in 20 s, not
    thousands (the bug hunt logged 4,078 in 6 s). Once the disk has room the group settles."""
    log = InMemoryOffsetsLog(num_partitions=4)
    async with running(log) as (coordinator, nursery):
        a = await join_and_sync_alone(coordinator)
        group = coordinator.manager.get_group(GROUP)
        assert group is not None
        log.fail_next = [ErrorCode.KAFKA_STORAGE_ERROR] * 100_000
        b_join = spawn(nursery, join, coordinator)
        await trio.testing.wait_all_tasks_blocked()
        a_joined = await join(coordinator, a.member_id)
        b = await b_join.result()
        assert a_joined.generation_id == b.generation_id == 2
        b_sync = spawn(nursery, coordinator.sync_group, GROUP, 2, b.member_id, None, None, None, {})
        await trio.testing.wait_all_tasks_blocked()
        assignments = {a.member_id: assignment_bytes(0), b.member_id: assignment_bytes(1)}
        leader = await coordinator.sync_group(GROUP, 2, a.member_id, None, None, None, assignments)
        assert leader.error == ErrorCode.NOT_COORDINATOR
        assert (await b_sync.result()).error == ErrorCode.NOT_COORDINATOR
        assert group.state is GroupState.PREPARING_REBALANCE and group.generation_id == 2

        async def round_trip() -> tuple[ErrorCode, ErrorCode]:
            """Both members rejoin at once and sync, as clients without a backoff do."""
            b_rejoin = spawn(nursery, join, coordinator, b.member_id)
            a_rejoined = await join(coordinator, a.member_id)
            b_rejoined = await b_rejoin.result()
            generation = a_rejoined.generation_id
            follower = spawn(nursery, coordinator.sync_group, GROUP, generation, b.member_id, None, None, None, {})
            await trio.testing.wait_all_tasks_blocked()
            synced = await coordinator.sync_group(GROUP, generation, a.member_id, None, None, None, assignments)
            assert b_rejoined.error == ErrorCode.NONE
            return synced.error, (await follower.result()).error

        start, rounds = trio.current_time(), 0
        while trio.current_time() - start < 20 and rounds < 200:
            errors = await round_trip()
            assert errors == (ErrorCode.NOT_COORDINATOR, ErrorCode.NOT_COORDINATOR)
            rounds += 1
        assert rounds <= 6, f"{rounds} rebalances in {trio.current_time() - start:.1f} s"
        assert group.generation_id == 2 + rounds
        # the disk has room again: the next rebalance (after the current backoff) succeeds
        log.fail_next = []
        assert await round_trip() == (ErrorCode.NONE, ErrorCode.NONE)
        assert group.state is GroupState.STABLE
        # and the backoff is gone: a new rebalance completes as soon as everyone rejoined
        coordinator._maybe_prepare_rebalance(group, "test")
        before = trio.current_time()
        assert await round_trip() == (ErrorCode.NONE, ErrorCode.NONE)
        assert trio.current_time() - before < 0.1
