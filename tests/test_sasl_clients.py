"""Real Kafka clients against a SASL_PLAINTEXT broker subprocess: confluent-kafka (librdkafka),
kafka-python, aiokafka and kcat produce and consume with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512,
fail cleanly with a wrong password, and manage SCRAM users with confluent-kafka's AdminClient."""

from __future__ import annotations

import asyncio
import shutil
import subprocess

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError
from client_helpers import consume, produce
from confluent_kafka import KafkaError as CKError
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import KafkaTimeoutError
from sasl_helpers import SCRAM_PASSWORD, SCRAM_USER, librdkafka_login_errors
from sasl_helpers import sasl_broker as sasl_broker  # the module's broker

from odradek.testing import BrokerProcess, unique_topic

pytestmark = pytest.mark.integration

KCAT = shutil.which("kcat") or "/usr/bin/kcat"
CREDENTIALS = [
    ("PLAIN", "alice", "alice-secret"),
    ("SCRAM-SHA-256", SCRAM_USER, SCRAM_PASSWORD),
    ("SCRAM-SHA-512", SCRAM_USER, SCRAM_PASSWORD),
]
IDS = ["plain", "scram-sha-256", "scram-sha-512"]


def _librdkafka(mechanism: str, user: str, password: str) -> dict[str, str]:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def _python(mechanism: str, user: str, password: str) -> dict[str, str]:
    return {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": user,
        "sasl_plain_password": password,
    }


@pytest.mark.parametrize(("mechanism", "user", "password"), CREDENTIALS, ids=IDS)
def test_confluent_kafka_produces_and_consumes(
    sasl_broker: BrokerProcess, mechanism: str, user: str, password: str
) -> None:
    conf = _librdkafka(mechanism, user, password)
    topic = unique_topic("sasl-ck")
    produce(sasl_broker, topic, [(b"k1", b"v1"), (b"k2", b"v2")], **conf)
    got = consume(sasl_broker, topic, 2, **conf)
    assert [(m.key(), m.value()) for m in got] == [(b"k1", b"v1"), (b"k2", b"v2")]


def test_confluent_kafka_wrong_password_fails_with_authentication_error(sasl_broker: BrokerProcess) -> None:
    errors = librdkafka_login_errors(sasl_broker.bootstrap, _librdkafka("SCRAM-SHA-256", SCRAM_USER, "wrong"))
    assert any(e.code() == CKError._AUTHENTICATION for e in errors), errors
    assert any("SCRAM-SHA-256" in e.str() for e in errors), errors


def test_confluent_kafka_admin_manages_scram_users(sasl_broker: BrokerProcess) -> None:
    """Users created, described and deleted through confluent-kafka's AdminClient (KIP-554)."""
    admin = AdminClient({"bootstrap.servers": sasl_broker.bootstrap, **_librdkafka("PLAIN", "admin", "admin-secret")})
    user = unique_topic("dave")
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192)
    for future in admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(user, info, b"dave-secret")]
    ).values():
        assert future.result(30) is None
    described = admin.describe_user_scram_credentials([user])[user].result(30)
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_256, 8192)
    ]
    # the new user logs in with another client (kcat)
    topic = unique_topic("sasl-dave")
    kcat(sasl_broker, "SCRAM-SHA-256", user, "dave-secret", "-P", "-t", topic, stdin=b"hello dave\n")
    assert (
        kcat(sasl_broker, "SCRAM-SHA-256", user, "dave-secret", "-C", "-t", topic, "-o", "beginning", "-e")
        == b"hello dave\n"
    )
    # Kafka's errors come back per user
    bad = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("few", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 100), b"pw")]
    )["few"]
    with pytest.raises(KafkaException) as refused:
        bad.result(30)
    assert refused.value.args[0].code() == CKError.UNACCEPTABLE_CREDENTIAL
    gone = admin.alter_user_scram_credentials([UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_256)])
    assert gone[user].result(30) is None
    with pytest.raises(KafkaException) as missing:
        admin.describe_user_scram_credentials([user])[user].result(30)
    assert missing.value.args[0].code() == CKError.RESOURCE_NOT_FOUND


