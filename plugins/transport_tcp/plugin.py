"""The transport_tcp plugin: Kafka's protocol over TCP (PLAINTEXT, and SASL_PLAINTEXT, whose
connections authenticate with SASL first: see odradek.security) and over TLS (SSL, SASL_SSL).

``listener(config, broker, endpoint)`` builds a :class:`~.server.TcpListener` for one configured
listener; ``connector(client_config)`` builds the :class:`~.client.TcpConnector` odradek's own
client uses. The ``ssl`` transport is the same listener and connection over an
``SslTransportLayer`` (:mod:`.ssl_transport`): record slices are encrypted from the file in
bounded chunks instead of sent with sendfile.
"""

from __future__ import annotations

from collections.abc import Sequence

from odradek.hookspecs import hookimpl
from odradek.interfaces import ConfigKey, TransportFactory

from .client import TcpConnector
from .server import DEFAULT_GRACE_MS, GRACE_KEY, TcpListener
from .ssl_transport import SSL_KEYS, SslConnector, SslListener


@hookimpl
def odradek_register_transports() -> Sequence[TransportFactory]:
    """The ``tcp`` transport for PLAINTEXT and SASL_PLAINTEXT listeners, the ``ssl`` transport for
    SSL and SASL_SSL ones."""
    return [
        TransportFactory(
            name="tcp",
            security_protocols=("PLAINTEXT", "SASL_PLAINTEXT"),
            listener=TcpListener,
            connector=TcpConnector,
            description="Kafka protocol over TCP; Fetch records sent with os.sendfile",
        ),
        TransportFactory(
            name="ssl",
            security_protocols=("SSL", "SASL_SSL"),
            listener=SslListener,
            connector=SslConnector,
            description="Kafka protocol over TLS; Fetch records read and encrypted in 64 KiB chunks",
        ),
    ]


@hookimpl
def odradek_config_keys() -> Sequence[ConfigKey]:
    """How long a stopping broker lets in-flight requests finish before closing connections;
    Kafka's ``ssl.*`` keys of SSL listeners."""
    return [
        ConfigKey(
            GRACE_KEY,
            int,
            DEFAULT_GRACE_MS,
            "On shutdown, let in-flight requests finish for this long before closing connections.",
            minimum=0,
        ),
        *SSL_KEYS,
    ]
