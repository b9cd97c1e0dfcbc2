"""The leader's view of its followers and the follower's fetch loop, against Kafka's rules
(Partition.scala, AbstractFetcherThread): who may rejoin an ISR and when, what the high
watermark waits for while an ISR grows, a follower restarting below a log start that falls
inside a batch, per-partition errors, and the order partitions are fetched in."""

from __future__ import annotations

import os
import types
from pathlib import Path
from typing import Any

import trio
import trio.testing
from broker_harness import batch, produce, running_broker
from test_replication_unit import (
    STATE_KEY,
    TP,
    _broker_7,
    _epoch_batch,
    _FakeConnection,
    _fetcher_from_7,
    _follower_fetch,
    _isr_in_store,
    _led_with_broker_7,
)

from odradek.broker.alter_partition import AlterPartitionManager
from odradek.broker.api import CreatableTopic, FetchPartition, IsolationLevel
from odradek.broker.core import BrokerCore
from odradek.broker.metadata_cache import PartitionState
from odradek.errors import ErrorCode
from odradek.interfaces import MetadataStore, TopicPartition

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


async def _controller_takes_7_out(core: BrokerCore, epoch: int) -> None:
    """What the controller does when broker 7 comes back from a crash: ISR [0], same leader epoch."""
    current = await core.store.get(STATE_KEY)
    assert current is not None
    await core.store.put(STATE_KEY, PartitionState(0, epoch, (0,), 0).to_json(), expect=current.version)
    partition = core.replica_manager.get_partition(TP)
    assert partition is not None
    with trio.fail_after(5):
        while partition.isr != {0}:
            await trio.sleep(0.01)


async def test_a_follower_taken_out_of_the_isr_rejoins_only_after_a_new_fetch(tmp_path: Path) -> None:
    """The controller takes a restarted broker out of the ISRs (its log may have lost an unflushed
    tail). The leader's ISR pass used to put it back from the log end it fetched before the
    crash, with no fetch since: elected then, it lacked acknowledged records. Kafka resets a
    replica's state when it leaves the ISR and expands only on a fetch."""
    async with _led_with_broker_7(tmp_path) as (core, _other, p):
        # built first, it takes the broker's ISR wake-ups: the passes below are the only ones
        leader = AlterPartitionManager(core.config, core.store, core.metadata_cache, core.replica_manager)
        epoch = p.leader_epoch
        assert (await produce(core, TP, batch([b"a", b"b", b"c"]), acks=1)).error == ErrorCode.NONE
        assert await _follower_fetch(core, 3, epoch) == ErrorCode.NONE
        assert (p.high_watermark, p.isr) == (3, {0, 7})
        await _controller_takes_7_out(core, epoch)
        assert p.remote_replicas[7].log_end_offset == -1  # forgotten with its ISR membership
        assert await leader.maybe_update_isrs() == 0
        assert await _isr_in_store(core) == (0,)

        assert await _follower_fetch(core, 3, epoch) == ErrorCode.NONE  # it fetches again: caught up
        assert await leader.maybe_update_isrs() == 1
        assert await _isr_in_store(core) == (0, 7)


