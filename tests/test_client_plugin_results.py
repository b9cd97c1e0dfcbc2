"""What the client does with a partitioner's or an assignor's result that breaks the contract:
it fails at once with an error naming the plugin and the bad value, instead of hanging until
``delivery.timeout.ms`` or giving a consumer nothing without a word."""

from __future__ import annotations

import textwrap
import types
from collections.abc import Callable
from pathlib import Path

import pytest
import trio
from client_fakes import FakeBroker

from odradek.client.aio import AsyncProducer
from odradek.hookspecs import hookimpl
from odradek.manager import PluginError, Plugins, build_plugin_manager


def _plugins(*extra: object) -> Plugins:
    return Plugins(
        build_plugin_manager(
            entry_points_enabled=False,
            extra=["odradek.plugins.compress.plugin", "odradek.default_partitioners", *extra],
        )
    )


def _partitioner_plugin(name: str, result: Callable[[int], object]) -> types.ModuleType:
    class Fixed:
        def partition(self, topic: str, key: bytes | None, value: bytes | None, num_partitions: int) -> object:
            return result(num_partitions)

        def on_new_batch(self, topic: str, previous_partition: int, num_partitions: int) -> None:
            return None

    Fixed.name = name  # type: ignore[attr-defined]
    module = types.ModuleType(f"{name}_partitioner")
    module.odradek_register_partitioners = hookimpl(lambda: [Fixed])  # type: ignore[attr-defined]
    return module


@pytest.mark.parametrize(
    ("result", "shown"),
    [
        (lambda n: n + 3, r"returned partition 7 .* 4 partition\(s\).* 0\.\.3"),
        (lambda n: -1, r"returned partition -1 "),
        (lambda n: "1", r"returned partition '1' \(str, not an int\)"),
        (lambda n: 1.0, r"returned partition 1\.0 \(float, not an int\)"),
        (lambda n: True, r"returned partition True \(bool, not an int\)"),
        (lambda n: None, r"returned partition None \(NoneType, not an int\)"),
    ],
)
async def test_an_invalid_partitioner_result_fails_the_send_at_once(
    autojump_clock: trio.testing.MockClock, result: Callable[[int], object], shown: str
) -> None:
    broker = FakeBroker({"t": 4})
    plugins = _plugins(_partitioner_plugin("bad", result))
    config = {"bootstrap.servers": "fake:9092", "partitioner": "bad", "linger.ms": 0}
    async with AsyncProducer(config, plugins=plugins, connector=broker.connector()) as producer:
        await producer.partitions_for("t")
        start = trio.current_time()
        with pytest.raises(PluginError, match=rf"partitioner 'bad' from plugin 'bad_partitioner' {shown}") as info:
            await producer.send("t", b"x")
        assert trio.current_time() - start < 1  # no wait for delivery.timeout.ms
        assert "topic 't'" in str(info.value)
        assert not producer.accumulator.incomplete()  # nothing was enqueued


async def test_an_int_subclass_in_range_is_accepted(autojump_clock: trio.testing.MockClock) -> None:
    class Two(int):
        pass

    broker = FakeBroker({"t": 4})
    plugins = _plugins(_partitioner_plugin("subclass", lambda n: Two(2)))
    config = {"bootstrap.servers": "fake:9092", "partitioner": "subclass", "linger.ms": 0}
    async with AsyncProducer(config, plugins=plugins, connector=broker.connector()) as producer:
        metadata = await (await producer.send("t", b"x"))
        assert metadata.partition == 2 and type(metadata.partition) is int


def _temp_distribution(root: Path, monkeypatch: pytest.MonkeyPatch, dist: str, entry: str, source: str) -> None:
    """An installed distribution ``dist`` made of one module ``entry``'s plugin code, with an
    ``odradek`` entry point ``entry``: a *.dist-info directory on sys.path for this test only."""
    (root / f"{entry}.py").write_text(textwrap.dedent(source))
    info = root / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[odradek]\n{entry} = {entry}\n")
    monkeypatch.syspath_prepend(str(root))


async def test_the_error_names_the_partitioners_distribution(
    autojump_clock: trio.testing.MockClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = """
        from odradek.hookspecs import hookimpl

        class OffByOne:
            name = "off-by-one"

            def partition(self, topic, key, value, num_partitions):
                return num_partitions

            def on_new_batch(self, topic, previous_partition, num_partitions):
                pass

        @hookimpl
        def odradek_register_partitioners():
            return [OffByOne]
    """
    _temp_distribution(tmp_path, monkeypatch, "odr-off-by-one", "odr_off_by_one", source)
    broker = FakeBroker({"t": 2})
    config = {"bootstrap.servers": "fake:9092", "partitioner": "off-by-one"}
    async with AsyncProducer(config, plugins=_plugins("odr_off_by_one"), connector=broker.connector()) as producer:
        with pytest.raises(PluginError, match="plugin 'odr_off_by_one' \\(distribution 'odr-off-by-one'\\)"):
            await producer.send("t", b"x")
