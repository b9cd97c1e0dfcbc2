"""KIP-848 consumer groups on the group coordinator (ConsumerGroupHeartbeat), sans-IO, under trio's
autojump clock: joining, reconciliation (revocation before reassignment), leaving, session and
rebalance timeouts, static members, errors, offsets by member epoch, and group-id sharing with
classic groups."""

from __future__ import annotations

from collections.abc import Mapping

import trio
import trio.testing
from group_harness import GROUP, clock_ms, make_config, running

from odradek.broker.group import GroupCoordinator, InMemoryOffsetsLog, OffsetAndMetadata
from odradek.broker.group.consumer_coordinator import HeartbeatRequest, HeartbeatResult
from odradek.broker.group.consumer_group import (
    ConsumerGroup,
    ConsumerGroupMember,
    ConsumerGroupState,
    MemberState,
    SubscribedTopic,
)
from odradek.broker.group.consumer_schema import ConsumerGroupKey, group_from_records, group_records
from odradek.broker.group.schema import decode_key
from odradek.errors import ErrorCode
from odradek.interfaces import AssignmentMember, AssignmentTopic, Endpoint, TopicPartition
from odradek.plugins.transport_tcp.apis import Dispatcher, load_handlers
from odradek.protocol import ApiKey

ORDERS = "0" * 31 + "1"
VISITS = "0" * 31 + "2"
TOPICS: dict[str, tuple[str, int]] = {}
REBALANCE_MS = 30_000


def lookup(name: str) -> tuple[str, int] | None:
    return TOPICS.get(name)


def reset_topics() -> None:
    TOPICS.clear()
    TOPICS.update({"orders": (ORDERS, 6), "visits": (VISITS, 2)})


async def hb(
    coordinator: GroupCoordinator,
    member_id: str,
    epoch: int,
    *,
    topics: list[str] | None = None,
    owned: Mapping[str, frozenset[int]] | None = None,
    instance: str | None = None,
    assignor: str | None = None,
    group: str = GROUP,
) -> HeartbeatResult:
    joining = epoch == 0
    return await coordinator.consumer_group_heartbeat(
        HeartbeatRequest(
            group,
            member_id,
            epoch,
            instance_id=instance,
            rebalance_timeout_ms=REBALANCE_MS if joining else -1,
            subscribed_topic_names=topics if topics is not None else (["orders"] if joining else None),
            server_assignor=assignor,
            owned={} if joining and owned is None else owned,
            client_id="test",
            client_host="/127.0.0.1",
        )
    )


def count(assignment: Mapping[str, frozenset[int]] | None) -> int:
    return sum(len(p) for p in (assignment or {}).values())


def check_exclusive(coordinator: GroupCoordinator) -> None:
    """No partition is assigned to (or being revoked by) two members at once."""
    seen: set[tuple[str, int]] = set()
    for group in coordinator.manager.consumer_groups.values():
        for m in group.members.values():
            for by_topic in (m.assigned, m.pending_revocation):
                for topic_id, parts in by_topic.items():
                    for p in parts:
                        assert (topic_id, p) not in seen, f"{topic_id}-{p} owned twice"
                        seen.add((topic_id, p))


async def test_one_member_gets_everything(autojump_clock: trio.testing.MockClock) -> None:
    reset_topics()
    async with running(topics=lookup) as (coordinator, _):
        first = await hb(coordinator, "m1", 0)
        assert first.error == ErrorCode.NONE
        assert (first.member_id, first.member_epoch, first.heartbeat_interval_ms) == ("m1", 1, 5000)
        assert first.assignment == {ORDERS: frozenset(range(6))}
        again = await hb(coordinator, "m1", 1)
        assert again.error == ErrorCode.NONE and again.member_epoch == 1
        assert again.assignment is None  # unchanged and nothing reported: no assignment sent
        group = coordinator.manager.consumer_groups[GROUP]
        assert group.state is ConsumerGroupState.STABLE


