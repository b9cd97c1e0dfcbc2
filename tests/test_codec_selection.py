"""``compression.type`` selects codec plugins by name: a third-party codec under a new id (5-7) is
chosen for a producer, a broker or a topic like Kafka's four, and a name no loaded codec has is
refused up front, naming the codecs that are loaded."""

from __future__ import annotations

import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import client_fakes
import pytest
import trio
import trio.testing
from broker_harness import batch, plugins_with, produce
from client_fakes import FakeBroker

from odradek import records
from odradek.broker.api import CreatableTopic, FetchPartition, IsolationLevel
from odradek.broker.server import BrokerServer
from odradek.client.aio import AsyncProducer
from odradek.client.config import ClientConfig
from odradek.config import ConfigError, load_config
from odradek.errors import ErrorCode, UnsupportedCompressionType
from odradek.hookspecs import hookimpl
from odradek.interfaces import Codec, TopicPartition
from odradek.manager import PluginError, Plugins, build_plugin_manager


class XorCodec:
    """A toy codec under id 5 (unused by Kafka): a magic byte, then every byte XORed."""

    id = 5
    name = "xor"

    def compress(self, data: bytes, level: int | None = None) -> bytes:
        return b"\xa5" + bytes(b ^ 0x5A for b in bytes(data))

    def decompress(self, data: bytes | memoryview) -> bytes:
        data = bytes(data)
        if data[:1] != b"\xa5":
            raise ValueError("not xor-framed")
        return bytes(b ^ 0x5A for b in data[1:])


def _codec_plugin(*codecs: Codec) -> types.ModuleType:
    module = types.ModuleType("xor_codec")
    module.odradek_register_codecs = hookimpl(lambda: list(codecs))  # type: ignore[attr-defined]
    return module


_plugins = plugins_with


PLUGINS = _plugins(_codec_plugin(XorCodec()))
CODECS: Mapping[int, Codec] = PLUGINS.codecs()


# -- client ------------------------------------------------------------------------------------


