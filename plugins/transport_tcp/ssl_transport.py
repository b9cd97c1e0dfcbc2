"""The TLS transport: Kafka's protocol over TLS (security protocol SSL), server and client side.

It is the tcp transport with an :class:`~.transport_layer.SslTransportLayer` under each
connection: the same listener (accept loop, connection limits, graceful shutdown), the same
:class:`~.connection.KafkaConnection` (framing, pipelining, request memory), the same client
connection. What changes:

- each accepted connection runs the TLS handshake before its first request is read, within
  ``ssl.handshake.timeout.ms`` (an odradek key; Kafka bounds a stalled handshake only by
  ``connections.max.idle.ms``). A client that does not speak TLS, sends garbage, stalls, or
  presents a certificate the listener does not trust costs one INFO line and its socket;
- the connection's principal is the client certificate's subject, mapped by
  ``ssl.principal.mapping.rules`` (``User:ANONYMOUS`` without a certificate);
- Fetch record slices are read from the segment and encrypted in bounded chunks instead of
  ``os.sendfile`` (TLS needs the bytes in user space; Kafka's SslTransportLayer does the same).

Every ``ssl.*`` key may be set per listener as ``listener.name.<listener>.ssl.*`` (Kafka's
prefix, the listener name in lower case), which wins over the broker-wide key.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import trio

from odradek.config import Config, ConfigError
from odradek.interfaces import ConfigKey, Endpoint
from odradek.security.client import SaslClientSettings

from .client import DEFAULT_MAX_RESPONSE_BYTES, TcpConnection, sasl_login
from .server import TcpListener
from .ssl_factory import client_context, server_context
from .ssl_principal import SslPrincipalMapper
from .transport_layer import SslHandshakeError, SslTransportLayer

log = logging.getLogger("odradek.transport.ssl")

HANDSHAKE_TIMEOUT_KEY = "ssl.handshake.timeout.ms"
DEFAULT_HANDSHAKE_TIMEOUT_MS = 10_000

#: Kafka's broker ``ssl.*`` keys (Kafka's defaults, except ``ssl.keystore.type`` and
#: ``ssl.truststore.type``: empty means "what the file holds", as JKS, Kafka's default, is refused)
SSL_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey(
        "ssl.keystore.type",
        str,
        "",
        "Keystore format: PKCS12 or PEM (JKS is refused); empty: PEM if the file is PEM text, else PKCS12.",
    ),
    ConfigKey("ssl.keystore.location", str, "", "The keystore file: the listener's private key and certificate chain."),
    ConfigKey("ssl.keystore.password", str, "", "Password of a PKCS12 keystore.", extra={"sensitive": True}),
    ConfigKey(
        "ssl.key.password",
        str,
        "",
        "Password of the private key of a PEM keystore (file or ssl.keystore.key), if it is encrypted.",
        extra={"sensitive": True},
    ),
    ConfigKey(
        "ssl.keystore.certificate.chain",
        str,
        "",
        "The certificate chain in PEM, inline (KIP-651; with ssl.keystore.key, instead of ssl.keystore.location).",
    ),
    ConfigKey(
        "ssl.keystore.key",
        str,
        "",
        "The private key in PEM (PKCS#8, optionally encrypted with ssl.key.password), inline (KIP-651).",
        extra={"sensitive": True},
    ),
    ConfigKey("ssl.truststore.type", str, "", "Truststore format: PKCS12 or PEM; empty: PEM if the file is PEM text."),
    ConfigKey(
        "ssl.truststore.location",
        str,
        "",
        "CAs trusted to sign client certificates (and, for inter-broker connections, broker certificates); "
        "empty: ssl.truststore.certificates, else the system's CAs.",
    ),
    ConfigKey("ssl.truststore.password", str, "", "Password of a PKCS12 truststore.", extra={"sensitive": True}),
    ConfigKey("ssl.truststore.certificates", str, "", "Trusted CA certificates in PEM, inline (KIP-651)."),
    ConfigKey(
        "ssl.client.auth",
        str,
        "none",
        "Client certificates: none (not asked), requested (verified if sent), required (mutual TLS).",
        choices=("none", "requested", "required"),
    ),
    ConfigKey("ssl.enabled.protocols", list, ["TLSv1.2", "TLSv1.3"], "TLS versions accepted: TLSv1.2 and/or TLSv1.3."),
    ConfigKey("ssl.protocol", str, "TLSv1.3", "TLS, TLSv1.3 or TLSv1.2 (TLSv1.2 caps the version there)."),
    ConfigKey(
        "ssl.cipher.suites",
        list,
        [],
        "TLS 1.2 cipher suites (IANA/Java or OpenSSL names); empty: OpenSSL's defaults. "
        "TLS 1.3 suites cannot be restricted from Python.",
    ),
    ConfigKey(
        "ssl.principal.mapping.rules",
        str,
        "DEFAULT",
        "Client certificate DN -> principal name (KIP-371): DEFAULT, or RULE:pattern/replacement/[LU], "
        "comma separated.",
    ),
    ConfigKey(
        "ssl.endpoint.identification.algorithm",
        str,
        "https",
        "For the broker's own connections to other brokers: https checks the broker certificate names the host; "
        "empty: chain only.",
    ),
    ConfigKey(
        HANDSHAKE_TIMEOUT_KEY,
        int,
        DEFAULT_HANDSHAKE_TIMEOUT_MS,
        "How long a client may take to complete the TLS handshake before its connection is closed (odradek).",
        minimum=1,
    ),
)
SSL_KEY_NAMES = tuple(k.name for k in SSL_KEYS if k.name != HANDSHAKE_TIMEOUT_KEY)


def listener_ssl_settings(config: Config, listener: str) -> dict[str, Any]:
    """The ``ssl.*`` settings of ``listener``: ``listener.name.<listener>.ssl.*`` when set,
    else the broker-wide key (Kafka's rule)."""
    return {name: config.for_listener(listener, name) for name in SSL_KEY_NAMES}


class SslListener(TcpListener):
    """Serves the Kafka protocol over TLS on one listener (``SSL://host:port``). Its TLS config
    is checked, and its keystore loaded, when it is built: a bad one stops the broker's start
    with a :class:`~odradek.config.ConfigError` naming the key."""

    def __init__(self, config: Config, broker: Any, endpoint: Endpoint) -> None:
        super().__init__(config, broker, endpoint)
        settings = listener_ssl_settings(config, endpoint.name)
        self.context = server_context(settings)
        try:
            self.mapper = SslPrincipalMapper(str(settings["ssl.principal.mapping.rules"]))
        except ValueError as exc:
            raise ConfigError(f"invalid value for 'ssl.principal.mapping.rules': {exc}") from None
        self.handshake_timeout_s = int(config.for_listener(endpoint.name, HANDSHAKE_TIMEOUT_KEY)) / 1000

    def transport_layer(self, client: trio.socket.SocketType) -> SslTransportLayer:
        return SslTransportLayer(client, self.context, server_side=True, principal_builder=self.mapper.principal)


class SslConnector:
    """Opens TLS connections to brokers for odradek's client, or for a broker reaching another.

    ``client_config`` takes librdkafka's names (``ssl.ca.location``, ``ssl.certificate.location``,
    ``ssl.key.location``, ``ssl.key.password``, ``ssl.endpoint.identification.algorithm``) or the
    Java client's (``ssl.truststore.*``, ``ssl.keystore.*``: what a broker passes for its
    inter-broker listener). The context is built once, so a bad setting fails here, naming it."""

    def __init__(self, client_config: Mapping[str, Any] | None = None) -> None:
        config = dict(client_config or {})
        self.max_response_bytes = int(config.get("receive.message.max.bytes", DEFAULT_MAX_RESPONSE_BYTES))
        self.context = client_context(config)
        self.client_id = str(config.get("client.id", "odradek"))
        #: ``security.protocol=SASL_SSL``: each connection logs in once its TLS handshake is done
        self.sasl = SaslClientSettings.from_config(config)

    async def connect(self, host: str, port: int, *, timeout_s: float) -> TcpConnection:
        with trio.fail_after(timeout_s):
            stream = await trio.open_tcp_stream(host, port)
            try:
                layer = SslTransportLayer(stream.socket, self.context, server_side=False, server_hostname=host)
                await layer.handshake()
            except SslHandshakeError as exc:
                await stream.aclose()
                raise ConnectionError(f"TLS handshake with {host}:{port} failed: {exc}") from exc
            except BaseException:
                await stream.aclose()
                raise
        connection = TcpConnection(stream, self.max_response_bytes, layer)
        await sasl_login(connection, self.sasl, client_id=self.client_id, timeout_s=timeout_s)
        return connection


def broker_client_settings(config: Config, listener: str) -> dict[str, Any]:
    """What a broker's own connections to other brokers' ``listener`` use: that listener's
    keystore (its certificate, for a listener that requires client certificates), truststore
    and ``ssl.endpoint.identification.algorithm``, in the Java client's names."""
    return listener_ssl_settings(config, listener)


__all__ = [
    "HANDSHAKE_TIMEOUT_KEY",
    "SSL_KEYS",
    "SslConnector",
    "SslListener",
    "broker_client_settings",
    "listener_ssl_settings",
]
