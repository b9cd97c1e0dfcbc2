"""Handlers for transactions: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit,
WriteTxnMarkers (inter-broker, and admin aborts of hanging transactions), and with them the
KIP-664 tooling of :mod:`.txn_tools`.

They call the broker's :class:`odradek.broker.txn.TransactionCoordinator`
(``broker.transaction_coordinator``) and, for TxnOffsetCommit, its pending-offsets store next to
the group coordinator (``broker.txn_offsets``). FindCoordinator (key type 1) and InitProducerId
are answered by the groups and core handlers, which defer to the transaction coordinator. As in
Kafka's ``KafkaApis``, requests below v2 get INVALID_PRODUCER_EPOCH where newer ones get
PRODUCER_FENCED (KIP-588).
"""

from __future__ import annotations

from typing import Any

import trio

from odradek.broker.group import OffsetAndMetadata
from odradek.errors import ErrorCode
from odradek.interfaces import TopicPartition
from odradek.protocol import ApiKey
from odradek.records import ControlRecordType

from . import Handler, RequestContext, txn_tools
from ._kio import NO_THROTTLE, kerr, make, response_class
from .groups import existing_partition_counts

#: first version of these APIs that may carry PRODUCER_FENCED
FENCED_MIN_VERSION = 2


def _fenced(ctx: RequestContext, error: ErrorCode) -> ErrorCode:
    if error == ErrorCode.PRODUCER_FENCED and ctx.api_version < FENCED_MIN_VERSION:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error


def _coordinator(ctx: RequestContext) -> Any:
    return getattr(ctx.broker, "transaction_coordinator", None)


