"""All partition logs of one broker (Kafka's ``LogManager``): the segment engine's ``LogStorage``.

Each directory in ``log.dirs`` holds one ``<topic>-<partition>`` directory per log and the
per-dir checkpoint files in Kafka's text format: ``recovery-point-offset-checkpoint`` (below it
every byte is fsynced, so start-up only verifies what lies past it),
``log-start-offset-checkpoint`` (DeleteRecords), ``cleaner-offset-checkpoint`` (compaction
progress) and whatever the broker stores through :meth:`SegmentLogStorage.write_checkpoint`. A
``.lock`` file (``flock``) keeps a second broker out; ``.kafka_cleanshutdown`` is written by a
clean close and lets the next start skip recovery.

:meth:`SegmentLogStorage.run` does the background work in one nursery: fsync of rolled segments
and ``flush.ms`` flushes (``log.flush.scheduler.interval.ms``), retention
(``log.retention.check.interval.ms``), checkpoints (``log.flush.offset.checkpoint.interval.ms``),
unlinking retired files, and the cleaner (``log.cleaner.enable``, ``log.cleaner.backoff.ms``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import re
import resource
import shutil
import stat
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import trio

from odradek.broker.storage_failures import StorageFailureLog
from odradek.config import Config, ConfigError, TopicConfig
from odradek.errors import InvalidTopic, KafkaStorageError, LogDirNotFound
from odradek.interfaces import LogDirDescription, TopicPartition

from .checkpoint import atomic_write, fsync_dir, read_offsets, write_offsets
from .cleaner import (
    DEDUPE_BUFFER_KEY,
    DEFAULT_DEDUPE_BUFFER,
    DEFAULT_LOAD_FACTOR,
    LOAD_FACTOR_KEY,
    LogCleaner,
    dirty_ratio,
)
from .handles import HandleCache
from .loader import load_log, parse_partition_dir
from .log import STATE_SUFFIX, SegmentLog
from .reserve import SUPPORTED as RESERVE_SUPPORTED
from .retention import apply_retention
from .segment import DEFAULT_RESERVE_BYTES, SegmentContext

log = logging.getLogger(__name__)

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"
DELETE_DIR_SUFFIX = "-delete"
#: a log-dir move's copy in its destination dir (KIP-113): ``<topic>-<partition>.<uuid>-future``
FUTURE_DIR_SUFFIX = "-future"
#: written (fsynced) into a future log's directory once it holds everything the current log
#: has: from then on the future log wins, and a start after a crash finishes the swap
SWAP_MARKER = ".future-complete"
#: longest file name Linux file systems take (NAME_MAX)
NAME_MAX = 255
RESERVED_CHECKPOINTS = frozenset({RECOVERY_POINT_CHECKPOINT, LOG_START_CHECKPOINT, CLEANER_CHECKPOINT})
FLUSH_CONCURRENCY = 16
#: worker threads that may ask the log dirs' volumes (statvfs) at one time: a stuck mount keeps
#: its thread for as long as it is stuck, and DescribeLogDirs requests then wait for this one
#: instead of taking trio's shared worker threads (which kazoo, fsyncs and big frames use) one by one
LOG_DIR_STAT_THREADS = 1
MAX_OPEN_FILES_KEY = "storage.segment.max.open.files"
MAX_MAPPED_INDEXES_KEY = "storage.segment.max.mapped.indexes"
RESERVE_BYTES_KEY = "storage.segment.reserve.bytes"
_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,200}$")
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


def delete_dir_name(tp: TopicPartition) -> str:
    """Kafka's ``logDeleteDirName``: ``<topic>-<partition>.<uuid>-delete`` with the topic cut
    so the name fits NAME_MAX (a 249-character topic plus the suffix would not)."""
    suffix = f"-{tp.partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
    return tp.topic[: NAME_MAX - len(suffix)] + suffix


def future_dir_name(tp: TopicPartition) -> str:
    """Kafka's ``logFutureDirName``: ``<topic>-<partition>.<uuid>-future``. Unlike a ``-delete``
    name it is parsed back at start-up, so the topic is never cut: a name that does not fit
    NAME_MAX cannot be moved (KafkaStorageError)."""
    name = f"{tp}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}"
    if len(name) > NAME_MAX:
        raise KafkaStorageError(f"the topic name of {tp} is too long for a future log directory name")
    return name


def parse_future_dir(name: str) -> TopicPartition | None:
    """``<topic>-<partition>.<uuid>-future`` -> TopicPartition; None for any other name."""
    if not name.endswith(FUTURE_DIR_SUFFIX):
        return None
    stem, dot, unique = name[: -len(FUTURE_DIR_SUFFIX)].rpartition(".")
    if not dot or len(unique) != 32 or any(c not in "0123456789abcdef" for c in unique):
        return None
    return parse_partition_dir(stem)


def _finish_committed_swaps(log_dirs: Sequence[Path]) -> None:
    """Start-up, before any log is loaded: finish each log-dir move whose future log was marked
    complete (:data:`SWAP_MARKER`) before a crash. The current log (if still under its name) is
    renamed ``-delete`` (removed by the load that follows), then the future log takes the
    partition's name. Each step is a rename, so a crash here too is finished by the next start."""
    current: dict[TopicPartition, Path] = {}
    committed: list[tuple[TopicPartition, Path]] = []
    for d in log_dirs:
        for entry in os.scandir(d):
            if not entry.is_dir():
                continue
            future = parse_future_dir(entry.name)
            if future is not None:
                if os.path.exists(os.path.join(entry.path, SWAP_MARKER)):
                    committed.append((future, Path(entry.path)))
                continue
            tp = parse_partition_dir(entry.name)
            if tp is not None:
                current[tp] = Path(entry.path)
                # the swap's last step (the marker's removal) may not have happened
                Path(entry.path, SWAP_MARKER).unlink(missing_ok=True)
    for tp, future_dir in committed:
        old = current.get(tp)
        if old is not None:
            os.rename(old, old.with_name(delete_dir_name(tp)))
            fsync_dir(old.parent)
        final = future_dir.with_name(str(tp))
        os.rename(future_dir, final)
        fsync_dir(final.parent)
        (final / SWAP_MARKER).unlink(missing_ok=True)
        log.info("%s: finished the move of its log to %s interrupted by a crash", tp, final.parent)


