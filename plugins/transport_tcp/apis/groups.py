"""Handlers for consumer groups: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, DescribeGroups, ListGroups, DeleteGroups, OffsetDelete, and KIP-848's
ConsumerGroupHeartbeat and ConsumerGroupDescribe.

They translate wire requests into calls on the broker's
:class:`odradek.broker.group.GroupCoordinator` (``broker.group_coordinator``) and its results back,
applying the few per-version rules Kafka's ``KafkaApis`` applies: JoinGroup v0 has no rebalance
timeout (the session timeout serves), v4+ gets the MEMBER_ID_REQUIRED round trip, LeaveGroup
v0-v2 leaves one member, OffsetCommit v2-v4 carries a retention time, OffsetFetch v1 has no
top-level error and v2+ reads "all partitions" from a null topic list, OffsetFetch v7+ answers
``require_stable`` and v8 and FindCoordinator v4 take batches (of groups, of keys).
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import trio
from kio.static.primitive import i8, i32

from odradek.broker.group import (
    FIND_COORDINATOR_LOAD_WAIT_S,
    FindCoordinatorResult,
    GroupCoordinator,
    GroupDescription,
    OffsetAndMetadata,
    PartitionOffset,
)
from odradek.broker.group.consumer_coordinator import HeartbeatRequest, HeartbeatResult
from odradek.errors import ErrorCode
from odradek.interfaces import TopicPartition
from odradek.protocol import ApiKey, ms
from odradek.protocol.authorized_operations import (
    GROUP_OPERATIONS,
)
from odradek.security.acl import ResourceType

from . import Handler, RequestContext
from ._kio import NO_THROTTLE, kerr, make, response_class
from .authz import operations_field
from .core import topic_names_by_id
from .group_reasons import log_client_reason

COORDINATOR_KEY_GROUP = 0
COORDINATOR_KEY_TRANSACTION = 1


def _coordinator(ctx: RequestContext) -> GroupCoordinator | None:
    return getattr(ctx.broker, "group_coordinator", None)


def _client_host(peer: str) -> str:
    """Kafka's ``clientAddress.toString``: ``/127.0.0.1`` (no port)."""
    host = peer.rsplit(":", 1)[0] if peer.count(":") == 1 or peer.startswith("[") else peer
    host = host.strip("[]")
    return host if host.startswith("/") else f"/{host}"


# -- FindCoordinator ------------------------------------------------------------------------------


#: FindCoordinator v4 keys answered between two yields to the event loop
_KEYS_PER_CHECKPOINT = 1024


def _placement(ctx: RequestContext, key_type: int, key: str) -> int | None:
    """The internal-topic partition that coordinates ``key`` (None: no such coordinator here)."""
    if key_type == COORDINATOR_KEY_GROUP:
        coordinator = _coordinator(ctx)
    elif key_type == COORDINATOR_KEY_TRANSACTION:
        coordinator = getattr(ctx.broker, "transaction_coordinator", None)
    else:
        return None
    return int(coordinator.partition_for(key)) if coordinator is not None else None


async def _find_one(
    ctx: RequestContext, key_type: int, key: str, load_wait_until: float | None = None
) -> FindCoordinatorResult:
    """The coordinator of one key: the group coordinator's answer (key type 0) or the
    transaction coordinator's (1)."""
    if key_type == COORDINATOR_KEY_GROUP:
        coordinator = _coordinator(ctx)
        result = (
            await coordinator.find_coordinator(key, ctx.listener.name, load_wait_until=load_wait_until)
            if coordinator
            else None
        )
    elif key_type == COORDINATOR_KEY_TRANSACTION:
        txn = getattr(ctx.broker, "transaction_coordinator", None)
        result = await txn.find_coordinator(key, ctx.listener.name, load_wait_until=load_wait_until) if txn else None
    else:
        return FindCoordinatorResult(
            ErrorCode.INVALID_REQUEST, error_message=f"unknown coordinator key type {key_type}"
        )
    if result is None:
        return FindCoordinatorResult(
            ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message="no coordinator runs on this broker"
        )
    return result


