"""transport_tcp in-process against a scripted broker: framing, pipelining, order, acks=0, limits,
idle close, graceful drain, sendfile, and every core/admin handler at every version."""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import struct
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from test_protocol import sample

from odradek import records
from odradek.broker.api import (
    AlterConfigsResult,
    BrokerNode,
    ClusterMetadata,
    ConfigEntry,
    ConfigSource,
    CreateTopicResult,
    DeleteRecordsResult,
    DescribeConfigsResult,
    ElectLeadersResult,
    EpochEndOffset,
    FetchPartitionResult,
    InitProducerIdResult,
    ListOffsetsPartitionResult,
    OngoingReassignment,
    PartitionMetadata,
    PartitionProduceResult,
    ReassignmentResult,
    TopicMetadata,
    TopicResult,
)
from odradek.broker.fetch_session import FetchSessionCache
from odradek.config import Config, default_config
from odradek.connection_quotas import ConnectionQuotas
from odradek.errors import ErrorCode, InvalidRequest
from odradek.interfaces import Endpoint, FileRange, TopicPartition
from odradek.metrics import BrokerMetrics
from odradek.plugins.transport_tcp.apis import Dispatcher, load_handlers
from odradek.plugins.transport_tcp.apis.admin import HANDLERS as ADMIN_HANDLERS
from odradek.plugins.transport_tcp.apis.core import HANDLERS as CORE_HANDLERS
from odradek.plugins.transport_tcp.client import TcpConnection, TcpConnector
from odradek.plugins.transport_tcp.connection import EOF_GRACE_S, KafkaConnection
from odradek.plugins.transport_tcp.server import TcpListener
from odradek.protocol import (
    SUPPORTED_VERSIONS,
    ApiKey,
    PartitionProduceData,
    ProduceRequestData,
    TopicProduceData,
    codec,
    decode_request,
    decode_response,
    encode_request,
    parse_request_header,
    request_type,
)
from odradek.request_memory import RequestMemoryPool
from odradek.sessions import MetadataUnavailable


class FileSlice:
    """A FetchDataInfo over a real file, as the segment engine returns one."""

    def __init__(self, path: Path, position: int, length: int) -> None:
        self.fd = os.open(path, os.O_RDONLY)
        self.position = position
        self.size = length
        self.fetch_offset = 0
        self.first_batch_offset = 0
        self.released = 0

    def file_range(self) -> FileRange:
        return FileRange(self.fd, self.position, self.size)

    def to_bytes(self) -> bytes:
        return os.pread(self.fd, self.size, self.position)

    def release(self) -> None:
        self.released += 1
        if self.released == 1:
            os.close(self.fd)


class ScriptedBroker:
    """Implements the core facade with canned answers and hooks for the tests."""

    def __init__(self, config: Config, records_file: Path | None = None) -> None:
        self.config = config
        self.node_id = 1
        self.cluster_id = "scripted"
        self.connection_quotas = ConnectionQuotas.from_config(config)
        self.request_memory = RequestMemoryPool.from_config(config)
        self.metrics = BrokerMetrics()
        self.fetch_sessions = FetchSessionCache(int(config["max.incremental.fetch.session.cache.slots"]))
        self.records_file = records_file
        self.produced: list[tuple[int, dict[TopicPartition, bytes]]] = []
        #: seconds a produce of this many bytes takes (a slow append), None for no wait
        self.produce_delay: Any = None
        self.fetch_gate: trio.Event | None = None
        self.fetch_calls = 0
        self.client_metadata: Any = None
        self.slices: list[FileSlice] = []

    async def produce(self, acks: int, timeout_ms: int, partitions: Mapping[TopicPartition, bytearray], **kw: Any):
        # writable buffers (a view into the request frame): the core rewrites offsets in place
        assert all(not memoryview(v).readonly for v in partitions.values())
        if self.produce_delay is not None:
            await trio.sleep(self.produce_delay(sum(len(v) for v in partitions.values())))
        self.produced.append((acks, {tp: bytes(v) for tp, v in partitions.items()}))
        return {tp: PartitionProduceResult(ErrorCode.NONE, base_offset=10 * i) for i, tp in enumerate(partitions)}

    async def fetch(
        self,
        replica_id,
        max_wait_ms,
        min_bytes,
        max_bytes,
        isolation_level,
        partitions,
        client_metadata=None,
        replica_epoch=-1,
    ):
        self.fetch_calls += 1
        self.client_metadata = client_metadata
        if self.fetch_gate is not None:
            await self.fetch_gate.wait()
        out = {}
        for p in partitions:
            records: Any = None
            if self.records_file is not None:
                records = FileSlice(self.records_file, 3, 50)
                self.slices.append(records)
            out[p.tp] = FetchPartitionResult(ErrorCode.NONE, 100, 100, 0, None if isolation_level == 0 else (), records)
        return out

    async def list_offsets(self, replica_id, isolation_level, partitions):
        return {p.tp: ListOffsetsPartitionResult(ErrorCode.NONE, p.timestamp, 42, 0) for p in partitions}

    async def metadata(self, topics, allow_auto_create, *, listener_name=None):
        names = list(topics) if topics is not None else ["t"]
        return ClusterMetadata(
            "scripted",
            1,
            (BrokerNode(1, "127.0.0.1", 9092),),
            tuple(
                TopicMetadata(ErrorCode.NONE, n, False, (PartitionMetadata(ErrorCode.NONE, 0, 1, 0, (1,), (1,)),))
                for n in names
            ),
        )

    async def create_topics(self, topics, timeout_ms, validate_only, quota=None):
        entry = ConfigEntry("retention.ms", "1000", False, False, ConfigSource.DYNAMIC_TOPIC_CONFIG)
        return {t.name: CreateTopicResult(ErrorCode.NONE, None, 3, 1, (entry,)) for t in topics}

    async def delete_topics(self, names, timeout_ms, quota=None):
        return {n: TopicResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "no") for n in names}

    async def create_partitions(self, topics, timeout_ms, validate_only, quota=None):
        return {t.name: TopicResult(ErrorCode.NONE) for t in topics}

    async def describe_configs(self, resources, *, include_synonyms=False, include_documentation=False):
        entry = ConfigEntry("cleanup.policy", "delete", False, True, ConfigSource.DEFAULT_CONFIG)
        return [DescribeConfigsResult(ErrorCode.NONE, None, r.resource_type, r.name, (entry,)) for r in resources]

    async def incremental_alter_configs(self, resources, validate_only):
        return [AlterConfigsResult(ErrorCode.NONE, None, r.resource_type, r.name) for r in resources]

    async def alter_configs(self, resources, validate_only):
        return [AlterConfigsResult(ErrorCode.NONE, None, r.resource_type, r.name) for r in resources]

    async def delete_records(self, offsets, timeout_ms):
        return {tp: DeleteRecordsResult(ErrorCode.NONE, o) for tp, o in offsets.items()}

    async def init_producer_id(self, transactional_id, transaction_timeout_ms, producer_id=-1, producer_epoch=-1):
        return InitProducerIdResult(ErrorCode.NONE, 7000, 0)

    async def offset_for_leader_epoch(self, replica_id, partitions):
        return {p.tp: EpochEndOffset(ErrorCode.NONE, p.leader_epoch, 55) for p in partitions}

    async def elect_leaders(self, election_type, partitions, timeout_ms):
        return {tp: ElectLeadersResult(ErrorCode.NONE) for tp in partitions or ()}

    async def alter_partition_reassignments(self, reassignments, *, allow_replication_factor_change=True):
        return {tp: ReassignmentResult(ErrorCode.NONE) for tp in reassignments}

    async def list_partition_reassignments(self, partitions):
        return {
            TopicPartition(t, p): OngoingReassignment((1, 2), (2,), ())
            for t, ps in (partitions or {}).items()
            for p in ps
        }


