"""Broker core: topics (create/delete/grow, names, auto-creation), Metadata, configs (live), restarts."""

from __future__ import annotations

import os
import types
import uuid
from pathlib import Path

import pytest
import trio
import trio.testing
from broker_harness import (
    batch,
    broker_config,
    broker_plugins,
    create,
    error_lines,
    fetch_records,
    produce,
    replication_factor_too_large,
    running_broker,
)

from odradek.broker.admin import assign_replicas, validate_topic_name
from odradek.broker.api import (
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
    ConfigType,
    CreatableTopic,
    CreatePartitionsTopic,
    FetchPartition,
    IsolationLevel,
)
from odradek.broker.configs import ConfigManager
from odradek.broker.core import BrokerCore
from odradek.broker.group.state import OffsetAndMetadata
from odradek.broker.metadata_cache import PartitionState, encode, partition_state_key, topic_key
from odradek.broker.server import BrokerServer, ListenersStopped
from odradek.config import default_config, load_config
from odradek.errors import ErrorCode, InvalidTopic
from odradek.hookspecs import hookimpl
from odradek.interfaces import Delete, Endpoint, Put, TopicPartition, TransportFactory


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "bad name", "é", "a/b", "events\n"])
def test_invalid_topic_names(name: str) -> None:
    with pytest.raises(InvalidTopic):
        validate_topic_name(name)


def test_valid_topic_names_and_assignment() -> None:
    for name in ("a", "a.b_c-D9", "a" * 249):
        validate_topic_name(name)
    assignment = assign_replicas([1, 2, 3], 6, 2)
    assert all(len(set(r)) == 2 for r in assignment)
    assert sorted(r[0] for r in assignment) == [1, 1, 2, 2, 3, 3]  # leaders spread evenly


