"""Snapshots of a ZooKeeper subtree at one instant, and the watch events between two of them.

ZooKeeper has no multi-node read, so a walk of a subtree (one ``get`` and ``get_children`` per
node) could mix states from before and after some write; mirror.py makes the walk one instant
(watches on every node read, then a barrier read). A snapshot's revision is the largest zxid
seen (czxid, mzxid and pzxid, which moves when a child is created *or deleted*), so it covers
every change in the subtree up to that instant.

Keys are znodes with data; znodes with null data are parents that only exist because a key lies
below them (Kafka's own layout does the same). They are walked but never reported as keys.

Watch events are the difference between consecutive snapshots (:func:`diff` against a listing,
then what each refresh of the mirror changed). ZooKeeper watches fire once and mean "something
changed": several writes to one key between two re-reads appear as one event with the latest
value (coalescing), but no change is ever missed, since every node read carries a watch. A put's
revision is the key's mzxid; a deletion's is the pzxid of its nearest surviving ancestor, the
first zxid that proves the deletion.

:func:`read_pipelined` blocks (kazoo calls) and runs in a worker thread.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import ZnodeStat

from odradek.interfaces import Versioned, WatchEvent

Watcher = Callable[..., Any]


@dataclass(frozen=True, slots=True)
class Node:
    data: bytes | None  # None: an implicit parent, not a key
    stat: ZnodeStat


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The subtree below ``root`` (absolute znode paths) at one instant."""

    root: str
    nodes: dict[str, Node]  # the root and every descendant; empty when the root does not exist
    revision: int
    #: when the root is missing: the nearest existing ancestor and its stat (to confirm and to date
    #: deletions of the whole subtree)
    anchor: tuple[str, ZnodeStat] | None = None

    def keys(self) -> dict[str, Node]:
        """Nodes strictly below the root that hold data (the store's keys)."""
        return {p: n for p, n in self.nodes.items() if p != self.root and n.data is not None}

    def restricted(self, root: str) -> Snapshot:
        """The part of this snapshot below ``root`` (a descendant of ``self.root``) at the same instant."""
        nodes = {p: n for p, n in self.nodes.items() if p == root or p.startswith(_slash(root))}
        return Snapshot(root, nodes, self.revision, self.anchor if not nodes else None)


def _slash(path: str) -> str:
    return path if path.endswith("/") else path + "/"


def stat_revision(stat: ZnodeStat) -> int:
    return max(stat.czxid, stat.mzxid, stat.pzxid)


def read_pipelined(
    client: KazooClient, paths: list[str], watcher: Watcher | None
) -> Iterator[tuple[str, tuple[bytes | None, ZnodeStat, ZnodeStat, list[str]] | None]]:
    """``get`` and ``get_children`` of every path, all sent before the first answer is awaited
    (one round trip): (path, (data, stat, the children listing's stat, children)), or (path,
    None) for a znode that does not exist. Both reads leave ``watcher`` on the znode."""
    pending = [
        (
            path,
            client.get_async(path, watch=watcher),
            client.get_children_async(path, watch=watcher, include_data=True),
        )
        for path in paths
    ]
    for path, data_result, children_result in pending:
        try:
            data, stat = data_result.get()
            children, children_stat = children_result.get()
        except NoNodeError:
            yield path, None
            continue
        yield path, (data, stat, children_stat, children)


def versioned(node: Node) -> Versioned:
    assert node.data is not None
    return Versioned(node.data, node.stat.version, node.stat.czxid)


def deletion_revision(new: Snapshot, path: str) -> int:
    parent = posixpath.dirname(path)
    while parent == new.root or parent.startswith(_slash(new.root)):
        node = new.nodes.get(parent)
        if node is not None:
            return int(node.stat.pzxid)
        parent = posixpath.dirname(parent)
    return new.revision  # the whole subtree went: the anchor's pzxid


def diff(old: dict[str, Node], new: Snapshot, to_key: Callable[[str], str]) -> list[WatchEvent]:
    """Events turning ``old`` (keys of an earlier snapshot) into ``new``, ordered by revision."""
    events: list[WatchEvent] = []
    current = new.keys()
    for path, node in current.items():
        before = old.get(path)
        if before is None or before.stat.mzxid != node.stat.mzxid or before.stat.czxid != node.stat.czxid:
            assert node.data is not None
            events.append(WatchEvent(to_key(path), node.data, node.stat.version, node.stat.mzxid, node.stat.czxid))
    for path in old.keys() - current.keys():
        revision = deletion_revision(new, path)
        events.append(WatchEvent(to_key(path), None, revision, revision))
    events.sort(key=lambda e: (e.revision, e.key))
    return events


def base_without_history(snap: Snapshot, after_revision: int) -> dict[str, Node] | None:
    """The keys as they were at ``after_revision``, as far as ``snap`` can tell, for a watch whose
    starting snapshot is not cached: keys changed later are left out (they are reported as puts).
    None when a child was created or deleted after ``after_revision`` (a pzxid moved), since the
    deletions cannot be recovered: the watcher must re-list.
    """
    if after_revision <= 0:
        return {}
    if snap.anchor is not None:
        return {} if snap.anchor[1].pzxid <= after_revision else None
    if any(node.stat.pzxid > after_revision for node in snap.nodes.values()):
        return None
    return {p: n for p, n in snap.keys().items() if n.stat.mzxid <= after_revision}
