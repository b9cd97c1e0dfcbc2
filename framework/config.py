"""The broker's one config model, with Kafka's property names.

Sources, later ones winning: built-in defaults, a TOML file, ``ODRADEK_*`` environment variables
(``ODRADEK_LOG_DIRS`` -> ``log.dirs``), then ``--set key=value`` from the CLI. TOML dotted keys
(``log.segment.bytes = 1048576`` or a ``[log]`` table) are flattened back to Kafka's dotted names.
Every key is declared (built-ins here, plugin keys through the ``odradek_config_keys`` hook), so an
unknown key or a value of the wrong type is rejected with a message naming the key.

Topic-level configs (``segment.bytes``, ``retention.ms``, ``cleanup.policy`` ...) default to their
broker-level counterparts (``log.segment.bytes`` ...) exactly as in Kafka; :class:`TopicConfig`
holds one topic's effective values.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import os
import re
import socket
import tomllib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import InvalidConfig, OdradekError, UnsupportedCompressionType
from .interfaces import ConfigKey, Endpoint
from .records import codec_named

if TYPE_CHECKING:
    from .manager import Plugins

ENV_PREFIX = "ODRADEK_"
LONG_MAX = 2**63 - 1
_INTEGER = re.compile(r"^[+-]?[0-9]+$")


class ConfigError(OdradekError):
    """A config key is unknown or its value is invalid; the message names the key."""


#: Integer keys Kafka types as INT (32-bit; a larger value is INVALID_CONFIG there too); the
#: other integer keys are LONG, the internal topics' replication factors SHORT. The one source of
#: both the bounds here and DescribeConfigs' config_type (a topic key has its broker key's type).
#: Plugin keys are listed where Kafka has the same key (zookeeper.*).
KAFKA_INT_KEYS = frozenset(
    {
        "default.replication.factor", "log.flush.offset.checkpoint.interval.ms", "compression.gzip.level",
        "compression.lz4.level", "compression.zstd.level", "zookeeper.connection.timeout.ms",
        "zookeeper.session.timeout.ms",
        "broker.id", "socket.request.max.bytes", "queued.max.requests", "socket.send.buffer.bytes",
        "socket.receive.buffer.bytes", "fetch.max.bytes", "num.partitions", "message.max.bytes",
        "min.insync.replicas", "log.segment.bytes", "log.index.size.max.bytes", "log.index.interval.bytes",
        "log.retention.minutes", "log.retention.hours", "log.roll.hours", "log.roll.jitter.hours",
        "replica.fetch.max.bytes", "replica.fetch.wait.max.ms", "offsets.topic.num.partitions",
        "offsets.topic.segment.bytes", "offsets.retention.minutes", "offset.metadata.max.bytes",
        "group.min.session.timeout.ms", "group.max.session.timeout.ms", "group.initial.rebalance.delay.ms",
        "group.max.size", "group.consumer.session.timeout.ms", "group.consumer.heartbeat.interval.ms",
        "group.consumer.max.size", "producer.id.expiration.ms", "producer.id.expiration.check.interval.ms",
        "transactional.id.expiration.ms", "transaction.state.log.num.partitions", "transaction.max.timeout.ms",
        "transaction.state.log.min.isr", "leader.imbalance.per.broker.percentage", "max.connections",
        "max.connection.creation.rate",
        "max.connections.per.ip", "max.incremental.fetch.session.cache.slots",
        "quota.window.num", "quota.window.size.seconds",
        "replication.quota.window.num", "replication.quota.window.size.seconds",
    }
)  # fmt: skip
KAFKA_SHORT_KEYS = frozenset({"offsets.topic.replication.factor", "transaction.state.log.replication.factor"})
INT_MAX = 2**31 - 1
SHORT_MAX = 2**15 - 1
LONG_MIN = -(2**63)


def _k(
    name: str,
    type_: type,
    default: Any,
    doc: str,
    *,
    choices: Sequence[Any] | None = None,
    minimum: float | None = None,
    maximum: float | None = None,
    topic_key: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> ConfigKey:
    if maximum is None and type_ is int:
        maximum = INT_MAX if name in KAFKA_INT_KEYS else SHORT_MAX if name in KAFKA_SHORT_KEYS else None
    key = ConfigKey(name, type_, default, doc, choices=choices, minimum=minimum, topic_key=topic_key, maximum=maximum)
    return dataclasses.replace(key, extra=dict(extra)) if extra else key


#: The security protocols a listener may use, and Kafka's default listener map (each standard
#: name is its own protocol).
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_SECURITY_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in SECURITY_PROTOCOLS)

#: Built-in broker keys. ``topic_key`` marks broker defaults of topic-level configs.
BROKER_KEYS: tuple[ConfigKey, ...] = (
    # -- which plugins assemble this broker
    _k("storage", str, "segment", "Storage engine plugin (odradek_register_storage name)."),
    _k("metadata", str, "local", "Metadata store plugin: local, zookeeper or etcd."),
    _k(
        "transport",
        str,
        "",
        "Transport plugin name for the listeners and the broker's own connections to other brokers; empty: "
        "the transport serving each listener's security protocol (the built-in one when several do).",
    ),
    _k(
        "authorizer.class.name",
        str,
        "",
        "Authorizer plugin (odradek_register_authorizers name) deciding every request against ACLs; empty: "
        "none, everything is allowed and the ACL APIs answer SECURITY_DISABLED. Kafka's "
        "kafka.security.authorizer.AclAuthorizer and org.apache.kafka.metadata.authorizer.StandardAuthorizer "
        "select the built-in acl one; a name no plugin offers stops the broker.",
    ),
    _k(
        "replica.selector.class",
        str,
        "",
        "Replica selector plugin (odradek_register_replica_selectors name) choosing the replica a consumer "
        "fetching with Fetch v11+ reads from (KIP-392); empty: none, consumers read from leaders and followers "
        "refuse their fetches. Kafka's org.apache.kafka.common.replica.RackAwareReplicaSelector and "
        "org.apache.kafka.common.replica.LeaderSelector select the built-in rack-aware and leader; a name no "
        "plugin offers stops the broker.",
    ),
    _k(
        "plugins",
        list,
        [],
        "Extra plugins to load: entry-point names or module paths (needed for third-party plugins with "
        "ODRADEK_DISABLE_PLUGIN_AUTOLOAD=1). A name that matches nothing is an error.",
    ),
    _k(
        "plugins.disabled",
        list,
        [],
        "Plugins (entry-point names) never to load, e.g. one of two offering the same name or codec id; "
        "a name that matches no plugin is an error. Clients read ODRADEK_PLUGINS_DISABLED.",
    ),
    # -- identity and listeners
    _k("broker.id", int, 0, "This broker's id in the cluster.", minimum=0),
    _k("cluster.id", str, "", "Cluster id; generated and stored by the metadata store when empty."),
    _k(
        "broker.rack",
        str,
        "",
        "This broker's rack (empty: none): in its registration and Metadata answers; KIP-848 server-side "
        "assignors prefer giving a consumer (client.rack) partitions with a replica in its rack.",
    ),
    _k(
        "listeners",
        list,
        ["PLAINTEXT://127.0.0.1:9092"],
        "Where to listen: NAME://host:port, comma separated (an empty host: every interface).",
    ),
    _k(
        "advertised.listeners",
        list,
        [],
        "Addresses given to clients, each named after one of the listeners; default: listeners. An empty "
        "host is this machine's canonical host name; 0.0.0.0 and :: are refused (clients cannot connect to them).",
    ),
    _k(
        "listener.security.protocol.map",
        str,
        DEFAULT_SECURITY_PROTOCOL_MAP,
        "Each listener name's security protocol, NAME:PROTOCOL comma separated (PROTOCOL one of PLAINTEXT, "
        "SSL, SASL_PLAINTEXT, SASL_SSL), as Kafka's; a listener whose name is not mapped is refused.",
    ),
    _k(
        "inter.broker.listener.name",
        str,
        "",
        "The listener other brokers reach this one on, and this broker reaches them on (replication, "
        "transaction markers); empty: the first listener with security.inter.broker.protocol, else the first.",
    ),
    _k(
        "security.inter.broker.protocol",
        str,
        "",
        "Security protocol of the inter-broker listener (PLAINTEXT, SSL, ...): the first listener using it; "
        "only one of this and inter.broker.listener.name may be set.",
    ),
    _k("log.dirs", list, ["./data"], "Directories holding partition logs (the first also holds metadata)."),
    # -- network
    _k("socket.request.max.bytes", int, 104857600, "Largest request frame accepted.", minimum=1024),
    _k("connections.max.idle.ms", int, 600000, "Close connections idle for this long.", minimum=1),
    _k(
        "max.connections",
        int,
        INT_MAX,
        "Connections the broker holds at once, over all listeners; at the limit, listeners stop accepting "
        "until one closes (new connections wait in the listen backlog, none is refused). The inter-broker "
        "listener, when there are others, is never held back by it: its connection over the limit closes the "
        "least recently used connection of another listener. Per listener (KIP-402): "
        "listener.name.<listener>.max.connections, that listener's own limit (default: this value). Both "
        "dynamic (a broker's or the cluster default, IncrementalAlterConfigs).",
        minimum=0,
        extra={"per_listener": True},
    ),
    _k(
        "max.connection.creation.rate",
        int,
        INT_MAX,
        "New connections a second the broker accepts, over all listeners (KIP-612); above it the "
        "listeners pause accepting for the time that brings the rate back. Dynamic (a broker's or "
        "the cluster default, IncrementalAlterConfigs). Not applied to the inter-broker listener when "
        "there are others. Per listener: listener.name.<listener>.max.connection.creation.rate, recorded "
        "next to this one (default: this value; dynamic too). Per-address rates are the ip quota "
        "connection_creation_rate.",
        minimum=0,
        extra={"per_listener": True},
    ),
    _k(
        "max.connections.per.ip",
        int,
        INT_MAX,
        "Connections one client address may hold; one more is closed at once. 0 needs "
        "max.connections.per.ip.overrides (only the addresses listed there may connect). Dynamic "
        "(a broker's or the cluster default, IncrementalAlterConfigs; for new connections).",
        minimum=0,
    ),
    _k(
        "max.connections.per.ip.overrides",
        str,
        "",
        "Per-address limits over max.connections.per.ip, comma separated host:count "
        "(e.g. 127.0.0.1:200,client-host:50; a hostname counts for the addresses it resolves to at start, "
        "or when a dynamic change arrives). Dynamic, as max.connections.per.ip.",
    ),
    _k("queued.max.requests", int, 500, "In-flight requests per connection before reading pauses.", minimum=1),
    _k(
        "metrics.prometheus.listener",
        str,
        "",
        "host:port to serve the broker's metrics on for Prometheus (http://host:port/metrics; port 0 picks "
        "one, logged at start); empty: not served.",
    ),
    _k(
        "queued.max.request.bytes",
        int,
        -1,
        "Bytes of request frames the broker holds at once over all connections; at the limit, connections "
        "wait to read their next request (a frame goes in while any byte is free). 0 or -1: unbounded.",
    ),
    _k(
        "socket.send.buffer.bytes",
        int,
        102400,
        "SO_SNDBUF for client sockets (-1: OS default). 1 MiB raises the wire generator's 1 KiB fetch "
        "by ~25% but not kcat's (docs/performance.md), so Kafka's default stays.",
    ),
    _k(
        "socket.receive.buffer.bytes",
        int,
        1048576,
        "SO_RCVBUF for client sockets (-1: OS default). Kafka's default is 102400; odradek's is 1 MiB "
        "so a 1 MB produce request arrives in few reads (produce at 1 KiB records: +30%, "
        "docs/performance.md). The kernel allocates it only while unread data waits.",
    ),
    _k("fetch.max.bytes", int, 57671680, "Largest Fetch response the broker returns.", minimum=1024),
    _k(
        "max.incremental.fetch.session.cache.slots",
        int,
        1000,
        "Incremental fetch sessions (KIP-227) the broker keeps; 0: every fetch is a full fetch.",
        minimum=0,
    ),
    # -- client quotas (KIP-13, KIP-55)
    _k(
        "quota.window.num",
        int,
        11,
        "Samples a client quota's rate is measured over (Kafka's quota.window.num).",
        minimum=1,
    ),
    _k(
        "quota.window.size.seconds",
        int,
        1,
        "Length of each sample of a client quota's rate (Kafka's quota.window.size.seconds).",
        minimum=1,
    ),
    # -- replication quotas (KIP-73): dynamic, see odradek.broker.dynamic_config
    _k(
        "leader.replication.throttled.rate",
        int,
        LONG_MAX,
        "Bytes per second this broker, as a leader, sends to followers of the partitions a topic's "
        "leader.replication.throttled.replicas names, while they are out of the ISR (Kafka's, KIP-73; "
        "kafka-reassign-partitions --throttle sets it). The default is no limit. Dynamic: alter it "
        "for a broker, or for every broker as the cluster default, with IncrementalAlterConfigs.",
        minimum=0,
    ),
    _k(
        "follower.replication.throttled.rate",
        int,
        LONG_MAX,
        "Bytes per second this broker, as a follower, fetches for the partitions a topic's "
        "follower.replication.throttled.replicas names, while they are out of the ISR (Kafka's, "
        "KIP-73). The default is no limit. Dynamic, as leader.replication.throttled.rate.",
        minimum=0,
    ),
    _k(
        "replication.quota.window.num",
        int,
        11,
        "Samples a replication quota's rate is measured over (Kafka's replication.quota.window.num).",
        minimum=1,
    ),
    _k(
        "replication.quota.window.size.seconds",
        int,
        1,
        "Length of each sample of a replication quota's rate (Kafka's replication.quota.window.size.seconds).",
        minimum=1,
    ),
    # -- moves between log dirs (KIP-113): the copy's quota, dynamic
    _k(
        "replica.alter.log.dirs.io.max.bytes.per.second",
        int,
        LONG_MAX,
        "Bytes per second this broker copies, over all its moves of replicas between its log dirs "
        "(AlterReplicaLogDirs, KIP-113): the copy waits while its rate is over it (Kafka's). The "
        "default is no limit. Dynamic, as leader.replication.throttled.rate.",
        minimum=0,
    ),
    _k(
        "alter.log.dirs.replication.quota.window.num",
        int,
        11,
        "Samples the rate of replica.alter.log.dirs.io.max.bytes.per.second is measured over (Kafka's).",
        minimum=1,
    ),
    _k(
        "alter.log.dirs.replication.quota.window.size.seconds",
        int,
        1,
        "Length of each sample of that rate (Kafka's alter.log.dirs.replication.quota.window.size.seconds).",
        minimum=1,
    ),
    # -- topics
    _k("num.partitions", int, 1, "Partitions of auto-created topics.", minimum=1),
    # INT in Kafka, but a replication factor is an int16 in CreateTopics
    _k(
        "default.replication.factor", int, 1, "Replication factor of auto-created topics.", minimum=1, maximum=SHORT_MAX
    ),
    _k("auto.create.topics.enable", bool, True, "Create a topic when a Metadata request names it (not on Produce)."),
    _k("delete.topic.enable", bool, True, "Allow DeleteTopics."),
    _k("message.max.bytes", int, 1048588, "Largest record batch accepted.", minimum=0, topic_key="max.message.bytes"),
    _k(
        "compression.type",
        str,
        "producer",
        "Broker-side compression of stored batches: producer (keep the producer's codec), uncompressed, "
        "gzip, snappy, lz4, zstd, or the name of another loaded codec plugin.",
        topic_key="compression.type",
    ),
    # KIP-390: the level of the broker's own compression (compression.type set to a codec)
    _k(
        "compression.gzip.level",
        int,
        -1,
        "gzip level when the broker compresses (1-9; -1: zlib's default, 6).",
        choices=(-1, *range(1, 10)),
        topic_key="compression.gzip.level",
    ),
    _k(
        "compression.lz4.level",
        int,
        9,
        "lz4 level when the broker compresses (1-17; 3 and up select LZ4-HC).",
        minimum=1,
        maximum=17,
        topic_key="compression.lz4.level",
    ),
    _k(
        "compression.zstd.level",
        int,
        3,
        "zstd level when the broker compresses (-131072 to 22).",
        minimum=-131072,
        maximum=22,
        topic_key="compression.zstd.level",
    ),
    _k(
        "log.message.timestamp.type",
        str,
        "CreateTime",
        "Timestamp kept in batches.",
        choices=("CreateTime", "LogAppendTime"),
        topic_key="message.timestamp.type",
    ),
    _k(
        "log.message.timestamp.difference.max.ms",
        int,
        LONG_MAX,
        "Largest allowed |append time - record time|.",
        minimum=0,
        topic_key="message.timestamp.difference.max.ms",
    ),
    _k(
        "log.message.timestamp.before.max.ms",
        int,
        LONG_MAX,
        "Largest allowed age of a CreateTime record timestamp against the broker's clock (KIP-937).",
        minimum=0,
        topic_key="message.timestamp.before.max.ms",
    ),
    _k(
        "log.message.timestamp.after.max.ms",
        int,
        LONG_MAX,
        "Largest allowed lead of a CreateTime record timestamp over the broker's clock (KIP-937).",
        minimum=0,
        topic_key="message.timestamp.after.max.ms",
    ),
    _k(
        "log.record.validation",
        str,
        "header",
        "What produce checks inside a CRC-valid batch: header (its headers, room for its record count, "
        "and that a compressed section decompresses) or full (read every record, as Kafka does, and "
        "renumber a compressed batch's inner offsets if they are not consecutive; ~0.6 us a record). "
        "Use full when producers are not trusted: a malformed record that header lets through stalls "
        "the consumers that reach it.",
        choices=("header", "full"),
        topic_key="record.validation",
    ),
    _k(
        "message.max.decompressed.bytes",
        int,
        64 * 1024 * 1024,
        "odradek-specific (Kafka has no such key): how many bytes a produced batch's compressed "
        "records section may inflate to. Codecs stop at this bound instead of inflating a "
        "decompression bomb; past it the produce gets MESSAGE_TOO_LARGE, on which producers split "
        "the batch. Applies wherever the broker inflates client bytes (the decompress check, "
        "record.validation=full, compacted topics, recompression to compression.type).",
        minimum=1,
    ),
    _k(
        "min.insync.replicas",
        int,
        1,
        "Replicas that must be in sync for acks=all.",
        minimum=1,
        topic_key="min.insync.replicas",
    ),
    _k(
        "unclean.leader.election.enable",
        bool,
        False,
        "Allow an out-of-sync replica to become leader of a partition whose in-sync replicas are all "
        "gone (records only they had are lost). Dynamic (a broker's or the cluster default, "
        "IncrementalAlterConfigs), under a topic's own override; turning it on makes the controller "
        "elect every leaderless partition it now allows at once, as Kafka's does.",
        topic_key="unclean.leader.election.enable",
    ),
    # -- log segments and indexes
    _k("log.segment.bytes", int, 1073741824, "Roll a segment at this size.", minimum=14, topic_key="segment.bytes"),
    _k(
        "log.roll.ms",
        int,
        604800000,
        "Roll a segment this long after its first record.",
        minimum=1,
        topic_key="segment.ms",
    ),
    _k(
        "log.roll.hours",
        int,
        168,
        "log.roll.ms in hours (Kafka's synonym; log.roll.ms wins when both are set).",
        minimum=1,
    ),
    _k(
        "log.roll.jitter.ms",
        int,
        0,
        "Roll each segment up to this much earlier than segment.ms (a random amount drawn per segment "
        "below min(segment.jitter.ms, segment.ms)), so the segments of many partitions do not roll at once.",
        minimum=0,
        topic_key="segment.jitter.ms",
    ),
    _k(
        "log.roll.jitter.hours",
        int,
        0,
        "log.roll.jitter.ms in hours (Kafka's synonym; log.roll.jitter.ms wins when both are set).",
        minimum=0,
    ),
    _k(
        "log.preallocate",
        bool,
        False,
        "Reserve segment.bytes of disk per new segment (cut to its data on roll/close).",
        topic_key="preallocate",
    ),
    _k(
        "log.index.size.max.bytes",
        int,
        10485760,
        "Preallocated size of offset/time indexes.",
        minimum=4096,
        topic_key="segment.index.bytes",
    ),
    _k(
        "log.index.interval.bytes",
        int,
        4096,
        "Bytes between offset-index entries.",
        minimum=0,
        topic_key="index.interval.bytes",
    ),
    _k(
        "log.flush.interval.messages",
        int,
        LONG_MAX,
        "fsync after this many messages (default: never, trust the page cache).",
        minimum=1,
        topic_key="flush.messages",
    ),
    _k(
        "log.flush.interval.ms",
        int,
        LONG_MAX,
        "fsync after this long (default: never, trust the page cache).",
        minimum=0,
        topic_key="flush.ms",
    ),
    _k("log.flush.scheduler.interval.ms", int, 1000, "How often the flusher checks flush.ms.", minimum=1),
    _k(
        "log.flush.offset.checkpoint.interval.ms",
        int,
        60000,
        "How often the recovery point is checkpointed.",
        minimum=1,
    ),
    # -- retention and compaction
    _k(
        "log.retention.ms",
        int,
        604800000,
        "Delete segments older than this (-1: keep forever).",
        minimum=-1,
        topic_key="retention.ms",
    ),
    _k(
        "log.retention.minutes",
        int,
        10080,
        "log.retention.ms in minutes (Kafka's synonym: log.retention.ms wins, then this, then "
        "log.retention.hours; a negative value keeps forever).",
    ),
    _k(
        "log.retention.hours",
        int,
        168,
        "log.retention.ms in hours (Kafka's synonym, the lowest in precedence; a negative value keeps forever).",
    ),
    _k(
        "log.retention.bytes",
        int,
        -1,
        "Delete oldest segments beyond this size per partition (-1, or any negative value: no limit; Kafka "
        "bounds it no further).",
        topic_key="retention.bytes",
    ),
    _k("log.retention.check.interval.ms", int, 300000, "How often retention runs.", minimum=1),
    # -- tiered storage (KIP-405; see docs/storage.md, "Tiered storage")
    _k(
        "remote.log.storage.system.enable",
        bool,
        False,
        "Tiered storage on this broker: topics with remote.storage.enable=true copy rolled segments to the "
        "remote storage and may then delete them locally (local.retention.ms/bytes).",
    ),
    _k(
        "remote.log.storage.manager",
        str,
        "directory",
        "The remote storage plugin (odradek_register_remote_storage) tiered storage uses: directory (built-in "
        "storage_tiered, a shared file-system path set by remote.log.storage.dir).",
    ),
    _k(
        "remote.log.manager.task.interval.ms",
        int,
        30000,
        "How often the remote log manager copies rolled segments, applies remote retention and refreshes "
        "what it knows of remote segments.",
        minimum=1,
    ),
    _k(
        "remote.log.reader.threads",
        int,
        10,
        "Worker threads that may read remote segments for fetches at one time.",
        minimum=1,
    ),
    _k(
        "remote.log.reader.max.pending.tasks",
        int,
        100,
        "Remote reads that may wait for a reader thread; beyond them a fetch's remote read is refused "
        "(UNKNOWN_SERVER_ERROR for that partition, as Kafka). A read whose thread hangs keeps its thread.",
        minimum=1,
    ),
    _k(
        "remote.fetch.max.wait.ms",
        int,
        500,
        "How long a fetch waits for its remote read (KIP-1018); one not done by then is answered without "
        "that partition's records and the read given up (a hung thread is abandoned and counted).",
        minimum=1,
    ),
    _k(
        "remote.list.offsets.request.timeout.ms",
        int,
        30000,
        "How long ListOffsets by timestamp may search a tiered partition's remote segments (KIP-1075); "
        "then that partition is answered REQUEST_TIMED_OUT. ListOffsets v10's timeout_ms is not used.",
        minimum=1,
    ),
    _k(
        "remote.log.manager.copier.thread.pool.size",
        int,
        10,
        "Worker threads copying segments to remote storage at one time, over all partitions; each "
        "partition's copies run in its own task, so one hung copy holds up only its partition.",
        minimum=1,
    ),
    _k(
        "remote.log.manager.copy.max.bytes.per.second",
        int,
        LONG_MAX,
        "Bytes per second copied to remote storage by all partitions' copies (KIP-956): a copy waits while "
        "they are over it. The default is no limit. Dynamic, for a broker or as the cluster default.",
        minimum=1,
    ),
    _k(
        "remote.log.manager.copy.quota.window.num",
        int,
        11,
        "Samples the remote copy rate is measured over.",
        minimum=1,
    ),
    _k(
        "remote.log.manager.copy.quota.window.size.seconds",
        int,
        1,
        "Seconds each sample of the remote copy rate spans.",
        minimum=1,
    ),
    _k(
        "remote.log.manager.fetch.max.bytes.per.second",
        int,
        LONG_MAX,
        "Bytes per second read from remote storage for fetches (KIP-956): while they are over it, a fetch's "
        "remote read is not started and the partition answered without records. The default is no limit. "
        "Dynamic, for a broker or as the cluster default.",
        minimum=1,
    ),
    _k(
        "remote.log.manager.fetch.quota.window.num",
        int,
        11,
        "Samples the remote fetch rate is measured over.",
        minimum=1,
    ),
    _k(
        "remote.log.manager.fetch.quota.window.size.seconds",
        int,
        1,
        "Seconds each sample of the remote fetch rate spans.",
        minimum=1,
    ),
    _k(
        "remote.log.manager.expiration.thread.pool.size",
        int,
        10,
        "Worker threads listing and deleting remote segments at one time (remote retention, followers' "
        "listings), apart from the copies.",
        minimum=1,
    ),
    _k("log.cleanup.policy", list, ["delete"], "delete, compact, or both.", topic_key="cleanup.policy"),
    _k("log.cleaner.enable", bool, True, "Run the compaction cleaner."),
    _k("log.cleaner.backoff.ms", int, 15000, "Cleaner sleep when nothing is dirty.", minimum=0),
    _k(
        "log.cleaner.min.cleanable.ratio",
        float,
        0.5,
        "Dirty ratio that triggers compaction.",
        minimum=0,
        maximum=1,
        topic_key="min.cleanable.dirty.ratio",
    ),
    _k(
        "log.cleaner.delete.retention.ms",
        int,
        86400000,
        "Keep tombstones this long after compaction.",
        minimum=0,
        topic_key="delete.retention.ms",
    ),
    _k(
        "log.cleaner.min.compaction.lag.ms",
        int,
        0,
        "Never compact records younger than this.",
        minimum=0,
        topic_key="min.compaction.lag.ms",
    ),
    _k(
        "log.cleaner.max.compaction.lag.ms",
        int,
        LONG_MAX,
        "Compact a log whose oldest uncompacted record is older than this even below the dirty ratio "
        "(KIP-354); the active segment of a compacted log also rolls at this age.",
        minimum=1,
        topic_key="max.compaction.lag.ms",
    ),
    _k(
        "log.segment.delete.delay.ms",
        int,
        60000,
        "Accepted for compatibility; has no effect. Kafka waits this long before removing a deleted "
        "segment's files so that readers finish; odradek unlinks them at once, and a read in progress "
        "keeps its pinned descriptor until it is done (see docs/storage.md).",
        minimum=0,
        topic_key="file.delete.delay.ms",
    ),
    # -- replication (used by the cluster metadata plugins)
    _k("replica.lag.time.max.ms", int, 30000, "A follower not caught up for this long leaves the ISR.", minimum=1),
    _k("replica.fetch.max.bytes", int, 1048576, "Bytes per partition a follower fetches.", minimum=1),
    _k("replica.fetch.wait.max.ms", int, 500, "Follower fetch long-poll.", minimum=0),
    _k(
        "auto.leader.rebalance.enable",
        bool,
        True,
        "Move leadership back to the preferred replicas of a broker whose leader imbalance is over "
        "leader.imbalance.per.broker.percentage, checked every leader.imbalance.check.interval.seconds.",
    ),
    _k(
        "leader.imbalance.check.interval.seconds",
        int,
        300,
        "How often the controller checks the leader imbalance (the first check comes 5 s into its term, "
        "or sooner when this is shorter).",
        minimum=1,
    ),
    _k(
        "leader.imbalance.per.broker.percentage",
        int,
        10,
        "The share of a broker's preferred partitions that may be led elsewhere before the controller moves them back.",
        minimum=0,
    ),
    # -- groups and offsets
    _k("offsets.topic.num.partitions", int, 50, "Partitions of __consumer_offsets.", minimum=1),
    _k("offsets.topic.replication.factor", int, 1, "Replication factor of __consumer_offsets.", minimum=1),
    _k("offsets.topic.segment.bytes", int, 104857600, "Segment size of __consumer_offsets.", minimum=14),
    _k("offsets.retention.minutes", int, 10080, "Forget committed offsets of empty groups after this.", minimum=1),
    _k("offsets.retention.check.interval.ms", int, 600000, "How often expired offsets are removed.", minimum=1),
    _k("offset.metadata.max.bytes", int, 4096, "Largest commit metadata string.", minimum=0),
    _k("group.min.session.timeout.ms", int, 6000, "Smallest session timeout a member may ask for.", minimum=0),
    _k("group.max.session.timeout.ms", int, 1800000, "Largest session timeout a member may ask for.", minimum=0),
    _k("group.initial.rebalance.delay.ms", int, 3000, "Wait for more members before the first rebalance.", minimum=0),
    _k("group.max.size", int, 2147483647, "Most members of one group.", minimum=1),
    _k(
        "group.coordinator.rebalance.protocols",
        list,
        ["classic", "consumer"],
        "Group protocols the coordinator serves: classic (JoinGroup/SyncGroup, required) and consumer "
        "(KIP-848, ConsumerGroupHeartbeat); without consumer, ApiVersions leaves out the KIP-848 APIs.",
    ),
    _k(
        "group.consumer.session.timeout.ms",
        int,
        45000,
        "A KIP-848 consumer group member not heard from for this long is fenced (its partitions move on).",
        minimum=1,
    ),
    _k(
        "group.consumer.heartbeat.interval.ms",
        int,
        5000,
        "How often KIP-848 consumer group members heartbeat (told to them in every response).",
        minimum=1,
    ),
    _k(
        "group.consumer.assignors",
        list,
        ["uniform", "range"],
        "Server-side assignors (odradek_register_server_assignors names) KIP-848 consumer groups may use; "
        "the first is the default, a client picks another with group.remote.assignor.",
    ),
    _k("group.consumer.max.size", int, 2147483647, "Most members of one KIP-848 consumer group.", minimum=1),
    _k(
        "group.consumer.migration.policy",
        str,
        "bidirectional",
        "Online migration of a group between the classic and consumer protocols (KIP-848): upgrade turns a "
        "classic group into a consumer group when a member joins with ConsumerGroupHeartbeat, downgrade turns "
        "a consumer group back when its last consumer-protocol member leaves and classic members remain; "
        "bidirectional allows both, disabled neither (case-insensitive, as Kafka's).",
    ),
    # -- producers and transactions
    _k("producer.id.expiration.ms", int, 86400000, "Forget idle producer ids after this.", minimum=1),
    _k("producer.id.expiration.check.interval.ms", int, 600000, "How often idle producer ids are removed.", minimum=1),
    _k("transactional.id.expiration.ms", int, 604800000, "Forget idle transactional ids after this.", minimum=1),
    _k("transaction.state.log.num.partitions", int, 50, "Partitions of __transaction_state.", minimum=1),
    _k(
        "transaction.state.log.replication.factor",
        int,
        1,
        "Replication factor of __transaction_state (Kafka's default is 3; 1 lets a single broker run).",
        minimum=1,
    ),
    _k(
        "transaction.state.log.min.isr",
        int,
        1,
        "min.insync.replicas of __transaction_state (Kafka's default is 2, for its replication factor 3).",
        minimum=1,
    ),
    _k("transaction.max.timeout.ms", int, 900000, "Largest transaction timeout a producer may ask for.", minimum=1),
    # -- operations
    _k("log.level", str, "INFO", "Logging level of the broker process.", choices=("DEBUG", "INFO", "WARNING", "ERROR")),
    _k(
        "log.format",
        str,
        "text",
        "How the broker writes its log lines to stderr: text (time level logger: message) or json (one object "
        "a line: time, level, logger, message, exc_info), for log shippers.",
        choices=("text", "json"),
    ),
)

_NO_EFFECT = "Accepted for compatibility; has no effect."


def _throttled_replicas(name: str) -> ConfigKey:
    side = name.split(".", 1)[0]
    return _k(
        name,
        list,
        [],
        f"Replicas whose replication is throttled on the {side} side (KIP-73): '*' or partitionId:brokerId "
        f"pairs, the broker being the {side}. While such a replica is out of the ISR, its traffic counts "
        f"against {side}.replication.throttled.rate of that broker and waits once the rate is over it "
        "(kafka-reassign-partitions --throttle and odradek partitions reassign --throttle set it).",
    )


#: Topic-level keys of Kafka that have no broker-level default key here. The replication
#: throttles (KIP-73) are in force (:mod:`odradek.broker.replication_quota`); every other one is
#: accepted with Kafka's type, default and validation (LogConfig) and has no effect: tools set them on topics
#: as a matter of course (kafka-reassign-partitions its throttles, MirrorMaker 2 copies every
#: config of a source topic), and refusing them as unknown failed those tools' requests whole.
#: ``remote.storage.enable=true`` is refused: a topic that asks for tiered storage must not be
#: created as if it had it.
TOPIC_ONLY_KEYS: tuple[ConfigKey, ...] = (
    _throttled_replicas("leader.replication.throttled.replicas"),
    _throttled_replicas("follower.replication.throttled.replicas"),
    _k(
        "message.downconversion.enable",
        bool,
        True,
        f"{_NO_EFFECT} Kafka down-converts records for consumers that fetch an older message format; "
        "odradek serves Fetch from v4 on, whose consumers read v2 batches as stored.",
    ),
    _k(
        "message.format.version",
        str,
        "3.0-IV1",
        f"{_NO_EFFECT} Deprecated in Kafka, which ignores it from 3.0 on: records are stored as v2 batches. "
        "A version Kafka knows (0.10.0, 2.8, 3.0-IV1 ...).",
    ),
    _k(
        "remote.storage.enable",
        bool,
        False,
        "Tiered storage for the topic (KIP-405): rolled segments are copied to remote storage. true is "
        "INVALID_CONFIG unless the broker has remote.log.storage.system.enable=true, with a cleanup.policy "
        "other than delete, and with local.retention.ms/bytes above retention.ms/bytes; back to false only "
        "with remote.log.delete.on.disable=true (KIP-950), which deletes the remote data.",
    ),
    _k(
        "local.retention.ms",
        int,
        -2,
        "How long a tiered topic keeps segments locally once they are in remote storage (-2: retention.ms); "
        "retention.ms still bounds the whole log, remote part included.",
        minimum=-2,
    ),
    _k(
        "local.retention.bytes",
        int,
        -2,
        "How many bytes of a tiered topic's partition are kept locally once copied to remote storage "
        "(-2: retention.bytes); retention.bytes still bounds the whole log.",
        minimum=-2,
    ),
    _k(
        "remote.log.copy.disable",
        bool,
        False,
        "Stop copying a tiered topic's segments to remote storage (KIP-950): retention.ms/bytes then apply "
        "to the local log, and what remote storage holds is still read and expires.",
    ),
    _k(
        "remote.log.delete.on.disable",
        bool,
        False,
        "Required (true) to turn remote.storage.enable from true to false (KIP-950): tiering stops and the "
        "topic's remote segments are deleted; the log then starts at the local log start.",
    ),
)

#: the message format versions Kafka's MetadataVersionValidator takes for message.format.version:
#: every inter-broker protocol version ("2.8-IV1") and release ("2.8"); MetadataVersion.fromVersionString
#: looks up the first three dot-separated parts of a "0." version and the first two of any other
_IBP_RELEASES = {
    "0.8.0": (),
    "0.8.1": (),
    "0.8.2": (),
    "0.9.0": (),
    "0.10.0": (0, 1),
    "0.10.1": (0, 1, 2),
    "0.10.2": (0,),
    "0.11.0": (0, 1, 2),
    "1.0": (0,),
    "1.1": (0,),
    "2.0": (0, 1),
    "2.1": (0, 1, 2),
    "2.2": (0, 1),
    "2.3": (0, 1),
    "2.4": (0, 1),
    "2.5": (0,),
    "2.6": (0,),
    "2.7": (0, 1, 2),
    "2.8": (0, 1),
    "3.0": (0, 1),
    "3.1": (0,),
    "3.2": (0,),
    "3.3": (0, 1, 2, 3),
    "3.4": (0,),
    "3.5": (0, 1, 2),
    "3.6": (0, 1, 2),
    "3.7": (0, 1, 2, 3, 4),
    "3.8": (0,),
    "3.9": (0,),
    "4.0": (0, 1, 2, 3),
}
MESSAGE_FORMAT_VERSIONS = frozenset(_IBP_RELEASES) | {
    f"{release}-IV{iv}" for release, ivs in _IBP_RELEASES.items() for iv in ivs
}


def message_format_version_known(version: str) -> bool:
    """Kafka's ``MetadataVersion.fromVersionString`` succeeds: "2.8.1" is 2.8, "0.10.0.1" 0.10.0."""
    parts = version.split(".")
    key = ".".join(parts[: 3 if version.startswith("0.") else 2])
    return key in MESSAGE_FORMAT_VERSIONS


