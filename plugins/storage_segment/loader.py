"""Loading and recovering one partition directory at start-up (Kafka's ``LogLoader``).

Order of work, each step safe to repeat if the process dies during it:

1. leftovers of interrupted work go: ``*.cleaned`` and ``*.tmp`` (never committed), ``*.deleted``
   (already out of the log), index ``*.swap`` files (indexes are rebuilt);
2. a ``*.log.swap`` is a cleaned segment whose swap was committed but not finished: the old
   segments it overlaps are deleted and it takes its final name (its indexes are rebuilt);
3. segments from the one holding the recovery point onward (the unflushed tail: none after a
   clean shutdown) are verified batch by batch and get fresh indexes; the first bad batch is a
   torn write, so it and everything after it, in this and later segments, is cut (logged);
4. a segment below it holds fsynced data and is trusted unless its index file is missing or
   fails the cheap sanity checks, its log does not frame from the last index entry to the end
   of the file (:func:`_scan_tail`), or its time index lacks entries the batches read there
   show it must have (:func:`time_index_sanity_error`); such a segment is recovered on its own
   (Kafka's ``loadSegmentFiles``): a bad batch cuts that segment's tail only (logged at ERROR with the
   offsets lost), the later segments stay and the log has an offset gap, which reads cross.
"""

from __future__ import annotations

import bisect
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from odradek.config import TopicConfig
from odradek.errors import CorruptMessage
from odradek.interfaces import TopicPartition

from .log import SegmentLog
from .scan import scan_headers
from .segment import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    SegmentContext,
    preallocate_bytes,
)

log = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
_SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)


def parse_partition_dir(name: str) -> TopicPartition | None:
    """``<topic>-<partition>`` -> TopicPartition; None for anything else (``-delete`` dirs ...)."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit() or name.startswith("."):
        return None
    return TopicPartition(topic, int(partition))


def _base_of(name: str, suffix: str) -> int | None:
    stem = name[: -len(suffix)]
    return int(stem) if len(stem) == 20 and stem.isdigit() else None


def _segment(directory: Path, base: int, ctx: SegmentContext, config: TopicConfig, size: int) -> LogSegment:
    return LogSegment(
        directory,
        base,
        ctx,
        size=size,
        index_bytes=config.segment_index_bytes,
        index_interval=config.index_interval_bytes,
        writable=False,
    )


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def _complete_swaps(directory: Path, names: list[str], bases: list[int]) -> set[int]:
    """Finish interrupted cleaner swaps; returns the base offsets of the swapped-in segments."""
    swapped: set[int] = set()
    for name in sorted(names):
        if not name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
            continue
        base = _base_of(name[: -len(SWAP_SUFFIX)], LOG_SUFFIX)
        if base is None:
            continue
        swap = directory / name
        fd = os.open(swap, os.O_RDONLY | os.O_CLOEXEC)
        try:
            nxt = base
            for _, h in scan_headers(fd, 0, os.fstat(fd).st_size):
                nxt = h.next_offset
        except Exception:  # a swap file is fsynced before it is named .swap; be safe anyway
            nxt = base + 1
        finally:
            os.close(fd)
        for old in [b for b in bases if base <= b < max(nxt, base + 1)]:
            for suffix in _SEGMENT_SUFFIXES:
                _remove(directory / (f"{old:020d}" + suffix))
            bases.remove(old)
            log.info("%s: removed segment %d replaced by an interrupted cleaner swap", directory.name, old)
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            _remove(directory / (f"{base:020d}" + suffix))
        os.replace(swap, directory / (f"{base:020d}" + LOG_SUFFIX))
        bisect.insort(bases, base)
        swapped.add(base)
    return swapped


@dataclass
class _TailScan:
    """What the cheap framing check saw from the last offset-index entry to the end of the log."""

    problem: str | None = None
    #: max timestamp of the batch at the last offset-index entry (-1: no entry, or no timestamp)
    indexed_timestamp: int = -1
    #: max timestamp of every batch scanned (all of them when the offset index is empty)
    scanned_timestamp: int = -1
    last_offset: int = -1


def _scan_tail(seg: LogSegment) -> _TailScan:
    """Whether the log file agrees with its offset index (cheap: only the batch headers after
    the last index entry are read). The index alone cannot show a log cut short after its last
    entry, or a last entry that no longer starts its batch: the batches from that entry must
    frame the file exactly, the first of them ending at the entry's offset."""
    out = _TailScan()
    if seg.size == 0:
        return out
    entry_offset, position = seg.offset_index.last_entry()
    indexed = seg.offset_index.entries > 0
    end = position
    try:
        for pos, h in scan_headers(seg.log.fd(), position, seg.size):
            if pos == position and indexed:
                if h.last_offset != entry_offset:
                    out.problem = f"the last index entry names offset {entry_offset}, its batch ends at {h.last_offset}"
                    return out
                out.indexed_timestamp = h.max_timestamp
            out.scanned_timestamp = max(out.scanned_timestamp, h.max_timestamp)
            out.last_offset = h.last_offset
            end = pos + h.size
    except CorruptMessage as exc:
        out.problem = str(exc)
        return out
    if end != seg.size:
        out.problem = f"the log file has {seg.size} bytes, its batches end at {end}"
    return out


