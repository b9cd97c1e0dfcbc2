"""Shared helpers of the segment-engine tests (test_storage_*.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from odradek import records
from odradek.config import Config, TopicConfig, default_config
from odradek.interfaces import TopicPartition
from odradek.plugins.storage_segment.log import SegmentLog
from odradek.plugins.storage_segment.storage import SegmentLogStorage

TP = TopicPartition("events", 0)


def config(path: Path, **overrides: Any) -> Config:
    """A broker config on ``path`` with Kafka-named overrides given with underscores."""
    return default_config(log_dirs=[str(path)], **overrides)


async def open_storage(path: Path, *, time_ms: Callable[[], int] | None = None, **overrides: Any) -> SegmentLogStorage:
    storage = SegmentLogStorage(config(path, **overrides), time_ms=time_ms)
    await storage.open()
    return storage


def topic_config(storage: SegmentLogStorage, **overrides: Any) -> TopicConfig:
    return storage.config.topic_config({k.replace("_", "."): v for k, v in overrides.items()})


def log_of(storage: SegmentLogStorage, tp: TopicPartition = TP, **overrides: Any) -> SegmentLog:
    return storage.get_or_create_log(tp, topic_config(storage, **overrides))


def batch(
    count: int = 1,
    *,
    ts: int = 1_000_000,
    keys: Sequence[bytes | None] | None = None,
    values: Sequence[bytes | None] | None = None,
    value_size: int = 10,
    **kwargs: Any,
) -> bytearray:
    keys = list(keys) if keys is not None else [b"k%d" % i for i in range(count)]
    values = list(values) if values is not None else [b"v" * value_size] * count
    recs = [(k, v, [], ts + i) for i, (k, v) in enumerate(zip(keys, values, strict=True))]
    return bytearray(records.build_batch(recs, **kwargs))


def append(log: SegmentLog, data: bytearray, epoch: int = 0) -> tuple[int, int]:
    info = log.append_as_leader(data, records.validate_batches(data, exact_counts=False), epoch)
    return info.first_offset, info.last_offset


def read_batches(log: SegmentLog, start: int | None = None) -> list[records.RecordBatch]:
    """Every batch from ``start`` (default: log start) to the end, read in steps."""
    out: list[records.RecordBatch] = []
    offset = log.log_start_offset if start is None else start
    while offset < log.log_end_offset:
        fetched = log.read(offset, 1 << 20)
        data = fetched.to_bytes()
        fetched.release()
        found = list(records.iter_batches(data))
        if not found:
            break
        out += found
        offset = found[-1].header.next_offset
    return out


def key_values(log: SegmentLog) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for b in read_batches(log) for r in b.records]
