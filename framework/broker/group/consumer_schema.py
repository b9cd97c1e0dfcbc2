"""KIP-848 consumer group records in ``__consumer_offsets``, in Kafka's schemas.

Six record kinds, told apart by the key's version (Kafka's coordinator record type); keys are
non-flexible (int16 version, then strings), values an int16 version 0 then a flexible body:

====  ==============================================  =========================================
key   record                                          value fields
====  ==============================================  =========================================
3     ConsumerGroupMetadata (group)                   Epoch
4     ConsumerGroupPartitionMetadata (group)          Epoch, Topics [id, name, partitions, racks]
5     ConsumerGroupMemberMetadata (group, member)     InstanceId, RackId, ClientId, ClientHost,
                                                      SubscribedTopicNames, SubscribedTopicRegex,
                                                      RebalanceTimeoutMs, ServerAssignor,
                                                      tagged ClassicMemberMetadata (migration)
6     ConsumerGroupTargetAssignmentMetadata (group)   AssignmentEpoch
7     ConsumerGroupTargetAssignmentMember (g, m)      TopicPartitions [id, partitions]
8     ConsumerGroupCurrentMemberAssignment (g, m)     MemberEpoch, PreviousMemberEpoch, State,
                                                      AssignedPartitions, PartitionsPendingRevocation
====  ==============================================  =========================================

:func:`group_records` turns a :class:`~.consumer_group.ConsumerGroup` into its records (key ->
value bytes); the coordinator appends the ones that changed since the last write and tombstones
for the ones that are gone, which is what Kafka's deltas amount to after compaction.
:func:`group_from_records` rebuilds a group from the last value of each key, as a reload does.
Tagged fields Kafka added later (MetadataHash, AssignmentEpochs, ...) are skipped when read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from ...errors import CorruptMessage, record_decoder
from ...kafka_types import Reader, Writer
from .consumer_group import (
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    SubscribedTopic,
    TopicIdPartitions,
)

GROUP_METADATA = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_ASSIGNMENT_METADATA = 6
TARGET_ASSIGNMENT_MEMBER = 7
CURRENT_MEMBER_ASSIGNMENT = 8
KINDS = frozenset(range(GROUP_METADATA, CURRENT_MEMBER_ASSIGNMENT + 1))
_PER_MEMBER = frozenset({MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT})

_STATE_CODES = {MemberState.STABLE: 0, MemberState.UNREVOKED_PARTITIONS: 1, MemberState.UNRELEASED_PARTITIONS: 2}
_STATES = {code: state for state, code in _STATE_CODES.items()}


@dataclass(frozen=True, slots=True)
class ConsumerGroupKey:
    """The key of a consumer group record: its kind (the key version) and whom it is about."""

    kind: int
    group: str
    member_id: str | None = None

    def encode(self) -> bytes:
        w = Writer().int16(self.kind).string(self.group)
        if self.kind in _PER_MEMBER:
            w.string(self.member_id or "")
        return w.getvalue()


def read_key(kind: int, r: Reader) -> ConsumerGroupKey:
    """The rest of a key whose version ``kind`` was read (one of :data:`KINDS`)."""
    group = r.string()
    return ConsumerGroupKey(kind, group, r.string() if kind in _PER_MEMBER else None)


# -- writing ----------------------------------------------------------------------------------


def _value() -> Writer:
    """A value's start: every consumer group value is at version 0."""
    return Writer().int16(0)


def _topic_partitions(w: Writer, assignment: TopicIdPartitions) -> None:
    w.compact_array_length(len(assignment))
    for topic_id, parts in sorted(assignment.items()):
        w.uuid(bytes.fromhex(topic_id))
        w.compact_array_length(len(parts))
        for p in sorted(parts):
            w.int32(p)
        w.empty_tagged_fields()


