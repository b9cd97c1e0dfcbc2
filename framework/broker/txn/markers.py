"""Transaction markers: written by each partition's leader, sent there by the coordinator.

Two halves, as in Kafka:

- :class:`MarkerAppender` is the partition leader's side (Kafka's ``handleWriteTxnMarkersRequest``):
  one COMMIT or ABORT control batch (:func:`odradek.records.build_control_batch`, carrying the
  producer id and epoch and the coordinator epoch) appended as leader with the coordinator
  origin and acks=all, so the marker is replicated before it is acknowledged. The partition's
  producer state closes the producer's open transaction on it, moves the last stable offset and,
  for ABORT, adds the aborted-transaction index entry; the append wakes parked fetches. A marker
  appended to a ``__consumer_offsets`` partition settles the producer's pending TxnOffsetCommit
  offsets of the groups placed there (applied on COMMIT, dropped on ABORT), on the group
  coordinator of this broker, which leads that partition. The WriteTxnMarkers handler and the
  local half of the channel both go through it.
- :class:`TransactionMarkerChannel` is the transaction coordinator's side (Kafka's
  ``TransactionMarkerChannelManager``): the partitions of a transaction are grouped by their
  current leader in the metadata cache; this broker's own are appended locally, the others are
  sent as one WriteTxnMarkers request per leader over an inter-broker connection (kept per
  broker, owned by the channel's nursery). It reports an error per partition; the coordinator
  retries what is not done (see :meth:`.coordinator.TransactionCoordinator._complete`).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, Protocol

import trio

from ...errors import ErrorCode, KafkaError
from ...interfaces import Connector, TopicPartition
from ...protocol import ApiKey
from ...records import ControlRecordType, build_control_batch
from ..group.offsets_log import OFFSETS_TOPIC
from ..producer_state import AppendOrigin
from ..replica_manager import ReplicaManager

if TYPE_CHECKING:
    from ...client.connection import BrokerConnection
    from ..metadata_cache import MetadataCache

log = logging.getLogger(__name__)

#: how long a marker append waits for acks=all (the leader's side)
MARKER_TIMEOUT_MS = 5000
#: how long a WriteTxnMarkers request may take (the leader waits up to MARKER_TIMEOUT_MS for
#: acks=all, plus the round trip)
REQUEST_TIMEOUT_S = 15.0
CONNECT_TIMEOUT_S = 5.0
#: errors a leader answers that mean "ask again, maybe elsewhere" (Kafka's retriable set for markers)
RETRIABLE = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.LEADER_NOT_AVAILABLE,
    }
)


class TxnOffsetsCompletion(Protocol):
    """The group coordinator's pending transactional offsets (:class:`~.offsets.PendingTxnOffsets`)."""

    def complete_partitions(self, producer_id: int, commit: bool, partitions: Collection[int]) -> None:
        """The producer's marker is in these ``__consumer_offsets`` partitions: settle its
        offsets of the groups placed there."""
        ...


