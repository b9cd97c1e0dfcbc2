"""Handlers for cluster inspection: DescribeCluster (KIP-700) and DescribeLogDirs (KIP-113), and
AlterReplicaLogDirs (KIP-113), which moves replicas between one broker's log dirs.

Both only read state. DescribeCluster is what admin clients ask instead of Metadata for the
brokers and the controller; DescribeLogDirs is what ``kafka-log-dirs.sh`` and the admin clients'
``describe_log_dirs`` ask of each broker for its log dirs, partition sizes and free space.
"""

from __future__ import annotations

from itertools import groupby
from typing import Any

from odradek.broker.api import LogDirResult
from odradek.errors import ErrorCode
from odradek.interfaces import TopicPartition
from odradek.protocol import ApiKey
from odradek.protocol.authorized_operations import (
    AUTHORIZED_OPERATIONS_OMITTED,
    CLUSTER_OPERATIONS,
)
from odradek.security.acl import CLUSTER_NAME, ResourceType

from . import Handler, RequestContext
from ._kio import NO_THROTTLE, kerr, make, response_class
from .authz import operations_field

#: DescribeCluster v1+ endpoint types (Kafka's ``EndpointType``): a broker answers only BROKER
ENDPOINT_BROKER = 1
ENDPOINT_CONTROLLER = 2
_ENDPOINT_NAMES = {ENDPOINT_BROKER: "BROKER", ENDPOINT_CONTROLLER: "CONTROLLER"}


# -- DescribeCluster --------------------------------------------------------------------------


def _endpoint_error(version: int, endpoint_type: int) -> tuple[ErrorCode, str] | None:
    """Kafka's ``computeDescribeClusterResponse`` check: an endpoint type other than BROKER sent
    to a broker is MISMATCHED_ENDPOINT_TYPE (CONTROLLER) or UNSUPPORTED_ENDPOINT_TYPE (any other
    value); v0 cannot carry either, so it would be INVALID_REQUEST."""
    if endpoint_type == ENDPOINT_BROKER:
        return None
    if endpoint_type not in _ENDPOINT_NAMES:
        code = ErrorCode.UNSUPPORTED_ENDPOINT_TYPE if version >= 1 else ErrorCode.INVALID_REQUEST
        return code, f"Unsupported endpoint type {endpoint_type}"
    code = ErrorCode.MISMATCHED_ENDPOINT_TYPE if version >= 1 else ErrorCode.INVALID_REQUEST
    return code, (
        "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type "
        f"{_ENDPOINT_NAMES[endpoint_type]}"
    )


async def handle_describe_cluster(ctx: RequestContext, request: Any) -> Any:
    """Cluster id, the live brokers on this listener and the controller (-1 when it is not one
    of them). ``cluster_authorized_operations`` is, when asked for, the cluster operations
    the authorizer allows the principal (every one without an authorizer), else INT32_MIN.
    v2's ``include_fenced_brokers`` changes nothing: a ZooKeeper-mode cluster has no fenced
    brokers, so every broker is ``is_fenced`` false."""
    version = ctx.api_version
    cls = response_class(ApiKey.DESCRIBE_CLUSTER, version)
    failed = _endpoint_error(version, int(getattr(request, "endpoint_type", ENDPOINT_BROKER)))
    if failed is not None:
        return make(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=kerr(failed[0]),
            error_message=failed[1],
            endpoint_type=ENDPOINT_BROKER,
            cluster_id="",
            controller_id=-1,
            brokers=(),
            cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
        )
    md = await ctx.broker.describe_cluster(listener_name=ctx.listener.name)
    broker_cls = response_class(ApiKey.DESCRIBE_CLUSTER, version, "DescribeClusterBroker")
    brokers = tuple(
        make(broker_cls, broker_id=b.node_id, host=b.host, port=b.port, rack=b.rack, is_fenced=False)
        for b in md.brokers
    )
    ops = operations_field(
        ctx, bool(request.include_cluster_authorized_operations), ResourceType.CLUSTER, CLUSTER_NAME, CLUSTER_OPERATIONS
    )
    return make(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=kerr(ErrorCode.NONE),
        error_message=None,
        endpoint_type=ENDPOINT_BROKER,
        cluster_id=md.cluster_id,
        controller_id=md.controller_id,
        brokers=brokers,
        cluster_authorized_operations=ops,
    )


