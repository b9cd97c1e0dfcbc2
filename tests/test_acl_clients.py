"""Real Kafka clients against a SASL_PLAINTEXT broker with the built-in ACL authorizer: admin (a
super user) manages ACLs with confluent-kafka's and kafka-python's admin clients; alice produces
and consumes what her ACLs allow, and every client gets Kafka's authorization errors for what
they do not (TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from acl_helpers import ADMIN, ALICE, BOB, SETTINGS, kafka_python, librdkafka
from client_helpers import consume, produce
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import KafkaError as CKError
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

from odradek.security.acl import AclOperation as OdradekOperation
from odradek.testing import BrokerProcess, start_broker, unique_topic

pytestmark = pytest.mark.integration

KCAT = shutil.which("kcat") or "/usr/bin/kcat"
ACL_READ = OdradekOperation.READ
#: alice's topics and group (prefixes: each test names its own under them)
ALICE_TOPICS, ALICE_GROUPS = "alice-", "alice-g"


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """The broker, with alice allowed to write and read topics ``alice-*`` and to use groups
    ``alice-g*`` (PREFIXED ACLs, created by admin through confluent-kafka)."""
    with start_broker(tmp_path_factory.mktemp("acl-broker"), SETTINGS) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, **ADMIN})
        bindings = [
            AclBinding(ResourceType.TOPIC, ALICE_TOPICS, ResourcePatternType.PREFIXED, "User:alice", "*", op, allow)
            for op, allow in (
                (AclOperation.WRITE, AclPermissionType.ALLOW),
                (AclOperation.READ, AclPermissionType.ALLOW),
            )
        ]
        bindings.append(
            AclBinding(
                ResourceType.GROUP, ALICE_GROUPS, ResourcePatternType.PREFIXED, "User:alice", "*",
                AclOperation.READ, AclPermissionType.ALLOW,
            )
        )  # fmt: skip
        for future in admin.create_acls(bindings).values():
            assert future.result(30) is None
        yield broker
        problems = broker.log_problems()
        assert not problems, "\n".join(problems)


def _create_topic(broker: BrokerProcess, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **ADMIN})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)


def _produce_errors(broker: BrokerProcess, topic: str, conf: dict[str, Any]) -> list[Any]:
    """The delivery errors of one message from a producer with ``conf``."""
    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 10000, **conf})
    producer.produce(topic, b"v", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(20)
    return errors


def test_confluent_kafka_produces_and_consumes_what_alice_may(acl_broker: BrokerProcess) -> None:
    topic = unique_topic(ALICE_TOPICS)
    _create_topic(acl_broker, topic)
    produce(acl_broker, topic, [(b"k", b"allowed")], **ALICE)
    got = consume(acl_broker, topic, 1, **ALICE, **{"group.id": unique_topic(ALICE_GROUPS)})
    assert [m.value() for m in got] == [b"allowed"]


def test_confluent_kafka_gets_topic_authorization_failed(acl_broker: BrokerProcess) -> None:
    topic = unique_topic(ALICE_TOPICS)
    _create_topic(acl_broker, topic)
    errors = _produce_errors(acl_broker, topic, BOB)
    assert [e.code() for e in errors] == [CKError.TOPIC_AUTHORIZATION_FAILED], errors
    other = unique_topic("not-alice")
    _create_topic(acl_broker, other)
    errors = _produce_errors(acl_broker, other, ALICE)
    assert [e.code() for e in errors] == [CKError.TOPIC_AUTHORIZATION_FAILED], errors


def test_a_consumer_without_its_group_acl_gets_group_authorization_failed(acl_broker: BrokerProcess) -> None:
    topic = unique_topic(ALICE_TOPICS)
    _create_topic(acl_broker, topic)
    consumer = Consumer({"bootstrap.servers": acl_broker.bootstrap, "group.id": unique_topic("other-group"), **ALICE})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 20
        error = None
        while error is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is not None:
                error = msg.error()
    finally:
        consumer.close()
    assert error is not None and error.code() == CKError.GROUP_AUTHORIZATION_FAILED, error


def test_bob_does_not_see_topics_he_may_not_describe(acl_broker: BrokerProcess) -> None:
    topic = unique_topic(ALICE_TOPICS)
    _create_topic(acl_broker, topic)
    bob = AdminClient({"bootstrap.servers": acl_broker.bootstrap, **BOB})
    assert topic not in bob.list_topics(timeout=10).topics
    alice = AdminClient({"bootstrap.servers": acl_broker.bootstrap, **ALICE})
    assert topic in alice.list_topics(timeout=10).topics  # READ implies DESCRIBE
    named = bob.list_topics(topic, timeout=10).topics[topic]
    assert named.error is not None and named.error.code() == CKError.TOPIC_AUTHORIZATION_FAILED


def test_confluent_kafka_admin_describes_and_deletes_acls(acl_broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": acl_broker.bootstrap, **ADMIN})
    topic = unique_topic("ck-acl")
    binding = AclBinding(
        ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:bob", "*",
        AclOperation.DESCRIBE, AclPermissionType.DENY,
    )  # fmt: skip
    assert admin.create_acls([binding])[binding].result(30) is None
    match = AclBindingFilter(
        ResourceType.TOPIC, topic, ResourcePatternType.MATCH, None, None, AclOperation.ANY, AclPermissionType.ANY
    )
    assert admin.describe_acls(match).result(30) == [binding]
    everything = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
    )
    assert {b.principal for b in admin.describe_acls(everything).result(30)} >= {"User:alice", "User:bob"}
    deleted = admin.delete_acls([match])[match].result(30)
    assert deleted == [binding]
    assert admin.describe_acls(match).result(30) == []


def test_only_a_principal_with_cluster_alter_manages_acls(acl_broker: BrokerProcess) -> None:
    alice = AdminClient({"bootstrap.servers": acl_broker.bootstrap, **ALICE})
    binding = AclBinding(
        ResourceType.TOPIC, "x", ResourcePatternType.LITERAL, "User:alice", "*",
        AclOperation.ALL, AclPermissionType.ALLOW,
    )  # fmt: skip
    with pytest.raises(KafkaException) as refused:
        alice.create_acls([binding])[binding].result(30)
    assert refused.value.args[0].code() == CKError.CLUSTER_AUTHORIZATION_FAILED
    everything = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
    )
    # librdkafka drops DescribeAcls' top-level error (with Kafka too): an empty list, no error
    assert alice.describe_acls(everything).result(30) == []
    from kafka.admin import ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType, KafkaAdminClient
    from kafka.admin import ResourcePatternFilter as KpPatternFilter
    from kafka.admin import ResourceType as KpResourceType
    from kafka.errors import ClusterAuthorizationFailedError

    kafka_python_alice = KafkaAdminClient(bootstrap_servers=acl_broker.bootstrap, **kafka_python("alice"))
    try:
        any_acl = ACLFilter(
            None, None, ACLOperation.ANY, ACLPermissionType.ANY,
            KpPatternFilter(KpResourceType.ANY, None, ACLResourcePatternType.ANY),
        )  # fmt: skip
        with pytest.raises(ClusterAuthorizationFailedError):
            kafka_python_alice.describe_acls(any_acl)
    finally:
        kafka_python_alice.close()


def test_kafka_python_admin_creates_describes_and_deletes_acls(acl_broker: BrokerProcess) -> None:
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePattern,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KpResourceType
    from kafka.errors import NoError

    group = unique_topic("kp-group")
    admin = KafkaAdminClient(bootstrap_servers=acl_broker.bootstrap, **kafka_python("admin"))
    try:
        acl = ACL(
            "User:bob", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
            ResourcePattern(KpResourceType.GROUP, group, ACLResourcePatternType.LITERAL),
        )  # fmt: skip
        created = admin.create_acls([acl])
        assert created["failed"] == [] and len(created["succeeded"]) == 1
        group_filter = ACLFilter(
            None, None, ACLOperation.ANY, ACLPermissionType.ANY,
            ResourcePatternFilter(KpResourceType.GROUP, group, ACLResourcePatternType.ANY),
        )  # fmt: skip
        found, error = admin.describe_acls(group_filter)
        assert error is NoError and found == [acl]
        bad = ACL(
            "bob", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
            ResourcePattern(KpResourceType.GROUP, group, ACLResourcePatternType.LITERAL),
        )  # fmt: skip
        refused = admin.create_acls([bad])
        assert refused["succeeded"] == [] and len(refused["failed"]) == 1
        ((_, deleted, delete_error),) = admin.delete_acls([group_filter])
        assert delete_error is NoError and deleted == [acl]
        assert admin.describe_acls(group_filter)[0] == []
    finally:
        admin.close()


def _kcat(
    broker: BrokerProcess, user: str, *args: str, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    sasl = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=PLAIN"]
    sasl += ["-X", f"sasl.username={user}", "-X", f"sasl.password={user}-secret"]
    return subprocess.run(
        [KCAT, "-b", broker.bootstrap, *sasl, *args], input=stdin, capture_output=True, timeout=60, check=False
    )


def test_kcat_produces_and_consumes_when_allowed_and_fails_when_not(acl_broker: BrokerProcess) -> None:
    topic = unique_topic(ALICE_TOPICS)
    _create_topic(acl_broker, topic)
    wrote = _kcat(acl_broker, "alice", "-P", "-t", topic, stdin=b"via kcat\n")
    assert wrote.returncode == 0, wrote.stderr
    read = _kcat(acl_broker, "alice", "-C", "-t", topic, "-o", "beginning", "-e")
    assert read.returncode == 0 and read.stdout == b"via kcat\n", read.stderr
    denied = _kcat(acl_broker, "bob", "-C", "-t", topic, "-o", "beginning", "-e")
    assert denied.returncode != 0
    assert b"authoriz" in denied.stderr.lower(), denied.stderr


def _grant(broker: BrokerProcess, resource_type: Any, name: str, operation: Any, *, prefixed: bool = True) -> None:
    """admin lets alice do ``operation`` on the resources named (or prefixed) ``name``."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **ADMIN})
    pattern = ResourcePatternType.PREFIXED if prefixed else ResourcePatternType.LITERAL
    binding = AclBinding(resource_type, name, pattern, "User:alice", "*", operation, AclPermissionType.ALLOW)
    assert admin.create_acls([binding])[binding].result(30) is None


