"""Log compaction (Kafka's ``LogCleaner``) for ``cleanup.policy`` ``compact`` and ``compact,delete``.

A round on one log: (1) plan on the trio thread: the cleanable range runs from the first segment
to the first uncleanable one (the active segment, or the first segment holding records younger
than ``min.compaction.lag.ms``), and the round runs only when the dirty part (past the last
round's end, ``cleaner-offset-checkpoint``) is at least ``min.cleanable.dirty.ratio`` of it;
(2) in worker threads, in small steps: build key -> latest offset over the dirty part (in at
most ``log.cleaner.dedupe.buffer.size`` times its load factor; where the map fills up, even
inside a segment, the round's end moves there and the next round goes on from it), then
rewrite the range group by group into ``*.cleaned`` files, keeping a record when no later
record has its key, dropping tombstones once their segment is older than
``delete.retention.ms``; (3) swap each group in (``.cleaned`` -> ``.swap`` -> final name), the
renames on the trio thread and the directory fsyncs in worker threads (:meth:`LogCleaner._swap_in`),
unless the log changed meanwhile (truncated, retention, closed), in which case the work is thrown
away. Appends and reads never wait for any of it.

Offsets and batch metadata are preserved: a batch that keeps all its records is copied byte for
byte; one that loses some is rebuilt with ``records.build_batch`` at the same base offset, with
the same producer id/epoch/sequence, leader epoch, compression and original offset span; one
that loses all is kept as an empty batch when it is the last batch of a producer that has not
expired (so producer state survives; an expired producer's, idle past
``producer.id.expiration.ms``, goes, as in Kafka) or ends the group (so the swapped segment
covers the same offsets).
A transaction marker (control batch) is kept as it is until nothing of its transaction is left:
it goes in the round that leaves no batch of its transaction before it, once its segment is past
``delete.retention.ms`` (the tombstone rule, so a consumer that read the transaction's records
has long reached the marker), unless it is an active producer's last batch or ends the group.
Kafka keeps a marker until the same two conditions hold; without this, a compacted topic written
transactionally (``__consumer_offsets`` with transactional offset commits) would keep one marker
per transaction forever.

Transactions (KIP-98), as Kafka's cleaner treats them: the records of an aborted transaction are
removed (and never count as a key's latest value, so they cannot hide the committed value they
would have replaced); a committed transaction's records count from its COMMIT marker on; and the
round ends before the segment holding the first record of a transaction with no marker yet (the
storage engine cannot know its outcome, as Kafka's cleaner never passes the last stable offset).
That offset then bounds the log's cleanable range (``SegmentLog.uncleanable_from``) until a
control batch is appended, so a log with nothing cleanable below it is not due (no round is
repeated without progress); a marker past the round's end, in the active segment, still decides
its transaction.
The map pass learns all of this from the batches themselves, in offset order: transactional
records wait in their producer's pending list until the marker says what they are.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from odradek import records
from odradek.config import LONG_MAX
from odradek.interfaces import Codec

from .checkpoint import fsync_dir
from .index import OffsetIndex, TimeIndex
from .loader import CLEANED_SUFFIX, SWAP_SUFFIX
from .log import SegmentLog
from .scan import empty_batch_like, with_last_offset_delta
from .segment import LogSegment

log = logging.getLogger(__name__)

STEP_BYTES = 4 * 1024 * 1024  # bytes read per worker-thread step
DEDUPE_BUFFER_KEY = "log.cleaner.dedupe.buffer.size"
LOAD_FACTOR_KEY = "log.cleaner.io.buffer.load.factor"
DEFAULT_DEDUPE_BUFFER = 128 * 1024 * 1024  # Kafka's default
DEFAULT_LOAD_FACTOR = 0.9
#: what one key of the map costs beyond its bytes: the bytes object's header, a dict slot with
#: its share of the table, and the offset's int (measured with tracemalloc on CPython 3.11)
MAP_ENTRY_BYTES = 120


@dataclass
class _Input:
    segment: LogSegment
    size: int  # the bytes present when the round was planned (the active segment grows)
    fd: int = -1  # pinned only while a step needs it, so a long log never pins all its files


@contextmanager
def _pinned(inputs: list[_Input]) -> Iterator[None]:
    """Pin the inputs' descriptors (on the trio thread) for worker-thread reads. A segment
    retired since the plan raises FileNotFoundError: the round is stale."""
    done: list[_Input] = []
    try:
        for inp in inputs:
            inp.fd = inp.segment.log.pin()
            done.append(inp)
        yield
    finally:
        for inp in done:
            inp.segment.log.unpin()
            inp.fd = -1


@dataclass
class CleanPlan:
    """A snapshot of what one round will clean, taken on the trio thread."""

    log: SegmentLog
    generation: int
    inputs: list[_Input]  # segments from the first one up to the first uncleanable one
    first_dirty: int
    end_offset: int  # first uncleanable offset: nothing at or past it is touched
    tail: list[_Input] = field(default_factory=list)  # the rest, read only for producer ids
    now_ms: int = 0


def dirty_ratio(log: SegmentLog, now_ms: int) -> tuple[float, list[LogSegment], int]:
    """(dirty bytes / cleanable bytes, cleanable segments, first uncleanable offset)."""
    lag = log.config.min_compaction_lag_ms
    segs = log.segments
    cleanable: list[LogSegment] = []
    for seg in segs[:-1]:
        if lag > 0 and seg.largest_timestamp() > now_ms - lag:
            break
        cleanable.append(seg)
    # Kafka's last stable offset bound: a round found a transaction without its marker here,
    # and nothing from its segment on is cleanable until a marker is appended (or truncation)
    bound = log.uncleanable_from
    if bound is not None and bound > log.log_start_offset:
        while cleanable and cleanable[-1].next_offset > bound:
            cleanable.pop()
    # and the high watermark: a record past it may be truncated away (a leader change), and the
    # older value of its key must not have been cleaned in its favour
    hw = log.high_watermark
    if hw is not None:
        while cleanable and cleanable[-1].next_offset > hw:
            cleanable.pop()
    if not cleanable:
        return 0.0, [], segs[0].base_offset
    end = segs[len(cleanable)].base_offset
    first_dirty = max(log.first_dirty_offset, log.log_start_offset)
    dirty = clean = 0
    for seg, nxt in zip(cleanable, segs[1:], strict=False):
        if nxt.base_offset <= first_dirty:
            clean += seg.size
        else:
            dirty += seg.size
    total = dirty + clean
    return (dirty / total if total else 0.0), cleanable, end


def _waited_too_long(log: SegmentLog, cleanable: list[LogSegment], now_ms: int) -> bool:
    """Kafka's ``maxCompactionDelay``: the first dirty segment's first batch is older than
    ``max.compaction.lag.ms`` (by its timestamp; a segment without one does not count)."""
    max_lag = log.config.max_compaction_lag_ms
    if max_lag >= LONG_MAX:
        return False
    first_dirty = max(log.first_dirty_offset, log.log_start_offset)
    for seg in cleanable:
        if seg.next_offset > first_dirty:  # the first segment holding dirty records
            ts = seg.first_batch_timestamp()
            return ts >= 0 and now_ms - ts > max_lag
    return False


def plan_round(log: SegmentLog, now_ms: int) -> CleanPlan | None:
    """Pin what a round needs, or None when the log is not due (policy, ratio, nothing dirty)."""
    if log.closed or not log.config.compact:
        return None
    ratio, cleanable, end = dirty_ratio(log, now_ms)
    threshold = float(log.config.get("min.cleanable.dirty.ratio", 0.5))
    # a round is due when enough is dirty, when a dirty record has waited max.compaction.lag.ms
    # (KIP-354), or when tombstones or markers a round kept have reached their delete horizon
    # (KIP-534: else they would wait for new dirt to go)
    horizon_due = 0 <= log.latest_delete_horizon <= now_ms
    if not cleanable or not (
        horizon_due or (ratio > 0 and (ratio >= threshold or _waited_too_long(log, cleanable, now_ms)))
    ):
        return None
    inputs = [_Input(s, s.size) for s in cleanable]
    tail = [_Input(s, s.size) for s in log.segments[len(cleanable) :]]
    first_dirty = max(log.first_dirty_offset, log.log_start_offset)
    return CleanPlan(log, log.generation, inputs, first_dirty, end, tail, now_ms)


def _read_step(fd: int, size: int, pos: int) -> list[tuple[int, records.BatchHeader, memoryview]]:
    """The whole batches in one read of up to STEP_BYTES at ``pos`` (at least one batch)."""
    buf = os.pread(fd, min(STEP_BYTES, size - pos), pos)
    mv = memoryview(buf)
    out = [(pos + p, h, mv[p : p + h.size]) for p, h in records.iter_headers(buf)]
    if not out:  # one batch larger than the step
        h = records.parse_header(buf)
        out = [(pos, h, memoryview(os.pread(fd, h.size, pos)))]
    return out


@dataclass
class _OpenTxn:
    """A transaction seen without its marker yet: its batches and the keys it would set."""

    first_offset: int
    bases: list[int] = field(default_factory=list)
    pending: list[tuple[bytes, int]] = field(default_factory=list)


class OffsetMap:
    """key -> offset of its latest record in the dirty range, each producer's last batch, and
    the transactions: which batches were aborted, which are still open."""

    def __init__(self, codecs: Mapping[int, Codec] | None, max_bytes: int) -> None:
        self.codecs = codecs
        self.max_bytes = max_bytes
        #: estimated memory of :attr:`latest` and the open transactions' pending keys
        self.used = 0
        #: where the map filled up inside a segment: the round cleans below this offset only
        self.stopped_at: int | None = None
        #: the round's end once the map is built: batches at or past it are copied unchanged
        self.end_offset = 1 << 63
        self.latest: dict[bytes, int] = {}
        self.producer_last: dict[int, int] = {}  # producer id -> last offset of its last batch
        self.producer_ts: dict[int, int] = {}  # producer id -> largest timestamp of its batches
        #: producers whose largest timestamp is older are expired (``producer.id.expiration.ms``)
        self.active_after = -(1 << 63)
        self.aborted: set[int] = set()  # base offsets of batches of aborted transactions
        self.open_txns: dict[int, _OpenTxn] = {}  # producer id -> its transaction without a marker
        #: cleaning pass: producers whose current transaction has a batch in the cleaned output
        #: (its marker must stay); filled and emptied in offset order as the groups are written
        self.txn_kept: set[int] = set()
        #: the round's clock and ``delete.retention.ms``: a tombstone or an empty transaction's
        #: marker first seen by a round is stamped with now + retention (KIP-534's delete
        #: horizon) and goes in the first round at or past it
        self.now_ms = 0
        self.delete_retention_ms = 0
        #: the latest horizon still ahead among what this round kept (-1: none), when the log
        #: is next due for a round even without new dirt
        self.pending_horizon = -1

    def keep_until(self, horizon: int, stamped: bool) -> None:
        """Note a horizon this round kept a tombstone or marker for. A horizon stamped now is
        always noted (with ``delete.retention.ms=0`` it is due at once); an older one only
        while it is ahead (one already passed belongs to a batch kept for another reason)."""
        if (stamped or horizon > self.now_ms) and horizon > self.pending_horizon:
            self.pending_horizon = horizon

    def first_open_txn_offset(self) -> int | None:
        """The first offset of a transaction whose outcome the scanned range does not hold."""
        return min((t.first_offset for t in self.open_txns.values()), default=None)

    def _end_txn(self, batch: memoryview, h: records.BatchHeader) -> None:
        """A control batch: settle its producer's open transaction (commit applies the pending
        keys, abort marks the batches for removal)."""
        txn = self.open_txns.pop(h.producer_id, None)
        if txn is None:
            return
        decoded = records.decode_batch(batch, verify_crc=False, codecs=self.codecs).records
        try:
            marker = records.parse_control_record(decoded[0]).type if decoded else None
        except records.InvalidRecord:
            marker = None
        if marker not in (records.ControlRecordType.ABORT, records.ControlRecordType.COMMIT):
            self.open_txns[h.producer_id] = txn  # a marker this cleaner does not know: keep it all
            return
        self.used -= sum(MAP_ENTRY_BYTES + len(key) for key, _ in txn.pending)
        if marker is records.ControlRecordType.ABORT:
            self.aborted.update(txn.bases)
            return
        latest = self.latest
        for key, offset in txn.pending:
            old = latest.get(key, -1)
            if offset > old:
                if old < 0:
                    self.used += MAP_ENTRY_BYTES + len(key)
                latest[key] = offset

    def is_active_producers_last(self, h: records.BatchHeader) -> bool:
        """``h`` is the last batch of a producer that has not expired: the batch producer state
        rebuilds the producer's epoch and sequence from, so compaction keeps it (at least its
        header). An expired producer's (idle past ``producer.id.expiration.ms``, which the
        broker's producer state forgets too) may go, as in Kafka."""
        pid = h.producer_id
        return (
            pid >= 0
            and self.producer_last.get(pid) == h.last_offset
            and self.producer_ts.get(pid, -1) >= self.active_after
        )

    @property
    def full(self) -> bool:
        """At the byte budget (``log.cleaner.dedupe.buffer.size`` times its load factor); an
        empty map is never full, so every round maps at least one batch."""
        return self.used >= self.max_bytes and bool(self.latest)

    def add_step(self, inp: _Input, pos: int, end_offset: int, keys: bool, start_offset: int = 0) -> int:
        """One worker-thread step over a segment from ``pos``: every producer's last batch and,
        with ``keys``, the latest offset of every key in [``start_offset``, ``end_offset``)
        (the dirty part: a round may have ended inside this segment). Returns the next
        position (``inp.size`` when done). When the map fills up, the round's end moves to the
        next data batch (:attr:`stopped_at`); the scan goes on for producer ids only."""
        latest = self.latest
        if self.stopped_at is not None:
            end_offset = min(end_offset, self.stopped_at)
        nxt = pos
        for p, h, batch in _read_step(inp.fd, inp.size, pos):
            nxt = p + h.size
            if h.producer_id >= 0:
                self.producer_last[h.producer_id] = h.last_offset
                if h.max_timestamp > self.producer_ts.get(h.producer_id, -1):
                    self.producer_ts[h.producer_id] = h.max_timestamp
            if h.is_control:
                # a marker past the round's end (in the active segment) still decides its
                # transaction: the round below it may clean that transaction's batches, as
                # Kafka's may below the last stable offset, which the marker moved past them
                self._end_txn(batch, h)
                continue
            if keys and h.base_offset < end_offset and self.full:
                end_offset = self.stopped_at = h.base_offset
            txn: _OpenTxn | None = None
            if h.is_transactional and h.base_offset < end_offset:
                txn = self.open_txns.get(h.producer_id)
                if txn is None:
                    txn = self.open_txns[h.producer_id] = _OpenTxn(h.base_offset)
                txn.bases.append(h.base_offset)
            if not keys or h.record_count == 0 or h.base_offset >= end_offset or h.last_offset < start_offset:
                continue
            for rec in records.decode_batch(batch, verify_crc=False, codecs=self.codecs).records:
                key = rec.key
                if key is not None and start_offset <= rec.offset < end_offset:
                    if txn is not None:
                        txn.pending.append((key, rec.offset))
                        self.used += MAP_ENTRY_BYTES + len(key)
                    else:
                        if key not in latest:
                            self.used += MAP_ENTRY_BYTES + len(key)
                        latest[key] = rec.offset
        return nxt

    async def add_segment(self, inp: _Input, end_offset: int, *, keys: bool, start_offset: int = 0) -> None:
        pos = 0
        with _pinned([inp]):
            while pos < inp.size:
                pos = await trio.to_thread.run_sync(self.add_step, inp, pos, end_offset, keys, start_offset)


