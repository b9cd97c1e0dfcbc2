"""ElectLeaders in one process: the election rules, the wait for the elected leaders, and the
core's answers on a real broker (meta_local) with a second broker simulated by a second
meta_local session; then the wire at every version and real clients against one broker."""

from __future__ import annotations

import datetime
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import trio
from broker_harness import running_broker
from confluent_kafka import ElectionType as CKElectionType
from confluent_kafka import KafkaError
from confluent_kafka import TopicPartition as CKTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient

from odradek.broker.api import CreatableTopic, ElectionType, ElectLeadersResult
from odradek.broker.controller import Controller
from odradek.broker.core import BrokerCore
from odradek.broker.elect_leaders import await_leaders, elect_leaders
from odradek.broker.election import decide_election
from odradek.broker.metadata_cache import PartitionState, partition_state_key, registration_json
from odradek.errors import ErrorCode
from odradek.interfaces import TopicPartition
from odradek.plugins.meta_local.store import FILE_NAME, LocalMetadataStore
from odradek.plugins.transport_tcp.client import TcpConnector
from odradek.protocol import ApiKey, decode_response, encode_request, request_type
from odradek.sessions import MetadataUnavailable
from odradek.testing.broker import BrokerProcess, unique_topic

PREFERRED, UNCLEAN = ElectionType.PREFERRED, ElectionType.UNCLEAN


def test_election_rules() -> None:
    state = PartitionState(leader=2, leader_epoch=5, isr=(2, 3, 1), version=9)
    # preferred: the first assigned replica, alive and in sync, leads at epoch + 1, same ISR
    assert decide_election(PREFERRED, (1, 2, 3), state, {1, 2, 3}) == PartitionState(1, 6, (2, 3, 1), 9)
    assert decide_election(PREFERRED, (2, 1, 3), state, {1, 2, 3}) == ElectLeadersResult(ErrorCode.ELECTION_NOT_NEEDED)
    down = decide_election(PREFERRED, (1, 2, 3), state, {2, 3})
    assert isinstance(down, ElectLeadersResult) and down.error is ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    assert down.error_message == "the preferred replica 1 is not alive"
    behind = decide_election(PREFERRED, (1, 2, 3), PartitionState(2, 5, (2, 3), 9), {1, 2, 3})
    assert isinstance(behind, ElectLeadersResult) and behind.error is ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    assert behind.error_message == "the preferred replica 1 is not in the ISR [2, 3]"
    # the preferred replica named as leader but dead: not "not needed", it cannot lead
    dead = decide_election(PREFERRED, (2, 1), PartitionState(2, 5, (2,), 9), {1})
    assert isinstance(dead, ElectLeadersResult) and dead.error is ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE

    # unclean: only without a live leader; an in-sync replica first, else any live one
    assert decide_election(UNCLEAN, (1, 2, 3), state, {1, 2}) == ElectLeadersResult(ErrorCode.ELECTION_NOT_NEEDED)
    assert decide_election(UNCLEAN, (1, 2, 3), state, {1, 3}) == PartitionState(1, 6, (1, 3), 9)
    assert decide_election(UNCLEAN, (1, 2, 3), PartitionState(2, 5, (2,), 9), {3}) == PartitionState(3, 6, (3,), 9)
    none = decide_election(UNCLEAN, (1, 2), PartitionState(2, 5, (2,), 9), {3})
    assert none == ElectLeadersResult(ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, "no replica of [1, 2] is alive")


class _Cache:
    """What ``await_leaders`` reads of a metadata cache: leaders, and a refresh notification."""

    def __init__(self) -> None:
        self.leaders: dict[TopicPartition, int] = {}
        self.refreshed = trio.Event()

    def leader_of(self, tp: TopicPartition) -> int:
        return self.leaders.get(tp, -1)

    async def next_refresh(self) -> None:
        await self.refreshed.wait()
        self.refreshed = trio.Event()


async def test_the_answer_waits_for_the_elected_leaders_up_to_the_deadline() -> None:
    a, b = TopicPartition("t", 0), TopicPartition("t", 1)
    cache = _Cache()
    cache.leaders[a] = 1

    async def refresh_later() -> None:
        await trio.sleep(0.05)
        cache.leaders[b] = 2
        cache.refreshed.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(refresh_later)
        got = await await_leaders(cache, {a: 1, b: 2}, trio.current_time() + 5)  # type: ignore[arg-type]
    assert got == {a: ElectLeadersResult(ErrorCode.NONE), b: ElectLeadersResult(ErrorCode.NONE)}
    # never seen: REQUEST_TIMED_OUT at the deadline; a deadline already past still checks once
    start = trio.current_time()
    late = await await_leaders(cache, {a: 1, b: 3}, start + 0.1)  # type: ignore[arg-type]
    assert trio.current_time() - start >= 0.1
    assert late[a].error is ErrorCode.NONE and late[b].error is ErrorCode.REQUEST_TIMED_OUT
    assert late[b].error_message == "broker 3 was elected but not seen as leader within the timeout"
    assert (await await_leaders(cache, {a: 1}, start - 1))[a].error is ErrorCode.NONE  # type: ignore[arg-type]


