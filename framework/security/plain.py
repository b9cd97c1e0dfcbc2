"""SASL/PLAIN (RFC 4616), as Kafka's PlainSaslServer: users and passwords from the JAAS config.

The client sends one message, ``[authzid] NUL authcid NUL passwd``; the server answers an empty
token on success. Users are PlainLoginModule's ``user_<name>="<password>"`` options of the
listener's JAAS config; passwords are compared in constant time. The failure messages are
Kafka's, which the client sees.
"""

from __future__ import annotations

import hmac

from .mechanism import SaslAuthenticationError, SaslError

INVALID_USERNAME_OR_PASSWORD = "Authentication failed: Invalid username or password"


class PlainSaslServer:
    """The server side of one PLAIN exchange (a single round)."""

    mechanism_name = "PLAIN"

    def __init__(self, users: dict[str, str]) -> None:
        self._users = users
        self._complete = False
        self.authorization_id: str | None = None

    @property
    def complete(self) -> bool:
        return self._complete

    async def evaluate_response(self, token: bytes) -> bytes:
        if self._complete:
            raise SaslError("PLAIN authentication already completed")
        try:
            text = token.decode()
        except UnicodeDecodeError:
            raise SaslError("Invalid SASL/PLAIN response: not UTF-8") from None
        parts = text.split("\x00")
        if len(parts) != 3:
            raise SaslError(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid, username, password = parts
        if not username:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        expected = self._users.get(username)
        # compare against something even for an unknown user, so timing says nothing about who exists
        ok = hmac.compare_digest(password.encode(), (expected if expected is not None else "\x00" + password).encode())
        if expected is None or not ok:
            raise SaslAuthenticationError(INVALID_USERNAME_OR_PASSWORD)
        if authzid and authzid != username:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        self.authorization_id = username
        self._complete = True
        return b""


class PlainSaslClient:
    """The client side: one message, then the server's empty answer."""

    def __init__(self, username: str, password: str) -> None:
        self.username = username
        self.password = password

    def initial_response(self) -> bytes:
        return f"\x00{self.username}\x00{self.password}".encode()

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        return None


__all__ = ["INVALID_USERNAME_OR_PASSWORD", "PlainSaslClient", "PlainSaslServer"]
