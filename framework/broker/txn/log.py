"""Where the transaction coordinator persists: the compacted internal topic ``__transaction_state``.

:class:`TransactionLog` is the little the coordinator needs: create the topic, append one
key/value record to a partition as its leader with ``acks=all``, read a partition back, and tell
which partitions this broker leads (with their leader epoch: the coordinator epoch written into
markers). :class:`BrokerTransactionLog` goes through the broker facade, like the group
coordinator's ``__consumer_offsets``; :class:`InMemoryTransactionLog` keeps lists, for unit tests
(a new coordinator on the same instance sees what the previous one wrote, like a restart).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Protocol

from ...errors import ErrorCode
from ..internal_topic import InMemoryInternalTopic, InternalTopic, PartitionLeader, Record

if TYPE_CHECKING:
    from ...config import Config
    from ..api import Broker

TRANSACTION_STATE_TOPIC = "__transaction_state"
#: Kafka's transaction.state.log.segment.bytes default
SEGMENT_BYTES = 100 * 1024 * 1024
#: how long a state write waits for acks=all (Kafka's request timeout for the log append)
WRITE_TIMEOUT_MS = 5000


class TransactionLog(Protocol):
    @property
    def num_partitions(self) -> int:
        """How many partitions __transaction_state has (keys hash over them)."""
        ...

    async def exists(self) -> bool: ...

    async def ensure_topic(self) -> bool:
        """Create the topic when missing; True once it exists."""
        ...

    async def append(self, partition: int, record: Record, timestamp_ms: int) -> ErrorCode:
        """Append one record to ``partition`` and wait for acks=all."""
        ...

    def read(self, partition: int) -> AsyncIterator[Record]:
        """Every record of ``partition`` from its log start to its high watermark."""
        ...

    async def leaders(self, listener_name: str | None = None) -> dict[int, PartitionLeader]: ...


class BrokerTransactionLog:
    """``__transaction_state`` through the broker core's facade (:class:`InternalTopic`)."""

    def __init__(self, broker: Broker, config: Config) -> None:
        configs: dict[str, str | None] = {
            "cleanup.policy": "compact",
            "segment.bytes": str(SEGMENT_BYTES),
            "compression.type": "uncompressed",
            "min.insync.replicas": str(int(config["transaction.state.log.min.isr"])),
        }
        num_partitions = int(config["transaction.state.log.num.partitions"])
        replication_factor = int(config["transaction.state.log.replication.factor"])
        self.topic = InternalTopic(
            broker, TRANSACTION_STATE_TOPIC, num_partitions, replication_factor, configs, WRITE_TIMEOUT_MS
        )

    @property
    def num_partitions(self) -> int:
        """The topic's own partition count once it exists (see :class:`InternalTopic`)."""
        return self.topic.num_partitions

    async def exists(self) -> bool:
        return await self.topic.exists()

    async def ensure_topic(self) -> bool:
        return await self.topic.ensure_topic()

    async def append(self, partition: int, record: Record, timestamp_ms: int) -> ErrorCode:
        return await self.topic.append(partition, [record], timestamp_ms)

    def read(self, partition: int) -> AsyncIterator[Record]:
        return self.topic.read(partition)

    async def leaders(self, listener_name: str | None = None) -> dict[int, PartitionLeader]:
        return await self.topic.leaders(listener_name)


class InMemoryTransactionLog(InMemoryInternalTopic):
    """``__transaction_state`` as lists (see :class:`InMemoryInternalTopic`)."""

    async def append(self, partition: int, record: Record, timestamp_ms: int) -> ErrorCode:
        return self._append(partition, [record])
