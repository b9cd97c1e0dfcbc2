"""Controller mutation quotas (KIP-599): how fast a client may create and delete partitions.

Creating or deleting a topic, or adding partitions to one, writes every partition's state to the
metadata store and makes every broker that hosts one create or delete a log. A script looping
over CreateTopics can keep the store and the brokers busy for everyone; ``controller_mutation_rate``
bounds it per quota entity, in partitions per second, with the same entities and KIP-55 precedence
as the other client quotas (:class:`~odradek.broker.quota_configs.ClientQuotaConfigs`).

The rate is a token bucket (Kafka's ``TokenBucket`` stat), not the windowed rate of the byte
quotas: a bucket holds up to ``quota * (quota.window.num - 1) * quota.window.size.seconds``
tokens, refills at ``quota`` tokens a second and starts full, so a client may create a burst of
that many partitions at once and then ``quota`` a second. Each created, deleted or added
partition takes one token; the bucket may go below zero.

How a request meets the quota depends on its version, as in Kafka:

- **strict** (CreateTopics v6+, DeleteTopics v5+, CreatePartitions v3+): a topic is refused with
  THROTTLING_QUOTA_EXCEEDED when the bucket is already below zero as its turn comes, and
  accepted otherwise, even if it takes the bucket below zero. The response carries the time until
  the bucket is back at zero, and the connection is muted for it (KIP-219);
- **permissive** (older versions, whose clients do not know the error): every topic is accepted,
  and a request that leaves the bucket below zero is throttled for the time it takes to refill.

A ``validate_only`` request, a topic refused for another reason, and Metadata's automatic topic
creation take no tokens (Kafka's ``UnboundedControllerMutationQuota`` for the latter).

Kafka enforces the quota where the controller runs, because requests go there; in odradek any
broker answers these requests and enforces the quota for the requests it answers. Clients send
them to the controller they find in Metadata, so in practice that is one broker.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import trio

from ..errors import ErrorCode, KafkaError
from .quota_configs import CONTROLLER_MUTATION_RATE, ClientQuotaConfigs, MetricTags

#: sensors of a client not seen for this long are dropped (as the byte quotas' are)
SENSOR_EXPIRY_S = 3600.0
_SWEEP_EVERY_S = 60.0

THROTTLED_MESSAGE = "The throttling quota has been exceeded."


class ThrottlingQuotaExceeded(KafkaError):
    """A topic refused because its client's ``controller_mutation_rate`` is used up;
    ``throttle_ms`` is how long until the client may mutate again."""

    code = ErrorCode.THROTTLING_QUOTA_EXCEEDED

    def __init__(self, throttle_ms: int) -> None:
        self.throttle_ms = throttle_ms
        super().__init__(THROTTLED_MESSAGE)


class TokenBucket:
    """Kafka's ``TokenBucket`` stat: ``tokens`` refill at ``rate`` a second up to ``burst``,
    and a recorded value takes that many out (below zero if it must)."""

    __slots__ = ("burst", "last_s", "rate", "tokens")

    def __init__(self, rate: float, burst: float, now_s: float) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = burst
        self.last_s = now_s

    def refill(self, now_s: float) -> float:
        """The tokens now: what there were, plus ``rate`` for every second since, at most ``burst``."""
        if now_s > self.last_s:
            self.tokens = min(self.burst, self.tokens + self.rate * (now_s - self.last_s))
            self.last_s = now_s
        return self.tokens

    def take(self, value: float, now_s: float) -> None:
        self.refill(now_s)
        self.tokens = min(self.burst, self.tokens - value)

    def reconfigure(self, rate: float, burst: float, now_s: float) -> None:
        """A changed quota: refill at the old rate until now, then keep the tokens (at most the
        new burst)."""
        self.refill(now_s)
        self.rate, self.burst = rate, burst
        self.tokens = min(self.tokens, burst)

    def throttle_ms(self) -> int:
        """How long until the bucket is back at zero (0 when it is not below)."""
        return math.ceil(-self.tokens / self.rate * 1000.0) if self.tokens < 0 else 0


@dataclass(slots=True)
class MutationSensors:
    """One quota entity's bucket, and how often and how long its requests were throttled."""

    bucket: TokenBucket
    last_record_s: float
    mutations: int = 0
    throttled: int = 0
    throttle_ms_total: int = 0


