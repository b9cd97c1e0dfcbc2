"""Online migration between the classic and consumer protocols (KIP-848), sans-IO under trio's
autojump clock: a classic group upgraded by a ConsumerGroupHeartbeat, classic members in the
consumer group (JoinGroup/SyncGroup/Heartbeat/LeaveGroup/OffsetCommit), the downgrade when the
last consumer-protocol member leaves, the policy's refusals, and a conversion whose write fails."""

from __future__ import annotations

from collections.abc import Mapping

import trio
import trio.testing
from group_harness import GROUP, join, protocols, running, spawn
from test_consumer_groups import ORDERS, check_exclusive, count, hb, lookup, reset_topics

from odradek.broker.group import GroupCoordinator, GroupState, InMemoryOffsetsLog, OffsetAndMetadata
from odradek.broker.group.consumer_coordinator import HeartbeatRequest
from odradek.broker.group.consumer_group import ConsumerGroup
from odradek.broker.group.schema import GroupKey, decode_key
from odradek.consumer_protocol import Assignment, decode_assignment, encode_assignment
from odradek.errors import ErrorCode
from odradek.interfaces import TopicPartition

ORDERS_PROTOCOLS = protocols("range", topics=("orders",))


def orders(*partitions: int) -> bytes:
    return encode_assignment(Assignment([TopicPartition("orders", p) for p in partitions]))


async def classic_pair(coordinator: GroupCoordinator, nursery: trio.Nursery) -> tuple[str, str, int]:
    """Two classic members sharing the six partitions of ``orders`` (Stable): (a, b, generation)."""
    first = spawn(nursery, join, coordinator, protos=ORDERS_PROTOCOLS)
    second = spawn(nursery, join, coordinator, protos=ORDERS_PROTOCOLS)
    a, b = await first.result(), await second.result()
    assert a.error == b.error == ErrorCode.NONE and a.generation_id == b.generation_id
    leader = a if a.leader_id == a.member_id else b
    other = b if leader is a else a
    assignments = {leader.member_id: orders(0, 1, 2), other.member_id: orders(3, 4, 5)}
    synced = [
        spawn(nursery, coordinator.sync_group, GROUP, j.generation_id, j.member_id, None, "consumer", "range", sent)
        for j, sent in ((leader, assignments), (other, {}))
    ]
    for s in synced:
        assert (await s.result()).error == ErrorCode.NONE
    return leader.member_id, other.member_id, a.generation_id


def consumer_group(coordinator: GroupCoordinator) -> ConsumerGroup:
    return coordinator.manager.consumer_groups[GROUP]


def assigned(result_assignment: bytes) -> set[int]:
    return {tp.partition for tp in decode_assignment(result_assignment).partitions}


async def rejoin(coordinator: GroupCoordinator, member_id: str, owned: tuple[int, ...] = ()) -> tuple[int, set[int]]:
    """A classic member's JoinGroup + SyncGroup in the consumer group: (generation, partitions)."""
    joined = await join(coordinator, member_id, protos=ORDERS_PROTOCOLS)
    assert joined.error == ErrorCode.NONE, joined
    assert joined.protocol_name == "range" and joined.leader_id == "" and joined.members == ()
    synced = await coordinator.sync_group(GROUP, joined.generation_id, member_id, None, "consumer", "range", {})
    assert synced.error == ErrorCode.NONE, synced
    return joined.generation_id, assigned(synced.assignment)


def owned_by(group: ConsumerGroup) -> Mapping[str, int]:
    return {m: count(x.assigned) for m, x in group.members.items()}


