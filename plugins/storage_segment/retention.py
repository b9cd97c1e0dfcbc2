"""Which whole segments retention may delete (Kafka's three ``delete*BreachedSegments``).

Each rule deletes a prefix of the log's segments, oldest first, stopping at the first segment the
rule keeps, so a log never gets holes:

- log start offset (always, whatever ``cleanup.policy``): a segment whose successor starts at or
  before the log start offset holds nothing readable (DeleteRecords moved the start past it);
- ``retention.ms`` (with ``delete`` in ``cleanup.policy``, -1 disables): the segment's largest
  record timestamp (its file mtime when it has none) is older than now - retention.ms;
- ``retention.bytes`` (same, -1 disables): deleting the segment keeps the log at or above
  retention.bytes.

The time and size rules consider the active segment too when it holds records, as Kafka's
``deletableSegments`` does: when it is breached, retention first rolls a new empty active segment
at the log end (Kafka's ``deleteSegments``), so the old one is deleted as an inactive segment and
appends go on at the same offset. Without it, the records of a topic that stopped receiving
writes would outlive ``retention.ms`` until ``segment.ms`` (7 days by default) rolled them. An
empty active segment is never deleted, and no segment whose successor (for the active one: the
log end) starts past the high watermark the broker set (``SegmentLog.high_watermark``): its
records may still be truncated away, and the log start must not pass the high watermark.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator, Sequence

from odradek.errors import KafkaStorageError

from .log import SegmentLog
from .segment import LogSegment

logger = logging.getLogger(__name__)


def _log_start_breached(log: SegmentLog) -> list[LogSegment]:
    segs = log.segments
    out = []
    for seg, successor in itertools.pairwise(segs):
        if successor.base_offset > log.log_start_offset:
            break
        out.append(seg)
    return out


def _candidates(log: SegmentLog) -> Sequence[LogSegment]:
    """The segments the time and size rules may take: all of them, but an empty active one."""
    segs = log.segments
    return segs if segs[-1].size > 0 else segs[:-1]


def _time_breached(log: SegmentLog, now_ms: int) -> list[LogSegment]:
    retention_ms = log.config.retention_ms if log.remote_copied_end is None else log.config.local_retention_ms
    out: list[LogSegment] = []
    if retention_ms < 0:
        return out
    for seg in _candidates(log):
        if now_ms - seg.largest_timestamp() <= retention_ms:
            break
        out.append(seg)
    return out


def _size_breached(log: SegmentLog) -> list[LogSegment]:
    retention_bytes = log.config.retention_bytes if log.remote_copied_end is None else log.config.local_retention_bytes
    out: list[LogSegment] = []
    if retention_bytes < 0:
        return out
    excess = log.size_in_bytes - retention_bytes
    for seg in _candidates(log):
        if excess - seg.size < 0:
            break
        excess -= seg.size
        out.append(seg)
    return out


def _below_high_watermark(log: SegmentLog, prefix: list[LogSegment]) -> list[LogSegment]:
    """The part of ``prefix`` (the log's first segments) whose every successor starts at or
    below the high watermark; the active segment's upper bound is the log end. A log whose
    high watermark nobody set (the engine used without a broker) keeps its active segment."""
    hw = log.high_watermark
    segs = log.segments
    if hw is None:  # no broker set one: every inactive segment counts as committed, the active not
        return prefix[: len(segs) - 1]
    n = 0
    while n < len(prefix):
        upper = segs[n + 1].base_offset if n + 1 < len(segs) else log.log_end_offset
        if upper > hw:
            break
        n += 1
    return prefix[:n]


def _copied_to_remote(log: SegmentLog, prefix: list[LogSegment]) -> list[LogSegment]:
    """Tiered storage: the part of ``prefix`` that remote storage holds (every successor starts
    at or below ``remote_copied_end``), so local retention never deletes a record that is not
    yet copied. A log that is not tiered keeps ``prefix``."""
    copied = log.remote_copied_end
    if copied is None:
        return prefix
    segs = log.segments
    n = 0
    while n < len(prefix) and n + 1 < len(segs) and segs[n + 1].base_offset <= copied:
        n += 1
    return prefix[:n]


def breached_segments(log: SegmentLog, now_ms: int) -> Iterator[tuple[list[LogSegment], str]]:
    """(segments, reason) to delete, rule by rule; re-evaluated after each deletion. A tiered
    log (``remote_copied_end`` set) applies local.retention.ms/bytes to what remote storage holds."""
    if log.config.delete:
        tiered = log.remote_copied_end is not None
        ms_key, bytes_key = (
            ("local.retention.ms", "local.retention.bytes") if tiered else ("retention.ms", "retention.bytes")
        )
        ms = log.config.local_retention_ms if tiered else log.config.retention_ms
        size = log.config.local_retention_bytes if tiered else log.config.retention_bytes
        older = f"older than {ms_key}={ms}"
        yield _copied_to_remote(log, _below_high_watermark(log, _time_breached(log, now_ms))), older
        above = f"log above {bytes_key}={size}"
        yield _copied_to_remote(log, _below_high_watermark(log, _size_breached(log))), above
    below = f"below the log start offset {log.log_start_offset}"
    yield _below_high_watermark(log, _log_start_breached(log)), below


def apply_retention(log: SegmentLog, now_ms: int) -> int:
    """Delete every breached segment of ``log``; returns the bytes freed."""
    freed = 0
    for segments, reason in breached_segments(log, now_ms):
        if not segments or log.closed:
            continue
        if segments[-1] is log.active_segment:
            try:
                log.roll_for_deletion()
            except KafkaStorageError as exc:  # no room for a new segment: delete the others now
                logger.warning("%s: retention keeps the active segment: %s", log.topic_partition, exc)
                segments = segments[:-1]
        freed += log.delete_segments(segments, reason)
    return freed