ENDPOINT = Endpoint("PLAINTEXT", "127.0.0.1", 0)
CORE_AND_ADMIN = {**CORE_HANDLERS, **ADMIN_HANDLERS}


def _config(**kw: Any) -> Config:
    return default_config(**kw)


@asynccontextmanager
async def serving(broker: ScriptedBroker, **config: Any) -> AsyncIterator[tuple[TcpListener, Endpoint]]:
    listener = TcpListener(_config(**config), broker, ENDPOINT)
    async with trio.open_nursery() as nursery:
        (bound,) = await nursery.start(listener.serve)
        yield listener, bound
        nursery.cancel_scope.cancel()


async def connect(bound: Endpoint) -> TcpConnection:
    return await TcpConnector().connect(bound.host, bound.port, timeout_s=5)


async def call(conn: TcpConnection, request: Any, correlation_id: int = 1) -> Any:
    await conn.send_frame(encode_request(request, correlation_id=correlation_id, client_id="t"))
    frame = await conn.receive_frame()
    header = parse_request_header(encode_request(request, correlation_id=0, client_id="t"))
    cid, response = decode_response(header.api_key, header.api_version, frame)
    assert cid == correlation_id
    return response


def api_versions_request(version: int = 3) -> Any:
    cls = request_type(ApiKey.API_VERSIONS, version)
    kwargs = {"client_software_name": "odradek-test", "client_software_version": "1"} if version >= 3 else {}
    return cls(**kwargs)


def metadata_request(version: int = 8, topics: Sequence[str] | None = ("t",)) -> Any:
    cls = request_type(ApiKey.METADATA, version)
    topic_cls = __import__(cls.__module__, fromlist=["x"]).MetadataRequestTopic
    kwargs: dict[str, Any] = {"topics": None if topics is None else tuple(topic_cls(name=t) for t in topics)}
    if version >= 4:
        kwargs["allow_auto_topic_creation"] = True
    if version >= 8:
        kwargs.update(include_cluster_authorized_operations=False, include_topic_authorized_operations=False)
    return cls(**kwargs)


# -- the handler table ------------------------------------------------------------------------


def test_handler_modules_merge_and_advertise() -> None:
    handlers = load_handlers()
    for key in (0, 1, 2, 3, 18, 19, 20, 21, 22, 23, 32, 37, 44):
        assert key in handlers
    with pytest.raises(ValueError, match="handled by both"):
        load_handlers(("odradek.plugins.transport_tcp.apis.core", "odradek.plugins.transport_tcp.apis.core"))


@pytest.mark.parametrize(
    ("key", "version"),
    [(k, v) for k in CORE_AND_ADMIN for v in range(SUPPORTED_VERSIONS[k].min, SUPPORTED_VERSIONS[k].max + 1) if k != 0],
)
async def test_every_core_and_admin_handler_answers_every_version(key: int, version: int, tmp_path: Path) -> None:
    """Each version's response object builds from the core's results and survives the wire."""
    broker = ScriptedBroker(_config())
    dispatcher = Dispatcher(broker, broker.config, ENDPOINT, CORE_AND_ADMIN)
    request = sample(request_type(key, version))
    if key == ApiKey.FETCH:
        request = _replace(request, session_id=0, session_epoch=-1, isolation_level=1)
    if key in (ApiKey.LIST_OFFSETS,) and version >= 2:
        request = _replace(request, isolation_level=0)
    if key in (ApiKey.DESCRIBE_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS):
        request = _replace(request, resources=tuple(_replace(r, resource_type=2) for r in request.resources))
    if key == ApiKey.INCREMENTAL_ALTER_CONFIGS:
        request = _replace(
            request,
            resources=tuple(
                _replace(r, configs=tuple(_replace(c, config_operation=0) for c in r.configs))
                for r in request.resources
            ),
        )
    frame = bytearray(encode_request(request, correlation_id=5, client_id="t"))
    header = parse_request_header(frame)
    outcome = await dispatcher.process(header, frame, "127.0.0.1:1")
    wire = outcome.to_bytes()[4:] if hasattr(outcome, "to_bytes") else outcome
    cid, response = decode_response(key, version, wire)
    assert cid == 5
    expected = ErrorCode.ILLEGAL_SASL_STATE if key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE) else 0
    assert "error_code" not in dir(response) or int(response.error_code) == expected


@pytest.mark.parametrize(("key", "version"), [(17, 0), (17, 1), (36, 0), (36, 1), (36, 2)])
async def test_sasl_requests_are_answered_illegal_sasl_state(key: int, version: int) -> None:
    """No listener has SASL: Kafka's KafkaApis answers SaslHandshake and SaslAuthenticate with
    ILLEGAL_SASL_STATE (and lists both in ApiVersions); the connection stays open."""
    broker = ScriptedBroker(_config())
    async with serving(broker) as (_listener, bound):
        conn = await connect(bound)
        advertised = {
            k.api_key: (k.min_version, k.max_version) for k in (await call(conn, api_versions_request())).api_keys
        }
        assert advertised[17] == (0, 1) and advertised[36] == (0, 2)
        request = sample(request_type(key, version))
        response = await call(conn, request, 2)
        assert int(response.error_code) == ErrorCode.ILLEGAL_SASL_STATE
        if key == ApiKey.SASL_AUTHENTICATE:
            assert response.error_message == "SaslAuthenticate request received after successful authentication"
        else:
            assert response.mechanisms == ()
        assert (await call(conn, metadata_request(), 3)).topics[0].name == "t"
        await conn.aclose()


def _replace(obj: Any, **changes: Any) -> Any:
    """dataclasses.replace for the fields this version has."""
    names = {f.name for f in dataclasses.fields(obj)}
    return dataclasses.replace(obj, **{k: v for k, v in changes.items() if k in names})


# -- over real sockets ------------------------------------------------------------------------


async def test_api_versions_and_fallback_over_tcp() -> None:
    broker = ScriptedBroker(_config())
    async with serving(broker) as (_listener, bound):
        conn = await connect(bound)
        response = await call(conn, api_versions_request(3))
        keys = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        assert keys[ApiKey.PRODUCE] == (0, 11) and keys[ApiKey.FETCH] == (4, 16) and keys[18] == (0, 4)
        assert keys[47] == (0, 0) and 71 not in keys  # OffsetDelete; no telemetry
        # an ApiVersions version from the future: v0 body with UNSUPPORTED_VERSION, header v0
        frame = struct.pack(">hhih", 18, 9, 77, 1) + b"c" + b"\x00garbage-body"
        await conn.send_frame(frame)
        raw = await conn.receive_frame()
        assert struct.unpack_from(">ih", raw) == (77, 35)
        # the same connection keeps working
        assert (await call(conn, metadata_request(), 78)).topics[0].name == "t"
        await conn.aclose()


@pytest.mark.parametrize("version", [3, 4])
@pytest.mark.parametrize(
    ("name", "software_version", "valid"),
    [
        ("confluent-kafka-python", "2.6.1-rdkafka-2.6.1", True),  # librdkafka via confluent-kafka
        ("librdkafka", "2.6.1", True),
        ("apache-kafka-java", "3.9.0", True),
        ("odradek-test", "1", True),
        ("a", "1", True),
        ("", "1", False),
        ("kcat", "", False),
        ("-kcat", "1", False),
        ("kcat.", "1", False),
        ("has space", "1", False),
        ("kcat", "1_0", False),
        ("kcat", "1.0\n", False),
        ("kät", "1", False),
    ],
)
async def test_api_versions_checks_the_client_software_name_and_version(
    name: str, software_version: str, valid: bool, version: int
) -> None:
    """Kafka's ApiVersionsRequest.isValid: v3+ names must match [a-zA-Z0-9](?:[a-zA-Z0-9\\-.]*[a-zA-Z0-9])?;
    otherwise INVALID_REQUEST with an empty key list."""
    dispatcher = Dispatcher(ScriptedBroker(_config()), _config(), ENDPOINT, CORE_AND_ADMIN)
    request = request_type(ApiKey.API_VERSIONS, version)(
        client_software_name=name, client_software_version=software_version
    )
    frame = bytearray(encode_request(request, correlation_id=2, client_id="c"))
    wire = await dispatcher.process(parse_request_header(frame), frame, "127.0.0.1:1")
    _, response = decode_response(ApiKey.API_VERSIONS, version, wire)
    if valid:
        assert int(response.error_code) == ErrorCode.NONE and len(response.api_keys) > 5
    else:
        assert int(response.error_code) == ErrorCode.INVALID_REQUEST and response.api_keys == ()


