"""Where odradek's client gets its OAUTHBEARER tokens, in librdkafka's (confluent-kafka's) terms.

- ``oauth_cb``: a callable given ``sasl.oauthbearer.config`` that returns
  ``(token, expiry_seconds_since_epoch)``, optionally with a principal and a dict of SASL
  extensions (confluent-kafka's signature), or a :class:`~.oauthbearer.BearerToken`; sync or async.
- ``enable.sasl.oauthbearer.unsecure.jwt=true`` with ``sasl.oauthbearer.config``
  (``principal=alice scope=a,b lifeSeconds=600 extension_traceId=x``): an unsecured JWT minted
  for every login, for brokers that accept them (development only).

- ``sasl.oauthbearer.method=oidc`` with ``sasl.oauthbearer.token.endpoint.url``,
  ``sasl.oauthbearer.client.id``, ``sasl.oauthbearer.client.secret`` and optionally
  ``sasl.oauthbearer.scope`` and ``sasl.oauthbearer.extensions`` (``k=v,k2=v2``): tokens from an
  OAuth 2 token endpoint by the client-credentials grant (KIP-768, :mod:`.oauth_token_endpoint`),
  kept and refreshed at 80% of their lifetime. As librdkafka, ``oidc`` excludes ``oauth_cb`` and
  the unsecured JWT, and a missing URL, client id or secret is a ConfigError.

Each is called again for every re-authentication (KIP-368), so a session is renewed with a fresh
(or still fresh) token. None set with ``sasl.mechanism=OAUTHBEARER`` is a ConfigError.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from ..config import ConfigError
from .mechanism import SaslError
from .oauth_token_endpoint import TokenEndpointSettings, check_token_endpoint_url, token_endpoint_provider
from .oauth_unsecured import parse_unsecured_config, unsecured_token
from .oauthbearer import BearerToken, TokenProvider, validate_extensions


def _bearer(result: Any) -> BearerToken:
    """confluent-kafka's ``oauth_cb`` answer as a BearerToken; TypeError when it is neither."""
    if isinstance(result, BearerToken):
        return result
    if isinstance(result, tuple) and 2 <= len(result) <= 4:
        token, expiry = result[0], result[1]
        principal = result[2] if len(result) > 2 else ""
        extensions = result[3] if len(result) > 3 else {}
        if isinstance(token, str) and isinstance(expiry, int | float) and isinstance(extensions, Mapping):
            return BearerToken(token, float(expiry), str(principal or ""), dict(extensions))
    raise TypeError("oauth_cb must return (token, expiry_seconds[, principal[, extensions]]) or a BearerToken")


def callback_provider(callback: Callable[[str], Any], oauthbearer_config: str) -> TokenProvider:
    """A provider calling ``callback(oauthbearer_config)`` (sync or async)."""

    async def provide() -> BearerToken:
        result = callback(oauthbearer_config)
        if inspect.isawaitable(result):
            result = await result
        return _bearer(result)

    return provide


def unsecured_provider(oauthbearer_config: str) -> TokenProvider:
    """A provider minting unsecured JWTs from librdkafka's ``sasl.oauthbearer.config``."""
    try:
        options = parse_unsecured_config(oauthbearer_config)
    except ValueError as exc:
        raise ConfigError(f"invalid value for 'sasl.oauthbearer.config': {exc}") from None
    return lambda: unsecured_token(**options)


def parse_extensions(text: str, key: str = "sasl.oauthbearer.extensions") -> dict[str, str]:
    """librdkafka's ``sasl.oauthbearer.extensions``: comma-separated ``key=value`` pairs."""
    out: dict[str, str] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"invalid value for {key!r}: expected key=value pairs separated by commas, got {item!r}")
        out[name.strip()] = value.strip()
    return out


def oidc_provider(config: Mapping[str, Any]) -> TokenProvider:
    """A provider of tokens from the token endpoint ``sasl.oauthbearer.method=oidc`` names."""

    def text(key: str) -> str:
        return str(config.get(key, "") or "").strip()

    if config.get("oauth_cb") not in (None, ""):
        raise ConfigError("'oauth_cb' and sasl.oauthbearer.method=oidc are mutually exclusive (librdkafka's rule)")
    if text("enable.sasl.oauthbearer.unsecure.jwt").lower() == "true":
        raise ConfigError(
            "'enable.sasl.oauthbearer.unsecure.jwt' and sasl.oauthbearer.method=oidc are mutually exclusive"
        )
    for key in ("sasl.oauthbearer.token.endpoint.url", "sasl.oauthbearer.client.id", "sasl.oauthbearer.client.secret"):
        if not text(key):
            raise ConfigError(f"{key!r} is mandatory when sasl.oauthbearer.method=oidc is set")
    url = text("sasl.oauthbearer.token.endpoint.url")
    try:
        check_token_endpoint_url(url, allow_file=False)
    except ValueError as exc:
        raise ConfigError(f"invalid value for 'sasl.oauthbearer.token.endpoint.url': {exc}") from None
    extensions = parse_extensions(text("sasl.oauthbearer.extensions"))
    try:
        validate_extensions(extensions)
    except SaslError as exc:
        raise ConfigError(f"invalid value for 'sasl.oauthbearer.extensions': {exc}") from None
    settings = TokenEndpointSettings(
        url,
        text("sasl.oauthbearer.client.id"),
        text("sasl.oauthbearer.client.secret"),
        scope=text("sasl.oauthbearer.scope"),
        extensions=extensions,
    )
    return token_endpoint_provider(settings)


def token_provider_from_config(config: Mapping[str, Any]) -> TokenProvider:
    """The token provider a client config names (see the module docstring)."""
    method = str(config.get("sasl.oauthbearer.method", "") or "default").strip().lower()
    if method == "oidc":
        return oidc_provider(config)
    if method != "default":
        raise ConfigError(f"invalid value for 'sasl.oauthbearer.method': {method!r} (default or oidc)")
    callback = config.get("oauth_cb")
    text = str(config.get("sasl.oauthbearer.config", "") or "")
    if callback is not None and callback != "":
        if not callable(callback):
            raise ConfigError("invalid value for 'oauth_cb': expected a callable")
        return callback_provider(callback, text)
    if str(config.get("enable.sasl.oauthbearer.unsecure.jwt", "false")).lower() == "true":
        return unsecured_provider(text)
    raise ConfigError(
        "sasl.mechanism OAUTHBEARER needs a token: set sasl.oauthbearer.method=oidc with a token endpoint, "
        "oauth_cb, or enable.sasl.oauthbearer.unsecure.jwt=true with sasl.oauthbearer.config=principal=<name> "
        "(development only)"
    )


__all__ = [
    "callback_provider",
    "oidc_provider",
    "parse_extensions",
    "token_provider_from_config",
    "unsecured_provider",
]
