"""Metadata faults a broker must survive without losing data or answering wrongly.

A metadata store that lost its data (etcd or ZooKeeper restarted with an empty data dir) must
never cost a broker its logs.

At start-up the log dirs' ``meta.properties`` (Kafka's: version, broker.id, cluster.id) must name
the store's cluster id; an empty store is not given a new id over logs of a known cluster. A
running broker that finds its store emptied (a topic missing on a re-read, a new session on an
emptied server, etcd's revisions going back) stops acting on metadata and shuts down with one
CRITICAL line, keeping every log. Every broker's controller id follows elections; a session lost
while registering at start-up is taken over by a new one."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest
import trio
from broker_harness import FAKE_TRANSPORT, batch, create, produce, running_broker
from kazoo.client import KazooClient

from odradek.broker.meta_properties import InconsistentClusterId
from odradek.broker.metadata_cache import MetadataStoreReset
from odradek.broker.server import BrokerServer
from odradek.config import load_config
from odradek.errors import ErrorCode
from odradek.interfaces import TopicPartition
from odradek.manager import Plugins, build_plugin_manager
from odradek.plugins.meta_etcd.store import EtcdMetadataStore
from odradek.sessions import MetadataUnavailable
from odradek.testing.servers import EtcdServer, ZooKeeperServer, start_etcd, start_zookeeper, unique_chroot

TP = TopicPartition("kept", 0)


def _meta(data: Path) -> dict[str, str]:
    lines = (data / "meta.properties").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))


async def test_a_log_dir_that_cannot_take_meta_properties_does_not_stop_the_broker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The first start after an upgrade writes meta.properties into every log dir. A full dir
    (ENOSPC) made that start fail ("storage closed without persisting everything", the cause
    never logged) where the broker had served what it has; now the dir gets one ERROR, no
    half-written temporary file, and the file is written at a later start."""
    data = tmp_path / "data"
    async with running_broker(data) as core:
        await create(core, "kept")
        await produce(core, TP, batch([b"a", b"b"]))
    (data / "meta.properties").unlink()  # as a data dir of the version before meta.properties
    real_fsync = os.fsync

    def full_disk(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith("meta.properties.tmp"):
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full_disk)
    with caplog.at_level(logging.ERROR, logger="odradek.broker.meta_properties"):
        async with running_broker(data) as core:
            assert (await produce(core, TP, batch([b"c"]))).base_offset == 2
    assert not (data / "meta.properties").exists() and not (data / "meta.properties.tmp").exists()
    assert [r.getMessage() for r in caplog.records] == [
        f"{data}: cannot write meta.properties ([Errno 28] No space left on device); it is written at a later start"
    ]
    monkeypatch.setattr(os, "fsync", real_fsync)
    async with running_broker(data) as core:
        assert (await produce(core, TP, batch([b"d"]))).base_offset == 3
    assert _meta(data)["broker.id"] == "0"


