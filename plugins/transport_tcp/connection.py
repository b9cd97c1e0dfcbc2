"""One client connection: read requests ahead, process them concurrently where safe, answer in order.

Three kinds of task share a connection's nursery:

- the *reader* reads frames while fewer than ``queued.max.requests`` are in flight (a semaphore)
  and the frames not answered yet hold less than ``MAX_READ_AHEAD_BYTES``; otherwise the socket
  is not read, so a client that pipelines faster than it reads responses is slowed by TCP
  itself. It parses the header and starts one handler task per request;
- *handler* tasks run the dispatcher; ``ordered`` APIs wait for the previous ordered request of
  the connection, the others only for the ordered requests before them (see ``Handler``);
- the *writer* takes requests in arrival order, waits for each one's outcome and writes it
  (a frame, or a Fetch envelope whose record slices go out with ``os.sendfile``), then frees its
  in-flight slot. acks=0 Produce has no outcome to write.

Anything a client can get wrong -- framing, an oversized frame, an unknown API, bytes that do not
decode -- closes this connection only, after the responses to earlier requests have been written,
and is logged. ``stop_reading`` starts a graceful close: no new requests, in-flight ones finish.

On a SASL listener the connection first authenticates the peer (``sasl``: the listener's
:class:`~odradek.security.settings.SaslListenerSettings`): one frame at a time, each handed to a
sans-IO :class:`~odradek.security.authenticator.SaslServerAuthenticator`, frames bounded by
``sasl.server.max.receive.size``; only then does the pipelined loop below start, with the
authenticated principal. A PLAINTEXT connection skips it: its request path is unchanged.

A peer that closes its side (EOF, a FIN) is gone, or at most waits for what it already asked:
requests still being processed get ``EOF_GRACE_S`` to finish and be answered, then the
connection closes and cancels what is left (see ``_peer_closed``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import trio

from odradek.errors import InvalidRequest, KafkaError, OdradekError
from odradek.principal import ANONYMOUS, KafkaPrincipal
from odradek.protocol import ApiKey, FetchEnvelope, RequestHeader, api_name, parse_request_header
from odradek.protocol.codec import SchemaUnavailable, is_native_panic
from odradek.protocol.headers import read_uvarint
from odradek.request_memory import RequestMemoryPool
from odradek.security.authenticator import SaslServerAuthenticator
from odradek.security.settings import SaslListenerSettings

from .apis import CloseConnection, Dispatcher, Outcome
from .framing import FrameError, FrameReader, FrameTooLarge, OnBlock, PeerClosed
from .transport_layer import PlaintextTransportLayer, SslHandshakeError, TransportLayer, write_frame

log = logging.getLogger("odradek.transport.tcp")

#: Errors that mean "the peer went away or broke the stream": close quietly.
_GONE = (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError, OSError)
#: How long requests still in flight when the peer closes its side (EOF) get to finish and be
#: answered before they are cancelled and the socket closed. Kafka's Selector closes a channel
#: whose read returns EOF; without a bound, a long-poll Fetch (max_wait up to INT32_MAX ms) or a
#: JoinGroup parked for a client that has left kept its socket in CLOSE-WAIT, and its fd, until
#: the wait ended. The grace lets a client that only half-closed (``shutdown(SHUT_WR)``) after
#: its requests still get the answers that are ready at once.
EOF_GRACE_S = 0.5
#: How long a connection that sent its last answer (a failed login's) waits for the client to
#: close first (see ``KafkaConnection._linger``).
LINGER_S = 1.0
#: The bytes of request frames (and of their answers not written yet) one connection may hold
#: before its reader stops reading the socket. ``queued.max.requests`` alone let one connection pile up 500 frames
#: of up to ``socket.request.max.bytes`` each behind a slow ordered request (500 MB at 1 MB
#: Produce requests behind a parked JoinGroup); Kafka reads one request per channel at a time
#: (it mutes the channel) and bounds all of them with ``queued.max.request.bytes``. 16 MiB keeps
#: a pipelining producer's socket busy (16 requests of 1 MB in flight) while bounding a
#: connection. A frame is always read when nothing is in flight, so one request bigger than
#: this is served, alone.
MAX_READ_AHEAD_BYTES = 16 << 20


@dataclass(eq=False, slots=True)
class _Pending:
    """A request in flight, in the writer's queue."""

    header: RequestHeader
    #: its place in the connection's arrival order (0, 1, ...)
    seq: int = 0
    #: its frame's size, plus its answer's once ready: counted against the connection's
    #: read-ahead until the answer is written
    size: int = 0
    done: trio.Event = field(default_factory=trio.Event)
    outcome: Outcome = None
    failed: bool = False


