"""Where the group coordinator persists: the ``__consumer_offsets`` topic.

:class:`OffsetsLog` is the little the coordinator needs from a log: create the compacted topic,
append a batch of key/value records to one partition as its leader with ``acks=all`` semantics,
read a partition back from its log start, and tell which broker leads a partition.
:class:`BrokerOffsetsLog` does that through the broker core's facade (the same produce, fetch,
list-offsets, metadata and create-topics paths clients use), so offsets and group metadata are
ordinary records in an ordinary compacted topic. :class:`InMemoryOffsetsLog` keeps the records in
a list per partition, for embedding and unit tests (a new coordinator on the same instance sees
what the previous one wrote, like a restarted broker).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Protocol

from ...errors import ErrorCode
from ..internal_topic import InMemoryInternalTopic, InternalTopic, LogEntry, PartitionLeader, Record

if TYPE_CHECKING:
    from ...config import Config
    from ..api import Broker

OFFSETS_TOPIC = "__consumer_offsets"
#: how long an offsets append waits for acks=all (Kafka's offsets.commit.timeout.ms default)
COMMIT_TIMEOUT_MS = 5000


class OffsetsLog(Protocol):
    """The coordinator's view of ``__consumer_offsets``."""

    @property
    def num_partitions(self) -> int:
        """How many partitions __consumer_offsets has (keys hash over them)."""
        ...

    async def ensure_topic(self) -> bool:
        """Create the topic when missing; True once it exists."""
        ...

    async def exists(self) -> bool: ...

    async def append(
        self,
        partition: int,
        records: Sequence[Record],
        timestamp_ms: int,
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
        transactional: bool = False,
    ) -> ErrorCode:
        """Append ``records`` as one batch to ``partition`` and wait for acks=all; with a
        producer, as that producer's (transactional) batch written by the coordinator."""
        ...

    def read(self, partition: int) -> AsyncIterator[Record]:
        """Every record of ``partition`` from its log start up to its high watermark, in order."""
        ...

    def read_entries(self, partition: int) -> AsyncIterator[LogEntry]:
        """The same with each record's producer and transactionality, and the markers."""
        ...

    async def leaders(self, listener_name: str | None = None) -> dict[int, PartitionLeader]:
        """partition -> the broker leading it (partitions without a leader are absent)."""
        ...


class BrokerOffsetsLog(InternalTopic):
    """``__consumer_offsets`` through the broker core's facade: an :class:`InternalTopic` with
    Kafka's settings for it."""

    def __init__(self, broker: Broker, config: Config) -> None:
        # Kafka's GroupMetadataManager.offsetsTopicConfigs: compacted, its own segment size
        configs: dict[str, str | None] = {
            "cleanup.policy": "compact",
            "segment.bytes": str(int(config["offsets.topic.segment.bytes"])),
            "compression.type": "producer",
        }
        super().__init__(
            broker,
            OFFSETS_TOPIC,
            int(config["offsets.topic.num.partitions"]),
            int(config["offsets.topic.replication.factor"]),
            configs,
            COMMIT_TIMEOUT_MS,
        )


class InMemoryOffsetsLog(InMemoryInternalTopic):
    """``__consumer_offsets`` as lists (see :class:`InMemoryInternalTopic`)."""

    async def append(
        self,
        partition: int,
        records: Sequence[Record],
        timestamp_ms: int,
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
        transactional: bool = False,
    ) -> ErrorCode:
        return self._append(partition, records, producer_id, transactional)


def wall_clock_ms() -> int:
    return int(time.time() * 1000)