async def test_create_topics_validation(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as core:

        async def create_one(topic: CreatableTopic, validate_only: bool = False) -> ErrorCode:
            return (await core.create_topics([topic], 1000, validate_only))[topic.name].error

        assert await create_one(CreatableTopic("ok", 3, 1)) == ErrorCode.NONE
        assert await create_one(CreatableTopic("ok", 3, 1)) == ErrorCode.TOPIC_ALREADY_EXISTS
        assert await create_one(CreatableTopic("bad name")) == ErrorCode.INVALID_TOPIC_EXCEPTION
        assert await create_one(CreatableTopic("a.b")) == ErrorCode.NONE
        assert await create_one(CreatableTopic("a_b")) == ErrorCode.INVALID_TOPIC_EXCEPTION  # collides with a.b
        assert await create_one(CreatableTopic("zero", 0, 1)) == ErrorCode.INVALID_PARTITIONS
        assert await create_one(CreatableTopic("rf", 1, 2)) == ErrorCode.INVALID_REPLICATION_FACTOR
        assert await create_one(CreatableTopic("rf0", 1, 0)) == ErrorCode.INVALID_REPLICATION_FACTOR
        bad_cfg = CreatableTopic("cfg", configs={"retention.ms": "soon"})
        assert await create_one(bad_cfg) == ErrorCode.INVALID_CONFIG
        assert await create_one(CreatableTopic("cfg2", configs={"no.such.config": "1"})) == ErrorCode.INVALID_CONFIG
        assert await create_one(CreatableTopic("cfg3", configs={"retention.ms": None})) == ErrorCode.INVALID_CONFIG
        assert await create_one(CreatableTopic("both", 2, 1, assignments={0: [0]})) == ErrorCode.INVALID_REQUEST
        assert (
            await create_one(CreatableTopic("asg", assignments={0: [0], 2: [0]}))
            == ErrorCode.INVALID_REPLICA_ASSIGNMENT
        )
        assert await create_one(CreatableTopic("asg", assignments={0: [7]})) == ErrorCode.INVALID_REPLICA_ASSIGNMENT
        assert await create_one(CreatableTopic("asg", assignments={0: [0], 1: [0]})) == ErrorCode.NONE
        assert await create_one(CreatableTopic("dry", 4, 1), validate_only=True) == ErrorCode.NONE
        dup = await core.create_topics([CreatableTopic("d"), CreatableTopic("d")], 1000, False)
        assert dup["d"].error == ErrorCode.INVALID_REQUEST
        md = await core.metadata(None, False)
        assert sorted(t.name for t in md.topics) == ["a.b", "asg", "ok"]
        assert [len(t.partitions) for t in md.topics if t.name == "asg"] == [2]


async def test_create_topic_result_describes_configs(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as core:
        res = (await core.create_topics([CreatableTopic("c", 2, 1, configs={"retention.ms": "1000"})], 1000, False))[
            "c"
        ]
        assert (res.num_partitions, res.replication_factor) == (2, 1)
        entries = {e.name: e for e in res.configs}
        assert (
            entries["retention.ms"].value == "1000"
            and entries["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG
        )
        assert entries["cleanup.policy"].value == "delete" and entries["cleanup.policy"].is_default
        # CreateTopics v7 answers the new topic's id (the one metadata keeps); validate_only none
        assert len(res.topic_id) == 32 and res.topic_id == core.metadata_cache.topics["c"].topic_id
        dry = await core.create_topics([CreatableTopic("d", 1, 1)], 1000, True)
        assert dry["d"].error == ErrorCode.NONE and dry["d"].topic_id == ""


async def test_metadata_brokers_controller_and_partitions(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as core:
        await create(core, "t", partitions=2)
        md = await core.metadata(["t", "missing", "bad name"], False, listener_name="PLAINTEXT")
        assert md.cluster_id == core.cluster_id and len(md.cluster_id) == 22
        assert md.controller_id == 0
        assert [(b.node_id, b.host, b.port) for b in md.brokers] == [(0, "127.0.0.1", 9092)]
        by_name = {t.name: t for t in md.topics}
        assert by_name["missing"].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert by_name["bad name"].error == ErrorCode.INVALID_TOPIC_EXCEPTION
        t = by_name["t"]
        assert t.error == ErrorCode.NONE and not t.is_internal
        assert [(p.partition, p.leader, p.leader_epoch, p.replicas, p.isr) for p in t.partitions] == [
            (0, 0, 0, (0,), (0,)),
            (1, 0, 0, (0,), (0,)),
        ]
        # a listener the broker does not have: no broker address, partitions say so
        other = await core.metadata(["t"], False, listener_name="EXTERNAL")
        assert other.brokers == () and other.topics[0].partitions[0].error == ErrorCode.LISTENER_NOT_FOUND


async def test_metadata_auto_creates_topics(tmp_path: Path) -> None:
    async with running_broker(tmp_path, num_partitions=3) as core:
        md = await core.metadata(["auto"], True)
        assert md.topics[0].error == ErrorCode.NONE and len(md.topics[0].partitions) == 3
        md = await core.metadata(["not-asked"], False)
        assert md.topics[0].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        # internal topics are created by their coordinators, never by a Metadata request
        md = await core.metadata(["__transaction_state"], True)
        assert md.topics[0].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    async with running_broker(tmp_path / "off", auto_create_topics_enable=False) as core:
        md = await core.metadata(["auto"], True)
        assert md.topics[0].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_delete_topics(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as core:
        await create(core, "gone", partitions=2)
        await produce(core, TopicPartition("gone", 0), batch([b"x"]))
        assert (tmp_path / "gone-0").exists()
        res = await core.delete_topics(["gone", "never"], 1000)
        assert res["gone"].error == ErrorCode.NONE and res["never"].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert core.storage.get_log(TopicPartition("gone", 0)) is None
        assert (await core.metadata(["gone"], False)).topics[0].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        # re-created from scratch
        await create(core, "gone")
        assert await fetch_records(core, TopicPartition("gone", 0)) == []
        # a name twice in one request: INVALID_REQUEST for it, and nothing done (Kafka's answer)
        twice = await core.delete_topics(["gone", "gone"], 1000)
        assert twice["gone"].error == ErrorCode.INVALID_REQUEST
        assert (await core.metadata(["gone"], False)).topics[0].error == ErrorCode.NONE
    async with running_broker(tmp_path / "nodelete", delete_topic_enable=False) as core:
        await create(core, "kept")
        assert (await core.delete_topics(["kept"], 1000))["kept"].error == ErrorCode.TOPIC_DELETION_DISABLED


async def test_create_partitions(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as core:
        await create(core, "g")
        res = await core.create_partitions([CreatePartitionsTopic("g", 3)], 1000, False)
        assert res["g"].error == ErrorCode.NONE
        assert (await produce(core, TopicPartition("g", 2), batch([b"x"]))).error == ErrorCode.NONE
        for count, code in ((3, ErrorCode.INVALID_PARTITIONS), (2, ErrorCode.INVALID_PARTITIONS)):
            assert (await core.create_partitions([CreatePartitionsTopic("g", count)], 1000, False))["g"].error == code
        bad = CreatePartitionsTopic("g", 5, [[0]])
        assert (await core.create_partitions([bad], 1000, False))["g"].error == ErrorCode.INVALID_REPLICA_ASSIGNMENT
        ok = CreatePartitionsTopic("g", 5, [[0], [0]])
        assert (await core.create_partitions([ok], 1000, True))["g"].error == ErrorCode.NONE  # validate only
        assert len((await core.metadata(["g"], False)).topics[0].partitions) == 3
        none = await core.create_partitions([CreatePartitionsTopic("none", 2)], 1000, False)
        assert none["none"].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        twice = [CreatePartitionsTopic("g", 5), CreatePartitionsTopic("g", 4)]
        assert (await core.create_partitions(twice, 1000, False))["g"].error == ErrorCode.INVALID_REQUEST
        assert len((await core.metadata(["g"], False)).topics[0].partitions) == 3  # neither applied


async def test_a_request_for_too_many_partitions_is_refused_whole(tmp_path: Path) -> None:
    """Kafka's controller bound (10,000 new partitions per request): 2**31-1 partitions in a
    49-byte request once had the broker build that many assignments before anything else ran."""
    async with running_broker(tmp_path) as core:
        for validate_only in (True, False):
            huge = await core.create_topics([CreatableTopic("huge", 2**31 - 1, 1)], 1000, validate_only)
            assert huge["huge"].error == ErrorCode.POLICY_VIOLATION
            assert "2147483647 new partitions, at most 10000" in (huge["huge"].error_message or "")
        # the bound is on the request's total: each topic alone would be fine, neither is created
        pair = await core.create_topics([CreatableTopic("a", 6000, 1), CreatableTopic("b", 6000, 1)], 1000, True)
        assert {r.error for r in pair.values()} == {ErrorCode.POLICY_VIOLATION}
        assert (await core.create_topics([CreatableTopic("a", 6000, 1)], 1000, True))["a"].error == ErrorCode.NONE
        await create(core, "g")
        grow = await core.create_partitions([CreatePartitionsTopic("g", 2**31 - 1)], 1000, True)
        assert grow["g"].error == ErrorCode.POLICY_VIOLATION
        grow = await core.create_partitions([CreatePartitionsTopic("g", 10_001)], 1000, True)
        assert grow["g"].error == ErrorCode.NONE  # 10,000 new partitions: at the bound
        assert len((await core.metadata(["g"], False)).topics[0].partitions) == 1
        assert (await core.metadata(None, False)).topics and "huge" not in core.metadata_cache.topics


async def describe_topic(core: BrokerCore, name: str, *names: str) -> dict[str, tuple[str | None, ConfigSource]]:
    res = await core.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name, list(names) or None)])
    assert res[0].error == ErrorCode.NONE, res[0]
    return {e.name: (e.value, e.source) for e in res[0].configs}


async def alter(core: BrokerCore, name: str, *ops: AlterableConfig, validate_only: bool = False) -> ErrorCode:
    resource = AlterConfigsResource(ConfigResourceType.TOPIC, name, ops)
    return (await core.incremental_alter_configs([resource], validate_only))[0].error


async def test_describe_configs(tmp_path: Path) -> None:
    async with running_broker(tmp_path, log_retention_ms=12345) as core:
        await create(core, "t", **{"segment.bytes": "1048576"})
        cfg = await describe_topic(core, "t")
        assert cfg["segment.bytes"] == ("1048576", ConfigSource.DYNAMIC_TOPIC_CONFIG)
        assert cfg["retention.ms"] == ("12345", ConfigSource.STATIC_BROKER_CONFIG)
        assert cfg["cleanup.policy"] == ("delete", ConfigSource.DEFAULT_CONFIG)
        assert list(await describe_topic(core, "t", "retention.ms")) == ["retention.ms"]
        res = await core.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, "t", ["retention.ms"])], include_synonyms=True
        )
        assert res[0].configs[0].synonyms == (
            ("log.retention.ms", "12345", ConfigSource.STATIC_BROKER_CONFIG),
            # Kafka's default sits on the coarsest synonym: a client keying synonyms by name
            # (confluent-kafka) kept this DEFAULT over the set log.retention.ms of the same name
            ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
        )
        missing = await core.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "nope")])
        assert missing[0].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        # Kafka's Topic.validate comes first: names no topic can have are INVALID_TOPIC_EXCEPTION
        for bad in ("..", ".", "", "bad name"):
            res = await core.describe_configs([ConfigResource(ConfigResourceType.TOPIC, bad)])
            assert res[0].error == ErrorCode.INVALID_TOPIC_EXCEPTION, bad
            assert await alter(core, bad, AlterableConfig("retention.ms", AlterConfigOp.SET, "1")) == (
                ErrorCode.INVALID_TOPIC_EXCEPTION
            )
        # a resource type odradek does not serve, in Kafka's words
        (unknown,) = await core.describe_configs([ConfigResource(ConfigResourceType.UNKNOWN, "0")])
        assert (unknown.error, unknown.error_message) == (
            ErrorCode.INVALID_REQUEST,
            "Unsupported resource type: UNKNOWN",
        )
        broker = await core.describe_configs([ConfigResource(ConfigResourceType.BROKER, "0", ["log.retention.ms"])])
        entry = broker[0].configs[0]
        assert entry.read_only and entry.value == "12345" and entry.source == ConfigSource.STATIC_BROKER_CONFIG


