"""Two brokers on a shared ZooKeeper whose only listener is SASL_PLAINTEXT with OAUTHBEARER, so
replication runs over OAUTHBEARER (``sasl.mechanism.inter.broker.protocol=OAUTHBEARER``): once
with Kafka's unsecured login (``unsecuredLoginStringClaim_sub``) checked by the unsecured
validator, once with tokens from a token endpoint (``sasl.oauthbearer.token.endpoint.url`` with the
JAAS ``clientId``/``clientSecret``) checked against the endpoint's JWKS. The tokens live a few
seconds, so during the test the brokers refresh them and re-authenticate their connections to
each other (KIP-368, ``connections.max.reauth.ms`` bounds nothing shorter): replication goes on."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from client_helpers import consume, produce
from confluent_kafka.admin import AdminClient, NewTopic
from test_replication_cluster import metadata_settings, wait_for

from odradek.testing.broker import BrokerProcess, sample, start_broker, unique_topic
from odradek.testing.oauth import TokenEndpoint, TokenIssuer

pytestmark = pytest.mark.integration

LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
#: the brokers' tokens' lifetime: short enough to be refreshed within the test
LIFE_S = 5
IDP = TokenIssuer.rsa("cluster-key-1")
COMMON = {
    "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
    "sasl.enabled.mechanisms": "OAUTHBEARER",
    "sasl.mechanism.inter.broker.protocol": "OAUTHBEARER",
    "connections.max.reauth.ms": "600000",  # sessions end with their token
    "zookeeper.session.timeout.ms": "2000",
    "replica.fetch.wait.max.ms": "100",
    "metrics.prometheus.listener": "127.0.0.1:0",
}


def _metric(broker: BrokerProcess, name: str) -> float:
    return sample(broker.metrics(), f"kafka_server_socket_server_metrics_{name}")


@contextlib.contextmanager
def _cluster(tmp_path: Path, settings: dict[str, Any]) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    with contextlib.ExitStack() as stack:
        b1, b2 = (stack.enter_context(start_broker(tmp_path / f"b{i}", {**settings, "broker.id": i})) for i in (1, 2))
        yield b1, b2
        for broker in (b1, b2):
            assert not broker.log_problems(), broker.log_problems()


def _replicate_through_token_renewals(
    b1: BrokerProcess, b2: BrokerProcess, client: dict[str, Any], renewed: Any
) -> None:
    """A topic replicated from b1 to b2 (acks=all with min.insync.replicas=2: acknowledged once b2
    fetched it), before and after every broker renewed its sessions with new tokens."""
    admin = AdminClient({"bootstrap.servers": b1.bootstrap, **client})
    wait_for("both brokers in the metadata", lambda: len(admin.list_topics(timeout=10).brokers) == 2)
    topic = unique_topic("oauth-repl")
    admin.create_topics([NewTopic(topic, 1, 2, config={"min.insync.replicas": "2"})])[topic].result(30)
    produce(b1, topic, [(b"k", b"before")], acks="all", **client)
    wait_for("the brokers to renew their sessions with new tokens", renewed, timeout_s=8 * LIFE_S)
    produce(b1, topic, [(b"k", b"after")], acks="all", **client)
    assert [m.value() for m in consume(b2, topic, 2, **client)] == [b"before", b"after"]
    for broker in (b1, b2):  # renewed on their connections, before the sessions ended: nobody cut off
        assert _metric(broker, "failed_reauthentication_total") == 0
        assert _metric(broker, "expired_connections_killed_count") == 0


def _reauthenticated(*brokers: BrokerProcess) -> bool:
    """The follower's fetcher session at the leader (whichever it is) was renewed twice."""
    return sum(_metric(b, "successful_reauthentication_total") for b in brokers) >= 2


def test_replication_over_oauthbearer_with_the_unsecured_login(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    jaas = f'{LOGIN_MODULE} required unsecuredLoginStringClaim_sub="broker" unsecuredLoginLifetimeSeconds="{LIFE_S}";'
    settings = {**COMMON, **metadata_settings("zookeeper", request, "oauth-unsecured"), "sasl.jaas.config": jaas}
    client = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "enable.sasl.oauthbearer.unsecure.jwt": True,
        "sasl.oauthbearer.config": "principal=admin",
    }
    with _cluster(tmp_path, settings) as (b1, b2):
        # the follower's fetcher session ended with its token and was renewed with a new one
        _replicate_through_token_renewals(b1, b2, client, lambda: _reauthenticated(b1, b2))


def test_replication_over_oauthbearer_with_a_token_endpoint(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    clients = {"broker": "broker-secret", "admin": "admin-secret"}
    with TokenEndpoint(IDP, clients, lifetimes={"broker": LIFE_S}) as endpoint:
        jaas = f'{LOGIN_MODULE} required clientId="broker" clientSecret="broker-secret" scope="kafka";'
        settings = {
            **COMMON,
            **metadata_settings("zookeeper", request, "oauth-endpoint"),
            "sasl.jaas.config": jaas,
            "sasl.oauthbearer.token.endpoint.url": endpoint.token_url,
            "sasl.oauthbearer.jwks.endpoint.url": endpoint.jwks_url,
            "sasl.oauthbearer.expected.audience": "kafka",
            "sasl.oauthbearer.allowed.urls": f"{endpoint.token_url},{endpoint.jwks_url}",
        }
        client = {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.method": "oidc",
            "sasl.oauthbearer.token.endpoint.url": endpoint.token_url,
            "sasl.oauthbearer.client.id": "admin",
            "sasl.oauthbearer.client.secret": "admin-secret",
        }
        with _cluster(tmp_path, settings) as (b1, b2):
            logins = endpoint.issued["broker"]

            def renewed() -> bool:  # new tokens from the endpoint, and sessions renewed with them
                return endpoint.issued["broker"] >= logins + 2 and _reauthenticated(b1, b2)

            _replicate_through_token_renewals(b1, b2, client, renewed)
