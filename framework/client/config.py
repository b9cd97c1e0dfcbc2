"""Client configuration with Kafka's client property names, validated up front.

Each client role (producer, consumer, admin) accepts the common keys plus its own; an unknown key
or a value of the wrong type raises :class:`~odradek.config.ConfigError` naming the key, so a typo
(``linger.msec``) fails at construction instead of being silently ignored. Values may be native
(``{"linger.ms": 5}``) or strings (``{"linger.ms": "5"}``, as the CLI's ``--property`` and Spark
options give them); they are coerced with the broker config's rules. Defaults are the Java
client's, except where noted on the key.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ..config import ConfigError, _parse_value
from ..interfaces import ConfigKey

INT_MAX = 2**31 - 1


class TokenCallback:
    """The type of ``oauth_cb``: any callable, kept as it is (never turned into a string)."""

    def __new__(cls, value: Any) -> Any:
        if not callable(value):
            raise TypeError(f"expected a callable, got {type(value).__name__}")
        return value


def _k(
    name: str, type_: type, default: Any, doc: str, *, choices: Any = None, minimum: float | None = None
) -> ConfigKey:
    return ConfigKey(name, type_, default, doc, choices=choices, minimum=minimum)


COMMON_KEYS: tuple[ConfigKey, ...] = (
    _k("bootstrap.servers", list, [], "host:port pairs to bootstrap from (comma separated)."),
    _k("client.id", str, "odradek", "Client id sent with every request (broker logs, quotas)."),
    _k(
        "security.protocol",
        str,
        "PLAINTEXT",
        "Security protocol: picks the transport plugin that declares it (PLAINTEXT: tcp) unless transport is set.",
    ),
    _k("transport", str, "", "Transport plugin by name (an odradek setting); empty: chosen by security.protocol."),
    _k(
        "sasl.mechanism",
        str,
        "PLAIN",
        "SASL mechanism with security.protocol SASL_PLAINTEXT or SASL_SSL: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, "
        "OAUTHBEARER "
        "(librdkafka's sasl.mechanisms is accepted too).",
    ),
    _k("sasl.mechanisms", str, "", "librdkafka's name of sasl.mechanism (used when set)."),
    _k("sasl.username", str, "", "SASL username (PLAIN, SCRAM)."),
    _k("sasl.password", str, "", "SASL password (PLAIN, SCRAM)."),
    _k(
        "oauth_cb",
        TokenCallback,
        None,
        "OAUTHBEARER: callable(sasl.oauthbearer.config) returning (token, expiry seconds since the epoch"
        "[, principal[, extensions]]), as confluent-kafka's; called for every login and re-login.",
    ),
    _k(
        "sasl.oauthbearer.config",
        str,
        "",
        "OAUTHBEARER: passed to oauth_cb; with enable.sasl.oauthbearer.unsecure.jwt the unsecured JWT's "
        "options: principal=<name> [scope=a,b] [lifeSeconds=3600] [extension_<name>=<value>] (librdkafka's).",
    ),
    _k(
        "enable.sasl.oauthbearer.unsecure.jwt",
        bool,
        False,
        "OAUTHBEARER without oauth_cb: log in with an unsecured JWT built from sasl.oauthbearer.config "
        "(development only; the broker must accept unsecured tokens).",
    ),
    _k(
        "sasl.oauthbearer.method",
        str,
        "default",
        "OAUTHBEARER token source: default (oauth_cb or the unsecured JWT) or oidc (the client-credentials "
        "grant at sasl.oauthbearer.token.endpoint.url, KIP-768; librdkafka's setting).",
        choices=("default", "oidc"),
    ),
    _k(
        "sasl.oauthbearer.token.endpoint.url",
        str,
        "",
        "OAUTHBEARER oidc: the OAuth 2 token endpoint (http: or https:); the token is refreshed at 80% of its "
        "lifetime (its exp claim, else expires_in).",
    ),
    _k("sasl.oauthbearer.client.id", str, "", "OAUTHBEARER oidc: the client id (HTTP basic authentication)."),
    _k("sasl.oauthbearer.client.secret", str, "", "OAUTHBEARER oidc: the client secret."),
    _k("sasl.oauthbearer.scope", str, "", "OAUTHBEARER oidc: the scope asked for (empty: none sent)."),
    _k(
        "sasl.oauthbearer.extensions",
        str,
        "",
        "OAUTHBEARER oidc: SASL extensions sent with the token (KIP-342), comma-separated key=value pairs.",
    ),
    _k("ssl.ca.location", str, "", "CA bundle for SSL (transport plugins that support TLS)."),
    _k("ssl.certificate.location", str, "", "Client certificate for SSL."),
    _k("ssl.key.location", str, "", "Client private key for SSL."),
    _k("ssl.key.password", str, "", "Password of the client private key."),
    _k("ssl.endpoint.identification.algorithm", str, "https", "https: verify the broker host name; none: skip."),
    _k("request.timeout.ms", int, 30000, "How long to wait for a response before failing and reconnecting.", minimum=1),
    _k("default.api.timeout.ms", int, 60000, "Timeout of blocking calls without an explicit timeout.", minimum=1),
    _k("retry.backoff.ms", int, 100, "First backoff before retrying a failed request.", minimum=0),
    _k("retry.backoff.max.ms", int, 1000, "Cap of the exponential retry backoff.", minimum=0),
    _k("reconnect.backoff.ms", int, 50, "First backoff before reconnecting to a broker.", minimum=0),
    _k("reconnect.backoff.max.ms", int, 1000, "Cap of the exponential reconnect backoff.", minimum=0),
    _k("socket.connection.setup.timeout.ms", int, 10000, "Connect timeout per attempt.", minimum=1),
    _k("metadata.max.age.ms", int, 300000, "Refresh metadata at least this often.", minimum=0),
    _k("connections.max.idle.ms", int, 540000, "Close connections idle this long.", minimum=1),
)

PRODUCER_KEYS: tuple[ConfigKey, ...] = (
    _k("acks", str, "all", "Acknowledgements: 0, 1 or all (-1).", choices=("0", "1", "all", "-1")),
    _k("linger.ms", int, 5, "Wait this long for more records before sending a batch.", minimum=0),
    _k("batch.size", int, 16384, "Target size of one partition's batch in bytes.", minimum=0),
    _k("buffer.memory", int, 33554432, "Bytes of records buffered before send() blocks.", minimum=0),
    _k("max.block.ms", int, 60000, "How long send() blocks for metadata or buffer space.", minimum=0),
    _k(
        "compression.type",
        str,
        "none",
        "Batch compression codec: none, gzip, snappy, lz4, zstd, or the name of another loaded codec "
        "plugin (checked when the producer is created).",
    ),
    _k("compression.level", int, -1, "Codec level (-1: the codec's default)."),
    _k("enable.idempotence", bool, True, "Exactly-once per partition: producer id + sequence numbers."),
    _k("retries", int, INT_MAX, "Retries of a failed batch (bounded by delivery.timeout.ms).", minimum=0),
    _k("delivery.timeout.ms", int, 120000, "Upper bound on the time from send() to success or failure.", minimum=1),
    _k(
        "max.in.flight.requests.per.connection",
        int,
        5,
        "Unacknowledged produce requests per broker (<= 5 with idempotence).",
        minimum=1,
    ),
    _k("max.request.size", int, 1048576, "Largest produce request (and record) in bytes.", minimum=1),
    _k("partitioner", str, "murmur2", "Partitioner plugin name: murmur2 (Java's default), sticky, roundrobin."),
)

CONSUMER_KEYS: tuple[ConfigKey, ...] = (
    _k("group.id", str, "", "Consumer group; empty: no group (assign() only, no commits)."),
    _k("group.instance.id", str, "", "Static membership id (KIP-345); empty: dynamic member."),
    _k(
        "auto.offset.reset",
        str,
        "latest",
        "Where to start without a committed offset.",
        choices=("latest", "earliest", "none"),
    ),
    _k(
        "enable.auto.commit",
        bool,
        True,
        "poll() commits what earlier polls returned, every auto.commit.interval.ms; also before revoking and on close.",
    ),
    _k("auto.commit.interval.ms", int, 5000, "Least time between two auto-commits (started by poll()).", minimum=0),
    _k("max.poll.records", int, 500, "Most records one poll() returns.", minimum=1),
    _k("max.poll.interval.ms", int, 300000, "Leave the group when poll() is not called this long.", minimum=1),
    _k("fetch.min.bytes", int, 1, "Broker waits for this many bytes before answering a fetch.", minimum=0),
    _k("fetch.max.wait.ms", int, 500, "Broker waits at most this long for fetch.min.bytes.", minimum=0),
    _k("fetch.max.bytes", int, 52428800, "Largest fetch response.", minimum=0),
    _k("max.partition.fetch.bytes", int, 1048576, "Largest slice of one partition per fetch.", minimum=0),
    _k("session.timeout.ms", int, 45000, "Group session timeout.", minimum=1),
    _k("heartbeat.interval.ms", int, 3000, "Group heartbeat period.", minimum=1),
    _k(
        "partition.assignment.strategy",
        list,
        ["range", "cooperative-sticky"],
        "Assignor plugin names in preference order (the group picks one all members support).",
    ),
    _k(
        "isolation.level",
        str,
        "read_uncommitted",
        "read_committed skips aborted transactions and stops at the last stable offset.",
        choices=("read_uncommitted", "read_committed"),
    ),
    _k("check.crcs", bool, True, "Verify the CRC-32C of fetched batches."),
    _k("allow.auto.create.topics", bool, True, "Let subscribing to a missing topic create it."),
    _k("exclude.internal.topics", bool, True, "Pattern subscriptions skip internal topics."),
)

ROLE_KEYS: dict[str, tuple[ConfigKey, ...]] = {
    "producer": COMMON_KEYS + PRODUCER_KEYS,
    "consumer": COMMON_KEYS + CONSUMER_KEYS,
    "admin": COMMON_KEYS,
}


class ClientConfig(Mapping[str, Any]):
    """The effective config of one client: every key of its role with a typed value."""

    def __init__(self, role: str, values: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        keys = {k.name: k for k in ROLE_KEYS[role]}
        given: dict[str, Any] = dict(values or {})
        # keyword form: bootstrap_servers="..." -> bootstrap.servers
        for name, value in kwargs.items():
            given[name.replace("_", ".")] = value
        self.role = role
        self._explicit = frozenset(given)
        self._values: dict[str, Any] = {k.name: k.default for k in keys.values()}
        for name, raw in given.items():
            key = keys.get(name)
            if key is None:
                hint = _role_of(name)
                extra = f" (it is a {hint} setting)" if hint else ""
                raise ConfigError(f"unknown {role} config key {name!r}{extra}")
            if isinstance(raw, int) and not isinstance(raw, bool) and key.type is str:
                raw = str(raw)  # acks=1, acks=-1
            self._values[name] = _parse_value(key, raw)
        if not self._values["bootstrap.servers"]:
            raise ConfigError(f"{role} config needs 'bootstrap.servers'")

    def is_set(self, name: str) -> bool:
        """Whether the user gave ``name`` (Java treats explicit and defaulted values differently)."""
        return name in self._explicit

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def as_strings(self) -> dict[str, Any]:
        """Every value as a string (what transport connectors take), but callables (``oauth_cb``)
        and unset ones (None) as they are."""
        return {
            k: v if v is None or callable(v) else ",".join(v) if isinstance(v, list) else str(v)
            for k, v in self._values.items()
        }

    def bootstrap_addresses(self) -> list[tuple[str, int]]:
        out = []
        for item in self._values["bootstrap.servers"]:
            spec = item.split("://", 1)[-1]
            host, sep, port = spec.rpartition(":")
            if not sep or not port.isdigit():
                raise ConfigError(f"invalid value for 'bootstrap.servers': {item!r} is not host:port")
            out.append((host.strip("[]") or "localhost", int(port)))
        return out


def _role_of(name: str) -> str:
    for role, keys in (("producer", PRODUCER_KEYS), ("consumer", CONSUMER_KEYS)):
        if any(k.name == name for k in keys):
            return role
    return ""