async def handle_add_partitions_to_txn(ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    cls = response_class(ApiKey.ADD_PARTITIONS_TO_TXN, version)
    topic_cls = response_class(ApiKey.ADD_PARTITIONS_TO_TXN, version, "AddPartitionsToTxnTopicResult")
    part_cls = response_class(ApiKey.ADD_PARTITIONS_TO_TXN, version, "AddPartitionsToTxnPartitionResult")
    topics = request.v3_and_below_topics
    wanted = [TopicPartition(t.name, int(p)) for t in topics for p in t.partitions]
    coordinator = _coordinator(ctx)
    if coordinator is None:
        errors = dict.fromkeys(wanted, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    else:
        errors = await coordinator.add_partitions(
            request.v3_and_below_transactional_id,
            int(request.v3_and_below_producer_id),
            int(request.v3_and_below_producer_epoch),
            wanted,
        )
    results = tuple(
        make(
            topic_cls,
            name=t.name,
            results_by_partition=tuple(
                make(
                    part_cls,
                    partition_index=p,
                    partition_error_code=kerr(_fenced(ctx, errors[TopicPartition(t.name, int(p))])),
                )
                for p in t.partitions
            ),
        )
        for t in topics
    )
    return make(cls, throttle_time=NO_THROTTLE, results_by_topic_v3_and_below=results)


async def handle_add_offsets_to_txn(ctx: RequestContext, request: Any) -> Any:
    coordinator = _coordinator(ctx)
    if coordinator is None:
        error = ErrorCode.COORDINATOR_NOT_AVAILABLE
    else:
        error = await coordinator.add_offsets(
            request.transactional_id, int(request.producer_id), int(request.producer_epoch), request.group_id
        )
    cls = response_class(ApiKey.ADD_OFFSETS_TO_TXN, ctx.api_version)
    return make(cls, throttle_time=NO_THROTTLE, error_code=kerr(_fenced(ctx, error)))


async def handle_end_txn(ctx: RequestContext, request: Any) -> Any:
    coordinator = _coordinator(ctx)
    if coordinator is None:
        error = ErrorCode.COORDINATOR_NOT_AVAILABLE
    else:
        error = await coordinator.end_transaction(
            request.transactional_id, int(request.producer_id), int(request.producer_epoch), bool(request.committed)
        )
    cls = response_class(ApiKey.END_TXN, ctx.api_version)
    return make(cls, throttle_time=NO_THROTTLE, error_code=kerr(_fenced(ctx, error)))


async def handle_txn_offset_commit(ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    cls = response_class(ApiKey.TXN_OFFSET_COMMIT, version)
    topic_cls = response_class(ApiKey.TXN_OFFSET_COMMIT, version, "TxnOffsetCommitResponseTopic")
    part_cls = response_class(ApiKey.TXN_OFFSET_COMMIT, version, "TxnOffsetCommitResponsePartition")
    # Kafka's KafkaApis: partitions the cluster does not have are UNKNOWN_TOPIC_OR_PARTITION
    # (a Java producer retries them), the rest go to the coordinator
    counts = await existing_partition_counts(ctx, [t.name for t in request.topics])
    unknown: dict[TopicPartition, ErrorCode] = {}
    offsets: dict[TopicPartition, OffsetAndMetadata] = {}
    for t in request.topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, int(p.partition_index))
            if not 0 <= tp.partition < counts.get(t.name, 0):
                unknown[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            epoch = int(getattr(p, "committed_leader_epoch", -1))
            offsets[tp] = OffsetAndMetadata(int(p.committed_offset), epoch, p.committed_metadata or "")
    coordinator = _coordinator(ctx)
    pending = getattr(ctx.broker, "txn_offsets", None)
    errors: dict[TopicPartition, ErrorCode]
    fenced = (
        coordinator.check_txn_offset_commit(
            request.transactional_id, int(request.producer_id), int(request.producer_epoch), request.group_id
        )
        if coordinator is not None
        else None
    )
    if pending is None:
        errors = dict.fromkeys(offsets, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    elif fenced is not None:
        errors = dict.fromkeys(offsets, fenced)
    elif offsets:
        errors = await pending.commit(
            request.group_id,
            int(request.producer_id),
            int(request.producer_epoch),
            getattr(request, "member_id", "") or "",
            getattr(request, "group_instance_id", None),
            int(getattr(request, "generation_id", -1)),
            offsets,
        )
    else:
        errors = {}
    if version < 2:
        # Kafka's KAFKA-7296 workaround: producers before 2.0 (v0-1) fail on LOAD_IN_PROGRESS
        errors = {
            tp: ErrorCode.COORDINATOR_NOT_AVAILABLE if e == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS else e
            for tp, e in errors.items()
        }
    errors.update(unknown)
    topics = tuple(
        make(
            topic_cls,
            name=t.name,
            partitions=tuple(
                make(
                    part_cls,
                    partition_index=p.partition_index,
                    error_code=kerr(_fenced(ctx, errors[TopicPartition(t.name, int(p.partition_index))])),
                )
                for p in t.partitions
            ),
        )
        for t in request.topics
    )
    return make(cls, throttle_time=NO_THROTTLE, topics=topics)


async def handle_write_txn_markers(ctx: RequestContext, request: Any) -> Any:
    """WriteTxnMarkers (v0-1), sent by a transaction coordinator to a partition leader, or by an
    admin client aborting a hanging transaction (kafka-python's ``abort_transaction`` sends v1;
    its marker is checked and written exactly as a coordinator's, as Kafka does): each
    marker is appended as leader and replicated (acks=all) in every partition it names, the
    markers of a request concurrently; per partition Kafka's errors (UNKNOWN_TOPIC_OR_PARTITION
    not hosted here, NOT_LEADER_OR_FOLLOWER, INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED,
    ...). A marker in a ``__consumer_offsets`` partition settles the producer's pending
    TxnOffsetCommit offsets there (see ``odradek.broker.txn.markers``)."""
    version = ctx.api_version
    cls = response_class(ApiKey.WRITE_TXN_MARKERS, version)
    result_cls = response_class(ApiKey.WRITE_TXN_MARKERS, version, "WritableTxnMarkerResult")
    topic_cls = response_class(ApiKey.WRITE_TXN_MARKERS, version, "WritableTxnMarkerTopicResult")
    part_cls = response_class(ApiKey.WRITE_TXN_MARKERS, version, "WritableTxnMarkerPartitionResult")
    appender = getattr(ctx.broker, "txn_markers", None)
    outcomes: list[dict[TopicPartition, ErrorCode]] = [{} for _ in request.markers]

    async def write(i: int, marker: Any) -> None:
        wanted = [TopicPartition(t.name, int(p)) for t in marker.topics for p in t.partition_indexes]
        if appender is None:
            outcomes[i] = dict.fromkeys(wanted, ErrorCode.COORDINATOR_NOT_AVAILABLE)
            return
        outcomes[i] = await appender.append_markers(
            int(marker.producer_id),
            int(marker.producer_epoch),
            int(marker.coordinator_epoch),
            ControlRecordType.COMMIT if marker.transaction_result else ControlRecordType.ABORT,
            wanted,
        )

    async with trio.open_nursery() as nursery:
        for i, marker in enumerate(request.markers):
            nursery.start_soon(write, i, marker)
    markers = tuple(
        make(
            result_cls,
            producer_id=marker.producer_id,
            topics=tuple(
                make(
                    topic_cls,
                    name=t.name,
                    partitions=tuple(
                        make(
                            part_cls,
                            partition_index=p,
                            error_code=kerr(
                                outcomes[i].get(TopicPartition(t.name, int(p)), ErrorCode.UNKNOWN_SERVER_ERROR)
                            ),
                        )
                        for p in t.partition_indexes
                    ),
                )
                for t in marker.topics
            ),
        )
        for i, marker in enumerate(request.markers)
    )
    return make(cls, markers=markers)


HANDLERS = {
    ApiKey.ADD_PARTITIONS_TO_TXN: Handler(ApiKey.ADD_PARTITIONS_TO_TXN, handle_add_partitions_to_txn, ordered=True),
    ApiKey.ADD_OFFSETS_TO_TXN: Handler(ApiKey.ADD_OFFSETS_TO_TXN, handle_add_offsets_to_txn, ordered=True),
    ApiKey.END_TXN: Handler(ApiKey.END_TXN, handle_end_txn, ordered=True),
    ApiKey.TXN_OFFSET_COMMIT: Handler(ApiKey.TXN_OFFSET_COMMIT, handle_txn_offset_commit, ordered=True),
    ApiKey.WRITE_TXN_MARKERS: Handler(ApiKey.WRITE_TXN_MARKERS, handle_write_txn_markers, ordered=True),
    **txn_tools.HANDLERS,  # KIP-664 tooling: DescribeProducers, DescribeTransactions, ListTransactions
}

__all__ = ["HANDLERS"]
