"""Which whole segments retention may delete (Kafka's three ``delete*BreachedSegments``).

Each rule deletes a prefix of the log's inactive segments, oldest first, stopping at the first
segment the rule keeps, so a log never gets holes:

- log start offset (always, whatever ``cleanup.policy``): a segment whose successor starts at or
  before the log start offset holds nothing readable (DeleteRecords moved the start past it);
- ``retention.ms`` (with ``delete`` in ``cleanup.policy``, -1 disables): the segment's largest
  record timestamp (its file mtime when it has none) is older than now - retention.ms;
- ``retention.bytes`` (same, -1 disables): deleting the segment keeps the log at or above
  retention.bytes.

The active segment is never deleted; it rolls by ``segment.ms``/``segment.bytes`` first. Nor is
a segment whose successor starts past the high watermark the broker set
(``SegmentLog.high_watermark``, Kafka's ``deletableSegments``): its records may still be
truncated away, and the log start must not pass the high watermark.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from .log import SegmentLog
from .segment import LogSegment


def _log_start_breached(log: SegmentLog) -> list[LogSegment]:
    segs = log.segments
    out = []
    for seg, successor in itertools.pairwise(segs):
        if successor.base_offset > log.log_start_offset:
            break
        out.append(seg)
    return out


def _time_breached(log: SegmentLog, now_ms: int) -> list[LogSegment]:
    retention_ms = log.config.retention_ms
    out: list[LogSegment] = []
    if retention_ms < 0:
        return out
    for seg in log.segments[:-1]:
        if now_ms - seg.largest_timestamp() <= retention_ms:
            break
        out.append(seg)
    return out


def _size_breached(log: SegmentLog) -> list[LogSegment]:
    retention_bytes = log.config.retention_bytes
    out: list[LogSegment] = []
    if retention_bytes < 0:
        return out
    excess = log.size_in_bytes - retention_bytes
    for seg in log.segments[:-1]:
        if excess - seg.size < 0:
            break
        excess -= seg.size
        out.append(seg)
    return out


def _below_high_watermark(log: SegmentLog, prefix: list[LogSegment]) -> list[LogSegment]:
    """The part of ``prefix`` (the log's first segments, never the active one) whose every
    successor starts at or below the high watermark."""
    hw = log.high_watermark
    if hw is None:
        return prefix
    segs = log.segments
    n = 0
    while n < len(prefix) and segs[n + 1].base_offset <= hw:
        n += 1
    return prefix[:n]


def breached_segments(log: SegmentLog, now_ms: int) -> Iterator[tuple[list[LogSegment], str]]:
    """(segments, reason) to delete, rule by rule; re-evaluated after each deletion."""
    if log.config.delete:
        older = f"older than retention.ms={log.config.retention_ms}"
        yield _below_high_watermark(log, _time_breached(log, now_ms)), older
        above = f"log above retention.bytes={log.config.retention_bytes}"
        yield _below_high_watermark(log, _size_breached(log)), above
    below = f"below the log start offset {log.log_start_offset}"
    yield _below_high_watermark(log, _log_start_breached(log)), below


def apply_retention(log: SegmentLog, now_ms: int) -> int:
    """Delete every breached segment of ``log``; returns the bytes freed."""
    freed = 0
    for segments, reason in breached_segments(log, now_ms):
        if segments and not log.closed:
            freed += log.delete_segments(segments, reason)
    return freed
