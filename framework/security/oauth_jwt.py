"""Secured OAUTHBEARER tokens (KIP-768): JWTs signed by a key of a JWKS, Kafka's
``OAuthBearerValidatorCallbackHandler`` with its broker JWT validator.

The listener's ``sasl.oauthbearer.jwks.endpoint.url`` (``file:`` or ``http(s):``) names the JWKS.
:class:`JwksSource` keeps its keys: loaded on first use, reloaded once older than
``sasl.oauthbearer.jwks.endpoint.refresh.ms``, and when a token names a ``kid`` it does not have
(at most once per :data:`MISSING_KID_REFRESH_S`, so tokens with made-up ``kid`` s cannot make the
broker hammer the identity provider). Reading the URL runs in a worker thread: an authentication
waiting for the JWKS never blocks the broker's event loop. A reload that fails keeps the keys it
had (and is logged).

:class:`JwtValidator` checks a token as Kafka's broker does: an asymmetric signature
(RS/PS/ES 256/384/512, EdDSA; never ``none`` nor an HMAC, whose "key" the JWKS would publish) by
the key its ``kid`` names, ``exp`` and ``iat`` present, ``exp`` not passed and ``iat`` not in the
future within ``sasl.oauthbearer.clock.skew.seconds``, the audience one of
``sasl.oauthbearer.expected.audience`` and the issuer ``sasl.oauthbearer.expected.issuer`` when
they are set, the principal the non-empty string claim ``sasl.oauthbearer.sub.claim.name`` and the
scope the claim ``sasl.oauthbearer.scope.claim.name``.
"""

from __future__ import annotations

import json
import logging
import math
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jwt
import trio

from .oauth_unsecured import scope_of
from .oauthbearer import OAuthBearerToken, TokenValidationError

log = logging.getLogger("odradek.security.oauthbearer")

#: signature algorithms a JWKS key may verify (asymmetric only)
ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"})
#: unknown ``kid`` s reload the JWKS at most this often (seconds)
MISSING_KID_REFRESH_S = 10.0
#: how long reading an http(s) JWKS may take (seconds)
FETCH_TIMEOUT_S = 10.0


class JwksError(Exception):
    """The JWKS cannot be read or holds no usable key."""


def check_jwks_url(url: str) -> None:
    """JwksError unless ``url`` is a ``file:``, ``http:`` or ``https:`` URL."""
    scheme = urllib.parse.urlparse(url).scheme.lower()
    if scheme not in ("file", "http", "https"):
        raise JwksError(f"the JWKS endpoint URL must be a file:, http: or https: URL, not {url!r}")


def read_url(url: str) -> bytes:
    """The bytes at ``url`` (blocking: run in a thread)."""
    check_jwks_url(url)
    try:
        with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_S) as response:
            return bytes(response.read())
    except (OSError, ValueError) as exc:
        raise JwksError(f"cannot read the JWKS at {url}: {exc}") from None


@dataclass(frozen=True, slots=True)
class JwksKey:
    """A JWKS signing key, and the algorithm it declares (``alg``; None: any its type allows)."""

    key: jwt.PyJWK
    alg: str | None


def parse_jwks(raw: bytes, url: str = "the JWKS") -> dict[str, JwksKey]:
    """The signing keys of a JWKS document by ``kid`` (a key without one is keyed ""); keys that
    are not for signatures or that pyjwt cannot use are skipped (logged)."""
    try:
        document = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        raise JwksError(f"{url} is not JSON") from None
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise JwksError(f'{url} is not a JWKS (a JSON object with a "keys" list)')
    keys: dict[str, JwksKey] = {}
    for item in document["keys"]:
        if not isinstance(item, dict) or item.get("use", "sig") != "sig":
            continue
        try:
            key = jwt.PyJWK(item)
        except (jwt.PyJWTError, ValueError, TypeError, KeyError) as exc:
            log.warning("%s: skipping key %r: %s", url, item.get("kid"), exc)
            continue
        if key.algorithm_name not in ALGORITHMS or item.get("alg", key.algorithm_name) not in ALGORITHMS:
            log.warning("%s: skipping key %r: algorithm %s is not allowed", url, item.get("kid"), key.algorithm_name)
            continue
        keys[str(item.get("kid", ""))] = JwksKey(key, item.get("alg"))
    if not keys:
        raise JwksError(f"{url} has no usable signing key")
    return keys


