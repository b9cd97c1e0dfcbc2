"""A listener's SASL settings from the broker config, checked once at start-up.

For each SASL listener (``SASL_PLAINTEXT``, ``SASL_SSL``): the enabled mechanisms
(``sasl.enabled.mechanisms``, or ``listener.name.<l>.sasl.enabled.mechanisms``), each with the
JAAS config Kafka would give it (``listener.name.<l>.<mechanism>.sasl.jaas.config``, else
``sasl.jaas.config``), the failed-authentication delay and the pre-authentication frame bound.
Everything a client could trip over later is refused here with a :class:`ConfigError`: an
unknown mechanism, JAAS text that does not parse, PLAIN without users. ``connections.max.reauth.ms``
(per mechanism, as Kafka's ``listener.name.<l>.<mechanism>.connections.max.reauth.ms``) is the
session lifetime re-authentication (KIP-368) renews. :func:`inter_broker_client_config` is the client side the broker
itself uses towards a SASL listener.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..config import Config, ConfigError
from ..interfaces import Endpoint
from .jaas import JaasConfigEntry, JaasError, parse_jaas_config
from .mechanism import CredentialLookup, SaslMechanism, SaslServer, SaslServerContext
from .oauth_login import login_provider
from .oauthbearer import MECHANISM as OAUTHBEARER

SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})


def is_sasl(endpoint: Endpoint) -> bool:
    return endpoint.security_protocol in SASL_PROTOCOLS


@dataclass(frozen=True, slots=True)
class SaslListenerSettings:
    """What a SASL listener's connections need to authenticate clients."""

    listener: str
    #: enabled mechanisms in preference order: a factory of a fresh server per exchange
    mechanisms: Mapping[str, Callable[[], SaslServer]]
    failed_delay_s: float
    max_receive_size: int
    #: ``connections.max.reauth.ms`` per mechanism: the session lifetime (0: never expires)
    reauth_ms: Mapping[str, int] = field(default_factory=dict)


def _setting(config: Config, listener: str, name: str, default: Any, prefix: str = "") -> Any:
    try:
        return config.listener_setting(listener, name, prefix)
    except ConfigError:  # a config built without the sasl plugin's keys
        return default


def jaas_for(config: Config, listener: str, mechanism: str) -> JaasConfigEntry | None:
    """The JAAS login module Kafka gives ``mechanism`` on ``listener``, None when none is set."""
    text = _setting(config, listener, "sasl.jaas.config", "", f"{mechanism.lower()}.")
    if not text:
        return None
    key = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    if not config.is_set(key):
        key = "sasl.jaas.config"
    try:
        return parse_jaas_config(text, key=key)
    except JaasError as exc:
        raise ConfigError(str(exc)) from None


def enabled_mechanisms(config: Config, listener: str) -> list[str]:
    return [str(m).strip().upper() for m in _setting(config, listener, "sasl.enabled.mechanisms", [])]


def build_listener_settings(
    config: Config,
    endpoint: Endpoint,
    available: Mapping[str, SaslMechanism],
    credential_for: CredentialLookup,
) -> SaslListenerSettings:
    """The SASL settings of ``endpoint``; ConfigError for anything that cannot work."""
    listener = endpoint.name
    enabled = enabled_mechanisms(config, listener)
    if not enabled:
        raise ConfigError(
            f"invalid value for 'sasl.enabled.mechanisms': listener {listener} is SASL but enables no mechanism"
        )
    factories: dict[str, Callable[[], SaslServer]] = {}
    reauth_ms: dict[str, int] = {}
    for name in enabled:
        mechanism = available.get(name)
        if mechanism is None:
            raise ConfigError(
                f"invalid value for 'sasl.enabled.mechanisms': no plugin offers SASL mechanism {name} "
                f"(available: {', '.join(sorted(available)) or 'none'})"
            )
        reauth_ms[name] = int(_setting(config, listener, "connections.max.reauth.ms", 0, f"{name.lower()}."))
        context = SaslServerContext(listener, name, jaas_for(config, listener, name), credential_for, config)
        if mechanism.check is not None:
            mechanism.check(context)
        factories[name] = _factory(mechanism, context)
    return SaslListenerSettings(
        listener,
        factories,
        int(_setting(config, listener, "connection.failed.authentication.delay.ms", 100)) / 1000,
        int(_setting(config, listener, "sasl.server.max.receive.size", 524288)),
        reauth_ms,
    )


def available_mechanisms(config: Config) -> dict[str, SaslMechanism]:
    """The SASL mechanisms the config's plugins offer (the default plugins for a config built
    without them, as tests do)."""
    plugins = config.plugins
    if plugins is None:
        from ..manager import default_plugins

        plugins = default_plugins()
    return plugins.sasl_mechanisms()


