"""What a consumer reads: its subscription or manual assignment, and a position per partition.

Kafka's ``SubscriptionState``. A consumer either subscribes (topics or a regex; the group assigns
partitions) or assigns partitions itself; each assigned partition has a *position* (the next
offset to return), possibly unknown until it is initialised from the committed offset or reset by
``auto.offset.reset``. ``assignment_id`` changes whenever the assignment changes, so fetch
responses that were in flight for an older assignment can be recognised and dropped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import OdradekError
from ..interfaces import TopicPartition

EARLIEST = "earliest"
LATEST = "latest"
#: ``auto.offset.reset=none``: a partition without a position stays so until the user seeks
NONE = "none"


class SubscriptionError(OdradekError):
    """subscribe() and assign() mixed, or a partition that is not assigned was named."""


@dataclass(slots=True)
class PartitionState:
    """One assigned partition's fetch state."""

    position: int | None = None
    paused: bool = False
    #: pending reset: EARLIEST, LATEST, or a timestamp (ms) to look up
    reset: str | int | None = None
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    leader_epoch: int = -1
    #: the leader epoch of the last record consumed (Java's ``FetchPosition.offsetEpoch``; -1:
    #: unknown, after a seek or a reset): sent as a Fetch's ``last_fetched_epoch`` (v12+) so the
    #: leader can say where its log diverged from what this consumer read (KIP-320)
    offset_epoch: int = -1
    #: the leader's log diverged before the position and ``auto.offset.reset=none``: the first
    #: offset known to diverge and its epoch; not fetched, and every poll() raises, until a seek
    truncation: tuple[int, int] | None = None
    #: position is waiting for the committed offset (group members only)
    awaiting_committed: bool = False


class SubscriptionState:
    """The consumer's subscription, assignment and positions (trio thread only)."""

    def __init__(self, default_reset: str) -> None:
        self.default_reset = default_reset
        self.topics: set[str] = set()
        self.pattern: re.Pattern[str] | None = None
        self.user_assigned = False
        self.assignment: dict[TopicPartition, PartitionState] = {}
        self.assignment_id = 0

    # -- subscription ----------------------------------------------------------------------------
    @property
    def subscribed(self) -> bool:
        return bool(self.topics) or self.pattern is not None

    def subscribe(self, topics: Iterable[str] | None = None, pattern: str | re.Pattern[str] | None = None) -> None:
        if self.user_assigned:
            raise SubscriptionError("subscribe() after assign(): call unsubscribe() first")
        if pattern is not None:
            self.pattern = re.compile(pattern) if isinstance(pattern, str) else pattern
            self.topics = set()
        else:
            self.pattern = None
            self.topics = set(topics or ())

    def matches(self, topic: str) -> bool:
        return topic in self.topics or (self.pattern is not None and self.pattern.fullmatch(topic) is not None)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        if self.subscribed:
            raise SubscriptionError("assign() after subscribe(): call unsubscribe() first")
        self.user_assigned = True
        self.set_assignment(partitions)

    def unsubscribe(self) -> None:
        self.topics = set()
        self.pattern = None
        self.user_assigned = False
        self.set_assignment(())

    # -- assignment ------------------------------------------------------------------------------
    def set_assignment(self, partitions: Iterable[TopicPartition]) -> None:
        """Replace the assignment; partitions kept keep their position and pause state."""
        old = self.assignment
        self.assignment = {tp: old.get(tp) or PartitionState() for tp in partitions}
        self.assignment_id += 1

    def add(self, partitions: Iterable[TopicPartition]) -> None:
        """Add partitions (cooperative rebalance)."""
        for tp in partitions:
            self.assignment.setdefault(tp, PartitionState())
        self.assignment_id += 1

    def remove(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self.assignment.pop(tp, None)
        self.assignment_id += 1

    def state(self, tp: TopicPartition) -> PartitionState:
        st = self.assignment.get(tp)
        if st is None:
            raise SubscriptionError(f"partition {tp} is not assigned to this consumer")
        return st

    # -- positions -------------------------------------------------------------------------------
    def seek(self, tp: TopicPartition, offset: int) -> None:
        st = self.state(tp)
        st.position = offset
        st.offset_epoch = -1
        st.truncation = None
        st.reset = None
        st.awaiting_committed = False

    def seek_validated(self, tp: TopicPartition, offset: int, epoch: int) -> None:
        """Move to ``offset`` whose leader epoch is known (a truncation's diverging epoch)."""
        self.seek(tp, offset)
        self.state(tp).offset_epoch = epoch

    def request_reset(self, tp: TopicPartition, strategy: str | int | None = None) -> None:
        st = self.state(tp)
        st.position = None
        st.offset_epoch = -1
        st.truncation = None
        st.reset = strategy if strategy is not None else self.default_reset
        st.awaiting_committed = False

    def fetchable(self) -> list[TopicPartition]:
        """Assigned, not paused, with a known position (and no truncation waiting for a seek)."""
        return [
            tp
            for tp, st in self.assignment.items()
            if not st.paused and st.position is not None and st.truncation is None
        ]

    def truncations(self) -> dict[TopicPartition, tuple[int, int]]:
        """Partitions whose log was truncated before their position, with no reset policy."""
        return {tp: st.truncation for tp, st in self.assignment.items() if st.truncation is not None}

    def needing_reset(self) -> dict[TopicPartition, str | int]:
        """Partitions whose position the fetcher looks up (earliest, latest or a timestamp)."""
        return {
            tp: st.reset
            for tp, st in self.assignment.items()
            if st.position is None and st.reset is not None and st.reset != NONE
        }

    def missing_offsets(self) -> list[TopicPartition]:
        """Partitions without a position and with no reset strategy (``auto.offset.reset=none``):
        they stay so, and every poll() says so, until the user seeks them."""
        return [tp for tp, st in self.assignment.items() if st.position is None and st.reset == NONE]

    def needing_committed(self) -> list[TopicPartition]:
        return [tp for tp, st in self.assignment.items() if st.position is None and st.awaiting_committed]

    def without_position(self) -> list[TopicPartition]:
        return [tp for tp, st in self.assignment.items() if st.position is None]

    def positions(self) -> dict[TopicPartition, int]:
        """Known positions (what a commit of "everything consumed" writes)."""
        return {tp: st.position for tp, st in self.assignment.items() if st.position is not None}
