"""Quotas on a broker's remote storage traffic (KIP-956, Kafka's ``RLMQuotaManager``).

Two broker-wide byte rates, each measured over ``window.num`` samples of ``window.size.seconds``
with Kafka's sampled rate (:mod:`odradek.rates`):

- **copies** (``remote.log.manager.copy.max.bytes.per.second``): before each segment it copies,
  a partition's copy task waits while the bytes copied by all partitions are over the rate,
  for the throttle time Kafka computes (``QuotaUtils.throttleTime``), then looks again; the
  segment's size is recorded once copied;
- **reads** (``remote.log.manager.fetch.max.bytes.per.second``): while the bytes read from
  remote storage for fetches are over the rate, a fetch's remote read is not started and the
  partition is answered without records (as Kafka's ``isRemoteLogFetchQuotaExceeded``); the
  consumer asks again. Each read's bytes are recorded.

LONG_MAX (the default) means no limit; both rates are dynamic broker configs.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import trio

from ..config import LONG_MAX
from ..rates import Rate, throttle_time_ms


class RemoteQuota:
    """One remote traffic rate (copies or reads) against its bound (see the module doc)."""

    def __init__(
        self,
        bytes_per_second: int = LONG_MAX,
        *,
        samples: int = 11,
        window_s: float = 1.0,
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        self.rate = Rate(samples, window_s * 1000.0)
        self.window_ms = window_s * 1000.0
        self.clock = clock
        self.bound = math.inf
        self.update_quota(bytes_per_second)

    @property
    def enabled(self) -> bool:
        return self.bound != math.inf

    def update_quota(self, bytes_per_second: int) -> None:
        """A new rate (LONG_MAX: no limit)."""
        self.bound = math.inf if bytes_per_second >= LONG_MAX else float(bytes_per_second)

    def _now_ms(self) -> float:
        return self.clock() * 1000.0

    def is_quota_exceeded(self) -> bool:
        return self.enabled and self.rate.measure(self._now_ms()) > self.bound

    def throttle_time_ms(self) -> int:
        """How long without traffic brings the rate back to the bound (0: not over it)."""
        if not self.enabled:
            return 0
        now = self._now_ms()
        measured = self.rate.measure(now)
        if measured <= self.bound:
            return 0
        return max(1, throttle_time_ms(measured, self.bound, self.rate.window_size_ms(now)))

    def record(self, size: int) -> None:
        if size > 0:
            self.rate.record(size, self._now_ms())


__all__ = ["RemoteQuota"]
