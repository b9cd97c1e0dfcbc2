"""Helpers of the storage conformance suite (:mod:`odradek.testing.storage`): batches to append,
an environment that opens and restarts storages on a test's temp dir, and the read checker of
the model-based test."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from .. import records
from ..config import Config, TopicConfig, default_config
from ..interfaces import BatchMeta, FetchDataInfo, LogStorage, PartitionLog, StorageFactory, TopicPartition

TP = TopicPartition("conformance", 0)
Factory = Callable[[Config], LogStorage]


def make_batch(
    count: int = 1,
    *,
    timestamp: int = 1_000_000,
    key: bytes | None = b"key",
    value_size: int = 16,
    base_offset: int = 0,
    leader_epoch: int = -1,
    timestamps: Sequence[int] | None = None,
) -> bytearray:
    """One uncompressed batch of ``count`` records, as a producer would send it."""
    stamps = list(timestamps) if timestamps is not None else [timestamp + i for i in range(count)]
    recs: list[records.RecordTuple] = [(key, bytes([65 + i % 26]) * value_size, [], ts) for i, ts in enumerate(stamps)]
    return bytearray(records.build_batch(recs, base_offset=base_offset, partition_leader_epoch=leader_epoch))


def metas(data: bytes | bytearray) -> list[BatchMeta]:
    return records.validate_batches(data, exact_counts=False)


def headers(fetched: FetchDataInfo) -> list[records.BatchHeader]:
    """Headers of the batches a read returned, checking they are whole and CRC-valid."""
    data = fetched.to_bytes()
    assert len(data) == fetched.size
    found = metas(data)  # raises on partial or corrupt batches
    assert sum(m.size for m in found) == len(data)
    return [records.parse_header(data, m.position) for m in found]


def append(log: PartitionLog, *counts: int, epoch: int = 0, timestamp: int = 1_000_000) -> list[tuple[int, int]]:
    """Append one batch per count (separate calls); (base, last) offset of each."""
    out = []
    for n in counts:
        data = make_batch(n, timestamp=timestamp)
        info = log.append_as_leader(data, metas(data), epoch)
        out.append((info.first_offset, info.last_offset))
    return out


class StorageEnv:
    """Opens storages from the factory on one test's config and closes them all at the end."""

    def __init__(self, factory: Factory, root: Path, overrides: Mapping[str, Any]) -> None:
        self.factory = factory
        self.root = root
        self.overrides = dict(overrides)
        self.opened: list[LogStorage] = []

    def config(self) -> Config:
        values = {"log.dirs": [str(self.root / "logs")], **self.overrides}
        return default_config(**{k.replace(".", "_"): v for k, v in values.items()})

    def topic_config(self, **overrides: Any) -> TopicConfig:
        return self.config().topic_config({k.replace("_", "."): v for k, v in overrides.items()})

    async def open(self) -> LogStorage:
        storage = self.factory(self.config())
        await storage.open()
        self.opened.append(storage)
        return storage

    async def restart(self, storage: LogStorage) -> LogStorage:
        await storage.close()
        self.opened.remove(storage)
        return await self.open()

    async def log(self, storage: LogStorage | None = None, tp: TopicPartition = TP) -> tuple[LogStorage, PartitionLog]:
        storage = storage or await self.open()
        return storage, storage.get_or_create_log(tp, self.topic_config())

    async def close_all(self) -> None:
        while self.opened:
            await self.opened.pop().close()


def existing_log(storage: LogStorage, tp: TopicPartition = TP) -> PartitionLog:
    """The log ``storage`` already holds for ``tp`` (after a restart, say); fails the test if it is gone."""
    log = storage.get_log(tp)
    assert log is not None, f"{tp} is missing from the storage"
    return log


def resolve_factory(factory: Any) -> Factory:
    if factory is None:
        pytest.fail("a StorageConformance subclass must set `factory` (a StorageFactory or config -> LogStorage)")
    create: Factory = factory.create if isinstance(factory, StorageFactory) else factory
    if not callable(create):
        pytest.fail(f"storage factory {factory!r} is not callable")
    return create


def check_read(
    fetched: FetchDataInfo,
    model: list[tuple[int, int, bytes]],
    offset: int,
    max_bytes: int,
    max_offset: int | None,
    min_one_batch: bool,
) -> None:
    limit = max_offset if max_offset is not None else 1 << 62
    eligible = [b for b in model if b[1] >= offset and b[1] < limit]
    data = fetched.to_bytes()
    where = f"read({offset}, {max_bytes}, max_offset={max_offset}, min_one_batch={min_one_batch})"
    if not data:
        assert fetched.size == 0 and fetched.first_batch_offset == -1
        assert not eligible or (not min_one_batch and len(eligible[0][2]) > max_bytes), f"{where} returned nothing"
        return
    assert eligible, f"{where} returned data past the end or max_offset"
    concatenated = b"".join(raw for *_, raw in eligible)
    assert len(data) in _prefix_sizes(eligible) and data == concatenated[: len(data)], f"{where}: wrong batches"
    assert fetched.first_batch_offset == eligible[0][0]
    if len(data) > max_bytes:
        assert min_one_batch and data == eligible[0][2], f"{where} exceeded max_bytes"


def _prefix_sizes(batches: list[tuple[int, int, bytes]]) -> set[int]:
    sizes, total = set(), 0
    for *_, raw in batches:
        total += len(raw)
        sizes.add(total)
    return sizes
