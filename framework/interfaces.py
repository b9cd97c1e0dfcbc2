"""The interfaces plugins implement, as ``typing.Protocol`` classes, in Kafka's vocabulary.

Hooks (:mod:`odradek.hookspecs`) are synchronous factories; what they return satisfies one of the
protocols below. Methods that may block on a disk flush, a network peer or a coordination server
are ``async`` and run inside the kernel's nurseries. Methods on the produce/fetch hot path that only
touch the page cache (``PartitionLog.append_as_leader``, ``PartitionLog.read``) are synchronous on
purpose: a sequential write of a batch into the page cache takes microseconds, a thread hop to make
it "async" would cost more than the write (this is the seeds' argument for trusting the page cache).

The interfaces cover the whole system, not only what is built first: the partition log has
truncation, a leader-epoch cache, a log start offset and producer-state snapshots for replication
and idempotence; the metadata store has liveness, elections, compare-and-set and watches for the
ZooKeeper and etcd plugins (see ../shared/design/CLUSTER.md).
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, NamedTuple, Protocol, runtime_checkable

if TYPE_CHECKING:
    from .config import TopicConfig


# --------------------------------------------------------------------------------------------
# Shared value types
# --------------------------------------------------------------------------------------------


class TopicPartition(NamedTuple):
    """A partition of a topic: Kafka's ``TopicPartition``; ``str()`` gives ``topic-partition``."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


# --------------------------------------------------------------------------------------------
# Storage role: LogStorage (Kafka's LogManager) and PartitionLog (Kafka's UnifiedLog)
# --------------------------------------------------------------------------------------------


class BatchMeta(NamedTuple):
    """What the broker learned about one RecordBatch from its 61-byte header while validating it.

    Storage uses it to update indexes without parsing the batch again. Offsets are absolute
    (after the broker assigned them) for ``append_as_leader`` results and for follower appends.
    A NamedTuple, not a frozen dataclass: one is built per batch on the produce path, and a
    tuple is several times cheaper to construct.
    """

    position: int  # byte position of the batch inside the appended buffer
    size: int  # whole batch size in bytes (batchLength + 12)
    last_offset_delta: int
    record_count: int
    max_timestamp: int
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    is_transactional: bool = False
    is_control: bool = False


class LogAppendInfo(NamedTuple):
    """Result of an append: Kafka's ``LogAppendInfo`` (a NamedTuple: one is built per append)."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int  # ms since epoch when the append happened (-1 if not LogAppendTime)
    log_start_offset: int
    valid_bytes: int


class FileRange(NamedTuple):
    """A byte range of an open file that a transport may ``os.sendfile`` to a socket.

    ``fd`` stays valid at least until the read that produced it is released
    (``FetchDataInfo.release``); a transport that cannot use sendfile (TLS) calls
    ``FetchDataInfo.to_bytes`` instead.
    """

    fd: int
    position: int
    length: int


@runtime_checkable
class FetchDataInfo(Protocol):
    """Records read from a partition log: a run of whole batches starting at a batch boundary.

    The first batch may start before the requested offset (the client skips leading records).
    """

    fetch_offset: int  # offset that was asked for
    first_batch_offset: int  # base offset of the first batch in the slice (-1 when empty)
    size: int  # byte length of the slice (0 when nothing to return)
    #: the offset after the slice's last batch (-1 when empty or not known): below the read's
    #: bound, the read stopped at ``max_bytes`` or a segment's end with more to read, which a
    #: fetch waiting for ``min_bytes`` counts as full (Kafka's DelayedFetch). An engine written
    #: before it is read as -1
    next_offset: int

    def file_range(self) -> FileRange | None:
        """The slice as a file range for zero-copy send, or None when the engine holds no file."""
        ...

    def to_bytes(self) -> bytes:
        """The slice's bytes (copying); used by TLS and by non-file engines."""
        ...

    def release(self) -> None:
        """Called once the transport has sent the slice; lets the engine close pinned files."""
        ...


@dataclass(frozen=True, slots=True)
class EpochEntry:
    """One leader-epoch-checkpoint entry: ``epoch`` started at ``start_offset``."""

    epoch: int
    start_offset: int