class KafkaConnection:
    """Serves Kafka requests on one accepted socket until the peer leaves or the broker stops."""

    def __init__(
        self,
        sock: trio.socket.SocketType,
        dispatcher: Dispatcher,
        *,
        peer: str,
        max_request_bytes: int,
        max_in_flight: int,
        idle_timeout_s: float,
        max_read_ahead_bytes: int = MAX_READ_AHEAD_BYTES,
        memory: RequestMemoryPool | None = None,
        sasl: SaslListenerSettings | None = None,
        transport: TransportLayer | None = None,
        handshake_timeout_s: float = math.inf,
    ) -> None:
        self.sock = sock
        #: how the bytes move (PLAINTEXT, TLS); its handshake runs before the first request is
        #: read, within ``handshake_timeout_s``
        self.transport: TransportLayer = transport if transport is not None else PlaintextTransportLayer(sock)
        self.handshake_timeout_s = handshake_timeout_s
        self.dispatcher = dispatcher
        self.peer = peer
        #: the broker's request memory (``queued.max.request.bytes``), shared by every
        #: connection: a frame's size is taken before its body is read and given back once the
        #: request is decoded (a Produce: appended), or at the latest when its handler is done
        self.memory = memory if memory is not None and memory.limit is not None else None
        self.reader = FrameReader(sock, max_request_bytes, memory=self.memory, layer=self.transport)
        self.idle_timeout_s = idle_timeout_s
        self._slots = trio.Semaphore(max_in_flight)
        self.max_read_ahead_bytes = max_read_ahead_bytes
        self._held = 0  # bytes of the frames read and of their answers, until written
        self._room: trio.Event | None = None  # set by the writer when ``_held`` drops below the bound
        self._send, self._receive = trio.open_memory_channel[_Pending](max_in_flight)
        self._read_scope = trio.CancelScope()
        self._last_ordered_done: trio.Event | None = None
        self._queued: list[_Pending] = []  # outcomes not written yet (released on close)
        self._waiting_since: float | None = None  # when the reader started waiting for a frame
        self._stalled: trio.CancelScope | None = None  # the writer's stalled-write scope
        self._arrived = 0  # requests read so far: the next one's ``seq``
        #: ``seq`` of the earliest request that closes the connection: it is answered up to there
        self._closing_at: int | None = None
        self._eof = False  # the peer closed its side
        #: who the peer is, handed to every request's handler; a security layer (SASL, a TLS
        #: client certificate) replaces the anonymous principal once it authenticates the peer
        self.principal: KafkaPrincipal = ANONYMOUS
        #: the SASL exchange a SASL listener runs before serving requests; None: PLAINTEXT
        self.authenticator = (
            None
            if sasl is None
            else SaslServerAuthenticator(
                sasl.mechanisms, self._process_unauthenticated, peer=peer, listener=sasl.listener,
                failed_delay_s=sasl.failed_delay_s, reauth_ms=sasl.reauth_ms,
            )
        )  # fmt: skip
        self._sasl = sasl
        #: trio time the SASL session ends unless renewed (KIP-368); None: it never does
        self.session_expires_at: float | None = None
        #: the re-authentication under way (SaslHandshake received on an authenticated connection)
        self._reauth: SaslServerAuthenticator | None = None
        self._sasl_max_frame = sasl.max_receive_size if sasl is not None else max_request_bytes
        self._auth_scope = trio.CancelScope()
        #: trio time until which no further request is read: a client over its quota (KIP-219)
        self.throttled_until = 0.0
        #: trio time it last read a request (or was accepted): the broker closes the least
        #: recently used connection to make room for an inter-broker one (``max.connections``)
        self.last_active = trio.current_time()
        self._scope = trio.CancelScope()
        self.closed = trio.Event()

    def evict(self) -> None:
        """Close now, abandoning requests in flight: the broker holds ``max.connections`` and an
        inter-broker connection needs the room (Kafka's ``closeExcessConnections``)."""
        log.info(
            "closing connection %s: the broker is over max.connections for an inter-broker connection, "
            "and this is the least recently used one",
            self.peer,
        )
        self._scope.cancel()

    def stop_reading(self) -> None:
        """Graceful close: read no further request; earlier ones are answered, then it closes."""
        self._read_scope.cancel()
        self._auth_scope.cancel()

    async def run(self) -> None:
        try:
            with self._scope:
                await self._serve()
        except* _GONE as group:
            log.debug("connection %s closed: %r", self.peer, group.exceptions[0])
        except* Exception:
            # a bug in the transport itself: never let it reach the listener's nursery
            log.exception("connection %s failed", self.peer)
        finally:
            for pending in self._queued:
                _release(pending.outcome)
            self._queued.clear()
            self.transport.close()
            self.closed.set()

    async def _serve(self) -> None:
        if not await self._handshake():
            return
        if self.authenticator is not None and not await self._authenticate(self.authenticator):
            return
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._write_loop, nursery)
            nursery.start_soon(self._watch_idle)
            await self._read_loop(nursery)
        if self._eof and nursery.cancel_scope.cancelled_caught and self._queued:
            log.debug(
                "connection %s closed by the peer: %d request(s) in flight cancelled", self.peer, len(self._queued)
            )

    async def _handshake(self) -> bool:
        """The transport layer's handshake (TLS), within ``handshake_timeout_s``; False when it
        failed, logged once: a client that does not speak TLS, or whose certificate is refused,
        costs one line and its socket. On success the layer's principal (a client certificate's)
        becomes the connection's."""
        with trio.move_on_after(self.handshake_timeout_s) as scope:
            try:
                await self.transport.handshake()
            except SslHandshakeError as exc:
                log.info("closing connection %s: TLS handshake failed: %s", self.peer, exc)
                return False
            except _GONE as exc:
                log.debug("closing connection %s: gone during the TLS handshake: %r", self.peer, exc)
                return False
        if scope.cancelled_caught:
            log.info("closing connection %s: TLS handshake not done within %.0f s", self.peer, self.handshake_timeout_s)
            return False
        principal = getattr(self.transport, "principal", None)
        if principal is not None:
            self.principal = principal
        return True

    # -- authenticating -----------------------------------------------------------------------
    async def _authenticate(self, auth: SaslServerAuthenticator) -> bool:
        """Run the SASL exchange, one frame at a time; True once the peer is authenticated.

        Frames are bounded by ``sasl.server.max.receive.size`` meanwhile (an unauthenticated peer
        cannot make the broker hold ``socket.request.max.bytes``), and the exchange by
        ``connections.max.idle.ms`` as a whole. False: the connection closes (logged)."""
        limit = self.reader.max_frame
        self.reader.max_frame = min(limit, self._sasl_max_frame)
        try:
            with self._auth_scope:
                self._auth_scope.deadline = trio.current_time() + self.idle_timeout_s
                while not auth.complete:
                    frame = await self._next_frame()
                    if frame is None:
                        return False
                    try:
                        step = await auth.receive(frame)
                    finally:
                        if self.memory is not None:
                            self.memory.release(len(frame))
                        self.reader.recycle(frame)
                    if step.delay_s > 0:
                        await trio.sleep(step.delay_s)
                    if step.response is not None:
                        await write_frame(self.transport, step.response)
                    if step.close:
                        log.info("closing connection %s: %s", self.peer, step.reason)
                        if step.response is not None:
                            await self._linger()
                        return False
            if self._auth_scope.cancelled_caught:
                why = (
                    f"not authenticated within {self.idle_timeout_s:.0f} s (connections.max.idle.ms)"
                    if trio.current_time() >= self._auth_scope.deadline
                    else "the listener is stopping"
                )
                log.info("closing connection %s during SASL authentication: %s", self.peer, why)
                return False
        finally:
            self.reader.max_frame = limit
        assert auth.principal is not None
        self.principal = auth.principal
        self._start_session(auth)
        return True

    def _start_session(self, auth: SaslServerAuthenticator) -> None:
        lifetime_ms = auth.session_lifetime_ms
        self.session_expires_at = trio.current_time() + lifetime_ms / 1000 if lifetime_ms > 0 else None

    # -- re-authenticating (KIP-368) ------------------------------------------------------------
    def _reauth_request(self, header: RequestHeader) -> bool:
        """Whether ``header`` is part of a re-authentication, starting one on a SaslHandshake of a
        connection whose session expires (otherwise such a request goes to the dispatcher, which
        answers ILLEGAL_SASL_STATE, as Kafka does without re-authentication)."""
        key = header.api_key
        if key == ApiKey.SASL_HANDSHAKE and self.session_expires_at is not None and self._reauth is None:
            assert self._sasl is not None and self.authenticator is not None
            self._reauth = SaslServerAuthenticator(
                self._sasl.mechanisms, self._process_unauthenticated, peer=self.peer, listener=self._sasl.listener,
                failed_delay_s=self._sasl.failed_delay_s, reauth_ms=self._sasl.reauth_ms,
                reauthenticating=(self.principal, self.authenticator.mechanism or ""),
            )  # fmt: skip
            return True
        return self._reauth is not None and key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)

    def _session_expired(self) -> bool:
        """Kafka's ``serverAuthenticationSessionExpired``: a request (other than one renewing the
        session) after the session's end closes the connection."""
        return (
            self.session_expires_at is not None
            and self._reauth is None
            and trio.current_time() >= self.session_expires_at
        )

    async def _reauthenticate(self, pending: _Pending, frame: bytearray) -> Outcome:
        """One frame of a re-authentication, in request order: its answer; on failure the answer
        is written (after ``connection.failed.authentication.delay.ms``) and the connection closes."""
        auth = self._reauth
        assert auth is not None
        step = await auth.receive(frame)
        if step.delay_s > 0:
            await trio.sleep(step.delay_s)
        if step.close:
            self._reauth = None
            self.dispatcher.metrics.failed_reauthentications += 1
            log.info("closing connection %s: re-authentication failed: %s", self.peer, step.reason)
            # answered, then closed: no later request is read or processed
            if self._closing_at is None or pending.seq < self._closing_at:
                self._closing_at = pending.seq
            self._read_scope.cancel()
            if step.response is None:
                pending.failed = True
            return step.response if isinstance(step.response, bytes) else None
        if auth.complete:
            self._reauth = None
            self._start_session(auth)
            self.dispatcher.metrics.reauthentications += 1
            log.debug("connection %s re-authenticated as %s with %s", self.peer, self.principal, auth.mechanism)
        return step.response if isinstance(step.response, bytes) else None

    async def _linger(self) -> None:
        """After a last answer (a failed login's): wait for the client to close its side, reading
        and dropping what it sends, for at most ``LINGER_S``, and only then close. Closed at
        once, the answer and the close can reach a busy client together, and a client that reads
        until EOF before handing bytes on drops the answer with them (kafka-python 3 does: it
        then reports a lost connection instead of the broker's reason)."""
        scratch = bytearray(4096)
        with trio.move_on_after(LINGER_S), contextlib.suppress(OSError):
            while await self.sock.recv_into(scratch):
                pass

    async def _process_unauthenticated(self, header: RequestHeader, frame: bytearray) -> Outcome:
        """The requests a peer may send before authenticating (ApiVersions) go to the dispatcher."""
        return await self.dispatcher.process(header, frame, self.peer, principal=self.principal)

    # -- reading ------------------------------------------------------------------------------
    async def _read_loop(self, nursery: trio.Nursery) -> None:
        async with self._send:
            with self._read_scope:
                try:
                    while True:
                        await self._slots.acquire()
                        while self._held >= self.max_read_ahead_bytes:
                            self._room = trio.Event()
                            await self._room.wait()
                        if self.throttled_until:
                            await self._wait_throttled()
                        frame = await self._next_frame()
                        if frame is None:
                            if self._eof:
                                self._peer_closed(nursery)
                            return
                        if self.throttled_until:  # throttled while this frame was being read
                            await self._wait_throttled()
                        started = self._start_request(nursery, frame)
                        if started is None:
                            return
                        if started is not True:
                            # the Produce fast path: appended right here, no task of its own.
                            # Shielded from a close of the read side (a broker stopping, a
                            # failed request): its work is bounded, and cut halfway (a Produce
                            # yields between partitions) it would leave partitions appended
                            # and no answer, which a client retries as duplicates
                            with trio.CancelScope(shield=True):
                                await self._handle(*started)
                except _GONE as exc:
                    # the peer reset the connection: answers to earlier requests cannot arrive
                    log.debug("connection %s: read failed: %r", self.peer, exc)
                    nursery.cancel_scope.cancel()

    def throttle(self, throttle_ms: int) -> None:
        """Mute the connection for ``throttle_ms`` from now (Kafka's ``ThrottledChannel``): its
        response goes out at once, carrying the time; requests already read are answered, the
        next one is not read (nor a read one started) before the time is up."""
        if throttle_ms > 0:
            self.throttled_until = max(self.throttled_until, trio.current_time() + throttle_ms / 1000.0)

    async def _wait_throttled(self) -> None:
        while trio.current_time() < self.throttled_until:  # a later throttle may extend it meanwhile
            await trio.sleep_until(self.throttled_until)
        self.throttled_until = 0.0

    async def _next_frame(self) -> bytearray | None:
        """The next request frame; None when the connection should stop reading.

        The idle timeout is :meth:`_watch_idle`'s: a cancel scope with a deadline around every
        read would cost more than the rest of the reader's work for a small request.
        """
        self._waiting_since = trio.current_time()
        try:
            frame = await self.reader.read_frame()
            self._eof = frame is None
            self.last_active = trio.current_time()
            return frame
        except PeerClosed as exc:
            log.warning("closing connection %s: %s", self.peer, exc)
            self._eof = True
            return None
        except FrameTooLarge as exc:
            log.warning("closing connection %s: %s (socket.request.max.bytes)", self.peer, exc)
            return None
        except FrameError as exc:
            log.warning("closing connection %s: %s", self.peer, exc)
            return None
        finally:
            self._waiting_since = None

    def _peer_closed(self, nursery: trio.Nursery) -> None:
        """The peer closed its side: nothing more will be read, and requests in flight get
        ``EOF_GRACE_S`` to finish; then the connection's scope is cancelled, which cancels the
        handlers still waiting (whatever they did already stays done: an append waiting for its
        acks stays appended) and the writer, and the socket is closed. Without it a handler
        parked for minutes (a long poll, a JoinGroup) held the socket in CLOSE-WAIT meanwhile:
        the idle watch does not apply to a connection with a request in flight."""
        scope = nursery.cancel_scope
        scope.deadline = min(scope.deadline, trio.current_time() + EOF_GRACE_S)

    async def _watch_idle(self) -> None:
        """Stop reading once the reader has waited ``idle_timeout_s`` for a request while nothing
        is in flight (or inside a frame); a long poll still being served is not idle."""
        while True:
            since = self._waiting_since
            now = trio.current_time()
            if since is None or now < since + self.idle_timeout_s:
                await trio.sleep_until((now if since is None else since) + self.idle_timeout_s)
                continue
            if self.reader.waiting_for_memory:
                # held up by the broker's request memory, not by the client
                self._waiting_since = now
                continue
            if self.reader.mid_frame or self.reader.buffered or self._in_flight() == 0:
                log.info(
                    "closing connection %s: idle for %.0f s (connections.max.idle.ms)", self.peer, self.idle_timeout_s
                )
                self._read_scope.cancel()
                return
            self._waiting_since = now  # a long-poll or slow request is still being served

    def _in_flight(self) -> int:
        return len(self._queued)

    def _start_request(self, nursery: trio.Nursery, frame: bytearray) -> _Inline | Literal[True] | None:
        """Queue a request for the writer and start its handler; None to stop reading.

        Returns the ``_handle`` arguments instead of starting a task for a Produce that does not
        wait (acks 0/1) when no earlier ordered request is still running: the reader appends it
        itself, which is what it would wait for anyway, and the request skips a task spawn, its
        scheduling and the ordering Event (a third of the connection's per-request CPU).
        """
        try:
            header = parse_request_header(frame)
            handler = self.dispatcher.handler_for(header)
            self.dispatcher.check(header)
        except (KafkaError, OdradekError) as exc:
            log.warning("closing connection %s: bad request header: %s", self.peer, exc)
            self._slots.release()
            if self.memory is not None:
                self.memory.release(len(frame))
            return None
        reauth = self.session_expires_at is not None and self._reauth_request(header)
        if not reauth and self._session_expired():
            log.info(
                "closing connection %s: its SASL session expired before it re-authenticated "
                "(connections.max.reauth.ms or its credential's expiry, an OAUTHBEARER token's exp); %s is not served",
                self.peer,
                api_name(header.api_key),
            )
            self.dispatcher.metrics.expired_sessions_closed += 1
            self._slots.release()
            if self.memory is not None:
                self.memory.release(len(frame))
            return None
        pending = _Pending(header, self._arrived, len(frame))
        self._arrived += 1
        self._held += pending.size
        self._queued.append(pending)
        self._send.send_nowait(pending)  # never blocks: the semaphore bounds the queue
        after = self._last_ordered_done
        if after is not None and after.is_set():
            after = self._last_ordered_done = None
        if after is None and _produce_without_wait(header, frame):
            return (pending, frame, None, None)
        ordered = handler is None or handler.ordered or reauth
        mine = trio.Event() if ordered else None
        if mine is not None:
            self._last_ordered_done = mine
        nursery.start_soon(self._handle, pending, frame, after, mine, reauth)
        return True

    # -- processing ---------------------------------------------------------------------------
    async def _handle(
        self,
        pending: _Pending,
        frame: bytearray,
        after: trio.Event | None,
        mine: trio.Event | None,
        reauth: bool = False,
    ) -> None:
        header = pending.header
        release_frame = None if self.memory is None else _frame_releaser(self.memory, len(frame))
        try:
            if after is not None:
                await after.wait()
            if self._closing_at is not None and pending.seq > self._closing_at:
                # an earlier request closes the connection: this one is not processed (Kafka
                # reads nothing after the request it closes the connection for). A request
                # *before* the failed one is processed and answered even when it wakes after the
                # failure (both waited for the same ordered request, and trio runs a batch of
                # woken tasks in either order).
                pending.failed = True
                return
            if reauth:
                outcome = pending.outcome = await self._reauthenticate(pending, frame)
            else:
                outcome = pending.outcome = await self.dispatcher.process(
                    header, frame, self.peer, release_frame=release_frame, principal=self.principal,
                    throttle=self.throttle,
                )  # fmt: skip
            if isinstance(outcome, bytes):
                # an answer waiting to be written counts against the read-ahead bound too: a
                # client that sends requests and never reads the answers stops being read, as
                # Kafka mutes its channel, instead of holding up to ``queued.max.requests``
                # answers (a 110 KB Metadata for a 23-byte request) per connection
                pending.size += len(outcome)
                self._held += len(outcome)
        except CloseConnection as exc:
            log.info("closing connection %s: %s", self.peer, exc)
            self._fail(pending)
        except (KafkaError, OdradekError) as exc:
            log.warning(
                "closing connection %s: %s v%d (correlation id %d) from %r: %s",
                self.peer,
                api_name(header.api_key),
                header.api_version,
                header.correlation_id,
                header.client_id,
                exc,
            )
            self._fail(pending)
        except SchemaUnavailable as exc:
            # the broker's own trouble (out of fds): one line naming it, no traceback
            log.error("closing connection %s: %s", self.peer, exc)
            self._fail(pending)
        except Exception:
            log.exception(
                "closing connection %s: %s v%d failed unexpectedly",
                self.peer,
                api_name(header.api_key),
                header.api_version,
            )
            self._fail(pending)
        except BaseException as exc:
            if not is_native_panic(exc):
                raise
            # kio's native code panicked on this request (pyo3 raises a BaseException): it
            # closes this connection only, never the listener
            log.error(
                "closing connection %s: %s v%d: kio panicked: %s",
                self.peer,
                api_name(header.api_key),
                header.api_version,
                exc,
            )
            self._fail(pending)
        finally:
            if release_frame is not None:
                # before ``done``: once its answer is out, a request holds no request memory
                # (most gave it back once decoded, a Produce once appended)
                release_frame()
            if mine is not None:
                mine.set()
            pending.done.set()
            self.reader.recycle(frame)

    def _fail(self, pending: _Pending) -> None:
        """``pending`` closes the connection: the writer closes it once the responses before it
        are written (every earlier request is still processed, whenever its handler runs); no
        further request is read, and none after it is processed."""
        pending.failed = True
        if self._closing_at is None or pending.seq < self._closing_at:
            self._closing_at = pending.seq
        self._read_scope.cancel()

    # -- writing ------------------------------------------------------------------------------
    async def _write_loop(self, nursery: trio.Nursery) -> None:
        # one scope whose deadline is armed when a write has to wait for the peer to read (a
        # write the socket takes at once -- nearly all of them -- touches no deadline at all)
        with trio.CancelScope() as stalled:
            self._stalled = stalled
            await self._write_responses(nursery, stalled)
        if stalled.cancelled_caught:
            log.info("closing connection %s: response not read for %.0f s", self.peer, self.idle_timeout_s)
        nursery.cancel_scope.cancel()

    async def _write_responses(self, nursery: trio.Nursery, stalled: trio.CancelScope) -> None:
        async with self._receive:
            async for pending in self._receive:
                await pending.done.wait()
                if pending.failed:
                    nursery.cancel_scope.cancel()
                    return
                outcome = pending.outcome
                joined: list[_Pending] = []
                if isinstance(outcome, bytes) and len(self._queued) > 1:
                    wire, joined = self._coalesce(outcome)
                try:
                    if joined:
                        await self.transport.write(wire, self._arm_stall_deadline)  # size prefixes included
                    else:
                        await self._write(outcome)
                    if stalled.deadline != math.inf:
                        stalled.deadline = math.inf
                except FrameError as exc:
                    log.error("closing connection %s: %s", self.peer, exc)
                    nursery.cancel_scope.cancel()
                    return
                except _GONE as exc:
                    log.debug("connection %s: write failed: %r", self.peer, exc)
                    nursery.cancel_scope.cancel()
                    return
                finally:
                    _release(outcome)
                    for p in (pending, *joined):
                        p.outcome = None
                        self._queued.remove(p)
                        self._held -= p.size
                for _ in range(1 + len(joined)):
                    self._slots.release()
                room = self._room
                if room is not None and self._held < self.max_read_ahead_bytes:
                    self._room = None
                    room.set()
        # the reader stopped and every queued response is written: the caller closes

    def _coalesce(self, first: bytes) -> tuple[bytes, list[_Pending]]:
        """``first`` joined with the responses right behind it that are already done: one write.

        Pipelined small responses (Produce acks, Metadata) otherwise cost a syscall and a
        scheduler pass each. Only plain frames join (and acks=0 Produce, which writes nothing);
        a Fetch envelope, a failed or an unfinished request ends the run. The joined requests
        are taken off the channel here, in order, as the loop would have taken them.
        """
        parts = [_SIZE.pack(len(first)), first]
        size = len(first)
        joined: list[_Pending] = []
        for nxt in self._queued[1:]:
            if size >= _COALESCE_BYTES or not nxt.done.is_set() or nxt.failed:
                break
            if nxt.outcome is not None and not isinstance(nxt.outcome, bytes):
                break
            got = self._receive.receive_nowait()
            assert got is nxt, "the writer's channel and the queue disagree"
            if nxt.outcome is not None:
                parts += (_SIZE.pack(len(nxt.outcome)), nxt.outcome)
                size += len(nxt.outcome)
            joined.append(nxt)
        return b"".join(parts), joined

    def _arm_stall_deadline(self) -> None:
        """A write has to wait for the peer: it gets ``connections.max.idle.ms`` from now."""
        stalled = self._stalled
        if stalled is not None and stalled.deadline == math.inf:
            stalled.deadline = trio.current_time() + self.idle_timeout_s

    async def _write(self, outcome: Outcome) -> None:
        if outcome is None:
            return
        if isinstance(outcome, FetchEnvelope):
            await write_envelope(self.transport, outcome, self._arm_stall_deadline)
        else:
            await write_frame(self.transport, outcome, self._arm_stall_deadline)


