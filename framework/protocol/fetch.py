"""Hand-written Fetch codec: the request decoder and the response envelope for zero-copy sends
(v4-v16).

The request is decoded by hand because a consumer that keeps up sends one Fetch per produced
batch: through kio (a bounds walk of the request, then kio's generic reader) decoding was a third
of a small Fetch's CPU. The decoder reads only with the bounds-checked readers of ``wire``.

Request layout (request header v1), in wire order::

    int32 replica_id, int32 max_wait_ms, int32 min_bytes, int32 max_bytes, int8 isolation_level,
    (v7+) int32 session_id, int32 session_epoch,
    int32 #topics, per topic: string topic, int32 #partitions, per partition:
        int32 partition, (v9+) int32 current_leader_epoch, int64 fetch_offset,
        (v5+) int64 log_start_offset, int32 partition_max_bytes
    (v7+) int32 #forgotten topics, per topic: string topic, int32 #partitions of int32
    (v11+) string rack_id

From v12 (request header v2) the request is flexible: compact lengths, each struct ending with
its tagged fields, v13+ topics (and forgotten topics) as 16-byte ids, v12 adds each partition's
int32 last_fetched_epoch (after fetch_offset), v15 drops replica_id for the ReplicaState tag (1)
at the top, where the cluster id (tag 0) may sit too.

The records of a Fetch response are the bulk of the bytes a broker sends, and they already sit
in segment files in wire format. So the response is not encoded into one buffer: the envelope
(size, header, every field around the records) is built in memory, with the total size computed
up front from each slice's length, and each partition's records stay a reference to a slice
(``FetchDataInfo``) that the transport ``os.sendfile``s from the segment file.

Response layout (non-flexible, response header v0), in wire order::

    int32 size | int32 correlation_id | int32 throttle_time_ms
    (v7+) int16 error_code, int32 session_id
    int32 #topics, per topic: string topic, int32 #partitions, per partition:
        int32 partition_index, int16 error_code, int64 high_watermark, int64 last_stable_offset,
        (v5+) int64 log_start_offset, int32 #aborted (-1 = null) of (int64 producer_id,
        int64 first_offset), (v11+) int32 preferred_read_replica, int32 records length, records

Flexible layout (v12-v16, response header v1: the correlation id, then an empty tag section).
Every array length is a compact unsigned varint of length+1 (0 = null), strings compact, and
each struct ends with its tagged fields (count, then tag, size, bytes of each)::

    int32 size | int32 correlation_id, tags | int32 throttle_time_ms, int16 error_code,
    int32 session_id, #topics, per topic: (v12) compact string topic | (v13+) uuid topic_id,
    #partitions, per partition: the v11 fields (aborted transactions each with a tag section),
    uvarint records size+1, records, tags: 0 diverging_epoch (int32 epoch, int64 end offset),
    1 current_leader (int32 id, int32 epoch); topic tags | tags: (v16) 0 node_endpoints

The records' length prefix stays in memory with the fields before it and the records slice is
still a part of its own, so the flexible versions keep the sendfile path.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from ..errors import InvalidRequest, UnsupportedVersion
from .headers import read_uvarint, write_uvarint
from .wire import (
    Buffer,
    need,
    read_compact_count,
    read_compact_string,
    read_count,
    read_string,
    skip_tagged_fields,
)

FETCH_ENVELOPE_VERSIONS = range(4, 17)
FETCH_REQUEST_VERSIONS = range(4, 17)

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ABORTED = struct.Struct(">qq")
_REQUEST_HEAD = struct.Struct(">iiiib")  # replica_id, max_wait_ms, min_bytes, max_bytes, isolation
_SESSION = struct.Struct(">ii")
#: one partition of a request, by version: index, [epoch,] fetch offset, [log start,] max bytes
_PARTITION_V4 = struct.Struct(">iqi")
_PARTITION_V5 = struct.Struct(">iqqi")
_PARTITION_V9 = struct.Struct(">iiqqi")
#: v12+: the head after the (v12-14) replica id, and one partition: index, current leader epoch,
#: fetch offset, last fetched epoch, log start offset, max bytes
_FLEX_HEAD = struct.Struct(">iiibii")
_FLEX_PARTITION = struct.Struct(">iiqiqi")
_REPLICA_STATE = struct.Struct(">iq")
_EPOCH_END = struct.Struct(">iq")  # a diverging epoch: epoch, end offset
_LEADER = struct.Struct(">ii")  # a current leader: id, epoch
_WHAT = "Fetch request"


@dataclass(slots=True)
class FetchRequestPartition:
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1  # v9+
    log_start_offset: int = -1  # v5+ (followers)
    last_fetched_epoch: int = -1  # v12+


@dataclass(slots=True)
class FetchRequestTopic:
    """A topic of a Fetch request: named by ``topic`` before v13, by ``topic_id`` (32 hex
    digits, as the metadata cache keeps ids) from v13 on, whose ``topic`` is then empty."""

    topic: str
    partitions: list[FetchRequestPartition] = field(default_factory=list)
    topic_id: str = ""


@dataclass(slots=True)
class FetchRequestData:
    """A decoded Fetch request (v4-v16); fields a version lacks keep their defaults.

    v15+ carries the replica id in ``replica_state`` (a tagged field): it is ``replica_id`` here
    whatever the version, with ``replica_epoch`` beside it.
    """

    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int
    topics: list[FetchRequestTopic] = field(default_factory=list)
    session_id: int = 0  # v7+
    session_epoch: int = -1  # v7+
    forgotten_topics: list[tuple[str, list[int]]] = field(default_factory=list)  # v7-v12: by name
    rack_id: str = ""  # v11+
    version: int = 11
    forgotten_topic_ids: list[tuple[str, list[int]]] = field(default_factory=list)  # v13+: by id
    replica_epoch: int = -1  # v15+
    cluster_id: str | None = None  # v12+


def _decode_flexible(version: int, buf: Buffer, pos: int) -> FetchRequestData:
    """A flexible Fetch request (v12-v16), read by hand as v4-v11 are (librdkafka 2.x sends v16
    in every fetch): compact lengths, topics by name (v12) or 16-byte id (v13+), and the tagged
    fields Kafka defines at the top (0: cluster id, 1: v15+ ReplicaState); unknown tags skipped."""
    replica_id = -1
    if version < 15:
        need(buf, pos, 4, _WHAT)
        (replica_id,) = _I32.unpack_from(buf, pos)
        pos += 4
    need(buf, pos, _FLEX_HEAD.size, _WHAT)
    max_wait_ms, min_bytes, max_bytes, isolation, session_id, session_epoch = _FLEX_HEAD.unpack_from(buf, pos)
    pos += _FLEX_HEAD.size
    request = FetchRequestData(
        replica_id, max_wait_ms, min_bytes, max_bytes, isolation, session_id=session_id,
        session_epoch=session_epoch, version=version,
    )  # fmt: skip
    by_id = version >= 13
    n_topics, pos = read_compact_count(buf, pos, _WHAT, 3)
    for _ in range(n_topics):
        name, topic_id, pos = _topic_key(buf, pos, by_id)
        topic = FetchRequestTopic(name, topic_id=topic_id)
        n_parts, pos = read_compact_count(buf, pos, _WHAT, _FLEX_PARTITION.size + 1)
        for _ in range(n_parts):
            need(buf, pos, _FLEX_PARTITION.size, _WHAT)
            index, epoch, offset, last_fetched, log_start, part_max = _FLEX_PARTITION.unpack_from(buf, pos)
            pos = skip_tagged_fields(buf, pos + _FLEX_PARTITION.size, _WHAT)
            topic.partitions.append(FetchRequestPartition(index, offset, part_max, epoch, log_start, last_fetched))
        pos = skip_tagged_fields(buf, pos, _WHAT)
        request.topics.append(topic)
    n_forgotten, pos = read_compact_count(buf, pos, _WHAT, 3)
    for _ in range(n_forgotten):
        name, topic_id, pos = _topic_key(buf, pos, by_id)
        n_parts, pos = read_compact_count(buf, pos, _WHAT, 4)
        indexes = list(struct.unpack_from(f">{n_parts}i", buf, pos))
        pos = skip_tagged_fields(buf, pos + 4 * n_parts, _WHAT)
        (request.forgotten_topic_ids if by_id else request.forgotten_topics).append((topic_id or name, indexes))
    rack, pos = read_compact_string(buf, pos, _WHAT, nullable=False)
    request.rack_id = rack or ""
    n_tags, pos = read_uvarint(buf, pos)
    for _ in range(n_tags):
        tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        need(buf, pos, size, _WHAT)
        field_bytes, pos = buf[pos : pos + size], pos + size
        if tag == 0:  # ClusterId
            cluster_id, used = read_compact_string(field_bytes, 0, _WHAT, nullable=True)
            _whole_tag(field_bytes, used)
            request.cluster_id = cluster_id
        elif tag == 1 and version >= 15:  # ReplicaState: replica id, replica epoch, its own tags
            need(field_bytes, 0, 12, _WHAT)
            request.replica_id, request.replica_epoch = _REPLICA_STATE.unpack_from(field_bytes, 0)
            _whole_tag(field_bytes, skip_tagged_fields(field_bytes, 12, _WHAT))
    if pos != len(buf):
        raise InvalidRequest(f"{len(buf) - pos} unexpected bytes after a Fetch request")
    return request


def _topic_key(buf: Buffer, pos: int, by_id: bool) -> tuple[str, str, int]:
    """A flexible request's topic: (name, "", pos) before v13, ("", id as 32 hex digits, pos) after."""
    if by_id:
        need(buf, pos, 16, _WHAT)
        return "", bytes(buf[pos : pos + 16]).hex(), pos + 16
    name, pos = read_compact_string(buf, pos, _WHAT, nullable=False)
    return name or "", "", pos


