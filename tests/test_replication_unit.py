"""Replication pieces in one process: election rules, truncation points, and the leader side
(acks=all completed by follower fetches, ISR shrink and expand written to the metadata store,
min.insync.replicas) with a second broker simulated by a second meta_local session."""

from __future__ import annotations

import logging
import types
import uuid
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
from odradek.broker.core import BrokerCore
from odradek.broker.election import elect_leader, preferred_leader, shrink_dead_from_isr
from odradek.broker.metadata_cache import PartitionState, registration_json
from odradek.broker.partition import Partition
from odradek.broker.replica_fetcher import ReplicaFetcher, truncation_offset
from odradek.errors import ErrorCode
from odradek.interfaces import MetadataStore, TopicPartition
from odradek.plugins.meta_local.store import FILE_NAME, LocalMetadataStore
from odradek.sessions import MetadataUnavailable

TP = TopicPartition("t", 0)
STATE_KEY = "/brokers/topics/t/partitions/0/state"


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
    assert truncation_offset(p, 4, 4, 110) == (110, True)  # type: ignore[arg-type]
    assert truncation_offset(p, 4, 4, 150) == (120, True)  # type: ignore[arg-type]
    # the leader never had epoch 4: it answers epoch 3 ending at 95; our epoch 3 ended at 100
    assert truncation_offset(p, 4, 3, 95) == (95, True)  # type: ignore[arg-type]
    assert truncation_offset(_Partition(120, 90, _Log({3: 80, 4: 120})), 4, 3, 95) == (80, True)  # type: ignore[arg-type]
    # it answers epoch 3, which we never had: to the end of our epoch before it (2), and ask again
    assert truncation_offset(_Partition(120, 90, _Log({2: 50, 4: 120})), 4, 3, 95) == (50, False)  # type: ignore[arg-type]
    # no epoch of ours is that old: to the leader's end
    assert truncation_offset(_Partition(120, 90, _Log({4: 120})), 4, 3, 95) == (95, True)  # type: ignore[arg-type]
    # the leader knows no epoch that old: fall back to the high watermark
    assert truncation_offset(p, 4, -1, -1) == (90, True)  # type: ignore[arg-type]


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
        # its fetcher runs until the broker stops: caught up on a fetch after it left the ISR
        assert await _follower_fetch(core, 1, partition.leader_epoch) == ErrorCode.NONE

        leader = AlterPartitionManager(core.config, core.store, core.metadata_cache, core.replica_manager)
        assert partition.can_join_isr(7, core.replica_manager.clock_ms(), 30000)
        assert await leader.maybe_update_isrs() == 0
        assert await _isr_in_store(core) == (0,) and partition.isr == {0}


async def test_an_isr_change_proposed_from_a_stale_state_is_refused(tmp_path: Path) -> None:
    """A leader proposes ISR changes from the state it last saw, and its write expects that
    state's partition epoch (Kafka's AlterPartition carries it; the controller refuses a stale
    one). Here the controller has taken broker 7 out of the ISR (a dead follower: the leader
    epoch stays) and the leader has not seen it yet: its write of an ISR computed from [0, 7] is
    refused, 7 is not put back, and the leader takes in the controller's state. The write used
    to check only the leader and its epoch on a fresh read, and put 7 back in the ISR."""
    async with _led_with_broker_7(tmp_path) as (core, _other, partition):
        cache = core.metadata_cache
        leader = AlterPartitionManager(core.config, core.store, cache, core.replica_manager)
        key = "/brokers/topics/t/partitions/0/state"
        written: list[bool] = []

        async def propose() -> None:
            written.append(await leader.alter_isr(TP, (0, 7)))

        # the nursery outlives the lock: the controller's write reaches this broker after it
        async with trio.open_nursery() as nursery, cache._lock:
            current = await core.store.get(key)
            assert current is not None
            shrunk = PartitionState(0, PartitionState.decode(current).leader_epoch, (0,), 0)
            await core.store.put(key, shrunk.to_json(), expect=current.version)
            nursery.start_soon(propose)
            await trio.sleep(0.1)
        assert written == [False]
        assert await _isr_in_store(core) == (0,)
        assert partition.isr == {0} and cache.topics["t"].states[0].isr == (0,)


