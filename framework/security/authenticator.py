"""The server's SASL state machine for one connection (Kafka's ``SaslServerAuthenticator``).

Sans-IO: the connection reads a frame, hands it to :meth:`SaslServerAuthenticator.receive` and
does what the returned :class:`SaslStep` says (write a frame, wait, close); the authenticator
never touches a socket, so it works the same over TCP and TLS and is tested without either.

The states, as Kafka's:

- ``HANDSHAKE_OR_VERSIONS_REQUEST``: ApiVersions (answered, once) or SaslHandshake;
- ``HANDSHAKE_REQUEST``: SaslHandshake (after ApiVersions);
- ``AUTHENTICATE``: SaslAuthenticate requests (after a v1 handshake);
- ``RAW_TOKENS``: after a v0 handshake the client's frames are bare SASL tokens and the answers
  bare challenges, without Kafka headers (old clients, KIP-43);
- ``COMPLETE``: the connection serves Kafka requests as ``User:<authorization id>``;
- ``FAILED``: closed.

**Re-authentication** (KIP-368). With ``connections.max.reauth.ms`` > 0 for the mechanism, or
a credential that expires (an OAUTHBEARER token), the final SaslAuthenticate answer carries the
session lifetime (the smaller of the two); the client re-authenticates on the
same connection before it ends (SaslHandshake v1 and SaslAuthenticate between its requests),
through a fresh authenticator built with ``reauthenticating`` = the connection's principal and
mechanism. It starts in ``HANDSHAKE_REQUEST``; the mechanism must be the same (Kafka: "SASL
mechanism 'X' requested by client is not supported for re-authentication of mechanism 'Y'") and
so must the principal ("Cannot change principals during re-authentication from User.a:
User.b"); either failure closes the connection. The connection closes a session that expired
without being renewed (:mod:`odradek.plugins.transport_tcp.connection`).

Any other request before authentication closes the connection (Kafka: "Unexpected Kafka request
of type X during SASL handshake"); an unknown mechanism gets UNSUPPORTED_SASL_MECHANISM with the
enabled list, a failed exchange SASL_AUTHENTICATION_FAILED with Kafka's message (nothing, in raw
mode); both close, after ``connection.failed.authentication.delay.ms`` (the answer is written
after the delay, as Kafka's delayed close does, so a password guesser waits for every guess).
A token that does not parse fails the exchange like a wrong password; nothing a client sends
raises out of :meth:`receive`.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ErrorCode, KafkaError, OdradekError
from ..principal import USER_TYPE, KafkaPrincipal
from ..protocol import (
    ApiKey,
    RequestHeader,
    api_name,
    decode_request,
    encode_response,
    is_supported,
    parse_request_header,
)
from ..protocol.codec import SchemaUnavailable, is_native_panic, kio_error, response_type, timedelta_ms
from .mechanism import SaslAuthenticationError, SaslError, SaslServer

log = logging.getLogger("odradek.security.sasl")

#: Processes a request the authenticator lets through before authentication (ApiVersions):
#: the dispatcher's answer frame (without its size prefix).
ProcessRequest = Callable[[RequestHeader, bytearray], Awaitable[Any]]


class SaslState(enum.Enum):
    HANDSHAKE_OR_VERSIONS_REQUEST = "handshake or versions request"
    HANDSHAKE_REQUEST = "handshake request"
    AUTHENTICATE = "authenticate"
    RAW_TOKENS = "raw tokens"
    COMPLETE = "complete"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class SaslStep:
    """What the connection does next: write ``response`` (a frame without its size prefix; None:
    nothing), after ``delay_s`` when it is a failure's answer; then close when ``close`` is set
    (``reason`` says why, for the log)."""

    response: Any = None
    close: bool = False
    delay_s: float = 0.0
    reason: str = ""


def _response(api_key: int, version: int, **values: Any) -> Any:
    """A kio response of ``api_key`` v``version`` from the fields that version has
    (SaslAuthenticate v0 has no session lifetime)."""
    cls = response_type(api_key, version)
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


def generic_failure(mechanism: str) -> str:
    """Kafka's answer for an exchange that failed without a message meant for the client."""
    return f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"


