"""Walking batch headers in a segment file, trusted (reads) or verified (recovery).

Reads only need positions: from an index entry they walk a few headers forward with one
``pread`` per chunk. Recovery trusts nothing after the recovery point: it reads big chunks,
checks framing, magic, CRC-32C and offset order of every batch, and stops at the first bad one,
saying why, so the caller can cut the tail there.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass

from crc32c import crc32c

from odradek import records
from odradek.errors import CorruptMessage
from odradek.records import HEADER_SIZE, BatchHeader

_INT32 = struct.Struct(">i")
READ_CHUNK = 16 * 1024
RECOVERY_CHUNK = 4 * 1024 * 1024
INT32_MAX = 0x7FFFFFFF


def header_at(fd: int, position: int) -> BatchHeader | None:
    """The header of the batch at ``position``, or None past the end of the file."""
    buf = os.pread(fd, HEADER_SIZE, position)
    if len(buf) < HEADER_SIZE:
        return None
    return records.parse_header(buf)


def scan_headers(fd: int, start: int, end: int, chunk: int = READ_CHUNK) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each batch starting in [start, end) whose header lies before ``end``.

    The bytes are trusted (below the segment's valid size); a batchLength below the minimum
    means an index pointed into the middle of a batch and raises CorruptMessage.
    """
    if start < 0:
        raise CorruptMessage(f"no record batch at negative position {start}")
    buf = b""
    buf_start = start
    pos = start
    parse = records.parse_header
    while pos + HEADER_SIZE <= end:
        off = pos - buf_start
        if off + HEADER_SIZE > len(buf):
            buf = os.pread(fd, max(min(chunk, end - pos), HEADER_SIZE), pos)
            buf_start, off = pos, 0
            if len(buf) < HEADER_SIZE:
                return
        header = parse(buf, off)
        if header.batch_length < records.MIN_BATCH_LENGTH or header.magic != records.MAGIC:
            raise CorruptMessage(f"no record batch at position {pos} (magic {header.magic})")
        yield pos, header
        pos += header.batch_length + records.LOG_OVERHEAD


@dataclass
class VerifiedScan:
    """Walks and verifies every batch of a segment from position 0; ``stop_reason`` says why it
    stopped early (None when it reached the end of the file cleanly)."""

    fd: int
    base_offset: int
    size: int
    stop_reason: str | None = None
    valid_bytes: int = 0

    def __iter__(self) -> Iterator[tuple[int, BatchHeader]]:
        fd, end = self.fd, self.size
        pos = 0
        buf = b""
        buf_start = 0
        next_min_offset = self.base_offset
        parse = records.parse_header
        while pos < end:
            if end - pos < HEADER_SIZE:
                self.stop_reason = f"{end - pos} trailing bytes, too few for a batch header"
                return
            off = pos - buf_start
            if off + HEADER_SIZE > len(buf):
                buf = os.pread(fd, min(RECOVERY_CHUNK, end - pos), pos)
                buf_start, off = pos, 0
                if len(buf) < HEADER_SIZE:
                    self.stop_reason = "file ended early"
                    return
            h = parse(buf, off)
            size = h.batch_length + records.LOG_OVERHEAD
            problem = _header_problem(h, size, pos, end, next_min_offset, self.base_offset)
            if problem is not None:
                self.stop_reason = problem
                return
            if off + size > len(buf):
                buf = os.pread(fd, max(min(RECOVERY_CHUNK, end - pos), size), pos)
                buf_start, off = pos, 0
                if len(buf) < size:
                    self.stop_reason = "file ended inside a batch"
                    return
            actual = crc32c(memoryview(buf)[off + records.ATTRIBUTES_OFFSET : off + size])
            if actual != h.crc:
                self.stop_reason = f"batch at position {pos} (offset {h.base_offset}) fails its CRC"
                return
            yield pos, h
            pos += size
            self.valid_bytes = pos
            next_min_offset = h.last_offset + 1


def _header_problem(h: BatchHeader, size: int, pos: int, end: int, min_offset: int, base: int) -> str | None:
    where = f"batch at position {pos}"
    if h.magic != records.MAGIC:
        return f"{where} has magic {h.magic}"
    if h.batch_length < records.MIN_BATCH_LENGTH:
        return f"{where} has batchLength {h.batch_length}"
    if pos + size > end:
        return f"{where} is torn: {size} bytes declared, {end - pos} present"
    if h.last_offset_delta < 0 or h.record_count < 0 or h.record_count > h.last_offset_delta + 1:
        return f"{where} has lastOffsetDelta {h.last_offset_delta} and recordCount {h.record_count}"
    if h.base_offset < min_offset:
        return f"{where} has offset {h.base_offset}, expected at least {min_offset}"
    if h.last_offset - base > INT32_MAX:
        return f"{where} has offset {h.last_offset}, too far from the segment base {base}"
    return None


def empty_batch_like(header_bytes: bytes | bytearray | memoryview) -> bytes:
    """A batch with the same header fields and no records: compaction keeps one where a
    producer's last batch lost all its records, so the producer's sequence and epoch survive."""
    out = bytearray(header_bytes[:HEADER_SIZE])
    _INT32.pack_into(out, records.BATCH_LENGTH_OFFSET, records.MIN_BATCH_LENGTH)
    _INT32.pack_into(out, records.RECORD_COUNT_OFFSET, 0)
    struct.pack_into(">I", out, records.CRC_OFFSET, records.compute_crc(out, 0, HEADER_SIZE))
    return bytes(out)


def with_last_offset_delta(batch: bytes, last_offset_delta: int) -> bytes:
    """``batch`` with its lastOffsetDelta set (and CRC recomputed): a compacted batch keeps the
    offset span of the original, so offsets and producer sequences stay where they were."""
    out = bytearray(batch)
    _INT32.pack_into(out, records.LAST_OFFSET_DELTA_OFFSET, last_offset_delta)
    struct.pack_into(">I", out, records.CRC_OFFSET, records.compute_crc(out, 0, len(out)))
    return bytes(out)
