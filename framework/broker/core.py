"""``BrokerCore``: the :class:`~odradek.broker.api.Broker` facade over the broker's parts.

It owns no logic of its own beyond translating between the facade's dataclasses and the module
that does each job:

- produce, fetch, list offsets, delete records, OffsetForLeaderEpoch -> :class:`ReplicaManager`;
- Metadata, DescribeCluster -> :class:`MetadataCache` (plus auto-creation through :class:`AdminManager`);
- DescribeLogDirs -> :class:`ReplicaManager` over the storage's ``describe_log_dirs``;
- CreateTopics, DeleteTopics, CreatePartitions -> :class:`AdminManager`;
- DescribeConfigs, IncrementalAlterConfigs -> :class:`ConfigManager`;
- InitProducerId -> :class:`ProducerIdManager`.

:class:`~odradek.broker.server.BrokerServer` builds it from config and plugins; tests build it
directly with :meth:`BrokerCore.start` over any storage and metadata store.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

from ..config import Config, ConfigError, parse_connection_overrides
from ..connection_quotas import ConnectionQuotas, resolve_overrides
from ..errors import ErrorCode, InvalidTopic
from ..interfaces import Codec, LogDirDescription, LogStorage, MetadataStore, TopicPartition, described_log_dirs
from ..metrics import BrokerMetrics
from ..pacing import paced
from ..replica_selector import ClientMetadata
from ..request_memory import RequestMemoryPool
from ..security.authorizer import Authorizer
from ..security.credentials import ScramCredentialStore
from .admin import AdminManager, validate_topic_name
from .alter_log_dirs import ReplicaAlterLogDirsManager
from .api import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    AlterConfigsResource,
    AlterConfigsResult,
    BrokerNode,
    ClusterMetadata,
    ConfigResource,
    CreatableTopic,
    CreatePartitionsTopic,
    CreateTopicResult,
    DeleteRecordsResult,
    DescribeConfigsResult,
    DescribeProducersResult,
    ElectionType,
    ElectLeadersResult,
    EpochEndOffset,
    FetchPartition,
    FetchPartitionResult,
    InitProducerIdResult,
    IsolationLevel,
    ListOffsetsPartition,
    ListOffsetsPartitionResult,
    LogDirResult,
    OffsetForLeaderEpochPartition,
    OngoingReassignment,
    PartitionMetadata,
    PartitionProduceResult,
    ReassignmentResult,
    TopicMetadata,
    TopicResult,
)
from .configs import ConfigManager
from .controller import Controller
from .dynamic_config import DynamicBrokerConfig
from .elect_leaders import elect_leaders
from .fetch_session import FetchSessionCache
from .ip_quota_configs import IpConnectionRates
from .metadata_cache import INTERNAL_TOPICS, MetadataCache, TopicState
from .mutation_quota import UNBOUNDED, ControllerMutationQuota
from .partition_reassignments import alter_partition_reassignments, list_partition_reassignments
from .producer_ids import ProducerIdManager
from .producer_state import AppendOrigin
from .quota_configs import ClientQuotaConfigs
from .quotas import QuotaManagers
from .replica_manager import ReplicaManager
from .replication_quota import ALTER_LOG_DIRS, FOLLOWER, LEADER, ReplicationQuotaManager

log = logging.getLogger(__name__)
#: Topics whose Metadata answers are kept (one entry per topic asked about).
_TOPIC_ANSWERS_MAX = 10_000


def _internal_topic_refused(tp: TopicPartition) -> PartitionProduceResult:
    return PartitionProduceResult(
        ErrorCode.INVALID_TOPIC_EXCEPTION, error_message=f"Cannot append to internal topic {tp.topic}"
    )


class BrokerCore:
    """One broker's request handling, protocol-agnostic (implements ``api.Broker``)."""

    def __init__(
        self,
        config: Config,
        storage: LogStorage,
        store: MetadataStore,
        codecs: Mapping[int, Codec],
        *,
        cluster_id: str = "",
    ) -> None:
        self.config = config
        self.node_id = config.broker_id
        self.cluster_id = cluster_id
        self.connection_quotas = ConnectionQuotas.from_config(config)
        #: the ``max.connections.per.ip`` and overrides ``connection_quotas`` has (static at first)
        self._per_ip_applied = (int(config["max.connections.per.ip"]), str(config["max.connections.per.ip.overrides"]))
        #: ip quotas (``/config/ips/``: connection_creation_rate, KIP-612), enforced by the above
        self.ip_connection_rates = IpConnectionRates(store, self.connection_quotas.set_ip_rates)
        self.request_memory = RequestMemoryPool.from_config(config)
        #: the counters of the broker's metrics (odradek.metrics): the replica manager's and
        #: every listener's requests
        self.metrics = BrokerMetrics()
        #: incremental fetch sessions (KIP-227), shared by every listener
        self.fetch_sessions = FetchSessionCache(int(config["max.incremental.fetch.session.cache.slots"]))
        self.storage = storage
        self.store = store
        #: users' SCRAM credentials (``/config/users/<user>``): SASL listeners and the KIP-554 APIs
        self.scram_credentials = ScramCredentialStore(store)
        #: client quotas (``/config/users``, ``/config/clients``) and their rates: Produce and Fetch
        self.quotas = QuotaManagers.build(
            ClientQuotaConfigs(store),
            samples=int(config["quota.window.num"]),
            window_s=float(config["quota.window.size.seconds"]),
        )
        self.replica_manager = ReplicaManager(
            config.broker_id,
            storage,
            codecs,
            producer_id_expiration_ms=int(config["producer.id.expiration.ms"]),
            producer_id_expiration_check_interval_ms=int(config["producer.id.expiration.check.interval.ms"]),
            max_decompressed_bytes=int(config["message.max.decompressed.bytes"]),
            metrics=self.metrics,
        )
        self.metadata_cache = MetadataCache(config, store, self.replica_manager)
        self.replica_manager.partition_known = self.metadata_cache.contains_partition
        #: AlterReplicaLogDirs (KIP-113): moves of replicas between this broker's log dirs;
        #: its ``run`` (the copy) belongs in the owner's nursery
        self._wire_replica_selection(config)
        #: name -> (the TopicState it was built from, its ``state_changes`` then, live brokers,
        #: listed brokers, the answer): the cache replaces a TopicState when the topic is re-read
        #: and counts partition states it changes in place, so both say the answer is current
        self._topic_answers: dict[str, tuple[TopicState, int, tuple[int, ...], frozenset[int], TopicMetadata]] = {}
        #: the broker keys that change at run time (``/config/brokers/``), and the replication
        #: quotas (KIP-73) that take their rates from them
        self.dynamic_config = DynamicBrokerConfig(config, store)
        samples = int(config["replication.quota.window.num"])
        window_s = float(config["replication.quota.window.size.seconds"])
        throttles = self.metadata_cache.topic_throttles
        self.leader_replication_quota, self.follower_replication_quota = (
            ReplicationQuotaManager(side, config.broker_id, throttles, samples=samples, window_s=window_s)
            for side in (LEADER, FOLLOWER)
        )
        self.replica_manager.leader_quota = self.leader_replication_quota
        #: AlterReplicaLogDirs (KIP-113): moves of replicas between this broker's log dirs, the
        #: copy bounded by replica.alter.log.dirs.io.max.bytes.per.second (Kafka's AlterLogDirs
        #: quota: every move counts); its ``run`` belongs in the owner's nursery
        self.alter_log_dirs = ReplicaAlterLogDirsManager(
            self.replica_manager,
            storage,
            quota=ReplicationQuotaManager(
                ALTER_LOG_DIRS,
                config.broker_id,
                lambda _topic, _key: ("*",),
                samples=int(config["alter.log.dirs.replication.quota.window.num"]),
                window_s=float(config["alter.log.dirs.replication.quota.window.size.seconds"]),
            ),
        )
        self.dynamic_config.listeners.append(self._apply_dynamic_config)
        self._apply_dynamic_config()
        self.configs = ConfigManager(config, store, self.metadata_cache, self.dynamic_config)
        self.admin = AdminManager(config, store, self.metadata_cache, self.configs)
        self.producer_ids = ProducerIdManager(store, int(config["transaction.max.timeout.ms"]))
        #: the consumer-group coordinator, attached by BrokerServer (``odradek.broker.group``)
        self.group_coordinator: Any = None
        #: the transaction coordinator and the pending TxnOffsetCommit offsets, attached by
        #: BrokerServer (``odradek.broker.txn``)
        self.transaction_coordinator: Any = None
        self.txn_offsets: Any = None
        #: the partition leader's side of transaction markers (WriteTxnMarkers), attached with them
        self.txn_markers: Any = None
        #: this broker's controller (campaigns; elects while it holds the election), attached by
        #: BrokerServer once the broker is registered
        self.controller: Controller | None = None
        #: the authorizer ``authorizer.class.name`` selects, attached and started by BrokerServer;
        #: None: no authorizer, every request is allowed (handlers check nothing)
        self.authorizer: Authorizer | None = None

    async def start(self) -> None:
        """Load the metadata and host this broker's partitions (the watch runs separately:
        ``metadata_cache.run`` and ``replica_manager.run`` belong in the owner's nursery)."""
        await self.metadata_cache.load()
        await self.quotas.configs.load()
        await self.dynamic_config.load()
        await self.ip_connection_rates.load()

    def _apply_dynamic_config(self) -> None:
        """The dynamic broker configs in force (at start and on each change): the replication
        quotas' rates, the connection creation rate, ``max.connections`` and the listeners' own
        connection limits."""
        for quota in (self.leader_replication_quota, self.follower_replication_quota):
            quota.update_quota(int(self.dynamic_config.value(f"{quota.side}.replication.throttled.rate")))
        rate = int(self.dynamic_config.value("replica.alter.log.dirs.io.max.bytes.per.second"))
        self.alter_log_dirs.quota.update_quota(rate)
        rate = int(self.dynamic_config.value("max.connection.creation.rate"))
        self.connection_quotas.max_connection_creation_rate = rate
        max_connections = int(self.dynamic_config.value("max.connections"))
        if max_connections != self.connection_quotas.max_connections:
            self.connection_quotas.set_max_connections(max_connections)
        self._apply_per_ip_limits()
        listeners = [ep.name for ep in self.config.listeners]
        self.connection_quotas.set_listener_limits(
            *(
                {name: int(v) for name in listeners if (v := self.dynamic_config.listener_value(name, key)) is not None}
                for key in ("max.connections", "max.connection.creation.rate")
            )
        )

    def _apply_per_ip_limits(self) -> None:
        """``max.connections.per.ip`` and its overrides in force, when they changed. A hostname in
        the overrides is resolved here, on the change (as Kafka's reconfiguration does); one that
        no longer resolves keeps the overrides that were in force, with a warning."""
        wanted = (
            int(self.dynamic_config.value("max.connections.per.ip")),
            str(self.dynamic_config.value("max.connections.per.ip.overrides")),
        )
        if wanted == self._per_ip_applied:
            return
        try:
            overrides = resolve_overrides(parse_connection_overrides(wanted[1]))
        except ConfigError as exc:
            log.warning("max.connections.per.ip.overrides not applied: %s", exc)
            return
        self.connection_quotas.set_per_ip_limits(wanted[0], overrides)
        self._per_ip_applied = wanted

    async def shutdown(self) -> None:
        """Answer parked requests, snapshot producer state, checkpoint HWs, flush logs."""
        await self.replica_manager.shutdown()

    # -- data path -------------------------------------------------------------------------------
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
        """Append a Produce request's batches. A client may not write to the internal topics
        (Kafka answers INVALID_TOPIC_EXCEPTION, "Cannot append to internal topic"): only their
        coordinators do (``as_coordinator``). A client's record there took effect at the
        coordinator's next load, and one it could not read stopped the broker from starting."""
        allowed = partitions
        if not as_coordinator and not INTERNAL_TOPICS.isdisjoint(tp.topic for tp in partitions):
            allowed = {tp: data for tp, data in partitions.items() if tp.topic not in INTERNAL_TOPICS}
        origin = AppendOrigin.COORDINATOR if as_coordinator else AppendOrigin.CLIENT
        results = {}
        if allowed:
            results = await self.replica_manager.append_records(
                acks,
                timeout_ms,
                allowed,
                origin=origin,
                api_version=api_version,
                transactional_id=transactional_id,
                on_appended=on_appended,
            )
        elif on_appended is not None:
            on_appended()
        if allowed is partitions:
            return results
        return {tp: results.get(tp) or _internal_topic_refused(tp) for tp in partitions}

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
        max_bytes = min(max_bytes, int(self.config["fetch.max.bytes"]))
        return await self.replica_manager.fetch_messages(
            replica_id,
            max_wait_ms,
            min_bytes,
            max_bytes,
            IsolationLevel(isolation_level),
            partitions,
            client_metadata,
            replica_epoch,
        )

    def _wire_replica_selection(self, config: Config) -> None:
        """KIP-392: the replica manager asks the metadata cache for brokers' racks and liveness
        (this broker's own rack from its config, before its registration is visible), and for
        their broker epochs (KIP-903: follower fetches of a restarted broker's old process)."""
        cache = self.metadata_cache
        me, my_rack = config.broker_id, str(config["broker.rack"]) or None

        def rack_of(broker_id: int) -> str | None:
            return my_rack if broker_id == me else cache.rack_of(broker_id)

        def alive(broker_id: int) -> bool:
            return broker_id == me or broker_id in cache.brokers

        self.replica_manager.rack_of = rack_of
        self.replica_manager.broker_alive = alive

        def broker_epoch_of(broker_id: int) -> int | None:
            reg = cache.brokers.get(broker_id)
            return None if reg is None else reg.epoch

        self.replica_manager.broker_epoch_of = broker_epoch_of

    async def list_offsets(
        self,
        replica_id: int,
        isolation_level: IsolationLevel,
        partitions: Sequence[ListOffsetsPartition],
    ) -> dict[TopicPartition, ListOffsetsPartitionResult]:
        results = self.replica_manager.list_offsets(replica_id, IsolationLevel(isolation_level), partitions)
        await self.replica_manager.search_remote_timestamps(partitions, results)  # tiered storage
        return results

    async def delete_records(
        self, offsets: Mapping[TopicPartition, int], timeout_ms: int
    ) -> dict[TopicPartition, DeleteRecordsResult]:
        return await self.replica_manager.delete_records(offsets, timeout_ms, self.metadata_cache.live_broker_ids)

    async def offset_for_leader_epoch(
        self, replica_id: int, partitions: Sequence[OffsetForLeaderEpochPartition]
    ) -> dict[TopicPartition, EpochEndOffset]:
        return self.replica_manager.offset_for_leader_epoch(partitions)

    async def init_producer_id(
        self,
        transactional_id: str | None,
        transaction_timeout_ms: int,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
    ) -> InitProducerIdResult:
        if (producer_id < 0) != (producer_epoch < 0):
            # Kafka's KafkaApis: a producer id without an epoch (or the reverse) is malformed
            return InitProducerIdResult(ErrorCode.INVALID_REQUEST)
        if transactional_id is not None and self.transaction_coordinator is not None:
            result: InitProducerIdResult = await self.transaction_coordinator.init_producer_id(
                transactional_id, transaction_timeout_ms, producer_id, producer_epoch
            )
            return result
        return await self.producer_ids.init_producer_id(
            transactional_id, transaction_timeout_ms, producer_id, producer_epoch
        )

    async def describe_producers(
        self, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, DescribeProducersResult]:
        """Kafka's ``handleDescribeProducersRequest``: an illegal topic name is
        INVALID_TOPIC_EXCEPTION, a topic the cluster does not have UNKNOWN_TOPIC_OR_PARTITION;
        then this broker's replica answers (leader or follower), a partition the topic has but
        this broker does not host NOT_LEADER_OR_FOLLOWER (the client refreshes its metadata),
        one it does not have UNKNOWN_TOPIC_OR_PARTITION."""
        results: dict[TopicPartition, DescribeProducersResult] = {}
        cache = self.metadata_cache
        async for tp in paced(partitions):
            try:
                validate_topic_name(tp.topic)
            except InvalidTopic as exc:
                results[tp] = DescribeProducersResult(ErrorCode.INVALID_TOPIC_EXCEPTION, error_message=str(exc))
                continue
            topic = cache.topics.get(tp.topic)
            if topic is None:
                results[tp] = DescribeProducersResult(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, error_message=f"unknown topic {tp.topic!r}"
                )
                continue
            producers = self.replica_manager.active_producers(tp)
            if producers is not None:
                results[tp] = DescribeProducersResult(ErrorCode.NONE, producers)
            elif tp.partition in topic.assignment:
                results[tp] = DescribeProducersResult(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            else:
                results[tp] = DescribeProducersResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return results

    # -- metadata --------------------------------------------------------------------------------
    async def metadata(
        self,
        topics: Sequence[str] | None,
        allow_auto_create: bool,
        *,
        listener_name: str | None = None,
    ) -> ClusterMetadata:
        cache = self.metadata_cache
        live = cache.live_broker_ids()
        brokers = self._brokers_on(live, listener_name)
        names = sorted(cache.topics) if topics is None else list(dict.fromkeys(topics))
        invalid: dict[str, str] = {}
        for name in names:
            try:
                validate_topic_name(name)
            except InvalidTopic as exc:
                invalid[name] = str(exc)
        missing = [n for n in names if n not in cache.topics and n not in invalid and n not in INTERNAL_TOPICS]
        created: dict[str, CreateTopicResult] = {}
        if missing and allow_auto_create and self.config["auto.create.topics.enable"]:
            created = await self.admin.auto_create(missing)
        listed = frozenset(b.node_id for b in brokers)
        live_ids = tuple(live)
        out = []
        for name in names:
            if name in invalid:
                out.append(TopicMetadata(ErrorCode.INVALID_TOPIC_EXCEPTION, name))
                continue
            topic = cache.topics.get(name)
            if topic is None:
                err = created[name].error if name in created else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                out.append(TopicMetadata(err if err is not ErrorCode.NONE else ErrorCode.LEADER_NOT_AVAILABLE, name))
                continue
            out.append(self._topic_answer(topic, live_ids, listed))
        return ClusterMetadata(self.cluster_id, cache.controller_id, tuple(brokers), tuple(out))

    def _brokers_on(self, live: Iterable[int], listener_name: str | None) -> list[BrokerNode]:
        """The live brokers that have an endpoint on ``listener_name``, as clients reach them."""
        cache = self.metadata_cache
        brokers = []
        for b in live:
            ep = cache.endpoint_for(b, listener_name)
            if ep is not None:
                brokers.append(BrokerNode(b, ep[0], ep[1], cache.rack_of(b)))
        return brokers

    async def describe_cluster(self, *, listener_name: str | None = None) -> ClusterMetadata:
        """Kafka's ``computeDescribeClusterResponse``: the live brokers on the listener, and the
        controller only if it is one of them (else -1)."""
        cache = self.metadata_cache
        brokers = self._brokers_on(cache.live_broker_ids(), listener_name)
        controller = cache.controller_id
        if all(b.node_id != controller for b in brokers):
            controller = -1
        return ClusterMetadata(self.cluster_id, controller, tuple(brokers), ())

    async def describe_log_dirs(self, partitions: Collection[TopicPartition] | None) -> list[LogDirResult]:
        dirs = await described_log_dirs(self.storage)
        if dirs is None:
            # a third-party engine written before describe_log_dirs: its logs under the first
            # of log.dirs, volume sizes unknown (it fails the conformance suite until it has it)
            dirs = [LogDirDescription(str(self.config.log_dirs[0].absolute()), tuple(self.storage.all_logs()))]
        return self.replica_manager.describe_log_dirs(partitions, dirs)

    async def alter_replica_log_dirs(self, wanted: Mapping[TopicPartition, str]) -> dict[TopicPartition, ErrorCode]:
        return await self.alter_log_dirs.alter_replica_log_dirs(wanted)

    def _topic_answer(self, topic: TopicState, live: tuple[int, ...], listed: frozenset[int]) -> TopicMetadata:
        """One topic's metadata, reused while nothing it depends on changed: a 1,000-partition
        topic costs ~4 ms to rebuild, and every client asks for it when it starts."""
        cached = self._topic_answers.get(topic.name)
        if (
            cached is not None
            and cached[0] is topic
            and cached[1] == topic.state_changes
            and cached[2] == live
            and cached[3] == listed
        ):
            return cached[4]
        alive = set(live)
        parts = []
        for p, replicas in sorted(topic.assignment.items()):
            state = topic.states.get(p)
            leader = state.leader if state is not None and state.leader in alive else -1
            error = ErrorCode.NONE
            if leader < 0:
                error = ErrorCode.LEADER_NOT_AVAILABLE
            elif leader not in listed:
                error = ErrorCode.LISTENER_NOT_FOUND
            parts.append(
                PartitionMetadata(
                    error,
                    p,
                    leader,
                    state.leader_epoch if state is not None else -1,
                    replicas,
                    state.isr if state is not None else (),
                    tuple(r for r in replicas if r not in alive),
                )
            )
        answer = TopicMetadata(ErrorCode.NONE, topic.name, topic.name in INTERNAL_TOPICS, tuple(parts), topic.topic_id)
        if len(self._topic_answers) >= _TOPIC_ANSWERS_MAX and topic.name not in self._topic_answers:
            self._topic_answers.clear()  # deleted topics' answers go with the rest; rebuilt on demand
        self._topic_answers[topic.name] = (topic, topic.state_changes, live, listed, answer)
        return answer

    # -- administration --------------------------------------------------------------------------
    async def create_topics(
        self,
        topics: Sequence[CreatableTopic],
        timeout_ms: int,
        validate_only: bool,
        quota: ControllerMutationQuota = UNBOUNDED,
    ) -> dict[str, CreateTopicResult]:
        return await self.admin.create_topics(topics, validate_only, quota)

    async def delete_topics(
        self, names: Sequence[str], timeout_ms: int, quota: ControllerMutationQuota = UNBOUNDED
    ) -> dict[str, TopicResult]:
        return await self.admin.delete_topics(names, quota)

    async def create_partitions(
        self,
        topics: Sequence[CreatePartitionsTopic],
        timeout_ms: int,
        validate_only: bool,
        quota: ControllerMutationQuota = UNBOUNDED,
    ) -> dict[str, TopicResult]:
        return await self.admin.create_partitions(topics, validate_only, quota)

    async def describe_configs(
        self,
        resources: Sequence[ConfigResource],
        *,
        include_synonyms: bool = False,
        include_documentation: bool = False,
    ) -> list[DescribeConfigsResult]:
        return self.configs.describe(
            resources, include_synonyms=include_synonyms, include_documentation=include_documentation
        )

    async def incremental_alter_configs(
        self, resources: Sequence[AlterConfigsResource], validate_only: bool
    ) -> list[AlterConfigsResult]:
        return await self.configs.incremental_alter(resources, validate_only)

    async def alter_configs(
        self, resources: Sequence[AlterConfigsResource], validate_only: bool
    ) -> list[AlterConfigsResult]:
        return await self.configs.incremental_alter(resources, validate_only, replace=True)

    async def elect_leaders(
        self, election_type: ElectionType, partitions: Sequence[TopicPartition] | None, timeout_ms: int
    ) -> dict[TopicPartition, ElectLeadersResult]:
        return await elect_leaders(self.controller, self.metadata_cache, election_type, partitions, timeout_ms)

    async def alter_partition_reassignments(
        self,
        reassignments: Mapping[TopicPartition, Sequence[int] | None],
        *,
        allow_replication_factor_change: bool = True,
    ) -> dict[TopicPartition, ReassignmentResult]:
        return await alter_partition_reassignments(
            self.controller, reassignments, allow_replication_factor_change=allow_replication_factor_change
        )

    async def list_partition_reassignments(
        self, partitions: Mapping[str, Sequence[int]] | None
    ) -> dict[TopicPartition, OngoingReassignment]:
        return list_partition_reassignments(self.controller, self.metadata_cache, partitions)