def _option(config: Config, key: str, default: Any) -> Any:
    """A plugin-declared key's value, or ``default`` when the config does not declare it
    (configs built without the plugin manager, as in unit tests)."""
    try:
        return config[key]
    except (KeyError, ConfigError):
        return default


def dedupe_budget(config: Config) -> int:
    """Bytes the cleaner's key map may hold: ``log.cleaner.dedupe.buffer.size`` times
    ``log.cleaner.io.buffer.load.factor``, as Kafka sizes its offset map (one cleaner thread)."""
    size = int(_option(config, DEDUPE_BUFFER_KEY, DEFAULT_DEDUPE_BUFFER))
    factor = float(_option(config, LOAD_FACTOR_KEY, DEFAULT_LOAD_FACTOR))
    if not 0 < factor <= 1:
        raise ConfigError(f"invalid value for {LOAD_FACTOR_KEY!r}: {factor} is not in (0, 1]")
    return int(size * factor)


def default_open_files() -> int:
    """A quarter of the process's fd limit, at most 4096 (maps take as many again): half the
    limit stays for sockets."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(64, min(soft // 4 if soft > 0 else 1024, 4096))


def _remove_all(paths: list[Path]) -> None:
    """Unlink retired files and remove deleted partition directories (worker thread)."""
    for path in paths:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _out_of_space(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or what caused it) is a full disk or quota: a state that passes."""
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        exc = exc.__cause__
    return False


