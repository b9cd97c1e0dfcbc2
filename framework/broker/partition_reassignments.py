"""AlterPartitionReassignments and ListPartitionReassignments (KIP-455) as a Kafka broker in
ZooKeeper mode answers them.

Both go to the controller (kafka-python and the Java admin client send them there; Metadata
names it). A broker that is not the controller answers NOT_CONTROLLER for the whole request, as
Kafka's ZooKeeper-mode broker does (it does not forward them), and the client retries on the
controller. Alter answers once each change is written (:meth:`~odradek.broker.controller.
Controller.alter_reassignments`), not when the partition has moved; List answers from the
controller's metadata cache, which Alter refreshes before it answers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..errors import ErrorCode, KafkaError
from ..interfaces import TopicPartition
from .api import OngoingReassignment, ReassignmentResult
from .controller import Controller
from .metadata_cache import MetadataCache


def require_controller(controller: Controller | None) -> Controller:
    """``controller`` while it holds the controllership; NOT_CONTROLLER (the request's error)
    otherwise."""
    if controller is None or controller.leadership is None or controller.cache.halted is not None:
        raise KafkaError("this broker is not the controller", code=ErrorCode.NOT_CONTROLLER)
    return controller


async def alter_partition_reassignments(
    controller: Controller | None,
    reassignments: Mapping[TopicPartition, Sequence[int] | None],
    *,
    allow_replication_factor_change: bool = True,
) -> dict[TopicPartition, ReassignmentResult]:
    """Each named partition's answer (see :func:`~odradek.broker.reassignment.alter`)."""
    return await require_controller(controller).alter_reassignments(
        reassignments, allow_replication_factor_change=allow_replication_factor_change
    )


def list_partition_reassignments(
    controller: Controller | None, cache: MetadataCache, partitions: Mapping[str, Sequence[int]] | None
) -> dict[TopicPartition, OngoingReassignment]:
    """The reassignments in progress among ``partitions`` (None: every topic's), in topic and
    partition order; a named partition that does not exist or is not being reassigned is left
    out, as Kafka's controller leaves it out."""
    require_controller(controller)
    names = sorted(cache.topics) if partitions is None else list(dict.fromkeys(partitions))
    out: dict[TopicPartition, OngoingReassignment] = {}
    for name in names:
        topic = cache.topics.get(name)
        if topic is None or not topic.reassigning:
            continue
        wanted = sorted(topic.reassigning) if partitions is None else list(dict.fromkeys(partitions[name]))
        for p in wanted:
            moving = topic.reassigning.get(p)
            if moving is not None and p in topic.assignment:
                out[TopicPartition(name, p)] = OngoingReassignment(topic.assignment[p], *moving)
    return out


__all__ = ["alter_partition_reassignments", "list_partition_reassignments", "require_controller"]
