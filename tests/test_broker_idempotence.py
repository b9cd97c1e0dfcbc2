"""Idempotent producers: producer ids, epochs, sequences, duplicates of the last 5 batches, restarts."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio
import trio.testing
from broker_harness import batch, create, fetch_records, produce, running_broker

from odradek.broker.core import BrokerCore
from odradek.broker.producer_ids import MAX_EPOCH
from odradek.broker.producer_state import SNAPSHOT_NAME
from odradek.broker.replica_manager import ReplicaManager
from odradek.errors import ErrorCode
from odradek.interfaces import TopicPartition

TP = TopicPartition("t", 0)


def pbatch(pid: int, epoch: int, seq: int, n: int = 1, tag: bytes = b"v") -> bytearray:
    return batch([tag + b"%d" % (seq + i) for i in range(n)], producer_id=pid, producer_epoch=epoch, base_sequence=seq)


async def new_producer(core: BrokerCore) -> int:
    result = await core.init_producer_id(None, 60000)
    assert result.error == ErrorCode.NONE and result.producer_epoch == 0
    return result.producer_id


async def test_producer_ids_are_unique_and_survive_restart(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as core:
        ids = [await new_producer(core) for _ in range(3)]
        assert len(set(ids)) == 3
    async with running_broker(tmp_path) as core:
        later = await new_producer(core)
        assert later > max(ids)  # a new block: ids are never handed out twice


async def test_duplicates_of_last_five_batches_keep_original_offsets(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as core:
        await create(core, "t")
        pid = await new_producer(core)
        firsts = [(await produce(core, TP, pbatch(pid, 0, seq * 2, n=2))).base_offset for seq in range(6)]
        assert firsts == [0, 2, 4, 6, 8, 10]
        # a retry of any of the last five batches: acknowledged with the original offset, not appended
        for seq in (2, 4, 10):
            result = await produce(core, TP, pbatch(pid, 0, seq, n=2))
            assert result.error == ErrorCode.NONE and result.base_offset == seq
        assert len(await fetch_records(core, TP)) == 12
        # the first batch left the window: a retry of it is out of order
        assert (await produce(core, TP, pbatch(pid, 0, 0, n=2))).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        # a retry overlapping but not matching a batch is out of order too
        assert (await produce(core, TP, pbatch(pid, 0, 9, n=2))).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert (await produce(core, TP, pbatch(pid, 0, 12))).base_offset == 12


async def test_gaps_and_epochs(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as core:
        await create(core, "t")
        pid = await new_producer(core)
        assert (await produce(core, TP, pbatch(pid, 0, 0))).error == ErrorCode.NONE
        assert (await produce(core, TP, pbatch(pid, 0, 2))).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert (await produce(core, TP, pbatch(pid, 0, 1))).error == ErrorCode.NONE
        # a bumped epoch starts again at 0 and fences the old one
        assert (await produce(core, TP, pbatch(pid, 1, 5))).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert (await produce(core, TP, pbatch(pid, 1, 0))).error == ErrorCode.NONE
        assert (await produce(core, TP, pbatch(pid, 0, 2))).error == ErrorCode.INVALID_PRODUCER_EPOCH
        # a producer the partition has never seen is accepted at any sequence (Kafka >= 2.5:
        # its state may have been removed by retention or DeleteRecords)
        other = await new_producer(core)
        assert (await produce(core, TP, pbatch(other, 0, 42))).error == ErrorCode.NONE
        assert (await produce(core, TP, pbatch(other, 0, 44))).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert [r.value for r in await fetch_records(core, TP)] == [b"v0", b"v1", b"v0", b"v42"]


async def test_sequence_wraps_at_int32_max(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as core:
        await create(core, "t")
        pid = await new_producer(core)
        top = 2**31 - 1
        assert (await produce(core, TP, pbatch(pid, 0, top - 1, n=2))).error == ErrorCode.NONE
        assert (await produce(core, TP, pbatch(pid, 0, 0))).error == ErrorCode.NONE


async def test_producer_state_survives_restart(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as core:
        await create(core, "t")
        pid = await new_producer(core)
        for seq in range(3):
            await produce(core, TP, pbatch(pid, 0, seq))
    async with running_broker(tmp_path) as core:
        # the retry of the last batch after a restart is still recognised
        result = await produce(core, TP, pbatch(pid, 0, 2))
        assert result.error == ErrorCode.NONE and result.base_offset == 2
        assert (await produce(core, TP, pbatch(pid, 0, 4))).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert (await produce(core, TP, pbatch(pid, 0, 3))).base_offset == 3


async def test_producer_state_rebuilt_from_log_without_snapshot(tmp_path: Path) -> None:
    """A crash before any snapshot: the state is replayed from the log's batch headers."""
    async with running_broker(tmp_path) as core:
        await create(core, "t")
        pid = await new_producer(core)
        for seq in range(0, 6, 2):
            await produce(core, TP, pbatch(pid, 0, seq, n=2))
    snapshots = list(tmp_path.glob(f"t-0/{SNAPSHOT_NAME}*"))
    assert snapshots, "clean shutdown writes a producer-state snapshot"
    for s in snapshots:
        s.unlink()
    async with running_broker(tmp_path) as core:
        assert (await produce(core, TP, pbatch(pid, 0, 2, n=2))).base_offset == 2
        assert (await produce(core, TP, pbatch(pid, 0, 6))).base_offset == 6


