"""odradek.protocol without sockets: headers, version table, round trips, fallbacks, Fetch envelope."""

from __future__ import annotations

import datetime
import io
import struct
import sys
import uuid
from dataclasses import fields
from typing import Any

import kio.schema.errors as kio_errors
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.fetch.v4.response import FetchResponse as FetchResponseV4
from kio.serial import entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_schema_field_type,
    is_optional,
)

from odradek.errors import ErrorCode, InvalidRequest, UnsupportedVersion
from odradek.protocol import (
    SUPPORTED_VERSIONS,
    ApiKey,
    FetchPartitionData,
    FetchResponseData,
    FetchTopicData,
    PartitionProduceData,
    PartitionProduceResponse,
    ProduceRequestData,
    ProduceResponseData,
    TopicProduceData,
    TopicProduceResponse,
    advertised_versions,
    api_versions_fallback,
    api_versions_response,
    build_fetch_envelope,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    is_flexible,
    ms,
    parse_request_header,
    produce_unsupported_response,
    request_type,
    response_type,
)
from odradek.protocol.fetch import decode_fetch_request
from odradek.protocol.headers import write_uvarint
from odradek.protocol.produce import decode_produce_request, encode_produce_response

# -- a deterministic sample instance of any kio entity, every field set ------------------------

_PRIMITIVES: dict[str, Any] = {
    "int8": 1,
    "int16": 2,
    "int32": 3,
    "int64": 4,
    "uint8": 5,
    "uint16": 6,
    "uint32": 7,
    "uint64": 8,
    "float64": 1.5,
    "string": "odradek",
    "bytes": b"bytes",
    "records": b"records",
    "bool": True,
    "uuid": uuid.UUID(int=12345),
    "error_code": kio_errors.ErrorCode.not_coordinator,
    "timedelta_i32": datetime.timedelta(milliseconds=250),
    "timedelta_i64": datetime.timedelta(milliseconds=300000),
    "datetime_i64": datetime.datetime.fromtimestamp(1_700_000_000.123, tz=datetime.UTC),
}


def sample(cls: type[Any]) -> Any:
    kwargs = {}
    for f in fields(cls):
        kind = classify_field(f)
        if isinstance(kind, PrimitiveField):
            kwargs[f.name] = _PRIMITIVES[get_schema_field_type(f)]
        elif isinstance(kind, PrimitiveTupleField):
            kwargs[f.name] = (_PRIMITIVES[get_schema_field_type(f)],)
        elif isinstance(kind, EntityField):
            kwargs[f.name] = sample(kind.type_)
        elif isinstance(kind, EntityTupleField):
            kwargs[f.name] = (sample(kind.type_),)
        if f.name == "records" and is_optional(f) is False:
            kwargs[f.name] = b"records"
    return cls(**kwargs)


KIO_VERSIONS = [
    (key, version)
    for key, rng in SUPPORTED_VERSIONS.items()
    for version in range(rng.min, rng.max + 1)
    if key not in (ApiKey.PRODUCE, ApiKey.FETCH)
]


# -- version table ------------------------------------------------------------------------------


def test_version_table_matches_protocol_md() -> None:
    expected = {
        0: (0, 11),
        1: (4, 16),
        2: (1, 10),
        3: (0, 12),
        8: (2, 9),
        9: (1, 9),
        10: (0, 4),
        11: (0, 9),
        12: (0, 4),
        13: (0, 5),
        14: (0, 5),
        18: (0, 4),
        22: (0, 5),
        23: (2, 4),
        24: (0, 2),
        25: (0, 2),
        26: (0, 2),
        28: (0, 2),
        17: (0, 1),
        36: (0, 2),
        35: (1, 4),
        60: (0, 2),
        68: (0, 1),
        69: (0, 1),
    }
    for key, rng in expected.items():
        assert tuple(SUPPORTED_VERSIONS[key]) == rng, ApiKey(key).name
    for key in (19, 20, 37, 32, 44, 21, 15, 16, 42):
        assert key in SUPPORTED_VERSIONS
    assert tuple(SUPPORTED_VERSIONS[47]) == (0, 0)  # OffsetDelete: Kafka has only v0
    assert 71 not in SUPPORTED_VERSIONS and 72 not in SUPPORTED_VERSIONS  # telemetry


def test_every_supported_version_has_a_kio_schema() -> None:
    for key, version in KIO_VERSIONS:
        assert request_type(key, version).__version__ == version
        assert response_type(key, version).__version__ == version


def test_advertised_versions_only_handled_keys_plus_api_versions() -> None:
    adv = advertised_versions([ApiKey.METADATA, ApiKey.PRODUCE, 999])
    assert list(adv) == [ApiKey.PRODUCE, ApiKey.METADATA, ApiKey.API_VERSIONS]


