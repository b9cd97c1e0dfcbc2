"""KIP-392 without a server: the built-in replica selectors (and their conformance), what a leader
offers them, and the replica manager's answers to consumers on a leader and on a follower."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
import trio.testing
from broker_harness import batch, broker_plugins
from test_broker_partition import leader_append, new_partition, replicate, storage_at

from odradek import records
from odradek.broker.api import FetchPartition, FetchPartitionResult, IsolationLevel, ListOffsetsPartition
from odradek.broker.fetch_session import CachedPartition
from odradek.broker.partition import Partition
from odradek.broker.preferred_replica import HERE, leader_view, preferred_read_replica
from odradek.broker.replica_manager import ReplicaManager
from odradek.config import load_config
from odradek.errors import ErrorCode
from odradek.interfaces import TopicPartition
from odradek.manager import PluginError, load_plugins
from odradek.replica_selector import (
    ClientMetadata,
    LeaderSelector,
    PartitionView,
    RackAwareReplicaSelector,
    ReplicaView,
    builtin_replica_selector,
    selector_name,
)
from odradek.testing import check_replica_selector

TP = TopicPartition("t", 0)
RACKS = {0: "a", 1: "b", 2: "c", 3: "b"}

TestRackAwareConformance = check_replica_selector(RackAwareReplicaSelector)
TestLeaderConformance = check_replica_selector(LeaderSelector)


def client(rack: str = "b") -> ClientMetadata:
    return ClientMetadata(rack, "consumer-1", "127.0.0.1:50000", "User:ANONYMOUS", "PLAINTEXT")


# -- selectors ------------------------------------------------------------------------------------
def test_rack_aware_prefers_the_clients_rack_then_the_most_caught_up() -> None:
    leader = ReplicaView(0, "a", 100, 0)
    b_behind = ReplicaView(1, "b", 90, 0)
    b_ahead = ReplicaView(3, "b", 100, 500)
    b_ahead_fresher = ReplicaView(4, "b", 100, 20)
    view = PartitionView(leader, (leader, b_behind, b_ahead, b_ahead_fresher, ReplicaView(2, "c", 100, 0)))
    selector = RackAwareReplicaSelector()
    assert selector.select(TP, client("b"), view) == b_ahead_fresher  # highest LEO, then caught up last
    assert selector.select(TP, client("c"), view) == ReplicaView(2, "c", 100, 0)
    assert selector.select(TP, client("a"), view) == leader  # the leader is in the client's rack
    assert selector.select(TP, client("z"), view) == leader  # no replica there
    assert selector.select(TP, client(""), view) == leader  # a client without client.rack
    assert LeaderSelector().select(TP, client("b"), view) == leader


def test_kafka_class_names_select_the_built_ins() -> None:
    assert selector_name(" org.apache.kafka.common.replica.RackAwareReplicaSelector ") == "rack-aware"
    assert selector_name("org.apache.kafka.common.replica.LeaderSelector") == "leader"
    assert selector_name("") == "" and selector_name("mine") == "mine"
    assert isinstance(builtin_replica_selector("rack-aware"), RackAwareReplicaSelector)
    assert builtin_replica_selector("mine") is None
    plugins = broker_plugins(extra=["odradek.default_assignors"])  # the plugin registering them
    assert isinstance(plugins.replica_selector("rack-aware"), RackAwareReplicaSelector)
    assert isinstance(plugins.replica_selector("leader"), LeaderSelector)


# -- the leader's candidates ----------------------------------------------------------------------
def _alive(broker_id: int) -> bool:
    return broker_id != 9


def _choose(p: Partition, fetch_offset: int, rack: str = "b", now_ms: int = 0) -> int:
    return preferred_read_replica(RackAwareReplicaSelector(), p, client(rack), fetch_offset, now_ms, RACKS.get, _alive)


async def test_leader_offers_live_in_sync_followers_that_hold_the_offset(tmp_path: Path) -> None:
    async with storage_at(tmp_path) as s:
        p = new_partition(s, 0)
        p.make_leader(0, [0, 1, 2, 9], [0, 1, 2, 9], now_ms=0)
        for _ in range(3):
            leader_append(p, batch([b"x"]))
        assert _choose(p, 0) == HERE  # no follower has fetched: none is known to hold offset 0
        p.update_follower_fetch_state(1, 3, 0, now_ms=10)
        p.update_follower_fetch_state(2, 2, 0, now_ms=10)
        p.update_follower_fetch_state(9, 3, 0, now_ms=10)
        assert _choose(p, 2) == 1
        assert _choose(p, 3, rack="c") == HERE  # broker 2 is at 2: it does not hold offset 3 yet
        assert _choose(p, 2, rack="c") == 2
        assert _choose(p, 0, rack="a") == HERE  # the leader's own rack: never answered with itself
        assert _choose(p, 0, rack="") == HERE
        # broker 9 (not registered) is never offered
        view = leader_view(p, 0, 10, RACKS.get, _alive)
        assert sorted(r.broker_id for r in view.replicas) == [0, 1, 2]
        # out of the ISR: not offered, however caught up (KAFKA-14372)
        p.make_leader(0, [0, 1, 2, 9], [0, 2], now_ms=20)
        assert _choose(p, 2) == HERE


async def test_leader_breaks_ties_on_the_time_since_caught_up(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Two rack-b followers at the same log end: the one that caught up last, by the replica
    manager's clock (trio's, autojumped)."""
    async with storage_at(tmp_path) as s:
        p = new_partition(s, 0)
        rm = ReplicaManager(0, s, {}, clock_ms=lambda: int(trio.current_time() * 1000))
        rm.partitions[TP] = p
        rm.replica_selector = RackAwareReplicaSelector()
        rm.rack_of = RACKS.get
        p.make_leader(0, [0, 1, 3], [0, 1, 3], now_ms=rm.clock_ms())
        leader_append(p, batch([b"x"]))
        p.update_follower_fetch_state(1, 1, 0, rm.clock_ms())
        await trio.sleep(5)
        p.update_follower_fetch_state(3, 1, 0, rm.clock_ms())
        assert rm._preferred_read_replica(p, client("b"), 0) == 3
        await trio.sleep(5)
        p.update_follower_fetch_state(1, 1, 0, rm.clock_ms())
        assert rm._preferred_read_replica(p, client("b"), 0) == 1


