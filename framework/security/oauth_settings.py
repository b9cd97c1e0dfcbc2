"""The OAUTHBEARER mechanism as the ``sasl`` plugin registers it: which validator a listener
uses, from its config, and the config keys.

A listener whose ``sasl.oauthbearer.jwks.endpoint.url`` is set (Kafka's per-listener form
``listener.name.<l>.oauthbearer.sasl.oauthbearer.jwks.endpoint.url`` first) validates signed
JWTs (KIP-768, :mod:`.oauth_jwt`); that is what Kafka does with
``sasl.server.callback.handler.class=...OAuthBearerValidatorCallbackHandler``, a Java class
odradek has no need of. Without it, the listener takes Kafka's default, the unsecured validator
(:mod:`.oauth_unsecured`), configured by the ``unsecuredValidator*`` options of its
``OAuthBearerLoginModule`` JAAS config (which may be absent). The validator, and with it the JWKS
cache, is built once per listener; each exchange gets a fresh server over it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from ..config import ConfigError
from ..interfaces import ConfigKey
from .mechanism import SaslMechanism, SaslServer, SaslServerContext
from .oauth_jwt import JwksError, JwksSource, JwtValidator, parse_jwks, read_url
from .oauth_login import ALLOWED_URLS, TOKEN_ENDPOINT_URL, check_allowed
from .oauth_unsecured import UnsecuredValidator
from .oauthbearer import LOGIN_MODULE, MECHANISM, BearerToken, OAuthBearerSaslServer, TokenValidator

PREFIX = "oauthbearer."
JWKS_URL = "sasl.oauthbearer.jwks.endpoint.url"


def _setting(context: SaslServerContext, name: str, default: Any) -> Any:
    config = context.config
    if config is None:
        return default
    try:
        return config.listener_setting(context.listener, name, PREFIX)
    except ConfigError:  # a config built without the sasl plugin's keys
        return default


def _where(context: SaslServerContext) -> str:
    return f"OAUTHBEARER on listener {context.listener}"


def build_validator(context: SaslServerContext) -> TokenValidator:
    """The listener's validator (see the module docstring); ConfigError when it cannot work."""
    jaas = context.jaas
    if jaas is not None and jaas.login_module != LOGIN_MODULE:
        raise ConfigError(
            f"the JAAS config for {_where(context)} names login module {jaas.login_module}, not {LOGIN_MODULE}"
        )
    url = str(_setting(context, JWKS_URL, "")).strip()
    if not url:
        try:
            return UnsecuredValidator.from_jaas(jaas)
        except ValueError as exc:
            raise ConfigError(f"the JAAS config for {_where(context)}: {exc}") from None
    check_allowed([url], list(_setting(context, ALLOWED_URLS, ["*"])), f"invalid value for {JWKS_URL!r}")
    try:
        source = JwksSource(url, int(_setting(context, "sasl.oauthbearer.jwks.endpoint.refresh.ms", 3_600_000)))
        if url.lower().startswith("file:"):
            parse_jwks(read_url(url), url)  # Kafka reads a JWKS file at start-up: a bad one stops the broker
    except JwksError as exc:
        raise ConfigError(f"invalid value for {JWKS_URL!r} ({_where(context)}): {exc}") from None
    return JwtValidator(
        source,
        expected_audience=tuple(_setting(context, "sasl.oauthbearer.expected.audience", [])),
        expected_issuer=str(_setting(context, "sasl.oauthbearer.expected.issuer", "")),
        scope_claim=str(_setting(context, "sasl.oauthbearer.scope.claim.name", "scope")) or "scope",
        sub_claim=str(_setting(context, "sasl.oauthbearer.sub.claim.name", "sub")) or "sub",
        clock_skew_s=int(_setting(context, "sasl.oauthbearer.clock.skew.seconds", 30)),
    )


def _servers(context: SaslServerContext) -> Callable[[], SaslServer]:
    validator = build_validator(context)
    return lambda: OAuthBearerSaslServer(validator)


def _server(context: SaslServerContext) -> SaslServer:
    return _servers(context)()


def _check(context: SaslServerContext) -> None:
    build_validator(context)


def oauthbearer_mechanism() -> SaslMechanism:
    """OAUTHBEARER as the ``sasl`` plugin registers it."""
    return SaslMechanism(
        MECHANISM,
        _server,
        check=_check,
        listener_servers=_servers,
        description="OAUTHBEARER (RFC 7628, KIP-255/768); unsecured JWTs, or JWTs signed by a JWKS key",
    )


