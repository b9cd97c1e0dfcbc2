"""The hand-written Metadata response encoder against kio's, byte for byte, for every version."""

from __future__ import annotations

import io
import sys
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.serial import entity_writer

from odradek.broker.api import BrokerNode, ClusterMetadata, PartitionMetadata, TopicMetadata
from odradek.errors import ErrorCode, InvalidRequest
from odradek.protocol import (
    SUPPORTED_VERSIONS,
    ApiKey,
    MetadataResponseData,
    decode_request,
    decode_response,
    encode_metadata_response,
    encode_request,
    encode_response,
    encode_response_header,
    kio_error,
    parse_request_header,
    request_type,
    response_type,
    timedelta_ms,
)
from odradek.protocol.authorized_operations import AUTHORIZED_OPERATIONS_OMITTED as OMITTED
from odradek.protocol.authorized_operations import CLUSTER_OPERATIONS, TOPIC_OPERATIONS
from odradek.protocol.metadata import MAX_VERSION

VERSIONS = range(SUPPORTED_VERSIONS[ApiKey.METADATA].min, SUPPORTED_VERSIONS[ApiKey.METADATA].max + 1)
_ERRORS = [ErrorCode.NONE, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
_node = st.integers(-1, 2**31 - 1)
_nodes = st.lists(st.integers(0, 2**31 - 1), max_size=4).map(tuple)
_text = st.text(max_size=20)


def _kio(version: int, md: ClusterMetadata, topic_ops: int = OMITTED, cluster_ops: int = OMITTED) -> bytes:
    """What kio writes for the same response (the reference encoding)."""
    cls = response_type(ApiKey.METADATA, version)
    module = sys.modules[cls.__module__]

    def make(c: type, **values: Any) -> Any:
        names = set(c.__dataclass_fields__)
        return c(**{k: v for k, v in values.items() if k in names})

    body = make(
        cls,
        throttle_time=timedelta_ms(0),
        brokers=tuple(
            make(module.MetadataResponseBroker, node_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
            for b in md.brokers
        ),
        cluster_id=md.cluster_id,
        controller_id=md.controller_id,
        topics=tuple(
            make(
                module.MetadataResponseTopic,
                error_code=kio_error(t.error),
                name=None if version >= 12 and not t.name else t.name,
                topic_id=uuid.UUID(hex=t.topic_id) if t.topic_id else uuid.UUID(int=0),
                is_internal=t.is_internal,
                partitions=tuple(
                    make(
                        module.MetadataResponsePartition,
                        error_code=kio_error(p.error),
                        partition_index=p.partition,
                        leader_id=p.leader,
                        leader_epoch=p.leader_epoch,
                        replica_nodes=p.replicas,
                        isr_nodes=p.isr,
                        offline_replicas=p.offline_replicas,
                    )
                    for p in t.partitions
                ),
                topic_authorized_operations=topic_ops,
            )
            for t in md.topics
        ),
        cluster_authorized_operations=cluster_ops,
    )
    out = io.BytesIO()
    entity_writer(cls)(out, body)
    return out.getvalue()


partitions = st.builds(
    PartitionMetadata,
    st.sampled_from(_ERRORS),
    st.integers(0, 2**31 - 1),
    _node,
    st.integers(-1, 2**31 - 1),
    _nodes,
    _nodes,
    _nodes,
)
topics = st.builds(
    TopicMetadata,
    st.sampled_from(_ERRORS),
    _text,
    st.booleans(),
    st.lists(partitions, max_size=5).map(tuple),
    st.just("") | st.uuids().map(lambda u: u.hex),
)
brokers = st.builds(BrokerNode, st.integers(0, 2**31 - 1), _text, st.integers(0, 65535), st.none() | _text)
clusters = st.builds(
    ClusterMetadata,
    _text,
    _node,
    st.lists(brokers, max_size=3).map(tuple),
    st.lists(topics, max_size=4).map(tuple),
)


@given(md=clusters, version=st.sampled_from(VERSIONS))
@settings(max_examples=300, deadline=None)
def test_metadata_matches_kio_byte_for_byte(md: ClusterMetadata, version: int) -> None:
    assert encode_metadata_response(MetadataResponseData(version, md)) == _kio(version, md)


@pytest.mark.parametrize("version", [v for v in VERSIONS if v >= 8])
def test_authorized_operations_when_asked_match_kio(version: int) -> None:
    """v8+: the operations a client asked for (all of them: no authorizer), as kio writes them."""
    md = _many(3)
    asked = MetadataResponseData(
        version, md, topic_authorized_operations=TOPIC_OPERATIONS, cluster_authorized_operations=CLUSTER_OPERATIONS
    )
    assert encode_metadata_response(asked) == _kio(version, md, TOPIC_OPERATIONS, CLUSTER_OPERATIONS)
    assert encode_metadata_response(asked) != encode_metadata_response(MetadataResponseData(version, md))


def _many(n: int) -> ClusterMetadata:
    parts = tuple(PartitionMetadata(ErrorCode.NONE, i, 0, 3, (0, 1, 2), (0, 1), (2,)) for i in range(n))
    return ClusterMetadata(
        "cluster-x", 0, (BrokerNode(0, "127.0.0.1", 9092, "r1"),), (TopicMetadata(ErrorCode.NONE, "t", False, parts),)
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_many_partitions_round_trip_through_kio_reader(version: int) -> None:
    md = _many(1000)
    frame = encode_response(ApiKey.METADATA, version, 7, MetadataResponseData(version, md))
    assert frame.startswith(encode_response_header(ApiKey.METADATA, version, 7))
    _, decoded = decode_response(ApiKey.METADATA, version, frame)
    (topic,) = decoded.topics
    assert [p.partition_index for p in topic.partitions] == list(range(1000))
    assert [b.port for b in decoded.brokers] == [9092]


def test_advertised_versions_are_all_written() -> None:
    assert max(VERSIONS) <= MAX_VERSION
    with pytest.raises(ValueError, match="v13"):
        encode_metadata_response(MetadataResponseData(13, _many(1)))


def test_body_for_another_api_is_refused() -> None:
    with pytest.raises(TypeError):
        encode_response(ApiKey.METADATA, 5, 1, MetadataResponseData(4, _many(1)))


@pytest.mark.parametrize("version", [v for v in VERSIONS if v >= 9])
def test_librdkafka_all_topics_placeholder_is_read_as_meant(version: int) -> None:
    """librdkafka asks flexible Metadata for all topics with a 4-byte zero placeholder where the
    compact null array belongs: it reads as all topics with the flags librdkafka wrote."""
    cls = request_type(ApiKey.METADATA, version)
    flags = {"allow_auto_topic_creation": True, "include_topic_authorized_operations": True}
    if "include_cluster_authorized_operations" in cls.__dataclass_fields__:  # v9-10
        flags["include_cluster_authorized_operations"] = False
    request = cls(topics=None, **flags)
    frame = encode_request(request, correlation_id=3, client_id="rdkafka")
    offset = parse_request_header(frame).body_offset
    assert frame[offset] == 0  # the compact null array
    quirky = frame[: offset + 1] + b"\x00\x00\x00" + frame[offset + 1 :]
    decoded = decode_request(ApiKey.METADATA, version, quirky, offset)
    assert decoded.topics is None and decoded.allow_auto_topic_creation and decoded.include_topic_authorized_operations
    with pytest.raises(InvalidRequest):  # other stray bytes stay an error
        decode_request(ApiKey.METADATA, version, frame + b"\x00\x00", offset)
