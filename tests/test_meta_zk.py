"""meta_zk against a real ZooKeeper: the MetadataStore conformance suite, plugin wiring, faults."""

from __future__ import annotations

import functools
import shutil
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from kazoo.client import KazooClient
from kazoo.exceptions import SessionMovedError, UnknownSessionError

from odradek.config import load_config
from odradek.interfaces import MetadataCompacted, MetadataStore, Put, SessionState, WatchEvent
from odradek.manager import Plugins, build_plugin_manager
from odradek.plugins.meta_zk.mirror import SubtreeMirror
from odradek.plugins.meta_zk.multi import ensure_parents
from odradek.plugins.meta_zk.store import ZooKeeperMetadataStore, split_connect
from odradek.sessions import MetadataUnavailable
from odradek.testing import ZooKeeperServer, servers, start_zookeeper, unique_chroot
from odradek.testing.metadata import (
    MetadataStoreConformance,
    await_state,
    before_crash,
    close_iterator,
    next_event,
)
from odradek.testing.servers import free_port


class TestZooKeeperConformance(MetadataStoreConformance):
    watch_coalesces = True

    @pytest.fixture
    def metadata_store_factory(self, zookeeper_server: ZooKeeperServer) -> Callable[[], MetadataStore]:
        connect = zookeeper_server.connect_string + unique_chroot("conformance")
        return lambda: ZooKeeperMetadataStore(connect)


def test_plugin_registers_zookeeper_and_config_keys(zookeeper_server: ZooKeeperServer) -> None:
    plugins = Plugins(build_plugin_manager(entry_points_enabled=False, extra=["odradek.plugins.meta_zk.plugin"]))
    config = load_config(
        env={},
        plugins=plugins,
        overrides={"metadata": "zookeeper", "zookeeper.connect": zookeeper_server.connect_string + "/cfg"},
    )
    assert config["zookeeper.session.timeout.ms"] == 18000
    assert config["zookeeper.connection.timeout.ms"] == 18000
    store = plugins.metadata(config["metadata"]).create(config)
    assert isinstance(store, ZooKeeperMetadataStore) and isinstance(store, MetadataStore)
    assert (store.hosts, store.chroot) == (zookeeper_server.connect_string, "/cfg")


def test_split_connect() -> None:
    assert split_connect("a:1,b:2/odradek/prod/") == ("a:1,b:2", "/odradek/prod")
    assert split_connect("a:1") == ("a:1", "")


@pytest.mark.parametrize("error", [UnknownSessionError, SessionMovedError])
async def test_a_read_the_server_refused_for_the_session_is_retried(
    zookeeper_server: ZooKeeperServer, error: type[Exception]
) -> None:
    """A restarted server (or one reached while the session is being expired) answers a request
    with UNKNOWN_SESSION or SESSION_MOVED: nothing was applied, so a read is retried once the
    session settles, as after a connection loss, instead of failing a watch or a listing."""
    store = ZooKeeperMetadataStore(zookeeper_server.connect_string + unique_chroot("refused"))
    await store.open(6000)
    try:
        calls: list[int] = []

        def refused_once() -> str:
            calls.append(1)
            if len(calls) == 1:
                raise error()
            return "read"

        assert await store._read(refused_once) == "read" and len(calls) == 2
    finally:
        await store.close()


async def test_open_fails_clearly_without_server() -> None:
    store = ZooKeeperMetadataStore(f"127.0.0.1:{free_port()}", connection_timeout_ms=300)
    with pytest.raises(MetadataUnavailable, match="no ZooKeeper answered"):
        await store.open(2000)