_THROTTLED_REPLICA = re.compile(r"([0-9]+:[0-9]+)?")

#: Kafka's broker keys that set another broker key in a coarser unit, in Kafka's precedence after
#: that key (``log.retention.ms`` > ``log.retention.minutes`` > ``log.retention.hours``), with
#: their factor to milliseconds. The first one set (in a file, env or ``--set``) gives the value.
UNIT_SYNONYMS: dict[str, tuple[tuple[str, int], ...]] = {
    "log.retention.ms": (("log.retention.minutes", 60_000), ("log.retention.hours", 3_600_000)),
    "log.roll.ms": (("log.roll.hours", 3_600_000),),
    "log.roll.jitter.ms": (("log.roll.jitter.hours", 3_600_000),),
}


def broker_synonyms(name: str) -> list[str]:
    """``name`` and the keys of :data:`UNIT_SYNONYMS` that set it, in Kafka's precedence."""
    return [name, *(syn for syn, _factor in UNIT_SYNONYMS.get(name, ()))]


def _resolve_unit_synonyms(
    keys: Mapping[str, ConfigKey], values: dict[str, Any], sources: Mapping[str, str]
) -> dict[str, str]:
    """Give each key of :data:`UNIT_SYNONYMS` not set itself the value of its first synonym that
    is set (``log.retention.hours=168`` -> ``log.retention.ms=604800000``), as Kafka's
    ``KafkaConfig`` does; a negative retention means no limit (-1). Returns key -> the synonym
    its value came from."""
    derived: dict[str, str] = {}
    for name, synonyms in UNIT_SYNONYMS.items():
        if name in sources:
            continue
        values[name] = keys[name].default
        for syn, factor in synonyms:
            if syn in sources:
                value = int(values[syn]) * factor
                values[name] = -1 if name == "log.retention.ms" and value < 0 else value
                derived[name] = syn
                break
    return derived


