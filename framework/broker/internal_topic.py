"""An internal compacted topic (``__consumer_offsets``, ``__transaction_state``) used through the
broker core's own facade: the coordinators persist as ordinary records in an ordinary topic,
written with ``acks=all`` through the produce path and read back through fetch, so replication,
compaction and recovery apply to them exactly as to user topics.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import ErrorCode, InvalidRecord, KafkaError
from ..interfaces import TopicPartition
from ..records import ControlRecordType, build_batch, iter_batches, parse_control_record
from .api import (
    DEBUGGING_REPLICA_ID,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    CreatableTopic,
    FetchPartition,
    IsolationLevel,
    ListOffsetsPartition,
)

if TYPE_CHECKING:
    from .api import Broker

log = logging.getLogger(__name__)

Record = tuple[bytes, bytes | None]


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One record of an internal topic with what its batch says: the producer and whether it
    is transactional, or (``control`` set, no key or value) a transaction marker."""

    key: bytes | None
    value: bytes | None
    producer_id: int = -1
    transactional: bool = False
    control: ControlRecordType | None = None


_READ_CHUNK_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class PartitionLeader:
    """The broker leading a partition of an internal topic, as FindCoordinator returns it; the
    transaction coordinator takes ``leader_epoch`` as its coordinator epoch."""

    node_id: int
    host: str
    port: int
    leader_epoch: int = 0


#: The broker key that sets an internal topic's replication factor, named when it cannot be met.
_REPLICATION_FACTOR_SETTINGS = {
    "__consumer_offsets": "offsets.topic.replication.factor",
    "__transaction_state": "transaction.state.log.replication.factor",
}


class InternalTopic:
    """Create, append to, read back and locate the leaders of one internal topic."""

    def __init__(
        self,
        broker: Broker,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str | None],
        timeout_ms: int,
    ) -> None:
        self.broker = broker
        self.name = name
        #: the configured count until the topic is seen; then the topic's own count, fixed from
        #: then on (as Kafka reads it once): which partition holds a key depends on it, so a
        #: topic created with another count (by an admin, or under an older config) still
        #: finds every group's and transaction's records
        self.num_partitions = num_partitions
        self._count_known = False
        self.replication_factor = replication_factor  # -1: the broker's default.replication.factor
        self.configs = dict(configs)
        self.timeout_ms = timeout_ms
        self._create_failure_logged: tuple[ErrorCode, str | None] | None = None

    async def exists(self) -> bool:
        md = await self.broker.metadata([self.name], allow_auto_create=False)
        for t in md.topics:
            if t.name == self.name and t.error == ErrorCode.NONE:
                if not self._count_known and t.partitions:
                    if len(t.partitions) != self.num_partitions:
                        log.warning(
                            "%s has %d partitions, not the configured %d: using the topic's count",
                            self.name, len(t.partitions), self.num_partitions,
                        )  # fmt: skip
                    self.num_partitions = len(t.partitions)
                    self._count_known = True
                return True
        return False

    async def ensure_topic(self) -> bool:
        """Create the topic when missing; True once it exists (with its partition count known)."""
        if await self.exists():
            return True
        topic = CreatableTopic(self.name, self.num_partitions, self.replication_factor, configs=self.configs)
        result = (await self.broker.create_topics([topic], self.timeout_ms, False))[self.name]
        if result.error not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
            self._log_create_failure(result.error, result.error_message)
            return False
        self._create_failure_logged = None
        return await self.exists()

    def _log_create_failure(self, error: ErrorCode, message: str | None) -> None:
        """Kafka's one ERROR when an internal topic cannot be created because its replication
        factor is above the alive brokers: the coordinators answer COORDINATOR_NOT_AVAILABLE
        meanwhile (clients retry), so without it nothing would say which setting to fix.
        Logged once per distinct failure, not on every FindCoordinator that tries again."""
        if self._create_failure_logged == (error, message):
            return
        self._create_failure_logged = (error, message)
        if error == ErrorCode.INVALID_REPLICATION_FACTOR:
            setting = (
                "default.replication.factor"
                if self.replication_factor == -1
                else _REPLICATION_FACTOR_SETTINGS.get(self.name, "its replication factor")
            )
            log.error(
                "cannot create %s: %s (configured via %r). This can be ignored while the cluster "
                "starts up and not all brokers are up yet",
                self.name, message or error.name, setting,
            )  # fmt: skip
        else:
            log.warning("cannot create %s yet: %s", self.name, message or error.name)

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
        """Append ``records`` as one batch to ``partition`` and wait for acks=all, as the
        coordinator (Kafka's ``AppendOrigin.COORDINATOR``; clients may not write here). With a
        producer, the batch is the coordinator's write on the producer's behalf (epoch-checked,
        no sequence), e.g. a TxnOffsetCommit's transactional records, settled later by the
        transaction's marker."""
        batch = bytearray(
            build_batch(
                [(k, v, [], timestamp_ms) for k, v in records],
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                base_sequence=0 if producer_id >= 0 else -1,  # Kafka's too: sequences are not checked
                is_transactional=transactional,
            )
        )
        tp = TopicPartition(self.name, partition)
        return (await self.broker.produce(-1, self.timeout_ms, {tp: batch}, as_coordinator=True))[tp].error

    async def read(self, partition: int) -> AsyncIterator[Record]:
        """Every keyed record of ``partition`` from its log start to its log end, in order."""
        async for entry in self.read_entries(partition):
            if entry.control is None and entry.key is not None:
                yield entry.key, entry.value

    async def _log_offset(self, tp: TopicPartition, timestamp: int) -> int:
        """``tp``'s log start (EARLIEST_TIMESTAMP) or log end (LATEST_TIMESTAMP) offset, read as
        a debugging replica; raises :class:`KafkaError` when the broker cannot tell (the
        partition not led here yet, a storage error)."""
        level = IsolationLevel.READ_UNCOMMITTED
        found = (await self.broker.list_offsets(DEBUGGING_REPLICA_ID, level, [ListOffsetsPartition(tp, timestamp)]))[tp]
        if found.error != ErrorCode.NONE or found.offset < 0:
            code = found.error if found.error != ErrorCode.NONE else ErrorCode.UNKNOWN_SERVER_ERROR
            raise KafkaError(f"reading {tp.topic}-{tp.partition}: no offset for {timestamp}", code=code)
        return found.offset

    async def read_entries(self, partition: int) -> AsyncIterator[LogEntry]:
        """Every keyed record of ``partition`` and every transaction marker, from its log start
        to its log end, in order.

        Raises :class:`KafkaError` when the log cannot be read to its end (the partition not
        led here yet, a storage error): a coordinator that took what was read until then for
        the whole partition would own it with ids or groups missing (a transaction never
        aborted, a producer not fenced), so its load fails instead and is retried."""
        tp = TopicPartition(self.name, partition)
        level = IsolationLevel.READ_UNCOMMITTED
        # to the log end, as Kafka's coordinators load: a new leader's HW may still lag what
        # the old leader wrote and acknowledged, and those records must not be skipped (the
        # leader never truncates below its own log end while it leads)
        me = DEBUGGING_REPLICA_ID
        start = await self._log_offset(tp, EARLIEST_TIMESTAMP)
        end = await self._log_offset(tp, LATEST_TIMESTAMP)
        offset = start
        while offset < end:
            fetch = FetchPartition(tp, offset, _READ_CHUNK_BYTES)
            result = (await self.broker.fetch(me, 0, 0, _READ_CHUNK_BYTES, level, [fetch]))[tp]
            if result.error != ErrorCode.NONE:
                if result.records is not None:
                    result.records.release()
                raise KafkaError(f"reading {tp.topic}-{tp.partition} at offset {offset}", code=result.error)
            if result.records is None or result.records.size == 0:
                break
            try:
                data = result.records.to_bytes()
            finally:
                result.records.release()
            progressed = False
            for batch in iter_batches(data):
                h = batch.header
                if batch.is_control:
                    if offset <= h.base_offset < end and batch.records:
                        try:
                            kind = parse_control_record(batch.records[0]).type
                        except (InvalidRecord, ValueError):  # a marker type this broker does not know
                            kind = None
                        if kind is not None:
                            yield LogEntry(None, None, h.producer_id, h.is_transactional, kind)
                else:
                    for rec in batch.records:
                        if offset <= rec.offset < end and rec.key is not None:
                            yield LogEntry(rec.key, rec.value, h.producer_id, h.is_transactional)
                if batch.header.next_offset > offset:
                    offset, progressed = batch.header.next_offset, True
            if not progressed:
                break

    async def leaders(self, listener_name: str | None = None) -> dict[int, PartitionLeader]:
        """partition -> its leader (with the leader epoch); partitions without a leader are absent."""
        md = await self.broker.metadata([self.name], allow_auto_create=False, listener_name=listener_name)
        nodes = {b.node_id: b for b in md.brokers}
        out: dict[int, PartitionLeader] = {}
        for topic in md.topics:
            if topic.name != self.name or topic.error != ErrorCode.NONE:
                continue
            for p in topic.partitions:
                node = nodes.get(p.leader)
                if node is not None:
                    out[p.partition] = PartitionLeader(node.node_id, node.host, node.port, max(p.leader_epoch, 0))
        return out


