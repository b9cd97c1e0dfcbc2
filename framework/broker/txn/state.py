"""Transaction states and the per-transactional-id metadata the coordinator keeps (Kafka's
``TransactionState`` / ``TransactionMetadata``).

Transitions (everything else is refused)::

    Empty/CompleteCommit/CompleteAbort --AddPartitions--> Ongoing --EndTxn--> PrepareCommit|PrepareAbort
    PrepareCommit --markers written--> CompleteCommit;  PrepareAbort --markers written--> CompleteAbort
    Ongoing --timeout or re-init--> PrepareAbort (with the epoch bumped: the old producer is fenced)

The byte values are Kafka's, as stored in ``__transaction_state``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import IntEnum

from ...interfaces import TopicPartition


class TransactionState(IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def is_prepare(self) -> bool:
        return self in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)

    @property
    def kafka_name(self) -> str:
        """The name Kafka's tools show and filter by (``PrepareCommit``): ListTransactions and
        DescribeTransactions carry states as these strings."""
        return "".join(word.capitalize() for word in self.name.split("_"))

    @property
    def is_idle(self) -> bool:
        """No transaction open or ending: a new one may start."""
        return self in (TransactionState.EMPTY, TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT)


#: which states each state may move to
VALID_PREVIOUS: dict[TransactionState, frozenset[TransactionState]] = {
    TransactionState.EMPTY: frozenset(
        {TransactionState.EMPTY, TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT}
    ),
    TransactionState.ONGOING: frozenset(
        {
            TransactionState.ONGOING,
            TransactionState.EMPTY,
            TransactionState.COMPLETE_COMMIT,
            TransactionState.COMPLETE_ABORT,
        }
    ),
    TransactionState.PREPARE_COMMIT: frozenset({TransactionState.ONGOING}),
    TransactionState.PREPARE_ABORT: frozenset({TransactionState.ONGOING}),
    TransactionState.COMPLETE_COMMIT: frozenset({TransactionState.PREPARE_COMMIT}),
    TransactionState.COMPLETE_ABORT: frozenset({TransactionState.PREPARE_ABORT}),
}


@dataclass(slots=True)
class TransactionMetadata:
    """One transactional id: its producer id and epoch, timeout, state and open partitions."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TransactionState = TransactionState.EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_ms: int = -1
    last_update_ms: int = -1
    #: the producer id and epoch the current ones were bumped from when that bump was made for
    #: the producer holding them (a KIP-360 InitProducerId, or the coordinator fencing a timed-out
    #: or re-initialised transaction), else -1: a request from them is a retry or a producer
    #: recovering (KIP-588), not a zombie. Kafka's ``lastProducerId``/``lastProducerEpoch``;
    #: like Kafka's v0 log value, not persisted (a reloaded id starts without them)
    last_producer_id: int = field(default=-1, compare=False)
    last_producer_epoch: int = field(default=-1, compare=False)

    def transition(self, state: TransactionState, now_ms: int, **changes: object) -> TransactionMetadata:
        """A copy in ``state`` (checked against :data:`VALID_PREVIOUS`); the caller persists it
        before making it current, so a failed write leaves the cached state untouched."""
        if self.state not in VALID_PREVIOUS[state]:
            raise ValueError(f"{self.transactional_id}: {self.state.name} -> {state.name} is not a valid transition")
        out = replace(self, state=state, partitions=set(self.partitions), last_update_ms=now_ms)
        for name, value in changes.items():
            setattr(out, name, value)
        return out
