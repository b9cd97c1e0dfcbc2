"""Conformance suite for the remote storage role (tiered storage, KIP-405): a plugin's
``RemoteStorageManager`` and ``RemoteLogMetadataManager`` (odradek.interfaces).

A remote storage plugin runs it against itself with one line in a test module::

    TestMyRemoteStorage = check_remote_storage(my_factory, config_overrides={"my.bucket": "{tmp}/bucket"})

``my_factory`` is a ``RemoteStorageFactory`` or a callable taking the broker config and
returning the ``(RemoteStorageManager, RemoteLogMetadataManager)`` pair. String values of
``config_overrides`` may name ``{tmp}``, a fresh directory per test. "Another broker" means a
second pair from the factory on the same config: what one broker recorded, the other lists.

Semantics pinned down here, beyond the protocols' docstrings:

- a copied segment's bytes come back exactly, from any position, and each copied index too; an
  index that was not copied (no transaction index) is RemoteStorageError;
- metadata is listed per partition, ordered by start offset, in its latest state;
- publishing COPY_SEGMENT_FINISHED is exclusive per start offset: a second copy of a segment
  starting at the same offset is refused (False) once the first finished;
- deleting a segment's data makes its reads fail with RemoteStorageError, and deleting again
  succeeds; removing its metadata takes it out of the listing.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest

from ..config import load_config
from ..errors import RemoteStorageError
from ..interfaces import (
    EpochEntry,
    LogSegmentData,
    RemoteIndexType,
    RemoteLogMetadataManager,
    RemoteLogSegmentMetadata,
    RemoteSegmentState,
    RemoteStorageManager,
    TopicPartition,
)
from ..manager import load_plugins
from ._suite import suite_for
from .storage_support import make_batch

__all__ = ["RemoteStorageConformance", "check_remote_storage", "segment_files"]

TP = TopicPartition("tiered", 0)
FINISHED = RemoteSegmentState.COPY_SEGMENT_FINISHED


def segment_files(directory: Path, base_offset: int = 0, batches: int = 3) -> tuple[LogSegmentData, bytes]:
    """A segment's files as the segment engine would leave them (records, an offset index of
    Kafka's 8-byte entries, a time index) and its records' bytes."""
    directory.mkdir(parents=True, exist_ok=True)
    data = bytearray()
    index = bytearray()
    offset = base_offset
    for i in range(batches):
        batch = make_batch(4, base_offset=offset, value_size=32 + i)
        index += (offset - base_offset).to_bytes(4, "big") + len(data).to_bytes(4, "big")
        data += batch
        offset += 4
    log_path = directory / f"{base_offset:020d}.log"
    log_path.write_bytes(data)
    (directory / f"{base_offset:020d}.index").write_bytes(index)
    (directory / f"{base_offset:020d}.timeindex").write_bytes((1_000_000).to_bytes(8, "big") + b"\0\0\0\x0b")
    segment = LogSegmentData(
        log_path,
        directory / f"{base_offset:020d}.index",
        directory / f"{base_offset:020d}.timeindex",
        b"producer-snapshot",
        b"0\n1\n0 0\n",
    )
    return segment, bytes(data)


def metadata_for(tp: TopicPartition, start: int, data: bytes, *, records: int = 12) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        tp, uuid.uuid4().hex, start, start + records - 1, 1_000_011, len(data), (EpochEntry(0, start),), 1, 5
    )


class RemoteStorageConformance:
    """Base class of a remote storage plugin's conformance tests; see the module docstring."""

    #: A RemoteStorageFactory, or a callable taking the broker Config and returning the pair.
    factory: ClassVar[Any] = None
    #: Broker config keys applied to every test's config; ``{tmp}`` in a string is a fresh dir.
    config_overrides: ClassVar[Mapping[str, Any]] = {}

    def pair(self, tmp_path: Path) -> tuple[RemoteStorageManager, RemoteLogMetadataManager]:
        factory = type(self).__dict__.get("factory", self.factory)
        create = getattr(factory, "create", factory)
        if not callable(create):
            pytest.fail(f"{type(self).__name__} must set `factory` to a RemoteStorageFactory or a callable")
        tmp = tmp_path / "remote"
        tmp.mkdir(exist_ok=True)
        overrides = {k: v.format(tmp=tmp) if isinstance(v, str) else v for k, v in self.config_overrides.items()}
        # the plugins' keys are known (a remote storage declares its own, remote.log.storage.dir)
        config = load_config(env={}, overrides=overrides, plugins=load_plugins())
        storage, metadata = create(config)
        return storage, metadata

    def copied(
        self, tmp_path: Path, start: int = 0, tp: TopicPartition = TP
    ) -> tuple[RemoteStorageManager, RemoteLogMetadataManager, RemoteLogSegmentMetadata, LogSegmentData, bytes]:
        storage, metadata = self.pair(tmp_path)
        segment, data = segment_files(tmp_path / f"local-{tp}-{start}", start)
        meta = metadata_for(tp, start, data)
        metadata.add_remote_log_segment_metadata(meta)
        storage.copy_log_segment_data(meta, segment)
        return storage, metadata, meta, segment, data

    # -- the data ----------------------------------------------------------------------------
    def test_objects_satisfy_the_protocols(self, tmp_path: Path) -> None:
        storage, metadata = self.pair(tmp_path)
        assert isinstance(storage, RemoteStorageManager)
        assert isinstance(metadata, RemoteLogMetadataManager)

    def test_copied_bytes_come_back_from_any_position(self, tmp_path: Path) -> None:
        storage, _, meta, _, data = self.copied(tmp_path)
        with storage.fetch_log_segment(meta, 0) as stream:
            assert stream.read() == data
        with storage.fetch_log_segment(meta, 100) as stream:
            assert stream.read() == data[100:]

    def test_indexes_come_back(self, tmp_path: Path) -> None:
        storage, _, meta, segment, _ = self.copied(tmp_path)
        assert storage.fetch_index(meta, RemoteIndexType.OFFSET) == segment.offset_index.read_bytes()
        assert storage.fetch_index(meta, RemoteIndexType.TIMESTAMP) == segment.time_index.read_bytes()
        assert storage.fetch_index(meta, RemoteIndexType.PRODUCER_SNAPSHOT) == segment.producer_snapshot
        assert storage.fetch_index(meta, RemoteIndexType.LEADER_EPOCH) == segment.leader_epoch_index
        with pytest.raises(RemoteStorageError):
            storage.fetch_index(meta, RemoteIndexType.TRANSACTION)

    def test_the_copy_does_not_depend_on_the_local_files(self, tmp_path: Path) -> None:
        storage, _, meta, segment, data = self.copied(tmp_path)
        segment.log_segment.unlink()  # local retention deleted it
        with storage.fetch_log_segment(meta, 0) as stream:
            assert stream.read() == data

    def test_deleted_data_cannot_be_read_and_deleting_again_succeeds(self, tmp_path: Path) -> None:
        storage, _, meta, _, _ = self.copied(tmp_path)
        storage.delete_log_segment_data(meta)
        with pytest.raises(RemoteStorageError):
            storage.fetch_log_segment(meta, 0).close()
        with pytest.raises(RemoteStorageError):
            storage.fetch_index(meta, RemoteIndexType.OFFSET)
        storage.delete_log_segment_data(meta)

    def test_reading_an_unknown_segment_fails_cleanly(self, tmp_path: Path) -> None:
        storage, _ = self.pair(tmp_path)
        meta = metadata_for(TP, 0, b"x" * 10)
        with pytest.raises(RemoteStorageError):
            storage.fetch_log_segment(meta, 0).close()

    # -- the metadata --------------------------------------------------------------------------
    def test_metadata_follows_its_states(self, tmp_path: Path) -> None:
        _, metadata, meta, _, _ = self.copied(tmp_path)
        assert [m.state for m in metadata.list_remote_log_segments(TP)] == [RemoteSegmentState.COPY_SEGMENT_STARTED]
        assert metadata.update_remote_log_segment_metadata(dataclasses.replace(meta, state=FINISHED))
        (listed,) = metadata.list_remote_log_segments(TP)
        assert listed == dataclasses.replace(meta, state=FINISHED)
        metadata.remove_remote_log_segment_metadata(listed)
        assert metadata.list_remote_log_segments(TP) == []

    def test_listing_is_per_partition_and_ordered(self, tmp_path: Path) -> None:
        _storage, metadata = self.pair(tmp_path)
        other = TopicPartition("tiered", 1)
        for tp, start in ((TP, 24), (TP, 0), (other, 0), (TP, 12)):
            metadata.add_remote_log_segment_metadata(metadata_for(tp, start, b"x" * 10))
        assert [m.start_offset for m in metadata.list_remote_log_segments(TP)] == [0, 12, 24]
        assert [m.start_offset for m in metadata.list_remote_log_segments(other)] == [0]
        assert metadata.list_remote_log_segments(TopicPartition("none", 0)) == []

    def test_another_broker_sees_the_metadata(self, tmp_path: Path) -> None:
        _, metadata, meta, _, data = self.copied(tmp_path)
        metadata.update_remote_log_segment_metadata(dataclasses.replace(meta, state=FINISHED))
        storage2, metadata2 = self.pair(tmp_path)
        (listed,) = metadata2.list_remote_log_segments(TP)
        assert listed.segment_id == meta.segment_id and listed.state is FINISHED
        with storage2.fetch_log_segment(listed, 0) as stream:
            assert stream.read() == data

    def test_a_segment_is_finished_once_per_start_offset(self, tmp_path: Path) -> None:
        _, metadata, meta, _, data = self.copied(tmp_path)
        twin = metadata_for(TP, meta.start_offset, data)
        metadata.add_remote_log_segment_metadata(twin)
        assert metadata.update_remote_log_segment_metadata(dataclasses.replace(meta, state=FINISHED))
        assert not metadata.update_remote_log_segment_metadata(dataclasses.replace(twin, state=FINISHED))
        finished = [m for m in metadata.list_remote_log_segments(TP) if m.state is FINISHED]
        assert [m.segment_id for m in finished] == [meta.segment_id]

    def test_a_copy_that_never_finished_does_not_block_the_next(self, tmp_path: Path) -> None:
        _, metadata, meta, _, data = self.copied(tmp_path)
        metadata.remove_remote_log_segment_metadata(meta)  # the first attempt was cleaned up
        again = metadata_for(TP, meta.start_offset, data)
        metadata.add_remote_log_segment_metadata(again)
        assert metadata.update_remote_log_segment_metadata(dataclasses.replace(again, state=FINISHED))


def check_remote_storage(factory: Any, **attributes: Any) -> type[RemoteStorageConformance]:
    """A ``RemoteStorageConformance`` subclass for ``factory``; assign it to a ``Test*`` name."""
    return suite_for(RemoteStorageConformance, "RemoteStorageConformanceSuite", {"factory": factory, **attributes})
