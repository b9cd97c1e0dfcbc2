"""ElectLeaders (KIP-183, KIP-460) as a Kafka 3.x broker in ZooKeeper mode answers it.

The request goes to the controller (clients send it there; Metadata names it). The controller
decides and writes the elections (:meth:`~odradek.broker.controller.Controller.elect_requested`)
and the answer waits, up to the request's timeout, until this broker's metadata cache names
each elected leader (Kafka's ``DelayedElectLeader``); partitions it does not see by then are
answered REQUEST_TIMED_OUT (the election itself is not undone). The election is not bounded by
the timeout, as Kafka's controller does not bound it: a timeout of 0 still elects and answers
at once with what is already visible.

A broker that is not the controller answers NOT_CONTROLLER for every partition (Kafka's ZooKeeper
mode does not forward ElectLeaders to the controller). When the request names no partitions
(``topic_partitions`` null) every partition this broker knows is elected and, as in Kafka, the
answer lists only the partitions whose result is not ELECTION_NOT_NEEDED.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import trio

from ..errors import ErrorCode
from ..interfaces import TopicPartition
from .api import ElectionType, ElectLeadersResult
from .controller import Controller
from .metadata_cache import MetadataCache

DONE = ElectLeadersResult(ErrorCode.NONE)


async def elect_leaders(
    controller: Controller | None,
    cache: MetadataCache,
    election_type: ElectionType,
    partitions: Sequence[TopicPartition] | None,
    timeout_ms: int,
) -> dict[TopicPartition, ElectLeadersResult]:
    """The answer to one ElectLeaders request, per partition in request order (each partition
    once)."""
    deadline = trio.current_time() + max(timeout_ms, 0) / 1000
    asked = all_partitions(cache) if partitions is None else list(dict.fromkeys(partitions))
    if controller is None:  # not started yet: no broker id holds the election here
        results = {tp: ElectLeadersResult(ErrorCode.NOT_CONTROLLER, "the controller is not running") for tp in asked}
    else:
        elected, results = await controller.elect_requested(election_type, asked)
        results.update(await await_leaders(cache, elected, deadline))
    answer = {tp: results[tp] for tp in asked}
    if partitions is None:
        return {tp: r for tp, r in answer.items() if r.error is not ErrorCode.ELECTION_NOT_NEEDED}
    return answer


def all_partitions(cache: MetadataCache) -> list[TopicPartition]:
    """Every partition of every topic this broker knows, internal topics included (Kafka
    elects across its metadata cache's partitions when the request names none)."""
    return [TopicPartition(name, p) for name in sorted(cache.topics) for p in sorted(cache.topics[name].assignment)]


async def await_leaders(
    cache: MetadataCache, expected: Mapping[TopicPartition, int], deadline: float
) -> dict[TopicPartition, ElectLeadersResult]:
    """NONE for each partition once ``cache`` names its expected leader, REQUEST_TIMED_OUT for
    those it does not by ``deadline`` (checked once even when the deadline has passed)."""
    waiting = dict(expected)
    results: dict[TopicPartition, ElectLeadersResult] = {}
    with trio.move_on_at(deadline):
        while True:
            for tp, leader in list(waiting.items()):
                if cache.leader_of(tp) == leader:
                    results[tp] = DONE
                    del waiting[tp]
            if not waiting:
                break
            await cache.next_refresh()
    for tp, leader in waiting.items():
        results[tp] = ElectLeadersResult(
            ErrorCode.REQUEST_TIMED_OUT, f"broker {leader} was elected but not seen as leader within the timeout"
        )
    return results


__all__ = ["all_partitions", "await_leaders", "elect_leaders"]
