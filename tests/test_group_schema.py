"""``__consumer_offsets`` record schemas byte for byte, and group placement by Java's hashCode."""

from __future__ import annotations

import struct

import pytest

from odradek.broker.group import OffsetAndMetadata, java_string_hash, partition_for
from odradek.broker.group.consumer_schema import ConsumerGroupKey
from odradek.broker.group.schema import (
    GroupKey,
    GroupRecord,
    MemberRecord,
    OffsetKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
    group_key,
    group_value,
    offset_key,
    offset_value,
)
from odradek.errors import CorruptMessage
from odradek.interfaces import TopicPartition
from odradek.kafka_types import java_hashmap_order


def s16(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def b32(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def test_java_string_hash_and_partition() -> None:
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("") == 0
    assert java_string_hash("polygenelubricants") == -(2**31)  # Utils.abs maps it to 0
    assert partition_for("polygenelubricants", 50) == 0
    assert java_string_hash("\U0001f600") == 0xD83D * 31 + 0xDE00  # surrogate pair, as Java
    assert partition_for("my-group", 50) == abs(java_string_hash("my-group")) % 50
    assert java_hashmap_order(["consumer1", "consumer2", "consumer3"]) == ["consumer3", "consumer2", "consumer1"]


def test_offset_commit_key_and_values() -> None:
    tp = TopicPartition("topic", 3)
    key = offset_key("grp", tp)
    assert key == struct.pack(">h", 1) + s16("grp") + s16("topic") + struct.pack(">i", 3)
    assert decode_key(key) == OffsetKey("grp", tp)
    v3 = offset_value(OffsetAndMetadata(100, 7, "md", 1234))
    assert v3 == struct.pack(">hqi", 3, 100, 7) + s16("md") + struct.pack(">q", 1234)
    v1 = offset_value(OffsetAndMetadata(100, -1, "", 1234, 9999))
    assert v1 == struct.pack(">hq", 1, 100) + s16("") + struct.pack(">qq", 1234, 9999)
    assert decode_offset_value(v3) == OffsetAndMetadata(100, 7, "md", 1234)
    assert decode_offset_value(v1) == OffsetAndMetadata(100, -1, "", 1234, 9999)
    v0 = struct.pack(">hq", 0, 5) + s16("x") + struct.pack(">q", 77)
    assert decode_offset_value(v0) == OffsetAndMetadata(5, -1, "x", 77)
    # flexible v4: compact string metadata and an empty tag buffer
    v4 = struct.pack(">hqi", 4, 6, 2) + bytes([3]) + b"ab" + struct.pack(">q", 88) + b"\x00"
    assert decode_offset_value(v4) == OffsetAndMetadata(6, 2, "ab", 88)


def test_group_metadata_key_and_value_v3() -> None:
    assert group_key("grp") == struct.pack(">h", 2) + s16("grp")
    assert decode_key(group_key("grp")) == GroupKey("grp")
    record = GroupRecord(
        "consumer", 4, "range", "m-1", 555,
        (MemberRecord("m-1", "inst", "client", "/10.0.0.1", 30000, 10000, b"sub", b"asg"),),
    )  # fmt: skip
    expected = (
        struct.pack(">h", 3) + s16("consumer") + struct.pack(">i", 4) + s16("range") + s16("m-1")
        + struct.pack(">q", 555) + struct.pack(">i", 1)
        + s16("m-1") + s16("inst") + s16("client") + s16("/10.0.0.1") + struct.pack(">ii", 30000, 10000)
        + b32(b"sub") + b32(b"asg")
    )  # fmt: skip
    assert group_value(record) == expected
    assert decode_group_value(expected) == record


def test_group_metadata_value_old_versions() -> None:
    v0 = (
        struct.pack(">h", 0) + s16("consumer") + struct.pack(">i", 2) + s16(None) + s16(None) + struct.pack(">i", 1)
        + s16("m") + s16("c") + s16("/h") + struct.pack(">i", 6000) + b32(b"") + b32(b"")
    )  # fmt: skip
    record = decode_group_value(v0)
    assert (record.generation, record.protocol, record.current_state_timestamp) == (2, None, -1)
    assert record.members[0].session_timeout_ms == record.members[0].rebalance_timeout_ms == 6000
    v1 = (
        struct.pack(">h", 1) + s16("consumer") + struct.pack(">i", 2) + s16("rr") + s16("m") + struct.pack(">i", 1)
        + s16("m") + s16("c") + s16("/h") + struct.pack(">ii", 60000, 6000) + b32(b"s") + b32(b"a")
    )  # fmt: skip
    member = decode_group_value(v1).members[0]
    assert (member.rebalance_timeout_ms, member.session_timeout_ms, member.group_instance_id) == (60000, 6000, None)


def test_unknown_key_versions_are_skipped() -> None:
    """Kinds this coordinator does not own (share groups, streams groups: 9 and up) are skipped;
    3-8 are KIP-848 consumer group records."""
    assert decode_key(struct.pack(">h", 9) + s16("x")) is None
    assert decode_key(struct.pack(">h", 3) + s16("x")) == ConsumerGroupKey(3, "x")
    assert decode_key(struct.pack(">h", 8) + s16("x") + s16("m")) == ConsumerGroupKey(8, "x", "m")


def test_unreadable_values_are_corrupt_messages() -> None:
    """Bytes a decoder cannot read (bad UTF-8, a short field) are CorruptMessage, which the
    loader skips with a warning; a stray UnicodeDecodeError ended the coordinator's load."""
    bad_utf8 = struct.pack(">hq", 1, 5) + struct.pack(">h", 2) + b"\xff\xfe" + struct.pack(">qq", 1, 2)
    for decode, data in (
        (decode_offset_value, bad_utf8),
        (decode_offset_value, struct.pack(">h", 3) + b"\x00"),
        (decode_group_value, struct.pack(">h", 3) + struct.pack(">h", 2) + b"\xff\xfe"),
        (decode_key, struct.pack(">h", 2) + struct.pack(">h", 3) + b"\xc3\x28a"),
    ):
        with pytest.raises(CorruptMessage):
            decode(data)  # type: ignore[operator]