async def test_a_ported_server_properties_starts_with_kafkas_synonyms(tmp_path: Path) -> None:
    """Kafka's server.properties lines are TOML too: log.retention.hours=168 and the other
    broker synonyms of topic keys are read, not refused as unknown, and DescribeConfigs lists a
    topic key's synonyms as Kafka does (override, the set broker synonyms by precedence, default)."""
    properties = tmp_path / "server.properties"
    properties.write_text(
        "broker.id=0\nnum.partitions=1\nlog.retention.hours=168\nlog.retention.minutes=120\n"
        "log.roll.hours=2\nlog.roll.jitter.hours=1\nlog.preallocate=true\n"
        "log.message.timestamp.after.max.ms=3600000\nlog.retention.check.interval.ms=300000\n"
    )
    plugins = broker_plugins()
    config = load_config(
        properties,
        env={},
        overrides={"log.dirs": str(tmp_path / "data"), "listeners": "PLAINTEXT://127.0.0.1:0"},
        plugins=plugins,
    )
    server = BrokerServer(config, plugins)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        core = server.core
        assert core is not None
        await create(core, "t", **{"retention.ms": "5000"})
        described = await describe_topic(core, "t")
        assert described["retention.ms"] == ("5000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
        assert described["segment.ms"] == ("7200000", ConfigSource.STATIC_BROKER_CONFIG)
        assert described["segment.jitter.ms"] == ("3600000", ConfigSource.STATIC_BROKER_CONFIG)
        assert described["preallocate"] == ("true", ConfigSource.STATIC_BROKER_CONFIG)
        assert described["message.timestamp.after.max.ms"] == ("3600000", ConfigSource.STATIC_BROKER_CONFIG)
        (res,) = await core.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, "t", ["retention.ms"])], include_synonyms=True
        )
        assert res.configs[0].synonyms == (
            ("retention.ms", "5000", ConfigSource.DYNAMIC_TOPIC_CONFIG),
            ("log.retention.minutes", "120", ConfigSource.STATIC_BROKER_CONFIG),
            ("log.retention.hours", "168", ConfigSource.STATIC_BROKER_CONFIG),
            ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
        )
        nursery.cancel_scope.cancel()


def test_describe_configs_types_integers_as_kafka() -> None:
    """DescribeConfigs v3+ config_type: INT, SHORT or LONG as Kafka types each key (the topic
    keys as their broker keys), from the same lists that bound the values."""
    manager = ConfigManager(default_config())
    topic = {
        e.name: e.config_type
        for e in manager.topic_entries(
            default_config().topic_config(), {}, include_synonyms=False, include_documentation=False
        )
    }
    broker = {
        e.name: e.config_type for e in manager.broker_entries(include_synonyms=False, include_documentation=False)
    }
    assert {
        n: topic[n] for n in ("segment.bytes", "max.message.bytes", "segment.index.bytes", "index.interval.bytes")
    } == (
        dict.fromkeys(
            ("segment.bytes", "max.message.bytes", "segment.index.bytes", "index.interval.bytes"), ConfigType.INT
        )
    )
    assert (
        topic["min.insync.replicas"]
        == topic["compression.gzip.level"]
        == topic["compression.zstd.level"]
        == ConfigType.INT
    )
    assert topic["retention.ms"] == topic["flush.messages"] == topic["segment.jitter.ms"] == ConfigType.LONG
    assert topic["preallocate"] == ConfigType.BOOLEAN and topic["cleanup.policy"] == ConfigType.LIST
    assert broker["offsets.topic.replication.factor"] == ConfigType.SHORT
    assert broker["default.replication.factor"] == broker["log.flush.offset.checkpoint.interval.ms"] == ConfigType.INT
    assert (
        broker["group.max.size"]
        == broker["log.retention.hours"]
        == broker["transaction.max.timeout.ms"]
        == ConfigType.INT
    )
    assert broker["log.retention.ms"] == broker["connections.max.idle.ms"] == ConfigType.LONG


