"""Batch and streaming readers: plan offset ranges on the driver, read them as Arrow on executors.

Spark runs ``initialOffset`` / ``latestOffset`` / ``partitions`` / ``commit`` in one long-lived
driver-side Python process, and pickles a planning-time copy of the reader to executors for
``read()``: state set on the driver never reaches ``read()``. So each :class:`OffsetRangePartition`
carries everything a task needs (the range and the validated options), and executors open clients
lazily from a per-process cache (:mod:`odradek.plugins.spark.access`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from . import access
from .offsets import OffsetRange, count_new, decode_offsets, encode_offsets, plan_ranges, rate_limit, split_ranges
from .options import SourceOptions, TopicPartition
from .planning import ClusterView, resolve_bound


class OffsetRangePartition(InputPartition):
    """One Spark task's work: offsets ``[from, until)`` of one topic-partition, plus the options."""

    def __init__(self, offset_range: OffsetRange, options: SourceOptions) -> None:
        super().__init__(offset_range)
        self.offset_range = offset_range
        self.options = options

    def __repr__(self) -> str:
        r = self.offset_range
        return f"OffsetRangePartition({r.topic}-{r.partition} [{r.from_offset}, {r.until_offset}))"


def to_input_partitions(ranges: Sequence[OffsetRange], options: SourceOptions) -> list[InputPartition]:
    split = split_ranges(
        ranges, min_partitions=options.min_partitions, max_records_per_partition=options.max_records_per_partition
    )
    return [OffsetRangePartition(r, options) for r in split]


def read_partition(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """Executor side of both readers: the partition's records as Arrow batches of the source schema."""
    if not isinstance(partition, OffsetRangePartition):
        # Spark substitutes InputPartition(None) when a batch read plans no ranges at all.
        return iter(())
    return access.read_range(partition.options, partition.offset_range)


class OdradekBatchReader(DataSourceReader):
    """``spark.read.format("odradek")``: startingOffsets (default earliest) to endingOffsets (default latest)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def plan(self, view: ClusterView) -> list[OffsetRange]:
        """The per-partition ranges of this read, before splitting into tasks."""
        opts = self.options
        tps = view.partitions(opts.subscription)
        start = resolve_bound(
            view, opts.starting, tps, starting=True, timestamp_strategy=opts.starting_timestamp_strategy
        )
        end = resolve_bound(view, opts.ending, tps, starting=False)
        for tp in tps:
            if end[tp] < start[tp]:
                raise ValueError(
                    f"The starting offset {start[tp]} of {tp[0]}-{tp[1]} is after its ending offset {end[tp]}; "
                    "check the options 'startingOffsets' / 'endingOffsets' (or their timestamp forms)"
                )
        earliest = view.earliest_offsets(tps)
        return plan_ranges(start, end, earliest=earliest, fail_on_data_loss=opts.fail_on_data_loss)

    def partitions(self) -> list[InputPartition]:
        return to_input_partitions(self.plan(access.cluster_view(self.options)), self.options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)


class OdradekStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("odradek")``: micro-batches of offset ranges with admission control.

    Offsets in the checkpoint are ``{"topic": {"partition": next_offset}}``. Partitions that appear
    while the query runs (new partitions, new topics matching subscribePattern) are read from their
    earliest offset. The source never commits offsets to the broker.
    """

    def __init__(self, options: SourceOptions, *, view: ClusterView | None = None) -> None:
        self.options = options
        self._view = view
        self._initial: dict[str, dict[str, int]] | None = None
        self._available_now: dict[TopicPartition, int] | None = None
        self._last_latest: dict[str, dict[str, int]] | None = None
        self._last_trigger = time.monotonic()

    @property
    def view(self) -> ClusterView:
        if self._view is None:
            self._view = access.cluster_view(self.options)
        return self._view

    # -- offsets --------------------------------------------------------------------------------
    def initialOffset(self) -> dict[str, Any]:
        # Spark calls this twice when a query starts: resolve (e.g. "latest") once so both agree.
        if self._initial is None:
            opts = self.options
            tps = self.view.partitions(opts.subscription)
            offsets = resolve_bound(
                self.view, opts.starting, tps, starting=True, timestamp_strategy=opts.starting_timestamp_strategy
            )
            self._initial = encode_offsets(offsets)
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the target: what exists now. Later records (and partitions) wait for the next run."""
        view = self.view
        self._available_now = view.latest_offsets(view.partitions(self.options.subscription))

    def _latest(self) -> dict[TopicPartition, int]:
        if self._available_now is not None:
            return dict(self._available_now)
        view = self.view
        return view.latest_offsets(view.partitions(self.options.subscription))

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = decode_offsets(start)
        latest = self._latest()
        self._last_latest = encode_offsets(latest)
        new = [tp for tp in latest if tp not in begin]
        base = dict(begin)
        if new:
            base.update(self.view.earliest_offsets(new))
        if isinstance(limit, ReadAllAvailable):
            end = latest
        elif isinstance(limit, ReadMaxRows):
            end = rate_limit(base, latest, limit.max_rows)
        elif isinstance(limit, ReadMinRows):
            now = time.monotonic()
            waited_ms = (now - self._last_trigger) * 1000
            waiting_for_more = count_new(base, latest) < limit.min_rows and self._available_now is None
            if waiting_for_more and waited_ms < self.options.max_trigger_delay_ms:
                return encode_offsets(begin)
            self._last_trigger = now
            cap = self.options.max_offsets_per_trigger
            end = rate_limit(base, latest, cap) if cap is not None else latest
        else:
            raise ValueError(f"read limit {limit!r} is not supported by the odradek source (rows only)")
        # A partition whose backlog is empty keeps its start offset, so "no new data" is start == end.
        return encode_offsets(end)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return self._last_latest

    # -- planning and reading ---------------------------------------------------------------------
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, until = decode_offsets(start), decode_offsets(end)
        if begin == until:
            return []
        earliest = self.view.earliest_offsets(sorted(until))
        ranges = plan_ranges(begin, until, earliest=earliest, fail_on_data_loss=self.options.fail_on_data_loss)
        return to_input_partitions(ranges, self.options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: Spark's checkpoint holds the offsets; the broker is never told (as in Spark)."""

    def stop(self) -> None:
        if self._view is not None:
            access.release_view(self.options)
            self._view = None
