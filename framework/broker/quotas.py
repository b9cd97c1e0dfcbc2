"""Client quota enforcement: Kafka's ``ClientQuotaManager`` for produce and fetch bytes, and its
``ClientRequestQuotaManager`` for request time (KIP-124).

Each quota entity's clients share a rate (:class:`Rate`): Kafka's ``Rate`` over a ``WindowedSum``,
``quota.window.num`` samples of ``quota.window.size.seconds`` each. A sample starts when the first
value after the previous one's end is recorded; samples older than all of them together are
dropped; the rate is their sum over the time they span, counted as at least ``num - 1`` whole
windows (so a client's first burst is not measured over a few milliseconds).

When a recorded value takes the rate above the quota the client is throttled for the time that
brings it back to the quota if nothing more came (``QuotaUtils.throttleTime``)::

    throttle = (rate - quota) / quota * window span

Byte-rate throttle times are not capped (as in Kafka); the request-time quota's would be capped to
one window (``boundedThrottleTime``), see :class:`ClientQuotaManager`'s ``max_throttle_ms``. The
handler puts the time into the response's ``throttle_time_ms`` and the connection stops reading
that client's requests for as long (KIP-219: respond at once, then mute the channel; clients since
Kafka 2.0 also hold back on their side).

Everything runs on the broker's trio thread, with trio's clock: a test under
``trio.testing.MockClock`` drives windows and throttles without waiting.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from ..rates import Rate, SampledStat, throttle_time_ms
from .mutation_quota import ControllerMutationQuotaManager, MutationSample
from .quota_configs import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    ClientQuotaConfigs,
    MetricTags,
)

#: sensors of a client not seen for this long are dropped (Kafka's quota sensors expire after an
#: hour of inactivity), checked at most once a minute
SENSOR_EXPIRY_S = 3600.0
_SWEEP_EVERY_S = 60.0


@dataclass(slots=True)
class ClientSensors:
    """One quota entity's rate, and the throttle times it caused (Kafka's ``throttle-time``)."""

    rate: Rate
    throttle: SampledStat
    last_record_s: float = 0.0
    throttled: int = 0
    throttle_ms_total: int = 0


@dataclass(slots=True)
class QuotaSample:
    """One row of the quota metrics: an entity's rate, average throttle time in the window, and
    how often and how long it was throttled since the broker started."""

    quota_type: str
    tags: MetricTags
    rate: float
    throttle_time_avg_ms: float
    throttled: int
    throttle_ms_total: int


class ClientQuotaManager:
    """Rates and throttle times of one quota type (``Produce``: ``producer_byte_rate``,
    ``Fetch``: ``consumer_byte_rate``, ``Request``: ``request_percentage``), per quota entity as
    :class:`ClientQuotaConfigs` resolves it. As in Kafka, once any entity sets the quota every
    client is recorded, those without a quota of their own under the tags
    :meth:`ClientQuotaConfigs.unlimited_tags` gives them, so their rates are in the metrics
    (never throttled); while no entity sets it nothing is recorded and the request path costs
    one dict lookup."""

    def __init__(
        self,
        quota_type: str,
        quota_key: str,
        configs: ClientQuotaConfigs,
        *,
        samples: int = 11,
        window_s: float = 1.0,
        max_throttle_ms: int | None = None,
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        self.quota_type = quota_type
        self.quota_key = quota_key
        self.configs = configs
        self.samples = samples
        self.window_ms = window_s * 1000.0
        self.max_throttle_ms = max_throttle_ms
        self.clock = clock
        self.sensors: dict[MetricTags, ClientSensors] = {}
        self._next_sweep_s = -math.inf

    def enabled(self) -> bool:
        return self.configs.counts[self.quota_key] > 0

    def _sensors(self, tags: MetricTags, now_s: float) -> ClientSensors:
        sensors = self.sensors.get(tags)
        if sensors is None:
            if now_s >= self._next_sweep_s:
                self._sweep(now_s)
            sensors = self.sensors[tags] = ClientSensors(
                Rate(self.samples, self.window_ms), SampledStat(self.samples, self.window_ms)
            )
        sensors.last_record_s = now_s
        return sensors

    def _sweep(self, now_s: float) -> None:
        self._next_sweep_s = now_s + _SWEEP_EVERY_S
        for tags in [t for t, s in self.sensors.items() if now_s - s.last_record_s >= SENSOR_EXPIRY_S]:
            del self.sensors[tags]

    def record(self, user: str, client_id: str, value: float, *, count: bool = True) -> int:
        """Record ``value`` (bytes) for this client; the throttle time in ms it earned (0: none).
        (Kafka's ``maybeRecordAndGetThrottleTimeMs``.) The throttle is counted in this quota's
        throttle metrics unless ``count`` is False: a caller weighing two quotas (Produce, Fetch)
        counts only the one whose time the client waits, with :meth:`count_throttle`."""
        if self.configs.counts[self.quota_key] == 0:
            return 0
        quota = self.configs.resolve(self.quota_key, user, client_id)
        now_s = self.clock()
        now_ms = now_s * 1000.0
        if quota is None:  # not limited: measured for the metrics only
            tags = self.configs.unlimited_tags(self.quota_key, user, client_id)
            self._sensors(tags, now_s).rate.record(value, now_ms)
            return 0
        sensors = self._sensors(quota.tags, now_s)
        rate = sensors.rate
        rate.record(value, now_ms)
        measured = rate.measure(now_ms)
        if measured <= quota.bound:
            return 0
        throttle = throttle_time_ms(measured, quota.bound, rate.window_size_ms(now_ms))
        if self.max_throttle_ms is not None:
            throttle = min(throttle, self.max_throttle_ms)
        if throttle <= 0:
            return 0
        if count:
            _count(sensors, throttle, now_ms)
        return throttle

    def count_throttle(self, user: str, client_id: str, throttle_ms: int) -> None:
        """Count a throttle of ``throttle_ms`` this quota imposed in its metrics (Kafka records
        the throttle-time sensor of the quota the client is throttled for: ``requestHelper.throttle``)."""
        quota = self.configs.resolve(self.quota_key, user, client_id)
        if quota is not None and (sensors := self.sensors.get(quota.tags)) is not None:
            _count(sensors, throttle_ms, self.clock() * 1000.0)

    def unrecord(self, user: str, client_id: str, value: float) -> None:
        """Take back a recorded value: a throttled Fetch is answered without its records, so
        they do not count (Kafka's ``unrecordQuotaSensor``)."""
        if (sensors := self.sensors.get(self._tags(user, client_id))) is not None:
            sensors.rate.record(-value, self.clock() * 1000.0)

    def _tags(self, user: str, client_id: str) -> MetricTags:
        """Whose rate this client's values go to (its quota's, or the unlimited clients' tags)."""
        quota = self.configs.resolve(self.quota_key, user, client_id)
        return quota.tags if quota is not None else self.configs.unlimited_tags(self.quota_key, user, client_id)

    def max_value_in_window(self, user: str, client_id: str) -> int | None:
        """The most one response may carry: the quota over ``num - 1`` windows (Kafka's
        ``getMaxValueInQuotaWindow``), so one Fetch cannot overshoot the quota by more; None: no
        quota."""
        if self.configs.counts[self.quota_key] == 0:
            return None
        quota = self.configs.resolve(self.quota_key, user, client_id)
        if quota is None:
            return None
        return max(1, int(quota.bound * max(1, self.samples - 1) * self.window_ms / 1000.0))

    def samples_for_metrics(self) -> list[QuotaSample]:
        if not self.sensors:
            return []
        now_ms = self.clock() * 1000.0
        out = []
        for tags, s in sorted(self.sensors.items()):
            total, count = s.throttle.total(now_ms)
            out.append(
                QuotaSample(
                    self.quota_type,
                    tags,
                    s.rate.measure(now_ms),
                    total / count if count else 0.0,
                    s.throttled,
                    s.throttle_ms_total,
                )
            )
        return out


def _count(sensors: ClientSensors, throttle_ms: int, now_ms: float) -> None:
    sensors.throttle.record(throttle_ms, now_ms)
    sensors.throttled += 1
    sensors.throttle_ms_total += throttle_ms


class RequestTimeMeter(trio.abc.Instrument):
    """The time each trio task spends running (between its scheduling points): what a request
    costs the broker's one event-loop thread, Kafka's "request thread time" for KIP-124. The
    broker installs it only while some entity has a ``request_percentage`` quota: timing every
    task step costs a little on every request."""

    def __init__(self) -> None:
        self.by_task: dict[trio.lowlevel.Task, float] = {}
        self._task: trio.lowlevel.Task | None = None
        self._step_start = 0.0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._task = task
        self._step_start = time.perf_counter()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        self.by_task[task] = self.by_task.get(task, 0.0) + time.perf_counter() - self._step_start
        self._task = None

    def task_exited(self, task: trio.lowlevel.Task) -> None:
        self.by_task.pop(task, None)

    def task_time(self, task: trio.lowlevel.Task) -> float:
        """Seconds ``task`` has run so far, its current step included."""
        spent = self.by_task.get(task, 0.0)
        if task is self._task:
            spent += time.perf_counter() - self._step_start
        return spent


#: APIs exempt from the request quota, as in Kafka's ClientRequestQuotaManager: the handshake
#: and SASL (a client must be able to connect), and inter-broker requests
#: (WriteTxnMarkers); a follower's Fetch is exempt too (see the dispatcher)
REQUEST_QUOTA_EXEMPT = frozenset({17, 18, 27, 36})


@dataclass
class QuotaManagers:
    """The broker's quota managers (Kafka's ``QuotaFactory.QuotaManagers``) and their configs."""

    configs: ClientQuotaConfigs
    produce: ClientQuotaManager
    fetch: ClientQuotaManager
    request: ClientQuotaManager
    #: ``controller_mutation_rate`` (KIP-599): partitions created, deleted or added per second
    controller_mutation: ControllerMutationQuotaManager
    managers: list[ClientQuotaManager] = field(default_factory=list)
    #: installed while a request quota exists (see :class:`RequestTimeMeter`)
    meter: RequestTimeMeter | None = None

    @classmethod
    def build(
        cls, configs: ClientQuotaConfigs, *, samples: int, window_s: float, clock: Callable[[], float] | None = None
    ) -> QuotaManagers:
        def manager(quota_type: str, key: str, max_throttle_ms: int | None = None) -> ClientQuotaManager:
            return ClientQuotaManager(
                quota_type,
                key,
                configs,
                samples=samples,
                window_s=window_s,
                max_throttle_ms=max_throttle_ms,
                clock=clock or trio.current_time,
            )

        produce = manager("produce", PRODUCER_BYTE_RATE)
        fetch = manager("fetch", CONSUMER_BYTE_RATE)
        # Kafka caps a request-quota throttle to one window (``boundedThrottleTime``)
        request = manager("request", REQUEST_PERCENTAGE, max_throttle_ms=int(window_s * 1000))
        mutation = ControllerMutationQuotaManager(
            configs, samples=samples, window_s=window_s, clock=clock or trio.current_time
        )
        managers = cls(configs, produce, fetch, request, mutation, [produce, fetch, request])
        configs.listeners.append(managers._on_quota_change)
        return managers

    def _on_quota_change(self, quota_key: str) -> None:
        """Install the request-time meter while a request quota exists, and only then."""
        if quota_key != REQUEST_PERCENTAGE:
            return
        try:
            if self.configs.enabled(REQUEST_PERCENTAGE) and self.meter is None:
                self.meter = RequestTimeMeter()
                trio.lowlevel.add_instrument(self.meter)
            elif not self.configs.enabled(REQUEST_PERCENTAGE) and self.meter is not None:
                meter, self.meter = self.meter, None
                trio.lowlevel.remove_instrument(meter)
        except RuntimeError:  # not in trio (a unit test's cache): nothing to time
            self.meter = None

    def record_request_time(self, user: str, client_id: str, seconds: float, *, count: bool = True) -> int:
        """Count a request's thread time against the client's ``request_percentage`` (percent of
        one thread: KIP-124); the throttle time it earned, at most one window (counted in the
        metrics unless ``count`` is False, see :meth:`ClientQuotaManager.record`)."""
        return self.request.record(user, client_id, seconds * 100.0, count=count)

    def metric_samples(self) -> list[QuotaSample]:
        return [row for m in self.managers for row in m.samples_for_metrics()]

    def mutation_samples(self) -> list[MutationSample]:
        return self.controller_mutation.samples_for_metrics()


__all__ = [
    "REQUEST_QUOTA_EXEMPT",
    "ClientQuotaManager",
    "ClientSensors",
    "QuotaManagers",
    "QuotaSample",
    "Rate",
    "RequestTimeMeter",
    "SampledStat",
    "throttle_time_ms",
]
