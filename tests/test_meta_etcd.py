"""meta_etcd against a real etcd: the MetadataStore conformance suite, plugin wiring, faults."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import trio

from odradek.broker.controller import one_line
from odradek.config import load_config
from odradek.interfaces import Delete, MetadataCompacted, MetadataStore, Put, SessionState
from odradek.manager import Plugins, build_plugin_manager
from odradek.plugins.meta_etcd.store import EtcdMetadataStore, etcd3, parse_endpoint
from odradek.sessions import MetadataSessionLost, MetadataUnavailable
from odradek.testing import EtcdServer, servers, start_etcd, unique_chroot
from odradek.testing.metadata import (
    MetadataStoreConformance,
    await_state,
    before_crash,
    close_iterator,
    next_event,
)
from odradek.testing.servers import free_port


class TestEtcdConformance(MetadataStoreConformance):
    @pytest.fixture
    def metadata_store_factory(self, etcd_server: EtcdServer) -> Callable[[], MetadataStore]:
        namespace = unique_chroot("conformance")
        return lambda: EtcdMetadataStore([etcd_server.endpoint], namespace=namespace)


def _observer(server: EtcdServer) -> Any:
    host, port = parse_endpoint(server.endpoint)
    return etcd3.client(host=host, port=port, timeout=5)


def test_plugin_registers_etcd_and_config_keys(etcd_server: EtcdServer) -> None:
    plugins = Plugins(build_plugin_manager(entry_points_enabled=False, extra=["odradek.plugins.meta_etcd.plugin"]))
    config = load_config(
        env={},
        plugins=plugins,
        overrides={"metadata": "etcd", "etcd.endpoints": etcd_server.endpoint, "etcd.namespace": "/cfg"},
    )
    assert config["etcd.lease.ttl.ms"] == 18000
    store = plugins.metadata(config["metadata"]).create(config)
    assert isinstance(store, EtcdMetadataStore) and isinstance(store, MetadataStore)
    assert store.endpoints == [parse_endpoint(etcd_server.endpoint)] and store.namespace == "/cfg"


def test_parse_endpoint() -> None:
    assert parse_endpoint("http://10.0.0.1:2379") == ("10.0.0.1", 2379)
    assert parse_endpoint("etcd:1234") == ("etcd", 1234)
    with pytest.raises(ValueError, match="TLS"):
        parse_endpoint("https://etcd:2379")


async def test_open_fails_clearly_without_server() -> None:
    store = EtcdMetadataStore([f"http://127.0.0.1:{free_port()}"], request_timeout_ms=300)
    with pytest.raises(MetadataUnavailable, match="no etcd endpoint granted a lease"):
        await store.open(2000)


async def test_txn_writing_a_key_twice_is_refused(etcd_server: EtcdServer) -> None:
    store = EtcdMetadataStore([etcd_server.endpoint], namespace=unique_chroot("dup"))
    await store.open(5000)
    try:
        with pytest.raises(ValueError, match="each key once"):
            await store.txn([], [Delete("/a"), Put("/a", b"1")])
    finally:
        await store.close()


async def test_revoked_lease_is_lost_and_its_ephemerals_vanish(etcd_server: EtcdServer) -> None:
    """Revoke the session's lease from another client: others see the ephemerals gone at once;
    the store reports LOST, then CONNECTED on a new lease, and re-registers with a new epoch."""
    store = EtcdMetadataStore([etcd_server.endpoint], namespace=unique_chroot("revoke"))
    await store.open(1500)
    observer = _observer(etcd_server)
    try:
        states = store.session_states()
        seen: list[SessionState] = []
        await await_state(states, SessionState.CONNECTED, seen)
        epoch = await store.register_broker(1, b"b1")
        await store.create("/live/x", b"1", ephemeral=True)
        old_lease = store.lease_id
        await trio.to_thread.run_sync(observer.revoke_lease, old_lease)
        assert await trio.to_thread.run_sync(observer.get, store.namespace + "/live/x") == (None, None)
        await await_state(states, SessionState.LOST, seen)
        await await_state(states, SessionState.CONNECTED, seen)
        assert store.lease_id != old_lease
        assert await store.register_broker(1, b"b1") > epoch
        await close_iterator(states)
    finally:
        observer.close()
        await store.close()


async def test_server_crash_suspends_loses_lease_and_recovers(tmp_path: Path) -> None:
    """Kill etcd: SUSPENDED, and LOST once a whole TTL passed without a refresh (another broker
    may hold our registration by then). Restart it: a new lease, CONNECTED; the old ephemerals
    are gone for others, and a watch opened before the crash resumes without a gap."""
    with start_etcd(tmp_path / "etcd") as server:
        store = EtcdMetadataStore([server.endpoint], request_timeout_ms=1000)
        await store.open(1000)
        try:
            states, seen, watch = await before_crash(store)
            await trio.to_thread.run_sync(server.kill)
            await await_state(states, SessionState.SUSPENDED, seen)
            await await_state(states, SessionState.LOST, seen)
            await trio.to_thread.run_sync(server.start)
            await await_state(states, SessionState.CONNECTED, seen)
            observer = _observer(server)
            try:
                assert await trio.to_thread.run_sync(observer.get, "/live/x") == (None, None)
                await trio.to_thread.run_sync(observer.put, "/keys/after", b"2")
            finally:
                observer.close()
            second = await next_event(watch)
            assert (second.key, second.value) == ("/keys/after", b"2")
            await close_iterator(watch)
            await close_iterator(states)
        finally:
            await store.close()


def test_missing_etcd_fails_naming_the_package(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(servers.shutil, "which", lambda name: None)
    monkeypatch.setattr(servers, "ETCD_BINARY", tmp_path / "absent")
    with pytest.raises(pytest.fail.Exception, match="Debian package 'etcd-server'"), start_etcd(tmp_path):
        pass


async def test_watch_from_compacted_revision_raises_compacted(tmp_path: Path) -> None:
    """A private server, since compaction is cluster-wide."""
    with start_etcd(tmp_path / "etcd") as server:
        store = EtcdMetadataStore([server.endpoint])
        await store.open(5000)
        try:
            await store.put("/c/a", b"1")
            _, old = await store.list("/c/")
            await store.put("/c/a", b"2")
            await store.put("/c/a", b"2b")
            _, now = await store.list("/c/")
            observer = _observer(server)
            try:
                await trio.to_thread.run_sync(lambda: observer.compact(now, physical=True))
            finally:
                observer.close()
            watch = store.watch("/c/", after_revision=old)
            with pytest.raises(MetadataCompacted), trio.fail_after(10):
                await watch.__anext__()
            await close_iterator(watch)
            watch = store.watch("/c/", after_revision=now)  # from the compaction point on: fine
            await store.put("/c/a", b"3")
            event = await next_event(watch)
            assert event.value == b"3"
            await close_iterator(watch)
        finally:
            await store.close()


async def test_a_write_with_a_lost_lease_is_the_session_lost_in_one_line(etcd_server: EtcdServer) -> None:
    """etcd's "requested lease not found" is the session lost (LOST, then a new lease), raised as
    one readable line, not gRPC's multi-line repr; the controller logs errors on one line too."""
    store = EtcdMetadataStore([etcd_server.endpoint], namespace=unique_chroot("lostlease"))
    await store.open(30_000)
    try:
        states = store.session_states()
        seen: list[SessionState] = []
        await await_state(states, SessionState.CONNECTED, seen)
        lost = store.lease_id
        await trio.to_thread.run_sync(store._client.revoke_lease, lost)  # the keep-alive has not noticed
        with pytest.raises(MetadataSessionLost, match="lease not found") as caught:
            await store.create("/live/x", b"1", ephemeral=True)
        line = one_line(caught.value)
        assert "\n" not in line and line.startswith("MetadataSessionLost: etcd lease")
        await await_state(states, SessionState.LOST, seen)
        await await_state(states, SessionState.CONNECTED, seen)
        assert store.lease_id != lost
        await store.create("/live/x", b"1", ephemeral=True)
        await close_iterator(states)
    finally:
        await store.close()