async def test_expired_session_is_lost_and_its_ephemerals_vanish(zookeeper_server: ZooKeeperServer) -> None:
    """Expire the session from a second client with the same id/password (as Kafka's tests do):
    the store reports LOST, then CONNECTED with a new session; others see its ephemerals gone."""
    connect = zookeeper_server.connect_string + unique_chroot("expiry")
    store, observer = ZooKeeperMetadataStore(connect), ZooKeeperMetadataStore(connect)
    await store.open(4000)
    await observer.open(4000)
    try:
        states = store.session_states()
        seen: list[SessionState] = []
        await await_state(states, SessionState.CONNECTED, seen)
        epoch = await store.register_broker(1, b"b1")
        await store.create("/live/x", b"1", ephemeral=True)
        client_id = store.client_id
        assert client_id is not None

        def expire() -> None:
            twin = KazooClient(hosts=zookeeper_server.connect_string, client_id=client_id)
            twin.start(timeout=10)
            twin.stop()
            twin.close()

        await trio.to_thread.run_sync(expire)
        assert await observer.get("/live/x") is None
        assert await observer.get("/brokers/ids/1") is None
        await await_state(states, SessionState.LOST, seen)
        await await_state(states, SessionState.CONNECTED, seen)
        assert store.client_id is not None and store.client_id[0] != client_id[0]
        assert await store.register_broker(1, b"b1") > epoch
        await close_iterator(states)
    finally:
        await store.close()
        await observer.close()


async def test_server_crash_suspends_then_session_and_watch_resume(tmp_path: Path) -> None:
    """Kill the server: SUSPENDED; restart it within the session timeout: CONNECTED with the same
    session (ephemerals kept), and a watch opened before the crash reports changes made after."""
    with start_zookeeper(tmp_path / "zk") as zk:
        # The server is listed twice. A ZooKeeper client (kazoo, like the Java client) gives each
        # connect attempt the session timeout divided by the number of hosts. An attempt that
        # reaches the restarting server before it serves, and that a loaded machine leaves
        # unanswered, can then use up the whole session with one host: the session expires and
        # is replaced (seen once in CI with 8 s). With two entries an attempt takes at most half
        # of it, and the next one, to a server that now serves, resumes the session.
        twice = f"{zk.connect_string},{zk.connect_string}/c"
        store, observer = ZooKeeperMetadataStore(twice), ZooKeeperMetadataStore(zk.connect_string + "/c")
        await store.open(20000)
        try:
            states, seen, watch = await before_crash(store)
            session = store.client_id
            await trio.to_thread.run_sync(zk.kill)
            await await_state(states, SessionState.SUSPENDED, seen)
            await trio.to_thread.run_sync(zk.start)
            await await_state(states, SessionState.CONNECTED, seen, timeout_s=60)
            assert store.client_id == session
            await observer.open(8000)
            got = await observer.get("/live/x")
            assert got is not None and got.value == b"1"
            await observer.put("/keys/after", b"2")
            second = await next_event(watch)
            assert (second.key, second.value) == ("/keys/after", b"2")
            await close_iterator(watch)
            await close_iterator(states)
        finally:
            await store.close()
            await observer.close()