@dataclass(frozen=True, slots=True)
class LogDirDescription:
    """One log directory as the storage engine sees it (what DescribeLogDirs reports per dir).

    ``path`` is the absolute path Kafka reports (an engine without directories names its place
    some other stable way). ``error`` says why the dir is offline -- it cannot be reached, so its
    partitions cannot be served -- and is None while it is online. ``total_bytes`` /
    ``usable_bytes`` are the size and free space of the volume holding it, -1 when unknown (as
    Kafka's schema default). ``partitions`` are the logs kept in it; an offline dir lists the logs
    it held when it failed, which the broker then takes offline (their other replicas lead them:
    see docs/cluster.md, "A failed log dir"). DescribeLogDirs answers an offline dir with no
    partitions, as Kafka does.
    """

    path: str
    partitions: tuple[TopicPartition, ...] = ()
    error: str | None = None
    total_bytes: int = -1
    usable_bytes: int = -1
    #: partitions being moved into this dir (KIP-113): their future logs, reported by
    #: DescribeLogDirs with ``is_future``. An engine without log-dir moves leaves it empty
    future_partitions: tuple[TopicPartition, ...] = ()


@runtime_checkable
class PartitionLog(Protocol):
    """One partition's log on one broker (Kafka's ``UnifiedLog``).

    Offsets: ``log_start_offset`` <= every readable offset < ``log_end_offset`` (LEO). The high
    watermark is decided by the broker core, since it depends on replicas; the core writes it
    to :attr:`high_watermark` whenever it moves, for the engine's background work.
    All synchronous methods are safe to call from the trio thread; none may block for long.
    """

    topic_partition: TopicPartition
    #: the partition's high watermark as the broker core last set it (None: not set, as for a
    #: log used outside a broker). Retention and compaction never delete or rewrite records at
    #: or past it (Kafka's ``deletableSegments`` and the cleaner's last-stable-offset bound):
    #: those may still be truncated away by a leader change, and a key compacted in favour of
    #: such a record would be lost with it. An engine without background deletion ignores it
    high_watermark: int | None
    #: how many times compaction has rewritten part of this log (0 for an engine that never
    #: compacts): when it changes, the broker re-checks what it derived from batches that may be
    #: gone -- an aborted transaction's entry goes once the cleaner removed its ABORT marker
    compaction_count: int

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def size_in_bytes(self) -> int:
        """Bytes the log's batches take (every segment, log start or not): the partition size
        DescribeLogDirs reports. Cheap: kept as appends, truncation and deletion happen."""
        ...

    def append_as_leader(
        self, data: bytearray | memoryview, batches: Sequence[BatchMeta], leader_epoch: int
    ) -> LogAppendInfo:
        """Assign offsets from the LEO and append validated batches, unchanged but for headers.

        ``data`` holds one or more whole batches; the log rewrites each batch's baseOffset and
        partitionLeaderEpoch in place (both outside the CRC) and writes the bytes in one write.
        ``data`` is the request's own buffer and is reused for a later request once the call
        returns: an engine that keeps batches in memory copies them.
        Raises ``KafkaStorageError`` if the write fails; nothing partial stays visible then.
        """
        ...

    def append_as_follower(self, data: bytes, batches: Sequence[BatchMeta]) -> LogAppendInfo:
        """Append batches that already carry offsets and leader epochs (replication)."""
        ...

    def read(
        self,
        fetch_offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> FetchDataInfo:
        """Whole batches from ``fetch_offset``: at most ``max_bytes`` (but at least one batch when
        ``min_one_batch``), none at or past ``max_offset`` (the high watermark or LSO).

        Raises ``OffsetOutOfRange`` when ``fetch_offset`` is outside [log start, log end].
        """
        ...

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record, in offset order, whose timestamp is >= ``timestamp``
        (found through the first batch whose max timestamp is >= it, as ListOffsets needs), or None."""
        ...

    def max_timestamp_and_offset(self) -> tuple[int, int]:
        """(timestamp, offset) of the record with the largest timestamp; (-1, -1) when empty.
        A record below the log start still in the log's kept data counts (Kafka's segment
        ``maxTimestampSoFar``): the pair is always one real record's."""
        ...

    def truncate_to(self, offset: int) -> None:
        """Drop every batch at or after ``offset`` (follower truncation; never below HW by a leader)."""
        ...

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete all data; the log restarts empty at ``offset``."""
        ...

    def delete_records_before(self, offset: int) -> int:
        """Advance the log start offset to ``offset`` (DeleteRecords); returns the new start."""
        ...

    # leader-epoch cache (KIP-101): kept with the log so truncation and epochs stay consistent
    def assign_epoch_start_offset(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` begins at ``start_offset`` (a new leader's first offset)."""
        ...

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (largest known epoch <= ``epoch``, its end offset), or (-1, -1)."""
        ...

    def epoch_entries(self) -> Sequence[EpochEntry]:
        """The leader-epoch checkpoint, oldest first."""
        ...

    # small per-partition state that must live and die with the log (producer-state snapshots)
    def write_state(self, name: str, data: bytes) -> None:
        """Atomically persist ``data`` under ``name`` beside the log (write-temp, fsync, rename)."""
        ...

    def read_state(self, name: str) -> bytes | None:
        """The bytes last written under ``name``, or None."""
        ...

    def update_config(self, config: TopicConfig) -> None:
        """Apply changed topic configs (segment size, retention, cleanup.policy) live."""
        ...

    async def flush(self) -> None:
        """fsync everything appended so far and advance the recovery point."""
        ...

    async def close(self) -> None:
        """Flush and release files; the object is unusable afterwards."""
        ...


@runtime_checkable
class LogStorage(Protocol):
    """All partition logs of one broker (Kafka's ``LogManager``); one per broker process."""

    async def open(self) -> None:
        """Load and recover existing logs (scan past the recovery point, cut torn tails)."""
        ...

    def get_log(self, tp: TopicPartition) -> PartitionLog | None:
        """The log for ``tp`` if this broker has it."""
        ...

    def get_or_create_log(self, tp: TopicPartition, config: TopicConfig) -> PartitionLog:
        """The log for ``tp``, created empty when missing."""
        ...

    def all_logs(self) -> Mapping[TopicPartition, PartitionLog]:
        """Every log this broker holds."""
        ...

    async def delete_log(self, tp: TopicPartition) -> None:
        """Remove a partition's log and its files (DeleteTopics)."""
        ...

    def write_checkpoint(self, name: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Atomically persist a per-broker offset checkpoint (e.g. replication-offset-checkpoint)."""
        ...

    def read_checkpoint(self, name: str) -> dict[TopicPartition, int]:
        """The checkpoint last written under ``name`` (empty when none)."""
        ...

    async def describe_log_dirs(self) -> Sequence[LogDirDescription]:
        """Every configured log dir, in ``log.dirs`` order, with the logs it holds, whether it is
        online and its volume's size and free space (DescribeLogDirs). Called on admin requests
        and by the broker's log-dir failure checks (every few seconds and after a storage error,
        from a task of their own), not on the hot path, on the trio thread. Whatever may block on
        the file system (a ``statvfs``, an ``is_dir``: a stuck NFS mount holds them for minutes)
        runs in a worker thread under a ``trio.CapacityLimiter`` of the engine's own, so a stuck
        volume stalls only DescribeLogDirs and those checks, neither the other clients nor the
        other users of worker threads; the logs held are read on the trio thread, where they
        change. A walk of every segment file is too slow either way (sizes come from
        ``PartitionLog.size_in_bytes``). An engine written while this was a plain method
        (returning the list) is still called, on the trio thread.

        A dir reported offline stays offline until the storage is opened again: its logs are no
        longer in ``get_log``/``all_logs``, no new log is placed in it and checkpoints skip it."""
        ...

    async def run(self) -> None:
        """Background work (retention, compaction, scheduled flushes) until cancelled.

        The kernel runs this in its nursery; engines without background work return at once.
        """
        ...

    async def close(self) -> None:
        """Flush and close every log, write the recovery-point checkpoint.

        A failed write (a full disk) must not stop the rest of the close: every file is still
        closed and every lock released. Only then does ``close`` raise ``KafkaStorageError``,
        so that the broker exits non-zero and the next start knows to recover."""
        ...


@runtime_checkable
class LogDirMoves(Protocol):
    """What a ``LogStorage`` with several ``log.dirs`` offers to move a partition's log from one
    to another (KIP-113, AlterReplicaLogDirs); optional: an engine without it answers such moves
    KAFKA_STORAGE_ERROR. Kafka's ``LogManager`` future logs.

    A move creates a *future* log of the partition in the destination dir, which the broker
    fills through the ``PartitionLog`` methods (``append_as_follower``, ``truncate_to``,
    ``truncate_fully_and_start_at``, ``delete_records_before``, ``assign_epoch_start_offset``)
    until it holds exactly what the current log holds; then it is promoted. Future logs are not
    in ``get_log``/``all_logs``; retention and compaction leave them alone (the copy follows the
    current log's). They survive a restart (the broker copies into them again), and a crash
    during the promotion never loses the current log (the engine either keeps it or finishes the
    promotion at the next start). Log dirs are named by their absolute paths, as
    ``describe_log_dirs`` names them; a dir's ``LogDirDescription.future_partitions`` lists
    the future logs in it.
    """

    def prefer_log_dir(self, tp: TopicPartition, log_dir: str) -> None:
        """Create ``tp``'s log in ``log_dir`` when it is created (it is not hosted yet).
        Raises ``LogDirNotFound`` for a path that is not a log dir, KafkaStorageError for an
        offline one."""
        ...

    def get_future_log(self, tp: TopicPartition) -> PartitionLog | None:
        """``tp``'s future log, if a move is under way."""
        ...

    def all_future_logs(self) -> Mapping[TopicPartition, PartitionLog]:
        """Every move under way."""
        ...

    def create_future_log(self, tp: TopicPartition, log_dir: str) -> PartitionLog:
        """An empty future log of ``tp`` in ``log_dir`` (the one there already, if any). Raises
        ValueError when ``tp``'s log is in that dir already or a future log of it is in another
        dir, LogDirNotFound / KafkaStorageError as :meth:`prefer_log_dir`, KafkaStorageError
        when ``tp`` has no log here."""
        ...

    async def delete_future_log(self, tp: TopicPartition) -> None:
        """Call a move off: the future log goes (nothing when there is none)."""
        ...

    def replace_current_with_future_log(self, tp: TopicPartition) -> PartitionLog:
        """Promote the future log, which must hold exactly what the current log holds (same log
        start and end, ValueError otherwise), to be ``tp``'s log, with the current log's state
        (``write_state``) and high watermark; the current log is deleted. Synchronous: the broker
        calls it with no append in between. Returns the promoted log."""
        ...


async def described_log_dirs(storage: LogStorage) -> list[LogDirDescription] | None:
    """What ``storage.describe_log_dirs()`` answers, or None for an engine written before it had
    one. An engine written while it was a plain method returns the list instead of a coroutine:
    it is still taken (on the trio thread), by the broker and by the conformance suite alike."""
    describe = getattr(storage, "describe_log_dirs", None)
    if describe is None:
        return None
    answer = describe()
    return list(await answer if inspect.isawaitable(answer) else answer)


# --------------------------------------------------------------------------------------------
# Remote storage role (tiered storage, KIP-405): RemoteStorageManager, RemoteLogMetadataManager
# --------------------------------------------------------------------------------------------


class RemoteSegmentState(enum.Enum):
    """Kafka's ``RemoteLogSegmentState``: where a remote segment is in its life. Only
    COPY_SEGMENT_FINISHED segments are read, counted or answered as offsets."""

    COPY_SEGMENT_STARTED = "COPY_SEGMENT_STARTED"
    COPY_SEGMENT_FINISHED = "COPY_SEGMENT_FINISHED"
    DELETE_SEGMENT_STARTED = "DELETE_SEGMENT_STARTED"
    DELETE_SEGMENT_FINISHED = "DELETE_SEGMENT_FINISHED"


class RemoteIndexType(enum.Enum):
    """Kafka's ``RemoteStorageManager.IndexType``: the files copied beside a segment's records."""

    OFFSET = "index"
    TIMESTAMP = "timeindex"
    PRODUCER_SNAPSHOT = "snapshot"
    TRANSACTION = "txnindex"
    LEADER_EPOCH = "leader-epoch-checkpoint"


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadata:
    """One segment in remote storage (Kafka's ``RemoteLogSegmentMetadata``).

    ``end_offset`` is the segment's last offset (inclusive, as Kafka's); ``leader_epochs`` the
    leader-epoch entries that start inside it (or the one in force at its start), so a reader
    knows each batch's epoch without the local log. ``segment_id`` is unique per copy attempt: a
    segment copied again (by a new leader, after a failed attempt) gets a new one.
    """

    topic_partition: TopicPartition
    segment_id: str
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    size_in_bytes: int
    leader_epochs: tuple[EpochEntry, ...] = ()
    broker_id: int = -1
    event_timestamp_ms: int = -1
    state: RemoteSegmentState = RemoteSegmentState.COPY_SEGMENT_STARTED
    #: the topic's id (32 hex digits, "" when unknown): a topic deleted and created again under
    #: its name must not read the earlier topic's segments (Kafka keys remote data by topic id)
    topic_id: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic_partition.topic,
            "partition": self.topic_partition.partition,
            "segment_id": self.segment_id,
            "start_offset": self.start_offset,
            "end_offset": self.end_offset,
            "max_timestamp_ms": self.max_timestamp_ms,
            "size_in_bytes": self.size_in_bytes,
            "leader_epochs": [[e.epoch, e.start_offset] for e in self.leader_epochs],
            "broker_id": self.broker_id,
            "event_timestamp_ms": self.event_timestamp_ms,
            "state": self.state.value,
            "topic_id": self.topic_id,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RemoteLogSegmentMetadata:
        """Parse what :meth:`to_json` wrote; a malformed record raises ValueError."""
        try:
            return cls(
                TopicPartition(str(data["topic"]), int(data["partition"])),
                str(data["segment_id"]),
                int(data["start_offset"]),
                int(data["end_offset"]),
                int(data["max_timestamp_ms"]),
                int(data["size_in_bytes"]),
                tuple(EpochEntry(int(e), int(o)) for e, o in data.get("leader_epochs", ())),
                int(data.get("broker_id", -1)),
                int(data.get("event_timestamp_ms", -1)),
                RemoteSegmentState(data["state"]),
                str(data.get("topic_id", "")),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed remote segment metadata: {exc!r}") from exc


@dataclass(frozen=True, slots=True)
class LogSegmentData:
    """What is copied for one rolled segment (Kafka's ``LogSegmentData``): its files, the
    producer-state snapshot and leader-epoch checkpoint as bytes, and the transaction index
    (None: the engine keeps none; odradek's segment engine keeps aborted transactions in the
    producer-state snapshot instead)."""

    log_segment: Path
    offset_index: Path
    time_index: Path
    producer_snapshot: bytes
    leader_epoch_index: bytes
    transaction_index: Path | None = None


class RolledSegment(NamedTuple):
    """A rolled (inactive) local segment as tiered storage copies it: offsets
    ``[base_offset, next_offset)``, its files (read from a worker thread), the bytes of records in
    its log file and its largest record timestamp. A storage engine offers them through an
    optional ``PartitionLog.rolled_segments(upto)`` method; a log without it is never tiered."""

    base_offset: int
    next_offset: int
    log_path: Path
    offset_index_path: Path
    time_index_path: Path
    size: int
    max_timestamp: int


@runtime_checkable
class RemoteStorageManager(Protocol):
    """Copies segments to, reads them from and deletes them in remote storage (Kafka's
    ``RemoteStorageManager``). Every method may block (a network store, a slow mount): the
    broker calls them from worker threads only, never on the trio thread; errors are raised
    as :class:`odradek.errors.RemoteStorageError` (or OSError), and the broker retries later."""

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData) -> None:
        """Store the segment and its indexes under ``metadata.segment_id``, all or nothing."""
        ...

    def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int | None = None
    ) -> BinaryIO:
        """A stream of the segment's bytes from ``start_position`` (to ``end_position``,
        inclusive, or the end); the caller closes it."""
        ...

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: RemoteIndexType) -> bytes:
        """One of the files copied beside the segment (RemoteStorageError if it has none)."""
        ...

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Delete the segment and its indexes; deleting what is already gone succeeds."""
        ...


@runtime_checkable
class RemoteLogMetadataManager(Protocol):
    """Where remote segments' metadata lives, shared by every broker of the cluster (Kafka's
    ``RemoteLogMetadataManager``). Blocking like :class:`RemoteStorageManager`."""

    def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Record a copy that starts (state COPY_SEGMENT_STARTED)."""
        ...

    def update_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> bool:
        """Record a state change of a recorded segment. Publishing COPY_SEGMENT_FINISHED is
        exclusive per start offset: False when another copy of a segment starting there was
        finished first (two brokers that both led the partition), so the caller deletes its copy."""
        ...

    def list_remote_log_segments(self, tp: TopicPartition) -> list[RemoteLogSegmentMetadata]:
        """Every recorded segment of ``tp`` in any state, ordered by start offset."""
        ...

    def remove_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Forget a segment whose data was deleted (DELETE_SEGMENT_FINISHED, or a failed copy)."""
        ...


@dataclass(frozen=True)
class RemoteStorageFactory:
    """What the remote storage hook registers: ``create(config)`` builds a
    ``(RemoteStorageManager, RemoteLogMetadataManager)`` pair for the broker."""

    name: str
    create: Any  # Callable[[Config], tuple[RemoteStorageManager, RemoteLogMetadataManager]]
    description: str = ""


# --------------------------------------------------------------------------------------------
# Compression role
# --------------------------------------------------------------------------------------------


@runtime_checkable
class Codec(Protocol):
    """A batch compression codec with Kafka's id (attributes bits 0-2): 1 gzip .. 4 zstd."""

    id: int
    name: str

    def compress(self, data: bytes, level: int | None = None) -> bytes:
        """Compress a batch's records section."""
        ...

    def decompress(self, data: bytes | memoryview, *, max_size: int | None = None) -> bytes:
        """Decompress a batch's records section (accepting every framing clients write).

        With ``max_size`` (the broker passes it for every produced batch: a few compressed bytes
        can claim gigabytes), raise :class:`odradek.errors.DecompressionLimitExceeded` as soon as
        the output would exceed ``max_size`` bytes, without allocating much beyond it: inflate in
        bounded steps, and refuse a declared size (a frame's content size, snappy's preamble)
        above the bound before calling the library. None: no bound (clients reading fetched data).
        A codec written before ``max_size`` existed still loads; the records layer then
        decompresses fully and checks afterwards (unbounded memory, see docs/plugins.md).
        """
        ...


