"""The built-in ``sasl`` plugin, odradek's security plugin: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER,
the ``acl`` authorizer, and their config keys.

Registered through the same hooks a third-party mechanism or authorizer uses
(``odradek_register_sasl_mechanisms``, ``odradek_register_authorizers``, ``odradek_config_keys``).
The authorizer lives here rather than in a plugin of its own because an entry point is only
seen once the distribution is reinstalled; it is disabled with the plugin.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..config import ConfigError
from ..hookspecs import hookimpl
from ..interfaces import ConfigKey
from .acl_authorizer import AclAuthorizer
from .authorizer import AuthorizerFactory
from .jaas import PLAIN_LOGIN_MODULE
from .mechanism import SaslClient, SaslMechanism, SaslServer, SaslServerContext
from .oauth_settings import config_keys as oauth_config_keys
from .oauth_settings import oauthbearer_mechanism
from .plain import PlainSaslClient, PlainSaslServer
from .scram import SCRAM_MECHANISMS, ScramMechanism, ScramSaslClient, ScramSaslServer

#: Kafka defaults to GSSAPI, which odradek has no implementation of; SCRAM needs no secret in the
#: config file (credentials live in the metadata store), so a SASL listener works out of the box
DEFAULT_ENABLED_MECHANISMS = ["SCRAM-SHA-256", "SCRAM-SHA-512"]


def _plain_users(context: SaslServerContext) -> dict[str, str]:
    jaas = context.jaas
    if jaas is None or jaas.login_module != PLAIN_LOGIN_MODULE:
        return {}
    return jaas.plain_users()


def _plain_server(context: SaslServerContext) -> SaslServer:
    return PlainSaslServer(_plain_users(context))


def _plain_check(context: SaslServerContext) -> None:
    where = f"listener {context.listener}"
    if context.jaas is None:
        raise ConfigError(
            f"SASL mechanism PLAIN is enabled on {where} but no JAAS config is set: set "
            f"listener.name.{context.listener.lower()}.plain.sasl.jaas.config (or sasl.jaas.config) to "
            f'{PLAIN_LOGIN_MODULE} required user_<name>="<password>" ...;'
        )
    if context.jaas.login_module != PLAIN_LOGIN_MODULE:
        raise ConfigError(
            f"the JAAS config for PLAIN on {where} names login module {context.jaas.login_module}, "
            f"not {PLAIN_LOGIN_MODULE}"
        )
    if not context.jaas.plain_users():
        raise ConfigError(f'the JAAS config for PLAIN on {where} defines no user (user_<name>="<password>")')


def _scram(mechanism: ScramMechanism) -> SaslMechanism:
    def server(context: SaslServerContext) -> SaslServer:
        return ScramSaslServer(mechanism, context.credential_for)

    def client(username: str, password: str) -> SaslClient:
        return _ScramClient(ScramSaslClient(mechanism, username, password))

    return SaslMechanism(
        mechanism.mechanism_name,
        server,
        client=client,
        description=f"{mechanism.mechanism_name} (RFC 5802/7677); users' credentials in the metadata store",
    )


class _ScramClient:
    """:class:`ScramSaslClient` as a :class:`SaslClient`: first, final, then verify."""

    def __init__(self, scram: ScramSaslClient) -> None:
        self.scram = scram
        self._round = 0

    def initial_response(self) -> bytes:
        return self.scram.first_message()

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        self._round += 1
        if self._round == 1:
            return self.scram.final_message(challenge)
        self.scram.verify_server_final(challenge)
        return None


@hookimpl
def odradek_register_sasl_mechanisms() -> Sequence[SaslMechanism]:
    """PLAIN (users from the JAAS config), SCRAM-SHA-256/512 (users in the metadata store) and
    OAUTHBEARER (tokens checked against a JWKS, or unsecured ones)."""
    return [
        SaslMechanism(
            "PLAIN", _plain_server, check=_plain_check, client=PlainSaslClient,
            description="PLAIN (RFC 4616); users from PlainLoginModule's user_<name> options",
        ),
        *(_scram(m) for m in SCRAM_MECHANISMS.values()),
        oauthbearer_mechanism(),
    ]  # fmt: skip


@hookimpl
def odradek_register_authorizers() -> Sequence[AuthorizerFactory]:
    """``acl``: Kafka's ACL authorizer over ACLs in the metadata store."""
    return [
        AuthorizerFactory(
            "acl",
            AclAuthorizer.from_config,
            description="Kafka's AclAuthorizer/StandardAuthorizer rules; ACLs in the metadata store (/kafka-acl)",
        )
    ]


