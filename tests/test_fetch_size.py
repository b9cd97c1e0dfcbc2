"""Property tests of ``fetch_response_size`` (the size a consumer's ``consumer_byte_rate`` is
charged): summed arithmetically, it must equal the real envelope's size after its size prefix for
every version v4-16, whatever the topics, partitions, error codes, aborted transactions, tagged
fields and record sizes (across the flexible versions' varint-width boundaries). Kafka sizes the
response without node endpoints, so the v16 field they add is taken off the envelope's size."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol import (
    FetchPartitionData,
    FetchResponseData,
    FetchTopicData,
    NodeEndpoint,
    build_fetch_envelope,
    fetch_response_size,
)
from odradek.protocol.fetch import FETCH_ENVELOPE_VERSIONS, node_endpoints_field


@dataclass(slots=True)
class _SizeOnly:
    """A records slice with a size and no bytes: the envelope only reads its size."""

    size: int

    def to_bytes(self) -> bytes:
        raise AssertionError("the size never reads records")

    def release(self) -> None:
        pass


#: lengths either side of where a varint (of length+1) grows a byte
_BOUNDARIES = [0, 1, 126, 127, 128, 16382, 16383, 16384, (1 << 21) - 2, (1 << 21) - 1, 1 << 21]
_sizes = st.one_of(st.sampled_from(_BOUNDARIES), st.integers(0, 1 << 22))
_epoch_pair = st.tuples(st.integers(-1, 2**31 - 1), st.integers(-1, 2**31 - 1))
_records = st.one_of(
    st.none(),
    _sizes.map(_SizeOnly),
    st.integers(0, 300).map(lambda n: b"r" * n),
)
_partitions = st.builds(
    FetchPartitionData,
    partition_index=st.integers(0, 2**31 - 1),
    error_code=st.sampled_from([0, 1, 3, 6, 74, 75, 100]),
    high_watermark=st.integers(-1, 2**63 - 1),
    aborted_transactions=st.one_of(
        st.none(),
        st.integers(0, 3).map(lambda n: [(7, 8)] * n),
        st.sampled_from([126, 127, 128]).map(lambda n: [(1, 2)] * n),
    ),
    preferred_read_replica=st.integers(-1, 5),
    records=_records,
    diverging_epoch=st.one_of(st.none(), st.tuples(st.integers(0, 2**31 - 1), st.integers(-1, 2**63 - 1))),
    current_leader=st.one_of(st.none(), st.just((-1, -1)), _epoch_pair),
)
_topics = st.builds(
    FetchTopicData,
    topic=st.one_of(st.text(min_size=0, max_size=20), st.sampled_from(["t" * 126, "ü" * 64, "x" * 127])),
    partitions=st.lists(_partitions, max_size=5),
    topic_id=st.binary(min_size=16, max_size=16),
)
_nodes = st.lists(
    st.builds(
        NodeEndpoint,
        st.integers(0, 100),
        st.text(max_size=30),
        st.integers(1, 65535),
        st.one_of(st.none(), st.text(max_size=10)),
    ),
    max_size=3,
)


def _shape(p: FetchPartitionData) -> tuple[int, int, tuple[int, int] | None, tuple[int, int] | None]:
    records = p.records
    size = 0 if records is None else records.size if isinstance(records, _SizeOnly) else len(records)
    return len(p.aborted_transactions or ()), size, p.current_leader, p.diverging_epoch


@settings(max_examples=400, deadline=None)
@given(
    version=st.sampled_from(FETCH_ENVELOPE_VERSIONS),
    topics=st.lists(_topics, max_size=4),
    nodes=_nodes,
    throttle=st.integers(0, 2**31 - 1),
    session_id=st.integers(0, 2**31 - 1),
    error=st.sampled_from([0, 70]),
)
def test_the_size_is_the_envelope_after_its_size_prefix(
    version: int, topics: list[FetchTopicData], nodes: list[NodeEndpoint], throttle: int, session_id: int, error: int
) -> None:
    response = FetchResponseData(topics, throttle, error, session_id, nodes)
    envelope = build_fetch_envelope(version, 12345, response)
    endpoints = len(node_endpoints_field(nodes)) - 1 if version >= 16 else 0  # Kafka sizes none
    shapes = [(t.topic, [_shape(p) for p in t.partitions]) for t in topics]
    assert fetch_response_size(version, shapes) == envelope.size - 4 - endpoints


@given(topics=st.integers(126, 129), partitions=st.integers(126, 129))
@settings(max_examples=20, deadline=None)
def test_the_topic_and_partition_counts_cross_a_varint_width(topics: int, partitions: int) -> None:
    """Enough topics and partitions that their compact counts take two bytes."""
    response = FetchResponseData(
        [FetchTopicData(f"t{i}", [FetchPartitionData(j) for j in range(partitions)], bytes(16)) for i in range(topics)]
    )
    shapes = [(t.topic, [(0, 0)] * partitions) for t in response.responses]
    for version in FETCH_ENVELOPE_VERSIONS:
        assert fetch_response_size(version, shapes) == build_fetch_envelope(version, 1, response).size - 4
