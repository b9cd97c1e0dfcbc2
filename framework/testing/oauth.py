"""An identity provider for OAUTHBEARER tests: signing keys, their JWKS, and JWTs they sign.

idp = TokenIssuer.rsa("key-1")
idp.write_jwks(tmp_path / "jwks.json")          # the broker's sasl.oauthbearer.jwks.endpoint.url
token = idp.token("alice", audience="kafka", life_s=60)

with TokenEndpoint(idp, {"alice": "alice-secret"}) as endpoint:   # a local OAuth 2 server
    endpoint.token_url, endpoint.jwks_url                           # client credentials, the JWKS
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
import time
import urllib.parse
from collections import Counter
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

__all__ = ["TokenEndpoint", "TokenIssuer", "jwks_document"]


@dataclass(frozen=True)
class TokenIssuer:
    """One signing key (``kid``, ``alg``) and what it signs."""

    kid: str
    alg: str
    private_key: Any
    issuer: str = "https://idp.test"

    @classmethod
    def rsa(cls, kid: str, alg: str = "RS256") -> TokenIssuer:
        return cls(kid, alg, rsa.generate_private_key(public_exponent=65537, key_size=2048))

    @classmethod
    def ec(cls, kid: str, alg: str = "ES256") -> TokenIssuer:
        return cls(kid, alg, ec.generate_private_key(ec.SECP256R1()))

    def jwk(self) -> dict[str, Any]:
        """The public key as a JWK (with ``kid``, ``alg`` and ``use``)."""
        algorithm = RSAAlgorithm if self.alg[:2] in ("RS", "PS") else ECAlgorithm
        key: dict[str, Any] = dict(algorithm.to_jwk(self.private_key.public_key(), as_dict=True))
        key.update(kid=self.kid, alg=self.alg, use="sig")
        return key

    def write_jwks(self, path: Path, *others: TokenIssuer) -> str:
        """Write the JWKS of this key (and ``others``) to ``path``; its ``file:`` URL."""
        path.write_text(json.dumps(jwks_document(self, *others)))
        return f"file:{path}"

    def token(
        self,
        subject: str,
        *,
        life_s: float = 3600,
        audience: str | list[str] | None = None,
        issuer: str | None = None,
        scope: str | None = None,
        kid: str | None = None,
        now_s: float | None = None,
        **claims: Any,
    ) -> str:
        """A JWT for ``subject`` signed by this key, expiring in ``life_s`` (negative: expired)."""
        now = time.time() if now_s is None else now_s
        body: dict[str, Any] = {"sub": subject, "iat": int(now), "exp": int(now + life_s)}
        body["iss"] = self.issuer if issuer is None else issuer
        if audience is not None:
            body["aud"] = audience
        if scope is not None:
            body["scope"] = scope
        body.update(claims)
        return jwt.encode(body, self.private_key, algorithm=self.alg, headers={"kid": kid or self.kid})


def jwks_document(*issuers: TokenIssuer) -> dict[str, Any]:
    return {"keys": [i.jwk() for i in issuers]}


class TokenEndpoint:
    """An OAuth 2 authorization server on 127.0.0.1 (a port of its own) for OAUTHBEARER tests:
    ``POST /token`` runs the client-credentials grant (client id and secret by HTTP basic
    authentication, or as form fields) and answers a JWT ``issuer`` signs for the client id
    (``audience``, the requested ``scope``, ``life_s`` seconds, or the client's own in ``lifetimes``)
    with ``expires_in``; a wrong secret
    gets 401 ``invalid_client``, another grant 400. ``GET /jwks`` serves the issuer's JWKS, the
    broker's ``sasl.oauthbearer.jwks.endpoint.url``. ``issued`` counts tokens per client."""

    def __init__(
        self,
        issuer: TokenIssuer,
        clients: dict[str, str],
        *,
        audience: str | None = "kafka",
        life_s: float = 3600,
        lifetimes: dict[str, float] | None = None,
        delay_s: float = 0.0,
    ) -> None:
        self.issuer = issuer
        self.clients = dict(clients)
        self.audience = audience
        self.life_s = life_s
        self.lifetimes = dict(lifetimes or {})
        #: how long each token request waits before its answer (a slow identity provider)
        self.delay_s = delay_s
        self.issued: Counter[str] = Counter()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="token-endpoint", daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def token_url(self) -> str:
        return f"{self.base_url}/token"

    @property
    def jwks_url(self) -> str:
        return f"{self.base_url}/jwks"

    def __enter__(self) -> TokenEndpoint:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def grant(self, authorization: str | None, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        """The answer (status, JSON) to a token request."""
        if form.get("grant_type") != "client_credentials":
            return 400, {"error": "unsupported_grant_type"}
        client_id, secret = form.get("client_id", ""), form.get("client_secret", "")
        if authorization and authorization.lower().startswith("basic "):
            try:
                client_id, _, secret = base64.b64decode(authorization[6:]).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                return 400, {"error": "invalid_request"}
        if client_id not in self.clients or self.clients[client_id] != secret:
            return 401, {"error": "invalid_client", "error_description": "client authentication failed"}
        life_s = self.lifetimes.get(client_id, self.life_s)
        token = self.issuer.token(client_id, life_s=life_s, audience=self.audience, scope=form.get("scope"))
        self.issued[client_id] += 1
        return 200, {"access_token": token, "token_type": "Bearer", "expires_in": int(life_s)}


def _handler(endpoint: TokenEndpoint) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self, status: int, body: dict[str, Any]) -> None:
            raw = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self) -> None:
            if self.path == "/jwks":
                self._answer(200, jwks_document(endpoint.issuer))
            else:
                self._answer(404, {"error": "not_found"})

        def do_POST(self) -> None:
            if self.path != "/token":
                self._answer(404, {"error": "not_found"})
                return
            length = int(self.headers.get("Content-Length") or 0)
            form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
            time.sleep(endpoint.delay_s)
            self._answer(*endpoint.grant(self.headers.get("Authorization"), form))

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            return

    return Handler
