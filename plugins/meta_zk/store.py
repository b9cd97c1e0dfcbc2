"""``MetadataStore`` on ZooKeeper through kazoo (``metadata = "zookeeper"``).

Mapping (see docs/cluster.md): a key is a znode under the connect string's chroot; ``version`` is
the znode's ``stat.version`` and ``create_revision`` its ``czxid`` (the broker epoch of
``/brokers/ids/<id>``); ephemerals are ephemeral znodes of this store's session; an election
``name`` is the ephemeral ``/<name>`` plus the counter ``/<name>_epoch``, both written in one
multi, and a leader's fence checks the counter's version (Kafka's ``/controller`` and
``/controller_epoch``). Parents of keys are created as null-data znodes and are not keys
(snapshot.py); multi-key transactions are translated in multi.py.

kazoo runs its own threads. Every blocking kazoo call runs in a trio worker thread
(``trio.to_thread.run_sync``, abandoned on cancellation); kazoo's session listener and watch
callbacks never block: they only schedule a wake-up in the trio run (``TrioToken.run_sync_soon``).
Reads survive a connection loss (retried after the next session change); a write whose connection
drops raises ``MetadataUnavailable`` (its outcome is unknown: re-read and decide).

A ZooKeeper restarted with an empty data dir (or replaced) refuses to resume a session that saw a
newer zxid than it has, and kazoo retries that for ever: the session stays SUSPENDED, the broker
acts on nothing and says nothing. A guard task (:meth:`ZooKeeperMetadataStore._guard_reset`) asks
an ensemble that kept this session away for a whole session timeout for its newest zxid through a
session of its own; one behind what this session saw means the ensemble lost its data, and the
store starts a new session (LOST, then CONNECTED), in which the broker finds out whether the
ensemble still holds its cluster (``MetadataCache.check_cluster_id``), as after an etcd reset.
"""

from __future__ import annotations

import functools
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, TypeVar

import trio
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SessionExpiredError,
    SessionMovedError,
    UnknownSessionError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import WatchedEvent
from kazoo.retry import KazooRetry

from odradek.coordination import broker_key, check_key, check_prefix, election_keys, increment_counter
from odradek.interfaces import (
    ABSENT,
    ANY,
    Absent,
    AnyVersion,
    Check,
    Delete,
    Expect,
    Leadership,
    MetadataCompacted,
    MetadataConflict,
    Put,
    SessionState,
    Versioned,
    WatchEvent,
)
from odradek.sessions import MetadataUnavailable, SessionStateFeed, ThreadWakeup

from . import multi
from .mirror import SubtreeMirror
from .snapshot import Node, Snapshot, base_without_history, diff, versioned

log = logging.getLogger(__name__)
T = TypeVar("T")

#: list() snapshots kept so that a watch from a list's revision knows what was deleted since.
SNAPSHOT_CACHE = 32
#: Errors meaning "no answer from the server right now". A server that restarted, or that the
#: client reached while its session was being expired, answers a request with UNKNOWN_SESSION (or
#: SESSION_MOVED after a reconnect elsewhere): the request was not applied, and the session's end
#: reaches the client next, so these are the same "not now" as an expired session.
_UNAVAILABLE = (
    ConnectionLoss,
    SessionExpiredError,
    UnknownSessionError,
    SessionMovedError,
    ConnectionClosedError,
    KazooTimeoutError,
)
_STATES = {KazooState.CONNECTED: SessionState.CONNECTED, KazooState.SUSPENDED: SessionState.SUSPENDED}


def served_zxid(hosts: str, timeout_s: float) -> int | None:
    """The newest zxid the ensemble at ``hosts`` serves, asked in a session of its own (it saw no
    zxid, so no server refuses it; ``sync`` brings the server it reaches up to the leader's
    state first); None when no server answers within ``timeout_s``. Blocking: a worker thread's."""
    probe = KazooClient(
        hosts=hosts, timeout=timeout_s, connection_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=0.5)
    )
    try:
        probe.start(timeout_s)
    except KazooTimeoutError:
        return None  # start() stopped and closed the probe
    try:
        probe.sync("/")
        return int(probe.last_zxid)
    except _UNAVAILABLE:
        return None
    finally:
        probe.stop()
        probe.close()