async def test_partitions_move_only_after_revocation(autojump_clock: trio.testing.MockClock) -> None:
    reset_topics()
    async with running(topics=lookup) as (coordinator, _):
        m1 = await hb(coordinator, "m1", 0)
        all_six = m1.assignment
        assert all_six is not None
        m2 = await hb(coordinator, "m2", 0)
        # the target gives m2 half, but m1 still owns it: m2 is at the new epoch with nothing yet
        assert m2.member_epoch == 2 and count(m2.assignment) == 0
        check_exclusive(coordinator)
        group = coordinator.manager.consumer_groups[GROUP]
        assert group.state is ConsumerGroupState.RECONCILING
        # m1 is told to keep three (it revokes the rest) and stays at epoch 1 until it confirms
        m1 = await hb(coordinator, "m1", 1, owned=all_six)
        assert m1.member_epoch == 1 and count(m1.assignment) == 3
        kept = m1.assignment
        assert kept is not None
        assert count((await hb(coordinator, "m2", 2)).assignment) == 0  # still held by m1
        m1 = await hb(coordinator, "m1", 1, owned=kept)  # revoked: moves to epoch 2
        assert m1.member_epoch == 2
        m2 = await hb(coordinator, "m2", 2)
        assert m2.assignment is not None and count(m2.assignment) == 3
        assert not (m2.assignment[ORDERS] & kept[ORDERS])
        check_exclusive(coordinator)
        await hb(coordinator, "m2", 2, owned=m2.assignment)
        assert group.state is ConsumerGroupState.STABLE


async def test_leave_hands_partitions_over(autojump_clock: trio.testing.MockClock) -> None:
    reset_topics()
    async with running(topics=lookup) as (coordinator, _):
        await settle_two(coordinator)
        left = await hb(coordinator, "m1", -1)
        assert (left.error, left.member_epoch) == (ErrorCode.NONE, -1)
        m2 = await hb(coordinator, "m2", 2)
        assert m2.member_epoch == 3 and count(m2.assignment) == 6
        assert (await hb(coordinator, "m1", 2)).error == ErrorCode.UNKNOWN_MEMBER_ID


async def settle_two(coordinator: GroupCoordinator) -> None:
    """m1 and m2 in a stable group at epoch 2 with three partitions each."""
    m1 = await hb(coordinator, "m1", 0)
    await hb(coordinator, "m2", 0)
    m1 = await hb(coordinator, "m1", 1, owned=m1.assignment)
    await hb(coordinator, "m1", 1, owned=m1.assignment)
    m2 = await hb(coordinator, "m2", 2)
    await hb(coordinator, "m2", 2, owned=m2.assignment)
    assert coordinator.manager.consumer_groups[GROUP].state is ConsumerGroupState.STABLE


async def test_session_timeout_fences(autojump_clock: trio.testing.MockClock) -> None:
    reset_topics()
    async with running(topics=lookup) as (coordinator, _):
        await settle_two(coordinator)
        for _ in range(12):  # m2 heartbeats every 5 s; m1 went silent
            await trio.sleep(5)
            await hb(coordinator, "m2", coordinator.manager.consumer_groups[GROUP].members["m2"].member_epoch)
        group = coordinator.manager.consumer_groups[GROUP]
        assert set(group.members) == {"m2"}
        assert count(group.members["m2"].assigned) == 6


async def test_rebalance_timeout_fences_a_member_that_does_not_revoke(autojump_clock: trio.testing.MockClock) -> None:
    reset_topics()
    async with running(topics=lookup) as (coordinator, _):
        m1 = await hb(coordinator, "m1", 0)
        await hb(coordinator, "m2", 0)
        assert (await hb(coordinator, "m1", 1, owned=m1.assignment)).member_epoch == 1  # must revoke three
        for _ in range(7):  # it keeps heartbeating but never reports the revocation
            await trio.sleep(5)
            await hb(coordinator, "m1", 1, owned=m1.assignment)
            await hb(coordinator, "m2", 2)
        group = coordinator.manager.consumer_groups[GROUP]
        assert "m1" not in group.members
        assert (await hb(coordinator, "m1", 1)).error == ErrorCode.UNKNOWN_MEMBER_ID


