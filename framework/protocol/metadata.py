"""The Metadata response (v0-12) written by hand.

Why not kio here: a client asking about a 1,000-partition topic costs kio one dataclass per
partition plus its generic, per-field writer (~25 ms a response, most of a many-partition
bench's broker CPU while producers start). This writer packs each partition with one
``struct`` call. Versions 0-8 are non-flexible: plain Kafka primitives, int16/int32,
int16-length strings (-1 = null) and int32-count arrays. Versions 9+ are flexible (KIP-482):
compact strings and arrays (unsigned varint length + 1, 0 = null) and an empty tag buffer after
every struct. A test keeps every version byte-identical to kio's encoding.

Field presence by version (Kafka's MetadataResponse.json): throttle_time_ms v3+; broker rack
v1+; cluster_id v2+; controller_id v1+; topic is_internal v1+; partition leader_epoch v7+;
offline_replicas v5+; topic/cluster authorized operations v8+ (what the handler puts in
:class:`MetadataResponseData`: INT32_MIN when not asked for), the cluster's only up to v10;
topic_id v10+ (what KIP-848 consumers map their assignments' topic ids with); a topic's name
is nullable from v12 (a topic asked for by an unknown id has none).

The body is built from anything shaped like :class:`odradek.broker.api.ClusterMetadata` (see
the Protocols below), so the codec stays independent of the broker.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from .authorized_operations import AUTHORIZED_OPERATIONS_OMITTED

MAX_VERSION = 12  # v13 adds a top-level error code (KIP-1102): not written
FIRST_FLEXIBLE = 9
NULL_TOPIC_ID = b"\x00" * 16

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_ERR_PARTITION = struct.Struct(">hi")  # error_code, partition_index
_ERR_PARTITION_LEADER = struct.Struct(">hii")
_ERR_PARTITION_LEADER_EPOCH = struct.Struct(">hiii")


class BrokerLike(Protocol):
    @property
    def node_id(self) -> int: ...
    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def rack(self) -> str | None: ...


class PartitionLike(Protocol):
    @property
    def error(self) -> int: ...
    @property
    def partition(self) -> int: ...
    @property
    def leader(self) -> int: ...
    @property
    def leader_epoch(self) -> int: ...
    @property
    def replicas(self) -> Sequence[int]: ...
    @property
    def isr(self) -> Sequence[int]: ...
    @property
    def offline_replicas(self) -> Sequence[int]: ...


class TopicLike(Protocol):
    @property
    def error(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def is_internal(self) -> bool: ...
    @property
    def topic_id(self) -> str: ...
    @property
    def partitions(self) -> Sequence[PartitionLike]: ...


class ClusterLike(Protocol):
    @property
    def cluster_id(self) -> str | None: ...
    @property
    def controller_id(self) -> int: ...
    @property
    def brokers(self) -> Sequence[BrokerLike]: ...
    @property
    def topics(self) -> Sequence[TopicLike]: ...


@dataclass(frozen=True, slots=True)
class MetadataResponseData:
    """What a Metadata handler returns: the cluster view for one request's version."""

    version: int
    metadata: ClusterLike
    throttle_time_ms: int = 0
    #: v8+: every topic's and the cluster's ``authorized_operations`` (INT32_MIN: not asked for)
    topic_authorized_operations: int = AUTHORIZED_OPERATIONS_OMITTED
    cluster_authorized_operations: int = AUTHORIZED_OPERATIONS_OMITTED
    #: with an authorizer, each topic's own operations (a topic not in it gets
    #: ``topic_authorized_operations``)
    topic_operations: Mapping[str, int] | None = None


def _string(value: str | None) -> bytes:
    if value is None:
        return b"\xff\xff"
    raw = value.encode()
    return _INT16.pack(len(raw)) + raw


def _pack_int32_array(values: Sequence[int]) -> bytes:
    n = len(values)
    return struct.pack(f">i{n}i", n, *values)


#: Encoded replica/ISR lists: a cluster has few distinct ones, and a big topic repeats them.
_SMALL_ARRAYS: dict[tuple[int, ...], bytes] = {}
_SMALL_ARRAYS_MAX = 4096


def _int32_array(values: Sequence[int]) -> bytes:
    if type(values) is not tuple or len(values) > 8:
        return _pack_int32_array(values)
    got = _SMALL_ARRAYS.get(values)
    if got is None:
        if len(_SMALL_ARRAYS) >= _SMALL_ARRAYS_MAX:
            _SMALL_ARRAYS.clear()
        got = _SMALL_ARRAYS[values] = _pack_int32_array(values)
    return got


