"""A remote storage in a directory (Kafka's ``LocalTieredStorage``): ``remote.log.storage.dir``.

Meant for a file system every broker of the cluster mounts (NFS, a shared volume), or one broker
and a second disk. Both halves of the remote storage role live here, in one tree per partition:

``<dir>/<topic>-<partition>/<start offset, 20 digits>-<segment id>.<ext>``
    the copied files: ``log`` (the records), ``index``, ``timeindex``, ``snapshot`` (producer
    state) and ``leader-epoch-checkpoint`` (Kafka's text format), each written under a ``.tmp``
    name, fsynced and renamed;
``<dir>/<topic>-<partition>/metadata/<start>-<segment id>.json``
    the segment's :class:`~odradek.interfaces.RemoteLogSegmentMetadata`, rewritten atomically
    (temp file, fsync, rename) on every state change;
``<dir>/<topic>-<partition>/metadata/<start>.finished``
    the claim that makes a copy COPY_SEGMENT_FINISHED, created exclusively (``O_EXCL``): of two
    brokers that both believe they lead and copy the segment starting at one offset, one wins
    and the other deletes its copy, so readers never see a segment twice.

Keeping the metadata beside the data (rather than in the metadata store) means it works the same
on every metadata plugin (local, ZooKeeper, etcd), needs no watch, and cannot disagree with the
data after a crash between the two writes: a record whose copy never finished is cleaned up by
the next leader (:meth:`DirectoryRemoteLogMetadata.list_remote_log_segments` lists it as
COPY_SEGMENT_STARTED). Every method blocks; the broker calls them from worker threads.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import BinaryIO

from odradek.errors import RemoteStorageError
from odradek.interfaces import (
    LogSegmentData,
    RemoteIndexType,
    RemoteLogSegmentMetadata,
    RemoteSegmentState,
    TopicPartition,
)
from odradek.plugins.storage_segment.checkpoint import atomic_write, fsync_dir

METADATA_DIR = "metadata"
FINISHED_SUFFIX = ".finished"
_RECORD = re.compile(r"^(\d{20})-([0-9a-f]{1,64})\.json$")
_SEGMENT_ID = re.compile(r"^[0-9a-f]{1,64}$")
LOG_EXT = "log"


def _check_id(metadata: RemoteLogSegmentMetadata) -> None:
    if not _SEGMENT_ID.match(metadata.segment_id) or metadata.start_offset < 0:
        raise RemoteStorageError(f"invalid remote segment id {metadata.segment_id!r} or start offset")


def _partition_dir(root: Path, tp: TopicPartition) -> Path:
    name = str(tp)
    if "/" in name or name.startswith("."):
        raise RemoteStorageError(f"invalid partition name {name!r}")
    return root / name


def _stem(metadata: RemoteLogSegmentMetadata) -> str:
    _check_id(metadata)
    return f"{metadata.start_offset:020d}-{metadata.segment_id}"


def _copy_atomically(source: Path, target: Path, length: int | None = None) -> None:
    """Copy ``source`` (its first ``length`` bytes) to ``target`` through a fsynced temp file."""
    tmp = target.with_name(target.name + ".tmp")
    with open(source, "rb") as src, open(tmp, "wb") as dst:
        if length is None:
            shutil.copyfileobj(src, dst, 1 << 20)
        else:
            remaining = length
            while remaining > 0:
                chunk = src.read(min(remaining, 1 << 20))
                if not chunk:
                    raise RemoteStorageError(f"{source} is shorter than its {length} bytes")
                dst.write(chunk)
                remaining -= len(chunk)
        dst.flush()
        os.fsync(dst.fileno())
    os.replace(tmp, target)


class DirectoryRemoteStorage:
    """The segments' bytes under ``root``; satisfies :class:`odradek.interfaces.RemoteStorageManager`."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _files(self, metadata: RemoteLogSegmentMetadata) -> tuple[Path, str]:
        return _partition_dir(self.root, metadata.topic_partition), _stem(metadata)

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData) -> None:
        directory, stem = self._files(metadata)
        try:
            directory.mkdir(parents=True, exist_ok=True)
            _copy_atomically(data.log_segment, directory / f"{stem}.{LOG_EXT}", metadata.size_in_bytes)
            _copy_atomically(data.offset_index, directory / f"{stem}.{RemoteIndexType.OFFSET.value}")
            _copy_atomically(data.time_index, directory / f"{stem}.{RemoteIndexType.TIMESTAMP.value}")
            if data.transaction_index is not None:
                _copy_atomically(data.transaction_index, directory / f"{stem}.{RemoteIndexType.TRANSACTION.value}")
            atomic_write(directory / f"{stem}.{RemoteIndexType.PRODUCER_SNAPSHOT.value}", data.producer_snapshot)
            atomic_write(directory / f"{stem}.{RemoteIndexType.LEADER_EPOCH.value}", data.leader_epoch_index)
            fsync_dir(directory)
        except OSError as exc:
            with contextlib.suppress(RemoteStorageError, OSError):
                self.delete_log_segment_data(metadata)
            raise RemoteStorageError(f"copying segment {stem} of {metadata.topic_partition} failed: {exc}") from exc

    def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int | None = None
    ) -> BinaryIO:
        directory, stem = self._files(metadata)
        if start_position < 0 or (end_position is not None and end_position < start_position):
            raise RemoteStorageError(f"invalid position range {start_position}..{end_position}")
        try:
            f = open(directory / f"{stem}.{LOG_EXT}", "rb")  # noqa: SIM115 (the caller closes it)
        except OSError as exc:
            raise RemoteStorageError(f"remote segment {stem} of {metadata.topic_partition}: {exc}") from exc
        f.seek(start_position)
        return f

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: RemoteIndexType) -> bytes:
        directory, stem = self._files(metadata)
        try:
            return (directory / f"{stem}.{index_type.value}").read_bytes()
        except OSError as exc:
            raise RemoteStorageError(
                f"remote segment {stem} of {metadata.topic_partition} has no {index_type.name} index: {exc}"
            ) from exc

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        directory, stem = self._files(metadata)
        try:
            for path in directory.glob(f"{stem}.*"):
                path.unlink(missing_ok=True)
        except OSError as exc:
            raise RemoteStorageError(f"deleting remote segment {stem} of {metadata.topic_partition}: {exc}") from exc


