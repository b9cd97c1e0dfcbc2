"""The config model: sources and precedence, Kafka names, typed values, clear errors."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

from odradek.config import ConfigError, TopicConfig, default_config, load_config, parse_listener
from odradek.errors import InvalidConfig


def test_defaults_use_kafka_names() -> None:
    c = load_config(env={})
    assert c["num.partitions"] == 1
    assert c["log.segment.bytes"] == 1073741824
    assert c["log.retention.ms"] == 604800000
    assert c["storage"] == "segment" and c["metadata"] == "local"
    assert c.listeners[0].port == 9092 and c.listeners[0].host == "127.0.0.1"
    assert c.source("num.partitions") == "default"


def test_file_env_cli_precedence(tmp_path: Path) -> None:
    f = tmp_path / "broker.toml"
    f.write_text('num.partitions = 3\n[log]\nsegment.bytes = 1048576\n"retention.ms" = 1000\n')
    c = load_config(f, env={"ODRADEK_NUM_PARTITIONS": "5"}, overrides={"log.retention.ms": "2000"})
    assert c["num.partitions"] == 5 and c.source("num.partitions") == "env ODRADEK_NUM_PARTITIONS"
    assert c["log.segment.bytes"] == 1048576 and c.source("log.segment.bytes").startswith("file")
    assert c["log.retention.ms"] == 2000 and c.source("log.retention.ms") == "cli"


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"num.partition": "3"}, "num.partition"),
        ({"num.partitions": "three"}, "num.partitions"),
        ({"num.partitions": "0"}, "num.partitions"),
        ({"auto.create.topics.enable": "maybe"}, "auto.create.topics.enable"),
        ({"log.cleanup.policy": "shred"}, "log.cleanup.policy"),
        ({"listeners": "PLAINTEXT://nohost"}, "listeners"),
        ({"listeners": "PLAINTEXT://a:1,PLAINTEXT://b:2"}, "listeners"),
        ({"listeners": "PLAINTEXT://a:1", "advertised.listeners": "EXTERNAL://b:2"}, "advertised.listeners"),
        ({"listeners": "PLAINTEXT://a:1", "advertised.listeners": "PLAINTEXT://b"}, "advertised.listeners"),
        ({"listeners": "PLAINTEXT://a:1", "advertised.listeners": "PLAINTEXT://b:2,PLAINTEXT://c:3"}, "advertised"),
        ({"listeners": ""}, "at least one listener must be defined"),
        ({"log.message.timestamp.type": "WallTime"}, "log.message.timestamp.type"),
        # Kafka's types: INT keys stop at 2^31-1, LONG keys at 2^63-1, ratios at 1
        ({"log.segment.bytes": "3000000000"}, "log.segment.bytes"),
        ({"message.max.bytes": str(2**31)}, "message.max.bytes"),
        ({"log.retention.ms": str(2**63)}, "log.retention.ms"),
        ({"default.replication.factor": "40000"}, "default.replication.factor"),
        ({"log.cleaner.min.cleanable.ratio": "2.5"}, "log.cleaner.min.cleanable.ratio"),
        ({"log.cleaner.min.cleanable.ratio": "nan"}, "log.cleaner.min.cleanable.ratio"),
        # numbers as Kafka parses them: no underscores or exponents in integers
        ({"log.retention.ms": "1_000_000"}, "log.retention.ms"),
        ({"log.retention.ms": "1e23"}, "log.retention.ms"),
        ({"group.consumer.migration.policy": "sideways"}, "group.consumer.migration.policy"),
    ],
)
def test_bad_keys_and_values_name_the_key(overrides: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        load_config(env={}, overrides=overrides)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("log.segment.bytes = 2024-01-01", "'log.segment.bytes': expected an integer, got 2024-01-01 (a TOML date)"),
        ("cluster.id = 07:32:00", "'cluster.id': expected a string, got 07:32:00 (a TOML time)"),
        ("log.cleaner.min.cleanable.ratio = 2024-01-01T07:32:00", "got 2024-01-01T07:32:00 (a TOML date-time)"),
        ("log.dirs = [2024-01-01]", "'log.dirs': expected a list of strings, got an item 2024-01-01 (a TOML date)"),
        ("num.partitions = [1]", "'num.partitions': expected an integer, got [1]"),
    ],
)
def test_a_toml_value_of_the_wrong_type_is_one_line_naming_the_key(tmp_path: Path, line: str, message: str) -> None:
    f = tmp_path / "broker.toml"
    f.write_text(line + "\n")
    with pytest.raises(ConfigError) as info:
        load_config(f, env={})
    assert message in str(info.value) and "\n" not in str(info.value)


def test_bad_file(tmp_path: Path) -> None:
    f = tmp_path / "bad.toml"
    f.write_text("num.partitions = = 3")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(f, env={})
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.toml", env={})
    f.write_text("mystery.key = 1")
    with pytest.raises(ConfigError, match="mystery.key"):
        load_config(f, env={})


def test_topic_config_defaults_and_overrides() -> None:
    c = default_config(log_segment_bytes=4096)
    t = c.topic_config({"cleanup.policy": "compact,delete", "retention.ms": "60000"})
    assert t.segment_bytes == 4096
    assert t.retention_ms == 60000 and t.compact and t.delete
    assert t.overrides == {"cleanup.policy": ["compact", "delete"], "retention.ms": 60000}
    with pytest.raises(InvalidConfig, match="segment.byte"):
        c.topic_config({"segment.byte": "1"})
    with pytest.raises(InvalidConfig, match="cleanup.policy"):
        c.topic_config({"cleanup.policy": "archive"})
    for bad in ({"segment.bytes": "3000000000"}, {"min.cleanable.dirty.ratio": "2.5"}, {"retention.ms": str(2**64)}):
        with pytest.raises(InvalidConfig, match=next(iter(bad)).replace(".", r"\.")):
            c.topic_config(bad)
    assert c.topic_config({"retention.ms": str(2**63 - 1), "segment.bytes": str(2**31 - 1)}).segment_bytes == 2**31 - 1


def test_loading_a_topic_keeps_overrides_that_conflict_with_a_later_broker_default() -> None:
    """A topic created with min.compaction.lag.ms=100000 under a broker whose max lag was later
    lowered to 50000: CreateTopics/AlterConfigs refuse the pair, but loading the existing topic
    keeps every override (Kafka does not re-check cross-key rules at load) and says why."""
    c = default_config(log_cleaner_max_compaction_lag_ms=50000)
    stored = {"retention.ms": "-1", "min.compaction.lag.ms": "100000", "segment.bytes": "2048"}
    with pytest.raises(InvalidConfig, match="min.compaction.lag.ms"):
        c.topic_config(stored)
    t, problems = TopicConfig.load(c, stored)
    assert t.overrides == {"retention.ms": -1, "min.compaction.lag.ms": 100000, "segment.bytes": 2048}
    assert t.retention_ms == -1 and t.segment_bytes == 2048
    assert t["max.compaction.lag.ms"] == 50000  # described as configured ...
    assert t.max_compaction_lag_ms == 100000  # ... and the cleaner waits for the min lag
    assert [(p.dropped, p.message) for p in problems] == [
        (False, "min.compaction.lag.ms (100000) is above max.compaction.lag.ms (50000) (kept as configured)")
    ]


def test_loading_a_topic_drops_only_the_override_that_is_invalid_on_its_own() -> None:
    """A codec no longer loaded (here: no plugins, so only Kafka's names), a key this broker does
    not know: each goes alone, naming the value used instead; the rest stays in force."""
    c = default_config()
    stored = {"retention.ms": "-1", "compression.type": "brotli", "mystery.key": "1", "preallocate": "true"}
    t, problems = TopicConfig.load(c, stored)
    assert t.overrides == {"retention.ms": -1, "preallocate": True}
    assert t["compression.type"] == "producer"
    assert [(p.key, p.raw, p.dropped) for p in problems] == [
        ("compression.type", "brotli", True),
        ("mystery.key", "1", True),
    ]
    assert problems[0].message.endswith("using the broker default 'producer' instead")
    assert "unknown topic config 'mystery.key'" in problems[1].message
    assert TopicConfig.load(c, {"retention.ms": "5"})[1] == []


@pytest.mark.parametrize(
    ("settings", "retention_ms", "source"),
    [
        ({}, 604800000, "default"),
        ({"log.retention.hours": "1"}, 3_600_000, "cli (log.retention.hours)"),
        ({"log.retention.hours": "1", "log.retention.minutes": "2"}, 120_000, "cli (log.retention.minutes)"),
        ({"log.retention.hours": "1", "log.retention.minutes": "2", "log.retention.ms": "3"}, 3, "cli"),
        ({"log.retention.hours": "-1"}, -1, "cli (log.retention.hours)"),  # negative: keep forever
        ({"log.retention.minutes": "-5"}, -1, "cli (log.retention.minutes)"),
    ],
)
def test_retention_synonyms_follow_kafkas_precedence(settings: dict[str, str], retention_ms: int, source: str) -> None:
    c = load_config(env={}, overrides=settings)
    assert (c["log.retention.ms"], c.source("log.retention.ms")) == (retention_ms, source)
    assert c.topic_config().retention_ms == retention_ms


def test_roll_and_other_synonyms_set_the_topic_defaults() -> None:
    c = load_config(env={}, overrides={"log.roll.hours": "2", "log.roll.jitter.hours": "1", "log.preallocate": "true"})
    t = c.topic_config()
    assert (t.segment_ms, t["segment.jitter.ms"], t["preallocate"]) == (7_200_000, 3_600_000, True)
    both = load_config(env={}, overrides={"log.roll.hours": "2", "log.roll.ms": "5", "log.roll.jitter.ms": "3"})
    assert (both.topic_config().segment_ms, both.topic_config()["segment.jitter.ms"]) == (5, 3)
    for key in ("difference", "before", "after"):
        c = load_config(env={}, overrides={f"log.message.timestamp.{key}.max.ms": "1000"})
        assert c.topic_config()[f"message.timestamp.{key}.max.ms"] == 1000
    # replace() derives again: a synonym set later still gives the value, the key itself wins
    assert c.replace(log_retention_hours=1)["log.retention.ms"] == 3_600_000
    assert c.replace(log_retention_hours=1, log_retention_ms=7)["log.retention.ms"] == 7


def test_listener_parsing() -> None:
    e = parse_listener("PLAINTEXT://[::1]:19092")
    assert (e.host, e.port, e.security_protocol) == ("::1", 19092, "PLAINTEXT")
    internal = parse_listener("INTERNAL://0.0.0.0:1", protocol_map={"INTERNAL": "SASL_PLAINTEXT"})
    assert (internal.name, internal.security_protocol) == ("INTERNAL", "SASL_PLAINTEXT")
    with pytest.raises(ConfigError, match="no security protocol defined for listener INTERNAL"):
        parse_listener("INTERNAL://0.0.0.0:1")  # Kafka's default map names only the protocols
    c = default_config(listeners="PLAINTEXT://127.0.0.1:1", advertised_listeners="PLAINTEXT://example:2")
    assert c.advertised_listeners[0].host == "example"


@pytest.mark.parametrize("host", ["0.0.0.0", "[::]"])
def test_advertised_listeners_refuse_a_wildcard_host(host: str) -> None:
    """Kafka's rule: a client given 0.0.0.0 in Metadata cannot connect to it."""
    with pytest.raises(ConfigError) as info:
        load_config(env={}, overrides={"listeners": "PLAINTEXT://:1", "advertised.listeners": f"PLAINTEXT://{host}:1"})
    assert str(info.value) == (
        f"invalid value for 'advertised.listeners': 'PLAINTEXT://{host}:1': advertised.listeners cannot use "
        f"the nonroutable meta-address {host.strip('[]')}. Use a routable IP address."
    )


def test_an_empty_host_binds_every_interface_and_advertises_the_host_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "getfqdn", lambda *_: "broker1.example.com")
    c = default_config(listeners="PLAINTEXT://:1", advertised_listeners="PLAINTEXT://:2")
    assert c.listeners[0].host == "0.0.0.0"
    assert (c.advertised_listeners[0].host, c.advertised_listeners[0].port) == ("broker1.example.com", 2)


