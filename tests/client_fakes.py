"""An in-memory Kafka broker for client unit tests: real frames, scripted failures, no sockets.

``FakeBroker`` answers ApiVersions, Metadata, InitProducerId and Produce through
:mod:`odradek.protocol` (so the client's real connection, version negotiation and codec run),
keeps each partition's log as a list of (offset, value) and applies Kafka's idempotence rules:
a batch continuing the producer's sequence is appended, a retry of one of the last five batches
is acknowledged with its original offset (a duplicate), anything else is
OUT_OF_ORDER_SEQUENCE_NUMBER; a batch over ``max_message_bytes`` is MESSAGE_TOO_LARGE. ``faults``
scripts what happens to each Produce request: ``"ok"``,
``"drop_before"`` (connection dies, nothing written) or ``"drop_after"`` (written, connection dies
before the response: the case that makes naive retries duplicate records).
"""

from __future__ import annotations

import math
import types
from collections.abc import Iterable
from typing import Any

import trio

from odradek.client.requests import build
from odradek.errors import ErrorCode
from odradek.interfaces import TopicPartition
from odradek.protocol import (
    ApiKey,
    VersionRange,
    api_versions_response,
    decode_request,
    encode_response,
    kio_error,
    parse_request_header,
    response_type,
)
from odradek.protocol.produce import PartitionProduceResponse, ProduceResponseData, TopicProduceResponse
from odradek.records import decode_batch, iter_headers

ADVERTISED = {
    ApiKey.PRODUCE: VersionRange(3, 7),
    ApiKey.METADATA: VersionRange(0, 8),
    ApiKey.API_VERSIONS: VersionRange(0, 3),
    ApiKey.INIT_PRODUCER_ID: VersionRange(0, 1),
}