# -- the replica manager on a leader and a follower -----------------------------------------------
@asynccontextmanager
async def _leader_and_follower(tmp_path: Path) -> AsyncIterator[tuple[ReplicaManager, ReplicaManager]]:
    """Broker 0 (rack a) leads ``t-0``, broker 1 (rack b) follows it; both have offsets 0-2,
    and the follower knows the HW 2 (it fetched before the leader's HW reached 3)."""
    async with storage_at(tmp_path / "a") as sa, storage_at(tmp_path / "b") as sb:
        a, b = new_partition(sa, 0), new_partition(sb, 1)
        a.make_leader(0, [0, 1], [0, 1])
        b.make_follower(0, 0, [0, 1], [0, 1])
        for v in (b"x", b"y", b"z"):
            leader_append(a, batch([v]))
        replicate(a, b)
        assert (a.high_watermark, b.log_end_offset, b.high_watermark) == (3, 3, 0)
        leader_append(a, batch([b"w"]))
        b.update_follower_high_watermark(2)
        managers = []
        for storage, partition in ((sa, a), (sb, b)):
            rm = ReplicaManager(partition.local_broker_id, storage, {})
            rm.partitions[TP] = partition
            rm.rack_of = RACKS.get
            rm.replica_selector = RackAwareReplicaSelector()
            managers.append(rm)
        yield managers[0], managers[1]


async def _fetch(
    rm: ReplicaManager,
    offset: int,
    rack: str | None = "b",
    *,
    epoch: int = -1,
    level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    replica_id: int = -1,
    max_wait_ms: int = 0,
) -> tuple[FetchPartitionResult, bytes]:
    meta = client(rack) if rack is not None else None
    results = await rm.fetch_messages(
        replica_id, max_wait_ms, 1 << 20, 1 << 20, level, [FetchPartition(TP, offset, 1 << 20, epoch)], meta
    )
    result = results[TP]
    data = b""
    if result.records is not None:
        data = result.records.to_bytes()
        result.records.release()
    return result, data


