"""Handlers for the data path and bootstrap: ApiVersions, Metadata, Produce, Fetch, ListOffsets,
InitProducerId, OffsetForLeaderEpoch, SaslHandshake and SaslAuthenticate.

Each translates the wire request into the core's dataclasses (``odradek.broker.api``), calls
the core, and maps results back; failures of one partition are that partition's error code.
Responses echo every requested topic and partition in request order (kafka-python drops a
Fetch response that leaves one out).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from odradek.broker.api import (
    FetchPartition,
    FetchPartitionResult,
    IsolationLevel,
    ListOffsetsPartition,
    OffsetForLeaderEpochPartition,
    PartitionProduceResult,
    TopicMetadata,
)
from odradek.broker.fetch_session import INVALID_SESSION_ID, FetchSessionCache
from odradek.errors import ErrorCode, InvalidRequest, KafkaError
from odradek.interfaces import TopicPartition
from odradek.protocol import (
    ApiKey,
    FetchPartitionData,
    FetchRequestData,
    FetchResponseData,
    FetchTopicData,
    MetadataResponseData,
    NodeEndpoint,
    PartitionProduceResponse,
    ProduceRequestData,
    ProduceResponseData,
    TopicProduceResponse,
    api_versions_response,
    fetch_response_size,
    ms,
    produce_error_response,
    produce_unsupported_response,
    produce_version_implemented,
    timedelta_ms,
)
from odradek.protocol.authorized_operations import CLUSTER_OPERATIONS, TOPIC_OPERATIONS, authorized_operations
from odradek.replica_selector import ClientMetadata
from odradek.security.acl import CLUSTER_NAME, AclOperation, ResourceType

from . import CloseConnection, Handler, RequestContext
from ._kio import NO_THROTTLE, kerr, make, response_class
from .authz import allowed, allowed_names, authorized_operations_bits, authorizer_of, cluster_allowed, operations_field
from .leaders import LEADERSHIP_ERRORS, current_leaders


def _isolation(value: int) -> IsolationLevel:
    try:
        return IsolationLevel(value)
    except ValueError:
        raise InvalidRequest(f"unknown isolation level {value}") from None


# -- ApiVersions ------------------------------------------------------------------------------


#: What Kafka's ``ApiVersionsRequest.isValid`` allows as client software name and version (v3+).
_SOFTWARE_NAME_VERSION = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


async def handle_api_versions(ctx: RequestContext, request: Any) -> Any:
    """The advertised version table (unknown versions never get here: see the dispatcher).

    v3+ names the client software; a name or version Kafka would not accept (empty, or other
    than letters, digits, '-' and '.' with a letter or digit at both ends) gets INVALID_REQUEST
    and no key list, as Kafka's ``ApiVersionsRequest.getErrorResponse``.
    """
    if ctx.api_version >= 3 and not (
        _SOFTWARE_NAME_VERSION.fullmatch(request.client_software_name)
        and _SOFTWARE_NAME_VERSION.fullmatch(request.client_software_version)
    ):
        return api_versions_response(ctx.api_version, {}, ErrorCode.INVALID_REQUEST)
    return api_versions_response(ctx.api_version, dict(ctx.advertised))


# -- Metadata ---------------------------------------------------------------------------------


async def handle_metadata(ctx: RequestContext, request: Any) -> MetadataResponseData:
    """Brokers on this listener, controller, cluster id and topics (v0: empty list = all)."""
    version = ctx.api_version
    all_topics = request.topics is None or (version == 0 and not request.topics)
    unknown_ids: list[str] = []
    if all_topics:
        topics = None
    else:
        # v10+ may name a topic by id alone (v12+ in practice: KIP-848 consumers resolving the
        # ids of their assignments); an id no topic has is answered UNKNOWN_TOPIC_ID
        names = topic_names_by_id(ctx)
        topics = []
        for t in request.topics:
            if t.name is not None:
                topics.append(t.name)
            else:
                topic_id = t.topic_id.hex if getattr(t, "topic_id", None) is not None else ""
                if topic_id in names:
                    topics.append(names[topic_id])
                else:
                    unknown_ids.append(topic_id)
    allow_auto_create = bool(getattr(request, "allow_auto_topic_creation", True))
    authorizer = authorizer_of(ctx)
    unknown = tuple(TopicMetadata(ErrorCode.UNKNOWN_TOPIC_ID, "", topic_id=i) for i in unknown_ids)
    if authorizer is not None:
        return await _authorized_metadata(ctx, authorizer, request, topics, allow_auto_create, unknown)
    md = await ctx.broker.metadata(topics, allow_auto_create, listener_name=ctx.listener.name)
    if unknown:
        md = replace(md, topics=md.topics + unknown)
    # written by odradek.protocol.metadata, not kio; v8+ may ask for the authorized operations
    return MetadataResponseData(
        version,
        md,
        topic_authorized_operations=authorized_operations(
            bool(getattr(request, "include_topic_authorized_operations", False)), TOPIC_OPERATIONS
        ),
        cluster_authorized_operations=authorized_operations(
            bool(getattr(request, "include_cluster_authorized_operations", False)), CLUSTER_OPERATIONS
        ),
    )


async def _authorized_metadata(
    ctx: RequestContext,
    authorizer: Any,
    request: Any,
    topics: list[str] | None,
    allow_auto_create: bool,
    unknown: tuple[TopicMetadata, ...] = (),
) -> MetadataResponseData:
    """Kafka's ``handleTopicMetadataRequest`` with an authorizer: topics the principal may not
    DESCRIBE are left out of an all-topics answer and answered TOPIC_AUTHORIZATION_FAILED when
    named (without saying whether they exist); a missing topic is auto-created only with CREATE
    on the cluster or on it, else it too is TOPIC_AUTHORIZATION_FAILED."""
    version = ctx.api_version
    denied: set[str] = set()
    if topics is not None:
        described = allowed_names(ctx, authorizer, AclOperation.DESCRIBE, ResourceType.TOPIC, topics)
        denied = {t for t in topics if t not in described}
        missing = [t for t in topics if t in described and t not in ctx.broker.metadata_cache.topics]
        auto_create = allow_auto_create and bool(ctx.config["auto.create.topics.enable"])
        if missing and auto_create and not cluster_allowed(ctx, authorizer, AclOperation.CREATE, log=False):
            creatable = allowed_names(ctx, authorizer, AclOperation.CREATE, ResourceType.TOPIC, missing)
            denied.update(t for t in missing if t not in creatable)
    asked = None if topics is None else [t for t in topics if t not in denied]
    md = await ctx.broker.metadata(asked, allow_auto_create, listener_name=ctx.listener.name)
    answered = list(md.topics)
    if topics is None:
        visible = allowed_names(ctx, authorizer, AclOperation.DESCRIBE, ResourceType.TOPIC, [t.name for t in answered])
        answered = [t for t in answered if t.name in visible]
    else:
        by_name = {t.name: t for t in answered}
        failed = TopicMetadata(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "")
        answered = [by_name[t] if t in by_name else replace(failed, name=t) for t in dict.fromkeys(topics)]
    answered += unknown  # ids no topic has (v10+): nothing to authorize
    include_topic_ops = bool(getattr(request, "include_topic_authorized_operations", False))
    topic_ops = {
        t.name: authorized_operations_bits(ctx, authorizer, ResourceType.TOPIC, t.name)
        for t in answered
        if include_topic_ops and t.error != ErrorCode.TOPIC_AUTHORIZATION_FAILED
    }
    return MetadataResponseData(
        version,
        replace(md, topics=tuple(answered)),
        topic_authorized_operations=authorized_operations(include_topic_ops, 0),
        cluster_authorized_operations=operations_field(
            ctx,
            bool(getattr(request, "include_cluster_authorized_operations", False)),
            ResourceType.CLUSTER,
            CLUSTER_NAME,
            CLUSTER_OPERATIONS,
        ),
        topic_operations=topic_ops or None,
    )


def topic_names_by_id(ctx: RequestContext) -> dict[str, str]:
    """Topic id (32 hex digits) -> name, from the broker's metadata cache."""
    cache = getattr(ctx.broker, "metadata_cache", None)
    topics = getattr(cache, "topics", None) or {}
    return {t.topic_id: name for name, t in topics.items() if getattr(t, "topic_id", "")}


