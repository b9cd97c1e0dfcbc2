"""``MetadataStore.txn`` on ZooKeeper: checks and writes translated into one multi-op.

ZooKeeper's multi knows create, delete, setData and check(version); it cannot check absence and
fails a create whose parent is missing. The translation therefore reads every involved znode first
and builds the multi against what it saw:

- ``Check(k, version)`` -> ``check(k, version)``; ``Check(k, ABSENT)`` -> ``create(k)`` + ``delete(k)``
  when the znode is missing (fails if it appeared), ``check(k, v)`` of the implicit parent node
  when one sits there (fails if it got data);
- ``Put`` -> ``setData(k, value, read version)`` on an existing znode (keeps its lifetime, as a
  ZooKeeper set on an ephemeral does), else ``create`` (ephemeral if asked), parents made first;
- ``Delete`` -> ``delete(k, read version)``, or ``setData(k, null)`` when the znode has (or will
  have) children: it stays as an implicit parent; a key that does not exist is skipped.

The read versions pin everything the translation assumed, so a concurrent change makes the multi
fail as a whole. ZooKeeper reports a failed multi as exception objects in the results list; which
op failed says little (an implicit version may be the culprit), so the explicit checks are
re-evaluated on fresh reads: one that fails is the ``MetadataConflict``; if all hold, the failure
came from a concurrent change to something the translation assumed, and the whole thing retries.
Runs in a worker thread (kazoo calls block).
"""

from __future__ import annotations

import contextlib
import posixpath
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kazoo.client import KazooClient, TransactionRequest
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
)
from kazoo.protocol.serialization import SetData, Transaction

from odradek.interfaces import Absent, AnyVersion, Check, Delete, Expect, MetadataConflict, Put
from odradek.sessions import MetadataTxnTooLarge

from .snapshot import Node

#: a request's header ahead of its body: xid and type (the length prefix is not counted)
_REQUEST_HEADER_BYTES = 8

#: Failures that mean "the tree moved under the translation": re-read and retry.
RETRYABLE = (BadVersionError, NodeExistsError, NoNodeError, NotEmptyError, RolledBackError, RuntimeInconsistency)
MAX_ATTEMPTS = 50


def read_nodes(client: KazooClient, paths: Sequence[str]) -> dict[str, Node | None]:
    """Every path's data and stat (None when missing), in one pipelined round trip."""
    pending = [(p, client.get_async(p)) for p in dict.fromkeys(paths)]
    out: dict[str, Node | None] = {}
    for path, result in pending:
        try:
            data, stat = result.get()
        except NoNodeError:
            out[path] = None
        else:
            out[path] = Node(data, stat)
    return out


def set_if_version(client: KazooClient, path: str, value: bytes, version: int) -> int | None:
    """Set a key's data if its znode is at ``version``; its new version, or None when the check
    fails (missing, another version, or an implicit parent, which is no key).

    The znode is read and set in one pipelined round trip: ZooKeeper answers a session's
    requests in order, so the read shows the znode just before the set. A versioned set alone
    cannot tell an implicit (null-data) parent from a key; a read first, then the set, cost two
    round trips on every compare-and-set (a leader's ISR change is one). The set can only land
    on an implicit parent whose version equals one a key had at that path before it was removed
    (a stale caller's): it is then put back to null data and the check fails."""
    read = client.get_async(path)
    written = client.set_async(path, value, version=version)
    try:
        before: Node | None = Node(*read.get())
    except NoNodeError:
        before = None
    try:
        stat = written.get()
    except (BadVersionError, NoNodeError):
        return None
    if before is not None and before.data is not None:
        return int(stat.version)
    with contextlib.suppress(BadVersionError, NoNodeError):
        client.set(path, None, version=stat.version)
    return None


def holds(node: Node | None, expect: Expect) -> bool:
    """Whether a check holds for a znode as read (implicit parents count as absent)."""
    if isinstance(expect, AnyVersion):
        return True
    exists = node is not None and node.data is not None
    if isinstance(expect, Absent):
        return not exists
    return exists and node is not None and node.stat.version == expect


def ensure_parents(client: KazooClient, path: str, top: str) -> None:
    """Create the missing ancestors of ``path`` below ``top`` as implicit (null-data) parents.

    An ancestor made here can be pruned by another writer's :func:`prune_parents` before its
    child is made (it has no child yet): the child's creation then fails with NoNodeError, and
    the ancestors are made again. That race once failed a put with kazoo's NoNodeError."""
    parent = posixpath.dirname(path)
    if parent in ("/", top) or len(parent) < len(top) or client.exists(parent) is not None:
        return
    while True:
        ensure_parents(client, parent, top)
        try:
            client.create(parent, None)
            return
        except NodeExistsError:
            return
        except NoNodeError:
            continue  # an ancestor was pruned meanwhile: make it again


def prune_parents(client: KazooClient, path: str, top: str) -> None:
    """Remove implicit parents of ``path`` left without children, up to (not including) ``top``.

    Best effort, after the write it tidies up for has succeeded, so it never raises: a parent that
    meanwhile got data or a child stays (its version or child count no longer matches, so the
    versioned delete fails), and a connection loss just leaves the parent for a later delete.
    """
    parent = posixpath.dirname(path)
    while parent != "/" and parent != top and len(parent) > len(top):
        try:
            data, stat = client.get(parent)
            if data is not None or stat.numChildren:
                return
            client.delete(parent, version=stat.version)
        except KazooException:
            return
        parent = posixpath.dirname(parent)