def _whole_tag(field_bytes: Buffer, used: int) -> None:
    """A known tagged field's value must fill its declared size exactly."""
    if used != len(field_bytes):
        raise InvalidRequest(f"a tagged field of a {_WHAT} has {len(field_bytes) - used} bytes too many")


def decode_fetch_request(version: int, buf: Buffer, pos: int = 0) -> FetchRequestData:
    """Decode a Fetch request body of ``version`` from ``pos`` (after the header).

    Raises ``InvalidRequest`` on truncation, bad lengths or trailing bytes, and nothing else.
    """
    if version not in FETCH_REQUEST_VERSIONS:
        raise InvalidRequest(f"Fetch v{version} is not decoded here (v4-v16)")
    if version >= 12:
        return _decode_flexible(version, buf, pos)
    need(buf, pos, _REQUEST_HEAD.size, _WHAT)
    replica_id, max_wait_ms, min_bytes, max_bytes, isolation = _REQUEST_HEAD.unpack_from(buf, pos)
    pos += _REQUEST_HEAD.size
    request = FetchRequestData(replica_id, max_wait_ms, min_bytes, max_bytes, isolation, version=version)
    if version >= 7:
        need(buf, pos, 8, _WHAT)
        request.session_id, request.session_epoch = _SESSION.unpack_from(buf, pos)
        pos += 8
    layout = _PARTITION_V9 if version >= 9 else _PARTITION_V5 if version >= 5 else _PARTITION_V4
    n_topics, pos = read_count(buf, pos, _WHAT, 6)
    for _ in range(n_topics):
        name, pos = read_string(buf, pos, _WHAT, nullable=False)
        topic = FetchRequestTopic(name or "")
        n_parts, pos = read_count(buf, pos, _WHAT, layout.size)
        for _ in range(n_parts):
            need(buf, pos, layout.size, _WHAT)
            fields = layout.unpack_from(buf, pos)
            pos += layout.size
            if version >= 9:
                index, epoch, offset, log_start, part_max = fields
            elif version >= 5:
                (index, offset, log_start, part_max), epoch = fields, -1
            else:
                (index, offset, part_max), epoch, log_start = fields, -1, -1
            topic.partitions.append(FetchRequestPartition(index, offset, part_max, epoch, log_start))
        request.topics.append(topic)
    if version >= 7:
        n_forgotten, pos = read_count(buf, pos, _WHAT, 6)
        for _ in range(n_forgotten):
            name, pos = read_string(buf, pos, _WHAT, nullable=False)
            n_parts, pos = read_count(buf, pos, _WHAT, 4)
            need(buf, pos, 4 * n_parts, _WHAT)
            request.forgotten_topics.append((name or "", list(struct.unpack_from(f">{n_parts}i", buf, pos))))
            pos += 4 * n_parts
    if version >= 11:
        rack, pos = read_string(buf, pos, _WHAT, nullable=False)
        request.rack_id = rack or ""
    if pos != len(buf):
        raise InvalidRequest(f"{len(buf) - pos} unexpected bytes after a Fetch request")
    return request