async def test_the_producer_selects_a_codec_plugin_by_name(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[int] = []

    def decode(data: Any) -> records.RecordBatch:  # the fake broker reads batches with our codecs
        seen.append(records.parse_header(data, 0).compression_id)
        return records.decode_batch(data, codecs=CODECS)

    monkeypatch.setattr(client_fakes, "decode_batch", decode)
    broker = FakeBroker({"t": 1})
    config = {"bootstrap.servers": "fake:9092", "compression.type": "xor", "linger.ms": 0}
    async with AsyncProducer(config, plugins=PLUGINS, connector=broker.connector()) as producer:
        await producer.send_and_wait("t", b"over xor " * 10)
    assert seen == [5]
    assert broker.logs[TopicPartition("t", 0)] == [(0, b"over xor " * 10)]


def test_an_unknown_codec_name_is_refused_naming_the_loaded_codecs() -> None:
    ClientConfig("producer", {"bootstrap.servers": "b:9092", "compression.type": "brotli"})  # checked later
    config = {"bootstrap.servers": "b:9092", "compression.type": "brotli"}
    with pytest.raises(ConfigError, match=r"'compression.type': no codec named 'brotli' is loaded.*gzip.*xor"):
        AsyncProducer(config, plugins=PLUGINS, connector=FakeBroker({}).connector())


def test_a_codec_id_outside_the_three_attribute_bits_cannot_be_selected() -> None:
    class Wide(XorCodec):
        id = 8
        name = "wide"

    config = {"bootstrap.servers": "b:9092", "compression.type": "wide"}
    # the plugin manager refuses it when the plugin's codecs are collected, naming the plugin
    with pytest.raises(PluginError, match=r"plugin 'xor_codec' returned .* its id is not an integer from 1 to 7"):
        AsyncProducer(config, plugins=_plugins(_codec_plugin(Wide())), connector=FakeBroker({}).connector())
    # and the records layer, which also takes codecs from elsewhere than plugins, refuses it too
    with pytest.raises(UnsupportedCompressionType, match=r"codec 'wide' has id 8: a codec id must be 1\.\.7"):
        records.codec_named("wide", {8: Wide()})


def test_two_codecs_with_one_name_are_refused() -> None:
    class Other(XorCodec):
        id = 6

    config = {"bootstrap.servers": "b:9092", "compression.type": "xor"}
    with pytest.raises(PluginError, match=r"compression 'xor' is offered twice by plugin 'xor_codec'"):
        AsyncProducer(
            config, plugins=_plugins(_codec_plugin(XorCodec(), Other())), connector=FakeBroker({}).connector()
        )
    # the records layer, which also takes codecs from elsewhere than plugins, refuses it too
    with pytest.raises(UnsupportedCompressionType, match=r"two loaded codecs are named 'xor' \(ids 5 and 6\)"):
        records.codec_named("xor", {5: XorCodec(), 6: Other()})


def test_a_third_party_codec_named_like_a_built_in_one_is_a_conflict() -> None:
    """An id-7 codec called gzip would make compression.type=gzip mean id 7 to the producer
    (or an error) and id 1 to the broker: refused, naming both plugins, and listed by
    `odradek plugins` as a conflict."""

    class FakeGzip(XorCodec):
        id = 7
        name = "gzip"

    plugins = _plugins(_codec_plugin(FakeGzip()))
    both = r"compression 'gzip' is offered by both plugin '\S*compress\S*'.* and plugin 'xor_codec'"
    with pytest.raises(PluginError, match=both):
        plugins.codecs()
    assert any("compression 'gzip' is offered by both" in c for c in plugins.conflicts())


def test_a_kafka_codec_name_needs_its_codec_loaded() -> None:
    """With the built-in compress plugin disabled and no replacement, compression.type=gzip is
    refused when the config loads (every produce would fail with UNSUPPORTED_COMPRESSION_TYPE)."""
    without = Plugins(
        build_plugin_manager(entry_points_enabled=False, extra=["odradek.plugins.storage_segment.plugin"])
    )
    with pytest.raises(ConfigError, match=r"'gzip' is neither producer nor uncompressed, and no codec named 'gzip'"):
        load_config(env={}, plugins=without, overrides={"compression.type": "gzip"})
    assert (
        load_config(env={}, plugins=without, overrides={"compression.type": "producer"})["compression.type"]
        == "producer"
    )


# -- broker and topics -------------------------------------------------------------------------


def test_the_broker_compression_type_accepts_loaded_codec_names_only() -> None:
    assert load_config(env={}, plugins=PLUGINS, overrides={"compression.type": "xor"})["compression.type"] == "xor"
    with pytest.raises(ConfigError, match=r"'compression.type': 'brotli' is neither producer nor uncompressed"):
        load_config(env={}, plugins=PLUGINS, overrides={"compression.type": "brotli"})
    with pytest.raises(ConfigError, match=r"'compression.type': 'xor' is not one of \['producer'"):
        load_config(env={}, overrides={"compression.type": "xor"})  # no plugins: Kafka's names only


async def test_a_topic_compressed_with_a_codec_plugin(tmp_path: Path) -> None:
    plugins = _plugins(_codec_plugin(XorCodec()))
    overrides = {"log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:0"}
    server = BrokerServer(load_config(env={}, plugins=plugins, overrides=overrides), plugins)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        core = server.core
        assert core is not None
        topics = [CreatableTopic("x", 1, 1, configs={"compression.type": "xor"})]
        assert (await core.create_topics(topics, 5000, False))["x"].error == ErrorCode.NONE
        bad = [CreatableTopic("b", 1, 1, configs={"compression.type": "brotli"})]
        result = (await core.create_topics(bad, 5000, False))["b"]
        assert result.error == ErrorCode.INVALID_CONFIG and "brotli" in (result.error_message or "")
        tp = TopicPartition("x", 0)
        gzipped = batch([b"a" * 50, b"b"], compression=records.Compression.GZIP)
        assert (await produce(core, tp, gzipped)).error == ErrorCode.NONE
        fetched = await core.fetch(-1, 0, 0, 1 << 20, IsolationLevel.READ_UNCOMMITTED, [FetchPartition(tp, 0, 1 << 20)])
        assert fetched[tp].records is not None
        data = fetched[tp].records.to_bytes()
        fetched[tp].records.release()
        assert records.parse_header(data, 0).compression_id == 5  # recompressed by the broker
        assert [r.value for r in records.decode_batch(data, codecs=CODECS).records] == [b"a" * 50, b"b"]
        nursery.cancel_scope.cancel()
