"""The producer's record accumulator: per-partition batches drained by size or time.

``send()`` appends a record to the open batch of its partition (Kafka's ``RecordAccumulator``);
the sender task drains batches that are *ready* -- full (``batch.size``), old enough
(``linger.ms``), being flushed, or retried after their backoff -- one per partition per request,
grouped by the partition's leader. A record is kept as the (key, value, headers, timestamp) tuple
the caller gave until its batch is drained; then the batch is encoded and compressed in one pass
(:func:`odradek.records.build_batch`) and the bytes are kept, so a retry resends exactly the same
batch with the same producer id, epoch and sequence.

``buffer.memory`` bounds the bytes of all records not yet acknowledged; an append that does not
fit returns None and the producer waits (up to ``max.block.ms``) for :meth:`release` to free some.

The accumulator is shared between the trio thread (sender, async producer) and, for the sync
facade, the calling threads: its state is guarded by one ``threading.Lock`` held for a few dict and
list operations at a time, never across an await.
"""

from __future__ import annotations

import bisect
import enum
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, overload

import trio

from ..errors import KafkaError
from ..interfaces import TopicPartition
from ..records import Header

#: bytes a record adds to a batch besides key, value and headers (varints, attributes), an estimate
RECORD_OVERHEAD = 21
BATCH_OVERHEAD = 61


