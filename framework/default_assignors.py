"""The consumer's built-in partition assignors, registered through the same hook third parties use.

``range`` (Java's and librdkafka's default), ``roundrobin``, ``sticky`` (eager) and
``cooperative-sticky`` (incremental rebalancing, KIP-429). Names, algorithms and the bytes they
exchange (consumer-protocol subscription/assignment, sticky user data) match the Java client's,
so odradek consumers can share a group with librdkafka, Java, kafka-python and aiokafka members
that use the same assignor. The implementations live in :mod:`odradek.assignors`.
"""

from __future__ import annotations

from collections.abc import Sequence

from .assignors import CooperativeStickyAssignor, RangeAssignor, RoundRobinAssignor, StickyAssignor
from .hookspecs import hookimpl
from .interfaces import Assignor


@hookimpl
def odradek_register_assignors() -> Sequence[type[Assignor]]:
    return [RangeAssignor, RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor]
