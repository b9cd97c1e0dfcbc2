"""The client side of SASL: authenticates a fresh connection before anything else is sent.

Kafka's client sequence (SaslClientAuthenticator) over any frame connection (TCP, TLS):
SaslHandshake v1 naming the mechanism, then SaslAuthenticate requests carrying the mechanism's
tokens until it is done. Used by odradek's client (``security.protocol=SASL_PLAINTEXT``,
``sasl.mechanism``, ``sasl.username``, ``sasl.password``, librdkafka's names) and by the
broker's own connections to other brokers. A refusal raises :class:`AuthenticationFailed`,
a non-retriable :class:`~odradek.client.connection.NetworkError`: the connect fails, and a
producer or admin call fails with SASL_AUTHENTICATION_FAILED instead of retrying a password
that will not get better.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import trio

from ..client.connection import NetworkError
from ..errors import ErrorCode
from ..interfaces import Connection
from ..protocol import ApiKey, decode_response, encode_request, request_type
from .mechanism import SaslClient, SaslError, SaslMechanism

HANDSHAKE_VERSION = 1
AUTHENTICATE_VERSION = 1


class AuthenticationFailed(NetworkError):
    """The broker refused the credentials or the mechanism (not retriable)."""

    code = ErrorCode.SASL_AUTHENTICATION_FAILED


@dataclass(frozen=True, slots=True)
class SaslClientSettings:
    """``sasl.mechanism`` with ``sasl.username`` / ``sasl.password``."""

    mechanism: str
    username: str
    password: str

    @classmethod
    def from_config(cls, config: Mapping[str, str]) -> SaslClientSettings | None:
        """The SASL settings of a client config; None unless ``security.protocol`` is SASL_*."""
        if str(config.get("security.protocol", "PLAINTEXT")).upper() not in ("SASL_PLAINTEXT", "SASL_SSL"):
            return None
        mechanism = str(config.get("sasl.mechanisms", "") or config.get("sasl.mechanism", "") or "PLAIN").upper()
        return cls(mechanism, str(config.get("sasl.username", "")), str(config.get("sasl.password", "")))

    def new_client(self, available: Mapping[str, SaslMechanism]) -> SaslClient:
        mechanism = available.get(self.mechanism)
        if mechanism is None or mechanism.client is None:
            raise AuthenticationFailed(
                f"sasl.mechanism {self.mechanism} has no client (available: "
                f"{', '.join(sorted(n for n, m in available.items() if m.client is not None))})",
                code=ErrorCode.UNSUPPORTED_SASL_MECHANISM,
            )
        return mechanism.client(self.username, self.password)


async def authenticate(
    connection: Connection, settings: SaslClientSettings, available: Mapping[str, SaslMechanism], *, client_id: str
) -> None:
    """Run the SASL exchange on a fresh ``connection``; raises AuthenticationFailed."""
    client = settings.new_client(available)
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

    handshake = await call(ApiKey.SASL_HANDSHAKE, HANDSHAKE_VERSION, mechanism=settings.mechanism)
    code = ErrorCode(int(handshake.error_code))  # type: ignore[attr-defined]
    if code != ErrorCode.NONE:
        offered = ", ".join(handshake.mechanisms)  # type: ignore[attr-defined]
        raise AuthenticationFailed(
            f"the broker does not enable SASL mechanism {settings.mechanism} (it enables: {offered or 'none'})",
            code=ErrorCode.UNSUPPORTED_SASL_MECHANISM if code == ErrorCode.UNSUPPORTED_SASL_MECHANISM else code,
        )
    token: bytes | None = client.initial_response()
    while token is not None:
        answer = await call(ApiKey.SASL_AUTHENTICATE, AUTHENTICATE_VERSION, auth_bytes=token)
        code = ErrorCode(int(answer.error_code))  # type: ignore[attr-defined]
        if code != ErrorCode.NONE:
            raise AuthenticationFailed(
                answer.error_message or code.name,  # type: ignore[attr-defined]
                code=code,
            )
        try:
            token = client.evaluate_challenge(bytes(answer.auth_bytes))  # type: ignore[attr-defined]
        except SaslError as exc:
            raise AuthenticationFailed(f"SASL/{settings.mechanism}: {exc}") from exc


__all__ = ["AuthenticationFailed", "SaslClientSettings", "authenticate"]
