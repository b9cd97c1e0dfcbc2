"""The client side of the TCP transport: what odradek's own client uses to reach brokers.

A ``TcpConnection`` moves frames only (``send_frame`` adds the size prefix, ``receive_frame``
strips it); requests, correlation ids and versions are the client's business, through the same
:mod:`odradek.protocol` codec the broker uses. With ``security.protocol=SASL_PLAINTEXT``
(``sasl.mechanism``, ``sasl.username``, ``sasl.password``) a connection is authenticated before
``connect`` returns it (:func:`odradek.security.client.authenticate`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import trio

from odradek.security.client import SaslClientSettings, SaslSession, authenticate

from .framing import FrameError, FrameReader
from .transport_layer import PlaintextTransportLayer, TransportLayer, write_frame

#: librdkafka's default receive.message.max.bytes
DEFAULT_MAX_RESPONSE_BYTES = 100_000_000


class TcpConnection:
    """One TCP connection to a broker. Sends are serialised so frames never interleave.

    ``layer`` moves the bytes (PLAINTEXT's when not given; an SSL connection passes its
    ``SslTransportLayer``, whose handshake is done already)."""

    def __init__(self, stream: trio.SocketStream, max_response_bytes: int, layer: TransportLayer | None = None) -> None:
        self._stream = stream
        self._sock = stream.socket
        self._layer: TransportLayer = layer if layer is not None else PlaintextTransportLayer(self._sock)
        self._reader = FrameReader(self._sock, max_response_bytes, layer=self._layer)
        self._send_lock = trio.StrictFIFOLock()
        self._receive_lock = trio.StrictFIFOLock()
        #: the SASL session of an authenticated connection (None: not SASL), which the
        #: connection renews before it expires (KIP-368)
        self.sasl_session: SaslSession | None = None

    async def send_frame(self, frame: bytes) -> None:
        async with self._send_lock:
            await write_frame(self._layer, frame)

    async def receive_frame(self) -> bytes:
        """The next response frame; raises ``ConnectionError`` when the broker closed the connection."""
        async with self._receive_lock:
            try:
                frame = await self._reader.read_frame()
            except FrameError as exc:
                raise ConnectionError(f"broken response framing: {exc}") from exc
        if frame is None:
            raise ConnectionError("connection closed by the broker")
        return bytes(frame)

    async def aclose(self) -> None:
        await self._stream.aclose()


class TcpConnector:
    """Opens ``TcpConnection``s; ``client_config`` may set ``receive.message.max.bytes``, and
    the SASL settings that authenticate each connection (``security.protocol=SASL_PLAINTEXT``)."""

    def __init__(self, client_config: Mapping[str, str] | None = None) -> None:
        config = client_config or {}
        self.max_response_bytes = int(config.get("receive.message.max.bytes", DEFAULT_MAX_RESPONSE_BYTES))
        self.client_id = str(config.get("client.id", "odradek"))
        self.sasl = SaslClientSettings.from_config(config)

    async def connect(self, host: str, port: int, *, timeout_s: float) -> TcpConnection:
        with trio.fail_after(timeout_s):
            stream = await trio.open_tcp_stream(host, port)
        connection = TcpConnection(stream, self.max_response_bytes)
        await sasl_login(connection, self.sasl, client_id=self.client_id, timeout_s=timeout_s)
        return connection


async def sasl_login(
    connection: TcpConnection, sasl: SaslClientSettings | None, *, client_id: str, timeout_s: float
) -> None:
    """Authenticate a new connection with ``sasl`` (``security.protocol`` SASL_PLAINTEXT or
    SASL_SSL; None: nothing to do) within ``timeout_s`` (an OAUTHBEARER token is fetched before:
    its endpoint's own timeouts bound it); a failed login closes it and raises."""
    if sasl is None:
        return
    available = _mechanisms()
    try:
        # the client (OAUTHBEARER: its token) first, outside the login's timeout: a token endpoint
        # has timeouts and retries of its own, and its error says more than a timeout would
        client = await sasl.client_for(available)
        with trio.fail_after(timeout_s):
            lifetime_ms = await authenticate(connection, sasl, available, client_id=client_id, client=client)
    except BaseException:
        await connection.aclose()
        raise
    # what the connection needs to renew the session before the broker ends it (KIP-368)
    connection.sasl_session = SaslSession(sasl, available, lifetime_ms)


def _mechanisms() -> dict[str, Any]:
    """The SASL mechanisms of the loaded plugins (their client sides)."""
    from odradek.manager import default_plugins

    return dict(default_plugins().sasl_mechanisms())


__all__ = ["TcpConnection", "TcpConnector", "sasl_login"]
