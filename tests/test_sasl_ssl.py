"""SASL_SSL: a TLS connection whose peer then authenticates with SASL, as Kafka's SASL_SSL
listeners do. Real clients (confluent-kafka, kafka-python, aiokafka, kcat, odradek's own) log in
with PLAIN or SCRAM over TLS; a wrong password and a client that skips TLS are refused; and two
brokers replicate over a SASL_SSL inter-broker listener (the broker presents its credentials
inside TLS)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka.helpers import create_ssl_context
from client_helpers import aiokafka_round_trip, consume, kafka_python_read, produce
from confluent_kafka import KafkaError as CKError
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer, KafkaProducer
from sasl_helpers import JAAS, librdkafka_login_errors
from test_replication_ssl import _remote_ports, replicate_a_topic
from tls_helpers import Pki, make_pki

from odradek.testing import BrokerProcess, start_broker, unique_topic
from odradek.testing.servers import unique_chroot

pytestmark = pytest.mark.integration

KCAT = shutil.which("kcat") or "/usr/bin/kcat"
TIMEOUT_S = 20
SCRAM_USER, SCRAM_PASSWORD = "carol", "carol-secret"


def _settings(pki: Pki) -> dict[str, str]:
    return {
        "listeners": "SASL_SSL://127.0.0.1:0",
        "ssl.keystore.location": str(pki.server_pem),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
    }


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def broker(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A SASL_SSL listener (server certificate only), with a SCRAM user made through it."""
    from odradek.client import Admin, UserScramCredentialUpsertion

    with start_broker(tmp_path_factory.mktemp("sasl-ssl-broker"), _settings(pki)) as process:
        with Admin({"bootstrap.servers": process.bootstrap, **_client(pki, "PLAIN", "admin", "admin-secret")}) as a:
            upsert = UserScramCredentialUpsertion(SCRAM_USER, "SCRAM-SHA-256", SCRAM_PASSWORD, 4096)
            assert a.alter_user_scram_credentials([upsert], timeout=30) == {SCRAM_USER: None}
        yield process
        problems = [p for p in process.log_problems() if "handshake" not in p and "authentication" not in p]
        assert not problems, problems


def _client(pki: Pki, mechanism: str, user: str, password: str) -> dict[str, str]:
    """SASL_SSL client settings in librdkafka's names, which odradek's client takes too."""
    return {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(pki.ca_pem),
        "sasl.mechanisms": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


@pytest.mark.parametrize(
    ("mechanism", "user", "password"),
    [("PLAIN", "alice", "alice-secret"), ("SCRAM-SHA-256", SCRAM_USER, SCRAM_PASSWORD)],
)
def test_confluent_kafka_over_sasl_ssl(
    broker: BrokerProcess, pki: Pki, mechanism: str, user: str, password: str
) -> None:
    topic = unique_topic("sasl-ssl-ck")
    # big values: Fetch record slices are read from the segment and encrypted in chunks
    records = [(b"k%d" % i, os.urandom(50_000 + i)) for i in range(20)]
    conf = _client(pki, mechanism, user, password)
    assert [m.offset() for m in produce(broker, topic, records, **conf)] == list(range(20))
    assert [(m.key(), m.value()) for m in consume(broker, topic, 20, **conf)] == records


def test_a_wrong_password_over_tls_is_refused(broker: BrokerProcess, pki: Pki) -> None:
    errors = librdkafka_login_errors(broker.bootstrap, _client(pki, "PLAIN", "alice", "wrong"))
    assert any(e.code() == CKError._AUTHENTICATION for e in errors), errors
    assert any("Invalid username or password" in e.str() for e in errors), errors
    broker.check_alive()


def test_a_client_that_skips_tls_is_refused(broker: BrokerProcess) -> None:
    """SASL without TLS on a SASL_SSL port: the broker reads the SASL handshake request as a TLS
    record, fails the TLS handshake and closes; the client gets no SASL answer."""
    conf = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN"}
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **conf, "sasl.username": "alice",
                         "sasl.password": "alice-secret"})  # fmt: skip
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
    assert "TLS handshake failed" in broker.log_path.read_text(), broker.log_tail()
    broker.check_alive()


