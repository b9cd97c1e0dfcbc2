"""Two brokers with the ACL authorizer on a shared ZooKeeper or etcd, SASL_PLAINTEXT only: the
brokers authenticate to each other as admin (a super user), so replication and the controller
keep working under ACLs, and an ACL created through broker 1 is enforced by broker 2 (it reaches
it through the metadata store's watch), as is its deletion."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from acl_helpers import ADMIN, ALICE, SETTINGS
from client_helpers import consume, produce
from confluent_kafka import KafkaError as CKError
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from test_replication_cluster import metadata_settings, wait_for

from odradek.testing import BrokerProcess, start_broker, unique_topic

pytestmark = pytest.mark.integration

CLUSTER_SETTINGS = {
    **SETTINGS,
    "zookeeper.session.timeout.ms": "2000",
    "etcd.lease.ttl.ms": "2000",
    "replica.fetch.wait.max.ms": "200",
}


def _write_error(broker: BrokerProcess, topic: str) -> int | None:
    """The delivery error code of one message alice produces through ``broker`` (None: written)."""
    outcome: list[int | None] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 10000, **ALICE})
    producer.produce(topic, b"v", on_delivery=lambda err, msg: outcome.append(None if err is None else err.code()))
    producer.flush(20)
    assert len(outcome) == 1
    return outcome[0]


@pytest.mark.parametrize("kind", ["zookeeper", "etcd"])
def test_acls_are_enforced_by_every_broker_and_replication_works(
    tmp_path: Path, request: pytest.FixtureRequest, kind: str
) -> None:
    settings = {**CLUSTER_SETTINGS, **metadata_settings(kind, request, "acl")}
    with contextlib.ExitStack() as stack:
        b1, b2 = (stack.enter_context(start_broker(tmp_path / f"b{i}", {**settings, "broker.id": i})) for i in (1, 2))
        admin1 = AdminClient({"bootstrap.servers": b1.bootstrap, **ADMIN})
        wait_for("both brokers in the metadata", lambda: len(admin1.list_topics(timeout=10).brokers) == 2)
        prefix = unique_topic("acl-repl") + "-"
        # a topic led by each broker: a Produce goes to the leader, which decides it
        led_by_1, led_by_2 = prefix + "one", prefix + "two"
        created = admin1.create_topics(
            [
                NewTopic(led_by_1, num_partitions=1, replica_assignment=[[1, 2]], config={"min.insync.replicas": "2"}),
                NewTopic(led_by_2, num_partitions=1, replica_assignment=[[2, 1]], config={"min.insync.replicas": "2"}),
            ]
        )
        for future in created.values():
            future.result(30)
        # acks=all with min.insync.replicas=2: acknowledged once the follower fetched it, which
        # it does as admin over SASL (CLUSTER_ACTION, as a super user)
        produce(b1, led_by_2, [(b"k", b"replicated")], acks="all", **ADMIN)
        assert [m.value() for m in consume(b1, led_by_2, 1, **ADMIN)] == [b"replicated"]

        assert _write_error(b1, led_by_2) == CKError.TOPIC_AUTHORIZATION_FAILED
        grant = AclBinding(
            ResourceType.TOPIC, prefix, ResourcePatternType.PREFIXED, "User:alice", "*",
            AclOperation.WRITE, AclPermissionType.ALLOW,
        )  # fmt: skip
        assert admin1.create_acls([grant])[grant].result(30) is None
        # created through broker 1, enforced by broker 2 once its watch delivered it
        wait_for("broker 2 to allow alice", lambda: _write_error(b1, led_by_2) is None)
        assert _write_error(b1, led_by_1) is None
        admin2 = AdminClient({"bootstrap.servers": b2.bootstrap, **ADMIN})
        everything = AclBindingFilter(
            ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
        )
        assert admin2.describe_acls(everything).result(30) == [grant]
        deleted = admin2.delete_acls([everything])[everything].result(30)
        assert deleted == [grant]
        # deleted through broker 2, enforced by broker 1
        wait_for(
            "broker 1 to deny alice again", lambda: _write_error(b2, led_by_1) == CKError.TOPIC_AUTHORIZATION_FAILED
        )
        for broker in (b1, b2):
            assert not broker.log_problems(), broker.log_problems()