def test_flexible_versions() -> None:
    assert not is_flexible(ApiKey.FETCH, 11) and is_flexible(ApiKey.FETCH, 12)
    assert not is_flexible(ApiKey.API_VERSIONS, 2) and is_flexible(ApiKey.API_VERSIONS, 3)
    assert is_flexible(ApiKey.API_VERSIONS, 9)  # unknown future versions stay flexible
    assert not is_flexible(ApiKey.PRODUCE, 0)  # older than anything kio models
    assert not is_flexible(9999, 0)


# -- headers ------------------------------------------------------------------------------------


def test_request_header_v1_and_v2() -> None:
    v1 = struct.pack(">hhih", 3, 8, 77, 3) + b"cli" + b"BODY"
    h = parse_request_header(v1)
    assert (h.api_key, h.api_version, h.correlation_id, h.client_id) == (3, 8, 77, "cli")
    assert v1[h.body_offset :] == b"BODY"
    # v2: tagged fields after the (legacy-encoded) client id: one field tag 0 of 2 bytes
    v2 = struct.pack(">hhih", 18, 3, 5, -1) + b"\x01\x00\x02zz" + b"BODY"
    h = parse_request_header(v2)
    assert (h.client_id, v2[h.body_offset :]) == (None, b"BODY")


def test_request_header_client_id_that_is_not_utf8_is_decoded_leniently() -> None:
    """Kafka decodes the client id with Java's ``new String(bytes, UTF_8)``, which puts U+FFFD
    in place of malformed input and serves the request; so does odradek."""
    raw = b"ok\xff\xfe\xc3(\xed\xa0\x80end"  # stray bytes, a broken pair, an encoded surrogate
    frame = struct.pack(">hhih", 3, 8, 77, len(raw)) + raw + b"BODY"
    h = parse_request_header(frame)
    assert h.client_id == raw.decode("utf-8", "replace")
    assert h.client_id.startswith("ok\ufffd") and h.client_id.endswith("\ufffdend")
    assert frame[h.body_offset :] == b"BODY"


@pytest.mark.parametrize(
    "frame",
    [b"", b"\x00\x03\x00", struct.pack(">hhih", 3, 8, 1, 10) + b"abc", struct.pack(">hhih", 3, 8, 1, -7)],
)
def test_request_header_malformed(frame: bytes) -> None:
    with pytest.raises(InvalidRequest):
        parse_request_header(frame)


# -- round trips --------------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "version"), KIO_VERSIONS)
def test_round_trip_every_supported_version(key: int, version: int) -> None:
    request = sample(request_type(key, version))
    frame = encode_request(request, correlation_id=42, client_id="rt")
    header = parse_request_header(frame)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (key, version, 42, "rt")
    assert decode_request(key, version, bytearray(frame), header.body_offset) == request

    response = sample(response_type(key, version))
    wire = encode_response(key, version, 42, response)
    assert decode_response(key, version, wire) == (42, response)


# -- the group APIs' flexible and batched versions, byte for byte -------------------------------
#
# Hand-written from Kafka's message JSON (OffsetFetch v6+ and FindCoordinator v3+ are flexible,
# KIP-482: compact strings and arrays as uvarint length + 1, 0 for null, a tagged-field count
# after every struct; request header v2, response header v1), so these check the codec against
# the spec rather than kio against itself.

_FLEX_REQUEST_HEADER = bytes.fromhex("0000002a 0002") + b"rt" + b"\x00"  # corr 42, client "rt", no tags
_FLEX_RESPONSE_HEADER = bytes.fromhex("0000002a 00")


def _kio_cls(key: int, version: int, name: str, *, response: bool = False) -> Any:
    module = (response_type if response else request_type)(key, version).__module__
    return getattr(__import__(module, fromlist=["x"]), name)


