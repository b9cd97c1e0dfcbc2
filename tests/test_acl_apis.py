"""KafkaApis' authorization checks, API by API, on an in-process broker (BrokerServer with the
``acl`` authorizer, no sockets): the dispatcher gets each request with a principal, as a SASL
connection hands it over, and the answers carry Kafka's error codes where the ACLs refuse --
for the whole request, per item, or by leaving items out -- and the ACL APIs' validation errors."""

from __future__ import annotations

import datetime
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
from broker_harness import broker_plugins, create, serving

from odradek.broker.core import BrokerCore
from odradek.broker.server import BrokerServer
from odradek.config import load_config
from odradek.errors import ErrorCode
from odradek.interfaces import Endpoint
from odradek.plugins.transport_tcp.apis import Dispatcher
from odradek.principal import KafkaPrincipal
from odradek.protocol import ApiKey, FetchEnvelope, decode_response, encode_request, parse_request_header, request_type
from odradek.security.acl import AclOperation, PatternType, ResourceType
from odradek.testing.authorizer import acl, as_user

Op = AclOperation
MS = datetime.timedelta(milliseconds=1).__mul__
TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
T29, T30, T31 = (
    ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
)


def request_class(api_key: int, version: int, class_name: str) -> Any:
    """A class of a request's schema (``AclCreation`` of CreateAcls v3)."""
    return getattr(sys.modules[request_type(api_key, version).__module__], class_name)


def nested(api_key: int, version: int, class_name: str, /, **fields: Any) -> Any:
    """An entity of a request's schema, from the fields its version has."""
    cls = request_class(api_key, version, class_name)
    return cls(**{k: v for k, v in fields.items() if k in cls.__dataclass_fields__})


class Wire:
    """Requests through the broker's dispatcher as ``principal``."""

    def __init__(self, core: BrokerCore) -> None:
        self.dispatcher = Dispatcher(core, core.config, Endpoint("PLAINTEXT", "127.0.0.1", 9092))
        self.correlation = 0

    async def call(self, user: str, api_key: int, version: int, **fields: Any) -> Any:
        self.correlation += 1
        request = request_type(api_key, version)(**fields)
        frame = bytearray(encode_request(request, correlation_id=self.correlation, client_id="acl-test"))
        out = await self.dispatcher.process(
            parse_request_header(frame), frame, "10.0.0.1:5555", principal=KafkaPrincipal("User", user)
        )
        if isinstance(out, FetchEnvelope):
            data = out.to_bytes()[4:]  # without the size prefix, as the other responses
            out.release()
            out = data
        assert isinstance(out, bytes)
        return decode_response(api_key, version, out)[1]


@pytest.fixture
async def wire(tmp_path: Path) -> AsyncIterator[Wire]:
    plugins = broker_plugins(extra=["odradek.security.plugin"])
    config = load_config(
        env={},
        overrides={
            "log.dirs": str(tmp_path),
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin",
            "group.initial.rebalance.delay.ms": 0,
        },
        plugins=plugins,
    )
    async with serving(BrokerServer(config, plugins)) as core:
        for name in ("alice-1", "alice-2", "other"):
            await create(core, name)
        assert core.authorizer is not None
        results = await core.authorizer.create_acls(
            as_user("admin"),
            [
                acl(TOPIC, "alice-", "User:alice", Op.ALL, pattern_type=PatternType.PREFIXED),
                acl(GROUP, "alice-g", "User:alice", Op.READ),
            ],
        )
        assert [r.error for r in results] == [None, None]
        yield Wire(core)


#: what a group coordinator answers until it has loaded its partitions
_LOADING = (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE)


async def _coordinator_ready(wire: Wire) -> None:
    """Ask for the groups' coordinator until it answers: the first FindCoordinator creates the
    offsets topic, whose partitions the coordinator then loads."""
    with trio.fail_after(10):
        while _code((await wire.call("admin", ApiKey.FIND_COORDINATOR, 3, key="alice-g", key_type=0)).error_code):
            await trio.sleep(0.05)


