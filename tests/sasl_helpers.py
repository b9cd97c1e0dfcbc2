"""A SASL broker for the SASL integration tests: listener CLIENTS (SASL_PLAINTEXT) first, then
INTERNAL (PLAINTEXT); PLAIN users from the JAAS config, SCRAM users created through the broker."""

from __future__ import annotations

import re
import socket
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.protocol import decode_response, encode_request, request_type
from odradek.testing import BrokerProcess, start_broker

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
JAAS = (
    f'{PLAIN_MODULE} required username="admin" password="admin-secret" '
    'user_admin="admin-secret" user_alice="alice-secret";'
)
SETTINGS = {
    "listeners": "CLIENTS://127.0.0.1:0,INTERNAL://127.0.0.1:0",
    "listener.security.protocol.map": "CLIENTS:SASL_PLAINTEXT,INTERNAL:PLAINTEXT",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    "sasl.mechanism.inter.broker.protocol": "PLAIN",
    "listener.name.clients.plain.sasl.jaas.config": JAAS,
}
#: SCRAM users the fixture creates (through AlterUserScramCredentials, as admin over PLAIN)
SCRAM_USER, SCRAM_PASSWORD = "bob", "bob-secret"
ADMIN = {
    "security.protocol": "SASL_PLAINTEXT",
    "sasl.mechanism": "PLAIN",
    "sasl.username": "admin",
    "sasl.password": "admin-secret",
}


def listener_port(broker: BrokerProcess, listener: str) -> int:
    """The port of ``listener`` (the broker logs every listener it serves)."""
    found = re.search(rf"listening on {listener}://[^\s:]+:(\d+)", broker.log_path.read_text())
    assert found, f"no {listener} listener in the log:\n{broker.log_tail()}"
    return int(found.group(1))


def internal_port(broker: BrokerProcess) -> int:
    """The PLAINTEXT listener's port."""
    return listener_port(broker, "INTERNAL")


def sasl_broker_fixture(tmp_path: Path, settings: dict[str, Any] | None = None) -> Iterator[BrokerProcess]:
    """Start the SASL broker (``settings``: :data:`SETTINGS` unless given) in ``tmp_path`` and
    create the SCRAM user; stopped afterwards."""
    from odradek.client import Admin, UserScramCredentialUpsertion

    with start_broker(tmp_path, settings or SETTINGS) as broker:
        with Admin({"bootstrap.servers": broker.bootstrap, **ADMIN}) as admin:
            results = admin.alter_user_scram_credentials(
                [
                    UserScramCredentialUpsertion(SCRAM_USER, "SCRAM-SHA-256", SCRAM_PASSWORD, 4096),
                    UserScramCredentialUpsertion(SCRAM_USER, "SCRAM-SHA-512", SCRAM_PASSWORD, 8192),
                ],
                timeout=30,
            )
        assert results == {SCRAM_USER: None}, results
        yield broker
        problems = broker.log_problems()
        assert not problems, "\n".join(problems)


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from sasl_broker_fixture(tmp_path_factory.mktemp("sasl-broker"))


class WireClient:
    """Raw frames over a socket: what a client sends before and while authenticating."""

    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port), timeout=15)
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def send_raw(self, payload: bytes) -> None:
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)

    def receive_raw(self) -> bytes | None:
        """The next frame, None when the broker closed the connection."""
        head = self._exactly(4)
        if head is None:
            return None
        body = self._exactly(struct.unpack(">i", head)[0])
        return body

    def _exactly(self, n: int) -> bytes | None:
        out = b""
        while len(out) < n:
            try:
                chunk = self.sock.recv(n - len(out))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            out += chunk
        return out

    def request(self, api_key: int, version: int, **fields: Any) -> Any:
        """Send a request; its decoded response, None when the broker closed instead."""
        self.send(api_key, version, **fields)
        frame = self.receive_raw()
        if frame is None:
            return None
        return decode_response(api_key, version, frame)[1]

    def send(self, api_key: int, version: int, **fields: Any) -> None:
        self.correlation += 1
        request = request_type(api_key, version)(**fields)
        self.send_raw(encode_request(request, correlation_id=self.correlation, client_id="wire-test"))

    def closed_by_broker(self) -> bool:
        """True once the broker has closed its side (waits up to the socket timeout)."""
        return self.receive_raw() is None


def librdkafka_login_errors(bootstrap: str, conf: dict[str, Any], timeout_s: float = 20) -> list[Any]:
    """The errors (``error_cb``) of a confluent-kafka producer configured with ``conf`` once one
    of them is an authentication failure (or ``timeout_s`` passed): what a refused login shows."""
    import time

    from confluent_kafka import KafkaError, Producer

    from odradek.testing import unique_topic

    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": bootstrap, **conf, "error_cb": errors.append, "message.timeout.ms": 5000})
    producer.produce(unique_topic("nope"), b"v")
    deadline = time.monotonic() + timeout_s
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errors) and time.monotonic() < deadline:
        producer.poll(0.2)
    producer.purge()
    producer.flush(5)
    return errors
