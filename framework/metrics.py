"""The broker's metrics, under the names Kafka's metrics get in Prometheus.

Kafka publishes its metrics over JMX, and Prometheus scrapes them through the JMX exporter, whose
usual rules turn ``kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec,topic=t`` into
``kafka_server_brokertopicmetrics_messagesin_total{topic="t"}``. odradek serves the same names
itself (prometheus-client's exposition), so dashboards and alerts written for Kafka read them.

Two kinds of value, kept apart for the hot path's sake:

- *counters* the request path bumps (:class:`BrokerMetrics`): records and bytes in and out per
  topic, produce and fetch requests per topic and their failures, requests per API and version
  and their total time. They are plain integers in the broker's own thread: no lock, no label
  lookup, one dict lookup and a few additions per partition of a Produce or Fetch;
- *gauges* read from the broker's state when Prometheus scrapes (:class:`BrokerCollector`):
  partitions, leaders, under-replicated and under-min-ISR partitions, each log's size and
  offsets, connections, request memory, parked requests, groups, whether this broker is the
  controller. Nothing is kept for them between scrapes.

A scrape runs in the exporter's HTTP thread (see :mod:`odradek.metrics_exporter`), which asks
the broker's trio thread to build the samples (``trio.from_thread.run_sync``): the state is
only ever read on the thread that changes it.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric

from .errors import ErrorCode
from .protocol import api_name

if TYPE_CHECKING:
    from .broker.core import BrokerCore

#: Produce errors that are not failures (Kafka's ``ReplicaManager.appendToLocalLog`` does not
#: mark FailedProduceRequestsPerSec for them): the client retries or fixes its batch
EXPECTED_PRODUCE_ERRORS = frozenset(
    {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.MESSAGE_TOO_LARGE,
        ErrorCode.RECORD_LIST_TOO_LARGE,
        ErrorCode.CORRUPT_MESSAGE,
        ErrorCode.KAFKA_STORAGE_ERROR,
    }
)
#: Fetch errors that are not failures (Kafka's ``ReplicaManager.readFromLocalLog``)
EXPECTED_FETCH_ERRORS = frozenset(
    {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.OFFSET_OUT_OF_RANGE,
        ErrorCode.INCONSISTENT_TOPIC_ID,
    }
)

#: Upper bounds (seconds) of the request-time histogram's buckets: 0.5 ms to 30 s, the span
#: from a Produce with acks=1 to a long-poll Fetch or a JoinGroup waiting out its rebalance.
REQUEST_TIME_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass(slots=True)
class TopicCounters:
    """Kafka's ``BrokerTopicMetrics`` for one topic (or, as ``all_topics``, for every topic)."""

    messages_in: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    replication_bytes_in: int = 0
    replication_bytes_out: int = 0
    produce_requests: int = 0
    failed_produce_requests: int = 0
    fetch_requests: int = 0
    failed_fetch_requests: int = 0
    follower_fetch_requests: int = 0
    follower_bytes_out: int = 0
    preferred_replica_redirects: int = 0
    #: partitions of Fetch requests (a follower's, or a consumer's v12+) answered with a diverging
    #: epoch: the fetcher's log has a tail this leader's lacks (odradek's; Kafka has no such meter)
    diverging_epoch_fetches: int = 0

    def add(self, other: TopicCounters) -> None:
        """Add ``other``'s counts to these."""
        for name in TopicCounters.__slots__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass(slots=True)
class RequestTimes:
    """Requests of one API: how many, per version, and a histogram of their total time."""

    by_version: dict[int, int] = field(default_factory=dict)
    buckets: list[int] = field(default_factory=lambda: [0] * (len(REQUEST_TIME_BUCKETS_S) + 1))
    seconds: float = 0.0
    count: int = 0