async def test_epochs_and_request_errors(autojump_clock: trio.testing.MockClock) -> None:
    reset_topics()
    async with running(topics=lookup) as (coordinator, _):
        await hb(coordinator, "m1", 0)
        assert (await hb(coordinator, "m1", 7)).error == ErrorCode.FENCED_MEMBER_EPOCH
        assert (await hb(coordinator, "nobody", 1)).error == ErrorCode.UNKNOWN_MEMBER_ID
        assert (await hb(coordinator, "", 0)).error == ErrorCode.INVALID_REQUEST
        assert (await hb(coordinator, "m3", 0, assignor="magic")).error == ErrorCode.UNSUPPORTED_ASSIGNOR
        no_topics = await coordinator.consumer_group_heartbeat(
            HeartbeatRequest(GROUP, "m4", 0, rebalance_timeout_ms=1, owned={})
        )
        assert no_topics.error == ErrorCode.INVALID_REQUEST
        regex = await coordinator.consumer_group_heartbeat(
            HeartbeatRequest(GROUP, "m4", 0, rebalance_timeout_ms=1, owned={}, subscribed_topic_regex="ord(")
        )
        assert regex.error == ErrorCode.INVALID_REGULAR_EXPRESSION and "Regex" in (regex.error_message or "")
        owning = await hb(coordinator, "m5", 0, owned={ORDERS: frozenset({1})})
        assert owning.error == ErrorCode.INVALID_REQUEST
        assert (await hb(coordinator, "x", 1, group="unknown-group")).error == ErrorCode.GROUP_ID_NOT_FOUND


async def test_lost_response_is_tolerated(autojump_clock: trio.testing.MockClock) -> None:
    """A member that missed the response moving it to epoch 2 may heartbeat with epoch 1 while
    it owns no more than it is assigned; with more it is fenced."""
    reset_topics()
    async with running(topics=lookup) as (coordinator, _):
        await settle_two(coordinator)
        group = coordinator.manager.consumer_groups[GROUP]
        m1 = group.members["m1"]
        assert (m1.member_epoch, m1.previous_member_epoch) == (2, 1)
        assert (await hb(coordinator, "m1", 1, owned=m1.assigned)).error == ErrorCode.NONE
        assert (
            await hb(coordinator, "m1", 1, owned={ORDERS: frozenset(range(6))})
        ).error == ErrorCode.FENCED_MEMBER_EPOCH


async def test_new_partitions_bump_the_epoch(autojump_clock: trio.testing.MockClock) -> None:
    reset_topics()
    async with running(topics=lookup) as (coordinator, _):
        first = await hb(coordinator, "m1", 0, topics=["orders", "visits", "missing"])
        assert first.assignment == {ORDERS: frozenset(range(6)), VISITS: frozenset({0, 1})}
        TOPICS["visits"] = (VISITS, 4)
        TOPICS["missing"] = ("0" * 31 + "3", 1)
        after = await hb(coordinator, "m1", 1)
        assert after.member_epoch == 2 and count(after.assignment) == 11


async def test_static_member_leaves_and_comes_back(autojump_clock: trio.testing.MockClock) -> None:
    reset_topics()
    async with running(topics=lookup) as (coordinator, _):
        m1 = await hb(coordinator, "m1", 0, instance="host-1")
        assert count(m1.assignment) == 6
        assert (await hb(coordinator, "m1", -2, instance="host-1")).member_epoch == -2
        assert (await hb(coordinator, "other", 0, instance="host-1")).error == ErrorCode.NONE  # released: it takes over
        back = await hb(coordinator, "other", 0, instance="host-1")
        assert back.assignment == {ORDERS: frozenset(range(6))}
        assert (await hb(coordinator, "m9", 0, instance="host-1")).error == ErrorCode.UNRELEASED_INSTANCE_ID
        assert (await hb(coordinator, "m1", 1, instance="host-1")).error == ErrorCode.FENCED_INSTANCE_ID
        assert (await hb(coordinator, "m1", -2)).error == ErrorCode.INVALID_REQUEST  # -2 without an instance id


