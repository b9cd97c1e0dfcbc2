"""Authorization of requests (Kafka's ``AuthHelper`` and the checks of ``KafkaApis``).

With no authorizer configured (``authorizer.class.name`` empty) nothing here runs: the dispatcher
and the handlers look at ``broker.authorizer`` once and go on. With one, requests are checked
the way Kafka's ``KafkaApis`` checks them, in three shapes:

- a *whole-request* check (:data:`REQUEST_RULES` ``check``): the request acts on one resource or on
  the cluster (JoinGroup on its group, EndTxn on its transactional id, ElectLeaders on the cluster);
  denied, the whole request is answered with the error in every error field
  (:func:`~.error_responses.error_response`) and the handler never runs;
- a *per-item* check (``items``): the request names many resources in one list (CreateTopics'
  topics, DescribeGroups' groups, DescribeConfigs' resources); the handler gets the request with
  the allowed items only and the denied ones are answered with their error, merged into the
  handler's response;
- a *response filter* (``filter``): ListGroups keeps the groups the principal may DESCRIBE,
  ListTransactions the transactional ids, an OffsetFetch for all of a group's topics the topics.

Produce, Fetch and Metadata check in their handlers (``core``), which build their own responses.
Denials are logged on ``odradek.authorizer`` (Kafka's ``kafka.authorizer.logger``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields, is_dataclass, replace
from functools import lru_cache
from typing import Any

from kio.static.primitive import i16, i32, i64

from odradek.errors import ErrorCode
from odradek.protocol import ApiKey
from odradek.protocol.authorized_operations import AUTHORIZED_OPERATIONS_OMITTED
from odradek.security.acl import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AclOperation,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from odradek.security.authorizer import ALLOWED, Action, Authorizer
from odradek.security.authorizer import RequestContext as AuthContext

from .error_responses import error_response

Op = AclOperation
RT = ResourceType
#: a denial: the error code and the message of the error response
Denial = tuple[ErrorCode, str]


def authorizer_of(ctx: Any) -> Authorizer | None:
    """The broker's authorizer; None when none is configured (or a stand-in broker has none)."""
    return getattr(ctx.broker, "authorizer", None)


def auth_context(ctx: Any) -> AuthContext:
    """Kafka's ``AuthorizableRequestContext`` of a handler's request context."""
    header = ctx.header
    host = ctx.peer.rpartition(":")[0] or ctx.peer
    return AuthContext(
        ctx.principal,
        host.strip("[]"),
        ctx.listener.name,
        header.api_key,
        header.api_version,
        header.client_id or "",
        header.correlation_id,
    )


@lru_cache(maxsize=16384)
def _action(operation: AclOperation, resource_type: ResourceType, name: str, log: bool = True) -> Action:
    """The action of an operation on a resource by literal name: the same few topics and groups
    come in request after request, so each is built once (with the authorizer's memo, a
    Produce's check is then two cache hits)."""
    return Action(operation, ResourcePattern(resource_type, name, PatternType.LITERAL), log_if_denied=log)


def allowed_names(
    ctx: Any, authorizer: Authorizer, operation: AclOperation, resource_type: ResourceType, names: Iterable[str]
) -> set[str]:
    """The names among ``names`` the principal may do ``operation`` on (one batch call)."""
    distinct = list(dict.fromkeys(names))
    if not distinct:
        return set()
    results = authorizer.authorize(auth_context(ctx), [_action(operation, resource_type, n) for n in distinct])
    return {n for n, r in zip(distinct, results, strict=True) if r is ALLOWED}


def allowed(
    ctx: Any,
    authorizer: Authorizer,
    operation: AclOperation,
    resource_type: ResourceType,
    name: str,
    *,
    log: bool = True,
) -> bool:
    return authorizer.authorize(auth_context(ctx), [_action(operation, resource_type, name, log)])[0] is ALLOWED


def cluster_allowed(ctx: Any, authorizer: Authorizer, operation: AclOperation, *, log: bool = True) -> bool:
    return allowed(ctx, authorizer, operation, RT.CLUSTER, CLUSTER_NAME, log=log)