class BrokerMetrics:
    """The counters the broker's request path keeps (see the module docstring).

    Kafka counts a Produce or Fetch "request" per partition it names (``TotalProduceRequestsPerSec``
    grows by one for each topic-partition of a request; a follower's fetches count too), and so
    does this, for partitions of topics that exist (Kafka answers the others before its replica
    manager sees them, so a client's made-up names never become series). A *failed* one is a
    partition answered with an error Kafka does not expect in normal operation: not a moved
    leader, an unknown partition, a fenced or unknown epoch, an offset out of range, a too-large
    or corrupt batch or a storage error (:data:`EXPECTED_PRODUCE_ERRORS`,
    :data:`EXPECTED_FETCH_ERRORS`, as Kafka's ``ReplicaManager`` sorts them), so an election
    does not set off alerts. Records and bytes are counted once appended (leader appends, every
    origin) or once read for an answer (consumers; a follower's reads are
    ``ReplicationBytesOutPerSec``, what a follower appends ``ReplicationBytesInPerSec``; the
    broker's own coordinators' reads are not counted). The all-topics totals are summed when
    read, from the topics and the deleted topics' totals, so the hot path bumps one set of
    counters.
    """

    def __init__(self) -> None:
        self.topics: dict[str, TopicCounters] = {}
        self.requests: dict[int, RequestTimes] = {}
        #: ISR changes this broker wrote as a leader (Kafka's IsrShrinksPerSec, IsrExpandsPerSec;
        #: the controller's removal of a dead broker is not one, as in Kafka)
        self.isr_shrinks = 0
        self.isr_expands = 0
        #: SASL sessions renewed on their connection, renewals refused, and connections closed for
        #: a session that expired unrenewed (KIP-368; Kafka's ``successful-reauthentication-total``,
        #: ``failed-reauthentication-total``, ``expired-connections-killed-count``)
        self.reauthentications = 0
        self.failed_reauthentications = 0
        self.expired_sessions_closed = 0
        #: follower fetches refused NOT_LEADER_OR_FOLLOWER for a broker epoch older than the one
        #: registered for the follower (KIP-903; odradek's, Kafka logs them but counts none)
        self.stale_broker_epoch_fetches = 0
        #: what deleted topics had counted, kept in the all-topics totals
        self._retired = TopicCounters()

    def topic(self, name: str) -> TopicCounters:
        counters = self.topics.get(name)
        if counters is None:
            counters = self.topics[name] = TopicCounters()
        return counters

    @property
    def all_topics(self) -> TopicCounters:
        """Kafka's all-topics meters: every topic's counts, deleted topics' included."""
        total = TopicCounters()
        for counters in (*self.topics.values(), self._retired):
            total.add(counters)
        return total

    def forget_topic(self, name: str) -> None:
        """A deleted topic's counters go, as Kafka removes its ``BrokerTopicMetrics``; the
        all-topics totals keep what it counted."""
        counters = self.topics.pop(name, None)
        if counters is not None:
            self._retired.add(counters)

    def appended(self, topic: str, records: int, size: int) -> None:
        """A produce request's partition was appended as leader: ``records`` records, ``size`` bytes."""
        t = self.topics.get(topic) or self.topic(topic)
        t.produce_requests += 1
        t.messages_in += records
        t.bytes_in += size

    def produce_refused(self, topic: str, error: ErrorCode) -> None:
        """A produce request's partition was answered with ``error``."""
        t = self.topic(topic)
        t.produce_requests += 1
        t.failed_produce_requests += error not in EXPECTED_PRODUCE_ERRORS

    def fetched(self, topic: str, size: int, *, follower: bool) -> None:
        """A fetch request's partition was answered with ``size`` bytes of records."""
        t = self.topics.get(topic) or self.topic(topic)
        t.fetch_requests += 1
        if follower:
            t.replication_bytes_out += size
        else:
            t.bytes_out += size

    def fetched_from_follower(self, topic: str, size: int) -> None:
        """A consumer's fetch of a partition was served by this broker as a follower (KIP-392),
        ``size`` bytes of it (counted in ``bytes_out`` too)."""
        t = self.topic(topic)
        t.follower_fetch_requests += 1
        t.follower_bytes_out += size

    def diverged(self, topic: str) -> None:
        """A fetch request's partition was answered with a diverging epoch (no records)."""
        self.topic(topic).diverging_epoch_fetches += 1

    def redirected_to_preferred_replica(self, topic: str) -> None:
        """A consumer's fetch of a partition was answered with a preferred read replica (KIP-392)."""
        self.topic(topic).preferred_replica_redirects += 1

    def fetch_refused(self, topic: str, error: ErrorCode) -> None:
        """A fetch request's partition was answered with ``error``."""
        t = self.topic(topic)
        t.fetch_requests += 1
        t.failed_fetch_requests += error not in EXPECTED_FETCH_ERRORS

    def replicated(self, topic: str, size: int) -> None:
        """A follower appended ``size`` bytes it fetched from its leader."""
        self.topic(topic).replication_bytes_in += size

    def request_done(self, api_key: int, api_version: int, seconds: float) -> None:
        """One request of ``api_key`` (``api_version``) was answered ``seconds`` after it was read."""
        times = self.requests.get(api_key) or self._new_request_times(api_key)
        by_version = times.by_version
        by_version[api_version] = by_version.get(api_version, 0) + 1
        times.buckets[bisect.bisect_left(REQUEST_TIME_BUCKETS_S, seconds)] += 1
        times.seconds += seconds
        times.count += 1

    def _new_request_times(self, api_key: int) -> RequestTimes:
        times = self.requests[api_key] = RequestTimes()
        return times


