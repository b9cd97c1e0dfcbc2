"""The third-party plugin story, end to end, with examples/memory_storage.

That example is its own distribution (``pip install -e examples/memory_storage``, which CI runs)
registering an ``odradek`` entry point. Here it is found through entry points only -- never
imported by path -- put through the same conformance suite as the built-in engine, and selected
by a broker config (``storage = "memory"``) resolved through the plugin manager.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path

import pytest

from odradek import records
from odradek.config import Config, load_config
from odradek.interfaces import LogStorage, StorageFactory, TopicPartition
from odradek.manager import Plugins, build_plugin_manager, load_plugins
from odradek.testing import check_storage

ENTRY_POINT = "memory_storage"
DISTRIBUTION = "odradek-memory-storage"
INSTALL_HINT = "install the example plugin first: .venv/bin/pip install -e examples/memory_storage"


def _memory_factory() -> StorageFactory:
    """The "memory" engine as the plugin manager resolves it from the installed entry point."""
    found = {ep.name: ep for ep in entry_points(group="odradek")}
    if ENTRY_POINT not in found:
        pytest.fail(f"no 'odradek' entry point named {ENTRY_POINT!r}: {INSTALL_HINT}")
    plugins = Plugins(build_plugin_manager(entry_points_enabled=False, extra=[ENTRY_POINT]))
    return plugins.storage("memory")


def _create(config: Config) -> LogStorage:
    storage: LogStorage = _memory_factory().create(config)
    return storage


TestInstalledMemoryStorageConformance = check_storage(_create)


def test_the_example_is_an_installed_distribution_with_an_entry_point() -> None:
    found = {ep.name: ep for ep in entry_points(group="odradek")}
    assert ENTRY_POINT in found, INSTALL_HINT
    ep = found[ENTRY_POINT]
    assert ep.value == "odradek_memory_storage.plugin"
    assert ep.dist is not None and ep.dist.name == DISTRIBUTION


async def test_a_broker_config_selects_the_memory_engine(tmp_path: Path) -> None:
    """What the broker does at start-up: load plugins, load its config, create the engine."""
    config_file = tmp_path / "broker.toml"
    config_file.write_text(f'storage = "memory"\n[log]\ndirs = ["{tmp_path / "data"}"]\n')
    plugins = load_plugins()
    assert "memory_storage" in {info.name for info in plugins.describe()}, INSTALL_HINT
    config = load_config(config_file, env={}, plugins=plugins)
    assert config["storage"] == "memory"
    factory = plugins.storage(config["storage"])
    storage = factory.create(config)
    assert isinstance(storage, LogStorage)
    assert type(storage).__module__.startswith("odradek_memory_storage")
    await storage.open()
    try:
        log = storage.get_or_create_log(TopicPartition("orders", 0), config.topic_config())
        data = bytearray(records.build_batch([(b"k", b"v", [], 1)]))
        info = log.append_as_leader(data, records.validate_batches(data), 0)
        assert (info.first_offset, log.log_end_offset) == (0, 1)
        fetched = log.read(0, 1 << 20)
        assert [r.value for b in records.iter_batches(fetched.to_bytes()) for r in b.records] == [b"v"]
        fetched.release()
    finally:
        await storage.close()
    # the default engine is still there, chosen by name the same way
    assert plugins.storage("segment").name == "segment"
