"""One client connection to one broker: pipelined requests matched to responses.

Kafka answers the requests of one connection in order, each response carrying the request's
correlation id; so a connection can have many requests in flight (the producer's
``max.in.flight.requests.per.connection``). :class:`BrokerConnection` writes frames under a lock
(one writer at a time, shielded so a cancelled caller never leaves half a frame on the socket),
and one reader task hands each response to the request waiting for it. When anything goes wrong
on the socket -- EOF, a reset, a request that times out -- the connection is closed and every
pending request fails with a retriable :class:`NetworkError`, as the Java client does: a broker
that did not answer one request in time cannot be trusted to answer the next ones in order.

On connect, ApiVersions (v0, which every broker answers alike) learns the broker's version
ranges; :meth:`BrokerConnection.version` then picks, per API, the highest version both sides speak.
"""

from __future__ import annotations

import itertools
import logging
import math
import random
from dataclasses import replace
from typing import Any

import trio

from ..errors import ErrorCode, KafkaError, UnsupportedVersion
from ..interfaces import Connection, Connector
from ..protocol import SUPPORTED_VERSIONS, ApiKey, VersionRange, decode_response, encode_request, peek_correlation_id
from ..protocol.produce import ProduceRequestData
from .requests import error_code, make_request

log = logging.getLogger("odradek.client")


class NetworkError(KafkaError):
    """A connection to a broker failed or closed; retriable (Kafka's NETWORK_EXCEPTION)."""

    code = ErrorCode.NETWORK_EXCEPTION


class _Pending:
    """A request waiting for its response."""

    __slots__ = ("api_key", "done", "error", "response", "timeout_s", "version")

    def __init__(self, api_key: int, version: int, timeout_s: float) -> None:
        self.api_key = api_key
        self.version = version
        self.timeout_s = timeout_s
        self.done = trio.Event()
        self.response: Any = None
        self.error: BaseException | None = None