def test_create_topics_is_decided_per_topic(acl_broker: BrokerProcess) -> None:
    prefix = unique_topic("alice-new") + "-"
    _grant(acl_broker, ResourceType.TOPIC, prefix, AclOperation.CREATE)
    alice = AdminClient({"bootstrap.servers": acl_broker.bootstrap, **ALICE})
    mine, other = prefix + "t", unique_topic("bob-new")
    futures = alice.create_topics([NewTopic(mine, 1, 1), NewTopic(other, 1, 1)])
    assert futures[mine].result(30) is None
    with pytest.raises(KafkaException) as refused:
        futures[other].result(30)
    assert refused.value.args[0].code() == CKError.TOPIC_AUTHORIZATION_FAILED
    admin = AdminClient({"bootstrap.servers": acl_broker.bootstrap, **ADMIN})
    assert other not in admin.list_topics(timeout=10).topics


def test_idempotent_and_transactional_producers(acl_broker: BrokerProcess) -> None:
    topic = unique_topic(ALICE_TOPICS)
    _create_topic(acl_broker, topic)
    # idempotent: WRITE on some topic is enough (Kafka 3), no IDEMPOTENT_WRITE on the cluster
    produce(acl_broker, topic, [(b"k", b"idempotent")], **ALICE, **{"enable.idempotence": True})
    # transactional: WRITE on the transactional id is needed
    txn_id = unique_topic("alice-tx")
    producer = Producer({"bootstrap.servers": acl_broker.bootstrap, "transactional.id": txn_id, **ALICE})
    with pytest.raises(KafkaException) as refused:
        producer.init_transactions(20)
    assert refused.value.args[0].code() == CKError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    _grant(acl_broker, ResourceType.TRANSACTIONAL_ID, txn_id, AclOperation.WRITE, prefixed=False)
    producer = Producer({"bootstrap.servers": acl_broker.bootstrap, "transactional.id": txn_id, **ALICE})
    producer.init_transactions(20)
    producer.begin_transaction()
    producer.produce(topic, b"transactional")
    producer.commit_transaction(20)
    got = consume(acl_broker, topic, 2, **ALICE, **{"group.id": unique_topic(ALICE_GROUPS)})
    assert [m.value() for m in got] == [b"idempotent", b"transactional"]