def test_replace_validates() -> None:
    c = default_config()
    assert c.replace(num_partitions=4)["num.partitions"] == 4
    with pytest.raises(ConfigError):
        c.replace(num_partitions=-1)


@pytest.mark.parametrize("value", ["", " ", ","])
def test_log_dirs_must_name_a_directory(value: str) -> None:
    with pytest.raises(ConfigError, match="at least one log directory must be defined"):
        load_config(None, overrides={"log.dirs": value})


@pytest.mark.parametrize(("value", "named"), [("a,a", "'a'"), ("a,./a", "'./a' (the same as 'a')")])
def test_log_dirs_must_not_repeat_a_directory(value: str, named: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, overrides={"log.dirs": value})
    assert str(info.value) == f"invalid value for 'log.dirs': duplicate log directory {named}"


def test_segment_delete_delay_says_it_has_no_effect() -> None:
    """docs/storage.md says the engine does not use it (files are unlinked at once, readers keep
    their pinned descriptors); the reference must not promise a delay."""
    from odradek.config import BROKER_KEYS

    [key] = [k for k in BROKER_KEYS if k.name == "log.segment.delete.delay.ms"]
    assert "no effect" in key.doc and "pinned descriptor" in key.doc


#: Kafka's topic configs (LogConfig) odradek keeps without effect, each with a value Kafka takes
#: and one it refuses
_KAFKA_ONLY_TOPIC_CONFIGS = {
    "leader.replication.throttled.replicas": ("0:1,1:2", "1"),
    "follower.replication.throttled.replicas": ("*", "0:1,*"),
    "message.downconversion.enable": ("false", "no"),
    "message.format.version": ("2.8", "2.9"),
    "remote.log.delete.on.disable": ("true", "yes"),
}


