"""SASL/OAUTHBEARER on a broker subprocess with real clients.

Listener CLIENTS accepts PLAIN (the admin) and unsecured JWTs (Kafka's development default);
listener SECURED accepts only JWTs signed by a key of a ``file:`` JWKS, for audience ``kafka``
from issuer ``https://idp.test`` (KIP-768, per-listener keys). confluent-kafka (unsecured JWT
and ``oauth_cb``), kafka-python and aiokafka (``sasl_oauth_token_provider``), kcat and odradek's
client log in, produce and consume; a refused token is a clean authentication error naming
Kafka's ``invalid_token``; the token's principal is the one ACLs apply to; a short-lived token
bounds the session, which clients renew with fresh tokens, and a session that is not renewed is
closed."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.abc import AbstractTokenProvider as AioTokenProvider
from client_helpers import consume, produce
from confluent_kafka import KafkaError as CKError
from confluent_kafka import KafkaException
from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import KafkaTimeoutError
from kafka.net.sasl.oauth import AbstractTokenProvider as KafkaPythonTokenProvider
from sasl_helpers import ADMIN, JAAS, WireClient, librdkafka_login_errors, listener_port

from odradek.client import Producer
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol import ApiKey
from odradek.security.oauthbearer import BearerToken, ClientInitialResponse
from odradek.testing import BrokerProcess, start_broker, unique_topic
from odradek.testing.broker import sample
from odradek.testing.oauth import TokenIssuer

pytestmark = pytest.mark.integration

KCAT = shutil.which("kcat") or "/usr/bin/kcat"
IDP = TokenIssuer.rsa("idp-key-1")
OAUTH_JAAS = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    workdir = tmp_path_factory.mktemp("oauth-broker")
    jwks_url = IDP.write_jwks(Path(workdir) / "jwks.json")
    settings = {
        "listeners": "CLIENTS://127.0.0.1:0,SECURED://127.0.0.1:0,INTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "CLIENTS:SASL_PLAINTEXT,SECURED:SASL_PLAINTEXT,INTERNAL:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.enabled.mechanisms": "PLAIN,OAUTHBEARER",
        "listener.name.clients.plain.sasl.jaas.config": JAAS,
        "listener.name.clients.oauthbearer.sasl.jaas.config": OAUTH_JAAS,
        "listener.name.secured.sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.secured.oauthbearer.sasl.oauthbearer.jwks.endpoint.url": jwks_url,
        "listener.name.secured.oauthbearer.sasl.oauthbearer.expected.audience": "kafka",
        "listener.name.secured.oauthbearer.sasl.oauthbearer.expected.issuer": IDP.issuer,
        "authorizer.class.name": "acl",
        "super.users": "User:admin",
        "allow.everyone.if.no.acl.found": "true",
        "metrics.prometheus.listener": "127.0.0.1:0",
    }
    with start_broker(workdir, settings) as started:
        yield started
        problems = started.log_problems()
        assert not problems, "\n".join(problems)


def _secured(broker: BrokerProcess) -> str:
    return f"{broker.host}:{listener_port(broker, 'SECURED')}"


def _metric(broker: BrokerProcess, name: str) -> float:
    return sample(broker.metrics(), f"kafka_server_socket_server_metrics_{name}")


UNSECURED_CK = {
    "security.protocol": "SASL_PLAINTEXT",
    "sasl.mechanism": "OAUTHBEARER",
    "enable.sasl.oauthbearer.unsecure.jwt": True,
    "sasl.oauthbearer.config": "principal=alice",
}


def _oauth_cb(subject: str, *, life_s: float = 3600, audience: str = "kafka") -> Any:
    """confluent-kafka's ``oauth_cb``: a token signed by the identity provider."""

    def oauth_cb(config: str) -> tuple[str, float]:
        now = time.time()
        token = IDP.token(subject, audience=audience, life_s=life_s, now_s=now)
        return token, int(now + life_s)  # the token's own exp: librdkafka refreshes it ahead of that

    return oauth_cb


def _ck_secured(subject: str, **options: Any) -> dict[str, Any]:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "oauth_cb": _oauth_cb(subject, **options),
    }


# -- confluent-kafka -----------------------------------------------------------------------------------


def test_confluent_kafka_unsecured_jwt(broker: BrokerProcess) -> None:
    topic = unique_topic("oauth-ck")
    produce(broker, topic, [(b"k", b"v")], **UNSECURED_CK)
    assert [m.value() for m in consume(broker, topic, 1, **UNSECURED_CK)] == [b"v"]


def test_confluent_kafka_oauth_cb_with_a_signed_token(broker: BrokerProcess) -> None:
    topic = unique_topic("oauth-ck-rs256")
    conf = {**_ck_secured("alice"), "bootstrap.servers": _secured(broker)}
    produce(broker, topic, [(b"k1", b"v1"), (b"k2", b"v2")], **conf)
    assert [m.value() for m in consume(broker, topic, 2, **conf)] == [b"v1", b"v2"]


