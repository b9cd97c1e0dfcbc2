"""SASL/OAUTHBEARER (RFC 7628, KIP-255) as Kafka speaks it: the exchange, sans-IO.

The client sends one message, the GS2 header, ``auth=Bearer <token>`` and any SASL extensions
(KIP-342), each key=value pair ended by ``\\x01``, and a final ``\\x01``::

    n,[a=<authzid>],\\x01auth=Bearer <token>\\x01[<key>=<value>\\x01 ...]\\x01

The server hands the token to its validator (:class:`TokenValidator`: the unsecured one of
:mod:`.oauth_unsecured` or the JWKS one of :mod:`.oauth_jwt`). A valid token completes the
exchange with an empty answer; the principal is the token's. An invalid one is answered, as Kafka's
``OAuthBearerSaslServer`` does, with a JSON error (``{"status":"invalid_token"}``, with the missing
scope for ``insufficient_scope``) as a challenge; the client acknowledges with a lone ``\\x01`` and
the server then fails the exchange with that JSON as the authentication error the client reports.
Why the token was refused is logged, never sent (Kafka does the same).

A message that does not parse fails with Kafka's generic message. The token's expiry
(:attr:`OAuthBearerSaslServer.credential_expires_ms`) bounds the session (KIP-368).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from .mechanism import SaslAuthenticationError, SaslError

log = logging.getLogger("odradek.security.oauthbearer")

MECHANISM = "OAUTHBEARER"
LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
SEPARATOR = "\x01"
AUTH_KEY = "auth"

_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_KEY = re.compile(r"[A-Za-z]+")
_VALUE = re.compile(r"[\x21-\x7e \t\r\n]+")
_KVPAIRS = r"(?:[A-Za-z]+=[\x21-\x7e \t\r\n]+\x01)*"
_INITIAL_RESPONSE = re.compile(rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,\x01(?P<kvpairs>{_KVPAIRS})\x01")
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_~+/.a-zA-Z0-9]+=*)")


class TokenValidationError(Exception):
    """A token was refused: ``explanation`` is logged; ``status`` and ``scope`` go to the
    client in Kafka's JSON error."""

    def __init__(self, explanation: str, *, status: str = "invalid_token", scope: str | None = None) -> None:
        super().__init__(explanation)
        self.explanation = explanation
        self.status = status
        self.scope = scope


@dataclass(frozen=True, slots=True)
class OAuthBearerToken:
    """A validated token (Kafka's ``OAuthBearerToken``): who it names, its scope, its lifetime."""

    value: str
    principal_name: str
    scope: frozenset[str]
    #: when it expires, ms since the epoch
    lifetime_ms: int
    start_time_ms: int | None = None


class TokenValidator(Protocol):
    """Checks a token's value; raises :class:`TokenValidationError` when it is not acceptable."""

    async def validate(self, token: str) -> OAuthBearerToken: ...


@dataclass(frozen=True, slots=True)
class ClientInitialResponse:
    """The client's first message, parsed."""

    token: str
    authorization_id: str = ""
    extensions: Mapping[str, str] = field(default_factory=dict)

    def encode(self) -> bytes:
        validate_extensions(self.extensions)
        authzid = f"a={_saslname(self.authorization_id)}" if self.authorization_id else ""
        pairs = "".join(f"{k}={v}{SEPARATOR}" for k, v in self.extensions.items())
        return f"n,{authzid},{SEPARATOR}{AUTH_KEY}=Bearer {self.token}{SEPARATOR}{pairs}{SEPARATOR}".encode()


def _saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def validate_extensions(extensions: Mapping[str, str]) -> None:
    """SASL extension names are letters, values printable ASCII (KIP-342); ``auth`` is reserved."""
    for key, value in extensions.items():
        if key == AUTH_KEY:
            raise SaslError(f"SASL extension name {AUTH_KEY!r} is reserved")
        if not _KEY.fullmatch(key):
            raise SaslError(f"SASL extension name {key!r} is invalid: letters only")
        if not _VALUE.fullmatch(value):
            raise SaslError(f"SASL extension {key!r} has an invalid value: printable ASCII only")


