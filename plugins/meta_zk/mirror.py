"""A watched ZooKeeper subtree kept current by re-reading only the znodes whose watches fired.

Why: a watch used to re-read the whole subtree (one ``get`` and ``get_children`` per znode, then
an ``exists`` per znode to confirm) on every change. A broker watches the whole tree, so a cluster
of a few hundred topics spent seconds per change, and a burst of topic creations kept moving the
tree under each walk: 200 topics took over two minutes to create on ZooKeeper, against about a
second on the local store.

How it stays a consistent snapshot without confirming every znode: every znode in the mirror
carries a data watch and a child watch from its last read, and ZooKeeper sends a session its
watch notifications in order with its replies ("a client sees the watch event before it sees the
new data", and notifications and replies are dispatched in order). So after re-reading what
fired, one more read (the *barrier*) is answered only after the notification of every change
applied before it; kazoo hands notifications to its callback thread in that order, so a marker
queued behind them on that thread runs after every one of them. If none arrived by then, no
znode in the mirror changed between its read and the barrier: the mirror equals the subtree at
that instant, what re-reading every stat afterwards (a double collect) would prove. If some did
fire, those znodes are re-read and the barrier taken again. Each round costs what changed, not
the size of the tree.

The first refresh, and the first after the connection dropped (kazoo drops every watch then,
even when it resumes the session, and tells each watcher with a path-less event), walk the whole
subtree the same way. A drop during a refresh whose reads then went on over the new connection
is seen at its next barrier (the path-less events come before the barrier's marker) and the walk
starts over: the znodes read before the drop carry no watch any more. A refresh that fails
half-way (a connection loss) walks it again next time; the changes it had made are kept until
reported.

Everything here except :meth:`SubtreeMirror.watcher` and :meth:`SubtreeMirror.restart` runs in
one worker thread at a time (the store's ``watch`` awaits each refresh).
"""

from __future__ import annotations

import posixpath
import threading
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss
from kazoo.protocol.states import Callback, WatchedEvent, ZnodeStat

from odradek.interfaces import WatchEvent

from .snapshot import Node, Snapshot, deletion_revision, read_pipelined, stat_revision

#: how long the barrier's marker may wait for kazoo's callback thread before the refresh counts
#: as failed (the client was stopped under it: the store's retry takes over)
CALLBACK_FLUSH_TIMEOUT_S = 10.0


