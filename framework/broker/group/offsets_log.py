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
from ..internal_topic import InMemoryInternalTopic, InternalTopic, PartitionLeader, Record

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

    async def append(self, partition: int, records: Sequence[Record], timestamp_ms: int) -> ErrorCode:
        """Append ``records`` as one batch to ``partition`` and wait for acks=all."""
        ...

    def read(self, partition: int) -> AsyncIterator[Record]:
        """Every record of ``partition`` from its log start up to its high watermark, in order."""
        ...

    async def leaders(self, listener_name: str | None = None) -> dict[int, PartitionLeader]:
        """partition -> the broker leading it (partitions without a leader are absent)."""
        ...


class BrokerOffsetsLog:
    """``__consumer_offsets`` through the broker core's facade (:class:`InternalTopic`)."""

    def __init__(self, broker: Broker, config: Config) -> None:
        # Kafka's GroupMetadataManager.offsetsTopicConfigs: compacted, its own segment size
        configs: dict[str, str | None] = {
            "cleanup.policy": "compact",
            "segment.bytes": str(int(config["offsets.topic.segment.bytes"])),
            "compression.type": "producer",
        }
        self.topic = InternalTopic(
            broker,
            OFFSETS_TOPIC,
            int(config["offsets.topic.num.partitions"]),
            int(config["offsets.topic.replication.factor"]),
            configs,
            COMMIT_TIMEOUT_MS,
        )

    @property
    def num_partitions(self) -> int:
        return self.topic.num_partitions

    async def exists(self) -> bool:
        return await self.topic.exists()

    async def ensure_topic(self) -> bool:
        return await self.topic.ensure_topic()

    async def append(self, partition: int, records: Sequence[Record], timestamp_ms: int) -> ErrorCode:
        return await self.topic.append(partition, records, timestamp_ms)

    def read(self, partition: int) -> AsyncIterator[Record]:
        return self.topic.read(partition)

    async def leaders(self, listener_name: str | None = None) -> dict[int, PartitionLeader]:
        return await self.topic.leaders(listener_name)


class InMemoryOffsetsLog(InMemoryInternalTopic):
    """``__consumer_offsets`` as lists (see :class:`InMemoryInternalTopic`)."""

    async def append(self, partition: int, records: Sequence[Record], timestamp_ms: int) -> ErrorCode:
        return self._append(partition, records)


def wall_clock_ms() -> int:
    return int(time.time() * 1000)