def _with_classic(w: Writer, classic: ClassicMemberMetadata) -> bytes:
    """A member metadata value ending with its tagged ClassicMemberMetadata (tag 0)."""
    body = Writer().int32(classic.session_timeout_ms).compact_array_length(len(classic.protocols))
    for name, metadata in classic.protocols:
        body.compact_string(name).compact_bytes(metadata).empty_tagged_fields()
    field = body.empty_tagged_fields().getvalue()
    return w.uvarint(1).uvarint(0).uvarint(len(field)).raw(field).getvalue()


def _read_classic(r: Reader) -> ClassicMemberMetadata | None:
    """The tagged fields ending a member metadata value: ClassicMemberMetadata when present."""
    classic = None
    for _ in range(r.uvarint()):
        tag, size = r.uvarint(), r.uvarint()
        data = r.raw(size)
        if tag == 0:
            f = Reader(data)
            session_timeout_ms = f.int32()
            protocols = []
            for _ in range(max(_len(f), 0)):
                name = _required(f)
                n = _len(f)
                protocols.append((name, f.raw(n) if n > 0 else b""))
                f.skip_tagged_fields()
            classic = ClassicMemberMetadata(session_timeout_ms, tuple(protocols))
    return classic


def group_records(group: ConsumerGroup) -> dict[bytes, bytes]:
    """Every record describing ``group`` now: encoded key -> encoded value."""
    gid = group.group_id
    out: dict[bytes, bytes] = {}

    def put(key: ConsumerGroupKey, w: Writer) -> None:
        out[key.encode()] = w.empty_tagged_fields().getvalue()

    put(ConsumerGroupKey(GROUP_METADATA, gid), _value().int32(group.group_epoch))
    w = _value().int32(group.group_epoch)
    w.compact_array_length(len(group.subscription_metadata))
    for name, topic in sorted(group.subscription_metadata.items()):
        w.uuid(bytes.fromhex(topic.topic_id)).compact_string(name).int32(topic.num_partitions)
        w.compact_array_length(0).empty_tagged_fields()  # no partition racks
    put(ConsumerGroupKey(PARTITION_METADATA, gid), w)
    put(
        ConsumerGroupKey(TARGET_ASSIGNMENT_METADATA, gid),
        _value().int32(group.assignment_epoch),
    )
    for member_id, m in group.members.items():
        w = _value().compact_nullable_string(m.instance_id).compact_nullable_string(m.rack_id)
        w.compact_string(m.client_id).compact_string(m.client_host)
        w.compact_array_length(len(m.subscribed_topic_names))
        for name in sorted(m.subscribed_topic_names):
            w.compact_string(name)
        w.compact_nullable_string(m.subscribed_topic_regex).int32(m.rebalance_timeout_ms)
        w.compact_nullable_string(m.server_assignor)
        if m.classic is None:
            put(ConsumerGroupKey(MEMBER_METADATA, gid, member_id), w)
        else:  # tagged field 0: ClassicMemberMetadata
            out[ConsumerGroupKey(MEMBER_METADATA, gid, member_id).encode()] = _with_classic(w, m.classic)
        w = _value()
        _topic_partitions(w, group.target.get(member_id, {}))
        put(ConsumerGroupKey(TARGET_ASSIGNMENT_MEMBER, gid, member_id), w)
        w = _value().int32(m.member_epoch).int32(m.previous_member_epoch)
        w.int8(_STATE_CODES[m.state])
        _topic_partitions(w, m.assigned)
        _topic_partitions(w, m.pending_revocation)
        put(ConsumerGroupKey(CURRENT_MEMBER_ASSIGNMENT, gid, member_id), w)
    return out


# -- reading ----------------------------------------------------------------------------------


def _len(r: Reader) -> int:
    n = r.uvarint() - 1
    if n > r.remaining():
        raise CorruptMessage(f"{n} elements in {r.remaining()} bytes")
    return n


def _string(r: Reader) -> str | None:
    n = _len(r)
    return None if n < 0 else r.raw(n).decode("utf-8")


