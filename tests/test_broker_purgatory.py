"""Purgatory: long-poll fetch and acks=all produce, timed on trio's autojump clock."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio
import trio.testing
from broker_harness import batch, create, fetch_records, produce, running_broker

from odradek.broker.api import FetchPartition, FetchPartitionResult, IsolationLevel
from odradek.broker.core import BrokerCore
from odradek.broker.delayed import release_all
from odradek.broker.metadata_cache import partition_state_key, registration_json, topic_key
from odradek.broker.partition import Partition
from odradek.broker.purgatory import DelayedOperation, DelayedOperationPurgatory
from odradek.errors import ErrorCode
from odradek.interfaces import Check, Put, TopicPartition
from odradek.plugins.meta_local.store import FILE_NAME, LocalMetadataStore

TP = TopicPartition("t", 0)


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def long_poll(
    core: BrokerCore, offset: int, max_wait_ms: int, min_bytes: int = 1
) -> tuple[float, FetchPartitionResult]:
    start = trio.current_time()
    res = await core.fetch(
        -1, max_wait_ms, min_bytes, 1 << 20, IsolationLevel.READ_UNCOMMITTED, [FetchPartition(TP, offset, 1 << 20)]
    )
    r = res[TP]
    if r.records is not None:
        r.records.release()
    return trio.current_time() - start, r


# -- the generic purgatory -------------------------------------------------------------------------


class Flag(DelayedOperation):
    def __init__(self) -> None:
        super().__init__()
        self.ready = False
        self.events: list[str] = []

    def try_complete(self) -> bool:
        return self.force_complete() if self.ready else False

    def on_complete(self) -> None:
        self.events.append("complete")

    def on_expiration(self) -> None:
        self.events.append("expired")


async def test_purgatory_completes_on_check_and_expires(autojump_clock: trio.testing.MockClock) -> None:
    purgatory: DelayedOperationPurgatory[str] = DelayedOperationPurgatory("test")
    woken, expiring = Flag(), Flag()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(purgatory.try_complete_else_watch, woken, ["a", "b"], 1000)
        nursery.start_soon(purgatory.try_complete_else_watch, expiring, ["a"], 300)
        await trio.testing.wait_all_tasks_blocked()
        assert purgatory.watched("a") == 2 and purgatory.watched() == 2
        assert purgatory.check_and_complete("b") == 0  # condition not met yet
        await trio.sleep(0.5)  # the 300 ms operation expires meanwhile
        woken.ready = True
        assert purgatory.check_and_complete("b") == 1
    assert woken.events == ["complete"] and not woken.expired
    assert expiring.events == ["expired", "complete"] and expiring.expired
    assert purgatory.watched() == 0


async def test_purgatory_cancelled_waiter_leaves_no_watchers(autojump_clock: trio.testing.MockClock) -> None:
    purgatory: DelayedOperationPurgatory[str] = DelayedOperationPurgatory("test")
    op = Flag()
    with trio.move_on_after(0.1):
        await purgatory.try_complete_else_watch(op, ["k"], 10_000)
    assert purgatory.watched() == 0 and op.events == []
    ready = Flag()
    ready.ready = True
    await purgatory.try_complete_else_watch(ready, ["k"], 10_000)  # completes without parking
    assert ready.events == ["complete"]


# -- delayed fetch ---------------------------------------------------------------------------------


async def test_fetch_waits_max_wait_when_no_data(tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    async with running_broker(tmp_path) as core:
        await create(core, "t")
        elapsed, r = await long_poll(core, 0, 500)
        assert elapsed == pytest.approx(0.5) and r.error == ErrorCode.NONE and r.records is None


async def test_fetch_returns_as_soon_as_data_arrives(tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    async with running_broker(tmp_path) as core:
        await create(core, "t")
        got: list[tuple[float, FetchPartitionResult]] = []

        async def consumer() -> None:
            got.append(await long_poll(core, 0, 10_000))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(consumer)
            await trio.sleep(0.2)
            await produce(core, TP, batch([b"hello"]))
        elapsed, r = got[0]
        assert elapsed == pytest.approx(0.2) and r.high_watermark == 1


async def test_fetch_waits_for_min_bytes(tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    async with running_broker(tmp_path) as core:
        await create(core, "t")
        got: list[tuple[float, FetchPartitionResult]] = []

        async def consumer() -> None:
            got.append(await long_poll(core, 0, 10_000, min_bytes=2000))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(consumer)
            await trio.sleep(0.1)
            await produce(core, TP, batch([b"x" * 100]))  # not enough yet
            await trio.sleep(0.1)
            assert not got
            await produce(core, TP, batch([b"y" * 3000]))
        elapsed, r = got[0]
        assert elapsed == pytest.approx(0.2) and r.high_watermark == 2


async def test_fetch_returns_at_once_with_data_or_zero_wait(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with running_broker(tmp_path) as core:
        await create(core, "t")
        assert (await long_poll(core, 0, 0))[0] == 0
        await produce(core, TP, batch([b"x"]))
        elapsed, r = await long_poll(core, 0, 10_000)
        assert elapsed == 0 and r.high_watermark == 1


async def test_fetch_woken_by_topic_deletion(tmp_path: Path) -> None:
    # real clock: deleting writes the metadata store from a thread, and an autojump clock would
    # skip ahead while that thread runs
    async with running_broker(tmp_path) as core:
        await create(core, "t")
        got: list[tuple[float, FetchPartitionResult]] = []

        async def consumer() -> None:
            got.append(await long_poll(core, 0, 60_000))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(consumer)
            await trio.testing.wait_all_tasks_blocked()
            assert core.replica_manager.fetch_purgatory.watched(TP) == 1
            await core.delete_topics(["t"], 1000)
        elapsed, r = got[0]
        assert elapsed < 60 and r.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_a_parked_fetch_rereads_only_the_partition_that_changed(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fetch of 200 partitions waiting for ``min_bytes``: an append re-reads the partition it
    changed, not all 200 (every append read them all: a producer writing to each partition in
    turn cost O(partitions^2) reads, 6 s for 100 appends to a 5,000-partition fetch); once
    enough is readable the fetch answers with every partition's records."""
    n = 200
    tps = [TopicPartition("wide", p) for p in range(n)]
    data = batch([b"x" * 100])
    async with running_broker(tmp_path) as core:
        await create(core, "wide", n)
        reads = 0
        read_records = Partition.read_records

        def counting(self: Partition, *args: object, **kwargs: object) -> object:
            nonlocal reads
            reads += 1
            return read_records(self, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(Partition, "read_records", counting)
        got: list[dict[TopicPartition, FetchPartitionResult]] = []
        waited = 0.0

        async def consumer() -> None:
            nonlocal waited
            start = trio.current_time()
            wanted = [FetchPartition(tp, 0, 1 << 20) for tp in tps]
            got.append(await core.fetch(-1, 60_000, n * len(data), 1 << 24, IsolationLevel.READ_UNCOMMITTED, wanted))
            waited = trio.current_time() - start

        async with trio.open_nursery() as nursery:
            nursery.start_soon(consumer)
            await trio.sleep(0.1)
            for tp in tps:
                assert not got
                await produce(core, tp, bytearray(data))
        assert waited < 60  # answered once the appends made min_bytes readable, not at max wait
        assert all(got[0][tp].records is not None for tp in tps)
        release_all(got[0])
        # the parking reads (3 x 200), one per append (200), the answer (200): 200 x 200 before
        assert reads <= 5 * n


async def add_in_sync_follower(
    core: BrokerCore, tp: TopicPartition, follower: int, *more: TopicPartition
) -> LocalMetadataStore:
    """Make ``follower`` a live broker (a second session: close it at the end) and a replica in
    the ISR of ``tp`` (and of ``more`` partitions of the same topic) through the metadata store,
    as a controller would (the controller removes dead brokers from ISRs)."""
    other = LocalMetadataStore(core.config.log_dirs[0] / FILE_NAME)
    await other.open(6000)
    await other.register_broker(follower, registration_json([("PLAINTEXT", "127.0.0.1", 9, "PLAINTEXT")], None))
    while follower not in core.metadata_cache.live_broker_ids():
        await trio.sleep(0.01)
    store = core.store
    assignment = await store.get(topic_key(tp.topic))
    assert assignment is not None
    doc = json.loads(assignment.value)
    checks = [Check(topic_key(tp.topic), assignment.version)]
    puts = []
    for each in (tp, *more):
        state = await store.get(partition_state_key(each.topic, each.partition))
        assert state is not None
        doc["partitions"][str(each.partition)].append(follower)
        st = json.loads(state.value)
        st["isr"].append(follower)
        checks.append(Check(partition_state_key(each.topic, each.partition), state.version))
        puts.append(Put(partition_state_key(each.topic, each.partition), json.dumps(st).encode()))
    await store.txn(checks, [Put(topic_key(tp.topic), json.dumps(doc).encode()), *puts])
    await core.metadata_cache.refresh_topic(tp.topic)
    return other


# -- delayed produce -------------------------------------------------------------------------------


async def test_acks_all_single_node_completes_at_once(tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    async with running_broker(tmp_path) as core:
        await create(core, "t")
        start = trio.current_time()
        result = await produce(core, TP, batch([b"x"]), acks=-1, timeout_ms=3000)
        assert result.error == ErrorCode.NONE and result.base_offset == 0 and trio.current_time() == start


async def test_acks_all_waits_for_followers_then_times_out(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """With a follower (broker 2) in the ISR, acks=all waits until the follower's fetch moves
    the high watermark past the batch, and times out if it never does."""
    async with running_broker(tmp_path) as core:
        await create(core, "t")
        follower_session = await add_in_sync_follower(core, TP, 2)
        partition = core.replica_manager.get_partition(TP)
        assert partition is not None and partition.isr == {0, 2}
        start = trio.current_time()
        timed_out = await produce(core, TP, batch([b"a"]), acks=-1, timeout_ms=700)
        assert timed_out.error == ErrorCode.REQUEST_TIMED_OUT and trio.current_time() - start == pytest.approx(0.7)
        assert partition.high_watermark == 0 and partition.log_end_offset == 1
        results = []

        async def producer() -> None:
            results.append(await produce(core, TP, batch([b"b"]), acks=-1, timeout_ms=10_000))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(producer)
            await trio.sleep(0.3)
            # the follower fetches from its log end: it has everything the leader has
            await core.fetch(2, 0, 0, 1 << 20, IsolationLevel.READ_UNCOMMITTED, [FetchPartition(TP, 2, 1 << 20)])
        assert results[0].error == ErrorCode.NONE and results[0].base_offset == 1
        assert partition.high_watermark == 2
        # a consumer never reads past the high watermark
        await produce(core, TP, batch([b"c"]), acks=1)
        elapsed, r = await long_poll(core, 2, 200)
        assert r.records is None and r.high_watermark == 2 and elapsed == pytest.approx(0.2)
        await follower_session.close()


async def test_acks_all_rechecks_only_the_partition_whose_high_watermark_moved(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An acks=all produce to 100 partitions with a follower: each follower fetch moving one
    partition's high watermark checks that partition, not every partition still waiting (which
    made the follower's catching up O(partitions^2) checks per request)."""
    n = 100
    tps = [TopicPartition("wide", p) for p in range(n)]
    async with running_broker(tmp_path) as core:
        await create(core, "wide", n)
        follower_session = await add_in_sync_follower(core, tps[0], 2, *tps[1:])
        checks = 0
        check = Partition.check_enough_replicas_reach_offset

        def counting(self: Partition, required: int) -> tuple[bool, ErrorCode]:
            nonlocal checks
            checks += 1
            return check(self, required)

        monkeypatch.setattr(Partition, "check_enough_replicas_reach_offset", counting)
        results = []

        async def producer() -> None:
            results.append(await core.produce(-1, 10_000, {tp: batch([b"x"]) for tp in tps}))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(producer)
            await trio.sleep(0.1)
            for tp in tps:  # the follower catches up one partition per fetch
                assert not results
                fetched = await core.fetch(
                    2, 0, 0, 1 << 20, IsolationLevel.READ_UNCOMMITTED, [FetchPartition(tp, 1, 1 << 20)]
                )
                release_all(fetched)
        assert [results[0][tp].error for tp in tps] == [ErrorCode.NONE] * n  # not REQUEST_TIMED_OUT
        assert checks <= 4 * n  # n * (n + 1) / 2 before
        await follower_session.close()


async def test_acks_all_retry_of_a_duplicate_waits_for_the_high_watermark(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """An idempotent producer's retry of a batch whose acks=all request timed out is a duplicate:
    it keeps the original offset but, like a first append, is answered only once the high
    watermark covers it. It used to be answered NONE at once, acknowledging a record no follower
    had, which a crash of this leader alone then lost."""
    async with running_broker(tmp_path) as core:
        await create(core, "t")
        follower_session = await add_in_sync_follower(core, TP, 2)
        partition = core.replica_manager.get_partition(TP)
        assert partition is not None
        pid = (await core.init_producer_id(None, 60000)).producer_id

        def victim() -> bytearray:
            return batch([b"victim"], producer_id=pid, producer_epoch=0, base_sequence=0)

        first = await produce(core, TP, victim(), acks=-1, timeout_ms=500)
        assert first.error == ErrorCode.REQUEST_TIMED_OUT
        start = trio.current_time()
        retry = await produce(core, TP, victim(), acks=-1, timeout_ms=500)
        assert retry.error == ErrorCode.REQUEST_TIMED_OUT and trio.current_time() - start == pytest.approx(0.5)
        assert partition.log_end_offset == 1 and partition.high_watermark == 0  # not appended twice
        results = []

        async def producer() -> None:
            results.append(await produce(core, TP, victim(), acks=-1, timeout_ms=10_000))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(producer)
            await trio.sleep(0.3)
            assert not results  # still waiting for the follower
            await core.fetch(2, 0, 0, 1 << 20, IsolationLevel.READ_UNCOMMITTED, [FetchPartition(TP, 1, 1 << 20)])
        assert results[0].error == ErrorCode.NONE and results[0].base_offset == 0
        assert partition.log_end_offset == 1 and partition.high_watermark == 1
        # once covered, a retry is answered at once
        start = trio.current_time()
        again = await produce(core, TP, victim(), acks=-1, timeout_ms=500)
        assert again.error == ErrorCode.NONE and again.base_offset == 0 and trio.current_time() == start
        await follower_session.close()


async def test_min_insync_replicas_above_the_replication_factor_counts_as_the_factor(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Kafka's ``effectiveMinIsr`` (KAFKA-15583): ``min.insync.replicas`` 2 on a topic of one
    replica (a broker-wide setting and an auto-created topic, say) is taken as 1. Taken as 2, the
    HW never moved: acks=1 writes were never readable and acks=all was refused for ever. (The
    refusal with a real second replica out of the ISR: test_replication_unit.py.)"""
    async with running_broker(tmp_path) as core:
        await create(core, "t", **{"min.insync.replicas": "2"})
        assert (await produce(core, TP, batch([b"a"]), acks=1)).error == ErrorCode.NONE
        assert (await produce(core, TP, batch([b"b"]), acks=-1)).error == ErrorCode.NONE
        partition = core.replica_manager.get_partition(TP)
        assert partition is not None and partition.high_watermark == 2
        assert partition.log.high_watermark == 2  # what bounds the log's retention and compaction
        assert [r.value for r in await fetch_records(core, TP)] == [b"a", b"b"]


async def _timed_fetch(core: BrokerCore, min_bytes: int, max_bytes: int, partition_max: int) -> tuple[float, int]:
    """A consumer fetch from offset 0 waiting up to 1.5 s: (seconds it took, bytes answered)."""
    start = trio.current_time()
    res = await core.fetch(
        -1, 1500, min_bytes, max_bytes, IsolationLevel.READ_UNCOMMITTED, [FetchPartition(TP, 0, partition_max)]
    )
    info = res[TP].records
    size = info.size if info is not None else 0
    release_all(res)
    return trio.current_time() - start, size


async def test_a_backlog_read_to_the_partition_limit_satisfies_min_bytes(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Reads are whole batches, so a read up to a partition's byte limit ends a little under
    it. A consumer whose fetch.min.bytes is its max.partition.fetch.bytes (a common tuning for
    throughput) then waited out fetch.max.wait.ms on every fetch of a backlog. Kafka counts
    min(bytes available, partition limit) (DelayedFetch) and never asks more than the
    response's max_bytes (handleFetchRequest): both answer at once here."""
    async with running_broker(tmp_path) as core:
        await create(core, "t")
        for i in range(50):
            assert (await produce(core, TP, batch([b"%04d" % i + b"x" * 1000]))).error == ErrorCode.NONE
        took, size = await _timed_fetch(core, 10_000, 1 << 20, 10_000)
        assert took == 0 and 0 < size < 10_000
        took, size = await _timed_fetch(core, 5_000, 3_000, 1 << 20)  # min_bytes over max_bytes
        assert took == 0 and 0 < size <= 3_000
        # what the log holds is all there is: it still waits for more
        took, size = await _timed_fetch(core, 1 << 20, 1 << 22, 1 << 21)
        assert took == 1.5 and size > 50_000


async def test_a_partition_whose_next_batch_is_over_its_limit_counts_toward_min_bytes(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Once one partition returned data, another whose next batch is larger than its limit
    reads nothing; Kafka still counts min(available, limit) for it and answers at once."""
    async with running_broker(tmp_path) as core:
        await create(core, "t", partitions=2)
        big = TopicPartition("t", 1)
        assert (await produce(core, TP, batch([b"small"]))).error == ErrorCode.NONE
        assert (await produce(core, big, batch([b"x" * 5000]))).error == ErrorCode.NONE
        wanted = [FetchPartition(TP, 0, 1 << 20), FetchPartition(big, 0, 1000)]
        start = trio.current_time()
        res = await core.fetch(-1, 1500, 900, 1 << 20, IsolationLevel.READ_UNCOMMITTED, wanted)
        assert trio.current_time() == start
        assert res[big].records is None and res[TP].records is not None
        release_all(res)


async def test_a_read_that_ends_at_a_segment_with_more_after_it_satisfies_min_bytes(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """A read stays within one segment; with more segments to read, Kafka's DelayedFetch
    completes at once (the fetch is on an older segment than the log end)."""
    async with running_broker(tmp_path) as core:
        await create(core, "t", **{"segment.bytes": "5000"})
        for i in range(50):
            assert (await produce(core, TP, batch([b"%04d" % i + b"x" * 1000]))).error == ErrorCode.NONE
        took, size = await _timed_fetch(core, 20_000, 1 << 20, 1 << 20)
        assert took == 0 and 0 < size <= 5000
