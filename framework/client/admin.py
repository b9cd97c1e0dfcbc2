"""The trio-native admin client: topics, configs, groups, offsets, records (ACLs: ``acl_admin``).

Each call goes where Kafka wants it: topic creation, deletion and partition changes to the
controller, group calls to the group's coordinator (ListGroups to every broker), DeleteRecords to
each partition's leader, config calls to any broker (broker resources to that broker). Calls that
act on several topics or groups return one result per name -- ``None`` for success or the
``KafkaError`` -- so a batch can partly succeed, as with Kafka's ``Admin``; the ``*_or_raise``
style is left to the caller (the CLI raises the first error).
"""

from __future__ import annotations

import enum
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import trio

from ..consumer_protocol import decode_assignment
from ..errors import ErrorCode, KafkaError, UnsupportedVersion
from ..interfaces import TopicPartition
from ..protocol import ApiKey
from ..security.scram import SCRAM_BY_TYPE, SCRAM_MECHANISMS, salted_password
from .acl_admin import AclAdminMixin
from .base import AsyncClient
from .cluster import BrokerInfo, PartitionInfo
from .group_ops import CoordinatorLookup, OffsetAndMetadata, commit_offsets, fetch_committed
from .offsets import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    OffsetAndTimestamp,
    list_offsets,
)
from .requests import RequestBuilder, error_code, error_or_none, raise_for, request_builder


class ConfigResourceType(enum.IntEnum):
    """DescribeConfigs / IncrementalAlterConfigs resource types."""

    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8


class AlterConfigOp(enum.IntEnum):
    """IncrementalAlterConfigs operations."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create; -1 partitions / replication factor mean the broker's defaults."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, str] = field(default_factory=dict)
    replica_assignment: Mapping[int, Sequence[int]] | None = None


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    is_internal: bool
    partitions: Sequence[PartitionInfo]
    topic_id: Any = None


class TopicPartitionReplica(NamedTuple):
    """A partition's replica on one broker (Kafka's ``TopicPartitionReplica``)."""

    topic: str
    partition: int
    broker_id: int


@dataclass(frozen=True, slots=True)
class ReplicaLogDir:
    """A partition's log in a log dir (DescribeLogDirs): ``is_future`` for the copy a move
    between log dirs is making, whose ``offset_lag`` is how far it is behind the current log."""

    topic_partition: TopicPartition
    size: int
    offset_lag: int
    is_future: bool


@dataclass(frozen=True, slots=True)
class LogDirInfo:
    """One log dir of a broker; ``error`` is KAFKA_STORAGE_ERROR's for an offline dir."""

    path: str
    error: KafkaError | None
    replicas: tuple[ReplicaLogDir, ...]
    total_bytes: int = -1
    usable_bytes: int = -1


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    cluster_id: str | None
    controller_id: int
    brokers: Sequence[BrokerInfo]


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: int = -1
    read_only: bool = False
    sensitive: bool = False
    is_default: bool = False


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str = ""
    #: "classic" or "consumer" (KIP-848), as ListGroups v5 reports it
    group_type: str = "classic"


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: Sequence[TopicPartition]
    #: KIP-848 consumer groups only: the member's epoch and its target assignment
    member_epoch: int = -1
    target_assignment: Sequence[TopicPartition] = ()
    #: KIP-848 consumer groups only: the protocol the member speaks, ``consumer`` or, in a mixed
    #: group, ``classic`` (ConsumerGroupDescribe v1's member type; "" when the broker has only v0)
    member_type: str = ""


#: ConsumerGroupDescribe v1's member types (-1: unknown)
_MEMBER_TYPES = {0: "classic", 1: "consumer"}


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: Sequence[MemberDescription]
    coordinator: int = -1
    #: "classic", or "consumer" for a KIP-848 group (``protocol`` is then its server assignor)
    group_type: str = "classic"
    group_epoch: int = -1
    assignment_epoch: int = -1


@dataclass(frozen=True, slots=True)
class UserScramCredentialUpsertion:
    """A user's new SCRAM credential (Java's ``UserScramCredentialUpsertion``); ``mechanism`` is
    ``SCRAM-SHA-256`` or ``SCRAM-SHA-512``; a random salt when None."""

    user: str
    mechanism: str
    password: str
    iterations: int = 4096
    salt: bytes | None = None


@dataclass(frozen=True, slots=True)
class PartitionReassignment:
    """A reassignment in progress (ListPartitionReassignments): the partition's full replica
    set, and which of those replicas are being added and removed (KIP-455)."""

    replicas: Sequence[int]
    adding_replicas: Sequence[int]
    removing_replicas: Sequence[int]


#: a client quota entity (Java's ``ClientQuotaEntity``): ((entity type, name), ...), ``user``
#: and/or ``client-id``, a None name for the ``<default>`` entity
ClientQuotaEntity = tuple[tuple[str, str | None], ...]


