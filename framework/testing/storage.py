"""Conformance suite for the storage role (``LogStorage`` / ``PartitionLog`` in odradek.interfaces).

Any storage engine -- the built-in segment engine or a third party's -- runs it against itself with
one line in a test module::

    TestMyStorage = check_storage(my_storage_factory)   # a StorageFactory or config -> LogStorage

or, to tune it, by subclassing::

    class TestMyStorage(StorageConformance):
        factory = my_storage_factory
        config_overrides = {"log.segment.bytes": 1 << 20}

Each test builds a broker config (``odradek.config.default_config``) whose ``log.dirs`` is a fresh
temp directory, calls the factory with it, ``await storage.open()``, and closes every storage it
opened. "Restart" means ``close()`` then a new storage from the factory on the same config:
everything a broker relies on must survive it (data, offsets, log start, leader epochs, state,
checkpoints). An in-memory engine may keep its data in a process-wide registry keyed by the log
dir to pass those tests.

Semantics pinned down here, beyond the protocols' docstrings:

- a read returns a run of whole, consecutive batches starting with the batch that holds
  ``fetch_offset`` (or the first batch after it when offsets have a gap); at least one batch when
  ``min_one_batch`` even past ``max_bytes``; never a batch whose last offset is >= ``max_offset``;
  an empty read has ``size == 0``, ``first_batch_offset == -1`` and ``to_bytes() == b""``;
- reading at the log end is empty; below the log start or past the end is OffsetOutOfRange;
- appended bytes are stored exactly (baseOffset and partitionLeaderEpoch rewritten, CRC intact);
- ``truncate_to`` leaves no batch holding an offset >= the target, and appends continue at the
  new log end; epochs that started at or past it are forgotten;
- leader epochs follow Kafka's ``LeaderEpochFileCache`` (assignment drops contradicting entries,
  OffsetForLeaderEpoch answers as Kafka does), and a leader append in a newer epoch records it;
- ``offset_for_timestamp`` is the first record (in offset order) with a timestamp >= the target;
  ``max_timestamp_and_offset`` the record carrying the largest timestamp (below the log start too);
- ``describe_log_dirs`` lists every log in exactly one dir; ``size_in_bytes`` counts its batches.
- an engine that offers ``LogDirMoves`` (KIP-113) moves a log to another of ``log.dirs`` whole.
"""

from __future__ import annotations

import os
import random
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, ClassVar

import pytest
import trio

from .. import records
from ..errors import KafkaError, OffsetOutOfRange
from ..interfaces import (
    EpochEntry,
    FetchDataInfo,
    LogDirMoves,
    LogStorage,
    PartitionLog,
    TopicPartition,
    described_log_dirs,
)
from ._suite import suite_for
from .storage_support import (
    TP,
    StorageEnv,
    append,
    check_read,
    existing_log,
    headers,
    make_batch,
    metas,
    resolve_factory,
)

__all__ = ["StorageConformance", "StorageEnv", "check_storage", "make_batch"]


