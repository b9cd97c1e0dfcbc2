"""Assembling the transaction coordinator inside a running broker (called by ``BrokerServer``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ...interfaces import Connector, TopicPartition
from .coordinator import TransactionCoordinator
from .log import BrokerTransactionLog
from .markers import MarkerAppender, TransactionMarkerChannel
from .offsets import PendingTxnOffsets

if TYPE_CHECKING:
    from ...config import Config
    from ..core import BrokerCore


def partition_exists(core: BrokerCore) -> Callable[[TopicPartition], bool]:
    """Whether a partition exists in the cluster metadata (not whether this broker hosts it)."""
    return core.metadata_cache.contains_partition


async def start_transaction_coordinator(
    core: BrokerCore,
    config: Config,
    start: Callable[[Any], Awaitable[Any]],
    connector: Callable[[], Connector] | None = None,
) -> TransactionCoordinator:
    """Build the coordinator over ``__transaction_state`` and its marker channel (reaching other
    brokers through ``connector``), start both with ``start`` (the server's shielded
    ``nursery.start``), expose the coordinator as ``core.transaction_coordinator``, the leader
    side of markers as ``core.txn_markers`` (the WriteTxnMarkers handler) and the pending
    transactional offsets as ``core.txn_offsets``, and make the produce path verify
    transactional batches against the coordinator."""
    exists = partition_exists(core)
    txn_offsets = PendingTxnOffsets(lambda: core.group_coordinator)
    appender = MarkerAppender(core.replica_manager, lambda: txn_offsets)
    channel = TransactionMarkerChannel(core.node_id, core.metadata_cache, appender, connector, exists)
    coordinator = TransactionCoordinator(
        BrokerTransactionLog(core, config),
        core.producer_ids,
        channel,
        config,
        partition_exists=exists,
        txn_offsets=txn_offsets,
    )
    core.txn_offsets = txn_offsets
    core.txn_markers = appender
    await start(channel.run)
    await start(coordinator.run)
    core.transaction_coordinator = coordinator
    core.replica_manager.verify_transaction = coordinator.verify_transaction
    return coordinator
