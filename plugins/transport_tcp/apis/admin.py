"""Handlers for topic administration: CreateTopics, DeleteTopics, CreatePartitions,
DescribeConfigs, IncrementalAlterConfigs, DeleteRecords, ElectLeaders, AlterPartitionReassignments,
ListPartitionReassignments.

All of them are ``ordered``: they change (or must observe) cluster state in the order a client
sent them. Per-topic and per-resource failures come back from the core as error codes; a
resource type the core does not know is refused here with INVALID_REQUEST.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from odradek.broker.api import (
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    AlterConfigsResult,
    ConfigResource,
    ConfigResourceType,
    CreatableTopic,
    CreatePartitionsTopic,
    ElectionType,
)
from odradek.broker.configs import DUPLICATE_RESOURCE, repeated_resources
from odradek.broker.mutation_quota import UNBOUNDED, ControllerMutationQuota
from odradek.errors import ErrorCode, InvalidRequest, KafkaError
from odradek.interfaces import TopicPartition
from odradek.pacing import paced
from odradek.protocol import ApiKey, ms, timedelta_ms

from . import Handler, RequestContext
from ._kio import NO_THROTTLE, kerr, make, response_class

# -- controller mutation quota (KIP-599) ------------------------------------------------------

#: the first version of each mutating API whose clients know THROTTLING_QUOTA_EXCEEDED: from it on
#: the quota is strict (an over-quota topic is refused), before it permissive (accepted, throttled)
_STRICT_FROM = {ApiKey.CREATE_TOPICS: 6, ApiKey.DELETE_TOPICS: 5, ApiKey.CREATE_PARTITIONS: 3}


def _mutation_quota(ctx: RequestContext) -> ControllerMutationQuota:
    """The client's ``controller_mutation_rate`` for this request (unbounded without one)."""
    quotas = getattr(ctx.broker, "quotas", None)
    if quotas is None or not quotas.controller_mutation.enabled():
        return UNBOUNDED
    strict = ctx.api_version >= _STRICT_FROM[ApiKey(ctx.header.api_key)]
    quota: ControllerMutationQuota = quotas.controller_mutation.new_quota(
        ctx.principal.name, ctx.header.client_id or "", strict=strict
    )
    return quota


def _throttle(ctx: RequestContext, quota: ControllerMutationQuota) -> Any:
    """The response's throttle time for the request's mutations; a throttled client's
    connection is muted for it (KIP-219), as for the other quotas."""
    throttle_ms = quota.finish()
    if throttle_ms <= 0:
        return NO_THROTTLE
    if ctx.throttle is not None:
        ctx.throttle(throttle_ms)
    return timedelta_ms(throttle_ms)


# -- CreateTopics -----------------------------------------------------------------------------


def _assigned_twice(topic: Any) -> tuple[int, ...]:
    """The partitions a manual assignment of ``topic`` names more than once: the core takes the
    assignment as a mapping, which keeps only the last, and refuses the topic for them."""
    seen: set[int] = set()
    twice: list[int] = []
    for a in topic.assignments:
        if a.partition_index in seen and a.partition_index not in twice:
            twice.append(int(a.partition_index))
        seen.add(a.partition_index)
    return tuple(twice)