def _offset_fetch_cases() -> list[tuple[int, Any, bytes, Any, bytes]]:
    key = ApiKey.OFFSET_FETCH
    cases = []
    for version in (6, 7):
        topic = _kio_cls(key, version, "OffsetFetchRequestTopic")(name="t", partition_indexes=(0, 5))
        fields: dict[str, Any] = {"group_id": "g", "topics": (topic,)}
        body = "0267 02 0274 03 00000000 00000005 00"  # group, 1 topic "t" [0, 5]
        if version == 7:
            fields["require_stable"] = True
            body += "01"
        request = request_type(key, version)(**fields)
        partition = _kio_cls(key, version, "OffsetFetchResponsePartition", response=True)(
            partition_index=5, committed_offset=7, committed_leader_epoch=-1, metadata="",
            error_code=kio_errors.ErrorCode(88),
        )  # fmt: skip
        topic_cls = _kio_cls(key, version, "OffsetFetchResponseTopic", response=True)
        resp_topic = topic_cls(name="t", partitions=(partition,))
        response = response_type(key, version)(
            throttle_time=datetime.timedelta(0), topics=(resp_topic,), error_code=kio_errors.ErrorCode(0)
        )
        resp_body = "00000000 02 0274 02 00000005 0000000000000007 ffffffff 01 0058 00 00 0000"
        cases.append((version, request, bytes.fromhex(body + "00"), response, bytes.fromhex(resp_body + "00")))
    # v8: two groups, the second with null topics; per-group errors, no top-level error
    group_topic = _kio_cls(key, 8, "OffsetFetchRequestTopics")(name="t", partition_indexes=(0, 5))
    group_cls = _kio_cls(key, 8, "OffsetFetchRequestGroup")
    request = request_type(key, 8)(
        groups=(group_cls(group_id="g", topics=(group_topic,)), group_cls(group_id="h", topics=None)),
        require_stable=True,
    )
    body = "03 0267 02 0274 03 00000000 00000005 00 00 0268 00 00 01 00"
    partition = _kio_cls(key, 8, "OffsetFetchResponsePartitions", response=True)(
        partition_index=5, committed_offset=7, committed_leader_epoch=-1, metadata="",
        error_code=kio_errors.ErrorCode(88),
    )  # fmt: skip
    resp_topic = _kio_cls(key, 8, "OffsetFetchResponseTopics", response=True)(name="t", partitions=(partition,))
    resp_group = _kio_cls(key, 8, "OffsetFetchResponseGroup", response=True)
    response = response_type(key, 8)(
        throttle_time=datetime.timedelta(0),
        groups=(
            resp_group(group_id="g", topics=(resp_topic,), error_code=kio_errors.ErrorCode(0)),
            resp_group(group_id="h", topics=(), error_code=kio_errors.ErrorCode(16)),
        ),
    )
    resp_body = (
        "00000000 03 0267 02 0274 02 00000005 0000000000000007 ffffffff 01 0058 00 00 0000 00 0268 01 0010 00 00"
    )  # fmt: skip
    cases.append((8, request, bytes.fromhex(body), response, bytes.fromhex(resp_body)))
    return cases


def _find_coordinator_cases() -> list[tuple[int, Any, bytes, Any, bytes]]:
    key = ApiKey.FIND_COORDINATOR
    ok, unavailable = kio_errors.ErrorCode(0), kio_errors.ErrorCode(15)
    v3_request = request_type(key, 3)(key="g", key_type=0)
    v3_response = response_type(key, 3)(
        throttle_time=datetime.timedelta(0), error_code=ok, error_message=None, node_id=1, host="h", port=9092
    )
    v4_request = request_type(key, 4)(key_type=1, coordinator_keys=("a", "b"))
    coordinator = _kio_cls(key, 4, "Coordinator", response=True)
    v4_response = response_type(key, 4)(
        throttle_time=datetime.timedelta(0),
        coordinators=(
            coordinator(key="a", node_id=1, host="h", port=9092, error_code=ok, error_message=None),
            coordinator(key="b", node_id=-1, host="", port=-1, error_code=unavailable, error_message="x"),
        ),
    )
    return [
        (3, v3_request, bytes.fromhex("0267 00 00"), v3_response,
         bytes.fromhex("00000000 0000 00 00000001 0268 00002384 00")),
        (4, v4_request, bytes.fromhex("01 03 0261 0262 00"), v4_response,
         bytes.fromhex("00000000 03 0261 00000001 0268 00002384 0000 00 00 0262 ffffffff 01 ffffffff 000f 0278 00 00")),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("key", "version", "request_", "request_body", "response", "response_body"),
    [(ApiKey.OFFSET_FETCH, *case) for case in _offset_fetch_cases()]
    + [(ApiKey.FIND_COORDINATOR, *case) for case in _find_coordinator_cases()],
    ids=["OffsetFetch-v6", "OffsetFetch-v7", "OffsetFetch-v8", "FindCoordinator-v3", "FindCoordinator-v4"],
)
def test_group_api_flexible_versions_byte_exact(
    key: int, version: int, request_: Any, request_body: bytes, response: Any, response_body: bytes
) -> None:
    """OffsetFetch v6-8 and FindCoordinator v3-4 through odradek's codec, both directions:
    the exact bytes Kafka's schema gives, and back to the same message."""
    frame = encode_request(request_, correlation_id=42, client_id="rt")
    assert frame == struct.pack(">hh", key, version) + _FLEX_REQUEST_HEADER + request_body
    header = parse_request_header(frame)
    assert decode_request(key, version, bytearray(frame), header.body_offset) == request_
    wire = encode_response(key, version, 42, response)
    assert wire == _FLEX_RESPONSE_HEADER + response_body
    assert decode_response(key, version, wire) == (42, response)
    assert is_flexible(key, version)


