"""How a broker logs in with OAUTHBEARER to other brokers (``sasl.mechanism.inter.broker.protocol=OAUTHBEARER``),
as Kafka's login callback handlers do, from the inter-broker listener's ``OAuthBearerLoginModule``
JAAS config (``listener.name.<l>.oauthbearer.sasl.jaas.config``, else ``sasl.jaas.config``):

- with ``sasl.oauthbearer.token.endpoint.url`` set (per listener:
  ``listener.name.<l>.oauthbearer.sasl.oauthbearer.token.endpoint.url``): Kafka's
  ``OAuthBearerLoginCallbackHandler``, tokens by the client-credentials grant with the JAAS options
  ``clientId``, ``clientSecret`` (both required) and ``scope``, retried with
  ``sasl.login.retry.backoff.ms`` / ``sasl.login.retry.backoff.max.ms``
  (:mod:`.oauth_token_endpoint`);
- else Kafka's default, ``OAuthBearerUnsecuredLoginCallbackHandler``: an unsecured JWT with the
  claims of the JAAS options ``unsecuredLoginStringClaim_<name>="value"``,
  ``unsecuredLoginNumberClaim_<name>="1"``, ``unsecuredLoginListClaim_<name>=",a,b"`` (the first
  character separates the items), the principal claim ``unsecuredLoginPrincipalClaimName``
  (default ``sub``, required), ``unsecuredLoginScopeClaimName`` (default ``scope``) and a lifetime
  of ``unsecuredLoginLifetimeSeconds`` (default 3600); ``iat`` and ``exp`` are set by the login.

Either way ``extension_<name>`` (token endpoint) or ``unsecuredLoginExtension_<name>`` (unsecured)
options are SASL extensions (KIP-342). The token is kept for every inter-broker connection and
replaced at 80% of its lifetime; connections re-authenticate before their session (bounded by the
token's expiry on the other broker) ends (KIP-368). Every mistake is a :class:`ConfigError` at
start-up.
"""

from __future__ import annotations

import json
import math
import os
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..config import ConfigError
from .jaas import JaasConfigEntry
from .mechanism import SaslError
from .oauth_token_endpoint import (
    RefreshingTokenProvider,
    TokenEndpointSettings,
    check_allowed_url,
    check_token_endpoint_url,
    fetch_token,
)
from .oauth_unsecured import b64url_encode
from .oauthbearer import LOGIN_MODULE, BearerToken, validate_extensions

TOKEN_ENDPOINT_URL = "sasl.oauthbearer.token.endpoint.url"
ALLOWED_URLS = "sasl.oauthbearer.allowed.urls"
STRING_CLAIM = "unsecuredLoginStringClaim_"
NUMBER_CLAIM = "unsecuredLoginNumberClaim_"
LIST_CLAIM = "unsecuredLoginListClaim_"
UNSECURED_EXTENSION = "unsecuredLoginExtension_"
EXTENSION = "extension_"

#: a listener's value of an OAUTHBEARER broker key (``listener.name.<l>.oauthbearer.<key>`` first)
Setting = Callable[[str, Any], Any]


def _by_prefix(options: Mapping[str, str], prefix: str) -> dict[str, str]:
    return {k[len(prefix) :]: v for k, v in options.items() if k.startswith(prefix) and len(k) > len(prefix)}


def _extensions(options: Mapping[str, str], prefix: str, where: str) -> dict[str, str]:
    extensions = _by_prefix(options, prefix)
    try:
        validate_extensions(extensions)
    except SaslError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return extensions


def unsecured_login_claims(options: Mapping[str, str], where: str) -> tuple[dict[str, Any], str, float]:
    """The claims (without ``iat``/``exp``), principal and lifetime (s) of Kafka's unsecured login."""
    claims: dict[str, Any] = dict(_by_prefix(options, STRING_CLAIM))
    for name, text in _by_prefix(options, NUMBER_CLAIM).items():
        try:
            claims[name] = int(text) if text.strip().lstrip("-").isdigit() else float(text)
        except ValueError:
            raise ConfigError(f"{where}: {NUMBER_CLAIM}{name} is not a number: {text!r}") from None
    for name, text in _by_prefix(options, LIST_CLAIM).items():
        claims[name] = [item for item in text[1:].split(text[0])] if text else []
    for reserved in ("iat", "exp"):
        if reserved in claims:
            raise ConfigError(f"{where}: the {reserved} claim is set by the login, not by the JAAS options")
    principal_claim = options.get("unsecuredLoginPrincipalClaimName", "").strip() or "sub"
    principal = claims.get(principal_claim)
    if not isinstance(principal, str) or not principal.strip():
        raise ConfigError(
            f'{where}: the unsecured login needs its principal: {STRING_CLAIM}{principal_claim}="<name>" '
            f"(unsecuredLoginPrincipalClaimName: {principal_claim})"
        )
    scope_claim = options.get("unsecuredLoginScopeClaimName", "").strip() or "scope"
    if scope_claim in claims and not isinstance(claims[scope_claim], list):
        claims[scope_claim] = str(claims[scope_claim]).split()
    lifetime_text = options.get("unsecuredLoginLifetimeSeconds", "3600").strip() or "3600"
    try:
        lifetime = float(lifetime_text)
    except ValueError:
        raise ConfigError(f"{where}: unsecuredLoginLifetimeSeconds is not a number: {lifetime_text!r}") from None
    if lifetime <= 0:
        raise ConfigError(f"{where}: unsecuredLoginLifetimeSeconds must be positive, got {lifetime_text}")
    return claims, principal, lifetime