@runtime_checkable
class RecordsSlice(Protocol):
    """What a partition's records may be besides plain bytes: ``odradek.interfaces.FetchDataInfo``."""

    size: int

    def to_bytes(self) -> bytes: ...

    def release(self) -> None: ...


Records = bytes | bytearray | memoryview | RecordsSlice


@dataclass(slots=True)
class FetchPartitionData:
    """One partition of a Fetch response; ``records`` None is written as a null (-1) length."""

    partition_index: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted_transactions: Sequence[tuple[int, int]] | None = None  # (producer_id, first_offset)
    preferred_read_replica: int = -1
    records: Records | None = b""
    #: v12+ tagged fields, written only when set: (epoch, end offset), (leader id, leader epoch)
    diverging_epoch: tuple[int, int] | None = None
    current_leader: tuple[int, int] | None = None


@dataclass(slots=True)
class FetchTopicData:
    """A topic of a Fetch response: by name before v13, by its 16-byte id from v13 on."""

    topic: str
    partitions: list[FetchPartitionData] = field(default_factory=list)
    topic_id: bytes = b""


@dataclass(frozen=True, slots=True)
class NodeEndpoint:
    """A broker a v16 response names as some partition's current leader (KIP-951)."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(slots=True)
class FetchResponseData:
    """A Fetch response; ``session_id`` is the fetch session it belongs to (0: none)."""

    responses: list[FetchTopicData] = field(default_factory=list)
    throttle_time_ms: int = 0
    error_code: int = 0
    session_id: int = 0
    node_endpoints: Sequence[NodeEndpoint] = ()  # v16+


@dataclass(slots=True)
class FetchEnvelope:
    """A Fetch response ready to write: ``parts`` in wire order, memory chunks and record slices.

    ``size`` is the number of bytes on the wire including the leading int32 size. The transport
    writes ``bytes`` parts as they are and sends each ``RecordsSlice`` part from its file (or its
    ``to_bytes()``); afterwards it calls :meth:`release` exactly once.
    """

    size: int
    parts: list[bytes | RecordsSlice]
    slices: list[RecordsSlice]

    def release(self) -> None:
        """Release every record slice (lets the storage engine unpin its files)."""
        slices, self.slices = self.slices, []
        for s in slices:
            s.release()

    def iter_bytes(self) -> Iterator[bytes]:
        """The wire bytes, part by part, materialising slices in memory (TLS, tests)."""
        for part in self.parts:
            yield part if isinstance(part, bytes) else part.to_bytes()

    def to_bytes(self) -> bytes:
        return b"".join(self.iter_bytes())


def _string(value: str, flexible: bool) -> bytes:
    raw = value.encode("utf-8")
    return (write_uvarint(len(raw) + 1) if flexible else _I16.pack(len(raw))) + raw


def _nullable_string(value: str | None, flexible: bool) -> bytes:
    if value is None:
        return b"\x00" if flexible else _I16.pack(-1)
    return _string(value, flexible)


def _count(n: int | None, flexible: bool) -> bytes:
    """An array's length: int32 (-1 null), or a compact unsigned varint of length+1 (0 null)."""
    if n is None:
        return b"\x00" if flexible else _I32.pack(-1)
    return write_uvarint(n + 1) if flexible else _I32.pack(n)