class SaslServerAuthenticator:
    """Authenticates one connection; ``principal`` is set once :attr:`complete`."""

    def __init__(
        self,
        mechanisms: Mapping[str, Callable[[], SaslServer]],
        process: ProcessRequest,
        *,
        peer: str,
        listener: str,
        failed_delay_s: float = 0.1,
        reauth_ms: Mapping[str, int] | None = None,
        reauthenticating: tuple[KafkaPrincipal, str] | None = None,
    ) -> None:
        #: enabled mechanisms, in ``sasl.enabled.mechanisms`` order: a new server for each exchange
        self.mechanisms = dict(mechanisms)
        self._process = process
        self.peer = peer
        self.listener = listener
        self.failed_delay_s = failed_delay_s
        #: ``connections.max.reauth.ms`` per mechanism (0 or absent: sessions never expire)
        self.reauth_ms = dict(reauth_ms or {})
        #: the principal and mechanism of the session being renewed (None: a first login)
        self.reauthenticating = reauthenticating
        self.state = (
            SaslState.HANDSHAKE_REQUEST if reauthenticating is not None else SaslState.HANDSHAKE_OR_VERSIONS_REQUEST
        )
        self.server: SaslServer | None = None
        self.principal: KafkaPrincipal | None = None
        self.mechanism: str | None = None
        self._refused_mechanism: str | None = None
        #: when the exchange completed (wall clock ms): a credential's expiry counts from then
        self._completed_at_ms = 0.0

    @property
    def session_lifetime_ms(self) -> int:
        """How long the authenticated session lasts before the client must re-authenticate
        (0: for ever), as its final SaslAuthenticate answer says: ``connections.max.reauth.ms``,
        bounded by when the credential expires for a mechanism whose credentials do (an
        OAUTHBEARER token's ``exp``, even without ``connections.max.reauth.ms``, as Kafka)."""
        max_reauth_ms = self.reauth_ms.get(self.mechanism or "", 0)
        expires_ms = getattr(self.server, "credential_expires_ms", None)
        if expires_ms is None:
            return max_reauth_ms
        # an expired credential (accepted within the clock skew) ends the session at once, never "for ever"
        left_ms = max(1, int(expires_ms - self._completed_at_ms))
        return min(left_ms, max_reauth_ms) if max_reauth_ms > 0 else left_ms

    @property
    def complete(self) -> bool:
        return self.state is SaslState.COMPLETE

    async def receive(self, frame: bytearray) -> SaslStep:
        """The step for the client's next frame (never raises for what a client sends)."""
        try:
            if self.state is SaslState.RAW_TOKENS:
                return await self._raw_token(bytes(frame))
            if self.state in (SaslState.COMPLETE, SaslState.FAILED):
                raise AssertionError(f"no SASL frame expected in state {self.state.name}")
            return await self._kafka_request(frame)
        except (KafkaError, OdradekError, SchemaUnavailable) as exc:  # what a client's bytes cause
            return self._close(f"invalid SASL request: {exc}")
        except Exception as exc:  # a bug: never let it reach the connection's other requests
            log.exception("connection %s on %s: SASL request failed unexpectedly", self.peer, self.listener)
            return self._close(f"SASL request failed unexpectedly: {type(exc).__name__}: {exc}")
        except BaseException as exc:
            if not is_native_panic(exc):
                raise
            return self._close(f"invalid SASL request: the codec panicked: {exc}")

    # -- Kafka-framed requests ------------------------------------------------------------------
    async def _kafka_request(self, frame: bytearray) -> SaslStep:
        header = parse_request_header(frame)
        key = header.api_key
        if key == ApiKey.API_VERSIONS and self.state is SaslState.HANDSHAKE_OR_VERSIONS_REQUEST:
            if is_supported(key, header.api_version):
                # an unknown version is answered with the v0 fallback and may be retried
                self.state = SaslState.HANDSHAKE_REQUEST
            return SaslStep(await self._process(header, frame))
        if key == ApiKey.SASL_HANDSHAKE and self.state in (
            SaslState.HANDSHAKE_OR_VERSIONS_REQUEST,
            SaslState.HANDSHAKE_REQUEST,
        ):
            return self._handshake(header, frame)
        if key == ApiKey.SASL_AUTHENTICATE and self.state is SaslState.AUTHENTICATE:
            return await self._authenticate(header, frame)
        during = "SASL authentication" if self.state is SaslState.AUTHENTICATE else "SASL handshake"
        return self._close(f"Unexpected Kafka request of type {api_name(key)} during {during}.")

    def _handshake(self, header: RequestHeader, frame: bytearray) -> SaslStep:
        request = decode_request(ApiKey.SASL_HANDSHAKE, header.api_version, frame, header.body_offset)
        mechanism = str(request.mechanism)
        enabled = tuple(self.mechanisms)
        if mechanism not in self.mechanisms:
            answer = _response(
                ApiKey.SASL_HANDSHAKE, header.api_version,
                error_code=kio_error(ErrorCode.UNSUPPORTED_SASL_MECHANISM), mechanisms=enabled,
            )  # fmt: skip
            return self._fail(
                encode_response(ApiKey.SASL_HANDSHAKE, header.api_version, header.correlation_id, answer),
                f"Unsupported SASL mechanism {mechanism}",
            )
        if self.reauthenticating is not None:
            if header.api_version == 0:  # raw tokens cannot follow Kafka requests on a connection
                return self._close("re-authentication needs SaslHandshake v1 or later")
            previous = self.reauthenticating[1]
            if mechanism != previous:  # refused at the first token, as Kafka does
                self._refused_mechanism = (
                    f"SASL mechanism '{mechanism}' requested by client is not supported for re-authentication "
                    f"of mechanism '{previous}'"
                )
        self.server = self.mechanisms[mechanism]()
        self.mechanism = mechanism
        self.state = SaslState.RAW_TOKENS if header.api_version == 0 else SaslState.AUTHENTICATE
        answer = _response(
            ApiKey.SASL_HANDSHAKE, header.api_version, error_code=kio_error(ErrorCode.NONE), mechanisms=enabled
        )
        return SaslStep(encode_response(ApiKey.SASL_HANDSHAKE, header.api_version, header.correlation_id, answer))

    async def _authenticate(self, header: RequestHeader, frame: bytearray) -> SaslStep:
        version = header.api_version
        request = decode_request(ApiKey.SASL_AUTHENTICATE, version, frame, header.body_offset)
        server = self.server
        assert server is not None
        try:
            if self._refused_mechanism is not None:
                raise SaslAuthenticationError(self._refused_mechanism)
            challenge = await server.evaluate_response(bytes(request.auth_bytes))
            self._check_same_principal(server)
        except SaslError as exc:
            message = self._failure_message(server, exc)
            answer = _response(
                ApiKey.SASL_AUTHENTICATE,
                version,
                error_code=kio_error(ErrorCode.SASL_AUTHENTICATION_FAILED),
                error_message=message,
                auth_bytes=b"",
                session_lifetime=timedelta_ms(0),
            )
            return self._fail(
                encode_response(ApiKey.SASL_AUTHENTICATE, version, header.correlation_id, answer), str(exc)
            )
        self._maybe_complete(server)
        answer = _response(
            ApiKey.SASL_AUTHENTICATE,
            version,
            error_code=kio_error(ErrorCode.NONE),
            error_message=None,
            auth_bytes=challenge,
            # on the final answer: when the client must re-authenticate (0: never; KIP-368)
            session_lifetime=timedelta_ms(self.session_lifetime_ms if self.complete else 0),
        )
        return SaslStep(encode_response(ApiKey.SASL_AUTHENTICATE, version, header.correlation_id, answer))

    # -- v0 raw tokens ------------------------------------------------------------------------
    async def _raw_token(self, token: bytes) -> SaslStep:
        server = self.server
        assert server is not None
        try:
            challenge = await server.evaluate_response(token)
        except SaslError as exc:
            self._failure_message(server, exc)
            return self._fail(None, str(exc))  # no way to tell a v0 client why: it sees the close
        self._maybe_complete(server)
        return SaslStep(challenge)

    # -- outcomes -----------------------------------------------------------------------------
    def _check_same_principal(self, server: SaslServer) -> None:
        """A re-authentication must end as the principal the session had (Kafka's message)."""
        if self.reauthenticating is None or not server.complete:
            return
        before = self.reauthenticating[0]
        after = KafkaPrincipal(USER_TYPE, server.authorization_id or "")
        if after != before:
            raise SaslAuthenticationError(
                f"Cannot change principals during re-authentication from {before.principal_type}.{before.name}: "
                f"{after.principal_type}.{after.name}"
            )

    def _maybe_complete(self, server: SaslServer) -> None:
        if server.complete:
            self._completed_at_ms = time.time() * 1000
            user = server.authorization_id or ""
            self.principal = KafkaPrincipal(USER_TYPE, user)
            self.state = SaslState.COMPLETE
            log.debug(
                "connection %s on %s authenticated as %s with %s", self.peer, self.listener, self.principal,
                server.mechanism_name,
            )  # fmt: skip

    def _failure_message(self, server: SaslServer, exc: SaslError) -> str:
        if isinstance(exc, SaslAuthenticationError):
            return str(exc)
        return generic_failure(server.mechanism_name)

    def _fail(self, response: Any, why: str) -> SaslStep:
        self.state = SaslState.FAILED  # the connection logs the reason when it closes
        return SaslStep(response, close=True, delay_s=self.failed_delay_s, reason=f"failed authentication: {why}")

    def _close(self, why: str) -> SaslStep:
        self.state = SaslState.FAILED
        return SaslStep(None, close=True, reason=why)


__all__ = ["ProcessRequest", "SaslServerAuthenticator", "SaslState", "SaslStep", "generic_failure"]
