"""Replication pieces in one process: election rules, truncation points, and the leader side
(acks=all completed by follower fetches, ISR shrink and expand written to the metadata store,
min.insync.replicas) with a second broker simulated by a second meta_local session."""

from __future__ import annotations

import logging
import types
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio
from broker_harness import SlowStore, batch, broker_config, produce, running_broker

from odradek import records
from odradek.broker.alter_partition import CONTROLLED_SHUTDOWN_ROUNDS, ISR_WRITES_IN_FLIGHT, AlterPartitionManager
from odradek.broker.api import CreatableTopic, FetchPartition, IsolationLevel
from odradek.broker.controller import elect_leader, preferred_leader, shrink_dead_from_isr
from odradek.broker.core import BrokerCore
from odradek.broker.metadata_cache import PartitionState, registration_json
from odradek.broker.partition import Partition
from odradek.broker.replica_fetcher import ReplicaFetcher, truncation_offset
from odradek.errors import ErrorCode
from odradek.interfaces import MetadataStore, TopicPartition
from odradek.plugins.meta_local.store import FILE_NAME, LocalMetadataStore
from odradek.sessions import MetadataUnavailable

TP = TopicPartition("t", 0)


def test_election_rules() -> None:
    state = PartitionState(leader=2, leader_epoch=5, isr=(2, 3), version=9)
    # broker 2 died: the first live in-sync replica in assignment order leads, epoch + 1
    assert elect_leader((1, 2, 3), state, {1, 3}, unclean=False) == PartitionState(3, 6, (3,), 9)
    # nobody in sync is alive: only an unclean election finds a leader
    assert elect_leader((1, 2, 3), PartitionState(2, 5, (2,), 9), {1}, unclean=False) is None
    assert elect_leader((1, 2, 3), PartitionState(2, 5, (2,), 9), {1}, unclean=True) == PartitionState(1, 6, (1,), 9)
    # a dead follower leaves the ISR, the leader epoch stays
    assert shrink_dead_from_isr(PartitionState(1, 5, (1, 2, 3), 9), {1, 3}) == PartitionState(1, 5, (1, 3), 9)
    assert shrink_dead_from_isr(PartitionState(1, 5, (1, 3), 9), {1, 3}) is None
    # the preferred replica leads again once alive and in sync, not before
    assert preferred_leader((1, 2, 3), PartitionState(2, 5, (2, 3), 9), {1, 2, 3}) is None
    assert preferred_leader((1, 2, 3), PartitionState(2, 5, (2, 3, 1), 9), {1, 2, 3}) == PartitionState(
        1, 6, (2, 3, 1), 9
    )
    assert preferred_leader((1, 2, 3), PartitionState(1, 5, (1, 2), 9), {1, 2}) is None


@dataclass
class _Log:
    ends: dict[int, int] = field(default_factory=dict)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        known = [e for e in self.ends if e <= epoch]
        return (max(known), self.ends[max(known)]) if known else (-1, -1)


@dataclass
class _Partition:
    log_end_offset: int
    high_watermark: int
    log: _Log


def test_truncation_offset_kip_279() -> None:
    # same latest epoch: the smaller end wins
    p = _Partition(120, 90, _Log({3: 100, 4: 120}))
    assert truncation_offset(p, 4, 4, 110) == 110  # type: ignore[arg-type]
    assert truncation_offset(p, 4, 4, 150) == 120  # type: ignore[arg-type]
    # the leader never had epoch 4: it answers epoch 3 ending at 95; our epoch 3 ended at 100
    assert truncation_offset(p, 4, 3, 95) == 95  # type: ignore[arg-type]
    assert truncation_offset(_Partition(120, 90, _Log({3: 80, 4: 120})), 4, 3, 95) == 80  # type: ignore[arg-type]
    # the leader knows no epoch that old: fall back to the high watermark
    assert truncation_offset(p, 4, -1, -1) == 90  # type: ignore[arg-type]


async def _follower_fetch(core: BrokerCore, offset: int, epoch: int) -> ErrorCode:
    results = await core.fetch(
        7, 0, 1, 1 << 20, IsolationLevel.READ_UNCOMMITTED, [FetchPartition(TP, offset, 1 << 20, epoch)]
    )
    for r in results.values():
        if r.records is not None:
            r.records.release()
    return results[TP].error


async def _state_in_store(core: BrokerCore) -> PartitionState:
    v = await core.store.get("/brokers/topics/t/partitions/0/state")
    assert v is not None
    return PartitionState.decode(v)


async def _isr_in_store(core: BrokerCore) -> tuple[int, ...]:
    return (await _state_in_store(core)).isr