# --------------------------------------------------------------------------------------------
# Partitioner and assignor roles (client side)
# --------------------------------------------------------------------------------------------


@runtime_checkable
class Partitioner(Protocol):
    """Chooses a partition for a record without an explicit partition (client side)."""

    name: str

    def partition(self, topic: str, key: bytes | None, value: bytes | None, num_partitions: int) -> int:
        """The partition for this record, in ``range(num_partitions)``."""
        ...

    def on_new_batch(self, topic: str, previous_partition: int, num_partitions: int) -> None:
        """Called when the accumulator closed a batch (lets sticky partitioners switch)."""
        ...


@dataclass(frozen=True, slots=True)
class GroupMember:
    """A member of a consumer group as the leader sees it during assignment."""

    member_id: str
    group_instance_id: str | None
    topics: Sequence[str]
    user_data: bytes | None = None
    owned_partitions: Sequence[TopicPartition] = ()
    generation: int = -1
    rack_id: str | None = None


@dataclass(frozen=True, slots=True)
class MemberAssignment:
    """What one member is given (ConsumerProtocolAssignment)."""

    partitions: Sequence[TopicPartition]
    user_data: bytes | None = None


@runtime_checkable
class Assignor(Protocol):
    """A consumer-group partition assignor (``partition.assignment.strategy``).

    ``name`` is the protocol name carried in JoinGroup ("range", "roundrobin", "sticky",
    "cooperative-sticky"), so it must match the Java client's for mixed groups.
    """

    name: str
    #: "eager" (revoke everything on rebalance) or "cooperative" (incremental, KIP-429)
    rebalance_protocol: str

    def subscription_user_data(
        self, topics: Sequence[str], owned: Sequence[TopicPartition], generation: int
    ) -> bytes | None:
        """User data this member puts into its JoinGroup subscription."""
        ...

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[GroupMember]
    ) -> dict[str, MemberAssignment]:
        """The group leader's assignment: member id -> its partitions."""
        ...

    def on_assignment(self, assignment: MemberAssignment, generation: int) -> None:
        """Called on every member with what it was given (sticky assignors remember it)."""
        ...


