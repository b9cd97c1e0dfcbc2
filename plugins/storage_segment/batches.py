"""Small per-batch helpers of the log's hot and query paths."""

from __future__ import annotations

from collections.abc import Sequence

from odradek import records
from odradek.errors import InvalidRecord
from odradek.interfaces import BatchMeta


def check_layout(data: bytes | bytearray, batches: Sequence[BatchMeta]) -> None:
    """The metas must tile ``data`` exactly: a mismatch would write garbage into the log."""
    pos = 0
    for meta in batches:
        if meta.position != pos or meta.size < records.HEADER_SIZE:
            raise InvalidRecord(f"batch metadata does not match the data at position {pos}")
        pos += meta.size
    if pos != len(data):
        raise InvalidRecord(f"batch metadata covers {pos} bytes of {len(data)}")


def first_record_at_or_after(batch: bytes, timestamp: int, min_offset: int) -> tuple[int, int] | bool:
    """(offset, timestamp) of the first record in ``batch`` with a timestamp >= ``timestamp``
    at or after ``min_offset``; False when no record is, True when the batch cannot be decoded
    (e.g. no codec here: the caller falls back to the batch header)."""
    try:
        decoded = records.decode_batch(batch, verify_crc=False)
    except Exception:  # an unknown codec must not break ListOffsets: fall back to the header
        return True
    for rec in decoded.records:
        if rec.timestamp >= timestamp and rec.offset >= min_offset:
            return rec.offset, rec.timestamp
    return False
