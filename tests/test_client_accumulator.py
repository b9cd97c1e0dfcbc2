"""The producer's record accumulator: batch.size, linger.ms, buffer.memory, drain, retry order."""

from __future__ import annotations

from odradek.client.accumulator import (
    ABORT_FOR_NEW_BATCH,
    BATCH_OVERHEAD,
    ProducerBatch,
    RecordAccumulator,
    record_size,
)
from odradek.interfaces import TopicPartition

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
VALUE = b"x" * 100
SIZE = record_size(None, VALUE, ())


def _acc(
    batch_size: int = 10 * SIZE + BATCH_OVERHEAD, linger_s: float = 0.005, memory: int = 1 << 30
) -> RecordAccumulator:
    return RecordAccumulator(batch_size=batch_size, linger_s=linger_s, buffer_memory=memory)


def _append(acc: RecordAccumulator, tp: TopicPartition = TP0, **kw: object) -> object:
    return acc.try_append(tp, None, VALUE, (), 0, SIZE, **kw)  # type: ignore[arg-type]


def _leader(tp: TopicPartition) -> int:
    return 1


def test_records_fill_a_batch_up_to_batch_size_then_open_the_next() -> None:
    acc = _acc()
    results = [_append(acc) for _ in range(25)]
    batches = [r[0] for r in results]  # type: ignore[index]
    assert [r[1] for r in results[:10]] == list(range(10))  # type: ignore[index]
    assert len({id(b) for b in batches}) == 3
    assert [b.record_count for b in acc.partitions()[TP0]] == [10, 10, 5]
    # a new batch and a full batch wake the sender; a plain append does not
    assert results[0][2] is True and results[1][2] is False and results[9][2] is True  # type: ignore[index]


def test_a_record_larger_than_batch_size_gets_a_batch_of_its_own() -> None:
    acc = _acc(batch_size=50)
    _append(acc)
    _append(acc)
    assert [b.record_count for b in acc.partitions()[TP0]] == [1, 1]


def test_abort_on_new_batch_lets_the_partitioner_move() -> None:
    acc = _acc()
    assert _append(acc, abort_on_new_batch=True) is ABORT_FOR_NEW_BATCH
    _append(acc)
    assert _append(acc, abort_on_new_batch=True) is not ABORT_FOR_NEW_BATCH  # room in the open batch


def test_ready_by_linger_size_and_flush() -> None:
    acc = _acc(linger_s=0.005)
    _append(acc)  # created outside trio: stamped by the first ready()
    check = acc.ready(_leader, now=100.0)
    assert check.nodes == set() and check.next_check == 100.005
    assert acc.ready(_leader, now=100.005).nodes == {1}
    acc2 = _acc(linger_s=10.0)
    for _ in range(11):  # first batch full, second open
        _append(acc2)
    assert acc2.ready(_leader, now=0.0).nodes == {1}
    acc3 = _acc(linger_s=10.0)
    _append(acc3)
    assert acc3.ready(_leader, now=0.0).nodes == set()
    acc3.begin_flush()
    assert acc3.ready(_leader, now=0.0).nodes == {1}
    acc3.end_flush()


def test_unknown_leader_is_reported() -> None:
    acc = _acc()
    _append(acc)
    check = acc.ready(lambda tp: -1, now=1.0)
    assert check.nodes == set() and check.unknown_leaders == {"t"}


def test_drain_takes_one_batch_per_partition_within_max_bytes() -> None:
    acc = _acc(linger_s=0.0)
    for _ in range(25):
        _append(acc, TP0)
        _append(acc, TP1)
    acc.ready(_leader, now=1.0)
    drained = acc.drain(1, _leader, lambda tp, b: True, max_bytes=1 << 20, now=1.0)
    assert sorted(b.tp for b in drained) == [TP0, TP1]
    one = acc.drain(1, _leader, lambda tp, b: True, max_bytes=1, now=1.0)
    assert len(one) == 1  # the first batch always goes, even over max_bytes
    blocked = acc.drain(1, _leader, lambda tp, b: tp != TP1, max_bytes=1 << 20, now=1.0)
    assert {b.tp for b in blocked} <= {TP0}


def test_buffer_memory_blocks_and_release_frees() -> None:
    acc = _acc(memory=3 * SIZE)
    assert all(_append(acc) is not None for _ in range(3))
    assert _append(acc) is None
    batch = acc.partitions()[TP0][0]
    acc.partitions()[TP0].popleft()
    acc.release(batch)
    acc.release(batch)  # idempotent
    assert acc.used_bytes == 0
    assert _append(acc) is not None


def test_reenqueue_keeps_sequence_order_ahead_of_new_batches() -> None:
    acc = _acc()
    fresh = ProducerBatch(TP0, 0.0)
    acc.partitions()  # materialise
    acc._batches[TP0] = __import__("collections").deque([fresh])
    retried = []
    for seq in (20, 0, 10):
        b = ProducerBatch(TP0, 0.0)
        b.base_sequence = seq
        retried.append(b)
        acc.reenqueue(b, retry_at=5.0)
    order = [b.base_sequence for b in acc.partitions()[TP0]]
    assert order == [0, 10, 20, -1]
    assert acc.ready(_leader, now=1.0).next_check == 5.0  # waiting for the retry backoff
    assert acc.ready(_leader, now=5.0).nodes == {1}


def test_expired_removes_old_queued_batches() -> None:
    acc = _acc(linger_s=1000.0)
    _append(acc)
    acc.ready(_leader, now=10.0)  # stamps created=10.0
    assert acc.expired(now=11.0, delivery_timeout_s=2.0) == []
    gone = acc.expired(now=12.0, delivery_timeout_s=2.0)
    assert len(gone) == 1 and not acc.has_queued()


def test_callbacks_registered_under_the_lock_run_on_completion() -> None:
    acc = _acc()
    seen: list[tuple[object, object]] = []
    batch, index, _ = _append(acc, callback=lambda md, err: seen.append((md, err)))  # type: ignore[misc]
    _append(acc, callback=lambda md, err: seen.append((md, err)))
    batch.complete(100, -1)
    assert [md.offset for md, _ in seen] == [100, 101]  # type: ignore[attr-defined]
    failed = ProducerBatch(TP1, 0.0)
    failed.records.append((b"k", b"v", (), 7))
    failed.add_callback(0, lambda md, err: seen.append((md, err)))
    failed.fail(RuntimeError("boom"))
    assert seen[-1][0] is None and str(seen[-1][1]) == "boom"
    assert batch.metadata(index).serialized_value_size == 100


def test_a_batch_appended_after_ready_is_stamped_when_drained() -> None:
    """Appended outside trio (the facade's thread: ``created`` -1) after ready() stamped the
    others, it is drained with the drain's time: a retriable error on it must not find it
    ``delivery.timeout.ms`` old at once."""
    acc = _acc(linger_s=0.0)
    acc.ready(_leader, now=50.0)
    _append(acc, TP0)  # outside trio: created -1
    (batch,) = acc.drain(1, _leader, lambda tp, b: True, max_bytes=1 << 20, now=60.0)
    assert batch.created == 60.0