async def test_offsets_by_member_epoch(autojump_clock: trio.testing.MockClock) -> None:
    reset_topics()
    async with running(topics=lookup) as (coordinator, _):
        await hb(coordinator, "m1", 0)
        tp = TopicPartition("orders", 0)
        offsets = {tp: OffsetAndMetadata(42, -1, "", clock_ms())}
        assert await coordinator.commit_offsets(GROUP, "m1", None, 1, offsets, api_version=9) == {tp: ErrorCode.NONE}
        stale = await coordinator.commit_offsets(GROUP, "m1", None, 0, offsets, api_version=9)
        assert stale == {tp: ErrorCode.STALE_MEMBER_EPOCH}
        old = await coordinator.commit_offsets(GROUP, "m1", None, 1, offsets, api_version=8)
        assert old == {tp: ErrorCode.UNSUPPORTED_VERSION}
        unknown = await coordinator.commit_offsets(GROUP, "zz", None, 1, offsets, api_version=9)
        assert unknown == {tp: ErrorCode.UNKNOWN_MEMBER_ID}
        error, fetched = coordinator.fetch_offsets(GROUP, [tp], member_id="m1", member_epoch=1)
        assert error == ErrorCode.NONE and fetched[tp].offset == 42
        assert coordinator.fetch_offsets(GROUP, [tp], member_id="m1", member_epoch=0)[0] == ErrorCode.STALE_MEMBER_EPOCH
        # the group is listed as a consumer group, not as its offsets' holder
        _, listed = coordinator.list_groups()
        assert [(g.group_id, g.group_type, g.state) for g in listed] == [(GROUP, "consumer", "Stable")]
        assert coordinator.describe_group(GROUP).error == ErrorCode.GROUP_ID_NOT_FOUND
        assert (await coordinator.delete_groups([GROUP]))[GROUP] == ErrorCode.NON_EMPTY_GROUP
        _, deleted = await coordinator.delete_offsets(GROUP, [tp, TopicPartition("visits", 0)])
        assert deleted == {tp: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, TopicPartition("visits", 0): ErrorCode.NONE}
        await hb(coordinator, "m1", -1)
        # without members, commits without an epoch are an admin's, and the group can go
        assert await coordinator.commit_offsets(GROUP, "", None, -1, offsets, api_version=9) == {tp: ErrorCode.NONE}
        assert (await coordinator.delete_groups([GROUP]))[GROUP] == ErrorCode.NONE
        assert GROUP not in coordinator.manager.consumer_groups
        assert coordinator.fetch_offsets(GROUP, [tp])[1][tp].offset == -1


async def test_classic_and_consumer_groups_do_not_mix(autojump_clock: trio.testing.MockClock) -> None:
    reset_topics()
    async with running(topics=lookup) as (coordinator, _):
        await hb(coordinator, "m1", 0, group="kip848")
        joined = await coordinator.join_group(
            "kip848", "", None, False, "c", "/h", 30_000, 10_000, "consumer", [("range", b"")]
        )
        assert joined.error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        classic = await coordinator.join_group("old", "", None, False, "c", "/h", 30_000, 10_000, "consumer",
                                               [("range", b"")])  # fmt: skip
        assert classic.error == ErrorCode.NONE
        assert (await hb(coordinator, "m1", 0, group="old")).error == ErrorCode.GROUP_ID_NOT_FOUND
        error, _, _ = coordinator.describe_consumer_group("old")
        assert error == ErrorCode.GROUP_ID_NOT_FOUND
        error, _, described = coordinator.describe_consumer_group("kip848")
        assert error == ErrorCode.NONE and described is not None and list(described.members) == ["m1"]
        _, consumer_only = coordinator.list_groups(types=["consumer"])
        assert [g.group_id for g in consumer_only] == ["kip848"]
        _, classic_only = coordinator.list_groups(types=["Classic"])
        assert [g.group_id for g in classic_only] == ["old"]


async def test_protocol_can_be_turned_off(autojump_clock: trio.testing.MockClock) -> None:
    reset_topics()
    async with running(topics=lookup, group_coordinator_rebalance_protocols=["classic"]) as (coordinator, _):
        assert (await hb(coordinator, "m1", 0)).error == ErrorCode.UNSUPPORTED_VERSION


async def test_preferred_assignor_is_the_members_choice(autojump_clock: trio.testing.MockClock) -> None:
    reset_topics()
    async with running(topics=lookup) as (coordinator, _):
        await hb(coordinator, "m1", 0, assignor="range", topics=["orders", "visits"])
        await hb(coordinator, "m2", 0, assignor="range", topics=["orders", "visits"])
        group = coordinator.manager.consumer_groups[GROUP]
        assert coordinator.consumer.preferred_assignor(group) == "range"
        # range co-partitions: the first member by id gets partitions 0-2 of orders and 0 of visits
        assert group.target["m1"] == {ORDERS: frozenset({0, 1, 2}), VISITS: frozenset({0})}


