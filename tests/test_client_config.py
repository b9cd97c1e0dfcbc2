"""Client config: Kafka's property names, typed values, unknown keys refused by name."""

from __future__ import annotations

import pytest

from odradek.client.aio import AsyncConsumer, AsyncProducer
from odradek.client.config import ClientConfig
from odradek.config import ConfigError
from odradek.manager import Plugins, build_plugin_manager

BOOT = {"bootstrap.servers": "127.0.0.1:9092"}


@pytest.fixture(scope="module")
def plugins() -> Plugins:
    return Plugins(
        build_plugin_manager(
            entry_points_enabled=False,
            extra=[
                "odradek.plugins.compress.plugin",
                "odradek.plugins.transport_tcp.plugin",
                "odradek.default_partitioners",
                "odradek.default_assignors",
            ],
        )
    )


def test_defaults_are_javas() -> None:
    c = ClientConfig("producer", BOOT)
    assert (c["acks"], c["linger.ms"], c["batch.size"], c["buffer.memory"]) == ("all", 5, 16384, 33554432)
    assert c["enable.idempotence"] is True and c["max.in.flight.requests.per.connection"] == 5
    c = ClientConfig("consumer", BOOT)
    assert c["isolation.level"] == "read_uncommitted"
    assert c["partition.assignment.strategy"] == ["range", "cooperative-sticky"]
    assert (c["max.poll.records"], c["session.timeout.ms"], c["heartbeat.interval.ms"]) == (500, 45000, 3000)


def test_unknown_key_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="'linger.msec'"):
        ClientConfig("producer", {**BOOT, "linger.msec": 5})
    with pytest.raises(ConfigError, match=r"'group.id'.*consumer setting"):
        ClientConfig("producer", {**BOOT, "group.id": "g"})
    with pytest.raises(ConfigError, match="'acks'.*producer setting"):
        ClientConfig("admin", {**BOOT, "acks": "1"})


def test_strings_are_coerced_and_bad_values_named(plugins: Plugins) -> None:
    c = ClientConfig("producer", {**BOOT, "linger.ms": "20", "enable.idempotence": "false", "acks": 1})
    assert c["linger.ms"] == 20 and c["enable.idempotence"] is False and c["acks"] == "1"
    with pytest.raises(ConfigError, match="'batch.size'"):
        ClientConfig("producer", {**BOOT, "batch.size": "big"})
    with pytest.raises(ConfigError, match="'compression.type'"):  # any codec plugin's name: checked by the producer
        AsyncProducer({**BOOT, "compression.type": "brotli"}, plugins=plugins)
    with pytest.raises(ConfigError, match="'auto.offset.reset'"):
        ClientConfig("consumer", {**BOOT, "auto.offset.reset": "beginning"})


def test_keyword_form_and_bootstrap_parsing() -> None:
    c = ClientConfig("admin", bootstrap_servers="a:1, PLAINTEXT://b:2,[::1]:3")
    assert c.bootstrap_addresses() == [("a", 1), ("b", 2), ("::1", 3)]
    with pytest.raises(ConfigError, match="bootstrap.servers"):
        ClientConfig("admin", {})
    with pytest.raises(ConfigError, match="host:port"):
        ClientConfig("admin", {"bootstrap.servers": "nohostport"}).bootstrap_addresses()


def test_idempotence_conflicts(plugins: Plugins) -> None:
    with pytest.raises(ConfigError, match="enable.idempotence=true needs: acks must be 'all'"):
        AsyncProducer({**BOOT, "enable.idempotence": True, "acks": "1"}, plugins=plugins)
    with pytest.raises(ConfigError, match="max.in.flight"):
        AsyncProducer({**BOOT, "enable.idempotence": True, "max.in.flight.requests.per.connection": 6}, plugins=plugins)
    # like Java: when the user did not ask for idempotence, conflicting settings switch it off
    assert AsyncProducer({**BOOT, "acks": "1"}, plugins=plugins).idempotent is False
    assert AsyncProducer(BOOT, plugins=plugins).idempotent is True


def test_unknown_plugins_and_consumer_rules(plugins: Plugins) -> None:
    with pytest.raises(Exception, match="no partitioner plugin named 'nope'"):
        AsyncProducer({**BOOT, "partitioner": "nope"}, plugins=plugins)
    with pytest.raises(Exception, match="no assignor plugin named 'fair'"):
        AsyncConsumer({**BOOT, "group.id": "g", "partition.assignment.strategy": "fair"}, plugins=plugins)
    with pytest.raises(ConfigError, match="heartbeat.interval.ms"):
        AsyncConsumer({**BOOT, "group.id": "g", "heartbeat.interval.ms": 50000}, plugins=plugins)
    with pytest.raises(ConfigError, match="group.instance.id needs a group.id"):
        AsyncConsumer({**BOOT, "group.instance.id": "i1"}, plugins=plugins)


def test_cooperative_only_when_every_assignor_is(plugins: Plugins) -> None:
    mixed = AsyncConsumer({**BOOT, "group.id": "g"}, plugins=plugins)
    assert mixed.coordinator.protocol == "eager"  # Java: range + cooperative-sticky rebalance eagerly
    coop = AsyncConsumer(
        {**BOOT, "group.id": "g", "partition.assignment.strategy": "cooperative-sticky"}, plugins=plugins
    )
    assert coop.coordinator.protocol == "cooperative"
