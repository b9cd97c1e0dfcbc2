"""Kafka's ``__transaction_state`` record schemas (``TransactionLogKey`` / ``TransactionLogValue`` v0).

Key: ``int16 version (0), string transactional_id``. Value (v0): ``int16 version, int64 producer_id,
int16 producer_epoch, int32 transaction_timeout_ms, int8 transaction_status, nullable array of
(string topic, array of int32 partition ids), int64 last_update_timestamp_ms, int64
start_timestamp_ms``. A null value is a tombstone (the transactional id expired). Writing Kafka's
own layout keeps the topic readable by Kafka's tooling; v1 values (flexible, KIP-890 fields) are
not written, and reading one is refused with a clear error.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from ...errors import CorruptMessage, record_decoder
from ...interfaces import TopicPartition
from .state import TransactionMetadata, TransactionState

KEY_VERSION = 0
VALUE_VERSION = 0
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_VALUE_HEAD = struct.Struct(">hqhib")  # version, producer id, epoch, timeout, status
_TIMES = struct.Struct(">qq")


def _string(s: str) -> bytes:
    raw = s.encode()
    return _I16.pack(len(raw)) + raw


class _Reader:
    def __init__(self, buf: bytes) -> None:
        self.buf, self.pos = buf, 0

    def unpack(self, fmt: struct.Struct) -> tuple[int, ...]:
        if self.pos + fmt.size > len(self.buf):
            raise CorruptMessage("truncated __transaction_state record")
        out = fmt.unpack_from(self.buf, self.pos)
        self.pos += fmt.size
        return out

    def string(self) -> str:
        (n,) = self.unpack(_I16)
        if n < 0 or self.pos + n > len(self.buf):
            raise CorruptMessage("bad string in __transaction_state record")
        s = self.buf[self.pos : self.pos + n].decode()
        self.pos += n
        return s


def txn_key(transactional_id: str) -> bytes:
    return _I16.pack(KEY_VERSION) + _string(transactional_id)


@record_decoder("__transaction_state record")
def parse_txn_key(buf: bytes) -> str:
    r = _Reader(bytes(buf))
    (version,) = r.unpack(_I16)
    if version != KEY_VERSION:
        raise CorruptMessage(f"unknown TransactionLogKey version {version}")
    return r.string()


def _partitions(parts: Iterable[TopicPartition]) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(parts):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    out = [_I32.pack(len(by_topic))]
    for topic, ids in by_topic.items():
        out.append(_string(topic))
        out.append(_I32.pack(len(ids)))
        out.extend(_I32.pack(p) for p in ids)
    return b"".join(out)


def txn_value(m: TransactionMetadata) -> bytes:
    """The value Kafka writes for ``m`` (partitions only while a transaction is open or ending)."""
    head = _VALUE_HEAD.pack(VALUE_VERSION, m.producer_id, m.producer_epoch, m.timeout_ms, int(m.state))
    parts = _I32.pack(-1) if m.state is TransactionState.EMPTY and not m.partitions else _partitions(m.partitions)
    return head + parts + _TIMES.pack(m.last_update_ms, m.txn_start_ms)


@record_decoder("__transaction_state record")
def parse_txn_value(transactional_id: str, buf: bytes) -> TransactionMetadata:
    r = _Reader(bytes(buf))
    version, pid, epoch, timeout, status = r.unpack(_VALUE_HEAD)
    if version != VALUE_VERSION:
        raise CorruptMessage(f"TransactionLogValue v{version} is not supported (odradek writes v0)")
    (count,) = r.unpack(_I32)
    partitions: set[TopicPartition] = set()
    for _ in range(max(count, 0)):
        topic = r.string()
        (n,) = r.unpack(_I32)
        for _ in range(max(n, 0)):
            partitions.add(TopicPartition(topic, r.unpack(_I32)[0]))
    last_update, start = r.unpack(_TIMES)
    return TransactionMetadata(
        transactional_id, pid, epoch, timeout, TransactionState(status), partitions, start, last_update
    )
