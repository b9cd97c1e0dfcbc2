"""Two brokers on a shared ZooKeeper or etcd with only a SASL_PLAINTEXT listener: replication
runs over SASL (the brokers authenticate to each other with sasl.mechanism.inter.broker.protocol
and their JAAS username/password), and a SCRAM user created through broker 1 (its credentials go
to /config/users in the metadata store) authenticates at broker 2."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from client_helpers import consume, produce
from confluent_kafka.admin import AdminClient, NewTopic
from sasl_helpers import ADMIN, JAAS, WireClient
from test_replication_cluster import metadata_settings, wait_for

from odradek.client import Admin, UserScramCredentialUpsertion
from odradek.protocol import ApiKey
from odradek.security.scram import SCRAM_SHA_512, ScramSaslClient
from odradek.testing.broker import start_broker, unique_topic

pytestmark = pytest.mark.integration

SETTINGS = {
    "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
    "sasl.mechanism.inter.broker.protocol": "PLAIN",
    "sasl.jaas.config": JAAS,
    "zookeeper.session.timeout.ms": "2000",
    "etcd.lease.ttl.ms": "2000",
    "replica.fetch.wait.max.ms": "200",
}


@pytest.mark.parametrize("kind", ["zookeeper", "etcd"])
def test_replication_over_sasl_and_scram_users_shared_by_the_cluster(
    tmp_path: Path, request: pytest.FixtureRequest, kind: str
) -> None:
    settings = {**SETTINGS, **metadata_settings(kind, request, "sasl")}
    with contextlib.ExitStack() as stack:
        b1, b2 = (stack.enter_context(start_broker(tmp_path / f"b{i}", {**settings, "broker.id": i})) for i in (1, 2))
        admin = AdminClient({"bootstrap.servers": b1.bootstrap, **ADMIN})  # librdkafka takes the same keys
        wait_for("both brokers in the metadata", lambda: len(admin.list_topics(timeout=10).brokers) == 2)
        topic = unique_topic("sasl-repl")
        created = admin.create_topics([NewTopic(topic, 1, 2, config={"min.insync.replicas": "2"})])
        created[topic].result(30)
        # acks=all with min.insync.replicas=2: acknowledged only once the follower fetched it,
        # which it does over SASL
        produce(b1, topic, [(b"k", b"replicated")], acks="all", **ADMIN)
        assert [m.value() for m in consume(b2, topic, 1, **ADMIN)] == [b"replicated"]

        with Admin({"bootstrap.servers": b1.bootstrap, **ADMIN}) as odradek_admin:
            results = odradek_admin.alter_user_scram_credentials(
                [UserScramCredentialUpsertion("erin", "SCRAM-SHA-512", "erin-secret", 4096)], timeout=30
            )
        assert results == {"erin": None}
        # broker 2 alone, at the wire: the credential came through the metadata store
        wire = WireClient(b2.host, b2.port)
        try:
            assert int(wire.request(ApiKey.SASL_HANDSHAKE, 1, mechanism="SCRAM-SHA-512").error_code) == 0
            scram = ScramSaslClient(SCRAM_SHA_512, "erin", "erin-secret")
            first = wire.request(ApiKey.SASL_AUTHENTICATE, 1, auth_bytes=scram.first_message())
            assert int(first.error_code) == 0, first.error_message
            final = wire.request(ApiKey.SASL_AUTHENTICATE, 1, auth_bytes=scram.final_message(bytes(first.auth_bytes)))
            assert int(final.error_code) == 0, final.error_message
            scram.verify_server_final(bytes(final.auth_bytes))
        finally:
            wire.close()
        for broker in (b1, b2):
            assert not broker.log_problems(), broker.log_problems()