def authorized_operations_bits(ctx: Any, authorizer: Authorizer, resource_type: ResourceType, name: str) -> int:
    """KIP-430's bit field: the operations the principal may do on the resource (not logged)."""
    ops = SUPPORTED_OPERATIONS[resource_type]
    pattern = ResourcePattern(resource_type, name, PatternType.LITERAL)
    results = authorizer.authorize(auth_context(ctx), [Action(op, pattern, log_if_denied=False) for op in ops])
    return sum(1 << op for op, r in zip(ops, results, strict=True) if r is ALLOWED)


def operations_field(ctx: Any, asked: bool, resource_type: ResourceType, name: str, everything: int) -> int:
    """What a KIP-430 ``authorized_operations`` field holds: INT32_MIN when the client did not
    ask, ``everything`` the type supports without an authorizer, else the authorizer's answer."""
    if not asked:
        return AUTHORIZED_OPERATIONS_OMITTED
    authorizer = authorizer_of(ctx)
    return everything if authorizer is None else authorized_operations_bits(ctx, authorizer, resource_type, name)


# -- the rules ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ItemRule:
    """Per-item checks of one request list: ``field`` names it (None: nothing to check) and
    ``denied(ctx, authorizer, request, item)`` says an item's error code, None if allowed.
    ``all_or_nothing``: the request acts on all its items or none (AddPartitionsToTxn), so one
    refused item stops it and the allowed ones are answered with this code."""

    field: Callable[[Any], str | None]
    denied: Callable[[Any, Authorizer, Any, Any], ErrorCode | None]
    all_or_nothing: ErrorCode | None = None


@dataclass(frozen=True, slots=True)
class Rule:
    check: Callable[[Any, Authorizer, Any], Denial | None] | None = None
    items: ItemRule | None = None
    #: ``filter(ctx, authorizer, request, response)``: the response without what may not be seen
    filter: Callable[[Any, Authorizer, Any, Any], Any] | None = None


def _cluster(operation: AclOperation) -> Callable[[Any, Authorizer, Any], Denial | None]:
    def check(ctx: Any, authorizer: Authorizer, request: Any) -> Denial | None:
        if cluster_allowed(ctx, authorizer, operation):
            return None
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, f"Cluster authorization failed ({operation.name} on CLUSTER)"

    return check


def _denial(code: ErrorCode, operation: AclOperation, resource_type: ResourceType, name: str) -> Denial:
    return code, f"{resource_type.title} authorization failed ({operation.name} on {resource_type.name} {name!r})"


def _one(
    operation: AclOperation, resource_type: ResourceType, code: ErrorCode, name_of: Callable[[Any], str | None]
) -> Callable[[Any, Authorizer, Any], Denial | None]:
    """A check of the one resource the request names (None: it names none, nothing to check)."""

    def check(ctx: Any, authorizer: Authorizer, request: Any) -> Denial | None:
        name = name_of(request)
        if name is None or allowed(ctx, authorizer, operation, resource_type, name):
            return None
        return _denial(code, operation, resource_type, name)

    return check


def _all(*checks: Callable[[Any, Authorizer, Any], Denial | None]) -> Callable[[Any, Authorizer, Any], Denial | None]:
    """The first denial of ``checks``, in order (Kafka checks the transactional id first)."""

    def check(ctx: Any, authorizer: Authorizer, request: Any) -> Denial | None:
        for c in checks:
            denial = c(ctx, authorizer, request)
            if denial is not None:
                return denial
        return None

    return check


def _group(operation: AclOperation) -> Callable[[Any, Authorizer, Any], Denial | None]:
    return _one(operation, RT.GROUP, ErrorCode.GROUP_AUTHORIZATION_FAILED, lambda r: getattr(r, "group_id", None))


def _txn_write(ctx: Any, authorizer: Authorizer, request: Any) -> Denial | None:
    name = getattr(request, "transactional_id", None)
    if name is None:
        name = getattr(request, "v3_and_below_transactional_id", None)
    if name is None or allowed(ctx, authorizer, Op.WRITE, RT.TRANSACTIONAL_ID, name):
        return None
    return _denial(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, Op.WRITE, RT.TRANSACTIONAL_ID, name)


def _init_producer_id(ctx: Any, authorizer: Authorizer, request: Any) -> Denial | None:
    """A transactional producer needs WRITE on its transactional id; an idempotent one
    IDEMPOTENT_WRITE on the cluster or, as Kafka 3 allows, WRITE on some topic."""
    if request.transactional_id is not None:
        return _txn_write(ctx, authorizer, request)
    if cluster_allowed(ctx, authorizer, Op.IDEMPOTENT_WRITE, log=False):
        return None
    if authorizer.authorize_by_resource_type(auth_context(ctx), Op.WRITE, RT.TOPIC) is ALLOWED:
        return None
    cluster_allowed(ctx, authorizer, Op.IDEMPOTENT_WRITE)  # logs the denial
    return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "IDEMPOTENT_WRITE on CLUSTER (or WRITE on a topic) is required"