class JwksSource:
    """A listener's JWKS, kept fresh (see the module docstring). ``fetch`` reads the URL
    (blocking; run in a thread); ``clock`` is trio's."""

    def __init__(
        self,
        url: str,
        refresh_ms: int = 3_600_000,
        *,
        fetch: Callable[[str], bytes] = read_url,
        missing_kid_refresh_s: float = MISSING_KID_REFRESH_S,
    ) -> None:
        check_jwks_url(url)
        self.url = url
        self.refresh_s = refresh_ms / 1000
        self.missing_kid_refresh_s = missing_kid_refresh_s
        self._fetch = fetch
        self._keys: dict[str, JwksKey] = {}
        self._loaded_at = -math.inf
        self._missing_refresh_at = -math.inf
        self._lock = trio.Lock()
        #: how many times the JWKS was read (successfully or not)
        self.fetches = 0

    async def _refresh(self) -> None:
        async with self._lock:
            self.fetches += 1
            try:
                raw = await trio.to_thread.run_sync(self._fetch, self.url, abandon_on_cancel=True)
                self._keys = parse_jwks(raw, self.url)
            except JwksError as exc:
                if not self._keys:
                    raise
                log.warning("keeping the JWKS keys already loaded: %s", exc)
            finally:
                self._loaded_at = trio.current_time()

    async def key_for(self, kid: str | None) -> JwksKey:
        """The key ``kid`` names (None: the JWKS's only key); TokenValidationError when none."""
        try:
            if trio.current_time() - self._loaded_at >= self.refresh_s:
                await self._refresh()
            key = self._pick(kid)
            if key is None and trio.current_time() - self._missing_refresh_at >= self.missing_kid_refresh_s:
                self._missing_refresh_at = trio.current_time()
                await self._refresh()
                key = self._pick(kid)
        except JwksError as exc:
            raise TokenValidationError(str(exc)) from None
        if key is None:
            if kid is None:
                raise TokenValidationError("the token names no kid and the JWKS has more than one key")
            raise TokenValidationError(f"no key with kid {kid!r} in the JWKS at {self.url}")
        return key

    def _pick(self, kid: str | None) -> JwksKey | None:
        if kid is not None:
            return self._keys.get(kid)
        return next(iter(self._keys.values())) if len(self._keys) == 1 else None


@dataclass(frozen=True, slots=True)
class JwtValidator:
    """Kafka's broker JWT validator (see the module docstring)."""

    jwks: JwksSource
    expected_audience: Sequence[str] = ()
    expected_issuer: str = ""
    scope_claim: str = "scope"
    sub_claim: str = "sub"
    clock_skew_s: int = 30
    algorithms: frozenset[str] = field(default=ALGORITHMS)

    async def validate(self, token: str) -> OAuthBearerToken:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise TokenValidationError(f"the token is not a JWS: {exc}") from None
        alg = header.get("alg")
        if alg not in self.algorithms:
            raise TokenValidationError(f"the token's algorithm {alg!r} is not accepted")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise TokenValidationError("the token's kid is not a string")
        key = await self.jwks.key_for(kid)
        if key.alg is not None and key.alg != alg:
            raise TokenValidationError(f"the token's algorithm {alg} is not its key's ({key.alg})")
        claims = self._decode(token, key, alg)
        sub = claims.get(self.sub_claim)
        if not isinstance(sub, str) or not sub.strip():
            raise TokenValidationError(f"the token's {self.sub_claim} claim must be a non-empty string")
        return OAuthBearerToken(
            token, sub, scope_of(claims, self.scope_claim), int(claims["exp"] * 1000), int(claims["iat"] * 1000)
        )

    def _decode(self, token: str, key: JwksKey, alg: str) -> dict[str, Any]:
        try:
            return jwt.decode(
                token,
                key.key.key,
                algorithms=[alg],
                audience=list(self.expected_audience) or None,
                issuer=self.expected_issuer or None,
                leeway=self.clock_skew_s,
                options={"require": ["exp", "iat"], "verify_aud": bool(self.expected_audience)},
            )
        except jwt.PyJWTError as exc:
            raise TokenValidationError(f"Could not validate the access token: {exc}") from None
        except (ValueError, TypeError) as exc:  # a key that cannot verify this algorithm
            raise TokenValidationError(f"Could not validate the access token: {type(exc).__name__}: {exc}") from None


__all__ = [
    "ALGORITHMS",
    "FETCH_TIMEOUT_S",
    "MISSING_KID_REFRESH_S",
    "JwksError",
    "JwksKey",
    "JwksSource",
    "JwtValidator",
    "check_jwks_url",
    "parse_jwks",
    "read_url",
]