@pytest.mark.parametrize(("name", "values"), _KAFKA_ONLY_TOPIC_CONFIGS.items())
def test_kafkas_topic_configs_without_effect_are_accepted_and_validated(name: str, values: tuple[str, str]) -> None:
    """kafka-reassign-partitions sets the throttles, MirrorMaker 2 copies every topic config:
    refusing them as unknown failed those requests whole. They are kept with Kafka's validation,
    and their documentation says they do nothing."""
    from odradek.config import TOPIC_ONLY_KEYS

    c = default_config()
    good, bad = values
    assert name in c.topic_config({name: good}).overrides
    with pytest.raises(InvalidConfig, match=name.replace(".", r"\.")):
        c.topic_config({name: bad})
    [key] = [k for k in TOPIC_ONLY_KEYS if k.name == name]
    if name.endswith(".replication.throttled.replicas"):
        assert "KIP-73" in key.doc  # in force: odradek.broker.replication_quota
    elif name == "remote.log.delete.on.disable":
        assert "KIP-950" in key.doc  # in force: odradek.broker.remote_log_manager
    else:
        assert "no effect" in key.doc or "only false" in key.doc


def test_tiered_storage_is_refused_while_the_broker_has_it_off() -> None:
    c = default_config()
    assert c.topic_config()["remote.storage.enable"] is False
    assert c.topic_config()["local.retention.ms"] == -2
    assert c.topic_config()["message.format.version"] == "3.0-IV1"
    with pytest.raises(InvalidConfig, match=r"remote\.log\.storage\.system\.enable=false"):
        c.topic_config({"remote.storage.enable": "true"})
    with pytest.raises(InvalidConfig, match="remote.storage.enable"):
        c.topic_config({"remote.storage.enable": "maybe"})
    assert c.topic_config({"message.format.version": "0.10.0-IV1"})["message.format.version"] == "0.10.0-IV1"
    assert c.topic_config({"message.format.version": "2.8.1"})["message.format.version"] == "2.8.1"