async def _set_state(store: LocalMetadataStore, tp: TopicPartition, leader: int, isr: tuple[int, ...]) -> None:
    """Another broker's write of a partition state (a failover or an ISR change), epoch + 1."""
    key = partition_state_key(tp.topic, tp.partition)
    v = await store.get(key)
    assert v is not None
    old = PartitionState.decode(v)
    await store.put(key, PartitionState(leader, old.leader_epoch + 1, isr, 0).to_json())


async def _state(core: BrokerCore, tp: TopicPartition) -> PartitionState:
    v = await core.store.get(partition_state_key(tp.topic, tp.partition))
    assert v is not None
    return PartitionState.decode(v)


async def _until(check: Any) -> None:
    with trio.fail_after(5):
        while not await check():
            await trio.sleep(0.02)


async def test_elections_on_a_broker_and_a_simulated_second_one(tmp_path: Path) -> None:
    async with running_broker(tmp_path, **{"auto.leader.rebalance.enable": False}) as core:
        t0, t1 = TopicPartition("t", 0), TopicPartition("t", 1)
        other = LocalMetadataStore(tmp_path / FILE_NAME)
        await other.open(6000)
        await other.register_broker(7, registration_json([("PLAINTEXT", "127.0.0.1", 9, "PLAINTEXT")], None))
        await _until(lambda: _true(7 in core.metadata_cache.live_broker_ids()))
        created = await core.create_topics(
            [CreatableTopic("t", assignments={0: [0, 7], 1: [7, 0]}), CreatableTopic("solo", assignments={0: [7]})],
            1000,
            False,
        )
        assert all(r.error == ErrorCode.NONE for r in created.values())
        # every leader is the preferred one: nothing to answer for "all partitions"
        assert await core.elect_leaders(PREFERRED, None, 1000) == {}
        named = await core.elect_leaders(PREFERRED, [t0, t1, TopicPartition("t", 5), TopicPartition("nope", 0)], 0)
        assert [r.error for r in named.values()] == [
            ErrorCode.ELECTION_NOT_NEEDED,
            ErrorCode.ELECTION_NOT_NEEDED,
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ]
        assert named[TopicPartition("nope", 0)].error_message == "The partition does not exist."

        # broker 7 took t-0 over (as after a failover): the preferred election gives it back;
        # the answer comes once this broker leads it, even with a timeout of 0
        await _set_state(other, t0, 7, (7, 0))
        await _until(lambda: _true(core.metadata_cache.leader_of(t0) == 7))
        epoch = (await _state(core, t0)).leader_epoch
        assert await core.elect_leaders(PREFERRED, [t0, t0], 0) == {t0: ElectLeadersResult(ErrorCode.NONE)}
        assert (await _state(core, t0)) == PartitionState(0, epoch + 1, (7, 0), (await _state(core, t0)).version)
        partition = core.replica_manager.get_partition(t0)
        assert partition is not None and partition.is_leader and partition.leader_epoch == epoch + 1

        # t-1: broker 7 leads alone (broker 0 fell out of the ISR), then dies: no clean leader
        await _set_state(other, t1, 7, (7,))
        await _until(lambda: _true(core.metadata_cache.topics["t"].states[1].isr == (7,)))
        await other.close()
        await _until(lambda: _true(7 not in core.metadata_cache.live_broker_ids()))
        assert (await _state(core, t1)).leader == 7  # unclean.leader.election.enable is false
        preferred = await core.elect_leaders(PREFERRED, [t1], 1000)
        assert preferred[t1].error is ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
        solo = TopicPartition("solo", 0)
        unclean = await core.elect_leaders(UNCLEAN, [t0, t1, solo], 1000)
        assert unclean == {
            t0: ElectLeadersResult(ErrorCode.ELECTION_NOT_NEEDED),
            t1: ElectLeadersResult(ErrorCode.NONE),
            solo: ElectLeadersResult(ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, "no replica of [7] is alive"),
        }
        state = await _state(core, t1)
        assert (state.leader, state.isr) == (0, (0,))
        assert core.metadata_cache.leader_of(t1) == 0
        # "all partitions" answers what needed an election or failed, not what did not need one
        everything = await core.elect_leaders(UNCLEAN, None, 1000)
        assert everything == {
            solo: ElectLeadersResult(ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, "no replica of [7] is alive")
        }

        # a broker that is not the controller (or has none running) answers NOT_CONTROLLER
        idle = Controller(core.config, core.store, core.metadata_cache)
        answer = await elect_leaders(idle, core.metadata_cache, PREFERRED, [t0], 1000)
        assert answer == {t0: ElectLeadersResult(ErrorCode.NOT_CONTROLLER, "broker 0 is not the controller")}
        answer = await elect_leaders(None, core.metadata_cache, PREFERRED, None, 1000)
        assert {r.error for r in answer.values()} == {ErrorCode.NOT_CONTROLLER} and t0 in answer

        # the metadata store unreachable mid-election: a retriable timeout naming why, no traceback
        # (a second Controller over a store that fails, leading as far as it knows)
        async def unreachable(prefix: str) -> Any:
            raise MetadataUnavailable("no ZooKeeper answered")

        away = Controller(core.config, SimpleNamespace(list=unreachable), core.metadata_cache)  # type: ignore[arg-type]
        away.leadership = SimpleNamespace(epoch=1)  # type: ignore[assignment]
        answer = await elect_leaders(away, core.metadata_cache, UNCLEAN, [t0], 1000)
        assert answer == {
            t0: ElectLeadersResult(
                ErrorCode.REQUEST_TIMED_OUT, "the metadata store is unreachable: no ZooKeeper answered"
            )
        }