async def test_a_consumer_member_upgrades_a_classic_group(autojump_clock: trio.testing.MockClock) -> None:
    reset_topics()
    log = InMemoryOffsetsLog(num_partitions=4)
    async with running(log, topics=lookup) as (coordinator, nursery):
        a, b, generation = await classic_pair(coordinator, nursery)
        tp = TopicPartition("orders", 0)
        committed = await coordinator.commit_offsets(GROUP, a, None, generation, {tp: OffsetAndMetadata(42)})
        assert committed == {tp: ErrorCode.NONE}
        # a consumer-protocol member joins: the classic group becomes a consumer group
        c = await hb(coordinator, "c", 0)
        assert c.error == ErrorCode.NONE and count(c.assignment) == 0  # everything is still owned
        group = consumer_group(coordinator)
        assert set(group.members) == {a, b, "c"} and group.group_epoch == generation + 1
        assert group.members[a].classic is not None and group.members[a].member_epoch == generation
        assert coordinator.manager.get_group(GROUP).is_state(GroupState.EMPTY)  # holds the offsets
        assert coordinator.fetch_offsets(GROUP, [tp])[1][tp].offset == 42
        check_exclusive(coordinator)
        # the classic members learn of the new epoch from Heartbeat and rejoin (eager: owning nothing)
        assert await coordinator.member_heartbeat(GROUP, a, None, generation) == ErrorCode.REBALANCE_IN_PROGRESS
        for member in (a, b):
            epoch, _ = await rejoin(coordinator, member)
            check_exclusive(coordinator)
            assert epoch == group.members[member].member_epoch
        for member in (a, b):  # a second round settles them (revocations were confirmed)
            await rejoin(coordinator, member)
        c = await hb(coordinator, "c", group.members["c"].member_epoch)
        check_exclusive(coordinator)
        assert sorted(owned_by(group).values()) == [2, 2, 2]
        for member in (a, b):
            epoch = group.members[member].member_epoch
            assert await coordinator.member_heartbeat(GROUP, member, None, epoch) == ErrorCode.NONE
            # a classic member commits with its generation, the member epoch
            assert await coordinator.commit_offsets(GROUP, member, None, epoch, {tp: OffsetAndMetadata(43)}) == {
                tp: ErrorCode.NONE
            }
            stale = await coordinator.commit_offsets(GROUP, member, None, epoch - 1, {tp: OffsetAndMetadata(1)})
            assert stale == {tp: ErrorCode.ILLEGAL_GENERATION}
        expected = owned_by(group)
    # the classic group's record is a tombstone, the consumer group's records keep the classic members
    entries = (log.entries or {})[coordinator.partition_for(GROUP)]
    assert any(e.key and isinstance(decode_key(e.key), GroupKey) and e.value is None for e in entries)
    async with running(log, topics=lookup) as (restarted, _):
        loaded = consumer_group(restarted)
        assert owned_by(loaded) == expected and loaded.members[a].classic is not None
        assert restarted.fetch_offsets(GROUP, [tp])[1][tp].offset == 43


async def test_the_last_consumer_member_leaving_downgrades(autojump_clock: trio.testing.MockClock) -> None:
    reset_topics()
    log = InMemoryOffsetsLog(num_partitions=4)
    async with running(log, topics=lookup) as (coordinator, nursery):
        a, b, _ = await classic_pair(coordinator, nursery)
        await hb(coordinator, "c", 0)
        epoch = consumer_group(coordinator).group_epoch
        assert (await hb(coordinator, "c", -1)).error == ErrorCode.NONE
        assert GROUP not in coordinator.manager.consumer_groups
        classic = coordinator.manager.get_group(GROUP)
        assert classic is not None and set(classic.members) == {a, b}
        assert classic.is_state(GroupState.PREPARING_REBALANCE) and classic.generation_id == epoch
        assert await coordinator.member_heartbeat(GROUP, a, None, epoch) == ErrorCode.REBALANCE_IN_PROGRESS
        # the members rejoin as a classic group and a new generation forms
        pending = [spawn(nursery, join, coordinator, m, protos=ORDERS_PROTOCOLS) for m in (a, b)]
        joined = [await p.result() for p in pending]
        assert all(j.error == ErrorCode.NONE for j in joined) and joined[0].generation_id == epoch + 1
    async with running(log, topics=lookup) as (restarted, _):
        assert GROUP not in restarted.manager.consumer_groups
        assert set(restarted.manager.get_group(GROUP).members) == {a, b}  # type: ignore[union-attr]


