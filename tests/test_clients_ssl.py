"""Real Kafka clients over TLS against ``odradek serve`` subprocesses with an SSL listener:
confluent-kafka (librdkafka), kafka-python, aiokafka, kcat, and odradek's own client and CLI;
mutual TLS (``ssl.client.auth=required``) with a client certificate, and a client without one
refused; a bad TLS config stops the broker's start with one line naming the key."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka.helpers import create_ssl_context
from client_helpers import aiokafka_round_trip, consume, kafka_python_read, produce
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource
from kafka import KafkaConsumer, KafkaProducer
from tls_helpers import Pki, make_pki

from odradek.testing import BrokerProcess, start_broker, unique_topic
from odradek.testing.broker import BrokerDied

pytestmark = pytest.mark.integration

KCAT = shutil.which("kcat") or "/usr/bin/kcat"
TIMEOUT_S = 20


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _ssl_settings(pki: Pki, **more: str) -> dict[str, str]:
    return {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": str(pki.server_pem), **more}


@pytest.fixture(scope="module")
def tls_broker(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """An SSL listener, server certificate only (``ssl.client.auth=none``, Kafka's default)."""
    with start_broker(tmp_path_factory.mktemp("tls-broker"), _ssl_settings(pki)) as broker:
        yield broker
        assert not broker.log_problems(), broker.log_problems()


@pytest.fixture(scope="module")
def mtls_broker(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Mutual TLS: a PKCS12 keystore, clients need a certificate signed by the test CA."""
    settings = {
        "listeners": "SSL://127.0.0.1:0",
        "ssl.keystore.location": str(pki.server_pkcs12()),
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.password": "s3cret",
        "ssl.truststore.location": str(pki.ca_pem),
        "ssl.client.auth": "required",
    }
    with start_broker(tmp_path_factory.mktemp("mtls-broker"), settings) as broker:
        yield broker


def _librdkafka(pki: Pki, **more: str) -> dict[str, str]:
    return {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca_pem), **more}


# -- confluent-kafka ------------------------------------------------------------------------------


def test_confluent_kafka_over_tls(tls_broker: BrokerProcess, pki: Pki) -> None:
    topic = unique_topic("tls-ck")
    # big values: Fetch record slices are read from the segment and encrypted in chunks
    records = [(b"k%d" % i, os.urandom(100_000 + i)) for i in range(40)]
    conf = _librdkafka(pki)
    delivered = produce(tls_broker, topic, records, **conf)
    assert [m.offset() for m in delivered] == list(range(40))
    got = consume(tls_broker, topic, 40, **conf, **{"fetch.max.bytes": "1000000"})
    assert [(m.key(), m.value()) for m in got] == records


def test_confluent_kafka_mutual_tls(mtls_broker: BrokerProcess, pki: Pki) -> None:
    topic = unique_topic("mtls-ck")
    conf = _librdkafka(
        pki, **{"ssl.certificate.location": str(pki.client_crt), "ssl.key.location": str(pki.client_key)}
    )
    records = [(b"k%d" % i, b"v%d" % i) for i in range(10)]
    produce(mtls_broker, topic, records, **conf)
    assert [(m.key(), m.value()) for m in consume(mtls_broker, topic, 10, **conf)] == records
    # DescribeConfigs names the keystore password as sensitive and never shows it (Kafka's PASSWORD)
    admin = AdminClient({"bootstrap.servers": mtls_broker.bootstrap, **conf})
    resource = ConfigResource(ConfigResource.Type.BROKER, "0")
    entries = admin.describe_configs([resource])[resource].result(TIMEOUT_S)
    password = entries["ssl.keystore.password"]
    assert password.is_sensitive and password.value is None
    assert entries["ssl.client.auth"].value == "required" and not entries["ssl.client.auth"].is_sensitive


def test_a_client_without_a_certificate_is_refused(mtls_broker: BrokerProcess, pki: Pki) -> None:
    admin = AdminClient({"bootstrap.servers": mtls_broker.bootstrap, **_librdkafka(pki)})
    with pytest.raises(KafkaException, match="(?i)ssl|handshake|transport|timed out|broker"):
        admin.list_topics(timeout=5)
    producer = Producer({"bootstrap.servers": mtls_broker.bootstrap, **_librdkafka(pki)})
    assert producer.list_topics  # constructed; its connections fail the handshake
    log = mtls_broker.log_path.read_text()
    assert "TLS handshake failed" in log and "certificate" in log, mtls_broker.log_tail()
    mtls_broker.check_alive()


# -- kafka-python and aiokafka ---------------------------------------------------------------------


def test_kafka_python_over_tls(tls_broker: BrokerProcess, pki: Pki) -> None:
    topic = unique_topic("tls-kp")
    producer = KafkaProducer(
        bootstrap_servers=tls_broker.bootstrap, security_protocol="SSL", ssl_cafile=str(pki.ca_pem)
    )
    try:
        for i in range(10):
            producer.send(topic, key=b"k", value=b"v%d" % i).get(timeout=TIMEOUT_S)
    finally:
        producer.close()
    consumer = KafkaConsumer(
        bootstrap_servers=tls_broker.bootstrap,
        security_protocol="SSL",
        ssl_cafile=str(pki.ca_pem),
        enable_auto_commit=False,
        consumer_timeout_ms=TIMEOUT_S * 1000,
    )
    assert [r.value for r in kafka_python_read(consumer, topic, 10)] == [b"v%d" % i for i in range(10)]


def test_aiokafka_mutual_tls(mtls_broker: BrokerProcess, pki: Pki) -> None:
    context = create_ssl_context(cafile=str(pki.ca_pem), certfile=str(pki.client_crt), keyfile=str(pki.client_key))
    values = [b"v%d" % i for i in range(10)]
    got = aiokafka_round_trip(
        mtls_broker.bootstrap, unique_topic("mtls-aio"), values, TIMEOUT_S, security_protocol="SSL", ssl_context=context
    )
    assert got == values


# -- kcat ----------------------------------------------------------------------------------------


def kcat(*args: str, stdin: bytes | None = None) -> bytes:
    assert shutil.which(KCAT), "kcat is not installed (Debian package: kcat)"
    result = subprocess.run([KCAT, *args], input=stdin, capture_output=True, timeout=30)
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    return result.stdout


def test_kcat_over_tls_and_mutual_tls(tls_broker: BrokerProcess, mtls_broker: BrokerProcess, pki: Pki) -> None:
    for broker, extra in (
        (tls_broker, []),
        (mtls_broker, ["-X", f"ssl.certificate.location={pki.client_crt}", "-X", f"ssl.key.location={pki.client_key}"]),
    ):
        tls = ["-b", broker.bootstrap, "-X", "security.protocol=ssl", "-X", f"ssl.ca.location={pki.ca_pem}", *extra]
        topic = unique_topic("tls-kcat")
        lines = [f"key{i}:value {i}" for i in range(20)]
        kcat(*tls, "-P", "-t", topic, "-K", ":", stdin="\n".join(lines).encode())
        out = kcat(*tls, "-C", "-t", topic, "-o", "beginning", "-e", "-f", "%o %k=%s\n")
        assert out.decode().splitlines() == [f"{i} key{i}=value {i}" for i in range(20)]
        metadata = json.loads(kcat(*tls, "-L", "-J", "-t", topic))
        assert metadata["brokers"][0]["name"] == broker.bootstrap


# -- odradek's own client and CLI ----------------------------------------------------------------


def _cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "odradek", *args], input=stdin, capture_output=True, timeout=60, check=False
    )


def test_odradek_cli_over_mutual_tls(mtls_broker: BrokerProcess, pki: Pki) -> None:
    topic = unique_topic("tls-cli")
    props = {
        "security.protocol": "SSL",
        "ssl.ca.location": str(pki.ca_pem),
        "ssl.certificate.location": str(pki.client_crt),
        "ssl.key.location": str(pki.client_key),
    }

    def flags(name: str) -> list[str]:
        return [x for k, v in props.items() for x in (name, f"{k}={v}")]

    boot = ["--bootstrap-server", mtls_broker.bootstrap]
    created = _cli("topics", "create", *boot, "--topic", topic, *flags("--command-config"))
    assert created.returncode == 0, created.stderr.decode()
    produced = _cli("produce", *boot, "--topic", topic, *flags("--producer-property"), stdin=b"a\nb\nc\n")
    assert produced.returncode == 0, produced.stderr.decode()
    consumed = _cli(
        "consume", *boot, "--topic", topic, "--from-beginning", "--max-messages", "3", *flags("--consumer-property")
    )
    assert consumed.returncode == 0, consumed.stderr.decode()
    assert consumed.stdout.split() == [b"a", b"b", b"c"]
    # without the client certificate the broker refuses it, and the CLI says so
    refused = _cli(
        "topics", "list", *boot, "--timeout", "5", "--command-config", "security.protocol=SSL",
        "--command-config", f"ssl.ca.location={pki.ca_pem}",
    )  # fmt: skip
    assert refused.returncode != 0


# -- a bad TLS config --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"ssl.keystore.location": "/nonexistent/broker.p12"}, "invalid value for 'ssl.keystore.location'"),
        ({"ssl.keystore.type": "JKS"}, "JKS keystores are Java's own format and are not supported; use PKCS12 or PEM"),
        (
            {"ssl.keystore.password": "wrong", "ssl.keystore.type": "PKCS12"},
            "ssl.keystore.password is not its password",
        ),
        (  # read only by the broker's own connections to other brokers: checked at start too
            {"ssl.keystore.password": "s3cret", "ssl.truststore.location": "/nonexistent/ca.pem"},
            "invalid value for 'ssl.truststore.location': /nonexistent/ca.pem: no such file",
        ),
    ],
)
def test_a_bad_tls_config_stops_the_start_naming_the_key(
    pki: Pki, tmp_path: Path, settings: dict[str, str], message: str
) -> None:
    base = {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": str(pki.server_pkcs12()), **settings}
    broker = BrokerProcess(tmp_path, base)
    with pytest.raises(BrokerDied):
        broker.start(timeout_s=30)
    log = broker.log_path.read_text()
    assert message in log, log
    assert "Traceback" not in log, log