def _first_error(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


class SegmentLogStorage:
    """Segmented logs in ``log.dirs``; satisfies :class:`odradek.interfaces.LogStorage`."""

    def __init__(
        self,
        config: Config,
        *,
        time_ms: Callable[[], int] | None = None,
        max_open_files: int | None = None,
        max_mapped_indexes: int | None = None,
    ) -> None:
        self.config = config
        self.log_dirs = [d.resolve() for d in config.log_dirs]
        files = max_open_files or int(_option(config, MAX_OPEN_FILES_KEY, 0)) or default_open_files()
        # every map holds a descriptor too (Python's mmap dups it): at most 2 * files in all
        maps = max_mapped_indexes or int(_option(config, MAX_MAPPED_INDEXES_KEY, 0)) or files
        self.ctx = SegmentContext(
            HandleCache(files),
            HandleCache(maps),
            time_ms or _now_ms,
            int(_option(config, RESERVE_BYTES_KEY, DEFAULT_RESERVE_BYTES)) if RESERVE_SUPPORTED else 0,
        )
        self._logs: dict[TopicPartition, SegmentLog] = {}
        #: log-dir moves under way (KIP-113): the copy of a partition's log in another dir
        self._futures: dict[TopicPartition, SegmentLog] = {}
        #: where a partition's log goes when it is created (AlterReplicaLogDirs for a partition
        #: not hosted yet: Kafka's ``preferredLogDirs``)
        self._preferred_dirs: dict[TopicPartition, Path] = {}
        self._retired: list[Path] = []
        self._lock_fds: list[int] = []
        self._opened = False
        self._closed = False
        self._log_start_dirty = False
        self._cleaner_dirty = False
        #: a truncation lowered a recovery point (SegmentLog.recovery_point_lowered) since the
        #: recovery points were last written
        self._recovery_dirty = False
        self._uncleanable: set[TopicPartition] = set()
        self._checkpoint_lock = trio.Lock()
        #: the worker threads that ask the log dirs' volumes (describe_log_dirs) at one time
        self._log_dir_stats = trio.CapacityLimiter(LOG_DIR_STAT_THREADS)
        #: deleted logs (or, after a start, logs absent from their dir) whose entries may still be
        #: in a checkpoint file: a log created again under the name first rewrites the files
        self._deleted_unpersisted: set[TopicPartition] = set()
        #: one writer of the storage's checkpoint files at a time (worker thread or trio thread);
        #: each snapshot is numbered so an older one never replaces a newer one's file
        self._file_lock = threading.Lock()
        self._snapshot_seq = 0
        self._written_seq: dict[Path, int] = {}
        #: log dirs found offline (removed, unmounted, read-only after an I/O error) -> (why, the
        #: logs they held): their logs are dropped, and they stay offline until the next start
        self._offline: dict[Path, tuple[str, tuple[TopicPartition, ...]]] = {}
        codecs = config.plugins.codecs() if getattr(config, "plugins", None) is not None else None
        expiration = int(_option(config, "producer.id.expiration.ms", 86_400_000))
        self.cleaner = LogCleaner(codecs, self._on_cleaned, dedupe_budget(config), expiration)
        #: the background tasks' failures (a full disk, no file descriptors left), per task: one
        #: ERROR when they start, at most one a minute while they go on, INFO when the task works
        #: again -- the task retries every tick, so logging each failure flooded the log
        self.background_failures = {
            task: StorageFailureLog(log, task, clock=trio.current_time)
            for task in ("scheduled flushes", "retention checks", "checkpoint writes", "log cleaner rounds")
        }

    # -- open ----------------------------------------------------------------------------------
    async def open(self) -> None:
        if self._opened:
            return
        for d in self.log_dirs:
            try:
                d.mkdir(parents=True, exist_ok=True)
                fd = os.open(d / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as exc:  # a file in the way, no permission, a read-only mount
                self._release_locks()
                raise KafkaStorageError(f"log dir {d} cannot be created or written: {exc}") from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                self._release_locks()
                raise KafkaStorageError(f"log dir {d} is in use by another process: {exc}") from exc
            self._lock_fds.append(fd)
        try:
            await trio.to_thread.run_sync(self._load_all)
        except BaseException:
            for lg in self._logs.values():
                lg.close_files()
            self._logs.clear()
            self._release_locks()
            raise
        for d in self.log_dirs:
            (d / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
        self._opened = True

    def _load_all(self) -> None:
        topic_defaults = self.config.topic_config()
        try:
            _finish_committed_swaps(self.log_dirs)
        except OSError as exc:
            raise KafkaStorageError(f"finishing an interrupted log-dir move failed: {exc}") from exc
        futures: list[tuple[TopicPartition, Path]] = []
        for d in self.log_dirs:
            clean = (d / CLEAN_SHUTDOWN_FILE).exists()
            recovery = read_offsets(d / RECOVERY_POINT_CHECKPOINT)
            starts = read_offsets(d / LOG_START_CHECKPOINT)
            dirty = read_offsets(d / CLEANER_CHECKPOINT)
            loaded: set[TopicPartition] = set()
            for entry in sorted(os.scandir(d), key=lambda e: e.name):
                if not entry.is_dir():
                    continue
                if entry.name.endswith(DELETE_DIR_SUFFIX):
                    shutil.rmtree(entry.path, ignore_errors=True)
                    continue
                future = parse_future_dir(entry.name)
                if future is not None:
                    futures.append((future, Path(entry.path)))
                    continue
                tp = parse_partition_dir(entry.name)
                if tp is None:
                    continue
                if tp in self._logs:
                    raise KafkaStorageError(f"{tp} is in two log dirs: {self._logs[tp].dir} and {entry.path}")
                try:
                    lg = load_log(
                        Path(entry.path),
                        tp,
                        topic_defaults,
                        self.ctx,
                        recovery_point=recovery.get(tp),
                        log_start_offset=starts.get(tp),
                        clean_shutdown=clean,
                        retire=self._retire,
                        on_log_start_change=self._on_log_start_change,
                    )
                except OSError as exc:  # a full disk while recovery rewrites indexes, an I/O error
                    raise KafkaStorageError(f"loading the log of {tp} in {entry.path} failed: {exc}") from exc
                lg.first_dirty_offset = max(dirty.get(tp, 0), lg.log_start_offset)
                if lg.first_dirty_offset > lg.log_end_offset:
                    # Kafka's cleanableOffsets: a cleaner offset past the log's end belongs to
                    # another log (or a lost tail); cleaning starts again from the log start
                    log.warning(
                        "%s: the cleaner offset checkpoint (%d) is past the log end offset (%d); "
                        "resetting it to the log start offset %d",
                        tp, lg.first_dirty_offset, lg.log_end_offset, lg.log_start_offset,
                    )  # fmt: skip
                    lg.first_dirty_offset = lg.log_start_offset
                self._logs[tp] = lg
                loaded.add(tp)
            # entries of logs that are not in this dir (deleted before a crash let the checkpoint
            # be rewritten): a log created under that name must not inherit them
            self._deleted_unpersisted |= (set(recovery) | set(starts) | set(dirty)) - loaded
        for tp, directory in futures:
            self._load_future(tp, directory, topic_defaults)
        log.info("loaded %d partition logs from %s", len(self._logs), ", ".join(map(str, self.log_dirs)))

    def _load_future(self, tp: TopicPartition, directory: Path, config: TopicConfig) -> None:
        """A future log found at start-up that was not marked complete: the broker's copy goes
        on into it (cutting first whatever the current log does not have, see
        ``odradek.broker.alter_log_dirs.reconcile``). One without a current
        log, or a second for the same partition, has nothing to be copied from: it goes."""
        if tp not in self._logs or tp in self._futures:
            log.warning("%s: removing the future log %s: no current log to copy from", tp, directory)
            shutil.rmtree(directory, ignore_errors=True)
            return
        try:
            self._futures[tp] = self._open_log(directory, tp, config)
        except OSError as exc:
            raise KafkaStorageError(f"loading the future log of {tp} in {directory} failed: {exc}") from exc

    def _open_log(self, directory: Path, tp: TopicPartition, config: TopicConfig) -> SegmentLog:
        """A log in ``directory`` (created empty, or recovered from the start)."""
        return load_log(
            directory,
            tp,
            config,
            self.ctx,
            recovery_point=None,
            log_start_offset=None,
            clean_shutdown=False,
            retire=self._retire,
            on_log_start_change=self._on_log_start_change,
        )

    # -- logs ----------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if not self._opened or self._closed:
            raise KafkaStorageError("the log storage is not open")

    def get_log(self, tp: TopicPartition) -> SegmentLog | None:
        return self._logs.get(tp)

    def get_or_create_log(self, tp: TopicPartition, config: TopicConfig) -> SegmentLog:
        self._check_open()
        existing = self._logs.get(tp)
        if existing is not None:
            existing.update_config(config)
            return existing
        if not _TOPIC.match(tp.topic) or tp.topic in {".", ".."} or tp.partition < 0:
            raise InvalidTopic(f"cannot store a log for {tp.topic!r} partition {tp.partition}")
        if tp in self._deleted_unpersisted:
            self._persist_deletions_now(tp)
        online = self._online_dirs()
        if not online:
            raise KafkaStorageError(f"cannot create the log for {tp}: every log dir is offline")
        preferred = self._preferred_dirs.pop(tp, None)
        if preferred in online:
            parent = preferred
        elif len(online) == 1:
            # counting every hosted log per directory is O(logs) of pathlib work per new log:
            # quadratic when a 1,000-partition topic is created (seconds of broker CPU)
            parent = online[0]
        else:
            counts = {d: 0 for d in online}
            for lg in self._logs.values():
                counts[lg.dir.parent] = counts.get(lg.dir.parent, 0) + 1
            parent = min(online, key=lambda d: counts.get(d, 0))
        directory = parent / str(tp)
        try:
            directory.mkdir(exist_ok=True)
            lg = self._open_log(directory, tp, config)
        except OSError as exc:
            raise KafkaStorageError(f"cannot create the log for {tp} in {parent}: {exc}") from exc
        self._logs[tp] = lg
        return lg

    def all_logs(self) -> Mapping[TopicPartition, SegmentLog]:
        return MappingProxyType(self._logs)

    # -- log-dir moves (KIP-113) -----------------------------------------------------------------
    def _online_dir(self, log_dir: str) -> Path:
        """``log_dir`` as one of ``log.dirs``: LogDirNotFound for another path, KafkaStorageError
        for an offline one."""
        wanted = Path(log_dir)
        for d in self.log_dirs:
            if d == wanted:
                if d in self._offline:
                    raise KafkaStorageError(f"log dir {d} is offline")
                return d
        raise LogDirNotFound(f"{log_dir} is not one of this broker's log dirs")

    def prefer_log_dir(self, tp: TopicPartition, log_dir: str) -> None:
        """Create ``tp``'s log in ``log_dir`` when it is created (it is not hosted yet)."""
        self._preferred_dirs[tp] = self._online_dir(log_dir)

    def get_future_log(self, tp: TopicPartition) -> SegmentLog | None:
        return self._futures.get(tp)

    def all_future_logs(self) -> Mapping[TopicPartition, SegmentLog]:
        return MappingProxyType(self._futures)

    def create_future_log(self, tp: TopicPartition, log_dir: str) -> SegmentLog:
        """An empty future log of ``tp`` in ``log_dir`` (the one there already, if any). The
        current log must exist in another dir; a future log in a third dir must be deleted first."""
        self._check_open()
        target = self._online_dir(log_dir)
        current = self._logs.get(tp)
        if current is None:
            raise KafkaStorageError(f"{tp} has no log on this broker to move")
        if current.dir.parent == target:
            raise ValueError(f"the log of {tp} is in {target} already")
        existing = self._futures.get(tp)
        if existing is not None:
            if existing.dir.parent == target:
                return existing
            raise ValueError(f"{tp} is being moved to {existing.dir.parent} already")
        directory = target / future_dir_name(tp)
        try:
            directory.mkdir()
            lg = self._open_log(directory, tp, current.config)
        except OSError as exc:
            shutil.rmtree(directory, ignore_errors=True)
            raise KafkaStorageError(f"cannot create the future log of {tp} in {target}: {exc}") from exc
        self._futures[tp] = lg
        log.info("%s: moving its log from %s to %s", tp, current.dir.parent, target)
        return lg

    def _withdraw_marker(self, tp: TopicPartition, future: SegmentLog) -> None:
        """A promotion that failed before the renames: the future log is not complete any more
        once the current log takes appends again."""
        try:
            (future.dir / SWAP_MARKER).unlink(missing_ok=True)
            fsync_dir(future.dir)
        except OSError as exc:  # its dir is failing: the broker abandons the move and deletes it
            log.error("%s: cannot withdraw the completion marker of its future log: %s", tp, exc)

    async def delete_future_log(self, tp: TopicPartition) -> None:
        """Abandon a move: the future log is renamed ``-delete`` and removed in the background."""
        lg = self._futures.pop(tp, None)
        if lg is None:
            return
        with contextlib.suppress(OSError):
            lg.close_files()
        target = lg.dir.with_name(delete_dir_name(tp))
        try:
            os.rename(lg.dir, target)
        except OSError:
            target = lg.dir
        self._retired.append(target)

    def replace_current_with_future_log(self, tp: TopicPartition) -> SegmentLog:
        """Promote ``tp``'s future log (which must hold exactly what the current log holds) to be
        its log, as Kafka's ``replaceCurrentWithFutureLog``. Synchronous, so no append comes in
        between on the trio thread; its fsyncs cover only what the copy appended since its last
        flush, and the state files (producer snapshots) copied over.

        Crash safety: the future log is fsynced and marked complete (:data:`SWAP_MARKER`) first;
        until then a start keeps the current log. Then the current log is renamed ``-delete``
        and the future log takes the partition's name; a start after a crash anywhere from the
        marker on finishes these renames (:func:`_finish_committed_swaps`)."""
        future = self._futures.get(tp)
        current = self._logs.get(tp)
        if future is None or current is None:
            raise KafkaStorageError(f"{tp} has no log-dir move under way")
        if (future.log_end_offset, future.log_start_offset) != (current.log_end_offset, current.log_start_offset):
            raise ValueError(
                f"{tp}: the future log ({future.log_start_offset}..{future.log_end_offset}) does not match the "
                f"current log ({current.log_start_offset}..{current.log_end_offset})"
            )
        old_dir, final = current.dir, future.dir.with_name(str(tp))
        deleted = old_dir.with_name(delete_dir_name(tp))
        try:
            for state in old_dir.glob("*" + STATE_SUFFIX):
                atomic_write(future.dir / state.name, state.read_bytes())
            future.flush_now()
            atomic_write(future.dir / SWAP_MARKER, b"")
        except OSError as exc:
            raise KafkaStorageError(f"{tp}: cannot complete the future log in {future.dir.parent}: {exc}") from exc
        try:
            os.rename(old_dir, deleted)
        except OSError as exc:
            # the current log stays the partition's: the marker must go, or a crash after later
            # appends would promote the copy without them
            self._withdraw_marker(tp, future)
            raise KafkaStorageError(f"{tp}: renaming its log for the move failed: {exc}") from exc
        try:
            os.rename(future.dir, final)
        except OSError as exc:
            try:
                os.rename(deleted, old_dir)
            except OSError as back_exc:
                # on disk the move is committed (the marker, the current log renamed): the next
                # start finishes it. Until then the copy must stay as it is, out of reach of
                # the broker's clean-up of a failed move
                self._futures.pop(tp, None)
                with contextlib.suppress(OSError):
                    future.close_files()
                log.error("%s: the move to %s is half done; a restart finishes it: %s", tp, final.parent, back_exc)
            else:
                self._withdraw_marker(tp, future)
            raise KafkaStorageError(f"{tp}: renaming the future log for the move failed: {exc}") from exc
        future.relocate(final)
        with contextlib.suppress(OSError):  # durable at the next start's pass otherwise
            fsync_dir(old_dir.parent)
            fsync_dir(final.parent)
            (final / SWAP_MARKER).unlink()
        future.high_watermark = current.high_watermark
        future.remote_copied_end = current.remote_copied_end
        with contextlib.suppress(OSError):
            current.close_files()
        del self._futures[tp]
        self._logs[tp] = future
        self._uncleanable.discard(tp)
        self._retired.append(deleted)
        # every dir's checkpoints are rewritten by the next flush tick: the old dir's still
        # name the partition, which the loader ignores for a log it does not hold
        self._recovery_dirty = self._log_start_dirty = self._cleaner_dirty = True
        log.info("%s: its log moved from %s to %s", tp, old_dir.parent, final.parent)
        return future

    async def describe_log_dirs(self) -> Sequence[LogDirDescription]:
        """Each of ``log.dirs`` with its logs and its volume's size and free space (statvfs).

        A dir that cannot be reached any more (removed, unmounted, an I/O error) or whose file
        system turned read-only (what ext4 and xfs do on an I/O error) is taken offline, as
        Kafka's LogDirFailureChannel does: its logs are released without flushing (nothing can
        be written there) and dropped, no new log is placed in it, and it stays offline, listing
        the logs it held, until the next start. A full disk is not offline here (see
        ``odradek.broker.storage_failures``). The online dirs' volumes are asked in a worker
        thread (:data:`LOG_DIR_STAT_THREADS` at most): a stuck mount holds only the callers of
        this method; the logs are listed, and a failed dir's taken offline, on the trio thread,
        where they change."""
        asked = tuple(self._online_dirs())
        volumes = await trio.to_thread.run_sync(_volumes, asked, limiter=self._log_dir_stats, abandon_on_cancel=True)
        for d, volume in zip(asked, volumes, strict=True):
            if isinstance(volume, OSError) and d not in self._offline:  # not by a concurrent call
                self._take_offline(d, f"log dir {d} is offline: {volume}")
        held: dict[Path, list[TopicPartition]] = {d: [] for d in self.log_dirs}
        for tp, lg in self._logs.items():
            held.setdefault(lg.dir.parent, []).append(tp)
        moving: dict[Path, list[TopicPartition]] = {d: [] for d in self.log_dirs}
        for tp, lg in self._futures.items():
            moving.setdefault(lg.dir.parent, []).append(tp)
        sizes = {d: v for d, v in zip(asked, volumes, strict=True) if not isinstance(v, OSError)}
        out = []
        for d in self.log_dirs:
            offline = self._offline.get(d)
            if offline is not None:
                out.append(LogDirDescription(str(d), offline[1], error=offline[0]))
            else:
                total, usable = sizes[d]
                out.append(
                    LogDirDescription(
                        str(d),
                        tuple(sorted(held[d])),
                        total_bytes=total,
                        usable_bytes=usable,
                        future_partitions=tuple(sorted(moving[d])),
                    )
                )
        return out

    def _take_offline(self, d: Path, why: str) -> None:
        """Drop the logs of a failed dir, releasing their descriptors and maps without writing
        anything (their files are gone or cannot be written); the dir stays offline."""
        lost = tuple(sorted(tp for tp, lg in self._logs.items() if lg.dir.parent == d))
        for tp in lost:
            lg = self._logs.pop(tp)
            self._uncleanable.discard(tp)
            with contextlib.suppress(OSError):
                lg.abandon()
        for tp in [tp for tp, lg in self._futures.items() if lg.dir.parent == d or tp in lost]:
            # a move to the failed dir fails; one from it has nothing left to copy from
            with contextlib.suppress(OSError):
                self._futures.pop(tp).abandon()
        self._offline[d] = (why, lost)

    def _online_dirs(self) -> list[Path]:
        return [d for d in self.log_dirs if d not in self._offline]

    async def delete_log(self, tp: TopicPartition) -> None:
        await self.delete_future_log(tp)
        self._preferred_dirs.pop(tp, None)
        lg = self._logs.pop(tp, None)
        if lg is None:
            return
        lg.close_files()
        self._uncleanable.discard(tp)
        # its checkpoint entries go with the next write (the flusher's, within
        # log.flush.scheduler.interval.ms), or at once if a log of that name is created first
        self._deleted_unpersisted.add(tp)
        self._log_start_dirty = True
        target = lg.dir.with_name(delete_dir_name(tp))
        try:
            os.rename(lg.dir, target)
        except OSError as exc:
            # the directory must not stay under its own name: a topic created again would reopen it
            log.warning("%s: cannot rename %s for deletion (%s); removing it in place", tp, lg.dir, exc)
            try:
                await trio.to_thread.run_sync(shutil.rmtree, lg.dir)
            except OSError as rm_exc:
                raise KafkaStorageError(f"cannot delete the log of {tp}: {exc}; {rm_exc}") from rm_exc
        else:
            self._retired.append(target)  # removed by the background flusher (or close, or next start)
        log.info("deleted the log of %s", tp)

    # -- checkpoints ---------------------------------------------------------------------------
    def write_checkpoint(self, name: str, offsets: Mapping[TopicPartition, int]) -> None:
        self._check_open()
        if not _NAME.match(name) or name in RESERVED_CHECKPOINTS:
            raise ValueError(f"{name!r} is not a checkpoint name the broker may write")
        online = self._online_dirs()
        per_dir: dict[Path, dict[TopicPartition, int]] = {d: {} for d in online}
        for tp, offset in offsets.items():
            lg = self._logs.get(tp)
            if lg is None and not online:
                raise KafkaStorageError(f"writing checkpoint {name!r} failed: every log dir is offline")
            per_dir[lg.dir.parent if lg is not None else online[0]][tp] = offset
        for d, entries in per_dir.items():
            try:
                write_offsets(d / name, entries)
            except OSError as exc:
                raise KafkaStorageError(f"writing checkpoint {name!r} failed: {exc}") from exc

    def read_checkpoint(self, name: str) -> dict[TopicPartition, int]:
        if not _NAME.match(name):
            raise ValueError(f"{name!r} is not a checkpoint name")
        out: dict[TopicPartition, int] = {}
        for d in self._online_dirs():
            for tp, offset in read_offsets(d / name).items():
                lg = self._logs.get(tp)
                # a log moved to another dir may still be named in its old dir's file (until
                # the next write): the entry of the dir that holds the log wins
                if tp not in out or (lg is not None and lg.dir.parent == d):
                    out[tp] = offset
        return out

    def _per_dir(self, value: Callable[[SegmentLog], int]) -> dict[Path, dict[TopicPartition, int]]:
        per_dir: dict[Path, dict[TopicPartition, int]] = {d: {} for d in self._online_dirs()}
        for tp, lg in self._logs.items():
            per_dir.setdefault(lg.dir.parent, {})[tp] = value(lg)
        return per_dir

    def _snapshot(self, *, recovery: bool) -> tuple[int, list[tuple[Path, dict[TopicPartition, int]]]]:
        """The storage's own checkpoint files as they are now, numbered (trio thread)."""
        files: list[tuple[Path, dict[TopicPartition, int]]] = []
        if recovery:
            files += [
                (d / RECOVERY_POINT_CHECKPOINT, o) for d, o in self._per_dir(lambda lg: lg.recovery_point).items()
            ]
        files += [(d / LOG_START_CHECKPOINT, o) for d, o in self._per_dir(lambda lg: lg.log_start_offset).items()]
        files += [(d / CLEANER_CHECKPOINT, o) for d, o in self._per_dir(lambda lg: lg.first_dirty_offset).items()]
        self._snapshot_seq += 1
        return self._snapshot_seq, files

    def _write_snapshot(self, seq: int, files: list[tuple[Path, dict[TopicPartition, int]]]) -> None:
        """Write a snapshot's files, skipping any a newer snapshot has already written (any thread)."""
        with self._file_lock:
            for path, offsets in files:
                if self._written_seq.get(path, 0) > seq:
                    continue
                write_offsets(path, offsets)
                self._written_seq[path] = seq

    async def write_own_checkpoints(self, *, recovery: bool = True) -> None:
        """Persist the recovery points, log start offsets and cleaner offsets of every log dir."""
        async with self._checkpoint_lock:
            self._log_start_dirty = self._cleaner_dirty = False
            if recovery:
                self._recovery_dirty = False
            covered = set(self._deleted_unpersisted)
            # a deleted log's entries go from all three files (its recovery point too)
            seq, files = self._snapshot(recovery=recovery or bool(covered))
            try:
                await trio.to_thread.run_sync(self._write_snapshot, seq, files)
            except OSError as exc:
                self._log_start_dirty = self._cleaner_dirty = True  # try again next time
                self._recovery_dirty = self._recovery_dirty or recovery
                raise KafkaStorageError(f"writing checkpoints failed: {exc}") from exc
            self._deleted_unpersisted -= covered

    def _persist_deletions_now(self, tp: TopicPartition) -> None:
        """Before a log is created under the name of one deleted since the checkpoints were last
        written: write them now, without the old log's entries (Kafka rewrites a dir's
        checkpoints when it deletes a log). Else a crash before the next write would load the
        new log with the old one's log start offset -- past the new log's end, which truncates
        it fully -- and its recovery point and cleaner offset. Synchronous (the caller is), and
        rare: only a topic created again within a flush interval of its deletion gets here."""
        covered = set(self._deleted_unpersisted)
        seq, files = self._snapshot(recovery=True)
        try:
            self._write_snapshot(seq, files)
        except OSError as exc:
            raise KafkaStorageError(
                f"cannot create the log for {tp}: the checkpoints still name its deleted predecessor "
                f"and could not be rewritten: {exc}"
            ) from exc
        self._deleted_unpersisted -= covered

    def _on_log_start_change(self, _log: SegmentLog) -> None:
        self._log_start_dirty = True

    def _on_cleaned(self, _log: SegmentLog) -> None:
        self._cleaner_dirty = True

    def _retire(self, paths: list[Path]) -> None:
        self._retired += paths

    async def _unlink_retired(self) -> None:
        paths, self._retired = self._retired, []
        if paths:
            await trio.to_thread.run_sync(_remove_all, paths)

    # -- background work -----------------------------------------------------------------------
    async def flush_tick(self) -> None:
        """fsync rolled segments, flush logs due by flush.ms, unlink retired files, persist
        changed log start / cleaner offsets."""
        now = self.ctx.time_ms()
        for lg in list(self._logs.values()):
            if lg.recovery_point_lowered:
                lg.recovery_point_lowered = False
                self._recovery_dirty = True
            # most logs have nothing to do: decide that without a coroutine per log, since this
            # runs every log.flush.scheduler.interval.ms over thousands of partitions
            if lg.closed or not (lg.rolled_unflushed or lg.flush_due(now)):
                continue
            await lg.flush_rolled()
            if lg.flush_due(now):
                await lg.flush()
        await self._unlink_retired()
        if self._recovery_dirty or self._log_start_dirty or self._cleaner_dirty:
            # a lowered recovery point must reach the disk before appends past it are trusted
            await self.write_own_checkpoints(recovery=self._recovery_dirty)

    async def run_retention(self) -> int:
        """One retention pass over every log; returns the bytes freed."""
        now = self.ctx.time_ms()
        freed = 0
        for lg in list(self._logs.values()):
            if not lg.closed:
                freed += apply_retention(lg, now)
        await self._unlink_retired()
        if self._log_start_dirty:
            await self.write_own_checkpoints(recovery=False)
        return freed

    async def run_cleaner(self) -> int:
        """Compact every log that is due, dirtiest first; returns how many rounds ran."""
        now = self.ctx.time_ms()
        candidates = []
        for tp, lg in list(self._logs.items()):
            if lg.config.compact and not lg.closed and tp not in self._uncleanable:
                candidates.append((dirty_ratio(lg, now)[0], tp, lg))
        rounds = 0
        no_space: BaseException | None = None
        for _ratio, tp, lg in sorted(candidates, key=lambda c: -c[0]):
            try:
                if await self.cleaner.clean(lg, now):
                    rounds += 1
            except (OSError, KafkaStorageError, ValueError) as exc:
                if _out_of_space(exc):
                    # a full disk passes: the log stays cleanable, the cleaner loop logs the
                    # failure rate-limited and tries again after log.cleaner.backoff.ms
                    no_space = no_space or exc
                    continue
                if self._logs.get(tp) is not lg:  # moved to another dir (or deleted) meanwhile
                    log.info("compaction of %s stopped: its log was replaced meanwhile (%r)", tp, exc)
                    continue
                log.error("compaction of %s failed, not cleaning it again until restart: %r", tp, exc)
                self._uncleanable.add(tp)
            except Exception as exc:  # a corrupt batch or a missing codec: keep serving the log
                log.exception("compaction of %s failed, not cleaning it again until restart: %r", tp, exc)
                self._uncleanable.add(tp)
        await self._unlink_retired()
        if self._cleaner_dirty:
            await self.write_own_checkpoints(recovery=False)
        if no_space is not None:
            raise KafkaStorageError(f"compaction is waiting for disk space: {no_space}") from no_space
        return rounds

    async def _dir_went_offline(self, offline_before: int) -> bool:
        """After a failed background task: whether a log dir went offline since it started
        (checked now, in the worker thread). Then the failure is the dir's, which the broker
        reports, and the next tick works without it."""
        await self.describe_log_dirs()
        return len(self._offline) != offline_before

    def _log_dirs_text(self) -> str:
        return ", ".join(str(d) for d in self.log_dirs)

    async def _every(self, interval_ms: int, work: Callable[[], Awaitable[Any]], task: str) -> None:
        """Run ``work`` every interval; a storage failure is retried at the next tick and logged
        rate-limited (:attr:`background_failures`)."""
        failures = self.background_failures[task]
        while True:
            await trio.sleep(interval_ms / 1000)
            offline = len(self._offline)
            try:
                await work()
            except (OSError, KafkaStorageError) as exc:
                if not await self._dir_went_offline(offline):
                    failures.failed(self._log_dirs_text(), exc)
            else:
                failures.succeeded(self._log_dirs_text())

    async def _cleaner_loop(self) -> None:
        backoff = int(self.config["log.cleaner.backoff.ms"]) / 1000
        failures = self.background_failures["log cleaner rounds"]
        while True:
            offline = len(self._offline)
            try:
                rounds = await self.run_cleaner()
            except (OSError, KafkaStorageError) as exc:
                if not await self._dir_went_offline(offline):
                    failures.failed(self._log_dirs_text(), exc)
                rounds = 0
            else:
                failures.succeeded(self._log_dirs_text())
            await trio.sleep(0 if rounds else backoff)

    async def run(self) -> None:
        self._check_open()
        cfg = self.config
        checkpoint_ms = cfg["log.flush.offset.checkpoint.interval.ms"]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                self._every, cfg["log.flush.scheduler.interval.ms"], self.flush_tick, "scheduled flushes"
            )
            nursery.start_soon(
                self._every, cfg["log.retention.check.interval.ms"], self.run_retention, "retention checks"
            )
            nursery.start_soon(self._every, checkpoint_ms, self.write_own_checkpoints, "checkpoint writes")
            if cfg["log.cleaner.enable"]:
                nursery.start_soon(self._cleaner_loop)

    # -- close ---------------------------------------------------------------------------------
    async def flush_all(self) -> None:
        """fsync every log, several at a time (fsync waits on the disk, not on the GIL)."""
        limiter = trio.CapacityLimiter(FLUSH_CONCURRENCY)

        async def flush(lg: SegmentLog) -> None:
            async with limiter:
                await lg.flush()

        async with trio.open_nursery() as nursery:
            for lg in [*self._logs.values(), *self._futures.values()]:
                nursery.start_soon(flush, lg)

    async def close(self) -> None:
        if self._closed or not self._opened:
            self._release_locks()
            return
        # a failed flush or checkpoint (a full disk) is logged and close goes on: the files are
        # closed, the locks released, and no clean-shutdown marker is written, so the next start
        # recovers past the last good checkpoint as after a crash
        clean = True
        try:
            for lg in [*self._logs.values(), *self._futures.values()]:
                lg.prepare_close()
            try:
                await self.flush_all()
            except* (OSError, KafkaStorageError) as group:
                clean = False
                log.error("close: flushing logs failed, the next start recovers them: %s", _first_error(group))
            failed: list[tuple[TopicPartition, OSError]] = []
            for tp, lg in [*self._logs.items(), *self._futures.items()]:
                try:
                    lg.close_files()
                except OSError as exc:  # e.g. its log dir removed under the running broker
                    failed.append((tp, exc))
            if failed:
                clean = False
                log.error(
                    "close: %d partition log(s) could not be closed cleanly (%s), the next start recovers them: %s",
                    len(failed),
                    ", ".join(str(tp) for tp, _ in failed[:5]) + (", ..." if len(failed) > 5 else ""),
                    failed[0][1],
                )
            try:
                await self.write_own_checkpoints()
            except (OSError, KafkaStorageError) as exc:
                clean = False
                log.error("close: %s; the next start recovers past the last good checkpoint", exc)
            await self._unlink_retired()
            if clean:
                for d in self._online_dirs():
                    try:
                        atomic_write(d / CLEAN_SHUTDOWN_FILE, b"")
                    except OSError as exc:
                        clean = False
                        log.error("close: cannot mark %s as cleanly shut down: %s", d, exc)
        finally:
            self._closed = True
            self._release_locks()
        if not clean:
            # raised only now, with every file closed and the locks released, so the process
            # can exit non-zero (a service manager sees the failed stop) without leaking anything
            raise KafkaStorageError(
                "storage closed without persisting everything (see the errors above); "
                "the next start recovers the logs as after a crash"
            )

    def abandon(self) -> None:
        """Drop everything as a crash would (no flush, no checkpoints, indexes left untrimmed),
        releasing descriptors and locks: for tests of recovery in one process."""
        for lg in [*self._logs.values(), *self._futures.values()]:
            lg.abandon()
        self._closed = True
        self._release_locks()

    def _release_locks(self) -> None:
        for fd in self._lock_fds:
            os.close(fd)
        self._lock_fds = []


def _volumes(dirs: Sequence[Path]) -> list[tuple[int, int] | OSError]:
    """Per dir, its volume's (total, usable) bytes from ``statvfs`` (``f_bavail``: what a
    non-root writer can use, as Java's ``getUsableSpace``), or the OSError that says it is
    offline: gone, not a directory, or on a file system mounted read-only. Blocks as long as
    the file system does: a worker thread's."""
    out: list[tuple[int, int] | OSError] = []
    for d in dirs:
        try:
            if not stat.S_ISDIR(os.stat(d).st_mode):  # gone: FileNotFoundError
                raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(d))
            st = os.statvfs(d)
            if st.f_flag & os.ST_RDONLY:
                raise OSError(errno.EROFS, "read-only file system", str(d))
        except OSError as exc:
            out.append(exc)
            continue
        out.append((st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize))
    return out