# -- DescribeLogDirs --------------------------------------------------------------------------


async def handle_describe_log_dirs(ctx: RequestContext, request: Any) -> Any:
    """Each log dir with the asked-for partitions it holds (null topics: all of them). A topic
    or partition this broker has no log of is left out, as Kafka does; an offline dir is
    KAFKA_STORAGE_ERROR with no topics. v4 adds the volume's total and usable bytes."""
    version = ctx.api_version
    wanted = None
    if request.topics is not None:
        wanted = {TopicPartition(t.topic, p) for t in request.topics for p in t.partitions}
    results: list[LogDirResult] = await ctx.broker.describe_log_dirs(wanted)
    result_cls = response_class(ApiKey.DESCRIBE_LOG_DIRS, version, "DescribeLogDirsResult")
    topic_cls = response_class(ApiKey.DESCRIBE_LOG_DIRS, version, "DescribeLogDirsTopic")
    partition_cls = response_class(ApiKey.DESCRIBE_LOG_DIRS, version, "DescribeLogDirsPartition")
    out = []
    for r in results:
        topics = tuple(
            make(
                topic_cls,
                name=topic,
                partitions=tuple(
                    make(
                        partition_cls,
                        partition_index=p.tp.partition,
                        partition_size=p.size,
                        offset_lag=p.offset_lag,
                        is_future_key=p.is_future,
                    )
                    for p in parts
                ),
            )
            for topic, parts in groupby(sorted(r.partitions, key=lambda p: p.tp), key=lambda p: p.tp.topic)
        )
        out.append(
            make(
                result_cls,
                error_code=kerr(r.error),
                log_dir=r.path,
                topics=topics,
                total_bytes=r.total_bytes,
                usable_bytes=r.usable_bytes,
            )
        )
    return make(
        response_class(ApiKey.DESCRIBE_LOG_DIRS, version),
        throttle_time=NO_THROTTLE,
        error_code=kerr(ErrorCode.NONE),
        results=tuple(out),
    )


# -- AlterReplicaLogDirs ----------------------------------------------------------------------


async def handle_alter_replica_log_dirs(ctx: RequestContext, request: Any) -> Any:
    """Move replicas between this broker's log dirs (KIP-113): one error code per partition, in
    request order per topic. A partition named under two dirs gets the later dir, as Kafka's
    map of the request does."""
    version = ctx.api_version
    wanted: dict[TopicPartition, str] = {}
    for d in request.dirs:
        for t in d.topics:
            for p in t.partitions:
                wanted[TopicPartition(t.name, int(p))] = d.path
    errors = await ctx.broker.alter_replica_log_dirs(wanted) if wanted else {}
    topic_cls = response_class(ApiKey.ALTER_REPLICA_LOG_DIRS, version, "AlterReplicaLogDirTopicResult")
    partition_cls = response_class(ApiKey.ALTER_REPLICA_LOG_DIRS, version, "AlterReplicaLogDirPartitionResult")
    results = tuple(
        make(
            topic_cls,
            topic_name=topic,
            partitions=tuple(
                make(partition_cls, partition_index=tp.partition, error_code=kerr(errors.get(tp, ErrorCode.NONE)))
                for tp in tps
            ),
        )
        for topic, tps in groupby(sorted(wanted), key=lambda tp: tp.topic)
    )
    return make(response_class(ApiKey.ALTER_REPLICA_LOG_DIRS, version), throttle_time=NO_THROTTLE, results=results)


HANDLERS: dict[int, Handler] = {
    ApiKey.DESCRIBE_CLUSTER: Handler(ApiKey.DESCRIBE_CLUSTER, handle_describe_cluster, ordered=False),
    ApiKey.DESCRIBE_LOG_DIRS: Handler(ApiKey.DESCRIBE_LOG_DIRS, handle_describe_log_dirs, ordered=False),
    ApiKey.ALTER_REPLICA_LOG_DIRS: Handler(ApiKey.ALTER_REPLICA_LOG_DIRS, handle_alter_replica_log_dirs),
}

__all__ = ["HANDLERS"]