def test_tiered_topic_configs_with_tiered_storage_on() -> None:
    """KIP-405's topic keys: -2 takes retention.ms/bytes; a compacted topic cannot be tiered."""
    c = default_config(remote_log_storage_system_enable=True)
    tiered = c.topic_config({"remote.storage.enable": "true", "retention.ms": "5000", "retention.bytes": "900"})
    assert tiered.remote_storage_enable
    assert (tiered.local_retention_ms, tiered.local_retention_bytes) == (5000, 900)
    own = c.topic_config({"remote.storage.enable": "true", "local.retention.ms": "10", "local.retention.bytes": "0"})
    assert (own.local_retention_ms, own.local_retention_bytes) == (10, 0)
    for key in ("local.retention.ms", "local.retention.bytes"):
        with pytest.raises(InvalidConfig, match=key.replace(".", r"\.")):
            c.topic_config({key: "-3"})
    assert c.topic_config({"remote.log.copy.disable": "true"})["remote.log.copy.disable"] is True
    with pytest.raises(InvalidConfig, match=r"remote\.log\.copy\.disable"):
        c.topic_config({"remote.log.copy.disable": "1"})
    for policy in ("compact", "compact,delete"):
        with pytest.raises(InvalidConfig, match="only supports topics with cleanup.policy=delete"):
            TopicConfig.build(c, {"remote.storage.enable": "true", "cleanup.policy": policy})


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        ({"retention.ms": "5000", "local.retention.ms": "-1"},
         "Invalid value -1 for configuration local.retention.ms: Value must not be -1 as retention.ms value is set "
         "as 5000."),
        ({"retention.bytes": "900", "local.retention.bytes": "901"},
         "Invalid value 901 for configuration local.retention.bytes: Value must not be more than retention.bytes "
         "property value: 900"),
        ({"remote.log.copy.disable": "true", "local.retention.bytes": "0"},
         "When `remote.log.copy.disable` is set to true, the `local.retention.bytes` and `retention.bytes` must be "
         "set to the identical value"),
        ({"remote.log.copy.disable": "true", "local.retention.ms": "10"},
         "the `local.retention.ms` and `retention.ms`"),
    ],
)  # fmt: skip
def test_a_tiered_topics_local_retention_is_checked_as_kafka_checks_it(overrides: dict[str, str], error: str) -> None:
    """LogConfig's rules for a topic with remote.storage.enable=true; the same configs on a
    topic that is not tiered are accepted (Kafka checks them only for a tiered topic)."""
    c = default_config(remote_log_storage_system_enable=True)
    with pytest.raises(InvalidConfig, match=re.escape(error)):
        TopicConfig.build(c, {"remote.storage.enable": "true", **overrides})
    TopicConfig.build(c, overrides)