async def test_the_group_survives_a_coordinator_restart(autojump_clock: trio.testing.MockClock) -> None:
    """The group's records in __consumer_offsets (Kafka's types 3-8) bring back epochs,
    subscriptions, target and current assignments: members carry on at their epochs, and one
    that never comes back is fenced after its session timeout."""
    reset_topics()
    log = InMemoryOffsetsLog(num_partitions=4)
    async with running(log, topics=lookup) as (coordinator, _):
        await settle_two(coordinator)
        before = coordinator.manager.consumer_groups[GROUP]
        snapshot = (before.group_epoch, before.assignment_epoch, dict(before.target),
                    {m: (x.member_epoch, x.assigned) for m, x in before.members.items()})  # fmt: skip
        tp = TopicPartition("orders", 0)
        offsets = {tp: OffsetAndMetadata(7, -1, "", clock_ms())}
        assert await coordinator.commit_offsets(GROUP, "m1", None, 2, offsets, api_version=9) == {tp: ErrorCode.NONE}
    async with running(log, topics=lookup) as (restarted, _):
        group = restarted.manager.consumer_groups[GROUP]
        loaded = (group.group_epoch, group.assignment_epoch, dict(group.target),
                  {m: (x.member_epoch, x.assigned) for m, x in group.members.items()})  # fmt: skip
        assert loaded == snapshot
        assert group.state is ConsumerGroupState.STABLE
        assert (await hb(restarted, "m2", 2)).error == ErrorCode.NONE
        assert restarted.fetch_offsets(GROUP, [tp])[1][tp].offset == 7
        for _ in range(10):  # m1 never returns: fenced after its session timeout
            await trio.sleep(5)
            await hb(restarted, "m2", group.members["m2"].member_epoch)
        assert set(group.members) == {"m2"} and count(group.members["m2"].assigned) == 6
    async with running(log, topics=lookup) as (again, _):
        assert set(again.manager.consumer_groups[GROUP].members) == {"m2"}  # m1's tombstones were read
        await hb(again, "m2", -1)
        assert (await again.delete_groups([GROUP]))[GROUP] == ErrorCode.NONE
    async with running(log, topics=lookup) as (last, _):
        assert GROUP not in last.manager.consumer_groups


def test_consumer_group_records_round_trip() -> None:
    group = ConsumerGroup("g", group_epoch=5, assignment_epoch=4)
    group.subscription_metadata = {"orders": SubscribedTopic(ORDERS, 6)}
    group.target = {"m1": {ORDERS: frozenset({0, 1})}}
    group.put_member(
        ConsumerGroupMember("m1", "i-1", "rack-a", "client", "/127.0.0.1", 30000, frozenset({"orders"}), "range",
                            4, 3, MemberState.UNREVOKED_PARTITIONS, {ORDERS: frozenset({0})}, {ORDERS: frozenset({2})},
                            subscribed_topic_regex="ord.*")
    )  # fmt: skip
    records = group_records(group)
    keys = {decode_key(k): v for k, v in records.items()}
    assert {k.kind for k in keys if isinstance(k, ConsumerGroupKey)} == {3, 4, 5, 6, 7, 8}
    back = group_from_records("g", keys)  # type: ignore[arg-type]
    assert back is not None
    assert (back.group_epoch, back.assignment_epoch, back.target, back.subscription_metadata) == (
        5,
        4,
        group.target,
        group.subscription_metadata,
    )
    assert back.members == group.members and back.owners == group.owners


async def test_an_empty_consumer_group_gives_way_to_a_classic_one(autojump_clock: trio.testing.MockClock) -> None:
    reset_topics()
    async with running(topics=lookup) as (coordinator, _):
        await hb(coordinator, "m1", 0)
        await hb(coordinator, "m1", -1)
        assert coordinator.manager.consumer_groups[GROUP].state is ConsumerGroupState.EMPTY
        joined = await coordinator.join_group(GROUP, "", None, False, "c", "/h", 30_000, 10_000, "consumer",
                                              [("range", b"")])  # fmt: skip
        assert joined.error == ErrorCode.NONE
        assert GROUP not in coordinator.manager.consumer_groups
        _, listed = coordinator.list_groups()
        assert [(g.group_id, g.group_type) for g in listed] == [(GROUP, "classic")]


class _TwiceAssignor:
    """Gives every partition to every member: the coordinator must not hand that out."""

    name = "twice"

    def assign(
        self, members: Mapping[str, AssignmentMember], topics: Mapping[str, AssignmentTopic]
    ) -> dict[str, dict[str, frozenset[int]]]:
        everything = {t: frozenset(range(topic.num_partitions)) for t, topic in topics.items()}
        return {m: dict(everything) for m in members}


