"""Replication quotas (KIP-73): bounding the bytes that catching-up replicas copy.

Moving a partition to a new broker (a reassignment), or bringing back a broker that was down
for long, copies whole logs between brokers, and at full speed that copy takes the disks and the
network from producers and consumers. Kafka's answer, kept here with its names:

- a topic names the replicas whose traffic may be throttled, in
  ``leader.replication.throttled.replicas`` (``partition:broker`` pairs, the broker being the
  leader that sends) and ``follower.replication.throttled.replicas`` (the broker being the follower
  that fetches), or ``*`` for every replica of the topic;
- each broker has a rate for each side, ``leader.replication.throttled.rate`` and
  ``follower.replication.throttled.rate`` (bytes a second; dynamic, see
  :mod:`odradek.broker.dynamic_config`), measured over ``replication.quota.window.num`` windows of
  ``replication.quota.window.size.seconds``;
- a throttled replica that is **out of the ISR** waits while its side's rate is over the quota:
  the leader answers its fetch without records for that partition, the follower leaves the
  partition out of its next fetch. Replicas in the ISR are never held back, so a throttle never
  slows acks=all or the high watermark; the bytes of throttled partitions still count.

One :class:`ReplicationQuotaManager` per side per broker (Kafka's ``ReplicationQuotaManager``).
With no rate set (the default), :attr:`ReplicationQuotaManager.enabled` is False and the fetch
paths skip every other check.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import trio

from ..config import LONG_MAX
from ..interfaces import TopicPartition
from ..rates import Rate

LEADER = "leader"
FOLLOWER = "follower"
#: the quota of the copies moving replicas between one broker's log dirs (KIP-113): one rate,
#: replica.alter.log.dirs.io.max.bytes.per.second, over every move (no throttled-replicas list)
ALTER_LOG_DIRS = "alter-log-dirs"


def throttled_partitions(entries: Sequence[str], broker_id: int) -> frozenset[int] | None:
    """The partitions ``entries`` (a ``*.replication.throttled.replicas`` value) throttle on
    ``broker_id``; None for every partition (``*``). Kafka's ``parseThrottledPartitions``."""
    wanted = str(broker_id)
    partitions: set[int] = set()
    for entry in entries:
        entry = entry.strip()
        if entry == "*":
            return None
        partition, _, broker = entry.partition(":")
        if broker.strip() == wanted and partition.strip().isdigit():
            partitions.add(int(partition))
    return frozenset(partitions)


class ReplicationQuotaManager:
    """One side's replication quota on this broker: the rate of throttled replicas' bytes, and
    which partitions are throttled (read from their topics' configs on demand)."""

    def __init__(
        self,
        side: str,
        broker_id: int,
        topic_throttles: Callable[[str, str], Sequence[str]],
        *,
        samples: int = 11,
        window_s: float = 1.0,
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        self.side = side
        self.broker_id = broker_id
        self.config_key = f"{side}.replication.throttled.replicas"
        self._topic_throttles = topic_throttles
        self.rate = Rate(samples, window_s * 1000.0)
        self.bound = math.inf
        self.clock = clock
        #: bytes of throttled partitions recorded since the broker started
        self.throttled_bytes = 0
        #: how often a throttled replica was held back
        self.held_back = 0
        self._throttled: dict[str, tuple[tuple[str, ...], frozenset[int] | None]] = {}

    @property
    def enabled(self) -> bool:
        """Whether a rate is set: without one nothing is throttled, nor recorded."""
        return self.bound != math.inf

    def update_quota(self, bytes_per_second: int) -> None:
        """A new ``<side>.replication.throttled.rate`` (LONG_MAX: no limit)."""
        self.bound = math.inf if bytes_per_second >= LONG_MAX else float(bytes_per_second)

    def is_throttled(self, tp: TopicPartition) -> bool:
        """Whether the topic's config names ``tp``'s replica on this broker for this side."""
        entries = tuple(self._topic_throttles(tp.topic, self.config_key))
        cached = self._throttled.get(tp.topic)
        if cached is None or cached[0] != entries:
            if len(self._throttled) > 100_000:
                self._throttled.clear()
            cached = self._throttled[tp.topic] = (entries, throttled_partitions(entries, self.broker_id))
        partitions = cached[1]
        return partitions is None or tp.partition in partitions

    def is_quota_exceeded(self) -> bool:
        """Whether the throttled bytes' rate is over the quota now."""
        if not self.enabled:
            return False
        return self.rate.measure(self.clock() * 1000.0) > self.bound

    def should_throttle(self, tp: TopicPartition, in_sync: bool) -> bool:
        """Kafka's ``shouldLeaderThrottle`` / ``shouldFollowerThrottle``: hold ``tp`` back now?"""
        if not self.enabled or in_sync or not self.is_throttled(tp) or not self.is_quota_exceeded():
            return False
        self.held_back += 1
        return True

    def record(self, value: int) -> None:
        """Count ``value`` bytes of throttled partitions (whether or not any was held back)."""
        if value > 0:
            self.rate.record(value, self.clock() * 1000.0)
            self.throttled_bytes += value

    def byte_rate(self) -> float:
        return self.rate.measure(self.clock() * 1000.0)


__all__ = ["ALTER_LOG_DIRS", "FOLLOWER", "LEADER", "ReplicationQuotaManager", "throttled_partitions"]