@dataclass(frozen=True, slots=True)
class ClientQuotaFilterComponent:
    """One component of a DescribeClientQuotas filter (Java's ``ClientQuotaFilterComponent``):
    ``match_type`` 0 is that name, 1 the ``<default>`` entity, 2 any name but the default."""

    entity_type: str
    match: str | None = None
    match_type: int = 0

    @classmethod
    def of_entity(cls, entity_type: str, name: str) -> ClientQuotaFilterComponent:
        return cls(entity_type, name, 0)

    @classmethod
    def of_default_entity(cls, entity_type: str) -> ClientQuotaFilterComponent:
        return cls(entity_type, None, 1)

    @classmethod
    def of_entity_type(cls, entity_type: str) -> ClientQuotaFilterComponent:
        return cls(entity_type, None, 2)


@dataclass(frozen=True, slots=True)
class ClientQuotaAlteration:
    """Quotas to set (a number) or remove (None) on one entity (Java's ``ClientQuotaAlteration``)."""

    entity: ClientQuotaEntity
    ops: Mapping[str, float | None]


#: "earliest" | "latest" | "max-timestamp" | "earliest-local" | "latest-tiered" | a timestamp in ms
OffsetSpec = str | int

#: Kafka's OffsetSpec names (kafka-get-offsets' --time names) and their ListOffsets timestamps
OFFSET_SPECS = {
    "earliest": EARLIEST_TIMESTAMP,
    "latest": LATEST_TIMESTAMP,
    "max-timestamp": MAX_TIMESTAMP,
    "earliest-local": EARLIEST_LOCAL_TIMESTAMP,
    "latest-tiered": LATEST_TIERED_TIMESTAMP,
}


_error = error_or_none


def _errors_by_topic(results: Iterable[Any], what: str) -> dict[str, KafkaError | None]:
    """Per-topic outcome of a controller call: ``None`` or the error, named ``<what> '<topic>'``."""
    return {r.name: _error(r.error_code, f"{what} {r.name!r}", getattr(r, "error_message", None)) for r in results}


