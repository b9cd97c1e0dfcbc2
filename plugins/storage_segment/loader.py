"""Loading and recovering one partition directory at start-up (Kafka's ``LogLoader``).

Order of work, each step safe to repeat if the process dies during it:

1. leftovers of interrupted work go: ``*.cleaned`` and ``*.tmp`` (never committed), ``*.deleted``
   (already out of the log), index ``*.swap`` files (indexes are rebuilt);
2. a ``*.log.swap`` is a cleaned segment whose swap was committed but not finished: the old
   segments it overlaps are deleted and it takes its final name (its indexes are rebuilt);
3. segments from the one holding the recovery point onward (all of them after a crash, none
   after a clean shutdown) are verified batch by batch and get fresh indexes; the first bad
   batch and everything after it, in this and later segments, is cut and logged;
4. a segment whose index file is missing or fails the cheap sanity checks is recovered the same
   way, whatever the recovery point says.
"""

from __future__ import annotations

import bisect
import logging
import os
from collections.abc import Callable
from pathlib import Path

from odradek.config import TopicConfig
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

    segments = [
        _segment(directory, b, ctx, config, (directory / f"{b:020d}{LOG_SUFFIX}").stat().st_size) for b in bases
    ]
    if not clean_shutdown:
        rp = recovery_point or 0
        first = max(bisect.bisect_right(bases, rp) - 1, 0)
        must_recover |= set(bases[first:])
    for seg in segments:
        if seg.base_offset in must_recover:
            continue
        why = seg.offset_index.sanity_error(seg.size) or seg.time_index.sanity_error(seg.size)
        if why is not None:
            log.warning("%s: index of segment %d is not usable (%s); rebuilding it", tp, seg.base_offset, why)
            must_recover.add(seg.base_offset)

    kept: list[LogSegment] = []
    recovered: list[LogSegment] = []
    for i, seg in enumerate(segments):
        if seg.base_offset in must_recover:
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
            if i < len(segments) - 1:
                seg.on_become_inactive()
        kept.append(seg)
    segments = kept

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
    if start > leo:  # DeleteRecords up to the end, then a crash lost the tail: start empty there
        result.truncate_fully_and_start_at(start)
    else:
        # Kafka's recoverSegment: epochs the recovered batches carry that the checkpoint lacks
        # (it is written without fsync on the append path) are assigned again
        for seg in recovered:
            for epoch, offset in seg.recovered_epoch_starts:
                result.assign_recovered_epoch(epoch, offset)
    return result