# --------------------------------------------------------------------------------------------
# Server assignor role (broker side, KIP-848 consumer groups)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AssignmentTopic:
    """A subscribed topic as a server-side assignor sees it (Kafka's ``TopicMetadata``)."""

    topic_id: str  # 32 hex digits, as odradek keeps topic ids
    name: str
    num_partitions: int
    #: partition -> the racks (``broker.rack``) of its replicas; empty when no broker has a rack.
    #: With a member's ``rack_id`` an assignor may prefer partitions with a replica in its rack
    #: (the consumer then fetches from that follower, KIP-392), balance first
    partition_racks: Mapping[int, frozenset[str]] = field(default_factory=dict)

    def racks(self, partition: int) -> frozenset[str]:
        return self.partition_racks.get(partition, frozenset())


@dataclass(frozen=True, slots=True)
class AssignmentMember:
    """One member of a KIP-848 consumer group as a server-side assignor sees it (Kafka's
    ``MemberSubscriptionAndAssignment``): what it subscribes to (topic ids) and what the group's
    previous target assignment gave it (the input stickiness is measured against)."""

    member_id: str
    instance_id: str | None
    rack_id: str | None
    subscribed_topic_ids: frozenset[str]
    assigned: Mapping[str, frozenset[int]] = field(default_factory=dict)


