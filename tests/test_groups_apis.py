"""The consumer-group KafkaApis handlers over the wire codec: requests encoded as clients send them,
run through the transport's dispatcher against a real GroupCoordinator, responses decoded."""

from __future__ import annotations

import dataclasses
import datetime
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
import trio.testing

from odradek.broker.api import BrokerNode, ClusterMetadata, PartitionMetadata, TopicMetadata
from odradek.broker.group import FIND_COORDINATOR_LOAD_WAIT_S, GroupCoordinator, InMemoryOffsetsLog
from odradek.broker.txn.offsets import PendingTxnOffsets
from odradek.config import default_config
from odradek.consumer_protocol import Subscription, encode_subscription
from odradek.errors import ErrorCode
from odradek.interfaces import Endpoint, TopicPartition
from odradek.plugins.transport_tcp.apis import Dispatcher, load_handlers
from odradek.protocol import ApiKey, decode_response, encode_request, parse_request_header, request_type

GROUP = "wire-group"


class GroupsBroker:
    """The little of the broker facade the group handlers use: topic "t" with 4 partitions, "u"
    with 2."""

    def __init__(self, coordinator: GroupCoordinator) -> None:
        self.group_coordinator = coordinator

    async def metadata(self, topics: Any, allow_auto_create: bool, *, listener_name: str | None = None) -> Any:
        known = {"t": 4, "u": 2}
        return ClusterMetadata(
            "cluster",
            0,
            (BrokerNode(0, "127.0.0.1", 9092),),
            tuple(
                TopicMetadata(
                    ErrorCode.NONE if name in known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    name,
                    partitions=tuple(
                        PartitionMetadata(ErrorCode.NONE, p, 0, 0, (0,), (0,)) for p in range(known.get(name, 0))
                    ),
                )
                for name in topics
            ),
        )


def build(api_key: int, version: int, **fields: Any) -> Any:
    cls = request_type(api_key, version)
    names = set(cls.__dataclass_fields__)
    return cls(**{k: v for k, v in fields.items() if k in names})


def nested(api_key: int, version: int, class_name: str, /, **fields: Any) -> Any:
    module = sys.modules[request_type(api_key, version).__module__]
    cls = getattr(module, class_name)
    names = set(cls.__dataclass_fields__)
    return cls(**{k: v for k, v in fields.items() if k in names})


class Wire:
    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher
        self.correlation = 0

    async def call(self, api_key: int, version: int, request: Any) -> Any:
        self.correlation += 1
        frame = bytearray(encode_request(request, correlation_id=self.correlation, client_id="wire-client"))
        header = parse_request_header(frame)
        out = await self.dispatcher.process(header, frame, "127.0.0.1:5555")
        assert isinstance(out, bytes)
        correlation, response = decode_response(api_key, version, out)
        assert correlation == self.correlation
        return response


@pytest.fixture
async def wire(autojump_clock: trio.testing.MockClock) -> AsyncIterator[Wire]:
    config = default_config(group_initial_rebalance_delay_ms=0, offsets_topic_num_partitions=4)
    coordinator = GroupCoordinator(InMemoryOffsetsLog(4), config)
    async with trio.open_nursery() as nursery:
        await nursery.start(coordinator.run)
        handlers = load_handlers(("odradek.plugins.transport_tcp.apis.groups",))
        dispatcher = Dispatcher(GroupsBroker(coordinator), config, Endpoint("PLAINTEXT", "127.0.0.1", 9092), handlers)
        yield Wire(dispatcher)
        nursery.cancel_scope.cancel()


def ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


SUBSCRIPTION = encode_subscription(Subscription(["t"]))


async def join_v5(wire: Wire, member_id: str = "") -> Any:
    protocol = nested(ApiKey.JOIN_GROUP, 5, "JoinGroupRequestProtocol", name="range", metadata=SUBSCRIPTION)
    request = build(
        ApiKey.JOIN_GROUP, 5, group_id=GROUP, session_timeout=ms(10_000), rebalance_timeout=ms(20_000),
        member_id=member_id, group_instance_id=None, protocol_type="consumer", protocols=(protocol,),
    )  # fmt: skip
    return await wire.call(ApiKey.JOIN_GROUP, 5, request)