async def test_an_emptied_store_is_refused_at_start_up(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as core:
        await create(core, "kept")
        await produce(core, TP, batch([b"x"]))
        cluster_id = core.cluster_id
    assert _meta(tmp_path) == {
        "version": "0",
        "broker.id": str(core.config.broker_id),
        "cluster.id": cluster_id,
        "odradek.log.dirs": str(tmp_path.resolve()),
    }
    (tmp_path / "odradek-metadata.json").unlink()  # the metadata store lost its data
    with pytest.RaisesGroup(
        pytest.RaisesExc(
            InconsistentClusterId, match=f"no cluster id, but the log dirs belong to cluster {cluster_id}"
        ),
        flatten_subgroups=True,
    ):
        async with running_broker(tmp_path):
            pass
    assert (
        not (tmp_path / "odradek-metadata.json").exists()
        or b"/cluster/id" not in (tmp_path / "odradek-metadata.json").read_bytes()
    )
    assert (tmp_path / "kept-0").is_dir()
    # the operator's decision (docs/operations.md): these logs start a new cluster
    (tmp_path / "meta.properties").unlink()
    async with running_broker(tmp_path) as core:
        assert core.cluster_id != cluster_id and _meta(tmp_path)["cluster.id"] == core.cluster_id
        assert (tmp_path / "kept-0").is_dir()


async def test_another_clusters_store_is_refused_naming_both_ids(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as core:
        cluster_id = core.cluster_id
    text = (tmp_path / "meta.properties").read_text().replace(cluster_id, "OtherClusterIdXXXXXXXX")
    (tmp_path / "meta.properties").write_text(text)
    with pytest.RaisesGroup(
        pytest.RaisesExc(InconsistentClusterId, match=f"{cluster_id} .*doesn't match.* OtherClusterIdXXXXXXXX"),
        flatten_subgroups=True,
    ):
        async with running_broker(tmp_path):
            pass


def _server(data: Path, metadata: dict[str, Any]) -> BrokerServer:
    modules = ["compress", "storage_segment", "meta_zk", "meta_etcd"]
    plugins = Plugins(
        build_plugin_manager(
            entry_points_enabled=False,
            extra=[*(f"odradek.plugins.{m}.plugin" for m in modules), FAKE_TRANSPORT],
        )
    )
    overrides = {"log.dirs": str(data), "listeners": "PLAINTEXT://127.0.0.1:0", **metadata}
    return BrokerServer(load_config(env={}, plugins=plugins, overrides=overrides), plugins)


async def _serve_with_one_record(nursery: trio.Nursery, server: BrokerServer) -> Any:
    """Start ``server`` in ``nursery`` and produce one record to a new topic ``kept``; returns
    the broker's core."""
    await nursery.start(server.serve)
    core = server.core
    assert core is not None
    await create(core, "kept")
    await produce(core, TP, batch([b"x"]))
    return core


async def _serve_until_it_stops(server: BrokerServer, emptied: Any) -> None:
    """Serve, produce one record to a new topic, empty the store with ``emptied`` and expect the
    broker to stop by itself with ``MetadataStoreReset``."""
    with pytest.RaisesGroup(pytest.RaisesExc(MetadataStoreReset), flatten_subgroups=True):
        async with trio.open_nursery() as nursery:
            await _serve_with_one_record(nursery, server)
            await emptied()
            with trio.fail_after(30):
                await trio.sleep_forever()  # the broker ends the nursery


def _assert_kept(data: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert (data / "kept-0").is_dir(), "the log was deleted"
    critical = [r.getMessage() for r in caplog.records if r.levelno == logging.CRITICAL]
    assert len(critical) == 1 and "looks empty or reset" in critical[0], critical
    assert "deleting the local log" not in caplog.text


async def test_zookeeper_emptied_under_a_running_broker_keeps_its_logs(
    tmp_path: Path, zookeeper_server: ZooKeeperServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The chroot's whole tree goes (as after a restart with an empty data dir); the next
    re-read of the topic finds it missing and the cluster id gone: no deletion, a shutdown.
    The deletions of the cluster id and of the broker's registration, seen by their watches,
    may stop the broker first: the re-read then finds the store closed."""
    chroot = unique_chroot("wipe")
    server = _server(tmp_path, {"metadata": "zookeeper", "zookeeper.connect": zookeeper_server.connect_string + chroot})
    observer = KazooClient(hosts=zookeeper_server.connect_string)
    await trio.to_thread.run_sync(observer.start)

    async def emptied() -> None:
        await trio.to_thread.run_sync(lambda: observer.delete(chroot, recursive=True))
        assert server.core is not None
        try:
            await server.core.metadata_cache.refresh_topic("kept")  # e.g. a peer said UNKNOWN_TOPIC
        except MetadataUnavailable:
            assert server.core.metadata_cache.halted is not None

    try:
        await _serve_until_it_stops(server, emptied)
    finally:
        await trio.to_thread.run_sync(observer.stop)
    _assert_kept(tmp_path, caplog)


async def test_zookeeper_chroot_deleted_under_an_idle_broker_stops_it(
    tmp_path: Path, zookeeper_server: ZooKeeperServer, caplog: pytest.LogCaptureFixture
) -> None:
    """An operator deletes the cluster's chroot while the broker runs and has no topic to re-read:
    the cluster id and the broker's own registration go with it. Either deletion makes the broker
    check the cluster id, halt with one CRITICAL line and stop (it used to keep running unregistered,
    the store empty, saying nothing)."""
    chroot = unique_chroot("wipe")
    server = _server(tmp_path, {"metadata": "zookeeper", "zookeeper.connect": zookeeper_server.connect_string + chroot})
    observer = KazooClient(hosts=zookeeper_server.connect_string)
    await trio.to_thread.run_sync(observer.start)
    try:
        with pytest.RaisesGroup(pytest.RaisesExc(MetadataStoreReset), flatten_subgroups=True):
            async with trio.open_nursery() as nursery:
                await nursery.start(server.serve)
                await trio.to_thread.run_sync(lambda: observer.delete(chroot, recursive=True))
                with trio.fail_after(30):
                    await trio.sleep_forever()  # the broker ends the nursery
    finally:
        await trio.to_thread.run_sync(observer.stop)
    critical = [r.getMessage() for r in caplog.records if r.levelno == logging.CRITICAL]
    assert len(critical) == 1 and "was deleted" in critical[0] and "looks empty or reset" in critical[0], critical


async def test_a_deleted_registration_is_made_again(
    tmp_path: Path, zookeeper_server: ZooKeeperServer, caplog: pytest.LogCaptureFixture
) -> None:
    """An operator deletes the running broker's ``/brokers/ids/<id>`` (its session lives on). The
    controller sees the broker gone and its partition without a leader; the broker registers
    again (a new broker epoch, one WARNING), so the partition gets its leader back instead of
    staying offline until the broker's next session."""
    chroot = unique_chroot("reg")
    server = _server(tmp_path, {"metadata": "zookeeper", "zookeeper.connect": zookeeper_server.connect_string + chroot})
    observer = KazooClient(hosts=zookeeper_server.connect_string)
    await trio.to_thread.run_sync(observer.start)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve)
            core = server.core
            assert core is not None and server.store is not None
            await create(core, "kept")
            await produce(core, TP, batch([b"x"]))
            epoch = server.broker_epoch
            await trio.to_thread.run_sync(lambda: observer.delete(f"{chroot}/brokers/ids/0"))
            with trio.fail_after(30):
                while server.broker_epoch == epoch or core.metadata_cache.leader_of(TP) != 0:
                    await trio.sleep(0.05)
            registration = await server.store.get("/brokers/ids/0")
            assert registration is not None and registration.create_revision == server.broker_epoch
            assert (await produce(core, TP, batch([b"y"]))).base_offset == 1
            nursery.cancel_scope.cancel()
    finally:
        await trio.to_thread.run_sync(observer.stop)
    warned = [r.getMessage() for r in caplog.records if "registering again" in r.getMessage()]
    assert len(warned) == 1 and "/brokers/ids/0 was deleted" in warned[0], warned
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_etcd_restarted_empty_stops_the_running_broker(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """etcd restarted with an empty data dir: the lease is gone and the revisions start again
    from 1; the broker finds no cluster id in the new session and stops, keeping its logs."""
    with start_etcd(tmp_path / "etcd") as etcd:
        server = _server(
            tmp_path / "data",
            {"metadata": "etcd", "etcd.endpoints": etcd.endpoint, "etcd.lease.ttl.ms": 3000},
        )

        async def emptied() -> None:
            await trio.to_thread.run_sync(etcd.kill)
            shutil.rmtree(etcd.data_dir)
            await trio.to_thread.run_sync(etcd.start)

        await _serve_until_it_stops(server, emptied)
    _assert_kept(tmp_path / "data", caplog)


@pytest.mark.parametrize("kind", ["zookeeper", "etcd"])
async def test_every_broker_follows_the_controller_election(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    """Metadata's controller id (where admin clients send CreateTopics) follows elections on
    every broker, not only on the winner: ZooKeeper and etcd keep the election in /controller."""
    if kind == "zookeeper":
        zk = request.getfixturevalue("zookeeper_server")
        metadata = {"metadata": kind, "zookeeper.connect": zk.connect_string + unique_chroot("ctl")}
    else:
        etcd = request.getfixturevalue("etcd_server")
        metadata = {"metadata": kind, "etcd.endpoints": etcd.endpoint, "etcd.namespace": unique_chroot("ctl")}
    servers = {i: _server(tmp_path / f"b{i}", {**metadata, "broker.id": i}) for i in (1, 2, 3)}
    async with trio.open_nursery() as nursery:
        scopes = {}
        for i, server in servers.items():
            scope = trio.CancelScope()
            scopes[i] = scope

            async def run(server: BrokerServer = server, scope: trio.CancelScope = scope, **kw: Any) -> None:
                with scope:
                    await server.serve(**kw)

            await nursery.start(run)

        def controllers(ids: tuple[int, ...]) -> set[int]:
            return {c.metadata_cache.controller_id for i in ids if (c := servers[i].core) is not None}

        with trio.fail_after(20):
            while controllers((1, 2, 3)) != {1}:
                await trio.sleep(0.05)
        scopes[1].cancel()  # the controller stops; 2 or 3 wins
        with trio.fail_after(20):
            while len(found := controllers((2, 3))) != 1 or found & {-1, 1}:
                await trio.sleep(0.05)
        nursery.cancel_scope.cancel()


async def test_a_lease_lost_while_registering_at_start_up_is_renewed(
    tmp_path: Path, etcd_server: EtcdServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A restarted broker waits for its earlier registration to expire; its own lease is lost
    meanwhile (a long pause) before the keep-alive notices: registering with it is refused
    ("requested lease not found"). The broker takes a new lease and registers in it, as a
    running broker does, instead of exiting with a gRPC traceback."""
    from odradek.broker import server as server_module

    monkeypatch.setattr(server_module, "REGISTRATION_POLL_S", 0.05)
    namespace = unique_chroot("lease")
    earlier = EtcdMetadataStore([etcd_server.endpoint], namespace=namespace)  # the killed process
    await earlier.open(30_000)
    await earlier.register_broker(0, b'{"endpoints": []}')
    metadata = {"metadata": "etcd", "etcd.endpoints": etcd_server.endpoint, "etcd.namespace": namespace}
    server = _server(tmp_path, metadata)
    async with trio.open_nursery() as nursery:
        endpoints: list[Any] = []

        async def run() -> None:
            endpoints.extend(await nursery.start(server.serve))

        nursery.start_soon(run)
        with trio.fail_after(10):
            while server.store is None or not getattr(server.store, "lease_id", 0):
                await trio.sleep(0.01)
        store = server.store
        assert isinstance(store, EtcdMetadataStore)
        lost = store.lease_id
        await trio.to_thread.run_sync(store._client.revoke_lease, lost)  # as if it expired
        await earlier.close()  # the earlier registration goes: the broker registers now
        with trio.fail_after(20):
            while not endpoints:
                await trio.sleep(0.05)
        assert store.lease_id != lost
        registration = await store._get_kv(store._k("/brokers/ids/0"))
        assert registration is not None and registration.lease == store.lease_id
        nursery.cancel_scope.cancel()
    warned = [r.getMessage() for r in caplog.records if "registering broker 0 failed" in r.getMessage()]
    assert warned and "lease" in warned[0] and "\n" not in warned[0]


def _zookeeper_server(data: Path, zk: ZooKeeperServer) -> BrokerServer:
    """A broker on ``zk`` (chroot ``/odradek``) with a 2 s session timeout: fault tests that
    wait out session timeouts stay short."""
    return _server(
        data,
        {
            "metadata": "zookeeper",
            "zookeeper.connect": zk.connect_string + "/odradek",
            "zookeeper.session.timeout.ms": 2000,
        },
    )


async def test_zookeeper_restarted_empty_stops_the_running_broker(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """ZooKeeper restarted with an empty data dir refuses the broker's reconnections (its
    session saw a zxid the new server never had) for ever; the broker finds that out within its
    session timeout, takes a new session, finds no cluster id there and stops, keeping its logs."""
    with start_zookeeper(tmp_path / "zk") as zk:
        server = _zookeeper_server(tmp_path / "data", zk)

        async def emptied() -> None:
            await trio.to_thread.run_sync(zk.kill)
            shutil.rmtree(zk.data_dir)
            zk.data_dir.mkdir()
            await trio.to_thread.run_sync(zk.start)

        await _serve_until_it_stops(server, emptied)
    _assert_kept(tmp_path / "data", caplog)


async def test_zookeeper_paused_past_the_session_timeout_is_not_taken_for_a_reset(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A healthy ZooKeeper frozen (SIGSTOP: a long GC pause, a stalled VM) for three session
    timeouts, then resumed: the store's reset guard asks it for its zxid meanwhile (no server
    answers) and after (it serves every zxid the session saw), so it takes no new session on
    its own account. Whether the session outlived the pause depends on who acts first once
    ZooKeeper runs again (its expiry of the session, or the client's reconnection): either way
    the broker keeps serving, registered again in a new session or still in its own -- no
    CRITICAL, no exit, also after two more session timeouts."""
    with start_zookeeper(tmp_path / "zk") as zk:
        server = _zookeeper_server(tmp_path / "data", zk)
        async with trio.open_nursery() as nursery:
            core = await _serve_with_one_record(nursery, server)
            process = zk.server.process
            assert process is not None
            process.send_signal(signal.SIGSTOP)
            try:
                await trio.sleep(6)
            finally:
                process.send_signal(signal.SIGCONT)
            with trio.fail_after(30):
                while True:
                    if core.metadata_cache.leader_of(TP) == 0:
                        result = await produce(core, TP, batch([b"y"]))
                        if result.error is ErrorCode.NONE:
                            break
                    await trio.sleep(0.05)
            assert result.base_offset == 1
            await trio.sleep(4)  # two session timeouts: a guard that misfired late would show now
            assert (await produce(core, TP, batch([b"z"]))).base_offset == 2
            nursery.cancel_scope.cancel()
    assert not [r for r in caplog.records if r.levelno >= logging.CRITICAL]
    assert "restarted with an empty data dir" not in caplog.text