@pytest.mark.parametrize("version", range(0, 8))
def test_produce_round_trip(version: int) -> None:
    request = ProduceRequestData(
        acks=-1,
        timeout_ms=1500,
        transactional_id="tx" if version >= 3 else None,
        version=version,
        topic_data=[
            TopicProduceData("a", [PartitionProduceData(0, bytearray(b"batch-a0")), PartitionProduceData(3, None)]),
            TopicProduceData("b", [PartitionProduceData(1, bytearray(b""))]),
        ],
    )
    frame = encode_request(request, correlation_id=9, client_id=None)
    header = parse_request_header(frame)
    decoded = decode_request(ApiKey.PRODUCE, version, frame, header.body_offset)
    assert decoded == request
    assert isinstance(decoded.topic_data[0].partition_data[0].records, bytearray)

    response = ProduceResponseData(
        [TopicProduceResponse("a", [PartitionProduceResponse(0, 0, 10, -1, 0)])], throttle_time_ms=3
    )
    correlation_id, back = decode_response(ApiKey.PRODUCE, version, encode_response(0, version, 9, response))
    assert correlation_id == 9
    p = back.responses[0].partition_responses[0]
    assert (p.index, p.error_code, p.base_offset) == (0, 0, 10)
    if version >= 1:
        assert back.throttle_time_ms == 3


@pytest.mark.parametrize("version", range(3, 8))
def test_produce_codec_matches_kio_bytes(version: int) -> None:
    kio_request = sample(request_type(ApiKey.PRODUCE, version))
    frame = encode_request(kio_request, correlation_id=1, client_id="k")
    header = parse_request_header(frame)
    mine = decode_request(ApiKey.PRODUCE, version, frame, header.body_offset)
    assert mine.transactional_id == kio_request.transactional_id
    assert mine.acks == kio_request.acks
    assert [(t.name, [(p.index, bytes(p.records)) for p in t.partition_data]) for t in mine.topic_data] == [
        (t.name, [(p.index, p.records) for p in t.partition_data]) for t in kio_request.topic_data
    ]
    kio_response = sample(response_type(ApiKey.PRODUCE, version))
    buf = io.BytesIO()
    entity_writer(type(kio_response))(buf, kio_response)
    p = kio_response.responses[0].partition_responses[0]
    mine_response = ProduceResponseData(
        [
            TopicProduceResponse(
                kio_response.responses[0].name,
                [
                    PartitionProduceResponse(
                        p.index,
                        p.error_code.value,
                        p.base_offset,
                        round(p.log_append_time.timestamp() * 1000) if getattr(p, "log_append_time", None) else -1,
                        getattr(p, "log_start_offset", -1),
                    )
                ],
            )
        ],
        throttle_time_ms=round(kio_response.throttle_time.total_seconds() * 1000),
    )
    assert encode_produce_response(version, mine_response) == buf.getvalue()


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 11))
def test_produce_decoder_rejects_garbage_cleanly(data: bytes, version: int) -> None:
    try:
        decode_produce_request(version, data)
    except InvalidRequest:
        pass


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=120), st.sampled_from([k for k, _ in KIO_VERSIONS]), st.integers(0, 12))
def test_kio_decoder_rejects_garbage_cleanly(data: bytes, key: int, version: int) -> None:
    try:
        decode_request(key, version, data, 0)
    except (InvalidRequest, UnsupportedVersion):
        pass


def test_decode_request_rejects_unsupported_and_trailing_bytes() -> None:
    with pytest.raises(UnsupportedVersion):
        decode_request(ApiKey.FETCH, 17, b"", 0)
    with pytest.raises(UnsupportedVersion):
        decode_request(ApiKey.OFFSET_DELETE, 1, b"", 0)  # Kafka has only v0
    request = sample(request_type(ApiKey.METADATA, 4))
    frame = encode_request(request, correlation_id=1, client_id="x")
    header = parse_request_header(frame)
    with pytest.raises(InvalidRequest, match="unexpected bytes"):
        decode_request(ApiKey.METADATA, 4, frame + b"\x00", header.body_offset)


def test_produce_v0_2_answered_unsupported_version() -> None:
    request = ProduceRequestData(1, 100, [TopicProduceData("t", [PartitionProduceData(2, bytearray(b"x"))])], None, 1)
    frame = encode_request(request, correlation_id=5, client_id="old")
    header = parse_request_header(frame)
    decoded = decode_request(ApiKey.PRODUCE, 1, frame, header.body_offset)
    response = produce_unsupported_response(decoded)
    wire = encode_response(ApiKey.PRODUCE, 1, 5, response)
    # v1: header, [topic "t", [partition 2, error 35, base_offset -1]], throttle 0
    assert wire == struct.pack(">iih", 5, 1, 1) + b"t" + struct.pack(">iihqi", 1, 2, 35, -1, 0)


