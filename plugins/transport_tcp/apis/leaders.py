"""Who leads a partition now, for answers that say "not here" (KIP-951).

Produce v10+ and Fetch v16+ answer NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH with the
partition's current leader and epoch as this broker's metadata cache knows them, and the
endpoints (on the request's listener) of those leaders, so that a client moves to the new leader
without a Metadata round trip. Kafka's ``KafkaApis.getCurrentLeader``: a partition the cache does
not know gets leader -1 and epoch -1, a leader without an endpoint on the listener no node entry.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from odradek.errors import ErrorCode
from odradek.interfaces import TopicPartition
from odradek.protocol import NodeEndpoint

#: The errors whose answers carry the current leader (KIP-951).
LEADERSHIP_ERRORS = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH})

NO_LEADER = (-1, -1)


def current_leaders(
    broker: Any, listener_name: str, partitions: Iterable[TopicPartition]
) -> tuple[dict[TopicPartition, tuple[int, int]], list[NodeEndpoint]]:
    """(leader id, leader epoch) of each partition, and the endpoints of the known leaders on
    ``listener_name``, ordered by broker id."""
    cache: Any = getattr(broker, "metadata_cache", None)
    leaders: dict[TopicPartition, tuple[int, int]] = {}
    nodes: dict[int, NodeEndpoint] = {}
    for tp in partitions:
        state = cache.partition_state(tp) if cache is not None else None
        if state is None:
            leaders[tp] = NO_LEADER
            continue
        leaders[tp] = (state.leader, state.leader_epoch)
        if state.leader >= 0 and state.leader not in nodes:
            endpoint = cache.endpoint_for(state.leader, listener_name)
            if endpoint is not None:
                nodes[state.leader] = NodeEndpoint(state.leader, endpoint[0], endpoint[1], cache.rack_of(state.leader))
    return leaders, [nodes[i] for i in sorted(nodes)]


__all__ = ["LEADERSHIP_ERRORS", "NO_LEADER", "current_leaders"]
