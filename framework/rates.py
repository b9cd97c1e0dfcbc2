"""Kafka's sampled rate (``SampledStat``, ``Rate``) and its throttle time (``QuotaUtils``).

Shared by everything that measures a rate against a bound: client quotas
(:mod:`odradek.broker.quotas`), replication throttles, and connection creation rates
(:mod:`odradek.connection_quotas`). Times are milliseconds of whatever clock the caller uses
(trio's, so tests drive them under ``trio.testing.MockClock``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class _Sample:
    start_ms: float
    value: float = 0.0
    count: int = 0


class SampledStat:
    """Kafka's ``SampledStat``: ``samples`` time windows of ``window_ms``, reused round-robin."""

    __slots__ = ("_current", "_ring", "samples", "window_ms")

    def __init__(self, samples: int, window_ms: float) -> None:
        self.samples = max(1, samples)
        self.window_ms = window_ms
        self._ring: list[_Sample] = []
        self._current = 0

    def record(self, value: float, now_ms: float) -> None:
        ring = self._ring
        if not ring:
            ring.append(_Sample(now_ms))
        sample = ring[self._current]
        if now_ms - sample.start_ms >= self.window_ms:
            self._current = (self._current + 1) % self.samples
            if self._current >= len(ring):
                sample = _Sample(now_ms)
                ring.append(sample)
            else:
                sample = ring[self._current]
                sample.start_ms, sample.value, sample.count = now_ms, 0.0, 0
        sample.value += value
        sample.count += 1

    def purge(self, now_ms: float) -> None:
        """Reset the samples that ended more than the whole span ago (``purgeObsoleteSamples``)."""
        expire_ms = self.samples * self.window_ms
        for sample in self._ring:
            if now_ms - sample.start_ms >= expire_ms:
                sample.start_ms, sample.value, sample.count = now_ms, 0.0, 0

    def total(self, now_ms: float) -> tuple[float, int]:
        """The values and counts of the live samples."""
        self.purge(now_ms)
        return sum(s.value for s in self._ring), sum(s.count for s in self._ring)

    def oldest_start_ms(self, now_ms: float) -> float:
        return min((s.start_ms for s in self._ring), default=now_ms)


class Rate:
    """Kafka's ``Rate`` (a ``WindowedSum`` per second) with its ``windowSize``."""

    __slots__ = ("stat",)

    def __init__(self, samples: int, window_ms: float) -> None:
        self.stat = SampledStat(samples, window_ms)

    def record(self, value: float, now_ms: float) -> None:
        self.stat.record(value, now_ms)

    def window_size_ms(self, now_ms: float) -> float:
        """The span the rate is measured over: from the oldest live sample's start to now, at
        least ``samples - 1`` whole windows, never 0."""
        stat = self.stat
        stat.purge(now_ms)
        elapsed = now_ms - stat.oldest_start_ms(now_ms)
        full_windows = int(elapsed // stat.window_ms)
        minimum = stat.samples - 1
        if full_windows < minimum:
            elapsed += (minimum - full_windows) * stat.window_ms
        return max(elapsed, 1.0)

    def measure(self, now_ms: float) -> float:
        """Per second."""
        total, _ = self.stat.total(now_ms)
        return total / (self.window_size_ms(now_ms) / 1000.0)


def throttle_time_ms(rate: float, bound: float, window_ms: float) -> int:
    """``QuotaUtils.throttleTime``: how long without traffic brings ``rate`` down to ``bound``."""
    return round((rate - bound) / bound * window_ms)


__all__ = ["Rate", "SampledStat", "throttle_time_ms"]