async def handle_create_topics(ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    topics = [
        CreatableTopic(
            name=t.name,
            num_partitions=t.num_partitions,
            replication_factor=t.replication_factor,
            assignments={a.partition_index: tuple(a.broker_ids) for a in t.assignments},
            configs={c.name: c.value for c in t.configs},
            assigned_twice=_assigned_twice(t),
        )
        for t in request.topics
    ]
    quota = _mutation_quota(ctx)
    results = (
        await ctx.broker.create_topics(topics, ms(request.timeout), bool(request.validate_only), quota=quota)
        if topics
        else {}
    )
    result_cls = response_class(ApiKey.CREATE_TOPICS, version, "CreatableTopicResult")
    config_cls = response_class(ApiKey.CREATE_TOPICS, version, "CreatableTopicConfigs") if version >= 5 else None
    rows = []
    for t in request.topics:
        r = results.get(t.name)
        if r is None:
            rows.append(make(result_cls, name=t.name, topic_id=None, error_code=kerr(-1), error_message=None))
            continue
        configs = None
        if config_cls is not None and r.error == ErrorCode.NONE:
            configs = tuple(
                make(
                    config_cls,
                    name=c.name,
                    value=c.value,
                    read_only=c.read_only,
                    config_source=int(c.source),
                    is_sensitive=c.is_sensitive,
                )
                for c in r.configs
            )
        rows.append(
            make(
                result_cls,
                name=t.name,
                topic_id=uuid.UUID(r.topic_id) if r.topic_id else None,  # None: the zero UUID, as Kafka
                error_code=kerr(r.error),
                error_message=r.error_message,
                num_partitions=r.num_partitions,
                replication_factor=r.replication_factor,
                configs=configs,
            )
        )
    return make(response_class(ApiKey.CREATE_TOPICS, version), throttle_time=_throttle(ctx, quota), topics=tuple(rows))


# -- DeleteTopics -----------------------------------------------------------------------------


async def handle_delete_topics(ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    names = list(request.topic_names)
    quota = _mutation_quota(ctx)
    results = await ctx.broker.delete_topics(names, ms(request.timeout), quota=quota)
    result_cls = response_class(ApiKey.DELETE_TOPICS, version, "DeletableTopicResult")
    rows = []
    for name in names:
        r = results.get(name)
        error = r.error if r is not None else -1
        if error == ErrorCode.TOPIC_DELETION_DISABLED and version < 3:
            # TOPIC_DELETION_DISABLED came with v3: older clients do not know the code, and Kafka
            # (KafkaApis.handleDeleteTopicsRequest) answers them INVALID_REQUEST
            error = ErrorCode.INVALID_REQUEST
        rows.append(
            make(
                result_cls,
                name=name,
                error_code=kerr(error),
                error_message=r.error_message if r is not None else None,
            )
        )
    return make(
        response_class(ApiKey.DELETE_TOPICS, version), throttle_time=_throttle(ctx, quota), responses=tuple(rows)
    )


# -- CreatePartitions -------------------------------------------------------------------------


async def handle_create_partitions(ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    topics = [
        CreatePartitionsTopic(
            name=t.name,
            count=t.count,
            assignments=None if t.assignments is None else [tuple(a.broker_ids) for a in t.assignments],
        )
        for t in request.topics
    ]
    quota = _mutation_quota(ctx)
    results = await ctx.broker.create_partitions(topics, ms(request.timeout), bool(request.validate_only), quota=quota)
    result_cls = response_class(ApiKey.CREATE_PARTITIONS, version, "CreatePartitionsTopicResult")
    rows = []
    for t in topics:
        r = results.get(t.name)
        rows.append(
            make(
                result_cls,
                name=t.name,
                error_code=kerr(r.error if r is not None else -1),
                error_message=r.error_message if r is not None else None,
            )
        )
    return make(
        response_class(ApiKey.CREATE_PARTITIONS, version), throttle_time=_throttle(ctx, quota), results=tuple(rows)
    )


# -- DescribeConfigs --------------------------------------------------------------------------


def _resource_type(value: int) -> ConfigResourceType | None:
    try:
        return ConfigResourceType(value)
    except ValueError:
        return None


async def handle_describe_configs(ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    result_cls = response_class(ApiKey.DESCRIBE_CONFIGS, version, "DescribeConfigsResult")
    entry_cls = response_class(ApiKey.DESCRIBE_CONFIGS, version, "DescribeConfigsResourceResult")
    synonym_cls = response_class(ApiKey.DESCRIBE_CONFIGS, version, "DescribeConfigsSynonym")
    known: list[ConfigResource] = []
    for res in request.resources:
        rtype = _resource_type(res.resource_type)
        if rtype is not None:
            keys = None if res.configuration_keys is None else list(res.configuration_keys)
            known.append(ConfigResource(rtype, res.resource_name, keys))
    described = await ctx.broker.describe_configs(
        known,
        include_synonyms=bool(getattr(request, "include_synonyms", False)),
        include_documentation=bool(getattr(request, "include_documentation", False)),
    )
    by_resource = {(int(r.resource_type), r.resource_name): r for r in described}
    rows = []
    for res in request.resources:
        r = by_resource.get((res.resource_type, res.resource_name))
        if r is None:
            code = (
                ErrorCode.INVALID_REQUEST
                if _resource_type(res.resource_type) is None
                else ErrorCode.UNKNOWN_SERVER_ERROR
            )
            rows.append(
                make(
                    result_cls,
                    error_code=kerr(code),
                    error_message=f"unsupported resource type {res.resource_type}",
                    resource_type=res.resource_type,
                    resource_name=res.resource_name,
                    configs=(),
                )
            )
            continue
        entries = tuple(
            make(
                entry_cls,
                name=c.name,
                value=c.value,
                read_only=c.read_only,
                is_default=c.is_default,
                config_source=int(c.source),
                is_sensitive=c.is_sensitive,
                synonyms=tuple(make(synonym_cls, name=n, value=v, source=int(s)) for n, v, s in c.synonyms),
                config_type=int(c.config_type),
                documentation=c.documentation,
            )
            for c in r.configs
        )
        rows.append(
            make(
                result_cls,
                error_code=kerr(r.error),
                error_message=r.error_message,
                resource_type=int(r.resource_type),
                resource_name=r.resource_name,
                configs=entries,
            )
        )
    return make(response_class(ApiKey.DESCRIBE_CONFIGS, version), throttle_time=NO_THROTTLE, results=tuple(rows))


# -- IncrementalAlterConfigs ------------------------------------------------------------------


async def handle_incremental_alter_configs(ctx: RequestContext, request: Any) -> Any:
    def ops(res: Any) -> list[AlterableConfig]:
        return [AlterableConfig(c.name, AlterConfigOp(c.config_operation), c.value) for c in res.configs]

    return await _alter(ctx, request, ApiKey.INCREMENTAL_ALTER_CONFIGS, ops, ctx.broker.incremental_alter_configs)


# -- AlterConfigs (legacy) --------------------------------------------------------------------


async def handle_alter_configs(ctx: RequestContext, request: Any) -> Any:
    """Kafka's legacy AlterConfigs, still what confluent-kafka's ``alter_configs`` sends: the
    listed configs become the resource's whole set of overrides (any other reverts to its
    default). A null value is refused, as Kafka refuses it."""

    def ops(res: Any) -> list[AlterableConfig]:
        return [AlterableConfig(c.name, AlterConfigOp.SET, c.value) for c in res.configs]

    return await _alter(ctx, request, ApiKey.ALTER_CONFIGS, ops, ctx.broker.alter_configs)


async def _alter(
    ctx: RequestContext,
    request: Any,
    api_key: ApiKey,
    ops: Callable[[Any], list[AlterableConfig]],
    alter: Callable[[list[AlterConfigsResource], bool], Awaitable[list[AlterConfigsResult]]],
) -> Any:
    """Both alter APIs: decode each resource's operations, apply, one row per resource. A resource
    named twice is refused here before anything else, every copy of it (Kafka's
    ConfigAdminManager.preprocess), so that a copy refused for its operations or type cannot
    leave the other to be applied alone."""
    version = ctx.api_version
    result_cls = response_class(api_key, version, "AlterConfigsResourceResponse")
    known: list[AlterConfigsResource] = []
    refused: dict[tuple[int, str], str] = {}
    repeated = repeated_resources((res.resource_type, res.resource_name) for res in request.resources)
    for res in request.resources:
        if (res.resource_type, res.resource_name) in repeated:
            refused[(res.resource_type, res.resource_name)] = DUPLICATE_RESOURCE
            continue
        rtype = _resource_type(res.resource_type)
        try:
            resource_ops = ops(res)
        except ValueError:
            refused[(res.resource_type, res.resource_name)] = "unknown config operation"
            continue
        if rtype is None:
            refused[(res.resource_type, res.resource_name)] = f"unsupported resource type {res.resource_type}"
            continue
        known.append(AlterConfigsResource(rtype, res.resource_name, resource_ops))
    results = await alter(known, bool(request.validate_only)) if known else []
    by_resource = {(int(r.resource_type), r.resource_name): r for r in results}
    rows = []
    for res in request.resources:
        key = (res.resource_type, res.resource_name)
        r = by_resource.get(key)
        if r is None:
            rows.append(
                make(
                    result_cls,
                    error_code=kerr(ErrorCode.INVALID_REQUEST),
                    error_message=refused.get(key, "not processed"),
                    resource_type=res.resource_type,
                    resource_name=res.resource_name,
                )
            )
        else:
            rows.append(
                make(
                    result_cls,
                    error_code=kerr(r.error),
                    error_message=r.error_message,
                    resource_type=int(r.resource_type),
                    resource_name=r.resource_name,
                )
            )
    return make(response_class(api_key, version), throttle_time=NO_THROTTLE, responses=tuple(rows))


# -- DeleteRecords ----------------------------------------------------------------------------


async def handle_delete_records(ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    offsets = {TopicPartition(t.name, p.partition_index): p.offset for t in request.topics for p in t.partitions}
    try:
        results = await ctx.broker.delete_records(offsets, ms(request.timeout))
        failure: ErrorCode | None = None
    except KafkaError as exc:
        results, failure = {}, exc.code
    topic_cls = response_class(ApiKey.DELETE_RECORDS, version, "DeleteRecordsTopicResult")
    partition_cls = response_class(ApiKey.DELETE_RECORDS, version, "DeleteRecordsPartitionResult")
    rows = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            r = results.get(TopicPartition(t.name, p.partition_index))
            error = r.error if r is not None else (failure or ErrorCode.UNKNOWN_SERVER_ERROR)
            parts.append(
                make(
                    partition_cls,
                    partition_index=p.partition_index,
                    low_watermark=r.low_watermark if r is not None else -1,
                    error_code=kerr(error),
                )
            )
        rows.append(make(topic_cls, name=t.name, partitions=tuple(parts)))
    return make(response_class(ApiKey.DELETE_RECORDS, version), throttle_time=NO_THROTTLE, topics=tuple(rows))


# -- ElectLeaders -----------------------------------------------------------------------------


async def handle_elect_leaders(ctx: RequestContext, request: Any) -> Any:
    """ElectLeaders v0-2 (v0 elects the preferred replica; v1 adds the election type and the
    top-level error, NONE unless the request as a whole failed). Each partition is answered
    once, grouped by topic in request order. An unknown election type is INVALID_REQUEST for
    the whole request, as Kafka's controller refuses it."""
    version = ctx.api_version
    raw_type = getattr(request, "election_type", ElectionType.PREFERRED)
    try:
        election_type = ElectionType(raw_type)
    except ValueError:
        raise InvalidRequest(f"unknown election type {raw_type}") from None
    partitions = (
        None
        if request.topic_partitions is None
        else [TopicPartition(t.topic, p) for t in request.topic_partitions for p in t.partitions]
    )
    results = await ctx.broker.elect_leaders(election_type, partitions, ms(request.timeout))
    by_topic: dict[str, list[Any]] = {}
    partition_cls = response_class(ApiKey.ELECT_LEADERS, version, "PartitionResult")
    async for tp, r in paced(results.items()):
        by_topic.setdefault(tp.topic, []).append(
            partition_cls(partition_id=tp.partition, error_code=kerr(r.error), error_message=r.error_message)
        )
    topic_cls = response_class(ApiKey.ELECT_LEADERS, version, "ReplicaElectionResult")
    rows = tuple(topic_cls(topic=topic, partition_result=tuple(parts)) for topic, parts in by_topic.items())
    return make(
        response_class(ApiKey.ELECT_LEADERS, version),
        throttle_time=NO_THROTTLE,
        error_code=kerr(ErrorCode.NONE),
        replica_election_results=rows,
    )


# -- AlterPartitionReassignments, ListPartitionReassignments (KIP-455) --------------------------


async def handle_alter_partition_reassignments(ctx: RequestContext, request: Any) -> Any:
    """AlterPartitionReassignments v0-1 (v1: KIP-860's allow_replication_factor_change, echoed
    back; False refuses a target of another size than the original replicas): each partition
    answered once, grouped by topic in request order (a partition named twice: the last entry
    counts, as the controller's map keeps it). A broker that is not the controller answers
    NOT_CONTROLLER as the request's error with no partitions, as Kafka's ZooKeeper-mode broker
    does."""
    version = ctx.api_version
    response_cls = response_class(ApiKey.ALTER_PARTITION_REASSIGNMENTS, version)
    wanted: dict[TopicPartition, tuple[int, ...] | None] = {}
    for t in request.topics:
        for p in t.partitions:
            wanted[TopicPartition(t.name, p.partition_index)] = None if p.replicas is None else tuple(p.replicas)
    allow_rf_change = bool(getattr(request, "allow_replication_factor_change", True))
    try:
        results = await ctx.broker.alter_partition_reassignments(
            wanted, allow_replication_factor_change=allow_rf_change
        )
    except KafkaError as exc:
        return make(response_cls, throttle_time=NO_THROTTLE, error_code=kerr(exc.code), error_message=str(exc),
                    responses=(), allow_replication_factor_change=allow_rf_change)  # fmt: skip
    partition_cls = response_class(ApiKey.ALTER_PARTITION_REASSIGNMENTS, version, "ReassignablePartitionResponse")
    by_topic: dict[str, list[Any]] = {}
    for tp, r in results.items():
        by_topic.setdefault(tp.topic, []).append(
            make(partition_cls, partition_index=tp.partition, error_code=kerr(r.error), error_message=r.error_message)
        )
    topic_cls = response_class(ApiKey.ALTER_PARTITION_REASSIGNMENTS, version, "ReassignableTopicResponse")
    rows = tuple(make(topic_cls, name=name, partitions=tuple(parts)) for name, parts in by_topic.items())
    return make(response_cls, throttle_time=NO_THROTTLE, error_code=kerr(ErrorCode.NONE), error_message=None,
                responses=rows, allow_replication_factor_change=allow_rf_change)  # fmt: skip


async def handle_list_partition_reassignments(ctx: RequestContext, request: Any) -> Any:
    """ListPartitionReassignments v0: the reassignments in progress (all of them when the
    request names no topics), by topic; partitions not being reassigned are left out.
    NOT_CONTROLLER as the request's error on a broker that is not the controller."""
    version = ctx.api_version
    response_cls = response_class(ApiKey.LIST_PARTITION_REASSIGNMENTS, version)
    asked: dict[str, list[int]] | None = None
    if request.topics is not None:
        asked = {}
        for t in request.topics:
            asked.setdefault(t.name, []).extend(int(p) for p in t.partition_indexes)
    try:
        ongoing = await ctx.broker.list_partition_reassignments(asked)
    except KafkaError as exc:
        return make(response_cls, throttle_time=NO_THROTTLE, error_code=kerr(exc.code), error_message=str(exc),
                    topics=())  # fmt: skip
    partition_cls = response_class(ApiKey.LIST_PARTITION_REASSIGNMENTS, version, "OngoingPartitionReassignment")
    by_topic: dict[str, list[Any]] = {}
    for tp, o in ongoing.items():
        by_topic.setdefault(tp.topic, []).append(
            make(
                partition_cls,
                partition_index=tp.partition,
                replicas=o.replicas,
                adding_replicas=o.adding_replicas,
                removing_replicas=o.removing_replicas,
            )
        )
    topic_cls = response_class(ApiKey.LIST_PARTITION_REASSIGNMENTS, version, "OngoingTopicReassignment")
    rows = tuple(make(topic_cls, name=name, partitions=tuple(parts)) for name, parts in by_topic.items())
    return make(response_cls, throttle_time=NO_THROTTLE, error_code=kerr(ErrorCode.NONE), error_message=None,
                topics=rows)  # fmt: skip


HANDLERS: dict[int, Handler] = {
    ApiKey.CREATE_TOPICS: Handler(ApiKey.CREATE_TOPICS, handle_create_topics),
    ApiKey.DELETE_TOPICS: Handler(ApiKey.DELETE_TOPICS, handle_delete_topics),
    ApiKey.CREATE_PARTITIONS: Handler(ApiKey.CREATE_PARTITIONS, handle_create_partitions),
    ApiKey.DESCRIBE_CONFIGS: Handler(ApiKey.DESCRIBE_CONFIGS, handle_describe_configs),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: Handler(ApiKey.INCREMENTAL_ALTER_CONFIGS, handle_incremental_alter_configs),
    ApiKey.ALTER_CONFIGS: Handler(ApiKey.ALTER_CONFIGS, handle_alter_configs),
    ApiKey.DELETE_RECORDS: Handler(ApiKey.DELETE_RECORDS, handle_delete_records),
    ApiKey.ELECT_LEADERS: Handler(ApiKey.ELECT_LEADERS, handle_elect_leaders),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: Handler(
        ApiKey.ALTER_PARTITION_REASSIGNMENTS, handle_alter_partition_reassignments
    ),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: Handler(
        ApiKey.LIST_PARTITION_REASSIGNMENTS, handle_list_partition_reassignments
    ),
}

__all__ = ["HANDLERS"]
