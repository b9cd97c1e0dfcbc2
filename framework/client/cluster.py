"""What the client knows about the cluster: brokers, topics, partition leaders.

Built from Metadata responses and replaced wholesale on every refresh (an immutable snapshot is
cheap to share between the producer's send path, the sender task and the fetcher without locks).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import ErrorCode
from ..interfaces import TopicPartition
from .requests import error_code


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A broker as Metadata describes it."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition's leadership; ``leader`` is -1 while no leader is available."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()
    error: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic as Metadata describes it (``error`` is set for unknown or leaderless topics)."""

    name: str
    error: ErrorCode
    is_internal: bool
    partitions: Mapping[int, PartitionInfo] = field(default_factory=dict)
    #: the topic's id (KIP-516; Metadata v10+), None when the broker gave none
    topic_id: uuid.UUID | None = None

    @property
    def num_partitions(self) -> int:
        return len(self.partitions)


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """One Metadata response's view of the cluster."""

    brokers: Mapping[int, BrokerInfo] = field(default_factory=dict)
    topics: Mapping[str, TopicInfo] = field(default_factory=dict)
    controller_id: int = -1
    cluster_id: str | None = None
    #: topic -> partition count for topics without error (the producer's per-record lookup)
    partition_counts: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        counts = {n: len(t.partitions) for n, t in self.topics.items() if t.error is ErrorCode.NONE and t.partitions}
        object.__setattr__(self, "partition_counts", counts)

    def leader_for(self, tp: TopicPartition) -> int:
        """Node id of ``tp``'s leader, -1 when unknown."""
        topic = self.topics.get(tp.topic)
        if topic is None:
            return -1
        p = topic.partitions.get(tp.partition)
        return -1 if p is None else p.leader

    def leader_epoch(self, tp: TopicPartition) -> int:
        """``tp``'s leader epoch as Metadata (or a KIP-951 hint) told it, -1 when unknown."""
        topic = self.topics.get(tp.topic)
        p = None if topic is None else topic.partitions.get(tp.partition)
        return -1 if p is None else p.leader_epoch

    def topic_id(self, topic: str) -> uuid.UUID | None:
        """``topic``'s id (KIP-516), None when unknown (no id from Metadata, or no such topic)."""
        info = self.topics.get(topic)
        return None if info is None else info.topic_id

    def partitions_for(self, topic: str) -> int:
        """Number of partitions of ``topic`` (0 when unknown or in error)."""
        return self.partition_counts.get(topic, 0)

    def merged(self, update: ClusterSnapshot, refreshed: Iterable[str] | None) -> ClusterSnapshot:
        """``update`` plus the topics of this snapshot it did not refresh (``refreshed`` None: all)."""
        if refreshed is None:
            return update
        topics = dict(self.topics)
        for name in refreshed:
            topics.pop(name, None)
        topics.update(update.topics)
        return ClusterSnapshot(update.brokers, topics, update.controller_id, update.cluster_id)

    def with_leaders(
        self, hints: Mapping[TopicPartition, tuple[int, int]], nodes: Iterable[BrokerInfo]
    ) -> tuple[ClusterSnapshot, set[TopicPartition]]:
        """This snapshot with the leaders a Produce or Fetch answer named (KIP-951: partition ->
        (leader id, leader epoch), and the brokers' endpoints), and the partitions that moved.
        As the Java client's ``Metadata.updatePartitionLeadership``: a hint counts only when its
        epoch is newer than the known one and its leader is a known broker (from ``nodes`` or
        already); the rest of the snapshot is kept until the next Metadata answer."""
        brokers = dict(self.brokers)
        brokers.update((n.node_id, n) for n in nodes)
        topics = dict(self.topics)
        moved: set[TopicPartition] = set()
        for tp, (leader, epoch) in hints.items():
            topic = topics.get(tp.topic)
            current = None if topic is None else topic.partitions.get(tp.partition)
            if topic is None or current is None or leader < 0 or leader not in brokers or epoch <= current.leader_epoch:
                continue
            partitions = {**topic.partitions, tp.partition: replace(current, leader=leader, leader_epoch=epoch)}
            topics[tp.topic] = replace(topic, partitions=partitions)
            moved.add(tp)
        if not moved:
            return self, moved
        return ClusterSnapshot(brokers, topics, self.controller_id, self.cluster_id), moved


def changed_topic_ids(
    known: Mapping[str, uuid.UUID], update: ClusterSnapshot
) -> dict[str, tuple[uuid.UUID, uuid.UUID]]:
    """The topics ``update`` names under another id than the last one ``known`` for them:
    name -> (old id, new id). A topic deleted and created again keeps its name and gets a new
    id; only the id tells the two apart. ``known`` is every id seen so far, so a topic that
    vanished from a Metadata answer meanwhile (deleted, not yet created again) still counts; a
    topic seen without an id is not counted."""
    changed: dict[str, tuple[uuid.UUID, uuid.UUID]] = {}
    for name, info in update.topics.items():
        old = known.get(name)
        if old is not None and info.topic_id is not None and old != info.topic_id:
            changed[name] = (old, info.topic_id)
    return changed


def snapshot_from_metadata(response: Any) -> ClusterSnapshot:
    """A snapshot from a kio Metadata response (any version 0-12; v10+ carry topic ids, kio
    reads the all-zero id of a topic without one as None)."""
    brokers = {
        int(b.node_id): BrokerInfo(int(b.node_id), b.host, int(b.port), getattr(b, "rack", None))
        for b in response.brokers
    }
    topics: dict[str, TopicInfo] = {}
    for t in response.topics:
        if t.name is None:
            continue
        parts: dict[int, PartitionInfo] = {}
        for p in t.partitions:
            parts[int(p.partition_index)] = PartitionInfo(
                topic=t.name,
                partition=int(p.partition_index),
                leader=int(p.leader_id),
                leader_epoch=int(getattr(p, "leader_epoch", -1)),
                replicas=tuple(int(r) for r in p.replica_nodes),
                isr=tuple(int(r) for r in p.isr_nodes),
                offline_replicas=tuple(int(r) for r in getattr(p, "offline_replicas", ())),
                error=error_code(p.error_code),
            )
        topics[t.name] = TopicInfo(
            name=t.name,
            error=error_code(t.error_code),
            is_internal=bool(getattr(t, "is_internal", False)),
            partitions=dict(sorted(parts.items())),
            topic_id=getattr(t, "topic_id", None),
        )
    return ClusterSnapshot(
        brokers=brokers,
        topics=topics,
        controller_id=int(getattr(response, "controller_id", -1)),
        cluster_id=getattr(response, "cluster_id", None),
    )