@hookimpl
def odradek_config_keys() -> Sequence[ConfigKey]:
    """Kafka's SASL keys for SASL_PLAINTEXT / SASL_SSL listeners."""
    return [
        ConfigKey(
            "sasl.enabled.mechanisms",
            list,
            list(DEFAULT_ENABLED_MECHANISMS),
            "SASL mechanisms SASL listeners accept, in preference order (Kafka's default GSSAPI is not "
            "implemented); a mechanism no plugin offers stops the broker. Per listener: "
            "listener.name.<listener>.sasl.enabled.mechanisms.",
            extra={"per_listener": True},
        ),
        ConfigKey(
            "sasl.jaas.config",
            str,
            "",
            "JAAS login module for SASL listeners (Kafka's syntax, e.g. PlainLoginModule required "
            'username="admin" password="admin-secret" user_admin="admin-secret";): users for PLAIN, '
            "the broker's own username/password for inter-broker SASL. Per listener and mechanism: "
            "listener.name.<listener>.<mechanism>.sasl.jaas.config (Kafka's broker form; this key "
            "stands in for the JAAS file's KafkaServer section). Never shown by DescribeConfigs.",
            extra={"per_listener": "mechanism", "sensitive": True},
        ),
        ConfigKey(
            "sasl.mechanism.inter.broker.protocol",
            str,
            "",
            "SASL mechanism of the broker's own connections (replica fetchers, controller, transaction "
            "markers) when the first listener is a SASL one; empty: the listener's first enabled "
            "mechanism. The username and password come from that mechanism's JAAS config; OAUTHBEARER "
            "logs in as Kafka does: unsecuredLogin* JAAS options, or a token endpoint "
            "(sasl.oauthbearer.token.endpoint.url with clientId/clientSecret/scope).",
        ),
        ConfigKey(
            "connection.failed.authentication.delay.ms",
            int,
            100,
            "Wait this long before answering a failed authentication and closing the connection.",
            minimum=0,
        ),
        ConfigKey(
            "connections.max.reauth.ms",
            int,
            0,
            "KIP-368: how long a SASL session lasts (0: for ever). The client is told in its last "
            "SaslAuthenticate answer and re-authenticates on the same connection before then; a "
            "connection that sends another request after its session expired is closed (clients "
            "without KIP-368 reconnect). Per listener and mechanism as "
            "listener.name.<l>.<mechanism>.connections.max.reauth.ms.",
            minimum=0,
            extra={"per_listener": "mechanism"},
        ),
        ConfigKey(
            "super.users",
            str,
            "",
            "Principals the acl authorizer allows everything, separated by semicolons (User:admin;User:broker); "
            "the brokers' own principal belongs here when they authenticate to each other.",
        ),
        ConfigKey(
            "allow.everyone.if.no.acl.found",
            bool,
            False,
            "acl authorizer: allow an operation on a resource no ACL applies to (else only super users may).",
        ),
        ConfigKey(
            "sasl.server.max.receive.size",
            int,
            524288,
            "Largest frame a client may send before it is authenticated (Kafka's bound against "
            "unauthenticated clients exhausting memory); a bigger one closes the connection.",
            minimum=1,
        ),
        *oauth_config_keys(),
    ]
