"""The broker core's protocol-agnostic facade: what a transport calls, in Kafka's vocabulary.

A transport plugin (``transport_tcp``) decodes a Kafka request, calls one ``async`` method of a
:class:`Broker` with plain frozen dataclasses, and encodes what comes back. Nothing here knows
about wire versions, framing or sockets; the few version-dependent rules the core must apply
(zstd needs Produce >= 7) are passed as explicit arguments.

Conventions:
- Per-partition and per-topic failures are *results* carrying an :class:`ErrorCode`, never
  exceptions: a Produce to three partitions where one is unknown succeeds on the other two.
- Results are dicts keyed by ``TopicPartition`` (or topic name) in request order, so a transport
  can echo every requested partition in order (kafka-python drops a fetch response otherwise).
- ``FetchPartitionResult.records`` is a :class:`odradek.interfaces.FetchDataInfo`: the transport
  sends its ``file_range()`` with ``os.sendfile`` (or ``to_bytes()`` on TLS) and must call
  ``release()`` exactly once after sending, also when the send fails or is cancelled.
- acks=0 produce still calls :meth:`Broker.produce`; the transport just sends no response.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ..errors import ErrorCode
from ..interfaces import FetchDataInfo, TopicPartition

if TYPE_CHECKING:
    from ..config import Config
    from ..connection_quotas import ConnectionQuotas
    from ..metrics import BrokerMetrics
    from ..replica_selector import ClientMetadata
    from ..request_memory import RequestMemoryPool
    from .fetch_session import FetchSessionCache
    from .mutation_quota import ControllerMutationQuota

# --------------------------------------------------------------------------------------------
# Shared enums and constants
# --------------------------------------------------------------------------------------------


class IsolationLevel(IntEnum):
    """Fetch/ListOffsets isolation: READ_COMMITTED stops at the last stable offset."""

    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


#: ListOffsets special timestamps.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3  # KIP-734, ListOffsets v7+
#: KIP-405: the first offset kept locally; without tiered storage, the log start offset (v8+)
EARLIEST_LOCAL_TIMESTAMP = -4
#: KIP-1005: the highest offset copied to remote storage, -1 when nothing is (v9+)
LATEST_TIERED_TIMESTAMP = -5

#: replica_id a consumer sends in Fetch/ListOffsets (followers send their broker id >= 0).
CONSUMER_REPLICA_ID = -1
#: replica_id of debugging consumers allowed to read past the high watermark.
DEBUGGING_REPLICA_ID = -2

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1


class ConfigResourceType(IntEnum):
    """DescribeConfigs / IncrementalAlterConfigs resource types."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8


class ConfigSource(IntEnum):
    """Where a described config value comes from (DescribeConfigs v1+)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6


class ConfigType(IntEnum):
    """DescribeConfigs v3+ config_type."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class AlterConfigOp(IntEnum):
    """IncrementalAlterConfigs operation per config."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


# --------------------------------------------------------------------------------------------
# Produce
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionProduceResult:
    """One partition's Produce outcome; ``base_offset`` is the first offset assigned (or, for an
    acknowledged duplicate, the offset the original batch got)."""

    error: ErrorCode
    base_offset: int = -1
    log_append_time: int = -1  # ms, only when the topic uses LogAppendTime
    log_start_offset: int = -1
    error_message: str | None = None
    #: (index in the batch, why) of each record that made it invalid (KIP-467)
    record_errors: tuple[tuple[int, str | None], ...] = ()


# --------------------------------------------------------------------------------------------
# Fetch
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FetchPartition:
    """One partition of a Fetch request."""

    tp: TopicPartition
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    log_start_offset: int = -1  # followers only: their log start offset
    #: v12+: the epoch of the last record the fetcher has (-1: none or not sent); the leader
    #: answers a ``diverging_epoch`` when its epoch cache disagrees (KIP-320 via KIP-595)
    last_fetched_epoch: int = -1


@dataclass(frozen=True, slots=True)
class AbortedTransaction:
    """An aborted transaction overlapping the fetched range (read_committed consumers skip it)."""

    producer_id: int
    first_offset: int


@dataclass(frozen=True, slots=True)
class FetchPartitionResult:
    """One partition of a Fetch response.

    ``aborted_transactions`` is None for READ_UNCOMMITTED (encoded as a null array) and a tuple,
    possibly empty, for READ_COMMITTED. ``records`` is None on error or when nothing is readable.
    """

    error: ErrorCode
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted_transactions: tuple[AbortedTransaction, ...] | None = None
    records: FetchDataInfo | None = None
    preferred_read_replica: int = -1
    #: (epoch, end offset) where the fetcher's log diverges from this one (Fetch v12+): answered
    #: without records, the fetcher truncates there and fetches again
    diverging_epoch: tuple[int, int] | None = None


# --------------------------------------------------------------------------------------------
# ListOffsets
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ListOffsetsPartition:
    """One partition of a ListOffsets request: ``timestamp`` is a time in ms or one of
    LATEST_TIMESTAMP, EARLIEST_TIMESTAMP, MAX_TIMESTAMP."""

    tp: TopicPartition
    timestamp: int
    current_leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class ListOffsetsPartitionResult:
    error: ErrorCode
    timestamp: int = -1
    offset: int = -1
    leader_epoch: int = -1


# --------------------------------------------------------------------------------------------
# Metadata
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerNode:
    """A live broker as clients see it on the listener they connected through."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    error: ErrorCode
    partition: int
    leader: int  # -1 when no leader
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    error: ErrorCode
    name: str
    is_internal: bool = False
    partitions: tuple[PartitionMetadata, ...] = ()
    #: 32 hex digits ("" when the topic has none, e.g. an error answer); Metadata v10+ sends it
    topic_id: str = ""


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    """The Metadata response body: brokers, controller, cluster id and the asked-for topics."""

    cluster_id: str
    controller_id: int
    brokers: tuple[BrokerNode, ...]
    topics: tuple[TopicMetadata, ...]