# -- ApiVersions --------------------------------------------------------------------------------


def test_api_versions_fallback_bytes() -> None:
    adv = advertised_versions([ApiKey.PRODUCE, ApiKey.METADATA])
    frame = api_versions_fallback(7, adv)
    # only ApiVersions' own range, as Kafka's getErrorResponse (KIP-511)
    assert frame == struct.pack(">ihi", 7, 35, 1) + struct.pack(">hhh", 18, 0, 4)
    # a client that asked v3 reads the v0 body the broker fell back to
    correlation_id, response = decode_response(ApiKey.API_VERSIONS, 3, frame)
    assert correlation_id == 7 and response.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert [(k.api_key, k.min_version, k.max_version) for k in response.api_keys][-1] == (18, 0, 4)


@pytest.mark.parametrize("version", range(0, 5))
def test_api_versions_response_header_is_v0(version: int) -> None:
    adv = advertised_versions([ApiKey.FETCH])
    wire = encode_response(ApiKey.API_VERSIONS, version, 3, api_versions_response(version, adv))
    assert wire[:6] == struct.pack(">ih", 3, 0)  # correlation id, then straight into error_code
    _, back = decode_response(ApiKey.API_VERSIONS, version, wire)
    assert [(k.api_key, k.min_version, k.max_version) for k in back.api_keys] == [(1, 4, 16), (18, 0, 4)]


def test_flexible_response_header_has_tagged_fields() -> None:
    response = sample(response_type(ApiKey.CREATE_TOPICS, 5))
    wire = encode_response(ApiKey.CREATE_TOPICS, 5, 11, response)
    assert wire[:5] == struct.pack(">i", 11) + b"\x00"


# -- Fetch envelope -----------------------------------------------------------------------------