def time_index_sanity_error(seg: LogSegment, tail: _TailScan, *, active: bool) -> str | None:
    """Why the time index cannot be complete, or None. Its own checks pass for a file that lost
    its last entries (an empty file, a cut at an entry boundary), yet the segment's largest
    timestamp -- what time retention and ListOffsets skip segments by -- comes from its last
    entry: a lost entry let retention delete records younger than retention.ms. Every writer
    (append, recovery, the cleaner) adds a time entry of the largest timestamp so far with each
    offset-index entry, and a rolled segment ends with an entry of its largest timestamp, so
    the last entry must cover the batch at the last offset-index entry and, once the segment
    rolled, every batch after it. A full time index may have missed entries: not checked."""
    index = seg.time_index
    if index.is_full:
        return None
    last = index.last_entry()
    last_ts = last[0] if last is not None else -1
    needed = tail.indexed_timestamp if active else max(tail.indexed_timestamp, tail.scanned_timestamp)
    if needed > last_ts:
        return f"its last entry has timestamp {last_ts}, below a batch's {needed} it must cover"
    if last is not None and last[1] > tail.last_offset:
        return f"its last entry names offset {last[1]}, past the segment's last offset {tail.last_offset}"
    return None


def segment_sanity_error(seg: LogSegment, *, active: bool) -> str | None:
    """The cheap checks a segment below the recovery point must pass to be trusted, or why not;
    ``active``: the log's last segment (the one written when the log closed)."""
    if (problem := seg.offset_index.sanity_error(seg.size)) is not None:
        return f"offset index: {problem}"
    if (problem := seg.time_index.sanity_error(seg.size)) is not None:
        return f"time index: {problem}"
    tail = _scan_tail(seg)
    if tail.problem is not None:
        return f"log: {tail.problem}"
    if (problem := time_index_sanity_error(seg, tail, active=active)) is not None:
        return f"time index: {problem}"
    return None


def _framed_end(seg: LogSegment) -> int | None:
    """One past the segment's last offset as its batch headers frame it from the last index
    entry (cheap, changes nothing), or None when the framing fails: the segment is recovered
    later, and only then is its end known."""
    tail = _scan_tail(seg)
    return tail.last_offset + 1 if tail.problem is None and tail.last_offset >= 0 else None


def _without_stale_empty_segments(
    tp: TopicPartition, segments: list[LogSegment], end_of: Callable[[LogSegment], int | None]
) -> list[LogSegment]:
    """Drop (and delete) empty segments whose base offset the segment before them already
    reaches (``end_of``: one past its last offset, None when not known yet): files of a roll
    that failed half-way (a crash between creating them and removing them). Kept, such a file
    ended the log at its base, or as a middle segment made reads skip the offsets above its
    base that the previous segment holds. Runs before recovery with the framing of segments
    that pass it (the one before such files was the active one, and is checked as such), and
    after recovery with the verified ends: a segment with a torn tail must not be asked for
    its end before recovery -- that rebuilt it on the spot, out of the recovery's sight, which
    then kept the later segments that a cut tail must take with it."""
    kept: list[LogSegment] = []
    for seg in segments:
        if kept and seg.size == 0 and (end := end_of(kept[-1])) is not None and end > seg.base_offset:
            log.warning(
                "%s: deleting empty segment %d left by a failed roll: segment %d holds offsets up to %d",
                tp, seg.base_offset, kept[-1].base_offset, end - 1,
            )  # fmt: skip
            seg.close()
            seg.remove_files()
            continue
        kept.append(seg)
    return kept