def test_answers_of_concurrent_requests_may_come_back_below_each_other() -> None:
    """Requests run side by side in worker threads and finish in any order: an answer at
    revision 32 arriving after one at 33 is normal when it was sent before 33 was seen. Only an
    answer below the largest revision seen before its request was sent means etcd went back
    (its data lost): the session is LOST then, and not before."""
    store = EtcdMetadataStore(["127.0.0.1:1"], namespace="/x")
    header = lambda revision: SimpleNamespace(revision=revision, cluster_id=7)  # noqa: E731
    store._states.set(SessionState.CONNECTED)  # as after open()
    store._observe(header(33), 0)
    store._observe(header(32), 0)  # sent before 33 was seen
    assert store._states.state is not SessionState.LOST
    store._observe(header(34), 33)
    assert store._states.state is not SessionState.LOST
    store._observe(header(31), 34)  # sent after 34 was seen: etcd lost revisions
    assert store._states.state is SessionState.LOST


async def test_many_concurrent_requests_keep_the_session(etcd_server: EtcdServer) -> None:
    """Reads and writes racing each other (as a broker's watch, controller and requests do)
    never look like a reset etcd: the session stays CONNECTED throughout."""
    store = EtcdMetadataStore([etcd_server.endpoint], namespace=unique_chroot("concurrent"))
    await store.open(30_000)
    try:
        states = store.session_states()
        seen: list[SessionState] = []
        await await_state(states, SessionState.CONNECTED, seen)

        async def writer(i: int) -> None:
            for n in range(15):
                await store.put(f"/c/{i}", b"%d" % n)

        async def reader() -> None:
            for _ in range(15):
                await store.list("/c")

        async with trio.open_nursery() as nursery:
            for i in range(8):
                nursery.start_soon(writer, i)
                nursery.start_soon(reader)
        assert store._states.state is SessionState.CONNECTED, seen
        await close_iterator(states)
    finally:
        await store.close()