_TOPIC_COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("messages_in", "messagesin", "Records appended by this broker as leader (MessagesInPerSec)."),
    ("bytes_in", "bytesin", "Bytes of records appended as leader (BytesInPerSec)."),
    ("bytes_out", "bytesout", "Bytes of records read for consumers' fetches (BytesOutPerSec)."),
    (
        "replication_bytes_in",
        "replicationbytesin",
        "Bytes of records appended as follower (ReplicationBytesInPerSec).",
    ),
    (
        "replication_bytes_out",
        "replicationbytesout",
        "Bytes of records read for followers' fetches (ReplicationBytesOutPerSec).",
    ),
    (
        "produce_requests",
        "totalproducerequests",
        "Partitions named in Produce requests (TotalProduceRequestsPerSec).",
    ),
    (
        "failed_produce_requests",
        "failedproducerequests",
        "Partitions of Produce requests answered with an error (FailedProduceRequestsPerSec).",
    ),
    (
        "fetch_requests",
        "totalfetchrequests",
        "Partitions named in consumers' Fetch requests (TotalFetchRequestsPerSec).",
    ),
    (
        "failed_fetch_requests",
        "failedfetchrequests",
        "Partitions of consumers' Fetch requests answered with an error (FailedFetchRequestsPerSec).",
    ),
    (
        "follower_fetch_requests",
        "followerfetchrequests",
        "Partitions of consumers' Fetch requests this broker served as a follower (KIP-392; no Kafka metric).",
    ),
    (
        "follower_bytes_out",
        "followerbytesout",
        "Bytes of records read for consumers' fetches served as a follower (KIP-392; in bytesout too).",
    ),
    (
        "preferred_replica_redirects",
        "preferredreplicaredirects",
        "Partitions of consumers' Fetch requests answered with a preferred read replica (KIP-392).",
    ),
    (
        "diverging_epoch_fetches",
        "divergingepochfetches",
        "Partitions of Fetch requests answered with a diverging epoch (the fetcher's log must truncate; "
        "odradek's, Kafka has no such meter).",
    ),
)