# --------------------------------------------------------------------------------------------
# DescribeLogDirs
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LogDirPartition:
    """One partition's log in a log dir: its size in bytes and how far its log end is behind the
    leader's (0 on the leader, -1 for a log no partition of this broker uses)."""

    tp: TopicPartition
    size: int
    offset_lag: int
    is_future: bool = False  # the future replica of a move between log dirs (AlterReplicaLogDirs)


@dataclass(frozen=True, slots=True)
class LogDirResult:
    """One log dir of DescribeLogDirs: KAFKA_STORAGE_ERROR (and nothing else) when offline."""

    error: ErrorCode
    path: str
    partitions: tuple[LogDirPartition, ...] = ()
    total_bytes: int = -1
    usable_bytes: int = -1


# --------------------------------------------------------------------------------------------
# Topic administration
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CreatableTopic:
    """One topic of CreateTopics. -1 partitions / replication factor mean the broker defaults;
    ``assignments`` (partition -> broker ids) excludes both."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: Mapping[int, Sequence[int]] = field(default_factory=dict)
    configs: Mapping[str, str | None] = field(default_factory=dict)
    #: partitions the request's manual assignment named more than once (``assignments`` keeps
    #: the last): the topic is refused, after the checks Kafka makes before that one
    assigned_twice: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """A described config (DescribeConfigs entries, CreateTopics v5 configs)."""

    name: str
    value: str | None
    read_only: bool
    is_default: bool
    source: ConfigSource
    is_sensitive: bool = False
    synonyms: tuple[tuple[str, str | None, ConfigSource], ...] = ()
    config_type: ConfigType = ConfigType.UNKNOWN
    documentation: str | None = None


@dataclass(frozen=True, slots=True)
class CreateTopicResult:
    error: ErrorCode
    error_message: str | None = None
    num_partitions: int = -1
    replication_factor: int = -1
    configs: tuple[ConfigEntry, ...] = ()
    topic_id: str = ""  # hex of the new topic's UUID (CreateTopics v7+); empty for validate_only


@dataclass(frozen=True, slots=True)
class TopicResult:
    """Outcome for one topic of DeleteTopics / CreatePartitions."""

    error: ErrorCode
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class CreatePartitionsTopic:
    """CreatePartitions: grow ``name`` to ``count`` partitions; ``assignments`` lists broker ids
    for each *new* partition (None lets the broker choose)."""

    name: str
    count: int
    assignments: Sequence[Sequence[int]] | None = None


# --------------------------------------------------------------------------------------------
# Configs
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConfigResource:
    """A DescribeConfigs resource; ``config_names`` None or empty means all (Kafka's ConfigHelper)."""

    resource_type: ConfigResourceType
    name: str
    config_names: Sequence[str] | None = None


@dataclass(frozen=True, slots=True)
class DescribeConfigsResult:
    error: ErrorCode
    error_message: str | None
    resource_type: ConfigResourceType
    resource_name: str
    configs: tuple[ConfigEntry, ...] = ()


@dataclass(frozen=True, slots=True)
class AlterableConfig:
    name: str
    op: AlterConfigOp
    value: str | None


@dataclass(frozen=True, slots=True)
class AlterConfigsResource:
    resource_type: ConfigResourceType
    name: str
    configs: Sequence[AlterableConfig]


@dataclass(frozen=True, slots=True)
class AlterConfigsResult:
    error: ErrorCode
    error_message: str | None
    resource_type: ConfigResourceType
    resource_name: str


# --------------------------------------------------------------------------------------------
# DeleteRecords, InitProducerId, OffsetForLeaderEpoch
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeleteRecordsResult:
    error: ErrorCode
    low_watermark: int = -1


@dataclass(frozen=True, slots=True)
class InitProducerIdResult:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class ActiveProducer:
    """One producer a partition replica remembers (DescribeProducers, KIP-664): what an operator
    needs to spot a producer whose transaction never ended and to abort it (its id, epoch and
    the coordinator epoch of its last marker, which an ABORT must not be older than)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int = -1
    last_timestamp: int = -1
    coordinator_epoch: int = -1
    #: first offset of its open transaction in the partition, -1 when none is open
    current_txn_start_offset: int = -1


@dataclass(frozen=True, slots=True)
class DescribeProducersResult:
    error: ErrorCode
    active_producers: tuple[ActiveProducer, ...] = ()
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class OffsetForLeaderEpochPartition:
    tp: TopicPartition
    leader_epoch: int
    current_leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    error: ErrorCode
    leader_epoch: int = -1
    end_offset: int = -1


# --------------------------------------------------------------------------------------------
# ElectLeaders
# --------------------------------------------------------------------------------------------


class ElectionType(IntEnum):
    """ElectLeaders' election types (KIP-460); ElectLeaders v0 always asks for PREFERRED."""

    PREFERRED = 0  #: the first replica of the assignment, when it is alive and in the ISR
    UNCLEAN = 1  #: a partition without a live leader: a live ISR member, else any live replica


@dataclass(frozen=True, slots=True)
class ElectLeadersResult:
    """One partition's answer: NONE once this broker sees the elected leader, else why not."""

    error: ErrorCode
    error_message: str | None = None


# --------------------------------------------------------------------------------------------
# Partition reassignment (KIP-455)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReassignmentResult:
    """One partition's answer to AlterPartitionReassignments."""

    error: ErrorCode
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class OngoingReassignment:
    """A partition being reassigned, as ListPartitionReassignments answers it: its full replica
    set (target and original replicas), the replicas being added and those being removed."""

    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


# --------------------------------------------------------------------------------------------
# The facade
# --------------------------------------------------------------------------------------------


@runtime_checkable
class Broker(Protocol):
    """What a transport needs from the broker core (implemented by ``odradek.broker.core.BrokerCore``).

    Every method is safe to call concurrently from many connection tasks. Methods that wait
    (acks=all produce, long-poll fetch, admin operations with a timeout) wait inside the call.
    """

    config: Config
    node_id: int
    cluster_id: str
    #: the broker's connection limits, shared by every listener: a transport acquires a slot
    #: after each accept and releases it when the connection ends
    connection_quotas: ConnectionQuotas
    #: the broker's request memory (``queued.max.request.bytes``), shared by every listener: a
    #: transport takes each request frame's size before reading its body and gives it back when
    #: the request is done (``odradek.transport.serve_connection`` does both)
    request_memory: RequestMemoryPool
    #: the broker's metric counters: a transport's ``Dispatcher`` counts every request there
    metrics: BrokerMetrics
    #: incremental fetch sessions (KIP-227): the Fetch handler opens and serves them
    fetch_sessions: FetchSessionCache

    async def produce(
        self,
        acks: int,
        timeout_ms: int,
        partitions: Mapping[TopicPartition, bytearray | memoryview],
        *,
        transactional_id: str | None = None,
        api_version: int = 7,
        as_coordinator: bool = False,
        on_appended: Callable[[], None] | None = None,
    ) -> dict[TopicPartition, PartitionProduceResult]:
        """Validate and append each partition's records (one batch each), then wait per ``acks``
        (0/1: no wait; -1: until the high watermark passes the batch or ``timeout_ms``).
        ``on_appended`` runs once the records are appended (or refused), before any wait: the
        buffers are not read after it.
        ``api_version`` is the Produce version (zstd batches need >= 7). The records are writable
        buffers -- a bytearray, or a writable memoryview into the request frame (the transport's
        zero-copy decode) -- rewritten in place (base offset, leader epoch, LogAppendTime) and
        must not be reused. ``as_coordinator``: a coordinator writing for a producer (Kafka's
        ``AppendOrigin.COORDINATOR``: no sequence check, no transaction verification)."""
        ...

    async def fetch(
        self,
        replica_id: int,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        isolation_level: IsolationLevel,
        partitions: Sequence[FetchPartition],
        client_metadata: ClientMetadata | None = None,
        replica_epoch: int = -1,
    ) -> dict[TopicPartition, FetchPartitionResult]:
        """Read from each partition (up to the high watermark, or the last stable offset for
        READ_COMMITTED), at least one whole batch from the first partition with data, at most
        ``max_bytes`` overall; wait up to ``max_wait_ms`` until ``min_bytes`` are available.
        ``client_metadata`` (Fetch v11+ consumers) lets the replica selector (KIP-392) answer a
        partition with a preferred read replica, and a follower serve it. ``replica_epoch``: a
        follower's broker epoch (Fetch v15+; -1 unknown), an older one than registered is fenced
        (KIP-903). A partition's ``last_fetched_epoch`` (v12+) may be answered with its
        ``diverging_epoch`` and no records (KIP-320)."""
        ...

    async def list_offsets(
        self,
        replica_id: int,
        isolation_level: IsolationLevel,
        partitions: Sequence[ListOffsetsPartition],
    ) -> dict[TopicPartition, ListOffsetsPartitionResult]:
        """Earliest, latest (HW or LSO), max-timestamp, or first offset at/after a timestamp."""
        ...

    async def metadata(
        self,
        topics: Sequence[str] | None,
        allow_auto_create: bool,
        *,
        listener_name: str | None = None,
    ) -> ClusterMetadata:
        """Brokers (with the addresses advertised for ``listener_name``), controller, cluster id
        and the topics asked for (None: all topics), auto-creating missing ones when both
        ``allow_auto_create`` and ``auto.create.topics.enable`` say so."""
        ...

    async def describe_cluster(self, *, listener_name: str | None = None) -> ClusterMetadata:
        """DescribeCluster: cluster id, live brokers as advertised on ``listener_name`` and the
        controller (-1 when it is not among them, as Kafka); no topics."""
        ...

    async def describe_log_dirs(self, partitions: Collection[TopicPartition] | None) -> list[LogDirResult]:
        """Every log dir of this broker with the logs of ``partitions`` (None: every log) it holds;
        partitions this broker has no log of are left out."""
        ...

    async def alter_replica_log_dirs(self, wanted: Mapping[TopicPartition, str]) -> dict[TopicPartition, ErrorCode]:
        """AlterReplicaLogDirs (KIP-113): move each partition's replica on this broker to the
        log dir named (an absolute path); one error code per partition."""
        ...

    async def create_topics(
        self,
        topics: Sequence[CreatableTopic],
        timeout_ms: int,
        validate_only: bool,
        quota: ControllerMutationQuota = ...,
    ) -> dict[str, CreateTopicResult]:
        """CreateTopics; ``quota`` is the client's ``controller_mutation_rate`` (KIP-599), charged
        each topic's partitions as it is written (default: unbounded)."""
        ...

    async def delete_topics(
        self, names: Sequence[str], timeout_ms: int, quota: ControllerMutationQuota = ...
    ) -> dict[str, TopicResult]: ...

    async def create_partitions(
        self,
        topics: Sequence[CreatePartitionsTopic],
        timeout_ms: int,
        validate_only: bool,
        quota: ControllerMutationQuota = ...,
    ) -> dict[str, TopicResult]: ...

    async def describe_configs(
        self,
        resources: Sequence[ConfigResource],
        *,
        include_synonyms: bool = False,
        include_documentation: bool = False,
    ) -> list[DescribeConfigsResult]:
        """Topic configs (overrides and defaults) and broker configs (read-only, static)."""
        ...

    async def incremental_alter_configs(
        self,
        resources: Sequence[AlterConfigsResource],
        validate_only: bool,
    ) -> list[AlterConfigsResult]:
        """Change topic configs; they take effect on the partition logs at once."""
        ...

    async def alter_configs(
        self,
        resources: Sequence[AlterConfigsResource],
        validate_only: bool,
    ) -> list[AlterConfigsResult]:
        """The legacy AlterConfigs: each resource's SET configs replace its overrides."""
        ...

    async def delete_records(
        self,
        offsets: Mapping[TopicPartition, int],
        timeout_ms: int,
    ) -> dict[TopicPartition, DeleteRecordsResult]:
        """Advance log start offsets (offset -1 means the high watermark)."""
        ...

    async def init_producer_id(
        self,
        transactional_id: str | None,
        transaction_timeout_ms: int,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
    ) -> InitProducerIdResult:
        """A new producer id (epoch 0) for idempotent producers; for a transactional id the id it
        had with the epoch bumped (fencing the previous instance)."""
        ...

    async def describe_producers(
        self, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, DescribeProducersResult]:
        """The producers each partition's local replica remembers (leader or follower, as
        Kafka answers), for finding transactions left open (KIP-664)."""
        ...

    async def offset_for_leader_epoch(
        self,
        replica_id: int,
        partitions: Sequence[OffsetForLeaderEpochPartition],
    ) -> dict[TopicPartition, EpochEndOffset]:
        """End offset of the largest leader epoch <= the asked one (KIP-101 truncation)."""
        ...

    async def elect_leaders(
        self,
        election_type: ElectionType,
        partitions: Sequence[TopicPartition] | None,
        timeout_ms: int,
    ) -> dict[TopicPartition, ElectLeadersResult]:
        """Elect leaders as the controller (KIP-183/460), then wait up to ``timeout_ms`` until
        this broker sees them. ``partitions`` None: every partition, answering only those not
        ELECTION_NOT_NEEDED. A broker that is not the controller answers NOT_CONTROLLER."""
        ...

    async def alter_partition_reassignments(
        self,
        reassignments: Mapping[TopicPartition, Sequence[int] | None],
        *,
        allow_replication_factor_change: bool = True,
    ) -> dict[TopicPartition, ReassignmentResult]:
        """Start, replace or (None) cancel partition reassignments as the controller (KIP-455);
        answers once each is written, not when it completes. ``allow_replication_factor_change``
        False (KIP-860) refuses a target whose size is not the original replicas'. Raises ``KafkaError``
        NOT_CONTROLLER on a broker that is not the controller (the whole request's error)."""
        ...

    async def list_partition_reassignments(
        self, partitions: Mapping[str, Sequence[int]] | None
    ) -> dict[TopicPartition, OngoingReassignment]:
        """The reassignments in progress among ``partitions`` (topic -> partitions; None: all),
        as the controller knows them. Raises ``KafkaError`` NOT_CONTROLLER on a broker that is
        not the controller."""
        ...


__all__ = [
    "CONSUMER_REPLICA_ID",
    "DEBUGGING_REPLICA_ID",
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIERED_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "AbortedTransaction",
    "AlterConfigOp",
    "AlterConfigsResource",
    "AlterConfigsResult",
    "AlterableConfig",
    "Broker",
    "BrokerNode",
    "ClusterMetadata",
    "ConfigEntry",
    "ConfigResource",
    "ConfigResourceType",
    "ConfigSource",
    "ConfigType",
    "CreatableTopic",
    "CreatePartitionsTopic",
    "CreateTopicResult",
    "DeleteRecordsResult",
    "DescribeConfigsResult",
    "ElectLeadersResult",
    "ElectionType",
    "EpochEndOffset",
    "FetchPartition",
    "FetchPartitionResult",
    "InitProducerIdResult",
    "IsolationLevel",
    "ListOffsetsPartition",
    "ListOffsetsPartitionResult",
    "LogDirPartition",
    "LogDirResult",
    "OffsetForLeaderEpochPartition",
    "OngoingReassignment",
    "PartitionMetadata",
    "PartitionProduceResult",
    "ReassignmentResult",
    "TopicMetadata",
    "TopicResult",
]