def _offset_for_leader_epoch(ctx: Any, authorizer: Authorizer, request: Any) -> Denial | None:
    if getattr(request, "replica_id", -1) >= 0:  # a follower
        return _cluster(Op.CLUSTER_ACTION)(ctx, authorizer, request)
    return None


def _topic_item(operation: AclOperation, attr: str = "name") -> ItemRule:
    """Each entry of ``topics`` (or a list of names) needs ``operation`` on its topic."""

    def denied(ctx: Any, authorizer: Authorizer, request: Any, item: Any) -> ErrorCode | None:
        name = item if isinstance(item, str) else getattr(item, attr)
        return None if allowed(ctx, authorizer, operation, RT.TOPIC, name) else ErrorCode.TOPIC_AUTHORIZATION_FAILED

    return ItemRule(lambda request: "topics" if getattr(request, "topics", None) is not None else None, denied)


def _create_topics_denied(ctx: Any, authorizer: Authorizer, request: Any, item: Any) -> ErrorCode | None:
    if cluster_allowed(ctx, authorizer, Op.CREATE, log=False) or allowed(
        ctx, authorizer, Op.CREATE, RT.TOPIC, item.name
    ):
        return None
    return ErrorCode.TOPIC_AUTHORIZATION_FAILED


def _delete_topics_field(request: Any) -> str:
    return "topic_names" if getattr(request, "topic_names", None) else "topics"


def _delete_topics_denied(ctx: Any, authorizer: Authorizer, request: Any, item: Any) -> ErrorCode | None:
    name = item if isinstance(item, str) else item.name
    if name is None:  # v6 by topic id: odradek answers those UNKNOWN_TOPIC_ID itself
        return None
    return None if allowed(ctx, authorizer, Op.DELETE, RT.TOPIC, name) else ErrorCode.TOPIC_AUTHORIZATION_FAILED


#: DescribeConfigs/AlterConfigs resource types: TOPIC 2, BROKER 4, BROKER_LOGGER 8
_CONFIG_TOPIC = 2


def _configs_item(operation: AclOperation) -> ItemRule:
    def denied(ctx: Any, authorizer: Authorizer, request: Any, item: Any) -> ErrorCode | None:
        if int(item.resource_type) == _CONFIG_TOPIC:
            ok = allowed(ctx, authorizer, operation, RT.TOPIC, item.resource_name)
            return None if ok else ErrorCode.TOPIC_AUTHORIZATION_FAILED
        return None if cluster_allowed(ctx, authorizer, operation) else ErrorCode.CLUSTER_AUTHORIZATION_FAILED

    return ItemRule(lambda request: "resources", denied)


def _groups_item(operation: AclOperation, field: str) -> ItemRule:
    def denied(ctx: Any, authorizer: Authorizer, request: Any, item: Any) -> ErrorCode | None:
        name = item if isinstance(item, str) else item.group_id
        return None if allowed(ctx, authorizer, operation, RT.GROUP, name) else ErrorCode.GROUP_AUTHORIZATION_FAILED

    return ItemRule(lambda request: field, denied)


def _find_coordinator_key(request: Any) -> tuple[ResourceType, AclOperation, ErrorCode]:
    if int(getattr(request, "key_type", 0)) == 1:
        return RT.TRANSACTIONAL_ID, Op.DESCRIBE, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    return RT.GROUP, Op.DESCRIBE, ErrorCode.GROUP_AUTHORIZATION_FAILED


def _find_coordinator(ctx: Any, authorizer: Authorizer, request: Any) -> Denial | None:
    key = getattr(request, "key", None)
    if key is None:  # v4+: per key
        return None
    resource_type, operation, code = _find_coordinator_key(request)
    return (
        None
        if allowed(ctx, authorizer, operation, resource_type, key)
        else _denial(code, operation, resource_type, key)
    )


def _find_coordinator_keys_denied(ctx: Any, authorizer: Authorizer, request: Any, item: Any) -> ErrorCode | None:
    resource_type, operation, code = _find_coordinator_key(request)
    return None if allowed(ctx, authorizer, operation, resource_type, item) else code