async def test_incremental_alter_configs_apply_live(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as core:
        await create(core, "t")
        tp = TopicPartition("t", 0)
        partition = core.replica_manager.get_partition(tp)
        assert partition is not None
        assert await alter(core, "t", AlterableConfig("max.message.bytes", AlterConfigOp.SET, "200")) == ErrorCode.NONE
        # in force for the next produce, without a restart, on the partition and on its log
        assert (await produce(core, tp, batch([b"x" * 300]))).error == ErrorCode.MESSAGE_TOO_LARGE
        assert partition.config.max_message_bytes == 200
        assert partition.log.config.max_message_bytes == 200  # type: ignore[attr-defined]
        assert await alter(core, "t", AlterableConfig("retention.ms", AlterConfigOp.SET, "1000")) == ErrorCode.NONE
        assert partition.log.config.retention_ms == 1000  # type: ignore[attr-defined]
        compact = AlterableConfig("cleanup.policy", AlterConfigOp.APPEND, "compact")
        assert await alter(core, "t", compact) == ErrorCode.NONE
        assert (await describe_topic(core, "t", "cleanup.policy"))["cleanup.policy"][0] == "delete,compact"
        assert partition.config.compact
        remove = AlterableConfig("cleanup.policy", AlterConfigOp.SUBTRACT, "delete")
        assert await alter(core, "t", remove) == ErrorCode.NONE
        assert partition.log.config.cleanup_policy == ["compact"]  # type: ignore[attr-defined]
        assert (
            await alter(core, "t", AlterableConfig("max.message.bytes", AlterConfigOp.DELETE, None)) == ErrorCode.NONE
        )
        assert (await produce(core, tp, batch([b"x" * 300], keys=[b"k"]))).error == ErrorCode.NONE
        # refused changes
        assert (
            await alter(core, "t", AlterableConfig("retention.ms", AlterConfigOp.SET, "x")) == ErrorCode.INVALID_CONFIG
        )
        assert await alter(core, "t", AlterableConfig("nope", AlterConfigOp.SET, "1")) == ErrorCode.INVALID_CONFIG
        assert (
            await alter(core, "t", AlterableConfig("retention.ms", AlterConfigOp.APPEND, "1"))
            == ErrorCode.INVALID_CONFIG
        )
        assert await alter(core, "zz", AlterableConfig("retention.ms", AlterConfigOp.SET, "1")) == (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )
        dry = AlterableConfig("retention.ms", AlterConfigOp.SET, "5")
        assert await alter(core, "t", dry, validate_only=True) == ErrorCode.NONE
        assert partition.log.config.retention_ms == 1000  # type: ignore[attr-defined]
        broker = AlterConfigsResource(ConfigResourceType.BROKER, "0", [dry])
        assert (await core.incremental_alter_configs([broker], False))[0].error == ErrorCode.INVALID_CONFIG


async def test_legacy_alter_configs_replace_the_overrides(tmp_path: Path) -> None:
    """AlterConfigs (33, what confluent-kafka's alter_configs sends): the listed configs become
    the topic's whole set of overrides; any other goes back to its default."""
    async with running_broker(tmp_path) as core:
        await create(core, "t", **{"retention.ms": "1000", "max.message.bytes": "2000"})

        async def replace(*configs: tuple[str, str | None], validate_only: bool = False) -> ErrorCode:
            ops = [AlterableConfig(name, AlterConfigOp.SET, value) for name, value in configs]
            resource = AlterConfigsResource(ConfigResourceType.TOPIC, "t", ops)
            return (await core.alter_configs([resource], validate_only))[0].error

        assert await replace(("retention.ms", "5000")) == ErrorCode.NONE
        described = await describe_topic(core, "t", "retention.ms", "max.message.bytes")
        assert described["retention.ms"] == ("5000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
        assert described["max.message.bytes"][1] == ConfigSource.DEFAULT_CONFIG  # not listed: default again
        # Kafka's ConfigAdminManager.preprocess: INVALID_REQUEST, before the value or the key is checked
        assert await replace(("retention.ms", None)) == ErrorCode.INVALID_REQUEST
        assert await replace(("no.such.key", None)) == ErrorCode.INVALID_REQUEST
        assert await replace(("retention.ms", "x")) == ErrorCode.INVALID_CONFIG
        assert await replace(("segment.ms", "60000"), validate_only=True) == ErrorCode.NONE
        assert (await describe_topic(core, "t", "retention.ms"))["retention.ms"][0] == "5000"
        assert await replace() == ErrorCode.NONE  # nothing listed: every override goes
        assert (await describe_topic(core, "t", "retention.ms"))["retention.ms"][1] == ConfigSource.DEFAULT_CONFIG


async def test_restart_keeps_topics_configs_data_and_offsets(tmp_path: Path) -> None:
    tp = TopicPartition("t", 1)
    async with running_broker(tmp_path) as core:
        await create(core, "t", partitions=2, **{"retention.ms": "99999"})
        for i in range(3):
            await produce(core, tp, batch([b"v%d" % i]))
        cluster_id = core.cluster_id
    # shutdown checkpointed the high watermarks (Kafka's text format: version, count, entries)
    checkpoint = (tmp_path / "replication-offset-checkpoint").read_text().splitlines()
    assert "t 1 3" in checkpoint and "t 0 0" in checkpoint
    async with running_broker(tmp_path) as core:
        assert core.cluster_id == cluster_id
        md = await core.metadata(["t"], False)
        assert len(md.topics[0].partitions) == 2
        assert (await describe_topic(core, "t", "retention.ms"))["retention.ms"] == (
            "99999",
            ConfigSource.DYNAMIC_TOPIC_CONFIG,
        )
        assert (await produce(core, tp, batch([b"v3"]))).base_offset == 3
        assert [r.value for r in await fetch_records(core, tp)] == [b"v0", b"v1", b"v2", b"v3"]
        r = await core.fetch(-1, 0, 0, 100, IsolationLevel.READ_UNCOMMITTED, [FetchPartition(tp, 4, 100)])
        assert r[tp].high_watermark == 4


async def test_restart_with_a_conflicting_broker_default_keeps_the_topics_overrides(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A legal new broker default (max.compaction.lag.ms below a topic's min.compaction.lag.ms)
    used to drop every override of the topic at load: its retention.ms=-1 became the broker's
    seven days and retention deleted old data. Now they stay, with one warning."""
    async with running_broker(tmp_path) as core:
        await create(core, "keep", **{"retention.ms": "-1", "min.compaction.lag.ms": "100000"})
    async with running_broker(tmp_path, log_cleaner_max_compaction_lag_ms=50000) as core:
        config = core.metadata_cache.topic_config("keep")
        assert config is not None and config.retention_ms == -1 and config.max_compaction_lag_ms == 100000
        described = await describe_topic(core, "keep", "retention.ms", "min.compaction.lag.ms", "max.compaction.lag.ms")
        assert described == {
            "retention.ms": ("-1", ConfigSource.DYNAMIC_TOPIC_CONFIG),
            "min.compaction.lag.ms": ("100000", ConfigSource.DYNAMIC_TOPIC_CONFIG),
            "max.compaction.lag.ms": ("50000", ConfigSource.STATIC_BROKER_CONFIG),
        }
        # a new topic cannot be created with the pair: the cross-key rule holds where Kafka checks it
        result = await core.create_topics(
            [CreatableTopic("fresh", 1, 1, configs={"min.compaction.lag.ms": "100000"})], 5000, False
        )
        assert result["fresh"].error == ErrorCode.INVALID_CONFIG
    warnings = [r.getMessage() for r in caplog.records if "keep" in r.getMessage()]
    assert warnings == [
        "topic keep: its configs conflict: min.compaction.lag.ms (100000) is above "
        "max.compaction.lag.ms (50000) (kept as configured)"
    ]


async def test_creating_partitions_fsyncs_their_topic_ids_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each new log records its topic id with two fsyncs (file and directory). On the trio
    thread that was 2,000 fsyncs for a 1,000-partition topic, each waiting seconds for a journal
    commit on a busy disk while no client was served; they run in a worker thread."""
    real_fsync = os.fsync
    on_loop: list[int] = []

    def recording_fsync(fd: int) -> None:
        try:
            trio.lowlevel.current_trio_token()
        except RuntimeError:  # a worker thread
            pass
        else:
            on_loop.append(fd)
        real_fsync(fd)

    async with running_broker(tmp_path) as core:
        monkeypatch.setattr(os, "fsync", recording_fsync)
        await create(core, "t", partitions=8)
        monkeypatch.setattr(os, "fsync", real_fsync)
        topic_id = core.metadata_cache.topics["t"].topic_id
        for p in range(8):
            plog = core.storage.get_log(TopicPartition("t", p))
            assert plog is not None and plog.read_state("partition.metadata") == topic_id.encode()
    assert on_loop == []


async def test_a_log_left_by_an_earlier_topic_of_the_name_is_not_reused(tmp_path: Path) -> None:
    """A broker down while its topic was deleted and created again (by the rest of a cluster)
    finds on restart a log whose recorded topic id is not the topic's: the log goes instead of
    serving the old records under the new topic (Kafka's partition.metadata, KIP-516). Here the
    id on disk is changed while the broker is down, which is what that broker would see."""
    tp = TopicPartition("t", 0)
    async with running_broker(tmp_path) as core:
        await create(core, "t")
        await produce(core, tp, batch([b"old-1", b"old-2"]))
        topic_id = core.metadata_cache.topics["t"].topic_id
        plog = core.storage.get_log(tp)
        assert plog is not None and plog.read_state("partition.metadata") == topic_id.encode()
    async with running_broker(tmp_path) as core:  # same topic: the log is kept
        assert [r.value for r in await fetch_records(core, tp)] == [b"old-1", b"old-2"]
        plog = core.storage.get_log(tp)
        assert plog is not None
        plog.write_state("partition.metadata", b"0" * 32)  # as if written by an earlier topic "t"
    async with running_broker(tmp_path) as core:
        assert await fetch_records(core, tp) == []
        assert (await produce(core, tp, batch([b"new"]))).base_offset == 0
        plog = core.storage.get_log(tp)
        assert plog is not None and plog.read_state("partition.metadata") == topic_id.encode()


async def test_a_topic_deleted_and_created_again_between_two_reads_loses_its_old_log(tmp_path: Path) -> None:
    """A broker that reads a topic only after it was deleted and created again (on a cluster:
    another broker's DeleteTopics and CreateTopics reached the store while this one was busy, so
    its watch's re-read saw the new topic at once) still deletes the earlier topic's log: the
    topic id changed. Its records stayed and were served as the new topic's, its committed
    offsets stayed too (the deletion listeners were never told)."""
    tp = TopicPartition("t", 0)
    async with running_broker(tmp_path) as core:
        await create(core, "t")
        await produce(core, tp, batch([b"old-1", b"old-2"]))
        cache = core.metadata_cache
        store = cache.store
        old_id = cache.topics["t"].topic_id
        heard: list[str] = []
        cache.topic_deleted_listeners.append(heard.append)
        new_id = uuid.uuid4().hex
        # the store changes as another broker's DeleteTopics and CreateTopics change it, while
        # this broker's watch waits for the cache (a busy broker): it re-reads the topic once
        async with cache._lock:
            children, _ = await store.list(topic_key("t") + "/")
            await store.txn([], [*(Delete(k) for k in children), Delete(topic_key("t"))])
            assignment = encode({"version": 3, "topic_id": new_id, "partitions": {"0": [core.config["broker.id"]]}})
            state = PartitionState(core.config["broker.id"], 0, (core.config["broker.id"],), 0)
            await store.txn([], [Put(topic_key("t"), assignment), Put(partition_state_key("t", 0), state.to_json())])
            await trio.testing.wait_all_tasks_blocked()
        await cache.next_refresh()
        assert cache.topics["t"].topic_id == new_id != old_id
        assert await fetch_records(core, tp) == []
        assert (await produce(core, tp, batch([b"new"]))).base_offset == 0
        assert heard == ["t"]
        plog = core.storage.get_log(tp)
        assert plog is not None and plog.read_state("partition.metadata") == new_id.encode()


@pytest.mark.parametrize(
    ("content", "crash", "complaint"),
    [
        (b"\x00garbage\nnot a checkpoint\n", False, "which is not a topic id"),
        (b"", True, "is empty"),  # as a crash can leave a file on some file systems
        (b"0123456789abcdef0123456789abcdeg", False, "which is not a topic id"),
    ],
)
async def test_an_unreadable_topic_id_file_keeps_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes, crash: bool, complaint: str
) -> None:
    """Only an id read whole that names another topic deletes a log (Kafka too never deletes a
    log because ``partition.metadata`` cannot be read): a damaged or empty file is reported,
    the log kept as the current topic's and the file written again, so the next start is clean."""
    tp = TopicPartition("t", 0)
    async with running_broker(tmp_path) as core:
        await create(core, "t")
        await produce(core, tp, batch([b"v1", b"v2"]))
        topic_id = core.metadata_cache.topics["t"].topic_id
        plog = core.storage.get_log(tp)
        assert plog is not None
        state = plog.dir / "partition.metadata.state"
        log_dir = plog.dir.parent
    state.write_bytes(content)
    if crash:
        (log_dir / ".kafka_cleanshutdown").unlink()
    caplog.clear()
    async with running_broker(tmp_path) as core:
        assert [r.value for r in await fetch_records(core, tp)] == [b"v1", b"v2"]
        assert state.read_bytes() == topic_id.encode()
        warned = [r for r in caplog.records if "partition.metadata" in r.getMessage()]
        assert [r.levelname for r in warned] == ["WARNING"], caplog.text
        assert complaint in warned[0].getMessage() and "keeping the log" in warned[0].getMessage()
        assert "earlier topic" not in caplog.text
        assert (await produce(core, tp, batch([b"v3"]))).base_offset == 2
    caplog.clear()
    async with running_broker(tmp_path) as core:
        assert [r.value for r in await fetch_records(core, tp)] == [b"v1", b"v2", b"v3"]
        assert "partition.metadata" not in caplog.text and "earlier topic" not in caplog.text
        assert state.read_bytes() == topic_id.encode()


async def test_stray_logs_are_deleted_at_start_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A DeleteTopics commits to the metadata first and deletes the logs after: a crash in
    between left the rest of them on disk, loaded at every start, for ever. Once the metadata
    is loaded, a start deletes the logs no topic owns here (Kafka's stray replicas): of a topic
    the metadata does not have, and of a partition whose replicas no longer include this broker;
    one WARNING per topic. A store that was empty at start-up deletes nothing."""
    from odradek.broker.metadata_cache import MetadataCache, encode, topic_key

    async with running_broker(tmp_path) as core:
        await create(core, "gone", partitions=3)
        await create(core, "moved", partitions=2)
        await create(core, "kept")
        for name, partitions in (("gone", 3), ("moved", 2), ("kept", 1)):
            for p in range(partitions):
                await produce(core, TopicPartition(name, p), batch([b"x"]))
        cache = core.metadata_cache

        async def crashed_before_removing(self: MetadataCache, name: str, keep: set[int]) -> None:
            pass  # as if killed between the metadata commit and the log deletions

        monkeypatch.setattr(MetadataCache, "_remove_local", crashed_before_removing)
        assert (await core.delete_topics(["gone"], 1000))["gone"].error == ErrorCode.NONE
        moved = cache.topics["moved"]  # partition 1 reassigned to another broker meanwhile
        other = core.config.broker_id + 1
        doc = {"version": 3, "topic_id": moved.topic_id, "partitions": {"0": [core.config.broker_id], "1": [other]}}
        await core.store.put(topic_key("moved"), encode(doc))
        await cache.refresh_topic("moved")
    # undone only once the broker has stopped: its metadata watch sees the same change and would
    # remove moved-1 itself if the patch were undone while it still runs (a flaky test)
    monkeypatch.undo()
    assert sorted(d.name for d in tmp_path.glob("gone-*")) == ["gone-0", "gone-1", "gone-2"]
    caplog.clear()
    async with running_broker(tmp_path) as core:
        # a deleted log's dir is renamed <dir>.<uuid>-delete at once and removed in the background
        assert not [d for d in tmp_path.glob("gone-*") if not d.name.endswith("-delete")]
        assert not (tmp_path / "moved-1").exists() and core.storage.get_log(TopicPartition("moved", 1)) is None
        assert [r.value for r in await fetch_records(core, TopicPartition("moved", 0))] == [b"x"]
        assert [r.value for r in await fetch_records(core, TopicPartition("kept", 0))] == [b"x"]
        warned = [r.getMessage() for r in caplog.records if "stray" in r.getMessage()]
        assert len(warned) == 2 and all(r.levelname == "WARNING" for r in caplog.records if "stray" in r.getMessage())
        assert any("3 stray partition log(s) of topic gone" in m and "not in the metadata" in m for m in warned)
        assert any("1 stray partition log(s) of topic moved (1)" in m and f"broker {other - 1}" in m for m in warned)
    caplog.clear()
    async with running_broker(tmp_path):  # nothing left to delete
        assert "stray" not in caplog.text
    # a new, empty store (the metadata lost, a wrong address) that the operator chose to start
    # a new cluster in (meta.properties removed, else the start is refused): nothing is
    # deleted, it is reported
    (tmp_path / "odradek-metadata.json").unlink()
    (tmp_path / "meta.properties").unlink()
    caplog.clear()
    async with running_broker(tmp_path) as core:
        assert (tmp_path / "kept-0").exists() and core.storage.get_log(TopicPartition("kept", 0)) is not None
        assert "keeping 2 partition log(s) of 2 topic(s) the metadata does not know" in caplog.text


async def test_a_broker_whose_listeners_all_end_stops_with_an_error(tmp_path: Path) -> None:
    """A listener's serve that returns by itself (its socket gone) used to leave the broker shut
    down inside while ``serve`` -- and the ``odradek serve`` process -- went on forever."""

    class EndingListener:
        def __init__(self, config: object, broker: object, endpoint: Endpoint) -> None:
            self.endpoint = endpoint

        async def serve(self, *, task_status: trio.TaskStatus[list[Endpoint]] = trio.TASK_STATUS_IGNORED) -> None:
            task_status.started([self.endpoint])

    transport = types.SimpleNamespace(
        __name__="ending_transport",
        odradek_register_transports=hookimpl(
            lambda: [TransportFactory("ending", ["PLAINTEXT"], EndingListener, lambda _c: None, "ends at once")]
        ),
    )
    server = BrokerServer(broker_config(tmp_path), broker_plugins(transport))
    with trio.fail_after(30), pytest.RaisesGroup(ListenersStopped, flatten_subgroups=True, allow_unwrapped=True):
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve)


async def test_an_offsets_topic_replication_factor_above_the_brokers_is_one_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Kafka logs which setting keeps __consumer_offsets from being created; FindCoordinator
    keeps answering COORDINATOR_NOT_AVAILABLE (clients retry), without an error per request."""
    async with running_broker(tmp_path, offsets_topic_replication_factor=3) as core:
        assert core.group_coordinator is not None
        for _ in range(3):
            found = await core.group_coordinator.find_coordinator("g")
            assert found.error == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert error_lines(caplog) == replication_factor_too_large("__consumer_offsets", "offsets.topic.replication.factor")


async def test_delete_records_refuses_internal_topics_whatever_their_cleanup_policy(tmp_path: Path) -> None:
    """Kafka's ReplicaManager answers INVALID_TOPIC_EXCEPTION for DeleteRecords on an internal
    topic even when its cleanup.policy includes delete: the coordinators reload committed offsets
    (and transaction states) from the log start, so moving it would lose them at the next restart."""
    async with running_broker(tmp_path, offsets_topic_num_partitions=1) as core:
        coordinator = core.group_coordinator
        assert coordinator is not None
        assert (await coordinator.find_coordinator("g")).error == ErrorCode.NONE
        committed = await coordinator.commit_offsets("g", "", None, -1, {TopicPartition("t", 0): OffsetAndMetadata(7)})
        assert committed == {TopicPartition("t", 0): ErrorCode.NONE}
        also_delete = AlterableConfig("cleanup.policy", AlterConfigOp.SET, "compact,delete")
        assert await alter(core, "__consumer_offsets", also_delete) == ErrorCode.NONE
        offsets_tp = TopicPartition("__consumer_offsets", 0)
        for tp in (offsets_tp, TopicPartition("__transaction_state", 0)):
            assert (await core.delete_records({tp: -1}, 1000))[tp].error == ErrorCode.INVALID_TOPIC_EXCEPTION
        partition = core.replica_manager.get_partition(offsets_tp)
        assert partition is not None and partition.log_start_offset == 0 < partition.log_end_offset


async def test_a_resource_named_twice_in_one_alter_is_refused_and_not_applied(tmp_path: Path) -> None:
    """The core refuses both copies (Kafka's ConfigAdminManager.preprocess) whatever transport
    called it, and applies neither, for both alter APIs; other resources go on."""
    async with running_broker(tmp_path) as core:
        await create(core, "t", **{"retention.ms": "1000"})
        await create(core, "u")

        def resource(name: str, value: str) -> AlterConfigsResource:
            op = AlterableConfig("retention.ms", AlterConfigOp.SET, value)
            return AlterConfigsResource(ConfigResourceType.TOPIC, name, [op])

        resources = [resource("t", "2000"), resource("u", "5000"), resource("t", "3000")]
        for alter_configs in (core.incremental_alter_configs, core.alter_configs):
            results = await alter_configs(resources, False)
            assert [(r.resource_name, r.error, r.error_message) for r in results] == [
                ("t", ErrorCode.INVALID_REQUEST, "Each resource must appear at most once."),
                ("u", ErrorCode.NONE, None),
                ("t", ErrorCode.INVALID_REQUEST, "Each resource must appear at most once."),
            ]
            assert (await describe_topic(core, "t", "retention.ms"))["retention.ms"][0] == "1000"


async def test_kafkas_topic_configs_without_effect_are_created_altered_and_described(tmp_path: Path) -> None:
    """What kafka-reassign-partitions and MirrorMaker 2 send: accepted by CreateTopics and both
    alter APIs, described with Kafka's types and defaults; tiered storage is INVALID_CONFIG while
    the broker has it off (remote.log.storage.system.enable=false, the default)."""
    async with running_broker(tmp_path) as core:
        await create(core, "t", **{"message.format.version": "2.8", "local.retention.ms": "60000"})
        throttle = AlterableConfig("leader.replication.throttled.replicas", AlterConfigOp.SET, "0:0")
        assert await alter(core, "t", throttle) == ErrorCode.NONE
        [described] = await core.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, "t")], include_documentation=True
        )
        entries = {e.name: e for e in described.configs}
        assert entries["leader.replication.throttled.replicas"].value == "0:0"
        assert entries["leader.replication.throttled.replicas"].config_type == ConfigType.LIST
        assert entries["follower.replication.throttled.replicas"].value == ""
        assert entries["message.format.version"].value == "2.8"
        assert entries["local.retention.ms"].config_type == ConfigType.LONG
        assert entries["remote.storage.enable"].value == "false" and entries["remote.storage.enable"].is_default
        assert "no effect" in (entries["message.downconversion.enable"].documentation or "")
        tiered_topic = CreatableTopic("tiered", configs={"remote.storage.enable": "true"})
        tiered = await core.create_topics([tiered_topic], 1000, False)
        assert tiered["tiered"].error == ErrorCode.INVALID_CONFIG
        assert "remote.log.storage.system.enable=false" in (tiered["tiered"].error_message or "")
        enable = AlterableConfig("remote.storage.enable", AlterConfigOp.SET, "true")
        assert await alter(core, "t", enable) == ErrorCode.INVALID_CONFIG


async def test_describe_configs_with_an_empty_key_list_describes_every_config(tmp_path: Path) -> None:
    """Kafka's ConfigHelper treats an empty configuration_keys like null: every config (what
    kafka-python and some tools send to mean "all"), for topics and the broker alike."""
    async with running_broker(tmp_path) as core:
        await create(core, "t")
        for resource_type, name in ((ConfigResourceType.TOPIC, "t"), (ConfigResourceType.BROKER, "0")):
            every, empty = await core.describe_configs(
                [ConfigResource(resource_type, name, None), ConfigResource(resource_type, name, [])]
            )
            assert empty.error == ErrorCode.NONE and len(every.configs) > 10
            assert [e.name for e in empty.configs] == [e.name for e in every.configs]


async def test_a_null_value_to_set_is_an_invalid_request_naming_the_keys(tmp_path: Path) -> None:
    """Kafka's ConfigAdminManager.preprocess answers INVALID_REQUEST "Null value not supported for
    : <keys>" for a null value of any operation but DELETE, before it looks the resource up."""
    async with running_broker(tmp_path) as core:
        await create(core, "t", **{"retention.ms": "1000"})

        async def answer(name: str, *ops: AlterableConfig) -> tuple[ErrorCode, str | None]:
            resource = AlterConfigsResource(ConfigResourceType.TOPIC, name, ops)
            [result] = await core.incremental_alter_configs([resource], False)
            return result.error, result.error_message

        null_set = AlterableConfig("retention.ms", AlterConfigOp.SET, None)
        null_append = AlterableConfig("cleanup.policy", AlterConfigOp.APPEND, None)
        assert await answer("t", null_set, null_append) == (
            ErrorCode.INVALID_REQUEST,
            "Null value not supported for : retention.ms, cleanup.policy",
        )
        assert (await answer("missing", null_set))[0] == ErrorCode.INVALID_REQUEST
        twice = AlterableConfig("retention.ms", AlterConfigOp.SET, "5")
        assert await answer("t", twice, twice) == (ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
        assert (await describe_topic(core, "t", "retention.ms"))["retention.ms"][0] == "1000"
        assert await answer("t", AlterableConfig("retention.ms", AlterConfigOp.DELETE, None)) == (ErrorCode.NONE, None)


async def test_cluster_metadata_cannot_be_created(tmp_path: Path) -> None:
    """KRaft's metadata log is no topic: Kafka answers CreateTopics INVALID_REQUEST for it (even
    named twice, or only validated), and auto-creation leaves it unknown."""
    async with running_broker(tmp_path) as core:
        name = "__cluster_metadata"
        for topics, validate_only in (([CreatableTopic(name)], False), ([CreatableTopic(name)] * 2, True)):
            result = (await core.create_topics(topics, 1000, validate_only))[name]
            assert (result.error, result.error_message) == (
                ErrorCode.INVALID_REQUEST,
                "Creation of internal topic __cluster_metadata is prohibited.",
            )
        md = await core.metadata([name], True)
        assert [(t.name, t.error) for t in md.topics] == [(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
        assert name not in core.metadata_cache.topics


async def test_broker_loggers_are_described_and_their_levels_changed_at_run_time(tmp_path: Path) -> None:
    """kafka-configs --entity-type broker-loggers (KIP-412): DescribeConfigs lists the broker's
    loggers with the level each logs at (DYNAMIC_BROKER_LOGGER_CONFIG); IncrementalAlterConfigs
    SET/DELETE change a level for the process's run, as Kafka's RuntimeLoggerManager."""
    import logging

    admin_logger = logging.getLogger("odradek.broker.admin")
    saved = {name: logging.getLogger(name).level for name in ("", "odradek", "odradek.broker.admin")}
    try:
        async with running_broker(tmp_path) as core:
            logging.getLogger().setLevel(logging.INFO)
            loggers = ConfigResource(ConfigResourceType.BROKER_LOGGER, "0")
            [described] = await core.describe_configs([loggers])
            entries = {e.name: e for e in described.configs}
            assert described.error == ErrorCode.NONE and {"root", "odradek", "odradek.broker.admin"} <= set(entries)
            assert entries["root"].value == "INFO"
            assert entries["odradek.broker.admin"].source == ConfigSource.DYNAMIC_BROKER_LOGGER_CONFIG

            async def change(*ops: AlterableConfig, name: str = "0", validate_only: bool = False) -> ErrorCode:
                resource = AlterConfigsResource(ConfigResourceType.BROKER_LOGGER, name, ops)
                return (await core.incremental_alter_configs([resource], validate_only))[0].error

            def level_of(name: str) -> str | None:
                [result] = core.configs.describe(
                    [ConfigResource(ConfigResourceType.BROKER_LOGGER, "0", [name])],
                    include_synonyms=False,
                    include_documentation=False,
                )
                return result.configs[0].value

            package_debug = AlterableConfig("odradek", AlterConfigOp.SET, "DEBUG")
            assert await change(package_debug, validate_only=True) == ErrorCode.NONE
            assert level_of("odradek.broker.admin") == "INFO"
            assert await change(package_debug) == ErrorCode.NONE
            assert level_of("odradek.broker.admin") == "DEBUG" and admin_logger.isEnabledFor(logging.DEBUG)
            assert await change(AlterableConfig("odradek.broker.admin", AlterConfigOp.SET, "WARN")) == ErrorCode.NONE
            assert level_of("odradek.broker.admin") == "WARN" and not admin_logger.isEnabledFor(logging.INFO)
            assert await change(AlterableConfig("odradek.broker.admin", AlterConfigOp.DELETE, None)) == ErrorCode.NONE
            assert level_of("odradek.broker.admin") == "DEBUG"  # its parent's again
            # refused, and nothing applied
            for refused, code in [
                (AlterableConfig("odradek", AlterConfigOp.SET, "LOUD"), ErrorCode.INVALID_CONFIG),
                (AlterableConfig("no.such.logger", AlterConfigOp.SET, "INFO"), ErrorCode.INVALID_CONFIG),
                (AlterableConfig("root", AlterConfigOp.DELETE, None), ErrorCode.INVALID_REQUEST),
                (AlterableConfig("odradek", AlterConfigOp.APPEND, "INFO"), ErrorCode.INVALID_REQUEST),
            ]:
                valid = AlterableConfig("odradek.broker.admin", AlterConfigOp.SET, "ERROR")
                assert await change(valid, refused) == code, refused
            assert level_of("odradek.broker.admin") == "DEBUG"
            assert await change(package_debug, name="1") == ErrorCode.INVALID_REQUEST  # another broker's
            for name in ("1", "", "x"):
                [other] = await core.describe_configs([ConfigResource(ConfigResourceType.BROKER_LOGGER, name)])
                assert other.error == ErrorCode.INVALID_REQUEST, name
            legacy = AlterConfigsResource(ConfigResourceType.BROKER_LOGGER, "0", [package_debug])
            assert (await core.alter_configs([legacy], False))[0].error == ErrorCode.INVALID_REQUEST
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)