async def test_find_coordinator_v0_and_v2(wire: Wire) -> None:
    v0 = await wire.call(ApiKey.FIND_COORDINATOR, 0, build(ApiKey.FIND_COORDINATOR, 0, key=GROUP))
    assert (int(v0.error_code), v0.node_id, v0.host, v0.port) == (0, 0, "127.0.0.1", 9092)
    v2 = await wire.call(ApiKey.FIND_COORDINATOR, 2, build(ApiKey.FIND_COORDINATOR, 2, key=GROUP, key_type=0))
    assert int(v2.error_code) == 0 and v2.port == 9092
    txn = await wire.call(ApiKey.FIND_COORDINATOR, 2, build(ApiKey.FIND_COORDINATOR, 2, key="tx", key_type=1))
    assert int(txn.error_code) == ErrorCode.COORDINATOR_NOT_AVAILABLE


async def test_find_coordinator_v4_looks_up_each_coordinator_partition_once(wire: Wire) -> None:
    """KIP-699 batches: many keys cost one leaders lookup per __consumer_offsets partition, not
    one per key (200,000 keys froze every other client for seconds); each key still gets its
    own answer, a transaction key none where no transaction coordinator runs."""
    coordinator = wire.dispatcher.broker.group_coordinator
    real_leaders = coordinator.log.leaders
    lookups = 0

    async def leaders(listener_name: str | None = None) -> Any:
        nonlocal lookups
        lookups += 1
        return await real_leaders(listener_name)

    coordinator.log.leaders = leaders
    keys = tuple(f"group-{i}" for i in range(5000))
    answer = await wire.call(
        ApiKey.FIND_COORDINATOR, 4, build(ApiKey.FIND_COORDINATOR, 4, key_type=0, coordinator_keys=keys)
    )
    assert [c.key for c in answer.coordinators] == list(keys)
    assert {(int(c.error_code), c.node_id, c.port) for c in answer.coordinators} == {(0, 0, 9092)}
    assert lookups <= 2 * 4  # one per partition (and the topic's creation); was one per key
    txn = await wire.call(
        ApiKey.FIND_COORDINATOR, 4, build(ApiKey.FIND_COORDINATOR, 4, key_type=1, coordinator_keys=("a", "b"))
    )
    assert [int(c.error_code) for c in txn.coordinators] == [ErrorCode.COORDINATOR_NOT_AVAILABLE] * 2


class _SlowOffsetsLog(InMemoryOffsetsLog):
    """Reading a partition takes a minute (a big partition after a failover)."""

    async def read_entries(self, partition: int) -> AsyncIterator[Any]:
        await trio.sleep(60)
        async for entry in super().read_entries(partition):
            yield entry