@runtime_checkable
class ServerAssignor(Protocol):
    """A broker-side partition assignor for KIP-848 consumer groups (``group.consumer.assignors``,
    a client's ``group.remote.assignor``). The group coordinator calls ``assign`` whenever the
    group epoch moves past the target assignment's epoch (a member joined, left or changed its
    subscription, a subscribed topic gained partitions); it must be quick, synchronous and
    deterministic, and give each partition of a subscribed topic to exactly one member
    subscribed to that topic. The result is the new target assignment: member id -> topic id ->
    partitions; the coordinator then moves members towards it (revocation before reassignment).
    """

    name: str

    def assign(
        self, members: Mapping[str, AssignmentMember], topics: Mapping[str, AssignmentTopic]
    ) -> dict[str, dict[str, frozenset[int]]]:
        """The target assignment of every member (an empty mapping for a member given nothing).
        ``topics`` holds the subscribed topics that exist, by topic id."""
        ...


# --------------------------------------------------------------------------------------------
# Metadata role (meta_local, meta_zk, meta_etcd) -- see ../shared/design/CLUSTER.md
# --------------------------------------------------------------------------------------------


class SessionState(enum.Enum):
    """Connection state of a metadata session (ZooKeeper's, mirrored for etcd leases)."""

    CONNECTED = "connected"
    SUSPENDED = "suspended"  # connection lost, session (and ephemerals) may still live
    LOST = "lost"  # session expired: ephemerals are gone, leadership must be given up


