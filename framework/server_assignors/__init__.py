"""Server-side partition assignors of KIP-848 consumer groups: ``uniform`` and ``range``.

Each is a class satisfying :class:`odradek.interfaces.ServerAssignor`, registered by the built-in
plugin :mod:`odradek.default_assignors` through ``odradek_register_server_assignors`` (the hook
third parties use too). The group coordinator runs them, never a client: a consumer using
``group.protocol=consumer`` only names one (``group.remote.assignor``), and the broker's
``group.consumer.assignors`` lists those it offers, the first being the default. Names follow
Kafka's (``UniformAssignor``, ``RangeAssignor`` in org.apache.kafka.coordinator.group); see
docs/groups.md.
"""

from __future__ import annotations

from .base import member_order, subscribers_by_topic
from .range import RangeServerAssignor
from .uniform import UniformServerAssignor

__all__ = ["RangeServerAssignor", "UniformServerAssignor", "member_order", "subscribers_by_topic"]