async def write_envelope(
    transport: TransportLayer | trio.socket.SocketType, envelope: FetchEnvelope, on_block: OnBlock = None
) -> None:
    """Write a Fetch envelope: memory parts as they are, record slices from their files
    (``os.sendfile`` on PLAINTEXT; read and encrypted in bounded chunks on TLS). A bare socket
    is written as PLAINTEXT."""
    layer = PlaintextTransportLayer(transport) if isinstance(transport, trio.socket.SocketType) else transport
    for part in envelope.parts:
        if isinstance(part, bytes):
            await layer.write(part, on_block)
            continue
        file_range = getattr(part, "file_range", None)
        rng = file_range() if file_range is not None else None
        if rng is None or rng.length != part.size:
            await layer.write(part.to_bytes(), on_block)
        else:
            await layer.write_file(rng.fd, rng.position, rng.length, on_block)


_Inline = tuple[_Pending, bytearray, None, None]
_INT16 = struct.Struct(">h")
_SIZE = struct.Struct(">i")
#: Stop joining responses into one write beyond this many bytes.
_COALESCE_BYTES = 64 * 1024


def _produce_without_wait(header: RequestHeader, frame: bytearray) -> bool:
    """Whether this is a Produce v3+ with acks 0 or 1 (its handling never waits on others: no
    purgatory; it may yield between partitions, so the reader shields it).

    Peeks at the body: transactional_id (int16 length, -1 = null; from v9 a compact string, an
    unsigned varint of length+1, 0 = null) then acks (int16).
    """
    if header.api_key != ApiKey.PRODUCE or header.api_version < 3:
        return False
    pos = header.body_offset
    if header.api_version >= 9:
        try:
            txn_len, pos = read_uvarint(frame, pos)
        except InvalidRequest:
            return False  # the decoder refuses it with its own error
        pos += max(txn_len - 1, 0)
    else:
        if pos + 2 > len(frame):
            return False
        (txn_len,) = _INT16.unpack_from(frame, pos)
        pos += 2 + max(txn_len, 0)
    if pos + 2 > len(frame):
        return False
    (acks,) = _INT16.unpack_from(frame, pos)
    return acks in (0, 1)


def _frame_releaser(memory: RequestMemoryPool, size: int) -> Callable[[], None]:
    """Gives ``size`` bytes back to ``memory`` the first time it is called, never again."""
    released = False

    def release() -> None:
        nonlocal released
        if not released:
            released = True
            memory.release(size)

    return release


def _release(outcome: Outcome) -> None:
    if isinstance(outcome, FetchEnvelope):
        outcome.release()


__all__ = ["EOF_GRACE_S", "MAX_READ_AHEAD_BYTES", "KafkaConnection", "write_envelope"]
