"""The producer's sender task: drains the accumulator into Produce requests and handles replies.

One trio task loops: find leaders with ready batches, take one batch per partition per request
for each broker that has fewer than ``max.in.flight.requests.per.connection`` requests in flight,
send (each request in its own task, pipelined on the broker's connection), and sleep until the
next batch is due or someone wakes it (a full batch, a flush, a reply).

Idempotence (``enable.idempotence``, KIP-98): the sender gets a producer id with InitProducerId,
numbers each partition's records with consecutive sequence numbers when a batch is first drained,
and encodes the batch once. Ordering across retries: a batch that fails retriably goes back to the
head of its partition, sorted by sequence, and its partition sends nothing more until every batch
still in flight for it has come back; then the failed batches are resent in order with their
original sequences, and the broker drops the ones it already wrote (it acknowledges duplicates).
A partition's next batch also waits while its earlier ones are in flight to a *previous* leader.
When a sequence can no longer be continued (a sequenced batch failed for good, or the broker lost
the producer's state), the sender waits for in-flight requests, takes a new producer id and
renumbers what is still queued.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

import trio

from ..errors import ErrorCode, KafkaError
from ..interfaces import Codec, TopicPartition
from ..protocol import ApiKey
from ..protocol.produce import PartitionProduceData, ProduceRequestData, TopicProduceData
from ..records import build_batch
from .accumulator import ProducerBatch, RecordAccumulator
from .connection import BrokerConnection, NetworkError
from .network import NetworkClient
from .requests import error_code, make_request

log = logging.getLogger("odradek.client.producer")

_LEADER_ERRORS = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.NETWORK_EXCEPTION,
    }
)


def produce_error_detail(p: Any) -> str:
    """The broker's explanation of a failed partition (Produce v8+, KIP-467), for the delivery
    error's message: its ``error_message`` and each invalid record by its index in the batch
    (Java fails the batch's records with these messages too); empty when it gave none."""
    parts = []
    if getattr(p, "error_message", None):
        parts.append(str(p.error_message))
    for index, message in getattr(p, "record_errors", ()):
        parts.append(f"record {index}: {message or 'invalid'}")
    return ": " + "; ".join(parts) if parts else ""


class Sender:
    """Drains ``accumulator`` through ``network`` (see module doc)."""

    def __init__(
        self,
        network: NetworkClient,
        accumulator: RecordAccumulator,
        *,
        acks: int,
        idempotent: bool,
        max_in_flight: int,
        max_request_size: int,
        request_timeout_ms: int,
        delivery_timeout_ms: int,
        retries: int,
        compression: int,
        compression_level: int | None,
        codecs: Mapping[int, Codec] | None,
    ) -> None:
        self.network = network
        self.accumulator = accumulator
        self.acks = acks
        self.idempotent = idempotent
        self.max_in_flight = max_in_flight
        self.max_request_size = max_request_size
        self.request_timeout_ms = request_timeout_ms
        self.delivery_timeout_s = delivery_timeout_ms / 1000.0
        self.retries = retries
        self.compression = compression
        self.compression_level = compression_level
        self.codecs = codecs
        self.producer_id = -1
        self.producer_epoch = -1
        self._need_new_producer_id = idempotent
        self._next_sequence: dict[TopicPartition, int] = {}
        self._node_in_flight: dict[int, int] = {}
        self._tp_in_flight: dict[TopicPartition, list[ProducerBatch]] = {}
        self._tp_node: dict[TopicPartition, int] = {}
        self._tp_blocked: set[TopicPartition] = set()
        self._wakeup = trio.Event()
        #: set by other threads when they scheduled a wakeup, so they schedule at most one per
        #: loop iteration (each costs a syscall that hands the GIL to this thread)
        self.wake_requested = False
        self._idle = trio.Event()  # set whenever nothing is in flight
        self._idle.set()
        self._running = True
        self.fatal_error: BaseException | None = None
        network.connect_listeners.append(self.wakeup)
        network.metadata_listeners.append(self.wakeup)

    # -- waking ------------------------------------------------------------------------------------
    def wakeup(self) -> None:
        """Make the loop look at the accumulator now (trio thread only)."""
        self._wakeup.set()

    def stop(self) -> None:
        self._running = False
        self._wakeup.set()

    @property
    def in_flight(self) -> int:
        return sum(self._node_in_flight.values())

    # -- main loop ---------------------------------------------------------------------------------
    async def run(self, nursery: trio.Nursery) -> None:
        """Loop until :meth:`stop` and nothing is left to send."""
        acc = self.accumulator
        cluster_leader = self._leader
        while True:
            if not self._running and not acc.has_queued() and self.in_flight == 0:
                return
            self._wakeup = trio.Event()
            self.wake_requested = False
            now = trio.current_time()
            if self._need_new_producer_id and self.in_flight == 0:
                await self._init_producer_id()
                continue
            for batch in acc.expired(now, self.delivery_timeout_s):
                self._fail(
                    batch,
                    KafkaError(
                        f"expiring {batch.record_count} record(s) for {batch.tp}: "
                        f"{self.delivery_timeout_s * 1000:.0f} ms passed since batch creation",
                        code=ErrorCode.REQUEST_TIMED_OUT,
                    ),
                )
            check = acc.ready(cluster_leader, now)
            if check.unknown_leaders:
                if self.network.add_topics(check.unknown_leaders) is False:
                    self.network.request_update()
                next_check = min(check.next_check, now + self.network.retry_backoff.max_ms / 1000.0)
            else:
                next_check = check.next_check
            if not self._need_new_producer_id:
                for node in check.nodes:
                    conn = self.network.connection_nowait(node)
                    if conn is None:
                        # connecting (connect_listeners wake us) or in reconnect backoff: look again soon
                        next_check = min(next_check, now + max(self.network.reconnect_backoff.base_ms / 1000.0, 0.005))
                        continue
                    while self._node_in_flight.get(node, 0) < self.max_in_flight and not conn.closed:
                        batches = acc.drain(node, cluster_leader, self._can_send, self.max_request_size, now)
                        if not batches:
                            break
                        self._prepare(node, batches)
                        # written here, in drain order: sequence numbers reach the broker in order
                        pending = await self._write(node, conn, batches)
                        nursery.start_soon(self._send, node, conn, pending, batches)
            with trio.move_on_at(next_check if math.isfinite(next_check) else math.inf):
                await self._wakeup.wait()

    def _leader(self, tp: TopicPartition) -> int:
        return self.network.cluster.leader_for(tp)

    def _can_send(self, tp: TopicPartition, batch: ProducerBatch) -> bool:
        in_flight = self._tp_in_flight.get(tp)
        if not in_flight:
            return True
        if tp in self._tp_blocked:
            return False
        if self._tp_node.get(tp) != self._leader(tp):
            return False  # earlier batches are still out with the previous leader
        return len(in_flight) < self.max_in_flight

    def _prepare(self, node: int, batches: list[ProducerBatch]) -> None:
        """Number (first drain only), encode and account the batches going to ``node``."""
        for b in batches:
            if b.payload is None:
                if self.idempotent and b.base_sequence < 0:  # the halves of a split keep theirs
                    seq = self._next_sequence.get(b.tp, 0)
                    b.base_sequence = seq
                    b.producer_id = self.producer_id
                    b.producer_epoch = self.producer_epoch
                    self._next_sequence[b.tp] = (seq + b.record_count) & 0x7FFFFFFF
                b.payload = build_batch(
                    b.records,
                    compression=self.compression,
                    codecs=self.codecs,
                    producer_id=b.producer_id,
                    producer_epoch=b.producer_epoch,
                    base_sequence=b.base_sequence,
                    compression_level=self.compression_level,
                )
            b.in_retry = False
            self._tp_in_flight.setdefault(b.tp, []).append(b)
            self._tp_node[b.tp] = node
        self._node_in_flight[node] = self._node_in_flight.get(node, 0) + 1
        self._idle = trio.Event() if self._idle.is_set() else self._idle

    # -- one request -------------------------------------------------------------------------------
    async def _write(self, node: int, conn: BrokerConnection, batches: list[ProducerBatch]) -> Any:
        """Write one Produce request for ``batches``; the pending response, None for acks=0, or
        the KafkaError that broke the connection (handled by :meth:`_send`)."""
        by_topic: dict[str, list[PartitionProduceData]] = {}
        for b in batches:
            by_topic.setdefault(b.tp.topic, []).append(PartitionProduceData(b.tp.partition, b.payload))  # type: ignore[arg-type]
        try:
            request = ProduceRequestData(
                acks=self.acks,
                timeout_ms=self.request_timeout_ms,
                topic_data=[TopicProduceData(t, parts) for t, parts in by_topic.items()],
                # v9+ flexible; v10+ answers carry KIP-951 leader hints, v11 TRANSACTION_ABORTABLE
                version=conn.version(ApiKey.PRODUCE, min_version=3, max_version=11),
            )
            return await conn.send_request(
                request, timeout_s=self.network.request_timeout_s, expect_response=self.acks != 0
            )
        except KafkaError as exc:
            return exc

    async def _send(self, node: int, conn: BrokerConnection, pending: Any, batches: list[ProducerBatch]) -> None:
        """Wait for the response to a written Produce request and settle its batches."""
        try:
            try:
                if isinstance(pending, KafkaError):
                    raise pending
                response = None if pending is None else await conn.wait_response(pending)
            except KafkaError as exc:  # network error, timeout, unsupported version
                for b in batches:
                    self._on_error(b, exc.code, exc)
                return
            if self.acks == 0:
                for b in batches:
                    self._done(b)
                    self._complete(b, -1, -1)
                return
            assert response is not None
            results: dict[TopicPartition, Any] = {}
            for topic in response.responses:
                for p in topic.partition_responses:
                    results[TopicPartition(topic.name, p.index)] = p
            moved = self._follow_leader_hints(results, response)
            for b in batches:
                p = results.get(b.tp)
                if p is None:
                    self._on_error(b, ErrorCode.UNKNOWN_SERVER_ERROR, None)
                    continue
                code = error_code(p.error_code)
                if code is ErrorCode.NONE or code is ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
                    self._done(b)
                    self._complete(b, p.base_offset if code is ErrorCode.NONE else -1, p.log_append_time_ms)
                else:
                    self._on_error(b, code, None, produce_error_detail(p), leader_moved=b.tp in moved)
        finally:
            left = self._node_in_flight.get(node, 1) - 1
            if left:
                self._node_in_flight[node] = left
            else:
                self._node_in_flight.pop(node, None)
            if not self._node_in_flight:
                self._idle.set()
            self._wakeup.set()

    def _done(self, batch: ProducerBatch) -> None:
        """Take ``batch`` out of its partition's in-flight list (success, failure or retry)."""
        in_flight = self._tp_in_flight.get(batch.tp)
        if in_flight is not None:
            try:
                in_flight.remove(batch)
            except ValueError:
                pass
            if not in_flight:
                del self._tp_in_flight[batch.tp]
                self._tp_blocked.discard(batch.tp)

    def _earlier_outstanding(self, batch: ProducerBatch) -> bool:
        """Whether a batch with a smaller sequence of the same partition is in flight or queued
        for retry (then an OUT_OF_ORDER_SEQUENCE_NUMBER only echoes that batch's failure)."""
        seq = batch.base_sequence
        for other in self._tp_in_flight.get(batch.tp, ()):
            if other is not batch and 0 <= other.base_sequence < seq:
                return True
        queued = self.accumulator.partitions().get(batch.tp) or ()
        return any(b.in_retry and 0 <= b.base_sequence < seq for b in queued)

    def _follow_leader_hints(self, results: dict[TopicPartition, Any], response: Any) -> set[TopicPartition]:
        """KIP-951 (Produce v10+): the new leaders a NOT_LEADER_OR_FOLLOWER or
        FENCED_LEADER_EPOCH answer names go into the metadata at once (when their epoch is
        newer); returns the partitions that moved, whose batches are retried without backoff."""
        hints = {
            tp: p.current_leader
            for tp, p in results.items()
            if p.current_leader is not None
            and p.current_leader[0] >= 0
            and error_code(p.error_code) in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH)
        }
        return self.network.follow_leader_hints(hints, response.node_endpoints)

    def _on_error(
        self,
        batch: ProducerBatch,
        code: ErrorCode,
        exc: BaseException | None,
        detail: str = "",
        *,
        leader_moved: bool = False,
    ) -> None:
        """Retry ``batch`` or fail it; ``detail`` (the broker's error message and record errors)
        goes into the delivery error's message. A batch whose partition's leader is known to
        have moved (``leader_moved``, KIP-951) is retried at once, as Java's producer does."""
        now = trio.current_time()
        if code is ErrorCode.MESSAGE_TOO_LARGE and batch.record_count > 1:
            # over the topic's max.message.bytes as a whole, perhaps not record by record: split
            # (Java's Sender does), rather than fail records that would fit alone
            if len(self._tp_in_flight.get(batch.tp, ())) > 1:
                self._tp_blocked.add(batch.tp)  # the halves go before later in-flight batches
            self._done(batch)
            log.info("%s: a batch of %d records is too large for the broker: split", batch.tp, batch.record_count)
            self.accumulator.split(batch, now)
            return
        retriable = code.retriable or isinstance(exc, NetworkError)
        if code is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and self._earlier_outstanding(batch):
            retriable = True
        if code in _LEADER_ERRORS and not leader_moved:  # else update_leaders asked already
            self.network.request_update()
        expired = batch.created + self.delivery_timeout_s <= now
        if retriable and batch.attempts < self.retries and not expired:
            others = self._tp_in_flight.get(batch.tp, [])
            if len(others) > 1:
                self._tp_blocked.add(batch.tp)
            self._done(batch)
            batch.attempts += 1
            delay = 0.0 if leader_moved else self.network.retry_backoff.seconds(batch.attempts - 1)
            log.debug("retrying %s (attempt %d) after %s", batch.tp, batch.attempts, code.name)
            self.accumulator.reenqueue(batch, now + delay)
            return
        self._done(batch)
        error = exc if isinstance(exc, KafkaError) and exc.code is code else None
        if error is None:
            error = KafkaError(f"produce to {batch.tp} failed with {code.name}{detail}", code=code)
        self._fail(batch, error)

    def _complete(self, batch: ProducerBatch, base_offset: int, log_append_time: int) -> None:
        self.accumulator.release(batch)
        batch.complete(base_offset, log_append_time)

    def _fail(self, batch: ProducerBatch, error: BaseException) -> None:
        if self.idempotent and batch.base_sequence >= 0 and batch.producer_id == self.producer_id:
            # the partition's sequence now has a gap the broker will never fill: start over
            self._need_new_producer_id = True
        self.accumulator.release(batch)
        batch.fail(error)

    # -- producer id ---------------------------------------------------------------------------------
    async def _init_producer_id(self) -> None:
        """InitProducerId (retrying), then renumber every queued batch for the new id."""

        def build(conn: BrokerConnection) -> Any:
            version = conn.version(ApiKey.INIT_PRODUCER_ID)
            return make_request(
                ApiKey.INIT_PRODUCER_ID,
                version,
                transactional_id=None,
                transaction_timeout=2**31 - 1,
                producer_id=-1,
                producer_epoch=-1,
            )

        async def call() -> Any:
            response = await self.network.send_any(build)
            code = error_code(response.error_code)
            if code is not ErrorCode.NONE:
                raise KafkaError(f"InitProducerId failed with {code.name}", code=code)
            return response

        try:
            response = await self.network.call_with_retries(
                call, timeout_s=self.delivery_timeout_s, what="InitProducerId"
            )
        except KafkaError as exc:
            # nothing can be sent without an id: fail what is queued, try again for later records
            log.warning("cannot get a producer id: %s", exc)
            for b in self.accumulator.abort_all():
                self.accumulator.release(b)
                b.fail(exc)
            await trio.sleep(self.network.retry_backoff.seconds(5))
            return
        self.producer_id = int(response.producer_id)
        self.producer_epoch = int(response.producer_epoch)
        self._next_sequence.clear()
        for b in self.accumulator.queued():
            b.payload = None
            b.base_sequence = -1
        self._need_new_producer_id = False

    async def wait_idle(self) -> None:
        """Wait until no request is in flight."""
        while self.in_flight:
            await self._idle.wait()
