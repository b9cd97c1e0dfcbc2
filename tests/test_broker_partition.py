"""Partition state without a server: leader and follower appends, HW over the ISR, truncation by
leader epoch, transactions' last stable offset and aborted index, producer-state persistence."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from broker_harness import batch, broker_plugins

from odradek import records
from odradek.broker.api import IsolationLevel
from odradek.broker.election import elect_leader
from odradek.broker.metadata_cache import PartitionState
from odradek.broker.partition import Partition
from odradek.broker.producer_state import AbortedTxn, AppendOrigin, ProducerStateManager
from odradek.config import default_config
from odradek.errors import ErrorCode, InvalidProducerEpoch, KafkaError, NotLeaderOrFollower
from odradek.interfaces import LogStorage, TopicPartition

TP = TopicPartition("t", 0)


@asynccontextmanager
async def storage_at(path: Path) -> AsyncIterator[LogStorage]:
    config = default_config(log_dirs=str(path))
    storage = broker_plugins().storage("segment").create(config)
    await storage.open()
    try:
        yield storage
    finally:
        await storage.close()


def new_partition(storage: LogStorage, broker_id: int) -> Partition:
    config = default_config().topic_config()
    p = Partition(TP, storage.get_or_create_log(TP, config), broker_id, config)
    p.producer_state.load(p.log)
    return p


def leader_append(p: Partition, data: bytearray, origin: AppendOrigin = AppendOrigin.CLIENT) -> int:
    metas = records.validate_batches(data, from_client=origin is AppendOrigin.CLIENT)
    result = p.append_records_to_leader(data, metas, origin)
    return result.first_offset


def replicate(leader: Partition, follower: Partition) -> int:
    """One follower fetch: read from the follower's LEO, append as follower, report the LEO."""
    read = leader.read_records(
        follower.log_end_offset,
        1 << 20,
        IsolationLevel.READ_UNCOMMITTED,
        min_one_batch=True,
        replica_id=follower.local_broker_id,
    )
    try:
        data = read.info.to_bytes()
    finally:
        read.info.release()
    if data:
        metas = records.validate_batches(data, exact_counts=False)
        follower.append_records_as_follower(data, metas)
    follower.update_follower_high_watermark(read.high_watermark)
    leader.update_follower_fetch_state(follower.local_broker_id, follower.log_end_offset, follower.log_start_offset, 0)
    return follower.log_end_offset


async def test_follower_append_hw_and_truncation_by_epoch(tmp_path: Path) -> None:
    async with storage_at(tmp_path / "a") as sa, storage_at(tmp_path / "b") as sb:
        a, b = new_partition(sa, 0), new_partition(sb, 1)
        a.make_leader(0, [0, 1], [0, 1])
        b.make_follower(0, 0, [0, 1], [0, 1])
        with pytest.raises(NotLeaderOrFollower):
            leader_append(b, batch([b"x"]))
        leader_append(a, batch([b"a", b"b"], producer_id=5, producer_epoch=0, base_sequence=0))
        leader_append(a, batch([b"c"]))
        assert (a.log_end_offset, a.high_watermark) == (3, 0)  # the follower has not fetched yet
        assert replicate(a, b) == 3
        assert a.high_watermark == 3  # min LEO over the ISR
        replicate(a, b)
        assert b.high_watermark == 3
        assert [(e.epoch, e.start_offset) for e in b.log.epoch_entries()] == [(0, 0)]
        entry = b.producer_state.last_entry(5)
        assert entry is not None and entry.last_seq == 1  # follower's producer state follows the leader's
        # leadership moves to b at epoch 1; a wrote a batch nobody replicated (it diverges)
        leader_append(a, batch([b"lost"]))
        b.make_leader(1, [0, 1], [1])
        a.make_follower(1, 1, [0, 1], [1])
        assert [(e.epoch, e.start_offset) for e in b.log.epoch_entries()] == [(0, 0), (1, 3)]
        leader_append(b, batch([b"d"]))
        epoch, end = b.log.end_offset_for_epoch(0)  # what a asks with OffsetForLeaderEpoch
        assert (epoch, end) == (0, 3)
        a.truncate_to(min(end, a.log_end_offset))
        assert a.log_end_offset == 3
        replicate(b, a)
        assert a.log_end_offset == 4 and [(e.epoch, e.start_offset) for e in a.log.epoch_entries()] == [(0, 0), (1, 3)]