def _tagged(fields: Sequence[tuple[int, bytes]]) -> bytes:
    """A tagged-field section (KIP-482): count, then each field's tag, size and bytes."""
    out = bytearray(write_uvarint(len(fields)))
    for tag, data in fields:
        out += write_uvarint(tag) + write_uvarint(len(data)) + data
    return bytes(out)


def _partition_tags(p: FetchPartitionData) -> bytes:
    """A flexible partition's tagged fields, each written only when it is not its default (as
    Kafka's generated writer): the diverging epoch (tag 0) and the current leader (tag 1)."""
    fields = []
    if p.diverging_epoch is not None:
        fields.append((0, _EPOCH_END.pack(*p.diverging_epoch) + b"\x00"))
    if p.current_leader is not None and p.current_leader != (-1, -1):
        fields.append((1, _LEADER.pack(*p.current_leader) + b"\x00"))
    return _tagged(fields)


def node_endpoints_field(nodes: Sequence[NodeEndpoint]) -> bytes:
    """A flexible response's top-level tag section holding ``nodes`` as the NodeEndpoints field
    (tag 0 in Fetch v16+ and Produce v10+, KIP-951); an empty section when there are none."""
    if not nodes:
        return b"\x00"
    out = bytearray(_count(len(nodes), True))
    for n in nodes:
        out += _I32.pack(n.node_id) + _string(n.host, True) + _I32.pack(n.port) + _nullable_string(n.rack, True)
        out += b"\x00"
    return _tagged([(0, bytes(out))])


