"""How a coordinator reports the failed loads of its internal-topic partitions.

The group and transaction coordinators load a partition of ``__consumer_offsets`` /
``__transaction_state`` when the metadata says this broker leads it, and retry a load that
failed at their next ownership check. A load can fail for two kinds of reasons, reported apart:

- **the leadership is still moving**: the metadata named this broker leader before its replica
  manager took the partition in (or after it lost it again), so the read gets
  NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, a leader-epoch error or the like. That is a
  normal moment of an election or a restart: one INFO line naming the code, no traceback;
- **anything else** (a storage error, a record the loader cannot read, a bug): logged with its
  traceback, since an operator has to look at it.

Either way a partition that keeps failing logs a WARNING at most once a minute after its first
line, instead of once per ownership check.
"""

from __future__ import annotations

import logging

from ..errors import ErrorCode, KafkaError

#: how often a load that keeps failing is logged again
FAILED_LOAD_LOG_INTERVAL_S = 60.0

#: codes a read of a partition gets while its leadership is moving to or from this broker
LEADERSHIP_MOVING = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.OFFSET_NOT_AVAILABLE,
    }
)


def leadership_moving(exc: BaseException) -> ErrorCode | None:
    """The code of ``exc`` when it says only that the partition is not (or no longer) led here
    right now, else None."""
    if isinstance(exc, KafkaError) and exc.code in LEADERSHIP_MOVING:
        return exc.code
    return None


class FailedLoads:
    """The partitions whose last load failed, with when each was last logged; see the module doc."""

    def __init__(self, log: logging.Logger, topic: str) -> None:
        self.log = log
        self.topic = topic
        self._last_logged: dict[int, float] = {}

    def __contains__(self, partition: int) -> bool:
        return partition in self._last_logged

    def loaded(self, partition: int) -> None:
        """``partition`` loaded: a later failure is reported in full again."""
        self._last_logged.pop(partition, None)

    def failed(self, partition: int, exc: Exception, now: float) -> None:
        """The load of ``partition`` raised ``exc`` at ``now`` (seconds, the coordinator's clock)."""
        last = self._last_logged.get(partition)
        if last is None:
            moving = leadership_moving(exc)
            if moving is not None:
                self.log.info(
                    "loading %s-%d waits for the partition to be led here (%s); the next ownership check retries",
                    self.topic, partition, moving.name,
                )  # fmt: skip
            else:
                self.log.error(
                    "loading %s-%d failed; the next ownership check retries", self.topic, partition, exc_info=exc
                )
            self._last_logged[partition] = now
        elif now - last >= FAILED_LOAD_LOG_INTERVAL_S:
            self.log.warning("loading %s-%d still fails: %r", self.topic, partition, exc)
            self._last_logged[partition] = now


__all__ = ["FAILED_LOAD_LOG_INTERVAL_S", "LEADERSHIP_MOVING", "FailedLoads", "leadership_moving"]
