"""The server side of the TCP transport: one ``TcpListener`` per configured listener.

Structure (after trio's ``serve_listeners`` and hypercorn): the listener binds, reports the bound
endpoints through ``task_status.started`` (so port 0 works and the broker can advertise the real
port), then runs accept loops in an inner nursery and connections in an outer, *shielded* one.
When the broker cancels ``serve``, the accept loops stop and the sockets close, every
connection is told to stop reading, and the connections' nursery gets a deadline
(``transport.shutdown.grace.ms``): in-flight requests finish and are answered, or are cancelled
when the deadline passes. Accept errors from exhausted resources (EMFILE and friends) are retried
after a pause -- backpressure at accept instead of a crash -- and logged as a lasting condition:
one ERROR when accepting starts failing, at most one a minute (with the count) while it goes on,
one INFO when it works again (10 ERROR lines a second buried everything else at the fd limit).

Connection limits are the broker's (:class:`~odradek.connection_quotas.ConnectionQuotas`, shared
by every listener): after each accept the loop asks for a slot, which waits while the broker holds
``max.connections`` or this listener its ``listener.name.<listener>.max.connections`` (so this
listener stops accepting) and is refused when the client's address holds
``max.connections.per.ip``; such a socket is closed at once, with an INFO line. Each connection
served is tracked, so that an inter-broker connection past ``max.connections`` can close the
least recently used one of another listener.
"""

from __future__ import annotations

import errno
import logging
import math
import socket as stdlib_socket
from typing import Any

import trio

from odradek.broker.storage_failures import StorageFailureLog
from odradek.config import Config
from odradek.connection_quotas import ConnectionQuotas
from odradek.interfaces import Endpoint
from odradek.security.settings import SaslListenerSettings, is_sasl, listener_sasl_settings

from .apis import Dispatcher
from .connection import KafkaConnection
from .transport_layer import TransportLayer

log = logging.getLogger("odradek.transport.tcp")

#: accept() errors that mean "out of a resource", worth waiting out (as trio.serve_listeners does)
ACCEPT_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
ACCEPT_BACKOFF_S = 0.1
GRACE_KEY = "transport.shutdown.grace.ms"
DEFAULT_GRACE_MS = 5000