async def test_server_restarted_empty_ends_the_refused_session(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A server restarted with an empty data dir refuses to resume a session that saw a newer zxid
    (kazoo retried that for ever: SUSPENDED for good). After a session timeout the store asks the
    server for its zxid in a session of its own, finds it behind, says so in one WARNING and
    starts a new session: LOST, then CONNECTED, on a store without the old keys. A watch opened
    before sees the old keys go (the broker then checks the cluster id)."""
    with start_zookeeper(tmp_path / "zk") as zk:
        store = ZooKeeperMetadataStore(zk.connect_string + "/c")
        await store.open(2000)
        try:
            states, seen, watch = await before_crash(store)
            session = store.client_id
            assert session is not None
            await trio.to_thread.run_sync(zk.kill)
            shutil.rmtree(zk.data_dir)
            zk.data_dir.mkdir()
            await trio.to_thread.run_sync(zk.start)
            await await_state(states, SessionState.LOST, seen, timeout_s=30)
            await await_state(states, SessionState.CONNECTED, seen)
            assert SessionState.SUSPENDED in seen
            assert store.client_id is not None and store.client_id[0] != session[0]
            assert await store.get("/keys/before") is None
            gone = await next_event(watch)
            assert (gone.key, gone.value) == ("/keys/before", None)
            await close_iterator(watch)
            await close_iterator(states)
        finally:
            await store.close()
    warned = [r.getMessage() for r in caplog.records if r.name == "odradek.plugins.meta_zk.store"]
    assert len(warned) == 1 and "restarted with an empty data dir" in warned[0], warned


def test_missing_zookeeper_fails_naming_the_package(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(servers, "ZOOKEEPER_JAR", tmp_path / "absent.jar")
    with pytest.raises(pytest.fail.Exception, match="Debian package 'zookeeper'"), start_zookeeper(tmp_path):
        pass


async def test_watch_without_cached_snapshot(zookeeper_server: ZooKeeperServer) -> None:
    """A watch from a revision this store did not list can start only when nothing was deleted
    since (ZooKeeper keeps no history of deletions): otherwise MetadataCompacted."""
    connect = zookeeper_server.connect_string + unique_chroot("uncached")
    lister, watcher = ZooKeeperMetadataStore(connect), ZooKeeperMetadataStore(connect)
    await lister.open(5000)
    await watcher.open(5000)
    try:
        await lister.put("/w/a", b"1")
        await lister.put("/w/b", b"1")
        _, revision = await lister.list("/w/")
        await lister.put("/w/a", b"2")  # an update: recoverable from the current state
        watch = watcher.watch("/w/", after_revision=revision)
        event = await next_event(watch)
        assert (event.key, event.value) == ("/w/a", b"2")
        await close_iterator(watch)
        await lister.delete("/w/b")  # a deletion: not recoverable
        watch = watcher.watch("/w/", after_revision=revision)
        with pytest.raises(MetadataCompacted), trio.fail_after(10):
            await watch.__anext__()
        await close_iterator(watch)
    finally:
        await lister.close()
        await watcher.close()


async def test_watch_starts_from_a_cached_list_of_an_ancestor(zookeeper_server: ZooKeeperServer) -> None:
    store = ZooKeeperMetadataStore(zookeeper_server.connect_string + unique_chroot("ancestor"))
    await store.open(5000)
    try:
        await store.put("/w/a", b"1")
        await store.put("/other/x", b"1")
        _, revision = await store.list("/")
        await store.delete("/w/a")  # known to be a deletion only through the cached snapshot
        watch = store.watch("/w/", after_revision=revision)
        event = await next_event(watch)
        assert (event.key, event.value) == ("/w/a", None) and event.revision > revision
        await close_iterator(watch)
    finally:
        await store.close()


@asynccontextmanager
async def two_sessions(
    zookeeper_server: ZooKeeperServer, chroot: str
) -> AsyncIterator[tuple[ZooKeeperMetadataStore, ZooKeeperMetadataStore]]:
    """Two open stores (two ZooKeeper sessions) on one fresh chroot, closed afterwards."""
    connect = zookeeper_server.connect_string + unique_chroot(chroot)
    first, second = ZooKeeperMetadataStore(connect), ZooKeeperMetadataStore(connect)
    await first.open(5000)
    await second.open(5000)
    try:
        yield first, second
    finally:
        await first.close()
        await second.close()


class _CountingReads:
    """Counts the znode reads a kazoo client sends (``get`` and ``get_children``, sync or async)."""

    def __init__(self, client: KazooClient) -> None:
        self.count = 0
        for name in ("get_async", "get_children_async"):
            real = getattr(client, name)

            def counted(*args: object, _real: Callable[..., object] = real, **kwargs: object) -> object:
                self.count += 1
                return _real(*args, **kwargs)

            setattr(client, name, counted)


async def test_a_watch_rereads_what_changed_not_the_whole_tree(zookeeper_server: ZooKeeperServer) -> None:
    """A change under a watched tree of 400 keys costs the watch a few znode reads, not one per
    znode: re-reading the whole tree per change made topic creation on ZooKeeper quadratic (200
    topics took over two minutes)."""
    async with two_sessions(zookeeper_server, "reread") as (writer, watcher):
        for t in range(100):
            await writer.txn([], [Put(f"/t/{t}", b"a"), Put(f"/t/{t}/p/0/state", b"s"), Put(f"/t/{t}/cfg", b"c")])
        _, revision = await watcher.list("/")
        watch = watcher.watch("/", after_revision=revision)
        await writer.put("/t/5/p/0/state", b"s2")
        event = await next_event(watch)  # the first refresh walks the tree once
        assert (event.key, event.value) == ("/t/5/p/0/state", b"s2")
        assert watcher._client is not None
        reads = _CountingReads(watcher._client)
        await writer.put("/t/7/p/0/state", b"s3")
        event = await next_event(watch)
        assert (event.key, event.value) == ("/t/7/p/0/state", b"s3")
        await writer.txn([], [Put("/t/100", b"a"), Put("/t/100/p/0/state", b"s")])
        events = [await next_event(watch), await next_event(watch)]
        assert sorted((e.key, e.value) for e in events) == [("/t/100", b"a"), ("/t/100/p/0/state", b"s")]
        await writer.delete("/t/3/cfg")
        event = await next_event(watch)
        assert (event.key, event.value) == ("/t/3/cfg", None)
        # each change re-reads its znodes, their parents and the new children: ~2 reads a znode
        assert reads.count < 40, f"{reads.count} znode reads for 4 changes under a tree of ~400 znodes"
        await close_iterator(watch)


class _AppliedWatch:
    """A watch's events applied in order to the listing it started from, checking that each is
    as new as the one before and that only keys it knows are deleted."""

    def __init__(self, items: dict[str, Any], revision: int) -> None:
        self.state = {k: v.value for k, v in items.items()}
        self.revision = revision

    async def follow(self, watch: AsyncIterator[WatchEvent]) -> None:
        async for event in watch:
            assert event.revision >= self.revision, f"{event!r} is older than {self.revision}"
            self.revision = event.revision
            if event.value is None:
                assert event.key in self.state, f"deletion of {event.key!r}, never reported as a key"
                del self.state[event.key]
            else:
                self.state[event.key] = event.value

    async def ends_equal_to_a_listing(self, store: MetadataStore, prefix: str, timeout_s: float) -> None:
        final, _ = await store.list(prefix)
        expected = {k: v.value for k, v in final.items()}
        with trio.move_on_after(timeout_s):
            while self.state != expected:
                await trio.sleep(0.05)
        assert self.state == expected


async def test_a_watch_under_concurrent_writers_ends_equal_to_a_listing(zookeeper_server: ZooKeeperServer) -> None:
    """Writers creating, updating and deleting nested keys (whole subtrees too) while a watch
    follows: the watch's events, applied in order, end equal to a listing of the store, each
    event newer than or as new as the one before, and no deletion of a key never reported."""
    connect = zookeeper_server.connect_string + unique_chroot("churn")
    writers = [ZooKeeperMetadataStore(connect) for _ in range(3)]
    watcher = ZooKeeperMetadataStore(connect)
    for s in (*writers, watcher):
        await s.open(5000)
    try:
        await writers[0].put("/c/seed", b"0")
        items, revision = await watcher.list("/c/")
        applied = _AppliedWatch(items, revision)
        watch = watcher.watch("/c/", after_revision=revision)

        async def churn(n: int, store: ZooKeeperMetadataStore) -> None:
            for i in range(120):
                key = f"/c/{i % 7}/{(i * (n + 3)) % 5}"
                if i % 11 == 10:
                    for k in (await store.list(f"/c/{i % 7}/"))[0]:
                        await store.delete(k)  # a whole subtree goes, its parents with it
                    await store.delete(f"/c/{i % 7}")
                elif i % 5 == 4:
                    await store.delete(key)
                else:
                    await store.put(key, f"{n}-{i}".encode())
                    await store.put(f"/c/{i % 7}", f"parent {n}-{i}".encode())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(applied.follow, watch)
            async with trio.open_nursery() as writing:
                for n, store in enumerate(writers):
                    writing.start_soon(churn, n, store)
            await applied.ends_equal_to_a_listing(watcher, "/c/", 10)
            nursery.cancel_scope.cancel()
        await close_iterator(watch)
    finally:
        for s in (*writers, watcher):
            await s.close()


async def test_a_watch_starts_from_a_whole_tree_listing_after_many_smaller_ones(
    zookeeper_server: ZooKeeperServer,
) -> None:
    """A broker lists the whole tree, then each topic's subtree, then watches the whole tree from
    the first listing's revision. With more topics than the snapshot cache held, the small
    listings evicted the whole tree's, so the watch raised MetadataCompacted; the broker re-read
    everything, and while topics kept being deleted it did so again and again (deleting 1,000
    topics timed out). The newest whole-tree listing is kept."""
    store = ZooKeeperMetadataStore(zookeeper_server.connect_string + unique_chroot("evict"))
    await store.open(5000)
    try:
        for t in range(40):
            await store.put(f"/brokers/topics/t{t}", b"a")
        _, revision = await store.list("/")
        for t in range(40):
            await store.list(f"/brokers/topics/t{t}/")
        await store.delete("/brokers/topics/t3")  # known to be a deletion only through the cached listing
        watch = store.watch("/", after_revision=revision)
        event = await next_event(watch)
        assert (event.key, event.value) == ("/brokers/topics/t3", None)
        await close_iterator(watch)
    finally:
        await store.close()


async def test_a_listing_under_a_writer_that_never_stops_is_one_instant(zookeeper_server: ZooKeeperServer) -> None:
    """A listing of a large tree finishes while another session writes without pause, and each
    listing is one instant: two keys always written together in one transaction are listed with
    the same value. Confirming the whole walk by re-reading every znode retried for as long as
    the tree kept moving (19 s for a controller's listing while topics were being deleted)."""
    async with two_sessions(zookeeper_server, "churnlist") as (writer, reader):
        for i in range(200):
            await writer.txn([], [Put(f"/p/static/{i}/a", b"s"), Put(f"/p/static/{i}/b", b"s")])
        listings: list[dict[str, bytes]] = []
        async with trio.open_nursery() as nursery:

            async def write_forever() -> None:
                i = 0
                while True:
                    i += 1
                    value = str(i).encode()
                    await writer.txn([], [Put("/p/x/a", value), Put("/p/y/z/b", value)])

            nursery.start_soon(write_forever)
            for _ in range(5):
                with trio.fail_after(60):
                    items, _ = await reader.list("/p/")
                listings.append({k: v.value for k, v in items.items()})
            nursery.cancel_scope.cancel()
        for listed in listings:
            assert len(listed) == 402
            assert listed["/p/x/a"] == listed["/p/y/z/b"], listed
        assert len({listed["/p/x/a"] for listed in listings}) > 1  # the writer ran during the listings


def test_a_connection_drop_in_the_middle_of_a_refresh_walks_the_subtree_again(tmp_path: Path) -> None:
    """kazoo drops every watch when its connection drops (and tells each watcher with an event
    that has no path), even when it then resumes the same session. The server is restarted just
    before a refresh's barrier, and keys change once the watcher is back: the refresh must walk
    the subtree again (the znodes it read before carry no watch any more), not fail on the
    path-less event (it raised TypeError) nor return the mirror without those changes."""
    with start_zookeeper(tmp_path / "zk") as zk:
        hosts = f"{zk.connect_string},{zk.connect_string}"  # see test_server_crash_suspends_...
        writer, watcher = KazooClient(hosts=hosts, timeout=20), KazooClient(hosts=hosts, timeout=20)
        writer.start(timeout=30)
        watcher.start(timeout=30)
        try:
            writer.create("/m/a", b"1", makepath=True)
            writer.create("/m/b", b"1")
            fired = threading.Event()
            mirror = SubtreeMirror("/m", fired.set)
            mirror.refresh(watcher)
            mirror.take_changes()
            real_exists = watcher.exists

            def restart_then_exists(path: str, watch: Callable[..., object] | None = None) -> object:
                del watcher.exists  # only this barrier
                session = watcher.client_id
                zk.kill()
                zk.start()
                deadline = time.monotonic() + 60
                while not watcher.connected and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert watcher.client_id == session, "the session must resume (not a new session)"
                writer.set("/m/a", b"2")  # /m/a was read with a watch before the drop
                writer.create("/m/c", b"1")
                return real_exists(path, watch=watch)

            writer.set("/m/b", b"2")
            assert fired.wait(10)
            watcher.exists = restart_then_exists  # type: ignore[method-assign]
            mirror.refresh(watcher)
            changes = {(e.key, e.value) for e in mirror.take_changes()}
            assert changes == {("/m/a", b"2"), ("/m/b", b"2"), ("/m/c", b"1")}
            fired.clear()
            writer.set("/m/a", b"3")  # and the watches are armed again
            assert fired.wait(10)
            mirror.refresh(watcher)
            assert [(e.key, e.value) for e in mirror.take_changes()] == [("/m/a", b"3")]
        finally:
            for client in (writer, watcher):
                client.stop()
                client.close()


async def test_a_watch_under_writers_server_restarts_and_session_expiry_ends_equal_to_a_listing(
    tmp_path: Path,
) -> None:
    """The concurrent-writers test with faults: the server is restarted (same data dir) twice
    and the watcher's session is expired from another client while writers create, update and
    delete nested keys, whole subtrees and the watched root itself. Applied in order, the
    watch's events end equal to a listing, never go back in revision, and delete only keys
    they reported."""
    with start_zookeeper(tmp_path / "zk") as zk:
        connect = f"{zk.connect_string},{zk.connect_string}/f"  # see test_server_crash_suspends_...
        writers = [ZooKeeperMetadataStore(connect) for _ in range(2)]
        watcher = ZooKeeperMetadataStore(connect)
        for s in (*writers, watcher):
            await s.open(20000)
        try:
            await writers[0].txn([], [Put(f"/c/{i}/{j}", b"seed") for i in range(60) for j in range(5)])
            items, revision = await watcher.list("/c/")
            applied = _AppliedWatch(items, revision)
            watch = watcher.watch("/c/", after_revision=revision)

            async def write(step: Callable[[], Any]) -> None:
                while True:  # the server may be away: a write's outcome is then unknown, do it again
                    try:
                        await step()
                        return
                    except MetadataUnavailable:
                        await trio.sleep(0.1)

            async def churn(n: int, store: ZooKeeperMetadataStore) -> None:
                for i in range(400):
                    key = f"/c/{i % 60}/{(i * (n + 3)) % 5}"
                    if i % 97 == 96:  # the watched root goes with all its keys
                        for k in (await store.list("/c/"))[0]:
                            await write(functools.partial(store.delete, k))
                    elif i % 11 == 10:
                        for k in (await store.list(f"/c/{i % 60}/"))[0]:
                            await write(functools.partial(store.delete, k))
                    elif i % 5 == 4:
                        await write(functools.partial(store.delete, key))
                    else:
                        await write(functools.partial(store.put, key, f"{n}-{i}".encode()))

            def expire(client_id: tuple[int, bytes]) -> None:
                twin = KazooClient(hosts=zk.connect_string, client_id=client_id)
                twin.start(timeout=30)
                twin.stop()
                twin.close()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(applied.follow, watch)
                async with trio.open_nursery() as writing:
                    for n, store in enumerate(writers):
                        writing.start_soon(churn, n, store)
                    for _ in range(2):
                        await trio.sleep(0.5)
                        await trio.to_thread.run_sync(zk.kill)
                        await trio.to_thread.run_sync(zk.start)
                    with trio.fail_after(60):
                        while (client_id := watcher.client_id) is None:  # back in its session
                            await trio.sleep(0.05)
                    await trio.to_thread.run_sync(expire, client_id)
                await applied.ends_equal_to_a_listing(watcher, "/c/", 30)
                nursery.cancel_scope.cancel()
            await close_iterator(watch)
        finally:
            for s in (*writers, watcher):
                await s.close()


def test_parents_pruned_by_another_writer_while_being_made_are_made_again(zookeeper_server: ZooKeeperServer) -> None:
    """ensure_parents makes /top/a, then /top/a/b; another writer's prune_parents can delete the
    still childless /top/a in between (a concurrent delete of a sibling key tidies up). Making
    /top/a/b then fails with NoNodeError: the ancestors are made again instead of the put failing
    with kazoo's NoNodeError (seen once in the fault test under churning writers)."""
    client = KazooClient(hosts=zookeeper_server.connect_string)
    client.start(timeout=30)
    top = unique_chroot("prune")
    try:
        client.create(top, b"", makepath=True)

        class PrunedOnce:
            """The client, but another writer deletes /top/a just before /top/a/b is created."""

            pruned = False

            def exists(self, path: str) -> Any:
                return client.exists(path)

            def create(self, path: str, value: bytes | None) -> str:
                if path == f"{top}/a/b" and not PrunedOnce.pruned:
                    PrunedOnce.pruned = True
                    client.delete(f"{top}/a")
                return str(client.create(path, value))

        ensure_parents(PrunedOnce(), f"{top}/a/b/c", top)  # type: ignore[arg-type]
        assert PrunedOnce.pruned and client.exists(f"{top}/a/b") is not None
    finally:
        client.delete(top, recursive=True)
        client.stop()
        client.close()
