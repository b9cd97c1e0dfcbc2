"""Consumer-group partition assignors: range, roundrobin, sticky and cooperative-sticky.

Each assignor is a class satisfying :class:`odradek.interfaces.Assignor`, registered by the
built-in plugin :mod:`odradek.default_assignors` through ``odradek_register_assignors`` (the same
hook third-party assignors use). They run in a consumer that is group leader; the broker never
assigns. Algorithms follow the Java client's (``RangeAssignor``, ``RoundRobinAssignor``,
``AbstractStickyAssignor``) so that the same subscriptions give the same kind of assignment in a
group mixing odradek, librdkafka, Java, kafka-python and aiokafka members; see docs/groups.md.
"""

from __future__ import annotations

from .base import member_sort_key, subscribed_partitions_per_topic
from .range import RangeAssignor
from .roundrobin import RoundRobinAssignor
from .sticky import CooperativeStickyAssignor, StickyAssignor

__all__ = [
    "CooperativeStickyAssignor",
    "RangeAssignor",
    "RoundRobinAssignor",
    "StickyAssignor",
    "member_sort_key",
    "subscribed_partitions_per_topic",
]