class Absent(enum.Enum):
    """Sentinel for ``expect=ABSENT``: the key must not exist."""

    ABSENT = "absent"


class AnyVersion(enum.Enum):
    """Sentinel for ``expect=ANY``: write whatever the current version."""

    ANY = "any"


ABSENT = Absent.ABSENT
ANY = AnyVersion.ANY
Expect = int | Absent | AnyVersion


@dataclass(frozen=True, slots=True)
class Versioned:
    """A value with its per-key version (ZK stat.version / etcd mod_revision / local counter)
    and creation revision (ZK czxid / etcd create_revision), used as epochs for fencing."""

    value: bytes
    version: int
    create_revision: int


class MetadataConflict(Exception):
    """A compare-and-set or transaction check failed; ``index`` names the failing check."""

    def __init__(self, key: str, index: int = 0) -> None:
        super().__init__(f"version check failed on {key!r} (check #{index})")
        self.key = key
        self.index = index


class MetadataCompacted(Exception):
    """A watch asked for history the backend no longer has: re-read with ``list`` and re-watch."""


@dataclass(frozen=True, slots=True)
class Check:
    """A transaction precondition: ``key`` currently has version ``expect`` (or is ABSENT)."""

    key: str
    expect: Expect


@dataclass(frozen=True, slots=True)
class Put:
    """A transaction write."""

    key: str
    value: bytes
    ephemeral: bool = False