def test_a_tiered_topics_accepted_local_retention() -> None:
    c = default_config(remote_log_storage_system_enable=True)
    for overrides in (
        {"retention.ms": "-1", "local.retention.ms": "-1"},  # both unlimited
        {"retention.bytes": "900", "local.retention.bytes": "900"},
        {"remote.log.copy.disable": "true", "retention.bytes": "900", "local.retention.bytes": "900"},
        {"remote.log.copy.disable": "true"},  # -2: retention.ms/bytes themselves
        {"cleanup.policy": ""},  # Kafka takes an empty list
    ):
        assert TopicConfig.build(c, {"remote.storage.enable": "true", **overrides}).remote_storage_enable, overrides


async def test_a_retention_bytes_below_minus_one_means_no_limit_as_in_kafka(tmp_path: Path) -> None:
    """Kafka's retention.bytes has no lower bound, and UnifiedLog (like the segment engine) takes
    any negative value for "no limit": -5 from a Kafka tool must not be INVALID_CONFIG."""
    from storage_helpers import append, batch, log_of, open_storage

    assert default_config().topic_config({"retention.bytes": "-5"}).retention_bytes == -5
    assert default_config(log_retention_bytes=-2).topic_config().retention_bytes == -2
    storage = await open_storage(tmp_path, log_segment_bytes=250)
    log = log_of(storage, segment_bytes=250, retention_bytes=-5, retention_ms=-1)
    for _ in range(10):
        append(log, batch(2))
    segments = len(log.segments)
    await storage.run_retention()
    assert segments > 3 and len(log.segments) == segments and log.log_start_offset == 0
    await storage.close()


def test_the_migration_policy_ignores_case() -> None:
    """Kafka's ``group.consumer.migration.policy`` is a case-insensitive string."""
    from odradek.broker.group import GroupCoordinator, InMemoryOffsetsLog

    config = load_config(env={}, overrides={"group.consumer.migration.policy": "Upgrade"})
    assert GroupCoordinator(InMemoryOffsetsLog(), config).consumer.migration_policy == "upgrade"