@dataclass(slots=True)
class _Sim:
    """What the multi will have done to one znode so far (to translate later ops on it)."""

    node: bool  # the znode exists
    key: bool  # ... and holds data (is a key, not an implicit parent)
    version: int
    children: int


def commit(
    client: KazooClient,
    checks: Sequence[Check],
    ops: Sequence[Put | Delete],
    to_path: Callable[[str], str],
    top: str,
    max_bytes: int | None = None,
) -> None:
    """Apply ``ops`` iff every check holds, atomically; ``MetadataConflict`` names the first failing check.
    A multi larger than ``max_bytes`` (the servers' jute.maxbuffer) raises ``MetadataTxnTooLarge``
    before anything is written: the server would close the connection on it."""
    check_paths = [to_path(c.key) for c in checks]
    op_paths = [to_path(op.key) for op in ops]
    last: BaseException | None = None
    for _ in range(MAX_ATTEMPTS):
        nodes = read_nodes(client, check_paths + op_paths)
        for i, (check, path) in enumerate(zip(checks, check_paths, strict=True)):
            if not holds(nodes[path], check.expect):
                raise MetadataConflict(check.key, i)
        tx = _build(client, checks, check_paths, ops, op_paths, nodes)
        if max_bytes is not None:
            _check_size(tx, max_bytes)
        for path in _paths_needing_parents(checks, check_paths, ops, op_paths, nodes):
            ensure_parents(client, path, top)
        results = tx.commit()
        failures = [r for r in results if isinstance(r, Exception)]
        if not failures:
            for op, path in zip(ops, op_paths, strict=True):
                if isinstance(op, Delete):
                    prune_parents(client, path, top)
            return
        last = next((f for f in failures if not isinstance(f, RolledBackError | RuntimeInconsistency)), failures[0])
        if not isinstance(last, RETRYABLE):
            raise last
        # the loop re-reads: a failing explicit check is reported, anything else retries
    raise RuntimeError(f"ZooKeeper transaction kept failing after {MAX_ATTEMPTS} attempts: {last!r}")


def _check_size(tx: TransactionRequest, max_bytes: int) -> None:
    """Refuse a multi whose request (its 8-byte header and body) is past ``max_bytes``."""
    size = len(Transaction(tx.operations).serialize()) + _REQUEST_HEADER_BYTES
    if size > max_bytes:
        raise MetadataTxnTooLarge(
            f"a transaction of {len(tx.operations)} operations is a {size:,}-byte request, past the ZooKeeper "
            f"servers' jute.maxbuffer of {max_bytes:,} (zookeeper.jute.maxbuffer; raise the servers' "
            "jute.maxbuffer and this setting together)"
        )


def _paths_needing_parents(
    checks: Sequence[Check],
    check_paths: Sequence[str],
    ops: Sequence[Put | Delete],
    op_paths: Sequence[str],
    nodes: dict[str, Node | None],
) -> list[str]:
    wanted = [p for c, p in zip(checks, check_paths, strict=True) if isinstance(c.expect, Absent) and nodes[p] is None]
    wanted += [p for op, p in zip(ops, op_paths, strict=True) if isinstance(op, Put) and nodes[p] is None]
    return wanted


def _build(
    client: KazooClient,
    checks: Sequence[Check],
    check_paths: Sequence[str],
    ops: Sequence[Put | Delete],
    op_paths: Sequence[str],
    nodes: dict[str, Node | None],
) -> TransactionRequest:
    tx = client.transaction()
    for check, path in zip(checks, check_paths, strict=True):
        node = nodes[path]
        if isinstance(check.expect, AnyVersion):
            continue
        if isinstance(check.expect, Absent):
            if node is None:
                tx.create(path, b"")
                tx.delete(path)
            else:  # an implicit parent: absent as long as it has no data (its version pins that)
                tx.check(path, node.stat.version)
        else:
            tx.check(path, check.expect)
    sims: dict[str, _Sim] = {}
    # a znode that gets a child later in this multi must survive a Delete as an implicit parent
    future_parents = {
        posixpath.dirname(p) for op, p in zip(ops, op_paths, strict=True) if isinstance(op, Put) and nodes[p] is None
    }
    for op, path in zip(ops, op_paths, strict=True):
        sim = sims.get(path)
        if sim is None:
            node = nodes[path]
            if node is None:
                sim = _Sim(False, False, -1, 0)
            else:
                sim = _Sim(True, node.data is not None, node.stat.version, node.stat.numChildren)
            sims[path] = sim
        if isinstance(op, Put):
            if sim.node:
                tx.set_data(path, op.value, version=sim.version)
                sim.version += 1
            else:
                tx.create(path, op.value, ephemeral=op.ephemeral)
                sim.node, sim.version, sim.children = True, 0, 0
            sim.key = True
        elif sim.key:
            if sim.children or path in future_parents:
                # kazoo's set_data refuses None; the protocol op carries null data fine
                tx.operations.append(SetData(path, None, sim.version))
                sim.version += 1
            else:
                tx.delete(path, version=sim.version)
                sim.node, sim.version = False, -1
            sim.key = False
    return tx