def any_acl(**changes: Any) -> dict[str, Any]:
    """The fields of a DescribeAcls request / DeleteAcls filter matching every ACL, with ``changes``."""
    return {
        "resource_type_filter": 1,
        "resource_name_filter": None,
        "pattern_type_filter": 1,
        "principal_filter": None,
        "host_filter": None,
        "operation": 1,
        "permission_type": 1,
        **changes,
    }


def _code(value: Any) -> int:
    return int(value)


async def test_metadata_leaves_out_and_refuses_topics_without_describe(wire: Wire) -> None:
    everything = await wire.call(
        "alice",
        ApiKey.METADATA,
        8,
        topics=None,
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=True,
        include_topic_authorized_operations=True,
    )
    assert sorted(t.name for t in everything.topics) == ["alice-1", "alice-2"]
    assert everything.cluster_authorized_operations == 0
    read_describe = (1 << Op.READ) | (1 << Op.DESCRIBE)
    assert all(t.topic_authorized_operations & read_describe == read_describe for t in everything.topics)
    topic_cls = nested(ApiKey.METADATA, 8, "MetadataRequestTopic", name="other").__class__
    named = await wire.call(
        "alice",
        ApiKey.METADATA,
        8,
        topics=(
            topic_cls(name="other"),
            topic_cls(name="alice-1"),
            topic_cls(name="alice-new"),
            topic_cls(name="nope"),
        ),
        allow_auto_topic_creation=True,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    codes = {t.name: _code(t.error_code) for t in named.topics}
    # alice may create alice-* (ALL): auto-created; "nope" she may not even describe
    assert codes["other"] == T29 and codes["nope"] == T29 and codes["alice-1"] == 0
    assert codes["alice-new"] in (ErrorCode.NONE, ErrorCode.LEADER_NOT_AVAILABLE)
    # bob may describe bob-x but not create it: refused, and not created
    core = wire.dispatcher.broker
    await core.authorizer.create_acls(as_user("admin"), [acl(TOPIC, "bob-x", "User:bob", Op.DESCRIBE)])
    bobs = await wire.call(
        "bob",
        ApiKey.METADATA,
        8,
        topics=(topic_cls(name="bob-x"),),
        allow_auto_topic_creation=True,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    assert [(t.name, _code(t.error_code)) for t in bobs.topics] == [("bob-x", T29)]
    assert "bob-x" not in core.metadata_cache.topics and "alice-new" in core.metadata_cache.topics


async def test_group_apis_need_the_group(wire: Wire) -> None:
    protocol = nested(ApiKey.JOIN_GROUP, 5, "JoinGroupRequestProtocol", name="range", metadata=b"")
    join = {
        "session_timeout": MS(10000),
        "rebalance_timeout": MS(10000),
        "member_id": "",
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": (protocol,),
    }
    refused = await wire.call("alice", ApiKey.JOIN_GROUP, 5, group_id="bobs-group", **join)
    assert _code(refused.error_code) == T30
    # FindCoordinator needs DESCRIBE on the group (READ implies it); it creates the offsets topic
    denied = await wire.call("alice", ApiKey.FIND_COORDINATOR, 3, key="bobs-group", key_type=0)
    assert _code(denied.error_code) == T30
    await _coordinator_ready(wire)
    with trio.fail_after(10):
        while True:
            described = await wire.call(
                "alice", ApiKey.DESCRIBE_GROUPS, 5, groups=("alice-g", "bobs-group"), include_authorized_operations=True
            )
            if _code(described.groups[0].error_code) not in _LOADING:
                break
            await trio.sleep(0.05)
    codes = {g.group_id: _code(g.error_code) for g in described.groups}
    assert codes == {"alice-g": 0, "bobs-group": T30}
    (mine,) = [g for g in described.groups if g.group_id == "alice-g"]
    assert mine.authorized_operations == (1 << Op.READ) | (1 << Op.DESCRIBE)
    deleted = await wire.call("alice", ApiKey.DELETE_GROUPS, 2, groups_names=("alice-g",))
    assert [_code(r.error_code) for r in deleted.results] == [T30]  # READ does not allow DELETE


async def _commit(wire: Wire, user: str, group: str, topics: tuple[str, ...]) -> dict[str, int]:
    """Commit offset 5 of partition 0 of ``topics`` for ``group`` as ``user`` (outside any
    generation, as an admin tool does); each topic's error code."""
    part = nested(
        ApiKey.OFFSET_COMMIT,
        7,
        "OffsetCommitRequestPartition",
        partition_index=0,
        committed_offset=5,
        committed_leader_epoch=-1,
        committed_metadata="",
    )
    topic_cls = nested(ApiKey.OFFSET_COMMIT, 7, "OffsetCommitRequestTopic", name="x", partitions=()).__class__
    response = await wire.call(
        user,
        ApiKey.OFFSET_COMMIT,
        7,
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=tuple(topic_cls(name=t, partitions=(part,)) for t in topics),
    )
    return {t.name: _code(t.partitions[0].error_code) for t in response.topics}


async def test_offset_commit_refuses_topics_without_read(wire: Wire) -> None:
    codes = await _commit(wire, "alice", "alice-g", ("alice-1", "other"))
    assert codes["other"] == T29
    # allowed: the coordinator answers (it may still be loading its partition)
    assert codes["alice-1"] in (ErrorCode.NONE, *_LOADING)


async def test_per_item_admin_apis(wire: Wire) -> None:
    deleted = await wire.call("alice", ApiKey.DELETE_TOPICS, 5, topic_names=("other", "alice-2"), timeout=MS(5000))
    assert {r.name: _code(r.error_code) for r in deleted.responses} == {"other": T29, "alice-2": 0}
    resource = nested(
        ApiKey.DESCRIBE_CONFIGS,
        4,
        "DescribeConfigsResource",
        resource_type=2,
        resource_name="x",
        configuration_keys=None,
    ).__class__
    configs = await wire.call(
        "alice",
        ApiKey.DESCRIBE_CONFIGS,
        4,
        include_synonyms=False,
        include_documentation=False,
        resources=(
            resource(resource_type=2, resource_name="alice-1", configuration_keys=None),
            resource(resource_type=2, resource_name="other", configuration_keys=None),
            resource(resource_type=4, resource_name="0", configuration_keys=None),
        ),
    )
    assert {r.resource_name: _code(r.error_code) for r in configs.results} == {"alice-1": 0, "other": T29, "0": T31}
    topic = nested(ApiKey.LIST_OFFSETS, 8, "ListOffsetsTopic", name="x", partitions=()).__class__
    partition = nested(
        ApiKey.LIST_OFFSETS, 8, "ListOffsetsPartition", partition_index=0, current_leader_epoch=-1, timestamp=-1
    )
    offsets = await wire.call(
        "alice",
        ApiKey.LIST_OFFSETS,
        8,
        replica_id=-1,
        isolation_level=0,
        topics=(topic(name="other", partitions=(partition,)), topic(name="alice-1", partitions=(partition,))),
    )
    assert {t.name: _code(t.partitions[0].error_code) for t in offsets.topics} == {"other": T29, "alice-1": 0}


async def test_cluster_apis_need_the_cluster(wire: Wire) -> None:
    for api_key, version, fields in (
        (ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": None}),
        (ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": None}),
        (ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, {"timeout": MS(5000), "topics": None}),
        (ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, {"components": (), "strict": False}),
    ):
        response = await wire.call("alice", api_key, version, **fields)
        assert _code(response.error_code) == T31, api_key
        admin = await wire.call("admin", api_key, version, **fields)
        assert _code(admin.error_code) == 0, api_key
    idempotent = await wire.call(
        "bob",
        ApiKey.INIT_PRODUCER_ID,
        4,
        transactional_id=None,
        transaction_timeout=MS(60000),
        producer_id=-1,
        producer_epoch=-1,
    )
    assert _code(idempotent.error_code) == T31
    allowed = await wire.call(
        "alice",
        ApiKey.INIT_PRODUCER_ID,
        4,
        transactional_id=None,
        transaction_timeout=MS(60000),
        producer_id=-1,
        producer_epoch=-1,
    )
    assert _code(allowed.error_code) == 0  # WRITE on her topics is enough


async def test_alter_replica_log_dirs_needs_cluster_alter(wire: Wire) -> None:
    topic = nested(ApiKey.ALTER_REPLICA_LOG_DIRS, 2, "AlterReplicaLogDirTopic", name="alice-1", partitions=(0,))
    move = nested(ApiKey.ALTER_REPLICA_LOG_DIRS, 2, "AlterReplicaLogDir", path="/no/such/dir", topics=(topic,))
    for user, code in (("alice", T31), ("admin", ErrorCode.LOG_DIR_NOT_FOUND.value)):
        response = await wire.call(user, ApiKey.ALTER_REPLICA_LOG_DIRS, 2, dirs=(move,))
        ((name, partition, got),) = [
            (t.topic_name, p.partition_index, _code(p.error_code)) for t in response.results for p in t.partitions
        ]
        assert (name, partition, got) == ("alice-1", 0, code), user


async def test_acl_apis_refuse_bad_bindings_and_filters(wire: Wire) -> None:
    creation = request_class(ApiKey.CREATE_ACLS, 3, "AclCreation")
    fields = {"resource_type": 2, "resource_name": "t", "principal": "User:bob", "host": "*", "operation": 3}
    response = await wire.call(
        "admin",
        ApiKey.CREATE_ACLS,
        3,
        creations=(
            creation(**fields, resource_pattern_type=2, permission_type=3),  # MATCH
            creation(**fields, resource_pattern_type=3, permission_type=1),  # ANY permission
            creation(**{**fields, "operation": 99}, resource_pattern_type=3, permission_type=3),  # no such code
            creation(**fields, resource_pattern_type=3, permission_type=3),
        ),
    )
    assert [_code(r.error_code) for r in response.results] == [ErrorCode.INVALID_REQUEST] * 3 + [0]
    assert "MATCH" in response.results[0].error_message
    bad_filter = await wire.call("admin", ApiKey.DESCRIBE_ACLS, 3, **any_acl(resource_type_filter=2, operation=0))
    assert _code(bad_filter.error_code) == ErrorCode.INVALID_REQUEST
    found = await wire.call(
        "admin",
        ApiKey.DESCRIBE_ACLS,
        3,
        **any_acl(resource_type_filter=2, resource_name_filter="t", pattern_type_filter=2),
    )
    assert [(r.resource_name, [a.principal for a in r.acls]) for r in found.resources] == [("t", ["User:bob"])]
    refused = await wire.call(
        "alice", ApiKey.CREATE_ACLS, 3, creations=(creation(**fields, resource_pattern_type=3, permission_type=3),)
    )
    assert [_code(r.error_code) for r in refused.results] == [T31]


async def test_fetch_needs_read_and_a_follower_cluster_action(wire: Wire) -> None:
    partition = nested(
        ApiKey.FETCH,
        11,
        "FetchPartition",
        partition=0,
        current_leader_epoch=-1,
        fetch_offset=0,
        last_fetched_epoch=-1,
        log_start_offset=-1,
        partition_max_bytes=1024,
    )
    topics = tuple(
        nested(ApiKey.FETCH, 11, "FetchTopic", topic=t, partitions=(partition,)) for t in ("alice-1", "other")
    )

    async def fetch(user: str, replica_id: int) -> dict[str, int]:
        response = await wire.call(
            user,
            ApiKey.FETCH,
            11,
            replica_id=replica_id,
            max_wait=MS(0),
            min_bytes=0,
            max_bytes=4096,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=topics,
            forgotten_topics_data=(),
            rack_id="",
        )
        return {t.topic: _code(t.partitions[0].error_code) for t in response.responses}

    assert await fetch("alice", -1) == {"alice-1": 0, "other": T29}
    assert await fetch("alice", 1) == {"alice-1": T29, "other": T29}  # a follower without CLUSTER_ACTION
    asked = nested(
        ApiKey.OFFSET_FOR_LEADER_EPOCH,
        3,
        "OffsetForLeaderPartition",
        partition=0,
        current_leader_epoch=-1,
        leader_epoch=0,
    )
    epoch_topics = (
        nested(ApiKey.OFFSET_FOR_LEADER_EPOCH, 3, "OffsetForLeaderTopic", topic="alice-1", partitions=(asked,)),
    )
    for replica_id, expected in ((1, T31), (-1, ErrorCode.NONE)):
        epochs = await wire.call("alice", ApiKey.OFFSET_FOR_LEADER_EPOCH, 3, replica_id=replica_id, topics=epoch_topics)
        assert _code(epochs.topics[0].partitions[0].error_code) == expected


async def test_offset_fetch_and_list_groups_show_only_what_may_be_described(wire: Wire) -> None:
    await _coordinator_ready(wire)
    for user, group, topics in (
        ("alice", "alice-g", ("alice-1",)),
        ("admin", "alice-g", ("other",)),
        ("admin", "bobs-group", ("other",)),
    ):
        with trio.fail_after(10):  # until the group coordinator has loaded its partitions
            while set((codes := await _commit(wire, user, group, topics)).values()) & set(_LOADING):
                await trio.sleep(0.05)
        assert set(codes.values()) == {ErrorCode.NONE}
    # all of alice-g's topics: "other" (committed by admin) is left out for alice
    everything = await wire.call("alice", ApiKey.OFFSET_FETCH, 7, group_id="alice-g", topics=None, require_stable=False)
    assert [t.name for t in everything.topics] == ["alice-1"]
    assert [
        t.name
        for t in (
            await wire.call("admin", ApiKey.OFFSET_FETCH, 7, group_id="alice-g", topics=None, require_stable=False)
        ).topics
    ] == ["alice-1", "other"]
    group_cls = nested(ApiKey.OFFSET_FETCH, 8, "OffsetFetchRequestGroup", group_id="x", topics=None).__class__
    several = await wire.call(
        "alice",
        ApiKey.OFFSET_FETCH,
        8,
        require_stable=False,
        groups=(group_cls(group_id="alice-g", topics=None), group_cls(group_id="bobs-group", topics=None)),
    )
    assert {g.group_id: _code(g.error_code) for g in several.groups} == {"alice-g": 0, "bobs-group": T30}
    # v8+ per group: all topics leaves out "other", naming it answers it refused, without its offset
    alice_g = next(g for g in several.groups if g.group_id == "alice-g")
    assert [t.name for t in alice_g.topics] == ["alice-1"]
    topics_cls = request_class(ApiKey.OFFSET_FETCH, 8, "OffsetFetchRequestTopics")
    named = await wire.call(
        "alice",
        ApiKey.OFFSET_FETCH,
        8,
        require_stable=False,
        groups=(
            group_cls(
                group_id="alice-g",
                topics=(
                    topics_cls(name="alice-1", partition_indexes=(0,)),
                    topics_cls(name="other", partition_indexes=(0,)),
                ),
            ),
        ),
    )
    by_topic = {t.name: t.partitions[0] for t in named.groups[0].topics}
    assert _code(by_topic["alice-1"].error_code) == 0 and by_topic["alice-1"].committed_offset >= 0
    assert _code(by_topic["other"].error_code) == T29 and by_topic["other"].committed_offset == -1
    admin_view = await wire.call(
        "admin",
        ApiKey.OFFSET_FETCH,
        8,
        require_stable=False,
        groups=(group_cls(group_id="alice-g", topics=(topics_cls(name="other", partition_indexes=(0,)),)),),
    )
    assert admin_view.groups[0].topics[0].partitions[0].committed_offset >= 0
    listed = await wire.call("alice", ApiKey.LIST_GROUPS, 4, states_filter=())
    assert [g.group_id for g in listed.groups] == ["alice-g"]
    assert sorted(g.group_id for g in (await wire.call("admin", ApiKey.LIST_GROUPS, 4, states_filter=())).groups) == [
        "alice-g",
        "bobs-group",
    ]


HOSTILE_NAMES = ("", "a/b", "%2F", "\x00", "*", "é" * 300, "x" * 5000, "../..", "kafka-cluster")
HOSTILE_CODES = (-128, -1, 0, 1, 2, 3, 4, 5, 8, 15, 127)


async def test_acl_apis_answer_hostile_input_without_failing(wire: Wire) -> None:
    """Whatever codes and names a client sends, every creation and filter gets NONE or
    INVALID_REQUEST (never UNKNOWN_SERVER_ERROR), and odd names come back as they were stored."""
    creation = request_class(ApiKey.CREATE_ACLS, 3, "AclCreation")
    creations = tuple(
        creation(
            resource_type=code,
            resource_name=name,
            resource_pattern_type=(code % 5),
            principal=principal,
            host=host,
            operation=(code + 3) % 15,
            permission_type=(code % 4),
        )
        for code in HOSTILE_CODES
        for name in HOSTILE_NAMES
        for principal, host in (("User:x", "*"), ("x", ""), ("User:", "10.0.0.1"), (":y", "*"))
    )
    created = await wire.call("admin", ApiKey.CREATE_ACLS, 3, creations=creations)
    codes = [_code(r.error_code) for r in created.results]
    assert len(codes) == len(creations) and set(codes) <= {ErrorCode.NONE, ErrorCode.INVALID_REQUEST}
    stored = [c for c, code in zip(creations, codes, strict=True) if code == ErrorCode.NONE]
    assert stored, "some hostile-looking creations are valid ACLs"
    for code in HOSTILE_CODES:
        for name in (None, *HOSTILE_NAMES):
            fields = any_acl(resource_type_filter=code, resource_name_filter=name, pattern_type_filter=code % 5)
            described = await wire.call("admin", ApiKey.DESCRIBE_ACLS, 3, **fields)
            assert _code(described.error_code) in (ErrorCode.NONE, ErrorCode.INVALID_REQUEST)
    everything = await wire.call("admin", ApiKey.DESCRIBE_ACLS, 3, **any_acl())
    names = {r.resource_name for r in everything.resources}
    assert {c.resource_name for c in stored} <= names
    filter_cls = request_class(ApiKey.DELETE_ACLS, 3, "DeleteAclsFilter")
    deleted = await wire.call(
        "admin",
        ApiKey.DELETE_ACLS,
        3,
        filters=(filter_cls(**any_acl(principal_filter="User:x")), filter_cls(**any_acl(resource_type_filter=0))),
    )
    assert [_code(r.error_code) for r in deleted.filter_results] == [0, ErrorCode.INVALID_REQUEST]
    assert {m.principal for m in deleted.filter_results[0].matching_acls} == {"User:x"}


async def test_transactions_need_the_transactional_id(wire: Wire) -> None:
    core = wire.dispatcher.broker
    await core.authorizer.create_acls(
        as_user("admin"), [acl(ResourceType.TRANSACTIONAL_ID, "alice-tx", "User:alice", Op.WRITE)]
    )
    with trio.fail_after(10):  # the transaction coordinator answers once its topic is loaded
        while True:
            init = {"transaction_timeout": MS(60000), "producer_id": -1, "producer_epoch": -1}
            ids = [
                await wire.call(u, ApiKey.INIT_PRODUCER_ID, 4, transactional_id=t, **init)
                for u, t in (("alice", "alice-tx"), ("admin", "admins-tx"))
            ]
            if all(_code(r.error_code) == 0 for r in ids):
                break
            await trio.sleep(0.05)
    refused = await wire.call("alice", ApiKey.INIT_PRODUCER_ID, 4, transactional_id="admins-tx", **init)
    assert _code(refused.error_code) == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    topic = nested(ApiKey.ADD_PARTITIONS_TO_TXN, 2, "AddPartitionsToTxnTopic", name="x", partitions=()).__class__
    added = await wire.call(
        "alice",
        ApiKey.ADD_PARTITIONS_TO_TXN,
        2,
        v3_and_below_transactional_id="alice-tx",
        v3_and_below_producer_id=ids[0].producer_id,
        v3_and_below_producer_epoch=ids[0].producer_epoch,
        v3_and_below_topics=(topic(name="alice-1", partitions=(0,)), topic(name="other", partitions=(0,))),
    )
    codes = {
        t.name: [_code(p.partition_error_code) for p in t.results_by_partition]
        for t in added.results_by_topic_v3_and_below
    }
    assert codes == {"alice-1": [ErrorCode.OPERATION_NOT_ATTEMPTED], "other": [T29]}
    listed = await wire.call("alice", ApiKey.LIST_TRANSACTIONS, 0, state_filters=(), producer_id_filters=())
    assert [t.transactional_id for t in listed.transaction_states] == ["alice-tx"]
    everything = await wire.call("admin", ApiKey.LIST_TRANSACTIONS, 0, state_filters=(), producer_id_filters=())
    assert sorted(t.transactional_id for t in everything.transaction_states) == ["admins-tx", "alice-tx"]


def test_every_api_is_authorized_by_a_rule_or_its_handler() -> None:
    """A new API must get a rule (or be listed here on purpose): without one, any principal may
    call it once an authorizer is configured."""
    from odradek.plugins.transport_tcp.apis.authz import REQUEST_RULES
    from odradek.protocol.apis import SUPPORTED_VERSIONS

    checked_by_their_handlers = {ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.METADATA}
    # Kafka authorizes none of these: version discovery, the SASL exchange, and DescribeCluster
    # (whose only guarded part is its authorized_operations field)
    open_to_all = {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE, ApiKey.DESCRIBE_CLUSTER}
    unruled = {ApiKey(k) for k in SUPPORTED_VERSIONS if k not in REQUEST_RULES}
    assert unruled == checked_by_their_handlers | open_to_all


async def test_kip848_apis_need_the_group_and_the_subscribed_topics(wire: Wire) -> None:
    await _coordinator_ready(wire)
    heartbeat = {
        "member_id": "m-1",
        "member_epoch": 0,
        "instance_id": None,
        "rack_id": None,
        "rebalance_timeout": MS(10000),
        "subscribed_topic_regex": None,
        "server_assignor": None,
        "topic_partitions": (),
    }
    refused = await wire.call(
        "alice", ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, group_id="bobs-group", subscribed_topic_names=("alice-1",),
        **heartbeat,
    )  # fmt: skip
    assert _code(refused.error_code) == T30
    # the group allowed, a topic it may not DESCRIBE is not subscribed to
    refused = await wire.call(
        "alice", ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, group_id="alice-g", subscribed_topic_names=("alice-1", "other"),
        **heartbeat,
    )  # fmt: skip
    assert _code(refused.error_code) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    with trio.fail_after(10):
        while True:
            joined = await wire.call(
                "alice", ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, group_id="alice-g", subscribed_topic_names=("alice-1",),
                **heartbeat,
            )  # fmt: skip
            if _code(joined.error_code) not in _LOADING:
                break
            await trio.sleep(0.05)
    assert _code(joined.error_code) == ErrorCode.NONE and joined.member_epoch > 0
    described = await wire.call(
        "alice", ApiKey.CONSUMER_GROUP_DESCRIBE, 1, group_ids=("alice-g", "bobs-group"),
        include_authorized_operations=True,
    )  # fmt: skip
    by_id = {g.group_id: g for g in described.groups}
    assert _code(by_id["alice-g"].error_code) == ErrorCode.NONE
    assert _code(by_id["bobs-group"].error_code) == T30


async def test_created_topics_configs_need_describe_configs(wire: Wire) -> None:
    """CreateTopics v5+ shows a created topic's configs, partition count and replication factor
    only with DESCRIBE_CONFIGS on it (Kafka's handleCreateTopicsRequest)."""
    creation = request_class(ApiKey.CREATE_ACLS, 3, "AclCreation")
    create_only = creation(
        resource_type=2, resource_name="carol-t", resource_pattern_type=3, principal="User:alice", host="*",
        operation=Op.CREATE, permission_type=3,
    )  # fmt: skip
    assert [
        _code(r.error_code) for r in (await wire.call("admin", ApiKey.CREATE_ACLS, 3, creations=(create_only,))).results
    ] == [0]
    topic = request_class(ApiKey.CREATE_TOPICS, 7, "CreatableTopic")
    created = await wire.call(
        "alice",
        ApiKey.CREATE_TOPICS,
        7,
        topics=tuple(
            topic(name=n, num_partitions=2, replication_factor=1, assignments=(), configs=())
            for n in ("carol-t", "alice-new")
        ),
        timeout=MS(5000),
        validate_only=False,
    )
    by_name = {t.name: t for t in created.topics}
    hidden, shown = by_name["carol-t"], by_name["alice-new"]
    assert _code(hidden.error_code) == 0 and _code(hidden.topic_config_error_code) == T29
    assert hidden.configs == () and hidden.num_partitions == -1 and hidden.replication_factor == -1
    assert _code(shown.topic_config_error_code) == 0 and shown.num_partitions == 2 and shown.configs