async def test_alter_isr_success_does_not_overwrite_a_newer_state(tmp_path: Path) -> None:
    """Kafka's leader ignores an AlterPartition answer older than the partition epoch it holds.
    A newer state taken in while the leader's ISR write was on its way (the controller took the
    dead broker 7 out again) stays: the leader used to adopt its own write over it (checking
    only the leader epoch), and its next ISR write then expected a stale partition epoch."""
    async with _led_with_broker_7(tmp_path) as (core, _other, p):
        cache = core.metadata_cache
        # first broker 7 leaves the ISR, so the leader can propose to add it back
        leader = AlterPartitionManager(core.config, core.store, cache, core.replica_manager)
        assert await leader.alter_isr(TP, (0,))
        assert p.isr == {0}
        real_store = core.store

        class Interleaving:
            def __getattr__(self, name: str) -> Any:
                return getattr(real_store, name)

            async def put(self, key: str, value: bytes, **kw: Any) -> int:
                version = await real_store.put(key, value, **kw)
                if key == STATE_KEY:
                    # before the put's answer is processed, a later write lands and this broker's
                    # watch takes it in (the controller takes 7 out again: 7 died)
                    shrunk = PartitionState(0, PartitionState.parse(value, version).leader_epoch, (0,), 0)
                    newer = await real_store.put(STATE_KEY, shrunk.to_json(), expect=version)
                    with trio.fail_after(5):
                        while p.partition_epoch != newer:
                            await trio.sleep(0.01)
                return version

        racing = AlterPartitionManager(core.config, Interleaving(), cache, core.replica_manager)  # type: ignore[arg-type]
        assert await racing.alter_isr(TP, (0, 7))
        stored = await _state_in_store(core)
        assert stored.isr == (0,)
        assert (p.isr, p.partition_epoch) == ({0}, stored.version), (
            f"partition holds ISR {sorted(p.isr)} at partition epoch {p.partition_epoch}; the store has "
            f"{list(stored.isr)} at {stored.version}"
        )


async def test_a_stale_partition_reread_does_not_undo_the_leaders_own_isr_write(tmp_path: Path) -> None:
    """A partition re-read that listed before the leader's own ISR expansion (taken into the
    cache without a revision) and got the cache's lock after it is dropped: applied, it put the
    smaller ISR back on the leader, whose HW then jumped to its LEO, and a parked acks=all
    produce was acknowledged though broker 7, in the ISR in the store, never fetched it."""
    async with _led_with_broker_7(tmp_path) as (core, _other, p):
        cache = core.metadata_cache
        leader = AlterPartitionManager(core.config, core.store, cache, core.replica_manager)
        epoch = p.leader_epoch
        assert await leader.alter_isr(TP, (0,))  # 7 fell behind earlier
        assert (await produce(core, TP, batch([b"a"]), acks=1)).error == ErrorCode.NONE
        assert p.high_watermark == 1
        await trio.sleep(0.1)  # the watch took the shrink in
        assert await _follower_fetch(core, 1, epoch) == ErrorCode.NONE  # 7 caught up
        await core.store.put("/misc/unrelated", b"x")  # any other change moves the revision on
        result: list[ErrorCode] = []

        async def produce_all() -> None:
            result.append((await produce(core, TP, batch([b"b"]), acks=-1, timeout_ms=3000)).error)

        async with trio.open_nursery() as nursery:
            async with cache._lock:  # e.g. a topic being reconciled
                # a re-read (a conflict elsewhere, a fetcher told the leader moved) lists now ...
                nursery.start_soon(cache.refresh_partition, TP)
                await trio.sleep(0.05)
                # ... and the leader adds 7 back meanwhile
                assert await leader.alter_isr(TP, (0, 7))
                assert p.isr == {0, 7}
                nursery.start_soon(produce_all)
                await trio.sleep(0.05)
                assert not result and p.high_watermark == 1
            await trio.sleep(0.3)
            nursery.cancel_scope.cancel()
        stored = await _state_in_store(core)
        assert stored.isr == (0, 7)
        assert p.high_watermark == 1 and not result, (
            f"HW {p.high_watermark}, acks=all answered {result}: offset 1 acknowledged with only the "
            f"leader holding it, while the ISR in the store is {list(stored.isr)}"
        )