@dataclass(slots=True)
class Snapshot:
    """The broker's counters and state at one instant, as plain values (cheap to take on the
    broker's thread; the metric families are built from it on any thread)."""

    topics: list[tuple[str, TopicCounters]]
    all_topics: TopicCounters
    requests: list[tuple[str, list[tuple[int, int]], list[int], float]]
    replica_manager: list[tuple[str, int, str]]
    isr_changes: tuple[int, int]
    fetch_session_evictions: int
    purgatories: list[tuple[str, int]]
    #: (topic, partition, log size, log start offset, log end offset, high watermark)
    partitions: list[tuple[str, int, int, int, int, int]]
    broker: list[tuple[str, float, str]]
    #: client quota rows (``odradek.broker.quotas.QuotaSample``): entities recorded lately
    quotas: list[Any] = field(default_factory=list)
    #: controller mutation quota rows (``odradek.broker.mutation_quota.MutationSample``)
    mutation_quotas: list[Any] = field(default_factory=list)
    #: (listener, connections it holds, its limit) for each listener seen (KIP-402)
    listeners: list[tuple[str, int, int]] = field(default_factory=list)
    #: follower fetches fenced for an old broker epoch (``BrokerMetrics.stale_broker_epoch_fetches``)
    stale_broker_epoch_fetches: int = 0


