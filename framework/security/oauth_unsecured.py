"""Unsecured OAUTHBEARER tokens, for development: Kafka's ``OAuthBearerUnsecuredValidatorCallbackHandler``
on the broker and librdkafka's ``enable.sasl.oauthbearer.unsecure.jwt`` token on the client.

An unsecured token is a JWS with header ``{"alg":"none"}`` and an empty signature
(``<header>.<claims>.``). The broker's checks are Kafka's, configured by the listener's
``OAuthBearerLoginModule`` JAAS options:

- ``unsecuredValidatorPrincipalClaimName`` (default ``sub``): the claim naming the principal, a
  non-empty string;
- ``unsecuredValidatorScopeClaimName`` (default ``scope``) and ``unsecuredValidatorRequiredScope``
  (space separated): every required scope must be in the token's (a string of space-separated
  scopes or a list); else ``insufficient_scope``;
- ``exp`` is required, ``iat`` optional; both are numbers of seconds; the token is refused once
  now minus ``unsecuredValidatorAllowableClockSkewMs`` (default 0) reaches ``exp``, when ``iat`` is
  later than now plus the skew, or when ``exp`` is not after ``iat``.

Nothing here is secure: anyone can mint such a token. The secured validator is :mod:`.oauth_jwt`.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .jaas import JaasConfigEntry
from .oauthbearer import BearerToken, OAuthBearerToken, TokenValidationError

PRINCIPAL_CLAIM_OPTION = "unsecuredValidatorPrincipalClaimName"
SCOPE_CLAIM_OPTION = "unsecuredValidatorScopeClaimName"
REQUIRED_SCOPE_OPTION = "unsecuredValidatorRequiredScope"
CLOCK_SKEW_OPTION = "unsecuredValidatorAllowableClockSkewMs"


def b64url_decode(part: str, what: str) -> bytes:
    """A base64url JWS part (padding optional); TokenValidationError naming ``what``."""
    try:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except (binascii.Error, ValueError):
        raise TokenValidationError(f"the token's {what} is not base64url") from None


def b64url_encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def json_part(part: str, what: str) -> dict[str, Any]:
    """A base64url JSON object of a JWS (its header or claims)."""
    raw = b64url_decode(part, what)
    try:
        value = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        raise TokenValidationError(f"the token's {what} is not JSON") from None
    if not isinstance(value, dict):
        raise TokenValidationError(f"the token's {what} is not a JSON object")
    return value


def scope_of(claims: Mapping[str, Any], claim: str) -> frozenset[str]:
    """A scope claim: space-separated words or a list of strings (both are seen)."""
    value = claims.get(claim)
    if value is None:
        return frozenset()
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return frozenset(value)
    raise TokenValidationError(f"The {claim} claim had the incorrect type: {type(value).__name__}")


def _number(claims: Mapping[str, Any], claim: str, *, required: bool) -> float | None:
    value = claims.get(claim)
    if value is None:
        if required:
            raise TokenValidationError(f"Required claim missing: {claim}")
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TokenValidationError(f"The {claim} claim had the incorrect type: {type(value).__name__}")
    return float(value)


@dataclass(frozen=True, slots=True)
class UnsecuredValidator:
    """Kafka's unsecured validator (see the module docstring)."""

    principal_claim: str = "sub"
    scope_claim: str = "scope"
    required_scope: frozenset[str] = frozenset()
    clock_skew_ms: int = 0
    #: the wall clock in ms (tests move it)
    now_ms: Callable[[], int] = lambda: int(time.time() * 1000)

    @classmethod
    def from_jaas(cls, jaas: JaasConfigEntry | None) -> UnsecuredValidator:
        """From the listener's ``OAuthBearerLoginModule`` options; ValueError for a bad skew."""
        options = jaas.options if jaas is not None else {}
        skew_text = options.get(CLOCK_SKEW_OPTION, "0").strip() or "0"
        try:
            skew = int(skew_text)
        except ValueError:
            raise ValueError(f"{CLOCK_SKEW_OPTION} must be an integer, got {skew_text!r}") from None
        if skew < 0:
            raise ValueError(f"Allowable clock skew must not be negative: {skew}")
        return cls(
            principal_claim=options.get(PRINCIPAL_CLAIM_OPTION, "").strip() or "sub",
            scope_claim=options.get(SCOPE_CLAIM_OPTION, "").strip() or "scope",
            required_scope=frozenset(options.get(REQUIRED_SCOPE_OPTION, "").split()),
            clock_skew_ms=skew,
        )

    async def validate(self, token: str) -> OAuthBearerToken:
        parts = token.split(".")
        if len(parts) != 3:
            raise TokenValidationError(f"an unsecured JWS has 3 dot-separated parts, this token has {len(parts)}")
        header = json_part(parts[0], "header")
        if header.get("alg") != "none":
            raise TokenValidationError(f"an unsecured JWS must have alg 'none', not {header.get('alg')!r}")
        if parts[2]:
            raise TokenValidationError("an unsecured JWS must have an empty signature")
        claims = json_part(parts[1], "claims")
        principal = claims.get(self.principal_claim)
        if principal is None:
            raise TokenValidationError(f"Required claim missing: {self.principal_claim}")
        if not isinstance(principal, str) or not principal.strip():
            raise TokenValidationError(f"The {self.principal_claim} claim must be a non-empty string")
        now = self.now_ms()
        exp = _number(claims, "exp", required=True)
        iat = _number(claims, "iat", required=False)
        assert exp is not None
        if iat is not None and iat * 1000 > now + self.clock_skew_ms:
            raise TokenValidationError(
                f"The Issued At value ({iat} seconds) was after the indicated time ({now} ms) plus allowable "
                f"clock skew ({self.clock_skew_ms} ms)"
            )
        if now - self.clock_skew_ms >= exp * 1000:
            raise TokenValidationError(
                f"The indicated time ({now} ms) minus allowable clock skew ({self.clock_skew_ms} ms) was on or "
                f"after the Expiration Time value ({exp} seconds)"
            )
        if iat is not None and exp <= iat:
            raise TokenValidationError(
                f"The Expiration Time time ({exp} seconds) was not after the Issued At time ({iat} seconds)"
            )
        scope = scope_of(claims, self.scope_claim)
        missing = self.required_scope - scope
        if missing:
            raise TokenValidationError(
                f"The provided scope ({' '.join(sorted(scope))}) was missing a required scope "
                f"({' '.join(sorted(missing))})",
                status="insufficient_scope",
                scope=" ".join(sorted(self.required_scope)),
            )
        return OAuthBearerToken(token, principal, scope, int(exp * 1000), int(iat * 1000) if iat is not None else None)