def parse_value(key: ConfigKey, raw: Any) -> Any:
    """The value of ``raw`` for ``key`` as the config file would give it; ValueError if it is not one."""
    return _parse_value(key, raw)


def _parse_value(key: ConfigKey, raw: Any) -> Any:
    """Coerce ``raw`` (a TOML value or a string from env/CLI) to the key's type, or raise."""
    t = key.type
    try:
        if t is bool:
            if isinstance(raw, bool):
                value: Any = raw
            elif isinstance(raw, str) and raw.strip().lower() in {"true", "false"}:
                value = raw.strip().lower() == "true"
            else:
                raise ValueError(f"expected true or false, got {raw!r}")
        elif t is int:
            if isinstance(raw, bool) or not isinstance(raw, int | str):
                raise ValueError(f"expected an integer, got {_show(raw)}")
            if isinstance(raw, str) and not _INTEGER.match(raw.strip()):
                raise ValueError(f"expected an integer, got {raw!r}")  # Kafka takes no "1_000" or "1e3"
            value = int(raw)
            if not LONG_MIN <= value <= LONG_MAX:
                raise ValueError(f"{value} does not fit a 64-bit long")
        elif t is float:
            if isinstance(raw, bool) or not isinstance(raw, int | float | str):
                raise ValueError(f"expected a number, got {_show(raw)}")
            value = float(raw)
            if not math.isfinite(value):
                raise ValueError(f"expected a finite number, got {raw!r}")
        elif t is list:
            if isinstance(raw, str):
                value = [part.strip() for part in raw.split(",") if part.strip()]
            elif isinstance(raw, list | tuple):
                for item in raw:
                    if isinstance(item, bool) or not isinstance(item, str | int | float):
                        raise ValueError(f"expected a list of strings, got an item {_show(item)}")
                value = [str(v) for v in raw]
            else:
                raise ValueError(f"expected a list or comma-separated string, got {_show(raw)}")
        elif t is str:
            if not isinstance(raw, str):
                raise ValueError(f"expected a string, got {_show(raw)}")
            value = raw
        else:
            value = t(raw)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"invalid value for {key.name!r}: {exc}") from None
    if key.choices is not None:
        items = value if isinstance(value, list) else [value]
        for item in items:
            if item not in key.choices:
                raise ConfigError(f"invalid value for {key.name!r}: {item!r} is not one of {list(key.choices)}")
    if key.minimum is not None and isinstance(value, int | float) and value < key.minimum:
        raise ConfigError(f"invalid value for {key.name!r}: {value} is below the minimum {key.minimum}")
    maximum = getattr(key, "maximum", None)
    if maximum is not None and isinstance(value, int | float) and value > maximum:
        raise ConfigError(f"invalid value for {key.name!r}: {value} is above the maximum {maximum}")
    return value