class AsyncAdmin(AsyncClient, AclAdminMixin):
    """Kafka admin client for trio (see module doc)."""

    role = "admin"

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        self.network.topics = None  # admin metadata requests cover every topic
        self.timeout_s = self.config["default.api.timeout.ms"] / 1000.0

    # -- helpers -----------------------------------------------------------------------------------
    async def _to_controller(self, build: RequestBuilder, timeout: float | None) -> Any:
        """Send to the controller (any broker when the metadata names none), retrying."""

        async def attempt() -> Any:
            cluster = self.network.cluster
            if cluster.controller_id not in cluster.brokers:
                cluster = await self.network.refresh_metadata([])
            if cluster.controller_id in cluster.brokers:
                response = await self.network.send(cluster.controller_id, build)
            else:
                response = await self.network.send_any(build)
            if error_code(getattr(response, "error_code", 0)) is ErrorCode.NOT_CONTROLLER:
                # the request's error (reassignments): the controller moved; ask again there
                await self.network.refresh_metadata([])
                raise KafkaError("the broker asked is not the controller", code=ErrorCode.NOT_CONTROLLER)
            return response

        return await self.network.call_with_retries(attempt, timeout_s=self._default_timeout(timeout), what="admin")

    # -- cluster and topics ------------------------------------------------------------------------
    async def describe_cluster(self, timeout: float | None = None) -> ClusterDescription:
        self._check_open()
        with self._api_deadline(timeout, "describe cluster"):
            cluster = await self.network.refresh_metadata([])
        return ClusterDescription(
            cluster.cluster_id, cluster.controller_id, sorted(cluster.brokers.values(), key=lambda b: b.node_id)
        )

    async def list_topics(self, *, include_internal: bool = False, timeout: float | None = None) -> dict[str, int]:
        """Every topic with its partition count."""
        self._check_open()
        cluster = await self._metadata(None, timeout, "list topics")
        return {
            name: info.num_partitions
            for name, info in sorted(cluster.topics.items())
            if info.error is ErrorCode.NONE and (include_internal or not info.is_internal)
        }

    async def _metadata(self, names: list[str] | None, timeout: float | None, what: str) -> Any:
        """A Metadata round trip for ``names`` (every topic when None), retried through broker
        restarts and unreachable brokers until the API timeout, as Kafka's AdminClient retries."""

        async def attempt() -> Any:
            return await self.network.refresh_metadata(names, all_topics=names is None, allow_auto_create=False)

        with self._api_deadline(timeout, what):
            return await self.network.call_with_retries(attempt, timeout_s=self._default_timeout(timeout), what=what)

    async def describe_topics(
        self, topics: Iterable[str] | None = None, timeout: float | None = None
    ) -> dict[str, TopicDescription | KafkaError]:
        """Partitions, leaders, replicas and ISR of ``topics`` (all when None)."""
        self._check_open()
        names = None if topics is None else list(topics)
        cluster = await self._metadata(names, timeout, "describe topics")
        out: dict[str, TopicDescription | KafkaError] = {}
        for name in names if names is not None else sorted(cluster.topics):
            info = cluster.topics.get(name)
            if info is None:
                out[name] = KafkaError(
                    f"topic {name!r}: UNKNOWN_TOPIC_OR_PARTITION", code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                )
            elif info.error is not ErrorCode.NONE:
                out[name] = KafkaError(f"topic {name!r}: {info.error.name}", code=info.error)
            else:
                out[name] = TopicDescription(name, info.is_internal, list(info.partitions.values()), info.topic_id)
        return out

    async def create_topics(
        self, topics: Sequence[NewTopic], *, validate_only: bool = False, timeout: float | None = None
    ) -> dict[str, KafkaError | None]:
        self._check_open()
        timeout_ms = int(self._default_timeout(timeout) * 1000)
        entries = [
            {
                "name": t.name,
                "num_partitions": t.num_partitions,
                "replication_factor": t.replication_factor,
                "assignments": [
                    {"partition_index": p, "broker_ids": list(brokers)}
                    for p, brokers in (t.replica_assignment or {}).items()
                ],
                "configs": [{"name": k, "value": v} for k, v in t.configs.items()],
            }
            for t in topics
        ]
        build = request_builder(
            ApiKey.CREATE_TOPICS, max_version=7, topics=entries, timeout=timeout_ms, validate_only=validate_only
        )
        response = await self._to_controller(build, timeout)
        result = _errors_by_topic(response.topics, "create topic")
        self.network.request_update()
        return result

    async def delete_topics(self, names: Sequence[str], timeout: float | None = None) -> dict[str, KafkaError | None]:
        self._check_open()
        timeout_ms = int(self._default_timeout(timeout) * 1000)
        build = request_builder(
            ApiKey.DELETE_TOPICS,
            max_version=5,
            topic_names=list(names),
            topics=[{"name": n, "topic_id": None} for n in names],
            timeout=timeout_ms,
        )
        response = await self._to_controller(build, timeout)
        self.network.request_update()
        return _errors_by_topic(response.responses, "delete topic")

    async def create_partitions(
        self, new_totals: Mapping[str, int], *, validate_only: bool = False, timeout: float | None = None
    ) -> dict[str, KafkaError | None]:
        """Grow topics to ``new_totals[topic]`` partitions."""
        self._check_open()
        timeout_ms = int(self._default_timeout(timeout) * 1000)
        build = request_builder(
            ApiKey.CREATE_PARTITIONS,
            max_version=3,
            topics=[{"name": t, "count": n, "assignments": None} for t, n in new_totals.items()],
            timeout=timeout_ms,
            validate_only=validate_only,
        )
        response = await self._to_controller(build, timeout)
        self.network.request_update()
        return _errors_by_topic(response.results, "create partitions of")

    # -- partition reassignment (KIP-455) ----------------------------------------------------------
    async def alter_partition_reassignments(
        self, reassignments: Mapping[TopicPartition, Sequence[int] | None], timeout: float | None = None
    ) -> dict[TopicPartition, KafkaError | None]:
        """Move each partition to the replicas given (the first one its preferred leader), or
        cancel its running reassignment (None). The answer comes when the controller has
        started (or cancelled) each one, not when the replicas have moved: watch
        :meth:`list_partition_reassignments` for that. Per partition: ``None`` or the error
        (INVALID_REPLICA_ASSIGNMENT, NO_REASSIGNMENT_IN_PROGRESS, UNKNOWN_TOPIC_OR_PARTITION)."""
        self._check_open()
        timeout_ms = int(self._default_timeout(timeout) * 1000)
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp, replicas in reassignments.items():
            entry = {"partition_index": tp.partition, "replicas": None if replicas is None else list(replicas)}
            by_topic.setdefault(tp.topic, []).append(entry)
        build = request_builder(
            ApiKey.ALTER_PARTITION_REASSIGNMENTS,
            max_version=0,
            topics=[{"name": t, "partitions": parts} for t, parts in by_topic.items()],
            timeout=timeout_ms,
        )
        response = await self._to_controller(build, timeout)
        raise_for(response.error_code, "alter partition reassignments", response.error_message)
        self.network.request_update()
        return {
            TopicPartition(t.name, p.partition_index): _error(
                p.error_code, f"reassignment of {t.name}-{p.partition_index}", p.error_message
            )
            for t in response.responses
            for p in t.partitions
        }

    # -- log dirs (KIP-113) ---------------------------------------------------------------------------
    async def _to_broker(self, broker_id: int, build: RequestBuilder) -> Any:
        if broker_id not in self.network.cluster.brokers:
            await self.network.refresh_metadata([])
        if broker_id not in self.network.cluster.brokers:
            raise KafkaError(f"broker {broker_id} is not in the cluster", code=ErrorCode.BROKER_NOT_AVAILABLE)
        return await self.network.send(broker_id, build)

    async def describe_log_dirs(
        self, broker_ids: Sequence[int], timeout: float | None = None
    ) -> dict[int, list[LogDirInfo] | KafkaError]:
        """Each broker's log dirs with every replica in them (kafka-log-dirs.sh --describe)."""
        self._check_open()
        out: dict[int, list[LogDirInfo] | KafkaError] = {}
        build = request_builder(ApiKey.DESCRIBE_LOG_DIRS, min_version=1, max_version=4, topics=None)

        async def ask(broker_id: int) -> None:
            try:
                with trio.fail_after(self._default_timeout(timeout)):
                    response = await self._to_broker(broker_id, build)
            except trio.TooSlowError:
                out[broker_id] = KafkaError("DescribeLogDirs timed out", code=ErrorCode.REQUEST_TIMED_OUT)
                return
            except KafkaError as exc:
                out[broker_id] = exc
                return
            out[broker_id] = [
                LogDirInfo(
                    r.log_dir,
                    _error(r.error_code, f"log dir {r.log_dir}"),
                    tuple(
                        ReplicaLogDir(
                            TopicPartition(t.name, int(p.partition_index)),
                            int(p.partition_size),
                            int(p.offset_lag),
                            bool(p.is_future_key),
                        )
                        for t in r.topics
                        for p in t.partitions
                    ),
                    int(getattr(r, "total_bytes", -1)),
                    int(getattr(r, "usable_bytes", -1)),
                )
                for r in response.results
            ]

        async with trio.open_nursery() as nursery:
            for broker_id in dict.fromkeys(broker_ids):
                nursery.start_soon(ask, broker_id)
        return out

    async def alter_replica_log_dirs(
        self, moves: Mapping[TopicPartitionReplica | tuple[str, int, int], str], timeout: float | None = None
    ) -> dict[TopicPartitionReplica, KafkaError | None]:
        """Move each replica to the log dir named (an absolute path) on its broker (KIP-113,
        Kafka's ``Admin.alterReplicaLogDirs``). The answer comes once each broker has started
        the move, not when it is done: watch :meth:`describe_log_dirs` for that (the copy is
        listed with ``is_future`` until it takes the replica's place). Per replica ``None`` or
        the error: LOG_DIR_NOT_FOUND, KAFKA_STORAGE_ERROR, REPLICA_NOT_AVAILABLE (not hosted
        yet: the broker creates it in that dir when it comes), CLUSTER_AUTHORIZATION_FAILED."""
        self._check_open()
        by_broker: dict[int, dict[str, dict[str, list[int]]]] = {}
        wanted = [TopicPartitionReplica(*r) for r in moves]
        for replica, path in zip(wanted, moves.values(), strict=True):
            topics = by_broker.setdefault(replica.broker_id, {}).setdefault(path, {})
            topics.setdefault(replica.topic, []).append(replica.partition)
        out: dict[TopicPartitionReplica, KafkaError | None] = {}

        async def ask(broker_id: int, dirs: dict[str, dict[str, list[int]]]) -> None:
            build = request_builder(
                ApiKey.ALTER_REPLICA_LOG_DIRS,
                min_version=1,
                max_version=2,
                dirs=[
                    {"path": path, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
                    for path, topics in dirs.items()
                ],
            )
            try:
                with trio.fail_after(self._default_timeout(timeout)):
                    response = await self._to_broker(broker_id, build)
            except (KafkaError, trio.TooSlowError) as exc:
                failed = (
                    exc if isinstance(exc, KafkaError) else KafkaError("timed out", code=ErrorCode.REQUEST_TIMED_OUT)
                )
                for r in wanted:
                    if r.broker_id == broker_id:
                        out[r] = failed
                return
            for t in response.results:
                for p in t.partitions:
                    replica = TopicPartitionReplica(t.topic_name, int(p.partition_index), broker_id)
                    out[replica] = _error(
                        p.error_code, f"moving {t.topic_name}-{p.partition_index} on broker {broker_id}"
                    )

        async with trio.open_nursery() as nursery:
            for broker_id, dirs in by_broker.items():
                nursery.start_soon(ask, broker_id, dirs)
        return out

    async def list_partition_reassignments(
        self, partitions: Iterable[TopicPartition] | None = None, timeout: float | None = None
    ) -> dict[TopicPartition, PartitionReassignment]:
        """The reassignments in progress among ``partitions`` (all of them when None); a
        partition not being reassigned is left out."""
        self._check_open()
        timeout_ms = int(self._default_timeout(timeout) * 1000)
        topics: list[dict[str, Any]] | None = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for tp in partitions:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            topics = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]
        build = request_builder(ApiKey.LIST_PARTITION_REASSIGNMENTS, max_version=0, topics=topics, timeout=timeout_ms)
        response = await self._to_controller(build, timeout)
        raise_for(response.error_code, "list partition reassignments", response.error_message)
        return {
            TopicPartition(t.name, p.partition_index): PartitionReassignment(
                list(p.replicas), list(p.adding_replicas), list(p.removing_replicas)
            )
            for t in response.topics
            for p in t.partitions
        }

    # -- configs -----------------------------------------------------------------------------------
    async def _to_config_owner(
        self, resource_type: int, name: str, build: RequestBuilder, timeout: float | None, what: str
    ) -> Any:
        """Send a config request about a resource to the broker owning it (broker resources: that
        broker; others: any broker), retrying."""
        is_broker = resource_type in (ConfigResourceType.BROKER, ConfigResourceType.BROKER_LOGGER)
        node = int(name) if is_broker and name else None

        async def attempt() -> Any:
            if node is None:
                return await self.network.send_any(build)
            return await self.network.send(node, build)

        return await self.network.call_with_retries(attempt, timeout_s=self._default_timeout(timeout), what=what)

    async def describe_configs(
        self, resources: Sequence[tuple[int, str]], timeout: float | None = None
    ) -> dict[tuple[int, str], dict[str, ConfigEntry] | KafkaError]:
        """Configs of ``(resource_type, name)`` resources (topics: type 2, brokers: type 4)."""
        self._check_open()
        out: dict[tuple[int, str], dict[str, ConfigEntry] | KafkaError] = {}
        for rtype, name in resources:
            build = request_builder(
                ApiKey.DESCRIBE_CONFIGS,
                max_version=4,
                resources=[{"resource_type": int(rtype), "resource_name": name, "configuration_keys": None}],
                include_synonyms=False,
                include_documentation=False,
            )
            response = await self._to_config_owner(rtype, name, build, timeout, "DescribeConfigs")
            for r in response.results:
                err = _error(r.error_code, f"describe configs of {r.resource_name!r}", r.error_message)
                if err is not None:
                    out[(int(r.resource_type), r.resource_name)] = err
                    continue
                entries = {}
                for c in r.configs:
                    source = int(getattr(c, "config_source", -1))
                    entries[c.name] = ConfigEntry(
                        c.name,
                        c.value,
                        source,
                        bool(c.read_only),
                        bool(c.is_sensitive),
                        source == 5 or bool(getattr(c, "is_default", False)),
                    )
                out[(int(r.resource_type), r.resource_name)] = entries
        return out

    async def incremental_alter_configs(
        self,
        changes: Mapping[tuple[int, str], Sequence[tuple[str, int, str | None]]],
        *,
        validate_only: bool = False,
        timeout: float | None = None,
    ) -> dict[tuple[int, str], KafkaError | None]:
        """Apply ``(key, AlterConfigOp, value)`` changes per resource."""
        self._check_open()
        out: dict[tuple[int, str], KafkaError | None] = {}
        for (rtype, name), ops in changes.items():
            payload = [
                {
                    "resource_type": int(rtype),
                    "resource_name": name,
                    "configs": [{"name": k, "config_operation": int(op), "value": v} for k, op, v in ops],
                }
            ]
            build = request_builder(
                ApiKey.INCREMENTAL_ALTER_CONFIGS, max_version=1, resources=payload, validate_only=validate_only
            )
            response = await self._to_config_owner(rtype, name, build, timeout, "IncrementalAlterConfigs")
            for r in response.responses:
                out[(int(r.resource_type), r.resource_name)] = _error(
                    r.error_code, f"alter configs of {r.resource_name!r}", r.error_message
                )
        return out

    # -- offsets and records -----------------------------------------------------------------------
    async def list_offsets(
        self,
        specs: Mapping[TopicPartition | tuple[str, int], OffsetSpec],
        *,
        isolation_level: int = 0,
        timeout: float | None = None,
    ) -> dict[TopicPartition, OffsetAndTimestamp]:
        """Offsets per partition for "earliest", "latest", "max-timestamp", "earliest-local" (the
        first offset kept locally, tiered storage), "latest-tiered" (the highest offset in remote
        storage, -1 for none) or a timestamp (ms)."""
        self._check_open()
        unknown = sorted(str(s) for s in specs.values() if isinstance(s, str) and s not in OFFSET_SPECS)
        if unknown:
            raise ValueError(f"unknown offset spec {unknown[0]!r}: one of {', '.join(OFFSET_SPECS)} or a timestamp")
        wanted = {TopicPartition(*tp): (OFFSET_SPECS[s] if isinstance(s, str) else int(s)) for tp, s in specs.items()}
        return await list_offsets(
            self.network, wanted, isolation_level=isolation_level, timeout_s=self._default_timeout(timeout)
        )

    async def delete_records(
        self, before: Mapping[TopicPartition | tuple[str, int], int], timeout: float | None = None
    ) -> dict[TopicPartition, int | KafkaError]:
        """Delete records before ``before[tp]`` (-1: the high watermark); returns the new low
        watermark (log start offset) per partition."""
        self._check_open()
        wanted = {TopicPartition(*tp): off for tp, off in before.items()}
        self.network.add_topics({tp.topic for tp in wanted})
        out: dict[TopicPartition, int | KafkaError] = {}
        timeout_s = self._default_timeout(timeout)

        async def attempt() -> None:
            pending = {tp: off for tp, off in wanted.items() if not isinstance(out.get(tp), int)}
            cluster = self.network.cluster
            if any(cluster.leader_for(tp) < 0 for tp in pending):
                cluster = await self.network.refresh_metadata({tp.topic for tp in pending})
            by_leader: dict[int, dict[TopicPartition, int]] = {}
            for tp, off in pending.items():
                leader = cluster.leader_for(tp)
                if leader < 0:
                    out[tp] = KafkaError(f"no leader for {tp}", code=ErrorCode.LEADER_NOT_AVAILABLE)
                    continue
                by_leader.setdefault(leader, {})[tp] = off
            async with trio.open_nursery() as nursery:
                for node, parts in by_leader.items():
                    nursery.start_soon(self._delete_records_on, node, parts, out, int(timeout_s * 1000))
            retriable = [e for e in out.values() if isinstance(e, KafkaError) and e.retriable]
            if retriable:
                raise retriable[0]

        try:
            await self.network.call_with_retries(attempt, timeout_s=timeout_s, what="DeleteRecords")
        except KafkaError:
            pass  # per-partition errors are in ``out``
        return out

    async def _delete_records_on(
        self,
        node: int,
        parts: Mapping[TopicPartition, int],
        out: dict[TopicPartition, int | KafkaError],
        timeout_ms: int,
    ) -> None:
        by_topic: dict[str, list[dict[str, int]]] = {}
        for tp, off in parts.items():
            by_topic.setdefault(tp.topic, []).append({"partition_index": tp.partition, "offset": off})
        build = request_builder(
            ApiKey.DELETE_RECORDS,
            max_version=2,
            topics=[{"name": t, "partitions": ps} for t, ps in by_topic.items()],
            timeout=timeout_ms,
        )
        try:
            response = await self.network.send(node, build)
        except KafkaError as exc:
            for tp in parts:
                out[tp] = exc
            return
        for t in response.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, int(p.partition_index))
                err = _error(p.error_code, f"delete records of {tp}")
                if err is not None and err.code in (
                    ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                ):
                    self.network.request_update()
                out[tp] = err if err is not None else int(p.low_watermark)

    # -- groups ------------------------------------------------------------------------------------
    async def _to_coordinator(
        self,
        lookup: CoordinatorLookup,
        build: RequestBuilder,
        results: str,
        verb: str,
        what: str,
        timeout: float | None,
    ) -> Any:
        """Send a per-group request to the group's coordinator, retrying while any group in the
        response's ``results`` list has a retriable error (a moved coordinator is looked up again)."""

        async def attempt() -> Any:
            response = await lookup.send(build)
            for g in getattr(response, results):
                code = error_code(g.error_code)
                lookup.check(code)
                if code.retriable:
                    raise KafkaError(f"{verb} {g.group_id!r}: {code.name}", code=code)
            return response

        return await self.network.call_with_retries(attempt, timeout_s=self._default_timeout(timeout), what=what)

    async def list_groups(self, timeout: float | None = None) -> list[ListedGroup]:
        """Every group of every broker (each broker lists the groups it coordinates)."""
        self._check_open()
        with self._api_deadline(timeout, "list groups"):
            cluster = await self.network.refresh_metadata([])
        found: dict[str, ListedGroup] = {}
        errors: list[KafkaError] = []

        build = request_builder(ApiKey.LIST_GROUPS, max_version=5, states_filter=[], types_filter=[])

        async def ask(node: int) -> None:
            try:
                response = await self.network.send(node, build)
            except KafkaError as exc:
                errors.append(exc)
                return
            err = _error(response.error_code, f"ListGroups on broker {node}")
            if err is not None:
                errors.append(err)
                return
            for g in response.groups:
                found[g.group_id] = ListedGroup(
                    g.group_id, g.protocol_type, getattr(g, "group_state", ""), getattr(g, "group_type", "classic")
                )

        async with trio.open_nursery() as nursery:
            for node in cluster.brokers:
                nursery.start_soon(ask, node)
        if errors and not found:
            raise errors[0]
        return sorted(found.values(), key=lambda g: g.group_id)

    async def describe_groups(
        self, group_ids: Sequence[str], timeout: float | None = None
    ) -> dict[str, GroupDescription | KafkaError]:
        """Each group as ConsumerGroupDescribe (KIP-848 groups) or, for a classic group (or a
        broker without it), DescribeGroups describes it, as librdkafka's admin client does."""
        self._check_open()
        out: dict[str, GroupDescription | KafkaError] = {}
        for gid in group_ids:
            lookup = CoordinatorLookup(self.network, gid)
            modern = await self._describe_consumer_group(lookup, timeout)
            if modern is not None:
                out[gid] = modern
                continue
            build = request_builder(
                ApiKey.DESCRIBE_GROUPS, max_version=5, groups=[gid], include_authorized_operations=False
            )
            try:
                response = await self._to_coordinator(
                    lookup, build, "groups", "describe group", "DescribeGroups", timeout
                )
            except KafkaError as exc:
                out[gid] = exc
                continue
            for g in response.groups:
                err = _error(g.error_code, f"describe group {g.group_id!r}")
                if err is not None:
                    out[g.group_id] = err
                    continue
                members = []
                for m in g.members:
                    try:
                        parts = (
                            list(decode_assignment(m.member_assignment).partitions)
                            if g.protocol_type == "consumer"
                            else []
                        )
                    except KafkaError:
                        parts = []
                    members.append(
                        MemberDescription(
                            m.member_id, getattr(m, "group_instance_id", None), m.client_id, m.client_host, parts
                        )
                    )
                out[g.group_id] = GroupDescription(
                    g.group_id,
                    g.group_state,
                    g.protocol_type,
                    g.protocol_data,
                    members,
                    lookup.node if lookup.node is not None else -1,
                )
        return out

    async def _describe_consumer_group(
        self, lookup: CoordinatorLookup, timeout: float | None
    ) -> GroupDescription | KafkaError | None:
        """ConsumerGroupDescribe of one group; None when it is not a KIP-848 group
        (GROUP_ID_NOT_FOUND) or the broker does not have the API."""
        build = request_builder(
            ApiKey.CONSUMER_GROUP_DESCRIBE,
            max_version=1,
            group_ids=[lookup.group_id],
            include_authorized_operations=False,
        )
        try:
            response = await self._to_coordinator(
                lookup, build, "groups", "describe group", "ConsumerGroupDescribe", timeout
            )
        except UnsupportedVersion:
            return None
        except KafkaError as exc:
            return exc
        (g,) = response.groups
        code = error_code(g.error_code)
        if code is ErrorCode.GROUP_ID_NOT_FOUND:
            return None
        err = _error(g.error_code, f"describe group {g.group_id!r}")
        if err is not None:
            return err

        def partitions(assignment: Any) -> list[TopicPartition]:
            return [TopicPartition(t.topic_name, int(p)) for t in assignment.topic_partitions for p in t.partitions]

        members = [
            MemberDescription(
                m.member_id,
                m.instance_id,
                m.client_id,
                m.client_host,
                partitions(m.assignment),
                int(m.member_epoch),
                partitions(m.target_assignment),
                _MEMBER_TYPES.get(int(getattr(m, "member_type", -1)), ""),
            )
            for m in g.members
        ]
        return GroupDescription(
            g.group_id,
            g.group_state,
            "consumer",
            g.assignor_name,
            members,
            lookup.node if lookup.node is not None else -1,
            "consumer",
            int(g.group_epoch),
            int(g.assignment_epoch),
        )

    async def delete_groups(
        self, group_ids: Sequence[str], timeout: float | None = None
    ) -> dict[str, KafkaError | None]:
        self._check_open()
        out: dict[str, KafkaError | None] = {}
        for gid in group_ids:
            build = request_builder(ApiKey.DELETE_GROUPS, max_version=2, groups_names=[gid])
            try:
                response = await self._to_coordinator(
                    CoordinatorLookup(self.network, gid), build, "results", "delete group", "DeleteGroups", timeout
                )
            except KafkaError as exc:
                out[gid] = exc
                continue
            for r in response.results:
                out[r.group_id] = _error(r.error_code, f"delete group {r.group_id!r}")
        return out

    async def delete_consumer_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition | tuple[str, int]],
        timeout: float | None = None,
    ) -> dict[TopicPartition, KafkaError | None]:
        """Remove committed offsets without deleting the group (OffsetDelete, KIP-496;
        ``groups delete-offsets``): None per partition removed, else its error
        (GROUP_SUBSCRIBED_TO_TOPIC while members consume its topic, UNKNOWN_TOPIC_OR_PARTITION).
        A group-level error (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP) raises."""
        self._check_open()
        lookup = CoordinatorLookup(self.network, group_id)
        parts = list(dict.fromkeys(TopicPartition(*tp) for tp in partitions))
        by_topic: dict[str, list[dict[str, int]]] = {}
        for tp in parts:
            by_topic.setdefault(tp.topic, []).append({"partition_index": tp.partition})
        build = request_builder(
            ApiKey.OFFSET_DELETE,
            max_version=0,
            group_id=group_id,
            topics=[{"name": t, "partitions": ps} for t, ps in by_topic.items()],
        )

        async def attempt() -> Any:
            response = await lookup.send(build)
            code = error_code(response.error_code)
            lookup.check(code)
            if code.retriable:
                raise KafkaError(f"delete offsets of group {group_id!r}: {code.name}", code=code)
            return response

        response = await self.network.call_with_retries(
            attempt, timeout_s=self._default_timeout(timeout), what="OffsetDelete"
        )
        err = _error(response.error_code, f"delete offsets of group {group_id!r}")
        if err is not None:
            raise err
        out: dict[TopicPartition, KafkaError | None] = dict.fromkeys(parts)
        for t in response.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, int(p.partition_index))
                out[tp] = _error(p.error_code, f"delete offset of {tp}")
        return out

    async def list_consumer_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition | tuple[str, int]] | None = None,
        timeout: float | None = None,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets (every partition it committed when ``partitions`` is None)."""
        self._check_open()
        lookup = CoordinatorLookup(self.network, group_id)
        parts = None if partitions is None else [TopicPartition(*tp) for tp in partitions]

        async def attempt() -> dict[TopicPartition, OffsetAndMetadata]:
            return await fetch_committed(lookup, parts)

        return await self.network.call_with_retries(
            attempt, timeout_s=self._default_timeout(timeout), what="OffsetFetch"
        )

    async def alter_consumer_group_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition | tuple[str, int], int | OffsetAndMetadata],
        timeout: float | None = None,
    ) -> None:
        """Set committed offsets of a group with no active members (``groups reset-offsets``)."""
        self._check_open()
        lookup = CoordinatorLookup(self.network, group_id)
        wanted = {
            TopicPartition(*tp): v if isinstance(v, OffsetAndMetadata) else OffsetAndMetadata(int(v))
            for tp, v in offsets.items()
        }

        async def attempt() -> None:
            await commit_offsets(lookup, wanted)

        await self.network.call_with_retries(attempt, timeout_s=self._default_timeout(timeout), what="OffsetCommit")

    # -- client quotas (KIP-546) -------------------------------------------------------------------
    async def describe_client_quotas(
        self,
        components: Sequence[ClientQuotaFilterComponent] = (),
        strict: bool = False,
        timeout: float | None = None,
    ) -> dict[ClientQuotaEntity, dict[str, float]]:
        """The quotas of every entity the filter matches (all entities for an empty, non-strict
        filter), by entity."""
        self._check_open()
        build = request_builder(
            ApiKey.DESCRIBE_CLIENT_QUOTAS,
            max_version=1,
            components=[
                {"entity_type": c.entity_type, "match_type": c.match_type, "match": c.match} for c in components
            ],
            strict=strict,
        )
        response = await self._to_controller(build, timeout)
        top = _error(response.error_code, "describe client quotas", response.error_message)
        if top is not None:
            raise top
        return {
            tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: float(v.value) for v in entry.values}
            for entry in response.entries or ()
        }

    async def alter_client_quotas(
        self, alterations: Sequence[ClientQuotaAlteration], validate_only: bool = False, timeout: float | None = None
    ) -> dict[ClientQuotaEntity, KafkaError | None]:
        """Set and remove quotas of entities; the outcome by entity (INVALID_REQUEST for an unknown
        quota key or a value that is not positive)."""
        self._check_open()
        entries = [
            {
                "entity": [{"entity_type": t, "entity_name": n} for t, n in a.entity],
                "ops": [
                    {"key": k, "value": 0.0 if v is None else float(v), "remove": v is None} for k, v in a.ops.items()
                ],
            }
            for a in alterations
        ]
        build = request_builder(ApiKey.ALTER_CLIENT_QUOTAS, max_version=1, entries=entries, validate_only=validate_only)
        response = await self._to_controller(build, timeout)
        return {
            tuple((e.entity_type, e.entity_name) for e in r.entity): _error(
                r.error_code, "alter client quotas", r.error_message
            )
            for r in response.entries
        }

    # -- SCRAM users (KIP-554) -----------------------------------------------------------------------
    async def describe_user_scram_credentials(
        self, users: Sequence[str] | None = None, timeout: float | None = None
    ) -> dict[str, dict[str, int] | KafkaError]:
        """Each user's SCRAM mechanisms and their iterations (every user's when ``users`` is
        None), or the error for that user (RESOURCE_NOT_FOUND for a user without credentials)."""
        self._check_open()
        build = request_builder(
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
            max_version=0,
            users=None if users is None else [{"name": u} for u in users],
        )
        response = await self._to_controller(build, timeout)
        top = _error(response.error_code, "describe SCRAM credentials", response.error_message)
        if top is not None:
            raise top
        out: dict[str, dict[str, int] | KafkaError] = {}
        for result in response.results:
            error = _error(result.error_code, f"describe SCRAM credentials of {result.user!r}", result.error_message)
            if error is not None:
                out[result.user] = error
                continue
            out[result.user] = {
                SCRAM_BY_TYPE[int(i.mechanism)].mechanism_name: int(i.iterations)
                for i in result.credential_infos
                if int(i.mechanism) in SCRAM_BY_TYPE
            }
        return out

    async def alter_user_scram_credentials(
        self,
        upsertions: Sequence[UserScramCredentialUpsertion] = (),
        deletions: Sequence[tuple[str, str]] = (),
        timeout: float | None = None,
    ) -> dict[str, KafkaError | None]:
        """Create or replace users' SCRAM credentials and delete some ((user, mechanism name));
        the password is salted here and never sent. The outcome by user."""
        self._check_open()
        ups = []
        for up in upsertions:
            mechanism = SCRAM_MECHANISMS[up.mechanism]
            salt = up.salt if up.salt is not None else secrets.token_bytes(32)
            ups.append(
                {
                    "name": up.user,
                    "mechanism": mechanism.type_code,
                    "iterations": up.iterations,
                    "salt": salt,
                    "salted_password": salted_password(mechanism, up.password, salt, up.iterations),
                }
            )
        dels = [
            {"name": user, "mechanism": SCRAM_MECHANISMS[m].type_code if m in SCRAM_MECHANISMS else 0}
            for user, m in deletions
        ]
        build = request_builder(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, max_version=0, deletions=dels, upsertions=ups)
        response = await self._to_controller(build, timeout)
        return {
            r.user: _error(r.error_code, f"alter SCRAM credentials of {r.user!r}", r.error_message)
            for r in response.results
        }