async def test_a_broken_assignor_result_is_refused(autojump_clock: trio.testing.MockClock) -> None:
    reset_topics()
    coordinator = GroupCoordinator(
        InMemoryOffsetsLog(4),
        make_config(),
        now_ms=clock_ms,
        topics=lookup,
        server_assignors={"twice": _TwiceAssignor()},
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(coordinator.run)
        await coordinator.find_coordinator(GROUP)
        assert (await hb(coordinator, "m1", 0)).error == ErrorCode.NONE  # one member: nothing given twice
        epoch = coordinator.manager.consumer_groups[GROUP].group_epoch
        refused = await hb(coordinator, "m2", 0)
        assert refused.error == ErrorCode.UNKNOWN_SERVER_ERROR and "twice" in (refused.error_message or "")
        group = coordinator.manager.consumer_groups[GROUP]  # as it was before the refused join
        assert set(group.members) == {"m1"} and group.group_epoch == epoch
        nursery.cancel_scope.cancel()


async def test_regex_subscriptions_follow_the_topics(autojump_clock: trio.testing.MockClock) -> None:
    """A regex matches whole topic names; a topic created later that matches bumps the group
    epoch and is assigned; clearing the regex (an empty one) drops its topics."""
    reset_topics()
    async with running(topics=lookup, all_topics=lambda: list(TOPICS)) as (coordinator, _):
        joined = await coordinator.consumer_group_heartbeat(
            HeartbeatRequest(GROUP, "m1", 0, rebalance_timeout_ms=REBALANCE_MS, owned={}, subscribed_topic_regex="or.*")
        )
        assert joined.error == ErrorCode.NONE and joined.assignment == {ORDERS: frozenset(range(6))}
        TOPICS["orbit"] = ("0" * 31 + "4", 1)
        TOPICS["xorders"] = ("0" * 31 + "5", 1)  # not a whole-name match
        grown = await hb(coordinator, "m1", 1)
        assert grown.member_epoch == 2 and grown.assignment == {
            ORDERS: frozenset(range(6)),
            "0" * 31 + "4": frozenset({0}),
        }
        group = coordinator.manager.consumer_groups[GROUP]
        assert group.subscribed_topic_names() == {"orders", "orbit"}
        cleared = await coordinator.consumer_group_heartbeat(
            HeartbeatRequest(GROUP, "m1", 2, subscribed_topic_names=["visits"], subscribed_topic_regex="")
        )
        assert cleared.member_epoch == 2 and cleared.assignment == {}  # it must revoke first
        assert group.subscribed_topic_names() == {"visits"}


def test_apis_are_not_advertised_when_the_protocol_is_off() -> None:
    """group.coordinator.rebalance.protocols without consumer: ApiVersions leaves out
    ConsumerGroupHeartbeat and ConsumerGroupDescribe, as Kafka's does."""
    endpoint = Endpoint("PLAINTEXT", "127.0.0.1", 0)
    on = Dispatcher(object(), make_config(), endpoint, load_handlers())
    off = Dispatcher(
        object(), make_config(group_coordinator_rebalance_protocols=["classic"]), endpoint, load_handlers()
    )
    kip848 = {ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE}
    assert kip848 <= set(on.advertised) and not kip848 & set(off.advertised)
    assert ApiKey.JOIN_GROUP in off.advertised


async def test_members_get_partitions_in_their_racks(autojump_clock: trio.testing.MockClock) -> None:
    """The coordinator hands the assignor its members' racks and the replicas' racks."""
    reset_topics()
    split = {p: frozenset({"east" if p % 2 == 0 else "west"}) for p in range(6)}

    def racks(name: str) -> Mapping[int, frozenset[str]]:
        return split if name == "orders" else {}

    async with running(topics=lookup, partition_racks=racks) as (coordinator, _):
        for member_id, rack in (("w", "west"), ("e", "east")):
            joined = await coordinator.consumer_group_heartbeat(
                HeartbeatRequest(
                    GROUP,
                    member_id,
                    0,
                    rack_id=rack,
                    rebalance_timeout_ms=REBALANCE_MS,
                    subscribed_topic_names=["orders"],
                    owned={},
                )
            )
            assert joined.error == ErrorCode.NONE
        assert coordinator.manager.consumer_groups[GROUP].target == {
            "w": {ORDERS: frozenset({1, 3, 5})},
            "e": {ORDERS: frozenset({0, 2, 4})},
        }
