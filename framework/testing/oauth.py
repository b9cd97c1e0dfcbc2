"""An identity provider for OAUTHBEARER tests: signing keys, their JWKS, and JWTs they sign.

idp = TokenIssuer.rsa("key-1")
idp.write_jwks(tmp_path / "jwks.json")          # the broker's sasl.oauthbearer.jwks.endpoint.url
token = idp.token("alice", audience="kafka", life_s=60)
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

__all__ = ["TokenIssuer", "jwks_document"]


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