def record_size(key: bytes | None, value: bytes | None, headers: Sequence[Header]) -> int:
    """Estimated encoded size of a record (exact enough for batch.size and buffer.memory)."""
    size = RECORD_OVERHEAD + (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
    for hk, hv in headers:
        size += len(hk) + (len(hv) if hv is not None else 0) + 4
    return size


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where a record was written: Kafka's ``RecordMetadata``.

    ``offset`` is -1 when it is unknown (acks=0, or a duplicate the broker acknowledged without
    an offset); ``timestamp`` is the broker's LogAppendTime for such topics, else the record's.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    serialized_key_size: int
    serialized_value_size: int

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


Callback = Callable[[RecordMetadata | None, BaseException | None], Any]


class ProducerBatch:
    """Records for one partition, sent (and retried) as one RecordBatch."""

    __slots__ = (
        "attempts",
        "base_offset",
        "base_sequence",
        "callbacks",
        "created",
        "done",
        "error",
        "finish_hook",
        "full",
        "in_retry",
        "log_append_time",
        "parent",
        "payload",
        "producer_epoch",
        "producer_id",
        "records",
        "retry_at",
        "size",
        "split",
        "tp",
        "waiters",
    )

    def __init__(
        self, tp: TopicPartition, created: float, finish_hook: Callable[[ProducerBatch], None] | None = None
    ) -> None:
        self.tp = tp
        self.records: list[tuple[bytes | None, bytes | None, Sequence[Header], int]] = []
        self.size = BATCH_OVERHEAD
        self.created = created
        self.full = False
        self.attempts = 0
        self.retry_at = 0.0
        self.in_retry = False
        self.base_sequence = -1
        self.producer_id = -1
        self.producer_epoch = -1
        self.payload: bytes | None = None
        self.done = trio.Event()
        self.base_offset = -1
        self.log_append_time = -1
        self.error: BaseException | None = None
        #: (record index, callback) pairs, called when the batch finishes
        self.callbacks: list[tuple[int, Callback]] | None = None
        #: called (in the trio thread) after the batch finished: the sync facade's futures
        self.finish_hook = finish_hook
        #: whatever the finish hook keeps per batch (sync futures being waited on)
        self.waiters: Any = None
        #: after a split (MESSAGE_TOO_LARGE): (index of its first record, child batch), in order;
        #: the records' results are the children's, and this batch finishes with the last child
        self.split: list[tuple[int, ProducerBatch]] | None = None
        #: a split child's parent batch (None for a batch made by send())
        self.parent: ProducerBatch | None = None

    @property
    def record_count(self) -> int:
        return len(self.records)

    def add_callback(self, index: int, callback: Callback) -> None:
        if self.done.is_set():
            _call(callback, *self.result(index))
            return
        if self.callbacks is None:
            self.callbacks = []
        self.callbacks.append((index, callback))

    def metadata(self, index: int) -> RecordMetadata:
        key, value, _headers, ts = self.records[index]
        return RecordMetadata(
            self.tp.topic,
            self.tp.partition,
            self.base_offset + index if self.base_offset >= 0 else -1,
            self.log_append_time if self.log_append_time >= 0 else ts,
            len(key) if key is not None else -1,
            len(value) if value is not None else -1,
        )

    def result(self, index: int) -> tuple[RecordMetadata | None, BaseException | None]:
        """Record ``index``'s metadata or error (per record: the halves of a split batch may end
        differently)."""
        split = self.split
        if split is not None:
            start, child = split[bisect.bisect_right(split, index, key=lambda part: part[0]) - 1]
            if child.done.is_set():
                return child.result(index - start)
        if self.error is not None:
            return None, self.error
        return self.metadata(index), None

    def complete(self, base_offset: int, log_append_time: int = -1) -> None:
        """Success: record ``i`` got ``base_offset + i``. Runs callbacks in the trio thread."""
        if self.done.is_set():
            return
        self.base_offset = base_offset
        self.log_append_time = log_append_time
        self._finish()

    def fail(self, error: BaseException) -> None:
        if self.done.is_set():
            return
        self.error = error
        self._finish()

    def _finish(self) -> None:
        self.done.set()
        callbacks, self.callbacks = self.callbacks, None
        if callbacks:
            for index, cb in callbacks:
                _call(cb, *self.result(index))
        if self.finish_hook is not None:
            self.finish_hook(self)


def _call(cb: Callback, metadata: RecordMetadata | None, error: BaseException | None) -> None:
    try:
        cb(metadata, error)
    except Exception:  # a user's callback must not kill the sender
        import logging

        logging.getLogger("odradek.client").exception("producer callback raised")


def _now() -> float:
    """trio time in the trio thread; -1 elsewhere (the sender stamps such batches on first sight:
    a new batch always wakes it, so linger.ms still counts from about the first append)."""
    try:
        return trio.current_time()
    except RuntimeError:
        return -1.0


#: What an append returns: (batch, record index, wake) -- ``wake`` tells the caller the sender
#: must look now (a new batch started its linger timer, or a batch filled up). A plain tuple:
#: this is the producer's per-record hot path.
AppendResult = tuple["ProducerBatch", int, bool]


class _Abort(enum.Enum):
    FOR_NEW_BATCH = "abort for new batch"


#: try_append's answer when a new batch would be needed and the caller asked to be told first
#: (an enum member rather than a bare object so that ``result is ABORT_FOR_NEW_BATCH`` narrows)
ABORT_FOR_NEW_BATCH: Final = _Abort.FOR_NEW_BATCH


@dataclass(slots=True)
class ReadyCheck:
    """What :meth:`RecordAccumulator.ready` found."""

    nodes: set[int]
    next_check: float  # trio time of the next batch to become ready (inf: none pending)
    unknown_leaders: set[str]


class RecordAccumulator:
    """Per-partition deques of batches (see module doc)."""

    def __init__(self, *, batch_size: int, linger_s: float, buffer_memory: int):
        self.batch_size = batch_size
        self.linger_s = linger_s
        self.buffer_memory = buffer_memory
        self._lock = threading.Lock()
        self._batches: dict[TopicPartition, deque[ProducerBatch]] = {}
        self._used = 0
        self._incomplete: set[ProducerBatch] = set()
        self._flushing = 0
        self.closing = False
        self._drain_start = 0
        #: given to every new batch as its finish hook (the sync facade's futures)
        self.on_batch_finish: Callable[[ProducerBatch], None] | None = None

    # -- appending (any thread) ------------------------------------------------------------------
    @property
    def used_bytes(self) -> int:
        return self._used

    @overload
    def try_append(
        self,
        tp: TopicPartition,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
        timestamp: int,
        size: int,
        *,
        abort_on_new_batch: Literal[False] = False,
        callback: Callback | None = None,
    ) -> AppendResult | None: ...

    @overload
    def try_append(
        self,
        tp: TopicPartition,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
        timestamp: int,
        size: int,
        *,
        abort_on_new_batch: bool,
        callback: Callback | None = None,
    ) -> AppendResult | Literal[_Abort.FOR_NEW_BATCH] | None: ...

    def try_append(
        self,
        tp: TopicPartition,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
        timestamp: int,
        size: int,
        *,
        abort_on_new_batch: bool = False,
        callback: Callback | None = None,
    ) -> AppendResult | Literal[_Abort.FOR_NEW_BATCH] | None:
        """Append to ``tp``'s open batch, or open one. Returns an :data:`AppendResult`,
        :data:`ABORT_FOR_NEW_BATCH` (only with ``abort_on_new_batch``), or None when
        ``buffer.memory`` has no room for ``size`` more bytes. ``callback(metadata, exception)``
        is registered under the same lock, so a batch cannot finish between append and
        registration."""
        with self._lock:
            used = self._used
            if used + size > self.buffer_memory and used > 0:
                return None
            dq = self._batches.get(tp)
            if dq is None:
                dq = self._batches[tp] = deque()
            last = dq[-1] if dq else None
            if last is not None and not last.full and last.payload is None:
                bsize = last.size + size
                if bsize <= self.batch_size or not last.records:
                    records = last.records
                    records.append((key, value, headers, timestamp))
                    last.size = bsize
                    self._used = used + size
                    wake = bsize >= self.batch_size
                    if wake:
                        last.full = True
                    if callback is not None:
                        if last.callbacks is None:
                            last.callbacks = []
                        last.callbacks.append((len(records) - 1, callback))
                    return last, len(records) - 1, wake
                last.full = True
            if abort_on_new_batch:
                return ABORT_FOR_NEW_BATCH
            batch = ProducerBatch(tp, _now(), self.on_batch_finish)
            batch.records.append((key, value, headers, timestamp))
            batch.size += size
            self._used += size
            dq.append(batch)
            self._incomplete.add(batch)
            batch.full = batch.size >= self.batch_size
            if callback is not None:
                batch.callbacks = [(0, callback)]
            # a new batch starts a linger timer the sender must know about; a closed one is ready
            return batch, 0, True

    def release(self, batch: ProducerBatch) -> None:
        """Give back a finished batch's memory (idempotent: later calls for the batch do nothing)."""
        with self._lock:
            if batch in self._incomplete:
                self._incomplete.discard(batch)
                self._used -= batch.size - BATCH_OVERHEAD

    # -- draining (trio thread) ------------------------------------------------------------------
    def ready(self, leader_for: Callable[[TopicPartition], int], now: float) -> ReadyCheck:
        """Leaders with at least one sendable batch, and when to look again."""
        nodes: set[int] = set()
        unknown: set[str] = set()
        next_check = float("inf")
        flushing = self._flushing > 0 or self.closing
        with self._lock:
            for tp, dq in self._batches.items():
                if not dq:
                    continue
                if dq[-1].created < 0:
                    for b in dq:
                        if b.created < 0:
                            b.created = now
                head = dq[0]
                if head.in_retry and head.retry_at > now:
                    next_check = min(next_check, head.retry_at)
                    continue
                leader = leader_for(tp)
                if leader < 0:
                    unknown.add(tp.topic)
                    continue
                if head.full or len(dq) > 1 or flushing or head.in_retry:
                    nodes.add(leader)
                    continue
                due = head.created + self.linger_s
                if due <= now:
                    nodes.add(leader)
                else:
                    next_check = min(next_check, due)
        return ReadyCheck(nodes, next_check, unknown)

    def drain(
        self,
        node: int,
        leader_for: Callable[[TopicPartition], int],
        can_send: Callable[[TopicPartition, ProducerBatch], bool],
        max_bytes: int,
        now: float,
    ) -> list[ProducerBatch]:
        """Take at most one ready batch per partition led by ``node``, up to ``max_bytes``
        (the first batch always fits), starting at a rotating partition for fairness."""
        out: list[ProducerBatch] = []
        size = 0
        flushing = self._flushing > 0 or self.closing
        with self._lock:
            tps = [tp for tp, dq in self._batches.items() if dq and leader_for(tp) == node]
            if not tps:
                return out
            start = self._drain_start % len(tps)
            self._drain_start += 1
            for tp in tps[start:] + tps[:start]:
                dq = self._batches[tp]
                head = dq[0]
                if head.in_retry and head.retry_at > now:
                    continue
                ready = head.full or len(dq) > 1 or flushing or head.in_retry or head.created + self.linger_s <= now
                if not ready or not can_send(tp, head):
                    continue
                if out and size + head.size > max_bytes:
                    break
                dq.popleft()
                if head.created < 0:  # appended from another thread after ready() stamped the rest
                    head.created = now  # else a retriable error would find it expired at once
                head.full = True
                size += head.size
                out.append(head)
        return out

    def split(self, batch: ProducerBatch, now: float) -> list[ProducerBatch]:
        """Split a batch the broker refused as too large (MESSAGE_TOO_LARGE; it wrote nothing)
        into two halves queued at the head of its partition, as Java's Sender splits such a
        batch: records that fit the topic's ``max.message.bytes`` are then written instead of
        failing with the ones that do not (a half still too large is split again; a single
        record fails). With idempotence the halves take the batch's sequence numbers in order
        (the first half its base sequence, the second the next free one), so the partition's
        sequence stays gap-free and later batches keep theirs, as in Java. The records' futures
        stay with ``batch``, which finishes when both halves did."""
        half = (len(batch.records) + 1) // 2
        children: list[tuple[int, ProducerBatch]] = []
        sequence = batch.base_sequence
        for start, records in ((0, batch.records[:half]), (half, batch.records[half:])):
            child = ProducerBatch(batch.tp, batch.created, self._child_finished)
            child.records = records
            child.size = BATCH_OVERHEAD + sum(record_size(k, v, h) for k, v, h, _ts in records)
            child.full = True
            child.attempts = batch.attempts
            child.parent = batch
            if sequence >= 0:
                child.base_sequence = sequence
                child.producer_id = batch.producer_id
                child.producer_epoch = batch.producer_epoch
                sequence = (sequence + len(records)) & 0x7FFFFFFF
            children.append((start, child))
        batch.split = children
        for _start, child in reversed(children):  # each goes in front of the one after it
            self.reenqueue(child, now)
        return [child for _start, child in children]

    def _child_finished(self, child: ProducerBatch) -> None:
        """A split child's finish hook: its parent finishes (and frees its memory) with the last."""
        parent = child.parent
        if parent is None or parent.split is None or not all(c.done.is_set() for _s, c in parent.split):
            return
        self.release(parent)
        parent.complete(-1)  # results come from the children (ProducerBatch.result)

    def reenqueue(self, batch: ProducerBatch, retry_at: float) -> None:
        """Put a batch that failed retriably back at the front of its partition, in sequence
        order among other retried batches, so resends keep the original order."""
        batch.in_retry = True
        batch.retry_at = retry_at
        with self._lock:
            dq = self._batches.setdefault(batch.tp, deque())
            i = 0
            while i < len(dq) and dq[i].in_retry and 0 <= dq[i].base_sequence < batch.base_sequence:
                i += 1
            dq.insert(i, batch)

    def expired(self, now: float, delivery_timeout_s: float) -> list[ProducerBatch]:
        """Remove and return queued (not in-flight) batches older than ``delivery.timeout.ms``."""
        out: list[ProducerBatch] = []
        with self._lock:
            for dq in self._batches.values():
                while dq and 0 <= dq[0].created <= now - delivery_timeout_s:
                    out.append(dq.popleft())
        return out

    def abort_all(self) -> list[ProducerBatch]:
        """Remove and return every queued batch (close with a zero timeout)."""
        with self._lock:
            out = [b for dq in self._batches.values() for b in dq]
            self._batches.clear()
        return out

    def queued(self) -> Iterable[ProducerBatch]:
        """Every queued batch (a snapshot)."""
        with self._lock:
            return [b for dq in self._batches.values() for b in dq]

    def has_queued(self) -> bool:
        with self._lock:
            return any(self._batches.values())

    def incomplete(self) -> list[ProducerBatch]:
        """Every batch appended to and not yet finished (queued or in flight)."""
        with self._lock:
            return list(self._incomplete)

    def begin_flush(self) -> None:
        self._flushing += 1

    def end_flush(self) -> None:
        self._flushing -= 1

    def partitions(self) -> Mapping[TopicPartition, deque[ProducerBatch]]:
        return self._batches


class BufferExhausted(KafkaError):
    """``buffer.memory`` stayed full for ``max.block.ms``."""