def split_connect(connect: str) -> tuple[str, str]:
    """``host:port[,host:port]/chroot`` -> (hosts, chroot without trailing slash, "" for none)."""
    hosts, slash, chroot = connect.partition("/")
    chroot = ("/" + chroot).rstrip("/") if slash else ""
    return hosts, chroot


class _RestartMirror(ThreadWakeup):
    """Registered for session changes: the mirror walks its whole subtree at the next refresh."""

    def __init__(self, mirror: SubtreeMirror) -> None:
        super().__init__()
        self.mirror = mirror

    def wake(self) -> None:
        self.mirror.restart()


class ZooKeeperMetadataStore:
    """One ZooKeeper session as a ``MetadataStore``."""

    def __init__(
        self,
        connect: str,
        *,
        session_timeout_ms: int = 18000,
        connection_timeout_ms: int = 18000,
        jute_maxbuffer: int = 1048575,
    ) -> None:
        self.hosts, self.chroot = split_connect(connect)
        #: the servers' jute.maxbuffer: a larger request closes the connection (every watch of
        #: the session is reset with it), so a transaction past it is refused before it is sent
        self.jute_maxbuffer = jute_maxbuffer
        self.default_session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms
        self._client: KazooClient | None = None
        self._closed = False
        self._states = SessionStateFeed()
        self._snapshots: OrderedDict[tuple[str, int], Snapshot] = OrderedDict()
        #: the listings under way (replaced, never mutated: kazoo's callback thread reads it)
        self._listings: tuple[SubtreeMirror, ...] = ()
        self._ttl_s = session_timeout_ms / 1000
        self._guard_scope: trio.CancelScope | None = None
        #: held while the guard replaces the session, so ``close`` never runs in the middle of it
        self._session_lock = trio.Lock()

    # -- plumbing --------------------------------------------------------------------------------
    def _path(self, key: str) -> str:
        return self.chroot + check_key(key)

    def _root(self, prefix: str) -> str:
        """The znode a prefix names: list/watch report the keys strictly below it."""
        return (self.chroot + check_prefix(prefix)) or "/"

    def _key(self, path: str) -> str:
        return path[len(self.chroot) :]

    def _visible(self, path: str) -> bool:
        return bool(self.chroot) or not (path == "/zookeeper" or path.startswith("/zookeeper/"))

    @property
    def _top(self) -> str:
        return self.chroot or "/"

    def _live(self) -> KazooClient:
        if self._client is None or self._closed:
            raise MetadataUnavailable("the ZooKeeper metadata session is not open")
        return self._client

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A blocking kazoo call in a worker thread."""
        return await trio.to_thread.run_sync(functools.partial(fn, *args, **kwargs), abandon_on_cancel=True)

    async def _read(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """An idempotent call: retried across connection losses until the store closes."""
        while True:
            self._live()
            try:
                return await self._run(fn, *args, **kwargs)
            except _UNAVAILABLE:
                await self._wait_for_session_change(0.5)

    async def _write(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        self._live()
        try:
            return await self._run(fn, *args, **kwargs)
        except _UNAVAILABLE as exc:
            raise MetadataUnavailable(f"ZooKeeper did not confirm the write: {exc!r}") from exc

    async def _wait_for_session_change(self, timeout_s: float) -> None:
        wakeup = ThreadWakeup()
        self._states.add_wakeup(wakeup)
        try:
            with trio.move_on_after(timeout_s):
                await wakeup.wait()
        finally:
            self._states.remove_wakeup(wakeup)

    @property
    def client_id(self) -> tuple[int, bytes] | None:
        """(session id, password) of the current ZooKeeper session (operators' tools and fault
        tests use it to expire a session from another client, as Kafka's own tests do)."""
        client = self._client
        return None if client is None or client.client_id is None else tuple(client.client_id)

    def _session_id(self) -> int:
        client_id = self._live().client_id
        return int(client_id[0]) if client_id else 0

    # -- session ---------------------------------------------------------------------------------
    async def open(self, session_ttl_ms: int) -> None:
        """Connect and start a session of ``session_ttl_ms`` (<= 0: zookeeper.session.timeout.ms)."""
        if self._client is not None:
            return
        ttl_ms = session_ttl_ms if session_ttl_ms > 0 else self.default_session_timeout_ms
        self._states.bind()
        client = KazooClient(
            hosts=self.hosts,
            timeout=ttl_ms / 1000,
            # reconnect quickly and forever: giving up is the session timeout's job, not ours
            connection_retry=KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_delay=min(1.0, ttl_ms / 3000)),
        )
        client.add_listener(self._on_kazoo_state)
        try:
            await trio.to_thread.run_sync(client.start, self.connection_timeout_ms / 1000)
        except KazooTimeoutError as exc:
            await trio.to_thread.run_sync(client.close)
            raise MetadataUnavailable(
                f"no ZooKeeper answered at {self.hosts} within {self.connection_timeout_ms} ms"
            ) from exc
        self._client = client
        self._ttl_s = ttl_ms / 1000
        if self.chroot:  # the chroot and its ancestors, as implicit parents
            await self._read(multi.ensure_parents, client, self.chroot + "/x", "/")
        self._states.set(SessionState.CONNECTED)
        self._guard_scope = trio.CancelScope()
        trio.lowlevel.spawn_system_task(self._guard_reset, self._guard_scope, name="odradek-zookeeper-reset-guard")

    async def _guard_reset(self, scope: trio.CancelScope) -> None:
        """Start a new session when the ensemble lost its data (see the module docstring).

        A session away for its whole timeout is over on any server that knew it, so asking then
        costs nothing when the ensemble is only unreachable (the probe finds no server either)
        or already back (kazoo resumes or gets the expiry by itself). Asked again every third
        of the timeout while the session stays away. A system task (``open`` gets no nursery):
        it must never raise; ``close`` cancels it.
        """
        wakeup = ThreadWakeup()
        self._states.add_wakeup(wakeup)
        try:
            with scope:
                while True:
                    while self._states.state is SessionState.CONNECTED:
                        await wakeup.wait()
                    with trio.move_on_after(self._ttl_s):
                        while self._states.state is not SessionState.CONNECTED:
                            await wakeup.wait()
                    while self._states.state is not SessionState.CONNECTED:
                        try:
                            if await self._ensemble_was_reset():
                                await self._new_session()
                                break
                        except Exception as exc:  # the ensemble away again: ask at the next turn
                            log.debug("asking ZooKeeper for its zxid failed: %r", exc)
                        with trio.move_on_after(self._ttl_s / 3):
                            await wakeup.wait()
        finally:
            self._states.remove_wakeup(wakeup)

    async def _ensemble_was_reset(self) -> bool:
        """Whether the ensemble answers a new session but serves a zxid below the newest this
        session saw (with one WARNING saying so): it lost what this session saw."""
        client = self._live()
        seen = int(client.last_zxid or 0)
        served = await trio.to_thread.run_sync(served_zxid, self.hosts, self._ttl_s, abandon_on_cancel=True)
        if served is None or served >= seen:
            return False
        log.warning(
            "ZooKeeper at %s serves zxid 0x%x, behind the 0x%x this session saw, and refuses to resume "
            "the session: it was restarted with an empty data dir or replaced; starting a new metadata session",
            self.hosts,
            served,
            seen,
        )
        return True

    async def _new_session(self) -> None:
        """Stop the refused session (kazoo reports LOST and forgets its zxid) and start a new one
        on the same client (reported CONNECTED once a server accepts it)."""
        async with self._session_lock:
            if self._closed:
                return
            client = self._live()
            await trio.to_thread.run_sync(client.stop)
            await trio.to_thread.run_sync(client.start_async)

    def _on_kazoo_state(self, state: str) -> None:
        """kazoo's listener, on kazoo's thread: hand the change to trio and return at once."""
        self._states.set_threadsafe(_STATES.get(state, SessionState.LOST))

    async def session_states(self) -> AsyncIterator[SessionState]:
        async for state in self._states.subscribe():
            yield state

    async def close(self) -> None:
        """Close the session: ZooKeeper deletes its ephemerals before this returns."""
        client = self._client
        if client is None or self._closed:
            return
        self._closed = True
        if self._guard_scope is not None:
            self._guard_scope.cancel()
        with trio.CancelScope(shield=True):
            try:
                async with self._session_lock:
                    await trio.to_thread.run_sync(client.stop)
            finally:
                await trio.to_thread.run_sync(client.close)
                self._states.set(SessionState.LOST)
                self._states.close()

    # -- reads -----------------------------------------------------------------------------------
    async def get(self, key: str) -> Versioned | None:
        path = self._path(key)
        nodes = await self._read(multi.read_nodes, self._live(), [path])
        node = nodes[path]
        return versioned(node) if node is not None and node.data is not None else None

    def _listing_watcher(self, event: WatchedEvent) -> None:
        """The watch callback of every ``list``: hands the firing to the listings under way
        (one callback object, so kazoo keeps one per znode however many listings read it)."""
        for mirror in self._listings:
            mirror.watcher(event)

    def _items(self, snap: Snapshot) -> dict[str, Node]:
        return {p: n for p, n in snap.keys().items() if self._visible(p)}

    async def list(self, prefix: str) -> tuple[dict[str, Versioned], int]:
        """An atomic snapshot of the keys below ``prefix``; its revision is the largest zxid in it."""
        root = self._root(prefix)
        mirror = SubtreeMirror(root, lambda: None, self._listing_watcher)
        self._listings = (*self._listings, mirror)
        try:
            snap = await self._read(mirror.refresh, self._live())
        finally:
            self._listings = tuple(m for m in self._listings if m is not mirror)
        self._remember(snap)
        return {self._key(p): versioned(n) for p, n in self._items(snap).items()}, snap.revision

    # -- writes ----------------------------------------------------------------------------------
    async def txn(self, checks: Sequence[Check], ops: Sequence[Put | Delete]) -> None:
        await self._write(multi.commit, self._live(), checks, ops, self._path, self._top, self.jute_maxbuffer)

    async def create(self, key: str, value: bytes, *, ephemeral: bool = False) -> Versioned:
        path = self._path(key)
        while True:
            client = self._live()
            try:
                _, stat = await self._write(client.create, path, value, ephemeral=ephemeral, include_data=True)
                return Versioned(value, stat.version, stat.czxid)
            except NoNodeError:
                await self._write(multi.ensure_parents, client, path, self._top)
            except NodeExistsError:
                existing = (await self._read(multi.read_nodes, client, [path]))[path]
                if existing is None:
                    continue
                if existing.data is not None:
                    raise MetadataConflict(key) from None
                # an implicit parent sits there: make it the key (a multi pins its version)
                await self.txn([Check(key, ABSENT)], [Put(key, value, ephemeral)])
                created = await self.get(key)
                if created is not None:
                    return created

    async def put(self, key: str, value: bytes, *, expect: Expect = ANY) -> int:
        path = self._path(key)
        if isinstance(expect, Absent):
            return (await self.create(key, value)).version
        client = self._live()
        if isinstance(expect, AnyVersion):
            while True:
                try:
                    stat = await self._write(client.set, path, value)
                    return int(stat.version)
                except NoNodeError:
                    try:
                        return (await self.create(key, value)).version
                    except MetadataConflict:
                        continue  # created meanwhile: set it
        version = await self._write(multi.set_if_version, client, path, value, expect)
        if version is None:
            raise MetadataConflict(key)
        return version

    async def delete(self, key: str, *, expect: Expect = ANY) -> bool:
        path = self._path(key)
        client = self._live()
        while True:
            node = (await self._read(multi.read_nodes, client, [path]))[path]
            if node is None or node.data is None:
                if isinstance(expect, int):
                    raise MetadataConflict(key)
                return False
            if isinstance(expect, Absent) or (isinstance(expect, int) and node.stat.version != expect):
                raise MetadataConflict(key)
            try:
                if node.stat.numChildren:
                    await self.txn([Check(key, node.stat.version)], [Delete(key)])
                else:
                    await self._write(client.delete, path, version=node.stat.version)
                    await self._write(multi.prune_parents, client, path, self._top)
                return True
            except (BadVersionError, NotEmptyError, NoNodeError, MetadataConflict):
                if isinstance(expect, int):
                    raise MetadataConflict(key) from None
                continue  # changed under us: look again

    async def next_id(self, key: str) -> int:
        """Increment the decimal counter at ``key`` (absent = 0) by compare-and-set on its version."""
        return await increment_counter(self, key)

    def _remember(self, snap: Snapshot) -> None:
        """Cache ``snap`` for a watch from its revision, evicting the oldest snapshots beyond
        :data:`SNAPSHOT_CACHE` but never the newest of the whole tree: a broker lists the whole
        tree and then reads each topic's subtree before its watch starts, and with more topics
        than the cache holds those reads evicted the whole tree's snapshot; the watch then found
        no starting point, the broker re-read everything, and while topics kept changing (a
        deletion of many) it did so again and again."""
        self._snapshots[(snap.root, snap.revision)] = snap
        newest_top = max((rev for root, rev in self._snapshots if root == self._top), default=None)
        for key in list(self._snapshots):
            if len(self._snapshots) <= SNAPSHOT_CACHE:
                break
            if key != (self._top, newest_top):
                del self._snapshots[key]

    # -- watches ---------------------------------------------------------------------------------
    def _cached_base(self, root: str, after_revision: int) -> dict[str, Node] | None:
        """The keys at ``after_revision`` from a cached list() of ``root`` or of an ancestor."""
        for (cached_root, revision), snap in reversed(self._snapshots.items()):
            if revision != after_revision:
                continue
            if cached_root == root:
                return self._items(snap)
            if root.startswith(cached_root.rstrip("/") + "/"):
                return self._items(snap.restricted(root))
        return None

    async def watch(self, prefix: str, *, after_revision: int) -> AsyncIterator[WatchEvent]:
        """Changes below ``prefix`` after ``after_revision``, until cancelled or closed.

        A :class:`~.mirror.SubtreeMirror` keeps the subtree with a watch on every znode; each
        wake-up re-reads only the znodes whose watches fired and reports what changed, as of one
        instant (mirror.py says why that holds). Any session change (kazoo drops watches when a
        session ends) makes the next refresh walk the whole subtree again. The starting point is
        the cached ``list`` snapshot at ``after_revision``; without one, the watch can only start
        if nothing was deleted since, else ``MetadataCompacted``.
        """
        root = self._root(prefix)
        wakeup = ThreadWakeup()
        mirror = SubtreeMirror(root, wakeup.wake_threadsafe)
        on_session_change = _RestartMirror(mirror)
        self._states.add_wakeup(on_session_change)
        try:
            base = self._cached_base(root, after_revision)
            snap = await self._read(mirror.refresh, self._live())
            mirror.take_changes()  # the first walk: reported against the base below instead
            if base is None:
                found = base_without_history(snap, after_revision)
                if found is None:
                    raise MetadataCompacted(
                        f"no snapshot of {prefix!r} at revision {after_revision} is cached and children "
                        "changed since: re-list and watch from the new revision"
                    )
                base = {p: n for p, n in found.items() if self._visible(p)}
            events = diff(base, snap, self._key)
            del base, snap
            while True:
                for event in events:
                    if self._visible(self.chroot + event.key):
                        yield event
                await wakeup.wait()
                if self._closed:
                    return
                await self._read(mirror.refresh, self._live())
                events = [
                    WatchEvent(self._key(e.key), e.value, e.version, e.revision, e.create_revision)
                    for e in mirror.take_changes()
                ]
        except MetadataUnavailable:
            if not self._closed:
                raise
        finally:
            self._states.remove_wakeup(on_session_change)

    # -- brokers and elections -------------------------------------------------------------------
    async def register_broker(self, broker_id: int, info: bytes) -> int:
        """Ephemeral ``/brokers/ids/<id>``; the broker epoch is its czxid. Re-registering in this
        session re-creates the znode (a new epoch); a live registration of another session is a
        ``MetadataConflict`` (broker id in use)."""
        key = broker_key(broker_id)
        path = self._path(key)
        while True:
            client = self._live()
            node = (await self._read(multi.read_nodes, client, [path]))[path]
            if node is not None and node.data is not None:
                if node.stat.ephemeralOwner != self._session_id():
                    raise MetadataConflict(key)
                try:
                    await self.txn([Check(key, node.stat.version)], [Delete(key)])
                except MetadataConflict:
                    continue
            try:
                return (await self.create(key, info, ephemeral=True)).create_revision
            except MetadataConflict:
                continue  # someone else was faster: look again who holds it

    async def campaign(self, name: str, value: bytes) -> Leadership:
        """Wait until ``/<name>`` is free, then create it (ephemeral) and bump ``/<name>_epoch``
        in one multi. The fence is a check of the epoch counter's version, which only a new
        leader changes: a deposed leader's fenced writes fail."""
        leader_key, epoch_key = election_keys(name)
        leader_path, epoch_path = self._path(leader_key), self._path(epoch_key)
        wakeup = ThreadWakeup()
        self._states.add_wakeup(wakeup)
        try:
            while True:
                client = self._live()
                nodes = await self._read(multi.read_nodes, client, [leader_path, epoch_path])
                leader, epoch_node = nodes[leader_path], nodes[epoch_path]
                epoch = int(epoch_node.data) if epoch_node is not None and epoch_node.data is not None else 0
                if leader is not None and leader.data is not None:
                    if leader.stat.ephemeralOwner == self._session_id():
                        held = await self._held(name)
                        if held is not None:
                            return held  # this session already leads
                    # wait for the leader's znode to change or go (the watch is set by this read)
                    if await self._read(client.exists, leader_path, watch=wakeup.wake_threadsafe) is not None:
                        await wakeup.wait()
                    continue
                epoch_expect: Expect = epoch_node.stat.version if epoch_node is not None else ABSENT
                try:
                    await self.txn(
                        [Check(leader_key, ABSENT), Check(epoch_key, epoch_expect)],
                        [Put(leader_key, value, ephemeral=True), Put(epoch_key, str(epoch + 1).encode())],
                    )
                except MetadataConflict:
                    continue
                held = await self._held(name)
                if held is not None:
                    return held
                # the new leadership is already gone (the session expired at once): contend again
        finally:
            self._states.remove_wakeup(wakeup)

    async def leader_changes(self, name: str) -> AsyncIterator[tuple[bytes, int] | None]:
        """The leader of ``name`` now and after every change of ``/<name>`` (an exists watch,
        re-armed before each read, and a re-read every second), until closed."""
        leader_key, _ = election_keys(name)
        path = self._path(leader_key)
        wakeup = ThreadWakeup()
        self._states.add_wakeup(wakeup)
        try:
            last: object = object()
            while not self._closed:
                await self._read(self._live().exists, path, watch=wakeup.wake_threadsafe)
                current = await self.leader(name)
                if current != last:
                    last = current
                    yield current
                with trio.move_on_after(1.0):
                    await wakeup.wait()
        finally:
            self._states.remove_wakeup(wakeup)

    async def _held(self, name: str) -> Leadership | None:
        """This session's leadership of ``name`` as it stands, or None if another session leads."""
        leader_key, epoch_key = election_keys(name)
        leader_path, epoch_path = self._path(leader_key), self._path(epoch_key)
        nodes = await self._read(multi.read_nodes, self._live(), [leader_path, epoch_path])
        leader, epoch = nodes[leader_path], nodes[epoch_path]
        if leader is None or epoch is None or epoch.data is None:
            return None
        if leader.stat.ephemeralOwner != self._session_id() or leader.stat.mzxid != epoch.stat.mzxid:
            return None
        return Leadership(name, int(epoch.data), Check(epoch_key, epoch.stat.version))

    async def resign(self, leadership: Leadership) -> None:
        """Delete ``/<name>`` if this leadership still holds (its fence passes); else nothing."""
        leader_key, _ = election_keys(leadership.name)
        try:
            await self.txn([leadership.fence], [Delete(leader_key)])
        except MetadataConflict:
            pass

    async def leader(self, name: str) -> tuple[bytes, int] | None:
        """The leader's value and epoch, read together (both were written by one multi, so the
        leader znode's mzxid equals the epoch counter's; a mismatch means a read across an election)."""
        leader_key, epoch_key = election_keys(name)
        leader_path, epoch_path = self._path(leader_key), self._path(epoch_key)
        for _ in range(50):
            nodes = await self._read(multi.read_nodes, self._live(), [leader_path, epoch_path])
            leader, epoch = nodes[leader_path], nodes[epoch_path]
            if leader is None or leader.data is None:
                return None
            if epoch is None or epoch.data is None:
                continue
            if leader.stat.mzxid == epoch.stat.mzxid:
                return leader.data, int(epoch.data)
        raise MetadataUnavailable(f"election {name!r} keeps changing while being read")
