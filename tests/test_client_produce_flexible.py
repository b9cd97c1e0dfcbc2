"""odradek's producer on Produce v9-v11: its flexible request as kio reads it, its decoding of
every response version (record errors and error message from v8, KIP-467; the KIP-951 tags from
v10), the record errors in a delivery error's message, and a real broker answering it."""

from __future__ import annotations

from typing import Any

import pytest
from kio.serial import entity_reader

from odradek.client import Admin, NewTopic, Producer
from odradek.client.sender import produce_error_detail
from odradek.errors import ErrorCode, InvalidRequest, KafkaError
from odradek.protocol import (
    ApiKey,
    NodeEndpoint,
    PartitionProduceResponse,
    ProduceResponseData,
    TopicProduceResponse,
    encode_request,
    parse_request_header,
    request_type,
)
from odradek.protocol.produce import (
    PartitionProduceData,
    ProduceRequestData,
    TopicProduceData,
    decode_produce_response,
    encode_produce_response,
)
from odradek.testing import BrokerProcess, unique_topic


@pytest.mark.parametrize("version", range(3, 12))
def test_the_request_is_what_kio_reads(version: int) -> None:
    request = ProduceRequestData(
        -1,
        1500,
        [
            TopicProduceData("é" * 70, [PartitionProduceData(0, bytearray(b"batch")), PartitionProduceData(2, None)]),
            TopicProduceData("b", [PartitionProduceData(1, bytearray())]),
        ],
        "tx" if version % 2 else None,
        version,
    )
    frame = encode_request(request, correlation_id=3, client_id="c")
    header = parse_request_header(frame)
    assert (header.api_version, header.correlation_id) == (version, 3)
    decoded, end = entity_reader(request_type(ApiKey.PRODUCE, version))(frame, header.body_offset)
    assert header.body_offset + end == len(frame)  # the whole body read
    assert (decoded.acks, decoded.transactional_id) == (-1, request.transactional_id)
    assert [(t.name, [(p.index, p.records) for p in t.partition_data]) for t in decoded.topic_data] == [
        ("é" * 70, [(0, b"batch"), (2, None)]),
        ("b", [(1, b"")]),
    ]


_RESPONSE = ProduceResponseData(
    [
        TopicProduceResponse(
            "orders",
            [
                PartitionProduceResponse(0, 0, 10, -1, 0),
                PartitionProduceResponse(1, 87, -1, -1, -1, [(1, "no key"), (4, None)], "compacted topics need a key"),
                PartitionProduceResponse(2, 6, current_leader=(3, 12)),
            ],
        )
    ],
    throttle_time_ms=4,
    node_endpoints=[NodeEndpoint(3, "broker-3", 9093, "r")],
)


@pytest.mark.parametrize("version", range(3, 12))
def test_every_response_version_decodes_and_a_truncated_one_is_refused(version: int) -> None:
    wire = encode_produce_response(version, _RESPONSE)  # kio's encoding (tests/test_produce_flexible.py)
    decoded = decode_produce_response(version, wire)
    parts = decoded.responses[0].partition_responses
    assert [(p.index, p.error_code, p.base_offset) for p in parts] == [(0, 0, 10), (1, 87, -1), (2, 6, -1)]
    assert decoded.throttle_time_ms == 4
    if version >= 8:
        assert (parts[1].record_errors, parts[1].error_message) == (
            [(1, "no key"), (4, None)],
            "compacted topics need a key",
        )
    if version >= 10:
        assert (parts[2].current_leader, decoded.node_endpoints) == ((3, 12), [NodeEndpoint(3, "broker-3", 9093, "r")])
    else:
        assert (parts[2].current_leader, list(decoded.node_endpoints)) == (None, [])
    for cut in range(len(wire)):
        with pytest.raises(InvalidRequest):
            decode_produce_response(version, wire[:cut])


def test_a_partition_tag_the_client_does_not_know_is_skipped() -> None:
    wire = bytearray(
        encode_produce_response(11, ProduceResponseData([TopicProduceResponse("t", [PartitionProduceResponse(0)])]))
    )
    # the partition's tag section (the byte before the topic's): one unknown tag 5 of 2 bytes
    at = len(wire) - 4 - 1 - 1 - 1  # node endpoints section, throttle, topic tags, partition tags
    assert wire[at] == 0
    wire[at : at + 1] = b"\x01\x05\x02zz"
    decoded = decode_produce_response(11, wire)
    assert decoded.responses[0].partition_responses[0].current_leader is None


def test_the_delivery_error_names_the_invalid_records() -> None:
    p = _RESPONSE.responses[0].partition_responses[1]
    assert produce_error_detail(p) == ": compacted topics need a key; record 1: no key; record 4: invalid"
    assert produce_error_detail(_RESPONSE.responses[0].partition_responses[0]) == ""


def test_a_keyless_record_to_a_compacted_topic_fails_with_the_brokers_reason(odradek_broker: BrokerProcess) -> None:
    topic = unique_topic("compacted")
    with Admin({"bootstrap.servers": odradek_broker.bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, 1, 1, {"cleanup.policy": "compact"})])
    with Producer({"bootstrap.servers": odradek_broker.bootstrap, "linger.ms": 0}) as producer:
        assert producer.send(topic, b"kept", key=b"k").result(30).offset == 0
        with pytest.raises(KafkaError) as info:
            producer.send(topic, b"no key").result(30)
    error: Any = info.value
    assert error.code is ErrorCode.INVALID_RECORD
    assert "record 0" in str(error), str(error)