def _values(data: bytes) -> list[bytes | None]:
    """The values of the records in ``data`` (checking the bytes for a value's letters would
    also match a CRC or timestamp byte)."""
    return [r.value for b in records.iter_batches(data) for r in b.records]


async def test_leader_redirects_a_consumer_at_once_without_records(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with _leader_and_follower(tmp_path) as (leader, _):
        start = trio.current_time()
        # min_bytes 1 MiB, max wait 10 s: a redirection answers now (Kafka's hasPreferredReadReplica)
        result, data = await _fetch(leader, 0, max_wait_ms=10_000)
        assert trio.current_time() == start
        assert (result.error, result.preferred_read_replica, data) == (ErrorCode.NONE, 1, b"")
        assert (result.high_watermark, result.log_start_offset) == (3, 0)
        assert leader.metrics.topic("t").preferred_replica_redirects == 1
        # read_committed: an empty aborted list, as a read would carry
        result, _ = await _fetch(leader, 0, level=IsolationLevel.READ_COMMITTED)
        assert result.preferred_read_replica == 1 and result.aborted_transactions == ()
        # no client metadata (Fetch < v11), a rack with no replica, no selector: read here
        for rack in (None, "a", "c"):
            result, data = await _fetch(leader, 0, rack)
            assert result.preferred_read_replica == -1 and data, rack
        leader.replica_selector = None
        result, data = await _fetch(leader, 0)
        assert result.preferred_read_replica == -1 and data


async def test_follower_serves_consumers_only_with_a_selector(tmp_path: Path) -> None:
    async with _leader_and_follower(tmp_path) as (_, follower):
        result, data = await _fetch(follower, 0)
        assert (result.error, result.preferred_read_replica, result.high_watermark) == (ErrorCode.NONE, -1, 2)
        assert _values(data) == [b"x", b"y"]  # up to its own HW
        counters = follower.metrics.topic("t")
        assert (counters.follower_fetch_requests, counters.follower_bytes_out) == (1, len(data))
        # the fetch below its HW but above what it may answer: empty, no error
        result, data = await _fetch(follower, 2)
        assert (result.error, data) == (ErrorCode.NONE, b"")
        # past its log end: the consumer that sent its leader epoch asks the leader (KIP-320);
        # one that did not gets an empty answer and retries (Kafka 3.4+)
        result, _ = await _fetch(follower, 4, epoch=0)
        assert result.error == ErrorCode.OFFSET_OUT_OF_RANGE and result.high_watermark == 2
        result, data = await _fetch(follower, 4)
        assert (result.error, data) == (ErrorCode.NONE, b"")
        result, _ = await _fetch(follower, 0, epoch=1)
        assert result.error == ErrorCode.UNKNOWN_LEADER_EPOCH
        # without client metadata or without a selector: the leader's job
        result, _ = await _fetch(follower, 0, None)
        assert result.error == ErrorCode.NOT_LEADER_OR_FOLLOWER
        follower.replica_selector = None
        result, _ = await _fetch(follower, 0)
        assert result.error == ErrorCode.NOT_LEADER_OR_FOLLOWER
        # a follower's fetch (replication) from a follower is refused whatever the metadata
        follower.replica_selector = RackAwareReplicaSelector()
        result, _ = await _fetch(follower, 0, replica_id=0)
        assert result.error == ErrorCode.NOT_LEADER_OR_FOLLOWER


async def test_follower_sends_the_consumer_elsewhere_when_no_longer_preferred(tmp_path: Path) -> None:
    async with _leader_and_follower(tmp_path) as (_, follower):
        # a consumer of another rack that reached the follower anyway: back to the leader
        result, data = await _fetch(follower, 0, "a")
        assert (result.preferred_read_replica, data) == (0, b"")
        # the follower fell out of the ISR: back to the leader, whatever the rack
        partition = follower.partitions[TP]
        partition.make_follower(0, 0, [0, 1], [0])
        result, data = await _fetch(follower, 0, "b")
        assert (result.preferred_read_replica, data) == (0, b"")
        assert follower.metrics.topic("t").preferred_replica_redirects == 2
        # the leader is not registered (gone): nowhere better, the follower serves
        follower.broker_alive = lambda broker_id: broker_id != 0
        result, data = await _fetch(follower, 0, "b")
        assert result.preferred_read_replica == -1 and data


async def test_follower_bounds_read_committed_by_its_last_stable_offset(tmp_path: Path) -> None:
    async with storage_at(tmp_path / "a") as sa, storage_at(tmp_path / "b") as sb:
        a, b = new_partition(sa, 0), new_partition(sb, 1)
        a.make_leader(0, [0, 1], [0, 1])
        b.make_follower(0, 0, [0, 1], [0, 1])
        leader_append(a, batch([b"plain"]))
        leader_append(a, batch([b"t1"], producer_id=9, producer_epoch=0, base_sequence=0, is_transactional=True))
        leader_append(a, batch([b"after"]))
        replicate(a, b)
        replicate(a, b)
        assert (b.high_watermark, b.last_stable_offset) == (3, 1)  # the open transaction starts at 1
        rm = ReplicaManager(1, sb, {})
        rm.partitions[TP] = b
        rm.rack_of = RACKS.get
        rm.replica_selector = RackAwareReplicaSelector()
        result, data = await _fetch(rm, 0, level=IsolationLevel.READ_COMMITTED)
        assert (result.error, result.last_stable_offset, result.aborted_transactions) == (ErrorCode.NONE, 1, ())
        assert _values(data) == [b"plain"]
        result, data = await _fetch(rm, 0)
        assert _values(data) == [b"plain", b"t1", b"after"]


async def test_list_offsets_on_a_follower_only_for_the_debugging_replica(tmp_path: Path) -> None:
    async with _leader_and_follower(tmp_path) as (_, follower):
        latest = [ListOffsetsPartition(TP, -1)]
        consumer = follower.list_offsets(-1, IsolationLevel.READ_UNCOMMITTED, latest)
        assert consumer[TP].error == ErrorCode.NOT_LEADER_OR_FOLLOWER
        debug = follower.list_offsets(-2, IsolationLevel.READ_UNCOMMITTED, latest)
        assert (debug[TP].error, debug[TP].offset) == (ErrorCode.NONE, 3)  # its log end


def test_a_failing_selector_leaves_the_consumer_where_it_is(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        name = "broken"

        def select(self, tp: TopicPartition, client: ClientMetadata, partition: PartitionView) -> ReplicaView | None:
            raise RuntimeError("boom")

    async def main() -> None:
        async with _leader_and_follower(tmp_path) as (leader, _):
            leader.replica_selector = Broken()
            result, data = await _fetch(leader, 0)
            assert result.error == ErrorCode.NONE and result.preferred_read_replica == -1 and data

    trio.run(main)
    assert "replica selector 'broken' failed" in caplog.text


def test_a_redirection_is_always_in_an_incremental_answer() -> None:
    """In a fetch session (KIP-227) a partition with a preferred read replica is answered even
    when nothing else about it changed, as Kafka's ``CachedPartition.maybeUpdateResponseData``."""
    entry = CachedPartition(FetchPartition(TP, 0, 1 << 20))
    same = FetchPartitionResult(ErrorCode.NONE, 3, 3, 0)
    entry.must_respond(same)
    assert not entry.must_respond(same)
    assert entry.must_respond(FetchPartitionResult(ErrorCode.NONE, 3, 3, 0, preferred_read_replica=2))


async def test_a_broker_with_an_unknown_replica_selector_does_not_start(tmp_path: Path) -> None:
    from odradek.broker.server import BrokerServer

    overrides = {"log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:0", "replica.selector.class": "x.Y"}
    config = load_config(overrides=overrides, plugins=load_plugins())
    with pytest.raises(PluginError, match="replica.selector.class = 'x.Y': .*available: leader, rack-aware"):
        await BrokerServer(config).serve()
    assert not any(tmp_path.iterdir())  # stopped before it opened its storage