class TcpListener:
    """Serves the Kafka protocol on one listener (``PLAINTEXT://host:port``, or a SASL_PLAINTEXT
    one, whose connections authenticate first)."""

    def __init__(self, config: Config, broker: Any, endpoint: Endpoint) -> None:
        self.config = config
        self.broker = broker
        self.endpoint = endpoint
        self.connections: set[KafkaConnection] = set()
        self.bound: list[Endpoint] = []
        #: accept failures, logged once when they start, then at most once a minute
        self.accept_failures = StorageFailureLog(log, "accepts", clock=trio.current_time)
        self.quotas: ConnectionQuotas = broker.connection_quotas
        #: SASL_PLAINTEXT and SASL_SSL: how its connections authenticate (a config error stops the broker here)
        self.sasl: SaslListenerSettings | None = (
            listener_sasl_settings(config, broker, endpoint) if is_sasl(endpoint) else None
        )
        #: how long a connection's handshake (TLS) may take; PLAINTEXT has none
        self.handshake_timeout_s = math.inf

    def _setting(self, name: str, default: Any) -> Any:
        try:
            return self.config[name]
        except Exception:  # a config built without the transport plugin's keys
            return default

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(self.endpoint.port, host=self.endpoint.host or None, backlog=512)
        dispatcher = Dispatcher(self.broker, self.config, self.endpoint)
        self.bound = []
        for listener in listeners:
            sockname = listener.socket.getsockname()
            self.bound.append(Endpoint(self.endpoint.name, sockname[0], sockname[1], self.endpoint.security_protocol))
        grace_s = int(self._setting(GRACE_KEY, DEFAULT_GRACE_MS)) / 1000
        stopping = trio.Event()
        async with trio.open_nursery() as outer:
            connections: trio.Nursery = await outer.start(self._host_connections, stopping, grace_s)
            try:
                async with trio.open_nursery() as acceptors:
                    for listener in listeners:
                        acceptors.start_soon(self._accept_loop, listener.socket, dispatcher, connections)
                    task_status.started(list(self.bound))
            finally:
                for listener in listeners:
                    listener.socket.close()
                stopping.set()

    async def _host_connections(
        self, stopping: trio.Event, grace_s: float, *, task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Own the connections in a shielded nursery: the broker's cancel reaches them only as
        ``stop_reading`` plus a deadline, so in-flight requests are answered before the close."""
        with trio.CancelScope(shield=True) as scope:
            async with trio.open_nursery() as nursery:
                task_status.started(nursery)
                await stopping.wait()
                scope.deadline = trio.current_time() + grace_s
                if self.connections:
                    log.info("listener %s: draining %d connection(s)", self.endpoint.name, len(self.connections))
                for conn in list(self.connections):
                    conn.stop_reading()

    async def _accept_loop(
        self, sock: trio.socket.SocketType, dispatcher: Dispatcher, connections: trio.Nursery
    ) -> None:
        where = f"listener {self.endpoint.name}"
        while True:
            try:
                client, address = await sock.accept()
            except OSError as exc:
                if exc.errno in ACCEPT_CAPACITY_ERRNOS:
                    self.accept_failures.failed(where, exc)  # retried every ACCEPT_BACKOFF_S
                    await trio.sleep(ACCEPT_BACKOFF_S)
                    continue
                raise
            if self.accept_failures.active:
                self.accept_failures.succeeded(where)
            host = str(address[0])
            peer = f"{host}:{address[1]}"
            if not await self.quotas.admit(
                client, host, peer=peer, where=where, nursery=connections, listener=self.endpoint.name
            ):
                continue
            self._tune(client)
            connections.start_soon(self._run_connection, self.connection(client, dispatcher, peer), host)

    def connection(self, client: trio.socket.SocketType, dispatcher: Dispatcher, peer: str) -> KafkaConnection:
        """The connection serving an accepted socket, over :meth:`transport_layer`'s bytes."""
        return KafkaConnection(
            client,
            dispatcher,
            peer=peer,
            max_request_bytes=int(self.config["socket.request.max.bytes"]),
            max_in_flight=int(self.config["queued.max.requests"]),
            idle_timeout_s=int(self.config["connections.max.idle.ms"]) / 1000,
            memory=self.broker.request_memory,
            transport=self.transport_layer(client),
            handshake_timeout_s=self.handshake_timeout_s,
            sasl=self.sasl,
        )

    def transport_layer(self, client: trio.socket.SocketType) -> TransportLayer | None:
        """How an accepted socket's bytes move: None is PLAINTEXT's; a TLS listener
        (:class:`~.ssl_transport.SslListener`) returns its ``SslTransportLayer``."""
        return None

    async def _run_connection(self, conn: KafkaConnection, host: str) -> None:
        self.connections.add(conn)
        self.quotas.track(self.endpoint.name, conn)
        log.debug("connection from %s on %s", conn.peer, self.endpoint.name)
        try:
            await conn.run()
        finally:
            self.connections.discard(conn)
            self.quotas.release(host, self.endpoint.name, conn)

    def _tune(self, client: trio.socket.SocketType) -> None:
        try:
            client.setsockopt(stdlib_socket.IPPROTO_TCP, stdlib_socket.TCP_NODELAY, 1)
            send_buffer = int(self.config["socket.send.buffer.bytes"])
            receive_buffer = int(self.config["socket.receive.buffer.bytes"])
            if send_buffer > 0:
                client.setsockopt(stdlib_socket.SOL_SOCKET, stdlib_socket.SO_SNDBUF, send_buffer)
            if receive_buffer > 0:
                client.setsockopt(stdlib_socket.SOL_SOCKET, stdlib_socket.SO_RCVBUF, receive_buffer)
        except OSError as exc:  # the peer may already be gone
            log.debug("cannot tune socket: %r", exc)


__all__ = ["ACCEPT_CAPACITY_ERRNOS", "GRACE_KEY", "TcpListener"]