class BrokerCollector:
    """Every sample of a broker core's counters and state: :meth:`snapshot` on the broker's
    thread, :meth:`families` anywhere (the exporter's HTTP thread); :meth:`collect` does both."""

    def __init__(self, core: BrokerCore) -> None:
        self.core = core

    def collect(self) -> list[Metric]:
        return self.families(self.snapshot())

    def snapshot(self) -> Snapshot:
        """Copy what the families need: about a microsecond a hosted partition."""
        core = self.core
        metrics = core.metrics
        rm = core.replica_manager
        partitions = list(rm.partitions.values())
        leaders = [p for p in partitions if p.is_leader]
        # a partition being reassigned (KIP-455) counts its target replicas, not the full set
        # of target and original ones, as Kafka's ReplicaManager does
        removing = core.metadata_cache.removing_replicas
        moving = core.metadata_cache.reassigning_partitions()
        reassigning = [p for p in leaders if p.topic_partition in moving]
        replication_factor = {id(p): len(p.replicas) - len(removing(p.topic_partition)) for p in leaders}
        rows = []
        for tp, partition in rm.partitions.items():
            log = partition.log
            rows.append(
                (tp.topic, tp.partition, log.size_in_bytes, partition.log_start_offset, log.log_end_offset,
                 partition.high_watermark)
            )  # fmt: skip
        controller = core.controller
        memory = core.request_memory
        broker: list[tuple[str, float, str]] = [
            (
                "kafka_controller_kafkacontroller_activecontrollercount",
                1 if controller is not None and controller.leadership is not None else 0,
                "1 while this broker is the cluster's controller.",
            ),
            (
                "kafka_server_socket_server_metrics_connection_count",
                core.connection_quotas.total,
                "Client connections open, over every listener.",
            ),
            (
                "odradek_connections_ip_throttled",
                core.connection_quotas.ip_throttled,
                "Connections closed unserved because their address was over its connection_creation_rate (KIP-612).",
            ),
            (
                "odradek_connections_accept_throttled_ms",
                core.connection_quotas.accept_throttled_ms,
                "Milliseconds the listeners paused accepting for the broker's and the listeners' "
                "max.connection.creation.rate (KIP-612).",
            ),
            (
                "odradek_connections_evicted",
                core.connection_quotas.evicted,
                "Connections closed to make room for inter-broker ones over max.connections (KIP-402).",
            ),
            (
                "kafka_network_socketserver_memorypoolused",
                memory.used,
                "Bytes of request frames held (queued.max.request.bytes counts them).",
            ),
        ]
        if memory.limit is not None:
            broker.append(
                (
                    "kafka_network_socketserver_memorypoolavailable",
                    memory.limit - memory.used,
                    "Bytes of request memory left before connections wait (queued.max.request.bytes).",
                )
            )
        sessions = core.fetch_sessions
        broker += [
            (
                "kafka_server_fetchsessioncache_numincrementalfetchsessions",
                len(sessions.sessions),
                "Incremental fetch sessions open (KIP-227).",
            ),
            (
                "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached",
                sessions.cached_partitions,
                "Partitions the open fetch sessions hold.",
            ),
        ]
        for side in ("leader", "follower"):
            quota = getattr(core, f"{side}_replication_quota", None)
            if quota is None:
                continue
            broker += [
                (
                    f"kafka_server_{side}replication_byte_rate",
                    quota.byte_rate() if quota.enabled else 0.0,
                    f"Bytes per second of throttled replicas' traffic on the {side} side (KIP-73), over the "
                    "replication quota window.",
                ),
                (
                    f"odradek_replication_{side}_held_back",
                    quota.held_back,
                    f"Times a throttled replica was held back on the {side} side since the broker started.",
                ),
            ]
        broker += [
            (
                "kafka_server_socket_server_metrics_successful_reauthentication_total",
                metrics.reauthentications,
                "SASL sessions renewed on their connection (KIP-368).",
            ),
            (
                "kafka_server_socket_server_metrics_failed_reauthentication_total",
                metrics.failed_reauthentications,
                "SASL re-authentications refused (the connection was closed).",
            ),
            (
                "kafka_server_socket_server_metrics_expired_connections_killed_count",
                metrics.expired_sessions_closed,
                "Connections closed because their SASL session expired unrenewed (connections.max.reauth.ms).",
            ),
        ]
        remote = getattr(rm, "remote_log_manager", None)
        if remote is not None:
            m = remote.metrics
            broker += [
                (f"kafka_server_brokertopicmetrics_{name}", value, doc)
                for name, value, doc in (
                    ("remotecopysegments", m.copy_segments, "Segments copied to remote storage (tiered storage)."),
                    ("remotecopybytes", m.copy_bytes, "Bytes copied to remote storage (RemoteCopyBytesPerSec)."),
                    ("remotecopyerrors", m.copy_failures, "Failed copies to remote storage (RemoteCopyErrorsPerSec)."),
                    (
                        "remotefetchrequests",
                        m.fetch_requests,
                        "Fetches read from remote storage (RemoteFetchRequestsPerSec).",
                    ),
                    ("remotefetchbytes", m.fetch_bytes, "Bytes read from remote storage (RemoteFetchBytesPerSec)."),
                    (
                        "remotefetcherrors",
                        m.fetch_failures,
                        "Failed reads from remote storage (RemoteFetchErrorsPerSec).",
                    ),
                    ("remotedeletesegments", m.delete_segments, "Remote segments deleted by retention."),
                    (
                        "remotedeleteerrors",
                        m.delete_failures,
                        "Failed deletions of remote segments (RemoteDeleteErrorsPerSec).",
                    ),
                    (
                        "remotestoragefailingpartitions",
                        len(remote.failures.failing),
                        "Tiered partitions whose last remote storage task failed.",
                    ),
                    (
                        "remotefetchexpired",
                        m.fetch_expired,
                        "Remote reads not done within remote.fetch.max.wait.ms, answered without records "
                        "(Kafka's DelayedRemoteFetchMetrics ExpiresPerSec).",
                    ),
                    (
                        "remotefetchrejected",
                        m.fetch_rejected,
                        "Remote reads refused: every reader thread busy, remote.log.reader.max.pending.tasks waiting.",
                    ),
                    (
                        "remotetasksskipped",
                        m.tasks_skipped,
                        "Partition copy/expiration tasks not started as the previous one still ran (a hung call).",
                    ),
                    (
                        "remotecopythrottles",
                        m.copy_throttles,
                        "Copies that waited for remote.log.manager.copy.max.bytes.per.second (KIP-956).",
                    ),
                    (
                        "remotecopythrottletimems",
                        m.copy_throttle_ms,
                        "Milliseconds copies waited for the copy quota, in all.",
                    ),
                    (
                        "remotefetchthrottles",
                        m.fetch_throttles,
                        "Remote reads not started as remote.log.manager.fetch.max.bytes.per.second was exceeded.",
                    ),
                    (
                        "remotestorageabandonedcalls",
                        remote.calls.abandoned + remote.read_calls.abandoned,
                        "Remote storage calls abandoned by a timeout, leadership change or shutdown while running.",
                    ),
                    (
                        "remotestoragehungcalls",
                        remote.calls.hung + remote.read_calls.hung,
                        "Abandoned remote storage calls whose worker thread has not returned yet.",
                    ),
                )
            ]
        groups = _group_count(core.group_coordinator)
        if groups is not None:
            broker.append(
                (
                    "kafka_coordinator_group_groupmetadatamanager_numgroups",
                    groups,
                    "Consumer groups this broker coordinates.",
                )
            )
        return Snapshot(
            topics=[(topic, _copy(counters)) for topic, counters in metrics.topics.items()],
            all_topics=metrics.all_topics,
            requests=[
                (api_name(key), sorted(rt.by_version.items()), list(rt.buckets), rt.seconds)
                for key, rt in sorted(metrics.requests.items())
            ],
            replica_manager=[
                ("partitioncount", len(partitions), "Partitions this broker hosts."),
                ("leadercount", len(leaders), "Partitions this broker leads."),
                (
                    "underreplicatedpartitions",
                    sum(1 for p in leaders if len(p.isr) < replication_factor[id(p)]),
                    "Led partitions whose ISR lacks a replica.",
                ),
                ("reassigningpartitions", len(reassigning), "Led partitions being reassigned (KIP-455)."),
                (
                    "underminisrpartitioncount",
                    sum(1 for p in leaders if len(p.isr) < p.effective_min_isr),
                    "Led partitions whose ISR is below min.insync.replicas.",
                ),
                (
                    "atminisrpartitioncount",
                    sum(1 for p in leaders if len(p.isr) == p.effective_min_isr),
                    "Led partitions whose ISR is exactly min.insync.replicas.",
                ),
                ("offlinereplicacount", len(rm.offline_partitions), "Partitions offline here (their log dir failed)."),
            ],
            isr_changes=(metrics.isr_shrinks, metrics.isr_expands),
            stale_broker_epoch_fetches=metrics.stale_broker_epoch_fetches,
            fetch_session_evictions=sessions.evictions,
            purgatories=[
                (p.name, p.watched()) for p in (rm.produce_purgatory, rm.fetch_purgatory, rm.delete_records_purgatory)
            ],
            partitions=rows,
            broker=broker,
            quotas=core.quotas.metric_samples() if getattr(core, "quotas", None) is not None else [],
            mutation_quotas=core.quotas.mutation_samples() if getattr(core, "quotas", None) is not None else [],
            listeners=core.connection_quotas.listener_rows(),
        )

    def families(self, snap: Snapshot) -> list[Metric]:
        """The Prometheus metric families of ``snap``."""
        out: list[Metric] = []
        topics = sorted(snap.topics, key=lambda item: item[0])
        for attr, name, doc in _TOPIC_COUNTERS:
            per_topic = CounterMetricFamily(f"kafka_server_brokertopicmetrics_{name}", doc, labels=["topic"])
            for topic, counters in topics:
                per_topic.add_metric([topic], getattr(counters, attr))
            # Kafka's all-topics meter is the same JMX name without the topic tag
            every = CounterMetricFamily(f"kafka_server_brokertopicmetrics_{name}_alltopics", doc + " All topics.")
            every.add_metric([], getattr(snap.all_topics, attr))
            out += (per_topic, every)
        requests = CounterMetricFamily(
            "kafka_network_requestmetrics_requests",
            "Requests answered, per API and version (RequestsPerSec).",
            labels=["request", "version"],
        )
        times = HistogramMetricFamily(
            "kafka_network_requestmetrics_totaltime_seconds",
            "Time from the start of a request's handling to its answer ready, per API (TotalTimeMs).",
            labels=["request"],
        )
        for name, by_version, counts, seconds in snap.requests:
            for version, count in by_version:
                requests.add_metric([name, str(version)], count)
            cumulative, buckets = 0, []
            for bound, count in zip((*REQUEST_TIME_BUCKETS_S, float("inf")), counts, strict=True):
                cumulative += count
                buckets.append((_bucket_label(bound), cumulative))
            times.add_metric([name], buckets, seconds)
        out += (requests, times)
        out += (_gauge(f"kafka_server_replicamanager_{name}", doc, v) for name, v, doc in snap.replica_manager)
        for name, count, doc in (
            ("isrshrinks", snap.isr_changes[0], "ISR shrinks this broker wrote as leader (IsrShrinksPerSec)."),
            ("isrexpands", snap.isr_changes[1], "ISR expansions this broker wrote as leader (IsrExpandsPerSec)."),
        ):
            family = CounterMetricFamily(f"kafka_server_replicamanager_{name}", doc)
            family.add_metric([], count)
            out.append(family)
        stale = CounterMetricFamily(
            "odradek_replicamanager_stale_broker_epoch_fetches",
            "Follower fetches refused NOT_LEADER_OR_FOLLOWER for a broker epoch older than the registered one "
            "(KIP-903; odradek's, Kafka counts none).",
        )
        stale.add_metric([], snap.stale_broker_epoch_fetches)
        out.append(stale)
        evictions = CounterMetricFamily(
            "kafka_server_fetchsessioncache_incrementalfetchsessionevictions",
            "Fetch sessions evicted to make room for new ones (IncrementalFetchSessionEvictionsPerSec).",
        )
        evictions.add_metric([], snap.fetch_session_evictions)
        out.append(evictions)
        purgatory = GaugeMetricFamily(
            "kafka_server_delayedoperationpurgatory_purgatorysize",
            "Requests parked in a purgatory (acks=all produce, long-poll fetch, DeleteRecords).",
            labels=["delayedOperation"],
        )
        for name, watched in snap.purgatories:
            purgatory.add_metric([name], watched)
        out.append(purgatory)
        per_listener = GaugeMetricFamily(
            "kafka_server_socket_server_metrics_listener_connection_count",
            "Connections a listener holds (Kafka's connection-count per listener).",
            labels=["listener"],
        )
        listener_limit = GaugeMetricFamily(
            "odradek_listener_max_connections",
            "The connections a listener may hold: listener.name.<listener>.max.connections, else max.connections.",
            labels=["listener"],
        )
        for name, count, limit in snap.listeners:
            per_listener.add_metric([name], count)
            listener_limit.add_metric([name], limit)
        out += [per_listener, listener_limit]
        labels = ["topic", "partition"]
        size = GaugeMetricFamily("kafka_log_log_size", "Bytes of a partition's log.", labels=labels)
        start = GaugeMetricFamily("kafka_log_log_logstartoffset", "A partition's log start offset.", labels=labels)
        end = GaugeMetricFamily("kafka_log_log_logendoffset", "A partition's log end offset.", labels=labels)
        hw = GaugeMetricFamily(
            "kafka_cluster_partition_highwatermark", "A partition's high watermark here.", labels=labels
        )
        for topic, partition, log_size, log_start, log_end, high_watermark in sorted(snap.partitions):
            key = [topic, str(partition)]
            size.add_metric(key, log_size)
            start.add_metric(key, log_start)
            end.add_metric(key, log_end)
            hw.add_metric(key, high_watermark)
        out += (size, start, end, hw)
        out += (_gauge(name, doc, v) for name, v, doc in snap.broker)
        out += quota_families(snap.quotas)
        out += mutation_quota_families(snap.mutation_quotas)
        return out


