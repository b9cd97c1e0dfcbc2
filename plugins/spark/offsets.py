"""Offset arithmetic for planning reads: checkpoint JSON, offset ranges, rate limits, range splitting.

Pure functions with no client and no Spark, so the planning rules are unit-tested in milliseconds.
Offsets are Kafka's "next offset to read"; a range ``[from_offset, until_offset)`` never includes its
end. The checkpoint format is Spark's Kafka source's: ``{"topic": {"0": 6, "1": 3}}``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .options import TopicPartition


class DataLossError(RuntimeError):
    """Offsets a query needs are gone (retention, deleted topic, truncation) and failOnDataLoss is true."""


DATA_LOSS_ADVICE = (
    "Some data may have been lost because they are not available in the broker any more; either the data was "
    "aged out by retention or the topic may have been deleted before all the data in the topic was processed. "
    "If you want your query to carry on in such cases, set the source option 'failOnDataLoss' to 'false'."
)


def data_loss(message: str, fail_on_data_loss: bool) -> None:
    """Raise :class:`DataLossError` (``failOnDataLoss`` true) or let the caller skip ahead (false)."""
    if fail_on_data_loss:
        raise DataLossError(f"{message}. {DATA_LOSS_ADVICE}")


# -- the checkpoint's JSON form ----------------------------------------------------------------------
def encode_offsets(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """``{("t", 0): 6}`` -> ``{"t": {"0": 6}}``, sorted so equal offsets always serialize equally
    (Spark compares offsets by their JSON text to decide whether a micro-batch has new data)."""
    out: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    return out


def decode_offsets(obj: Mapping[str, Mapping[str, int]] | None) -> dict[TopicPartition, int]:
    """The inverse of :func:`encode_offsets`; tolerant of an empty or missing offset."""
    out: dict[TopicPartition, int] = {}
    for topic, parts in (obj or {}).items():
        for partition, offset in parts.items():
            out[(topic, int(partition))] = int(offset)
    return out


# -- ranges ------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Offsets ``[from_offset, until_offset)`` of one partition, read by one Spark task."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def topic_partition(self) -> TopicPartition:
        return (self.topic, self.partition)

    @property
    def size(self) -> int:
        return max(0, self.until_offset - self.from_offset)


def rate_limit(
    start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], limit: int
) -> dict[TopicPartition, int]:
    """End offsets admitting at most ``limit`` records in total, split in proportion to each partition's
    backlog (Spark's ``maxOffsetsPerTrigger``).

    Spark rounds a share below 1 up, which can overshoot the limit; this allocates the floor of each
    share and hands the leftover records, one each, to the partitions with the largest remainders, so
    the total never exceeds ``limit`` and any limit >= 1 still makes progress.
    """
    backlog = {tp: latest[tp] - start.get(tp, latest[tp]) for tp in latest}
    positive = {tp: size for tp, size in backlog.items() if size > 0}
    total = sum(positive.values())
    if total <= limit:
        return dict(latest)
    shares = {tp: limit * size / total for tp, size in positive.items()}
    grant = {tp: min(positive[tp], math.floor(share)) for tp, share in shares.items()}
    leftover = limit - sum(grant.values())
    by_remainder = sorted(positive, key=lambda tp: (-(shares[tp] - grant[tp]), tp))
    for tp in by_remainder:
        if leftover <= 0:
            break
        if grant[tp] < positive[tp]:
            grant[tp] += 1
            leftover -= 1
    return {tp: (start[tp] + grant[tp] if tp in grant else latest[tp]) for tp in latest}


def count_new(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]) -> int:
    """Records between two offsets (partitions missing from ``start`` count from their ``end`` only)."""
    return sum(max(0, end[tp] - start[tp]) for tp in end if tp in start)


def _split(rng: OffsetRange, parts: int) -> list[OffsetRange]:
    parts = max(1, min(parts, rng.size))
    step, extra = divmod(rng.size, parts)
    out, pos = [], rng.from_offset
    for i in range(parts):
        size = step + (1 if i < extra else 0)
        out.append(OffsetRange(rng.topic, rng.partition, pos, pos + size))
        pos += size
    return out


def split_ranges(
    ranges: Iterable[OffsetRange],
    *,
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[OffsetRange]:
    """Spark tasks for a set of per-partition ranges: empty ranges dropped; one task per Kafka partition
    unless ``maxRecordsPerPartition`` caps a task's size or ``minPartitions`` asks for more tasks than
    there are partitions, in which case big ranges are cut in proportion to their share of the data."""
    out = [r for r in ranges if r.size > 0]
    if max_records_per_partition:
        out = [piece for r in out for piece in _split(r, math.ceil(r.size / max_records_per_partition))]
    if min_partitions and min_partitions > len(out):
        total = sum(r.size for r in out)
        out = [piece for r in out for piece in _split(r, max(1, round(r.size / total * min_partitions)))]
    return out


def plan_ranges(
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    *,
    earliest: Mapping[TopicPartition, int],
    fail_on_data_loss: bool,
) -> list[OffsetRange]:
    """Ranges for one micro-batch (or one batch read), applying the data-loss rules:

    - a partition in ``end`` but not ``start`` is new and is read from its earliest offset (which
      should be 0; later means records were deleted before the query saw them);
    - a partition in ``start`` but not ``end`` is gone (topic deleted);
    - ``end < start`` means the partition was recreated or truncated;
    - ``start`` below the partition's log start offset means retention deleted unread records.

    With failOnDataLoss true each raises :class:`DataLossError`; with false the range skips ahead to
    what still exists.
    """
    gone = sorted(set(start) - set(end))
    if gone:
        data_loss(f"Partitions {', '.join(f'{t}-{p}' for t, p in gone)} are gone", fail_on_data_loss)
    ranges = []
    for tp in sorted(end):
        until = end[tp]
        if tp in start:
            begin = start[tp]
        else:
            begin = earliest.get(tp, 0)
            if begin != 0:
                data_loss(f"Added partition {tp[0]}-{tp[1]} starts from {begin} instead of 0", fail_on_data_loss)
        if until < begin:
            data_loss(f"Partition {tp[0]}-{tp[1]}'s offset was changed from {begin} to {until}", fail_on_data_loss)
            continue
        log_start = earliest.get(tp)
        if log_start is not None and begin < log_start:
            data_loss(
                f"Cannot read offsets of {tp[0]}-{tp[1]} from {begin}: the log start offset moved to {log_start}",
                fail_on_data_loss,
            )
            begin = min(log_start, until)
        ranges.append(OffsetRange(tp[0], tp[1], begin, until))
    return ranges
