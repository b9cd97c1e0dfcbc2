"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), as Kafka's ScramSaslServer speaks them.

Only what Kafka does: no channel binding (the GS2 header is ``n,,`` or ``n,a=<authzid>,``), no
SASLprep of passwords (Kafka's ScramFormatter encodes them as UTF-8 and nothing else), and
iterations between 4096 and 16384. The messages are parsed strictly; anything malformed fails the
exchange with :class:`SaslError`, never anything else. Comparisons of keys are constant-time.

The server never sees a password: it keeps a :class:`ScramCredential` (salt, stored key, server
key, iterations) per user and mechanism, which it looks up asynchronously once the client's first
message names the user (see :mod:`.credentials`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from .mechanism import SaslAuthenticationError, SaslError

MIN_ITERATIONS = 4096
#: Kafka's upper bound for AlterUserScramCredentials (the CLI and admin clients are held to it)
MAX_ITERATIONS = 16384


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    """A SCRAM variant: its SASL name, hash, and the wire type KIP-554 gives it (1 and 2)."""

    mechanism_name: str
    hash_name: str
    type_code: int
    min_iterations: int = MIN_ITERATIONS

    def digest(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()

    def hi(self, password: bytes, salt: bytes, iterations: int) -> bytes:
        """RFC 5802's Hi(): PBKDF2 with this mechanism's HMAC."""
        return hashlib.pbkdf2_hmac(self.hash_name, password, salt, iterations)


SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", "sha256", 1)
SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", "sha512", 2)
SCRAM_MECHANISMS: dict[str, ScramMechanism] = {m.mechanism_name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
SCRAM_BY_TYPE: dict[int, ScramMechanism] = {m.type_code: m for m in SCRAM_MECHANISMS.values()}


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the server keeps for one user and mechanism (Kafka's ``ScramCredential``)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_text(self) -> str:
        """Kafka's ``ScramCredentialUtils.credentialToString`` form, kept in the user's entity config."""
        b64 = base64.b64encode
        return (
            f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
            f"server_key={b64(self.server_key).decode()},iterations={self.iterations}"
        )

    @classmethod
    def from_text(cls, text: str) -> ScramCredential:
        """The inverse of :meth:`to_text`; ValueError for anything else."""
        fields: dict[str, str] = {}
        for part in text.split(","):
            name, sep, value = part.partition("=")
            if not sep:
                raise ValueError(f"invalid SCRAM credential {text!r}")
            fields[name] = value
        try:
            return cls(
                base64.b64decode(fields["salt"], validate=True),
                base64.b64decode(fields["stored_key"], validate=True),
                base64.b64decode(fields["server_key"], validate=True),
                int(fields["iterations"]),
            )
        except (KeyError, binascii.Error) as exc:
            raise ValueError(f"invalid SCRAM credential {text!r}: {exc}") from None


def salted_password(mechanism: ScramMechanism, password: str, salt: bytes, iterations: int) -> bytes:
    return mechanism.hi(password.encode(), salt, iterations)


def credential_from_salted(mechanism: ScramMechanism, salt: bytes, salted: bytes, iterations: int) -> ScramCredential:
    """The credential for a salted password (what AlterUserScramCredentials carries)."""
    client_key = mechanism.hmac(salted, b"Client Key")
    return ScramCredential(salt, mechanism.digest(client_key), mechanism.hmac(salted, b"Server Key"), iterations)


def generate_credential(
    mechanism: ScramMechanism, password: str, iterations: int = MIN_ITERATIONS, salt: bytes | None = None
) -> ScramCredential:
    """A new credential for ``password`` with a random salt (Kafka's ``ScramFormatter.generateCredential``)."""
    salt = secrets.token_bytes(32) if salt is None else salt
    return credential_from_salted(mechanism, salt, salted_password(mechanism, password, salt, iterations), iterations)


# -- messages ---------------------------------------------------------------------------------
_VALUE = r"[\x21-\x2b\x2d-\x7e]+"  # printable, no comma
_SASLNAME = r"(?:[^,=\x00]|=2C|=3D)+"
_CLIENT_FIRST = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,n=(?P<saslname>{_SASLNAME}),r=(?P<nonce>{_VALUE})(?P<extensions>(?:,[A-Za-z0-9]+=[^,]*)*)"
)
_CLIENT_FINAL = re.compile(
    rf"c=(?P<channel>[A-Za-z0-9+/=]+),r=(?P<nonce>{_VALUE})(?P<extensions>(?:,[A-Za-z0-9]+=[^,]*)*),p=(?P<proof>[A-Za-z0-9+/=]+)"
)
_SERVER_FIRST = re.compile(rf"r=(?P<nonce>{_VALUE}),s=(?P<salt>[A-Za-z0-9+/=]+),i=(?P<iterations>[0-9]+)(?:,.*)?")
_SERVER_FINAL = re.compile(r"(?:e=(?P<error>[^,]*)|v=(?P<signature>[A-Za-z0-9+/=]+))(?:,.*)?")


def decode_saslname(name: str) -> str:
    """RFC 5802's saslname: ``=2C`` is ``,`` and ``=3D`` is ``=``."""
    return name.replace("=2C", ",").replace("=3D", "=")


def encode_saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _text(token: bytes) -> str:
    try:
        return token.decode()
    except UnicodeDecodeError:
        raise SaslError("invalid SCRAM message: not UTF-8") from None


def _b64(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error:
        raise SaslError(f"invalid SCRAM message: {what} is not base64") from None


CredentialLookup = Callable[[str, ScramMechanism], Awaitable[ScramCredential | None]]


class ScramSaslServer:
    """The server side of one SCRAM exchange: client-first -> server-first, client-final ->
    server-final. ``credential_for(user, mechanism)`` is how it finds the user's credential."""

    def __init__(self, mechanism: ScramMechanism, credential_for: CredentialLookup) -> None:
        self.mechanism = mechanism
        self._credential_for = credential_for
        self._state = "first"
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._credential: ScramCredential | None = None
        self.authorization_id: str | None = None

    @property
    def mechanism_name(self) -> str:
        return self.mechanism.mechanism_name

    @property
    def complete(self) -> bool:
        return self._state == "complete"

    async def evaluate_response(self, token: bytes) -> bytes:
        try:
            if self._state == "first":
                return await self._client_first(_text(token))
            if self._state == "final":
                return self._client_final(_text(token))
            raise SaslError(f"unexpected SCRAM message in state {self._state}")
        except SaslError:
            self._state = "failed"
            self._credential = None
            raise

    async def _client_first(self, text: str) -> bytes:
        match = _CLIENT_FIRST.fullmatch(text)
        if match is None:
            raise SaslError("invalid SCRAM client first message")
        extensions = dict(part.split("=", 1) for part in match["extensions"].split(",")[1:] if part)
        if extensions.get("tokenauth", "false").lower() == "true":
            raise SaslError("Token Authentication failed: delegation tokens are not supported")
        username = decode_saslname(match["saslname"])
        credential = await self._credential_for(username, self.mechanism)
        if credential is None:
            raise SaslError("Authentication failed: Invalid user credentials")
        authzid = decode_saslname(match["authzid"] or "")
        if authzid and authzid != username:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        if credential.iterations < self.mechanism.min_iterations:
            raise SaslError(
                f"Iterations {credential.iterations} is less than the minimum {self.mechanism.min_iterations} "
                f"for {self.mechanism.mechanism_name}"
            )
        self._credential = credential
        self.authorization_id = username
        # the GS2 header is "n," + "a=<authzid>" (or nothing) + ","
        self._client_first_bare = text[3 + (len(match["authzid"]) + 2 if match["authzid"] is not None else 0) :]
        self._nonce = match["nonce"] + secrets.token_urlsafe(18)
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        self._state = "final"
        return self._server_first.encode()

    def _client_final(self, text: str) -> bytes:
        match = _CLIENT_FINAL.fullmatch(text)
        if match is None:
            raise SaslError("invalid SCRAM client final message")
        # Kafka checks that the nonce *ends with* the server's: librdkafka sends its client nonce
        # in front of the whole server nonce (which starts with it already)
        if not match["nonce"].endswith(self._nonce):
            raise SaslError("Invalid client nonce in the final client message.")
        credential = self._credential
        assert credential is not None
        proof = _b64(match["proof"], "the proof")
        without_proof = text[: text.rindex(",p=")]
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        client_signature = self.mechanism.hmac(credential.stored_key, auth_message)
        if len(proof) != len(client_signature):
            raise SaslError("Invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        if not hmac.compare_digest(self.mechanism.digest(client_key), credential.stored_key):
            raise SaslError("Invalid client credentials")
        server_signature = self.mechanism.hmac(credential.server_key, auth_message)
        self._credential = None
        self._state = "complete"
        return b"v=" + base64.b64encode(server_signature)


class ScramSaslClient:
    """The client side: :meth:`first_message`, then :meth:`final_message` for the server's
    first message, then :meth:`verify_server_final`. Used by odradek's own connections."""

    def __init__(self, mechanism: ScramMechanism, username: str, password: str, nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self.username = username
        self.password = password
        self._nonce = nonce or secrets.token_urlsafe(18)
        self._client_first_bare = f"n={encode_saslname(username)},r={self._nonce}"
        self._server_signature = b""

    def first_message(self) -> bytes:
        return f"n,,{self._client_first_bare}".encode()

    def final_message(self, server_first: bytes) -> bytes:
        text = _text(server_first)
        match = _SERVER_FIRST.fullmatch(text)
        if match is None:
            raise SaslError("invalid SCRAM server first message")
        if not match["nonce"].startswith(self._nonce) or match["nonce"] == self._nonce:
            raise SaslError("invalid server nonce")
        iterations = int(match["iterations"])
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise SaslError(
                f"server asked for {iterations} SCRAM iterations (allowed {MIN_ITERATIONS}..{MAX_ITERATIONS})"
            )
        salted = salted_password(self.mechanism, self.password, _b64(match["salt"], "the salt"), iterations)
        without_proof = f"c=biws,r={match['nonce']}"
        auth_message = f"{self._client_first_bare},{text},{without_proof}".encode()
        client_key = self.mechanism.hmac(salted, b"Client Key")
        client_signature = self.mechanism.hmac(self.mechanism.digest(client_key), auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, client_signature, strict=True))
        self._server_signature = self.mechanism.hmac(self.mechanism.hmac(salted, b"Server Key"), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify_server_final(self, server_final: bytes) -> None:
        match = _SERVER_FINAL.fullmatch(_text(server_final))
        if match is None:
            raise SaslError("invalid SCRAM server final message")
        if match["error"] is not None:
            raise SaslAuthenticationError(f"SCRAM authentication failed: {match['error']}")
        if not hmac.compare_digest(_b64(match["signature"], "the signature"), self._server_signature):
            raise SaslError("invalid server signature in the SCRAM server final message")


__all__ = [
    "MAX_ITERATIONS",
    "MIN_ITERATIONS",
    "SCRAM_BY_TYPE",
    "SCRAM_MECHANISMS",
    "SCRAM_SHA_256",
    "SCRAM_SHA_512",
    "CredentialLookup",
    "ScramCredential",
    "ScramMechanism",
    "ScramSaslClient",
    "ScramSaslServer",
    "credential_from_salted",
    "generate_credential",
    "salted_password",
]