class FakeBroker:
    def __init__(
        self,
        topics: dict[str, int],
        *,
        node_id: int = 1,
        faults: Iterable[str] = (),
        max_message_bytes: int | None = None,
    ) -> None:
        self.node_id = node_id
        #: a batch larger than this is refused with MESSAGE_TOO_LARGE (the topic's max.message.bytes)
        self.max_message_bytes = max_message_bytes
        self.topics = topics
        self.logs: dict[TopicPartition, list[tuple[int, bytes | None]]] = {
            TopicPartition(t, p): [] for t, n in topics.items() for p in range(n)
        }
        #: (producer id, partition) -> recent batches (base_seq, last_seq, base_offset), newest last
        self.recent: dict[tuple[int, TopicPartition], list[tuple[int, int, int]]] = {}
        self.faults = list(faults)
        self.produce_requests = 0
        self.connections = 0
        self.next_producer_id = 1000
        #: every batch as received: (partition, base sequence, its records' values)
        self.received: list[tuple[TopicPartition, int, tuple[bytes | None, ...]]] = []

    def connector(self) -> FakeConnector:
        return FakeConnector(self)

    # -- request handling ------------------------------------------------------------------------
    def handle(self, frame: bytes) -> tuple[bytes | None, bool]:
        """(response frame or None, close the connection afterwards)."""
        header = parse_request_header(frame)
        request = decode_request(header.api_key, header.api_version, frame, header.body_offset)
        key, version, cid = header.api_key, header.api_version, header.correlation_id
        if key == ApiKey.API_VERSIONS:
            return encode_response(key, version, cid, api_versions_response(version, ADVERTISED)), False
        if key == ApiKey.METADATA:
            return encode_response(key, version, cid, self._metadata(version)), False
        if key == ApiKey.INIT_PRODUCER_ID:
            self.next_producer_id += 1
            body = {
                "throttle_time": 0,
                "error_code": kio_error(0),
                "producer_id": self.next_producer_id,
                "producer_epoch": 0,
            }
            return encode_response(key, version, cid, build(response_type(key, version), body)), False
        if key == ApiKey.PRODUCE:
            fault = self.faults[self.produce_requests] if self.produce_requests < len(self.faults) else "ok"
            self.produce_requests += 1
            if fault == "drop_before":
                return None, True
            response = self._produce(request)
            if fault == "drop_after" or request.acks == 0:
                return None, fault == "drop_after"
            return encode_response(key, version, cid, response), False
        raise AssertionError(f"fake broker got api {key}")

    def _metadata(self, version: int) -> Any:
        cls = response_type(ApiKey.METADATA, version)
        return build(
            cls,
            {
                "throttle_time": 0,
                "brokers": [{"node_id": self.node_id, "host": "fake", "port": 9092, "rack": None}],
                "cluster_id": "fake",
                "controller_id": self.node_id,
                "cluster_authorized_operations": -2147483648,
                "topics": [
                    {
                        "error_code": kio_error(0),
                        "name": t,
                        "is_internal": False,
                        "topic_authorized_operations": -2147483648,
                        "partitions": [
                            {
                                "error_code": kio_error(0),
                                "partition_index": p,
                                "leader_id": self.node_id,
                                "leader_epoch": 0,
                                "replica_nodes": [self.node_id],
                                "isr_nodes": [self.node_id],
                                "offline_replicas": [],
                            }
                            for p in range(n)
                        ],
                    }
                    for t, n in self.topics.items()
                ],
            },
        )

    def _produce(self, request: Any) -> ProduceResponseData:
        topics = []
        for t in request.topic_data:
            parts = []
            for p in t.partition_data:
                tp = TopicPartition(t.name, p.index)
                parts.append(self._append(tp, bytes(p.records)))
            topics.append(TopicProduceResponse(t.name, parts))
        return ProduceResponseData(topics)

    def _append(self, tp: TopicPartition, data: bytes) -> PartitionProduceResponse:
        log = self.logs[tp]
        ((_pos, header),) = list(iter_headers(data))
        records = decode_batch(data).records
        self.received.append((tp, header.base_sequence, tuple(r.value for r in records)))
        if self.max_message_bytes is not None and len(data) > self.max_message_bytes:
            return PartitionProduceResponse(tp.partition, ErrorCode.MESSAGE_TOO_LARGE)
        if header.producer_id >= 0:
            key = (header.producer_id, tp)
            recent = self.recent.setdefault(key, [])
            for base_seq, _last, base_offset in recent:
                if base_seq == header.base_sequence:
                    return PartitionProduceResponse(tp.partition, 0, base_offset)
            expected = recent[-1][1] + 1 if recent else 0
            if header.base_sequence != expected:
                return PartitionProduceResponse(tp.partition, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
            recent.append((header.base_sequence, header.last_sequence, len(log)))
            del recent[:-5]
        base = len(log)
        for r in records:
            log.append((base + r.offset, r.value))
        return PartitionProduceResponse(tp.partition, 0, base)


class FakeConnection:
    def __init__(self, broker: FakeBroker) -> None:
        self.broker = broker
        self._send, self._receive = trio.open_memory_channel[bytes](math.inf)
        self.closed = False

    async def send_frame(self, frame: bytes) -> None:
        if self.closed:
            raise ConnectionError("closed")
        await trio.lowlevel.checkpoint()
        response, close = self.broker.handle(frame)
        if response is not None:
            self._send.send_nowait(response)
        if close:
            self.closed = True
            self._send.close()

    async def receive_frame(self) -> bytes:
        try:
            return await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise ConnectionError("connection closed by the broker") from None

    async def aclose(self) -> None:
        self.closed = True
        self._send.close()


class FakeConnector:
    def __init__(self, broker: FakeBroker) -> None:
        self.broker = broker

    async def connect(self, host: str, port: int, *, timeout_s: float) -> FakeConnection:
        await trio.lowlevel.checkpoint()
        self.broker.connections += 1
        return FakeConnection(self.broker)


class FakeFetchNetwork:
    """A ``NetworkClient`` stand-in for the consumer's :class:`~odradek.client.fetcher.Fetcher`:
    answers every Fetch with the next of ``answers``, recording the requests (built at
    ``max_version`` within the fetcher's bounds). An answer is a dict of partition fields over a
    default one for partition 0 of the request's first topic, or a callable taking the request
    and returning the whole response. ``cluster`` is the client's metadata (default: topic "t"
    with one partition led by broker 1, no topic id)."""

    def __init__(self, answers: list[Any], cluster: Any = None, max_version: int = 16) -> None:
        from odradek.client.cluster import BrokerInfo, ClusterSnapshot, PartitionInfo, TopicInfo

        self.answers = answers
        self.requests: list[Any] = []
        self.metadata_listeners: list[Any] = []
        self.updates_requested = 0
        self.max_version = max_version
        self.retry_backoff = types.SimpleNamespace(seconds=lambda attempt: 0.0, max_ms=100)
        if cluster is None:
            partitions = {0: PartitionInfo("t", 0, 1, 0, (1,), (1,))}
            topics = {"t": TopicInfo("t", ErrorCode.NONE, False, partitions)}
            cluster = ClusterSnapshot({1: BrokerInfo(1, "h1", 9092)}, topics, 1, "c")
        self.cluster = cluster

    def request_update(self) -> None:
        self.updates_requested += 1

    def add_topics(self, topics: set[str]) -> None:
        pass

    def follow_leader_hints(self, hints: Any, node_endpoints: Any) -> set[TopicPartition]:
        from odradek.client.network import NetworkClient

        return NetworkClient.follow_leader_hints(self, hints, node_endpoints)  # type: ignore[arg-type]

    def update_leaders(self, hints: Any, nodes: Any) -> set[TopicPartition]:
        self.cluster, moved = self.cluster.with_leaders(hints, nodes)
        self.request_update()
        return moved

    async def send(self, node: int, build: Any, timeout_s: float, channel: int) -> Any:
        top = self.max_version
        conn = types.SimpleNamespace(version=lambda key, min_version, max_version: min(max_version, top))
        request = build(conn)
        self.requests.append(request)
        answer = self.answers.pop(0)
        if callable(answer):
            return answer(request)
        fields = {
            "partition_index": 0,
            "error_code": 0,
            "high_watermark": 100,
            "last_stable_offset": 100,
            "log_start_offset": 0,
            "diverging_epoch": types.SimpleNamespace(epoch=-1, end_offset=-1),
            "aborted_transactions": None,
            "records": None,
        } | answer
        partition = types.SimpleNamespace(**fields)
        first = request.topics[0]
        topic = types.SimpleNamespace(partitions=[partition])
        if hasattr(first, "topic_id"):  # v13+: by id only
            topic.topic_id = first.topic_id
        else:
            topic.topic = first.topic
        return types.SimpleNamespace(error_code=0, session_id=0, responses=[topic], node_endpoints=())