class ControllerMutationQuota:
    """One request's view of its client's quota: the handler passes it to the core, which calls
    :meth:`record` for each topic just before it writes the topic's change."""

    __slots__ = ("_manager", "_sensors", "_throttle_ms", "_throttled_at_s", "strict")

    def __init__(self, manager: ControllerMutationQuotaManager | None, sensors: MutationSensors | None, strict: bool):
        self._manager = manager
        self._sensors = sensors
        self.strict = strict
        self._throttle_ms = 0
        self._throttled_at_s = 0.0

    def record(self, partitions: int) -> None:
        """Take ``partitions`` tokens for a topic about to be changed; strict and already over
        the quota: raise :class:`ThrottlingQuotaExceeded` instead, taking nothing."""
        sensors, manager = self._sensors, self._manager
        if sensors is None or manager is None or partitions <= 0:
            return
        now_s = manager.clock()
        bucket = sensors.bucket
        sensors.last_record_s = now_s
        if self.strict and bucket.refill(now_s) < 0:
            self._throttled(bucket.throttle_ms(), now_s)
            raise ThrottlingQuotaExceeded(self._throttle_ms)
        bucket.take(partitions, now_s)
        sensors.mutations += partitions
        if not self.strict and bucket.tokens < 0:
            self._throttled(bucket.throttle_ms(), now_s)

    def _throttled(self, throttle_ms: int, now_s: float) -> None:
        self._throttle_ms, self._throttled_at_s = throttle_ms, now_s

    def throttle_time_ms(self) -> int:
        """The throttle time the request earned, less the time since it was computed (a request
        that waited meanwhile has served part of it; Kafka's ``throttleTime``)."""
        if self._throttle_ms <= 0 or self._manager is None:
            return 0
        elapsed_ms = (self._manager.clock() - self._throttled_at_s) * 1000.0
        return max(0, math.ceil(self._throttle_ms - elapsed_ms))

    def finish(self) -> int:
        """The request is answered: count its throttle in the client's metrics and return it."""
        throttle = self.throttle_time_ms()
        if throttle > 0 and self._sensors is not None:
            self._sensors.throttled += 1
            self._sensors.throttle_ms_total += throttle
        return throttle


#: the quota of a client no entity limits, and of the broker's own topic creations
UNBOUNDED = ControllerMutationQuota(None, None, strict=False)


@dataclass(slots=True)
class MutationSample:
    """One row of the controller mutation metrics."""

    tags: MetricTags
    tokens: float
    mutations: int
    throttled: int
    throttle_ms_total: int


class ControllerMutationQuotaManager:
    """Token buckets per quota entity for ``controller_mutation_rate`` (Kafka's
    ``ControllerMutationQuotaManager``). A client no entity limits gets :data:`UNBOUNDED`,
    and costs one dict lookup."""

    def __init__(
        self,
        configs: ClientQuotaConfigs,
        *,
        samples: int = 11,
        window_s: float = 1.0,
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        self.configs = configs
        #: the bucket holds this many seconds of the quota (Kafka: ``(samples - 1) * window``)
        self.burst_s = max(1, samples - 1) * window_s
        self.clock = clock
        self.sensors: dict[MetricTags, MutationSensors] = {}
        self._next_sweep_s = -math.inf

    def enabled(self) -> bool:
        return self.configs.counts[CONTROLLER_MUTATION_RATE] > 0

    def new_quota(self, user: str, client_id: str, *, strict: bool) -> ControllerMutationQuota:
        """The quota one request of this client is held to."""
        if self.configs.counts[CONTROLLER_MUTATION_RATE] == 0:
            return UNBOUNDED
        quota = self.configs.resolve(CONTROLLER_MUTATION_RATE, user, client_id)
        if quota is None:
            return UNBOUNDED
        now_s = self.clock()
        sensors = self.sensors.get(quota.tags)
        burst = quota.bound * self.burst_s
        if sensors is None:
            if now_s >= self._next_sweep_s:
                self._sweep(now_s)
            sensors = self.sensors[quota.tags] = MutationSensors(TokenBucket(quota.bound, burst, now_s), now_s)
        elif sensors.bucket.rate != quota.bound:
            sensors.bucket.reconfigure(quota.bound, burst, now_s)
        return ControllerMutationQuota(self, sensors, strict)

    def _sweep(self, now_s: float) -> None:
        self._next_sweep_s = now_s + _SWEEP_EVERY_S
        for tags in [t for t, s in self.sensors.items() if now_s - s.last_record_s >= SENSOR_EXPIRY_S]:
            del self.sensors[tags]

    def samples_for_metrics(self) -> list[MutationSample]:
        now_s = self.clock()
        return [
            MutationSample(tags, s.bucket.refill(now_s), s.mutations, s.throttled, s.throttle_ms_total)
            for tags, s in sorted(self.sensors.items())
        ]


__all__ = [
    "THROTTLED_MESSAGE",
    "UNBOUNDED",
    "ControllerMutationQuota",
    "ControllerMutationQuotaManager",
    "MutationSample",
    "MutationSensors",
    "ThrottlingQuotaExceeded",
    "TokenBucket",
]