async def call_token_provider(provider: Callable[[], Any]) -> BearerToken:
    """A token from ``provider`` (sync or async)."""
    result = provider()
    if inspect.isawaitable(result):
        result = await result
    if not isinstance(result, BearerToken):
        raise TypeError(f"the OAUTHBEARER token provider returned {type(result).__name__}, not a BearerToken")
    return result


def config_keys() -> Sequence[ConfigKey]:
    """KIP-768's broker keys (per listener: ``listener.name.<l>.oauthbearer.<key>``)."""
    per = {"per_listener": "mechanism"}
    tail = " Per listener: listener.name.<listener>.oauthbearer.<this key>."
    return [
        ConfigKey(
            JWKS_URL, str, "",
            "OAUTHBEARER: the JWKS whose keys sign the JWTs SASL listeners accept (KIP-768), a file: URL "
            "(read at start-up, a bad file stops the broker) or an http(s): URL (read when first needed). "
            "Empty: unsecured JWTs are accepted (Kafka's development default; options from the "
            "OAuthBearerLoginModule JAAS config)." + tail,
            extra=per,
        ),
        ConfigKey(
            TOKEN_ENDPOINT_URL, str, "",
            "OAUTHBEARER inter-broker login (sasl.mechanism.inter.broker.protocol=OAUTHBEARER): the OAuth 2 "
            "token endpoint the broker gets its tokens from by the client-credentials grant, with clientId, "
            "clientSecret and scope from the listener's OAuthBearerLoginModule JAAS config (Kafka's "
            "OAuthBearerLoginCallbackHandler); http:, https:, or file: (a file holding the token). Empty: "
            "Kafka's unsecured login (unsecuredLogin* JAAS options)." + tail,
            extra=per,
        ),
        ConfigKey(
            "sasl.login.retry.backoff.ms", int, 100,
            "OAUTHBEARER token endpoint login: first wait before asking again after a failed request (5xx, "
            "no answer); doubled up to sasl.login.retry.backoff.max.ms, 5 requests at most. A 4xx answer "
            "(a wrong secret) is not retried." + tail,
            minimum=0, extra=per,
        ),
        ConfigKey(
            "sasl.login.retry.backoff.max.ms", int, 10_000,
            "OAUTHBEARER token endpoint login: the longest wait between requests." + tail,
            minimum=0, extra=per,
        ),
        ConfigKey(
            ALLOWED_URLS, list, ["*"],
            "OAUTHBEARER: the URLs sasl.oauthbearer.jwks.endpoint.url and sasl.oauthbearer.token.endpoint.url "
            "may name (comma separated, exact match; * allows every URL), checked at start-up. Kafka's "
            "JVM system property org.apache.kafka.sasl.oauthbearer.allowed.urls; its default is Kafka "
            "3.9.1's (every URL), not 4.0's (none).",
        ),
        ConfigKey(
            "sasl.oauthbearer.jwks.endpoint.refresh.ms", int, 3_600_000,
            "OAUTHBEARER: reload the JWKS when its keys are older than this; a token with an unknown kid "
            "reloads it too (at most every 10 s)." + tail,
            minimum=1, extra=per,
        ),
        ConfigKey(
            "sasl.oauthbearer.expected.audience", list, [],
            "OAUTHBEARER: a JWT's aud must name one of these (comma separated); empty: not checked." + tail,
            extra=per,
        ),
        ConfigKey(
            "sasl.oauthbearer.expected.issuer", str, "",
            "OAUTHBEARER: a JWT's iss must be this; empty: not checked." + tail,
            extra=per,
        ),
        ConfigKey(
            "sasl.oauthbearer.scope.claim.name", str, "scope",
            "OAUTHBEARER: the JWT claim holding its scope." + tail,
            extra=per,
        ),
        ConfigKey(
            "sasl.oauthbearer.sub.claim.name", str, "sub",
            "OAUTHBEARER: the JWT claim naming the principal (User:<value>)." + tail,
            extra=per,
        ),
        ConfigKey(
            "sasl.oauthbearer.clock.skew.seconds", int, 30,
            "OAUTHBEARER: how far the broker's clock may differ from the token issuer's (exp, iat)." + tail,
            minimum=0, extra=per,
        ),
    ]  # fmt: skip


__all__ = [
    "JWKS_URL",
    "build_validator",
    "call_token_provider",
    "config_keys",
    "oauthbearer_mechanism",
]