async def test_follower_one_batch_behind_under_steady_load_stays_in_isr(tmp_path: Path) -> None:
    """Kafka (KAFKA-1546, Replica.updateFetchState): a fetch at or past the leader's LEO *as of the
    follower's previous fetch* counts as caught up at that previous fetch's time. A follower
    that always fetches everything the leader had at its last fetch is in sync, even though the
    leader appended again in between."""
    async with running_broker(tmp_path, **{"replica.lag.time.max.ms": 300}) as core, _broker_7(core, tmp_path):
        created = await core.create_topics([CreatableTopic("t", assignments={0: [0, 7]})], 1000, False)
        assert created["t"].error == ErrorCode.NONE
        p = core.replica_manager.get_partition(TP)
        assert p is not None and p.isr == {0, 7}
        epoch = p.leader_epoch
        assert await _follower_fetch(core, 0, epoch) == ErrorCode.NONE
        with trio.move_on_after(1.5):
            while True:
                before = p.log_end_offset  # what the follower's previous fetch saw
                assert (await produce(core, TP, batch([b"x"]), acks=1)).error == ErrorCode.NONE
                # the follower fetches all it was given last time (one batch behind the new LEO)
                assert await _follower_fetch(core, before, epoch) == ErrorCode.NONE
                await trio.sleep(0.02)
        assert await _isr_in_store(core) == (0, 7), "a follower 20 ms behind was shrunk out of the ISR"


async def test_out_of_range_follower_fetch_does_not_move_the_hw(tmp_path: Path) -> None:
    """Kafka updates a follower's fetch state only for a read without error (ReplicaManager.
    updateFollowerFetchState skips errors; Partition.fetchRecords checks the epoch and offset
    first). Here a fetch answered OFFSET_OUT_OF_RANGE still records its offset as the
    follower's LEO and acknowledges an acks=all produce."""
    async with _led_with_broker_7(tmp_path) as (core, _other, p):
        epoch = p.leader_epoch
        result: list[ErrorCode] = []

        async def produce_all() -> None:
            result.append((await produce(core, TP, batch([b"a"]), acks=-1, timeout_ms=3000)).error)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(produce_all)
            await trio.sleep(0.05)
            assert p.high_watermark == 0 and not result
            # a follower whose log is longer than the leader's (it has not truncated)
            assert await _follower_fetch(core, 50, epoch) == ErrorCode.OFFSET_OUT_OF_RANGE
            await trio.sleep(0.05)
            hw = p.high_watermark
            nursery.cancel_scope.cancel()
        assert hw == 0, f"HW moved to {hw} on an OFFSET_OUT_OF_RANGE follower fetch; acks=all answered {result}"


async def test_fenced_follower_fetch_does_not_move_the_hw(tmp_path: Path) -> None:
    """A follower fetch carrying an older leader epoch (FENCED_LEADER_EPOCH) must not count as
    that follower's LEO: its log may hold the old epoch's divergent tail."""
    async with _led_with_broker_7(tmp_path) as (core, _other, p):
        assert (await produce(core, TP, batch([b"a", b"b"]), acks=1)).error == ErrorCode.NONE
        old_epoch = p.leader_epoch
        # broker 0 is leader again at a new epoch (e.g. 0 -> 7 -> 0)
        current = await core.store.get(STATE_KEY)
        assert current is not None
        await core.store.put(STATE_KEY, PartitionState(0, old_epoch + 1, (0, 7), 0).to_json(), expect=current.version)
        with trio.fail_after(5):
            while p.leader_epoch != old_epoch + 1:
                await trio.sleep(0.01)
        assert p.high_watermark == 0
        assert await _follower_fetch(core, 2, old_epoch) == ErrorCode.FENCED_LEADER_EPOCH
        assert p.high_watermark == 0, f"HW moved to {p.high_watermark} on a fenced follower fetch"


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


def _fetcher_from_7(core: BrokerCore, p: Partition, response_max_bytes: int = 1 << 20) -> ReplicaFetcher:
    """Broker 0's replica fetcher for the leader 7, following ``p`` at its leader epoch."""
    manager = types.SimpleNamespace(
        broker_id=0,
        replica_manager=core.replica_manager,
        cache=core.metadata_cache,
        request_timeout_s=5.0,
        fetch_max_bytes=1 << 20,
        fetch_response_max_bytes=response_max_bytes,
        fetch_wait_max_ms=0,
        quota=core.follower_replication_quota,
    )
    fetcher = ReplicaFetcher(manager, 7)  # type: ignore[arg-type]
    fetcher.set_partitions({TP: p.leader_epoch})
    return fetcher


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

        fetcher = _fetcher_from_7(core, p)
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