class _GatedStore:
    """A metadata session whose partition-state writes wait for ``gate`` (the write in flight)."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self.gate = trio.Event()
        self.writing = trio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def put(self, key: str, value: bytes, **kw: Any) -> int:
        if "/partitions/" in key:
            self.writing.set()
            await self.gate.wait()
        return await self._store.put(key, value, **kw)


async def test_the_hw_waits_for_a_replica_whose_isr_addition_is_being_written(tmp_path: Path) -> None:
    """While the leader's write adding a follower to the ISR is in flight, appends moved the HW
    over the old ISR and acks=all was answered; the write then landed an ISR with a member below
    the HW, which a clean election could pick without the acknowledged records. Kafka computes
    the HW over the maximal ISR (committed plus pending additions)."""
    async with _led_with_broker_7(tmp_path) as (core, _other, p):
        epoch = p.leader_epoch
        store = _GatedStore(core.store)
        leader = AlterPartitionManager(core.config, store, core.metadata_cache, core.replica_manager)  # type: ignore[arg-type]
        await _controller_takes_7_out(core, epoch)
        assert (await produce(core, TP, batch([b"a"]), acks=1)).error == ErrorCode.NONE
        assert await _follower_fetch(core, 1, epoch) == ErrorCode.NONE  # 7 caught up at 1 = HW
        assert p.high_watermark == 1
        async with trio.open_nursery() as nursery:
            nursery.start_soon(leader.maybe_update_isrs)
            await store.writing.wait()
            assert p.pending_isr_additions == {7}
            assert (await produce(core, TP, batch([b"b", b"c", b"d"]), acks=1)).error == ErrorCode.NONE
            assert p.high_watermark == 1, "the HW passed a replica joining the ISR"
            store.gate.set()
        assert (p.isr, p.pending_isr_additions) == ({0, 7}, frozenset())
        assert p.high_watermark == 1  # 7 has not fetched the new records yet
        assert await _follower_fetch(core, 4, epoch) == ErrorCode.NONE
        assert p.high_watermark == 4


async def test_a_failed_isr_write_stops_the_hw_waiting_for_the_replica(tmp_path: Path) -> None:
    async with _led_with_broker_7(tmp_path) as (core, _other, p):
        epoch = p.leader_epoch
        store = _GatedStore(core.store)
        leader = AlterPartitionManager(core.config, store, core.metadata_cache, core.replica_manager)  # type: ignore[arg-type]
        await _controller_takes_7_out(core, epoch)
        assert await _follower_fetch(core, 0, epoch) == ErrorCode.NONE
        async with trio.open_nursery() as nursery:
            nursery.start_soon(leader.maybe_update_isrs)
            await store.writing.wait()
            # the controller writes first: the leader's write, on the old partition epoch, fails
            current = await core.store.get(STATE_KEY)
            assert current is not None
            await core.store.put(STATE_KEY, current.value, expect=current.version)
            store.gate.set()
        assert (p.isr, p.pending_isr_additions) == ({0}, frozenset())
        assert (await produce(core, TP, batch([b"a"]), acks=1)).error == ErrorCode.NONE
        assert p.high_watermark == 1


def _response(*partitions: tuple[int, int, bytes | None, int, int]) -> Any:
    """A Fetch response for topic ``t``: (partition, error, records, HW, log start) each."""
    parts = [
        types.SimpleNamespace(partition_index=i, error_code=err, high_watermark=hw, log_start_offset=start, records=rs)
        for i, err, rs, hw, start in partitions
    ]
    return types.SimpleNamespace(error_code=0, responses=[types.SimpleNamespace(topic="t", partitions=parts)])


async def test_a_follower_restarted_inside_the_leaders_first_batch_catches_up(tmp_path: Path) -> None:
    """DeleteRecords put the leader's log start at 5, inside a batch of offsets 0-9. A follower
    whose log is entirely behind restarts at 5 (OFFSET_OUT_OF_RANGE); the leader then serves the
    whole batch from 0. The follower refused it for good ("below the expected 5") and never
    caught up; as in Kafka it now restarts its empty log at the batch's base offset, appends,
    and takes the leader's log start again. Its HW after the restart is the new log end, not
    below the log start."""
    async with running_broker(tmp_path) as core, _broker_7(core, tmp_path):
        created = await core.create_topics([CreatableTopic("t", assignments={0: [7, 0]})], 1000, False)
        assert created["t"].error == ErrorCode.NONE
        p = core.replica_manager.get_partition(TP)
        assert p is not None
        fetcher = _fetcher_from_7(core, p)
        fetcher.partitions[TP].truncating = False
        leader_batch = _epoch_batch([b"%d" % i for i in range(10)], 0, 0)
        conn = _FakeConnection(
            [_response((0, ErrorCode.OFFSET_OUT_OF_RANGE, None, 10, 5)), _response((0, 0, leader_batch, 10, 5))]
        )
        await fetcher._fetch(conn)
        assert (p.log_start_offset, p.log_end_offset, p.high_watermark) == (5, 5, 5)
        await fetcher._fetch(conn)
        assert [r.topics[0].partitions[0].fetch_offset for r in conn.requests] == [0, 5]
        assert (p.log_start_offset, p.log_end_offset, p.high_watermark) == (5, 10, 10)
        assert fetcher.partitions[TP].delayed_until == 0.0


async def test_a_partition_whose_records_cannot_be_appended_does_not_stop_the_others(tmp_path: Path) -> None:
    """A batch the follower cannot take (here a corrupt one) backs its partition off; the other
    partitions of the same response are appended (Kafka's partitionsWithError). It used to abort
    the whole response and reconnect, every second, for every partition of that leader."""
    async with running_broker(tmp_path) as core, _broker_7(core, tmp_path):
        created = await core.create_topics([CreatableTopic("t", assignments={0: [7, 0], 1: [7, 0]})], 1000, False)
        assert created["t"].error == ErrorCode.NONE
        p0, p1 = core.replica_manager.get_partition(T0), core.replica_manager.get_partition(T1)
        assert p0 is not None and p1 is not None
        fetcher = _fetcher_from_7(core, p0)
        fetcher.set_partitions({T0: p0.leader_epoch, T1: p1.leader_epoch})
        for state in fetcher.partitions.values():
            state.truncating = False
        corrupt = bytearray(_epoch_batch([b"x"], 0, 0))
        corrupt[-1] ^= 0xFF  # the CRC no longer matches
        good = _epoch_batch([b"y", b"z"], 0, 0)
        await fetcher._fetch(_FakeConnection([_response((0, 0, bytes(corrupt), 1, 0), (1, 0, good, 2, 0))]))
        assert (p0.log_end_offset, p1.log_end_offset) == (0, 2)
        assert fetcher.partitions[T0].delayed_until > 0 and fetcher.partitions[T1].delayed_until == 0


class _LeaderConnection:
    """A replica fetcher's connection answered by an in-process leader core (as its follower 7)."""

    def __init__(self, leader: BrokerCore) -> None:
        self.leader = leader
        self.orders: list[list[str]] = []

    def version(self, api_key: int, **_: Any) -> int:
        return {1: 11, 23: 3}[int(api_key)]

    async def request(self, request: Any, *, timeout_s: float) -> Any:
        asked = [
            FetchPartition(TopicPartition(t.topic, q.partition), q.fetch_offset, q.partition_max_bytes, -1, 0)
            for t in request.topics
            for q in t.partitions
        ]
        self.orders.append([str(fp.tp) for fp in asked])
        results = await self.leader.fetch(7, 0, 1, request.max_bytes, IsolationLevel.READ_UNCOMMITTED, asked)
        by_topic: dict[str, list[Any]] = {}
        for fp in asked:
            r = results[fp.tp]
            data = r.records.to_bytes() if r.records is not None else b""
            if r.records is not None:
                r.records.release()
            part = (fp.tp.partition, int(r.error), data, r.high_watermark, r.log_start_offset)
            by_topic.setdefault(fp.tp.topic, []).append(_response(part).responses[0].partitions[0])
        return types.SimpleNamespace(
            error_code=0, responses=[types.SimpleNamespace(topic=t, partitions=ps) for t, ps in by_topic.items()]
        )


async def test_a_batch_over_the_partition_limit_is_not_starved_by_a_busy_partition(tmp_path: Path) -> None:
    """The leader gives a batch larger than replica.fetch.max.bytes only to the first partition
    with data in the request. With the partitions always asked in one order and records arriving
    on a busy one ahead between fetches, the 1.2 MB batch behind it never came (the follower
    then left the ISR for good). Partitions that got data go to the back (Kafka's
    updateAndMoveToEnd), and a topic is named again wherever the order comes back to it:
    grouped by topic, the busy a-0 stayed ahead of b-0 behind its idle neighbour a-1."""
    a0, a1, b0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
    async with (
        running_broker(tmp_path / "L", **{"replica.lag.time.max.ms": 30000}) as leader,
        _broker_7(leader, tmp_path / "L"),
    ):
        for name, count in (("a", 2), ("b", 1)):
            topic = CreatableTopic(
                name, assignments={i: [0, 7] for i in range(count)}, configs={"max.message.bytes": "3000000"}
            )
            assert (await leader.create_topics([topic], 1000, False))[name].error == ErrorCode.NONE
        assert (await produce(leader, b0, batch([os.urandom(1_200_000)]), acks=1)).error == ErrorCode.NONE
        async with running_broker(tmp_path / "F") as follower, _broker_7(follower, tmp_path / "F"):
            for name, count in (("a", 2), ("b", 1)):
                mirrored = CreatableTopic(name, assignments={i: [7, 0] for i in range(count)})
                assert (await follower.create_topics([mirrored], 1000, False))[name].error == ErrorCode.NONE
            followed = {tp: follower.replica_manager.get_partition(tp) for tp in (a0, a1, b0)}
            fetcher = _fetcher_from_7(follower, followed[a0], response_max_bytes=10 << 20)  # type: ignore[arg-type]
            fetcher.set_partitions({tp: p.leader_epoch for tp, p in followed.items() if p is not None})
            for state in fetcher.partitions.values():
                state.truncating = False
            conn = _LeaderConnection(leader)
            for i in range(4):  # a record on a-0 before every fetch
                assert (await produce(leader, a0, batch([b"x%d" % i]), acks=1)).error == ErrorCode.NONE
                await fetcher._fetch(conn)
            p_a0, p_b0 = followed[a0], followed[b0]
            assert p_a0 is not None and p_b0 is not None
            assert p_b0.log_end_offset == 1, f"the big batch never came; partition order {conn.orders}"
            assert p_a0.log_end_offset == 4
