"""The flexible Fetch versions (v12-v16): the zero-copy envelope with compact lengths and tagged
fields, the requests read through kio, and the handler's topic ids (v13+), fetch sessions keyed by
id, ReplicaState (v15) and the current leader of a partition led elsewhere (v16, KIP-951), against
a real broker through its dispatcher (request bytes in, response bytes out)."""

from __future__ import annotations

import dataclasses
import datetime
import struct
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import kio.schema.errors as kio_errors
import pytest
from broker_harness import batch, produce, running_broker
from hypothesis import given, settings
from hypothesis import strategies as st
from test_protocol import FakeSlice
from test_replication_unit import _broker_7

from odradek.broker.api import CreatableTopic
from odradek.broker.core import BrokerCore
from odradek.errors import ErrorCode, InvalidRequest, KafkaError
from odradek.interfaces import Endpoint, TopicPartition
from odradek.plugins.transport_tcp.apis import Dispatcher
from odradek.protocol import (
    ApiKey,
    FetchPartitionData,
    FetchResponseData,
    FetchTopicData,
    NodeEndpoint,
    build_fetch_envelope,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    fetch_response_size,
    parse_request_header,
    request_type,
    response_type,
)

FLEXIBLE = range(12, 17)


def _response(slices: list[FakeSlice]) -> FetchResponseData:
    return FetchResponseData(
        [
            FetchTopicData(
                "orders",
                [
                    FetchPartitionData(0, 0, 100, 100, 0, [], -1, slices[0]),
                    FetchPartitionData(1, 1, 5, 5, 2, None, -1, slices[1]),
                    FetchPartitionData(2, 6, -1, -1, -1, None, -1, None, current_leader=(3, 9)),
                    FetchPartitionData(3, 0, 4, 4, 0, None, -1, b"", diverging_epoch=(2, 40)),
                ],
                uuid.UUID(int=1).bytes,
            ),
            FetchTopicData(
                "ünï" * 50,  # a name longer than one varint byte (v12)
                [FetchPartitionData(7, 0, 9, 8, 1, [(1000, 3), (1001, 4)], 1, slices[2])],
                uuid.UUID(int=2).bytes,
            ),
        ],
        throttle_time_ms=5,
        session_id=77,
        node_endpoints=[NodeEndpoint(3, "broker-3.example", 9093, "rack-a"), NodeEndpoint(4, "h", 1)],
    )


def _kio_bytes(version: int, correlation_id: int, response: FetchResponseData) -> bytes:
    """The same response written by kio's generic writer."""
    cls = response_type(ApiKey.FETCH, version)
    m = __import__(cls.__module__, fromlist=["x"])
    topics = []
    for t in response.responses:
        parts = []
        for p in t.partitions:
            records = p.records.data if isinstance(p.records, FakeSlice) else p.records
            kwargs: dict[str, Any] = dict(
                partition_index=p.partition_index,
                error_code=kio_errors.ErrorCode(p.error_code),
                high_watermark=p.high_watermark,
                last_stable_offset=p.last_stable_offset,
                log_start_offset=p.log_start_offset,
                aborted_transactions=None
                if p.aborted_transactions is None
                else tuple(m.AbortedTransaction(producer_id=a, first_offset=b) for a, b in p.aborted_transactions),
                preferred_read_replica=p.preferred_read_replica,
                records=records,
            )
            if p.current_leader is not None:
                kwargs["current_leader"] = m.LeaderIdAndEpoch(
                    leader_id=p.current_leader[0], leader_epoch=p.current_leader[1]
                )
            if p.diverging_epoch is not None:
                kwargs["diverging_epoch"] = m.EpochEndOffset(
                    epoch=p.diverging_epoch[0], end_offset=p.diverging_epoch[1]
                )
            parts.append(m.PartitionData(**kwargs))
        name = {"topic_id": uuid.UUID(bytes=t.topic_id)} if version >= 13 else {"topic": t.topic}
        topics.append(m.FetchableTopicResponse(**name, partitions=tuple(parts)))
    kwargs = dict(
        throttle_time=datetime.timedelta(milliseconds=response.throttle_time_ms),
        error_code=kio_errors.ErrorCode(response.error_code),
        session_id=response.session_id,
        responses=tuple(topics),
    )
    if version >= 16:
        kwargs["node_endpoints"] = tuple(
            m.NodeEndpoint(node_id=n.node_id, host=n.host, port=n.port, rack=n.rack) for n in response.node_endpoints
        )
    body = encode_response(ApiKey.FETCH, version, correlation_id, cls(**kwargs))
    return struct.pack(">i", len(body)) + body