def build_fetch_envelope(version: int, correlation_id: int, response: FetchResponseData) -> FetchEnvelope:
    """The wire form of a Fetch response of ``version`` (4-16) answering ``correlation_id``.

    v12+ is flexible (response header v1, compact lengths, tagged fields after each struct's
    fields, the records' length as an unsigned varint of size+1 in front of the sendfile'd
    slice); v13+ names each topic by its 16-byte id; v16 adds the leadership errors' node
    endpoints as a top-level tagged field.
    """
    if version not in FETCH_ENVELOPE_VERSIONS:
        raise UnsupportedVersion(f"the Fetch envelope is written for v4-v16, not v{version}")
    flexible = version >= 12
    parts: list[bytes | RecordsSlice] = []
    slices: list[RecordsSlice] = []
    chunk = bytearray(_I32.pack(0))  # the size, patched once the total is known
    chunk += _I32.pack(correlation_id)
    if flexible:
        chunk += b"\x00"  # response header v1: no tagged fields
    chunk += _I32.pack(response.throttle_time_ms)
    if version >= 7:
        chunk += struct.pack(">hi", response.error_code, response.session_id)
    chunk += _count(len(response.responses), flexible)
    total = 0
    for topic in response.responses:
        if version >= 13:
            if len(topic.topic_id) != 16:
                raise ValueError(f"Fetch v{version} names topic {topic.topic!r} by its 16-byte id")
            chunk += topic.topic_id
        else:
            chunk += _string(topic.topic, flexible)
        chunk += _count(len(topic.partitions), flexible)
        for p in topic.partitions:
            chunk += struct.pack(">ihqq", p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset)
            if version >= 5:
                chunk += struct.pack(">q", p.log_start_offset)
            aborted = p.aborted_transactions
            chunk += _count(None if aborted is None else len(aborted), flexible)
            for producer_id, first_offset in aborted or ():
                chunk += _ABORTED.pack(producer_id, first_offset)
                if flexible:
                    chunk += b"\x00"
            if version >= 11:
                chunk += _I32.pack(p.preferred_read_replica)
            records = p.records
            if records is None:
                chunk += _count(None, flexible)
            elif isinstance(records, bytes | bytearray | memoryview):
                chunk += _count(len(records), flexible)
                chunk += records
            else:
                slices.append(records)
                chunk += _count(records.size, flexible)
                if records.size > 0:
                    total += len(chunk)
                    parts.append(bytes(chunk))
                    parts.append(records)
                    total += records.size
                    chunk = bytearray()
            if flexible:
                no_tags = p.diverging_epoch is None and p.current_leader is None
                chunk += b"\x00" if no_tags else _partition_tags(p)
        if flexible:
            chunk += b"\x00"
    if flexible:
        chunk += node_endpoints_field(response.node_endpoints if version >= 16 else ())
    if chunk:
        total += len(chunk)
        parts.append(bytes(chunk))
    first = parts[0]
    assert isinstance(first, bytes)
    parts[0] = _I32.pack(total - 4) + first[4:]
    return FetchEnvelope(total, parts, slices)