def test_confluent_kafka_refused_token_is_an_authentication_error(broker: BrokerProcess) -> None:
    errors = librdkafka_login_errors(_secured(broker), _ck_secured("alice", audience="somebody-else"))
    assert any(e.code() == CKError._AUTHENTICATION for e in errors), errors
    assert any('{"status":"invalid_token"}' in e.str() for e in errors), errors


def test_confluent_kafka_unsecured_jwt_refused_on_the_secured_listener(broker: BrokerProcess) -> None:
    errors = librdkafka_login_errors(_secured(broker), UNSECURED_CK)
    assert any(e.code() == CKError._AUTHENTICATION and "invalid_token" in e.str() for e in errors), errors


# -- kafka-python, aiokafka, kcat ------------------------------------------------------------------------


class PythonTokens(KafkaPythonTokenProvider):
    def __init__(self, subject: str, audience: str = "kafka") -> None:
        self.subject, self.audience = subject, audience

    def token(self) -> str:
        return IDP.token(self.subject, audience=self.audience)


def _python(broker: BrokerProcess, provider: Any) -> dict[str, Any]:
    """kafka-python's and aiokafka's settings for the SECURED listener."""
    return {
        "bootstrap_servers": _secured(broker),
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "OAUTHBEARER",
        "sasl_oauth_token_provider": provider,
    }


def test_kafka_python_token_provider(broker: BrokerProcess) -> None:
    topic = unique_topic("oauth-kp")
    conf = _python(broker, PythonTokens("alice"))
    producer = KafkaProducer(**conf)
    try:
        producer.send(topic, key=b"k", value=b"v").get(timeout=20)
    finally:
        producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10000, **conf)
    try:
        first = next(iter(consumer))  # not waiting consumer_timeout_ms for more
        assert (first.key, first.value) == (b"k", b"v")
    finally:
        consumer.close()


def test_kafka_python_refused_token(broker: BrokerProcess, caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(KafkaTimeoutError):
        KafkaProducer(**_python(broker, PythonTokens("alice", audience="nope")), bootstrap_timeout_ms=5000)
    assert '{"status":"invalid_token"}' in caplog.text


class AioTokens(AioTokenProvider):
    async def token(self) -> str:
        return IDP.token("alice", audience="kafka")


def test_aiokafka_token_provider(broker: BrokerProcess) -> None:
    topic = unique_topic("oauth-aio")
    conf = _python(broker, AioTokens())

    async def run() -> tuple[bytes, bytes]:
        producer = AIOKafkaProducer(**conf)
        await producer.start()
        try:
            await producer.send_and_wait(topic, key=b"k", value=b"v")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **conf)
        await consumer.start()
        try:
            message = await asyncio.wait_for(consumer.getone(), 20)
            return message.key, message.value
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == (b"k", b"v")


def test_kcat_unsecured_jwt(broker: BrokerProcess) -> None:
    assert shutil.which(KCAT), "kcat is not installed (Debian package: kcat)"
    topic = unique_topic("oauth-kcat")
    sasl = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=OAUTHBEARER"]
    sasl += ["-X", "enable.sasl.oauthbearer.unsecure.jwt=true", "-X", "sasl.oauthbearer.config=principal=kim"]

    def run(*args: str, stdin: bytes | None = None) -> bytes:
        result = subprocess.run(
            [KCAT, "-b", broker.bootstrap, *sasl, *args], input=stdin, capture_output=True, timeout=30
        )
        assert result.returncode == 0, result.stderr.decode(errors="replace")
        return result.stdout

    run("-P", "-t", topic, stdin=b"hello\n")
    assert run("-C", "-t", topic, "-o", "beginning", "-e") == b"hello\n"


# -- odradek's client ---------------------------------------------------------------------------------


def test_odradek_client_oauth_cb_and_unsecured_jwt(broker: BrokerProcess) -> None:
    topic = unique_topic("oauth-odradek")
    secured = {"bootstrap.servers": _secured(broker), **_ck_secured("alice")}
    unsecured = {
        "bootstrap.servers": broker.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "enable.sasl.oauthbearer.unsecure.jwt": True,
        "sasl.oauthbearer.config": "principal=alice scope=kafka",
    }
    for conf in (secured, unsecured):
        with Producer(conf) as producer:
            assert producer.send(topic, b"v").result(timeout=30) is not None
    assert [m.value() for m in consume(broker, topic, 2, **UNSECURED_CK)] == [b"v", b"v"]


def test_odradek_client_refused_token(broker: BrokerProcess) -> None:
    conf = {"bootstrap.servers": _secured(broker), **_ck_secured("alice", audience="nope"), "max.block.ms": 5000}
    with pytest.raises(KafkaError) as refused, Producer(conf) as producer:
        producer.send(unique_topic("oauth-no"), b"v").result(timeout=30)
    assert refused.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "invalid_token" in str(refused.value)