class BrokerConnection:
    """A connection to broker ``node_id`` at ``host:port`` (see module doc).

    Create with :meth:`open`; the reader task runs in the nursery given there and ends when the
    connection closes.
    """

    def __init__(self, conn: Connection, node_id: int, host: str, port: int, client_id: str) -> None:
        self._conn = conn
        self.node_id = node_id
        self.host = host
        self.port = port
        self.client_id = client_id
        self._pending: dict[int, _Pending] = {}
        self._correlation = itertools.count(1)
        self._send_lock = trio.Lock()
        self._closed = False
        self._close_reason: BaseException | None = None
        self.api_versions: dict[int, VersionRange] = {}
        self.last_used = trio.current_time()
        #: the SASL session renewal's scope, cancelled when the connection closes
        self._renewal_scope = trio.CancelScope()
        #: sessions renewed on this connection (KIP-368)
        self.reauthentications = 0

    # -- lifecycle -------------------------------------------------------------------------------
    @classmethod
    async def open(
        cls,
        nursery: trio.Nursery,
        connector: Connector,
        node_id: int,
        host: str,
        port: int,
        *,
        client_id: str,
        connect_timeout_s: float,
        request_timeout_s: float,
    ) -> BrokerConnection:
        """Connect, start the reader, negotiate versions; raises NetworkError on failure."""
        try:
            conn = await connector.connect(host, port, timeout_s=connect_timeout_s)
        except (OSError, trio.TooSlowError, trio.BrokenResourceError) as exc:
            raise NetworkError(f"cannot connect to broker {node_id} at {host}:{port}: {exc!r}") from exc
        self = cls(conn, node_id, host, port, client_id)
        nursery.start_soon(self._read_loop)
        try:
            await self._negotiate(request_timeout_s)
        except BaseException:
            await self.close(NetworkError(f"ApiVersions with broker {node_id} failed"))
            raise
        session = getattr(conn, "sasl_session", None)
        if session is not None and session.lifetime_ms > 0:
            nursery.start_soon(self._renew_sasl_session, session, request_timeout_s)
        return self

    async def _renew_sasl_session(self, session: Any, timeout_s: float) -> None:
        """Re-authenticate (KIP-368) at a random point between 85% and 95% of each session's
        lifetime, as the Java client does, until the connection closes; a refusal closes it
        (the broker does too), so the next request reconnects and logs in afresh."""
        from ..security.client import reauthenticate

        async def call(api_key: int, version: int, **fields: Any) -> Any:
            return await self.request(make_request(api_key, version, **fields), timeout_s=timeout_s)

        lifetime_ms = session.lifetime_ms
        with self._renewal_scope:
            while lifetime_ms > 0 and not self._closed:
                await trio.sleep(lifetime_ms / 1000 * random.uniform(0.85, 0.95))
                try:
                    lifetime_ms = await reauthenticate(call, replace(session, lifetime_ms=lifetime_ms))
                except KafkaError as exc:
                    await self.close(NetworkError(f"re-authentication with broker {self.node_id} failed: {exc}"))
                    return
                self.reauthentications += 1

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    async def close(self, reason: BaseException | None = None) -> None:
        """Close the socket and fail every pending request with ``reason`` (a NetworkError)."""
        if self._closed:
            return
        self._closed = True
        self._renewal_scope.cancel()
        self._close_reason = reason or NetworkError(f"connection to broker {self.node_id} closed")
        pending, self._pending = self._pending, {}
        for p in pending.values():
            p.error = self._close_reason
            p.done.set()
        with trio.CancelScope(shield=True):
            try:
                await self._conn.aclose()
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
                pass

    async def _read_loop(self) -> None:
        try:
            while not self._closed:
                frame = await self._conn.receive_frame()
                correlation_id = peek_correlation_id(frame)
                pending = self._pending.pop(correlation_id, None)
                if pending is None:
                    raise NetworkError(f"broker {self.node_id} sent a response to unknown request {correlation_id}")
                try:
                    _cid, pending.response = decode_response(pending.api_key, pending.version, frame)
                except Exception as exc:  # a response we cannot read poisons the stream
                    pending.error = NetworkError(f"undecodable response from broker {self.node_id}: {exc}")
                    pending.done.set()
                    raise pending.error from exc
                pending.done.set()
        except (OSError, EOFError, trio.BrokenResourceError, trio.ClosedResourceError, KafkaError) as exc:
            reason = exc if isinstance(exc, NetworkError) else NetworkError(f"broker {self.node_id}: {exc!r}")
            await self.close(reason)
        except trio.Cancelled:
            await self.close()
            raise
        else:
            await self.close()

    # -- versions --------------------------------------------------------------------------------
    async def _negotiate(self, timeout_s: float) -> None:
        # v0: every broker answers it the same way (later versions only add client software
        # name/version, and brokers disagree on how to encode a version error in them)
        response = await self.request(make_request(ApiKey.API_VERSIONS, 0), timeout_s=timeout_s)
        code = error_code(response.error_code)
        if code is not ErrorCode.NONE:
            raise NetworkError(f"ApiVersions to broker {self.node_id} failed with {code.name}")
        self.api_versions = {
            int(k.api_key): VersionRange(int(k.min_version), int(k.max_version)) for k in response.api_keys
        }

    def version(self, api_key: int, *, min_version: int | None = None, max_version: int | None = None) -> int:
        """Highest version of ``api_key`` both sides speak (within the optional bounds)."""
        ours = SUPPORTED_VERSIONS.get(api_key)
        theirs = self.api_versions.get(api_key)
        if ours is None or theirs is None:
            raise UnsupportedVersion(f"broker {self.node_id} does not support api {ApiKey(api_key).name}")
        low = max(ours.min, theirs.min, min_version if min_version is not None else 0)
        high = min(ours.max, theirs.max, max_version if max_version is not None else ours.max)
        if low > high:
            raise UnsupportedVersion(
                f"no common version of {ApiKey(api_key).name}: odradek {ours.min}-{ours.max}, "
                f"broker {self.node_id} {theirs.min}-{theirs.max}"
            )
        return high

    # -- requests --------------------------------------------------------------------------------
    async def send_request(self, request: Any, *, timeout_s: float, expect_response: bool = True) -> _Pending | None:
        """Write ``request`` and return the handle :meth:`wait_response` takes (None when no
        response is expected). Requests written by one task go out in call order, which the
        producer relies on for its sequence numbers (trio schedules spawned tasks randomly)."""
        if self._closed:
            raise self._close_reason or NetworkError(f"connection to broker {self.node_id} is closed")
        if isinstance(request, ProduceRequestData):
            api_key, version = int(ApiKey.PRODUCE), request.version
        else:
            api_key, version = int(request.__api_key__), int(request.__version__)
        correlation_id = next(self._correlation) & 0x7FFFFFFF
        frame = encode_request(request, correlation_id=correlation_id, client_id=self.client_id)
        pending = _Pending(api_key, version, timeout_s) if expect_response else None
        if pending is not None:
            self._pending[correlation_id] = pending
        self.last_used = trio.current_time()
        # a frame is written whole or the connection dies: never cancel half-way through a write
        with trio.CancelScope(shield=True) as scope:
            if math.isfinite(timeout_s):
                scope.deadline = trio.current_time() + timeout_s
            try:
                async with self._send_lock:
                    await self._conn.send_frame(frame)
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                await self.close(NetworkError(f"send to broker {self.node_id} failed: {exc!r}"))
        if scope.cancelled_caught:
            await self.close(NetworkError(f"send to broker {self.node_id} timed out"))
        if self._closed and (pending is None or not pending.done.is_set()):
            raise self._close_reason or NetworkError(f"connection to broker {self.node_id} is closed")
        return pending

    async def wait_response(self, pending: _Pending) -> Any:
        """The response for a :meth:`send_request` handle; on timeout the connection is closed
        and ``NetworkError`` raised. A cancelled caller just stops waiting (the response is
        dropped when it arrives)."""
        timeout_s = pending.timeout_s
        with trio.move_on_after(timeout_s) as wait:
            await pending.done.wait()
        if wait.cancelled_caught:
            await self.close(
                NetworkError(
                    f"request {ApiKey(pending.api_key).name} to broker {self.node_id} timed out after {timeout_s:.1f}s"
                )
            )
        if pending.error is not None:
            raise pending.error
        if not pending.done.is_set():
            raise self._close_reason or NetworkError(f"connection to broker {self.node_id} closed")
        self.last_used = trio.current_time()
        return pending.response

    async def request(self, request: Any, *, timeout_s: float, expect_response: bool = True) -> Any:
        """Send ``request`` and wait for its response (None when ``expect_response`` is False)."""
        pending = await self.send_request(request, timeout_s=timeout_s, expect_response=expect_response)
        if pending is None:
            return None
        return await self.wait_response(pending)