@pytest.mark.parametrize(("mechanism", "user", "password"), CREDENTIALS, ids=IDS)
def test_kafka_python_produces_and_consumes(
    sasl_broker: BrokerProcess, mechanism: str, user: str, password: str
) -> None:
    topic = unique_topic("sasl-kp")
    conf = _python(mechanism, user, password)
    producer = KafkaProducer(bootstrap_servers=sasl_broker.bootstrap, **conf)
    try:
        producer.send(topic, key=b"k", value=b"v").get(timeout=20)
    finally:
        producer.close()
    consumer = KafkaConsumer(
        topic, bootstrap_servers=sasl_broker.bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=10000, **conf
    )
    try:
        got = [(m.key, m.value) for m in consumer]
    finally:
        consumer.close()
    assert got == [(b"k", b"v")]


def test_kafka_python_wrong_password_fails(sasl_broker: BrokerProcess, caplog: pytest.LogCaptureFixture) -> None:
    """kafka-python gives up bootstrapping after bootstrap_timeout_ms (kafka-python 3: not
    max_block_ms) and logs the broker's reason."""
    with pytest.raises(KafkaTimeoutError):
        KafkaProducer(
            bootstrap_servers=sasl_broker.bootstrap,
            max_block_ms=5000,
            bootstrap_timeout_ms=5000,
            **_python("PLAIN", "alice", "wrong"),
        )
    assert "Authentication failed: Invalid username or password" in caplog.text


@pytest.mark.parametrize(("mechanism", "user", "password"), CREDENTIALS, ids=IDS)
def test_aiokafka_produces_and_consumes(sasl_broker: BrokerProcess, mechanism: str, user: str, password: str) -> None:
    topic = unique_topic("sasl-aio")
    conf = _python(mechanism, user, password)

    async def run() -> list[tuple[bytes, bytes]]:
        producer = AIOKafkaProducer(bootstrap_servers=sasl_broker.bootstrap, **conf)
        await producer.start()
        try:
            await producer.send_and_wait(topic, key=b"k", value=b"v")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=sasl_broker.bootstrap, auto_offset_reset="earliest", **conf
        )
        await consumer.start()
        try:
            message = await asyncio.wait_for(consumer.getone(), 20)
            return [(message.key, message.value)]
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == [(b"k", b"v")]


def test_aiokafka_wrong_password_fails(sasl_broker: BrokerProcess) -> None:
    async def run() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=sasl_broker.bootstrap, **_python("SCRAM-SHA-512", SCRAM_USER, "no")
        )
        try:
            await producer.start()
        finally:
            await producer.stop()

    with pytest.raises(KafkaConnectionError):
        asyncio.run(run())


def kcat(
    broker: BrokerProcess, mechanism: str, user: str, password: str, *args: str, stdin: bytes | None = None
) -> bytes:
    assert shutil.which(KCAT), "kcat is not installed (Debian package: kcat)"
    sasl = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", f"sasl.mechanisms={mechanism}"]
    sasl += ["-X", f"sasl.username={user}", "-X", f"sasl.password={password}"]
    result = subprocess.run([KCAT, "-b", broker.bootstrap, *sasl, *args], input=stdin, capture_output=True, timeout=30)
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    return result.stdout


@pytest.mark.parametrize(("mechanism", "user", "password"), CREDENTIALS, ids=IDS)
def test_kcat_produces_and_consumes(sasl_broker: BrokerProcess, mechanism: str, user: str, password: str) -> None:
    topic = unique_topic("sasl-kcat")
    kcat(sasl_broker, mechanism, user, password, "-P", "-t", topic, "-K", ":", stdin=b"a:1\nb:2\n")
    out = kcat(sasl_broker, mechanism, user, password, "-C", "-t", topic, "-o", "beginning", "-e", "-f", "%k=%s\n")
    assert out == b"a=1\nb=2\n"


def test_kcat_wrong_password_fails(sasl_broker: BrokerProcess) -> None:
    assert shutil.which(KCAT), "kcat is not installed (Debian package: kcat)"
    args = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=PLAIN"]
    args += ["-X", "sasl.username=alice", "-X", "sasl.password=wrong", "-m", "5"]
    result = subprocess.run([KCAT, "-b", sasl_broker.bootstrap, *args, "-L"], capture_output=True, timeout=30)
    assert result.returncode != 0
    assert b"Authentication failed: Invalid username or password" in result.stderr