async def _true(value: bool) -> bool:
    return value


# -- the wire and real clients, against one broker process -----------------------------------------


def _request(version: int, topics: dict[str, list[int]] | None, election_type: int = 0) -> Any:
    cls = request_type(ApiKey.ELECT_LEADERS, version)
    entry = sys.modules[cls.__module__].TopicPartitions
    kwargs: dict[str, Any] = {
        "topic_partitions": None
        if topics is None
        else tuple(entry(topic=t, partitions=tuple(ps)) for t, ps in topics.items()),
        "timeout": datetime.timedelta(seconds=5),
    }
    if version >= 1:
        kwargs["election_type"] = election_type
    return cls(**kwargs)


async def _call(broker: BrokerProcess, request: Any) -> Any:
    host, port = broker.bootstrap.rsplit(":", 1)
    conn = await TcpConnector().connect(host, int(port), timeout_s=5)
    try:
        await conn.send_frame(encode_request(request, correlation_id=3, client_id="elect-test"))
        frame = await conn.receive_frame()
    finally:
        await conn.aclose()
    cid, response = decode_response(ApiKey.ELECT_LEADERS, request.__version__, frame)
    assert cid == 3
    return response


def _answers(response: Any) -> dict[tuple[str, int], tuple[int, str | None]]:
    return {
        (t.topic, p.partition_id): (int(p.error_code), p.error_message)
        for t in response.replica_election_results
        for p in t.partition_result
    }


@pytest.fixture(scope="module")
def single_topic(odradek_broker: BrokerProcess) -> str:
    topic = unique_topic("elect")
    admin = AdminClient({"bootstrap.servers": odradek_broker.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(15)
    return topic


@pytest.mark.parametrize("version", [0, 1, 2])
async def test_every_version_on_a_single_broker(odradek_broker: BrokerProcess, single_topic: str, version: int) -> None:
    """One broker always leads its partitions: the general path answers ELECTION_NOT_NEEDED."""
    response = await _call(odradek_broker, _request(version, {single_topic: [0, 1, 0], "no-such-topic": [0]}))
    if version >= 1:
        assert int(response.error_code) == 0
    assert _answers(response) == {
        (single_topic, 0): (ErrorCode.ELECTION_NOT_NEEDED, None),
        (single_topic, 1): (ErrorCode.ELECTION_NOT_NEEDED, None),
        ("no-such-topic", 0): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist."),
    }
    assert (await _call(odradek_broker, _request(version, None))).replica_election_results == ()
    if version >= 1:
        unclean = await _call(odradek_broker, _request(version, {single_topic: [1]}, election_type=1))
        assert _answers(unclean) == {(single_topic, 1): (ErrorCode.ELECTION_NOT_NEEDED, None)}
        bad = await _call(odradek_broker, _request(version, {single_topic: [1]}, election_type=7))
        assert int(bad.error_code) == ErrorCode.INVALID_REQUEST
        assert _answers(bad) == {
            (single_topic, 1): (ErrorCode.INVALID_REQUEST, "InvalidRequest: unknown election type 7")
        }


def test_real_clients_on_a_single_broker(odradek_broker: BrokerProcess, single_topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": odradek_broker.bootstrap})
    tps = [CKTopicPartition(single_topic, 0), CKTopicPartition(single_topic, 1)]
    for kind in (CKElectionType.PREFERRED, CKElectionType.UNCLEAN):
        result = admin.elect_leaders(kind, tps).result(15)
        assert sorted((tp.topic, tp.partition) for tp in result) == [(single_topic, 0), (single_topic, 1)]
        assert {e.code() for e in result.values()} == {KafkaError.ELECTION_NOT_NEEDED}
    assert admin.elect_leaders(CKElectionType.PREFERRED, None).result(15) == {}

    client = KafkaAdminClient(bootstrap_servers=odradek_broker.bootstrap)
    try:
        response = client.elect_leaders(0, {single_topic: [0, 1]})  # ELECTION_NOT_NEEDED is no error
        assert [int(p.error_code) for r in response.replica_election_results for p in r.partition_result] == [84, 84]
    finally:
        client.close()
    assert not odradek_broker.log_problems(), odradek_broker.log_problems()
