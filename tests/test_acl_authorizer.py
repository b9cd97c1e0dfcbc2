"""The built-in ``acl`` authorizer: its conformance suite, Kafka's filter and validation rules,
the ZooKeeper layout it writes, and ACLs shared through meta_local, ZooKeeper and etcd."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from odradek.config import load_config
from odradek.interfaces import MetadataStore
from odradek.manager import PluginError, load_plugins
from odradek.plugins.meta_local.store import FILE_NAME, LocalMetadataStore
from odradek.security.acl import (
    AccessControlEntryFilter,
    AclBindingFilter,
    AclError,
    AclOperation,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    validate_filter,
)
from odradek.security.acl_authorizer import AclAuthorizer, parse_super_users
from odradek.security.acl_store import acl_key, decode_entries, parse_acl_key
from odradek.security.authorizer import ALLOWED, AuthorizerFactory, authorizer_name
from odradek.security.plugin import odradek_register_authorizers
from odradek.testing import AuthorizerConformance
from odradek.testing.authorizer import acl, as_user

Op = AclOperation
TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP


class TestBuiltinAclAuthorizer(AuthorizerConformance):
    factory = odradek_register_authorizers()[0]


# -- selection ---------------------------------------------------------------------------------


def test_kafka_class_names_select_the_builtin() -> None:
    plugins = load_plugins()
    for name in (
        "acl",
        "kafka.security.authorizer.AclAuthorizer",
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    ):
        factory = plugins.authorizer(name)
        assert isinstance(factory, AuthorizerFactory) and factory.name == "acl"
    assert authorizer_name("  ") == ""


def test_an_unknown_authorizer_is_one_clear_error() -> None:
    with pytest.raises(PluginError) as refused:
        load_plugins().authorizer("com.example.Nope")
    message = str(refused.value)
    assert "authorizer.class.name = 'com.example.Nope'" in message and "available: acl" in message
    assert "\n" not in message


async def test_a_broker_with_an_unknown_authorizer_does_not_start(tmp_path: Path) -> None:
    from odradek.broker.server import BrokerServer

    config = load_config(
        overrides={"log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:0", "authorizer.class.name": "x.Y"},
        plugins=load_plugins(),
    )
    with pytest.raises(PluginError, match="authorizer.class.name = 'x.Y'"):
        await BrokerServer(config).serve()
    assert not any(tmp_path.iterdir())  # stopped before it opened its storage


def test_super_users_are_semicolon_separated() -> None:
    assert parse_super_users(" User:admin;User:broker ;;") == {"User:admin", "User:broker"}


# -- filters and validation --------------------------------------------------------------------


def test_match_filters_select_the_patterns_that_apply_to_a_name() -> None:
    match = ResourcePatternFilter(TOPIC, "sales-eu", PatternType.MATCH)
    assert match.matches(ResourcePattern(TOPIC, "sales-eu"))
    assert match.matches(ResourcePattern(TOPIC, "*"))
    assert match.matches(ResourcePattern(TOPIC, "sales-", PatternType.PREFIXED))
    assert not match.matches(ResourcePattern(TOPIC, "sales-eu-1"))
    assert not match.matches(ResourcePattern(TOPIC, "sales-eu-", PatternType.PREFIXED))
    assert not match.matches(ResourcePattern(GROUP, "sales-eu"))
    # ANY and a concrete pattern type: the exact name only (the * pattern is a pattern like any)
    assert not ResourcePatternFilter(TOPIC, "sales-eu").matches(ResourcePattern(TOPIC, "*"))
    assert ResourcePatternFilter(TOPIC, "*", PatternType.LITERAL).matches(ResourcePattern(TOPIC, "*"))


def test_entry_filters_compare_exactly() -> None:
    entry = acl(TOPIC, "t", "User:*", Op.READ).entry
    assert AccessControlEntryFilter(principal="User:*").matches(entry)
    assert not AccessControlEntryFilter(principal="User:alice").matches(entry)
    assert AccessControlEntryFilter(operation=Op.READ, host="*").matches(entry)
    assert not AccessControlEntryFilter(operation=Op.ALL).matches(entry)


def test_filters_with_unknown_elements_are_refused() -> None:
    validate_filter(AclBindingFilter())
    with pytest.raises(AclError, match="UNKNOWN operation"):
        validate_filter(AclBindingFilter(entry=AccessControlEntryFilter(operation=Op.UNKNOWN)))
    with pytest.raises(AclError, match="UNKNOWN resource type"):
        validate_filter(AclBindingFilter(ResourcePatternFilter(ResourceType.UNKNOWN)))


# -- the store layout --------------------------------------------------------------------------


def test_keys_follow_kafkas_layout_and_names_are_sanitized() -> None:
    assert acl_key(ResourcePattern(TOPIC, "orders")) == "/kafka-acl/Topic/orders"
    assert acl_key(ResourcePattern(ResourceType.TRANSACTIONAL_ID, "tx")) == "/kafka-acl/TransactionalId/tx"
    prefixed = ResourcePattern(GROUP, "team/a*", PatternType.PREFIXED)
    assert acl_key(prefixed) == "/kafka-acl-extended/prefixed/Group/team%2Fa%2A"
    assert parse_acl_key(acl_key(prefixed)) == prefixed
    assert parse_acl_key("/kafka-acl/Nonsense/x") is None
    assert parse_acl_key("/kafka-acl-changes/acl_changes_0000000001") is None


async def test_values_are_kafkas_json_and_bad_entries_are_ignored(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path / FILE_NAME)
    await store.open(6000)
    try:
        authorizer = AclAuthorizer(store)
        await authorizer.start()
        binding = acl(ResourceType.CLUSTER, "kafka-cluster", "User:bob", Op.IDEMPOTENT_WRITE)
        assert [r.error for r in await authorizer.create_acls(as_user("admin"), [binding])] == [None]
        got = await store.get("/kafka-acl/Cluster/kafka-cluster")
        assert got is not None
        assert json.loads(got.value) == {
            "version": 1,
            "acls": [{"principal": "User:bob", "permissionType": "Allow", "operation": "IdempotentWrite", "host": "*"}],
        }
        mixed = b'{"version":1,"acls":[{"principal":"User:x","permissionType":"Allow","operation":"Fly","host":"*"},'
        mixed += b'{"principal":"User:y","permissionType":"Deny","operation":"Read","host":"*"}]}'
        assert [e.principal for e in decode_entries(mixed)] == ["User:y"]
        assert decode_entries(b"not json") == frozenset()
    finally:
        await store.close()


# -- ACLs shared by the brokers of a cluster, on every store ------------------------------------


@pytest.fixture(params=["local", "zk", "etcd"])
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], MetadataStore]:
    if request.param == "local":
        return lambda: LocalMetadataStore(tmp_path / FILE_NAME)
    from odradek.testing import unique_chroot

    if request.param == "zk":
        from odradek.plugins.meta_zk.store import ZooKeeperMetadataStore

        connect = request.getfixturevalue("zookeeper_server").connect_string + unique_chroot("acls")
        return lambda: ZooKeeperMetadataStore(connect)
    from odradek.plugins.meta_etcd.store import EtcdMetadataStore

    endpoint, namespace = request.getfixturevalue("etcd_server").endpoint, unique_chroot("acls")
    return lambda: EtcdMetadataStore([endpoint], namespace=namespace)


async def test_acls_are_shared_through_every_store(store_factory: Callable[[], MetadataStore]) -> None:
    stores = [store_factory(), store_factory()]
    for store in stores:
        await store.open(6000)
    try:
        first, second = AclAuthorizer(stores[0]), AclAuthorizer(stores[1])
        await first.create_acls(as_user("admin"), [acl(TOPIC, "before", "User:alice", Op.READ)])
        for authorizer in (first, second):
            await authorizer.start()
        assert second.allowed("User:alice", "h", Op.READ, TOPIC, "before")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(second.run)
            created = await first.create_acls(
                as_user("admin"),
                [
                    acl(TOPIC, "logs-", "User:alice", Op.WRITE, pattern_type=PatternType.PREFIXED),
                    acl(GROUP, "g/1", "User:alice", Op.READ),
                ],
            )
            assert [r.error for r in created] == [None, None]
            with trio.fail_after(10):
                while not (
                    second.allowed("User:alice", "h", Op.WRITE, TOPIC, "logs-app")
                    and second.allowed("User:alice", "h", Op.READ, GROUP, "g/1")
                ):
                    await trio.sleep(0.01)
            deleted = await first.delete_acls(as_user("admin"), [AclBindingFilter(ResourcePatternFilter(TOPIC))])
            assert len(deleted[0].deleted) == 2
            with trio.fail_after(10):
                while second.allowed("User:alice", "h", Op.WRITE, TOPIC, "logs-app"):
                    await trio.sleep(0.01)
            assert not second.allowed("User:alice", "h", Op.READ, TOPIC, "before")
            assert second.allowed("User:alice", "h", Op.READ, GROUP, "g/1")
            nursery.cancel_scope.cancel()
    finally:
        for store in stores:
            await store.close()


def test_allow_everyone_if_no_acl_found() -> None:
    authorizer = AclAuthorizer(LocalMetadataStore(Path("/nonexistent")), allow_if_no_acls=True)
    assert authorizer.allowed("User:alice", "h", Op.WRITE, TOPIC, "free")
    authorizer.set_entries(
        ResourcePattern(TOPIC, "guarded"), frozenset({acl(TOPIC, "guarded", "User:bob", Op.READ).entry})
    )
    assert not authorizer.allowed("User:alice", "h", Op.WRITE, TOPIC, "guarded")  # an ACL applies: no fallback
    assert authorizer.authorize(as_user("bob"), []) == []
    assert authorizer.authorize_by_resource_type(as_user("alice"), Op.WRITE, GROUP) is ALLOWED