async def test_isr_lag_and_rejoin(tmp_path: Path) -> None:
    async with storage_at(tmp_path) as s:
        p = new_partition(s, 0)
        p.make_leader(0, [0, 1, 2], [0, 1], now_ms=1000)
        leader_append(p, batch([b"x"]))
        p.update_follower_fetch_state(1, 1, 0, now_ms=2000)
        assert p.high_watermark == 1
        assert p.out_of_sync_replicas(now_ms=2500, max_lag_ms=1000) == set()
        assert p.out_of_sync_replicas(now_ms=4000, max_lag_ms=1000) == {1}
        assert not p.can_join_isr(2)
        p.update_follower_fetch_state(2, 1, 0, now_ms=2000)
        assert p.can_join_isr(2)
        # caught up, but only long ago: a follower that stopped fetching does not rejoin on it
        assert p.can_join_isr(2, now_ms=2500, max_lag_ms=1000)
        assert not p.can_join_isr(2, now_ms=4000, max_lag_ms=1000)
        leader_append(p, batch([b"y"]))
        p.update_follower_fetch_state(1, 1, 0, now_ms=3000)  # behind, but the HW never goes back
        assert p.high_watermark == 1


def test_offline_leader_election() -> None:
    state = PartitionState(leader=1, leader_epoch=4, isr=(1, 2), version=7)
    assert elect_leader((1, 2, 3), state, live={2, 3}, unclean=False) == PartitionState(2, 5, (2,), 7)
    assert elect_leader((1, 2, 3), PartitionState(1, 4, (1,), 7), live={2, 3}, unclean=False) is None
    assert elect_leader((1, 2, 3), PartitionState(1, 4, (1,), 7), live={3}, unclean=True) == PartitionState(
        3, 5, (3,), 7
    )


def _open_transaction_then_a_plain_record(s: LogStorage) -> Partition:
    """A one-replica leader holding an open transaction (offsets 0-1) and a plain record (2)."""
    p = new_partition(s, 0)
    p.make_leader(0, [0], [0])
    leader_append(p, batch([b"t1", b"t2"], producer_id=9, producer_epoch=0, base_sequence=0, is_transactional=True))
    leader_append(p, batch([b"plain"]))
    assert (p.high_watermark, p.last_stable_offset) == (3, 0)
    return p


async def test_the_last_stable_offset_never_falls_below_the_log_start(tmp_path: Path) -> None:
    """Kafka's updateFirstUnstableOffset: an open transaction whose first records retention or
    DeleteRecords took holds the LSO at the log start, not at an offset that is gone."""
    async with storage_at(tmp_path) as s:
        p = _open_transaction_then_a_plain_record(s)
        assert p.delete_records_before(2) == 2
        assert (p.log_start_offset, p.last_stable_offset) == (2, 2)


