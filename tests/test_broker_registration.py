"""A broker restarted within its metadata session timeout (after kill -9) finds its id still
registered by the dead process's session: it waits for that registration to expire before it
starts anything, and a registration that stays (another live broker with the same id) is a
one-line error, with no listener, partition or controlled shutdown run meanwhile."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from broker_harness import FAKE_TRANSPORT

from odradek.broker import server as server_module
from odradek.broker.server import BrokerIdConflict, BrokerServer
from odradek.config import load_config
from odradek.manager import Plugins, build_plugin_manager
from odradek.plugins.meta_zk.store import ZooKeeperMetadataStore
from odradek.testing.servers import ZooKeeperServer, unique_chroot


def _plugins() -> Plugins:
    modules = ["compress", "storage_segment", "meta_zk"]
    return Plugins(
        build_plugin_manager(
            entry_points_enabled=False,
            extra=[*(f"odradek.plugins.{m}.plugin" for m in modules), FAKE_TRANSPORT],
        )
    )


def _server(data: Path, connect: str) -> BrokerServer:
    plugins = _plugins()
    config = load_config(
        env={},
        plugins=plugins,
        overrides={
            "log.dirs": str(data),
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "metadata": "zookeeper",
            "zookeeper.connect": connect,
        },
    )
    return BrokerServer(config, plugins)


async def test_a_restart_waits_for_the_earlier_sessions_registration(
    tmp_path: Path, zookeeper_server: ZooKeeperServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    connect = zookeeper_server.connect_string + unique_chroot("reg")
    earlier = ZooKeeperMetadataStore(connect)  # the killed process's session, still alive
    await earlier.open(30_000)
    await earlier.register_broker(0, b'{"endpoints": []}')
    monkeypatch.setattr(server_module, "REGISTRATION_POLL_S", 0.05)
    server = _server(tmp_path / "data", connect)
    async with trio.open_nursery() as nursery:
        endpoints = []

        async def run() -> None:
            endpoints.extend(await nursery.start(server.serve))

        nursery.start_soon(run)
        await trio.sleep(1.0)
        assert not endpoints and server.core is None  # nothing started while the id is taken
        await earlier.close()  # the session expires: its ephemeral registration goes
        with trio.fail_after(20):
            while not endpoints:
                await trio.sleep(0.05)
        assert server.broker_epoch >= 0
        nursery.cancel_scope.cancel()


async def test_a_registration_that_stays_is_a_one_line_error(
    tmp_path: Path, zookeeper_server: ZooKeeperServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    connect = zookeeper_server.connect_string + unique_chroot("reg")
    other = ZooKeeperMetadataStore(connect)  # another live broker with broker.id 0
    await other.open(30_000)
    await other.register_broker(0, b'{"endpoints": []}')
    monkeypatch.setattr(server_module, "REGISTRATION_WAIT_S", 0.5)
    monkeypatch.setattr(server_module, "REGISTRATION_POLL_S", 0.05)
    try:
        server = _server(tmp_path / "data", connect)
        with pytest.RaisesGroup(pytest.RaisesExc(BrokerIdConflict, match="another broker running with broker.id=0")):
            async with trio.open_nursery() as nursery:
                await nursery.start(server.serve)
        assert server.core is None and not server.endpoints
        assert await other.get("/brokers/ids/0") is not None  # still the other broker's
    finally:
        await other.close()
