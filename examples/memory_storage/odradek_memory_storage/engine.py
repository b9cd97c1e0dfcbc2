"""Partition logs as Python lists of batches: the smallest engine that keeps odradek's storage
contract (``odradek.interfaces.LogStorage`` / ``PartitionLog``).

Batches are kept as the exact bytes the broker appended (offsets and leader epoch rewritten in
place, as the contract says), so reads are slices of a list and ``file_range()`` is None: the
transport falls back to ``to_bytes()``. Data belongs to the process: a registry keyed by the
first log dir keeps a broker's logs across ``close()``/``open()`` in one process, like an
in-memory database named by a URL.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NamedTuple

from odradek import records
from odradek.config import Config, TopicConfig
from odradek.errors import InvalidRecord, KafkaStorageError, OffsetOutOfRange
from odradek.interfaces import BatchMeta, EpochEntry, FileRange, LogAppendInfo, LogDirDescription, TopicPartition


class _Batch(NamedTuple):
    base: int
    last: int
    max_timestamp: int
    data: bytes


@dataclass
class _LogData:
    batches: list[_Batch] = field(default_factory=list)
    lasts: list[int] = field(default_factory=list)  # last offsets, for bisect
    log_start: int = 0
    log_end: int = 0
    epochs: list[EpochEntry] = field(default_factory=list)
    state: dict[str, bytes] = field(default_factory=dict)


@dataclass
class _BrokerData:
    logs: dict[TopicPartition, _LogData] = field(default_factory=dict)
    checkpoints: dict[str, dict[TopicPartition, int]] = field(default_factory=dict)


_REGISTRY: dict[str, _BrokerData] = {}


class MemoryFetchData:
    """A read: whole batches as bytes (no file to sendfile from)."""

    def __init__(self, fetch_offset: int, batches: Sequence[_Batch]) -> None:
        self.fetch_offset = fetch_offset
        self.first_batch_offset = batches[0].base if batches else -1
        self.next_offset = batches[-1].last + 1 if batches else -1
        self._data = b"".join(b.data for b in batches)
        self.size = len(self._data)

    def file_range(self) -> FileRange | None:
        return None

    def to_bytes(self) -> bytes:
        return self._data

    def release(self) -> None:
        """Nothing is pinned."""


class MemoryLog:
    """One partition's log in memory."""

    compaction_count = 0  # this engine never compacts
    high_watermark: int | None = None  # nothing here deletes in the background: only noted

    def __init__(self, tp: TopicPartition, data: _LogData, config: TopicConfig) -> None:
        self.topic_partition = tp
        self._d = data
        self.config = config
        self.closed = False

    @property
    def log_start_offset(self) -> int:
        return self._d.log_start

    @property
    def log_end_offset(self) -> int:
        return self._d.log_end

    @property
    def size_in_bytes(self) -> int:
        return sum(len(b.data) for b in self._d.batches)

    def _check(self) -> None:
        if self.closed:
            raise KafkaStorageError(f"{self.topic_partition}: the log is closed")

    # -- append ------------------------------------------------------------------------------
    def _store(self, data: bytes | bytearray, batches: Sequence[BatchMeta]) -> LogAppendInfo:
        d = self._d
        first = -1
        max_ts, offset_of_max = -1, -1
        for meta in batches:
            raw = bytes(data[meta.position : meta.position + meta.size])
            header = records.parse_header(raw)
            if first < 0:
                first = header.base_offset
            if meta.max_timestamp > max_ts:
                max_ts, offset_of_max = meta.max_timestamp, header.last_offset
            d.batches.append(_Batch(header.base_offset, header.last_offset, meta.max_timestamp, raw))
            d.lasts.append(header.last_offset)
            d.log_end = header.last_offset + 1
        return LogAppendInfo(first, d.log_end - 1, max_ts, offset_of_max, -1, d.log_start, len(data))

    def append_as_leader(
        self, data: bytearray | memoryview, batches: Sequence[BatchMeta], leader_epoch: int
    ) -> LogAppendInfo:
        self._check()
        if not batches:
            return LogAppendInfo(self._d.log_end, self._d.log_end - 1, -1, -1, -1, self._d.log_start, 0)
        first = offset = self._d.log_end
        for meta in batches:
            records.set_base_offset(data, meta.position, offset)
            records.set_partition_leader_epoch(data, meta.position, leader_epoch)
            offset += meta.last_offset_delta + 1
        info = self._store(data, batches)
        if leader_epoch >= 0 and (not self._d.epochs or leader_epoch > self._d.epochs[-1].epoch):
            self.assign_epoch_start_offset(leader_epoch, first)
        return info

    def append_as_follower(self, data: bytes, batches: Sequence[BatchMeta]) -> LogAppendInfo:
        self._check()
        if not batches:
            return LogAppendInfo(self._d.log_end, self._d.log_end - 1, -1, -1, -1, self._d.log_start, 0)
        expect = self._d.log_end
        for meta in batches:
            header = records.parse_header(data, meta.position)
            if header.base_offset < expect:
                raise InvalidRecord(f"follower append at {header.base_offset} is below the log end {expect}")
            expect = header.next_offset
        info = self._store(data, batches)
        for meta in batches:
            header = records.parse_header(data, meta.position)
            latest = self._d.epochs[-1].epoch if self._d.epochs else -1
            if header.partition_leader_epoch > latest:
                self.assign_epoch_start_offset(header.partition_leader_epoch, header.base_offset)
        return info

    # -- read --------------------------------------------------------------------------------
    def read(
        self, fetch_offset: int, max_bytes: int, *, max_offset: int | None = None, min_one_batch: bool = True
    ) -> MemoryFetchData:
        self._check()
        d = self._d
        if fetch_offset < d.log_start or fetch_offset > d.log_end:
            raise OffsetOutOfRange(f"offset {fetch_offset} is outside [{d.log_start}, {d.log_end}]")
        out: list[_Batch] = []
        size = 0
        for batch in d.batches[bisect.bisect_left(d.lasts, fetch_offset) :]:
            if max_offset is not None and batch.last >= max_offset:
                break
            if size + len(batch.data) > max_bytes and (out or not min_one_batch):
                break
            out.append(batch)
            size += len(batch.data)
        return MemoryFetchData(fetch_offset, out)

    def _exact(self, batch: _Batch, timestamp: int, min_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record of ``batch`` at or after ``timestamp`` and
        ``min_offset``, or None."""
        for rec in records.decode_batch(batch.data, verify_crc=False).records:
            if rec.timestamp >= timestamp and rec.offset >= min_offset:
                return rec.offset, rec.timestamp
        return None

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        for batch in self._d.batches:
            if batch.last >= self._d.log_start and batch.max_timestamp >= timestamp:
                found = self._exact(batch, timestamp, self._d.log_start)
                if found is not None:  # else its qualifying records are below the log start
                    return found
        return None

    def max_timestamp_and_offset(self) -> tuple[int, int]:
        best = max(self._d.batches, key=lambda b: b.max_timestamp, default=None)
        if best is None or best.max_timestamp < 0:
            return -1, -1
        # the record itself, below the log start or not (as Kafka): a real record's pair
        found = self._exact(best, best.max_timestamp, -1)
        return best.max_timestamp, found[0] if found is not None else best.last

    # -- truncation ----------------------------------------------------------------------------
    def truncate_to(self, offset: int) -> None:
        self._check()
        d = self._d
        if offset >= d.log_end:
            return
        if offset < d.log_start:
            self.truncate_fully_and_start_at(offset)
            return
        i = bisect.bisect_left(d.lasts, offset)
        cut = d.batches[i].base if i < len(d.batches) else offset
        del d.batches[i:], d.lasts[i:]
        d.log_end = max(min(offset, cut), d.log_start)
        d.epochs = [e for e in d.epochs if e.start_offset < d.log_end]

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self._check()
        d = self._d
        d.batches.clear()
        d.lasts.clear()
        d.log_start = d.log_end = offset
        d.epochs = []

    def delete_records_before(self, offset: int) -> int:
        self._check()
        d = self._d
        if offset < 0 or offset > d.log_end:
            raise OffsetOutOfRange(f"cannot delete before {offset}: the log ends at {d.log_end}")
        if offset > d.log_start:
            d.log_start = offset
            i = bisect.bisect_left(d.lasts, offset)  # whole batches below the start go
            del d.batches[:i], d.lasts[:i]
            below = [e for e in d.epochs if e.start_offset <= offset]
            if below:
                d.epochs = [EpochEntry(below[-1].epoch, offset)] + [e for e in d.epochs if e.start_offset > offset]
        return d.log_start

    # -- leader epochs (Kafka's LeaderEpochFileCache) -----------------------------------------
    def assign_epoch_start_offset(self, epoch: int, start_offset: int) -> None:
        epochs = self._d.epochs
        if epochs and epochs[-1].epoch == epoch and start_offset >= epochs[-1].start_offset:
            return
        kept = [e for e in epochs if e.epoch < epoch and e.start_offset < start_offset]
        self._d.epochs = [*kept, EpochEntry(epoch, start_offset)]

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        epochs = self._d.epochs
        if epoch < 0 or not epochs:
            return -1, -1
        if epoch == epochs[-1].epoch:
            return epoch, self._d.log_end
        higher = [e for e in epochs if e.epoch > epoch]
        if not higher:
            return -1, -1
        floor = [e for e in epochs if e.epoch <= epoch]
        return (floor[-1].epoch if floor else epoch), higher[0].start_offset

    def epoch_entries(self) -> Sequence[EpochEntry]:
        return list(self._d.epochs)

    # -- state and lifecycle ----------------------------------------------------------------
    def write_state(self, name: str, data: bytes) -> None:
        self._check()
        self._d.state[name] = bytes(data)

    def read_state(self, name: str) -> bytes | None:
        return self._d.state.get(name)

    def update_config(self, config: TopicConfig) -> None:
        self.config = config

    async def flush(self) -> None:
        """Nothing to make durable."""

    async def close(self) -> None:
        self.closed = True


class MemoryLogStorage:
    """All partition logs of a broker, in this process's memory."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._key = str(config.log_dirs[0].resolve())
        self._data: _BrokerData | None = None
        self._logs: dict[TopicPartition, MemoryLog] = {}

    def _broker(self) -> _BrokerData:
        if self._data is None:
            raise KafkaStorageError("the memory storage is not open")
        return self._data

    async def open(self) -> None:
        self._data = _REGISTRY.setdefault(self._key, _BrokerData())
        defaults = self.config.topic_config()
        self._logs = {tp: MemoryLog(tp, d, defaults) for tp, d in self._data.logs.items()}

    def get_log(self, tp: TopicPartition) -> MemoryLog | None:
        return self._logs.get(tp)

    def get_or_create_log(self, tp: TopicPartition, config: TopicConfig) -> MemoryLog:
        log = self._logs.get(tp)
        if log is None:
            data = self._broker().logs.setdefault(tp, _LogData())
            log = self._logs[tp] = MemoryLog(tp, data, config)
        else:
            log.update_config(config)
        return log

    def all_logs(self) -> Mapping[TopicPartition, MemoryLog]:
        return MappingProxyType(self._logs)

    async def describe_log_dirs(self) -> Sequence[LogDirDescription]:
        """One "dir", named by the first of ``log.dirs`` (the key its data lives under), holding
        every log; no volume behind it, so its size and free space are unknown (-1), and nothing
        that could block."""
        return [LogDirDescription(self._key, tuple(sorted(self._logs)))]

    async def delete_log(self, tp: TopicPartition) -> None:
        log = self._logs.pop(tp, None)
        if log is not None:
            log.closed = True
            self._broker().logs.pop(tp, None)

    def write_checkpoint(self, name: str, offsets: Mapping[TopicPartition, int]) -> None:
        self._broker().checkpoints[name] = dict(offsets)

    def read_checkpoint(self, name: str) -> dict[TopicPartition, int]:
        return dict(self._broker().checkpoints.get(name, {}))

    async def run(self) -> None:
        """No background work: memory needs no retention pass, flushing or compaction here."""

    async def close(self) -> None:
        for log in self._logs.values():
            log.closed = True
        self._logs = {}
        self._data = None