async def test_pipelined_requests_are_answered_in_order_and_acks0_gets_nothing() -> None:
    broker = ScriptedBroker(_config())
    broker.fetch_gate = trio.Event()
    async with serving(broker) as (_listener, bound):
        conn = await connect(bound)
        fetch = sample(request_type(ApiKey.FETCH, 11))
        fetch = _replace(fetch, session_id=0, session_epoch=-1, isolation_level=0)
        produce0 = ProduceRequestData(
            0, 1000, [TopicProduceData("t", [PartitionProduceData(0, bytearray(b"batch"))])], None, 7
        )
        await conn.send_frame(encode_request(fetch, correlation_id=1, client_id="p"))
        await conn.send_frame(encode_request(metadata_request(), correlation_id=2, client_id="p"))
        await conn.send_frame(encode_request(produce0, correlation_id=3, client_id="p"))
        await conn.send_frame(encode_request(api_versions_request(2), correlation_id=4, client_id="p"))
        # the fetch is parked; the later requests were processed (the acks=0 produce reached the core)
        with trio.fail_after(5):
            while not broker.produced:
                await trio.sleep(0.01)
        broker.fetch_gate.set()
        got = []
        for api_key, version in ((1, 11), (3, 8), (18, 2)):
            cid, _ = decode_response(api_key, version, await conn.receive_frame())
            got.append(cid)
        assert got == [1, 2, 4]  # in request order, and nothing for the acks=0 produce (3)
        assert broker.produced[0][0] == 0
        await conn.aclose()


async def test_pipelined_produce_requests_of_mixed_sizes_reach_the_core_in_order() -> None:
    """Pipelined Produce requests, large ones slow to append and small ones handled inline by the
    reader when nothing ordered runs before them: the core sees them, and the client gets the
    answers, in request order (idempotent producers depend on it)."""
    broker = ScriptedBroker(_config())
    broker.produce_delay = lambda size: 0.02 if size > 100_000 else 0.0
    sizes = [600_000, 100, 100, 700_000, 300_000, 100, 900_000, 100]
    async with serving(broker) as (_listener, bound):
        conn = await connect(bound)
        for i, size in enumerate(sizes):
            payload = bytearray(bytes([i]) * size)
            request = ProduceRequestData(1, 1000, [TopicProduceData("t", [PartitionProduceData(0, payload)])], None, 7)
            await conn.send_frame(encode_request(request, correlation_id=100 + i, client_id="p"))
        got = []
        with trio.fail_after(10):
            for _ in sizes:
                cid, _response = decode_response(0, 7, await conn.receive_frame())
                got.append(cid)
        assert got == [100 + i for i in range(len(sizes))]
        seen = [next(iter(parts.values())) for _acks, parts in broker.produced]
        assert [(len(v), v[0]) for v in seen] == [(size, i) for i, size in enumerate(sizes)]
        await conn.aclose()


class FailingPartitionBroker(ScriptedBroker):
    """Answers NOT_LEADER_OR_FOLLOWER for partition 1 of every produce."""

    async def produce(self, acks: int, timeout_ms: int, partitions: Mapping[TopicPartition, bytearray], **kw: Any):
        results = await super().produce(acks, timeout_ms, partitions, **kw)
        return {
            tp: PartitionProduceResult(ErrorCode.NOT_LEADER_OR_FOLLOWER) if tp.partition == 1 else r
            for tp, r in results.items()
        }


def _produce(acks: int, *parts: tuple[int, bytes], version: int = 7) -> ProduceRequestData:
    data = [PartitionProduceData(p, bytearray(b)) for p, b in parts]
    return ProduceRequestData(acks, 1000, [TopicProduceData("t", data)], None, version)