async def test_transactional_init_producer_id_bumps_epoch(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as core:
        first = await core.init_producer_id("txn-a", 60000)
        second = await core.init_producer_id("txn-a", 60000)
        assert first.error == second.error == ErrorCode.NONE
        assert second.producer_id == first.producer_id and second.producer_epoch == first.producer_epoch + 1
        stale = await core.init_producer_id("txn-a", 60000, first.producer_id, first.producer_epoch)
        assert stale.error == ErrorCode.PRODUCER_FENCED
        assert (await core.init_producer_id("txn-a", 10**9)).error == ErrorCode.INVALID_TRANSACTION_TIMEOUT
        assert (await core.init_producer_id("", 60000)).error == ErrorCode.INVALID_REQUEST
        other = await core.init_producer_id("txn-b", 60000)
        assert other.producer_id != first.producer_id
    async with running_broker(tmp_path) as core:
        again = await core.init_producer_id("txn-a", 60000)
        assert again.producer_id == first.producer_id and again.producer_epoch == second.producer_epoch + 1


async def test_snapshots_only_where_producer_state_changed_or_a_segment_grew(tmp_path: Path) -> None:
    """The periodic snapshot skips partitions only non-idempotent producers wrote, until their log
    grows by segment.bytes (bounding what a restart replays); idempotent writes always count."""
    async with running_broker(tmp_path) as core:
        await create(core, "t", 2, **{"segment.bytes": "4096"})
        rm = core.replica_manager
        plain, idem = TopicPartition("t", 0), TopicPartition("t", 1)
        await rm.persist_state()
        await produce(core, plain, batch([b"x" * 100]))
        pid = await new_producer(core)
        await produce(core, idem, pbatch(pid, 0, 0))
        assert await rm.persist_state() == 1  # idem only
        assert not list(tmp_path.glob(f"t-0/{SNAPSHOT_NAME}*"))
        assert await rm.persist_state() == 0  # nothing moved
        for _ in range(40):  # > 4 KiB more log without producer ids
            await produce(core, plain, batch([b"x" * 100]))
        assert await rm.persist_state() == 1
        assert list(tmp_path.glob(f"t-0/{SNAPSHOT_NAME}*"))
        await produce(core, idem, pbatch(pid, 0, 1))
        assert await rm.persist_state() == 1


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


async def test_expired_producers_stay_expired_across_restarts(tmp_path: Path) -> None:
    """An idempotent producer idle past producer.id.expiration.ms is forgotten for good: the
    expiration check is followed by a snapshot without it (though no offset moved), and a
    snapshot still holding it (written before it expired, e.g. by a broker that was then down
    or crashed) is loaded without it. Its batch at sequence 5 is then accepted as from an
    unknown producer, not OUT_OF_ORDER_SEQUENCE_NUMBER against the forgotten state."""
    expiry = {"producer.id.expiration.ms": 5000, "producer.id.expiration.check.interval.ms": 3_600_000}
    old = _wall_ms() - 60_000  # the batches' CreateTime: idle for a minute already
    async with running_broker(tmp_path, **expiry) as core:
        await create(core, "t", 2)
        first, second = TopicPartition("t", 0), TopicPartition("t", 1)
        pid = await new_producer(core)
        for tp in (first, second):
            for seq in range(5):
                data = batch([b"v"], producer_id=pid, producer_epoch=0, base_sequence=seq, timestamp=old)
                assert (await produce(core, tp, data)).error == ErrorCode.NONE
        rm = core.replica_manager
        assert rm.producer_id_expiration_check_interval_ms == 3_600_000
        await rm.persist_state()
        # partition 1 forgets the producer now; partition 0 keeps it in its snapshot (as if the
        # broker had stopped before the check): the next start must drop it from there
        assert rm.partitions[second].producer_state.remove_expired_producers(_wall_ms()) == 1
        assert await rm.persist_state() == 1
        assert f'"pid":{pid},'.encode() not in rm.partitions[second].log.read_state(SNAPSHOT_NAME)
        assert f'"pid":{pid},'.encode() in rm.partitions[first].log.read_state(SNAPSHOT_NAME)
    async with running_broker(tmp_path, **expiry) as core:
        for tp in (first, second):
            assert core.replica_manager.partitions[tp].producer_state.last_entry(pid) is None
            data = batch([b"v"], producer_id=pid, producer_epoch=0, base_sequence=5, timestamp=old)
            assert (await produce(core, tp, data)).error == ErrorCode.NONE


async def test_producer_expiration_check_interval(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """producer.id.expiration.check.interval.ms sets how often the replica manager expires idle
    producer ids (Kafka's default 10 minutes; the first check one interval after start)."""
    rm = ReplicaManager(0, object(), {}, producer_id_expiration_check_interval_ms=2000)  # type: ignore[arg-type]
    checks: list[float] = []

    async def no_persist(*, only_changed: bool = True) -> int:
        return 0

    monkeypatch.setattr(rm, "persist_state", no_persist)
    monkeypatch.setattr(rm, "remove_expired_producers", lambda: checks.append(trio.current_time()) or 0)
    start = trio.current_time()
    with trio.move_on_after(7):
        await rm.run()
    assert [round(t - start, 3) for t in checks] == [2, 4, 6]
    assert ReplicaManager(0, object(), {}).producer_id_expiration_check_interval_ms == 600_000  # type: ignore[arg-type]


async def test_kip360_idempotent_producer_bumps_its_epoch(tmp_path: Path) -> None:
    """InitProducerId v3+ from an idempotent producer holding an id (a batch timed out, so its
    sequences must restart): the same id at the next epoch, accepted from sequence 0 by the
    partitions; the old epoch is fenced. At the epoch limit a new id."""
    async with running_broker(tmp_path) as core:
        await create(core, "t")
        pid = await new_producer(core)
        assert (await produce(core, TP, pbatch(pid, 0, 0, n=3))).error == ErrorCode.NONE
        bumped = await core.init_producer_id(None, 60000, pid, 0)
        assert (bumped.error, bumped.producer_id, bumped.producer_epoch) == (ErrorCode.NONE, pid, 1)
        assert (await produce(core, TP, pbatch(pid, 1, 0, tag=b"w"))).error == ErrorCode.NONE
        assert (await produce(core, TP, pbatch(pid, 0, 3))).error == ErrorCode.INVALID_PRODUCER_EPOCH
        exhausted = await core.init_producer_id(None, 60000, pid, MAX_EPOCH)
        assert exhausted.error == ErrorCode.NONE and exhausted.producer_id != pid and exhausted.producer_epoch == 0
        # a producer id without an epoch (or the reverse) is malformed, as Kafka answers
        assert (await core.init_producer_id(None, 60000, pid, -1)).error == ErrorCode.INVALID_REQUEST
        assert (await core.init_producer_id("txn", 60000, -1, 0)).error == ErrorCode.INVALID_REQUEST
        assert [r.value for r in await fetch_records(core, TP)] == [b"v0", b"v1", b"v2", b"w0"]
