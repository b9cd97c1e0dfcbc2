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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ...errors import ErrorCode
from ...interfaces import TopicPartition
from ...records import iter_batches
from ..api import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    CreatableTopic,
    FetchPartition,
    IsolationLevel,
    ListOffsetsPartition,
)

if TYPE_CHECKING:
    from ...config import Config
    from ..api import Broker

OFFSETS_TOPIC = "__consumer_offsets"
#: how long an offsets append waits for acks=all (Kafka's offsets.commit.timeout.ms default)
COMMIT_TIMEOUT_MS = 5000
_READ_CHUNK_BYTES = 4 * 1024 * 1024

Record = tuple[bytes, bytes | None]


@dataclass(frozen=True, slots=True)
class Coordinator:
    """A broker address as FindCoordinator returns it."""

    node_id: int
    host: str
    port: int


class OffsetsLog(Protocol):
    """The coordinator's view of ``__consumer_offsets``."""

    num_partitions: int

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

    async def leaders(self, listener_name: str | None = None) -> dict[int, Coordinator]:
        """partition -> the broker leading it (partitions without a leader are absent)."""
        ...


class BrokerOffsetsLog:
    """``__consumer_offsets`` through the broker core's facade."""

    def __init__(self, broker: Broker, config: Config) -> None:
        self.broker = broker
        self.num_partitions = int(config["offsets.topic.num.partitions"])
        self.replication_factor = int(config["offsets.topic.replication.factor"])
        self.segment_bytes = int(config["offsets.topic.segment.bytes"])

    def _topic_configs(self) -> dict[str, str | None]:
        # Kafka's GroupMetadataManager.offsetsTopicConfigs: compacted, its own segment size
        return {
            "cleanup.policy": "compact",
            "segment.bytes": str(self.segment_bytes),
            "compression.type": "producer",
        }

    async def exists(self) -> bool:
        md = await self.broker.metadata([OFFSETS_TOPIC], allow_auto_create=False)
        return any(t.name == OFFSETS_TOPIC and t.error == ErrorCode.NONE for t in md.topics)

    async def ensure_topic(self) -> bool:
        if await self.exists():
            return True
        topic = CreatableTopic(
            OFFSETS_TOPIC, self.num_partitions, self.replication_factor, configs=self._topic_configs()
        )
        result = (await self.broker.create_topics([topic], COMMIT_TIMEOUT_MS, False))[OFFSETS_TOPIC]
        return result.error in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS)

    async def append(self, partition: int, records: Sequence[Record], timestamp_ms: int) -> ErrorCode:
        from ...records import build_batch

        batch = bytearray(build_batch([(k, v, [], timestamp_ms) for k, v in records]))
        tp = TopicPartition(OFFSETS_TOPIC, partition)
        results = await self.broker.produce(-1, COMMIT_TIMEOUT_MS, {tp: batch})
        return results[tp].error

    async def read(self, partition: int) -> AsyncIterator[Record]:
        tp = TopicPartition(OFFSETS_TOPIC, partition)
        bounds = await self.broker.list_offsets(
            -1,
            IsolationLevel.READ_UNCOMMITTED,
            [ListOffsetsPartition(tp, EARLIEST_TIMESTAMP)],
        )
        start = bounds[tp].offset
        end = (
            await self.broker.list_offsets(
                -1, IsolationLevel.READ_UNCOMMITTED, [ListOffsetsPartition(tp, LATEST_TIMESTAMP)]
            )
        )[tp].offset
        offset = start
        while 0 <= offset < end:
            fetched = await self.broker.fetch(
                -1,
                0,
                0,
                _READ_CHUNK_BYTES,
                IsolationLevel.READ_UNCOMMITTED,
                [FetchPartition(tp, offset, _READ_CHUNK_BYTES)],
            )
            result = fetched[tp]
            if result.error != ErrorCode.NONE or result.records is None or result.records.size == 0:
                break
            try:
                data = result.records.to_bytes()
            finally:
                result.records.release()
            progressed = False
            for batch in iter_batches(data):
                next_offset = batch.header.next_offset
                if not batch.is_control:
                    for record in batch.records:
                        if offset <= record.offset < end and record.key is not None:
                            yield record.key, record.value
                if next_offset > offset:
                    offset = next_offset
                    progressed = True
            if not progressed:
                break

    async def leaders(self, listener_name: str | None = None) -> dict[int, Coordinator]:
        md = await self.broker.metadata([OFFSETS_TOPIC], allow_auto_create=False, listener_name=listener_name)
        nodes = {b.node_id: b for b in md.brokers}
        out: dict[int, Coordinator] = {}
        for topic in md.topics:
            if topic.name != OFFSETS_TOPIC or topic.error != ErrorCode.NONE:
                continue
            for p in topic.partitions:
                node = nodes.get(p.leader)
                if node is not None:
                    out[p.partition] = Coordinator(node.node_id, node.host, node.port)
        return out


class InMemoryOffsetsLog:
    """``__consumer_offsets`` as in-memory lists (no compaction; tombstones stay in the list).

    ``fail_next`` makes the next appends return the given errors, to exercise the coordinator's
    error mapping.
    """

    def __init__(self, num_partitions: int = 50, node: Coordinator | None = None) -> None:
        self.num_partitions = num_partitions
        self.node = node or Coordinator(0, "127.0.0.1", 9092)
        self.partitions: dict[int, list[Record]] | None = None
        self.fail_next: list[ErrorCode] = []
        self.appends = 0

    async def exists(self) -> bool:
        return self.partitions is not None

    async def ensure_topic(self) -> bool:
        if self.partitions is None:
            self.partitions = {p: [] for p in range(self.num_partitions)}
        return True

    async def append(self, partition: int, records: Sequence[Record], timestamp_ms: int) -> ErrorCode:
        if self.partitions is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if self.fail_next:
            return self.fail_next.pop(0)
        self.appends += 1
        self.partitions[partition].extend(records)
        return ErrorCode.NONE

    async def read(self, partition: int) -> AsyncIterator[Record]:
        for record in list((self.partitions or {}).get(partition, ())):
            yield record

    async def leaders(self, listener_name: str | None = None) -> dict[int, Coordinator]:
        if self.partitions is None:
            return {}
        return {p: self.node for p in range(self.num_partitions)}


def wall_clock_ms() -> int:
    return int(time.time() * 1000)