@dataclass(frozen=True, slots=True)
class Delete:
    """A transaction delete."""

    key: str


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One change under a watched prefix; ``value`` is None for deletions.

    ``create_revision`` is the key's :attr:`Versioned.create_revision` after the change (0 for a
    deletion): a store may report several writes between two events as one, so a key deleted
    and created again (an ephemeral broker registration of a restarted broker) can come as one
    write, told apart only by it (Kafka's controller compares broker epochs so)."""

    key: str
    value: bytes | None
    version: int
    revision: int
    create_revision: int = 0


@dataclass(frozen=True, slots=True)
class Leadership:
    """Held leadership of an election: ``epoch`` increases with every new leader and
    ``fence`` is a check to include in every write made as leader."""

    name: str
    epoch: int
    fence: Check


@runtime_checkable
class MetadataStore(Protocol):
    """Cluster metadata with liveness, compare-and-set and watches.

    Keys are '/'-separated paths (``/brokers/ids/1``); values are bytes (JSON by convention).
    ``meta_local`` implements it in-process with atomic files; ZooKeeper and etcd implement it on
    their servers. The broker core and controller use only this interface.
    """

    async def open(self, session_ttl_ms: int) -> None:
        """Connect and start a session whose ephemerals die with it."""
        ...

    def session_states(self) -> AsyncIterator[SessionState]:
        """Session state changes, starting with the current state."""
        ...

    async def get(self, key: str) -> Versioned | None: ...

    async def list(self, prefix: str) -> tuple[dict[str, Versioned], int]:
        """Every key under ``prefix`` as one snapshot, with the revision it reflects."""
        ...

    async def create(self, key: str, value: bytes, *, ephemeral: bool = False) -> Versioned:
        """Create a key that must not exist (``MetadataConflict`` otherwise)."""
        ...

    async def put(self, key: str, value: bytes, *, expect: Expect = ANY) -> int:
        """Write with an optional version check; returns the new version."""
        ...

    async def delete(self, key: str, *, expect: Expect = ANY) -> bool:
        """Delete; False if it did not exist (with ``expect=ANY``)."""
        ...

    async def txn(self, checks: Sequence[Check], ops: Sequence[Put | Delete]) -> None:
        """All checks hold and all ops apply, or nothing applies (``MetadataConflict``)."""
        ...

    def watch(self, prefix: str, *, after_revision: int) -> AsyncIterator[WatchEvent]:
        """Changes under ``prefix`` after ``after_revision``, gap-free, until cancelled."""
        ...

    async def register_broker(self, broker_id: int, info: bytes) -> int:
        """Ephemeral registration under ``/brokers/ids/<id>``; returns the broker epoch."""
        ...

    async def campaign(self, name: str, value: bytes) -> Leadership:
        """Block until this session leads election ``name``; the epoch fences old leaders."""
        ...

    async def resign(self, leadership: Leadership) -> None: ...

    async def leader(self, name: str) -> tuple[bytes, int] | None:
        """(value, epoch) of the current leader of ``name``, or None."""
        ...

    def leader_changes(self, name: str) -> AsyncIterator[tuple[bytes, int] | None]:
        """The leader of ``name`` as :meth:`leader` answers, first at once, then again after
        every change (a new leader or epoch, or none), until cancelled or the store closes.
        Brokers follow the ``controller`` election with it (Metadata's controller id), whatever
        keys the plugin keeps an election in; consecutive equal answers may be merged."""
        ...

    async def next_id(self, key: str) -> int:
        """Atomically increment a counter and return the new value (producer ids, broker ids)."""
        ...

    async def close(self) -> None:
        """End the session; its ephemerals are deleted."""
        ...


# --------------------------------------------------------------------------------------------
# Transport role
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A listener address: ``PLAINTEXT://host:port`` in Kafka's notation."""

    name: str  # listener name, e.g. "PLAINTEXT"
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"


@runtime_checkable
class Listener(Protocol):
    """A server side of a transport: accepts client connections and serves Kafka requests."""

    async def serve(self, *, task_status: Any) -> None:
        """Bind, report the bound ``Endpoint`` list through ``task_status.started(...)`` (so
        ``nursery.start`` works), then serve until cancelled, draining in-flight requests."""
        ...


@runtime_checkable
class Connection(Protocol):
    """A client-side connection to one broker that exchanges Kafka frames."""

    async def send_frame(self, frame: bytes) -> None: ...

    async def receive_frame(self) -> bytes: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class Connector(Protocol):
    """A client side of a transport: opens connections to brokers."""

    async def connect(self, host: str, port: int, *, timeout_s: float) -> Connection: ...


@dataclass(frozen=True)
class TransportFactory:
    """What the transport hook registers: a named way to serve and to reach brokers.

    ``listener(config, broker, endpoint)`` builds a server for one configured listener;
    ``connector(client_config)`` builds the client side used by odradek's own client.
    """

    name: str
    security_protocols: Sequence[str]
    listener: Any  # Callable[[Config, Any, Endpoint], Listener]
    connector: Any  # Callable[[Mapping[str, str]], Connector]
    description: str = ""


@dataclass(frozen=True)
class StorageFactory:
    """What the storage hook registers: ``create(config)`` builds the broker's ``LogStorage``."""

    name: str
    create: Any  # Callable[[Config], LogStorage]
    description: str = ""


@dataclass(frozen=True)
class MetadataFactory:
    """What the metadata hook registers: ``create(config)`` builds a ``MetadataStore``.

    ``log_dir(config)``, for a store that keeps its data in one of ``log.dirs`` (meta_local: the
    first), names that dir: the broker stops when it fails, as Kafka halts a broker whose
    metadata log dir failed, instead of living on with a store it cannot write."""

    name: str
    create: Any  # Callable[[Config], MetadataStore]
    description: str = ""
    log_dir: Any = None  # Callable[[Config], Path] | None


@dataclass(frozen=True)
class ConfigKey:
    """A config key a plugin adds to the broker's config model (see :mod:`odradek.config`)."""

    name: str
    type: type
    default: Any
    doc: str
    choices: Sequence[Any] | None = None
    minimum: float | None = None
    topic_key: str | None = None  # the topic-level name when this is a topic default
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: largest accepted value; integer keys without one are bounded to a signed 64-bit long
    maximum: float | None = None


__all__ = [
    "ABSENT",
    "ANY",
    "Absent",
    "AnyVersion",
    "AssignmentMember",
    "AssignmentTopic",
    "Assignor",
    "BatchMeta",
    "Check",
    "Codec",
    "ConfigKey",
    "Connection",
    "Connector",
    "Delete",
    "Endpoint",
    "EpochEntry",
    "Expect",
    "FetchDataInfo",
    "FileRange",
    "GroupMember",
    "Leadership",
    "Listener",
    "LogAppendInfo",
    "LogDirDescription",
    "LogDirMoves",
    "LogSegmentData",
    "LogStorage",
    "MemberAssignment",
    "MetadataCompacted",
    "MetadataConflict",
    "MetadataFactory",
    "MetadataStore",
    "PartitionLog",
    "Partitioner",
    "Put",
    "RemoteIndexType",
    "RemoteLogMetadataManager",
    "RemoteLogSegmentMetadata",
    "RemoteSegmentState",
    "RemoteStorageFactory",
    "RemoteStorageManager",
    "RolledSegment",
    "ServerAssignor",
    "SessionState",
    "StorageFactory",
    "TopicPartition",
    "TransportFactory",
    "Versioned",
    "WatchEvent",
]