class GroupWriter:
    """Writes one cleaned segment (``<base>.log.cleaned`` + indexes) from a group of inputs."""

    def __init__(self, directory: Path, base_offset: int, index_interval: int, index_bytes: int) -> None:
        self.base_offset = base_offset
        name = f"{base_offset:020d}"
        self.log_path = directory / (name + ".log" + CLEANED_SUFFIX)
        self.index_path = directory / (name + ".index" + CLEANED_SUFFIX)
        self.time_path = directory / (name + ".timeindex" + CLEANED_SUFFIX)
        self._file = open(self.log_path, "wb")  # noqa: SIM115 -- closed in finish()/abort()
        self.index_interval = index_interval
        self.max_entries = index_bytes // OffsetIndex.ENTRY.size
        #: what a TimeIndex of ``segment.index.bytes`` holds: more entries made the loader take
        #: the file for corrupt (and rebuild the segment) at every start
        self.max_time_entries = index_bytes // TimeIndex.ENTRY.size
        self._index = bytearray()
        self._times = bytearray()
        self.size = 0
        self._since = 0
        self.max_ts = -1
        self.offset_of_max_ts = base_offset
        self.next_offset = base_offset
        self._last_index_ts = -1

    def write(self, batch: bytes | memoryview, h: records.BatchHeader) -> None:
        if h.max_timestamp > self.max_ts:
            self.max_ts, self.offset_of_max_ts = h.max_timestamp, h.last_offset
        if self._since > self.index_interval and len(self._index) // 8 < self.max_entries:
            self._index += OffsetIndex.ENTRY.pack(h.last_offset - self.base_offset, self.size)
            self._add_time_entry()
            self._since = 0
        self._file.write(batch)
        self.size += len(batch)
        self._since += len(batch)
        self.next_offset = h.next_offset

    def _add_time_entry(self, *, last: bool = False) -> None:
        """Index the largest timestamp so far. The last slot is kept for the segment's final
        entry (``last``): a rolled segment's largest timestamp is its time index's last entry,
        which time retention and ListOffsets read."""
        room = self.max_time_entries - (0 if last else 1)
        if self.max_ts > self._last_index_ts and len(self._times) // TimeIndex.ENTRY.size < room:
            self._times += TimeIndex.ENTRY.pack(self.max_ts, self.offset_of_max_ts - self.base_offset)
            self._last_index_ts = self.max_ts

    def finish(self, mtime: float | None) -> None:
        """Write the indexes and fsync all three files (worker thread)."""
        self._add_time_entry(last=True)
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        for path, data in ((self.index_path, self._index), (self.time_path, self._times)):
            with open(path, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        if mtime is not None:
            os.utime(self.log_path, (mtime, mtime))

    def abort(self) -> None:
        """Remove the files. Closing flushes what is buffered, which fails again on a full disk
        (the usual reason to get here): that must not keep the files, whose space is lacking."""
        if not self._file.closed:
            try:
                self._file.close()
            except OSError:
                pass
        for path in (self.log_path, self.index_path, self.time_path):
            path.unlink(missing_ok=True)


def clean_batch(
    batch: memoryview, h: records.BatchHeader, omap: OffsetMap, *, last_in_group: bool
) -> bytes | memoryview | None:
    """What a batch becomes after cleaning: itself, a rebuilt batch (fewer records, or a delete
    horizon stamped), an empty batch, or None (dropped)."""
    if h.is_control:
        if h.producer_id < 0:
            return batch
        txn_left = h.producer_id in omap.txn_kept
        omap.txn_kept.discard(h.producer_id)
        if txn_left or last_in_group or h.base_offset >= omap.end_offset:
            return batch
        # nothing of its transaction is left: the marker goes once its delete horizon has
        # passed, as a tombstone does (KIP-534), unless its producer still needs it
        if not h.has_delete_horizon:
            return _stamped_marker(batch, h, omap)
        if omap.now_ms >= h.first_timestamp and not omap.is_active_producers_last(h):
            return None
        omap.keep_until(h.first_timestamp, stamped=False)
        return batch
    out = batch if h.base_offset >= omap.end_offset else _clean_data_batch(batch, h, omap, last_in_group=last_in_group)
    if out is not None and h.is_transactional:
        omap.txn_kept.add(h.producer_id)
    return out


def _clean_data_batch(
    batch: memoryview, h: records.BatchHeader, omap: OffsetMap, *, last_in_group: bool
) -> bytes | memoryview | None:
    kept: list[records.Record] = []
    total = 0
    tombstones = False
    if h.record_count and h.base_offset not in omap.aborted:
        decoded = records.decode_batch(batch, verify_crc=False, codecs=omap.codecs)
        total = len(decoded.records)
        latest = omap.latest
        # KIP-534: tombstones go once the horizon stamped in their batch has passed; a batch
        # without one keeps them and is stamped, so each stays delete.retention.ms after the
        # cleaner first saw it, whatever timestamps the producer wrote
        horizon_passed = h.has_delete_horizon and omap.now_ms >= h.first_timestamp
        for rec in decoded.records:
            if rec.key is None:
                continue  # Kafka's cleaner drops keyless records of compacted topics
            if rec.offset < latest.get(rec.key, -1):
                continue
            if rec.value is None:
                if horizon_passed:
                    continue
                tombstones = True
            kept.append(rec)
    horizon: int | None = h.first_timestamp if h.has_delete_horizon else None
    stamp = tombstones and horizon is None
    if stamp:
        horizon = omap.now_ms + omap.delete_retention_ms
    if tombstones and horizon is not None:
        omap.keep_until(horizon, stamped=stamp)
    if kept and len(kept) == total and not stamp:
        return batch
    if kept:
        return _rebuilt(h, kept, omap, horizon)
    if last_in_group or omap.is_active_producers_last(h):
        return empty_batch_like(batch)
    return None


def _rebuilt(h: records.BatchHeader, kept: list[records.Record], omap: OffsetMap, horizon: int | None) -> bytes:
    """``kept`` as a batch with ``h``'s metadata and offset span (offsets, producer sequence)."""
    rebuilt = records.build_batch(
        kept,
        base_offset=h.base_offset,
        compression=h.compression_id,
        codecs=omap.codecs,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence,
        is_transactional=h.is_transactional,
        is_control=h.is_control,
        partition_leader_epoch=h.partition_leader_epoch,
        timestamp_type=h.timestamp_type,
        offset_deltas=[r.offset - h.base_offset for r in kept],
        delete_horizon_ms=horizon,
    )
    if kept[-1].offset != h.last_offset:
        rebuilt = with_last_offset_delta(rebuilt, h.last_offset_delta)
    return rebuilt


def _stamped_marker(batch: memoryview, h: records.BatchHeader, omap: OffsetMap) -> bytes | memoryview:
    """An empty transaction's marker with its delete horizon set (its records as they were)."""
    kept = records.decode_batch(batch, verify_crc=False, codecs=omap.codecs).records
    if not kept:
        return batch  # a marker without its record: nothing to stamp, keep it as it is
    horizon = omap.now_ms + omap.delete_retention_ms
    omap.keep_until(horizon, stamped=True)
    return _rebuilt(h, list(kept), omap, horizon)


def clean_step(group: list[_Input], omap: OffsetMap, writer: GroupWriter, cursor: tuple[int, int]) -> tuple[int, int]:
    """One worker-thread step: clean up to STEP_BYTES of ``group`` from ``cursor`` (input index,
    position); returns the next cursor (index ``len(group)`` when done)."""
    idx, pos = cursor
    inp = group[idx]
    last_input = idx == len(group) - 1
    for p, h, batch in _read_step(inp.fd, inp.size, pos):
        pos = p + h.size
        out = clean_batch(batch, h, omap, last_in_group=last_input and pos >= inp.size)
        if out is not None:
            writer.write(out, h if out is batch else records.parse_header(out))
    return (idx + 1, 0) if pos >= inp.size else (idx, pos)


def group_inputs(inputs: list[_Input], segment_bytes: int, index_bytes: int) -> list[list[_Input]]:
    """Consecutive inputs whose total fits one segment (size, both indexes and int32 offset
    span; Kafka's ``groupSegmentsBySize``). An empty input (a segment recovery cut to nothing)
    is left as it is, and no group spans it: a group must be consecutive segments, or its
    replacement fails after its swap files were made durable."""
    groups: list[list[_Input]] = []
    after_empty = False
    for inp in inputs:
        if inp.size == 0:
            after_empty = True
            continue
        cur = groups[-1] if groups and not after_empty else None
        after_empty = False
        if (
            cur is not None
            and sum(i.size for i in cur) + inp.size <= segment_bytes
            and sum(i.segment.offset_index.entries for i in cur) + inp.segment.offset_index.entries
            < index_bytes // OffsetIndex.ENTRY.size
            and sum(i.segment.time_index.entries for i in cur) + inp.segment.time_index.entries
            < index_bytes // TimeIndex.ENTRY.size
            and inp.segment.next_offset - cur[0].segment.base_offset <= 0x7FFFFFFF
        ):
            cur.append(inp)
        else:
            groups.append([inp])
    return groups


class LogCleaner:
    """Runs compaction rounds for the logs of one storage; one round at a time."""

    def __init__(
        self, codecs: Mapping[int, Codec] | None, on_cleaned: Any, max_map_bytes: int, producer_expiration_ms: int
    ) -> None:
        self.codecs = codecs
        self.on_cleaned = on_cleaned  # called with the log after a round that swapped anything
        self.max_map_bytes = max_map_bytes  # log.cleaner.dedupe.buffer.size * its load factor
        self.producer_expiration_ms = producer_expiration_ms  # producer.id.expiration.ms
        self.rounds = 0

    async def clean(self, log_: SegmentLog, now_ms: int) -> bool:
        """Run one round on ``log_`` if it is due; True when a round ran to the end."""
        plan = plan_round(log_, now_ms)
        if plan is None:
            return False
        try:
            return await self._run(plan)
        except FileNotFoundError:  # a segment of the plan was retired meanwhile
            log.info("%s: log changed during compaction; round abandoned", log_.topic_partition)
            return False

    async def _run(self, plan: CleanPlan) -> bool:
        omap = OffsetMap(self.codecs, self.max_map_bytes)
        omap.active_after = plan.now_ms - self.producer_expiration_ms
        omap.now_ms = plan.now_ms
        omap.delete_retention_ms = plan.log.config.delete_retention_ms
        end = plan.end_offset
        inputs = plan.inputs
        scanned = 0
        for n, inp in enumerate(inputs):
            dirty = n + 1 >= len(inputs) or inputs[n + 1].segment.base_offset > plan.first_dirty
            if dirty and omap.full:  # the map is full: this round ends before this segment
                end = inp.segment.base_offset
                inputs = inputs[:n]
                break
            await omap.add_segment(inp, end, keys=dirty, start_offset=plan.first_dirty)
            scanned = n + 1
            if omap.stopped_at is not None:  # it filled up inside this segment
                end = omap.stopped_at
                inputs = inputs[: n + 1] if end > inp.segment.base_offset else inputs[:n]
                break
        for inp in plan.inputs[scanned:] + plan.tail:
            await omap.add_segment(inp, end, keys=False)
        open_first = omap.first_open_txn_offset()
        if open_first is not None and open_first < end:
            # stop before the segment holding the first record of an undecided transaction, and
            # remember it: the log is not due again for what lies past it until a marker comes
            # (else every round redid this one, and the cleaner never backed off)
            plan.log.uncleanable_from = open_first
            inputs = [inp for inp in inputs if inp.segment.next_offset <= open_first]
            end = inputs[-1].segment.next_offset if inputs else plan.inputs[0].segment.base_offset
            if not inputs:
                return False
        if self._stale(plan, inputs):
            return False
        omap.end_offset = end
        cfg = plan.log.config
        swapped = 0
        for group in group_inputs(inputs, cfg.segment_bytes, cfg.segment_index_bytes):
            if not await self._clean_group(plan, group, omap):
                return False
            swapped += 1
        plan.log.first_dirty_offset = max(plan.log.first_dirty_offset, end)
        plan.log.latest_delete_horizon = omap.pending_horizon
        self.rounds += 1
        # the horizon says when the log is next due without new dirt: what an operator (or a
        # test) needs to tell a tombstone kept on purpose from one the cleaner forgot
        horizon = omap.pending_horizon
        waiting = f"; tombstones or markers kept until delete horizon {horizon} (epoch ms)" if horizon >= 0 else ""
        log.info("%s: compacted %d group(s) up to offset %d%s", plan.log.topic_partition, swapped, end, waiting)
        self.on_cleaned(plan.log)
        return True

    async def _clean_group(self, plan: CleanPlan, group: list[_Input], omap: OffsetMap) -> bool:
        lg = plan.log
        cfg = lg.config
        writer = GroupWriter(lg.dir, group[0].segment.base_offset, cfg.index_interval_bytes, cfg.segment_index_bytes)
        try:
            with _pinned(group):
                cursor = (0, 0)
                while cursor[0] < len(group):
                    cursor = await trio.to_thread.run_sync(clean_step, group, omap, writer, cursor)
                mtime = max(os.fstat(inp.fd).st_mtime for inp in group)
            await trio.to_thread.run_sync(writer.finish, mtime)
        except BaseException:
            writer.abort()
            raise
        if self._stale(plan, group):
            writer.abort()
            log.info("%s: log changed during compaction; discarding the cleaned segment", lg.topic_partition)
            return False
        return await self._swap_in(plan, group, writer)

    @staticmethod
    def _stale(plan: CleanPlan, inputs: list[_Input]) -> bool:
        """The log changed since the plan (truncation, retention, close): drop the work."""
        lg = plan.log
        return lg.closed or lg.generation != plan.generation or any(i.segment not in lg.segments for i in inputs)

    async def _swap_in(self, plan: CleanPlan, group: list[_Input], writer: GroupWriter) -> bool:
        """Commit the cleaned files in Kafka's order, every fsync in a worker thread (a directory
        fsync forces a journal commit, which on a busy disk waits seconds for other data, and
        the trio thread serves every client):

        1. ``.cleaned`` -> ``.swap`` (the log file last: a ``.log.swap`` is the commit point
           start-up completes), then await the directory fsync. The log holds the files
           meanwhile (:meth:`SegmentLog.hold_swap`): a truncation or retention that runs while
           we wait renames them away before it cuts anything, so no crash can restore a swap
           over data that was taken out; the round then finds the log changed and backs out.
           A failed or cancelled fsync withdraws them too (the old segments stay).
        2. back on the trio thread, nothing awaited from here to the renames: unless the log
           changed (generation, closed, a segment gone), replace the old segments in memory
           (their files become ``*.deleted``) and give the swap files their final names.
        3. await the directory fsync that makes the final names durable, and only then hand
           the old files to the unlinker. Appends, reads, truncation or retention may run while
           we wait: they see the new segment, whose files already have their final names. If
           the fsync fails or is cancelled the old files are retired all the same: the
           ``.log.swap`` was durable before they were renamed, so any crash state recovers to
           the cleaned segment.

        Returns False when the log changed before step 2 (the work is thrown away)."""
        lg = plan.log
        swaps: list[Path] = []
        try:
            for path in (writer.index_path, writer.time_path, writer.log_path):
                swap = path.with_name(path.name[: -len(CLEANED_SUFFIX)] + SWAP_SUFFIX)
                os.replace(path, swap)
                swaps.append(swap)
        except BaseException:
            lg.retire_files([*swaps])
            writer.abort()
            raise
        lg.hold_swap(swaps)
        try:
            await trio.to_thread.run_sync(fsync_dir, lg.dir)
        except BaseException:
            lg.withdraw_swap()
            raise
        if self._stale(plan, group) or not lg.release_swap():
            lg.withdraw_swap()  # a truncation or retention withdrew them already; a close did not
            log.info("%s: log changed during compaction; discarding the cleaned segment", lg.topic_partition)
            return False
        new = LogSegment(
            lg.dir,
            writer.base_offset,
            lg.ctx,
            size=writer.size,
            index_bytes=lg.config.segment_index_bytes,
            index_interval=lg.config.index_interval_bytes,
            writable=False,
        )
        new.set_known_extent(writer.next_offset, (writer.max_ts, writer.offset_of_max_ts))
        try:
            retired = lg.replace_segments([inp.segment for inp in group], new)
        except ValueError:
            # refused before anything was retired (segments not consecutive): no longer held,
            # so no truncation would withdraw them, and a .swap left here would be installed by
            # the next start over whatever the log became meanwhile. (An OSError retiring the old
            # files leaves the swap in place: the next start completes it.)
            lg.hold_swap(swaps)
            lg.withdraw_swap()
            raise
        for swap in swaps:
            os.replace(swap, swap.with_name(swap.name[: -len(SWAP_SUFFIX)]))
        # a change while the final names are made durable must end the round before the next group
        plan.generation = lg.generation
        try:
            await trio.to_thread.run_sync(fsync_dir, lg.dir)
        finally:
            lg.retire_files(retired)
        return True