def _uvarint_width(n: int) -> int:
    """The bytes ``write_uvarint(n)`` takes (1 for 0..127, one more per further 7 bits)."""
    return (n.bit_length() + 6) // 7 or 1


#: the bytes of a flexible partition's tag section holding only the diverging epoch (count, tag,
#: size, epoch + end offset + empty tags), only the current leader, or both
_DIVERGING_TAG = 1 + 1 + 1 + _EPOCH_END.size + 1
_LEADER_TAG = 1 + 1 + 1 + _LEADER.size + 1

#: A partition as :func:`fetch_response_size` counts it: (number of aborted transactions, records
#: size[, current leader (id, epoch) or None[, diverging epoch (epoch, end offset) or None]]).
PartitionShape = (
    tuple[int, int]
    | tuple[int, int, tuple[int, int] | None]
    | tuple[int, int, tuple[int, int] | None, tuple[int, int] | None]
)


def fetch_response_size(version: int, topics: Iterable[tuple[str, Iterable[PartitionShape]]]) -> int:
    """Kafka's ``FetchResponse.sizeOf``: the bytes a Fetch response of ``version`` answering
    ``topics`` takes after its size prefix (the correlation id, then the body, with no node
    endpoints as Kafka sizes it), without reading a record. ``topics`` are (name, partitions),
    each partition a :data:`PartitionShape`. What a consumer's ``consumer_byte_rate`` is charged
    on every Fetch once such a quota exists, so it is summed arithmetically (per-version fixed
    parts, varint widths of the flexible lengths) rather than by laying out an envelope; it
    equals ``build_fetch_envelope(...).size - 4`` for the same response, which the tests check
    property-wise over versions, counts and varint-width boundaries."""
    if version not in FETCH_ENVELOPE_VERSIONS:
        raise UnsupportedVersion(f"the Fetch envelope is written for v4-v16, not v{version}")
    flexible = version >= 12
    # each partition's fixed fields: index, error, HW, LSO, (v5+) log start, (v11+) preferred replica
    fixed = 22 + (8 if version >= 5 else 0) + (4 if version >= 11 else 0)
    # correlation id, (flexible) header tags, throttle time, (v7+) error code and session id
    size = 8 + (6 if version >= 7 else 0)
    n_topics = 0
    if not flexible:
        for name, partitions in topics:
            n_topics += 1
            size += 2 + len(name.encode("utf-8")) + 4
            for shape in partitions:
                # + the aborted count and each (producer id, first offset), the records' length
                size += fixed + 8 + 16 * shape[0] + shape[1]
        return size + 4
    size += 1 + 1  # the header's tag section, the response's (empty node endpoints)
    by_id = version >= 13
    for name, partitions in topics:
        n_topics += 1
        if by_id:
            size += 16 + 1  # topic id, topic tags
        else:
            raw = len(name.encode("utf-8"))
            size += _uvarint_width(raw + 1) + raw + 1
        n_parts = 0
        for shape in partitions:
            n_parts += 1
            aborted, records = shape[0], shape[1]
            size += fixed + _uvarint_width(aborted + 1) + 17 * aborted + _uvarint_width(records + 1) + records
            leader = shape[2] if len(shape) > 2 else None
            diverging = shape[3] if len(shape) > 3 else None
            has_leader = leader is not None and leader != (-1, -1)
            if diverging is not None:
                size += _DIVERGING_TAG + (_LEADER_TAG - 1 if has_leader else 0)
            else:
                size += _LEADER_TAG if has_leader else 1
        size += _uvarint_width(n_parts + 1)
    return size + _uvarint_width(n_topics + 1)


__all__ = [
    "FETCH_ENVELOPE_VERSIONS",
    "FETCH_REQUEST_VERSIONS",
    "FetchEnvelope",
    "FetchPartitionData",
    "FetchResponseData",
    "FetchTopicData",
    "NodeEndpoint",
    "RecordsSlice",
    "build_fetch_envelope",
    "fetch_response_size",
    "node_endpoints_field",
]