def _list_groups(ctx: Any, authorizer: Authorizer, request: Any, response: Any) -> Any:
    """Kafka: CLUSTER DESCRIBE lists every group, else those the principal may DESCRIBE."""
    if cluster_allowed(ctx, authorizer, Op.DESCRIBE, log=False):
        return response
    names = allowed_names(ctx, authorizer, Op.DESCRIBE, RT.GROUP, [g.group_id for g in response.groups])
    return replace(response, groups=tuple(g for g in response.groups if g.group_id in names))


def _offset_fetch_items(request: Any) -> str | None:
    """v8+ names several groups (each needs DESCRIBE); before, one group (checked whole) and
    its topics (each needs DESCRIBE; null: all, not filtered)."""
    if getattr(request, "groups", None) is not None:
        return "groups"
    return "topics" if request.topics is not None else None


def _list_transactions(ctx: Any, authorizer: Authorizer, request: Any, response: Any) -> Any:
    """Kafka lists only the transactional ids the principal may DESCRIBE."""
    states = response.transaction_states
    names = allowed_names(ctx, authorizer, Op.DESCRIBE, RT.TRANSACTIONAL_ID, [t.transactional_id for t in states])
    return replace(response, transaction_states=tuple(t for t in states if t.transactional_id in names))


def _offset_fetch_all_topics(ctx: Any, authorizer: Authorizer, request: Any, response: Any) -> Any:
    """Kafka's ``handleOffsetFetchRequest`` on the topics of a group's committed offsets: asked
    for all of them (null), the topics the principal may not DESCRIBE are left out; named (v8+,
    per group), each such topic's partitions are answered TOPIC_AUTHORIZATION_FAILED without an
    offset. Before v8 named topics are refused per item before the handler runs."""
    groups = getattr(request, "groups", None)
    if groups is None:
        if request.topics is not None:
            return response
        names = allowed_names(ctx, authorizer, Op.DESCRIBE, RT.TOPIC, [t.name for t in response.topics])
        return replace(response, topics=tuple(t for t in response.topics if t.name in names))
    asked_all = {g.group_id: g.topics is None for g in groups}
    answered = []
    for group in response.groups:
        names = allowed_names(ctx, authorizer, Op.DESCRIBE, RT.TOPIC, [t.name for t in group.topics])
        if asked_all.get(group.group_id, False):
            topics = tuple(t for t in group.topics if t.name in names)
        else:
            topics = tuple(t if t.name in names else _topic_refused(t) for t in group.topics)
        answered.append(replace(group, topics=topics))
    return replace(response, groups=tuple(answered))


