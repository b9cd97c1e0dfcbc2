"""The SASL mechanism interface: what a mechanism plugin offers and what the authenticator calls.

A mechanism is a :class:`SaslMechanism` registered through the ``odradek_register_sasl_mechanisms``
hook (PLAIN and SCRAM-SHA-256/512 are registered by the built-in ``sasl`` plugin the same way).
For every authentication the broker calls ``server(context)`` for a fresh :class:`SaslServer`,
hands it the client's tokens one by one, and reads ``authorization_id`` once it is ``complete``:
the connection's principal becomes ``User:<authorization_id>``. ``check(context)`` runs once per
listener at start-up, so a mechanism that cannot work (PLAIN without users) stops the broker
with a config error instead of failing every client. ``client(username, password)`` is the client
side, for odradek's own connections (clients, replica fetchers); None when there is none.

Two errors end an exchange, as in Kafka: :class:`SaslAuthenticationError` carries a message
meant for the client (``Authentication failed: Invalid username or password``);
:class:`SaslError` is logged, and the client is told only Kafka's generic
``Authentication failed during authentication due to invalid credentials with SASL mechanism X``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from .jaas import JaasConfigEntry


class SaslError(Exception):
    """An exchange failed; the client gets Kafka's generic message, the log gets this one."""


class SaslAuthenticationError(SaslError):
    """An exchange failed with a message the client is told (Kafka's ``SaslAuthenticationException``)."""


@runtime_checkable
class SaslServer(Protocol):
    """The server side of one exchange (Java's ``javax.security.sasl.SaslServer``)."""

    @property
    def mechanism_name(self) -> str: ...

    @property
    def complete(self) -> bool:
        """True once the client is authenticated."""
        ...

    #: the authenticated user, once ``complete``
    authorization_id: str | None

    async def evaluate_response(self, token: bytes) -> bytes:
        """The challenge (or final server message, maybe empty) for the client's ``token``;
        raises :class:`SaslError` when authentication fails."""
        ...


@runtime_checkable
class SaslClient(Protocol):
    """The client side of one exchange."""

    def initial_response(self) -> bytes: ...

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        """The next token for the server's ``challenge``; None when the exchange is done."""
        ...


#: Looks up a user's SCRAM credential for a mechanism (the metadata store, see ``.credentials``).
CredentialLookup = Callable[[str, Any], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class SaslServerContext:
    """What a mechanism's server gets: where it runs and the config it may use."""

    #: the listener's name (``CLIENTS``)
    listener: str
    #: the mechanism's name (``PLAIN``)
    mechanism: str
    #: the JAAS login module configured for this listener and mechanism, None when none is
    jaas: JaasConfigEntry | None
    #: SCRAM credentials from the metadata store (``credential_for(user, ScramMechanism)``)
    credential_for: CredentialLookup
    #: the broker's config (a mechanism's own keys come from ``odradek_config_keys``)
    config: Any = None


@dataclass(frozen=True, slots=True)
class SaslMechanism:
    """A SASL mechanism a plugin offers (``odradek_register_sasl_mechanisms``)."""

    #: its SASL name, upper case (``PLAIN``, ``SCRAM-SHA-256``, ``OAUTHBEARER``)
    name: str
    #: a new server for one exchange
    server: Callable[[SaslServerContext], SaslServer]
    #: raises ``odradek.config.ConfigError`` at start-up when the listener cannot use it
    check: Callable[[SaslServerContext], None] | None = None
    #: a new client for one exchange with these credentials; None: no client side
    client: Callable[[str, str], SaslClient] | None = None
    description: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: built once per listener at start-up: the factory of its fresh servers, for a mechanism
    #: with per-listener state shared by its exchanges (OAUTHBEARER's JWKS cache); None: ``server``
    listener_servers: Callable[[SaslServerContext], Callable[[], SaslServer]] | None = None


__all__ = [
    "CredentialLookup",
    "SaslAuthenticationError",
    "SaslClient",
    "SaslError",
    "SaslMechanism",
    "SaslServer",
    "SaslServerContext",
]
