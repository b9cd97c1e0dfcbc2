"""The embedded metadata store: every ``MetadataStore`` method in-process, persisted to one file.

Single-node odradek needs no ZooKeeper or etcd: this store keeps the keys in a dict and persists
the whole dict to ``<first log dir>/odradek-metadata.json`` after every change (write a temp file,
fsync it, rename it over the old one, fsync the directory), so a crash leaves either the old or the
new state, never a torn one. Metadata changes are rare (topic creation, config changes, broker
start), so rewriting the file per change is cheap (each key's line is encoded once and reused
until it changes) and keeps the format trivially inspectable: JSON, one key per line.

Semantics follow etcd, the richer of the two cluster backends:
- a global ``revision`` increments once per committed change (a txn is one revision);
- a key's ``version`` (the compare-and-set token) is the revision of its last write, so a deleted
  and re-created key never reuses a version (no ABA); ``create_revision`` is the revision that
  created it and serves as an epoch (the broker epoch of a registration);
- ephemerals belong to the session that wrote them and die with it: on ``close`` and, since a
  restarted process is a new session, when the file is loaded again.

Several sessions (store objects) opened on the same file inside one process share one state, as
clients of one ZooKeeper ensemble would: this is what lets elections block and fail over between
sessions. Another *process* opening the same file is refused through an advisory lock, since two
brokers writing one data directory would corrupt it.

Watches replay from an in-memory history of recent changes, so a watcher that read a snapshot at
revision R and watches from R sees every later change exactly once (gap-free). A watcher that falls
further behind than the history keeps gets ``MetadataCompacted`` and re-reads, as with etcd.
History instead of a per-watcher channel means a slow watcher never stalls a writer.
"""

from __future__ import annotations

import base64
import bisect
import contextlib
import fcntl
import itertools
import json
import logging
import os
from collections import deque
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from odradek.errors import KafkaStorageError, OdradekError
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

log = logging.getLogger(__name__)

FILE_NAME = "odradek-metadata.json"
FORMAT_VERSION = 1
#: How many change events watches can replay; older history raises MetadataCompacted.
HISTORY_EVENTS = 10_000
ELECTION_PREFIX = "/elections/"
BROKER_IDS_PREFIX = "/brokers/ids/"


class MetadataFileError(OdradekError):
    """``odradek-metadata.json`` cannot be read: empty, not JSON, or not odradek's format."""


class MetadataStoreClosed(Exception):
    """An operation on a store whose session has been closed."""


def _line(key: str, e: _Entry) -> str:
    """One key's line in the metadata file."""
    doc: dict[str, Any] = {
        "value": base64.b64encode(e.value).decode("ascii"),
        "mod": e.mod_revision,
        "create": e.create_revision,
        **({"ephemeral": True} if e.owner is not None else {}),
    }
    return json.dumps(key) + ": " + json.dumps(doc)


@dataclass(slots=True)
class _Entry:
    value: bytes
    mod_revision: int
    create_revision: int
    owner: int | None  # session id for ephemerals, None for persistent keys