def _show(raw: Any) -> str:
    """A value for an error message: TOML's dates and times as written, not Python's repr."""
    if isinstance(raw, datetime.date | datetime.time):
        kind = (
            "date-time" if isinstance(raw, datetime.datetime) else "date" if isinstance(raw, datetime.date) else "time"
        )
        return f"{raw.isoformat()} (a TOML {kind})"
    return repr(raw)


def _flatten(table: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for name, value in table.items():
        full = f"{prefix}{name}"
        if isinstance(value, dict):
            yield from _flatten(value, f"{full}.")
        else:
            yield full, value


_CLEANUP_CHOICES = ("delete", "compact")


class Config(Mapping[str, Any]):
    """The effective broker config: every declared key with its value (a read-only mapping).

    ``config["log.segment.bytes"]`` returns the typed value; ``config.source(key)`` says where it
    came from (default, file, env, cli).
    """

    def __init__(
        self,
        keys: Mapping[str, ConfigKey],
        values: Mapping[str, Any],
        sources: Mapping[str, str],
        plugins: Plugins | None = None,
    ) -> None:
        self._keys = dict(keys)
        self._values = dict(values)
        self._sources = dict(sources)  # only the keys set (file, env, cli, override)
        self._derived = _resolve_unit_synonyms(self._keys, self._values, self._sources)
        self.plugins = plugins

    def __getitem__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise ConfigError(f"unknown config key {name!r}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def key(self, name: str) -> ConfigKey:
        return self._keys[name]

    def source(self, name: str) -> str:
        """Where the value came from; for a key given by a synonym in other units, that one's
        (``file broker.toml (log.retention.hours)``)."""
        if name in self._derived:
            return f"{self.source(self._derived[name])} ({self._derived[name]})"
        return self._sources.get(name, "default")

    def is_set(self, name: str) -> bool:
        """Whether ``name`` itself was set (file, env, cli), not defaulted or given by a synonym."""
        return name in self._sources

    def replace(self, **updates: Any) -> Config:
        """A copy with some keys changed (names with ``_`` for ``.``), validated like a load."""
        values = dict(self._values)
        sources = dict(self._sources)
        for raw_name, raw in updates.items():
            name = raw_name.replace("_", ".")
            if name not in self._keys:
                raise ConfigError(f"unknown config key {name!r}")
            values[name] = _parse_value(self._keys[name], raw)
            sources[name] = "override"
        _check_cross_keys(values)
        return Config(self._keys, values, sources, self.plugins)

    def for_listener(self, listener: str, name: str) -> Any:
        """``name`` on ``listener``: ``listener.name.<listener>.<name>`` (the listener name in lower
        case, as Kafka spells the prefix) when set, else ``name`` itself."""
        return self.listener_setting(listener, name)

    # -- typed views of keys many modules need ------------------------------------------------
    @property
    def broker_id(self) -> int:
        return int(self["broker.id"])

    @property
    def log_dirs(self) -> list[Path]:
        return [Path(d) for d in self["log.dirs"]]

    @property
    def listeners(self) -> list[Endpoint]:
        protocols = parse_security_protocol_map(self["listener.security.protocol.map"])
        return [parse_listener(s, protocol_map=protocols) for s in self["listeners"]]

    @property
    def advertised_listeners(self) -> list[Endpoint]:
        adv = self["advertised.listeners"]
        protocols = parse_security_protocol_map(self["listener.security.protocol.map"])
        return [parse_listener(s, "advertised.listeners", protocols) for s in adv] if adv else self.listeners

    def listener_setting(self, listener: str, name: str, prefix: str = "") -> Any:
        """A listener's value of ``name``: Kafka's ``listener.name.<listener>.<prefix><name>``
        (listener and prefix lower case, e.g. ``listener.name.clients.plain.sasl.jaas.config``)
        when set, else the broker-wide ``name``."""
        override = listener_key(listener, prefix + name)
        if override in self._values:
            return self._values[override]
        return self[name]

    @property
    def inter_broker_listener(self) -> Endpoint | None:
        """The listener brokers reach each other on: ``inter.broker.listener.name``, else the first
        listener using ``security.inter.broker.protocol``, else the first listener (odradek's
        default: Kafka's is the PLAINTEXT listener, which must then exist)."""
        listeners = self.listeners
        name = str(self["inter.broker.listener.name"]).upper()
        protocol = str(self["security.inter.broker.protocol"]).upper()
        for ep in listeners:
            if (name and ep.name == name) or (not name and protocol and ep.security_protocol == protocol):
                return ep
        return listeners[0] if listeners else None

    def inter_broker_client_config(self) -> dict[str, Any]:
        """What this broker's own connections to other brokers are configured with: for a TLS
        inter-broker listener, its ``ssl.*`` settings (``listener.name.<listener>.ssl.*`` over
        ``ssl.*``; its keystore is the client certificate, its truststore checks the other
        broker's), in the Java client's names, which the TLS connector takes."""
        ep = self.inter_broker_listener
        if ep is None or "SSL" not in ep.security_protocol:
            return {}
        return {name: self.for_listener(ep.name, name) for name in self._keys if name.startswith("ssl.")}

    def topic_defaults(self) -> dict[str, Any]:
        """Topic-level config names with the broker's defaults for them."""
        out: dict[str, Any] = {}
        for key in self._keys.values():
            if key.topic_key is not None:
                out[key.topic_key] = self._values[key.name]
        for key in TOPIC_ONLY_KEYS:
            out[key.name] = key.default
        return out

    def topic_config(self, overrides: Mapping[str, Any] | None = None) -> TopicConfig:
        return TopicConfig.build(self, overrides or {})


#: Hosts that mean "every interface" when bound, and no address a client can connect to.
WILDCARD_HOSTS = ("0.0.0.0", "::")


def _comma_entries(value: str) -> Iterator[str]:
    """The non-empty, stripped entries of a comma-separated value."""
    return (entry for entry in (raw.strip() for raw in value.split(",")) if entry)


def parse_security_protocol_map(value: str, key: str = "listener.security.protocol.map") -> dict[str, str]:
    """``"CLIENTS:SASL_PLAINTEXT,REPLICATION:PLAINTEXT"`` -> {listener name: security protocol}."""
    out: dict[str, str] = {}
    for entry in _comma_entries(value):
        name, sep, protocol = entry.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name:
            raise ConfigError(f"invalid value for {key!r}: {entry!r} is not LISTENER_NAME:SECURITY_PROTOCOL")
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(
                f"invalid value for {key!r}: {protocol!r} is not a security protocol ({', '.join(SECURITY_PROTOCOLS)})"
            )
        if name in out:
            raise ConfigError(f"invalid value for {key!r}: the listener name {name} appears twice")
        out[name] = protocol
    return out


def listener_key(listener: str, name: str) -> str:
    """Kafka's per-listener key for ``name``: ``listener.name.<listener lower case>.<name>``."""
    return f"listener.name.{listener.lower()}.{name}"


def parse_listener(spec: str, key: str = "listeners", protocol_map: Mapping[str, str] | None = None) -> Endpoint:
    """``PLAINTEXT://127.0.0.1:9092`` -> Endpoint; the security protocol is the listener name's in
    ``protocol_map`` (``listener.security.protocol.map``; Kafka's default map, where each standard
    name is its own protocol, when None). A name the map lacks is refused, as Kafka does. ``key``
    names the config key in errors.

    The host means what it means in Kafka. In ``listeners`` an empty host binds every interface
    (``0.0.0.0``). In ``advertised.listeners`` -- addresses clients connect to -- an empty host
    is this machine's canonical host name (Kafka's ``getCanonicalHostName``), and a wildcard
    (``0.0.0.0``, ``::``) is refused: a client cannot connect to it."""
    name, sep, rest = spec.partition("://")
    if not sep:
        raise ConfigError(f"invalid value for {key!r}: {spec!r} is not NAME://host:port")
    host, colon, port_s = rest.rpartition(":")
    if not colon or not port_s.isdigit() or not (0 <= int(port_s) <= 65535):
        raise ConfigError(f"invalid value for {key!r}: {spec!r} has no valid port")
    host = host.strip("[]")
    if key == "advertised.listeners":
        if host in WILDCARD_HOSTS:
            raise ConfigError(
                f"invalid value for 'advertised.listeners': {spec!r}: advertised.listeners cannot use the "
                f"nonroutable meta-address {host}. Use a routable IP address."
            )
        host = host or socket.getfqdn()
    else:
        host = host or "0.0.0.0"
    protocols = protocol_map if protocol_map is not None else _DEFAULT_PROTOCOLS
    protocol = protocols.get(name.upper())
    if protocol is None:
        raise ConfigError(
            f"invalid value for {key!r}: no security protocol defined for listener {name.upper()} "
            f"(add {name.upper()}:<protocol> to listener.security.protocol.map)"
        )
    return Endpoint(name=name.upper(), host=host, port=int(port_s), security_protocol=protocol)


_DEFAULT_PROTOCOLS = {p: p for p in SECURITY_PROTOCOLS}

#: ``compression.type`` values every broker accepts; any other must name a loaded codec plugin.
BUILTIN_COMPRESSION_TYPES = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")


def compression_type_problem(value: str, plugins: Plugins | None) -> str | None:
    """Why ``value`` is not a valid broker or topic ``compression.type``, or None when it is.

    ``producer`` and ``uncompressed`` are always valid; any other name must be that of a codec
    the plugins register, so that a third-party codec can be chosen for a topic like a built-in
    one, and Kafka's names are refused too when their codec is not loaded (the built-in
    ``compress`` plugin disabled): every produce would fail otherwise. Without plugins (a config
    built for a test) Kafka's names are taken as they are.
    """
    if value in ("producer", "uncompressed"):
        return None
    if plugins is None:
        return (
            None if value in BUILTIN_COMPRESSION_TYPES else f"{value!r} is not one of {list(BUILTIN_COMPRESSION_TYPES)}"
        )
    try:
        codec_named(value, plugins.codecs())
    except UnsupportedCompressionType as exc:
        return f"{value!r} is neither producer nor uncompressed, and {exc}"
    return None


def _check_cross_keys(values: Mapping[str, Any]) -> None:
    for policy in values.get("log.cleanup.policy", []):
        if policy not in _CLEANUP_CHOICES:
            raise ConfigError(f"invalid value for 'log.cleanup.policy': {policy!r} is not delete or compact")
    if values.get("log.cleaner.min.compaction.lag.ms", 0) > values.get("log.cleaner.max.compaction.lag.ms", LONG_MAX):
        raise ConfigError(
            "invalid value for 'log.cleaner.min.compaction.lag.ms': above log.cleaner.max.compaction.lag.ms"
        )
    if values.get("group.min.session.timeout.ms", 0) > values.get("group.max.session.timeout.ms", 1):
        raise ConfigError("invalid value for 'group.min.session.timeout.ms': above group.max.session.timeout.ms")
    protocols = {str(p).lower() for p in values.get("group.coordinator.rebalance.protocols", ["classic"])}
    if not protocols <= {"classic", "consumer"} or "classic" not in protocols:
        raise ConfigError(
            "invalid value for 'group.coordinator.rebalance.protocols': a list of classic and consumer, "
            "with classic (Kafka requires it)"
        )
    policy = str(values.get("group.consumer.migration.policy", "bidirectional")).lower()
    if policy not in _MIGRATION_POLICIES:
        raise ConfigError(
            f"invalid value for 'group.consumer.migration.policy': {policy!r} is not one of {list(_MIGRATION_POLICIES)}"
        )
    if not values.get("group.consumer.assignors", ["uniform"]):
        raise ConfigError("invalid value for 'group.consumer.assignors': it names no assignor")
    _check_listeners(values)
    _check_log_dirs(values)
    _check_connection_limits(values)
    if values.get("metrics.prometheus.listener"):
        parse_host_port(str(values["metrics.prometheus.listener"]), "metrics.prometheus.listener")


def parse_connection_overrides(value: str, *, key: str = "max.connections.per.ip.overrides") -> dict[str, int]:
    """``"host:count,host:count"`` (Kafka's ``max.connections.per.ip.overrides``) as a mapping.
    The count follows the last colon, so an IPv6 address works bare (``::1:5``) or in brackets."""
    out: dict[str, int] = {}
    for entry in _comma_entries(value):
        host, sep, count = entry.rpartition(":")
        host = host.strip().removeprefix("[").removesuffix("]")
        if not sep or not host or not count.strip().isdigit():
            raise ConfigError(f"invalid value for {key!r}: {entry!r} is not host:count with a count >= 0")
        if host in out:
            raise ConfigError(f"invalid value for {key!r}: {host!r} appears twice")
        out[host] = min(int(count), INT_MAX)
    return out


def parse_host_port(spec: str, key: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:9404`` for IPv6; an empty host is every interface) as a pair."""
    host, colon, port_s = spec.strip().rpartition(":")
    if not colon or not port_s.isdigit() or not 0 <= int(port_s) <= 65535:
        raise ConfigError(f"invalid value for {key!r}: {spec!r} is not host:port")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port_s)


def _check_connection_limits(values: Mapping[str, Any]) -> None:
    """Kafka's rule: a per-address default of 0 refuses everyone unless overrides let some in."""
    overrides = parse_connection_overrides(values.get("max.connections.per.ip.overrides", ""))
    if values.get("max.connections.per.ip") == 0 and not overrides:
        raise ConfigError(
            "invalid value for 'max.connections.per.ip': 0 is allowed only with max.connections.per.ip.overrides set"
        )


def _check_log_dirs(values: Mapping[str, Any]) -> None:
    """Kafka's rules: at least one log dir, none given twice (two spellings of one directory
    would have the broker lock it against itself)."""
    if "log.dirs" not in values:
        return
    dirs = [str(d) for d in values["log.dirs"] if str(d).strip()]
    if not dirs:
        raise ConfigError("invalid value for 'log.dirs': at least one log directory must be defined")
    seen: dict[Path, str] = {}
    for d in dirs:
        resolved = Path(d).expanduser().resolve()
        if resolved in seen:
            raise ConfigError(
                f"invalid value for 'log.dirs': duplicate log directory {d!r}"
                + (f" (the same as {seen[resolved]!r})" if seen[resolved] != d else "")
            )
        seen[resolved] = d


#: Kafka's ``ConsumerGroupMigrationPolicy`` values
_MIGRATION_POLICIES = ("disabled", "upgrade", "downgrade", "bidirectional")


def _check_listeners(values: Mapping[str, Any]) -> None:
    """Kafka's rules: at least one listener, every listener has its own name, and every advertised address names one
    of them (a client is given the address of the listener it connected to; an advertised name
    no listener has would leave it with no broker to talk to)."""
    if "listeners" in values and not values["listeners"]:  # the broker would serve nobody
        raise ConfigError("invalid value for 'listeners': at least one listener must be defined")
    protocols = parse_security_protocol_map(values.get("listener.security.protocol.map", DEFAULT_SECURITY_PROTOCOL_MAP))
    names: list[str] = []
    for key in ("listeners", "advertised.listeners"):
        seen: set[str] = set()
        for spec in values.get(key, []):
            name = parse_listener(spec, key, protocols).name
            if name in seen:
                raise ConfigError(f"invalid value for {key!r}: the listener name {name} appears twice")
            seen.add(name)
            if key == "advertised.listeners" and name not in names:
                raise ConfigError(
                    f"invalid value for 'advertised.listeners': {spec!r} names no listener "
                    f"(listeners: {', '.join(names) or 'none'})"
                )
            if key == "listeners":
                names.append(name)
    inter_name = str(values.get("inter.broker.listener.name") or "").upper()
    inter_protocol = str(values.get("security.inter.broker.protocol") or "").upper()
    if inter_name and inter_protocol:
        raise ConfigError(
            "only one of 'inter.broker.listener.name' and 'security.inter.broker.protocol' may be set (Kafka's rule)"
        )
    if inter_name and names and inter_name not in names:
        raise ConfigError(
            f"invalid value for 'inter.broker.listener.name': {inter_name} is not one of the listeners "
            f"({', '.join(names)})"
        )
    used = [parse_listener(spec, protocol_map=protocols).security_protocol for spec in values.get("listeners", [])]
    if inter_protocol and used and inter_protocol not in used:
        raise ConfigError(
            f"invalid value for 'security.inter.broker.protocol': no listener uses {inter_protocol} "
            f"(listeners: {', '.join(names)})"
        )


def _offered_by(plugins: Plugins, key: ConfigKey) -> str:
    """`` (offered by plugin 'x' (distribution 'y'))`` for errors about a plugin's config key."""
    from .plugin_origin import origin  # the manager imports this module

    return f" (offered by {origin(plugins, 'odradek_config_keys', key.name)})"


#: ``listener.name.<listener>.[<mechanism>.]<key>``: Kafka's per-listener overrides
_LISTENER_KEY = re.compile(r"listener\.name\.([a-z0-9_-]+)\.(?:([a-z0-9-]+)\.)?(.+)")


def listener_override_key(name: str, keys: Mapping[str, ConfigKey]) -> ConfigKey | None:
    """The key a per-listener override such as ``listener.name.clients.plain.sasl.jaas.config``
    stands for (a copy named ``name``), when ``name`` overrides a key that allows it
    (``extra["per_listener"]``; ``"mechanism"`` when Kafka prefixes it with a SASL mechanism
    too); None otherwise."""
    match = _LISTENER_KEY.fullmatch(name)
    if match is None:
        return None
    listener, mechanism, rest = match.groups()
    candidates = [(rest, None)] if mechanism is None else [(f"{mechanism}.{rest}", None), (rest, mechanism)]
    for base_name, mech in candidates:
        base = keys.get(base_name)
        if base is None:
            continue
        allowed = base.extra.get("per_listener")
        if (allowed is True and mech is None) or (allowed == "mechanism" and mech is not None):
            return dataclasses.replace(
                base,
                name=name,
                doc=f"{base.name} for listener {listener.upper()}" + (f", mechanism {mech.upper()}" if mech else ""),
            )
    return None


def all_keys(plugins: Plugins | None) -> dict[str, ConfigKey]:
    """Built-in keys plus every plugin's keys; a plugin redefining a built-in key is an error."""
    keys = {k.name: k for k in BROKER_KEYS}
    if plugins is not None:
        for key in plugins.config_keys():
            if key.name in keys:
                raise ConfigError(f"plugin config key {key.name!r} redefines a built-in key{_offered_by(plugins, key)}")
            keys[key.name] = key
    return keys


def _raw_settings(
    path: str | Path | None,
    overrides: Mapping[str, Any] | Iterable[tuple[str, Any]],
    env: Mapping[str, str] | None,
) -> Iterator[tuple[str, Any, str]]:
    """``(key, raw value, source)`` from the TOML file, ``ODRADEK_*`` env, then overrides."""
    if path is not None:
        p = Path(path)
        try:
            table = tomllib.loads(p.read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file {str(p)!r} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {str(p)!r} is not valid TOML: {exc}") from None
        for name, raw in _flatten(table):
            yield name, raw, f"file {p}"
    environ = os.environ if env is None else env
    for var, raw in environ.items():
        if var.startswith(ENV_PREFIX) and var not in _NON_CONFIG_ENV:
            yield var[len(ENV_PREFIX) :].lower().replace("_", "."), raw, f"env {var}"
    items = overrides.items() if isinstance(overrides, Mapping) else overrides
    for name, raw in items:
        yield name, raw, "cli"


#: The kernel keys that say which plugins to load (see :func:`plugin_selection`).
PLUGIN_KEYS = ("plugins", "plugins.disabled")


def plugin_selection(
    path: str | Path | None = None,
    *,
    overrides: Mapping[str, Any] | Iterable[tuple[str, Any]] = (),
    env: Mapping[str, str] | None = None,
) -> tuple[list[str], list[str]]:
    """``(plugins, plugins.disabled)`` from the same sources as :func:`load_config`.

    The plugins must be loaded before the config is validated (their keys are part of it), but
    which plugins to load is itself in the config: these two kernel keys are read first, every
    other key is left for :func:`load_config` once the plugins are loaded."""
    keys = {k.name: k for k in BROKER_KEYS if k.name in PLUGIN_KEYS}
    values: dict[str, list[str]] = {name: [] for name in PLUGIN_KEYS}
    for name, raw, _source in _raw_settings(path, overrides, env):
        if name in keys:
            values[name] = _parse_value(keys[name], raw)
    return values["plugins"], values["plugins.disabled"]


def load_config(
    path: str | Path | None = None,
    *,
    overrides: Mapping[str, Any] | Iterable[tuple[str, Any]] = (),
    env: Mapping[str, str] | None = None,
    plugins: Plugins | None = None,
) -> Config:
    """Defaults <- TOML file <- ``ODRADEK_*`` env <- overrides (``--set``), validated.

    ``plugins`` contributes plugin-declared keys; without it only built-in keys are known. The
    ``plugins`` and ``plugins.disabled`` values are not applied here: build ``plugins`` from
    :func:`plugin_selection` first (as ``odradek serve`` does).
    """
    keys = all_keys(plugins)
    values = {name: key.default for name, key in keys.items()}
    sources: dict[str, str] = {}
    for name, raw, source in _raw_settings(path, overrides, env):
        if name == "log.dir":  # Kafka accepts the singular form too
            name = "log.dirs"
        if name not in keys:
            derived = listener_override_key(name, keys)
            if derived is not None:
                keys[name] = derived
            elif not _listener_override(keys, name):  # listener.name.<listener>.ssl.*
                raise ConfigError(f"unknown config key {name!r} (from {source})")
        values[name] = _parse_value(keys[name], raw)
        sources[name] = source
    _check_cross_keys(values)
    problem = compression_type_problem(values["compression.type"], plugins)
    if problem is not None:
        raise ConfigError(f"invalid value for 'compression.type': {problem}")
    return Config(keys, values, sources, plugins)


#: Kafka's per-listener prefix: ``listener.name.<listener>.<key>`` overrides ``<key>`` on one listener.
LISTENER_PREFIX = "listener.name."
#: Keys a listener may override (Kafka allows its security configs per listener).
LISTENER_OVERRIDABLE = ("ssl.",)


def _listener_override(keys: dict[str, ConfigKey], name: str) -> bool:
    """Whether ``name`` is ``listener.name.<listener>.<key>`` for an overridable ``<key>``; if so
    it is added to ``keys`` (typed and checked as ``<key>``)."""
    if not name.startswith(LISTENER_PREFIX):
        return False
    listener, dot, base = name[len(LISTENER_PREFIX) :].partition(".")
    if not listener or not dot or base not in keys or not base.startswith(LISTENER_OVERRIDABLE):
        return False
    keys[name] = dataclasses.replace(keys[base], name=name, doc=f"{keys[base].doc} (listener {listener.upper()})")
    return True


#: ODRADEK_* variables that are switches of the process, not config keys.
_NON_CONFIG_ENV = frozenset({"ODRADEK_DISABLE_PLUGIN_AUTOLOAD", "ODRADEK_TRACE_HOOKS", "ODRADEK_TEST_KEEP"})


@dataclasses.dataclass(frozen=True)
class TopicConfigProblem:
    """Something wrong with a stored topic override found by :meth:`TopicConfig.load`: a key
    ``dropped`` (invalid on its own; ``key`` and ``raw`` name it) or a cross-key conflict kept
    as configured (``key`` empty)."""

    key: str
    raw: Any
    message: str
    dropped: bool


def _topic_key_for(broker: Config) -> dict[str, ConfigKey]:
    """Topic-level name -> its declared key (the broker default's key, or a topic-only key)."""
    key_for = {k.topic_key: k for k in broker._keys.values() if k.topic_key}
    key_for.update({k.name: k for k in TOPIC_ONLY_KEYS})
    return key_for


def _parse_topic_value(broker: Config, key_for: Mapping[str, ConfigKey], name: str, raw: Any) -> Any:
    """One topic override parsed and checked on its own, or InvalidConfig naming the key."""
    if name not in key_for:
        raise InvalidConfig(f"unknown topic config {name!r}")
    try:
        value = _parse_value(dataclasses.replace(key_for[name], name=name), raw)  # errors name the topic key
    except ConfigError as exc:
        raise InvalidConfig(str(exc)) from None
    if name == "cleanup.policy" and any(p not in _CLEANUP_CHOICES for p in value):
        raise InvalidConfig(f"invalid value for 'cleanup.policy': {raw!r}")
    if name.endswith(".replication.throttled.replicas") and not (
        "".join(value) == "*" or all(_THROTTLED_REPLICA.fullmatch(item) for item in value)
    ):
        raise InvalidConfig(
            f"invalid value for {name!r}: {raw!r}: {name} must be the literal '*' or a list of replicas in the "
            "following format: [partitionId]:[brokerId],[partitionId]:[brokerId],..."
        )
    if name == "message.format.version" and not message_format_version_known(value):
        raise InvalidConfig(f"invalid value for {name!r}: Version {value} is not a valid version")
    if name == "remote.storage.enable" and value and not _tiering_enabled(broker):
        raise InvalidConfig(
            "invalid value for 'remote.storage.enable': true: Tiered Storage functionality is disabled in the "
            "broker (remote.log.storage.system.enable=false). Topic cannot be configured with remote log storage."
        )
    if name == "compression.type":
        problem = compression_type_problem(value, broker.plugins)
        if problem is not None:
            raise InvalidConfig(f"invalid value for 'compression.type': {problem}")
    return value


def _tiering_enabled(broker: Config) -> bool:
    try:
        return bool(broker["remote.log.storage.system.enable"])
    except (KeyError, ConfigError):
        return False


#: Kafka's refusal to turn tiering off while keeping the remote data (KIP-950)
TIERING_OFF_WITHOUT_DELETE = (
    "It is invalid to disable remote storage without deleting remote data. If you want to keep the remote data "
    "and turn to read only, please set `remote.storage.enable=true,remote.log.copy.disable=true`. If you want to "
    "disable remote storage and delete all remote data, please set "
    "`remote.storage.enable=false,remote.log.delete.on.disable=true`."
)


def _tiering_conflicts(values: Mapping[str, Any]) -> list[str]:
    """Kafka's rules of a tiered topic's configs (LogConfig.validateTopicLogConfigValues):
    cleanup.policy delete only, and local retention within the whole log's (identical to it
    once copying is disabled, as nothing more goes to remote storage)."""
    if list(values.get("cleanup.policy", ())) not in ([], ["delete"]):
        return [
            "Remote log storage only supports topics with cleanup.policy=delete or cleanup.policy being an empty list."
        ]
    out = []
    copy_disabled = bool(values.get("remote.log.copy.disable"))
    for unit in ("bytes", "ms"):
        whole, local = values[f"retention.{unit}"], values[f"local.retention.{unit}"]
        if whole >= 0 and local != -2:
            if local == -1:
                out.append(f"Invalid value -1 for configuration local.retention.{unit}: Value must not be -1 as "
                           f"retention.{unit} value is set as {whole}.")  # fmt: skip
            elif local > whole:
                out.append(f"Invalid value {local} for configuration local.retention.{unit}: Value must not be more "
                           f"than retention.{unit} property value: {whole}")  # fmt: skip
        if copy_disabled and local not in (-2, whole):
            out.append(f"When `remote.log.copy.disable` is set to true, the `local.retention.{unit}` and "
                       f"`retention.{unit}` must be set to the identical value because there will be no more logs "
                       "copied to the remote storage.")  # fmt: skip
    return out


def _topic_conflicts(values: Mapping[str, Any]) -> list[str]:
    """Kafka's cross-key rules of a topic's effective configs (``LogConfig.validateValues``, and
    a tiered topic's)."""
    if values.get("remote.storage.enable"):
        tiering = _tiering_conflicts(values)
        if tiering:
            return tiering
    if values["min.compaction.lag.ms"] > values["max.compaction.lag.ms"]:
        return [
            f"min.compaction.lag.ms ({values['min.compaction.lag.ms']}) is above "
            f"max.compaction.lag.ms ({values['max.compaction.lag.ms']})"
        ]
    return []


def render(value: Any) -> str:
    """A config value as Kafka shows it: true/false, comma-joined lists, plain numbers."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


class TopicConfig(Mapping[str, Any]):
    """One topic's effective configs: Kafka's topic-level names, broker defaults underneath.

    Validation raises :class:`odradek.errors.InvalidConfig` (INVALID_CONFIG to clients) naming
    the key. Frequently used values have typed properties.
    """

    def __init__(self, values: Mapping[str, Any], overrides: Mapping[str, Any]) -> None:
        self._values = dict(values)
        self.overrides = dict(overrides)

    @classmethod
    def build(cls, broker: Config, overrides: Mapping[str, Any]) -> TopicConfig:
        """The strict check of CreateTopics and (Incremental)AlterConfigs: the first invalid
        override or cross-key conflict raises InvalidConfig naming it."""
        key_for = _topic_key_for(broker)
        values = broker.topic_defaults()
        parsed: dict[str, Any] = {}
        for name, raw in overrides.items():
            parsed[name] = values[name] = _parse_topic_value(broker, key_for, name, raw)
        conflicts = _topic_conflicts(values)
        if conflicts:
            raise InvalidConfig(conflicts[0])
        return cls(values, parsed)

    @classmethod
    def load(cls, broker: Config, overrides: Mapping[str, Any]) -> tuple[TopicConfig, list[TopicConfigProblem]]:
        """The lenient read of an existing topic's stored overrides (at start-up or on a metadata
        change), which must not lose what an operator set because something else changed since.

        As in Kafka, which checks cross-key rules only when configs are created or altered, a
        conflict (``min.compaction.lag.ms`` above a later broker default of
        ``max.compaction.lag.ms``) keeps every override and is reported as a warning (the cleaner
        then treats the max lag as the min lag, see :attr:`max_compaction_lag_ms`). An override
        invalid on its own (a ``compression.type`` whose codec plugin is no longer loaded, a key
        this broker does not know) is dropped alone, reported as an error naming the value used
        instead; every other override stays."""
        key_for = _topic_key_for(broker)
        values = broker.topic_defaults()
        parsed: dict[str, Any] = {}
        problems: list[TopicConfigProblem] = []
        for name, raw in overrides.items():
            try:
                parsed[name] = values[name] = _parse_topic_value(broker, key_for, name, raw)
            except InvalidConfig as exc:
                instead = f"the broker default {render(values[name])!r}" if name in values else "nothing (ignored)"
                problems.append(TopicConfigProblem(name, raw, f"{exc}; using {instead} instead", dropped=True))
        for conflict in _topic_conflicts(values):
            problems.append(TopicConfigProblem("", None, f"{conflict} (kept as configured)", dropped=False))
        return cls(values, parsed), problems

    @classmethod
    def known_keys(cls, broker: Config) -> list[str]:
        return sorted(broker.topic_defaults())

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    @property
    def segment_bytes(self) -> int:
        return int(self["segment.bytes"])

    @property
    def segment_ms(self) -> int:
        return int(self["segment.ms"])

    @property
    def segment_index_bytes(self) -> int:
        return int(self["segment.index.bytes"])

    @property
    def index_interval_bytes(self) -> int:
        return int(self["index.interval.bytes"])

    @property
    def retention_ms(self) -> int:
        return int(self["retention.ms"])

    @property
    def retention_bytes(self) -> int:
        return int(self["retention.bytes"])

    @property
    def remote_storage_enable(self) -> bool:
        """Whether the topic is tiered (KIP-405); False for a config without the key."""
        return bool(self.get("remote.storage.enable", False))

    @property
    def local_retention_ms(self) -> int:
        """``local.retention.ms`` with Kafka's -2 resolved to ``retention.ms``."""
        value = int(self.get("local.retention.ms", -2))
        return self.retention_ms if value == -2 else value

    @property
    def local_retention_bytes(self) -> int:
        """``local.retention.bytes`` with Kafka's -2 resolved to ``retention.bytes``."""
        value = int(self.get("local.retention.bytes", -2))
        return self.retention_bytes if value == -2 else value

    @property
    def cleanup_policy(self) -> list[str]:
        return list(self["cleanup.policy"])

    @property
    def compact(self) -> bool:
        return "compact" in self["cleanup.policy"]

    @property
    def delete(self) -> bool:
        return "delete" in self["cleanup.policy"]

    @property
    def max_message_bytes(self) -> int:
        return int(self["max.message.bytes"])

    @property
    def flush_messages(self) -> int:
        return int(self["flush.messages"])

    @property
    def flush_ms(self) -> int:
        return int(self["flush.ms"])

    @property
    def delete_retention_ms(self) -> int:
        return int(self["delete.retention.ms"])

    @property
    def min_compaction_lag_ms(self) -> int:
        return int(self["min.compaction.lag.ms"])

    @property
    def max_compaction_lag_ms(self) -> int:
        """``max.compaction.lag.ms``, but never below ``min.compaction.lag.ms``: a topic loaded
        with the two in conflict (see :meth:`load`) is compacted once its records reach the min
        lag, which both bounds allow, rather than never or at once."""
        return max(int(self["max.compaction.lag.ms"]), int(self["min.compaction.lag.ms"]))

    @property
    def message_timestamp_type(self) -> str:
        return str(self["message.timestamp.type"])

    @property
    def min_insync_replicas(self) -> int:
        return int(self["min.insync.replicas"])


def default_config(**overrides: Any) -> Config:
    """Built-in defaults with some keys changed (names with ``_`` for ``.``): for tests and
    embedders. Environment variables are ignored."""
    return load_config(env={}, overrides={k.replace("_", "."): v for k, v in overrides.items()})