class SubtreeMirror:
    """The znodes below ``root`` (and the root), with watches armed on each."""

    def __init__(
        self, root: str, notify: Callable[[], None], watch: Callable[[WatchedEvent], None] | None = None
    ) -> None:
        self.root = root
        self._notify = notify
        #: the callback left on each znode read: :meth:`watcher`, unless the owner dispatches
        #: firings itself (the store's ``list`` shares one callback among its listings, so
        #: kazoo, which keeps each znode's callbacks in a set, holds one however many ran)
        self._watch: Callable[[WatchedEvent], None] = watch or self.watcher
        self.nodes: dict[str, Node] = {}
        #: the cached children of each cached znode (paths), to drop whole subtrees at once
        self._children: dict[str, set[str]] = {}
        self.revision = 0
        #: when the root is missing: the nearest existing ancestor's stat (dates deletions)
        self.anchor: tuple[str, ZnodeStat] | None = None
        #: each path changed since the last :meth:`take_changes`, with its node before then
        self._changed: dict[str, Node | None] = {}
        self._lock = threading.Lock()
        self._fired: set[str] = set()
        self._full = True

    # -- called from kazoo's and trio's threads ------------------------------------------------------
    def watcher(self, event: WatchedEvent) -> None:
        """kazoo's watch callback: note what fired and wake the store's watch.

        An event without a path is kazoo dropping every watch of the client (it does so when the
        connection drops, not only when the session ends, and re-arms none on reconnecting):
        the whole subtree must be walked again. It comes through the same callback thread, so a
        barrier taken after the drop sees it (:meth:`refresh` checks after each barrier)."""
        with self._lock:
            if event.path is None:
                self._full = True
            else:
                self._fired.add(event.path)
        self._notify()

    def restart(self) -> None:
        """Walk the whole subtree at the next refresh (the session changed: watches may be gone)."""
        with self._lock:
            self._full = True
        self._notify()

    # -- the worker thread ---------------------------------------------------------------------------
    def refresh(self, client: KazooClient) -> Snapshot:
        """Bring the mirror to one instant of the subtree; returns it (sharing ``nodes``: read it
        before the next refresh)."""
        try:
            todo: set[str] = set()
            while True:
                with self._lock:
                    full = self._full
                    todo |= self._fired
                    self._full = False
                    self._fired.clear()
                if full:  # (again, if the connection dropped during this refresh)
                    self._forget_all()
                    todo = {self.root}
                if not todo:
                    break
                todo = self._read(client, todo)
                self._barrier(client)
        except BaseException:
            with self._lock:
                self._full = True
            raise
        if self.anchor is not None:
            return Snapshot(self.root, self.nodes, self.revision, self.anchor)
        return Snapshot(self.root, self.nodes, self.revision)

    def take_changes(self) -> list[WatchEvent]:
        """Events for what changed since the last call, ordered by revision; keys are znode paths.

        Same rules as snapshot.diff: a key is a znode with data; several writes between two
        refreshes are one event with the latest value; a deletion is dated by the pzxid of the
        nearest surviving ancestor."""
        changed, self._changed = self._changed, {}
        snap = Snapshot(self.root, self.nodes, self.revision, self.anchor)
        events: list[WatchEvent] = []
        for path, before in changed.items():
            if path == self.root:
                continue
            now = self.nodes.get(path)
            if now is not None and now.data is not None:
                if (
                    before is None
                    or before.data is None
                    or before.stat.mzxid != now.stat.mzxid
                    or (before.stat.czxid != now.stat.czxid)
                ):
                    events.append(WatchEvent(path, now.data, now.stat.version, now.stat.mzxid, now.stat.czxid))
            elif before is not None and before.data is not None:
                revision = deletion_revision(snap, path)
                events.append(WatchEvent(path, None, revision, revision))
        events.sort(key=lambda e: (e.revision, e.key))
        return events

    def _read(self, client: KazooClient, paths: set[str]) -> set[str]:
        """Re-read ``paths`` and walk the children new to the mirror, a level at a time, each
        level pipelined; returns the paths to read again (changed between their two reads)."""
        again: set[str] = set()
        level = sorted(paths)
        while level:
            read = list(read_pipelined(client, level, self._watch))
            level = []
            for path, found in read:
                if found is None:
                    self._drop(path)
                    if path == self.root:
                        again |= self._root_missing(client)
                    continue
                data, stat, children_stat, children = found
                if stat != children_stat:  # changed between the two reads: its watch fired too
                    again.add(path)
                    continue
                self._store(path, Node(data, stat))
                self.revision = max(self.revision, stat_revision(stat))
                listed = {posixpath.join(path, child) for child in children}
                known = self._children.setdefault(path, set())
                for gone in known - listed:
                    self._drop(gone)
                level.extend(sorted(listed - known))
        return again

    def _barrier(self, client: KazooClient) -> None:
        """One read, then a marker through kazoo's callback thread: when it runs, every watch
        notification for a change applied before the read has been handed to :meth:`watcher`."""
        client.exists(self.root)
        flushed = threading.Event()
        client.handler.dispatch_callback(Callback("watch", flushed.set, ()))
        if not flushed.wait(CALLBACK_FLUSH_TIMEOUT_S):
            raise ConnectionLoss("kazoo's callback thread did not run the barrier's marker")

    def _root_missing(self, client: KazooClient) -> set[str]:
        """The root is gone: an exists-watch fires when it appears; the nearest existing
        ancestor's pzxid dates the deletion. The root to read again if it is back already."""
        if client.exists(self.root, watch=self._watch) is not None:
            return {self.root}
        path = self.root
        while path != "/":
            path = posixpath.dirname(path)
            stat = client.exists(path)
            if stat is not None:
                self.anchor = (path, stat)
                self.revision = max(self.revision, stat.pzxid)
                return set()
        raise AssertionError("the ZooKeeper root znode cannot be missing")

    def _store(self, path: str, node: Node) -> None:
        old = self.nodes.get(path)
        self._changed.setdefault(path, old)
        self.nodes[path] = node
        if old is None:
            if path == self.root:
                self.anchor = None
            else:
                self._children.setdefault(posixpath.dirname(path), set()).add(path)

    def _drop(self, path: str) -> None:
        """Forget ``path`` and everything cached below it."""
        stack = [path]
        while stack:
            p = stack.pop()
            stack.extend(self._children.pop(p, ()))
            old = self.nodes.pop(p, None)
            if old is not None:
                self._changed.setdefault(p, old)
        parent = self._children.get(posixpath.dirname(path))
        if parent is not None:
            parent.discard(path)

    def _forget_all(self) -> None:
        """Before a full walk: every cached znode counts as changed until read again."""
        for path, node in self.nodes.items():
            self._changed.setdefault(path, node)
        self.nodes = {}
        self._children = {}
        self.anchor = None
