"""Turning offset bounds (earliest, latest, JSON, timestamps) into concrete offsets, on the driver.

Works against :class:`ClusterView` -- the few questions planning asks a cluster (which partitions,
which offsets) -- so the rules are testable with an in-memory view and run for real through
odradek's client (:mod:`odradek.plugins.spark.access`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from .options import (
    EARLIEST,
    LATEST,
    EarliestBound,
    GlobalTimestamp,
    LatestBound,
    OffsetBound,
    SpecificOffsets,
    SpecificTimestamps,
    Subscription,
    TopicPartition,
)


class ClusterView(Protocol):
    """What planning needs to know about a cluster (answered through odradek's Admin client)."""

    def partitions(self, subscription: Subscription) -> list[TopicPartition]:
        """The partitions a subscription covers right now, sorted."""
        ...

    def earliest_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """Log start offsets."""
        ...

    def latest_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """High watermarks (the next offset to be written and visible)."""
        ...

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        """The first offset whose timestamp is >= the given one; None when no record is that new."""
        ...


def _text(tps: object) -> str:
    return "[" + ", ".join(f"{t}-{p}" for t, p in sorted(tps)) + "]"  # type: ignore[call-overload]


def _check_covers(name: str, given: Mapping[TopicPartition, int], tps: Sequence[TopicPartition]) -> None:
    if set(given) != set(tps):
        raise ValueError(
            f"Option '{name}' must name every partition the query reads, no more and no less: "
            f"specified {_text(given)}, the query reads {_text(tps)} (use -2 for earliest, -1 for latest)"
        )


def resolve_bound(
    view: ClusterView,
    bound: OffsetBound,
    tps: Sequence[TopicPartition],
    *,
    starting: bool,
    timestamp_strategy: str = "error",
) -> dict[TopicPartition, int]:
    """Concrete offsets for ``tps`` from an option's bound.

    ``starting`` picks the option names in messages and what an unmatched timestamp means: for a start
    it fails (strategy ``error``) or takes the latest offset (strategy ``latest``); for an end it is the
    latest offset, as in Spark.
    """
    prefix = "starting" if starting else "ending"
    if not tps:
        return {}
    if isinstance(bound, EarliestBound):
        return view.earliest_offsets(tps)
    if isinstance(bound, LatestBound):
        return view.latest_offsets(tps)
    if isinstance(bound, SpecificOffsets):
        _check_covers(f"{prefix}Offsets", bound.offsets, tps)
        earliest = [tp for tp in tps if bound.offsets[tp] == EARLIEST]
        latest = [tp for tp in tps if bound.offsets[tp] == LATEST]
        out = {tp: bound.offsets[tp] for tp in tps}
        if earliest:
            out.update(view.earliest_offsets(earliest))
        if latest:
            out.update(view.latest_offsets(latest))
        return out
    if isinstance(bound, GlobalTimestamp):
        stamps = {tp: bound.timestamp for tp in tps}
        option = f"{prefix}Timestamp"
    elif isinstance(bound, SpecificTimestamps):
        _check_covers(f"{prefix}OffsetsByTimestamp", bound.timestamps, tps)
        stamps = dict(bound.timestamps)
        option = f"{prefix}OffsetsByTimestamp"
    else:  # pragma: no cover - the union is closed
        raise TypeError(f"unknown offset bound {bound!r}")
    found = view.offsets_for_times(stamps)
    missing = [tp for tp in tps if found.get(tp) is None]
    out = {tp: off for tp, off in found.items() if off is not None}
    if missing:
        if starting and timestamp_strategy == "error":
            raise ValueError(
                f"Option '{option}': no record at or after the timestamp in {_text(missing)}; set "
                "'startingOffsetsByTimestampStrategy' to 'latest' to start those partitions at their latest offset"
            )
        out.update(view.latest_offsets(missing))
    return out