def _create_topics_configs(ctx: Any, authorizer: Authorizer, request: Any, response: Any) -> Any:
    """Kafka's ``handleCreateTopicsRequest`` (v5+): a created topic's configs, partition count
    and replication factor are shown only with DESCRIBE_CONFIGS on it; otherwise its
    ``topic_config_error_code`` is TOPIC_AUTHORIZATION_FAILED."""
    if ctx.header.api_version < 5:
        return response
    created = [t.name for t in response.topics if t.error_code == ErrorCode.NONE]
    described = allowed_names(ctx, authorizer, Op.DESCRIBE_CONFIGS, RT.TOPIC, created)
    hidden = {
        "configs": (),
        "topic_config_error_code": i16(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
        "num_partitions": i32(-1),
        "replication_factor": i16(-1),
    }
    topics = tuple(
        replace(t, **hidden) if t.error_code == ErrorCode.NONE and t.name not in described else t
        for t in response.topics
    )
    return replace(response, topics=topics)


def _topic_refused(topic: Any) -> Any:
    """An OffsetFetch topic entry whose offsets the principal may not see."""
    code = i16(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    partitions = tuple(
        replace(p, committed_offset=i64(-1), committed_leader_epoch=i32(-1), metadata="", error_code=code)
        for p in topic.partitions
    )
    return replace(topic, partitions=partitions)


def _offset_fetch_denied(ctx: Any, authorizer: Authorizer, request: Any, item: Any) -> ErrorCode | None:
    if hasattr(item, "group_id"):  # a v8+ group
        ok = allowed(ctx, authorizer, Op.DESCRIBE, RT.GROUP, item.group_id)
        return None if ok else ErrorCode.GROUP_AUTHORIZATION_FAILED
    ok = allowed(ctx, authorizer, Op.DESCRIBE, RT.TOPIC, item.name)
    return None if ok else ErrorCode.TOPIC_AUTHORIZATION_FAILED


def _subscribed_topics(ctx: Any, authorizer: Authorizer, request: Any) -> Denial | None:
    """A KIP-848 member may subscribe only to topics it may DESCRIBE (Kafka's
    ``handleConsumerGroupHeartbeat``: it must not learn of the others through its assignment)."""
    names = list(getattr(request, "subscribed_topic_names", None) or ())
    if not names:
        return None
    described = allowed_names(ctx, authorizer, Op.DESCRIBE, RT.TOPIC, names)
    refused = sorted(n for n in names if n not in described)
    if not refused:
        return None
    return ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"Topic authorization failed (DESCRIBE on TOPIC {refused[0]!r})"


def _txn_id_describe_denied(ctx: Any, authorizer: Authorizer, request: Any, item: Any) -> ErrorCode | None:
    ok = allowed(ctx, authorizer, Op.DESCRIBE, RT.TRANSACTIONAL_ID, item)
    return None if ok else ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


REQUEST_RULES: dict[int, Rule] = {
    ApiKey.LIST_OFFSETS: Rule(items=_topic_item(Op.DESCRIBE)),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: Rule(_offset_for_leader_epoch, _topic_item(Op.DESCRIBE, "topic")),
    ApiKey.OFFSET_COMMIT: Rule(_group(Op.READ), _topic_item(Op.READ)),
    ApiKey.OFFSET_FETCH: Rule(
        _group(Op.DESCRIBE), ItemRule(_offset_fetch_items, _offset_fetch_denied), _offset_fetch_all_topics
    ),
    ApiKey.OFFSET_DELETE: Rule(_group(Op.DELETE), _topic_item(Op.READ)),
    ApiKey.FIND_COORDINATOR: Rule(
        _find_coordinator,
        ItemRule(
            lambda r: "coordinator_keys" if getattr(r, "coordinator_keys", None) else None,
            _find_coordinator_keys_denied,
        ),
    ),
    ApiKey.JOIN_GROUP: Rule(_group(Op.READ)),
    ApiKey.SYNC_GROUP: Rule(_group(Op.READ)),
    ApiKey.HEARTBEAT: Rule(_group(Op.READ)),
    ApiKey.LEAVE_GROUP: Rule(_group(Op.READ)),
    ApiKey.DESCRIBE_GROUPS: Rule(items=_groups_item(Op.DESCRIBE, "groups")),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: Rule(_all(_group(Op.READ), _subscribed_topics)),
    ApiKey.CONSUMER_GROUP_DESCRIBE: Rule(items=_groups_item(Op.DESCRIBE, "group_ids")),
    ApiKey.LIST_GROUPS: Rule(filter=_list_groups),
    ApiKey.DELETE_GROUPS: Rule(items=_groups_item(Op.DELETE, "groups_names")),
    ApiKey.CREATE_TOPICS: Rule(
        items=ItemRule(lambda r: "topics", _create_topics_denied), filter=_create_topics_configs
    ),
    ApiKey.DELETE_TOPICS: Rule(items=ItemRule(_delete_topics_field, _delete_topics_denied)),
    ApiKey.DELETE_RECORDS: Rule(items=_topic_item(Op.DELETE)),
    ApiKey.CREATE_PARTITIONS: Rule(items=_topic_item(Op.ALTER)),
    ApiKey.DESCRIBE_CONFIGS: Rule(items=_configs_item(Op.DESCRIBE_CONFIGS)),
    ApiKey.ALTER_CONFIGS: Rule(items=_configs_item(Op.ALTER_CONFIGS)),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: Rule(items=_configs_item(Op.ALTER_CONFIGS)),
    ApiKey.INIT_PRODUCER_ID: Rule(_init_producer_id),
    # Kafka: the refused topics TOPIC_AUTHORIZATION_FAILED, the others OPERATION_NOT_ATTEMPTED
    ApiKey.ADD_PARTITIONS_TO_TXN: Rule(
        _txn_write,
        ItemRule(
            lambda r: "v3_and_below_topics",
            _topic_item(Op.WRITE).denied,
            all_or_nothing=ErrorCode.OPERATION_NOT_ATTEMPTED,
        ),
    ),
    ApiKey.ADD_OFFSETS_TO_TXN: Rule(_all(_txn_write, _group(Op.READ))),
    ApiKey.END_TXN: Rule(_txn_write),
    ApiKey.TXN_OFFSET_COMMIT: Rule(_all(_txn_write, _group(Op.READ)), _topic_item(Op.READ)),
    ApiKey.WRITE_TXN_MARKERS: Rule(_cluster(Op.CLUSTER_ACTION)),
    ApiKey.DESCRIBE_PRODUCERS: Rule(items=_topic_item(Op.READ)),
    ApiKey.LIST_TRANSACTIONS: Rule(filter=_list_transactions),
    ApiKey.DESCRIBE_TRANSACTIONS: Rule(items=ItemRule(lambda r: "transactional_ids", _txn_id_describe_denied)),
    ApiKey.ELECT_LEADERS: Rule(_cluster(Op.ALTER)),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: Rule(_cluster(Op.ALTER)),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: Rule(_cluster(Op.DESCRIBE)),
    ApiKey.DESCRIBE_LOG_DIRS: Rule(_cluster(Op.DESCRIBE)),
    ApiKey.ALTER_REPLICA_LOG_DIRS: Rule(_cluster(Op.ALTER)),
    ApiKey.DESCRIBE_ACLS: Rule(_cluster(Op.DESCRIBE)),
    ApiKey.CREATE_ACLS: Rule(_cluster(Op.ALTER)),
    ApiKey.DELETE_ACLS: Rule(_cluster(Op.ALTER)),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: Rule(_cluster(Op.DESCRIBE_CONFIGS)),
    ApiKey.ALTER_CLIENT_QUOTAS: Rule(_cluster(Op.ALTER_CONFIGS)),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: Rule(_cluster(Op.DESCRIBE)),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: Rule(_cluster(Op.ALTER)),
}


# -- applying them -----------------------------------------------------------------------------


async def authorized_call(ctx: Any, authorizer: Authorizer, handle: Any, request: Any) -> Any:
    """Run ``handle(ctx, request)`` under the request's :class:`Rule` (see the module doc)."""
    key, version = ctx.header.api_key, ctx.header.api_version
    rule = REQUEST_RULES.get(key)
    if rule is None:
        return await handle(ctx, request)
    if rule.check is not None:
        denial = rule.check(ctx, authorizer, request)
        if denial is not None:
            return error_response(key, version, request, *denial)
    field = rule.items.field(request) if rule.items is not None else None
    if rule.items is None or field is None:
        response = await handle(ctx, request)
    else:
        kept: list[Any] = []
        refused: dict[ErrorCode, list[Any]] = {}
        for item in getattr(request, field):
            code = rule.items.denied(ctx, authorizer, request, item)
            if code is None:
                kept.append(item)
            else:
                refused.setdefault(code, []).append(item)
        if not refused:
            response = await handle(ctx, request)
        else:
            if rule.items.all_or_nothing is None:
                response = await handle(ctx, replace(request, **{field: tuple(kept)}))
            else:
                code = rule.items.all_or_nothing
                response = error_response(key, version, replace(request, **{field: tuple(kept)}), code, code.name)
            for code, items in refused.items():
                denied = replace(request, **{field: tuple(items)})
                response = _merged(response, error_response(key, version, denied, code, _MESSAGES[code]))
    if rule.filter is not None and response is not None:
        response = rule.filter(ctx, authorizer, request, response)
    return response


_MESSAGES = {
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed",
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "Group authorization failed",
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed",
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "Transactional Id authorization failed",
}


def _merged(response: Any, denied: Any) -> Any:
    """``response`` with the entries of ``denied``'s lists appended to its own (the entries
    answering the refused items); every other field stays the handler's."""
    changes = {}
    for f in fields(response):
        ours, theirs = getattr(response, f.name), getattr(denied, f.name)
        if isinstance(ours, tuple) and theirs and is_dataclass(theirs[0]):
            changes[f.name] = ours + theirs
    return replace(response, **changes)


__all__ = [
    "REQUEST_RULES",
    "ItemRule",
    "Rule",
    "allowed",
    "allowed_names",
    "auth_context",
    "authorized_call",
    "authorized_operations_bits",
    "authorizer_of",
    "cluster_allowed",
    "operations_field",
]
