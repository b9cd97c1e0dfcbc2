"""What a partition knows of its remote (tiered) log, and reading batches from a remote segment.

Sans-IO: :class:`RemoteLogView` is the partition's snapshot of its finished remote segments (the
remote log manager replaces it after each listing, copy or deletion); :func:`offset_index_position`
and :func:`read_batches` find and cut whole batches from a segment's offset index and byte
stream. The remote log manager runs them in worker threads against the remote storage.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import BinaryIO

from .. import records
from ..errors import CorruptMessage
from ..interfaces import EpochEntry, RemoteLogSegmentMetadata

_OFFSET_ENTRY = struct.Struct(">ii")  # Kafka's offset index entry: relative offset, position
_LOG_HEADER = struct.Struct(">qi")  # baseOffset, batchLength
_LAST_OFFSET_DELTA = struct.Struct(">i")
_LAST_OFFSET_DELTA_AT = 23  # byte offset of lastOffsetDelta in a v2 batch header


@dataclass(frozen=True, slots=True)
class RemoteLogView:
    """A partition's finished remote segments (ordered by start offset; a new leader's copy may
    overlap the one before, as in Kafka) and the first offset of them still readable: the
    first segment's start, or above it after DeleteRecords."""

    segments: tuple[RemoteLogSegmentMetadata, ...] = ()
    log_start_offset: int = -1

    @property
    def highest_copied_offset(self) -> int:
        """The last offset remote storage holds (Kafka's highest offset in remote storage), -1 for none."""
        return max((m.end_offset for m in self.segments), default=-1)

    @property
    def size_in_bytes(self) -> int:
        return sum(m.size_in_bytes for m in self.segments)

    def segment_for(self, offset: int) -> RemoteLogSegmentMetadata | None:
        """The segment holding ``offset``: of those starting at or below it, the latest that
        reaches it (overlapping copies hold the same records)."""
        starts = [m.start_offset for m in self.segments]
        i = bisect.bisect_right(starts, offset) - 1
        while i >= 0:
            candidate = self.segments[i]
            if candidate.end_offset >= offset:
                return candidate
            i -= 1
        after = [m for m in self.segments if m.start_offset > offset]
        return after[0] if after else None


def epoch_entries_for(entries: Sequence[EpochEntry], start: int, next_offset: int) -> tuple[EpochEntry, ...]:
    """The leader-epoch entries of a segment ``[start, next_offset)``: the one in force at its
    start and those beginning inside it (Kafka's segmentLeaderEpochs)."""
    inside = [e for e in entries if start < e.start_offset < next_offset]
    before = [e for e in entries if e.start_offset <= start]
    return tuple(([before[-1]] if before else []) + inside)


def leader_epoch_checkpoint(entries: Sequence[EpochEntry]) -> bytes:
    """Kafka's leader-epoch-checkpoint text: version 0, the entry count, one ``epoch offset`` a line."""
    lines = ["0", str(len(entries)), *(f"{e.epoch} {e.start_offset}" for e in entries)]
    return ("\n".join(lines) + "\n").encode()


def offset_index_position(index: bytes, base_offset: int, offset: int) -> int:
    """The byte position the offset index names for the last entry at or below ``offset`` (0 when
    none): reading from it finds the batch holding ``offset``. Trailing zero entries (a
    preallocated index not trimmed) end the index."""
    entries: list[tuple[int, int]] = []
    for relative, position in _OFFSET_ENTRY.iter_unpack(index[: len(index) - len(index) % 8]):
        if entries and relative <= entries[-1][0]:
            break
        entries.append((relative, position))
    i = bisect.bisect_right([r for r, _ in entries], offset - base_offset) - 1
    return entries[i][1] if i >= 0 else 0


@dataclass(frozen=True, slots=True)
class RemoteBatches:
    """Whole batches read from a remote segment: their bytes, the first batch's base offset
    (-1 when none) and the offset after the last one."""

    data: bytes
    first_batch_offset: int
    next_offset: int


def read_batches(stream: BinaryIO, fetch_offset: int, max_bytes: int, *, min_one_batch: bool) -> RemoteBatches:
    """From ``stream`` (positioned at a batch boundary at or before ``fetch_offset``), the run
    of whole batches starting with the one holding ``fetch_offset``, within ``max_bytes`` (at
    least one batch with ``min_one_batch``). Stops at the segment's end."""
    out = bytearray()
    first = -1
    after = -1
    while True:
        head = stream.read(records.HEADER_SIZE)
        if len(head) < records.HEADER_SIZE:
            break
        base, length = _LOG_HEADER.unpack_from(head, 0)
        if length < records.MIN_BATCH_LENGTH:
            raise CorruptMessage(f"remote batch at offset {base} has length {length}")
        last = base + _LAST_OFFSET_DELTA.unpack_from(head, _LAST_OFFSET_DELTA_AT)[0]
        size = length + records.LOG_OVERHEAD
        if last < fetch_offset:
            stream.seek(size - records.HEADER_SIZE, 1)
            continue
        if out and len(out) + size > max_bytes:
            break
        if not out and size > max_bytes and not min_one_batch:
            break
        body = stream.read(size - records.HEADER_SIZE)
        if len(body) < size - records.HEADER_SIZE:
            break  # a truncated tail: never answered as a batch
        if first < 0:
            first = base
        out += head
        out += body
        after = last + 1
    return RemoteBatches(bytes(out), first, after)


def offset_for_timestamp_in(stream: BinaryIO, timestamp: int, min_offset: int) -> tuple[int, int] | None:
    """ListOffsets by time in one remote segment: from ``stream`` (at a batch boundary), the
    (offset, timestamp) of the first record at or after ``timestamp`` and at or after
    ``min_offset`` (the log start), reading only the headers of the batches before it and the
    one batch that holds it; None when the segment has none. A batch whose records cannot be
    decoded here answers its header's base offset and largest timestamp."""
    while True:
        head = stream.read(records.HEADER_SIZE)
        if len(head) < records.HEADER_SIZE:
            return None
        header = records.parse_header(head)
        if header.batch_length < records.MIN_BATCH_LENGTH:
            raise CorruptMessage(f"remote batch at offset {header.base_offset} has length {header.batch_length}")
        rest = header.size - records.HEADER_SIZE
        if header.max_timestamp < timestamp or header.last_offset < min_offset:
            stream.seek(rest, 1)
            continue
        body = stream.read(rest)
        if len(body) < rest:
            return None  # a truncated tail: never an answer
        exact = records.first_record_at_or_after(head + body, timestamp, min_offset)
        if isinstance(exact, tuple):
            return exact
        if exact:
            return max(header.base_offset, min_offset), header.max_timestamp


class RemoteFetchData:
    """Records read from remote storage as a :class:`odradek.interfaces.FetchDataInfo`: bytes in
    memory (no file to sendfile), released with the answer."""

    __slots__ = ("_data", "fetch_offset", "first_batch_offset", "next_offset", "size")

    def __init__(self, fetch_offset: int, batches: RemoteBatches) -> None:
        self.fetch_offset = fetch_offset
        self.first_batch_offset = batches.first_batch_offset
        self.next_offset = batches.next_offset
        self._data = batches.data
        self.size = len(batches.data)

    def file_range(self) -> None:
        return None

    def to_bytes(self) -> bytes:
        return self._data

    def release(self) -> None:
        self._data = b""