@pytest.mark.parametrize("version", FLEXIBLE)
def test_the_flexible_envelope_is_kios_encoding_with_the_records_sent_from_their_slices(version: int) -> None:
    slices = [FakeSlice(b"A" * 200), FakeSlice(b""), FakeSlice(b"C" * 5)]
    response = _response(slices)
    envelope = build_fetch_envelope(version, 99, response)
    wire = envelope.to_bytes()
    assert wire == _kio_bytes(version, 99, response)
    assert envelope.size == len(wire)
    # the records are parts of their own (sendfile'd), never copied into the envelope
    assert [p for p in envelope.parts if not isinstance(p, bytes)] == [slices[0], slices[2]]
    envelope.release()
    assert [s.released for s in slices] == [1, 1, 1]
    _, back = decode_response(ApiKey.FETCH, version, wire[4:])
    first, second = back.responses
    assert first.partitions[0].records == b"A" * 200 and second.partitions[0].records == b"C" * 5
    assert first.partitions[2].records is None and first.partitions[2].current_leader.leader_id == 3
    assert first.partitions[3].diverging_epoch.end_offset == 40
    if version >= 13:
        assert first.topic_id == uuid.UUID(int=1)
    else:
        assert second.topic == "ünï" * 50
    assert [n.node_id for n in getattr(back, "node_endpoints", ())] == ([3, 4] if version >= 16 else [])


@pytest.mark.parametrize("version", FLEXIBLE)
def test_the_response_size_is_the_flexible_envelope_after_its_size_prefix(version: int) -> None:
    for records in (0, 1, 126, 127, 128, 16383, 16384, 1 << 21):  # the varint's length changes
        response = FetchResponseData(
            [
                FetchTopicData(
                    "t" * 130,
                    [
                        FetchPartitionData(0, aborted_transactions=[(1, 2)] * 130, records=FakeSlice(b"x" * records)),
                        FetchPartitionData(1, 6, records=None, current_leader=(5, 2)),
                    ],
                    bytes(16),
                )
            ]
        )
        shapes = [("t" * 130, [(130, records), (0, 0, (5, 2))])]
        assert fetch_response_size(version, shapes) == build_fetch_envelope(version, 1, response).size - 4


# -- requests ------------------------------------------------------------------------------------


def _request(version: int, **fields: Any) -> Any:
    """A consumer's Fetch request of ``version`` naming one topic (by name or id) with two partitions."""
    cls = request_type(ApiKey.FETCH, version)
    m = __import__(cls.__module__, fromlist=["x"])
    offsets = fields.pop("offsets", (0, 11))
    last_fetched = fields.pop("last_fetched_epoch", 2)
    partitions = tuple(
        m.FetchPartition(partition=i, current_leader_epoch=-1, fetch_offset=offsets[i], last_fetched_epoch=last_fetched,
                         log_start_offset=-1, partition_max_bytes=1 << 20)
        for i in (0, 1)
    )  # fmt: skip
    name: dict[str, Any] = (
        {"topic_id": fields.pop("topic_id", uuid.UUID(int=5))} if version >= 13 else {"topic": fields.pop("topic", "t")}
    )
    forgotten = {"topic_id": uuid.UUID(int=6)} if version >= 13 else {"topic": "gone"}
    values: dict[str, Any] = dict(
        max_wait=datetime.timedelta(milliseconds=fields.pop("max_wait_ms", 0)),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=fields.pop("session_id", 0),
        session_epoch=fields.pop("session_epoch", -1),
        topics=(m.FetchTopic(**name, partitions=partitions),),
        forgotten_topics_data=(m.ForgottenTopic(**forgotten, partitions=(4, 5)),)
        if fields.pop("forget", False)
        else (),
        rack_id="r1",
    )
    if version >= 15:
        values["replica_state"] = m.ReplicaState(replica_id=fields.pop("replica_id", -1), replica_epoch=8)
    else:
        values["replica_id"] = fields.pop("replica_id", -1)
    values.update(fields)
    return cls(**values)


