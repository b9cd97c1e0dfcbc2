"""The public building blocks for writing a transport plugin: ``odradek.transport``.

A transport plugin moves Kafka's size-prefixed frames over some byte stream (TCP, TLS, a Unix
socket, ...); everything about the Kafka protocol itself -- parsing request headers, decoding
requests, calling the broker core, encoding responses, ordering pipelined requests, sending
Fetch record slices with ``os.sendfile`` -- is shared, and is what this module offers, under
names that stay stable (the built-in ``tcp`` transport is built from exactly these pieces, which
live in ``odradek.plugins.transport_tcp``; import them from here, not from there).

Server side, in ``TransportFactory.listener(config, broker, endpoint)``:

- ``config`` is the broker's :class:`~odradek.config.Config`; ``broker`` is the broker core, a
  :class:`Broker` (``odradek.broker.core.BrokerCore``): a transport never calls it directly, it
  hands it to a :class:`Dispatcher`, one per listener;
- for every accepted stream socket, :func:`start_connection` counts it against the broker's
  connection limits (``max.connections``, ``max.connections.per.ip``: it waits for a slot, or
  closes a socket whose address holds its limit) and then, in the listener's nursery,
  :func:`serve_connection` runs a :class:`KafkaConnection` with the broker's limits
  (``socket.request.max.bytes``, ``queued.max.requests``, ``connections.max.idle.ms``, and the
  broker-wide ``queued.max.request.bytes`` through ``broker.request_memory``) until the peer
  leaves; neither raises for what a client does;
- ``serve(task_status=...)`` reports the bound :class:`Endpoint` list with
  ``task_status.started(...)`` once it accepts connections, then serves until cancelled.

Client side, in ``TransportFactory.connector(client_config)``: ``connect(host, port, timeout_s=)``
opens a stream and wraps it with :func:`client_connection`, a :class:`Connection` that sends and
receives whole frames (responses larger than ``receive.message.max.bytes`` are refused).

SASL (``SASL_PLAINTEXT``, ``SASL_SSL``) is layered on the same pieces and independent of how the
bytes move: on the server side pass ``sasl=listener_sasl_settings(config, broker, endpoint)``
(when ``is_sasl(endpoint)``) to :func:`connection_for` / :func:`serve_connection` /
:func:`start_connection` and each connection authenticates before serving requests; on the client
side run :func:`authenticate_client` on a new :class:`Connection` (with
``SaslClientSettings.from_config(client_config)``) before handing it out.

Both sides need a trio *socket* stream (``trio.SocketStream`` for clients, an accepted
``trio.socket`` socket for servers) of any family: the data path reads with ``recv_into`` and
sends record slices with ``os.sendfile``. docs/plugins.md has a complete example over a Unix
socket.

How a connection's bytes move is its *transport layer* (Kafka's ``TransportLayer``):
:class:`PlaintextTransportLayer` by default, :class:`SslTransportLayer` for TLS (the built-in
``ssl`` transport, docs/tls.md). ``KafkaConnection(..., transport=layer)`` runs the layer's
handshake before the first request and takes its ``principal``; a security layer that speaks
Kafka requests (SASL) works over either.
"""

from __future__ import annotations

from collections.abc import Mapping

import trio

from .broker.api import Broker
from .config import Config
from .interfaces import Connection, Connector, Endpoint, Listener, TransportFactory
from .plugins.transport_tcp.apis import Dispatcher, Handler, RequestContext, load_handlers
from .plugins.transport_tcp.client import DEFAULT_MAX_RESPONSE_BYTES, TcpConnection
from .plugins.transport_tcp.connection import KafkaConnection
from .plugins.transport_tcp.framing import FrameError, FrameReader, FrameTooLarge, send_frame
from .plugins.transport_tcp.transport_layer import (
    PlaintextTransportLayer,
    SslHandshakeError,
    SslTransportLayer,
    TransportLayer,
)
from .security.client import SaslClientSettings
from .security.client import authenticate as authenticate_client
from .security.settings import SaslListenerSettings, is_sasl, listener_sasl_settings