def test_kafka_python_over_sasl_ssl(broker: BrokerProcess, pki: Pki) -> None:
    topic = unique_topic("sasl-ssl-kp")
    conf: dict[str, Any] = {
        "security_protocol": "SASL_SSL",
        "ssl_cafile": str(pki.ca_pem),
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": SCRAM_USER,
        "sasl_plain_password": SCRAM_PASSWORD,
    }
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, **conf)
    for i in range(10):
        producer.send(topic, b"v%d" % i, partition=0)
    producer.flush(TIMEOUT_S)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, consumer_timeout_ms=15000, **conf)
    assert [r.value for r in kafka_python_read(consumer, topic, 10)] == [b"v%d" % i for i in range(10)]


def test_aiokafka_over_sasl_ssl(broker: BrokerProcess, pki: Pki) -> None:
    conf: dict[str, Any] = {
        "security_protocol": "SASL_SSL",
        "ssl_context": create_ssl_context(cafile=str(pki.ca_pem)),
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "alice",
        "sasl_plain_password": "alice-secret",
    }
    values = [b"a%d" % i for i in range(5)]
    assert aiokafka_round_trip(broker.bootstrap, unique_topic("sasl-ssl-aio"), values, TIMEOUT_S, **conf) == values


def test_kcat_over_sasl_ssl(broker: BrokerProcess, pki: Pki) -> None:
    assert shutil.which(KCAT), "kcat is not installed (Debian package: kcat)"
    topic = unique_topic("sasl-ssl-kcat")
    base = [KCAT, "-b", broker.bootstrap, "-X", "security.protocol=SASL_SSL", "-X", f"ssl.ca.location={pki.ca_pem}",
            "-X", "sasl.mechanisms=SCRAM-SHA-256", "-X", f"sasl.username={SCRAM_USER}",
            "-X", f"sasl.password={SCRAM_PASSWORD}"]  # fmt: skip
    subprocess.run([*base, "-P", "-t", topic], input=b"one\ntwo\n", check=True, timeout=60)
    out = subprocess.run(
        [*base, "-C", "-t", topic, "-o", "beginning", "-e"], capture_output=True, check=True, timeout=60
    )
    assert out.stdout.split() == [b"one", b"two"]


def test_odradeks_client_over_sasl_ssl(broker: BrokerProcess, pki: Pki) -> None:
    from odradek.client import Consumer, Producer, TopicPartition

    topic = unique_topic("sasl-ssl-own")
    conf = {"bootstrap.servers": broker.bootstrap, **_client(pki, "SCRAM-SHA-256", SCRAM_USER, SCRAM_PASSWORD)}
    with Producer(conf) as producer:
        for i in range(10):
            producer.send(topic, b"o%d" % i, partition=0)
        producer.flush()
    with Consumer({**conf, "auto.offset.reset": "earliest"}) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        got: list[bytes] = []
        for _ in range(40):
            for records in consumer.poll(0.5).values():
                got.extend(r.value for r in records)
            if len(got) >= 10:
                break
    assert got == [b"o%d" % i for i in range(10)]


def test_replication_over_a_sasl_ssl_inter_broker_listener(tmp_path: Path, zookeeper_server: Any) -> None:
    """Clients on PLAINTEXT; the brokers fetch from each other on SASL_SSL, authenticating as
    the JAAS config's ``username`` inside TLS."""
    pki = make_pki(tmp_path / "pki")
    settings = {
        **_settings(pki),
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "inter.broker.listener.name": "SASL_SSL",
        "ssl.truststore.location": str(pki.ca_pem),
        "metadata": "zookeeper",
        "zookeeper.connect": zookeeper_server.connect_string + unique_chroot("sasl-ssl-repl"),
        "zookeeper.session.timeout.ms": 2000,
        "replica.fetch.wait.max.ms": 200,
    }
    with contextlib.ExitStack() as stack:
        brokers = {
            i: stack.enter_context(start_broker(tmp_path / f"b{i}", {**settings, "broker.id": i})) for i in (1, 2)
        }
        leader = replicate_a_topic(brokers, "sasl-ssl-repl")
        follower = brokers[2 if leader == 1 else 1]
        assert follower.process is not None
        ports = _remote_ports(follower.process.pid)
        found = re.search(r"listening on SASL_SSL://[^\s:]+:(\d+)", brokers[leader].log_path.read_text())
        assert found, brokers[leader].log_tail()
        assert int(found.group(1)) in ports, ports  # it fetches from the SASL_SSL listener
        assert brokers[leader].port not in ports  # not from the PLAINTEXT one
        for b in brokers.values():
            log = b.log_path.read_text()
            assert "TLS handshake failed" not in log and "failed authentication" not in log, b.log_tail()