class _SharedState:
    """The state every session on one file shares: keys, revision, history, file and lock."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.keys: dict[str, _Entry] = {}
        self.revision = 0
        self.history: deque[WatchEvent] = deque(maxlen=HISTORY_EVENTS)
        self.oldest_replayable = 1  # watchers may resume from after_revision >= oldest_replayable - 1
        self.write_lock = trio.Lock()
        self.changed = trio.Event()
        self.sessions = 0
        self.next_session = 1
        self._lock_fd: int | None = None
        #: each key's line in the file (see :meth:`serialize`)
        self._lines: dict[str, str] = {}
        #: the keys in order, so ``list`` finds a prefix's keys without scanning every key
        self.sorted_keys: list[str] = []

    # -- file --------------------------------------------------------------------------------
    def acquire(self) -> None:
        """Take the inter-process lock and load the file (ephemerals of dead sessions dropped)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(str(self.path) + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OSError(f"metadata file {self.path} is in use by another process") from None
        self._lock_fd = fd
        try:
            self._load()
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def _load(self) -> None:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return
        try:
            doc = json.loads(raw)
            if not isinstance(doc, dict):
                raise ValueError("not a JSON object")
            if doc.get("format") != FORMAT_VERSION:
                raise ValueError(f"unknown format {doc.get('format')!r}")
            revision = int(doc["revision"])
            keys: dict[str, _Entry] = {}
            dropped = False
            for key, e in doc["keys"].items():
                if e.get("ephemeral"):
                    dropped = True  # its session died with the previous process
                    continue
                keys[key] = _Entry(base64.b64decode(e["value"], validate=True), int(e["mod"]), int(e["create"]), None)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            what = "is empty" if not raw.strip() else f"is damaged ({type(exc).__name__}: {exc})"
            raise MetadataFileError(
                f"metadata file {self.path} {what}: restore it from a backup of the stopped broker; do not "
                "delete it while its log dirs hold data (a broker starting without it knows no topics)"
            ) from None
        self.revision = revision
        self.keys.update(keys)
        self.sorted_keys = sorted(self.keys)
        data, self._lines = self.serialize(self.keys, self.revision)
        if dropped:
            # the deletions are a change: bump the revision so epochs issued later are new ones
            self.revision += 1
            data, self._lines = self.serialize(self.keys, self.revision)
            self.write_file(data)
        self.oldest_replayable = self.revision + 1

    def serialize(
        self, keys: dict[str, _Entry], revision: int, changed: Iterable[str] | None = None
    ) -> tuple[bytes, dict[str, str]]:
        """The file's JSON, one key per line, and the lines by key. With ``changed`` (the keys a
        commit wrote or deleted), only their lines are encoded and the rest reused: encoding
        every key (with ``indent``, in pure Python) on every commit was a fifth of a broker's
        time creating its thousandth topic. Lines keep the order keys were first written in."""
        if changed is None:
            lines = {k: _line(k, e) for k, e in sorted(keys.items())}
        else:
            lines = dict(self._lines)
            for k in changed:
                e = keys.get(k)
                if e is None:
                    lines.pop(k, None)
                else:
                    lines[k] = _line(k, e)
        head = json.dumps({"format": FORMAT_VERSION, "revision": revision})[:-1]
        return (head + ', "keys": {\n' + ",\n".join(lines.values()) + "\n}}\n").encode(), lines

    def write_file(self, data: bytes) -> None:
        """Atomic replace: write temp, fsync, rename, fsync the directory."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
        except OSError as exc:  # a full disk: the old file stays whole; no half-written temp file
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            raise KafkaStorageError(f"writing the metadata file {self.path} failed: {exc}") from exc
        dfd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    # -- commit --------------------------------------------------------------------------------
    @staticmethod
    def check(entry: _Entry | None, expect: Expect) -> bool:
        if isinstance(expect, AnyVersion):
            return True
        if isinstance(expect, Absent):
            return entry is None
        return entry is not None and entry.mod_revision == expect

    async def commit(
        self,
        checks: Sequence[Check],
        ops: Sequence[Put | Delete],
        owner: int,
    ) -> int:
        """Apply ``ops`` atomically if every check holds; persist, then publish. Returns the new
        revision (the current one if nothing changed)."""
        async with self.write_lock:
            for i, c in enumerate(checks):
                if not self.check(self.keys.get(c.key), c.expect):
                    raise MetadataConflict(c.key, i)
            revision = self.revision + 1
            new_keys = dict(self.keys)
            events: list[WatchEvent] = []
            for op in ops:
                if isinstance(op, Put):
                    old = new_keys.get(op.key)
                    if old is None:
                        entry = _Entry(op.value, revision, revision, owner if op.ephemeral else None)
                    else:
                        # a write keeps the key's lifetime (ZooKeeper's set on an ephemeral)
                        entry = _Entry(op.value, revision, old.create_revision, old.owner)
                    new_keys[op.key] = entry
                    events.append(WatchEvent(op.key, op.value, revision, revision, entry.create_revision))
                else:
                    if new_keys.pop(op.key, None) is not None:
                        events.append(WatchEvent(op.key, None, revision, revision))
            if not events:
                return self.revision
            changed = {ev.key for ev in events}
            data, lines = self.serialize(new_keys, revision, changed)
            await trio.to_thread.run_sync(self.write_file, data)
            for k in changed:
                if k in new_keys and k not in self.keys:
                    bisect.insort(self.sorted_keys, k)
                elif k not in new_keys and k in self.keys:
                    del self.sorted_keys[bisect.bisect_left(self.sorted_keys, k)]
            self.keys = new_keys
            self._lines = lines
            self.revision = revision
            self.history.extend(events)
            if len(self.history) == self.history.maxlen:
                # the oldest retained revision may have lost some of its events to the bound
                self.oldest_replayable = self.history[0].revision + 1
            self.changed.set()
            self.changed = trio.Event()
            return revision


_SHARED: dict[Path, _SharedState] = {}


class LocalMetadataStore:
    """One session on the embedded store (``metadata = "local"``)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path).resolve()
        self._state: _SharedState | None = None
        self._session = 0
        self._session_state = SessionState.LOST
        self._state_changed = trio.Event()

    # -- session -------------------------------------------------------------------------------
    async def open(self, session_ttl_ms: int) -> None:
        """Join (or load) the shared state of this file. The TTL is irrelevant in-process: the
        session lives exactly as long as this object is open."""
        if self._state is not None:
            return
        state = _SHARED.get(self.path)
        if state is None:
            state = _SharedState(self.path)
            await trio.to_thread.run_sync(state.acquire)
            _SHARED[self.path] = state
        state.sessions += 1
        self._session = state.next_session
        state.next_session += 1
        self._state = state
        self._set_session_state(SessionState.CONNECTED)

    def _set_session_state(self, new: SessionState) -> None:
        self._session_state = new
        self._state_changed.set()
        self._state_changed = trio.Event()

    async def session_states(self) -> AsyncIterator[SessionState]:
        current = self._session_state
        yield current
        while current is not SessionState.LOST:
            if self._session_state is current:
                await self._state_changed.wait()
            if self._session_state is not current:
                current = self._session_state
                yield current

    async def close(self) -> None:
        """Delete this session's ephemerals and leave; the last session releases the file."""
        state = self._state
        if state is None:
            return
        mine = [k for k, e in state.keys.items() if e.owner == self._session]
        try:
            if mine:
                with trio.CancelScope(shield=True):
                    await state.commit((), [Delete(k) for k in mine], self._session)
        except KafkaStorageError as exc:  # a full disk: the file keeps them, marked ephemeral
            log.error("closing the metadata session: %s; its registrations are dropped at the next start", exc)
        finally:
            self._state = None
            state.sessions -= 1
            if state.sessions == 0:
                _SHARED.pop(self.path, None)
                state.release()
            state.changed.set()  # wake watchers and campaigners of this session so they notice
            state.changed = trio.Event()
            self._set_session_state(SessionState.LOST)

    def _live(self) -> _SharedState:
        if self._state is None:
            raise MetadataStoreClosed(f"metadata store session on {self.path} is not open")
        return self._state

    # -- reads -----------------------------------------------------------------------------------
    async def get(self, key: str) -> Versioned | None:
        e = self._live().keys.get(key)
        return None if e is None else Versioned(e.value, e.mod_revision, e.create_revision)

    async def list(self, prefix: str) -> tuple[dict[str, Versioned], int]:
        state = self._live()
        items: dict[str, Versioned] = {}
        for k in itertools.islice(state.sorted_keys, bisect.bisect_left(state.sorted_keys, prefix), None):
            if not k.startswith(prefix):
                break
            e = state.keys[k]
            items[k] = Versioned(e.value, e.mod_revision, e.create_revision)
        return items, state.revision

    # -- writes ----------------------------------------------------------------------------------
    async def create(self, key: str, value: bytes, *, ephemeral: bool = False) -> Versioned:
        state = self._live()
        rev = await state.commit([Check(key, ABSENT)], [Put(key, value, ephemeral)], self._session)
        return Versioned(value, rev, rev)

    async def put(self, key: str, value: bytes, *, expect: Expect = ANY) -> int:
        state = self._live()
        return await state.commit([Check(key, expect)], [Put(key, value)], self._session)

    async def delete(self, key: str, *, expect: Expect = ANY) -> bool:
        state = self._live()
        if key not in state.keys:
            if isinstance(expect, int):
                raise MetadataConflict(key)
            return False
        await state.commit([Check(key, expect)], [Delete(key)], self._session)
        return True

    async def txn(self, checks: Sequence[Check], ops: Sequence[Put | Delete]) -> None:
        await self._live().commit(checks, ops, self._session)

    async def next_id(self, key: str) -> int:
        """Increment the decimal counter at ``key`` (absent = 0) and return the new value."""
        state = self._live()
        while True:
            e = state.keys.get(key)
            current = int(e.value) if e is not None else 0
            expect: Expect = e.mod_revision if e is not None else ABSENT
            try:
                await state.commit([Check(key, expect)], [Put(key, str(current + 1).encode())], self._session)
            except MetadataConflict:
                continue  # another session incremented meanwhile
            return current + 1

    # -- watches ---------------------------------------------------------------------------------
    async def watch(self, prefix: str, *, after_revision: int) -> AsyncIterator[WatchEvent]:
        """Every change under ``prefix`` with revision > ``after_revision``, in order, until the
        caller stops iterating or this session closes."""
        state = self._live()
        if after_revision < state.oldest_replayable - 1:
            raise MetadataCompacted(
                f"revision {after_revision} is older than the retained history (from {state.oldest_replayable})"
            )
        seen = after_revision
        while self._state is not None:
            if seen < state.oldest_replayable - 1:
                raise MetadataCompacted(f"watch on {prefix!r} fell behind the retained history")
            changed = state.changed
            pending: list[WatchEvent] = []
            for ev in reversed(state.history):  # the new events only, not the whole history
                if ev.revision <= seen:
                    break
                pending.append(ev)
            pending.reverse()
            for ev in pending:
                seen = ev.revision
                if ev.key.startswith(prefix):
                    yield ev
            if not pending:
                await changed.wait()

    # -- brokers and elections -------------------------------------------------------------------
    async def register_broker(self, broker_id: int, info: bytes) -> int:
        """Ephemeral ``/brokers/ids/<id>``; its create revision is the broker epoch. A broker id
        held by another live session is a conflict; re-registering in this session renews it."""
        state = self._live()
        key = f"{BROKER_IDS_PREFIX}{broker_id}"
        e = state.keys.get(key)
        if e is not None and e.owner == self._session:
            await state.commit([Check(key, e.mod_revision)], [Delete(key)], self._session)
        rev = await state.commit([Check(key, ABSENT)], [Put(key, info, ephemeral=True)], self._session)
        return rev

    async def campaign(self, name: str, value: bytes) -> Leadership:
        """Wait until the election's leader key is free, then take it and bump its epoch in one
        commit. The fence checks the leader key's version: once this session resigns or closes,
        every write carrying the fence fails."""
        leader_key, epoch_key = _election_keys(name)
        while True:
            state = self._live()
            changed = state.changed
            held = state.keys.get(leader_key)
            if held is not None and held.owner == self._session:
                # this session leads already (a term that ended on an error campaigns again):
                # its leadership, as ZooKeeper's and etcd's campaigns answer
                e = state.keys.get(epoch_key)
                return Leadership(name, int(e.value) if e is not None else 0, Check(leader_key, held.mod_revision))
            if held is None:
                e = state.keys.get(epoch_key)
                epoch = (int(e.value) if e is not None else 0) + 1
                checks = [Check(leader_key, ABSENT), Check(epoch_key, e.mod_revision if e is not None else ABSENT)]
                try:
                    rev = await state.commit(
                        checks,
                        [Put(leader_key, value, ephemeral=True), Put(epoch_key, str(epoch).encode())],
                        self._session,
                    )
                except MetadataConflict:
                    continue
                return Leadership(name, epoch, Check(leader_key, rev))
            await changed.wait()

    async def resign(self, leadership: Leadership) -> None:
        """Give up leadership if still held (a no-op once lost)."""
        state = self._live()
        try:
            await state.commit([leadership.fence], [Delete(leadership.fence.key)], self._session)
        except MetadataConflict:
            pass

    async def leader(self, name: str) -> tuple[bytes, int] | None:
        state = self._live()
        leader_key, epoch_key = _election_keys(name)
        e = state.keys.get(leader_key)
        if e is None:
            return None
        ep = state.keys.get(epoch_key)
        return e.value, int(ep.value) if ep is not None else 0

    async def leader_changes(self, name: str) -> AsyncIterator[tuple[bytes, int] | None]:
        """The leader of ``name`` now and after every commit that changes it, until closed."""
        last: object = object()
        while self._state is not None:
            changed = self._live().changed
            current = await self.leader(name)
            if current != last:
                last = current
                yield current
            await changed.wait()


def _election_keys(name: str) -> tuple[str, str]:
    return f"{ELECTION_PREFIX}{name}/leader", f"{ELECTION_PREFIX}{name}/epoch"


@contextlib.asynccontextmanager
async def open_local_store(path: Path, session_ttl_ms: int = 18000) -> AsyncIterator[LocalMetadataStore]:
    """An open session for the duration of a ``with`` block (tests, tools)."""
    store = LocalMetadataStore(path)
    await store.open(session_ttl_ms)
    try:
        yield store
    finally:
        await store.close()
