"""SASL re-authentication (KIP-368) on a broker subprocess whose sessions last 1.5 s
(``connections.max.reauth.ms``): at the wire (the lifetime in the last SaslAuthenticate answer,
a renewal between requests, a renewal that changes principal or mechanism, a request after the
session expired), and with clients that keep working across several session lifetimes:
odradek's own client, confluent-kafka and kafka-python renew their sessions on the connection;
aiokafka, which does not, is disconnected at each expiry and reconnects, losing nothing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import Producer as ConfluentProducer
from kafka import KafkaConsumer
from sasl_helpers import ADMIN, SCRAM_PASSWORD, SCRAM_USER, SETTINGS, WireClient, sasl_broker_fixture

from odradek.client import Producer
from odradek.errors import ErrorCode
from odradek.protocol import ApiKey
from odradek.testing import BrokerProcess, unique_topic
from odradek.testing.broker import sample

pytestmark = pytest.mark.integration

LIFETIME_MS = 1500
METADATA_V8 = {
    "topics": None,
    "allow_auto_topic_creation": False,
    "include_cluster_authorized_operations": False,
    "include_topic_authorized_operations": False,
}
#: how long the clients run: several session lifetimes
RUN_S = 5.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    settings = {
        **SETTINGS,
        "connections.max.reauth.ms": LIFETIME_MS,
        "metrics.prometheus.listener": "127.0.0.1:0",
    }
    yield from sasl_broker_fixture(tmp_path_factory.mktemp("reauth"), settings)


def _metric(broker: BrokerProcess, name: str) -> float:
    return sample(broker.metrics(), f"kafka_server_socket_server_metrics_{name}")


def _login(wire: WireClient, user: str, password: str, mechanism: str = "PLAIN") -> Any:
    assert int(wire.request(ApiKey.SASL_HANDSHAKE, 1, mechanism=mechanism).error_code) == 0
    return wire.request(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=f"\x00{user}\x00{password}".encode())


# -- at the wire --------------------------------------------------------------------------------------


def test_the_session_is_renewed_between_requests(broker: BrokerProcess) -> None:
    before = _metric(broker, "successful_reauthentication_total")
    wire = WireClient(broker.host, broker.port)
    try:
        answer = _login(wire, "alice", "alice-secret")
        assert int(answer.error_code) == 0 and answer.session_lifetime.total_seconds() * 1000 == LIFETIME_MS
        assert wire.request(ApiKey.METADATA, 8, **METADATA_V8) is not None
        again = _login(wire, "alice", "alice-secret")  # on the same connection, between requests
        assert int(again.error_code) == 0 and again.session_lifetime.total_seconds() * 1000 == LIFETIME_MS
        time.sleep(LIFETIME_MS / 2000)
        again = _login(wire, "alice", "alice-secret")
        time.sleep(LIFETIME_MS / 2000 + 0.2)  # past the first session's end, within the renewed one
        assert wire.request(ApiKey.METADATA, 8, **METADATA_V8) is not None
    finally:
        wire.close()
    assert _metric(broker, "successful_reauthentication_total") >= before + 2


def test_a_request_after_the_session_expired_closes_the_connection(broker: BrokerProcess) -> None:
    before = _metric(broker, "expired_connections_killed_count")
    wire = WireClient(broker.host, broker.port)
    try:
        assert int(_login(wire, "alice", "alice-secret").error_code) == 0
        time.sleep(LIFETIME_MS / 1000 + 0.3)
        assert wire.request(ApiKey.METADATA, 8, **METADATA_V8) is None
    finally:
        wire.close()
    assert _metric(broker, "expired_connections_killed_count") >= before + 1
    assert "its SASL session expired before it re-authenticated" in broker.log_path.read_text()


@pytest.mark.parametrize(
    ("user", "password", "mechanism", "message"),
    [
        (
            "admin",
            "admin-secret",
            "PLAIN",
            "Cannot change principals during re-authentication from User.alice: User.admin",
        ),
        (
            "alice",
            "alice-secret",
            "SCRAM-SHA-256",
            "SASL mechanism 'SCRAM-SHA-256' requested by client is not supported for re-authentication of "
            "mechanism 'PLAIN'",
        ),
    ],
)  # fmt: skip
def test_a_renewal_may_not_change_principal_or_mechanism(
    broker: BrokerProcess, user: str, password: str, mechanism: str, message: str
) -> None:
    before = _metric(broker, "failed_reauthentication_total")
    wire = WireClient(broker.host, broker.port)
    try:
        assert int(_login(wire, "alice", "alice-secret").error_code) == 0
        answer = _login(wire, user, password, mechanism)
        assert int(answer.error_code) == ErrorCode.SASL_AUTHENTICATION_FAILED and answer.error_message == message
        assert wire.closed_by_broker()
    finally:
        wire.close()
    assert _metric(broker, "failed_reauthentication_total") == before + 1
    broker.check_alive()


# -- clients over several session lifetimes ----------------------------------------------------------------


def test_odradek_client_renews_its_sessions(broker: BrokerProcess) -> None:
    topic = unique_topic("reauth")
    before = _metric(broker, "successful_reauthentication_total")
    killed = _metric(broker, "expired_connections_killed_count")
    conf = {
        "bootstrap.servers": broker.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": SCRAM_USER,
        "sasl.password": SCRAM_PASSWORD,
    }
    sent = 0
    with Producer(conf) as producer:
        deadline = time.monotonic() + RUN_S
        while time.monotonic() < deadline:
            producer.send(topic, b"%d" % sent).result(timeout=30)
            sent += 1
            time.sleep(0.05)
    assert _metric(broker, "successful_reauthentication_total") >= before + 2
    assert _metric(broker, "expired_connections_killed_count") == killed  # never cut off


def _confluent(broker: BrokerProcess) -> dict[str, Any]:
    return {"bootstrap.servers": broker.bootstrap, **ADMIN}


def test_confluent_kafka_keeps_producing_and_consuming(broker: BrokerProcess) -> None:
    topic = unique_topic("reauth-ck")
    before = _metric(broker, "successful_reauthentication_total")
    errors: list[Any] = []
    producer = ConfluentProducer({**_confluent(broker), "linger.ms": 5, "error_cb": errors.append})
    delivered: list[bytes] = []
    deadline = time.monotonic() + RUN_S
    i = 0
    while time.monotonic() < deadline:
        producer.produce(topic, b"%d" % i, on_delivery=lambda err, msg: err is None and delivered.append(msg.value()))
        producer.poll(0.05)
        i += 1
    assert producer.flush(30) == 0
    assert len(delivered) == i and not errors, errors
    assert _metric(broker, "successful_reauthentication_total") >= before + 2
    consumer = ConfluentConsumer({**_confluent(broker), "group.id": unique_topic("g"), "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < i and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        assert sorted(got) == sorted(delivered)
    finally:
        consumer.close()


def test_kafka_python_renews_its_sessions(broker: BrokerProcess) -> None:
    topic = unique_topic("reauth-kp")
    producer = ConfluentProducer(_confluent(broker))
    for i in range(200):
        producer.produce(topic, b"%d" % i)
    assert producer.flush(30) == 0
    before = _metric(broker, "successful_reauthentication_total")
    killed = _metric(broker, "expired_connections_killed_count")
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=broker.bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username="alice",
        sasl_plain_password="alice-secret",
        auto_offset_reset="earliest",
        group_id=unique_topic("g"),
        max_poll_records=10,
        fetch_max_wait_ms=100,
    )
    try:
        got: list[bytes] = []
        started = time.monotonic()
        while (len(got) < 200 or time.monotonic() < started + RUN_S) and time.monotonic() < started + 30:
            for records in consumer.poll(timeout_ms=200).values():
                got += [r.value for r in records]
        assert sorted(got, key=int) == [b"%d" % i for i in range(200)]
    finally:
        consumer.close()
    assert _metric(broker, "successful_reauthentication_total") >= before + 2
    assert _metric(broker, "expired_connections_killed_count") == killed


def test_aiokafka_reconnects_when_its_session_ends(broker: BrokerProcess) -> None:
    """aiokafka does not renew sessions: the broker closes its connection at the first request
    after the session's end (without serving it), and it reconnects and logs in again; every
    record arrives, once."""
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as AioTopicPartition

    topic = unique_topic("reauth-aio")
    conf = {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "alice",
        "sasl_plain_password": "alice-secret",
    }
    killed = _metric(broker, "expired_connections_killed_count")

    async def main() -> tuple[list[bytes], list[bytes]]:
        sent: list[bytes] = []
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, **conf)
        await producer.start()
        try:
            started = time.monotonic()
            while time.monotonic() < started + RUN_S:
                value = b"%d" % len(sent)
                await producer.send_and_wait(topic, value, partition=0)
                sent.append(value)
                await asyncio.sleep(0.05)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, **conf)
        await consumer.start()
        try:
            tp = AioTopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got: list[bytes] = []
            while len(got) < len(sent):
                batches = await asyncio.wait_for(consumer.getmany(tp, timeout_ms=1000), 30)
                got += [r.value for r in batches.get(tp, [])]
            return sent, got
        finally:
            await consumer.stop()

    sent, got = asyncio.run(main())
    assert got == sent
    assert _metric(broker, "expired_connections_killed_count") > killed
