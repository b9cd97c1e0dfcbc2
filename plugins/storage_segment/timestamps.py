"""Timestamp queries of a log: ListOffsets by timestamp, and the record with the largest one.

Both go through the segments' largest timestamps and time indexes to one batch, then decode
that batch alone to answer with the exact record, as Kafka's ListOffsets does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.records import first_record_at_or_after

from .scan import scan_headers

if TYPE_CHECKING:
    from .log import SegmentLog


def max_timestamp_and_offset(log: SegmentLog) -> tuple[int, int]:
    """(timestamp, offset) of the record carrying the largest timestamp; (-1, -1) when none.

    As Kafka (ListOffsets MAX_TIMESTAMP reads the segments' ``maxTimestampSoFar``), a record
    below the log start that DeleteRecords left in a kept segment still counts: the answer is
    always one real record's pair, never its timestamp with another record's offset."""
    best = (-1, -1)
    for seg in log.segments:
        ts, off = seg.max_timestamp_and_offset()
        if ts > best[0]:
            best = (ts, off)
    if best[0] < 0:
        return -1, -1
    holder = log.segment_for(best[1])
    found = holder.translate(best[1]) if holder is not None else None
    if holder is not None and found is not None:
        pos, h = found
        exact = first_record_at_or_after(holder.read_bytes(pos, h.size), best[0], -1)
        if isinstance(exact, tuple):
            return best[0], exact[0]
    return best


def offset_for_timestamp(log: SegmentLog, timestamp: int) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record at or after ``timestamp`` from the log start."""
    start = log.log_start_offset
    for seg in log.segments:
        if seg.max_timestamp_and_offset()[0] < timestamp:
            continue
        found = seg.translate(seg.time_lookup(timestamp))
        if found is None:
            continue
        for p, h in scan_headers(seg.log.fd(), found[0], seg.size):
            if h.max_timestamp < timestamp or h.last_offset < start:
                continue
            exact = first_record_at_or_after(seg.read_bytes(p, h.size), timestamp, start)
            if isinstance(exact, tuple):
                return exact
            if exact:  # undecodable here: the batch header's answer
                return max(h.base_offset, start), h.max_timestamp
            # no record of this batch qualifies (those that do lie below the log start): as
            # Kafka's LogSegment.findOffsetByTimestamp, go on to the next batch
    return None