def _frame(request: Any, correlation_id: int = 1) -> bytearray:
    return bytearray(encode_request(request, correlation_id=correlation_id, client_id="test"))


@pytest.mark.parametrize("version", FLEXIBLE)
def test_a_flexible_request_decodes_to_the_fetch_request_data(version: int) -> None:
    frame = _frame(_request(version, forget=True, replica_id=7, cluster_id="c1"))
    header = parse_request_header(frame)
    data = decode_request(ApiKey.FETCH, version, frame, header.body_offset)
    assert (data.version, data.replica_id, data.rack_id, data.session_epoch) == (version, 7, "r1", -1)
    assert data.cluster_id == "c1"  # tagged field 0
    (topic,) = data.topics
    assert [(p.partition, p.fetch_offset, p.current_leader_epoch, p.last_fetched_epoch) for p in topic.partitions] == [
        (0, 0, -1, 2),
        (1, 11, -1, 2),
    ]
    if version >= 13:
        assert (topic.topic, topic.topic_id) == ("", uuid.UUID(int=5).hex)
        assert data.forgotten_topic_ids == [(uuid.UUID(int=6).hex, [4, 5])] and not data.forgotten_topics
    else:
        assert (topic.topic, data.forgotten_topics) == ("t", [("gone", [4, 5])])
    assert data.replica_epoch == (8 if version >= 15 else -1)


@pytest.mark.parametrize("version", FLEXIBLE)
def test_a_truncated_or_padded_flexible_request_is_invalid(version: int) -> None:
    frame = _frame(_request(version, forget=True))
    body = parse_request_header(frame).body_offset
    for cut in range(body, len(frame)):
        with pytest.raises(InvalidRequest):
            decode_request(ApiKey.FETCH, version, frame[:cut], body)
    with pytest.raises(InvalidRequest):
        decode_request(ApiKey.FETCH, version, frame + b"\x00", body)


# -- the handler, through a real broker's dispatcher ---------------------------------------------

LOCAL, AWAY = "local", "away"


@asynccontextmanager
async def _broker(tmp_path: Path) -> AsyncIterator[tuple[BrokerCore, Dispatcher]]:
    """Broker 0 leading ``local`` (2 partitions) and following broker 7 on ``away``."""
    async with running_broker(tmp_path, **{"replica.lag.time.max.ms": 30000}) as core, _broker_7(core, tmp_path):
        topics = [CreatableTopic(LOCAL, assignments={0: [0], 1: [0]}), CreatableTopic(AWAY, assignments={0: [7, 0]})]
        created = await core.create_topics(topics, 1000, False)
        assert all(r.error == ErrorCode.NONE for r in created.values()), created
        yield core, Dispatcher(core, core.config, Endpoint("PLAINTEXT", "127.0.0.1", 9092))


async def _fetch(dispatcher: Dispatcher, request: Any) -> Any:
    frame = _frame(request)
    outcome = await dispatcher.process(parse_request_header(frame), frame, "consumer")
    assert outcome is not None and not isinstance(outcome, bytes)
    try:
        wire = outcome.to_bytes()
    finally:
        outcome.release()
    return decode_response(ApiKey.FETCH, int(request.__version__), wire[4:])[1]


