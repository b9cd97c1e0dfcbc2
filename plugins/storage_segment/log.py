"""One partition's log (Kafka's ``UnifiedLog``/``LocalLog``): a sorted run of segments.

Appends go to the last (active) segment, which rolls by size, age or a full index; reads find
their segment by binary search over base offsets. All in-memory state changes on the trio
thread; what may block (fsync, unlinking big files, compaction) runs in worker threads on
files the trio thread has already taken out of service or pinned. ``_generation`` counts
destructive changes (truncation, retention, cleaner swaps) so background work that started
before one can tell its view is stale.
"""

from __future__ import annotations

import bisect
import logging
import os
import random
import re
import struct
from collections.abc import Callable, Sequence
from pathlib import Path

import trio

from odradek import records
from odradek.config import TopicConfig
from odradek.errors import InvalidRecord, KafkaStorageError, OffsetOutOfRange
from odradek.interfaces import BatchMeta, EpochEntry, FetchDataInfo, LogAppendInfo, RolledSegment, TopicPartition

from . import timestamps
from .batches import check_layout
from .checkpoint import atomic_write, fsync_paths
from .epochs import LEADER_EPOCH_CHECKPOINT, LeaderEpochCache
from .fetch import SegmentFetchData
from .segment import DELETED_SUFFIX, LogSegment, SegmentContext, preallocate_bytes

log = logging.getLogger(__name__)

STATE_SUFFIX = ".state"
_STATE_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,200}$")
_EPOCH_FIELD = 12  # partitionLeaderEpoch's byte offset in a batch header
_ATTRIBUTES_LOW_BYTE = records.ATTRIBUTES_OFFSET + 1  # attributes are a big-endian int16
_BASE_LENGTH_EPOCH = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch at byte 0
_HEADER_SIZE = records.HEADER_SIZE
_LOG_OVERHEAD = records.LOG_OVERHEAD
_TIMESTAMP_TYPE_MASK = records.TIMESTAMP_TYPE_MASK
#: builds a NamedTuple without its Python-level ``__new__`` (half the cost, once per append)
_new_tuple = tuple.__new__


