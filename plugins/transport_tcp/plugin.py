"""The transport_tcp plugin: Kafka's protocol over plain TCP (security protocols PLAINTEXT and
SASL_PLAINTEXT, whose connections authenticate with SASL first: see odradek.security).

``listener(config, broker, endpoint)`` builds a :class:`~.server.TcpListener` for one configured
listener; ``connector(client_config)`` builds the :class:`~.client.TcpConnector` odradek's own
client uses. A TLS transport would register another ``TransportFactory`` for ``SSL`` (and fall
back from sendfile to ``to_bytes()`` for record slices).
"""

from __future__ import annotations

from collections.abc import Sequence

from odradek.hookspecs import hookimpl
from odradek.interfaces import ConfigKey, TransportFactory

from .client import TcpConnector
from .server import DEFAULT_GRACE_MS, GRACE_KEY, TcpListener


@hookimpl
def odradek_register_transports() -> Sequence[TransportFactory]:
    """The ``tcp`` transport for PLAINTEXT and SASL_PLAINTEXT listeners."""
    return [
        TransportFactory(
            name="tcp",
            security_protocols=("PLAINTEXT", "SASL_PLAINTEXT"),
            listener=TcpListener,
            connector=TcpConnector,
            description="Kafka protocol over TCP; Fetch records sent with os.sendfile",
        )
    ]


@hookimpl
def odradek_config_keys() -> Sequence[ConfigKey]:
    """How long a stopping broker lets in-flight requests finish before closing connections."""
    return [
        ConfigKey(
            GRACE_KEY,
            int,
            DEFAULT_GRACE_MS,
            "On shutdown, let in-flight requests finish for this long before closing connections.",
            minimum=0,
        )
    ]