async def test_transactions_last_stable_offset_and_aborted_index(tmp_path: Path) -> None:
    async with storage_at(tmp_path) as s:
        p = _open_transaction_then_a_plain_record(s)
        committed = p.read_records(0, 1 << 20, IsolationLevel.READ_COMMITTED, min_one_batch=True)
        assert committed.info.size == 0 and committed.last_stable_offset == 0
        committed.info.release()
        abort = bytearray(records.build_control_batch(records.ControlRecordType.ABORT, producer_id=9, producer_epoch=0))
        assert leader_append(p, abort, AppendOrigin.COORDINATOR) == 3
        assert (p.high_watermark, p.last_stable_offset) == (4, 4)
        expected = [AbortedTxn(9, 0, 3, 0)]
        assert p.producer_state.aborted_transactions(0, 4) == expected
        assert p.producer_state.aborted_transactions(4, 10) == []
        # a marker from an older epoch is refused as Kafka refuses it (INVALID_PRODUCER_EPOCH)
        old = bytearray(records.build_control_batch(records.ControlRecordType.COMMIT, producer_id=9, producer_epoch=0))
        leader_append(p, batch([b"t3"], producer_id=9, producer_epoch=1, base_sequence=0, is_transactional=True))
        with pytest.raises(KafkaError) as fenced:
            leader_append(p, old, AppendOrigin.COORDINATOR)
        assert fenced.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
        # so is one from a coordinator older than the last one that wrote a marker (a zombie)
        p.producer_state.producers[9].coordinator_epoch = 5
        zombie = bytearray(
            records.build_control_batch(
                records.ControlRecordType.COMMIT, producer_id=9, producer_epoch=1, coordinator_epoch=4
            )
        )
        with pytest.raises(KafkaError) as fenced:
            leader_append(p, zombie, AppendOrigin.COORDINATOR)
        assert fenced.value.code == ErrorCode.TRANSACTION_COORDINATOR_FENCED
        with pytest.raises(InvalidProducerEpoch):
            leader_append(p, batch([b"late"], producer_id=9, producer_epoch=0, base_sequence=3))
        assert p.last_stable_offset == 4  # the epoch-1 transaction is open
        # persistence: from the snapshot, and rebuilt from the log alone (markers decoded)
        p.producer_state.snapshot(p.log)
        restored = ProducerStateManager()
        restored.load(p.log)
        assert restored.aborted == expected and restored.first_unstable_offset() == 4
        p.log.write_state("producer-state", b"not json")
        rebuilt = ProducerStateManager()
        rebuilt.load(p.log)
        assert rebuilt.aborted == [AbortedTxn(9, 0, 3, 0)] and rebuilt.first_unstable_offset() == 4
        entry = rebuilt.last_entry(9)
        assert entry is not None and entry.producer_epoch == 1