async def test_find_coordinator_v4_waits_for_loading_partitions_together(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A batch whose keys live on several partitions still loading waits FIND_COORDINATOR_LOAD_WAIT_S
    once for all of them, not once per partition (50 partitions after a failover: 50 s, past
    the clients' request timeout), then answers each key."""
    config = default_config(group_initial_rebalance_delay_ms=0, offsets_topic_num_partitions=4)
    coordinator = GroupCoordinator(_SlowOffsetsLog(4), config)
    async with trio.open_nursery() as nursery:
        await nursery.start(coordinator.run)
        handlers = load_handlers(("odradek.plugins.transport_tcp.apis.groups",))
        wire = Wire(Dispatcher(GroupsBroker(coordinator), config, Endpoint("PLAINTEXT", "127.0.0.1", 9092), handlers))
        keys: dict[int, str] = {}
        for i in range(200):
            keys.setdefault(coordinator.partition_for(f"g{i}"), f"g{i}")
        assert len(keys) == 4
        start = trio.current_time()
        answer = await wire.call(
            ApiKey.FIND_COORDINATOR, 4,
            build(ApiKey.FIND_COORDINATOR, 4, key_type=0, coordinator_keys=tuple(keys.values())),
        )  # fmt: skip
        assert trio.current_time() - start == pytest.approx(FIND_COORDINATOR_LOAD_WAIT_S)
        assert [int(c.error_code) for c in answer.coordinators] == [0] * 4
        nursery.cancel_scope.cancel()


async def test_group_lifecycle_over_the_wire(wire: Wire) -> None:
    await wire.call(ApiKey.FIND_COORDINATOR, 2, build(ApiKey.FIND_COORDINATOR, 2, key=GROUP, key_type=0))
    first = await join_v5(wire)
    assert int(first.error_code) == ErrorCode.MEMBER_ID_REQUIRED and first.member_id
    joined = await join_v5(wire, first.member_id)
    assert int(joined.error_code) == 0
    assert (joined.generation_id, joined.protocol_name, joined.leader) == (1, "range", first.member_id)
    assert [m.metadata for m in joined.members] == [SUBSCRIPTION]
    assignment = nested(
        ApiKey.SYNC_GROUP, 3, "SyncGroupRequestAssignment", member_id=first.member_id, assignment=b"\x00\x00"
    )
    synced = await wire.call(
        ApiKey.SYNC_GROUP, 3,
        build(ApiKey.SYNC_GROUP, 3, group_id=GROUP, generation_id=1, member_id=first.member_id,
              group_instance_id=None, assignments=(assignment,)),
    )  # fmt: skip
    assert int(synced.error_code) == 0 and synced.assignment == b"\x00\x00"
    beat = await wire.call(
        ApiKey.HEARTBEAT, 3,
        build(ApiKey.HEARTBEAT, 3, group_id=GROUP, generation_id=1, member_id=first.member_id, group_instance_id=None),
    )  # fmt: skip
    assert int(beat.error_code) == 0
    # commit v7 (one unknown partition), fetch v5 (all), fetch v1 (named partitions)
    parts = (
        nested(ApiKey.OFFSET_COMMIT, 7, "OffsetCommitRequestPartition", partition_index=1, committed_offset=33,
               committed_leader_epoch=4, committed_metadata="hi"),
        nested(ApiKey.OFFSET_COMMIT, 7, "OffsetCommitRequestPartition", partition_index=9, committed_offset=1,
               committed_leader_epoch=-1, committed_metadata=None),
    )  # fmt: skip
    commit = await wire.call(
        ApiKey.OFFSET_COMMIT, 7,
        build(ApiKey.OFFSET_COMMIT, 7, group_id=GROUP, generation_id_or_member_epoch=1, member_id=first.member_id,
              group_instance_id=None,
              topics=(nested(ApiKey.OFFSET_COMMIT, 7, "OffsetCommitRequestTopic", name="t", partitions=parts),)),
    )  # fmt: skip
    assert [(p.partition_index, int(p.error_code)) for p in commit.topics[0].partitions] == [
        (1, 0),
        (9, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ]
    fetched = await wire.call(ApiKey.OFFSET_FETCH, 5, build(ApiKey.OFFSET_FETCH, 5, group_id=GROUP, topics=None))
    [topic] = fetched.topics
    [p] = topic.partitions
    assert (topic.name, p.partition_index, p.committed_offset, p.committed_leader_epoch, p.metadata) == (
        "t",
        1,
        33,
        4,
        "hi",
    )
    v1_topic = nested(ApiKey.OFFSET_FETCH, 1, "OffsetFetchRequestTopic", name="t", partition_indexes=(0, 1))
    v1 = await wire.call(ApiKey.OFFSET_FETCH, 1, build(ApiKey.OFFSET_FETCH, 1, group_id=GROUP, topics=(v1_topic,)))
    assert [(p.partition_index, p.committed_offset) for p in v1.topics[0].partitions] == [(0, -1), (1, 33)]
    described = await wire.call(
        ApiKey.DESCRIBE_GROUPS, 5,
        build(ApiKey.DESCRIBE_GROUPS, 5, groups=(GROUP, "unknown"), include_authorized_operations=False),
    )  # fmt: skip
    group, unknown = described.groups
    manager = wire.dispatcher.broker.group_coordinator.manager
    loading = next(f"g{i}" for i in range(100) if manager.partition_for(f"g{i}") != manager.partition_for(GROUP))
    manager.loading.add(manager.partition_for(loading))
    asked = await wire.call(
        ApiKey.DESCRIBE_GROUPS, 5,
        build(ApiKey.DESCRIBE_GROUPS, 5, groups=(GROUP, loading), include_authorized_operations=True),
    )  # fmt: skip
    manager.loading.discard(manager.partition_for(loading))
    ops = [(int(g.error_code), g.authorized_operations) for g in asked.groups]
    assert ops[0][0] == 0 and ops[0][1] > 0  # asked for and described: the group's operations
    assert ops[1] == (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, -(2**31))  # an error: none, as Kafka
    assert (group.group_state, group.protocol_type, group.protocol_data) == ("Stable", "consumer", "range")
    assert group.members[0].client_id == "wire-client" and group.members[0].client_host == "/127.0.0.1"
    assert unknown.group_state == "Dead"
    listed = await wire.call(ApiKey.LIST_GROUPS, 4, build(ApiKey.LIST_GROUPS, 4, states_filter=("Stable",)))
    assert [(g.group_id, g.group_state) for g in listed.groups] == [(GROUP, "Stable")]
    busy = await wire.call(ApiKey.DELETE_GROUPS, 2, build(ApiKey.DELETE_GROUPS, 2, groups_names=(GROUP,)))
    assert int(busy.results[0].error_code) == ErrorCode.NON_EMPTY_GROUP
    member = nested(ApiKey.LEAVE_GROUP, 3, "MemberIdentity", member_id=first.member_id, group_instance_id=None)
    left = await wire.call(ApiKey.LEAVE_GROUP, 3, build(ApiKey.LEAVE_GROUP, 3, group_id=GROUP, members=(member,)))
    assert int(left.error_code) == 0 and int(left.members[0].error_code) == 0
    # a group-level error comes alone, with no member entries (Kafka's LeaveGroupResponse)
    blank = await wire.call(ApiKey.LEAVE_GROUP, 3, build(ApiKey.LEAVE_GROUP, 3, group_id="", members=(member,)))
    assert (int(blank.error_code), blank.members) == (ErrorCode.INVALID_GROUP_ID, ())
    deleted = await wire.call(ApiKey.DELETE_GROUPS, 2, build(ApiKey.DELETE_GROUPS, 2, groups_names=(GROUP,)))
    assert int(deleted.results[0].error_code) == 0


async def test_old_versions(wire: Wire) -> None:
    await wire.call(ApiKey.FIND_COORDINATOR, 0, build(ApiKey.FIND_COORDINATOR, 0, key=GROUP))
    protocol = nested(ApiKey.JOIN_GROUP, 0, "JoinGroupRequestProtocol", name="range", metadata=SUBSCRIPTION)
    joined = await wire.call(
        ApiKey.JOIN_GROUP, 0,
        build(ApiKey.JOIN_GROUP, 0, group_id=GROUP, session_timeout=ms(10_000), member_id="",
              protocol_type="consumer", protocols=(protocol,)),
    )  # fmt: skip
    assert int(joined.error_code) == 0 and joined.generation_id == 1  # v0: no MEMBER_ID_REQUIRED round trip
    commit_part = nested(
        ApiKey.OFFSET_COMMIT,
        2,
        "OffsetCommitRequestPartition",
        partition_index=0,
        committed_offset=5,
        committed_metadata="",
    )
    simple = await wire.call(
        ApiKey.OFFSET_COMMIT, 2,
        build(ApiKey.OFFSET_COMMIT, 2, group_id="simple", generation_id_or_member_epoch=-1, member_id="",
              retention_time=datetime.timedelta(milliseconds=60_000),
              topics=(nested(ApiKey.OFFSET_COMMIT, 2, "OffsetCommitRequestTopic", name="t",
                             partitions=(commit_part,)),)),
    )  # fmt: skip
    assert int(simple.topics[0].partitions[0].error_code) == 0
    left = await wire.call(ApiKey.LEAVE_GROUP, 0, build(ApiKey.LEAVE_GROUP, 0, group_id=GROUP, member_id="nobody"))
    assert int(left.error_code) == ErrorCode.UNKNOWN_MEMBER_ID
    fetch_v2 = await wire.call(ApiKey.OFFSET_FETCH, 2, build(ApiKey.OFFSET_FETCH, 2, group_id="", topics=None))
    assert int(fetch_v2.error_code) == 0 and fetch_v2.topics == ()


def _commit_v7(group_id: str, member_id: str, generation: int, offsets: dict[str, list[int]]) -> Any:
    topics = tuple(
        nested(ApiKey.OFFSET_COMMIT, 7, "OffsetCommitRequestTopic", name=name, partitions=tuple(
            nested(ApiKey.OFFSET_COMMIT, 7, "OffsetCommitRequestPartition", partition_index=p, committed_offset=10 + p,
                   committed_leader_epoch=-1, committed_metadata=None)
            for p in parts))
        for name, parts in offsets.items()
    )  # fmt: skip
    return build(ApiKey.OFFSET_COMMIT, 7, group_id=group_id, generation_id_or_member_epoch=generation,
                 member_id=member_id, group_instance_id=None, topics=topics)  # fmt: skip


def _offset_delete(group_id: str, offsets: dict[str, list[int]]) -> Any:
    topics = tuple(
        nested(ApiKey.OFFSET_DELETE, 0, "OffsetDeleteRequestTopic", name=name, partitions=tuple(
            nested(ApiKey.OFFSET_DELETE, 0, "OffsetDeleteRequestPartition", partition_index=p) for p in parts))
        for name, parts in offsets.items()
    )  # fmt: skip
    return build(ApiKey.OFFSET_DELETE, 0, group_id=group_id, topics=topics)


async def _committed(wire: Wire, group_id: str) -> list[tuple[str, int]]:
    fetched = await wire.call(ApiKey.OFFSET_FETCH, 5, build(ApiKey.OFFSET_FETCH, 5, group_id=group_id, topics=None))
    return sorted((t.name, p.partition_index) for t in fetched.topics for p in t.partitions)


async def test_offset_delete_as_kafka_answers_it(wire: Wire) -> None:
    """OffsetDelete (KIP-496): a consumer group with members keeps offsets of topics it is
    subscribed to (GROUP_SUBSCRIBED_TO_TOPIC) and loses the others; unknown topics and
    partitions are refused per partition; once empty, any offset goes, and a group left with
    none goes too; a group with members and another protocol refuses as a whole."""
    for group_id in (GROUP, "workers"):
        await wire.call(ApiKey.FIND_COORDINATOR, 2, build(ApiKey.FIND_COORDINATOR, 2, key=group_id, key_type=0))
    first = await join_v5(wire)
    joined = await join_v5(wire, first.member_id)
    member = first.member_id
    assignment = nested(ApiKey.SYNC_GROUP, 3, "SyncGroupRequestAssignment", member_id=member, assignment=b"")
    await wire.call(
        ApiKey.SYNC_GROUP, 3,
        build(ApiKey.SYNC_GROUP, 3, group_id=GROUP, generation_id=joined.generation_id, member_id=member,
              group_instance_id=None, assignments=(assignment,)),
    )  # fmt: skip
    commit = await wire.call(ApiKey.OFFSET_COMMIT, 7, _commit_v7(GROUP, member, 1, {"t": [1], "u": [0, 1]}))
    assert {int(p.error_code) for t in commit.topics for p in t.partitions} == {0}
    deleted = await wire.call(ApiKey.OFFSET_DELETE, 0, _offset_delete(GROUP, {"t": [1], "u": [0, 5], "x": [0]}))
    assert int(deleted.error_code) == 0
    assert [(t.name, p.partition_index, int(p.error_code)) for t in deleted.topics for p in t.partitions] == [
        ("t", 1, ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC),
        ("u", 0, ErrorCode.NONE),
        ("u", 5, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("x", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ]
    assert await _committed(wire, GROUP) == [("t", 1), ("u", 1)]
    leaving = nested(ApiKey.LEAVE_GROUP, 3, "MemberIdentity", member_id=member, group_instance_id=None)
    await wire.call(ApiKey.LEAVE_GROUP, 3, build(ApiKey.LEAVE_GROUP, 3, group_id=GROUP, members=(leaving,)))
    emptied = await wire.call(ApiKey.OFFSET_DELETE, 0, _offset_delete(GROUP, {"t": [1], "u": [1]}))
    assert [int(p.error_code) for t in emptied.topics for p in t.partitions] == [0, 0]
    assert await _committed(wire, GROUP) == []
    described = await wire.call(
        ApiKey.DESCRIBE_GROUPS,
        5,
        build(ApiKey.DESCRIBE_GROUPS, 5, groups=(GROUP,), include_authorized_operations=False),
    )
    assert described.groups[0].group_state == "Dead"  # empty and without offsets: gone, as after expiry
    gone = await wire.call(ApiKey.OFFSET_DELETE, 0, _offset_delete(GROUP, {"t": [1]}))
    assert (int(gone.error_code), gone.topics) == (ErrorCode.GROUP_ID_NOT_FOUND, ())
    # a group with members that is not a consumer group: the coordinator cannot read subscriptions
    protocol = nested(ApiKey.JOIN_GROUP, 5, "JoinGroupRequestProtocol", name="assign", metadata=b"x")
    join_connect = build(
        ApiKey.JOIN_GROUP, 5, group_id="workers", session_timeout=ms(10_000), rebalance_timeout=ms(20_000),
        member_id="", group_instance_id=None, protocol_type="connect", protocols=(protocol,),
    )  # fmt: skip
    pending = await wire.call(ApiKey.JOIN_GROUP, 5, join_connect)
    await wire.call(ApiKey.JOIN_GROUP, 5, dataclasses.replace(join_connect, member_id=pending.member_id))
    busy = await wire.call(ApiKey.OFFSET_DELETE, 0, _offset_delete("workers", {"t": [0]}))
    assert int(busy.error_code) == ErrorCode.NON_EMPTY_GROUP
    blank = await wire.call(ApiKey.OFFSET_DELETE, 0, _offset_delete("", {"t": [0]}))
    assert int(blank.error_code) == ErrorCode.INVALID_GROUP_ID


async def test_a_deleted_topics_offsets_go_from_every_group(wire: Wire) -> None:
    """When the metadata cache sees a topic deleted, the coordinator removes every group's
    committed offsets of it (tombstones), as Kafka's does; an offsets-only group left with none
    goes."""
    for group_id, offsets in (("a", {"t": [0], "u": [0, 1]}), ("b", {"u": [1]})):
        await wire.call(ApiKey.FIND_COORDINATOR, 2, build(ApiKey.FIND_COORDINATOR, 2, key=group_id, key_type=0))
        commit = await wire.call(ApiKey.OFFSET_COMMIT, 7, _commit_v7(group_id, "", -1, offsets))
        assert {int(p.error_code) for t in commit.topics for p in t.partitions} == {0}
    coordinator = wire.dispatcher.broker.group_coordinator
    coordinator.on_topic_deleted("u")
    await trio.testing.wait_all_tasks_blocked()
    assert await _committed(wire, "a") == [("t", 0)]
    assert await _committed(wire, "b") == []
    assert coordinator.manager.get_group("b") is None
    assert coordinator.manager.get_group("a") is not None


def _fetch_v8_group(group_id: str, topics: dict[str, list[int]] | None) -> Any:
    return nested(
        ApiKey.OFFSET_FETCH, 8, "OffsetFetchRequestGroup", group_id=group_id,
        topics=None if topics is None else tuple(
            nested(ApiKey.OFFSET_FETCH, 8, "OffsetFetchRequestTopics", name=name, partition_indexes=tuple(parts))
            for name, parts in topics.items()),
    )  # fmt: skip


async def test_offset_fetch_v8_answers_each_group_as_if_alone(wire: Wire) -> None:
    """OffsetFetch v8 (KIP-709): a batch of groups, each answered as a v7 request for it alone
    would be, its error in its own entry: a known group's offsets (null topics: all it
    committed), an unknown group's -1s (or nothing for null topics, no error: Kafka's
    coordinator answers an unknown group that way), NOT_COORDINATOR for a group whose
    __consumer_offsets partition another broker leads, COORDINATOR_LOAD_IN_PROGRESS for one
    whose partition is loading; errors come with no topics."""
    coordinator = wire.dispatcher.broker.group_coordinator
    by_partition: dict[int, str] = {}
    for i in range(100):
        by_partition.setdefault(coordinator.partition_for(f"g{i}"), f"g{i}")
    known, unknown, elsewhere, loading = (by_partition[p] for p in range(4))
    for group_id in (known, unknown, elsewhere, loading):
        await wire.call(ApiKey.FIND_COORDINATOR, 2, build(ApiKey.FIND_COORDINATOR, 2, key=group_id, key_type=0))
    commit = await wire.call(ApiKey.OFFSET_COMMIT, 7, _commit_v7(known, "", -1, {"t": [0, 2], "u": [1]}))
    assert {int(p.error_code) for t in commit.topics for p in t.partitions} == {0}
    # another broker now leads `elsewhere`'s partition (this one resigns it, as on a leadership
    # move); `loading`'s partition is being loaded
    node = coordinator.log.node
    moved = coordinator.partition_for(elsewhere)
    real_leaders = coordinator.log.leaders

    async def leaders(listener_name: str | None = None) -> dict[int, Any]:
        out = await real_leaders(listener_name)
        out[moved] = dataclasses.replace(node, node_id=node.node_id + 1)
        return out

    coordinator.log.leaders = leaders
    await coordinator.refresh_ownership()
    coordinator.manager.loading.add(coordinator.partition_for(loading))

    request = build(
        ApiKey.OFFSET_FETCH, 8, require_stable=True,
        groups=(_fetch_v8_group(known, None), _fetch_v8_group(unknown, None),
                _fetch_v8_group(unknown, {"t": [1]}), _fetch_v8_group(known, {"t": [0, 1], "u": [1]}),
                _fetch_v8_group(elsewhere, {"t": [0]}), _fetch_v8_group(loading, None)),
    )  # fmt: skip
    response = await wire.call(ApiKey.OFFSET_FETCH, 8, request)
    answered = [
        (g.group_id, int(g.error_code), [(t.name, [(p.partition_index, p.committed_offset, int(p.error_code))
                                                    for p in t.partitions]) for t in g.topics])
        for g in response.groups
    ]  # fmt: skip
    assert answered == [
        (known, 0, [("t", [(0, 10, 0), (2, 12, 0)]), ("u", [(1, 11, 0)])]),
        (unknown, 0, []),
        (unknown, 0, [("t", [(1, -1, 0)])]),
        (known, 0, [("t", [(0, 10, 0), (1, -1, 0)]), ("u", [(1, 11, 0)])]),
        (elsewhere, ErrorCode.NOT_COORDINATOR, []),
        (loading, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, []),
    ]
    assert response.throttle_time == ms(0)


def _txn_offset_commit(version: int, group: str, parts: dict[str, list[int]]) -> Any:
    topics = tuple(
        nested(
            ApiKey.TXN_OFFSET_COMMIT, version, "TxnOffsetCommitRequestTopic", name=name,
            partitions=tuple(
                nested(ApiKey.TXN_OFFSET_COMMIT, version, "TxnOffsetCommitRequestPartition", partition_index=p,
                       committed_offset=7, committed_leader_epoch=-1, committed_metadata="")
                for p in ps
            ),
        )
        for name, ps in parts.items()
    )  # fmt: skip
    return build(
        ApiKey.TXN_OFFSET_COMMIT, version, transactional_id="tx", group_id=group, producer_id=4000,
        producer_epoch=0, generation_id=-1, member_id="", group_instance_id=None, topics=topics,
    )  # fmt: skip


async def test_txn_offset_commit_checks_partitions_and_maps_loading_for_old_clients(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """As Kafka's KafkaApis: partitions the cluster does not have are UNKNOWN_TOPIC_OR_PARTITION
    and are not held; COORDINATOR_LOAD_IN_PROGRESS reaches v0-1 clients as
    COORDINATOR_NOT_AVAILABLE (KAFKA-7296: producers before 2.0 fail on it)."""
    config = default_config(group_initial_rebalance_delay_ms=0, offsets_topic_num_partitions=4)
    coordinator = GroupCoordinator(InMemoryOffsetsLog(4), config)
    broker = GroupsBroker(coordinator)
    broker.txn_offsets = PendingTxnOffsets(lambda: coordinator)  # type: ignore[attr-defined]
    async with trio.open_nursery() as nursery:
        await nursery.start(coordinator.run)
        handlers = load_handlers(
            ("odradek.plugins.transport_tcp.apis.groups", "odradek.plugins.transport_tcp.apis.txn")
        )
        wire = Wire(Dispatcher(broker, config, Endpoint("PLAINTEXT", "127.0.0.1", 9092), handlers))
        await coordinator.find_coordinator(GROUP)
        answer = await wire.call(ApiKey.TXN_OFFSET_COMMIT, 2, _txn_offset_commit(2, GROUP, {"t": [0, 9], "x": [0]}))
        assert [(t.name, p.partition_index, int(p.error_code)) for t in answer.topics for p in t.partitions] == [
            ("t", 0, ErrorCode.NONE),
            ("t", 9, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
            ("x", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ]
        manager = coordinator.manager
        assert manager.pending_txn_partitions(GROUP) == {TopicPartition("t", 0)}
        manager.loading.add(manager.partition_for(GROUP))
        for version, expected in (
            (0, ErrorCode.COORDINATOR_NOT_AVAILABLE),
            (2, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS),
        ):
            loading = await wire.call(
                ApiKey.TXN_OFFSET_COMMIT, version, _txn_offset_commit(version, GROUP, {"t": [1], "x": [0]})
            )
            assert [int(p.error_code) for t in loading.topics for p in t.partitions] == [
                expected,
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            ]
        nursery.cancel_scope.cancel()