async def handle_find_coordinator(ctx: RequestContext, request: Any) -> Any:
    """The group's coordinator (or, with key type 1, the transaction coordinator when the broker
    runs one). v4 (KIP-699) looks up a batch of keys of one type, each answered as if alone."""
    key_type = int(getattr(request, "key_type", COORDINATOR_KEY_GROUP))
    cls = response_class(ApiKey.FIND_COORDINATOR, ctx.api_version)
    if ctx.api_version >= 4:
        entry_cls = response_class(ApiKey.FIND_COORDINATOR, ctx.api_version, "Coordinator")
        entries = []
        # a key's answer depends only on its coordinator partition: one lookup per partition
        # (each reads the internal topic's leaders), so a request of many keys costs the event
        # loop no more than a few dozen lookups, and it yields now and then for other clients
        found: dict[int, FindCoordinatorResult] = {}
        # partitions still loading are waited for together, not one after another
        load_wait_until = trio.current_time() + FIND_COORDINATOR_LOAD_WAIT_S
        for i, key in enumerate(request.coordinator_keys):
            place = _placement(ctx, key_type, key)
            result = found.get(place) if place is not None else None
            if result is None:
                result = await _find_one(ctx, key_type, key, load_wait_until)
                if place is not None:
                    found[place] = result
            entries.append(make(entry_cls, key=key, **_coordinator_fields(result)))
            if i % _KEYS_PER_CHECKPOINT == _KEYS_PER_CHECKPOINT - 1:
                await trio.lowlevel.checkpoint()
        return make(cls, throttle_time=NO_THROTTLE, coordinators=tuple(entries))
    result = await _find_one(ctx, key_type, request.key)
    return make(cls, throttle_time=NO_THROTTLE, **_coordinator_fields(result))


def _coordinator_fields(result: FindCoordinatorResult) -> dict[str, Any]:
    """A lookup's response fields (a failed one names no node: -1, "", -1)."""
    return dict(error_code=kerr(result.error), error_message=result.error_message, node_id=result.node_id,
                host=result.host, port=result.port)  # fmt: skip


# -- JoinGroup / SyncGroup / Heartbeat / LeaveGroup --------------------------------------------