class DirectoryRemoteLogMetadata:
    """Remote segments' metadata beside their data; satisfies
    :class:`odradek.interfaces.RemoteLogMetadataManager` (see the module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _dir(self, tp: TopicPartition) -> Path:
        return _partition_dir(self.root, tp) / METADATA_DIR

    def _record(self, metadata: RemoteLogSegmentMetadata) -> Path:
        return self._dir(metadata.topic_partition) / f"{_stem(metadata)}.json"

    def _claim(self, metadata: RemoteLogSegmentMetadata) -> Path:
        return self._dir(metadata.topic_partition) / f"{metadata.start_offset:020d}{FINISHED_SUFFIX}"

    def _write(self, metadata: RemoteLogSegmentMetadata) -> None:
        atomic_write(self._record(metadata), json.dumps(metadata.to_json()).encode())

    def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        try:
            self._dir(metadata.topic_partition).mkdir(parents=True, exist_ok=True)
            self._write(metadata)
        except OSError as exc:
            raise RemoteStorageError(f"recording remote segment {_stem(metadata)}: {exc}") from exc

    def update_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> bool:
        try:
            if metadata.state is RemoteSegmentState.COPY_SEGMENT_FINISHED and not self._claim_finish(metadata):
                return False
            self._write(metadata)
            return True
        except OSError as exc:
            raise RemoteStorageError(f"updating remote segment {_stem(metadata)}: {exc}") from exc

    def _claim_finish(self, metadata: RemoteLogSegmentMetadata) -> bool:
        """Create the start offset's claim naming this copy; False when another finished copy
        holds it. A claim whose copy never became FINISHED (a crash between the two writes) is
        taken over."""
        claim = self._claim(metadata)
        try:
            fd = os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            holder = claim.read_text().strip()
            if holder == metadata.segment_id:
                return True
            other = self._dir(metadata.topic_partition) / f"{metadata.start_offset:020d}-{holder}.json"
            if self._state_of(other) is RemoteSegmentState.COPY_SEGMENT_FINISHED:
                return False
            atomic_write(claim, metadata.segment_id.encode())
            return True
        try:
            os.write(fd, metadata.segment_id.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        return True

    @staticmethod
    def _state_of(record: Path) -> RemoteSegmentState | None:
        try:
            return RemoteLogSegmentMetadata.from_json(json.loads(record.read_bytes())).state
        except (OSError, ValueError):
            return None

    def list_remote_log_segments(self, tp: TopicPartition) -> list[RemoteLogSegmentMetadata]:
        directory = self._dir(tp)
        out: list[RemoteLogSegmentMetadata] = []
        try:
            names = sorted(os.listdir(directory))
        except FileNotFoundError:
            return out
        except OSError as exc:
            raise RemoteStorageError(f"listing remote segments of {tp}: {exc}") from exc
        for name in names:
            if not _RECORD.match(name):
                continue
            try:
                metadata = RemoteLogSegmentMetadata.from_json(json.loads((directory / name).read_bytes()))
            except FileNotFoundError:
                continue  # removed while listing
            except (OSError, ValueError) as exc:
                raise RemoteStorageError(f"remote segment record {directory / name} is unreadable: {exc}") from exc
            out.append(metadata)
        out.sort(key=lambda m: (m.start_offset, m.event_timestamp_ms))
        return out

    def remove_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        try:
            claim = self._claim(metadata)
            with contextlib.suppress(FileNotFoundError):
                if claim.read_text().strip() == metadata.segment_id:
                    claim.unlink()
            self._record(metadata).unlink(missing_ok=True)
        except OSError as exc:
            raise RemoteStorageError(f"removing remote segment record {_stem(metadata)}: {exc}") from exc
