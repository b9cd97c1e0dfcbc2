"""One segment of a partition log (Kafka's ``LogSegment``): a ``.log`` file and its two indexes.

Files are named by the segment's base offset, zero-padded to 20 digits, in the partition's
directory: ``00000000000000000000.log``, ``.index``, ``.timeindex``. Only the last segment of a
log (the active one) is written; older ones are immutable until retention deletes them or the
cleaner replaces them. Everything an old segment knows about itself (next offset, largest
timestamp) is computed lazily from its indexes, so loading a log with many segments opens nothing.
"""

from __future__ import annotations

import bisect
import errno
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from odradek.errors import CorruptMessage
from odradek.interfaces import BatchMeta
from odradek.records import HEADER_SIZE, MAGIC, BatchHeader

from .handles import HandleCache, LogFile
from .index import INT32_MAX, OffsetIndex, TimeIndex
from .reserve import UNSUPPORTED_ERRNOS, reserve_blocks
from .scan import VerifiedScan, header_at, scan_headers

log = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
#: how many fetch end positions a segment remembers (see ``LogSegment._fetch_ends``)
FETCH_ENDS_KEPT = 16
#: bytes a fetch reads at a time while looking for its last whole batch: between the index
#: entry and the fetch's end lie at most index.interval.bytes plus one batch, and a smaller
#: read than the 16 KiB scans use copies less when the batches are big
FETCH_SCAN_CHUNK = 4096
#: index room given out at a time: every this many appends the append path takes the slow way
#: through ``_reserve``, which stores the indexes' pending entries (at most this many of each,
#: 8 KiB in all, per active segment)
_ROOM_STEP = 256
#: ``LogSegment.reserved_to`` of a segment that does not reserve blocks ahead (switched off,
#: preallocated whole, or on a filesystem that cannot): no append's end ever passes it
NO_RESERVATION = 1 << 62
#: allocated bytes past a file's size (``st_blocks``) that mean blocks were reserved past it:
#: more than the last partly filled block and filesystem metadata can account for
_BLOCKS_PAST_EOF = 64 * 1024
#: the default of ``storage.segment.reserve.bytes``: measured against 256 KiB and 4 MiB steps,
#: 1 MiB takes nearly all of the gain while holding little disk per active segment
DEFAULT_RESERVE_BYTES = 1 << 20


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


def preallocate_bytes(config: Mapping[str, Any]) -> int:
    """How much of a new segment's log file to reserve: ``segment.bytes`` under ``preallocate``."""
    return int(config["segment.bytes"]) if config.get("preallocate", False) else 0


@dataclass
class SegmentContext:
    """What every segment of one broker shares: the fd and mmap budgets, the clock, and the
    step in which active segments reserve disk blocks ahead (``storage.segment.reserve.bytes``)."""

    files: HandleCache
    maps: HandleCache
    time_ms: Callable[[], int]
    reserve_bytes: int = DEFAULT_RESERVE_BYTES


