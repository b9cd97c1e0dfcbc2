"""The client side of SASL: authenticates a fresh connection before anything else is sent.

OAUTHBEARER takes a token instead of a password: from ``oauth_cb`` (confluent-kafka's callback),
or, for development, an unsecured JWT built from ``sasl.oauthbearer.config``
(:mod:`.oauth_client`); a new one for every login and re-login.

Kafka's client sequence (SaslClientAuthenticator) over any frame connection (TCP, TLS):
SaslHandshake v1 naming the mechanism, then SaslAuthenticate requests carrying the mechanism's
tokens until it is done. Used by odradek's client (``security.protocol=SASL_PLAINTEXT``,
``sasl.mechanism``, ``sasl.username``, ``sasl.password``, librdkafka's names) and by the
broker's own connections to other brokers. A refusal raises :class:`AuthenticationFailed`,
a non-retriable :class:`~odradek.client.connection.NetworkError`: the connect fails, and a
producer or admin call fails with SASL_AUTHENTICATION_FAILED instead of retrying a password
that will not get better.

**Re-authentication** (KIP-368): a broker with ``connections.max.reauth.ms`` says in its last
SaslAuthenticate answer how long the session lasts. :func:`authenticate` returns that lifetime,
and the connection (:class:`~odradek.client.connection.BrokerConnection`) runs the same
exchange again as ordinary requests between its others, at a random point between 85% and 95%
of it (the Java client's window), so the broker never has to close it; :func:`reauthenticate`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import trio

from ..client.connection import NetworkError
from ..errors import ErrorCode
from ..interfaces import Connection
from ..protocol import ApiKey, decode_response, encode_request, request_type
from .mechanism import SaslClient, SaslError, SaslMechanism
from .oauth_client import token_provider_from_config
from .oauth_settings import call_token_provider
from .oauthbearer import MECHANISM, OAuthBearerSaslClient, TokenProvider

HANDSHAKE_VERSION = 1
AUTHENTICATE_VERSION = 1


class AuthenticationFailed(NetworkError):
    """The broker refused the credentials or the mechanism (not retriable)."""

    code = ErrorCode.SASL_AUTHENTICATION_FAILED


@dataclass(frozen=True, slots=True)
class SaslClientSettings:
    """``sasl.mechanism`` with ``sasl.username`` / ``sasl.password``, or for OAUTHBEARER the
    source of its tokens (``token_provider``, called for every login and re-login)."""

    mechanism: str
    username: str
    password: str
    token_provider: TokenProvider | None = None

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> SaslClientSettings | None:
        """The SASL settings of a client config; None unless ``security.protocol`` is SASL_*."""
        if str(config.get("security.protocol", "PLAINTEXT")).upper() not in ("SASL_PLAINTEXT", "SASL_SSL"):
            return None
        mechanism = str(config.get("sasl.mechanisms", "") or config.get("sasl.mechanism", "") or "PLAIN").upper()
        provider = token_provider_from_config(config) if mechanism == MECHANISM else None
        return cls(mechanism, str(config.get("sasl.username", "")), str(config.get("sasl.password", "")), provider)

    async def client_for(self, available: Mapping[str, SaslMechanism]) -> SaslClient:
        """A new client for one exchange (OAUTHBEARER: with a token fresh from the provider)."""
        if self.token_provider is not None:
            try:
                token = await call_token_provider(self.token_provider)
            except Exception as exc:  # the application's callback: its failure is this login's
                raise AuthenticationFailed(f"SASL/OAUTHBEARER: the token provider failed: {exc}") from exc
            return OAuthBearerSaslClient(token)
        return self.new_client(available)

    def new_client(self, available: Mapping[str, SaslMechanism]) -> SaslClient:
        mechanism = available.get(self.mechanism)
        if mechanism is None or mechanism.client is None:
            raise AuthenticationFailed(
                f"sasl.mechanism {self.mechanism} has no client (available: "
                f"{', '.join(sorted(n for n, m in available.items() if m.client is not None))})",
                code=ErrorCode.UNSUPPORTED_SASL_MECHANISM,
            )
        return mechanism.client(self.username, self.password)


#: sends one request of the exchange and returns its decoded response
Call = Callable[..., Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class SaslSession:
    """An authenticated connection's session: how to log in again, and for how long it lasts
    (``lifetime_ms`` 0: for ever)."""

    settings: SaslClientSettings
    available: Mapping[str, SaslMechanism]
    lifetime_ms: int


async def authenticate(
    connection: Connection,
    settings: SaslClientSettings,
    available: Mapping[str, SaslMechanism],
    *,
    client_id: str,
    client: SaslClient | None = None,
) -> int:
    """Run the SASL exchange on a fresh ``connection`` (with ``client`` when the caller already
    made it, e.g. outside a timeout that should not count the token fetch); the session lifetime
    the broker gave (ms, 0: no limit). Raises AuthenticationFailed."""
    correlation = 0

    async def call(api_key: int, version: int, **fields: object) -> object:
        nonlocal correlation
        correlation += 1
        request = request_type(api_key, version)(**fields)
        await connection.send_frame(encode_request(request, correlation_id=correlation, client_id=client_id))
        try:
            frame = await connection.receive_frame()
        except (ConnectionError, trio.BrokenResourceError) as exc:
            raise AuthenticationFailed(f"the broker closed the connection during SASL authentication: {exc}") from exc
        _, response = decode_response(api_key, version, frame)
        return response

    return await exchange(call, settings, available, client)


async def reauthenticate(call: Call, session: SaslSession) -> int:
    """Renew ``session`` on a connection already serving requests (KIP-368): the same
    exchange, through ``call`` (the connection's request method); the new lifetime."""
    return await exchange(call, session.settings, session.available)


async def exchange(
    call: Call, settings: SaslClientSettings, available: Mapping[str, SaslMechanism], client: SaslClient | None = None
) -> int:
    """SaslHandshake v1 then SaslAuthenticate until the mechanism is done (``client``: a new one
    from ``settings`` unless given); the session lifetime of the last answer (ms)."""
    if client is None:
        client = await settings.client_for(available)
    handshake = await call(ApiKey.SASL_HANDSHAKE, HANDSHAKE_VERSION, mechanism=settings.mechanism)
    code = ErrorCode(int(handshake.error_code))
    if code != ErrorCode.NONE:
        offered = ", ".join(handshake.mechanisms)
        raise AuthenticationFailed(
            f"the broker does not enable SASL mechanism {settings.mechanism} (it enables: {offered or 'none'})",
            code=ErrorCode.UNSUPPORTED_SASL_MECHANISM if code == ErrorCode.UNSUPPORTED_SASL_MECHANISM else code,
        )
    token: bytes | None = client.initial_response()
    lifetime_ms = 0
    while token is not None:
        answer = await call(ApiKey.SASL_AUTHENTICATE, AUTHENTICATE_VERSION, auth_bytes=token)
        code = ErrorCode(int(answer.error_code))
        if code != ErrorCode.NONE:
            raise AuthenticationFailed(
                answer.error_message or code.name,
                code=code,
            )
        lifetime = answer.session_lifetime
        lifetime_ms = int(lifetime.total_seconds() * 1000) if lifetime is not None else 0
        try:
            token = client.evaluate_challenge(bytes(answer.auth_bytes))
        except SaslError as exc:
            raise AuthenticationFailed(f"SASL/{settings.mechanism}: {exc}") from exc
    return max(0, lifetime_ms)


__all__ = [
    "AuthenticationFailed",
    "Call",
    "SaslClientSettings",
    "SaslSession",
    "authenticate",
    "exchange",
    "reauthenticate",
]
