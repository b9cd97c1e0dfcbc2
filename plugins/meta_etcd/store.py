"""``MetadataStore`` on etcd v3 through the etcd3 client (``metadata = "etcd"``).

Mapping (see docs/cluster.md): a key is the etcd key ``<etcd.namespace><key>``; ``version`` is its
``mod_revision`` (unique across the cluster, so a re-created key never reuses one) and
``create_revision`` its ``create_revision`` (the broker epoch of ``/brokers/ids/<id>``). The
session is a lease: ephemerals are put with it, a trio task refreshes it every TTL/3, and closing
revokes it (etcd deletes the ephemerals at once). An election ``name`` is the leased key
``/<name>`` plus the counter ``/<name>_epoch``, written in one transaction that requires
``create_revision(/<name>) == 0``; a leader's fence compares the counter's ``mod_revision``.

Session states mirror ZooKeeper's: SUSPENDED when a refresh fails, LOST when the lease is gone (the
server says so, or no refresh succeeded for a whole TTL, after which another broker may already
hold our registration and leadership). After LOST a new lease is granted (the old one revoked,
in case it survived) and the state returns to CONNECTED: the broker re-registers with a new epoch.

Transactions are raw ``TxnRequest`` protobufs (etcd3's helpers cannot express ``ignore_lease`` or
nested transactions): a ``Put`` keeps the lease of an existing key, as a ZooKeeper set keeps an
ephemeral, through a nested "exists ? put(ignore_lease) : put(lease)" transaction. On failure the
transaction reads the checked keys in the same atomic step, which names the failing check.
etcd refuses a transaction that writes one key twice; such a ``txn`` raises ``ValueError``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import warnings
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

import grpc
import trio

with warnings.catch_warnings():
    # etcd3's generated protobuf modules use descriptor APIs protobuf 3.20 deprecates
    warnings.simplefilter("ignore", DeprecationWarning)
    import etcd3
    from etcd3 import etcdrpc
    from etcd3.etcdrpc import kv_pb2
    from etcd3.exceptions import Etcd3Exception
    from etcd3.utils import increment_last_byte

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
    MetadataConflict,
    Put,
    SessionState,
    Versioned,
    WatchEvent,
)
from odradek.sessions import (
    MetadataSessionLost,
    MetadataStoreError,
    MetadataTxnTooLarge,
    MetadataUnavailable,
    SessionStateFeed,
)

from .watch import WatchStream, WatchStreamBroken

log = logging.getLogger(__name__)
T = TypeVar("T")

_UNAVAILABLE_CODES = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    """``http://host:port`` (or ``host:port``) -> (host, port)."""
    parts = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"etcd endpoint {endpoint!r} must look like http://host:port (TLS is not supported)")
    return parts.hostname, parts.port or 2379


def _compare(key: bytes, expect: Expect) -> Any:
    """The etcd compare for a check (None for ANY)."""
    if isinstance(expect, AnyVersion):
        return None
    if isinstance(expect, Absent):
        return etcdrpc.Compare(key=key, target=etcdrpc.Compare.CREATE, result=etcdrpc.Compare.EQUAL, create_revision=0)
    if expect < 1:
        # an absent key's mod_revision compares as 0 and a key's is never below 1: a version
        # below 1 is no key's, and "mod_revision == 0" would hold for an absent key (a put
        # expecting it created the key)
        return etcdrpc.Compare(key=key, target=etcdrpc.Compare.CREATE, result=etcdrpc.Compare.LESS, create_revision=0)
    return etcdrpc.Compare(key=key, target=etcdrpc.Compare.MOD, result=etcdrpc.Compare.EQUAL, mod_revision=expect)


def _holds(kv: Any, expect: Expect) -> bool:
    if isinstance(expect, AnyVersion):
        return True
    if isinstance(expect, Absent):
        return kv is None
    return kv is not None and kv.mod_revision == expect


def _range(key: bytes, range_end: bytes | None = None) -> Any:
    return etcdrpc.RequestOp(request_range=etcdrpc.RangeRequest(key=key, range_end=range_end or b""))


