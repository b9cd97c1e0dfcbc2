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