def parse_client_initial_response(message: bytes) -> ClientInitialResponse:
    """The client's first message; :class:`SaslError` (Kafka's messages) when it is malformed."""
    try:
        text = message.decode()
    except UnicodeDecodeError:
        raise SaslError("Invalid OAUTHBEARER client first message: not UTF-8") from None
    found = _INITIAL_RESPONSE.fullmatch(text)
    if found is None:
        raise SaslError("Invalid OAUTHBEARER client first message")
    properties: dict[str, str] = {}
    for pair in found.group("kvpairs").split(SEPARATOR):
        if pair:
            key, _, value = pair.partition("=")
            properties[key] = value
    auth = properties.pop(AUTH_KEY, None)
    if auth is None:
        raise SaslError("Invalid OAUTHBEARER client first message: 'auth' not specified")
    validate_extensions(properties)
    bearer = _AUTH.fullmatch(auth)
    if bearer is None:
        raise SaslError("Invalid OAUTHBEARER client first message: invalid 'auth' format")
    if bearer.group("scheme").lower() != "bearer":
        raise SaslError(f"Invalid scheme in OAUTHBEARER client first message: {bearer.group('scheme')}")
    authzid = (found.group("authzid") or "").replace("=2C", ",").replace("=3D", "=")
    return ClientInitialResponse(bearer.group("token"), authzid, properties)


def json_error(error: TokenValidationError) -> str:
    """Kafka's JSON error challenge for a refused token (the byte-for-byte form clients log)."""
    text = f'{{"status":{json.dumps(error.status)}'
    if error.scope is not None:
        text += f', "scope":{json.dumps(error.scope)}'
    return text + "}"


class OAuthBearerSaslServer:
    """The server side of one OAUTHBEARER exchange (Kafka's ``OAuthBearerSaslServer``)."""

    mechanism_name = MECHANISM

    def __init__(self, validator: TokenValidator) -> None:
        self._validator = validator
        self._complete = False
        self._error: str | None = None
        self.authorization_id: str | None = None
        self.token: OAuthBearerToken | None = None
        #: the client's SASL extensions (validated: every one is accepted, as Kafka's validators do)
        self.extensions: Mapping[str, str] = {}

    @property
    def complete(self) -> bool:
        return self._complete

    @property
    def credential_expires_ms(self) -> int | None:
        """When the token expires (ms since the epoch), which ends the session (KIP-368)."""
        return self.token.lifetime_ms if self.token is not None else None

    async def evaluate_response(self, token: bytes) -> bytes:
        if self._complete:
            raise SaslError("OAUTHBEARER authentication already completed")
        if token == SEPARATOR.encode() and self._error is not None:
            raise SaslAuthenticationError(self._error)  # the client acknowledged our error
        if self._error is not None:
            raise SaslError("OAUTHBEARER client did not acknowledge the error with %x01")
        response = parse_client_initial_response(token)
        try:
            validated = await self._validator.validate(response.token)
        except TokenValidationError as exc:
            self._error = json_error(exc)
            log.info("OAUTHBEARER token refused: %s", exc.explanation)
            return self._error.encode()
        if response.authorization_id and response.authorization_id != validated.principal_name:
            raise SaslAuthenticationError(
                f"Authentication failed: Client requested an authorization id ({response.authorization_id}) "
                f"that is different from the token's principal name ({validated.principal_name})"
            )
        self.token = validated
        self.extensions = dict(response.extensions)
        self.authorization_id = validated.principal_name
        self._complete = True
        return b""


@dataclass(frozen=True, slots=True)
class BearerToken:
    """What a client's token provider returns: the token, when it expires (seconds since the
    epoch, as confluent-kafka's ``oauth_cb``), its principal and SASL extensions."""

    value: str
    expires_at_s: float
    principal: str = ""
    extensions: Mapping[str, str] = field(default_factory=dict)


#: a client's source of tokens: called for every (re-)authentication
TokenProvider = Callable[[], BearerToken | Awaitable[BearerToken]]


class OAuthBearerSaslClient:
    """The client side: the initial response, then either the server's empty answer or its JSON
    error, acknowledged with ``\\x01`` (the server then reports the failure)."""

    def __init__(self, token: BearerToken) -> None:
        self.token = token

    def initial_response(self) -> bytes:
        return ClientInitialResponse(self.token.value, "", dict(self.token.extensions)).encode()

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        if not challenge:
            return None
        return SEPARATOR.encode()


__all__ = [
    "AUTH_KEY",
    "LOGIN_MODULE",
    "MECHANISM",
    "SEPARATOR",
    "BearerToken",
    "ClientInitialResponse",
    "OAuthBearerSaslClient",
    "OAuthBearerSaslServer",
    "OAuthBearerToken",
    "TokenProvider",
    "TokenValidationError",
    "TokenValidator",
    "json_error",
    "parse_client_initial_response",
    "validate_extensions",
]