class FakeSlice:
    """A FetchDataInfo stand-in: bytes that the envelope must reference, not copy."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.size = len(data)
        self.released = 0

    def to_bytes(self) -> bytes:
        return self.data

    def release(self) -> None:
        self.released += 1


def _kio_fetch_bytes(version: int, correlation_id: int, response: FetchResponseData) -> bytes:
    cls = response_type(ApiKey.FETCH, version)
    module = __import__(cls.__module__, fromlist=["x"])
    topics = []
    for t in response.responses:
        parts = []
        for p in t.partitions:
            records = p.records
            if isinstance(records, FakeSlice):
                records = records.data
            kwargs: dict[str, Any] = dict(
                partition_index=p.partition_index,
                error_code=kio_errors.ErrorCode(p.error_code),
                high_watermark=p.high_watermark,
                last_stable_offset=p.last_stable_offset,
                aborted_transactions=None
                if p.aborted_transactions is None
                else tuple(module.AbortedTransaction(producer_id=a, first_offset=b) for a, b in p.aborted_transactions),
                records=records,
            )
            if version >= 5:
                kwargs["log_start_offset"] = p.log_start_offset
            if version >= 11:
                kwargs["preferred_read_replica"] = p.preferred_read_replica
            parts.append(module.PartitionData(**kwargs))
        topics.append(module.FetchableTopicResponse(topic=t.topic, partitions=tuple(parts)))
    kwargs = dict(throttle_time=datetime.timedelta(milliseconds=response.throttle_time_ms), responses=tuple(topics))
    if version >= 7:
        kwargs.update(error_code=kio_errors.ErrorCode(response.error_code), session_id=response.session_id)
    body = encode_response(ApiKey.FETCH, version, correlation_id, cls(**kwargs))
    return struct.pack(">i", len(body)) + body


@pytest.mark.parametrize("version", range(4, 12))
def test_fetch_envelope_byte_exact_vs_kio(version: int) -> None:
    slices = [FakeSlice(b"A" * 70), FakeSlice(b""), FakeSlice(b"C" * 5)]
    response = FetchResponseData(
        [
            FetchTopicData(
                "orders",
                [
                    FetchPartitionData(0, 0, 100, 100, 0, [], -1, slices[0]),
                    FetchPartitionData(1, 1, 5, 5, 2, None, -1, slices[1]),
                    FetchPartitionData(2, 3, -1, -1, -1, None, -1, None),
                ],
            ),
            FetchTopicData("ünï", [FetchPartitionData(7, 0, 9, 8, 1, [(1000, 3), (1001, 4)], 1, slices[2])]),
            FetchTopicData("inline", [FetchPartitionData(0, 0, 1, 1, 0, None, -1, b"inline-bytes")]),
        ],
        throttle_time_ms=5,
        error_code=0,
        session_id=0,
    )
    envelope = build_fetch_envelope(version, 99, response)
    wire = envelope.to_bytes()
    assert wire == _kio_fetch_bytes(version, 99, response)
    assert envelope.size == len(wire)
    # the non-empty slices are referenced as parts, not copied into the envelope
    assert [p for p in envelope.parts if not isinstance(p, bytes)] == [slices[0], slices[2]]
    assert all(isinstance(p, bytes) for p in envelope.parts if p not in slices)
    assert len(envelope.slices) == 3
    envelope.release()
    envelope.release()
    assert [s.released for s in slices] == [1, 1, 1]
    _, decoded = decode_response(ApiKey.FETCH, version, wire[4:])
    assert decoded.responses[0].partitions[0].records == b"A" * 70


def test_fetch_envelope_rejects_versions_past_16() -> None:
    with pytest.raises(UnsupportedVersion):
        build_fetch_envelope(17, 1, FetchResponseData())
    assert response_type(ApiKey.FETCH, 4) is FetchResponseV4


@pytest.mark.parametrize(
    ("key", "version", "body"),
    [
        # compact array count of ~3.3e9: kio's native reader would preallocate ~26 GB and abort
        (ApiKey.CREATE_PARTITIONS, 3, b"\xa2\x89\xd4\xb3\x0c"),
        # legacy int32 topic count of 2**31-1 in a Metadata v4 request
        (ApiKey.METADATA, 4, b"\x7f\xff\xff\xff\x01"),
        # a tagged field whose size runs past the end of the frame
        (ApiKey.API_VERSIONS, 3, b"\x02a\x02b\x01\x00\x7f"),
        # ... and an unknown one
        (ApiKey.API_VERSIONS, 3, b"\x02a\x02b\x01\x09\x7f"),
        # an unknown tag inside a struct array, running past the end
        (ApiKey.CREATE_TOPICS, 5, b"\x02\x02t\x00\x00\x00\x01\x00\x01\x01\x01\x01\x09\x30"),
        # null for CreatePartitions' topics, which cannot be null (the handler met None)
        (ApiKey.CREATE_PARTITIONS, 2, b"\xff\xff\xff\xff\x00\x00\x03\xe8\x00"),
        (ApiKey.CREATE_PARTITIONS, 3, b"\x00\x00\x00\x03\xe8\x00\x00"),
        # a null topic name in a DeleteTopics v1 request (a string that cannot be null)
        (ApiKey.DELETE_TOPICS, 1, b"\x00\x00\x00\x01\xff\xff\x00\x00\x03\xe8"),
    ],
)
def test_guard_refuses_implausible_lengths_before_kio(key: int, version: int, body: bytes) -> None:
    with pytest.raises(InvalidRequest):
        decode_request(key, version, body, 0)


# -- unknown tagged fields (KIP-482: receivers skip them) --------------------------------------------


def _kio_bytes(value: Any) -> bytes:
    out = io.BytesIO()
    entity_writer(type(value))(out, value)
    return out.getvalue()


def _tags(*tags: tuple[int, bytes]) -> bytes:
    out = write_uvarint(len(tags))
    for tag, data in tags:
        out += write_uvarint(tag) + write_uvarint(len(data)) + data
    return out


def _with_tags(plain: bytes, part: bytes, tagged_part: bytes) -> bytes:
    """``plain`` with the one occurrence of ``part`` replaced by ``tagged_part``."""
    assert plain.count(part) == 1
    return plain.replace(part, tagged_part)


def test_unknown_tagged_fields_at_the_top_level_are_skipped() -> None:
    cls = request_type(ApiKey.API_VERSIONS, 3)
    request = cls(client_software_name="librdkafka", client_software_version="2.6.1")
    plain = _kio_bytes(request)
    assert plain.endswith(b"\x00")
    for tags in ((7, b"xyz"),), ((0, b""),), ((1, b"a"), (300, b"\x01" * 200)):
        assert decode_request(ApiKey.API_VERSIONS, 3, plain[:-1] + _tags(*tags), 0) == request
    # inside a frame, after the header
    frame = bytearray(encode_request(request, correlation_id=4, client_id="c"))
    frame[-1:] = _tags((9, b"later"))
    assert decode_request(ApiKey.API_VERSIONS, 3, frame, parse_request_header(frame).body_offset) == request


@pytest.mark.parametrize("version", [5, 6, 7])
def test_unknown_tagged_fields_nested_in_struct_arrays_are_skipped(version: int) -> None:
    """Unknown tags in a CreateTopics request at every level: the request, a topic (an element of
    a struct array) and a config of that topic (an array inside the array)."""
    module = sys.modules[request_type(ApiKey.CREATE_TOPICS, version).__module__]
    config = module.CreatableTopicConfig(name="retention.ms", value="1000")
    other = module.CreatableTopicConfig(name="cleanup.policy", value=None)
    topic = module.CreatableTopic(
        name="t", num_partitions=3, replication_factor=1, assignments=(), configs=(config, other)
    )
    second = module.CreatableTopic(name="u", num_partitions=1, replication_factor=1, assignments=(), configs=())
    request = module.CreateTopicsRequest(
        topics=(topic, second), timeout=datetime.timedelta(seconds=5), validate_only=False
    )
    config_bytes, topic_bytes = _kio_bytes(config), _kio_bytes(topic)
    tagged_config = config_bytes[:-1] + _tags((5, b"\x00\x01"), (77, b""))
    tagged_topic = _with_tags(topic_bytes, config_bytes, tagged_config)[:-1] + _tags((3, b"abc"))
    wire = _with_tags(_kio_bytes(request), topic_bytes, tagged_topic)
    wire = wire[:-1] + _tags((2, b"top"))
    assert decode_request(ApiKey.CREATE_TOPICS, version, wire, 0) == request


def test_known_tagged_fields_still_decode_beside_unknown_ones() -> None:
    """Responses (odradek's client reads them through the same path): CreateTopics v5's known
    tag 0 in a topic result and ApiVersions v3's known tags, with unknown tags next to them and
    inside a known tag's struct array."""
    module = sys.modules[response_type(ApiKey.CREATE_TOPICS, 5).__module__]
    result = module.CreatableTopicResult(
        name="t",
        error_code=kio_errors.ErrorCode.none,
        error_message=None,
        topic_config_error_code=kio_errors.ErrorCode.topic_authorization_failed,
        num_partitions=1,
        replication_factor=1,
        configs=(),
    )
    response = module.CreateTopicsResponse(throttle_time=datetime.timedelta(0), topics=(result,))
    known = b"\x00\x02" + struct.pack(">h", ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    result_bytes = _kio_bytes(result)
    assert result_bytes.endswith(b"\x01" + known)
    tagged_result = result_bytes[: -len(known) - 1] + b"\x02" + known + b"\x09\x01\xff"
    wire = struct.pack(">i", 3) + b"\x00" + _with_tags(_kio_bytes(response), result_bytes, tagged_result)
    assert decode_response(ApiKey.CREATE_TOPICS, 5, wire) == (3, response)

    module = sys.modules[response_type(ApiKey.API_VERSIONS, 3).__module__]
    feature = module.SupportedFeatureKey(name="metadata.version", min_version=1, max_version=7)
    response = module.ApiVersionsResponse(
        error_code=kio_errors.ErrorCode.none,
        api_keys=(module.ApiVersion(api_key=18, min_version=0, max_version=4),),
        throttle_time=datetime.timedelta(0),
        supported_features=(feature,),
        finalized_features_epoch=5,
    )
    feature_bytes = _kio_bytes(feature)
    plain = _kio_bytes(response)
    features = b"\x02" + feature_bytes  # the compact array inside tag 0
    tagged_features = b"\x02" + feature_bytes[:-1] + _tags((4, b"new"))
    section = _tags((0, features), (1, struct.pack(">q", 5)))
    assert plain.endswith(section)
    wire = plain[: -len(section)] + _tags((0, tagged_features), (1, struct.pack(">q", 5)), (60, b"x"))
    assert decode_response(ApiKey.API_VERSIONS, 3, struct.pack(">i", 8) + wire) == (8, response)


def test_header_of_unknown_api_versions_version_parses_even_with_garbage_after_client_id() -> None:
    frame = struct.pack(">hhih", 18, 99, 5, -1) + b"\xff\xff"
    assert parse_request_header(frame).correlation_id == 5
    with pytest.raises(InvalidRequest):
        parse_request_header(struct.pack(">hhih", 18, 3, 5, -1) + b"\xff\xff")


def test_first_flexible_versions_table_matches_kio() -> None:
    """The hand-kept table of first flexible versions (it spares the broker importing every kio
    schema module on its first requests) says what kio's generated schemas say."""
    from kio import index as kio_index

    from odradek.protocol import apis

    for key in sorted(kio_index.api_key_map):
        assert apis.first_flexible_version(key) == apis.kio_first_flexible_version(key), key
    assert set(apis._FIRST_FLEXIBLE) >= {int(k) for k in SUPPORTED_VERSIONS}


# -- the hand-written Fetch request decoder --------------------------------------------------------


def _kio_fetch(version: int, topics: list[tuple[str, list[tuple[int, ...]]]], forgotten: list[tuple[str, list[int]]],
               head: tuple[int, ...], rack: str) -> Any:  # fmt: skip
    """A kio FetchRequest of ``version`` with the given values (fields the version lacks left out)."""
    cls = request_type(ApiKey.FETCH, version)
    module = __import__(cls.__module__, fromlist=["x"])

    def build(kind: type, **values: Any) -> Any:
        names = {f.name for f in fields(kind)}
        return kind(**{k: v for k, v in values.items() if k in names})

    replica_id, max_wait, min_bytes, max_bytes, isolation, session_id, session_epoch = head
    return build(
        cls,
        replica_id=replica_id,
        max_wait=datetime.timedelta(milliseconds=max_wait),
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=isolation,
        session_id=session_id,
        session_epoch=session_epoch,
        topics=tuple(
            build(
                module.FetchTopic,
                topic=name,
                partitions=tuple(
                    build(
                        module.FetchPartition,
                        partition=p[0],
                        current_leader_epoch=p[1],
                        fetch_offset=p[2],
                        log_start_offset=p[3],
                        partition_max_bytes=p[4],
                    )
                    for p in parts
                ),
            )
            for name, parts in topics
        ),
        forgotten_topics_data=tuple(
            build(module.ForgottenTopic, topic=name, partitions=tuple(parts)) for name, parts in forgotten
        )
        if version >= 7
        else (),
        rack_id=rack,
    )


_i32 = st.integers(-(2**31), 2**31 - 1)
_i64 = st.integers(-(2**63), 2**63 - 1)
_name = st.text(min_size=0, max_size=12)


@settings(max_examples=150, deadline=None)
@given(
    version=st.integers(4, 11),
    topics=st.lists(st.tuples(_name, st.lists(st.tuples(_i32, _i32, _i64, _i64, _i32), max_size=3)), max_size=3),
    forgotten=st.lists(st.tuples(_name, st.lists(_i32, max_size=4)), max_size=2),
    head=st.tuples(_i32, st.integers(0, 2**31 - 1), _i32, _i32, st.integers(0, 1), _i32, _i32),
    rack=_name,
)
def test_fetch_request_decoder_agrees_with_kio(
    version: int,
    topics: list[tuple[str, list[tuple[int, ...]]]],
    forgotten: list[tuple[str, list[int]]],
    head: tuple[int, ...],
    rack: str,
) -> None:
    """Every field kio encodes for v4-v11 comes back from the hand-written decoder; fields a
    version lacks come back as Kafka's defaults."""
    kio_request = _kio_fetch(version, topics, forgotten, head, rack)
    frame = encode_request(kio_request, correlation_id=3, client_id="f")
    header = parse_request_header(frame)
    mine = decode_request(ApiKey.FETCH, version, bytearray(frame), header.body_offset)
    assert mine.version == version
    assert (mine.replica_id, mine.max_wait_ms, mine.min_bytes, mine.max_bytes, mine.isolation_level) == (
        kio_request.replica_id,
        ms(kio_request.max_wait),
        kio_request.min_bytes,
        kio_request.max_bytes,
        kio_request.isolation_level,
    )
    assert (mine.session_id, mine.session_epoch) == (
        (kio_request.session_id, kio_request.session_epoch) if version >= 7 else (0, -1)
    )
    assert [
        (t.topic, [(p.partition, p.current_leader_epoch, p.fetch_offset, p.log_start_offset, p.partition_max_bytes)
                   for p in t.partitions])
        for t in mine.topics
    ] == [
        (t.topic, [(p.partition, getattr(p, "current_leader_epoch", -1), p.fetch_offset,
                    getattr(p, "log_start_offset", -1), p.partition_max_bytes) for p in t.partitions])
        for t in kio_request.topics
    ]  # fmt: skip
    assert mine.forgotten_topics == (
        [(t.topic, list(t.partitions)) for t in kio_request.forgotten_topics_data] if version >= 7 else []
    )
    assert mine.rack_id == (kio_request.rack_id if version >= 11 else "")


@pytest.mark.parametrize("version", range(4, 12))
def test_fetch_request_truncated_anywhere_is_invalid(version: int) -> None:
    request = _kio_fetch(
        version, [("t", [(0, 1, 2, 3, 4), (5, 6, 7, 8, 9)])], [("g", [1, 2])], (-1, 500, 1, 1 << 20, 1, 0, -1), "r"
    )
    frame = encode_request(request, correlation_id=3, client_id="f")
    body = parse_request_header(frame).body_offset
    for cut in range(body, len(frame)):
        with pytest.raises(InvalidRequest):
            decode_fetch_request(version, frame[:cut], body)
    with pytest.raises(InvalidRequest, match="unexpected bytes"):
        decode_fetch_request(version, frame + b"\x00", body)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(4, 11))
def test_fetch_decoder_rejects_garbage_cleanly(data: bytes, version: int) -> None:
    try:
        decode_fetch_request(version, data)
    except InvalidRequest:
        pass


def test_fetch_decoder_refuses_a_count_larger_than_the_request() -> None:
    # v4: head (17 bytes), then a topic count of 2**31-1 with a few bytes after it
    body = struct.pack(">iiiib", -1, 100, 1, 1000, 0) + struct.pack(">i", 2**31 - 1) + b"\x00" * 10
    with pytest.raises(InvalidRequest, match="array count"):
        decode_fetch_request(4, body)