def unsecured_login_provider(options: Mapping[str, str], where: str) -> RefreshingTokenProvider:
    """Kafka's unsecured login: a new unsecured JWT at 80% of the last one's lifetime."""
    claims, principal, lifetime = unsecured_login_claims(options, where)
    extensions = _extensions(options, UNSECURED_EXTENSION, where)
    header = b64url_encode(json.dumps({"alg": "none"}).encode())

    async def mint() -> BearerToken:
        now = math.floor(time.time() * 1000) / 1000  # whole ms, never ahead of the validator's clock
        body = {**claims, "iat": now, "exp": now + lifetime}
        token = f"{header}.{b64url_encode(json.dumps(body).encode())}."
        return BearerToken(token, now + lifetime, principal, extensions)

    return RefreshingTokenProvider(mint)


def token_endpoint_login_settings(
    url: str, options: Mapping[str, str], setting: Setting, where: str
) -> TokenEndpointSettings:
    """Kafka's ``OAuthBearerLoginCallbackHandler`` settings for ``url``; ConfigError."""
    try:
        check_token_endpoint_url(url, allow_file=True)
        check_allowed_url(url, list(setting(ALLOWED_URLS, ["*"])), ALLOWED_URLS)
    except ValueError as exc:
        raise ConfigError(f"invalid value for {TOKEN_ENDPOINT_URL!r} ({where}): {exc}") from None
    is_file = url.lower().startswith("file:")
    if is_file and not os.path.isfile(urllib.request.url2pathname(urllib.parse.urlparse(url).path)):
        raise ConfigError(f"invalid value for {TOKEN_ENDPOINT_URL!r} ({where}): no token file at {url}")
    for option in ("clientId", "clientSecret"):
        if not is_file and not options.get(option, "").strip():
            raise ConfigError(f'{where}: the token endpoint login needs {option}="..." in the JAAS config')
    backoff_ms = int(setting("sasl.login.retry.backoff.ms", 100))
    return TokenEndpointSettings(
        url,
        options.get("clientId", "").strip(),
        options.get("clientSecret", ""),
        scope=options.get("scope", "").strip(),
        extensions=_extensions(options, EXTENSION, where),
        sub_claim=str(setting("sasl.oauthbearer.sub.claim.name", "sub")) or "sub",
        retry_backoff_s=backoff_ms / 1000,
        retry_backoff_max_s=max(backoff_ms, int(setting("sasl.login.retry.backoff.max.ms", 10_000))) / 1000,
    )


def login_provider(jaas: JaasConfigEntry | None, setting: Setting, where: str) -> RefreshingTokenProvider:
    """The broker's OAUTHBEARER token source on a listener (see the module docstring)."""
    if jaas is not None and jaas.login_module != LOGIN_MODULE:
        raise ConfigError(f"the JAAS config for {where} names login module {jaas.login_module}, not {LOGIN_MODULE}")
    options = jaas.options if jaas is not None else {}
    url = str(setting(TOKEN_ENDPOINT_URL, "")).strip()
    if url:
        settings = token_endpoint_login_settings(url, options, setting, where)
        return RefreshingTokenProvider(lambda: fetch_token(settings))
    return unsecured_login_provider(options, where)


def check_allowed(urls: Sequence[str], allowed: Sequence[str], where: str) -> None:
    """ConfigError for a URL the allow-list refuses."""
    for url in urls:
        try:
            check_allowed_url(url, allowed, ALLOWED_URLS)
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None


__all__ = [
    "ALLOWED_URLS",
    "TOKEN_ENDPOINT_URL",
    "check_allowed",
    "login_provider",
    "token_endpoint_login_settings",
    "unsecured_login_claims",
    "unsecured_login_provider",
]