class InMemoryInternalTopic:
    """An internal topic as in-memory lists, for coordinator tests: no compaction (tombstones
    stay in the list), one leader for every partition. ``fail_next`` makes the next appends
    return the given errors, to exercise the coordinators' error mapping."""

    def __init__(self, num_partitions: int = 50, node: PartitionLeader | None = None) -> None:
        self.num_partitions = num_partitions
        self.node = node or PartitionLeader(0, "127.0.0.1", 9092)
        #: partition -> its records with their batch context; None until the topic is created
        self.entries: dict[int, list[LogEntry]] | None = None
        self.fail_next: list[ErrorCode] = []
        self.appends = 0

    @property
    def partitions(self) -> dict[int, list[Record]] | None:
        """partition -> its (key, value) records (None until the topic is created)."""
        if self.entries is None:
            return None
        return {p: [(e.key, e.value) for e in es if e.key is not None] for p, es in self.entries.items()}

    async def exists(self) -> bool:
        return self.entries is not None

    async def ensure_topic(self) -> bool:
        if self.entries is None:
            self.entries = {p: [] for p in range(self.num_partitions)}
        return True

    def _append(
        self, partition: int, records: Sequence[Record], producer_id: int = -1, transactional: bool = False
    ) -> ErrorCode:
        if self.entries is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if self.fail_next:
            return self.fail_next.pop(0)
        self.appends += 1
        self.entries[partition].extend(LogEntry(k, v, producer_id, transactional) for k, v in records)
        return ErrorCode.NONE

    async def read(self, partition: int) -> AsyncIterator[Record]:
        async for entry in self.read_entries(partition):
            if entry.key is not None:
                yield entry.key, entry.value

    async def read_entries(self, partition: int) -> AsyncIterator[LogEntry]:
        for entry in list((self.entries or {}).get(partition, ())):
            yield entry

    def records(self) -> Sequence[Record]:
        """Every record of every partition, partition by partition."""
        return [r for p in (self.partitions or {}).values() for r in p]

    async def leaders(self, listener_name: str | None = None) -> dict[int, PartitionLeader]:
        if self.entries is None:
            return {}
        return dict.fromkeys(range(self.num_partitions), self.node)