def listener_sasl_settings(config: Config, broker: Any, endpoint: Endpoint) -> SaslListenerSettings:
    """:func:`build_listener_settings` for a broker's listener: SCRAM credentials come from the
    broker's metadata store (``broker.scram_credentials``; none for a broker without one)."""
    store = getattr(broker, "scram_credentials", None)

    async def credential_for(user: str, mechanism: Any) -> Any:
        return None if store is None else await store.credential(user, mechanism)

    return build_listener_settings(config, endpoint, available_mechanisms(config), credential_for)


def check_security_config(config: Config) -> None:
    """Refuse at start-up what a SASL listener or the broker's own SASL connections could not
    use (ConfigError): every SASL listener's settings, and the inter-broker client's."""

    async def no_credentials(user: str, mechanism: Any) -> Any:
        return None

    listeners = config.listeners
    available: dict[str, SaslMechanism] | None = None
    for endpoint in listeners:
        if is_sasl(endpoint):
            available = available if available is not None else available_mechanisms(config)
            build_listener_settings(config, endpoint, available, no_credentials)
    inter_broker = config.inter_broker_listener
    if inter_broker is not None and is_sasl(inter_broker):
        inter_broker_client_config(config, inter_broker, available or available_mechanisms(config))


def _factory(mechanism: SaslMechanism, context: SaslServerContext) -> Callable[[], SaslServer]:
    if mechanism.listener_servers is not None:
        return mechanism.listener_servers(context)
    return lambda: mechanism.server(context)


def inter_broker_client_config(
    config: Config, endpoint: Endpoint, available: Mapping[str, SaslMechanism]
) -> dict[str, Any]:
    """The client settings the broker's own connections use towards ``endpoint``'s listener on
    other brokers: ``security.protocol``, and for SASL the mechanism
    (``sasl.mechanism.inter.broker.protocol``, else the listener's first enabled one) with the
    ``username`` and ``password`` options of its JAAS config, as Kafka takes them; for
    OAUTHBEARER the token source of :mod:`.oauth_login` as ``oauth_cb`` (build it once per broker:
    it keeps the token its connections share)."""
    out: dict[str, Any] = {"security.protocol": endpoint.security_protocol}
    if not is_sasl(endpoint):
        return out
    enabled = enabled_mechanisms(config, endpoint.name)
    mechanism = str(_setting(config, endpoint.name, "sasl.mechanism.inter.broker.protocol", "")).strip().upper()
    mechanism = mechanism or (enabled[0] if enabled else "")
    key = "sasl.mechanism.inter.broker.protocol"
    if mechanism not in enabled:
        raise ConfigError(
            f"invalid value for {key!r}: {mechanism or 'none'} is not enabled on the inter-broker listener "
            f"{endpoint.name} (sasl.enabled.mechanisms: {', '.join(enabled) or 'none'})"
        )
    if mechanism == OAUTHBEARER:
        where = f"inter-broker SASL/OAUTHBEARER on listener {endpoint.name}"

        def setting(name: str, default: Any) -> Any:
            return _setting(config, endpoint.name, name, default, "oauthbearer.")

        provider = login_provider(jaas_for(config, endpoint.name, mechanism), setting, where)
        out.update({"sasl.mechanism": mechanism, "oauth_cb": lambda _config: provider()})
        return out
    plugin = available.get(mechanism)
    if plugin is None or plugin.client is None:
        raise ConfigError(
            f"invalid value for {key!r}: SASL mechanism {mechanism} has no client side for inter-broker use"
        )
    jaas = jaas_for(config, endpoint.name, mechanism)
    username = jaas.options.get("username", "") if jaas is not None else ""
    password = jaas.options.get("password", "") if jaas is not None else ""
    if not username or not password:
        raise ConfigError(
            f'inter-broker SASL/{mechanism} on listener {endpoint.name} needs username="..." and password="..." in '
            f"listener.name.{endpoint.name.lower()}.{mechanism.lower()}.sasl.jaas.config (or sasl.jaas.config)"
        )
    out.update({"sasl.mechanism": mechanism, "sasl.username": username, "sasl.password": password})
    return out


__all__ = [
    "SASL_PROTOCOLS",
    "SaslListenerSettings",
    "available_mechanisms",
    "build_listener_settings",
    "check_security_config",
    "enabled_mechanisms",
    "inter_broker_client_config",
    "is_sasl",
    "jaas_for",
    "listener_sasl_settings",
]