def unsecured_token(
    principal: str,
    *,
    life_s: float = 3600,
    scope: tuple[str, ...] = (),
    principal_claim: str = "sub",
    scope_claim: str = "scope",
    extensions: Mapping[str, str] | None = None,
    now_s: float | None = None,
) -> BearerToken:
    """An unsecured JWT for ``principal`` that expires in ``life_s`` (librdkafka's
    ``enable.sasl.oauthbearer.unsecure.jwt``, Kafka's unsecured login callback)."""
    now = time.time() if now_s is None else now_s
    claims: dict[str, Any] = {principal_claim: principal, "iat": int(now), "exp": int(now + life_s)}
    if scope:
        claims[scope_claim] = list(scope)
    header = b64url_encode(json.dumps({"alg": "none"}).encode())
    body = b64url_encode(json.dumps(claims).encode())
    return BearerToken(f"{header}.{body}.", float(claims["exp"]), principal, dict(extensions or {}))


def parse_unsecured_config(text: str) -> dict[str, Any]:
    """librdkafka's ``sasl.oauthbearer.config`` for its unsecured JWT: space-separated
    ``principal=`` (required), ``scope=`` (comma separated), ``lifeSeconds=`` (default 3600),
    ``principalClaimName=``, ``scopeClaimName=``, ``extension_<name>=``; ValueError otherwise."""
    options: dict[str, str] = {}
    for item in text.split():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"sasl.oauthbearer.config: expected key=value, got {item!r}")
        options[key] = value
    principal = options.pop("principal", "")
    if not principal:
        raise ValueError("sasl.oauthbearer.config: principal=<name> is required for an unsecured JWT")
    out: dict[str, Any] = {"principal": principal, "extensions": {}}
    for key, value in options.items():
        if key == "scope":
            out["scope"] = tuple(s for s in value.split(",") if s)
        elif key == "lifeSeconds":
            if not value.isdigit() or int(value) <= 0:
                raise ValueError(f"sasl.oauthbearer.config: lifeSeconds must be a positive integer, got {value!r}")
            out["life_s"] = int(value)
        elif key == "principalClaimName":
            out["principal_claim"] = value
        elif key == "scopeClaimName":
            out["scope_claim"] = value
        elif key.startswith("extension_") and len(key) > len("extension_"):
            out["extensions"][key[len("extension_") :]] = value
        else:
            raise ValueError(f"sasl.oauthbearer.config: unknown option {key!r}")
    return out


__all__ = [
    "CLOCK_SKEW_OPTION",
    "PRINCIPAL_CLAIM_OPTION",
    "REQUIRED_SCOPE_OPTION",
    "SCOPE_CLAIM_OPTION",
    "UnsecuredValidator",
    "b64url_decode",
    "b64url_encode",
    "json_part",
    "parse_unsecured_config",
    "scope_of",
    "unsecured_token",
]
