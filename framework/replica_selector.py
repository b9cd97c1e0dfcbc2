"""Fetch from the closest replica (KIP-392): the replica selector role and its built-ins.

A consumer that sends Fetch v11+ names its rack (``client.rack``). When ``replica.selector.class``
names a selector, the broker asks it, for each partition the consumer fetches, which replica that
consumer should read from: the leader answers a partition whose preferred replica is another one
with ``preferred_read_replica`` set and no records, and the consumer moves its fetches there.

The interface is Kafka's ``ReplicaSelector``: what is known of the client (:class:`ClientMetadata`)
and of the partition's replicas (:class:`PartitionView`) in, a :class:`ReplicaView` (or None: the
leader) out. The broker only offers replicas it may send a consumer to (see
:meth:`odradek.broker.replica_manager.ReplicaManager.preferred_read_replica`); a selector picks
among them. Selectors are registered with ``odradek_register_replica_selectors`` (classes with a
``name``, made with no arguments, one per broker) and must be quick and synchronous: they run
for every partition of every consumer Fetch.

Built-ins: ``leader`` (Kafka's ``LeaderSelector``: always the leader, i.e. no redirection) and
``rack-aware`` (Kafka's ``RackAwareReplicaSelector``: a replica in the client's rack, the most
caught-up one first, else the leader). Kafka's class names select them too (:data:`ALIASES`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from .interfaces import TopicPartition

__all__ = [
    "ALIASES",
    "ClientMetadata",
    "LeaderSelector",
    "PartitionView",
    "RackAwareReplicaSelector",
    "ReplicaSelector",
    "ReplicaView",
    "builtin_replica_selector",
    "selector_name",
]


@dataclass(frozen=True, slots=True)
class ClientMetadata:
    """Kafka's ``ClientMetadata``: who fetches. ``rack_id`` is the Fetch request's (empty when
    the consumer set no ``client.rack``)."""

    rack_id: str
    client_id: str
    address: str
    principal: str
    listener_name: str


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """Kafka's ``ReplicaView``: one replica a consumer may read from. ``log_end_offset`` and
    ``time_since_last_caught_up_ms`` are what the deciding broker knows (-1: not known, as a
    follower does not know the other followers' log ends); the leader's own lag is 0."""

    broker_id: int
    rack: str | None
    log_end_offset: int
    time_since_last_caught_up_ms: int


@dataclass(frozen=True, slots=True)
class PartitionView:
    """Kafka's ``PartitionView``: the leader and every replica the client may be sent to (the
    leader included)."""

    leader: ReplicaView
    replicas: Sequence[ReplicaView]


@runtime_checkable
class ReplicaSelector(Protocol):
    """Chooses the replica a consumer reads a partition from (KIP-392; see the module doc)."""

    name: str

    def select(self, tp: TopicPartition, client: ClientMetadata, partition: PartitionView) -> ReplicaView | None:
        """The replica ``client`` should fetch ``tp`` from, one of ``partition.replicas``; None
        (or the leader) keeps it on the leader."""
        ...


class LeaderSelector:
    """Kafka's ``LeaderSelector``: every consumer reads from the leader."""

    name = "leader"

    def select(self, tp: TopicPartition, client: ClientMetadata, partition: PartitionView) -> ReplicaView | None:
        return partition.leader


class RackAwareReplicaSelector:
    """Kafka's ``RackAwareReplicaSelector``: a replica in the client's rack -- the leader if it is
    there, else the one with the highest log end offset, ties broken by the shortest time since
    it last caught up (then the lowest broker id, so the choice is stable) -- else the leader. A
    client without a rack stays on the leader."""

    name = "rack-aware"

    def select(self, tp: TopicPartition, client: ClientMetadata, partition: PartitionView) -> ReplicaView | None:
        if not client.rack_id:
            return partition.leader
        same_rack = [r for r in partition.replicas if r.rack == client.rack_id]
        if not same_rack:
            return partition.leader
        if partition.leader in same_rack:
            return partition.leader
        return min(same_rack, key=lambda r: (-r.log_end_offset, _lag_key(r), r.broker_id))


def _lag_key(replica: ReplicaView) -> int:
    """An unknown time since caught up sorts last."""
    lag = replica.time_since_last_caught_up_ms
    return lag if lag >= 0 else 1 << 62


#: Kafka's class names for its built-in selectors, accepted in ``replica.selector.class``
ALIASES = {
    "org.apache.kafka.common.replica.RackAwareReplicaSelector": RackAwareReplicaSelector.name,
    "org.apache.kafka.common.replica.LeaderSelector": LeaderSelector.name,
}

_BUILTINS: dict[str, type[ReplicaSelector]] = {
    LeaderSelector.name: LeaderSelector,
    RackAwareReplicaSelector.name: RackAwareReplicaSelector,
}


def selector_name(configured: str) -> str:
    """The plugin name ``replica.selector.class`` selects (Kafka's class names mapped to the
    built-ins); empty when none is configured."""
    value = configured.strip()
    return ALIASES.get(value, value)


def builtin_replica_selector(name: str) -> ReplicaSelector | None:
    """A built-in selector by name, None for another name (the broker falls back on these when
    its plugin set leaves out the plugin that registers them)."""
    cls = _BUILTINS.get(name)
    return cls() if cls is not None else None