#: What :func:`client_connection` returns: frames over any connected ``trio.SocketStream``
#: (the tcp transport's client connection works for every socket family).
StreamConnection = TcpConnection


def connection_for(
    sock: trio.socket.SocketType,
    dispatcher: Dispatcher,
    config: Config,
    *,
    peer: str,
    sasl: SaslListenerSettings | None = None,
) -> KafkaConnection:
    """A :class:`KafkaConnection` serving Kafka requests on the accepted socket ``sock``, with the
    broker config's request size, pipelining and idle limits, its requests held within the
    broker's request memory (``queued.max.request.bytes``); ``peer`` names it in logs. With
    ``sasl`` the peer authenticates first."""
    return KafkaConnection(
        sock,
        dispatcher,
        peer=peer,
        max_request_bytes=int(config["socket.request.max.bytes"]),
        max_in_flight=int(config["queued.max.requests"]),
        idle_timeout_s=int(config["connections.max.idle.ms"]) / 1000,
        memory=dispatcher.broker.request_memory,
        sasl=sasl,
    )


async def serve_connection(
    sock: trio.socket.SocketType,
    dispatcher: Dispatcher,
    config: Config,
    *,
    peer: str,
    sasl: SaslListenerSettings | None = None,
) -> None:
    """Serve one accepted socket until the client leaves, then close it (start one task per
    connection in the listener's nursery). Client mistakes (bad framing, oversized or undecodable
    requests, unknown APIs, failed authentication) close this connection only, after earlier
    requests were answered."""
    await connection_for(sock, dispatcher, config, peer=peer, sasl=sasl).run()


async def start_connection(
    connections: trio.Nursery,
    sock: trio.socket.SocketType,
    dispatcher: Dispatcher,
    config: Config,
    *,
    address: str,
    peer: str,
    sasl: SaslListenerSettings | None = None,
) -> bool:
    """Serve the accepted socket ``sock`` in ``connections`` if the broker's connection limits
    let it in (call it from the accept loop: it waits while the broker holds ``max.connections``,
    which is what stops accepting, and while the listener holds its own). ``address`` is the
    client's address the per-address limit counts (one shared name for a family without
    addresses, such as Unix sockets). False when ``address`` already holds
    ``max.connections.per.ip``: the socket is closed, as Kafka does. A served connection may be
    closed to make room for an inter-broker one (see ``odradek.connection_quotas``)."""
    quotas = dispatcher.broker.connection_quotas
    listener = dispatcher.listener.name
    if not await quotas.admit(
        sock, address, peer=peer, where=f"listener {listener}", nursery=connections, listener=listener
    ):
        return False

    async def serve() -> None:
        connection = connection_for(sock, dispatcher, config, peer=peer, sasl=sasl)
        quotas.track(listener, connection)
        try:
            await connection.run()
        finally:
            quotas.release(address, listener, connection)

    connections.start_soon(serve)
    return True


def client_connection(stream: trio.SocketStream, client_config: Mapping[str, str] | None = None) -> Connection:
    """Wrap a connected stream for odradek's client: whole frames in and out, responses bounded
    by ``receive.message.max.bytes`` from ``client_config`` (what the connector was built with)."""
    limit = int((client_config or {}).get("receive.message.max.bytes", DEFAULT_MAX_RESPONSE_BYTES))
    connection: Connection = StreamConnection(stream, limit)
    return connection


__all__ = [
    "DEFAULT_MAX_RESPONSE_BYTES",
    "Broker",
    "Connection",
    "Connector",
    "Dispatcher",
    "Endpoint",
    "FrameError",
    "FrameReader",
    "FrameTooLarge",
    "Handler",
    "KafkaConnection",
    "Listener",
    "PlaintextTransportLayer",
    "RequestContext",
    "SaslClientSettings",
    "SaslListenerSettings",
    "SslHandshakeError",
    "SslTransportLayer",
    "StreamConnection",
    "TransportFactory",
    "TransportLayer",
    "authenticate_client",
    "client_connection",
    "connection_for",
    "is_sasl",
    "listener_sasl_settings",
    "load_handlers",
    "send_frame",
    "serve_connection",
    "start_connection",
]