def _topic_id(core: BrokerCore, name: str) -> uuid.UUID:
    return uuid.UUID(hex=core.metadata_cache.topics[name].topic_id)


def _answered(response: Any) -> dict[tuple[Any, int], Any]:
    """(topic name or id, partition) -> partition data."""
    return {
        (getattr(t, "topic_id", None) or t.topic, p.partition_index): p
        for t in response.responses
        for p in t.partitions
    }


async def test_a_consumer_reads_by_name_at_v12_and_by_topic_id_from_v13(tmp_path: Path) -> None:
    async with _broker(tmp_path) as (core, dispatcher):
        assert (await produce(core, TopicPartition(LOCAL, 0), batch([b"a", b"b"]), acks=1)).error == ErrorCode.NONE
        local = _topic_id(core, LOCAL)
        for version in FLEXIBLE:
            named = {"topic": LOCAL} if version == 12 else {"topic_id": local}
            response = await _fetch(dispatcher, _request(version, last_fetched_epoch=-1, **named))
            assert (response.error_code, response.session_id) == (kio_errors.ErrorCode.none, 0)
            answered = _answered(response)
            key = LOCAL if version == 12 else local
            p0, p1 = answered[(key, 0)], answered[(key, 1)]
            assert p0.error_code == kio_errors.ErrorCode.none and p0.high_watermark == 2
            assert p0.records is not None and b"a" in p0.records and b"b" in p0.records
            assert p1.error_code == kio_errors.ErrorCode.offset_out_of_range  # fetch offset 11 of an empty log
        # an id no topic has: UNKNOWN_TOPIC_ID for each of its partitions, under that id
        stranger = uuid.UUID(int=12345)
        for version in range(13, 17):
            answered = _answered(await _fetch(dispatcher, _request(version, topic_id=stranger)))
            assert {k: p.error_code for k, p in answered.items()} == {
                (stranger, 0): kio_errors.ErrorCode.unknown_topic_id,
                (stranger, 1): kio_errors.ErrorCode.unknown_topic_id,
            }
        # a truncated flexible request is refused before any handler: the connection closes
        frame = _frame(_request(13, topic_id=local))
        with pytest.raises(InvalidRequest):
            await dispatcher.process(parse_request_header(frame), frame[:-3], "consumer")


async def test_a_fetch_session_keys_partitions_by_topic_id(tmp_path: Path) -> None:
    """KIP-227 with v13's ids: the session holds (topic id, partition); an unknown id stays in
    it answered UNKNOWN_TOPIC_ID, forgetting goes by id, and a request of a version that names
    topics otherwise is FETCH_SESSION_TOPIC_ID_ERROR (Kafka's FetchManager)."""
    async with _broker(tmp_path) as (core, dispatcher):
        local, stranger = _topic_id(core, LOCAL), uuid.UUID(int=99)
        cls = request_type(ApiKey.FETCH, 13)
        m = __import__(cls.__module__, fromlist=["x"])
        opening = _request(13, topic_id=local, session_epoch=0, offsets=(0, 0), last_fetched_epoch=-1)
        opening = _request(
            13,
            session_epoch=0,
            topics=(
                *opening.topics,
                m.FetchTopic(topic_id=stranger, partitions=(opening.topics[0].partitions[0],)),
            ),
        )
        first = await _fetch(dispatcher, opening)
        session = first.session_id
        assert session != 0 and set(_answered(first)) == {(local, 0), (local, 1), (stranger, 0)}
        assert core.fetch_sessions.sessions[session].uses_topic_ids
        # nothing changed: only the unknown id's error comes back
        second = await _fetch(dispatcher, _request(13, session_id=session, session_epoch=1, topics=()))
        assert {k: p.error_code for k, p in _answered(second).items()} == {
            (stranger, 0): kio_errors.ErrorCode.unknown_topic_id
        }
        # a record on local-1: its high watermark moved, so it alone is answered
        assert (await produce(core, TopicPartition(LOCAL, 1), batch([b"x"]), acks=1)).error == ErrorCode.NONE
        forget = m.ForgottenTopic(topic_id=stranger, partitions=(0,))
        third = await _fetch(
            dispatcher, _request(13, session_id=session, session_epoch=2, topics=(), forgotten_topics_data=(forget,))
        )
        assert set(_answered(third)) == {(local, 1)}  # its high watermark moved; the stranger is forgotten
        assert {tp.partition for tp in core.fetch_sessions.sessions[session].partitions} == {0, 1}
        # the same session asked by name (v12): the client changed versions mid-session
        wrong = await _fetch(dispatcher, _request(12, topic=LOCAL, session_id=session, session_epoch=3))
        assert wrong.error_code == kio_errors.ErrorCode.fetch_session_topic_id_error and not wrong.responses


