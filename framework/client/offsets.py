"""ListOffsets for consumer and admin: earliest, latest, max timestamp, earliest local, latest
tiered or by timestamp, routed to each leader.

Kafka answers ListOffsets on the partition's leader only, so the partitions are grouped by leader
and asked in parallel; leader errors refresh metadata and retry with backoff until the timeout.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import trio

from ..errors import ErrorCode, KafkaError
from ..interfaces import TopicPartition
from ..protocol import ApiKey
from .connection import BrokerConnection, NetworkError
from .network import NetworkClient
from .requests import error_code, make_request

#: ListOffsets special timestamps
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
#: KIP-405: the first offset the leader keeps locally (tiered storage), ListOffsets v8+
EARLIEST_LOCAL_TIMESTAMP = -4
#: KIP-1005: the highest offset in remote storage (-1: none), ListOffsets v9+
LATEST_TIERED_TIMESTAMP = -5
#: the first ListOffsets version that knows each special timestamp (Kafka's
#: ListOffsetsRequest.Builder.forConsumer picks the same)
_MIN_VERSIONS = {MAX_TIMESTAMP: 7, EARLIEST_LOCAL_TIMESTAMP: 8, LATEST_TIERED_TIMESTAMP: 9}


class OffsetAndTimestamp(NamedTuple):
    """What ListOffsets found: ``offset`` -1 when no record has a timestamp that late."""

    offset: int
    timestamp: int
    leader_epoch: int = -1


async def list_offsets(
    network: NetworkClient,
    timestamps: Mapping[TopicPartition, int],
    *,
    isolation_level: int = 0,
    timeout_s: float,
) -> dict[TopicPartition, OffsetAndTimestamp]:
    """Offsets for ``timestamps`` (-2 earliest, -1 latest, -3 max timestamp, -4 earliest local,
    -5 latest tiered, or ms). A broker too old for a special timestamp fails the call with
    UNSUPPORTED_VERSION."""
    remaining = dict(timestamps)
    out: dict[TopicPartition, OffsetAndTimestamp] = {}
    network.add_topics({tp.topic for tp in remaining})

    async def attempt() -> None:
        if any(network.cluster.leader_for(tp) < 0 for tp in remaining):
            await network.refresh_metadata({tp.topic for tp in remaining})
        by_leader: dict[int, dict[TopicPartition, int]] = {}
        missing: list[TopicPartition] = []
        for tp, ts in remaining.items():
            leader = network.cluster.leader_for(tp)
            if leader < 0:
                missing.append(tp)
            else:
                by_leader.setdefault(leader, {})[tp] = ts
        errors: list[KafkaError] = []

        async def ask(node: int, parts: dict[TopicPartition, int]) -> None:
            try:
                found = await _list_offsets_on(network, node, parts, isolation_level, int(timeout_s * 1000))
            except KafkaError as exc:
                errors.append(exc)
                return
            for tp, result in found.items():
                if isinstance(result, KafkaError):
                    errors.append(result)
                else:
                    out[tp] = result
                    remaining.pop(tp, None)

        async with trio.open_nursery() as nursery:
            for node, parts in by_leader.items():
                nursery.start_soon(ask, node, parts)
        if missing:
            topic = network.cluster.topics.get(missing[0].topic)
            if topic is not None and topic.error is not ErrorCode.NONE and not topic.error.retriable:
                raise KafkaError(f"ListOffsets for {missing[0]}: {topic.error.name}", code=topic.error)
            if topic is not None and topic.error is ErrorCode.NONE and missing[0].partition not in topic.partitions:
                raise KafkaError(f"partition {missing[0]} does not exist", code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            errors.append(KafkaError(f"no leader known for {missing[0]}", code=ErrorCode.LEADER_NOT_AVAILABLE))
        fatal = [e for e in errors if not e.retriable]
        if fatal:
            raise fatal[0]
        if errors:
            raise errors[0]

    if remaining:
        await network.call_with_retries(attempt, timeout_s=timeout_s, what="ListOffsets")
    return out


async def _list_offsets_on(
    network: NetworkClient, node: int, parts: Mapping[TopicPartition, int], isolation_level: int, timeout_ms: int
) -> dict[TopicPartition, OffsetAndTimestamp | KafkaError]:
    """One ListOffsets to ``node``; v10+ carries the call's timeout (KIP-1075: how long the broker
    may wait on remote storage), as Kafka's admin client sends its own."""
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for tp, ts in parts.items():
        by_topic.setdefault(tp.topic, []).append(
            {"partition_index": tp.partition, "timestamp": ts, "current_leader_epoch": -1, "max_num_offsets": 1}
        )

    def build(conn: BrokerConnection) -> Any:
        needed = max((_MIN_VERSIONS.get(ts, 1) for ts in parts.values()), default=1)
        version = conn.version(ApiKey.LIST_OFFSETS, min_version=needed)
        return make_request(
            ApiKey.LIST_OFFSETS,
            version,
            replica_id=-1,
            isolation_level=isolation_level,
            topics=[{"name": t, "partitions": ps} for t, ps in by_topic.items()],
            timeout=timeout_ms,
        )

    try:
        response = await network.send(node, build)
    except NetworkError:
        network.request_update()
        raise
    out: dict[TopicPartition, OffsetAndTimestamp | KafkaError] = {}
    for topic in response.topics:
        for p in topic.partitions:
            tp = TopicPartition(topic.name, int(p.partition_index))
            code = error_code(p.error_code)
            if code is ErrorCode.NONE:
                out[tp] = OffsetAndTimestamp(int(p.offset), int(p.timestamp), int(getattr(p, "leader_epoch", -1)))
            else:
                if code in (
                    ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    ErrorCode.LEADER_NOT_AVAILABLE,
                    ErrorCode.FENCED_LEADER_EPOCH,
                ):
                    network.request_update()
                out[tp] = KafkaError(f"ListOffsets for {tp} failed with {code.name}", code=code)
    return out
