"""Keys and values of ``__consumer_offsets`` records, in Kafka's exact schemas.

Two record kinds share the compacted topic, told apart by the key's version prefix:

- offset commit: key ``OffsetCommitKey`` (version 0 or 1: group, topic, partition), value
  ``OffsetCommitValue`` v1 (with an expire timestamp, for commits that asked for a retention time)
  or v3 (with the leader epoch), as Kafka >= 2.1 writes them;
- group metadata: key ``GroupMetadataKey`` (version 2: group), value ``GroupMetadataValue`` v3
  (protocol type, generation, protocol, leader, state timestamp, members with instance id,
  timeouts, subscription and assignment).

A ``None`` value is a tombstone: the offset was expired or deleted, the group is gone. Reading
accepts every non-flexible version Kafka ever wrote (values v0-v3) and the flexible v4 values
(their tag buffers are skipped), so a log written by Kafka loads too.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import CorruptMessage, record_decoder
from ...interfaces import TopicPartition
from ...kafka_types import Reader, Writer
from .consumer_schema import KINDS as CONSUMER_GROUP_KINDS
from .consumer_schema import ConsumerGroupKey, read_key
from .state import OffsetAndMetadata

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
GROUP_METADATA_VALUE_VERSION = 3


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    tp: TopicPartition


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


@dataclass(frozen=True, slots=True)
class MemberRecord:
    """One member in GroupMetadataValue."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupRecord:
    """GroupMetadataValue: a group's generation and members as of its last rebalance."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberRecord, ...]


# -- keys ---------------------------------------------------------------------------------------


def offset_key(group: str, tp: TopicPartition) -> bytes:
    return Writer().int16(OFFSET_COMMIT_KEY_VERSION).string(group).string(tp.topic).int32(tp.partition).getvalue()


def group_key(group: str) -> bytes:
    return Writer().int16(GROUP_METADATA_KEY_VERSION).string(group).getvalue()


@record_decoder("__consumer_offsets record")
def decode_key(data: bytes) -> OffsetKey | GroupKey | ConsumerGroupKey | None:
    """The key of a ``__consumer_offsets`` record: an offset, a classic group, a KIP-848
    consumer group record (versions 3-8, :mod:`.consumer_schema`); None for kinds this
    coordinator does not own (share and streams groups), which are skipped."""
    r = Reader(data)
    version = r.int16()
    if version in (0, 1):
        return OffsetKey(r.string(), TopicPartition(r.string(), r.int32()))
    if version == 2:
        return GroupKey(r.string())
    if version in CONSUMER_GROUP_KINDS:
        return read_key(version, r)
    if version < 0:
        raise CorruptMessage(f"negative __consumer_offsets key version {version}")
    return None


# -- offset commit values -------------------------------------------------------------------


def offset_value(value: OffsetAndMetadata) -> bytes:
    """OffsetCommitValue v1 when the commit carries an expire timestamp, else v3."""
    if value.expire_timestamp is not None:
        return (
            Writer()
            .int16(1)
            .int64(value.offset)
            .string(value.metadata)
            .int64(value.commit_timestamp)
            .int64(value.expire_timestamp)
            .getvalue()
        )
    return (
        Writer()
        .int16(3)
        .int64(value.offset)
        .int32(value.leader_epoch)
        .string(value.metadata)
        .int64(value.commit_timestamp)
        .getvalue()
    )


@record_decoder("__consumer_offsets record")
def decode_offset_value(data: bytes) -> OffsetAndMetadata:
    r = Reader(data)
    version = r.int16()
    if not 0 <= version <= 4:
        raise CorruptMessage(f"unknown OffsetCommitValue version {version}")
    offset = r.int64()
    leader_epoch = r.int32() if version >= 3 else -1
    metadata = _flex_string(r) if version >= 4 else r.string()
    commit_timestamp = r.int64()
    expire = r.int64() if version == 1 else None
    return OffsetAndMetadata(offset, leader_epoch, metadata, commit_timestamp, expire)


# -- group metadata values ------------------------------------------------------------------


def group_value(record: GroupRecord) -> bytes:
    w = Writer().int16(GROUP_METADATA_VALUE_VERSION)
    w.string(record.protocol_type).int32(record.generation)
    w.nullable_string(record.protocol).nullable_string(record.leader)
    w.int64(record.current_state_timestamp)
    w.array_length(len(record.members))
    for m in record.members:
        w.string(m.member_id).nullable_string(m.group_instance_id)
        w.string(m.client_id).string(m.client_host)
        w.int32(m.rebalance_timeout_ms).int32(m.session_timeout_ms)
        w.nullable_bytes(m.subscription).nullable_bytes(m.assignment)
    return w.getvalue()


@record_decoder("__consumer_offsets record")
def decode_group_value(data: bytes) -> GroupRecord:
    r = Reader(data)
    version = r.int16()
    if not 0 <= version <= 4:
        raise CorruptMessage(f"unknown GroupMetadataValue version {version}")
    if version >= 4:
        return _decode_group_value_v4(r)
    protocol_type = r.string()
    generation = r.int32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    state_ts = r.int64() if version >= 2 else -1
    members = []
    for _ in range(r.array_length()):
        member_id = r.string()
        instance = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        session = r.int32()
        rebalance = session
        if version >= 1:
            rebalance, session = session, r.int32()
        members.append(
            MemberRecord(member_id, instance, client_id, client_host, rebalance, session, _bytes(r), _bytes(r))
        )
    return GroupRecord(protocol_type, generation, protocol, leader, state_ts, tuple(members))


def _bytes(r: Reader) -> bytes:
    return r.nullable_bytes() or b""


# -- flexible (v4) reading: compact strings/bytes/arrays, tag buffers ------------------------


def _flex_len(r: Reader) -> int:
    return r.uvarint() - 1  # compact lengths are stored +1 (0 means null)


def _flex_nullable_string(r: Reader) -> str | None:
    n = _flex_len(r)
    if n < 0:
        return None
    return r.raw(n).decode("utf-8")


def _flex_string(r: Reader) -> str:
    value = _flex_nullable_string(r)
    if value is None:
        raise CorruptMessage("null where a string is required")
    return value


def _flex_bytes(r: Reader) -> bytes:
    n = _flex_len(r)
    return b"" if n < 0 else r.raw(n)


def _decode_group_value_v4(r: Reader) -> GroupRecord:
    protocol_type = _flex_string(r)
    generation = r.int32()
    protocol = _flex_nullable_string(r)
    leader = _flex_nullable_string(r)
    state_ts = r.int64()
    members = []
    for _ in range(max(_flex_len(r), 0)):
        member_id = _flex_string(r)
        instance = _flex_nullable_string(r)
        client_id = _flex_string(r)
        client_host = _flex_string(r)
        rebalance = r.int32()
        session = r.int32()
        subscription = _flex_bytes(r)
        assignment = _flex_bytes(r)
        r.skip_tagged_fields()
        members.append(
            MemberRecord(member_id, instance, client_id, client_host, rebalance, session, subscription, assignment)
        )
    r.skip_tagged_fields()
    return GroupRecord(protocol_type, generation, protocol, leader, state_ts, tuple(members))