async def test_policies_refuse_conversions(autojump_clock: trio.testing.MockClock) -> None:
    reset_topics()
    async with running(topics=lookup, group_consumer_migration_policy="downgrade") as (coordinator, nursery):
        a, b, generation = await classic_pair(coordinator, nursery)
        refused = await hb(coordinator, "c", 0)
        assert refused.error == ErrorCode.GROUP_ID_NOT_FOUND and GROUP not in coordinator.manager.consumer_groups
        assert await coordinator.member_heartbeat(GROUP, a, None, generation) == ErrorCode.NONE
    async with running(topics=lookup, group_consumer_migration_policy="upgrade") as (coordinator, nursery):
        a, b, generation = await classic_pair(coordinator, nursery)
        await hb(coordinator, "c", 0)
        assert (await hb(coordinator, "c", -1)).error == ErrorCode.NONE
        group = consumer_group(coordinator)  # no downgrade: a consumer group of classic members
        assert set(group.members) == {a, b} and all(m.classic is not None for m in group.members.values())
        # a classic member's LeaveGroup in the consumer group
        assert await coordinator.member_leave(GROUP, [(a, None), ("nobody", None)]) == (
            ErrorCode.NONE,
            [ErrorCode.NONE, ErrorCode.UNKNOWN_MEMBER_ID],
        )
        assert set(consumer_group(coordinator).members) == {b}


async def test_a_failed_upgrade_leaves_the_classic_group(autojump_clock: trio.testing.MockClock) -> None:
    reset_topics()
    log = InMemoryOffsetsLog(num_partitions=4)
    async with running(log, topics=lookup) as (coordinator, nursery):
        a, b, generation = await classic_pair(coordinator, nursery)
        log.fail_next = [ErrorCode.NOT_ENOUGH_REPLICAS]
        assert (await hb(coordinator, "c", 0)).error == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert GROUP not in coordinator.manager.consumer_groups
        classic = coordinator.manager.get_group(GROUP)
        assert classic is not None and classic.is_state(GroupState.STABLE) and set(classic.members) == {a, b}
        assert await coordinator.member_heartbeat(GROUP, a, None, generation) == ErrorCode.NONE
        assert (await hb(coordinator, "c", 0)).error == ErrorCode.NONE  # the next try upgrades
        assert set(consumer_group(coordinator).members) == {a, b, "c"}


async def test_a_classic_member_joins_a_consumer_group(autojump_clock: trio.testing.MockClock) -> None:
    reset_topics()
    async with running(topics=lookup) as (coordinator, _):
        first = await hb(coordinator, "c", 0)
        assert count(first.assignment) == 6
        # KIP-394: a new dynamic member gets its id first
        asked = await join(coordinator, require_known=True, protos=ORDERS_PROTOCOLS)
        assert asked.error == ErrorCode.MEMBER_ID_REQUIRED
        wrong = await join(coordinator, asked.member_id, protos=protocols("range", topics=("orders",)),
                           protocol_type="connect")  # fmt: skip
        assert wrong.error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        epoch, parts = await rejoin(coordinator, asked.member_id)
        assert parts == set()  # all six still belong to c
        group = consumer_group(coordinator)
        owned = {ORDERS: frozenset(range(6))}
        assert count((await hb(coordinator, "c", 1, owned=owned)).assignment) == 3  # c revokes three
        c = await hb(coordinator, "c", 1, owned=group.members["c"].assigned)  # confirmed
        assert c.member_epoch == group.group_epoch
        # the classic member is told to rejoin for the released partitions
        assert await coordinator.member_heartbeat(GROUP, asked.member_id, None, epoch) == (
            ErrorCode.REBALANCE_IN_PROGRESS
        )
        _, parts = await rejoin(coordinator, asked.member_id)
        assert len(parts) == 3
        check_exclusive(coordinator)
        # its session is its own: silent, it is fenced after its 10 s session timeout
        for _ in range(3):
            await trio.sleep(5)
            await hb(coordinator, "c", group.members["c"].member_epoch)
        assert set(consumer_group(coordinator).members) == {"c"}