async def test_acks0_produce_with_a_partition_error_closes_after_earlier_answers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Kafka's handleProduceRequest: acks=0 with any partition error closes the connection (the
    producer notices and refreshes its metadata), after the answers to earlier requests; the
    requests pipelined behind it are not processed. Without errors nothing is sent back."""
    caplog.set_level(logging.INFO, logger="odradek.transport.tcp")
    broker = FailingPartitionBroker(_config())
    async with serving(broker) as (_listener, bound):
        conn = await connect(bound)
        await conn.send_frame(encode_request(metadata_request(), correlation_id=1, client_id="p"))
        await conn.send_frame(encode_request(_produce(0, (0, b"ok")), correlation_id=2, client_id="p"))
        await conn.send_frame(encode_request(_produce(0, (0, b"a"), (1, b"b")), correlation_id=3, client_id="p"))
        await conn.send_frame(encode_request(_produce(0, (0, b"late")), correlation_id=4, client_id="p"))
        await conn.send_frame(encode_request(metadata_request(), correlation_id=5, client_id="p"))
        cid, _ = decode_response(3, 8, await conn.receive_frame())
        assert cid == 1
        with trio.fail_after(5), pytest.raises(ConnectionError):
            await conn.receive_frame()
        await conn.aclose()
        # a Produce v0-2 with acks=0 is refused on every partition: closed too
        conn = await connect(bound)
        await conn.send_frame(encode_request(_produce(0, (0, b"old"), version=2), correlation_id=6, client_id="p"))
        with trio.fail_after(5), pytest.raises(ConnectionError):
            await conn.receive_frame()
        await conn.aclose()
    assert [list(parts.values()) for _acks, parts in broker.produced] == [[b"ok"], [b"a", b"b"]]
    closes = [r for r in caplog.records if "acks=0" in r.getMessage() and "closing connection" in r.getMessage()]
    assert closes and all(r.levelname == "INFO" for r in closes)
    assert "t-1: NOT_LEADER_OR_FOLLOWER" in closes[0].getMessage()


async def test_a_partition_named_twice_in_a_produce_is_appended_once() -> None:
    """Kafka collects a Produce request's partitions in a map: the last batch of a partition named
    twice is appended, and the response has one entry per partition."""
    broker = ScriptedBroker(_config())
    async with serving(broker) as (_listener, bound):
        conn = await connect(bound)
        response = await call(conn, _produce(1, (0, b"first"), (2, b"other"), (0, b"second")))
        await conn.aclose()
    assert broker.produced == [(1, {TopicPartition("t", 0): b"second", TopicPartition("t", 2): b"other"})]
    ((topic),) = response.responses
    assert [(p.index, int(p.error_code)) for p in topic.partition_responses] == [(0, 0), (2, 0)]


async def test_fetch_records_are_sent_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    data = bytes(range(256)) * 4
    path.write_bytes(data)
    broker = ScriptedBroker(_config(), records_file=path)
    async with serving(broker) as (_listener, bound):
        conn = await connect(bound)
        fetch = _replace(sample(request_type(ApiKey.FETCH, 11)), session_id=0, session_epoch=-1, isolation_level=1)
        response = await call(conn, fetch, 9)
        partition = response.responses[0].partitions[0]
        assert partition.records == data[3:53]
        assert partition.aborted_transactions == ()
        await conn.aclose()
    assert broker.slices and all(s.released == 1 for s in broker.slices)


async def test_oversize_frame_closes_only_that_connection() -> None:
    broker = ScriptedBroker(_config())
    async with serving(broker, socket_request_max_bytes=2048) as (_listener, bound):
        good = await connect(bound)
        bad = trio.socket.socket()
        await bad.connect((bound.host, bound.port))
        await bad.send(struct.pack(">i", 10_000_000))  # only the size: the body is never read
        with trio.fail_after(5):
            assert await bad.recv(10) == b""  # closed by the broker
        bad.close()
        garbage = trio.socket.socket()
        await garbage.connect((bound.host, bound.port))
        await garbage.send(struct.pack(">i", 12) + b"\x00\x03\x00\x08\x00\x00\x00\x01\x00\x10zz")  # client id too long
        with trio.fail_after(5):
            assert await garbage.recv(10) == b""
        garbage.close()
        assert (await call(good, metadata_request(), 3)).topics[0].name == "t"
        await good.aclose()


async def test_unsupported_version_and_unknown_key_close_the_connection() -> None:
    broker = ScriptedBroker(_config())
    async with serving(broker) as (_listener, bound):
        for frame in (struct.pack(">hhih", 3, 42, 1, -1), struct.pack(">hhih", 5000, 0, 1, -1)):
            conn = await connect(bound)
            await conn.send_frame(frame)
            with trio.fail_after(5), pytest.raises(ConnectionError):
                await conn.receive_frame()
            await conn.aclose()


async def test_request_that_fails_to_decode_closes_after_earlier_answers() -> None:
    broker = ScriptedBroker(_config())
    async with serving(broker) as (_listener, bound):
        conn = await connect(bound)
        await conn.send_frame(encode_request(metadata_request(), correlation_id=1, client_id="x"))
        await conn.send_frame(struct.pack(">hhih", 3, 8, 2, -1) + b"\x7f\xff\xff\xff")  # 2**31-1 topics
        cid, _ = decode_response(3, 8, await conn.receive_frame())
        assert cid == 1
        with trio.fail_after(5), pytest.raises(ConnectionError):
            await conn.receive_frame()
        await conn.aclose()


async def test_backpressure_stops_reading_at_queued_max_requests() -> None:
    broker = ScriptedBroker(_config())
    broker.fetch_gate = trio.Event()
    async with serving(broker, queued_max_requests=2) as (_listener, bound):
        conn = await connect(bound)
        fetch = _replace(sample(request_type(ApiKey.FETCH, 11)), session_id=0, session_epoch=-1, isolation_level=0)
        for cid in range(5):
            await conn.send_frame(encode_request(fetch, correlation_id=cid, client_id="bp"))
        with trio.fail_after(10):  # the first two are read however slow the machine ...
            while broker.fetch_calls < 2:
                await trio.sleep(0.01)
        await trio.sleep(0.2)
        assert broker.fetch_calls == 2  # ... and the other three stay unread in the socket
        broker.fetch_gate.set()
        for cid in range(5):
            assert decode_response(1, 11, await conn.receive_frame())[0] == cid
        await conn.aclose()


async def test_graceful_shutdown_answers_in_flight_requests() -> None:
    broker = ScriptedBroker(_config())
    broker.fetch_gate = trio.Event()
    listener = TcpListener(_config(), broker, ENDPOINT)
    stop = trio.CancelScope()

    async def run_listener(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        with stop:
            await listener.serve(task_status=task_status)

    async with trio.open_nursery() as nursery:
        (bound,) = await nursery.start(run_listener)
        conn = await connect(bound)
        fetch = _replace(sample(request_type(ApiKey.FETCH, 11)), session_id=0, session_epoch=-1, isolation_level=0)
        await conn.send_frame(encode_request(fetch, correlation_id=31, client_id="g"))
        while broker.fetch_calls == 0:
            await trio.sleep(0.01)
        stop.cancel()  # the broker stops while the fetch is parked
        await trio.sleep(0.05)
        # new connections are refused at once ...
        with pytest.raises(OSError):
            await connect(bound)
        broker.fetch_gate.set()  # ... while the parked request still completes and is answered
        with trio.fail_after(2):
            cid, _ = decode_response(1, 11, await conn.receive_frame())
            assert cid == 31
            with pytest.raises(ConnectionError):
                await conn.receive_frame()
        await conn.aclose()
    assert not listener.connections


async def test_graceful_shutdown_deadline_cancels_stuck_requests(autojump_clock: trio.testing.MockClock) -> None:
    broker = ScriptedBroker(_config())
    broker.fetch_gate = trio.Event()  # never set: the request would wait forever
    listener = TcpListener(_config(), broker, ENDPOINT)
    dispatcher = Dispatcher(broker, broker.config, ENDPOINT, CORE_AND_ADMIN)
    a, b = trio.socket.socketpair()
    conn = KafkaConnection(a, dispatcher, peer="pair", max_request_bytes=1 << 20, max_in_flight=4, idle_timeout_s=600)
    listener.connections.add(conn)
    stopping = trio.Event()
    async with trio.open_nursery() as nursery:
        connections = await nursery.start(listener._host_connections, stopping, 5.0)
        connections.start_soon(conn.run)
        fetch = _replace(sample(request_type(ApiKey.FETCH, 11)), session_id=0, session_epoch=-1, isolation_level=0)
        frame = encode_request(fetch, correlation_id=1, client_id="s")
        await b.send(struct.pack(">i", len(frame)) + frame)
        await trio.sleep(1)
        assert broker.fetch_calls == 1
        start = trio.current_time()
        stopping.set()
        await conn.closed.wait()
        assert trio.current_time() - start == pytest.approx(5.0)
    b.close()


async def test_idle_connection_is_closed(autojump_clock: trio.testing.MockClock) -> None:
    broker = ScriptedBroker(_config())
    dispatcher = Dispatcher(broker, broker.config, ENDPOINT, CORE_AND_ADMIN)
    a, b = trio.socket.socketpair()
    conn = KafkaConnection(a, dispatcher, peer="pair", max_request_bytes=1 << 20, max_in_flight=4, idle_timeout_s=600)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.run)
        start = trio.current_time()
        # one request resets the idle timer ...
        await trio.sleep(500)
        frame = encode_request(metadata_request(), correlation_id=1, client_id="i")
        await b.send(struct.pack(">i", len(frame)) + frame)
        await conn.closed.wait()
        # ... so the connection closes 600 s after it, not after the start
        assert trio.current_time() - start >= 1100
    b.close()


def _paired(broker: ScriptedBroker, **kw: Any) -> tuple[KafkaConnection, trio.socket.SocketType]:
    """A connection served on one end of a socket pair; the test is the client on the other."""
    dispatcher = Dispatcher(broker, broker.config, ENDPOINT, CORE_AND_ADMIN)
    a, b = trio.socket.socketpair()
    settings: dict[str, Any] = {"max_request_bytes": 1 << 20, "max_in_flight": 4, "idle_timeout_s": 600, **kw}
    return KafkaConnection(a, dispatcher, peer="pair", **settings), b


async def test_a_schema_that_cannot_be_loaded_closes_with_one_error_naming_the_cause(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """At the fd limit kio's lazy import fails with EMFILE: the log says so, once, at ERROR, and
    does not blame the client with "no request schema"."""
    import errno

    from odradek.protocol import codec

    def emfile(api_key: int, api_version: int) -> Any:
        raise OSError(errno.EMFILE, "Too many open files")

    frame = encode_request(metadata_request(), correlation_id=1, client_id="e")
    monkeypatch.setattr(codec, "load_request_schema", emfile)
    codec.request_type.cache_clear()
    broker = ScriptedBroker(_config())
    async with serving(broker) as (_listener, bound):
        conn = await connect(bound)
        await conn.send_frame(frame)
        with trio.fail_after(5), pytest.raises(ConnectionError):
            await conn.receive_frame()
        await conn.aclose()
    codec.request_type.cache_clear()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "EMFILE" in errors[0].getMessage() and not errors[0].exc_info
    assert not any("no request schema" in r.getMessage() for r in caplog.records)


async def test_read_ahead_stops_at_the_byte_bound_and_resumes_as_answers_are_written(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Pipelined acks=-1 Produce requests queued behind a slow one: the reader stops reading once
    the unanswered frames hold max_read_ahead_bytes (not at queued.max.requests), and reads on as
    answers go out; a frame bigger than the bound is read when nothing else is in flight."""
    broker = ScriptedBroker(_config())
    broker.produce_delay = lambda size: 100
    bound = 10_000
    conn, b = _paired(broker, max_in_flight=100, max_read_ahead_bytes=bound)
    small = encode_request(_produce(-1, (0, b"x" * 3000)), correlation_id=1, client_id="b")
    big = encode_request(_produce(-1, (0, b"y" * 3 * bound)), correlation_id=2, client_id="b")
    frames = [small] * 8 + [big, small]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.run)
        nursery.start_soon(_send_frames, b, frames)
        await trio.testing.wait_all_tasks_blocked()
        admitted = -(-bound // len(small))  # read until the bound is reached or passed
        assert conn._arrived == admitted < 8
        for _ in range(len(frames)):
            await _receive_frame(b)
            await trio.testing.wait_all_tasks_blocked()
            # a frame is read only while those before it hold less than the bound: the big one
            # when nothing else is in flight, and nothing behind it until it is answered
            assert sum(p.size for p in conn._queued[:-1]) < bound
        assert len(broker.produced) == len(frames)
        nursery.cancel_scope.cancel()
    b.close()


async def test_answers_not_read_by_the_client_count_against_the_read_ahead(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A client that sends requests and never reads the answers: once the answers waiting to be
    written (the socket is full) and the unanswered frames hold max_read_ahead_bytes, the
    reader stops reading, as Kafka mutes such a channel; before, each connection held up to
    queued.max.requests answers (50 MB per connection with 110 KB Metadata answers). Reading
    the answers lets it go on, and every request is answered in order."""
    broker = ScriptedBroker(_config())
    frame_bytes = len(encode_request(metadata_request(), correlation_id=0, client_id="m"))
    count = 1500
    bound = frame_bytes * count + 1  # the frames alone never reach it, their answers do
    conn, b = _paired(broker, max_in_flight=2000, max_read_ahead_bytes=bound)
    conn.sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_SNDBUF, 4096)
    b.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_RCVBUF, 4096)
    frames = [encode_request(metadata_request(), correlation_id=i, client_id="m") for i in range(count)]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.run)
        nursery.start_soon(_send_frames, b, frames)
        await trio.testing.wait_all_tasks_blocked()
        assert 0 < conn._arrived < count
        # requests admitted below the bound may still add their answers: a little over it
        assert bound <= conn._held < 2 * bound
        assert any(p.size > len(frames[0]) for p in conn._queued)  # answers are counted
        for i in range(count):
            cid, _ = decode_response(ApiKey.METADATA, 8, await _receive_frame(b))
            assert cid == i
        nursery.cancel_scope.cancel()
    b.close()


async def test_an_inline_produce_is_finished_and_answered_when_reading_stops(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An acks=1 Produce runs in the reader task, and a Produce may yield between partitions: a
    graceful close (the broker stopping) while it runs must not cut it between partitions with
    no answer (a client would retry what was appended as duplicates): it finishes, is
    answered, and then the connection closes."""
    broker = ScriptedBroker(_config())
    broker.produce_delay = lambda size: 1.0
    conn, b = _paired(broker)
    frame = encode_request(_produce(1, (0, b"x")), correlation_id=7, client_id="p")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.run)
        await b.send(struct.pack(">i", len(frame)) + frame)
        await trio.testing.wait_all_tasks_blocked()
        assert not broker.produced  # in the middle of its work
        conn.stop_reading()
        cid, response = decode_response(ApiKey.PRODUCE, 7, await _receive_frame(b))
        assert cid == 7 and int(response.responses[0].partition_responses[0].error_code) == 0
        assert len(broker.produced) == 1
        with trio.fail_after(5):
            await conn.closed.wait()
    b.close()


async def _send_frames(sock: trio.socket.SocketType, frames: list[bytes]) -> None:
    for frame in frames:
        await sock.send(struct.pack(">i", len(frame)) + frame)


async def _receive_frame(sock: trio.socket.SocketType) -> bytes:
    async def exactly(n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = await sock.recv(n - len(out))
            assert chunk
            out += chunk
        return out

    (size,) = struct.unpack(">i", await exactly(4))
    return await exactly(size)


@pytest.mark.parametrize("inside_frame", [False, True])
async def test_a_peer_that_closes_while_a_request_is_parked_is_closed_at_once(
    autojump_clock: trio.testing.MockClock, inside_frame: bool
) -> None:
    """A FIN from the peer closes the connection EOF_GRACE_S later, cancelling a parked long
    poll, instead of holding the socket (CLOSE-WAIT) until the fetch's max_wait."""
    broker = ScriptedBroker(_config())
    broker.fetch_gate = trio.Event()  # never set: the long poll would wait forever
    conn, b = _paired(broker)
    fetch = _replace(sample(request_type(ApiKey.FETCH, 11)), session_id=0, session_epoch=-1, isolation_level=0)
    frame = encode_request(fetch, correlation_id=1, client_id="f")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.run)
        await b.send(struct.pack(">i", len(frame)) + frame + (b"\0\0" if inside_frame else b""))
        await trio.testing.wait_all_tasks_blocked()
        assert broker.fetch_calls == 1
        start = trio.current_time()
        b.shutdown(trio.socket.SHUT_WR)
        with trio.fail_after(60):
            await conn.closed.wait()
        assert trio.current_time() - start == pytest.approx(EOF_GRACE_S)
        assert await b.recv(100) == b""  # the parked fetch was not answered: the socket is closed
    b.close()


async def test_a_peer_that_half_closes_gets_the_answers_that_are_ready(autojump_clock: trio.testing.MockClock) -> None:
    broker = ScriptedBroker(_config())
    conn, b = _paired(broker)
    frame = encode_request(metadata_request(), correlation_id=7, client_id="h")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.run)
        await b.send(struct.pack(">i", len(frame)) + frame)
        b.shutdown(trio.socket.SHUT_WR)
        await conn.closed.wait()
    received = bytearray()
    while chunk := await b.recv(65536):
        received += chunk
    assert decode_response(ApiKey.METADATA, 8, bytes(received[4:]))[0] == 7
    b.close()