@asynccontextmanager
async def _broker_7(core: BrokerCore, tmp_path: Path) -> AsyncIterator[LocalMetadataStore]:
    """A second broker, id 7, simulated by a metadata session of its own: registered, and seen
    live by ``core``, until the block ends."""
    other = LocalMetadataStore(tmp_path / FILE_NAME)
    await other.open(6000)
    try:
        await other.register_broker(7, registration_json([("PLAINTEXT", "127.0.0.1", 9, "PLAINTEXT")], None))
        with trio.fail_after(5):
            while 7 not in core.metadata_cache.live_broker_ids():
                await trio.sleep(0.01)
        yield other
    finally:
        await other.close()


@asynccontextmanager
async def _led_with_broker_7(tmp_path: Path) -> AsyncIterator[tuple[BrokerCore, LocalMetadataStore, Partition]]:
    """Partition t-0 on replicas [0, 7], led by the running broker 0 with both in the ISR, and
    broker 7's metadata session (see :func:`_broker_7`)."""
    async with (
        running_broker(tmp_path, **{"replica.lag.time.max.ms": 30000}) as core,
        _broker_7(core, tmp_path) as other,
    ):
        created = await core.create_topics([CreatableTopic("t", assignments={0: [0, 7]})], 1000, False)
        assert created["t"].error == ErrorCode.NONE
        partition = core.replica_manager.get_partition(TP)
        assert partition is not None and partition.isr == {0, 7}
        yield core, other, partition


async def test_leader_side_acks_all_isr_shrink_and_expand(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "odradek.broker.alter_partition")
    async with running_broker(tmp_path, **{"replica.lag.time.max.ms": 300}) as core, _broker_7(core, tmp_path):
        created = await core.create_topics(
            [CreatableTopic("t", assignments={0: [0, 7]}, configs={"min.insync.replicas": "2"})], 1000, False
        )
        assert created["t"].error == ErrorCode.NONE
        partition = core.replica_manager.get_partition(TP)
        assert partition is not None and partition.is_leader and partition.isr == {0, 7}
        epoch = partition.leader_epoch

        # acks=all waits for the follower: its fetch at offset 1 says it has offset 0
        result: list[ErrorCode] = []

        async def produce_all() -> None:
            result.append((await produce(core, TP, batch([b"a"]), acks=-1)).error)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(produce_all)
            await trio.sleep(0.05)
            assert not result and partition.high_watermark == 0
            assert await _follower_fetch(core, 0, epoch) == ErrorCode.NONE
            assert await _follower_fetch(core, 1, epoch) == ErrorCode.NONE
        assert result == [ErrorCode.NONE] and partition.high_watermark == 1
        # a leader epoch the leader does not have yet is refused
        assert await _follower_fetch(core, 1, epoch + 1) == ErrorCode.UNKNOWN_LEADER_EPOCH

        # the follower stops fetching while the leader appends: it leaves the ISR (in the store)
        assert (await produce(core, TP, batch([b"b"]), acks=1)).error == ErrorCode.NONE
        with trio.fail_after(5):
            while await _isr_in_store(core) != (0,):
                await trio.sleep(0.05)
        assert partition.isr == {0}
        assert (await produce(core, TP, batch([b"c"]), acks=-1)).error == ErrorCode.NOT_ENOUGH_REPLICAS
        assert partition.high_watermark == 1  # frozen below min.insync.replicas

        # it catches up to the leader's end: it rejoins, and the HW moves on
        assert await _follower_fetch(core, 2, epoch) == ErrorCode.NONE
        with trio.fail_after(5):
            while await _isr_in_store(core) != (0, 7):
                await trio.sleep(0.05)
        assert partition.isr == {0, 7} and partition.high_watermark == 2
        # each change is logged from the ISR it replaced (it logged the new one on both sides)
        changes = [r.getMessage() for r in caplog.records if "ISR" in r.getMessage()]
        assert changes == ["t-0: ISR [0, 7] -> [0]", "t-0: ISR [0] -> [0, 7]"], changes


async def test_a_follower_in_controlled_shutdown_is_not_added_back(tmp_path: Path) -> None:
    """A stopping follower leaves the ISR (controlled shutdown) while still registered and, for
    up to ``replica.lag.time.max.ms``, caught up as of its last fetch: the leader must not add it
    back (KIP-841: a broker in controlled shutdown is ineligible). It did whenever its ISR check
    ran before the stopping broker's session closed, a window that grows under load."""
    async with _led_with_broker_7(tmp_path) as (core, other, partition):
        assert (await produce(core, TP, batch([b"a"]), acks=1)).error == ErrorCode.NONE
        assert await _follower_fetch(core, 1, partition.leader_epoch) == ErrorCode.NONE  # caught up

        # broker 7 stops: its controlled shutdown takes it out of the ISR; it is still registered
        follower_config = broker_config(tmp_path / "b7", **{"broker.id": 7})
        follower_rm = types.SimpleNamespace(on_isr_expand_candidate=None)
        stopping = AlterPartitionManager(follower_config, other, core.metadata_cache, follower_rm)  # type: ignore[arg-type]
        assert await stopping.controlled_shutdown() == 1
        assert await _isr_in_store(core) == (0,)
        with trio.fail_after(5):
            while partition.isr != {0}:
                await trio.sleep(0.01)
        assert await other.get("/brokers/ids/7") is not None

        leader = AlterPartitionManager(core.config, core.store, core.metadata_cache, core.replica_manager)
        assert partition.can_join_isr(7, core.replica_manager.clock_ms(), 30000)
        assert await leader.maybe_update_isrs() == 0
        assert await _isr_in_store(core) == (0,) and partition.isr == {0}