class MarkerAppender:
    """Appends markers to partitions this broker leads (see module doc)."""

    def __init__(
        self,
        replica_manager: ReplicaManager,
        txn_offsets: Callable[[], TxnOffsetsCompletion | None] = lambda: None,
        *,
        timeout_ms: int = MARKER_TIMEOUT_MS,
    ) -> None:
        self.replica_manager = replica_manager
        self.txn_offsets = txn_offsets
        self.timeout_ms = timeout_ms

    async def append_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        result: ControlRecordType,
        partitions: Collection[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """Per partition: NONE once appended and replicated (acks=all); UNKNOWN_TOPIC_OR_PARTITION
        if this broker does not host it, NOT_LEADER_OR_FOLLOWER if it follows, INVALID_PRODUCER_EPOCH
        for a producer epoch older than the partition's, TRANSACTION_COORDINATOR_FENCED for a
        coordinator epoch older than the last marker's, as Kafka's leader answers."""
        now = time.time_ns() // 1_000_000
        out: dict[TopicPartition, ErrorCode] = {}
        entries: dict[TopicPartition, bytearray | memoryview] = {}
        for tp in dict.fromkeys(partitions):
            if self.replica_manager.get_partition(tp) is None:
                out[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            entries[tp] = bytearray(
                build_control_batch(
                    result,
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                    coordinator_epoch=coordinator_epoch,
                    timestamp=now,
                )
            )
        if entries:
            appended = await self.replica_manager.append_records(
                -1, self.timeout_ms, entries, origin=AppendOrigin.COORDINATOR
            )
            for tp, r in appended.items():
                out[tp] = r.error
        offsets_partitions = [
            tp.partition for tp, error in out.items() if tp.topic == OFFSETS_TOPIC and error == ErrorCode.NONE
        ]
        if offsets_partitions:
            sink = self.txn_offsets()
            if sink is not None:
                sink.complete_partitions(producer_id, result is ControlRecordType.COMMIT, offsets_partitions)
        return out


class TransactionMarkerChannel:
    """Delivers a transaction's markers to the leaders of its partitions (see module doc).

    Implements the coordinator's ``MarkerWriter``. :meth:`run` owns the inter-broker connections;
    without it running (embedded use, unit tests), remote partitions answer NETWORK_EXCEPTION.
    """

    def __init__(
        self,
        node_id: int,
        cache: MetadataCache,
        appender: MarkerAppender,
        connector: Callable[[], Connector] | None,
        partition_exists: Callable[[TopicPartition], bool],
        *,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> None:
        self.node_id = node_id
        self.cache = cache
        self.appender = appender
        self.connector = connector
        self.partition_exists = partition_exists
        self.request_timeout_s = request_timeout_s
        self._connections: dict[int, BrokerConnection] = {}
        self._connect_locks: defaultdict[int, trio.Lock] = defaultdict(trio.Lock)
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Hold the connections' reader tasks until cancelled; close them on the way out."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._nursery = None
            connections, self._connections = self._connections, {}
            with trio.CancelScope(shield=True):
                for conn in connections.values():
                    await conn.close()

    def leader_of(self, tp: TopicPartition) -> int:
        """The partition's leader in the metadata cache, -1 when none is known or alive."""
        topic = self.cache.topics.get(tp.topic)
        state = topic.states.get(tp.partition) if topic is not None else None
        if state is None or state.leader < 0:
            return -1
        if state.leader != self.node_id and state.leader not in self.cache.brokers:
            return -1  # registered no more: wait for the controller to elect another
        return state.leader

    async def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        result: ControlRecordType,
        partitions: Collection[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """Per partition: NONE once its leader wrote the marker, UNKNOWN_TOPIC_OR_PARTITION when the
        cluster no longer has the partition (it needs no marker), another error to retry (a
        leader's UNKNOWN_TOPIC_OR_PARTITION means it does not host it yet: NOT_LEADER_OR_FOLLOWER)."""
        out: dict[TopicPartition, ErrorCode] = {}
        by_leader: defaultdict[int, list[TopicPartition]] = defaultdict(list)
        for tp in partitions:
            if not self.partition_exists(tp):
                out[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # deleted: nothing left to mark
                continue
            leader = self.leader_of(tp)
            if leader < 0:
                out[tp] = ErrorCode.LEADER_NOT_AVAILABLE
            else:
                by_leader[leader].append(tp)

        async def deliver(leader: int, tps: list[TopicPartition]) -> None:
            if leader == self.node_id:
                written = await self.appender.append_markers(
                    producer_id, producer_epoch, coordinator_epoch, result, tps
                )
            else:
                written = await self._send(leader, producer_id, producer_epoch, coordinator_epoch, result, tps)
            for tp in tps:
                error = written.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR)
                out[tp] = ErrorCode.NOT_LEADER_OR_FOLLOWER if error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION else error

        async with trio.open_nursery() as nursery:
            for leader, tps in by_leader.items():
                nursery.start_soon(deliver, leader, tps)
        return out

    async def _send(
        self,
        broker_id: int,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        result: ControlRecordType,
        partitions: list[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """One WriteTxnMarkers request to ``broker_id``; a connection or protocol failure is
        NETWORK_EXCEPTION for every partition (the connection is dropped, the next try reconnects)."""
        try:
            conn = await self._connection(broker_id)
            response = await conn.request(
                _request(conn, producer_id, producer_epoch, coordinator_epoch, result, partitions),
                timeout_s=self.request_timeout_s,
            )
        except KafkaError as exc:
            log.info("WriteTxnMarkers to broker %d failed: %s; retrying", broker_id, exc)
            await self._drop(broker_id)
            return dict.fromkeys(partitions, ErrorCode.NETWORK_EXCEPTION)
        return _errors(response, producer_id, partitions)

    async def _connection(self, broker_id: int) -> BrokerConnection:
        from ...client.connection import BrokerConnection, NetworkError

        async with self._connect_locks[broker_id]:
            conn = self._connections.get(broker_id)
            if conn is not None and not conn.closed:
                return conn
            endpoint = self.cache.endpoint_for(broker_id, None)
            if self._nursery is None or self.connector is None or endpoint is None:
                raise NetworkError(f"no connection to broker {broker_id}")
            conn = await BrokerConnection.open(
                self._nursery,
                self.connector(),
                broker_id,
                endpoint[0],
                endpoint[1],
                client_id=f"broker-{self.node_id}-txn-markers",
                connect_timeout_s=CONNECT_TIMEOUT_S,
                request_timeout_s=self.request_timeout_s,
            )
            self._connections[broker_id] = conn
            return conn

    async def _drop(self, broker_id: int) -> None:
        conn = self._connections.pop(broker_id, None)
        if conn is not None:
            await conn.close()


def _request(
    conn: BrokerConnection,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    result: ControlRecordType,
    partitions: list[TopicPartition],
) -> Any:
    from ...client.requests import make_request

    by_topic: defaultdict[str, list[int]] = defaultdict(list)
    for tp in partitions:
        by_topic[tp.topic].append(tp.partition)
    marker = {
        "producer_id": producer_id,
        "producer_epoch": producer_epoch,
        "transaction_result": result is ControlRecordType.COMMIT,
        "coordinator_epoch": coordinator_epoch,
        "topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()],
    }
    return make_request(ApiKey.WRITE_TXN_MARKERS, conn.version(ApiKey.WRITE_TXN_MARKERS), markers=[marker])


def _errors(response: Any, producer_id: int, partitions: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
    """The per-partition errors of a WriteTxnMarkers response (a partition it does not answer:
    UNKNOWN_SERVER_ERROR, retried)."""
    out: dict[TopicPartition, ErrorCode] = dict.fromkeys(partitions, ErrorCode.UNKNOWN_SERVER_ERROR)
    for marker in response.markers:
        if int(marker.producer_id) != producer_id:
            continue
        for topic in marker.topics:
            for p in topic.partitions:
                tp = TopicPartition(topic.name, int(p.partition_index))
                if tp in out:
                    out[tp] = _code(int(p.error_code))
    return out


def _code(value: int) -> ErrorCode:
    try:
        return ErrorCode(value)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR
