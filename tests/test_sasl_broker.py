"""SASL_PLAINTEXT on a broker subprocess, at the wire: what a client may send before it is
authenticated, failures, v0 raw tokens, oversized frames; odradek's own client and the
``odradek users`` CLI."""

from __future__ import annotations

import socket
import subprocess
import sys
from typing import Any

import pytest
from sasl_helpers import ADMIN, SCRAM_PASSWORD, SCRAM_USER, WireClient, internal_port
from sasl_helpers import sasl_broker as sasl_broker  # the module's broker

from odradek.client import Admin, Consumer, KafkaError, Producer, UserScramCredentialUpsertion
from odradek.errors import ErrorCode
from odradek.protocol import ApiKey
from odradek.security.scram import SCRAM_SHA_256, ScramSaslClient
from odradek.testing import BrokerProcess, unique_topic

GENERIC = "Authentication failed during authentication due to invalid credentials"
METADATA_V8 = {
    "topics": None,
    "allow_auto_topic_creation": False,
    "include_cluster_authorized_operations": False,
    "include_topic_authorized_operations": False,
}


def _wire(broker: BrokerProcess) -> WireClient:
    return WireClient(broker.host, broker.port)


def test_requests_before_authentication_close_the_connection(sasl_broker: BrokerProcess) -> None:
    wire = _wire(sasl_broker)
    try:
        assert wire.request(ApiKey.METADATA, 8, **METADATA_V8) is None
    finally:
        wire.close()


def test_api_versions_then_unknown_mechanism(sasl_broker: BrokerProcess) -> None:
    wire = _wire(sasl_broker)
    try:
        versions = wire.request(ApiKey.API_VERSIONS, 3, client_software_name="wire", client_software_version="1")
        keys = {int(k.api_key) for k in versions.api_keys}
        assert {ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE, ApiKey.ALTER_USER_SCRAM_CREDENTIALS} <= keys
        answer = wire.request(ApiKey.SASL_HANDSHAKE, 1, mechanism="GSSAPI")
        assert int(answer.error_code) == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert answer.mechanisms == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
        assert wire.closed_by_broker()
    finally:
        wire.close()


@pytest.mark.parametrize(
    ("mechanism", "token", "message"),
    [
        ("PLAIN", b"\x00alice\x00wrong", "Authentication failed: Invalid username or password"),
        ("PLAIN", b"\x00nobody\x00alice-secret", "Authentication failed: Invalid username or password"),
        ("PLAIN", b"garbage", GENERIC),
        ("SCRAM-SHA-256", b"n,,n=nobody,r=abc", GENERIC),
        ("SCRAM-SHA-512", b"\xff\xfe not scram", GENERIC),
    ],
)  # fmt: skip
def test_failed_authentication_is_answered_then_closed(
    sasl_broker: BrokerProcess, mechanism: str, token: bytes, message: str
) -> None:
    wire = _wire(sasl_broker)
    try:
        assert int(wire.request(ApiKey.SASL_HANDSHAKE, 1, mechanism=mechanism).error_code) == 0
        answer = wire.request(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=token)
        assert int(answer.error_code) == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert answer.error_message.startswith(message)
        assert wire.closed_by_broker()
    finally:
        wire.close()
    sasl_broker.check_alive()


def test_a_failed_login_answer_goes_out_before_the_close(sasl_broker: BrokerProcess) -> None:
    """The answer to a failed login reaches the client alone; the broker closes once the client
    has closed its side (or a second later). Closed at once, the answer and the FIN reached a busy
    kafka-python together, and it dropped the answer: it reads until EOF and then discards what
    it read, reporting a lost connection instead of the broker's reason."""
    wire = _wire(sasl_broker)
    try:
        assert int(wire.request(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN").error_code) == 0
        answer = wire.request(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=b"\x00alice\x00wrong")
        assert int(answer.error_code) == ErrorCode.SASL_AUTHENTICATION_FAILED
        wire.sock.settimeout(0.3)
        with pytest.raises(TimeoutError):  # still open: no EOF right behind the answer
            wire.sock.recv(1)
        wire.sock.settimeout(15)
        wire.sock.shutdown(socket.SHUT_WR)  # the client is done: the broker closes too
        assert wire.closed_by_broker()
    finally:
        wire.close()
    sasl_broker.check_alive()


def test_v0_handshake_uses_raw_tokens(sasl_broker: BrokerProcess) -> None:
    wire = _wire(sasl_broker)
    try:
        assert int(wire.request(ApiKey.SASL_HANDSHAKE, 0, mechanism="SCRAM-SHA-256").error_code) == 0
        scram = ScramSaslClient(SCRAM_SHA_256, SCRAM_USER, SCRAM_PASSWORD)
        wire.send_raw(scram.first_message())
        server_first = wire.receive_raw()
        assert server_first is not None and server_first.startswith(b"r=")
        wire.send_raw(scram.final_message(server_first))
        server_final = wire.receive_raw()
        assert server_final is not None
        scram.verify_server_final(server_final)
        # authenticated: Kafka requests are served now
        assert wire.request(ApiKey.METADATA, 8, **METADATA_V8).brokers
    finally:
        wire.close()


def test_v0_wrong_password_closes_without_an_answer(sasl_broker: BrokerProcess) -> None:
    wire = _wire(sasl_broker)
    try:
        assert int(wire.request(ApiKey.SASL_HANDSHAKE, 0, mechanism="PLAIN").error_code) == 0
        wire.send_raw(b"\x00alice\x00wrong")
        assert wire.closed_by_broker()
    finally:
        wire.close()


def test_oversized_frame_before_authentication_closes(sasl_broker: BrokerProcess) -> None:
    """sasl.server.max.receive.size (512 KiB): the size prefix alone is enough to refuse."""
    wire = _wire(sasl_broker)
    try:
        wire.sock.sendall((600 * 1024).to_bytes(4, "big") + b"\x00" * 1024)
        assert wire.closed_by_broker()
    finally:
        wire.close()


def test_after_authentication_a_handshake_is_illegal(sasl_broker: BrokerProcess) -> None:
    wire = _wire(sasl_broker)
    try:
        assert int(wire.request(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN").error_code) == 0
        ok = wire.request(ApiKey.SASL_AUTHENTICATE, 1, auth_bytes=b"\x00alice\x00alice-secret")
        assert int(ok.error_code) == 0 and ok.session_lifetime.total_seconds() == 0
        again = wire.request(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN")
        assert int(again.error_code) == ErrorCode.ILLEGAL_SASL_STATE
    finally:
        wire.close()


def test_the_plaintext_listener_needs_no_authentication(sasl_broker: BrokerProcess) -> None:
    wire = WireClient(sasl_broker.host, internal_port(sasl_broker))
    try:
        assert wire.request(ApiKey.METADATA, 8, **METADATA_V8).brokers
    finally:
        wire.close()


@pytest.mark.parametrize(
    ("mechanism", "user", "password"),
    [
        ("PLAIN", "alice", "alice-secret"),
        ("SCRAM-SHA-256", SCRAM_USER, SCRAM_PASSWORD),
        ("SCRAM-SHA-512", SCRAM_USER, SCRAM_PASSWORD),
    ],
)  # fmt: skip
def test_odradek_client_produces_and_consumes(
    sasl_broker: BrokerProcess, mechanism: str, user: str, password: str
) -> None:
    conf = {
        "bootstrap.servers": sasl_broker.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }
    topic = unique_topic("sasl-odradek")
    with Producer(conf) as producer:
        producer.send(topic, b"v", key=b"k").result(30)
    with Consumer({**conf, "group.id": unique_topic("g"), "auto.offset.reset": "earliest"}) as consumer:
        consumer.subscribe([topic])
        records: list[Any] = []
        for _ in range(60):
            for batch in consumer.poll(0.5).values():
                records += batch
            if records:
                break
    assert [(r.key, r.value) for r in records] == [(b"k", b"v")]


def test_odradek_client_fails_cleanly_with_a_wrong_password(sasl_broker: BrokerProcess) -> None:
    conf = {"bootstrap.servers": sasl_broker.bootstrap, **ADMIN, "sasl.password": "wrong"}
    with Admin(conf) as admin, pytest.raises(KafkaError) as info:
        admin.list_topics(timeout=20)
    assert info.value.code is ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "Invalid username or password" in str(info.value)
    with Producer({**conf, "max.block.ms": 20000}) as producer, pytest.raises(KafkaError) as sent:
        producer.send(unique_topic("nope"), b"v").result(30)
    assert sent.value.code is ErrorCode.SASL_AUTHENTICATION_FAILED


def _cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "odradek", *args], input=stdin, capture_output=True, text=True, timeout=60
    )


def test_users_cli_sets_describes_and_deletes(sasl_broker: BrokerProcess) -> None:
    admin = [f"--command-config={k}={v}" for k, v in ADMIN.items()]
    where = ["--bootstrap-server", sasl_broker.bootstrap, *admin]
    user = unique_topic("carol")
    done = _cli(
        "users", "set", *where, "--user", user, "--mechanism", "SCRAM-SHA-512", "--iterations", "8192", stdin="pw\n"
    )
    assert done.returncode == 0, done.stderr
    described = _cli("users", "describe", *where, "--user", user)
    assert (
        described.stdout.strip()
        == f"SCRAM credential configs for user-principal '{user}' are SCRAM-SHA-512=iterations=8192"
    )
    conf = {"bootstrap.servers": sasl_broker.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user, "sasl.password": "pw"}  # fmt: skip
    with Admin(conf) as as_user:
        assert isinstance(as_user.list_topics(timeout=20), dict)
    bad = _cli("users", "set", *where, "--user", user, "--password", "pw", "--iterations", "100")
    assert bad.returncode == 1 and "UNACCEPTABLE_CREDENTIAL" in bad.stderr and "Too few iterations" in bad.stderr
    assert _cli("users", "delete", *where, "--user", user).returncode == 0
    gone = _cli("users", "describe", *where, "--user", user)
    assert gone.returncode == 1 and "RESOURCE_NOT_FOUND" in gone.stderr
    with Admin(conf) as as_user, pytest.raises(KafkaError) as info:
        as_user.list_topics(timeout=20)
    assert info.value.code is ErrorCode.SASL_AUTHENTICATION_FAILED


def test_admin_client_scram_api_errors(sasl_broker: BrokerProcess) -> None:
    with Admin({"bootstrap.servers": sasl_broker.bootstrap, **ADMIN}) as admin:
        described = admin.describe_user_scram_credentials([SCRAM_USER, "nobody"], timeout=20)
        assert described[SCRAM_USER] == {"SCRAM-SHA-256": 4096, "SCRAM-SHA-512": 8192}
        nobody = described["nobody"]
        assert isinstance(nobody, KafkaError) and nobody.code is ErrorCode.RESOURCE_NOT_FOUND
        results = admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion("x", "SCRAM-SHA-256", "pw", 20000)], [("ghost", "SCRAM-SHA-256")], timeout=20
        )
        assert results["x"] is not None and results["x"].code is ErrorCode.UNACCEPTABLE_CREDENTIAL
        assert results["ghost"] is not None and results["ghost"].code is ErrorCode.RESOURCE_NOT_FOUND
