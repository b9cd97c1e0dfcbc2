"""The built-in partition assignors, registered through the same hooks third parties use.

Client side (``odradek_register_assignors``), for the classic group protocol: ``range`` (Java's
and librdkafka's default), ``roundrobin``, ``sticky`` (eager) and ``cooperative-sticky``
(incremental rebalancing, KIP-429). Names, algorithms and the bytes they exchange
(consumer-protocol subscription/assignment, sticky user data) match the Java client's, so
odradek consumers can share a group with librdkafka, Java, kafka-python and aiokafka members
that use the same assignor. The implementations live in :mod:`odradek.assignors`.

Broker side (``odradek_register_server_assignors``), for KIP-848 consumer groups: ``uniform``
(the default, sticky) and ``range``, in :mod:`odradek.server_assignors`. They live in this one
plugin so that the broker needs no second entry point for them.

Broker side too (``odradek_register_replica_selectors``), for KIP-392 fetch from the closest
replica: ``leader`` and ``rack-aware``, in :mod:`odradek.replica_selector` (placement choices,
registered here for the same reason).
"""

from __future__ import annotations

from collections.abc import Sequence

from .assignors import CooperativeStickyAssignor, RangeAssignor, RoundRobinAssignor, StickyAssignor
from .hookspecs import hookimpl
from .interfaces import Assignor, ServerAssignor
from .replica_selector import LeaderSelector, RackAwareReplicaSelector, ReplicaSelector
from .server_assignors import RangeServerAssignor, UniformServerAssignor


@hookimpl
def odradek_register_assignors() -> Sequence[type[Assignor]]:
    return [RangeAssignor, RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor]


@hookimpl
def odradek_register_server_assignors() -> Sequence[type[ServerAssignor]]:
    return [UniformServerAssignor, RangeServerAssignor]


@hookimpl
def odradek_register_replica_selectors() -> Sequence[type[ReplicaSelector]]:
    return [RackAwareReplicaSelector, LeaderSelector]