class LogSegment:
    """A ``.log`` file with a sparse offset index and a time index."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        ctx: SegmentContext,
        *,
        size: int,
        index_bytes: int,
        index_interval: int,
        writable: bool,
    ) -> None:
        name = segment_name(base_offset)
        self.base_offset = base_offset
        self.ctx = ctx
        self.log = LogFile(directory / (name + LOG_SUFFIX), ctx.files)
        self.offset_index = OffsetIndex(
            directory / (name + INDEX_SUFFIX), base_offset, index_bytes, ctx.maps, writable=writable
        )
        self.time_index = TimeIndex(
            directory / (name + TIME_INDEX_SUFFIX), base_offset, index_bytes, ctx.maps, writable=writable
        )
        self.index_interval = index_interval
        self.size = size
        self.bytes_since_last_index_entry = 0
        self.created_ms = ctx.time_ms()
        self.roll_jitter_ms = 0
        self.index_room = 0  # index entries both indexes can take without allocating
        #: the largest last offset a batch of this segment may have (relative offsets are int32)
        self.max_last_offset = base_offset + INT32_MAX
        self._next_offset: int | None = None
        self._max_ts: tuple[int, int] | None = None  # (largest timestamp, offset of its batch)
        self._first_batch_ts: int | None = None
        #: the largest timestamp may be newer than the time index's last entry (a hint that
        #: spares the single-batch append a call; True is always safe)
        self._ts_unindexed = True
        #: the batches appended after the last offset-index entry (last offsets, positions), and
        #: the last offset of that indexed batch (None: unknown): a fetch near the end -- every
        #: fetch of a consumer that keeps up -- finds its batch here instead of reading the
        #: headers of up to ``index.interval.bytes`` of small batches after the index entry
        self._tail_last: list[int] = []
        self._tail_pos: list[int] = []
        self._tail_after: int | None = None
        #: where recent fetches ended: the next offset -> (position of the batch starting there,
        #: the offset-index slot at or before it). A consumer's next fetch asks for exactly that
        #: offset, so it reads one header (checked against the offset) instead of searching the
        #: index and scanning from the entry, and its end search starts from the slot. A few
        #: entries, so several consumers of one partition each keep theirs.
        self._fetch_ends: dict[int, tuple[int, int]] = {}
        #: a record timestamp up to which no roll by ``segment.ms`` is due (-1: unknown), set by
        #: :meth:`should_roll` so the log's append can skip calling it
        self.roll_at_ts = -1
        #: the log file was preallocated past its data (cut to :attr:`size` on roll and close)
        self.preallocated = False
        #: where the blocks reserved ahead of the data end (see reserve.py): the log calls
        #: :meth:`reserve_ahead` when an append would end past it. 0: nothing reserved yet;
        #: NO_RESERVATION: this segment does not reserve
        self.reserved_to = 0
        #: blocks may lie past the data (a reservation was made): cut on roll and close
        self._reserved = False
        #: (leader epoch, first offset) where the epoch rises in this segment, found by :meth:`recover`
        self.recovered_epoch_starts: list[tuple[int, int]] = []

    def __repr__(self) -> str:
        return f"LogSegment({self.log.path.name}, size={self.size})"

    # -- creation ----------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        directory: Path,
        base_offset: int,
        ctx: SegmentContext,
        *,
        index_bytes: int,
        index_interval: int,
        preallocate_bytes: int = 0,
    ) -> LogSegment:
        """A new, empty active segment (its files are created now; a stale file is emptied).

        ``preallocate_bytes`` (topic config ``preallocate``: ``segment.bytes``) reserves the log
        file's blocks up front, as Kafka does, so appends never allocate; the file is cut to its
        data when the segment rolls or the log closes, and recovery cuts the unused zeros after
        a crash. ENOSPC surfaces here, at roll, rather than mid-append."""
        seg = cls(
            directory, base_offset, ctx, size=0, index_bytes=index_bytes, index_interval=index_interval, writable=True
        )
        try:
            for path in seg.paths:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644))
            if preallocate_bytes > 0:
                fd = os.open(seg.log.path, os.O_WRONLY | os.O_CLOEXEC)
                try:
                    os.posix_fallocate(fd, 0, preallocate_bytes)
                finally:
                    os.close(fd)
                seg.preallocated = True
        except OSError:
            # a segment that cannot be made leaves no file: an empty ``<base>.log`` left by a
            # failed roll was the log's last segment at the next start, ending the log at its
            # base and hiding what the previous segment took meanwhile at those offsets
            seg.remove_files()
            raise
        seg.offset_index.reset()
        seg.time_index.reset()
        seg._next_offset = base_offset
        seg._max_ts = (-1, base_offset)
        return seg

    @property
    def paths(self) -> tuple[Path, Path, Path]:
        return self.log.path, self.offset_index.path, self.time_index.path

    # -- what the segment holds -----------------------------------------------------------------
    @property
    def next_offset(self) -> int:
        """One past the last offset stored (the base offset when empty)."""
        if self._next_offset is None:
            try:
                self._next_offset = self._load_next_offset()
            except CorruptMessage as exc:
                log.warning("rebuilding index of %s: %s", self.log.path, exc)
                self.rebuild_indexes()  # sets _next_offset from a full scan
        assert self._next_offset is not None
        return self._next_offset

    def _load_next_offset(self) -> int:
        nxt = self.base_offset
        for _, h in scan_headers(self.log.fd(), self._index_lookup_last()[1], self.size):
            nxt = h.next_offset
        return nxt

    def max_timestamp_and_offset(self) -> tuple[int, int]:
        """(largest batch max timestamp, last offset of that batch); (-1, base) when none."""
        if self._max_ts is None:
            try:
                last = self.time_index.last_entry()
                if last is not None and not self._entry_matches(last):
                    raise CorruptMessage(f"time index entry {last} does not match its batch")
                ts, off = last if last is not None else (-1, self.base_offset)
                for _, h in scan_headers(self.log.fd(), self._index_lookup_last()[1], self.size):
                    if h.max_timestamp > ts:
                        ts, off = h.max_timestamp, h.last_offset
                self._max_ts = (ts, off)
                self._ts_unindexed = True
            except CorruptMessage as exc:
                log.warning("rebuilding indexes of %s: %s", self.log.path, exc)
                self.rebuild_indexes()  # sets _max_ts from a full scan
        assert self._max_ts is not None
        return self._max_ts

    def largest_timestamp(self) -> int:
        """What time retention compares: the largest record timestamp, else the file's mtime."""
        ts = self.max_timestamp_and_offset()[0]
        if ts >= 0:
            return ts
        try:
            return int(self.log.path.stat().st_mtime * 1000)
        except FileNotFoundError:
            return self.ctx.time_ms()

    def first_batch_timestamp(self) -> int:
        """Max timestamp of the first batch (what segment.ms measures from), -1 when empty."""
        if self._first_batch_ts is None:
            h = header_at(self.log.fd(), 0) if self.size else None
            self._first_batch_ts = h.max_timestamp if h is not None else -1
        return self._first_batch_ts

    def set_known_extent(self, next_offset: int, max_ts: tuple[int, int]) -> None:
        """What the writer of a new segment file (the cleaner) already knows about it."""
        self._next_offset = next_offset
        self._max_ts = max_ts
        self._ts_unindexed = True

    def _index_lookup_last(self) -> tuple[int, int]:
        """The last offset-index entry, if it points inside the file (else the start)."""
        try:
            off, pos = self.offset_index.last_entry()
        except (OSError, ValueError):
            return self.base_offset, 0
        return (off, pos) if 0 <= pos < max(self.size, 1) else (self.base_offset, 0)

    # -- append --------------------------------------------------------------------------------
    def append(
        self, data: bytes | bytearray | memoryview, metas: Sequence[BatchMeta], last_offsets: Sequence[int]
    ) -> None:
        """Write ``data`` (whole batches) at the end in one write, then index its batches.

        Raises OSError (ENOSPC, EIO ...) with the file cut back to where it was: a failed
        append leaves nothing behind, so later appends and recovery see a clean end.
        """
        n = len(metas)
        if n > self.index_room:
            self._reserve(n)
        start = self.size
        self._write_at_end(data, start)
        max_ts = self._max_ts or self.max_timestamp_and_offset()
        ts = max_ts[0]
        pos = start
        since = self.bytes_since_last_index_entry
        interval = self.index_interval
        for meta, last in zip(metas, last_offsets, strict=True):
            if meta.max_timestamp > ts:
                ts = meta.max_timestamp
                max_ts = (ts, last)
            if since > interval:
                self.offset_index.append(last, pos)
                self.time_index.maybe_append(ts, max_ts[1])
                since = 0
            pos += meta.size
            since += meta.size
        if start == 0:
            self._first_batch_ts = metas[0].max_timestamp
            self.roll_at_ts = -1
        self.bytes_since_last_index_entry = since
        self.size = pos
        self._max_ts = max_ts
        self._ts_unindexed = True
        self._forget_tail()
        self._next_offset = last_offsets[-1] + 1
        self.index_room -= n

    def append_one(self, data: bytes | bytearray | memoryview, max_timestamp: int, last_offset: int) -> None:
        """:meth:`append` for exactly one batch: the common produce request (one batch per
        partition since Produce v3). It runs once per produced batch, so it is written out flat:
        at 16 KiB each attribute access or call here is ~0.5% of an append next to ``pwrite``."""
        if self.index_room < 1:
            self._reserve(1)
        start = self.size
        size = len(data)
        try:
            written = os.pwrite(self.log.fd(), data, start)
        except OSError:
            self._cut_back(start)
            raise
        if written != size:
            self._finish_short_write(data, start, written)
        max_ts = self._max_ts or self.max_timestamp_and_offset()
        if max_timestamp > max_ts[0]:
            self._max_ts = max_ts = (max_timestamp, last_offset)
            self._ts_unindexed = True
        since = self.bytes_since_last_index_entry
        if since > self.index_interval:
            self.offset_index.append(last_offset, start)
            if self._ts_unindexed:
                self.time_index.maybe_append(max_ts[0], max_ts[1])
                self._ts_unindexed = False
            self.bytes_since_last_index_entry = size
            self._tail_after = last_offset
            if self._tail_last:
                self._tail_last.clear()
                self._tail_pos.clear()
        else:
            self.bytes_since_last_index_entry = since + size
            if self._tail_after is not None:
                self._tail_last.append(last_offset)
                self._tail_pos.append(start)
            if start == 0:
                self._first_batch_ts = max_timestamp
                self.roll_at_ts = -1
        self.size = start + size
        self._next_offset = last_offset + 1
        self.index_room -= 1

    def _write_at_end(self, data: bytes | bytearray | memoryview, start: int) -> None:
        """Write ``data`` at ``start`` (the end); on failure cut the file back to ``start``."""
        try:
            written = os.pwrite(self.log.fd(), data, start)
        except OSError:
            self._cut_back(start)
            raise
        if written != len(data):
            self._finish_short_write(data, start, written)

    def _finish_short_write(self, data: bytes | bytearray | memoryview, start: int, written: int) -> None:
        """A short write: write the rest, or surface the error that caused it (the file is cut
        back to ``start`` either way on failure)."""
        total = len(data)
        try:
            while written < total:
                more = os.pwrite(self.log.fd(), memoryview(data)[written:], start + written)
                if more == 0:
                    raise OSError(errno.ENOSPC, "short write")
                written += more
        except OSError:
            self._cut_back(start)
            raise

    def _cut_back(self, start: int) -> None:
        try:
            os.ftruncate(self.log.fd(), start)
            self._blocks_cut()
        except OSError as cut_exc:
            log.error("could not cut %s back to %d bytes after a failed write: %s", self.log.path, start, cut_exc)

    def _reserve(self, count: int) -> None:
        """Allocate index space for ``count`` more entries (each batch adds at most one), and
        store the indexes' pending entries: the room given out is capped, so this runs at least
        every ``_ROOM_STEP`` appends and bounds what the indexes hold in memory."""
        oi, ti = self.offset_index, self.time_index
        oi.reserve(count)
        ti.reserve(count)
        oi.store_pending()
        ti.store_pending()
        self.index_room = min(
            oi.allocated_entries - oi.entries, ti.allocated_entries - ti.entries, max(count, _ROOM_STEP)
        )

    def store_index_entries(self) -> None:
        """Put every index entry in the index files (they may be fsynced next)."""
        self.offset_index.store_pending()
        self.time_index.store_pending()

    def should_roll(
        self, incoming: int, batches: int, last_offset: int, max_timestamp: int, segment_bytes: int, segment_ms: int
    ) -> bool:
        """Kafka's roll conditions: size, a full index, offsets beyond int32 of the base, or age:
        the incoming records' timestamp minus the first batch's (record time, so replayed old
        data does not roll every batch), or the segment's wall-clock age when it has none."""
        if last_offset - self.base_offset > 0x7FFFFFFF:
            return True
        size = self.size
        if size == 0:
            return False
        if size > segment_bytes - incoming:
            return True
        oi, ti = self.offset_index, self.time_index
        if oi.entries + batches > oi.max_entries or ti.entries >= ti.max_entries:
            return True
        # the jitter was drawn below segment.ms (SegmentLog._random_segment_jitter); a segment.ms
        # lowered since must not leave a zero or negative roll age (a roll per batch)
        roll_ms = segment_ms - self.roll_jitter_ms % segment_ms
        first_ts = self._first_batch_ts if self._first_batch_ts is not None else self.first_batch_timestamp()
        if first_ts >= 0 and max_timestamp >= 0:
            self.roll_at_ts = first_ts + roll_ms
            return max_timestamp - first_ts > roll_ms
        return self.ctx.time_ms() - self.created_ms > roll_ms

    def on_become_inactive(self) -> None:
        """The log rolled past this segment: record its largest timestamp, trim the indexes."""
        ts, off = self.max_timestamp_and_offset()
        if ts >= 0:
            self.time_index.maybe_append(ts, off)
        self.offset_index.trim()
        self.time_index.trim()
        self.index_room = 0
        self._forget_tail()
        self.trim_to_data()

    def trim_to_data(self) -> bool:
        """Cut the log file to its data when the segment stops growing (roll or close): the
        unused end of a preallocated file, or the blocks reserved ahead. Returns whether the
        file's size changed (only a preallocated one's does: it needs an fsync to last)."""
        if not (self.preallocated or self._reserved):
            return False
        os.ftruncate(self.log.fd(), self.size)
        resized = self.preallocated
        self.preallocated = False
        self._blocks_cut()
        return resized

    def reserve_ahead(self, end: int, limit: int) -> None:
        """Reserve the log file's blocks past an append that ends at ``end``: up to one step
        (``storage.segment.reserve.bytes``) further, but not past ``limit`` (``segment.bytes``:
        the segment rolls there). Called by the log when ``end`` passes :attr:`reserved_to`.

        A failure never fails the append: a filesystem that cannot reserve switches this segment
        off; anything else (ENOSPC) skips the step, and the append's own write meets it."""
        step = self.ctx.reserve_bytes
        if step <= 0 or self.preallocated:
            self.reserved_to = NO_RESERVATION
            return
        to = min(end + step, limit)
        if to <= end:  # the segment rolls at its next append (or holds one oversized batch)
            return
        start = max(self.size, self.reserved_to)
        self._reserved = True
        try:
            reserve_blocks(self.log.fd(), start, to - start)
        except OSError as exc:
            if exc.errno in UNSUPPORTED_ERRNOS:
                log.debug("%s: cannot reserve blocks ahead, appending without: %s", self.log.path, exc)
                self.reserved_to = NO_RESERVATION
            else:
                log.debug("%s: reserving blocks %d..%d failed: %s", self.log.path, start, to, exc)
                self.reserved_to = to  # the next step tries again
            return
        self.reserved_to = to

    def _blocks_cut(self) -> None:
        """The file was cut to its data (truncation, a failed write, recovery, a roll): no
        blocks are reserved past it any more; the next append reserves again."""
        self._reserved = False
        if self.reserved_to != NO_RESERVATION:
            self.reserved_to = 0

    def make_active(self) -> None:
        """Truncation made this the last segment again: its indexes take writes."""
        self.offset_index.make_writable()
        self.time_index.make_writable()
        self.index_room = 0

    # -- read ----------------------------------------------------------------------------------
    def time_lookup(self, timestamp: int) -> int:
        """An offset from which to scan for the first record at or after ``timestamp``: the time
        index entry below it, checked against the batch it names (that batch's last offset and
        max timestamp must match the entry), with the indexes rebuilt once if it lies."""
        entry = self.time_index.lookup(timestamp)
        if entry is None:
            return self.base_offset
        if not self._entry_matches(entry):
            log.warning("rebuilding indexes of %s: time index entry %s does not match its batch", self.log.path, entry)
            self.rebuild_indexes()
            entry = self.time_index.lookup(timestamp)
        return entry[1] if entry is not None else self.base_offset

    def _entry_matches(self, entry: tuple[int, int]) -> bool:
        ts, off = entry
        if ts < 0:
            return False
        found = self._translate(off, 0)
        return found is not None and found[1].last_offset == off and found[1].max_timestamp == ts

    def translate(self, offset: int, start: int = 0) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset is >= ``offset``."""
        try:
            return self._translate(offset, start)
        except CorruptMessage as exc:  # an index pointing into a batch: never trust it again
            log.warning("rebuilding index of %s: %s", self.log.path, exc)
            self.rebuild_indexes()
            return self._translate(offset, start)

    def _forget_tail(self) -> None:
        self._tail_after = None
        self._tail_last.clear()
        self._tail_pos.clear()

    def _translate_tail(self, offset: int, start: int) -> tuple[int, BatchHeader] | None:
        """The batch holding ``offset`` from the unindexed tail (one header read), or None when
        the tail does not cover it; a header that disagrees with the tail drops the tail."""
        after = self._tail_after
        last = self._tail_last
        if after is None or not last or not after < offset <= last[-1]:
            return None
        j = bisect.bisect_left(last, offset)
        pos = self._tail_pos[j]
        if pos < start:
            return None
        h = header_at(self.log.fd(), pos)
        if h is None or h.last_offset != last[j]:
            self._forget_tail()
            return None
        return pos, h

    def _translate(self, offset: int, start: int) -> tuple[int, BatchHeader] | None:
        found = self._translate_tail(offset, start)
        if found is not None:
            return found
        entry_offset, pos = self.offset_index.lookup(offset)
        if pos and pos >= self.size:
            raise CorruptMessage(f"index entry at position {pos} is past the end ({self.size})")
        for p, h in scan_headers(self.log.fd(), max(pos, start), self.size):
            if p == pos and pos and h.last_offset != entry_offset:
                raise CorruptMessage(
                    f"index entry says offset {entry_offset} at position {pos}, the batch there ends at {h.last_offset}"
                )
            if h.last_offset >= offset:
                return p, h
        return None

    def read(
        self, offset: int, max_bytes: int, max_offset: int | None, min_one_batch: bool
    ) -> tuple[int, int, int, int] | None:
        """(position, length, first batch base offset, the offset after the last batch or -1
        when unknown) of whole batches from the one holding ``offset``; None when no batch here
        reaches ``offset``; length 0 when nothing fits."""
        try:
            return self._read(offset, max_bytes, max_offset, min_one_batch)
        except CorruptMessage as exc:
            log.warning("rebuilding index of %s: %s", self.log.path, exc)
            self.rebuild_indexes()
            return self._read(offset, max_bytes, max_offset, min_one_batch)

    def _read(
        self, offset: int, max_bytes: int, max_offset: int | None, min_one_batch: bool
    ) -> tuple[int, int, int, int] | None:
        found = None
        slot = -1
        cached = self._fetch_ends.get(offset)
        if cached is not None:
            h = header_at(self.log.fd(), cached[0])
            if h is not None and h.base_offset == offset and h.magic == MAGIC:
                found = cached[0], h
                slot = cached[1]
        if found is None:
            found = self.translate(offset)
            if found is None:
                return None
        start, first = found
        if max_offset is not None and first.last_offset >= max_offset:
            return start, 0, first.base_offset, -1
        limit = self.size
        limit_offset = self.next_offset  # the offset of whatever starts at ``limit``
        if max_offset is not None and max_offset < limit_offset:
            stop = self.translate(max_offset, start)
            if stop is not None:
                limit, limit_offset = stop[0], stop[1].base_offset
        want = start + max(max_bytes, 0)
        after: tuple[int, int] | None = None  # (next offset, slot) where this read ends
        if want >= limit:
            end = limit
        else:
            # entries lie more than index.interval.bytes apart: the one for ``want`` is within
            # max_bytes / interval slots of this read's start slot (a guess the search checks)
            slot, boundary = self.offset_index.slot_at_or_before(
                want, after=slot, span=max_bytes // max(self.index_interval, 1) + 2
            )
            if boundary < 0 or boundary > self.size:
                raise CorruptMessage(f"index entry at position {boundary} is outside the file")
            end = max(boundary, start)
            # only batches starting at or before ``want`` can end inside it: read no further
            for p, h in scan_headers(self.log.fd(), end, min(limit, want + HEADER_SIZE), FETCH_SCAN_CHUNK):
                if p + h.size > want:
                    after = h.base_offset, slot
                    break
                end = p + h.size
        if end == start:
            if not min_one_batch:
                return start, 0, first.base_offset, -1
            return start, first.size, first.base_offset, first.last_offset + 1
        if after is not None:
            ends = self._fetch_ends
            if len(ends) >= FETCH_ENDS_KEPT:
                del ends[next(iter(ends))]
            ends[after[0]] = end, after[1]
            return start, end - start, first.base_offset, after[0]
        return start, end - start, first.base_offset, limit_offset if end == limit else -1

    def read_bytes(self, position: int, length: int) -> bytes:
        return os.pread(self.log.fd(), length, position)

    # -- truncation and recovery -------------------------------------------------------------
    def truncate_to(self, offset: int) -> int | None:
        """Cut every batch whose last offset is >= ``offset``; returns the base offset of the
        first batch cut (None when nothing was)."""
        found = self.translate(offset)
        if found is None:
            return None
        pos, h = found
        os.ftruncate(self.log.fd(), pos)
        self.preallocated = False
        self._blocks_cut()
        self.size = pos
        self.offset_index.truncate_to_position(pos)
        self.time_index.truncate_to_offset(h.base_offset)
        self._next_offset = None
        self._max_ts = None
        self._first_batch_ts = None
        self._ts_unindexed = True
        self.roll_at_ts = -1
        self._forget_tail()
        self.bytes_since_last_index_entry = 0
        self._fetch_ends.clear()
        return h.base_offset

    def recover(self) -> tuple[int, str | None]:
        """Verify every batch (CRC, framing, offset order), rebuild both indexes from them and
        cut the file after the last good batch. Returns (bytes cut, why). Also notes where the
        batches' leader epoch rises (:attr:`recovered_epoch_starts`), which the loader feeds
        to the epoch cache: the checkpoint may not have reached the disk for unflushed data."""
        fd = self.log.fd()
        st = os.fstat(fd)
        file_size = st.st_size
        self.offset_index.make_writable()
        self.time_index.make_writable()
        self.offset_index.reset()
        self.time_index.reset()
        self.index_room = 0
        scan = VerifiedScan(fd, self.base_offset, file_size)
        ts, off_of_ts = -1, self.base_offset
        since = 0
        nxt = self.base_offset
        first_ts: int | None = None
        interval = self.index_interval
        epoch_starts: list[tuple[int, int]] = []
        for pos, h in scan:
            if first_ts is None:
                first_ts = h.max_timestamp
            if h.partition_leader_epoch >= 0 and (not epoch_starts or h.partition_leader_epoch > epoch_starts[-1][0]):
                epoch_starts.append((h.partition_leader_epoch, h.base_offset))
            if h.max_timestamp > ts:
                ts, off_of_ts = h.max_timestamp, h.last_offset
            if since > interval:
                self.offset_index.reserve(1)
                self.time_index.reserve(1)
                self.offset_index.append(h.last_offset, pos)
                self.time_index.maybe_append(ts, off_of_ts)
                since = 0
            since += h.size
            nxt = h.next_offset
        valid = scan.valid_bytes
        why = scan.stop_reason
        if valid < file_size:
            if _zeros_from(fd, valid, file_size):
                # the unused end of a preallocated segment -- or a write that never reached the
                # disk: both read as zeros, so it is cut and reported like any other tail
                why = "only zero bytes follow (unused preallocated space, or writes lost before they reached the disk)"
            os.ftruncate(fd, valid)
        elif st.st_blocks * 512 >= file_size + _BLOCKS_PAST_EOF:
            # blocks reserved ahead before a crash (reserve.py): cut, leaving the size alone
            os.ftruncate(fd, valid)
        self._blocks_cut()
        self.size = valid
        self.bytes_since_last_index_entry = since
        self._next_offset = nxt
        self._max_ts = (ts, off_of_ts)
        self._first_batch_ts = first_ts if first_ts is not None else -1
        self._ts_unindexed = True
        self.roll_at_ts = -1
        self._forget_tail()
        self._fetch_ends.clear()
        self.recovered_epoch_starts = epoch_starts
        return file_size - valid, why

    def rebuild_indexes(self) -> None:
        """Rebuild the indexes of data already known good (a corrupt index found on read)."""
        was_writable = self.offset_index.writable
        cut, why = self.recover()
        if cut:
            log.error("%s: cut %d bytes while rebuilding its index: %s", self.log.path, cut, why)
        if not was_writable:
            self.offset_index.trim()
            self.time_index.trim()

    # -- lifecycle -------------------------------------------------------------------------------
    def close(self) -> None:
        """Trim and unmap the indexes and close the log file. Each is released even when an
        earlier one fails (its directory removed under a running broker), so nothing leaks; the
        first failure is raised afterwards."""
        failure: OSError | None = None
        for close in (self.offset_index.close, self.time_index.close, self.log.close):
            try:
                close()
            except OSError as exc:
                failure = failure or exc
        if failure is not None:
            raise failure

    def remove_files(self) -> None:
        """Unlink the segment's files now (one that never held data); failures are logged."""
        for path in self.paths:
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:
                log.error("could not remove %s: %s", path, exc)

    def retire(self) -> list[Path]:
        """Take the segment out of service: rename its files to ``*.deleted`` (cheap, so the
        caller's thread is not held by unlinking big files) and return the new paths to unlink.
        Readers that pinned the log file keep reading it."""
        self.offset_index._unmap()
        self.time_index._unmap()
        self.log.retire()
        out: list[Path] = []
        for path in self.paths:
            target = path.with_name(path.name + DELETED_SUFFIX)
            try:
                os.replace(path, target)
            except FileNotFoundError:
                continue
            out.append(target)
        return out


def _zeros_from(fd: int, position: int, end: int) -> bool:
    """Whether the file holds only zero bytes from ``position`` to ``end`` (read in chunks)."""
    chunk = 1 << 20
    while position < end:
        data = os.pread(fd, min(chunk, end - position), position)
        if not data or data.count(0) != len(data):
            return False
        position += len(data)
    return True
