"""The two delayed operations of the data path: acks=all produce and long-poll fetch.

Both are :class:`~odradek.broker.purgatory.DelayedOperation`s watched by ``TopicPartition``; the
replica manager calls ``check_and_complete(tp)`` after every append and every high-watermark move.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Hashable, Mapping

from ..errors import ErrorCode
from ..interfaces import TopicPartition
from .api import DeleteRecordsResult, FetchPartitionResult, PartitionProduceResult
from .partition import Partition
from .purgatory import DelayedOperation


class DelayedProduce(DelayedOperation):
    """Waits until the high watermark of every appended partition passes its batch
    (``required_offsets[tp]`` = last offset + 1), then answers; REQUEST_TIMED_OUT on expiry."""

    def __init__(
        self,
        results: dict[TopicPartition, PartitionProduceResult],
        required_offsets: Mapping[TopicPartition, int],
        get_partition: Callable[[TopicPartition], Partition | None],
        missing_error: Callable[[TopicPartition], ErrorCode] = lambda tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ) -> None:
        super().__init__()
        self.results = results
        self._pending = dict(required_offsets)
        self._get_partition = get_partition
        #: the answer for a partition no longer hosted (one whose log dir failed: NOT_LEADER)
        self._missing_error = missing_error

    def try_complete(self) -> bool:
        for tp, required in list(self._pending.items()):
            self._check(tp, required)
        if not self._pending:
            return self.force_complete()
        return False

    def try_complete_on(self, key: Hashable) -> bool:
        """Only ``key``'s high watermark (or leadership) moved: the other partitions are as
        they were at the last check."""
        if not isinstance(key, TopicPartition) or key not in self._pending:
            return False
        self._check(key, self._pending[key])
        if not self._pending:
            return self.force_complete()
        return False

    def _check(self, tp: TopicPartition, required: int) -> None:
        partition = self._get_partition(tp)
        if partition is None:
            done, error = True, self._missing_error(tp)
        else:
            done, error = partition.check_enough_replicas_reach_offset(required)
        if done:
            del self._pending[tp]
            if error is not ErrorCode.NONE:
                self.results[tp] = PartitionProduceResult(error, error_message=error.name)

    def on_expiration(self) -> None:
        for tp in self._pending:
            self.results[tp] = PartitionProduceResult(
                ErrorCode.REQUEST_TIMED_OUT, error_message="not enough replicas caught up before the timeout"
            )

    def on_complete(self) -> None:
        """The results dict is the response; successful partitions already hold their offsets."""


ReadFn = Callable[[], tuple[dict[TopicPartition, FetchPartitionResult], int, bool]]
#: bytes readable now in one partition of the fetch, and whether reading it failed
ReadPartitionFn = Callable[[TopicPartition], tuple[int, bool]]


class DelayedFetch(DelayedOperation):
    """Waits until ``min_bytes`` are readable across the fetched partitions (or a partition
    errors, e.g. leadership moved); on expiry it answers with whatever is readable then.
    ``read()`` returns (results, total bytes, any error).

    With ``read_partition``, a wake-up for one partition re-reads that partition only and keeps
    a running count of the readable bytes per partition, as Kafka's ``DelayedFetch`` does; the
    whole fetch is read again only to answer. Without it every append to any of a 5,000-partition
    fetch's partitions read all 5,000 (~25 ms each time), so a producer writing to each in turn
    cost O(partitions^2) while a consumer with a high ``fetch.min.bytes`` waited.
    """

    def __init__(self, read: ReadFn, min_bytes: int, read_partition: ReadPartitionFn | None = None) -> None:
        super().__init__()
        self._read = read
        self._read_partition = read_partition
        self._min_bytes = min_bytes
        #: per partition, the bytes readable at the last look (from the last full read, then
        #: updated by each wake-up for that partition), and their sum
        self._readable: dict[TopicPartition, int] = {}
        self._total = 0
        self.results: dict[TopicPartition, FetchPartitionResult] = {}

    def try_complete(self) -> bool:
        results, total, errored = self._read()
        if total >= self._min_bytes or errored:
            self.results = results
            return self.force_complete()
        self._readable = {tp: r.records.size if r.records is not None else 0 for tp, r in results.items()}
        self._total = sum(self._readable.values())
        release_all(results)
        return False

    def try_complete_on(self, key: Hashable) -> bool:
        if self._read_partition is None or not isinstance(key, TopicPartition) or key not in self._readable:
            return self.try_complete()
        size, errored = self._read_partition(key)
        self._total += size - self._readable[key]
        self._readable[key] = size
        if self._total < self._min_bytes and not errored:
            return False
        self.results, _, _ = self._read()
        return self.force_complete()

    def on_expiration(self) -> None:
        self.results, _, _ = self._read()

    def on_complete(self) -> None:
        """``results`` was filled by the read that completed (or expired) the operation."""


def release_all(results: Mapping[TopicPartition, FetchPartitionResult]) -> None:
    """Release the reads of a fetch that will not be sent."""
    for r in results.values():
        if r.records is not None:
            r.records.release()


def without_records(result: FetchPartitionResult) -> FetchPartitionResult:
    return dataclasses.replace(result, records=None)


class DelayedDeleteRecords(DelayedOperation):
    """DeleteRecords waits until the low watermark of every partition (the smallest log start
    offset among its live replicas) reaches the new log start, as Kafka's
    ``DelayedDeleteRecords``: the records are gone from every replica that could lead next
    when the answer says so. REQUEST_TIMED_OUT on expiry for the partitions still short of it
    (a live follower that does not fetch holds them back, as in Kafka)."""

    def __init__(
        self,
        results: dict[TopicPartition, DeleteRecordsResult],
        required_offsets: Mapping[TopicPartition, int],
        get_partition: Callable[[TopicPartition], Partition | None],
        live_brokers: Callable[[], Collection[int]],
    ) -> None:
        super().__init__()
        self.results = results
        self._pending = dict(required_offsets)
        self._get_partition = get_partition
        self._live_brokers = live_brokers

    def try_complete(self) -> bool:
        live = self._live_brokers()
        for tp in list(self._pending):
            self._check(tp, live)
        return self.force_complete() if not self._pending else False

    def try_complete_on(self, key: Hashable) -> bool:
        if not isinstance(key, TopicPartition) or key not in self._pending:
            return False
        self._check(key, self._live_brokers())
        return self.force_complete() if not self._pending else False

    def _check(self, tp: TopicPartition, live: Collection[int]) -> None:
        partition = self._get_partition(tp)
        if partition is None or not partition.is_leader:
            del self._pending[tp]
            self.results[tp] = DeleteRecordsResult(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            return
        low = partition.low_watermark(live)
        if low >= self._pending[tp]:
            del self._pending[tp]
            self.results[tp] = DeleteRecordsResult(ErrorCode.NONE, low)

    def on_expiration(self) -> None:
        for tp in self._pending:
            self.results[tp] = DeleteRecordsResult(ErrorCode.REQUEST_TIMED_OUT)
        self._pending.clear()

    def on_complete(self) -> None:
        pass
