"""What the transaction coordinator tells operators (KIP-664, Kafka's ``kafka-transactions.sh``):
ListTransactions and DescribeTransactions over the transactional ids it has loaded.

Pure functions over :class:`~.state.TransactionMetadata`, so the filters are tested without a
broker; :class:`~.coordinator.TransactionCoordinator` adds the ownership checks (which ids this
broker coordinates, partitions still loading) and the partitions whose markers are not written yet.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

import re2

from ...errors import ErrorCode
from ...interfaces import TopicPartition
from .state import TransactionMetadata, TransactionState

#: RE2 reports a pattern it refuses to stderr unless told not to: the client gets the error instead
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False

#: Kafka's state names (``TransactionState.name``), what ListTransactions' StateFilters hold
STATE_BY_NAME: dict[str, TransactionState] = {s.kafka_name: s for s in TransactionState}


@dataclass(frozen=True, slots=True)
class TransactionListing:
    """One ListTransactions entry."""

    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class ListTransactionsResult:
    error: ErrorCode
    #: state filters the request named that are no state (Kafka lists them back, case-sensitive)
    unknown_state_filters: tuple[str, ...] = ()
    transactions: tuple[TransactionListing, ...] = ()


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """One DescribeTransactions entry. On an error the other fields keep Kafka's defaults
    (zeros and an empty state), which is what a Kafka broker sends."""

    transactional_id: str
    error: ErrorCode
    state: str = ""
    timeout_ms: int = 0
    start_time_ms: int = 0
    producer_id: int = 0
    producer_epoch: int = 0
    #: the transaction's partitions; while it is Prepare*, only those without a marker yet
    partitions: tuple[TopicPartition, ...] = ()


def id_pattern(pattern: str | None) -> re2._Regexp | None:
    """ListTransactions v2's TransactionalIdPattern (KIP-1152) compiled as Kafka compiles it, with
    RE2: matching takes time linear in the id, so no pattern a client sends can hold the broker's
    event loop (Python's ``re`` backtracks: ``(a+)+$`` takes exponential time). None for no
    filter (null or empty); ``re2.error`` for a pattern RE2 refuses (a backreference, say)."""
    if not pattern:
        return None
    return re2.compile(pattern, options=_RE2_OPTIONS)


def list_transactions(
    transactions: Iterable[TransactionMetadata],
    state_filters: Collection[str],
    producer_id_filters: Collection[int],
    duration_filter_ms: int,
    now_ms: int,
    transactional_id_pattern: str | None = None,
) -> ListTransactionsResult:
    """Kafka's ``TransactionStateManager.listTransactionStates``: ids in any of the named states
    (all when none is named), of any of the producer ids (all when none), running longer than
    ``duration_filter_ms`` (ListTransactions v1, KIP-994; < 0: no filter), whose whole id
    matches ``transactional_id_pattern`` (v2, KIP-1152; null or empty: no filter; a pattern RE2
    cannot compile is INVALID_REGULAR_EXPRESSION). Its quirk is kept: the duration is measured
    from the transaction's start time, which is -1 when none is open, so such ids pass any
    duration filter. Dead ids are being removed and never listed."""
    try:
        pattern = id_pattern(transactional_id_pattern)
    except re2.error:
        return ListTransactionsResult(ErrorCode.INVALID_REGULAR_EXPRESSION)
    unknown = tuple(dict.fromkeys(name for name in state_filters if name not in STATE_BY_NAME))
    states = {STATE_BY_NAME[name] for name in state_filters if name in STATE_BY_NAME}
    pids = set(producer_id_filters)
    listed = []
    for md in transactions:
        if md.state is TransactionState.DEAD:
            continue
        if pids and md.producer_id not in pids:
            continue
        if state_filters and md.state not in states:
            continue
        if duration_filter_ms >= 0 and now_ms - md.txn_start_ms <= duration_filter_ms:
            continue
        if pattern is not None and pattern.fullmatch(md.transactional_id) is None:
            continue
        listed.append(TransactionListing(md.transactional_id, md.producer_id, md.state.kafka_name))
    return ListTransactionsResult(ErrorCode.NONE, unknown, tuple(listed))


def describe_transaction(
    md: TransactionMetadata, unmarked: Collection[TopicPartition] | None = None
) -> TransactionDescription:
    """Kafka's ``handleDescribeTransactions`` for a loaded id. ``unmarked`` (the partitions a
    Prepare* transaction still needs a marker in) replaces the partition list, as Kafka removes
    each partition from the transaction once its marker is written."""
    if md.state is TransactionState.DEAD:
        return TransactionDescription(md.transactional_id, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)
    partitions = md.partitions if unmarked is None else unmarked
    return TransactionDescription(
        md.transactional_id,
        ErrorCode.NONE,
        md.state.kafka_name,
        md.timeout_ms,
        md.txn_start_ms,
        md.producer_id,
        md.producer_epoch,
        tuple(sorted(partitions)),
    )


__all__ = [
    "STATE_BY_NAME",
    "ListTransactionsResult",
    "TransactionDescription",
    "TransactionListing",
    "describe_transaction",
    "list_transactions",
]
