"""OAUTHBEARER with a token endpoint (KIP-768's client-credentials login) against a broker
subprocess that checks tokens against the same identity provider's JWKS over http.

A local OAuth 2 server (:class:`~odradek.testing.oauth.TokenEndpoint`) issues RS256 JWTs to
clients with the right secret and serves its JWKS. confluent-kafka (librdkafka's own OIDC
login: ``sasl.oauthbearer.method=oidc``) and odradek's client with the same settings produce and
consume; a wrong secret is a clear authentication error naming the endpoint's 401."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from client_helpers import consume, produce
from confluent_kafka import KafkaError as CKError
from sasl_helpers import librdkafka_login_errors, listener_port

from odradek.client import Producer
from odradek.errors import ErrorCode, KafkaError
from odradek.testing import BrokerProcess, start_broker, unique_topic
from odradek.testing.oauth import TokenEndpoint, TokenIssuer

pytestmark = pytest.mark.integration

IDP = TokenIssuer.rsa("oidc-key-1")
CLIENTS = {"alice": "alice-secret"}


@pytest.fixture(scope="module")
def endpoint() -> Iterator[TokenEndpoint]:
    with TokenEndpoint(IDP, CLIENTS) as started:
        yield started


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, endpoint: TokenEndpoint) -> Iterator[BrokerProcess]:
    settings = {
        "listeners": "SECURED://127.0.0.1:0,INTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "SECURED:SASL_PLAINTEXT,INTERNAL:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "sasl.oauthbearer.jwks.endpoint.url": endpoint.jwks_url,
        "sasl.oauthbearer.expected.audience": "kafka",
        "sasl.oauthbearer.expected.issuer": IDP.issuer,
        "sasl.oauthbearer.allowed.urls": endpoint.jwks_url,
    }
    with start_broker(tmp_path_factory.mktemp("oidc-broker"), settings) as started:
        yield started
        problems = started.log_problems()
        assert not problems, "\n".join(problems)


def _oidc(broker: BrokerProcess, endpoint: TokenEndpoint, secret: str = "alice-secret") -> dict[str, Any]:
    """librdkafka's OIDC settings, which odradek's client takes as they are."""
    return {
        "bootstrap.servers": f"{broker.host}:{listener_port(broker, 'SECURED')}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.token.endpoint.url": endpoint.token_url,
        "sasl.oauthbearer.client.id": "alice",
        "sasl.oauthbearer.client.secret": secret,
        "sasl.oauthbearer.scope": "kafka",
        "sasl.oauthbearer.extensions": "traceId=abc",
    }


def test_confluent_kafka_oidc_produces_and_consumes(broker: BrokerProcess, endpoint: TokenEndpoint) -> None:
    topic = unique_topic("oidc-ck")
    before = endpoint.issued["alice"]
    conf = _oidc(broker, endpoint)
    produce(broker, topic, [(b"k1", b"v1"), (b"k2", b"v2")], **conf)
    assert [m.value() for m in consume(broker, topic, 2, **conf)] == [b"v1", b"v2"]
    assert endpoint.issued["alice"] > before  # librdkafka's login went through the endpoint


def test_confluent_kafka_oidc_wrong_secret_is_an_authentication_error(
    broker: BrokerProcess, endpoint: TokenEndpoint
) -> None:
    conf = _oidc(broker, endpoint, secret="wrong")
    errors = librdkafka_login_errors(conf.pop("bootstrap.servers"), conf)
    assert any(e.code() == CKError._AUTHENTICATION for e in errors), errors
    assert any("invalid_client" in e.str() for e in errors), errors  # the endpoint's 401 answer


def test_odradek_client_oidc_produces(broker: BrokerProcess, endpoint: TokenEndpoint) -> None:
    topic = unique_topic("oidc-odradek")
    before = endpoint.issued["alice"]
    with Producer(_oidc(broker, endpoint)) as producer:
        for value in (b"a", b"b", b"c"):
            assert producer.send(topic, value).result(timeout=30) is not None
    # one token for every connection of the client (it is fresh for most of an hour)
    assert endpoint.issued["alice"] == before + 1
    assert [m.value() for m in consume(broker, topic, 3, **_oidc(broker, endpoint))] == [b"a", b"b", b"c"]


def test_odradek_client_oidc_wrong_secret_says_what_failed(broker: BrokerProcess, endpoint: TokenEndpoint) -> None:
    conf = {**_oidc(broker, endpoint, secret="wrong"), "max.block.ms": 5000}
    with pytest.raises(KafkaError) as refused, Producer(conf) as producer:
        producer.send(unique_topic("oidc-no"), b"v").result(timeout=30)
    assert refused.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED
    message = str(refused.value)
    assert endpoint.token_url in message and "HTTP 401" in message and "invalid_client" in message, message


def test_odradek_client_waits_for_a_slow_token_endpoint_beyond_the_connect_timeout(
    broker: BrokerProcess, endpoint: TokenEndpoint
) -> None:
    """The token is fetched before the login's connect timeout starts: an identity provider slower
    than socket.connection.setup.timeout.ms delays the login, it does not fail it (the token
    endpoint's own 20 s timeout bounds it)."""
    topic = unique_topic("oidc-slow")
    conf = {**_oidc(broker, endpoint), "socket.connection.setup.timeout.ms": 300}
    endpoint.delay_s = 1.0
    try:
        with Producer(conf) as producer:
            assert producer.send(topic, b"v").result(timeout=30) is not None
    finally:
        endpoint.delay_s = 0.0
