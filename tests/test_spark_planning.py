"""Unit tests of the Spark connector's planning: offsets JSON, rate limits, splitting, data loss,
offset bounds and the stream reader's admission control, against an in-memory cluster view."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from odradek.plugins.spark.offsets import (
    DataLossError,
    OffsetRange,
    decode_offsets,
    encode_offsets,
    plan_ranges,
    rate_limit,
    split_ranges,
)
from odradek.plugins.spark.options import (
    GlobalTimestamp,
    SpecificOffsets,
    Subscription,
    TopicPartition,
    parse_source_options,
)
from odradek.plugins.spark.planning import resolve_bound
from odradek.plugins.spark.reader import OdradekBatchReader, OdradekStreamReader, OffsetRangePartition


class MemoryView:
    """A cluster as dicts: log start and end offsets per partition, and record timestamps."""

    def __init__(self, start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]) -> None:
        self.start = dict(start)
        self.end = dict(end)
        self.stamps: dict[TopicPartition, list[int]] = {}

    def partitions(self, subscription: Subscription) -> list[TopicPartition]:
        if subscription.kind == "assign":
            return sorted(subscription.assigned)
        if subscription.kind == "subscribe":
            return sorted(tp for tp in self.end if tp[0] in subscription.topics)
        assert subscription.pattern is not None
        return sorted(tp for tp in self.end if re.fullmatch(subscription.pattern, tp[0]))

    def earliest_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.start[tp] for tp in tps}

    def latest_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.end[tp] for tp in tps}

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        out: dict[TopicPartition, int | None] = {}
        for tp, ts in timestamps.items():
            out[tp] = next((i for i, s in enumerate(self.stamps.get(tp, [])) if s >= ts), None)
        return out


def test_checkpoint_json_round_trip_is_sorted() -> None:
    offsets = {("b", 10): 3, ("a", 2): 7, ("b", 9): 1}
    encoded = encode_offsets(offsets)
    assert list(encoded) == ["a", "b"]
    assert list(encoded["b"]) == ["9", "10"]
    assert decode_offsets(encoded) == offsets


def test_rate_limit_is_proportional_and_never_exceeds_the_limit() -> None:
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 100}
    latest = {("t", 0): 300, ("t", 1): 100, ("t", 2): 100}
    end = rate_limit(start, latest, 100)
    assert end == {("t", 0): 75, ("t", 1): 25, ("t", 2): 100}
    assert rate_limit(start, latest, 1000) == latest


@given(
    st.lists(st.tuples(st.integers(0, 50), st.integers(0, 500)), min_size=1, max_size=8),
    st.integers(1, 400),
)
def test_rate_limit_bounds(parts: list[tuple[int, int]], limit: int) -> None:
    start = {("t", i): s for i, (s, _) in enumerate(parts)}
    latest = {("t", i): s + n for i, (s, n) in enumerate(parts)}
    end = rate_limit(start, latest, limit)
    admitted = sum(end[tp] - start[tp] for tp in start)
    backlog = sum(latest[tp] - start[tp] for tp in start)
    assert admitted == min(limit, backlog)
    assert all(start[tp] <= end[tp] <= latest[tp] for tp in start)


def test_split_ranges_by_min_partitions_and_max_records() -> None:
    ranges = [OffsetRange("t", 0, 0, 90), OffsetRange("t", 1, 0, 10), OffsetRange("t", 2, 5, 5)]
    assert split_ranges(ranges) == ranges[:2]
    split = split_ranges(ranges, min_partitions=10)
    assert sum(r.size for r in split) == 100
    assert len([r for r in split if r.partition == 0]) == 9
    assert len([r for r in split if r.partition == 1]) == 1
    capped = split_ranges(ranges, max_records_per_partition=40)
    assert [(r.partition, r.from_offset, r.until_offset) for r in capped] == [
        (0, 0, 30),
        (0, 30, 60),
        (0, 60, 90),
        (1, 0, 10),
    ]


def test_plan_ranges_data_loss_rules() -> None:
    start = {("t", 0): 5, ("t", 1): 8, ("gone", 0): 3}
    end = {("t", 0): 20, ("t", 1): 4, ("t", 2): 7}
    earliest = {("t", 0): 10, ("t", 1): 0, ("t", 2): 0}
    with pytest.raises(DataLossError, match="gone-0 are gone.*failOnDataLoss"):
        plan_ranges(start, end, earliest=earliest, fail_on_data_loss=True)
    ranges = plan_ranges(start, end, earliest=earliest, fail_on_data_loss=False)
    # t-0 skips to the log start, t-1 went backwards and is skipped, t-2 is new and read from 0
    assert ranges == [OffsetRange("t", 0, 10, 20), OffsetRange("t", 2, 0, 7)]
    with pytest.raises(DataLossError, match="log start offset moved to 10"):
        plan_ranges({("t", 0): 5}, {("t", 0): 20}, earliest=earliest, fail_on_data_loss=True)
    with pytest.raises(DataLossError, match="Added partition t-2 starts from 3"):
        plan_ranges({}, {("t", 2): 9}, earliest={("t", 2): 3}, fail_on_data_loss=True)


def test_resolve_bounds() -> None:
    view = MemoryView({("t", 0): 2, ("t", 1): 0}, {("t", 0): 10, ("t", 1): 4})
    view.stamps = {("t", 0): [0, 0, 100, 200, 300], ("t", 1): [50, 60]}
    tps = [("t", 0), ("t", 1)]
    assert resolve_bound(view, SpecificOffsets({("t", 0): -2, ("t", 1): -1}), tps, starting=True) == {
        ("t", 0): 2,
        ("t", 1): 4,
    }
    with pytest.raises(ValueError, match=r"'startingOffsets' must name every partition.*t-1"):
        resolve_bound(view, SpecificOffsets({("t", 0): 3}), tps, starting=True)
    with pytest.raises(ValueError, match="startingOffsetsByTimestampStrategy"):
        resolve_bound(view, GlobalTimestamp(150), tps, starting=True)
    latest = resolve_bound(view, GlobalTimestamp(150), tps, starting=True, timestamp_strategy="latest")
    assert latest == {("t", 0): 3, ("t", 1): 4}
    assert resolve_bound(view, GlobalTimestamp(150), tps, starting=False) == {("t", 0): 3, ("t", 1): 4}


def opts(streaming: bool = True, **extra: str):
    return parse_source_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t", **extra}, streaming=streaming)


def test_batch_reader_plans_ranges() -> None:
    view = MemoryView({("t", 0): 0, ("t", 1): 0}, {("t", 0): 10, ("t", 1): 0})
    assert OdradekBatchReader(opts(False)).plan(view) == [OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 0, 0)]
    bad = OdradekBatchReader(opts(False, startingOffsets='{"t":{"0":8,"1":0}}', endingOffsets='{"t":{"0":5,"1":0}}'))
    with pytest.raises(ValueError, match="starting offset 8 of t-0 is after its ending offset 5"):
        bad.plan(view)


def test_stream_reader_initial_offset_is_resolved_once() -> None:
    view = MemoryView({("t", 0): 0}, {("t", 0): 5})
    reader = OdradekStreamReader(opts(), view=view)
    assert reader.initialOffset() == {"t": {"0": 5}}
    view.end[("t", 0)] = 9
    assert reader.initialOffset() == {"t": {"0": 5}}


def test_stream_reader_read_limits_and_new_partitions() -> None:
    view = MemoryView({("t", 0): 0, ("t", 1): 0}, {("t", 0): 60, ("t", 1): 40})
    reader = OdradekStreamReader(opts(startingOffsets="earliest", maxOffsetsPerTrigger="10"), view=view)
    start = reader.initialOffset()
    assert reader.getDefaultReadLimit() == ReadMaxRows(10)
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert end == {"t": {"0": 6, "1": 4}}
    assert reader.latestOffset(start, ReadAllAvailable()) == {"t": {"0": 60, "1": 40}}
    # a partition added while running is read from its earliest offset
    view.start[("t", 2)] = 0
    view.end[("t", 2)] = 100
    end = reader.latestOffset(end, ReadMaxRows(20))
    assert end == {"t": {"0": 12, "1": 8, "2": 10}}  # 20 split over backlogs 54, 36, 100
    parts = reader.partitions({"t": {"0": 6, "1": 4}}, end)
    assert all(isinstance(p, OffsetRangePartition) for p in parts)
    assert [p.offset_range for p in parts] == [  # type: ignore[attr-defined]
        OffsetRange("t", 0, 6, 12),
        OffsetRange("t", 1, 4, 8),
        OffsetRange("t", 2, 0, 10),
    ]
    assert reader.partitions(end, end) == []


def test_stream_reader_min_rows_waits_until_max_trigger_delay() -> None:
    view = MemoryView({("t", 0): 0}, {("t", 0): 5})
    reader = OdradekStreamReader(
        opts(startingOffsets="earliest", minOffsetsPerTrigger="10", maxTriggerDelay="1h"), view=view
    )
    start = reader.initialOffset()
    assert reader.getDefaultReadLimit() == ReadMinRows(10)
    assert reader.latestOffset(start, ReadMinRows(10)) == start  # 5 < 10 and the delay has not passed
    view.end[("t", 0)] = 12
    assert reader.latestOffset(start, ReadMinRows(10)) == {"t": {"0": 12}}
    impatient = OdradekStreamReader(
        opts(startingOffsets="earliest", minOffsetsPerTrigger="100", maxTriggerDelay="0ms"), view=view
    )
    assert impatient.latestOffset(impatient.initialOffset(), ReadMinRows(100)) == {"t": {"0": 12}}


def test_stream_reader_available_now_stops_at_the_target() -> None:
    view = MemoryView({("t", 0): 0}, {("t", 0): 25})
    reader = OdradekStreamReader(opts(startingOffsets="earliest", maxOffsetsPerTrigger="10"), view=view)
    offset = reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    view.end[("t", 0)] = 1000  # arrives after the trigger: not part of this run
    seen = []
    while True:
        end = reader.latestOffset(offset, reader.getDefaultReadLimit())
        if end == offset:
            break
        seen.append(end["t"]["0"])
        offset = end
    assert seen == [10, 20, 25]


def test_stream_reader_data_loss_in_partitions() -> None:
    view = MemoryView({("t", 0): 50}, {("t", 0): 80})
    strict = OdradekStreamReader(opts(), view=view)
    with pytest.raises(DataLossError, match="failOnDataLoss"):
        strict.partitions({"t": {"0": 10}}, {"t": {"0": 80}})
    lenient = OdradekStreamReader(opts(failOnDataLoss="false"), view=view)
    parts = lenient.partitions({"t": {"0": 10}}, {"t": {"0": 80}})
    assert [p.offset_range for p in parts] == [OffsetRange("t", 0, 50, 80)]  # type: ignore[attr-defined]
