"""Handlers for the transaction tooling of KIP-664 (Kafka's ``kafka-transactions.sh``, kafka-python's
``list_transactions`` / ``describe_transactions`` / ``describe_producers``): DescribeProducers
(61) v0, DescribeTransactions (65) v0, ListTransactions (66) v0-1. Every version is flexible.

An operator finds a transaction left open in a partition (its producer gone, the last stable
offset stuck, read_committed consumers stalled) with these, then aborts it with WriteTxnMarkers
(``odradek.plugins.transport_tcp.apis.txn``). No ACLs exist, so nothing is filtered by
authorisation, as a Kafka broker without an authorizer answers.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from dataclasses import asdict
from typing import Any

from odradek.errors import ErrorCode
from odradek.interfaces import TopicPartition
from odradek.pacing import PACE, paced
from odradek.protocol import ApiKey, timedelta_ms

from . import Handler, RequestContext
from ._kio import NO_THROTTLE, kerr, make, response_class


def _epoch_ms(value: int) -> datetime.datetime:
    """A non-nullable kio ``datetime_i64`` from ms since the epoch; -1 (no open transaction)
    stays -1 on the wire."""
    return datetime.datetime.fromtimestamp(value / 1000, tz=datetime.UTC)


def _coordinator(ctx: RequestContext) -> Any:
    return getattr(ctx.broker, "transaction_coordinator", None)


async def handle_describe_producers(ctx: RequestContext, request: Any) -> Any:
    """Per partition, the producers this broker's replica remembers (see
    ``BrokerCore.describe_producers`` for the errors)."""
    version = ctx.api_version
    cls = response_class(ApiKey.DESCRIBE_PRODUCERS, version)
    topic_cls = response_class(ApiKey.DESCRIBE_PRODUCERS, version, "TopicResponse")
    part_cls = response_class(ApiKey.DESCRIBE_PRODUCERS, version, "PartitionResponse")
    producer_cls = response_class(ApiKey.DESCRIBE_PRODUCERS, version, "ProducerState")
    wanted = [TopicPartition(t.name, int(p)) for t in request.topics for p in t.partition_indexes]
    results = await ctx.broker.describe_producers(wanted)

    def partition(topic: str, index: int) -> Any:
        r = results[TopicPartition(topic, int(index))]
        # ActiveProducer's fields are named as kio's ProducerState's
        producers = tuple(make(producer_cls, **asdict(a)) for a in r.active_producers)
        return make(
            part_cls,
            partition_index=index,
            error_code=kerr(r.error),
            error_message=r.error_message,
            active_producers=producers,
        )

    topics = []
    async for t in paced(request.topics, PACE // 8):  # a topic may name many partitions
        topics.append(make(topic_cls, name=t.name, partitions=tuple(partition(t.name, p) for p in t.partition_indexes)))
    return make(cls, throttle_time=NO_THROTTLE, topics=tuple(topics))


async def handle_list_transactions(ctx: RequestContext, request: Any) -> Any:
    """The transactional ids this broker coordinates, filtered by state names, producer ids,
    (v1, KIP-994) how long their transaction has been running and (v2, KIP-1152) a pattern their
    whole id matches."""
    version = ctx.api_version
    cls = response_class(ApiKey.LIST_TRANSACTIONS, version)
    state_cls = response_class(ApiKey.LIST_TRANSACTIONS, version, "TransactionState")
    coordinator = _coordinator(ctx)
    if coordinator is None:
        return make(cls, throttle_time=NO_THROTTLE, error_code=kerr(ErrorCode.COORDINATOR_NOT_AVAILABLE))
    result = coordinator.list_transactions(
        tuple(request.state_filters),
        tuple(int(p) for p in request.producer_id_filters),
        int(getattr(request, "duration_filter", -1)),
        getattr(request, "transactional_id_pattern", None),
    )
    return make(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=kerr(result.error),
        unknown_state_filters=result.unknown_state_filters,
        transaction_states=tuple(
            make(state_cls, transactional_id=t.transactional_id, producer_id=t.producer_id, transaction_state=t.state)
            for t in result.transactions
        ),
    )


async def handle_describe_transactions(ctx: RequestContext, request: Any) -> Any:
    """Each id's state from its coordinator (this broker for the ids it coordinates;
    NOT_COORDINATOR for the others, TRANSACTIONAL_ID_NOT_FOUND for unknown ids)."""
    version = ctx.api_version
    cls = response_class(ApiKey.DESCRIBE_TRANSACTIONS, version)
    state_cls = response_class(ApiKey.DESCRIBE_TRANSACTIONS, version, "TransactionState")
    topic_cls = response_class(ApiKey.DESCRIBE_TRANSACTIONS, version, "TopicData")
    coordinator = _coordinator(ctx)
    states = []
    async for tid in paced(request.transactional_ids):
        if coordinator is None:
            error, d = ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        else:
            d = coordinator.describe_transaction(tid)
            error = d.error
        by_topic: dict[str, list[int]] = defaultdict(list)
        for tp in d.partitions if d is not None else ():
            by_topic[tp.topic].append(tp.partition)
        states.append(
            make(
                state_cls,
                error_code=kerr(error),
                transactional_id=tid,
                transaction_state=d.state if d is not None else "",
                transaction_timeout=timedelta_ms(d.timeout_ms if d is not None else 0),
                transaction_start_time=_epoch_ms(d.start_time_ms if d is not None else 0),
                producer_id=d.producer_id if d is not None else 0,
                producer_epoch=d.producer_epoch if d is not None else 0,
                topics=tuple(make(topic_cls, topic=name, partitions=tuple(ps)) for name, ps in by_topic.items()),
            )
        )
    return make(cls, throttle_time=NO_THROTTLE, transaction_states=tuple(states))


HANDLERS = {
    ApiKey.DESCRIBE_PRODUCERS: Handler(ApiKey.DESCRIBE_PRODUCERS, handle_describe_producers),
    ApiKey.DESCRIBE_TRANSACTIONS: Handler(ApiKey.DESCRIBE_TRANSACTIONS, handle_describe_transactions),
    ApiKey.LIST_TRANSACTIONS: Handler(ApiKey.LIST_TRANSACTIONS, handle_list_transactions),
}

__all__ = ["HANDLERS"]