def quota_families(rows: list[Any]) -> list[Metric]:
    """Kafka's per-entity quota metrics (``kafka.server:type=Produce|Fetch|Request,user=..,
    client-id=..``): the byte rate (request time) over the quota window, the average throttle time
    of the window's throttled requests (ms), and, odradek's own, how many were throttled since the
    broker started. Clients without a quota appear too once the quota type is in use, under the
    tags Kafka gives them (``ClientQuotaConfigs.unlimited_tags``)."""
    out: list[Metric] = []
    labels = ["user", "client_id"]
    for quota_type, measured, doc in (
        ("produce", "byte_rate", "Bytes per second over the quota window."),
        ("fetch", "byte_rate", "Bytes per second over the quota window."),
        ("request", "request_time", "Request thread time, percent of one thread, over the quota window."),
    ):
        mine = [r for r in rows if r.quota_type == quota_type]
        if not mine:
            continue
        rate = GaugeMetricFamily(f"kafka_server_{quota_type}_{measured}", doc, labels=labels)
        throttle = GaugeMetricFamily(
            f"kafka_server_{quota_type}_throttle_time", "Average throttle time (ms) in the quota window.", labels=labels
        )
        throttled = CounterMetricFamily(
            f"kafka_server_{quota_type}_throttled_requests", "Requests throttled for this quota entity.", labels=labels
        )
        for r in mine:
            key = [r.tags.user, r.tags.client_id]
            rate.add_metric(key, r.rate)
            throttle.add_metric(key, r.throttle_time_avg_ms)
            throttled.add_metric(key, r.throttled)
        out += (rate, throttle, throttled)
    return out