async def test_truncation_takes_another_round_when_the_leader_answers_an_epoch_we_lack(tmp_path: Path) -> None:
    """KIP-279 (Kafka's AbstractFetcherThread.getOffsetTruncationState): when the leader answers
    with an epoch the follower does not have, the follower truncates to the end of its own
    largest epoch below it and asks again (truncationCompleted = false). It used to truncate once
    and start fetching, keeping offsets the leader wrote under another epoch.

    Follower: epoch 0 at 0..4, epoch 2 at 5..9. Leader: epoch 0 at 0..2, epoch 1 at 3..7,
    epoch 3 from 8 (e.g. after an unclean election). Asked for epoch 2, the leader says epoch 1
    ends at 8; our epoch 0 ends at 5. Kafka: truncate to 5, ask for epoch 0, leader says it ends
    at 3, truncate to 3."""
    async with running_broker(tmp_path) as core, _broker_7(core, tmp_path):
        created = await core.create_topics([CreatableTopic("t", assignments={0: [7, 0]})], 1000, False)
        assert created["t"].error == ErrorCode.NONE
        p = core.replica_manager.get_partition(TP)
        assert p is not None and not p.is_leader
        # one record a batch, so truncation (at batch boundaries) can stop at any offset
        for data in [_epoch_batch([b"r"], offset, 0) for offset in range(5)] + [_epoch_batch([b"v"] * 5, 5, 2)]:
            p.append_records_as_follower(data, records.validate_batches(data, exact_counts=False))
        assert p.log_end_offset == 10
        fetcher = _fetcher_from_7(core, p)

        def answer(epoch: int, end: int) -> Any:
            a = types.SimpleNamespace(partition=0, error_code=0, leader_epoch=epoch, end_offset=end)
            return types.SimpleNamespace(topics=[types.SimpleNamespace(topic="t", partitions=[a])])

        conn = _FakeConnection([answer(1, 8), answer(0, 3)])
        await fetcher._truncate(conn)
        await fetcher._truncate(conn)
        assert p.log_end_offset == 3, (
            f"truncation stopped at {p.log_end_offset} after {len(conn.requests)} OffsetForLeaderEpoch "
            f"round(s) (truncating={fetcher.partitions[TP].truncating}): offsets 3..4 are epoch 0 here, "
            "epoch 1 on the leader"
        )


async def test_follower_takes_the_leaders_log_start_offset(tmp_path: Path) -> None:
    """A follower moves its log start up to the leader's on each fetch response, as Kafka's
    does: that is how DeleteRecords reaches followers. The fetched log start was ignored, and
    records deleted on the leader came back when a follower took over."""
    async with running_broker(tmp_path) as core, _broker_7(core, tmp_path):
        created = await core.create_topics([CreatableTopic("t", assignments={0: [7, 0]})], 1000, False)
        assert created["t"].error == ErrorCode.NONE
        p = core.replica_manager.get_partition(TP)
        assert p is not None and not p.is_leader
        fetcher = _fetcher_from_7(core, p)
        fetcher.partitions[TP].truncating = False

        def response(records: bytes, hw: int, start: int) -> Any:
            part = types.SimpleNamespace(
                partition_index=0, error_code=0, high_watermark=hw, log_start_offset=start, records=records
            )
            return types.SimpleNamespace(error_code=0, responses=[types.SimpleNamespace(topic="t", partitions=[part])])

        # four records, then the leader's DeleteRecords(3)
        conn = _FakeConnection([response(_epoch_batch([b"a", b"b", b"c", b"d"], 0, 0), 4, 0), response(b"", 4, 3)])
        assert await fetcher._fetch(conn)
        assert p.log_end_offset == 4
        assert await fetcher._fetch(conn)
        assert p.log_start_offset == 3, f"follower log start {p.log_start_offset}, leader's 3"


async def test_delete_records_waits_for_the_followers_log_start(tmp_path: Path) -> None:
    """DeleteRecords answers once every live replica's log start reached the new one (Kafka's
    DelayedDeleteRecords: the low watermark), so the records are gone from any replica that
    could lead next; a follower that does not come to it makes the request time out."""
    async with _led_with_broker_7(tmp_path) as (core, _other, p):
        assert (await produce(core, TP, batch([b"a", b"b", b"c", b"d"]), acks=1)).error == ErrorCode.NONE
        epoch = p.leader_epoch
        assert await _follower_fetch(core, 4, epoch) == ErrorCode.NONE
        assert p.high_watermark == 4
        answers: list[Any] = []

        async def delete(timeout_ms: int) -> None:
            answers.append((await core.delete_records({TP: 3}, timeout_ms))[TP])

        async with trio.open_nursery() as nursery:
            nursery.start_soon(delete, 5000)
            await trio.sleep(0.1)
            assert not answers and p.log_start_offset == 3  # gone on the leader, not yet on 7
            results = await core.fetch(
                7, 0, 1, 1 << 20, IsolationLevel.READ_UNCOMMITTED, [FetchPartition(TP, 4, 1 << 20, epoch, 3)]
            )
            assert results[TP].error == ErrorCode.NONE and results[TP].records is None  # at the end
            await trio.sleep(0.05)
            assert [(a.error, a.low_watermark) for a in answers] == [(ErrorCode.NONE, 3)]
        # broker 7 stays at 3: a further delete waits for it, then times out
        assert [(r.error, r.low_watermark) for r in (await core.delete_records({TP: 4}, 200)).values()] == [
            (ErrorCode.REQUEST_TIMED_OUT, -1)
        ]
        assert p.log_start_offset == 4