# -- Produce ----------------------------------------------------------------------------------


def _group_by_topic(order: Iterable[TopicPartition]) -> list[tuple[str, list[TopicPartition]]]:
    """Topic runs in request order (a topic named twice in a request stays twice)."""
    groups: list[tuple[str, list[TopicPartition]]] = []
    for tp in order:
        if groups and groups[-1][0] == tp.topic:
            groups[-1][1].append(tp)
        else:
            groups.append((tp.topic, [tp]))
    return groups


async def handle_produce(ctx: RequestContext, request: ProduceRequestData) -> ProduceResponseData | None:
    """Append each partition's batch; acks=0 gets no response at all."""
    if not produce_version_implemented(request.version):
        if request.acks == 0:
            raise CloseConnection(f"Produce v{request.version} with acks=0 is not supported (UNSUPPORTED_VERSION)")
        return produce_unsupported_response(request)
    order: list[TopicPartition] = []
    partitions: dict[TopicPartition, bytearray | memoryview] = {}
    results: dict[TopicPartition, PartitionProduceResult] = {}
    for topic in request.topic_data:
        for p in topic.partition_data:
            tp = TopicPartition(topic.name, p.index)
            if tp not in partitions:
                order.append(tp)
            # null records: the core answers INVALID_RECORD (v3+ needs exactly one batch per partition).
            # A partition named twice is one entry, as in Kafka's map: the last batch is appended
            # and the response has one entry for it.
            partitions[tp] = p.records if p.records is not None else bytearray()
    authorizer = authorizer_of(ctx)
    if authorizer is not None:
        refused = _refused_produce(ctx, authorizer, request, partitions)
        if refused is not None:
            return refused
        writable = allowed_names(ctx, authorizer, AclOperation.WRITE, ResourceType.TOPIC, (tp.topic for tp in order))
        for tp in [tp for tp in partitions if tp.topic not in writable]:
            results[tp] = PartitionProduceResult(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            del partitions[tp]
        if not partitions and ctx.release_frame is not None:
            ctx.release_frame()  # nothing to append: the frame is not needed any longer
    if partitions:
        try:
            results.update(
                await ctx.broker.produce(
                    request.acks,
                    request.timeout_ms,
                    partitions,
                    transactional_id=request.transactional_id,
                    api_version=request.version,
                    on_appended=ctx.release_frame,
                )
            )
        except KafkaError as exc:
            results.update({tp: PartitionProduceResult(exc.code, error_message=str(exc)) for tp in partitions})
    throttle_ms = _record_produce_quota(ctx, request.acks)
    if request.acks == 0:
        failed = {tp: r.error for tp, r in results.items() if r.error != ErrorCode.NONE}
        if failed:
            # no response to carry the errors: Kafka closes the connection so that the producer
            # notices and refreshes its metadata
            summary = ", ".join(f"{tp.topic}-{tp.partition}: {ErrorCode(code).name}" for tp, code in failed.items())
            raise CloseConnection(
                f"error during produce request with correlation id {ctx.header.correlation_id} from client id "
                f"{ctx.header.client_id!r} with acks=0 ({summary})"
            )
        return None
    missing = PartitionProduceResult(ErrorCode.UNKNOWN_SERVER_ERROR)
    version = request.version
    leaders: dict[TopicPartition, tuple[int, int]] = {}
    nodes: list[NodeEndpoint] = []
    if version >= 10:  # KIP-951: Kafka's handleProduceRequest, for NOT_LEADER_OR_FOLLOWER only
        led_elsewhere = [tp for tp, r in results.items() if r.error == ErrorCode.NOT_LEADER_OR_FOLLOWER]
        if led_elsewhere:
            leaders, nodes = current_leaders(ctx.broker, ctx.listener.name, led_elsewhere)
    return ProduceResponseData(
        [
            TopicProduceResponse(
                topic,
                [
                    _partition_produce_response(
                        tp.partition, results.get(tp, missing), request.version, leaders.get(tp)
                    )
                    for tp in tps
                ],
            )
            for topic, tps in _group_by_topic(order)
        ],
        throttle_ms,
        nodes,
    )


def _refused_produce(
    ctx: RequestContext, authorizer: Any, request: ProduceRequestData, partitions: dict[TopicPartition, Any]
) -> ProduceResponseData | None:
    """The answer to a transactional Produce whose principal may not WRITE its transactional id
    (Kafka: TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition); None when allowed."""
    txn_id = request.transactional_id
    if txn_id is None or allowed(ctx, authorizer, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id):
        return None
    if request.acks == 0:
        raise CloseConnection(f"Produce with acks=0: transactional id {txn_id!r} is not authorized")
    if ctx.release_frame is not None:
        ctx.release_frame()
    return produce_error_response(request, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)


def _quotas(ctx: RequestContext) -> Any:
    """The broker's quota managers (None for a broker stand-in without them)."""
    return getattr(ctx.broker, "quotas", None)


def _record_produce_quota(ctx: RequestContext, acks: int) -> int:
    """Kafka's Produce under quotas: the whole request's size (header and body: Kafka's
    ``request.sizeInBytes``) is counted against the client's ``producer_byte_rate``, whatever
    became of its partitions, and, unless acks=0, the request's thread time so far against its
    ``request_percentage``; the client waits the larger throttle time (see :func:`_throttle`),
    acks=0 too (no response carries it, but the mute still slows the client). The records stay
    appended either way."""
    quotas = _quotas(ctx)
    request_ms = ctx.request_time.record(count=False) if ctx.request_time is not None and acks != 0 else 0
    bandwidth_ms = 0
    if quotas is not None and quotas.produce.enabled():
        user, client_id = ctx.principal.name, ctx.header.client_id or ""
        bandwidth_ms = quotas.produce.record(user, client_id, ctx.request_size, count=False)
    return _throttle(ctx, quotas, quotas.produce if quotas is not None else None, bandwidth_ms, request_ms)


def _throttle(ctx: RequestContext, quotas: Any, bandwidth: Any, bandwidth_ms: int, request_ms: int) -> int:
    """The throttle of a request under a byte-rate quota (``bandwidth``, Produce's or Fetch's)
    and the request quota (KafkaApis' ``maxThrottleTimeMs``): the larger time, counted in that
    quota's throttle metrics only (Kafka's ``requestHelper.throttle``), the connection muted for
    it. 0: not throttled."""
    throttle_ms = max(bandwidth_ms, request_ms)
    if throttle_ms <= 0:
        return 0
    user, client_id = ctx.principal.name, ctx.header.client_id or ""
    if bandwidth_ms > request_ms:
        bandwidth.count_throttle(user, client_id, bandwidth_ms)
    else:
        quotas.request.count_throttle(user, client_id, request_ms)
    if ctx.throttle is not None:
        ctx.throttle(throttle_ms)
    return throttle_ms


#: The errors whose Produce v8+ answer carries its message: Kafka's record validation failures
#: (``RecordValidationException``: a batch refused for some of its records, or their timestamps);
#: every other error's message is null, as in Kafka.
_VALIDATION_ERRORS = frozenset({ErrorCode.INVALID_TIMESTAMP})


def _partition_produce_response(
    index: int, r: PartitionProduceResult, version: int, current_leader: tuple[int, int] | None
) -> PartitionProduceResponse:
    """One partition's answer at ``version``: v8+ says which records of an invalid batch were at
    fault (KIP-467), v10+ who leads a partition this broker does not (KIP-951), and v11+ calls a
    transactional batch whose partition is not in the transaction TRANSACTION_ABORTABLE
    (KIP-890; INVALID_TXN_STATE before, as Kafka's produce path answers it)."""
    error = r.error
    if error == ErrorCode.INVALID_TXN_STATE and version >= 11:
        error = ErrorCode.TRANSACTION_ABORTABLE
    validation = bool(r.record_errors) or error in _VALIDATION_ERRORS
    return PartitionProduceResponse(
        index,
        int(error),
        r.base_offset,
        r.log_append_time,
        r.log_start_offset,
        r.record_errors,
        r.error_message if validation else None,
        current_leader,
    )


# -- Fetch ------------------------------------------------------------------------------------


def _release_all(results: Iterable[FetchPartitionResult]) -> None:
    for r in results:
        if r.records is not None:
            r.records.release()


async def handle_fetch(ctx: RequestContext, request: FetchRequestData) -> FetchResponseData:
    """Full fetches, and incremental ones in a fetch session (KIP-227; the session rules are
    ``odradek.broker.fetch_session``'s): an incremental fetch reads every partition of its
    session and answers the ones that changed.

    v13+ names topics by id: the session keys those partitions by id (Kafka's
    ``TopicIdPartition``) and each request resolves the ids again through the metadata cache,
    so an id no topic has is UNKNOWN_TOPIC_ID for as long as it is unknown and a topic deleted
    and made again under its name is a different partition. v16+ answers leadership errors with
    the current leader and its endpoint (KIP-951)."""
    by_id = request.version >= 13
    requested = [
        FetchPartition(
            TopicPartition(_id_key(topic.topic_id) if by_id else topic.topic, p.partition),
            p.fetch_offset,
            p.partition_max_bytes,
            p.current_leader_epoch,
            p.log_start_offset,
            p.last_fetched_epoch,
        )
        for topic in request.topics
        for p in topic.partitions
    ]
    forgotten = [
        TopicPartition(_id_key(name) if by_id else name, index)
        for name, indexes in (request.forgotten_topic_ids if by_id else request.forgotten_topics)
        for index in indexes
    ]
    sessions: FetchSessionCache = ctx.broker.fetch_sessions
    context = sessions.new_context(
        request.session_id,
        request.session_epoch,
        requested,
        forgotten,
        follower=request.replica_id >= 0,
        uses_topic_ids=by_id,
    )
    if context.error != ErrorCode.NONE:
        return FetchResponseData([], error_code=context.error, session_id=INVALID_SESSION_ID)
    partitions = context.partitions
    names: dict[str, str] = {}
    keys: dict[TopicPartition, TopicPartition] = {}  # the partition read -> its key in the session
    refused: dict[TopicPartition, FetchPartitionResult] = {}
    if by_id:
        names = _topic_names(ctx, {p.tp.topic[len(_ID_KEY) :] for p in partitions})
        partitions, keys, refused = _resolve_topic_ids(partitions, names)
    authorizer = authorizer_of(ctx)
    if authorizer is not None:
        partitions, denied = _authorized_fetch(ctx, authorizer, request.replica_id, partitions)
        refused.update((keys.get(tp, tp), r) for tp, r in denied.items())
    max_bytes = min(request.max_bytes, int(ctx.config["fetch.max.bytes"]))
    quotas = _quotas(ctx)
    consumer = request.replica_id < 0  # a follower's fetch (replication) is not a client's: no quota
    if consumer and quotas is not None and quotas.fetch.enabled():
        window_bytes = quotas.fetch.max_value_in_window(ctx.principal.name, ctx.header.client_id or "")
        if window_bytes is not None:
            max_bytes = min(max_bytes, window_bytes)  # Kafka's getMaxValueInQuotaWindow
    results: dict[TopicPartition, FetchPartitionResult] = await ctx.broker.fetch(
        # Kafka's FetchRequest.isConsumer: a negative replica id (-2 too) reads as a consumer,
        # up to the HW or LSO; reading to the log end is the broker's own (its coordinators')
        max(request.replica_id, -1),
        request.max_wait_ms,
        request.min_bytes,
        max_bytes,
        _isolation(request.isolation_level),
        partitions,
        _client_metadata(ctx, request),
        replica_epoch=request.replica_epoch,
    )
    if keys:
        results = {keys.get(tp, tp): r for tp, r in results.items()}
    if refused:
        results.update(refused)
    leaders: dict[TopicPartition, tuple[int, int]] = {}
    nodes: list[NodeEndpoint] = []
    if request.version >= 16:
        real = {key: tp for tp, key in keys.items()}
        led_elsewhere = [tp for tp, r in results.items() if r.error in LEADERSHIP_ERRORS]
        found, nodes = current_leaders(ctx.broker, ctx.listener.name, (real.get(tp, tp) for tp in led_elsewhere))
        leaders = {tp: found[real.get(tp, tp)] for tp in led_elsewhere}
    if consumer:
        throttled = _throttle_fetch(ctx, quotas, context, results, leaders)
        if throttled is not None:
            return throttled
    try:
        order, session_id, error = sessions.respond(context, results)
    except BaseException:
        _release_all(results.values())
        raise
    answered = set(order)
    _release_all(r for tp, r in results.items() if tp not in answered)  # read, but not sent
    if error != ErrorCode.NONE:
        return FetchResponseData([], error_code=error, session_id=session_id)
    try:
        missing = FetchPartitionResult(ErrorCode.UNKNOWN_SERVER_ERROR)
        return FetchResponseData(
            [
                FetchTopicData(
                    names.get(topic[1:], "") if by_id else topic,
                    [_fetch_partition(tp.partition, results.get(tp, missing), leaders.get(tp)) for tp in tps],
                    bytes.fromhex(topic[1:]) if by_id else b"",
                )
                for topic, tps in _group_by_topic(order)
            ],
            session_id=session_id,
            node_endpoints=[n for n in nodes if any(leaders[tp][0] == n.node_id for tp in answered if tp in leaders)],
        )
    except BaseException:
        _release_all(r for tp, r in results.items() if tp in answered)
        raise


def _client_metadata(ctx: RequestContext, request: FetchRequestData) -> ClientMetadata | None:
    """A consumer's Fetch v11+ is where KIP-392 starts (Kafka builds its ClientMetadata from
    it): its rack, and who and where the client is, for the replica selector."""
    if ctx.header.api_version < 11 or request.replica_id >= 0:
        return None
    rack = getattr(request, "rack_id", "") or ""
    return ClientMetadata(rack, ctx.header.client_id or "", ctx.peer, str(ctx.principal), ctx.listener.name)


#: What starts a v13+ session key's "topic": a topic id, which no topic name can be (legal names
#: are letters, digits, '.', '_' and '-').
_ID_KEY = "\x00"


def _id_key(topic_id: str) -> str:
    """The session key's topic of a partition named by ``topic_id`` (32 hex digits)."""
    return _ID_KEY + topic_id


def _topic_names(ctx: RequestContext, topic_ids: set[str]) -> dict[str, str]:
    """Topic id -> name of those of ``topic_ids`` that exist (the metadata cache keeps the map
    between requests; a broker stand-in without one has its topics scanned)."""
    cache: Any = getattr(ctx.broker, "metadata_cache", None)
    if hasattr(cache, "topic_names"):
        names: dict[str, str] = cache.topic_names(topic_ids)
        return names
    every = topic_names_by_id(ctx)
    return {i: every[i] for i in topic_ids if i in every}


def _resolve_topic_ids(
    partitions: Sequence[FetchPartition], names: dict[str, str]
) -> tuple[list[FetchPartition], dict[TopicPartition, TopicPartition], dict[TopicPartition, FetchPartitionResult]]:
    """A v13+ fetch's partitions (keyed by topic id) under their topics' names: the ones to
    read, each read partition's key, and UNKNOWN_TOPIC_ID for the keys whose id no topic has
    (Kafka answers those itself, before the fetch)."""
    readable: list[FetchPartition] = []
    keys: dict[TopicPartition, TopicPartition] = {}
    unknown: dict[TopicPartition, FetchPartitionResult] = {}
    for p in partitions:
        name = names.get(p.tp.topic[len(_ID_KEY) :])
        if name is None:
            unknown[p.tp] = FetchPartitionResult(ErrorCode.UNKNOWN_TOPIC_ID)
            continue
        tp = TopicPartition(name, p.tp.partition)
        keys[tp] = p.tp
        readable.append(replace(p, tp=tp))
    return readable, keys, unknown


def _authorized_fetch(
    ctx: RequestContext, authorizer: Any, replica_id: int, partitions: Sequence[FetchPartition]
) -> tuple[list[FetchPartition], dict[TopicPartition, FetchPartitionResult]]:
    """The partitions a Fetch may read, and the refused ones' answers: a consumer needs READ on
    each topic, a follower CLUSTER_ACTION on the cluster (Kafka answers every partition of an
    unauthorized follower TOPIC_AUTHORIZATION_FAILED)."""
    if replica_id >= 0:
        readable = (
            {p.tp.topic for p in partitions} if cluster_allowed(ctx, authorizer, AclOperation.CLUSTER_ACTION) else set()
        )
    else:
        readable = allowed_names(
            ctx, authorizer, AclOperation.READ, ResourceType.TOPIC, (p.tp.topic for p in partitions)
        )
    refused = FetchPartitionResult(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    return (
        [p for p in partitions if p.tp.topic in readable],
        {p.tp: refused for p in partitions if p.tp.topic not in readable},
    )


def _throttle_fetch(
    ctx: RequestContext,
    quotas: Any,
    context: Any,
    results: dict[TopicPartition, FetchPartitionResult],
    leaders: dict[TopicPartition, tuple[int, int]],
) -> FetchResponseData | None:
    """Kafka's consumer Fetch under quotas (KIP-219): the response's size (Kafka's
    ``FetchResponse.sizeOf`` of the partitions it would carry) is counted against the client's
    ``consumer_byte_rate``, and the request's thread time so far against its
    ``request_percentage``. When either throttles, the answer has no records and carries the
    larger time (counted in that quota's throttle metrics), the connection is muted for it, and
    the bytes are taken back off the byte rate (they were not sent); a fetch session stays where
    it was, so the next fetch asks for the same records. None: answer normally."""
    user, client_id = ctx.principal.name, ctx.header.client_id or ""
    request_ms = ctx.request_time.record(count=False) if ctx.request_time is not None else 0
    size = 0
    bandwidth_ms = 0
    if quotas is not None and quotas.fetch.enabled():
        size = _fetch_response_size(ctx, context, results, leaders)
        bandwidth_ms = quotas.fetch.record(user, client_id, size, count=False)
    throttle_ms = _throttle(ctx, quotas, quotas.fetch if quotas is not None else None, bandwidth_ms, request_ms)
    if throttle_ms <= 0:
        return None
    if size:
        quotas.fetch.unrecord(user, client_id, size)
    _release_all(results.values())
    session = context.session
    if session is None:  # a full fetch: no session is created (Kafka's FullFetchContext)
        return FetchResponseData([], session_id=INVALID_SESSION_ID, throttle_time_ms=throttle_ms)
    if session.epoch != context.expected_epoch:
        return FetchResponseData(
            [], error_code=ErrorCode.INVALID_FETCH_SESSION_EPOCH, session_id=session.id, throttle_time_ms=throttle_ms
        )
    return FetchResponseData([], session_id=session.id, throttle_time_ms=throttle_ms)


def _fetch_response_size(
    ctx: RequestContext,
    context: Any,
    results: dict[TopicPartition, FetchPartitionResult],
    leaders: dict[TopicPartition, tuple[int, int]],
) -> int:
    """The size of the answer the fetch would get unthrottled (Kafka's ``getResponseSize``):
    every partition of a full fetch, the changed ones of an incremental one."""
    sessions: FetchSessionCache = ctx.broker.fetch_sessions
    order = sessions.response_partitions(context, results)
    missing = FetchPartitionResult(ErrorCode.UNKNOWN_SERVER_ERROR)

    def shape(tp: TopicPartition) -> tuple[int, int, tuple[int, int] | None, tuple[int, int] | None]:
        r = results.get(tp, missing)
        aborted = len(r.aborted_transactions) if r.aborted_transactions is not None else 0
        return aborted, r.records.size if r.records is not None else 0, leaders.get(tp), r.diverging_epoch

    return fetch_response_size(
        ctx.api_version, ((topic, [shape(tp) for tp in tps]) for topic, tps in _group_by_topic(order))
    )


def _fetch_partition(
    index: int, r: FetchPartitionResult, current_leader: tuple[int, int] | None = None
) -> FetchPartitionData:
    aborted = None
    if r.aborted_transactions is not None:
        aborted = [(a.producer_id, a.first_offset) for a in r.aborted_transactions]
    return FetchPartitionData(
        index,
        int(r.error),
        r.high_watermark,
        r.last_stable_offset,
        r.log_start_offset,
        aborted,
        r.preferred_read_replica,
        r.records if r.records is not None else b"",
        current_leader=current_leader,
        diverging_epoch=r.diverging_epoch,
    )


# -- ListOffsets ------------------------------------------------------------------------------


async def handle_list_offsets(ctx: RequestContext, request: Any) -> Any:
    """Earliest (-2), latest (-1), max timestamp (-3), earliest local (-4), latest tiered (-5)
    or the first offset at a timestamp. v10's ``timeout_ms`` (KIP-1075) is taken and not used: a
    timestamp search of remote storage is bounded by ``remote.list.offsets.request.timeout.ms``."""
    version = ctx.api_version
    partitions = [
        ListOffsetsPartition(
            TopicPartition(t.name, p.partition_index), p.timestamp, getattr(p, "current_leader_epoch", -1)
        )
        for t in request.topics
        for p in t.partitions
    ]
    # a partition named twice is INVALID_REQUEST each time, as Kafka answers it
    seen: set[TopicPartition] = set()
    twice: set[TopicPartition] = set()
    for p in partitions:
        (twice if p.tp in seen else seen).add(p.tp)
    results = await ctx.broker.list_offsets(
        request.replica_id,
        _isolation(getattr(request, "isolation_level", 0)),
        [p for p in partitions if p.tp not in twice],
    )
    topic_cls = response_class(ApiKey.LIST_OFFSETS, version, "ListOffsetsTopicResponse")
    partition_cls = response_class(ApiKey.LIST_OFFSETS, version, "ListOffsetsPartitionResponse")
    topics = []
    for topic, tps in _group_by_topic(p.tp for p in partitions):
        rows = []
        for tp in tps:
            r = results.get(tp)
            if r is None:
                code = ErrorCode.INVALID_REQUEST if tp in twice else -1
                rows.append(make(partition_cls, partition_index=tp.partition, error_code=kerr(code)))
                continue
            error = r.error
            if error == ErrorCode.OFFSET_NOT_AVAILABLE and version < 5:
                error = ErrorCode.LEADER_NOT_AVAILABLE  # what Kafka answers before v5 had the code
            rows.append(
                make(
                    partition_cls,
                    partition_index=tp.partition,
                    error_code=kerr(error),
                    timestamp=r.timestamp,
                    offset=r.offset,
                    leader_epoch=r.leader_epoch,
                )
            )
        topics.append(make(topic_cls, name=topic, partitions=tuple(rows)))
    return make(response_class(ApiKey.LIST_OFFSETS, version), throttle_time=NO_THROTTLE, topics=tuple(topics))


# -- InitProducerId ---------------------------------------------------------------------------


async def handle_init_producer_id(ctx: RequestContext, request: Any) -> Any:
    """A producer id and epoch for an idempotent (or transactional) producer. v2 is the flexible
    encoding; v3+ carries the producer id and epoch the producer holds (KIP-360: bump my epoch);
    v4 may answer PRODUCER_FENCED, which older versions get as INVALID_PRODUCER_EPOCH (KIP-588)."""
    try:
        r = await ctx.broker.init_producer_id(
            request.transactional_id,
            ms(request.transaction_timeout),
            int(getattr(request, "producer_id", -1)),
            int(getattr(request, "producer_epoch", -1)),
        )
        error, producer_id, producer_epoch = r.error, r.producer_id, r.producer_epoch
    except KafkaError as exc:
        error, producer_id, producer_epoch = exc.code, -1, -1
    if error == ErrorCode.PRODUCER_FENCED and ctx.api_version < 4:
        error = ErrorCode.INVALID_PRODUCER_EPOCH
    return make(
        response_class(ApiKey.INIT_PRODUCER_ID, ctx.api_version),
        throttle_time=NO_THROTTLE,
        error_code=kerr(error),
        producer_id=producer_id,
        producer_epoch=producer_epoch,
    )


# -- OffsetForLeaderEpoch ---------------------------------------------------------------------


async def handle_offset_for_leader_epoch(ctx: RequestContext, request: Any) -> Any:
    """End offset of each asked leader epoch (consumers validating their position, followers)."""
    version = ctx.api_version
    partitions: Sequence[OffsetForLeaderEpochPartition] = [
        OffsetForLeaderEpochPartition(TopicPartition(t.topic, p.partition), p.leader_epoch, p.current_leader_epoch)
        for t in request.topics
        for p in t.partitions
    ]
    results = await ctx.broker.offset_for_leader_epoch(getattr(request, "replica_id", -1), partitions)
    topic_cls = response_class(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, "OffsetForLeaderTopicResult")
    partition_cls = response_class(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, "EpochEndOffset")
    topics = []
    for topic, tps in _group_by_topic(p.tp for p in partitions):
        rows = []
        for tp in tps:
            r = results.get(tp)
            error = r.error if r is not None else ErrorCode.UNKNOWN_SERVER_ERROR
            rows.append(
                make(
                    partition_cls,
                    error_code=kerr(error),
                    partition=tp.partition,
                    leader_epoch=r.leader_epoch if r is not None else -1,
                    end_offset=r.end_offset if r is not None else -1,
                )
            )
        topics.append(make(topic_cls, topic=topic, partitions=tuple(rows)))
    return make(
        response_class(ApiKey.OFFSET_FOR_LEADER_EPOCH, version), throttle_time=NO_THROTTLE, topics=tuple(topics)
    )


# -- SaslHandshake, SaslAuthenticate -----------------------------------------------------------


async def handle_sasl_handshake(ctx: RequestContext, request: Any) -> Any:
    """A handshake that reaches the dispatcher comes on a listener without SASL or after the
    connection authenticated (a SASL listener's exchange runs before, in
    ``odradek.security.authenticator``): as Kafka's KafkaApis, ILLEGAL_SASL_STATE. A client set
    up for SASL against a PLAINTEXT listener so fails with an authentication error instead of
    waiting."""
    return make(
        response_class(ApiKey.SASL_HANDSHAKE, ctx.api_version),
        error_code=kerr(ErrorCode.ILLEGAL_SASL_STATE),
        mechanisms=(),
    )


async def handle_sasl_authenticate(ctx: RequestContext, request: Any) -> Any:
    """ILLEGAL_SASL_STATE, with Kafka's message (see :func:`handle_sasl_handshake`)."""
    return make(
        response_class(ApiKey.SASL_AUTHENTICATE, ctx.api_version),
        error_code=kerr(ErrorCode.ILLEGAL_SASL_STATE),
        error_message="SaslAuthenticate request received after successful authentication",
        auth_bytes=b"",
        session_lifetime=timedelta_ms(0),
    )


HANDLERS: dict[int, Handler] = {
    ApiKey.API_VERSIONS: Handler(ApiKey.API_VERSIONS, handle_api_versions, ordered=False),
    ApiKey.METADATA: Handler(ApiKey.METADATA, handle_metadata, ordered=True),  # may auto-create topics
    ApiKey.PRODUCE: Handler(ApiKey.PRODUCE, handle_produce, ordered=True),
    ApiKey.FETCH: Handler(ApiKey.FETCH, handle_fetch, ordered=False),
    ApiKey.LIST_OFFSETS: Handler(ApiKey.LIST_OFFSETS, handle_list_offsets, ordered=False),
    ApiKey.INIT_PRODUCER_ID: Handler(ApiKey.INIT_PRODUCER_ID, handle_init_producer_id, ordered=True),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: Handler(
        ApiKey.OFFSET_FOR_LEADER_EPOCH, handle_offset_for_leader_epoch, ordered=False
    ),
    ApiKey.SASL_HANDSHAKE: Handler(ApiKey.SASL_HANDSHAKE, handle_sasl_handshake, ordered=False),
    ApiKey.SASL_AUTHENTICATE: Handler(ApiKey.SASL_AUTHENTICATE, handle_sasl_authenticate, ordered=False),
}

__all__ = ["HANDLERS"]