async def handle_join_group(ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    cls = response_class(ApiKey.JOIN_GROUP, version)
    member_cls = response_class(ApiKey.JOIN_GROUP, version, "JoinGroupResponseMember")
    coordinator = _coordinator(ctx)
    if coordinator is None:
        return make(cls, throttle_time=NO_THROTTLE, error_code=kerr(ErrorCode.COORDINATOR_NOT_AVAILABLE),
                    generation_id=-1, protocol_name="", leader="", member_id=request.member_id, members=())  # fmt: skip
    session_ms = ms(request.session_timeout)
    rebalance_ms = ms(request.rebalance_timeout) if hasattr(request, "rebalance_timeout") else session_ms
    log_client_reason("joins", request.group_id, request.member_id, getattr(request, "reason", None))  # v8+
    result = await coordinator.join_group(
        request.group_id,
        request.member_id,
        getattr(request, "group_instance_id", None),
        version >= 4,
        ctx.header.client_id or "",
        _client_host(ctx.peer),
        rebalance_ms,
        session_ms,
        request.protocol_type,
        [(p.name, bytes(p.metadata)) for p in request.protocols],
        supports_skip_assignment=version >= 9,  # KIP-814
    )
    members = tuple(
        make(member_cls, member_id=m.member_id, group_instance_id=m.group_instance_id, metadata=m.metadata)
        for m in result.members
    )
    return make(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=kerr(result.error),
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name if version >= 7 else result.protocol_name or "",  # v7+ nullable
        leader=result.leader_id,
        skip_assignment=result.skip_assignment,  # v9+
        member_id=result.member_id,
        members=members,
    )


async def handle_sync_group(ctx: RequestContext, request: Any) -> Any:
    cls = response_class(ApiKey.SYNC_GROUP, ctx.api_version)
    coordinator = _coordinator(ctx)
    if coordinator is None:
        return make(
            cls, throttle_time=NO_THROTTLE, error_code=kerr(ErrorCode.COORDINATOR_NOT_AVAILABLE), assignment=b""
        )
    result = await coordinator.sync_group(
        request.group_id,
        request.generation_id,
        request.member_id,
        getattr(request, "group_instance_id", None),
        getattr(request, "protocol_type", None),
        getattr(request, "protocol_name", None),
        {a.member_id: bytes(a.assignment) for a in request.assignments},
    )
    return make(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=kerr(result.error),
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )


async def handle_heartbeat(ctx: RequestContext, request: Any) -> Any:
    cls = response_class(ApiKey.HEARTBEAT, ctx.api_version)
    coordinator = _coordinator(ctx)
    error = (
        await coordinator.member_heartbeat(
            request.group_id, request.member_id, getattr(request, "group_instance_id", None), request.generation_id
        )
        if coordinator is not None
        else ErrorCode.COORDINATOR_NOT_AVAILABLE
    )
    return make(cls, throttle_time=NO_THROTTLE, error_code=kerr(error))


async def handle_leave_group(ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    cls = response_class(ApiKey.LEAVE_GROUP, version)
    if version >= 3:
        leaving = [(m.member_id, m.group_instance_id) for m in request.members]
        for m in request.members:
            log_client_reason("leaves", request.group_id, m.member_id, getattr(m, "reason", None))  # v5+
    else:
        leaving = [(request.member_id, None)]
    coordinator = _coordinator(ctx)
    if coordinator is None:
        error, per_member = ErrorCode.COORDINATOR_NOT_AVAILABLE, [ErrorCode.COORDINATOR_NOT_AVAILABLE] * len(leaving)
    else:
        error, per_member = await coordinator.member_leave(request.group_id, leaving)
    if version < 3:
        # one member: its error is the request's error
        top = error if error != ErrorCode.NONE else per_member[0]
        return make(cls, throttle_time=NO_THROTTLE, error_code=kerr(top))
    if error != ErrorCode.NONE:  # Kafka's LeaveGroupResponse(List.empty, error): no members
        return make(cls, throttle_time=NO_THROTTLE, error_code=kerr(error), members=())
    member_cls = response_class(ApiKey.LEAVE_GROUP, version, "MemberResponse")
    members = tuple(
        make(member_cls, member_id=member_id, group_instance_id=instance, error_code=kerr(member_error))
        for (member_id, instance), member_error in zip(leaving, per_member, strict=True)
    )
    return make(cls, throttle_time=NO_THROTTLE, error_code=kerr(error), members=members)


# -- OffsetCommit / OffsetFetch ---------------------------------------------------------------------


def _partition_errors(
    topics: Sequence[Any], errors: dict[TopicPartition, ErrorCode], topic_cls: type, partition_cls: type
) -> tuple[Any, ...]:
    """The response's topics in the request's order, each partition with its error."""
    return tuple(
        make(
            topic_cls,
            name=topic.name,
            partitions=tuple(
                make(
                    partition_cls,
                    partition_index=p.partition_index,
                    error_code=kerr(errors[TopicPartition(topic.name, p.partition_index)]),
                )
                for p in topic.partitions
            ),
        )
        for topic in topics
    )


async def existing_partition_counts(ctx: RequestContext, topics: Sequence[str]) -> dict[str, int]:
    """Partition counts of the existing topics among ``topics`` (commits to others are refused)."""
    if not topics:
        return {}
    md = await ctx.broker.metadata(list(topics), False, listener_name=ctx.listener.name)
    return {t.name: len(t.partitions) for t in md.topics if t.error == ErrorCode.NONE}


async def handle_offset_commit(ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    cls = response_class(ApiKey.OFFSET_COMMIT, version)
    topic_cls = response_class(ApiKey.OFFSET_COMMIT, version, "OffsetCommitResponseTopic")
    partition_cls = response_class(ApiKey.OFFSET_COMMIT, version, "OffsetCommitResponsePartition")
    coordinator = _coordinator(ctx)
    counts = await existing_partition_counts(ctx, [t.name for t in request.topics])
    retention = getattr(request, "retention_time", None)
    retention_ms = ms(retention) if retention is not None else -1
    now = coordinator.now_ms() if coordinator is not None else 0
    expire = now + retention_ms if retention_ms >= 0 else None
    errors: dict[TopicPartition, ErrorCode] = {}
    offsets: dict[TopicPartition, OffsetAndMetadata] = {}
    for topic in request.topics:
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition_index)
            if p.partition_index >= counts.get(topic.name, 0) or p.partition_index < 0:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            epoch = getattr(p, "committed_leader_epoch", -1)
            offsets[tp] = OffsetAndMetadata(p.committed_offset, epoch, p.committed_metadata or "", now, expire)
    if offsets:
        if coordinator is None:
            errors.update(dict.fromkeys(offsets, ErrorCode.COORDINATOR_NOT_AVAILABLE))
        else:
            errors.update(
                await coordinator.commit_offsets(
                    request.group_id,
                    request.member_id,
                    getattr(request, "group_instance_id", None),
                    request.generation_id_or_member_epoch,
                    offsets,
                    api_version=version,
                )
            )
    topics = _partition_errors(request.topics, errors, topic_cls, partition_cls)
    return make(cls, throttle_time=NO_THROTTLE, topics=topics)


def _requested(topics: Sequence[Any] | None) -> list[TopicPartition] | None:
    """The partitions an OffsetFetch (group) names; None (v2+: a null topic list) means all."""
    if topics is None:
        return None
    return [TopicPartition(t.name, int(p)) for t in topics for p in t.partition_indexes]


def _fetch_group(
    ctx: RequestContext,
    group_id: str,
    requested: list[TopicPartition] | None,
    require_stable: bool,
    member_id: str | None = None,
    member_epoch: int = -1,
) -> tuple[ErrorCode, dict[TopicPartition, PartitionOffset]]:
    """One group's committed offsets, routed as if the group were asked alone (NOT_COORDINATOR,
    COORDINATOR_LOAD_IN_PROGRESS, ... as the group's error); v9 names the KIP-848 member."""
    coordinator = _coordinator(ctx)
    if coordinator is None:
        error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        return error, {tp: PartitionOffset(error=error) for tp in requested or ()}
    return coordinator.fetch_offsets(
        group_id, requested, require_stable, member_id=member_id, member_epoch=member_epoch
    )


def _offset_topics(
    offsets: dict[TopicPartition, PartitionOffset], topic_cls: type, partition_cls: type
) -> tuple[Any, ...]:
    """Response topics for ``offsets``, topics and partitions in the order asked."""
    by_topic: dict[str, list[Any]] = {}
    for tp, value in offsets.items():
        by_topic.setdefault(tp.topic, []).append(
            make(
                partition_cls,
                partition_index=tp.partition,
                committed_offset=value.offset,
                committed_leader_epoch=value.leader_epoch,
                metadata=value.metadata,
                error_code=kerr(value.error),
            )
        )
    return tuple(make(topic_cls, name=name, partitions=tuple(parts)) for name, parts in by_topic.items())


async def handle_offset_fetch(ctx: RequestContext, request: Any) -> Any:
    """OffsetFetch v1-8. v7+ ``require_stable`` (KIP-447): partitions with pending transactional
    offsets answer UNSTABLE_OFFSET_COMMIT, per partition as in Kafka. v8 (KIP-709) asks for a
    batch of groups, each answered as if alone, its error in the group's entry."""
    version = ctx.api_version
    cls = response_class(ApiKey.OFFSET_FETCH, version)
    require_stable = bool(getattr(request, "require_stable", False))
    if version >= 8:
        group_cls = response_class(ApiKey.OFFSET_FETCH, version, "OffsetFetchResponseGroup")
        topic_cls = response_class(ApiKey.OFFSET_FETCH, version, "OffsetFetchResponseTopics")
        partition_cls = response_class(ApiKey.OFFSET_FETCH, version, "OffsetFetchResponsePartitions")
        groups = []
        for group in request.groups:
            error, offsets = _fetch_group(
                ctx,
                group.group_id,
                _requested(group.topics),
                require_stable,
                getattr(group, "member_id", None),
                int(getattr(group, "member_epoch", -1)),
            )
            topics = _offset_topics(offsets, topic_cls, partition_cls) if error == ErrorCode.NONE else ()
            groups.append(make(group_cls, group_id=group.group_id, topics=topics, error_code=kerr(error)))
        return make(cls, throttle_time=NO_THROTTLE, groups=tuple(groups))
    topic_cls = response_class(ApiKey.OFFSET_FETCH, version, "OffsetFetchResponseTopic")
    partition_cls = response_class(ApiKey.OFFSET_FETCH, version, "OffsetFetchResponsePartition")
    error, offsets = _fetch_group(ctx, request.group_id, _requested(request.topics), require_stable)
    if version >= 2 and error != ErrorCode.NONE:
        offsets = {}  # v2+: a group-level error is the top-level error, with no partitions
    topics = _offset_topics(offsets, topic_cls, partition_cls)
    return make(cls, throttle_time=NO_THROTTLE, topics=topics, error_code=kerr(error))


# -- DescribeGroups / ListGroups / DeleteGroups -------------------------------------------------------


async def handle_describe_groups(ctx: RequestContext, request: Any) -> Any:
    """Classic groups with their members; as Kafka 4.x, a KIP-848 consumer group (also one
    with classic members) or an unknown group is GROUP_ID_NOT_FOUND with a message at v6
    (KIP-1043) and "Dead" without error before, which is what older clients expect."""
    version = ctx.api_version
    cls = response_class(ApiKey.DESCRIBE_GROUPS, version)
    group_cls = response_class(ApiKey.DESCRIBE_GROUPS, version, "DescribedGroup")
    member_cls = response_class(ApiKey.DESCRIBE_GROUPS, version, "DescribedGroupMember")
    coordinator = _coordinator(ctx)
    include_ops = bool(getattr(request, "include_authorized_operations", False))
    groups = []
    for group_id in request.groups:
        described = (
            coordinator.describe_group(group_id)
            if coordinator is not None
            else GroupDescription(group_id, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        )
        if described.error == ErrorCode.GROUP_ID_NOT_FOUND and version < 6:
            described = GroupDescription(group_id, ErrorCode.NONE)
        members = tuple(
            make(
                member_cls,
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                member_metadata=m.metadata,
                member_assignment=m.assignment,
            )
            for m in described.members
        )
        described_ok = described.error == ErrorCode.NONE
        groups.append(
            make(
                group_cls,
                error_code=kerr(described.error),
                error_message=described.error_message,
                group_id=group_id,
                # Kafka names the state of a group it did not find "Dead"; other errors have none
                group_state=described.state if described_ok or described.error == ErrorCode.GROUP_ID_NOT_FOUND else "",
                protocol_type=described.protocol_type,
                protocol_data=described.protocol,
                members=members,
                # Kafka fills them in only for a group described without error
                authorized_operations=operations_field(
                    ctx, include_ops and described_ok, ResourceType.GROUP, group_id, GROUP_OPERATIONS
                ),
            )
        )
    return make(cls, throttle_time=NO_THROTTLE, groups=tuple(groups))


async def handle_list_groups(ctx: RequestContext, request: Any) -> Any:
    """The coordinator's groups, filtered by state (v4) and type (v5); from v5 each names its
    type, ``classic``, which admin clients show and filter on (confluent-kafka's
    ``list_consumer_groups(types=...)``: v4 has no filter, so a ``consumer`` filter listed them)."""
    version = ctx.api_version
    cls = response_class(ApiKey.LIST_GROUPS, version)
    listed_cls = response_class(ApiKey.LIST_GROUPS, version, "ListedGroup")
    coordinator = _coordinator(ctx)
    if coordinator is None:
        return make(cls, throttle_time=NO_THROTTLE, error_code=kerr(ErrorCode.COORDINATOR_NOT_AVAILABLE), groups=())
    error, listed = coordinator.list_groups(
        tuple(getattr(request, "states_filter", ()) or ()), tuple(getattr(request, "types_filter", ()) or ())
    )
    groups = tuple(
        make(
            listed_cls, group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state, group_type=g.group_type
        )
        for g in listed
    )
    return make(cls, throttle_time=NO_THROTTLE, error_code=kerr(error), groups=groups)


async def handle_delete_groups(ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    cls = response_class(ApiKey.DELETE_GROUPS, version)
    result_cls = response_class(ApiKey.DELETE_GROUPS, version, "DeletableGroupResult")
    coordinator = _coordinator(ctx)
    names = list(request.groups_names)
    if coordinator is None:
        outcome = dict.fromkeys(names, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    else:
        outcome = await coordinator.delete_groups(names)
    results = tuple(make(result_cls, group_id=name, error_code=kerr(outcome[name])) for name in names)
    return make(cls, throttle_time=NO_THROTTLE, results=results)


async def handle_offset_delete(ctx: RequestContext, request: Any) -> Any:
    """OffsetDelete v0 as Kafka's ``KafkaApis`` answers it: partitions of topics that do not
    exist get UNKNOWN_TOPIC_OR_PARTITION, the rest go to the coordinator; a group-level error
    comes back alone, with no topics."""
    cls = response_class(ApiKey.OFFSET_DELETE, ctx.api_version)
    topic_cls = response_class(ApiKey.OFFSET_DELETE, ctx.api_version, "OffsetDeleteResponseTopic")
    partition_cls = response_class(ApiKey.OFFSET_DELETE, ctx.api_version, "OffsetDeleteResponsePartition")
    coordinator = _coordinator(ctx)
    if coordinator is None:
        return make(cls, error_code=kerr(ErrorCode.COORDINATOR_NOT_AVAILABLE), throttle_time=NO_THROTTLE, topics=())
    counts = await existing_partition_counts(ctx, [t.name for t in request.topics])
    errors: dict[TopicPartition, ErrorCode] = {}
    known: list[TopicPartition] = []
    for topic in request.topics:
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition_index)
            if not 0 <= p.partition_index < counts.get(topic.name, 0):
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                known.append(tp)
    error, deleted = await coordinator.delete_offsets(request.group_id, known)
    if error != ErrorCode.NONE:
        return make(cls, error_code=kerr(error), throttle_time=NO_THROTTLE, topics=())
    errors.update(deleted)
    topics = _partition_errors(request.topics, errors, topic_cls, partition_cls)
    return make(cls, error_code=kerr(ErrorCode.NONE), throttle_time=NO_THROTTLE, topics=topics)


# -- ConsumerGroupHeartbeat / ConsumerGroupDescribe (KIP-848) ----------------------------------------


def _topic_id_partitions(entries: Sequence[Any] | None) -> dict[str, frozenset[int]] | None:
    """A request's (topic id, partitions) list as topic id hex -> partitions (None stays None)."""
    if entries is None:
        return None
    out: dict[str, set[int]] = {}
    for entry in entries:
        topic_id = entry.topic_id.hex if entry.topic_id is not None else ""
        out.setdefault(topic_id, set()).update(int(p) for p in entry.partitions)
    return {topic_id: frozenset(parts) for topic_id, parts in out.items()}


def _wire_topic_partitions(cls: type, assignment: Mapping[str, frozenset[int]]) -> tuple[Any, ...]:
    return tuple(
        make(cls, topic_id=uuid.UUID(hex=topic_id), partitions=tuple(i32(p) for p in sorted(parts)))
        for topic_id, parts in sorted(assignment.items())
    )


async def handle_consumer_group_heartbeat(ctx: RequestContext, request: Any) -> Any:
    """ConsumerGroupHeartbeat v0-1: join, heartbeat, reconcile and leave in one request."""
    version = ctx.api_version
    cls = response_class(ApiKey.CONSUMER_GROUP_HEARTBEAT, version)
    coordinator = _coordinator(ctx)
    rebalance = request.rebalance_timeout
    if coordinator is None:
        result = HeartbeatResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    else:
        result = await coordinator.consumer_group_heartbeat(
            HeartbeatRequest(
                group_id=request.group_id,
                member_id=request.member_id,
                member_epoch=int(request.member_epoch),
                instance_id=request.instance_id,
                rack_id=request.rack_id,
                rebalance_timeout_ms=ms(rebalance) if rebalance is not None else -1,
                subscribed_topic_names=request.subscribed_topic_names,
                subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None),
                server_assignor=request.server_assignor,
                owned=_topic_id_partitions(request.topic_partitions),
                client_id=ctx.header.client_id or "",
                client_host=_client_host(ctx.peer),
                api_version=version,
            )
        )
    assignment = None
    if result.assignment is not None:
        assignment_cls = response_class(ApiKey.CONSUMER_GROUP_HEARTBEAT, version, "Assignment")
        tp_cls = response_class(ApiKey.CONSUMER_GROUP_HEARTBEAT, version, "TopicPartitions")
        assignment = make(assignment_cls, topic_partitions=_wire_topic_partitions(tp_cls, result.assignment))
    return make(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=kerr(result.error),
        error_message=result.error_message,
        member_id=result.member_id,
        member_epoch=i32(result.member_epoch),
        heartbeat_interval=datetime.timedelta(milliseconds=result.heartbeat_interval_ms),
        assignment=assignment,
    )


async def handle_consumer_group_describe(ctx: RequestContext, request: Any) -> Any:
    """ConsumerGroupDescribe v0-1: KIP-848 groups with members, epochs, current and target
    assignments; a classic group or an unknown one is GROUP_ID_NOT_FOUND."""
    version = ctx.api_version
    api = ApiKey.CONSUMER_GROUP_DESCRIBE
    cls = response_class(api, version)
    group_cls, member_cls = response_class(api, version, "DescribedGroup"), response_class(api, version, "Member")
    assignment_cls, tp_cls = response_class(api, version, "Assignment"), response_class(api, version, "TopicPartitions")
    coordinator = _coordinator(ctx)
    include_ops = bool(getattr(request, "include_authorized_operations", False))
    names = topic_names_by_id(ctx)

    def wire(assignment: Mapping[str, frozenset[int]]) -> Any:
        entries = tuple(
            make(tp_cls, topic_id=uuid.UUID(hex=tid), topic_name=names.get(tid, ""), partitions=tuple(sorted(parts)))
            for tid, parts in sorted(assignment.items())
        )
        return make(assignment_cls, topic_partitions=entries)

    groups = []
    for group_id in request.group_ids:
        if coordinator is None:
            error, message, group = ErrorCode.COORDINATOR_NOT_AVAILABLE, None, None
        else:
            error, message, group = coordinator.describe_consumer_group(group_id)
        members = ()
        if group is not None:
            members = tuple(
                make(
                    member_cls,
                    member_id=m.member_id,
                    instance_id=m.instance_id,
                    rack_id=m.rack_id,
                    member_epoch=i32(m.member_epoch),
                    client_id=m.client_id,
                    client_host=m.client_host,
                    subscribed_topic_names=tuple(sorted(m.subscribed_topic_names)),
                    subscribed_topic_regex=m.subscribed_topic_regex,
                    assignment=wire(m.assigned),
                    target_assignment=wire(group.target.get(m.member_id, {})),
                    member_type=i8(0 if m.classic is not None else 1),  # v1: classic (migration) or consumer
                )
                for m in group.members.values()
            )
        groups.append(
            make(
                group_cls,
                error_code=kerr(error),
                error_message=message,
                group_id=group_id,
                group_state=group.state.value if group is not None else "",
                group_epoch=i32(group.group_epoch if group is not None else -1),
                assignment_epoch=i32(group.assignment_epoch if group is not None else -1),
                assignor_name=coordinator.consumer.preferred_assignor(group) if group and coordinator else "",
                members=members,
                authorized_operations=operations_field(
                    ctx, include_ops and group is not None, ResourceType.GROUP, group_id, GROUP_OPERATIONS
                ),
            )
        )
    return make(cls, throttle_time=NO_THROTTLE, groups=tuple(groups))


HANDLERS: dict[int, Handler] = {
    ApiKey.FIND_COORDINATOR: Handler(ApiKey.FIND_COORDINATOR, handle_find_coordinator, ordered=False),
    # membership and commits change group state: in arrival order on a connection
    ApiKey.JOIN_GROUP: Handler(ApiKey.JOIN_GROUP, handle_join_group, ordered=True),
    ApiKey.SYNC_GROUP: Handler(ApiKey.SYNC_GROUP, handle_sync_group, ordered=True),
    ApiKey.HEARTBEAT: Handler(ApiKey.HEARTBEAT, handle_heartbeat, ordered=True),
    ApiKey.LEAVE_GROUP: Handler(ApiKey.LEAVE_GROUP, handle_leave_group, ordered=True),
    ApiKey.OFFSET_COMMIT: Handler(ApiKey.OFFSET_COMMIT, handle_offset_commit, ordered=True),
    ApiKey.OFFSET_FETCH: Handler(ApiKey.OFFSET_FETCH, handle_offset_fetch, ordered=False),
    ApiKey.DESCRIBE_GROUPS: Handler(ApiKey.DESCRIBE_GROUPS, handle_describe_groups, ordered=False),
    ApiKey.LIST_GROUPS: Handler(ApiKey.LIST_GROUPS, handle_list_groups, ordered=False),
    ApiKey.DELETE_GROUPS: Handler(ApiKey.DELETE_GROUPS, handle_delete_groups, ordered=True),
    ApiKey.OFFSET_DELETE: Handler(ApiKey.OFFSET_DELETE, handle_offset_delete, ordered=True),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: Handler(
        ApiKey.CONSUMER_GROUP_HEARTBEAT, handle_consumer_group_heartbeat, ordered=True
    ),
    ApiKey.CONSUMER_GROUP_DESCRIBE: Handler(
        ApiKey.CONSUMER_GROUP_DESCRIBE, handle_consumer_group_describe, ordered=False
    ),
}

__all__ = ["HANDLERS"]