def test_authorized_operations_come_from_the_acls(acl_broker: BrokerProcess) -> None:
    topic = unique_topic(ALICE_TOPICS)
    _create_topic(acl_broker, topic)
    group = unique_topic(ALICE_GROUPS)
    consume(acl_broker, topic, 0, **ALICE, **{"group.id": group})
    admin = AdminClient({"bootstrap.servers": acl_broker.bootstrap, **ADMIN})
    alice = AdminClient({"bootstrap.servers": acl_broker.bootstrap, **ALICE})
    assert set(admin.describe_cluster(include_authorized_operations=True).result(30).authorized_operations) == {
        AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER, AclOperation.DESCRIBE,
    }  # fmt: skip
    assert not alice.describe_cluster(include_authorized_operations=True).result(30).authorized_operations
    described = alice.describe_consumer_groups([group], include_authorized_operations=True)[group].result(30)
    assert set(described.authorized_operations) == {AclOperation.READ, AclOperation.DESCRIBE}


def test_odradek_admin_client_manages_acls(acl_broker: BrokerProcess) -> None:
    from odradek.client import Admin, KafkaError
    from odradek.security.acl import AclBindingFilter as Filter
    from odradek.security.acl import ResourcePatternFilter
    from odradek.security.acl import ResourceType as Type
    from odradek.testing.authorizer import acl

    group = unique_topic("odradek-g")
    binding = acl(Type.GROUP, group, "User:bob", ACL_READ)
    by_group = Filter(ResourcePatternFilter(Type.GROUP, group))
    with Admin({"bootstrap.servers": acl_broker.bootstrap, **ADMIN}) as admin:
        assert admin.create_acls([binding], timeout=30) == {binding: None}
        assert admin.describe_acls(by_group, timeout=30) == [binding]
        assert admin.delete_acls([by_group], timeout=30) == {by_group: [binding]}
        assert admin.describe_acls(by_group, timeout=30) == []
    with Admin({"bootstrap.servers": acl_broker.bootstrap, **BOB}) as bob:
        with pytest.raises(KafkaError) as refused:
            bob.describe_acls(timeout=30)
        assert refused.value.code == CKError.CLUSTER_AUTHORIZATION_FAILED
        (error,) = bob.create_acls([binding], timeout=30).values()
        assert error is not None and error.code == CKError.CLUSTER_AUTHORIZATION_FAILED


