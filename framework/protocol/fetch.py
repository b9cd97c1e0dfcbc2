"""Hand-written Fetch codec (v4-v11, non-flexible): the request decoder and the response
envelope for zero-copy sends.

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
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from ..errors import InvalidRequest, UnsupportedVersion
from .wire import Buffer, need, read_count, read_string

FETCH_ENVELOPE_VERSIONS = range(4, 12)
FETCH_REQUEST_VERSIONS = range(4, 12)

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ABORTED = struct.Struct(">qq")
_REQUEST_HEAD = struct.Struct(">iiiib")  # replica_id, max_wait_ms, min_bytes, max_bytes, isolation
_SESSION = struct.Struct(">ii")
#: one partition of a request, by version: index, [epoch,] fetch offset, [log start,] max bytes
_PARTITION_V4 = struct.Struct(">iqi")
_PARTITION_V5 = struct.Struct(">iqqi")
_PARTITION_V9 = struct.Struct(">iiqqi")
_WHAT = "Fetch request"


@dataclass(slots=True)
class FetchRequestPartition:
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1  # v9+
    log_start_offset: int = -1  # v5+ (followers)


@dataclass(slots=True)
class FetchRequestTopic:
    topic: str
    partitions: list[FetchRequestPartition] = field(default_factory=list)


@dataclass(slots=True)
class FetchRequestData:
    """A decoded Fetch request (v4-v11); fields a version lacks keep their defaults."""

    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int
    topics: list[FetchRequestTopic] = field(default_factory=list)
    session_id: int = 0  # v7+
    session_epoch: int = -1  # v7+
    forgotten_topics: list[tuple[str, list[int]]] = field(default_factory=list)  # v7+
    rack_id: str = ""  # v11+
    version: int = 11


def decode_fetch_request(version: int, buf: Buffer, pos: int = 0) -> FetchRequestData:
    """Decode a Fetch request body of ``version`` from ``pos`` (after the header).

    Raises ``InvalidRequest`` on truncation, bad lengths or trailing bytes, and nothing else.
    """
    if version not in FETCH_REQUEST_VERSIONS:
        raise InvalidRequest(f"Fetch v{version} is not decoded here (v4-v11)")
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


@dataclass(slots=True)
class FetchTopicData:
    topic: str
    partitions: list[FetchPartitionData] = field(default_factory=list)


@dataclass(slots=True)
class FetchResponseData:
    """A Fetch response; ``session_id`` is the fetch session it belongs to (0: none)."""

    responses: list[FetchTopicData] = field(default_factory=list)
    throttle_time_ms: int = 0
    error_code: int = 0
    session_id: int = 0


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


#: one partition's fixed fields by version: index, error, high watermark, last stable offset,
#: (v5+) log start offset, aborted count, (v11+) preferred read replica, records length
_PARTITION_FIXED = {
    v: 4 + 2 + 8 + 8 + (8 if v >= 5 else 0) + 4 + (4 if v >= 11 else 0) + 4 for v in FETCH_ENVELOPE_VERSIONS
}


def fetch_response_size(version: int, topics: Iterable[tuple[str, Iterable[tuple[int, int]]]]) -> int:
    """Kafka's ``FetchResponse.sizeOf``: the bytes a Fetch response of ``version`` answering
    ``topics`` takes after its size prefix (the correlation id, then the body), computed
    without building it. ``topics`` are (name, partitions), each partition as (number of aborted
    transactions, records size). What a consumer's ``consumer_byte_rate`` is charged: equal to
    ``build_fetch_envelope(...).size - 4`` for the same response."""
    if version not in FETCH_ENVELOPE_VERSIONS:
        raise UnsupportedVersion(f"the Fetch envelope is written for v4-v11, not v{version}")
    fixed = _PARTITION_FIXED[version]
    size = 4 + 4 + (6 if version >= 7 else 0) + 4  # correlation id, throttle, [error, session], #topics
    for name, partitions in topics:
        size += 2 + len(name.encode("utf-8")) + 4
        for aborted, records in partitions:
            size += fixed + 16 * aborted + records
    return size


def _string(value: str) -> bytes:
    raw = value.encode("utf-8")
    return _I16.pack(len(raw)) + raw


def build_fetch_envelope(version: int, correlation_id: int, response: FetchResponseData) -> FetchEnvelope:
    """The wire form of a Fetch response of ``version`` (4-11) answering ``correlation_id``."""
    if version not in FETCH_ENVELOPE_VERSIONS:
        raise UnsupportedVersion(f"the Fetch envelope is written for v4-v11, not v{version}")
    parts: list[bytes | RecordsSlice] = []
    slices: list[RecordsSlice] = []
    chunk = bytearray(_I32.pack(0))  # the size, patched once the total is known
    chunk += _I32.pack(correlation_id)
    chunk += _I32.pack(response.throttle_time_ms)
    if version >= 7:
        chunk += struct.pack(">hi", response.error_code, response.session_id)
    chunk += _I32.pack(len(response.responses))
    total = 0
    for topic in response.responses:
        chunk += _string(topic.topic)
        chunk += _I32.pack(len(topic.partitions))
        for p in topic.partitions:
            chunk += struct.pack(">ihqq", p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset)
            if version >= 5:
                chunk += struct.pack(">q", p.log_start_offset)
            aborted = p.aborted_transactions
            if aborted is None:
                chunk += _I32.pack(-1)
            else:
                chunk += _I32.pack(len(aborted))
                for producer_id, first_offset in aborted:
                    chunk += _ABORTED.pack(producer_id, first_offset)
            if version >= 11:
                chunk += _I32.pack(p.preferred_read_replica)
            records = p.records
            if records is None:
                chunk += _I32.pack(-1)
            elif isinstance(records, bytes | bytearray | memoryview):
                chunk += _I32.pack(len(records))
                chunk += records
            else:
                slices.append(records)
                chunk += _I32.pack(records.size)
                if records.size > 0:
                    total += len(chunk)
                    parts.append(bytes(chunk))
                    parts.append(records)
                    total += records.size
                    chunk = bytearray()
    if chunk:
        total += len(chunk)
        parts.append(bytes(chunk))
    first = parts[0]
    assert isinstance(first, bytes)
    parts[0] = _I32.pack(total - 4) + first[4:]
    return FetchEnvelope(total, parts, slices)


__all__ = [
    "FETCH_ENVELOPE_VERSIONS",
    "FetchEnvelope",
    "FetchPartitionData",
    "FetchResponseData",
    "FetchTopicData",
    "RecordsSlice",
    "build_fetch_envelope",
    "fetch_response_size",
]
