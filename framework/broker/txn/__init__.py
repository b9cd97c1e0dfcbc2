"""Transactions on the broker: the transaction coordinator and ``__transaction_state``.

- :mod:`.coordinator` -- :class:`TransactionCoordinator` (InitProducerId, AddPartitionsToTxn,
  AddOffsetsToTxn, EndTxn, timeouts, the produce path's verification);
- :mod:`.state` -- transaction states and metadata; :mod:`.schema` -- Kafka's log schemas;
- :mod:`.log` -- the topic through the broker facade (or in memory);
- :mod:`.markers` -- COMMIT/ABORT control batches: appended by partition leaders, delivered to
  them by the coordinator's marker channel (WriteTxnMarkers);
- :mod:`.offsets` -- TxnOffsetCommit offsets pending until the transaction ends.

See docs/transactions.md.
"""

from __future__ import annotations

from .coordinator import MarkerWriter, TransactionCoordinator
from .log import TRANSACTION_STATE_TOPIC, BrokerTransactionLog, InMemoryTransactionLog, TransactionLog
from .markers import MarkerAppender, TransactionMarkerChannel
from .offsets import PendingTxnOffsets
from .state import TransactionMetadata, TransactionState

__all__ = [
    "TRANSACTION_STATE_TOPIC",
    "BrokerTransactionLog",
    "InMemoryTransactionLog",
    "MarkerAppender",
    "MarkerWriter",
    "PendingTxnOffsets",
    "TransactionCoordinator",
    "TransactionLog",
    "TransactionMarkerChannel",
    "TransactionMetadata",
    "TransactionState",
]