class SegmentLog:
    """A partition log of segment files; satisfies :class:`odradek.interfaces.PartitionLog`."""

    def __init__(
        self,
        topic_partition: TopicPartition,
        directory: Path,
        config: TopicConfig,
        ctx: SegmentContext,
        segments: list[LogSegment],
        *,
        log_start_offset: int,
        recovery_point: int,
        retire: Callable[[list[Path]], None],
        on_log_start_change: Callable[[SegmentLog], None],
    ) -> None:
        self.topic_partition = topic_partition
        self.dir = directory
        self.config = config
        self.ctx = ctx
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._leo = segments[-1].next_offset
        self._log_start = log_start_offset
        self._flush_messages = config.flush_messages
        self.recovery_point = min(recovery_point, self._leo)
        #: a truncation took the recovery point back: the storage's next flush tick persists it
        #: (Kafka's truncateTo checkpoints it at once). Until then a power loss after new
        #: appends would leave their segments below the old recovery point, trusted unscanned
        self.recovery_point_lowered = False
        self._size = sum(s.size for s in segments)
        self._epochs = LeaderEpochCache(directory / LEADER_EPOCH_CHECKPOINT)
        self._retire_paths = retire
        self._on_log_start_change = on_log_start_change
        self._generation = 0
        #: the cleaner's ``*.swap`` files while it awaits their directory fsync in a worker
        #: thread (:meth:`hold_swap`); a destructive change withdraws them first
        self._held_swap: list[Path] = []
        self._pending_flush: list[LogSegment] = []
        self._last_flush_ms = ctx.time_ms()
        self.first_dirty_offset = log_start_offset  # compaction progress (cleaner-offset-checkpoint)
        #: the latest delete horizon (KIP-534) the last compaction round left a tombstone or marker
        #: waiting for, -1 for none: the log is due for a round once it passes. Kept in memory
        #: only, as Kafka's latestDeleteHorizon: after a restart they wait for the next round.
        self.latest_delete_horizon = -1
        #: the first offset of a transaction the cleaner found without its marker (Kafka bounds
        #: the cleanable range by the last stable offset): nothing from its segment on is
        #: cleaned until a control batch is appended or the log is truncated. In memory only
        self.uncleanable_from: int | None = None
        #: set by the broker (see PartitionLog): retention and the cleaner stop below it
        self.high_watermark: int | None = None
        self.compaction_count = 0  # segments replaced by cleaned ones (see PartitionLog)
        #: tiered storage (set by the broker's remote log manager, None for a log that is not
        #: tiered): the offset below which every record is in remote storage. Retention then
        #: applies local.retention.ms/bytes and deletes only segments that end at or below it
        self.remote_copied_end: int | None = None
        self.closed = False
        self._failure: str | None = None  # set when the log's files could not be kept consistent
        self._dirty = self._leo > self.recovery_point  # anything written since the last fsync
        self._apply_settings()
        for seg in segments:  # as Kafka, every segment (the first, those loaded at a restart) has its jitter
            seg.roll_jitter_ms = self._random_segment_jitter()
        self._dir_synced = False  # a new partition directory must reach its parent's entries
        self._epochs.truncate_from_end(self._leo)
        self._epochs.truncate_from_start(self._log_start)

    def __repr__(self) -> str:
        return f"SegmentLog({self.topic_partition}, segments={len(self._segments)}, leo={self._leo})"

    @property
    def recovery_point(self) -> int:
        """The offset up to which the log is on disk (fsynced); recovery scans from here."""
        return self._recovery_point

    @recovery_point.setter
    def recovery_point(self, offset: int) -> None:
        self._recovery_point = offset
        # flush.messages: the append that makes this the last offset fsyncs (kept as one number
        # because the single-batch append compares it per batch)
        self._flush_at = offset + self._flush_messages - 1

    # -- offsets -------------------------------------------------------------------------------
    @property
    def log_start_offset(self) -> int:
        return self._log_start

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def size_in_bytes(self) -> int:
        return self._size

    @property
    def segments(self) -> Sequence[LogSegment]:
        return tuple(self._segments)

    @property
    def generation(self) -> int:
        return self._generation

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    def _new_segment(self, base_offset: int) -> LogSegment:
        seg = LogSegment.create(
            self.dir,
            base_offset,
            self.ctx,
            index_bytes=self.config.segment_index_bytes,
            index_interval=self.config.index_interval_bytes,
            preallocate_bytes=preallocate_bytes(self.config),
        )
        seg.roll_jitter_ms = self._random_segment_jitter()
        return seg

    def _random_segment_jitter(self) -> int:
        """Kafka's ``LogConfig.randomSegmentJitter``: how much earlier than ``segment.ms`` a
        segment rolls, drawn once per segment (so that the logs of topics created together do
        not all roll at once). Drawn below ``min(segment.jitter.ms, segment.ms)`` -- the
        effective segment.ms, capped by max.compaction.lag.ms for compacted logs: a jitter at
        or above segment.ms would make the roll age zero or negative and roll a segment per
        batch."""
        jitter = int(self.config.get("segment.jitter.ms", 0) or 0)
        bound = min(jitter, self._segment_ms)
        return random.randrange(bound) if bound > 0 else 0

    # -- append --------------------------------------------------------------------------------
    def append_as_leader(
        self, data: bytearray | memoryview, batches: Sequence[BatchMeta], leader_epoch: int
    ) -> LogAppendInfo:
        if self.closed or self._failure is not None:
            self._check_open()
        if len(batches) != 1:
            return self._append_many_as_leader(data, batches, leader_epoch)
        # One batch: what every Produce v3+ request carries per partition. Written out flat --
        # at 16 KiB this Python is a fifth of the cost next to the pwrite it wraps.
        position, batch_size, last_delta, _, max_ts, _, _, _, _, is_control = batches[0]
        size = len(data)
        if position != 0 or batch_size != size or size < _HEADER_SIZE:
            raise InvalidRecord("batch metadata does not match the data at position 0")
        first = self._leo
        last = first + last_delta
        seg = self._segments[-1]
        end = seg.size + size
        # the roll conditions, checked against limits the segment keeps; only when one could
        # hold is the full check run (it also refreshes the segment's time limit)
        if (
            end > self._segment_bytes
            or last > seg.max_last_offset
            or not 0 <= max_ts <= seg.roll_at_ts
            or seg.index_room < 1
        ) and seg.should_roll(size, 1, last, max_ts, self._segment_bytes, self._segment_ms):
            seg = self._roll(first)
            end = size
        if end > seg.reserved_to:  # once per storage.segment.reserve.bytes of appends
            seg.reserve_ahead(end, self._segment_bytes)
        # baseOffset, batchLength (unchanged: pad bytes would write zeros) and partitionLeaderEpoch
        _BASE_LENGTH_EPOCH.pack_into(data, 0, first, size - _LOG_OVERHEAD, leader_epoch)
        try:
            seg.append_one(data, max_ts, last)
        except OSError as exc:
            raise KafkaStorageError(f"{self.topic_partition}: append to {seg.log.path.name} failed: {exc}") from exc
        self._leo = last + 1
        self._size += size
        self._dirty = True
        if is_control:  # a marker: the transaction that stopped the cleaner may have ended
            self.uncleanable_from = None
        if last >= self._flush_at:
            self._flush_now()
        if leader_epoch > self._epochs.latest_epoch:
            self._epochs.assign(leader_epoch, first)
        return _new_tuple(
            LogAppendInfo,
            (
                first,
                last,
                max_ts,
                last if max_ts > -1 else -1,
                max_ts if data[_ATTRIBUTES_LOW_BYTE] & _TIMESTAMP_TYPE_MASK else -1,
                self._log_start,
                size,
            ),
        )

    def _append_many_as_leader(
        self, data: bytearray | memoryview, batches: Sequence[BatchMeta], leader_epoch: int
    ) -> LogAppendInfo:
        if not batches:
            return self._nothing_appended()
        # one pass over the (header-derived) metas: check they tile the data, assign offsets,
        # rewrite the two header fields outside the CRC, note the max timestamp
        first = offset = self._leo
        last_offsets: list[int] = []
        max_ts = off_max = append_time = -1
        pos = 0
        set_base, set_epoch = records.set_base_offset, records.set_partition_leader_epoch
        for meta in batches:
            at = meta.position
            if at != pos or meta.size < records.HEADER_SIZE:
                raise InvalidRecord(f"batch metadata does not match the data at position {pos}")
            pos += meta.size
            set_base(data, at, offset)
            set_epoch(data, at, leader_epoch)
            offset += meta.last_offset_delta
            last_offsets.append(offset)
            if meta.max_timestamp > max_ts:
                max_ts, off_max = meta.max_timestamp, offset
            if data[at + _ATTRIBUTES_LOW_BYTE] & records.TIMESTAMP_TYPE_MASK:
                append_time = meta.max_timestamp
            offset += 1
        if pos != len(data):
            raise InvalidRecord(f"batch metadata covers {pos} bytes of {len(data)}")
        info = self._append(data, batches, last_offsets, first, max_ts, off_max, append_time)
        if leader_epoch > self._epochs.latest_epoch:
            self._epochs.assign(leader_epoch, first)
        return info

    def append_as_follower(self, data: bytes, batches: Sequence[BatchMeta]) -> LogAppendInfo:
        self._check_open()
        if not batches:
            return self._nothing_appended()
        check_layout(data, batches)
        last_offsets: list[int] = []
        expect = self._leo
        epochs: list[tuple[int, int]] = []
        latest = self._epochs.latest_epoch
        for meta in batches:
            base = int.from_bytes(data[meta.position : meta.position + 8], "big", signed=True)
            if base < expect:
                raise InvalidRecord(
                    f"{self.topic_partition}: follower append at offset {base} is below the expected {expect}"
                )
            epoch = int.from_bytes(
                data[meta.position + _EPOCH_FIELD : meta.position + _EPOCH_FIELD + 4], "big", signed=True
            )
            if epoch > latest:
                epochs.append((epoch, base))
                latest = epoch
            expect = base + meta.last_offset_delta + 1
            last_offsets.append(expect - 1)
        first = int.from_bytes(data[batches[0].position : batches[0].position + 8], "big", signed=True)
        max_ts = off_max = append_time = -1
        for meta, last in zip(batches, last_offsets, strict=True):
            if meta.max_timestamp > max_ts:
                max_ts, off_max = meta.max_timestamp, last
            if data[meta.position + _ATTRIBUTES_LOW_BYTE] & records.TIMESTAMP_TYPE_MASK:
                append_time = meta.max_timestamp
        info = self._append(data, batches, last_offsets, first, max_ts, off_max, append_time)
        for epoch, start in epochs:
            self._epochs.assign(epoch, start)
        return info

    def _nothing_appended(self) -> LogAppendInfo:
        return LogAppendInfo(self._leo, self._leo - 1, -1, -1, -1, self._log_start, 0)

    def _append(
        self,
        data: bytes | bytearray | memoryview,
        batches: Sequence[BatchMeta],
        last_offsets: list[int],
        first: int,
        max_ts: int,
        off_max: int,
        append_time: int,
    ) -> LogAppendInfo:
        seg = self._segments[-1]
        size = len(data)
        if seg.should_roll(size, len(batches), last_offsets[-1], max_ts, self._segment_bytes, self._segment_ms):
            seg = self._roll(first)
        end = seg.size + size
        if end > seg.reserved_to:
            seg.reserve_ahead(end, self._segment_bytes)
        try:
            seg.append(data, batches, last_offsets)
        except OSError as exc:
            raise KafkaStorageError(f"{self.topic_partition}: append to {seg.log.path.name} failed: {exc}") from exc
        self._leo = leo = last_offsets[-1] + 1
        self._size += size
        self._dirty = True
        if self.uncleanable_from is not None and any(m.is_control for m in batches):
            self.uncleanable_from = None
        if leo > self._flush_at:
            self._flush_now()
        return LogAppendInfo(first, leo - 1, max_ts, off_max, append_time, self._log_start, size)

    def _roll(self, base_offset: int) -> LogSegment:
        """Start a new active segment at ``base_offset``; the old one is trimmed now and fsynced
        by the background flusher (or at close), which then advances the recovery point."""
        old = self._segments[-1]
        try:
            new = self._new_segment(base_offset)
        except OSError as exc:
            raise KafkaStorageError(f"{self.topic_partition}: cannot roll a new segment: {exc}") from exc
        if old.size == 0:  # only offsets beyond int32 of its base roll an empty segment: replace it
            self._segments.pop()
            self._bases.pop()
            self._retire_paths(old.retire())
        else:
            old.on_become_inactive()
            self._pending_flush.append(old)
        self._segments.append(new)
        self._bases.append(base_offset)
        log.debug("%s rolled segment %d", self.topic_partition, base_offset)
        return new

    def roll_for_deletion(self) -> None:
        """Retention is about to delete the active segment (it holds records and is breached):
        roll a new empty one at the log end first, as Kafka's ``deleteSegments`` does, so the log
        keeps a segment to append to and its end offset stays where it was."""
        self._check_open()
        if self._segments[-1].size > 0:
            self._roll(self._leo)

    # -- read ----------------------------------------------------------------------------------
    def read(
        self, fetch_offset: int, max_bytes: int, *, max_offset: int | None = None, min_one_batch: bool = True
    ) -> FetchDataInfo:
        self._check_open()
        if fetch_offset < self._log_start or fetch_offset > self._leo:
            raise OffsetOutOfRange(
                f"{self.topic_partition}: offset {fetch_offset} is outside [{self._log_start}, {self._leo}]"
            )
        if fetch_offset == self._leo or (max_offset is not None and fetch_offset >= max_offset):
            return SegmentFetchData(fetch_offset, -1, 0, None, 0, -1)
        i = max(bisect.bisect_right(self._bases, fetch_offset) - 1, 0)
        try:
            while i < len(self._segments):
                seg = self._segments[i]
                found = seg.read(fetch_offset, max_bytes, max_offset, min_one_batch)
                if found is not None:
                    pos, length, first, after = found
                    return SegmentFetchData(fetch_offset, first, length, seg.log, pos, after)
                i += 1
        except OSError as exc:
            raise KafkaStorageError(f"{self.topic_partition}: read failed: {exc}") from exc
        return SegmentFetchData(fetch_offset, -1, 0, None, 0, -1)

    def rolled_segments(self, upto: int) -> list[RolledSegment]:
        """The rolled segments whose every offset is below ``upto`` (the broker passes its high
        watermark and last stable offset), oldest first: what tiered storage may copy. The
        active segment is never one (it still takes appends). Segments wholly below the log
        start offset (waiting for retention to delete them) are listed too: their bytes are
        still the log's."""
        self._check_open()
        out: list[RolledSegment] = []
        for seg, successor in zip(self._segments, self._segments[1:], strict=False):
            end = successor.base_offset
            if end > upto:
                break
            if seg.size == 0:
                continue
            log_path, index_path, time_path = seg.paths
            ts = seg.max_timestamp_and_offset()[0]
            out.append(RolledSegment(seg.base_offset, end, log_path, index_path, time_path, seg.size, ts))
        return out

    def segment_for(self, offset: int) -> LogSegment | None:
        """The segment whose range starts at or before ``offset`` (binary search)."""
        i = bisect.bisect_right(self._bases, offset) - 1
        return self._segments[i] if i >= 0 else None

    def max_timestamp_and_offset(self) -> tuple[int, int]:
        self._check_open()
        return timestamps.max_timestamp_and_offset(self)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        self._check_open()
        return timestamps.offset_for_timestamp(self, timestamp)

    # -- truncation and deletion ------------------------------------------------------------
    def truncate_to(self, offset: int) -> None:
        self._check_open()
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        if offset >= self._leo:
            return
        if offset < self._log_start:
            self.truncate_fully_and_start_at(offset)
            return
        self._destructive_change()
        self.uncleanable_from = None  # the transaction that stopped the cleaner may be gone
        doomed: list[Path] = []
        while len(self._segments) > 1 and self._segments[-1].base_offset > offset:
            seg = self._segments.pop()
            self._bases.pop()
            doomed += seg.retire()
        seg = self._segments[-1]
        try:
            cut = seg.truncate_to(offset)
        except OSError as exc:
            raise KafkaStorageError(f"{self.topic_partition}: truncation failed: {exc}") from exc
        seg.make_active()
        self._pending_flush = [s for s in self._pending_flush if s in self._segments[:-1]]
        # a batch straddling the target goes whole; never end below the log start
        self._leo = offset if cut is None else max(min(offset, cut), self._log_start)
        self._size = sum(s.size for s in self._segments)
        if self._leo < self.recovery_point:
            self.recovery_point = self._leo
            self.recovery_point_lowered = True
        self.first_dirty_offset = min(self.first_dirty_offset, self._leo)
        self._dirty = True
        self._epochs.truncate_from_end(self._leo)
        self._retire_paths(doomed)
        log.info("%s truncated to offset %d", self.topic_partition, self._leo)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self._check_open()
        if offset < 0:
            raise ValueError(f"cannot start a log at negative offset {offset}")
        self._destructive_change()
        self.uncleanable_from = None
        doomed: list[Path] = []
        for seg in self._segments:
            doomed += seg.retire()
        try:
            self._segments = [self._new_segment(offset)]
        except OSError as exc:
            self._failure = f"no segment could be created after truncation: {exc}"
            raise KafkaStorageError(f"{self.topic_partition}: {self._failure}") from exc
        self._bases = [offset]
        self._pending_flush = []
        self.recovery_point_lowered = True
        self._leo = self._log_start = self.recovery_point = self.first_dirty_offset = offset
        self._size = 0
        self._dirty = True
        self._epochs.clear()
        self._retire_paths(doomed)
        self._on_log_start_change(self)
        log.info("%s truncated fully, now starts at offset %d", self.topic_partition, offset)

    def delete_records_before(self, offset: int) -> int:
        self._check_open()
        if offset > self._leo or offset < 0:
            raise OffsetOutOfRange(f"{self.topic_partition}: cannot delete before {offset}, log end is {self._leo}")
        if offset > self._log_start:
            self._advance_log_start(offset)
        return self._log_start

    def _advance_log_start(self, offset: int) -> None:
        self._log_start = offset
        self.first_dirty_offset = max(self.first_dirty_offset, offset)
        self._epochs.truncate_from_start(offset)
        self._on_log_start_change(self)

    def delete_segments(self, segments: Sequence[LogSegment], reason: str) -> int:
        """Take old (never the active: :meth:`roll_for_deletion` first) segments out of the log;
        their files go to the retire queue. The log start moves to the first remaining segment. Returns bytes freed."""
        doomed = [s for s in segments if s is not self._segments[-1] and s in self._segments]
        if not doomed:
            return 0
        self._destructive_change()
        freed = 0
        paths: list[Path] = []
        for seg in doomed:
            i = self._segments.index(seg)
            del self._segments[i]
            del self._bases[i]
            freed += seg.size
            paths += seg.retire()
            log.info("%s: deleting segment %d (%d bytes): %s", self.topic_partition, seg.base_offset, seg.size, reason)
        self._pending_flush = [s for s in self._pending_flush if s not in doomed]
        self._size -= freed
        if self._segments[0].base_offset > self._log_start:
            self._advance_log_start(self._segments[0].base_offset)
        self._retire_paths(paths)
        return freed

    def _destructive_change(self) -> None:
        """Truncation or retention is about to take data out: background work that started
        before sees a new generation, and held cleaner ``.swap`` files go first."""
        self._generation += 1
        self.withdraw_swap()

    def hold_swap(self, paths: Sequence[Path]) -> None:
        """The cleaner has renamed a cleaned segment's files to ``*.swap`` and awaits the
        directory fsync that makes them durable in a worker thread. While it waits, a crash
        recovery would restore a ``.log.swap`` over whatever the old segments then hold
        (:mod:`.loader`), so truncation and retention must not take data out while such a
        file exists: they withdraw it first (:meth:`withdraw_swap`). One round at a time."""
        if self._held_swap:
            raise ValueError("another cleaned segment is already awaiting its swap")
        self._held_swap = list(paths)

    def release_swap(self) -> bool:
        """The cleaner's fsync returned: end the hold. False when the files were withdrawn."""
        held, self._held_swap = self._held_swap, []
        return bool(held)

    def withdraw_swap(self) -> None:
        """Rename the held ``*.swap`` files to ``*.swap.deleted`` (a cheap rename on this thread;
        start-up deletes such files, the retire queue unlinks them) before any file of the log
        is cut or retired. Nothing is fsynced here: the rename precedes the truncation's or
        retention's own renames and cuts, and a journaling file system (ext4, XFS) recovers
        directory operations in the order they were made, so no crash state keeps the
        truncation but loses this rename. (The truncation itself is not fsynced either, as in
        Kafka: what it takes out may come back after a crash, and the follower truncates again
        by leader epoch; what cannot happen is a ``.swap`` that outlived it restoring data past
        it.)"""
        held, self._held_swap = self._held_swap, []
        withdrawn: list[Path] = []
        for path in held:
            target = path.with_name(path.name + DELETED_SUFFIX)
            try:
                os.replace(path, target)
            except FileNotFoundError:  # the directory went with a deleted log
                continue
            except OSError as exc:
                # nothing may be cut while a .swap could restore it: the log goes offline
                self._retire_paths(withdrawn)
                self._failure = f"a cleaned segment awaiting its swap could not be withdrawn: {exc}"
                raise KafkaStorageError(f"{self.topic_partition}: {self._failure}") from exc
            withdrawn.append(target)
        if held:
            log.info("%s: withdrew a cleaned segment awaiting its swap", self.topic_partition)
        self._retire_paths(withdrawn)

    def replace_segments(self, old: Sequence[LogSegment], new: LogSegment) -> list[Path]:
        """Swap cleaned ``new`` in for ``old`` (consecutive, not the active one). The caller has
        renamed the new files to their final names; returns the retired files to unlink."""
        if self._held_swap:
            raise ValueError("a held swap must be released before its segments are replaced")
        i = self._segments.index(old[0])
        if self._segments[i : i + len(old)] != list(old) or old[-1] is self._segments[-1]:
            raise ValueError("only consecutive inactive segments can be replaced")
        paths: list[Path] = []
        for seg in old:
            paths += seg.retire()
        self._segments[i : i + len(old)] = [new]
        self._bases[i : i + len(old)] = [new.base_offset]
        self._size += new.size - sum(s.size for s in old)
        self._pending_flush = [s for s in self._pending_flush if s not in old]
        self._generation += 1
        self.compaction_count += 1
        return paths

    def retire_files(self, paths: list[Path]) -> None:
        """Hand files taken out of the log to the storage's background unlinker."""
        self._retire_paths(paths)

    # -- leader epochs -------------------------------------------------------------------------
    def assign_recovered_epoch(self, epoch: int, start_offset: int) -> None:
        """An epoch seen in a batch during recovery: kept when it is newer than the cache's
        latest and the batch is still in the log, then moved up to the log start when it began
        below it (Kafka's recovery, then its truncateFromStart): a batch below the log start
        still says which epoch the offsets after it belong to."""
        if epoch > self._epochs.latest_epoch and start_offset < self._leo:
            self._epochs.assign(epoch, start_offset)
            if start_offset < self._log_start:
                self._epochs.truncate_from_start(self._log_start)

    def assign_epoch_start_offset(self, epoch: int, start_offset: int) -> None:
        self._check_open()
        self._epochs.assign(epoch, start_offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self._epochs.end_offset_for(epoch, self._leo)

    def epoch_entries(self) -> Sequence[EpochEntry]:
        return self._epochs.entries()

    # -- state beside the log ------------------------------------------------------------------
    def _state_path(self, name: str) -> Path:
        if not _STATE_NAME.match(name):
            raise ValueError(f"state name {name!r} must be letters, digits, '.', '_' or '-'")
        return self.dir / (name + STATE_SUFFIX)

    def write_state(self, name: str, data: bytes) -> None:
        self._check_open()
        try:
            atomic_write(self._state_path(name), bytes(data))
        except OSError as exc:
            raise KafkaStorageError(f"{self.topic_partition}: writing state {name!r} failed: {exc}") from exc

    def read_state(self, name: str) -> bytes | None:
        try:
            return self._state_path(name).read_bytes()
        except FileNotFoundError:
            return None

    def update_config(self, config: TopicConfig) -> None:
        old_jitter = self.config.get("segment.jitter.ms", 0)
        self.config = config
        active = self._segments[-1]
        active.index_interval = config.index_interval_bytes
        active.roll_at_ts = -1  # computed from segment.ms, which may have changed
        self._apply_settings()
        if config.get("segment.jitter.ms", 0) != old_jitter:
            # logs are opened at start-up with the broker defaults and given their topic's
            # configs once the metadata is read: the active segment draws its jitter again
            active.roll_jitter_ms = self._random_segment_jitter()

    def _apply_settings(self) -> None:
        """Topic configs the append path reads, as plain attributes (it runs per batch)."""
        cfg = self.config
        self._segment_bytes = cfg.segment_bytes
        # Kafka's maxSegmentMs: a compacted log's active segment (never cleaned) rolls by
        # max.compaction.lag.ms too, so no record waits longer than that to be compactable
        self._segment_ms = min(cfg.segment_ms, cfg.max_compaction_lag_ms) if cfg.compact else cfg.segment_ms
        self._flush_messages = cfg.flush_messages
        self.recovery_point = self.recovery_point  # sets _flush_at

    # -- durability ----------------------------------------------------------------------------
    def _unflushed_paths(self) -> list[Path]:
        """Files of the segment holding the recovery point and of every later one, and the
        directories whose entries changed (new segments; a new partition directory). The
        active segment's index entries are stored first, so the fsync covers them."""
        first = max(bisect.bisect_right(self._bases, self.recovery_point) - 1, 0)
        self._segments[-1].store_index_entries()
        paths = [p for s in self._segments[first:] for p in s.paths]
        if self._epochs.unsynced:
            paths.append(self._epochs.path)
        paths.append(self.dir)
        if not self._dir_synced:
            paths.append(self.dir.parent)
        return paths

    def _flush_now(self) -> None:
        """flush.messages reached: fsync on this thread, as Kafka does in the append path."""
        paths = self._unflushed_paths()
        self._epochs.unsynced = False
        try:
            fsync_paths(paths)
        except OSError as exc:
            self._epochs.unsynced = True
            raise KafkaStorageError(f"{self.topic_partition}: fsync failed: {exc}") from exc
        self._pending_flush = []
        self.recovery_point = self._leo
        self._last_flush_ms = self.ctx.time_ms()
        self._dirty = False
        self._dir_synced = True

    async def flush(self) -> None:
        """fsync every segment holding data past the recovery point, then advance it."""
        if self.closed or not (self._dirty or self._epochs.unsynced):
            return
        target, generation = self._leo, self._generation
        paths = self._unflushed_paths()
        flushed = list(self._pending_flush)
        self._dirty = False
        epochs_unsynced, self._epochs.unsynced = self._epochs.unsynced, False  # set again by a new epoch meanwhile
        try:
            await trio.to_thread.run_sync(fsync_paths, paths)
        except OSError as exc:
            self._dirty = True
            self._epochs.unsynced |= epochs_unsynced
            raise KafkaStorageError(f"{self.topic_partition}: fsync failed: {exc}") from exc
        self._last_flush_ms = self.ctx.time_ms()
        self._dir_synced = True
        self._pending_flush = [s for s in self._pending_flush if s not in flushed]
        if generation == self._generation:  # a truncation meanwhile may have rewritten the tail
            self.recovery_point = max(self.recovery_point, min(target, self._leo))
        else:
            self._dirty = True

    @property
    def rolled_unflushed(self) -> bool:
        """Whether segments rolled since the last flush wait for their fsync."""
        return bool(self._pending_flush)

    async def flush_rolled(self) -> None:
        """fsync segments that rolled since the last flush (the "fsync on roll") and move the
        recovery point to the end of the last of them."""
        if not self._pending_flush or self.closed:
            return
        rolled = list(self._pending_flush)
        generation = self._generation
        upto = rolled[-1].next_offset
        try:
            await trio.to_thread.run_sync(fsync_paths, [*(p for s in rolled for p in s.paths), self.dir])
        except OSError as exc:
            raise KafkaStorageError(f"{self.topic_partition}: fsync failed: {exc}") from exc
        self._pending_flush = [s for s in self._pending_flush if s not in rolled]
        if generation == self._generation:
            self.recovery_point = max(self.recovery_point, min(upto, self._leo))

    def flush_due(self, now_ms: int) -> bool:
        return (self._dirty or self._epochs.unsynced) and now_ms - self._last_flush_ms >= self.config.flush_ms

    def prepare_close(self) -> None:
        """Cut the active segment to its data (a preallocated file's end, blocks reserved
        ahead); the flush that follows makes a changed size durable."""
        if self.closed:
            return
        try:
            if self._segments[-1].trim_to_data():
                self._dirty = True
        except OSError as exc:
            log.error("%s: could not cut the active segment to its data: %s", self.topic_partition, exc)

    async def close(self) -> None:
        if self.closed:
            return
        self.prepare_close()
        await self.flush()
        self.close_files()

    def flush_now(self) -> None:
        """fsync everything appended so far on this thread: for the few bytes a log-dir move
        still copies while appends wait (``SegmentLogStorage.replace_current_with_future_log``)."""
        if self.closed or not (self._dirty or self._epochs.unsynced):
            return
        self._flush_now()

    def relocate(self, directory: Path) -> None:
        """The log's directory was renamed to ``directory`` (a future log promoted by a log-dir
        move): open descriptors stay valid, only the paths used to reopen files change."""
        self.dir = directory
        for seg in self._segments:
            seg.log.path = directory / seg.log.path.name
            seg.offset_index.path = directory / seg.offset_index.path.name
            seg.time_index.path = directory / seg.time_index.path.name
        self._epochs.path = directory / self._epochs.path.name
        self._dir_synced = False

    def close_files(self) -> None:
        """Close every segment's files; all are released even if some fail (raised after)."""
        self.closed = True
        failure: OSError | None = None
        for seg in self._segments:
            try:
                seg.close()
            except OSError as exc:
                failure = failure or exc
        if failure is not None:
            raise failure

    def abandon(self) -> None:
        """Release descriptors and maps without trimming or flushing anything (a simulated crash)."""
        self.closed = True
        for seg in self._segments:
            seg.offset_index._unmap()
            seg.time_index._unmap()
            seg.log.close()

    def _check_open(self) -> None:
        if self.closed:
            raise KafkaStorageError(f"{self.topic_partition}: the log is closed")
        if self._failure is not None:
            raise KafkaStorageError(f"{self.topic_partition}: {self._failure}")