async def test_a_classic_member_that_does_not_sync_is_fenced(autojump_clock: trio.testing.MockClock) -> None:
    reset_topics()
    async with running(topics=lookup) as (coordinator, _):
        await hb(coordinator, "c", 0)
        joined = await join(coordinator, "x", protos=ORDERS_PROTOCOLS, rebalance_ms=8_000)
        assert joined.error == ErrorCode.NONE and "x" in consumer_group(coordinator).members
        for _ in range(4):  # x heartbeats but never syncs: fenced after its rebalance timeout
            await trio.sleep(2.5)
            await coordinator.member_heartbeat(GROUP, "x", None, joined.generation_id)
            await hb(coordinator, "c", consumer_group(coordinator).members["c"].member_epoch)
        assert set(consumer_group(coordinator).members) == {"c"}
        assert await coordinator.member_heartbeat(GROUP, "x", None, joined.generation_id) == ErrorCode.UNKNOWN_MEMBER_ID


async def test_a_static_classic_member_comes_back_under_a_new_id(autojump_clock: trio.testing.MockClock) -> None:
    reset_topics()
    async with running(topics=lookup) as (coordinator, _):
        await hb(coordinator, "c", 0, topics=["visits"])
        first = await join(coordinator, instance="i-1", protos=ORDERS_PROTOCOLS)
        assert first.error == ErrorCode.NONE
        synced = await coordinator.sync_group(GROUP, first.generation_id, first.member_id, "i-1", "consumer", "range",
                                              {})  # fmt: skip
        assert assigned(synced.assignment) == set(range(6))
        # restarted: it joins with its instance id and no member id, and takes the partitions over
        again = await join(coordinator, instance="i-1", protos=ORDERS_PROTOCOLS)
        assert again.error == ErrorCode.NONE and again.member_id != first.member_id
        group = consumer_group(coordinator)
        assert first.member_id not in group.members and count(group.members[again.member_id].assigned) == 6
        # the old incarnation is fenced
        fenced = await coordinator.member_heartbeat(GROUP, first.member_id, "i-1", first.generation_id)
        assert fenced == ErrorCode.FENCED_INSTANCE_ID
        check_exclusive(coordinator)


async def test_an_upgrade_refused_half_way_writes_nothing(autojump_clock: trio.testing.MockClock) -> None:
    """The group converts, then the joiner does not fit (group.consumer.max.size): the heartbeat
    is refused and the classic group goes on untouched, its record not tombstoned."""
    reset_topics()
    log = InMemoryOffsetsLog(num_partitions=4)
    async with running(log, topics=lookup, group_consumer_max_size=2) as (coordinator, nursery):
        a, b, generation = await classic_pair(coordinator, nursery)
        appends = log.appends
        assert (await hb(coordinator, "c", 0)).error == ErrorCode.GROUP_MAX_SIZE_REACHED
        assert log.appends == appends and GROUP not in coordinator.manager.consumer_groups
        classic = coordinator.manager.get_group(GROUP)
        assert classic is not None and classic.is_state(GroupState.STABLE) and set(classic.members) == {a, b}
        assert await coordinator.member_heartbeat(GROUP, b, None, generation) == ErrorCode.NONE


async def test_a_classic_incarnation_replacing_the_last_consumer_member_downgrades(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A static member restarted with the classic protocol replaces its consumer-protocol
    incarnation, the last one: the group turns classic at once, the member keeping its
    partitions, without a rebalance (Kafka's downgrade on a replaced static member)."""
    reset_topics()
    async with running(topics=lookup) as (coordinator, _):
        static = await coordinator.consumer_group_heartbeat(
            HeartbeatRequest(
                GROUP,
                "s-old",
                0,
                instance_id="i-1",
                rebalance_timeout_ms=30_000,
                subscribed_topic_names=["orders"],
                owned={},
            )
        )
        assert count(static.assignment) == 6
        epoch = consumer_group(coordinator).group_epoch
        joined = await join(coordinator, instance="i-1", protos=ORDERS_PROTOCOLS)
        assert joined.error == ErrorCode.NONE and joined.generation_id == epoch
        assert GROUP not in coordinator.manager.consumer_groups
        classic = coordinator.manager.get_group(GROUP)
        assert (
            classic is not None and classic.is_state(GroupState.STABLE) and set(classic.members) == {joined.member_id}
        )
        synced = await coordinator.sync_group(GROUP, joined.generation_id, joined.member_id, "i-1", "consumer",
                                              "range", {})  # fmt: skip
        assert synced.error == ErrorCode.NONE and assigned(synced.assignment) == set(range(6))