@pytest.mark.timeout(60)  # without the deadline the connection would wait forever
async def test_a_peer_that_stops_reading_responses_is_closed(autojump_clock: trio.testing.MockClock) -> None:
    """Writes go straight to the socket; only a write that has to wait for the peer arms the
    stalled-write deadline (connections.max.idle.ms). A client that pipelines requests and never
    reads the answers is closed that long after the socket filled up, not before."""
    broker = ScriptedBroker(_config())
    dispatcher = Dispatcher(broker, broker.config, ENDPOINT, CORE_AND_ADMIN)
    a, b = trio.socket.socketpair()
    conn = KafkaConnection(a, dispatcher, peer="pair", max_request_bytes=1 << 20, max_in_flight=4, idle_timeout_s=600)
    names = [f"topic-{i:04d}-with-a-long-name" for i in range(400)]
    frame = encode_request(metadata_request(topics=names), correlation_id=1, client_id="s")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.run)
        start = trio.current_time()
        for _ in range(40):  # ~40 answers of ~20 KB: more than both socket buffers hold
            with trio.move_on_after(1):
                await b.send(struct.pack(">i", len(frame)) + frame)
        await conn.closed.wait()
        assert 600 <= trio.current_time() - start < 700
    b.close()


async def test_listener_reports_bound_port_for_port_zero() -> None:
    broker = ScriptedBroker(_config())
    async with serving(broker) as (listener, bound):
        assert bound.port != 0 and listener.bound == [bound]
        sock = trio.socket.socket()
        await sock.connect((bound.host, bound.port))
        sock.close()