def load_log(
    directory: Path,
    tp: TopicPartition,
    config: TopicConfig,
    ctx: SegmentContext,
    *,
    recovery_point: int | None,
    log_start_offset: int | None,
    clean_shutdown: bool,
    retire: Callable[[list[Path]], None],
    on_log_start_change: Callable[[SegmentLog], None],
) -> SegmentLog:
    """Open (and if needed recover) the log in ``directory``; runs on a worker thread at start."""
    names = os.listdir(directory)
    for name in names:
        if name.endswith((CLEANED_SUFFIX, DELETED_SUFFIX, ".tmp")) or (
            name.endswith(SWAP_SUFFIX) and not name.endswith(LOG_SUFFIX + SWAP_SUFFIX)
        ):
            _remove(directory / name)
    bases = sorted(b for n in names if n.endswith(LOG_SUFFIX) and (b := _base_of(n, LOG_SUFFIX)) is not None)
    must_recover = _complete_swaps(directory, names, bases)
    present = set(bases)
    for name in names:  # indexes without a log file
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            if name.endswith(suffix) and (b := _base_of(name, suffix)) is not None and b not in present:
                _remove(directory / name)

    segments = _without_stale_empty_segments(
        tp,
        [_segment(directory, b, ctx, config, (directory / f"{b:020d}{LOG_SUFFIX}").stat().st_size) for b in bases],
        _framed_end,
    )
    bases = [seg.base_offset for seg in segments]
    # the unflushed tail (Kafka's recoverLog): after a crash, the segment holding the recovery
    # point and every later one; a bad batch there is a torn write, nothing valid follows it
    tail: set[int] = set()
    if not clean_shutdown:
        rp = recovery_point or 0
        tail = set(bases[max(bisect.bisect_right(bases, rp) - 1, 0) :])
    # below it (Kafka's loadSegmentFiles): data that was fsynced, trusted unless its index or
    # framing fails the cheap checks; such a segment is recovered on its own and a cut there
    # takes nothing else with it (later segments hold fsynced data too)
    alone = must_recover - tail
    for seg in segments:
        if seg.base_offset in tail or seg.base_offset in alone:
            continue
        why = segment_sanity_error(seg, active=seg is segments[-1])
        if why is not None:
            log.warning("%s: segment %d fails its sanity check (%s); recovering it", tp, seg.base_offset, why)
            alone.add(seg.base_offset)

    kept: list[LogSegment] = []
    recovered: list[LogSegment] = []
    for i, seg in enumerate(segments):
        if seg.base_offset in tail:
            cut, why = seg.recover()
            recovered.append(seg)
            if cut:
                dropped = segments[i + 1 :]
                log.warning(
                    "%s: recovery cut %d bytes from segment %d at offset %d (%s)%s",
                    tp,
                    cut,
                    seg.base_offset,
                    seg.next_offset,
                    why,
                    f"; deleting {len(dropped)} later segment(s)" if dropped else "",
                )
                for later in dropped:
                    later.close()
                    for path in later.paths:
                        _remove(path)
                kept.append(seg)
                break
        elif seg.base_offset in alone:
            cut, why = seg.recover()
            recovered.append(seg)
            if cut:
                following = segments[i + 1].base_offset if i + 1 < len(segments) else None
                lost = (
                    f"offsets {seg.next_offset} to {following - 1} are no longer in the log; "
                    f"the {len(segments) - i - 1} later segment(s) are kept"
                    if following is not None
                    else f"the log now ends at offset {seg.next_offset}"
                )
                where = f"after offset {seg.next_offset - 1}" if seg.next_offset > seg.base_offset else "(all of it)"
                log.error(
                    "%s: segment %d below the recovery point is damaged: cut %d bytes %s (%s); %s",
                    tp, seg.base_offset, cut, where, why, lost,
                )  # fmt: skip
        if recovered and recovered[-1] is seg and i < len(segments) - 1:
            seg.on_become_inactive()
        kept.append(seg)
    segments = _without_stale_empty_segments(tp, kept, lambda seg: seg.next_offset)

    start = log_start_offset or 0
    if not segments:
        segments = [
            LogSegment.create(
                directory,
                start,
                ctx,
                index_bytes=config.segment_index_bytes,
                index_interval=config.index_interval_bytes,
                preallocate_bytes=preallocate_bytes(config),
            )
        ]
    else:
        segments[-1].make_active()
    leo = segments[-1].next_offset
    rp = leo if clean_shutdown else min(recovery_point or 0, leo)
    result = SegmentLog(
        tp,
        directory,
        config,
        ctx,
        segments,
        log_start_offset=max(start, segments[0].base_offset),
        recovery_point=rp,
        retire=retire,
        on_log_start_change=on_log_start_change,
    )
    if start > leo:
        # DeleteRecords up to (near) the end, then a crash lost the unflushed tail: what is left
        # lies below the log start the client was told, so the log starts empty there, as in
        # Kafka's LogLoader. The checkpoint entry is trusted: it carries no topic id, and the
        # storage keeps entries of a deleted log from reaching a log created under its name
        # (SegmentLogStorage rewrites the checkpoints first), so a mismatch cannot come from here
        if leo > result.log_start_offset:
            log.warning(
                "%s: the log start offset checkpoint (%d) is past the log end offset (%d): deleting "
                "offsets %d to %d and starting the log at %d",
                tp, start, leo, result.log_start_offset, leo - 1, start,
            )  # fmt: skip
        result.truncate_fully_and_start_at(start)
    else:
        # Kafka's recoverSegment: epochs the recovered batches carry that the checkpoint lacks
        # (it is written without fsync on the append path) are assigned again
        for seg in recovered:
            for epoch, offset in seg.recovered_epoch_starts:
                result.assign_recovered_epoch(epoch, offset)
    return result