def encode_metadata_response(response: MetadataResponseData) -> bytes:
    """The response body (no header) for ``response.version`` (0-12)."""
    version = response.version
    if not 0 <= version <= MAX_VERSION:
        raise ValueError(f"Metadata v{version} is not written by this codec (0-{MAX_VERSION})")
    if version >= FIRST_FLEXIBLE:
        return _encode_flexible(response)
    md = response.metadata
    parts: list[bytes] = []
    add = parts.append
    if version >= 3:
        add(_INT32.pack(response.throttle_time_ms))
    add(_INT32.pack(len(md.brokers)))
    for b in md.brokers:
        add(_INT32.pack(b.node_id))
        add(_string(b.host))
        add(_INT32.pack(b.port))
        if version >= 1:
            add(_string(b.rack))
    if version >= 2:
        add(_string(md.cluster_id))
    if version >= 1:
        add(_INT32.pack(md.controller_id))
    add(_INT32.pack(len(md.topics)))
    topic_ops = _INT32.pack(response.topic_authorized_operations)
    for t in md.topics:
        add(_INT16.pack(int(t.error)))
        add(_string(t.name))
        if version >= 1:
            add(b"\x01" if t.is_internal else b"\x00")
        add(_INT32.pack(len(t.partitions)))
        _partitions(version, t.partitions, add)
        if version >= 8:
            ops = response.topic_operations
            add(topic_ops if ops is None or t.name not in ops else _INT32.pack(ops[t.name]))
    if version >= 8:
        add(_INT32.pack(response.cluster_authorized_operations))
    return b"".join(parts)


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _compact_string(value: str | None) -> bytes:
    if value is None:
        return b"\x00"
    raw = value.encode()
    return _uvarint(len(raw) + 1) + raw


def _compact_int32_array(values: Sequence[int]) -> bytes:
    n = len(values)
    return _uvarint(n + 1) + struct.pack(f">{n}i", *values)


def _topic_id_bytes(topic_id: str) -> bytes:
    """A topic id as kept (32 hex digits) as the wire's 16 bytes; none is the zero UUID."""
    try:
        raw = bytes.fromhex(topic_id)
    except ValueError:
        return NULL_TOPIC_ID
    return raw if len(raw) == 16 else NULL_TOPIC_ID


def _encode_flexible(response: MetadataResponseData) -> bytes:
    """v9-12 (flexible)."""
    version = response.version
    md = response.metadata
    parts: list[bytes] = [_INT32.pack(response.throttle_time_ms), _uvarint(len(md.brokers) + 1)]
    add = parts.append
    for b in md.brokers:
        add(_INT32.pack(b.node_id) + _compact_string(b.host) + _INT32.pack(b.port) + _compact_string(b.rack) + b"\x00")
    add(_compact_string(md.cluster_id))
    add(_INT32.pack(md.controller_id))
    add(_uvarint(len(md.topics) + 1))
    topic_ops = _INT32.pack(response.topic_authorized_operations)
    partition_head = _ERR_PARTITION_LEADER_EPOCH.pack
    for t in md.topics:
        add(_INT16.pack(int(t.error)))
        add(_compact_string(None if version >= 12 and not t.name else t.name))
        if version >= 10:
            add(_topic_id_bytes(getattr(t, "topic_id", "")))
        add(b"\x01" if t.is_internal else b"\x00")
        add(_uvarint(len(t.partitions) + 1))
        for p in t.partitions:
            add(partition_head(int(p.error), p.partition, p.leader, p.leader_epoch))
            add(_compact_int32_array(p.replicas))
            add(_compact_int32_array(p.isr))
            add(_compact_int32_array(p.offline_replicas))
            add(b"\x00")
        add(topic_ops)
        add(b"\x00")
    if version <= 10:
        add(_INT32.pack(response.cluster_authorized_operations))
    add(b"\x00")
    return b"".join(parts)


def _partitions(version: int, partitions: Sequence[PartitionLike], add: _Add) -> None:
    """One topic's partition array entries (the count is written by the caller)."""
    array = _int32_array
    if version >= 7:
        head = _ERR_PARTITION_LEADER_EPOCH.pack
        for p in partitions:
            add(head(int(p.error), p.partition, p.leader, p.leader_epoch))
            add(array(p.replicas))
            add(array(p.isr))
            add(array(p.offline_replicas))
        return
    lead = _ERR_PARTITION_LEADER.pack
    for p in partitions:
        add(lead(int(p.error), p.partition, p.leader))
        add(array(p.replicas))
        add(array(p.isr))
        if version >= 5:
            add(array(p.offline_replicas))


class _Add(Protocol):
    def __call__(self, part: bytes, /) -> None: ...


__all__ = ["MAX_VERSION", "MetadataResponseData", "encode_metadata_response"]