async def test_accept_backs_off_when_out_of_file_descriptors(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    import errno

    class ExhaustedSocket:
        """accept() fails with EMFILE three times, then a real connection arrives."""

        def __init__(self, real: trio.socket.SocketType) -> None:
            self.real = real
            self.calls: list[float] = []

        async def accept(self) -> Any:
            self.calls.append(trio.current_time())
            if len(self.calls) <= 3:
                raise OSError(errno.EMFILE, "Too many open files")
            return await self.real.accept()

    broker = ScriptedBroker(_config())
    listener = TcpListener(_config(), broker, ENDPOINT)
    dispatcher = Dispatcher(broker, broker.config, ENDPOINT, CORE_AND_ADMIN)
    real = trio.socket.socket()
    await real.bind(("127.0.0.1", 0))
    real.listen()
    fake = ExhaustedSocket(real)
    async with trio.open_nursery() as nursery:
        caplog.set_level(logging.INFO, "odradek.transport.tcp")
        nursery.start_soon(listener._accept_loop, fake, dispatcher, nursery)
        client = trio.socket.socket()
        await client.connect(real.getsockname())
        while not listener.connections:
            await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    client.close()
    real.close()
    gaps = [b - a for a, b in zip(fake.calls, fake.calls[1:], strict=False)][:3]
    assert all(g >= 0.1 for g in gaps), gaps  # waited between attempts instead of spinning
    # one ERROR when it starts failing, one INFO when it works again
    assert [(r.levelname, "EMFILE" in r.getMessage()) for r in caplog.records if "accepts in" in r.getMessage()] == [
        ("ERROR", True),
        ("INFO", False),
    ]


async def test_lasting_accept_failures_are_logged_once_a_minute(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    import errno

    class Exhausted:
        """accept() fails with EMFILE for 150 s, then blocks."""

        def __init__(self) -> None:
            self.calls = 0

        async def accept(self) -> Any:
            self.calls += 1
            if trio.current_time() < 150:
                raise OSError(errno.EMFILE, "Too many open files")
            await trio.sleep_forever()

    broker = ScriptedBroker(_config())
    listener = TcpListener(_config(), broker, ENDPOINT)
    dispatcher = Dispatcher(broker, broker.config, ENDPOINT, CORE_AND_ADMIN)
    fake = Exhausted()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(listener._accept_loop, fake, dispatcher, nursery)
        await trio.sleep(200)
        nursery.cancel_scope.cancel()
    assert fake.calls > 1000  # ten attempts a second ...
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 3, errors  # ... logged at 0 s, 60 s and 120 s
    assert "EMFILE" in errors[0] and "still failing after 60 s (600 more failures)" in errors[1]


async def test_fetch_slices_are_released_when_the_client_leaves_before_the_answer(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"x" * 4096)
    broker = ScriptedBroker(_config(), records_file=path)
    broker.fetch_gate = trio.Event()
    async with serving(broker) as (listener, bound):
        conn = await connect(bound)
        fetch = _replace(sample(request_type(ApiKey.FETCH, 11)), session_id=0, session_epoch=-1, isolation_level=0)
        await conn.send_frame(encode_request(fetch, correlation_id=1, client_id="gone"))
        while broker.fetch_calls == 0:
            await trio.sleep(0.01)
        await conn.aclose()  # the client is gone before the records are read ...
        broker.fetch_gate.set()  # ... which happens now
        with trio.fail_after(5):
            while listener.connections:
                await trio.sleep(0.01)
    assert broker.slices and all(s.released == 1 for s in broker.slices)


# -- a handler that fails: an error response, not a closed connection ----------------------------


class FailingBroker:
    """A core facade every use of which fails the way a bug would."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.node_id = 1
        self.cluster_id = "failing"
        self.metrics = BrokerMetrics()
        self.quotas = None  # no client quotas: the handlers' core calls are what fails
        self.touched = 0

    def __getattr__(self, name: str) -> Any:
        self.touched += 1
        raise RuntimeError(f"boom: {name}")


def _error_codes(entity: Any, top: bool = True) -> list[tuple[bool, int]]:
    """(at the top level, code) of every error_code field in a decoded kio response."""
    out: list[tuple[bool, int]] = []
    for f in dataclasses.fields(entity):
        value = getattr(entity, f.name)
        if f.name.endswith("error_code") and "tag" not in f.metadata:  # partition_error_code too
            out.append((top, int(value)))
        elif dataclasses.is_dataclass(value):
            out += _error_codes(value, False)
        elif isinstance(value, tuple):
            for item in value:
                if dataclasses.is_dataclass(item):
                    out += _error_codes(item, False)
    return out


ALL_HANDLERS = load_handlers()


@pytest.mark.parametrize(
    ("key", "version"),
    [
        (k, v)
        for k in ALL_HANDLERS
        for v in range(SUPPORTED_VERSIONS[k].min, SUPPORTED_VERSIONS[k].max + 1)
        if k not in (ApiKey.PRODUCE, ApiKey.API_VERSIONS)
    ],
)
async def test_a_failing_handler_is_answered_with_unknown_server_error(key: int, version: int) -> None:
    """Kafka's getErrorResponse for every API and version: when the core fails, the response
    decodes, every error code in it is UNKNOWN_SERVER_ERROR, and what the request named (topics,
    partitions, groups, resources) gets entries of its own carrying it."""
    broker = FailingBroker(_config())
    dispatcher = Dispatcher(broker, broker.config, ENDPOINT, ALL_HANDLERS)
    request = sample(request_type(key, version))
    if key == ApiKey.FETCH:
        request = _replace(request, session_id=0, session_epoch=-1, isolation_level=0)
    if key == ApiKey.LIST_OFFSETS and version >= 2:
        request = _replace(request, isolation_level=0)
    frame = bytearray(encode_request(request, correlation_id=9, client_id="t"))
    outcome = await dispatcher.process(parse_request_header(frame), frame, "127.0.0.1:1")
    wire = outcome.to_bytes()[4:] if hasattr(outcome, "to_bytes") else outcome
    cid, response = decode_response(key, version, wire)
    assert cid == 9
    codes = _error_codes(response)
    if key == ApiKey.DESCRIBE_LOG_DIRS and version < 3:
        # no error field before v3: Kafka's getErrorResponse is an empty result list
        assert codes == [] and response.results == ()
        return
    if broker.touched:
        assert codes and {code for _, code in codes} == {ErrorCode.UNKNOWN_SERVER_ERROR}, codes
    else:  # answered without the core (validation the handler does itself)
        assert codes
    nested = [code for top, code in codes if not top]
    if key in (ApiKey.FETCH, ApiKey.LIST_OFFSETS, ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH, ApiKey.TXN_OFFSET_COMMIT):
        assert nested, "every partition the request named gets an entry"
    if key == ApiKey.OFFSET_FETCH:  # partitions named by a list of indexes; v8: per group
        answered = response.groups[0] if version >= 8 else response
        assert version < 8 or response.groups[0].group_id == "odradek"
        assert answered.topics[0].name == "odradek" and answered.topics[0].partitions[0].partition_index == 3
    if key == ApiKey.FIND_COORDINATOR and version >= 4:  # keys named by a list of strings
        assert [c.key for c in response.coordinators] == ["odradek"]
    if key == ApiKey.DESCRIBE_GROUPS:  # groups named by a list of ids
        assert response.groups[0].group_id == "odradek"
    if key == ApiKey.DESCRIBE_TRANSACTIONS:  # transactional ids named by a list of strings
        assert [s.transactional_id for s in response.transaction_states] == ["odradek"]


async def test_a_failing_produce_answers_each_partition_and_acks0_closes() -> None:
    broker = FailingBroker(_config())
    dispatcher = Dispatcher(broker, broker.config, ENDPOINT, ALL_HANDLERS)
    batch = bytearray(records.build_batch([(b"k", b"v", [], 1_000)]))
    for acks in (1, -1, 0):
        request = ProduceRequestData(acks, 1000, [TopicProduceData("t", [PartitionProduceData(4, batch)])], None, 7)
        frame = bytearray(encode_request(request, correlation_id=3, client_id="t"))
        if acks == 0:  # no response to carry the error: the connection closes (as Kafka's)
            with pytest.raises(RuntimeError, match="boom"):
                await dispatcher.process(parse_request_header(frame), frame, "127.0.0.1:1")
            continue
        wire = await dispatcher.process(parse_request_header(frame), frame, "127.0.0.1:1")
        _, response = decode_response(0, 7, wire)
        (topic,) = response.responses
        assert topic.name == "t"
        assert [(p.index, int(p.error_code)) for p in topic.partition_responses] == [(4, -1)]


async def test_a_failing_handler_keeps_the_connection(caplog: pytest.LogCaptureFixture) -> None:
    """Over TCP: the failed request is answered with the error, logged with its traceback, and
    the next request on the same connection is served."""

    class Broken(ScriptedBroker):
        async def list_offsets(self, replica_id: int, isolation_level: int, partitions: Any) -> Any:
            raise RuntimeError("list_offsets bug")

    broker = Broken(_config())
    request = sample(request_type(ApiKey.LIST_OFFSETS, 5))
    request = _replace(request, isolation_level=0)
    async with serving(broker) as (_listener, bound):
        conn = await connect(bound)
        response = await call(conn, request, 1)
        assert [(t.name, [(p.partition_index, int(p.error_code)) for p in t.partitions]) for t in response.topics] == [
            ("odradek", [(3, ErrorCode.UNKNOWN_SERVER_ERROR)])
        ]
        assert (await call(conn, metadata_request(), 2)).topics[0].name == "t"
        await conn.aclose()
    failures = [r for r in caplog.records if "failed unexpectedly" in r.getMessage()]
    assert failures and failures[0].exc_info is not None


async def test_a_panic_of_kios_native_code_closes_only_its_connection(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """pyo3 raises a panic of kio's native code (an allocation failing while a huge request is
    decoded under a memory limit) as a BaseException, which ``except Exception`` misses: it
    took the whole broker down. It is now the request's InvalidRequest: its connection closes,
    the listener and other connections go on."""
    panic = type("PanicException", (BaseException,), {"__module__": "pyo3_runtime"})
    poisoned = request_type(ApiKey.LIST_OFFSETS, 5)
    real_reader = codec._reader

    def reader(cls: type) -> Any:
        if cls is not poisoned:
            return real_reader(cls)

        def read(_buf: Any, _offset: int) -> Any:
            raise panic("PyObject pointer is null")

        return read

    monkeypatch.setattr(codec, "_reader", reader)
    request = _replace(sample(poisoned), isolation_level=0)
    frame = bytearray(encode_request(request, correlation_id=1, client_id="t"))
    with pytest.raises(InvalidRequest, match="kio panicked"):
        decode_request(ApiKey.LIST_OFFSETS, 5, frame, parse_request_header(frame).body_offset)
    async with serving(ScriptedBroker(_config())) as (_listener, bound):
        other = await connect(bound)
        conn = await connect(bound)
        await conn.send_frame(encode_request(request, correlation_id=1, client_id="t"))
        with trio.fail_after(5), pytest.raises(ConnectionError):
            await conn.receive_frame()
        await conn.aclose()
        assert (await call(other, metadata_request(), 2)).topics[0].name == "t"
        fresh = await connect(bound)
        assert (await call(fresh, metadata_request(), 3)).topics[0].name == "t"
        await other.aclose()
        await fresh.aclose()
    assert any("kio panicked" in r.getMessage() for r in caplog.records)


async def test_an_unreachable_metadata_store_is_answered_request_timed_out(caplog: pytest.LogCaptureFixture) -> None:
    """A handler failing because the metadata store is out of reach: REQUEST_TIMED_OUT (retriable,
    what a ZooKeeper-mode Kafka broker's admin requests end with) and one WARNING line with the
    reason, no traceback; the connection carries on."""

    class StoreAway(ScriptedBroker):
        async def list_offsets(self, replica_id: int, isolation_level: int, partitions: Any) -> Any:
            raise MetadataUnavailable("no ZooKeeper answered at 127.0.0.1:1")

    request = _replace(sample(request_type(ApiKey.LIST_OFFSETS, 5)), isolation_level=0)
    async with serving(StoreAway(_config())) as (_listener, bound):
        conn = await connect(bound)
        response = await call(conn, request, 1)
        assert [(t.name, [(p.partition_index, int(p.error_code)) for p in t.partitions]) for t in response.topics] == [
            ("odradek", [(3, ErrorCode.REQUEST_TIMED_OUT)])
        ]
        assert (await call(conn, metadata_request(), 2)).topics[0].name == "t"
        await conn.aclose()
    (line,) = [r for r in caplog.records if "ListOffsets v5" in r.getMessage()]
    assert line.levelname == "WARNING" and line.exc_info is None
    assert "no ZooKeeper answered" in line.getMessage() and "REQUEST_TIMED_OUT" in line.getMessage()


class OutOfRangeOffsets(ScriptedBroker):
    """Returns an offset beyond int64 for ListOffsets (as a hostile batch once made the core do):
    the handler succeeds, its response cannot be encoded."""

    async def list_offsets(self, replica_id: int, isolation_level: int, partitions: Any) -> Any:
        return {p.tp: ListOffsetsPartitionResult(ErrorCode.NONE, p.timestamp, 2**63, 0) for p in partitions}


async def test_a_response_that_cannot_be_encoded_is_answered_unknown_server_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Pipelined ListOffsets (whose response cannot be encoded) between two Metadata requests:
    the client gets ListOffsets' error response, UNKNOWN_SERVER_ERROR for the partition it
    named, in its place; the connection stays open; the broker logs one ERROR line naming the
    API and the reason, without a traceback."""
    caplog.set_level(logging.INFO)
    request = _replace(sample(request_type(ApiKey.LIST_OFFSETS, 5)), isolation_level=0)
    async with serving(OutOfRangeOffsets(_config())) as (_listener, bound):
        conn = await connect(bound)
        await conn.send_frame(encode_request(metadata_request(), correlation_id=1, client_id="lo"))
        await conn.send_frame(encode_request(request, correlation_id=2, client_id="lo"))
        await conn.send_frame(encode_request(metadata_request(), correlation_id=3, client_id="lo"))
        with trio.fail_after(5):
            assert decode_response(3, 8, await conn.receive_frame())[0] == 1
            cid, response = decode_response(2, 5, await conn.receive_frame())
            assert decode_response(3, 8, await conn.receive_frame())[0] == 3
        assert cid == 2
        assert [(t.name, [(p.partition_index, int(p.error_code)) for p in t.partitions]) for t in response.topics] == [
            ("odradek", [(3, ErrorCode.UNKNOWN_SERVER_ERROR)])
        ]
        assert (await call(conn, metadata_request(), 4)).topics[0].name == "t"
        await conn.aclose()
    problems = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(problems) == 1, [r.getMessage() for r in problems]
    (line,) = problems
    assert line.levelname == "ERROR" and line.exc_info is None
    assert "ListOffsets v5" in line.getMessage() and "cannot be encoded" in line.getMessage()
    assert "struct.error" in line.getMessage() and "UNKNOWN_SERVER_ERROR" in line.getMessage()


async def test_a_client_id_that_is_not_utf8_is_served() -> None:
    """Kafka decodes the client id leniently (U+FFFD for malformed bytes) and serves the request;
    odradek used to close the connection."""
    body = encode_request(metadata_request(1), correlation_id=5, client_id="x")
    header = parse_request_header(body)
    raw = b"bad\xff\xc3("
    frame = struct.pack(">hhih", 3, 1, 5, len(raw)) + raw + body[header.body_offset :]
    async with serving(ScriptedBroker(_config())) as (_listener, bound):
        conn = await connect(bound)
        await conn.send_frame(frame)
        with trio.fail_after(5):
            cid, response = decode_response(3, 1, await conn.receive_frame())
        assert cid == 5 and response.topics[0].name == "t"
        assert (await call(conn, metadata_request(), 6)).topics[0].name == "t"
        await conn.aclose()


class GatedMetadata(ScriptedBroker):
    """Metadata waits for ``gate`` (after setting ``entered``): an ordered request that holds the
    requests pipelined behind it until the test lets it finish."""

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self.entered = trio.Event()
        self.gate = trio.Event()

    async def metadata(self, topics: Any, allow_auto_create: bool, *, listener_name: Any = None) -> Any:
        self.entered.set()
        await self.gate.wait()
        return await super().metadata(topics, allow_auto_create, listener_name=listener_name)


class _FixedRandom(random.Random):
    """trio's run-queue coin: ``random()`` always gives ``value``, so every batch of woken tasks
    runs in one fixed order (trio reverses a batch when the coin is below 0.5)."""

    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


@pytest.mark.parametrize("coin", [0.0, 0.99], ids=["batches-reversed", "batches-kept"])
async def test_requests_before_a_malformed_one_are_answered_whatever_the_wake_order(
    coin: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ordered request X (Metadata, held by the core), an unordered A (ApiVersions) and a
    malformed B, pipelined: A and B both wait for X and wake together when it finishes. Whichever
    of them trio runs first, A is answered after X, then the connection closes (B is not). The
    scheduler's coin is fixed, so each case is one deterministic interleaving and the two cases
    cover both orders of A and B."""
    monkeypatch.setattr(trio._core._run, "_r", _FixedRandom(coin))
    broker = GatedMetadata(_config())
    async with serving(broker) as (_listener, bound):
        conn = await connect(bound)
        x = encode_request(metadata_request(), correlation_id=0, client_id="pl")
        a = encode_request(api_versions_request(2), correlation_id=1, client_id="pl")
        b = struct.pack(">hhih", 3, 8, 2, 2) + b"pl" + struct.pack(">i", 1000)  # 1000 topics in 4 bytes
        for frame in (x, a, b):
            await conn.send_frame(frame)
        with trio.fail_after(5):
            await broker.entered.wait()
            await trio.testing.wait_all_tasks_blocked()  # A and B are read and wait for X
            broker.gate.set()
            assert decode_response(3, 8, await conn.receive_frame())[0] == 0
            assert decode_response(18, 2, await conn.receive_frame())[0] == 1
            with pytest.raises(ConnectionError):
                await conn.receive_frame()
        await conn.aclose()


class OffsetsNotAvailable(ScriptedBroker):
    """ListOffsets answers OFFSET_NOT_AVAILABLE (a new leader whose HW lags) and notes what it
    was asked."""

    asked: list[TopicPartition] = []

    async def list_offsets(self, replica_id: int, isolation_level: int, partitions: Any) -> Any:
        self.asked.extend(p.tp for p in partitions)
        return {p.tp: ListOffsetsPartitionResult(ErrorCode.OFFSET_NOT_AVAILABLE) for p in partitions}


@pytest.mark.parametrize("version", [4, 5])
async def test_list_offsets_duplicates_and_offset_not_available_by_version(version: int) -> None:
    """As Kafka answers ListOffsets: a partition named twice is INVALID_REQUEST each time (and
    not looked up), and OFFSET_NOT_AVAILABLE, new in v5, is LEADER_NOT_AVAILABLE before it."""
    request = sample(request_type(ApiKey.LIST_OFFSETS, version))
    topic = request.topics[0]
    part = topic.partitions[0]
    twice = _replace(topic, partitions=(part, part, _replace(part, partition_index=part.partition_index + 1)))
    request = _replace(request, isolation_level=0, topics=(twice,))
    broker = OffsetsNotAvailable(_config())
    broker.asked = []
    async with serving(broker) as (_listener, bound):
        conn = await connect(bound)
        response = await call(conn, request, 1)
        await conn.aclose()
    first = part.partition_index
    unavailable = ErrorCode.OFFSET_NOT_AVAILABLE if version >= 5 else ErrorCode.LEADER_NOT_AVAILABLE
    assert [(p.partition_index, int(p.error_code)) for p in response.topics[0].partitions] == [
        (first, ErrorCode.INVALID_REQUEST),
        (first, ErrorCode.INVALID_REQUEST),
        (first + 1, unavailable),
    ]
    assert broker.asked == [TopicPartition(topic.name, first + 1)]


@pytest.mark.parametrize("replica_id", [-1, -2])
async def test_a_negative_replica_id_fetches_as_a_consumer(replica_id: int) -> None:
    """Kafka's FetchRequest.isConsumer: -2 (a debugging consumer) in Fetch reads as any
    consumer, up to the HW or LSO; only the broker's own coordinators read to the log end."""
    asked: list[int] = []

    class Noting(ScriptedBroker):
        async def fetch(self, replica_id: int, *args: Any, **kw: Any) -> Any:
            asked.append(replica_id)
            return await super().fetch(replica_id, *args, **kw)

    fetch = _replace(
        sample(request_type(ApiKey.FETCH, 11)), session_id=0, session_epoch=-1, isolation_level=0, replica_id=replica_id
    )
    async with serving(Noting(_config())) as (_listener, bound):
        conn = await connect(bound)
        await call(conn, fetch, 1)
        await conn.aclose()
    assert asked == [-1]


#: (Fetch version, replica id, rack sent, rack the broker gets; None: no client metadata)
_CLIENT_METADATA_CASES = [(11, -1, "b", "b"), (11, -1, "", ""), (10, -1, "", None), (11, 2, "b", None)]


@pytest.mark.parametrize(("version", "replica_id", "rack", "expected"), _CLIENT_METADATA_CASES)
async def test_fetch_v11_gives_the_broker_the_consumers_metadata(
    version: int, replica_id: int, rack: str, expected: str | None
) -> None:
    """KIP-392: a consumer's Fetch v11+ reaches the broker with its rack, client id, address,
    principal and listener (Kafka's ClientMetadata); an older Fetch or a follower's, without."""
    broker = ScriptedBroker(_config())
    fetch = _replace(sample(request_type(ApiKey.FETCH, version)), session_id=0, session_epoch=-1, isolation_level=0)
    fetch = _replace(fetch, replica_id=replica_id, **({"rack_id": rack} if version >= 11 else {}))
    async with serving(broker) as (_listener, bound):
        conn = await connect(bound)
        await call(conn, fetch, version)
        await conn.aclose()
    meta = broker.client_metadata
    if expected is None:
        assert meta is None
    else:
        assert (meta.rack_id, meta.principal, meta.listener_name) == (expected, "User:ANONYMOUS", "PLAINTEXT")
        assert meta.address.startswith("127.0.0.1") and isinstance(meta.client_id, str)