# -- the token's principal and ACLs ------------------------------------------------------------------------


def test_acls_apply_to_the_tokens_principal(broker: BrokerProcess) -> None:
    topic = unique_topic("oauth-acl")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **ADMIN})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(30)
    binding = AclBinding(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.ALL,
        AclPermissionType.ALLOW,
    )
    for future in admin.create_acls([binding]).values():
        future.result(30)
    produce(broker, topic, [(b"k", b"alice's")], **{**_ck_secured("alice"), "bootstrap.servers": _secured(broker)})
    delivered: list[Any] = []
    producer = ConfluentProducer(
        {**_ck_secured("mallory"), "bootstrap.servers": _secured(broker), "message.timeout.ms": 10000}
    )
    producer.produce(topic, b"mallory's", on_delivery=lambda err, msg: delivered.append(err))
    producer.flush(30)
    assert len(delivered) == 1 and delivered[0] is not None
    assert delivered[0].code() == CKError.TOPIC_AUTHORIZATION_FAILED, delivered


# -- session lifetime ---------------------------------------------------------------------------------

LIFE_S = 3


def test_the_token_bounds_the_session_and_an_unrenewed_one_is_closed(broker: BrokerProcess) -> None:
    token = IDP.token("alice", audience="kafka", life_s=LIFE_S)
    wire = WireClient(broker.host, listener_port(broker, "SECURED"))
    try:
        assert int(wire.request(ApiKey.SASL_HANDSHAKE, 1, mechanism="OAUTHBEARER").error_code) == 0
        answer = wire.request(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=ClientInitialResponse(token).encode())
        assert int(answer.error_code) == 0, answer
        lifetime_s = answer.session_lifetime.total_seconds()
        assert 0 < lifetime_s <= LIFE_S
        time.sleep(lifetime_s + 0.3)
        assert wire.request(ApiKey.API_VERSIONS, 0) is None  # closed: the session expired
    finally:
        wire.close()


def test_odradek_client_renews_short_lived_tokens(broker: BrokerProcess) -> None:
    """odradek's client re-authenticates with a fresh token before its session (the token's
    lifetime) ends, on the same connections: nothing is cut off. (librdkafka re-authenticates with
    the token it holds until its own refresh at 80% of the token's life, so with tokens of a few
    seconds it races the session's end; its renewal of longer sessions is tests/test_sasl_reauth.py's.)"""
    topic = unique_topic("oauth-reauth")
    before = _metric(broker, "successful_reauthentication_total")
    killed = _metric(broker, "expired_connections_killed_count")
    calls: list[float] = []

    def tokens(config: str) -> BearerToken:
        now = time.time()
        calls.append(now)
        return BearerToken(IDP.token("alice", audience="kafka", life_s=LIFE_S, now_s=now), int(now + LIFE_S))

    conf = {
        "bootstrap.servers": _secured(broker),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "oauth_cb": tokens,
    }
    sent = 0
    with Producer(conf) as producer:
        deadline = time.monotonic() + 2.5 * LIFE_S
        while time.monotonic() < deadline:
            producer.send(topic, b"%d" % sent).result(timeout=30)
            sent += 1
            time.sleep(0.05)
    assert len(calls) >= 3  # a token for the login, one for every renewal
    assert _metric(broker, "successful_reauthentication_total") >= before + 2
    assert _metric(broker, "expired_connections_killed_count") == killed  # nobody was cut off
    assert len(consume(broker, topic, sent, **UNSECURED_CK)) == sent


def test_admin_can_still_use_plain_next_to_oauthbearer(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **ADMIN})
    assert admin.list_topics(timeout=30).brokers
    with pytest.raises(KafkaException):
        AdminClient({"bootstrap.servers": _secured(broker), **ADMIN}).list_topics(timeout=3)


def test_cli_logs_in_with_an_unsecured_jwt(broker: BrokerProcess) -> None:
    topic = unique_topic("oauth-cli")
    login = ["sasl.mechanism=OAUTHBEARER", "security.protocol=SASL_PLAINTEXT"]
    login += ["enable.sasl.oauthbearer.unsecure.jwt=true", "sasl.oauthbearer.config=principal=admin lifeSeconds=60"]
    where = ["--bootstrap-server", broker.bootstrap, *(f"--command-config={kv}" for kv in login)]
    cli = [sys.executable, "-m", "odradek", "topics"]
    created = subprocess.run([*cli, "create", "--topic", topic, *where], capture_output=True, text=True, timeout=60)
    assert created.returncode == 0, created.stderr
    listed = subprocess.run([*cli, "list", *where], capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0 and topic in listed.stdout.split(), listed.stderr
    refused = subprocess.run(
        [*cli, "list", "--bootstrap-server", broker.bootstrap, *(f"--command-config={kv}" for kv in login[:2])],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode != 0 and "needs a token" in refused.stderr