class _TopicIdLeader(_FakeConnection):
    """A leader offering Fetch v15 (topic ids, KIP-516), with canned answers."""

    def version(self, api_key: int, *, min_version: int | None = None, max_version: int | None = None) -> int:
        return {1: 15, 23: 4}[int(api_key)]


async def test_an_incremental_fetch_takes_news_of_a_partition_it_did_not_name(tmp_path: Path) -> None:
    """In a fetch session by topic id, a partition whose position did not move is not named
    again, yet the leader answers it (by id) once it has records. The follower maps every
    topic of its session to its id, so those records are appended and the session goes on:
    it used to map only the topics the request named, read the answer as naming a partition
    it never asked for, drop the records and start a new session (a WARNING each time, and a
    round trip lost on every idle partition that got data)."""
    async with running_broker(tmp_path) as core, _broker_7(core, tmp_path):
        created = await core.create_topics([CreatableTopic("t", assignments={0: [7, 0]})], 1000, False)
        assert created["t"].error == ErrorCode.NONE
        p = core.replica_manager.get_partition(TP)
        assert p is not None and p.leader_id == 7
        topic_id = uuid.UUID(hex=core.metadata_cache.topics["t"].topic_id)
        fetcher = _fetcher_from_7(core, p)

        def answer(data: bytes | None) -> Any:
            """Session 5's answer: t-0 with ``data`` (None: no records yet)."""
            part = types.SimpleNamespace(
                partition_index=0, error_code=0, high_watermark=0, log_start_offset=0, records=data
            )
            topic = types.SimpleNamespace(topic_id=topic_id, partitions=[part])
            return types.SimpleNamespace(error_code=0, session_id=5, responses=[topic])

        nothing_new = types.SimpleNamespace(error_code=0, session_id=5, responses=[])
        conn = _TopicIdLeader([answer(None), answer(_epoch_batch([b"a", b"b"], 0, 0)), nothing_new])
        await fetcher._truncate(conn)  # a v12+ leader: the fetch itself checks the epoch, no request
        assert await fetcher._fetch(conn)  # full: opens session 5, no records yet
        assert await fetcher._fetch(conn)  # incremental, names nothing: the news of t-0 comes anyway
        assert [t.topic_id for t in conn.requests[1].topics] == []
        assert p.log_end_offset == 2
        assert await fetcher._fetch(conn)  # the session goes on
        assert (conn.requests[2].session_id, conn.requests[2].session_epoch) == (5, 2)


async def test_a_follower_fetch_names_the_epoch_of_its_latest_registration(tmp_path: Path) -> None:
    """After a lost session the broker registers again and knows its new epoch at once, while
    its metadata cache still holds the previous registration until the watch brings the new
    one. Its fetches (v15 ReplicaState, KIP-903) name the newer: the leader refuses a fetch
    naming the previous one, which cost the follower's partitions a back-off of a second."""
    async with running_broker(tmp_path) as core, _broker_7(core, tmp_path):
        created = await core.create_topics([CreatableTopic("t", assignments={0: [7, 0]})], 1000, False)
        assert created["t"].error == ErrorCode.NONE
        p = core.replica_manager.get_partition(TP)
        assert p is not None
        cached = core.metadata_cache.brokers[0].epoch
        core.metadata_cache.registered_epoch = cached + 1000  # registered again, not yet watched
        fetcher = _fetcher_from_7(core, p)
        conn = _TopicIdLeader([types.SimpleNamespace(error_code=0, session_id=5, responses=[])])
        await fetcher._truncate(conn)
        await fetcher._fetch(conn)
        assert conn.requests[0].replica_state.replica_epoch == cached + 1000