def _acls_cli(broker: BrokerProcess, user: str, *args: str) -> subprocess.CompletedProcess[str]:
    sasl = [f"{k}={v}" for k, v in librdkafka(user).items()]
    return subprocess.run(
        [sys.executable, "-m", "odradek", "acls", *args, "--bootstrap-server", broker.bootstrap,
         *(arg for kv in sasl for arg in ("--command-config", kv))],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_odradek_acls_cli(acl_broker: BrokerProcess) -> None:
    topic = unique_topic("cli-acl")
    added = _acls_cli(
        acl_broker, "admin", "add", "--allow-principal", "User:bob", "--operation", "Read",
        "--operation", "describe_configs", "--topic", topic,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert f"Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)`:" in (
        added.stdout
    )
    listed = _acls_cli(acl_broker, "admin", "list", "--topic", topic)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[:3] == [
        f"Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)`:",
        " \t(principal=User:bob, host=*, operation=READ, permissionType=ALLOW)",
        " \t(principal=User:bob, host=*, operation=DESCRIBE_CONFIGS, permissionType=ALLOW)",
    ]
    assert "User:alice" in _acls_cli(acl_broker, "admin", "list", "--principal", "User:alice").stdout
    removed = _acls_cli(acl_broker, "admin", "remove", "--topic", topic, "--operation", "Read")
    assert removed.returncode == 0 and "operation=READ" in removed.stdout, removed.stderr
    left = _acls_cli(acl_broker, "admin", "list", "--topic", topic)
    assert "READ" not in left.stdout and "DESCRIBE_CONFIGS" in left.stdout
    bad = _acls_cli(acl_broker, "admin", "add", "--allow-principal", "User:bob", "--operation", "Fly", "--topic", topic)
    assert bad.returncode == 1 and "unknown operation 'Fly'" in bad.stderr
    refused = _acls_cli(
        acl_broker, "alice", "add", "--allow-principal", "User:alice", "--operation", "All", "--cluster"
    )
    assert refused.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr


def test_odradek_acls_cli_consumer_and_producer_shortcuts(acl_broker: BrokerProcess) -> None:
    """--consumer: READ and DESCRIBE on the topic, READ on the group (bob then consumes in the
    group); --producer --idempotent: WRITE, DESCRIBE, CREATE and IDEMPOTENT_WRITE on the cluster."""
    topic, group = unique_topic("cli-consumer"), unique_topic("cli-group")
    consumer = _acls_cli(
        acl_broker, "admin", "add", "--allow-principal", "User:bob", "--consumer", "--topic", topic, "--group", group
    )
    assert consumer.returncode == 0, consumer.stderr
    on_group = _acls_cli(acl_broker, "admin", "list", "--group", group).stdout
    assert " \t(principal=User:bob, host=*, operation=READ, permissionType=ALLOW)" in on_group.splitlines()
    _create_topic(acl_broker, topic)
    produce(acl_broker, topic, [(b"k", b"for bob")], **ADMIN)
    got = consume(acl_broker, topic, 1, **BOB, **{"group.id": group, "enable.auto.commit": True})
    assert [m.value() for m in got] == [b"for bob"]
    producer = _acls_cli(
        acl_broker, "admin", "add", "--allow-principal", "User:bob", "--producer", "--idempotent", "--topic", topic
    )
    assert producer.returncode == 0, producer.stderr
    listed = _acls_cli(acl_broker, "admin", "list", "--topic", topic, "--cluster").stdout
    for op in ("READ", "DESCRIBE", "WRITE", "CREATE", "IDEMPOTENT_WRITE"):
        assert f"operation={op}, permissionType=ALLOW" in listed, listed
    produce(acl_broker, topic, [(b"k", b"from bob")], **BOB, **{"enable.idempotence": True})
    no_group = _acls_cli(acl_broker, "admin", "add", "--allow-principal", "User:bob", "--consumer", "--topic", topic)
    assert no_group.returncode == 1 and "--consumer needs --group" in no_group.stderr
