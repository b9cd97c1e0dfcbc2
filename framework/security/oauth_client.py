"""Where odradek's client gets its OAUTHBEARER tokens, in librdkafka's (confluent-kafka's) terms.

- ``oauth_cb``: a callable given ``sasl.oauthbearer.config`` that returns
  ``(token, expiry_seconds_since_epoch)``, optionally with a principal and a dict of SASL
  extensions (confluent-kafka's signature), or a :class:`~.oauthbearer.BearerToken`; sync or async.
- ``enable.sasl.oauthbearer.unsecure.jwt=true`` with ``sasl.oauthbearer.config``
  (``principal=alice scope=a,b lifeSeconds=600 extension_traceId=x``): an unsecured JWT minted
  for every login, for brokers that accept them (development only).

Either is called again for every re-authentication (KIP-368), so a session is renewed with a new
token. Neither set with ``sasl.mechanism=OAUTHBEARER`` is a ConfigError.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from ..config import ConfigError
from .oauth_unsecured import parse_unsecured_config, unsecured_token
from .oauthbearer import BearerToken, TokenProvider


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


def token_provider_from_config(config: Mapping[str, Any]) -> TokenProvider:
    """The token provider a client config names (see the module docstring)."""
    callback = config.get("oauth_cb")
    text = str(config.get("sasl.oauthbearer.config", "") or "")
    if callback is not None and callback != "":
        if not callable(callback):
            raise ConfigError("invalid value for 'oauth_cb': expected a callable")
        return callback_provider(callback, text)
    if str(config.get("enable.sasl.oauthbearer.unsecure.jwt", "false")).lower() == "true":
        return unsecured_provider(text)
    raise ConfigError(
        "sasl.mechanism OAUTHBEARER needs a token: set oauth_cb, or enable.sasl.oauthbearer.unsecure.jwt=true "
        "with sasl.oauthbearer.config=principal=<name> (development only)"
    )


__all__ = ["callback_provider", "token_provider_from_config", "unsecured_provider"]