def _first_partition(request: Any) -> Any:
    """``request`` asking for partition 0 of its topic only."""
    (topic,) = request.topics
    return dataclasses.replace(request, topics=(dataclasses.replace(topic, partitions=topic.partitions[:1]),))


async def test_v16_names_the_current_leader_of_a_partition_led_elsewhere(tmp_path: Path) -> None:
    """KIP-951: NOT_LEADER_OR_FOLLOWER carries the leader and its epoch, and the response the
    leader's endpoint on the request's listener; v15 has neither."""
    async with _broker(tmp_path) as (core, dispatcher):
        away = _topic_id(core, AWAY)
        state = core.metadata_cache.partition_state(TopicPartition(AWAY, 0))
        assert state is not None and state.leader == 7
        response = await _fetch(dispatcher, _first_partition(_request(16, topic_id=away)))
        ((key, p),) = _answered(response).items()
        assert key == (away, 0) and p.error_code == kio_errors.ErrorCode.not_leader_or_follower
        assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (7, state.leader_epoch)
        assert [(n.node_id, n.host, n.port, n.rack) for n in response.node_endpoints] == [(7, "127.0.0.1", 9, None)]
        ((_, p15),) = _answered(await _fetch(dispatcher, _first_partition(_request(15, topic_id=away)))).items()
        assert p15.error_code == kio_errors.ErrorCode.not_leader_or_follower
        assert (p15.current_leader.leader_id, p15.current_leader.leader_epoch) == (-1, -1)


async def _call(dispatcher: Dispatcher, request: Any) -> Any:
    frame = _frame(request)
    wire = await dispatcher.process(parse_request_header(frame), frame, "client")
    assert isinstance(wire, bytes)
    return decode_response(int(request.__api_key__), int(request.__version__), wire)[1]


async def test_offset_for_leader_epoch_v4_and_init_producer_id_v5_are_served(tmp_path: Path) -> None:
    """Their flexible versions: OffsetForLeaderEpoch v4 is v3 flexible; InitProducerId v5 may
    answer TRANSACTION_ABORTABLE (KIP-890), which odradek's coordinator never does."""
    async with _broker(tmp_path) as (core, dispatcher):
        assert (await produce(core, TopicPartition(LOCAL, 0), batch([b"a", b"b"]), acks=1)).error == ErrorCode.NONE
        cls = request_type(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4)
        m = __import__(cls.__module__, fromlist=["x"])
        asked = m.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=0)
        answer = await _call(
            dispatcher, cls(replica_id=-1, topics=(m.OffsetForLeaderTopic(topic=LOCAL, partitions=(asked,)),))
        )
        ((p,),) = [t.partitions for t in answer.topics]
        assert (p.error_code, p.leader_epoch, p.end_offset) == (kio_errors.ErrorCode.none, 0, 2)
        init_cls = request_type(ApiKey.INIT_PRODUCER_ID, 5)
        init = await _call(dispatcher, init_cls(transactional_id=None, transaction_timeout=datetime.timedelta(0)))
        assert init.error_code == kio_errors.ErrorCode.none and init.producer_id >= 0 and init.producer_epoch == 0


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.sampled_from(FLEXIBLE))
def test_the_flexible_decoder_refuses_garbage_cleanly(data: bytes, version: int) -> None:
    try:
        decode_request(ApiKey.FETCH, version, data, 0)
    except InvalidRequest:
        pass