class _FakeConnection:
    """Answers a replica fetcher's requests with canned responses (what a leader would say)."""

    def __init__(self, responses: list[Any]) -> None:
        self.responses = responses
        self.requests: list[Any] = []

    def version(self, api_key: int, *, min_version: int | None = None, max_version: int | None = None) -> int:
        return {1: 11, 23: 3}[int(api_key)]

    async def request(self, request: Any, *, timeout_s: float) -> Any:
        self.requests.append(request)
        return self.responses.pop(0)


def _epoch_batch(values: list[bytes], base_offset: int, epoch: int) -> bytes:
    return records.build_batch(
        [(None, v, [], 1000) for v in values], base_offset=base_offset, partition_leader_epoch=epoch
    )


async def test_follower_truncates_by_epoch_then_fetches(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as core, _broker_7(core, tmp_path):
        created = await core.create_topics([CreatableTopic("t", assignments={0: [7, 0]})], 1000, False)
        assert created["t"].error == ErrorCode.NONE
        p = core.replica_manager.get_partition(TP)
        assert p is not None and not p.is_leader and p.leader_id == 7
        # our log: epoch 0 at 0..2, epoch 1 at 3..4 (written while we were briefly a leader's copy)
        for data in (
            _epoch_batch([b"a", b"b"], 0, 0),
            _epoch_batch([b"c"], 2, 0),
            _epoch_batch([b"x", b"y"], 3, 1),
        ):
            p.append_records_as_follower(data, records.validate_batches(data, exact_counts=False))
        assert p.log_end_offset == 5

        manager = types.SimpleNamespace(
            broker_id=0,
            replica_manager=core.replica_manager,
            cache=core.metadata_cache,
            request_timeout_s=5.0,
            fetch_max_bytes=1 << 20,
            fetch_response_max_bytes=1 << 20,
            fetch_wait_max_ms=0,
        )
        fetcher = ReplicaFetcher(manager, 7)  # type: ignore[arg-type]
        fetcher.set_partitions({TP: p.leader_epoch})
        # the leader never had epoch 1: its epoch 0 ended at offset 2 (our "c" was never committed)
        answer = types.SimpleNamespace(partition=0, error_code=0, leader_epoch=0, end_offset=2)
        conn = _FakeConnection([types.SimpleNamespace(topics=[types.SimpleNamespace(topic="t", partitions=[answer])])])
        await fetcher._truncate(conn)
        asked = conn.requests[0].topics[0].partitions[0]
        assert (asked.leader_epoch, asked.current_leader_epoch, conn.requests[0].replica_id) == (1, 0, 0)
        assert p.log_end_offset == 2
        assert [(e.epoch, e.start_offset) for e in p.log.epoch_entries()] == [(0, 0)]

        # then it fetches from its LEO and appends the leader's batch (epoch 2) unchanged
        leader_data = _epoch_batch([b"n1", b"n2"], 2, 2)
        part = types.SimpleNamespace(
            partition_index=0, error_code=0, high_watermark=3, log_start_offset=0, records=leader_data
        )
        conn = _FakeConnection(
            [types.SimpleNamespace(error_code=0, responses=[types.SimpleNamespace(topic="t", partitions=[part])])]
        )
        assert await fetcher._fetch(conn)
        fetched = conn.requests[0].topics[0].partitions[0]
        assert (fetched.fetch_offset, conn.requests[0].replica_id) == (2, 0)
        assert p.log_end_offset == 4 and p.high_watermark == 3
        assert [(e.epoch, e.start_offset) for e in p.log.epoch_entries()] == [(0, 0), (2, 2)]


class _LosingStore:
    """A metadata session whose compare-and-sets on the partition state key lose, the first
    ``losses`` times, to a write that ``concurrent`` makes just before (as when the leader's ISR
    update or the controller's election lands between a read and the write)."""

    def __init__(self, store: MetadataStore, concurrent: Callable[[], Awaitable[None]], losses: int) -> None:
        self._store = store
        self._concurrent = concurrent
        self.losses = losses
        self.puts = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def put(self, key: str, value: bytes, **kw: Any) -> int:
        if key == "/brokers/topics/t/partitions/0/state":
            self.puts += 1
            if self.losses > 0:
                self.losses -= 1
                await self._concurrent()
        return await self._store.put(key, value, **kw)


@pytest.mark.parametrize("stopping_id", [7, 0])
@pytest.mark.parametrize("losses", [1, CONTROLLED_SHUTDOWN_ROUNDS])
async def test_controlled_shutdown_decides_again_after_a_conflicting_write(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, losses: int, stopping_id: int
) -> None:
    """A stopping broker's compare-and-set that loses to the leader's own ISR update is decided
    again on the state re-read (Kafka's controller retries a version conflict): it used to skip
    the partition, so a stopping follower (7) stayed in the ISR until the leader shrank it, and a
    stopping leader (0) kept its leadership until its session expired. A state that keeps
    changing is given up after a bounded number of attempts, with one log line."""
    caplog.set_level(logging.INFO, "odradek.broker.alter_partition")
    async with _led_with_broker_7(tmp_path) as (core, other, _):
        before = await _state_in_store(core)
        leader = AlterPartitionManager(core.config, core.store, core.metadata_cache, core.replica_manager)

        async def leader_isr_update() -> None:
            assert await leader.alter_isr(TP, (0, 7))  # a new partition epoch, the same ISR

        losing = _LosingStore(other if stopping_id == 7 else core.store, leader_isr_update, losses)
        stopping_config = broker_config(tmp_path / f"b{stopping_id}", **{"broker.id": stopping_id})
        stopping_rm = types.SimpleNamespace(on_isr_expand_candidate=None)
        stopping = AlterPartitionManager(stopping_config, losing, core.metadata_cache, stopping_rm)  # type: ignore[arg-type]
        moved = await stopping.controlled_shutdown()
        gave_up = [r.getMessage() for r in caplog.records if "kept changing" in r.getMessage()]
        after = await _state_in_store(core)
        if losses < CONTROLLED_SHUTDOWN_ROUNDS:
            assert (moved, losing.puts, gave_up) == (1, losses + 1, [])
            if stopping_id == 7:
                assert (after.leader, after.leader_epoch, after.isr) == (0, before.leader_epoch, (0,))
            else:
                assert (after.leader, after.leader_epoch, after.isr) == (7, before.leader_epoch + 1, (7,))
        else:
            assert (moved, losing.puts) == (0, CONTROLLED_SHUTDOWN_ROUNDS)
            assert gave_up == [
                f"broker {stopping_id}: controlled shutdown left t-0 as it was: its state kept changing "
                f"({CONTROLLED_SHUTDOWN_ROUNDS} attempts)"
            ]
            assert (after.leader, after.leader_epoch, after.isr) == (0, before.leader_epoch, (0, 7))


async def test_controlled_shutdown_moves_partitions_several_at_once(tmp_path: Path) -> None:
    """A stopping leader of many partitions writes up to ISR_WRITES_IN_FLIGHT of them at once:
    one at a time, 1,000 partitions on ZooKeeper took ~10 s, past the 5 s a stopping broker
    gives its controlled shutdown. A failing store fails the whole call with its own error,
    and nothing is written after it."""
    partitions = 3 * ISR_WRITES_IN_FLIGHT
    async with running_broker(tmp_path, **{"replica.lag.time.max.ms": 30000}) as core, _broker_7(core, tmp_path):
        assignments = {p: [0, 7] for p in range(partitions)}
        created = await core.create_topics([CreatableTopic("t", assignments=assignments)], 1000, False)
        assert created["t"].error == ErrorCode.NONE
        rm = types.SimpleNamespace(on_isr_expand_candidate=None)

        slow = SlowStore(core.store, 0.05)
        stopping = AlterPartitionManager(core.config, slow, core.metadata_cache, rm)  # type: ignore[arg-type]
        assert await stopping.controlled_shutdown() == partitions
        assert slow.most_in_flight == ISR_WRITES_IN_FLIGHT
        for p in range(partitions):
            v = await core.store.get(f"/brokers/topics/t/partitions/{p}/state")
            assert v is not None
            state = PartitionState.decode(v)
            assert (state.leader, state.isr) == (7, (7,))

        created = await core.create_topics([CreatableTopic("u", assignments=assignments)], 1000, False)
        assert created["u"].error == ErrorCode.NONE
        failing = SlowStore(core.store, 0.01, fail_at=5)
        stopping = AlterPartitionManager(core.config, failing, core.metadata_cache, rm)  # type: ignore[arg-type]
        with pytest.raises(MetadataUnavailable, match="the store went away"):
            await stopping.controlled_shutdown()
        assert failing.puts < partitions  # the partitions after the failure were not tried