def _required(r: Reader) -> str:
    value = _string(r)
    if value is None:
        raise CorruptMessage("null where a string is required")
    return value


def _read_topic_partitions(r: Reader) -> dict[str, frozenset[int]]:
    out: dict[str, frozenset[int]] = {}
    for _ in range(max(_len(r), 0)):
        topic_id = r.raw(16).hex()
        out[topic_id] = frozenset(r.int32() for _ in range(max(_len(r), 0)))
        r.skip_tagged_fields()
    return {t: p for t, p in out.items() if p}


def _reader(value: bytes) -> Reader:
    r = Reader(value)
    version = r.int16()
    if version != 0:
        raise CorruptMessage(f"unknown consumer group record value version {version}")
    return r


@record_decoder("__consumer_offsets consumer group record")
def group_from_records(group_id: str, records: Mapping[ConsumerGroupKey, bytes]) -> ConsumerGroup | None:
    """The group the last value of each of its keys describes (None: no group metadata left,
    the group was deleted). Unreadable records raise :class:`CorruptMessage`."""
    metadata = records.get(ConsumerGroupKey(GROUP_METADATA, group_id))
    if metadata is None:
        return None
    group = ConsumerGroup(group_id, group_epoch=_reader(metadata).int32())
    partitions = records.get(ConsumerGroupKey(PARTITION_METADATA, group_id))
    if partitions is not None:
        r = _reader(partitions)
        r.int32()
        for _ in range(max(_len(r), 0)):
            topic_id = r.raw(16).hex()
            name = _required(r)
            count = r.int32()
            for _ in range(max(_len(r), 0)):  # partition racks
                r.int32()
                for _ in range(max(_len(r), 0)):
                    _string(r)
                r.skip_tagged_fields()
            r.skip_tagged_fields()
            group.subscription_metadata[name] = SubscribedTopic(topic_id, count)
    target = records.get(ConsumerGroupKey(TARGET_ASSIGNMENT_METADATA, group_id))
    group.assignment_epoch = _reader(target).int32() if target is not None else 0
    member_ids = {k.member_id for k in records if k.member_id is not None and k.kind == MEMBER_METADATA}
    for member_id in sorted(member_ids):
        r = _reader(records[ConsumerGroupKey(MEMBER_METADATA, group_id, member_id)])
        instance_id, rack_id = _string(r), _string(r)
        client_id, client_host = _required(r), _required(r)
        topics = frozenset(_required(r) for _ in range(max(_len(r), 0)))
        regex = _string(r)
        rebalance_timeout_ms = r.int32()
        assignor = _string(r)
        classic = _read_classic(r) if r.remaining() else None
        member = ConsumerGroupMember(
            member_id, instance_id, rack_id, client_id, client_host, rebalance_timeout_ms, topics, assignor,
            subscribed_topic_regex=regex, classic=classic,
        )  # fmt: skip
        current = records.get(ConsumerGroupKey(CURRENT_MEMBER_ASSIGNMENT, group_id, member_id))
        if current is not None:
            r = _reader(current)
            epoch, previous = r.int32(), r.int32()
            state = _STATES.get(int.from_bytes(r.raw(1), "big", signed=True), MemberState.STABLE)
            assigned, revoking = _read_topic_partitions(r), _read_topic_partitions(r)
            member = replace(
                member, member_epoch=epoch, previous_member_epoch=previous, state=state, assigned=assigned,
                pending_revocation=revoking,
            )  # fmt: skip
        target_member = records.get(ConsumerGroupKey(TARGET_ASSIGNMENT_MEMBER, group_id, member_id))
        if target_member is not None:
            group.target[member_id] = _read_topic_partitions(_reader(target_member))
        group.put_member(member)
    return group


__all__ = [
    "KINDS",
    "ConsumerGroupKey",
    "group_from_records",
    "group_records",
    "read_key",
]
