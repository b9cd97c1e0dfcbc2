"""Where the transaction coordinator persists: the compacted internal topic ``__transaction_state``.

:class:`TransactionLog` is the little the coordinator needs: create the topic, append one
key/value record to a partition as its leader with ``acks=all``, read a partition back, and tell
which partitions this broker leads (with their leader epoch: the coordinator epoch written into
markers). :class:`BrokerTransactionLog` goes through the broker facade, like the group
coordinator's ``__consumer_offsets``; :class:`InMemoryTransactionLog` keeps lists, for unit tests
(a new coordinator on the same instance sees what the previous one wrote, like a restart).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ...errors import ErrorCode
from ...interfaces import TopicPartition
from ...records import build_batch, iter_batches
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

TRANSACTION_STATE_TOPIC = "__transaction_state"
#: Kafka's transaction.state.log.segment.bytes default
SEGMENT_BYTES = 100 * 1024 * 1024
#: how long a state write waits for acks=all (Kafka's request timeout for the log append)
WRITE_TIMEOUT_MS = 5000
_READ_CHUNK_BYTES = 4 * 1024 * 1024

Record = tuple[bytes, bytes | None]


@dataclass(frozen=True, slots=True)
class LogLeader:
    """The broker leading a ``__transaction_state`` partition, as FindCoordinator returns it."""

    node_id: int
    host: str
    port: int
    leader_epoch: int = 0


class TransactionLog(Protocol):
    num_partitions: int

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

    async def leaders(self, listener_name: str | None = None) -> dict[int, LogLeader]: ...


class BrokerTransactionLog:
    """``__transaction_state`` through the broker core's facade."""

    def __init__(self, broker: Broker, config: Config) -> None:
        self.broker = broker
        self.num_partitions = int(config["transaction.state.log.num.partitions"])
        self.replication_factor = -1  # the broker's default.replication.factor

    async def exists(self) -> bool:
        md = await self.broker.metadata([TRANSACTION_STATE_TOPIC], allow_auto_create=False)
        return any(t.name == TRANSACTION_STATE_TOPIC and t.error == ErrorCode.NONE for t in md.topics)

    async def ensure_topic(self) -> bool:
        if await self.exists():
            return True
        configs: dict[str, str | None] = {
            "cleanup.policy": "compact",
            "segment.bytes": str(SEGMENT_BYTES),
            "compression.type": "uncompressed",
            "min.insync.replicas": "1",
        }
        topic = CreatableTopic(TRANSACTION_STATE_TOPIC, self.num_partitions, self.replication_factor, configs=configs)
        result = (await self.broker.create_topics([topic], WRITE_TIMEOUT_MS, False))[TRANSACTION_STATE_TOPIC]
        return result.error in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS)

    async def append(self, partition: int, record: Record, timestamp_ms: int) -> ErrorCode:
        batch = bytearray(build_batch([(record[0], record[1], [], timestamp_ms)]))
        tp = TopicPartition(TRANSACTION_STATE_TOPIC, partition)
        return (await self.broker.produce(-1, WRITE_TIMEOUT_MS, {tp: batch}))[tp].error

    async def read(self, partition: int) -> AsyncIterator[Record]:
        tp = TopicPartition(TRANSACTION_STATE_TOPIC, partition)
        level = IsolationLevel.READ_UNCOMMITTED
        start = (await self.broker.list_offsets(-1, level, [ListOffsetsPartition(tp, EARLIEST_TIMESTAMP)]))[tp].offset
        end = (await self.broker.list_offsets(-1, level, [ListOffsetsPartition(tp, LATEST_TIMESTAMP)]))[tp].offset
        offset = start
        while 0 <= offset < end:
            result = (
                await self.broker.fetch(
                    -1, 0, 0, _READ_CHUNK_BYTES, level, [FetchPartition(tp, offset, _READ_CHUNK_BYTES)]
                )
            )[tp]
            if result.error != ErrorCode.NONE or result.records is None or result.records.size == 0:
                break
            try:
                data = result.records.to_bytes()
            finally:
                result.records.release()
            progressed = False
            for batch in iter_batches(data):
                if not batch.is_control:
                    for rec in batch.records:
                        if offset <= rec.offset < end and rec.key is not None:
                            yield rec.key, rec.value
                if batch.header.next_offset > offset:
                    offset, progressed = batch.header.next_offset, True
            if not progressed:
                break

    async def leaders(self, listener_name: str | None = None) -> dict[int, LogLeader]:
        md = await self.broker.metadata([TRANSACTION_STATE_TOPIC], allow_auto_create=False, listener_name=listener_name)
        nodes = {b.node_id: b for b in md.brokers}
        out: dict[int, LogLeader] = {}
        for topic in md.topics:
            if topic.name != TRANSACTION_STATE_TOPIC or topic.error != ErrorCode.NONE:
                continue
            for p in topic.partitions:
                node = nodes.get(p.leader)
                if node is not None:
                    out[p.partition] = LogLeader(node.node_id, node.host, node.port, max(p.leader_epoch, 0))
        return out


class InMemoryTransactionLog:
    """``__transaction_state`` as lists (no compaction). ``fail_next`` makes the next appends
    return the given errors."""

    def __init__(self, num_partitions: int = 50, node: LogLeader | None = None) -> None:
        self.num_partitions = num_partitions
        self.node = node or LogLeader(0, "127.0.0.1", 9092)
        self.partitions: dict[int, list[Record]] | None = None
        self.fail_next: list[ErrorCode] = []

    async def exists(self) -> bool:
        return self.partitions is not None

    async def ensure_topic(self) -> bool:
        if self.partitions is None:
            self.partitions = {p: [] for p in range(self.num_partitions)}
        return True

    async def append(self, partition: int, record: Record, timestamp_ms: int) -> ErrorCode:
        if self.partitions is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if self.fail_next:
            return self.fail_next.pop(0)
        self.partitions[partition].append(record)
        return ErrorCode.NONE

    async def read(self, partition: int) -> AsyncIterator[Record]:
        for record in list((self.partitions or {}).get(partition, ())):
            yield record

    def records(self) -> Sequence[Record]:
        return [r for p in (self.partitions or {}).values() for r in p]

    async def leaders(self, listener_name: str | None = None) -> dict[int, LogLeader]:
        if self.partitions is None:
            return {}
        return dict.fromkeys(range(self.num_partitions), self.node)
