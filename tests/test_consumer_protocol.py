"""The consumer protocol's bytes match the Java client's, and what kafka-python, aiokafka and kio
write and read."""

from __future__ import annotations

import io

import pytest
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment, ConsumerProtocolMemberMetadata
from hypothesis import given
from hypothesis import strategies as st
from kafka.coordinator.assignors.sticky.user_data import StickyAssignorUserData
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription
from kio.schema.consumer_protocol_subscription.v3.data import ConsumerProtocolSubscription as KioSubscriptionV3
from kio.schema.consumer_protocol_subscription.v3.data import TopicPartition as KioTopicPartition
from kio.serial import entity_writer
from kio.static.primitive import i32

from odradek.consumer_protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    decode_cooperative_user_data,
    decode_sticky_user_data,
    decode_subscription,
    encode_assignment,
    encode_cooperative_user_data,
    encode_sticky_user_data,
    encode_subscription,
)
from odradek.errors import CorruptMessage
from odradek.interfaces import TopicPartition as TP


def test_subscription_v3_bytes_by_hand() -> None:
    sub = Subscription(["b", "a"], b"xy", [TP("a", 1), TP("a", 0)], 5, "r1")
    expected = b"".join(
        [
            b"\x00\x03",  # version
            b"\x00\x00\x00\x02\x00\x01a\x00\x01b",  # topics, sorted
            b"\x00\x00\x00\x02xy",  # user data
            b"\x00\x00\x00\x01\x00\x01a\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x01",  # owned a:[0,1]
            b"\x00\x00\x00\x05",  # generation
            b"\x00\x02r1",  # rack
        ]
    )
    assert encode_subscription(sub) == expected


def test_subscription_matches_kafka_python_and_kio() -> None:
    owned = [TP("a", 0), TP("a", 1), TP("c", 3)]
    ours = encode_subscription(Subscription(["a", "b", "c"], b"ud", owned, 7, "rack"))
    theirs = ConsumerProtocolSubscription(
        version=3,
        topics=["a", "b", "c"],
        user_data=b"ud",
        owned_partitions=[
            ConsumerProtocolSubscription.TopicPartition(topic="a", partitions=[0, 1]),
            ConsumerProtocolSubscription.TopicPartition(topic="c", partitions=[3]),
        ],
        generation_id=7,
        rack_id="rack",
    ).encode()
    assert ours == theirs
    buf = io.BytesIO()
    entity_writer(KioSubscriptionV3)(
        buf,
        KioSubscriptionV3(
            topics=("a", "b", "c"),
            user_data=b"ud",
            owned_partitions=(
                KioTopicPartition(topic="a", partitions=(i32(0), i32(1))),  # type: ignore[arg-type]
                KioTopicPartition(topic="c", partitions=(i32(3),)),  # type: ignore[arg-type]
            ),
            generation_id=i32(7),
            rack_id="rack",
        ),
    )
    assert ours == b"\x00\x03" + buf.getvalue()


def test_decode_what_old_clients_write() -> None:
    v0 = ConsumerProtocolMemberMetadata(0, ["t1", "t2"], b"").encode()  # aiokafka
    sub = decode_subscription(v0)
    assert (sub.version, list(sub.topics), sub.user_data, sub.generation_id) == (0, ["t1", "t2"], b"", -1)
    # kafka-python's v1 without generation, and an unknown future version with trailing fields
    v1 = ConsumerProtocolSubscription(version=1, topics=["t"], user_data=None, owned_partitions=[]).encode()
    assert decode_subscription(v1).owned_partitions == ()
    future = encode_subscription(Subscription(["t"], None, [TP("t", 2)], 4, None), 3)
    future = b"\x00\x09" + future[2:] + b"\x00\x00extra"
    decoded = decode_subscription(future)
    assert (decoded.owned_partitions, decoded.generation_id) == ((TP("t", 2),), 4)
    with pytest.raises(CorruptMessage):
        decode_subscription(b"\x00\x00\x00\x00\x00\x05\x00")


def test_assignment_round_trips_with_clients() -> None:
    ours = encode_assignment(Assignment([TP("b", 2), TP("a", 0), TP("b", 1)], None))
    # grouped by topic in first-seen order, as Java's serializeAssignment
    kp = ConsumerProtocolAssignment(
        version=3,
        assigned_partitions=[
            ConsumerProtocolAssignment.TopicPartition(topic="b", partitions=[2, 1]),
            ConsumerProtocolAssignment.TopicPartition(topic="a", partitions=[0]),
        ],
        user_data=None,
    ).encode()
    assert ours == kp
    aio = ConsumerProtocolMemberAssignment.decode(ours)
    assert sorted(aio.partitions()) == [("a", 0), ("b", 1), ("b", 2)]
    theirs = ConsumerProtocolMemberAssignment(0, [("t", [0, 1])], b"").encode()
    assert decode_assignment(theirs).partitions == (TP("t", 0), TP("t", 1))
    assert decode_assignment(b"").partitions == ()  # a member the leader left out


def test_sticky_user_data_matches_kafka_python() -> None:
    parts = [TP("t", 0), TP("u", 1), TP("t", 2)]
    ours = encode_sticky_user_data(parts, 3)
    theirs = StickyAssignorUserData([("t", [0, 2]), ("u", [1])], 3).encode(header=False)
    assert ours == theirs
    assert decode_sticky_user_data(ours) == ([TP("t", 0), TP("t", 2), TP("u", 1)], 3)
    v0 = StickyAssignorUserData(version=0, previous_assignment=[("t", [5])]).encode(header=False)
    assert decode_sticky_user_data(v0) == ([TP("t", 5)], None)
    assert decode_sticky_user_data(b"\xff") == ([], -1)
    assert decode_sticky_user_data(None) == ([], None)
    assert decode_cooperative_user_data(encode_cooperative_user_data(9)) == 9
    assert decode_cooperative_user_data(b"") == -1


names = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=8)


@given(
    topics=st.lists(names, max_size=5, unique=True),
    user_data=st.none() | st.binary(max_size=20),
    owned=st.lists(st.tuples(names, st.integers(0, 100)), max_size=6, unique=True),
    generation=st.integers(-1, 2**31 - 1),
    rack=st.none() | names,
    version=st.integers(0, 3),
)
def test_subscription_round_trip(
    topics: list[str],
    user_data: bytes | None,
    owned: list[tuple[str, int]],
    generation: int,
    rack: str | None,
    version: int,
) -> None:
    sub = Subscription(topics, user_data, [TP(t, p) for t, p in owned], generation, rack)
    decoded = decode_subscription(encode_subscription(sub, version))
    assert sorted(decoded.topics) == sorted(topics)
    assert decoded.user_data == user_data
    assert decoded.version == version
    if version >= 1:
        assert sorted(decoded.owned_partitions) == sorted(sub.owned_partitions)
    if version >= 2:
        assert decoded.generation_id == generation
    if version >= 3:
        assert decoded.rack_id == rack