@pytest.mark.parametrize("version", FLEXIBLE)
def test_a_known_tagged_field_must_fill_its_size(version: int) -> None:
    """The cluster id's tag declares one byte more than its string: refused, not misread."""
    frame = _frame(_request(version, cluster_id="c1"))
    body = parse_request_header(frame).body_offset
    tags = frame.rindex(b"\x00\x03\x03c1")  # tag 0, size 3, compact "c1"
    bad = frame[:tags] + b"\x00\x04\x03c1\x00" + frame[tags + 5 :]
    with pytest.raises(InvalidRequest):
        decode_request(ApiKey.FETCH, version, bad, body)


async def test_a_failed_fetch_is_answered_under_the_requests_topic_ids(tmp_path: Path) -> None:
    """A handler failure (here the core's fetch) is answered in every partition, each topic
    under the id the request named it by (v13+), as Kafka's error response does."""
    async with _broker(tmp_path) as (core, dispatcher):
        local = _topic_id(core, LOCAL)

        async def failing(*_: Any, **__: Any) -> Any:
            raise KafkaError("storage went away", code=ErrorCode.KAFKA_STORAGE_ERROR)

        core.fetch = failing  # type: ignore[method-assign]
        for version in (12, 13, 16):
            named = {"topic": LOCAL} if version == 12 else {"topic_id": local}
            response = await _fetch(dispatcher, _request(version, **named))
            assert response.error_code == kio_errors.ErrorCode.kafka_storage_error
            assert {k: p.error_code for k, p in _answered(response).items()} == {
                (LOCAL if version == 12 else local, i): kio_errors.ErrorCode.kafka_storage_error for i in (0, 1)
            }


def test_a_session_is_held_to_the_kind_of_request_that_opened_it() -> None:
    """Sans IO: FETCH_SESSION_TOPIC_ID_ERROR both ways (Kafka's FetchManager.newContext)."""
    from odradek.broker.api import FetchPartition, FetchPartitionResult
    from odradek.broker.fetch_session import FetchSessionCache

    cache = FetchSessionCache(10)
    for opened_by_id in (True, False):
        tp = TopicPartition("\x00" + "ab" * 16 if opened_by_id else "t", 0)
        context = cache.new_context(0, 0, [FetchPartition(tp, 0, 100)], [], follower=False, uses_topic_ids=opened_by_id)
        _, session_id, _ = cache.respond(context, {tp: FetchPartitionResult(ErrorCode.NONE, 0, 0, 0)})
        other = cache.new_context(session_id, 1, [], [], follower=False, uses_topic_ids=not opened_by_id)
        assert other.error == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
        same = cache.new_context(session_id, 1, [], [], follower=False, uses_topic_ids=opened_by_id)
        assert same.error == ErrorCode.NONE and [p.tp for p in same.partitions] == [tp]


async def test_the_metadata_cache_resolves_ids_from_a_kept_map_that_follows_a_recreated_topic(
    tmp_path: Path,
) -> None:
    async with _broker(tmp_path) as (core, _):
        cache = core.metadata_cache
        local = _topic_id(core, LOCAL).hex
        assert cache.topic_names([local, "0" * 32]) == {local: LOCAL}
        # the topic made again under its name (a new id): the old id is unknown from then on
        renewed = uuid.UUID(int=77).hex
        cache.topics[LOCAL] = dataclasses.replace(cache.topics[LOCAL], topic_id=renewed)
        assert cache.topic_names([local]) == {}
        assert cache.topic_names([renewed, local]) == {renewed: LOCAL}