def mutation_quota_families(rows: list[Any]) -> list[Metric]:
    """Kafka's ``kafka.server:type=ControllerMutation,user=..,client-id=..`` metrics: the tokens
    left in the entity's bucket (below zero: throttled), and, odradek's own, the partitions it
    created, deleted or added and how often and how long it was throttled since the broker
    started. Only entities with a ``controller_mutation_rate`` appear."""
    if not rows:
        return []
    labels = ["user", "client_id"]
    tokens = GaugeMetricFamily(
        "kafka_server_controller_mutation_tokens", "Partition mutations the bucket holds now.", labels=labels
    )
    mutations = CounterMetricFamily(
        "kafka_server_controller_mutation_partitions",
        "Partitions created, deleted or added under the quota.",
        labels=labels,
    )
    throttled = CounterMetricFamily(
        "kafka_server_controller_mutation_throttled_requests", "Requests throttled for this entity.", labels=labels
    )
    throttle_ms = CounterMetricFamily(
        "kafka_server_controller_mutation_throttle_time_ms", "Throttle time given to this entity (ms).", labels=labels
    )
    for r in rows:
        key = [r.tags.user, r.tags.client_id]
        tokens.add_metric(key, r.tokens)
        mutations.add_metric(key, r.mutations)
        throttled.add_metric(key, r.throttled)
        throttle_ms.add_metric(key, r.throttle_ms_total)
    return [tokens, mutations, throttled, throttle_ms]


def _copy(counters: TopicCounters) -> TopicCounters:
    copy = TopicCounters()
    copy.add(counters)
    return copy


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc)
    family.add_metric([], value)
    return family


def _bucket_label(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


def _group_count(coordinator: Any) -> int | None:
    if coordinator is None:
        return None
    _, groups = coordinator.list_groups()
    return len(groups)


__all__ = [
    "EXPECTED_FETCH_ERRORS",
    "EXPECTED_PRODUCE_ERRORS",
    "REQUEST_TIME_BUCKETS_S",
    "BrokerCollector",
    "BrokerMetrics",
    "RequestTimes",
    "Snapshot",
    "TopicCounters",
]