def _delete(key: bytes) -> Any:
    return etcdrpc.RequestOp(request_delete_range=etcdrpc.DeleteRangeRequest(key=key))


def _put(key: bytes, value: bytes, lease: int = 0) -> Any:
    """Put that keeps an existing key's lease; a new key gets ``lease`` (0: persistent)."""
    exists = etcdrpc.Compare(key=key, target=etcdrpc.Compare.CREATE, result=etcdrpc.Compare.GREATER, create_revision=0)
    update = etcdrpc.RequestOp(request_put=etcdrpc.PutRequest(key=key, value=value, ignore_lease=True))
    insert = etcdrpc.RequestOp(request_put=etcdrpc.PutRequest(key=key, value=value, lease=lease))
    return etcdrpc.RequestOp(request_txn=etcdrpc.TxnRequest(compare=[exists], success=[update], failure=[insert]))


class EtcdMetadataStore:
    """One lease-backed session on etcd as a ``MetadataStore``."""

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        lease_ttl_ms: int = 18000,
        namespace: str = "",
        request_timeout_ms: int = 5000,
        max_txn_ops: int = 128,
    ) -> None:
        self.endpoints = [parse_endpoint(e) for e in endpoints]
        if not self.endpoints:
            raise ValueError("etcd.endpoints is empty")
        self.default_lease_ttl_ms = lease_ttl_ms
        self.namespace = namespace.rstrip("/")
        self.request_timeout_s = request_timeout_ms / 1000
        #: the etcd servers' --max-txn-ops: the broker keeps each transaction within it (a topic
        #: larger than it cannot be created in one); a transaction past it is refused here
        self.max_txn_ops = max_txn_ops
        self._client: Any = None
        self._watch_stub: Any = None
        self._lease_id = 0
        self._lease_ttl_s = 0
        self._closed = False
        self._states = SessionStateFeed()
        self._keepalive_scope: trio.CancelScope | None = None
        #: the largest revision and the etcd cluster id seen in response headers: a revision
        #: going back or another cluster id means the store was restarted empty or replaced
        self._max_revision = 0
        self._etcd_cluster_id = 0

    @property
    def lease_id(self) -> int:
        """The lease of the current session (its ephemerals are attached to it)."""
        return self._lease_id

    # -- plumbing --------------------------------------------------------------------------------
    def _k(self, key: str) -> bytes:
        return (self.namespace + check_key(key)).encode()

    def _key(self, raw: bytes) -> str:
        return raw.decode()[len(self.namespace) :]

    def _prefix_range(self, prefix: str) -> tuple[bytes, bytes]:
        start = (self.namespace + check_prefix(prefix) + "/").encode()
        return start, increment_last_byte(start)

    def _live(self) -> Any:
        if self._client is None or self._closed:
            raise MetadataUnavailable("the etcd metadata session is not open")
        return self._client

    def _options(self) -> dict[str, Any]:
        client = self._live()
        return {"credentials": client.call_credentials, "metadata": client.metadata}

    async def _rpc(self, fn: Callable[..., T], request: Any, *, idempotent: bool) -> T:
        """A unary gRPC call in a worker thread; reads retry while etcd is unreachable."""
        while True:
            options = self._options()
            call = functools.partial(fn, request, self.request_timeout_s, **options)
            # etcd serves this request at a revision at least the largest one seen before it is
            # sent; requests running side by side may answer below each other's revisions
            floor = self._max_revision
            try:
                response = await trio.to_thread.run_sync(call, abandon_on_cancel=True)
            except grpc.RpcError as exc:
                if exc.code() not in _UNAVAILABLE_CODES:
                    raise self._error(exc) from exc
                if not idempotent:
                    raise MetadataUnavailable(f"etcd did not confirm the write: {exc.details()}") from exc
                await trio.sleep(0.1)
                continue
            header = getattr(response, "header", None)
            if header is not None:
                self._observe(header, floor)
            return response

    def _error(self, exc: grpc.RpcError) -> Exception:
        """A gRPC error as one readable line. A lease etcd no longer has (it expired while the
        keep-alive had not noticed yet, a long pause, an etcd restarted empty) is the session
        lost: report LOST at once (the keep-alive task then takes a new lease) and say so."""
        code, details = exc.code(), exc.details() or ""
        if code == grpc.StatusCode.NOT_FOUND and "lease not found" in details:
            self._states.set(SessionState.LOST)
            return MetadataSessionLost(f"etcd lease {self._lease_id:x} is gone ({details}): the session is lost")
        if "too many operations in txn" in details:
            details += f" (etcd.max.txn.ops is {self.max_txn_ops}: set it to the servers' --max-txn-ops)"
        return MetadataStoreError(f"etcd answered {code.name}: {details}")

    def _observe(self, header: Any, floor: int) -> None:
        """Check a response header against the ones before: etcd's revision never goes back and
        its cluster id never changes, unless the server lost its data (restarted with an empty
        data dir) or another etcd answers. Then this session's lease is gone as well: the
        session is LOST (a new lease follows), and the broker, before registering again, finds
        out whether the store still holds its cluster (``MetadataCache.check_cluster_id``).

        ``floor`` is the largest revision seen when the request was sent: etcd's linearizable
        reads and writes are served at or above it. A lower answer than a response that came
        back meanwhile is normal -- concurrent requests (each in its own worker thread) finish
        in any order -- so only going below ``floor`` counts as going back."""
        revision, cluster_id = int(header.revision), int(header.cluster_id)
        if self._etcd_cluster_id and cluster_id and cluster_id != self._etcd_cluster_id:
            reset = f"the etcd cluster id changed from {self._etcd_cluster_id:x} to {cluster_id:x}"
        elif revision < floor:
            reset = f"etcd's revision went back from {floor} to {revision}"
        else:
            reset = ""
        self._etcd_cluster_id = cluster_id or self._etcd_cluster_id
        if reset:
            log.warning("%s: the etcd store was restarted empty or replaced; the metadata session is lost", reset)
            self._max_revision = revision
            self._states.set(SessionState.LOST)
        else:
            self._max_revision = max(self._max_revision, revision)

    async def _txn(self, compare: Sequence[Any], success: Sequence[Any], failure: Sequence[Any] = ()) -> Any:
        request = etcdrpc.TxnRequest(compare=list(compare), success=list(success), failure=list(failure))
        idempotent = not success or all(op.WhichOneof("request") == "request_range" for op in success)
        return await self._rpc(self._live().kvstub.Txn, request, idempotent=idempotent)

    async def _get_kv(self, key: bytes) -> Any:
        response = await self._rpc(self._live().kvstub.Range, etcdrpc.RangeRequest(key=key), idempotent=True)
        return response.kvs[0] if response.kvs else None

    @staticmethod
    def _versioned(kv: Any) -> Versioned:
        return Versioned(bytes(kv.value), int(kv.mod_revision), int(kv.create_revision))

    # -- session ---------------------------------------------------------------------------------
    async def open(self, session_ttl_ms: int) -> None:
        """Connect to the first endpoint that grants a lease of ``session_ttl_ms`` (<= 0:
        etcd.lease.ttl.ms), and keep it alive."""
        if self._client is not None:
            return
        ttl_ms = session_ttl_ms if session_ttl_ms > 0 else self.default_lease_ttl_ms
        self._states.bind()
        errors = []
        for host, port in self.endpoints:
            client = etcd3.client(host=host, port=port, timeout=self.request_timeout_s)
            try:
                lease = await trio.to_thread.run_sync(client.lease, max(1, math.ceil(ttl_ms / 1000)))
            except (Etcd3Exception, grpc.RpcError) as exc:
                errors.append(f"{host}:{port}: {exc!r}")
                client.close()
                continue
            self._client, self._lease_id, self._lease_ttl_s = client, int(lease.id), int(lease.ttl)
            self._watch_stub = etcdrpc.WatchStub(client.channel)  # one gRPC stream per watch (watch.py)
            break
        else:
            raise MetadataUnavailable(f"no etcd endpoint granted a lease: {'; '.join(errors)}")
        self._states.set(SessionState.CONNECTED)
        self._keepalive_scope = trio.CancelScope()
        trio.lowlevel.spawn_system_task(self._keepalive, self._keepalive_scope, name="odradek-etcd-keepalive")

    async def _keepalive(self, scope: trio.CancelScope) -> None:
        """Refresh the lease every TTL/3 (faster while in trouble) and track the session state.

        A system task (the protocol's ``open`` gets no nursery); ``close`` cancels it. It must
        never raise: an error here becomes a session state, never a crash of the run.
        """
        with scope:
            last_ok = trio.current_time()
            while True:
                healthy = self._states.state is SessionState.CONNECTED
                await trio.sleep(self._lease_ttl_s / 3 if healthy else min(0.25, self._lease_ttl_s / 3))
                try:
                    if self._states.state is SessionState.LOST:
                        await self._renew_lease()
                        last_ok = trio.current_time()
                        continue
                    remaining = await self._refresh()
                except Exception as exc:  # any failure to reach etcd
                    log.debug("etcd lease keepalive failed: %r", exc)
                    remaining = None
                if remaining is None:
                    lost = trio.current_time() - last_ok >= self._lease_ttl_s
                    self._states.set(SessionState.LOST if lost else SessionState.SUSPENDED)
                elif remaining <= 0:
                    self._states.set(SessionState.LOST)
                else:
                    last_ok = trio.current_time()
                    self._states.set(SessionState.CONNECTED)

    async def _refresh(self) -> int | None:
        """The lease's remaining TTL after a keep-alive (<= 0: expired), None if etcd did not answer."""
        client, lease_id = self._live(), self._lease_id
        with trio.move_on_after(max(0.2, self._lease_ttl_s / 3)):
            responses = await trio.to_thread.run_sync(
                lambda: list(client.refresh_lease(lease_id)), abandon_on_cancel=True
            )
            return int(responses[0].TTL) if responses else 0
        return None

    async def _renew_lease(self) -> None:
        """After LOST: a new lease for a new session; the old one is revoked in case it survived."""
        client = self._live()
        lease = await trio.to_thread.run_sync(client.lease, self._lease_ttl_s, abandon_on_cancel=True)
        old, self._lease_id = self._lease_id, int(lease.id)
        with contextlib.suppress(Etcd3Exception, grpc.RpcError):
            await trio.to_thread.run_sync(client.revoke_lease, old, abandon_on_cancel=True)
        self._states.set(SessionState.CONNECTED)

    async def session_states(self) -> AsyncIterator[SessionState]:
        async for state in self._states.subscribe():
            yield state

    async def close(self) -> None:
        """Revoke the lease (etcd deletes this session's ephemerals at once) and disconnect."""
        client = self._client
        if client is None or self._closed:
            return
        self._closed = True
        if self._keepalive_scope is not None:
            self._keepalive_scope.cancel()
        with trio.CancelScope(shield=True):
            try:
                with trio.move_on_after(self.request_timeout_s):
                    await trio.to_thread.run_sync(client.revoke_lease, self._lease_id, abandon_on_cancel=True)
            except (Etcd3Exception, grpc.RpcError) as exc:
                log.warning("could not revoke etcd lease %x on close (it expires by itself): %r", self._lease_id, exc)
            finally:
                client.close()
                self._states.set(SessionState.LOST)
                self._states.close()

    # -- reads -----------------------------------------------------------------------------------
    async def get(self, key: str) -> Versioned | None:
        kv = await self._get_kv(self._k(key))
        return self._versioned(kv) if kv is not None else None

    async def list(self, prefix: str) -> tuple[dict[str, Versioned], int]:
        """One range read: an atomic snapshot at the response header's revision."""
        start, end = self._prefix_range(prefix)
        request = etcdrpc.RangeRequest(key=start, range_end=end)
        response = await self._rpc(self._live().kvstub.Range, request, idempotent=True)
        return {self._key(kv.key): self._versioned(kv) for kv in response.kvs}, int(response.header.revision)

    # -- writes ----------------------------------------------------------------------------------
    async def txn(self, checks: Sequence[Check], ops: Sequence[Put | Delete]) -> None:
        keys = [op.key for op in ops]
        if len(set(keys)) != len(keys):
            raise ValueError("an etcd transaction may write each key once: merge the ops on one key")
        if max(len(ops), len(checks)) > self.max_txn_ops:
            raise MetadataTxnTooLarge(
                f"a transaction of {len(ops)} writes and {len(checks)} checks is past the etcd servers' "
                f"limit of {self.max_txn_ops} each (etcd.max.txn.ops, the servers' --max-txn-ops)"
            )
        await self._commit(checks, ops)

    async def _commit(self, checks: Sequence[Check], ops: Sequence[Put | Delete]) -> int:
        """Run the transaction; returns its revision or raises ``MetadataConflict``."""
        compares, checked = [], []
        for i, check in enumerate(checks):
            compare = _compare(self._k(check.key), check.expect)
            if compare is not None:
                compares.append(compare)
                checked.append(i)
        success = [
            _put(self._k(op.key), op.value, self._lease_id if op.ephemeral else 0)
            if isinstance(op, Put)
            else _delete(self._k(op.key))
            for op in ops
        ]
        failure = [_range(self._k(checks[i].key)) for i in checked]
        response = await self._txn(compares, success, failure)
        if response.succeeded:
            return int(response.header.revision)
        for i, reply in zip(checked, response.responses, strict=True):
            kvs = reply.response_range.kvs
            if not _holds(kvs[0] if kvs else None, checks[i].expect):
                raise MetadataConflict(checks[i].key, i)
        raise AssertionError("etcd reported a failed transaction whose checks all hold")

    async def create(self, key: str, value: bytes, *, ephemeral: bool = False) -> Versioned:
        revision = await self._commit([Check(key, ABSENT)], [Put(key, value, ephemeral)])
        return Versioned(value, revision, revision)

    async def put(self, key: str, value: bytes, *, expect: Expect = ANY) -> int:
        return await self._commit([Check(key, expect)], [Put(key, value)])

    async def delete(self, key: str, *, expect: Expect = ANY) -> bool:
        k = self._k(key)
        if isinstance(expect, AnyVersion):
            response = await self._rpc(
                self._live().kvstub.DeleteRange, etcdrpc.DeleteRangeRequest(key=k), idempotent=False
            )
            return bool(response.deleted)
        if isinstance(expect, Absent):
            await self._commit([Check(key, ABSENT)], [])
            return False
        response = await self._txn([_compare(k, expect)], [_delete(k)])
        if not response.succeeded:
            raise MetadataConflict(key)
        return True

    async def next_id(self, key: str) -> int:
        """Increment the decimal counter at ``key`` (absent = 0) by compare-and-set."""
        return await increment_counter(self, key)

    # -- watches ---------------------------------------------------------------------------------
    async def _watch_range(self, start: bytes, end: bytes | None, after_revision: int) -> AsyncGenerator[Any, None]:
        """Raw etcd events after ``after_revision``, re-creating the stream from the last delivered
        revision + 1 whenever it breaks (so nothing is lost or repeated)."""
        next_revision = after_revision + 1
        pause = 0.05
        while not self._closed:
            try:
                stream = WatchStream(self._watch_stub, start, end, next_revision, self._options())
                async with contextlib.aclosing(stream.responses()) as responses:
                    async for response in responses:
                        for event in response.events:
                            yield event
                        next_revision = int(response.events[-1].kv.mod_revision) + 1
                        pause = 0.05
            except (WatchStreamBroken, MetadataUnavailable) as exc:
                if self._closed:
                    return
                log.debug("etcd watch stream broke, resuming from revision %d: %s", next_revision, exc)
            await trio.sleep(pause)
            pause = min(pause * 2, 1.0)

    async def watch(self, prefix: str, *, after_revision: int) -> AsyncIterator[WatchEvent]:
        """Every change below ``prefix`` after ``after_revision`` in revision order, exactly once;
        ``MetadataCompacted`` when etcd no longer has that history. Ends when the store closes."""
        start, end = self._prefix_range(prefix)
        async with contextlib.aclosing(self._watch_range(start, end, after_revision)) as events:
            async for event in events:
                kv = event.kv
                revision = int(kv.mod_revision)
                deleted = event.type == kv_pb2.Event.DELETE
                if deleted:
                    yield WatchEvent(self._key(kv.key), None, revision, revision)
                else:
                    yield WatchEvent(self._key(kv.key), bytes(kv.value), revision, revision, int(kv.create_revision))

    # -- brokers and elections -------------------------------------------------------------------
    async def register_broker(self, broker_id: int, info: bytes) -> int:
        """Leased ``/brokers/ids/<id>``; the broker epoch is its create_revision. Re-registering in
        this session deletes and re-creates it (a new epoch); a registration under another lease
        is a ``MetadataConflict`` (broker id in use)."""
        key = broker_key(broker_id)
        k = self._k(key)
        while True:
            kv = await self._get_kv(k)
            if kv is not None:
                if kv.lease != self._lease_id:
                    raise MetadataConflict(key)
                await self._txn([_compare(k, int(kv.mod_revision))], [_delete(k)])
                continue
            try:
                return await self._commit([Check(key, ABSENT)], [Put(key, info, ephemeral=True)])
            except MetadataConflict:
                continue

    async def _election(self, name: str) -> tuple[Any, Any, int]:
        """(leader kv, epoch kv, revision) read in one atomic step."""
        leader_key, epoch_key = election_keys(name)
        response = await self._txn([], [_range(self._k(leader_key)), _range(self._k(epoch_key))])
        leader, epoch = (r.response_range.kvs[0] if r.response_range.kvs else None for r in response.responses)
        return leader, epoch, int(response.header.revision)

    async def campaign(self, name: str, value: bytes) -> Leadership:
        """Wait until ``/<name>`` is free, then put it with the lease and bump ``/<name>_epoch`` in
        one transaction; the fence compares the counter's mod_revision."""
        leader_key, epoch_key = election_keys(name)
        while True:
            leader, epoch, revision = await self._election(name)
            current = int(epoch.value) if epoch is not None else 0
            if leader is not None:
                if leader.lease == self._lease_id and epoch is not None and leader.mod_revision == epoch.mod_revision:
                    return Leadership(name, current, Check(epoch_key, int(epoch.mod_revision)))
                await self._wait_for_change(leader_key, revision)
                continue
            try:
                revision = await self._commit(
                    [Check(leader_key, ABSENT), Check(epoch_key, int(epoch.mod_revision) if epoch else ABSENT)],
                    [Put(leader_key, value, ephemeral=True), Put(epoch_key, str(current + 1).encode())],
                )
            except MetadataConflict:
                continue
            return Leadership(name, current + 1, Check(epoch_key, revision))

    async def _wait_for_change(self, key: str, revision: int) -> None:
        """Until ``key`` changes after ``revision`` (at most a second: a re-check every second
        covers broken streams)."""
        with trio.move_on_after(1.0):
            async with contextlib.aclosing(self._watch_range(self._k(key), None, revision)) as changes:
                async for _ in changes:
                    break

    async def leader_changes(self, name: str) -> AsyncIterator[tuple[bytes, int] | None]:
        """The leader of ``name`` now and after every change of ``/<name>``, until closed."""
        leader_key, _ = election_keys(name)
        last: object = object()
        while not self._closed:
            leader, epoch, revision = await self._election(name)
            current = None if leader is None else (bytes(leader.value), int(epoch.value) if epoch is not None else 0)
            if current != last:
                last = current
                yield current
            await self._wait_for_change(leader_key, revision)

    async def resign(self, leadership: Leadership) -> None:
        """Delete ``/<name>`` if this leadership still holds (its fence passes); else nothing."""
        leader_key, _ = election_keys(leadership.name)
        with contextlib.suppress(MetadataConflict):
            await self._commit([leadership.fence], [Delete(leader_key)])

    async def leader(self, name: str) -> tuple[bytes, int] | None:
        leader, epoch, _ = await self._election(name)
        if leader is None:
            return None
        return bytes(leader.value), int(epoch.value) if epoch is not None else 0