class StorageConformance:
    """Base class of a storage engine's conformance tests; see the module docstring."""

    #: A StorageFactory, or a callable taking the broker Config and returning a LogStorage.
    factory: ClassVar[Any] = None
    #: Broker config keys applied to every test's config (Kafka names: "log.segment.bytes").
    config_overrides: ClassVar[Mapping[str, Any]] = {}

    pytestmark = pytest.mark.trio

    @asynccontextmanager
    async def env(self, tmp_path: Path, **overrides: Any) -> AsyncIterator[StorageEnv]:
        merged = {**self.config_overrides, **{k.replace("_", "."): v for k, v in overrides.items()}}
        env = StorageEnv(resolve_factory(type(self).__dict__.get("factory", self.factory)), tmp_path, merged)
        try:
            yield env
        finally:
            await env.close_all()

    # -- protocols and empty logs ------------------------------------------------------------------
    async def test_objects_satisfy_the_protocols(self, tmp_path: Path) -> None:
        async with self.env(tmp_path) as env:
            storage, log = await env.log()
            assert isinstance(storage, LogStorage)
            assert isinstance(log, PartitionLog)
            assert log.topic_partition == TP
            append(log, 1)
            fetched = log.read(0, 1 << 20)
            assert isinstance(fetched, FetchDataInfo)
            fetched.release()

    async def test_empty_log(self, tmp_path: Path) -> None:
        async with self.env(tmp_path) as env:
            _, log = await env.log()
            assert (log.log_start_offset, log.log_end_offset, log.size_in_bytes) == (0, 0, 0)
            empty = log.read(0, 1000)
            assert (empty.size, empty.first_batch_offset, empty.to_bytes()) == (0, -1, b"")
            empty.release()
            for bad in (1, -1):
                with pytest.raises(OffsetOutOfRange):
                    log.read(bad, 1000)
            assert log.max_timestamp_and_offset() == (-1, -1)
            assert log.offset_for_timestamp(0) is None
            assert list(log.epoch_entries()) == []
            assert log.end_offset_for_epoch(0) == (-1, -1)
            info = log.append_as_leader(bytearray(), [], 0)
            assert info.valid_bytes == 0 and log.log_end_offset == 0

    async def test_logs_are_created_once_and_listed(self, tmp_path: Path) -> None:
        async with self.env(tmp_path) as env:
            storage, log = await env.log()
            assert storage.get_log(TP) is log
            assert storage.get_or_create_log(TP, env.topic_config()) is log
            other = TopicPartition("conformance", 1)
            assert storage.get_log(other) is None
            storage.get_or_create_log(other, env.topic_config())
            assert set(storage.all_logs()) == {TP, other}

    async def test_log_dirs_list_every_log_once_with_its_size(self, tmp_path: Path) -> None:
        """DescribeLogDirs: every log in exactly one online dir, sizes that grow with appends and
        go with a deleted log, volume sizes either unknown (-1) or plausible."""
        async with self.env(tmp_path) as env:
            storage, log = await env.log()
            other = TopicPartition("conformance", 1)
            empty = storage.get_or_create_log(other, env.topic_config())
            append(log, 3, 2)
            assert log.size_in_bytes > 0 and empty.size_in_bytes == 0
            dirs = await described_log_dirs(storage)
            assert dirs is not None, "the engine has no describe_log_dirs"
            assert dirs and all(d.error is None and d.path for d in dirs)
            held = [tp for d in dirs for tp in d.partitions]
            assert sorted(held) == sorted([TP, other])
            for d in dirs:
                assert d.total_bytes == -1 or d.total_bytes >= d.usable_bytes >= 0
            await storage.delete_log(other)
            assert [tp for d in await described_log_dirs(storage) or () for tp in d.partitions] == [TP]

    # -- append ----------------------------------------------------------------------------------
    async def test_append_assigns_offsets_from_the_log_end(self, tmp_path: Path) -> None:
        async with self.env(tmp_path) as env:
            _, log = await env.log()
            assert append(log, 1, 5, 2) == [(0, 0), (1, 5), (6, 7)]
            data = make_batch(3, timestamp=2_000_000) + make_batch(4, timestamp=3_000_000)
            info = log.append_as_leader(data, metas(data), 0)
            assert (info.first_offset, info.last_offset, info.valid_bytes) == (8, 14, len(data))
            assert info.max_timestamp == 3_000_003
            assert 11 <= info.offset_of_max_timestamp <= 14
            assert info.log_start_offset == 0 and info.log_append_time == -1
            assert log.log_end_offset == 15

    async def test_append_stores_the_bytes_with_rewritten_headers(self, tmp_path: Path) -> None:
        async with self.env(tmp_path) as env:
            _, log = await env.log()
            append(log, 2)
            data = make_batch(3) + make_batch(1)
            log.append_as_leader(data, metas(data), 7)
            first = records.parse_header(data, 0)
            second = records.parse_header(data, first.size)
            assert (first.base_offset, first.partition_leader_epoch) == (2, 7)
            assert (second.base_offset, second.partition_leader_epoch) == (5, 7)
            fetched = log.read(2, 1 << 20)
            try:
                assert fetched.to_bytes() == bytes(data)
                assert fetched.first_batch_offset == 2
            finally:
                fetched.release()
            assert log.size_in_bytes == len(make_batch(2)) + len(data)

    async def test_append_copies_the_request_buffer(self, tmp_path: Path) -> None:
        """``data`` is the request's own buffer: the TCP transport reads the next request into it
        once ``append_as_leader`` returns, so an engine that keeps a view of it (a memoryview
        slice, the bytearray itself) would serve the next request's bytes. Overwrite the buffer
        after each append, as the transport does, and read back what was appended."""
        async with self.env(tmp_path) as env:
            _, log = await env.log()
            data = make_batch(3)
            log.append_as_leader(data, metas(data), 0)
            expected = bytes(data)
            data[:] = bytes(len(data))  # the buffer is reused in place: same size, new bytes
            # the transport passes a slice of a larger receive buffer (after the request header)
            batch = make_batch(2, value_size=40)
            request = bytearray(b"\xaa" * 24) + batch + bytearray(b"\xbb" * 8)
            view = memoryview(request)[24 : 24 + len(batch)]
            log.append_as_leader(view, metas(batch), 0)
            expected += bytes(view)
            view.release()
            request[:] = b"\xcc" * len(request)
            fetched = log.read(0, 1 << 20)
            try:
                assert fetched.to_bytes() == expected, "stored batches changed when the appended buffer was reused"
            finally:
                fetched.release()

    async def test_follower_append_keeps_offsets_and_epochs(self, tmp_path: Path) -> None:
        async with self.env(tmp_path) as env:
            _, log = await env.log()
            data = make_batch(3, base_offset=0, leader_epoch=1) + make_batch(2, base_offset=3, leader_epoch=4)
            info = log.append_as_follower(bytes(data), metas(data))
            assert (info.first_offset, info.last_offset, log.log_end_offset) == (0, 4, 5)
            assert list(log.epoch_entries()) == [EpochEntry(1, 0), EpochEntry(4, 3)]
            gap = make_batch(1, base_offset=9, leader_epoch=4)  # a compacted leader's log has gaps
            log.append_as_follower(bytes(gap), metas(gap))
            assert log.log_end_offset == 10
            fetched = log.read(6, 1 << 20)
            assert [h.base_offset for h in headers(fetched)] == [9]
            fetched.release()
            stale = make_batch(1, base_offset=4, leader_epoch=4)
            with pytest.raises(KafkaError):
                log.append_as_follower(bytes(stale), metas(stale))
            assert log.log_end_offset == 10

    # -- read ------------------------------------------------------------------------------------
    async def test_read_starts_at_the_batch_holding_the_offset(self, tmp_path: Path) -> None:
        async with self.env(tmp_path) as env:
            _, log = await env.log()
            spans = append(log, 3, 1, 4, 2)
            for base, last in spans:
                for offset in range(base, last + 1):
                    fetched = log.read(offset, 1 << 20)
                    found = headers(fetched)
                    assert fetched.first_batch_offset == base == found[0].base_offset
                    assert [h.base_offset for h in found] == [b for b, _ in spans if b >= base]
                    fetched.release()

    async def test_read_at_end_is_empty_and_outside_is_out_of_range(self, tmp_path: Path) -> None:
        async with self.env(tmp_path) as env:
            _, log = await env.log()
            append(log, 2, 2)
            at_end = log.read(4, 1000)
            assert at_end.size == 0 and at_end.first_batch_offset == -1
            at_end.release()
            for bad in (5, 100, -1):
                with pytest.raises(OffsetOutOfRange):
                    log.read(bad, 1000)

    async def test_read_honours_max_bytes_in_whole_batches(self, tmp_path: Path) -> None:
        async with self.env(tmp_path) as env:
            _, log = await env.log()
            append(log, *[2] * 10)
            size = len(make_batch(2))
            fetched = log.read(0, int(size * 2.5))
            found = headers(fetched)
            assert 1 <= len(found) <= 2 and fetched.size <= size * 2.5
            fetched.release()
            one = log.read(4, size - 1)
            assert [h.base_offset for h in headers(one)] == [4]
            one.release()
            zero = log.read(4, 0)
            assert [h.base_offset for h in headers(zero)] == [4]
            zero.release()
            none = log.read(4, size - 1, min_one_batch=False)
            assert none.size == 0 and none.to_bytes() == b""
            none.release()

    async def test_a_read_names_the_offset_after_its_last_batch(self, tmp_path: Path) -> None:
        """``next_offset``: what a fetch waiting for ``min_bytes`` compares with its bound to
        tell a read cut short (more to read) from one that read everything there is."""
        async with self.env(tmp_path) as env:
            _, log = await env.log()
            append(log, *[2] * 5)
            size = len(make_batch(2))
            for max_bytes, max_offset, expected in ((1 << 20, None, 10), (size, None, 2), (1 << 20, 4, 4)):
                fetched = log.read(0, max_bytes, max_offset=max_offset)
                last = headers(fetched)[-1]
                assert fetched.next_offset == last.last_offset + 1 == expected, (max_bytes, max_offset)
                fetched.release()
            empty = log.read(10, 1 << 20)
            assert empty.size == 0 and empty.next_offset == -1
            empty.release()

    async def test_a_batch_larger_than_max_bytes_is_returned_whole(self, tmp_path: Path) -> None:
        async with self.env(tmp_path) as env:
            _, log = await env.log()
            big = make_batch(4, value_size=300_000)
            log.append_as_leader(big, metas(big), 0)
            append(log, 1)
            fetched = log.read(2, 1000)
            assert [h.base_offset for h in headers(fetched)] == [0]
            assert fetched.size == len(big)
            fetched.release()

    async def test_read_never_returns_offsets_at_or_past_max_offset(self, tmp_path: Path) -> None:
        async with self.env(tmp_path) as env:
            _, log = await env.log()
            spans = append(log, 3, 3, 3, 3)  # 0-2 3-5 6-8 9-11
            for max_offset in range(0, 13):
                for start in range(0, 12):
                    fetched = log.read(start, 1 << 20, max_offset=max_offset)
                    found = headers(fetched)
                    assert all(h.last_offset < max_offset for h in found)
                    eligible = [b for b, last in spans if last >= start and last < max_offset]
                    assert [h.base_offset for h in found] == eligible
                    fetched.release()

    async def test_file_range_and_bytes_agree(self, tmp_path: Path) -> None:
        async with self.env(tmp_path) as env:
            _, log = await env.log()
            append(log, 5, 5, 5)
            fetched = log.read(5, 1 << 20)
            span = fetched.file_range()
            if span is not None:
                assert span.length == fetched.size
                assert os.pread(span.fd, span.length, span.position) == fetched.to_bytes()
            fetched.release()
            fetched.release()  # idempotent

    async def test_reading_everything_in_small_steps(self, tmp_path: Path) -> None:
        async with self.env(tmp_path) as env:
            _, log = await env.log()
            spans = append(log, *[random.Random(7).randint(1, 9) for _ in range(40)])
            seen: list[int] = []
            offset = 0
            while offset < log.log_end_offset:
                fetched = log.read(offset, 300)
                found = headers(fetched)
                fetched.release()
                assert found, f"no progress at offset {offset}"
                seen += [h.base_offset for h in found]
                offset = found[-1].next_offset
            assert seen == [b for b, _ in spans]

    # -- timestamps ------------------------------------------------------------------------------
    async def test_offset_for_timestamp_finds_the_first_record_at_or_after(self, tmp_path: Path) -> None:
        async with self.env(tmp_path) as env:
            _, log = await env.log()
            for stamps in ([100, 110, 120], [200, 190, 210], [150], [300, 310]):
                data = make_batch(len(stamps), timestamps=stamps)
                log.append_as_leader(data, metas(data), 0)
            # offsets: 0:100 1:110 2:120 3:200 4:190 5:210 6:150 7:300 8:310
            assert log.offset_for_timestamp(0) == (0, 100)
            assert log.offset_for_timestamp(105) == (1, 110)
            assert log.offset_for_timestamp(120) == (2, 120)
            assert log.offset_for_timestamp(121) == (3, 200)
            assert log.offset_for_timestamp(205) == (5, 210)
            assert log.offset_for_timestamp(305) == (8, 310)
            assert log.offset_for_timestamp(311) is None
            assert log.max_timestamp_and_offset() == (310, 8)
            log.delete_records_before(4)
            assert log.offset_for_timestamp(0) == (4, 190)
            # the max-timestamp record below the log start, its batch kept: still that record's
            # pair (as Kafka), never its timestamp with another record's offset
            data = make_batch(3, timestamps=[500, 400, 410])
            log.append_as_leader(data, metas(data), 0)  # offsets 9, 10, 11
            log.delete_records_before(10)
            assert log.max_timestamp_and_offset() == (500, 9)
            assert log.offset_for_timestamp(450) is None
            assert log.offset_for_timestamp(405) == (11, 410)

    # -- truncation and deletion -------------------------------------------------------------------
    async def test_truncate_to_a_batch_boundary(self, tmp_path: Path) -> None:
        async with self.env(tmp_path) as env:
            _, log = await env.log()
            append(log, 2, 2, 2, epoch=1)
            log.assign_epoch_start_offset(2, 4)
            log.truncate_to(4)
            assert log.log_end_offset == 4
            assert list(log.epoch_entries()) == [EpochEntry(1, 0)]
            fetched = log.read(0, 1 << 20)
            assert [h.base_offset for h in headers(fetched)] == [0, 2]
            fetched.release()
            with pytest.raises(OffsetOutOfRange):
                log.read(5, 100)
            assert append(log, 3) == [(4, 6)]
            log.truncate_to(100)
            log.truncate_to(log.log_end_offset)
            assert log.log_end_offset == 7

    async def test_truncate_inside_a_batch_drops_the_batch(self, tmp_path: Path) -> None:
        async with self.env(tmp_path) as env:
            _, log = await env.log()
            append(log, 4, 4)
            log.truncate_to(6)
            assert 4 <= log.log_end_offset <= 6
            fetched = log.read(0, 1 << 20)
            assert all(h.last_offset < 6 for h in headers(fetched))
            fetched.release()
            ((base, _),) = append(log, 1)
            assert base == log.log_end_offset - 1

    async def test_truncate_fully_and_start_at(self, tmp_path: Path) -> None:
        async with self.env(tmp_path) as env:
            storage, log = await env.log()
            append(log, 3, 3, epoch=2)
            log.truncate_fully_and_start_at(1000)
            assert (log.log_start_offset, log.log_end_offset) == (1000, 1000)
            assert list(log.epoch_entries()) == []
            with pytest.raises(OffsetOutOfRange):
                log.read(0, 100)
            assert append(log, 2) == [(1000, 1001)]
            storage = await env.restart(storage)
            log = existing_log(storage)
            assert (log.log_start_offset, log.log_end_offset) == (1000, 1002)

    async def test_delete_records_before_advances_the_log_start(self, tmp_path: Path) -> None:
        async with self.env(tmp_path) as env:
            storage, log = await env.log()
            append(log, 2, 2, 2, epoch=0)
            log.assign_epoch_start_offset(3, 5)
            assert log.delete_records_before(3) == 3
            assert log.delete_records_before(1) == 3
            assert log.log_start_offset == 3 and log.log_end_offset == 6
            assert list(log.epoch_entries()) == [EpochEntry(0, 3), EpochEntry(3, 5)]
            with pytest.raises(OffsetOutOfRange):
                log.read(2, 100)
            fetched = log.read(3, 1 << 20)
            assert fetched.first_batch_offset == 2  # the batch holding 3 starts before it
            fetched.release()
            with pytest.raises(OffsetOutOfRange):
                log.delete_records_before(7)
            storage = await env.restart(storage)
            log = existing_log(storage)
            assert (log.log_start_offset, log.log_end_offset) == (3, 6)
            assert log.delete_records_before(6) == 6
            empty = log.read(6, 100)
            assert empty.size == 0
            empty.release()
            assert append(log, 1) == [(6, 6)]

    async def test_a_log_moves_between_dirs(self, tmp_path: Path) -> None:
        """KIP-113, for an engine that offers ``LogDirMoves`` (an optional contract: one without
        it, or that keeps a single place whatever ``log.dirs`` says, has nothing to check): a
        future log in the other dir, filled as the broker fills it, is listed as the dir's
        future partition, promoted with the log's data, epochs, log start and state, and stays
        in its new dir across a restart."""
        from ..broker.alter_log_dirs import catch_up

        dirs = [str(tmp_path / "one"), str(tmp_path / "two")]
        async with self.env(tmp_path, log_dirs=dirs) as env:
            storage, log = await env.log()
            described = await described_log_dirs(storage)
            if not isinstance(storage, LogDirMoves) or described is None or len(described) < 2:
                return
            append(log, 2, 3, epoch=1)
            append(log, 4, epoch=4)
            log.delete_records_before(1)
            log.write_state("conformance", b"state")
            (here,) = [d.path for d in described if TP in d.partitions]
            (there,) = [d.path for d in described if d.path != here]
            future = storage.create_future_log(TP, there)
            assert storage.get_future_log(TP) is future and storage.get_log(TP) is log
            listed = {d.path: (d.partitions, d.future_partitions) for d in await described_log_dirs(storage) or ()}
            assert listed == {here: ((TP,), ()), there: ((), (TP,))}
            catch_up(log, future)
            expected = headers(log.read(log.log_start_offset, 1 << 20))
            epochs = list(log.epoch_entries())
            assert [e.epoch for e in epochs] == [1, 4]
            promoted = storage.replace_current_with_future_log(TP)
            assert storage.get_log(TP) is promoted and storage.get_future_log(TP) is None
            for restart in (False, True):
                if restart:
                    storage = await env.restart(storage)
                moved = existing_log(storage)
                assert restart or moved is promoted
                assert headers(moved.read(moved.log_start_offset, 1 << 20)) == expected
                assert moved.log_start_offset == 1 and moved.log_end_offset == 9
                assert list(moved.epoch_entries()) == epochs
                assert moved.read_state("conformance") == b"state"
                listed = {d.path: (d.partitions, d.future_partitions) for d in await described_log_dirs(storage) or ()}
                assert listed == {here: ((), ()), there: ((TP,), ())}

    async def test_delete_log(self, tmp_path: Path) -> None:
        async with self.env(tmp_path) as env:
            storage, log = await env.log()
            append(log, 3)
            log.write_state("producer-state", b"x")
            await storage.delete_log(TP)
            assert storage.get_log(TP) is None and TP not in storage.all_logs()
            await storage.delete_log(TP)  # deleting twice is harmless
            storage = await env.restart(storage)
            assert storage.get_log(TP) is None
            fresh = storage.get_or_create_log(TP, env.topic_config())
            assert fresh.log_end_offset == 0 and fresh.read_state("producer-state") is None

    # -- leader epochs ---------------------------------------------------------------------------
    async def test_leader_epochs_follow_kafka(self, tmp_path: Path) -> None:
        async with self.env(tmp_path) as env:
            storage, log = await env.log()
            append(log, 10, 10, 5, epoch=-1)
            log.assign_epoch_start_offset(0, 0)
            log.assign_epoch_start_offset(2, 10)
            log.assign_epoch_start_offset(5, 20)
            log.assign_epoch_start_offset(5, 22)  # a later start for the latest epoch: ignored
            assert list(log.epoch_entries()) == [EpochEntry(0, 0), EpochEntry(2, 10), EpochEntry(5, 20)]
            assert log.end_offset_for_epoch(5) == (5, 25)
            assert log.end_offset_for_epoch(2) == (2, 20)
            assert log.end_offset_for_epoch(3) == (2, 20)
            assert log.end_offset_for_epoch(1) == (0, 10)
            assert log.end_offset_for_epoch(6) == (-1, -1)
            assert log.end_offset_for_epoch(-1) == (-1, -1)
            log.assign_epoch_start_offset(3, 15)  # contradicts epoch 5 at 20: it goes
            assert list(log.epoch_entries()) == [EpochEntry(0, 0), EpochEntry(2, 10), EpochEntry(3, 15)]
            append(log, 1, epoch=7)
            assert list(log.epoch_entries())[-1] == EpochEntry(7, 25)
            append(log, 1, epoch=7)
            assert list(log.epoch_entries())[-1] == EpochEntry(7, 25)
            storage = await env.restart(storage)
            log = existing_log(storage)
            assert list(log.epoch_entries()) == [
                EpochEntry(0, 0),
                EpochEntry(2, 10),
                EpochEntry(3, 15),
                EpochEntry(7, 25),
            ]

    async def test_epoch_older_than_all_known_epochs(self, tmp_path: Path) -> None:
        async with self.env(tmp_path) as env:
            _, log = await env.log()
            append(log, 4, epoch=3)
            assert log.end_offset_for_epoch(1) == (1, 0)
            assert log.end_offset_for_epoch(3) == (3, 4)

    # -- state and checkpoints -------------------------------------------------------------------
    async def test_state_beside_the_log(self, tmp_path: Path) -> None:
        async with self.env(tmp_path) as env:
            storage, log = await env.log()
            assert log.read_state("producer-state") is None
            log.write_state("producer-state", b"one")
            log.write_state("producer-state", b"two")
            log.write_state("other", b"")
            assert log.read_state("producer-state") == b"two" and log.read_state("other") == b""
            storage = await env.restart(storage)
            log = existing_log(storage)
            assert log.read_state("producer-state") == b"two"

    async def test_checkpoints(self, tmp_path: Path) -> None:
        async with self.env(tmp_path) as env:
            storage, _ = await env.log()
            assert storage.read_checkpoint("replication-offset-checkpoint") == {}
            offsets = {TP: 5, TopicPartition("elsewhere", 3): 9}
            storage.write_checkpoint("replication-offset-checkpoint", offsets)
            assert storage.read_checkpoint("replication-offset-checkpoint") == offsets
            storage.write_checkpoint("replication-offset-checkpoint", {TP: 6})
            storage = await env.restart(storage)
            assert storage.read_checkpoint("replication-offset-checkpoint") == {TP: 6}

    async def test_everything_survives_a_restart(self, tmp_path: Path) -> None:
        async with self.env(tmp_path) as env:
            storage = await env.open()
            expected: dict[TopicPartition, tuple[int, int, bytes]] = {}
            for p in range(4):
                tp = TopicPartition("restart", p)
                _, log = await env.log(storage, tp)
                append(log, *range(1, 6 + p), epoch=p)
                log.delete_records_before(p)
                fetched = log.read(p, 1 << 24)
                expected[tp] = (log.log_start_offset, log.log_end_offset, fetched.to_bytes())
                fetched.release()
            await storage.all_logs()[TopicPartition("restart", 0)].flush()
            storage = await env.restart(storage)
            assert set(storage.all_logs()) == set(expected)
            for tp, (start, end, data) in expected.items():
                log = existing_log(storage, tp)
                assert (log.log_start_offset, log.log_end_offset) == (start, end)
                fetched = log.read(start, 1 << 24)
                assert fetched.to_bytes() == data
                fetched.release()
                assert list(log.epoch_entries()) == [EpochEntry(tp.partition, tp.partition)]

    # -- lifecycle -------------------------------------------------------------------------------
    async def test_flush_update_config_and_background_run(self, tmp_path: Path) -> None:
        async with self.env(tmp_path) as env:
            storage, log = await env.log()
            append(log, 3)
            await log.flush()
            log.update_config(env.topic_config(retention_ms=3_600_000, segment_bytes=1 << 20))
            with trio.move_on_after(0.05):
                await storage.run()
            assert append(log, 1) == [(3, 3)]
            fetched = log.read(0, 1 << 20)
            assert [h.base_offset for h in headers(fetched)] == [0, 3]
            fetched.release()

    async def test_many_partitions(self, tmp_path: Path) -> None:
        async with self.env(tmp_path) as env:
            storage = await env.open()
            tps = [TopicPartition(f"many-{i % 7}", i) for i in range(200)]
            for i, tp in enumerate(tps):
                _, log = await env.log(storage, tp)
                append(log, 1 + i % 3)
            for i, tp in enumerate(tps):
                log = existing_log(storage, tp)
                assert log.log_end_offset == 1 + i % 3
                fetched = log.read(0, 1000)
                assert headers(fetched)[0].record_count == 1 + i % 3
                fetched.release()

    async def test_random_operations_match_a_model(self, tmp_path: Path) -> None:
        """Appends, reads, truncations, deletions and restarts in a seeded random order, checked
        against a list of batches (small segments, so engines that have them roll often)."""
        async with self.env(tmp_path, log_segment_bytes=4096, log_index_interval_bytes=256) as env:
            rng = random.Random(20240601)
            storage, log = await env.log()
            model: list[tuple[int, int, bytes]] = []  # (base, last, bytes)
            start = 0
            for _step in range(600):
                end = model[-1][1] + 1 if model else start
                assert (log.log_start_offset, log.log_end_offset) == (start, end)
                op = rng.random()
                if op < 0.45:
                    data = make_batch(rng.randint(1, 6), value_size=rng.randint(1, 60))
                    info = log.append_as_leader(data, metas(data), 0)
                    assert info.first_offset == end
                    model.append((info.first_offset, info.last_offset, bytes(data)))
                elif op < 0.85 and end > start:
                    offset = rng.randint(start, end)
                    max_bytes = rng.choice([0, 50, 300, 700, 2000, 1 << 20])
                    max_offset = rng.choice([None, rng.randint(start, end)])
                    one = rng.random() < 0.8
                    fetched = log.read(offset, max_bytes, max_offset=max_offset, min_one_batch=one)
                    check_read(fetched, model, offset, max_bytes, max_offset, one)
                    fetched.release()
                elif op < 0.92 and model:
                    targets = [b[0] for b in model if b[0] >= start] + [end]
                    target = rng.choice(targets)
                    log.truncate_to(target)
                    model = [b for b in model if b[0] < target]
                    assert log.log_end_offset == target
                elif op < 0.96 and end > start:
                    start = log.delete_records_before(rng.randint(start, end))
                else:
                    storage = await env.restart(storage)
                    restarted = storage.get_log(TP)
                    assert restarted is not None
                    log = restarted


def check_storage(factory: Any, **attributes: Any) -> type[StorageConformance]:
    """A ``StorageConformance`` subclass for ``factory``; assign it to a ``Test*`` name::

    TestMyStorage = check_storage(my_factory)
    """
    return suite_for(StorageConformance, "StorageConformanceSuite", {"factory": factory, **attributes})