async def test_a_read_committed_fetch_at_the_tail_skips_the_aborts_before_it(tmp_path: Path) -> None:
    """1,000 aborted transactions in a partition's history: a read_committed fetch near its end
    looks at the few aborts after its fetch offset, not at all of them (every fetch cost
    O(aborts ever made), 0.5 ms a partition at 40,000), and answers what a full scan answers."""
    async with storage_at(tmp_path) as s:
        p = new_partition(s, 0)
        p.make_leader(0, [0], [0])
        n = 1000
        for i in range(n):
            leader_append(p, batch([b"t"], producer_id=9, producer_epoch=0, base_sequence=i, is_transactional=True))
            if i % 2 == 0:  # a plain record inside every other transaction
                leader_append(p, batch([b"plain"]))
            marker = records.ControlRecordType.ABORT
            leader_append(p, bytearray(records.build_control_batch(marker, producer_id=9, producer_epoch=0)),
                          AppendOrigin.COORDINATOR)  # fmt: skip
        state = p.producer_state
        everything = list(state.aborted)
        assert len(everything) == n
        visited = 0

        class CountingList(list[AbortedTxn]):
            def __iter__(self) -> Iterator[AbortedTxn]:
                nonlocal visited
                for txn in super().__iter__():
                    visited += 1
                    yield txn

            def __getitem__(self, index: Any) -> Any:
                nonlocal visited
                got = super().__getitem__(index)
                visited += len(got) if isinstance(index, slice) else 1
                return got

        state.aborted = CountingList(everything)
        end = p.log_end_offset
        for fetch_offset, upper in ((0, end), (end - 10, end), (end // 2, end // 2 + 7), (end, end + 5)):
            expected = [a for a in everything if a.last_offset >= fetch_offset and a.first_offset < upper]
            assert state.aborted_transactions(fetch_offset, upper) == expected
        visited = 0
        assert len(state.aborted_transactions(end - 10, end)) == 4
        assert visited <= 20  # the bisection and the four after it; all 1,000 before


async def test_expired_producers_are_forgotten(tmp_path: Path) -> None:
    async with storage_at(tmp_path) as s:
        p = new_partition(s, 0)
        p.make_leader(0, [0], [0])
        leader_append(p, batch([b"x"], producer_id=3, producer_epoch=0, base_sequence=0, timestamp=1000))
        state = p.producer_state
        # Kafka's rule: expired once idle for producer.id.expiration.ms (not only past it)
        assert state.remove_expired_producers(now_ms=999 + state.producer_id_expiration_ms) == 0
        assert state.remove_expired_producers(now_ms=1000 + state.producer_id_expiration_ms) == 1
        assert state.last_entry(3) is None


async def test_loading_a_snapshot_drops_expired_producers(tmp_path: Path) -> None:
    """As Kafka's loadFromSnapshot: producers the snapshot holds that are expired by the time it
    is loaded (the broker was down, or crashed before a snapshot recorded their expiry) do not
    come back; a producer with an open transaction stays whatever its age, and so do producers
    replayed from the log after the snapshot (the periodic check expires them)."""
    async with storage_at(tmp_path) as s:
        p = new_partition(s, 0)
        p.make_leader(0, [0], [0])
        leader_append(p, batch([b"old"], producer_id=1, producer_epoch=0, base_sequence=0, timestamp=1000))
        leader_append(p, batch([b"new"], producer_id=2, producer_epoch=0, base_sequence=0, timestamp=50_000))
        txn = batch([b"t"], producer_id=3, producer_epoch=0, base_sequence=0, timestamp=1000, is_transactional=True)
        leader_append(p, txn)
        p.producer_state.snapshot(p.log)
        leader_append(p, batch([b"tail"], producer_id=4, producer_epoch=0, base_sequence=0, timestamp=1000))
        restored = ProducerStateManager(10_000, clock_ms=lambda: 11_000)
        restored.load(p.log)
        assert sorted(restored.producers) == [2, 3, 4]
        assert restored.first_unstable_offset() == 2
        as_written = ProducerStateManager(10_000)  # no clock: the snapshot as it is
        as_written.load(p.log)
        assert sorted(as_written.producers) == [1, 2, 3, 4]


def _scan_first_unstable(state: ProducerStateManager) -> int | None:
    """The LSO bound computed the slow way: the smallest open transaction over all producers."""
    firsts = [e.current_txn_first_offset for e in state.producers.values() if e.current_txn_first_offset is not None]
    return min(firsts) if firsts else None


async def test_open_transactions_are_tracked_through_appends_markers_and_reloads(tmp_path: Path) -> None:
    """The LSO's bound (first offset of the oldest open transaction) is kept per producer as
    transactions open and end, not found by scanning every producer on each read: interleaved
    transactions of four producers, plain appends, commits and aborts, a snapshot reload and a
    rebuild from the log must all agree with the scan."""
    import random

    rng = random.Random(7)
    async with storage_at(tmp_path) as s:
        p = new_partition(s, 0)
        p.make_leader(0, [0], [0])
        seqs = dict.fromkeys(range(1, 5), 0)
        for _ in range(120):
            pid = rng.choice(list(seqs))
            action = rng.choice(["data", "data", "commit", "abort", "plain"])
            if action == "plain":
                leader_append(p, batch([b"p"]))
            elif action == "data":
                leader_append(
                    p, batch([b"t"], producer_id=pid, producer_epoch=0, base_sequence=seqs[pid], is_transactional=True)
                )
                seqs[pid] += 1
            else:
                kind = records.ControlRecordType.COMMIT if action == "commit" else records.ControlRecordType.ABORT
                marker = bytearray(records.build_control_batch(kind, producer_id=pid, producer_epoch=0))
                leader_append(p, marker, AppendOrigin.COORDINATOR)
            state = p.producer_state
            assert state.first_unstable_offset() == _scan_first_unstable(state)
            unstable = _scan_first_unstable(state)
            assert p.last_stable_offset == (p.high_watermark if unstable is None else min(p.high_watermark, unstable))
        p.producer_state.snapshot(p.log)
        restored = ProducerStateManager()
        restored.load(p.log)
        assert restored.first_unstable_offset() == _scan_first_unstable(p.producer_state)
        p.log.write_state("producer-state", b"not json")
        rebuilt = ProducerStateManager()
        rebuilt.load(p.log)
        assert rebuilt.first_unstable_offset() == _scan_first_unstable(p.producer_state)


async def test_consumer_reads_go_past_runs_of_empty_batches(tmp_path: Path) -> None:
    """Segments holding only empty batches (all a compacted batch's records gone; the cleaner
    leaves such segments) answered alone make librdkafka double its fetch size and then report
    MSG_SIZE_TOO_LARGE; a consumer's read goes on past them to the records after, a follower's
    read returns them (its producer state needs them), and at the end of the log they are
    answered so the client moves past them."""
    from odradek.plugins.storage_segment.scan import empty_batch_like

    async with storage_at(tmp_path) as storage:
        config = default_config(log_segment_bytes=130).topic_config()  # two empty batches a segment
        p = Partition(TP, storage.get_or_create_log(TP, config), 0, config)
        p.producer_state.load(p.log)
        p.make_follower(1, 0, [0, 1], [0, 1])
        parts = [records.build_batch([(b"k", b"v0", [], 1), (b"k", b"v1", [], 2)])]
        parts += [empty_batch_like(records.build_batch([(b"k", b"x", [], 3)], base_offset=o)) for o in range(2, 12)]
        parts += [records.build_batch([(b"k", b"v12", [], 4)], base_offset=12)]
        parts += [empty_batch_like(records.build_batch([(b"k", b"x", [], 5)], base_offset=o)) for o in (13, 14)]
        for part in parts:  # one append each, so the segments roll between them
            data = bytearray(part)
            p.append_records_as_follower(data, records.validate_batches(data, exact_counts=False))
        assert len(p.log.segments) >= 7
        p.make_leader(1, [0], [0])
        assert p.high_watermark == p.log_end_offset == 15

        def read(offset: int, replica_id: int = -1) -> tuple[int, list[int]]:
            r = p.read_records(
                offset, 1 << 20, IsolationLevel.READ_UNCOMMITTED, min_one_batch=True, replica_id=replica_id
            )
            try:
                return r.info.first_batch_offset, [h.record_count for _, h in records.iter_headers(r.info.to_bytes())]
            finally:
                r.info.release()

        first, counts = read(2)
        assert first == 12 and counts[0] == 1  # past five segments of empty batches, to the record
        first, counts = read(13)
        assert first == 13 and counts == [0] * len(counts)  # nothing after them: answered as they are
        p.make_follower(1, 2, [0, 1], [0, 1])
        p.make_leader(3, [0, 1], [0, 1])
        first, counts = read(2, replica_id=1)
        assert first == 2 and counts == [0] * len(counts)  # a follower gets every batch


async def test_the_lso_waits_for_the_marker_to_be_replicated(tmp_path: Path) -> None:
    """Kafka's unreplicatedTxns: a transaction's COMMIT marker appended on the leader but not
    yet below the HW keeps the LSO at the transaction's first offset. Before, the LSO moved to
    the HW at once and read_committed readers got the transaction's records while a leader
    change could still lose its marker."""
    async with storage_at(tmp_path / "a") as sa, storage_at(tmp_path / "b") as sb:
        leader, follower = new_partition(sa, 0), new_partition(sb, 1)
        leader.make_leader(0, [0, 1], [0, 1])
        follower.make_follower(0, 0, [0, 1], [0, 1])
        txn = batch([b"t1", b"t2", b"t3"], producer_id=9, producer_epoch=0, base_sequence=0, is_transactional=True)
        leader_append(leader, txn)
        assert replicate(leader, follower) == 3 and leader.high_watermark == 3
        marker = records.build_control_batch(records.ControlRecordType.COMMIT, producer_id=9, producer_epoch=0)
        commit = bytearray(marker)
        assert leader_append(leader, commit, AppendOrigin.COORDINATOR) == 3
        assert (leader.high_watermark, leader.last_stable_offset) == (3, 0)  # the marker is not replicated
        read = leader.read_records(0, 1 << 20, IsolationLevel.READ_COMMITTED, min_one_batch=True)
        assert read.info.size == 0
        read.info.release()
        replicate(leader, follower)  # the follower takes the marker; its next fetch reports it
        replicate(leader, follower)
        assert (leader.high_watermark, leader.last_stable_offset) == (4, 4)
