"""Assembling the transaction coordinator inside a running broker (called by ``BrokerServer``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ...interfaces import TopicPartition
from .coordinator import TransactionCoordinator
from .log import BrokerTransactionLog
from .markers import ReplicaMarkerWriter
from .offsets import PendingTxnOffsets

if TYPE_CHECKING:
    from ...config import Config
    from ..core import BrokerCore


def partition_exists(core: BrokerCore) -> Callable[[TopicPartition], bool]:
    """Whether a partition exists in the cluster metadata (not whether this broker hosts it)."""

    def exists(tp: TopicPartition) -> bool:
        topic = core.metadata_cache.topics.get(tp.topic)
        return topic is not None and tp.partition in topic.assignment

    return exists


async def start_transaction_coordinator(
    core: BrokerCore, config: Config, start: Callable[[Any], Awaitable[Any]]
) -> TransactionCoordinator:
    """Build the coordinator over ``__transaction_state``, start it with ``start`` (the server's
    shielded ``nursery.start``), expose it as ``core.transaction_coordinator`` (and the pending
    transactional offsets as ``core.txn_offsets``) and make the produce path verify transactional
    batches against it."""
    exists = partition_exists(core)
    txn_offsets = PendingTxnOffsets(lambda: core.group_coordinator)
    coordinator = TransactionCoordinator(
        BrokerTransactionLog(core, config),
        core.producer_ids,
        ReplicaMarkerWriter(core.replica_manager, exists),
        config,
        partition_exists=exists,
        txn_offsets=txn_offsets,
    )
    await start(coordinator.run)
    core.txn_offsets = txn_offsets
    core.transaction_coordinator = coordinator
    core.replica_manager.verify_transaction = coordinator.verify_transaction
    return coordinator
