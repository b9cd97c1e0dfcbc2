"""The connector's only contact with a cluster: odradek's client (Admin, Consumer, Producer).

Clients are opened lazily and cached per Python process, keyed by their config: Spark reuses
Python workers across tasks and micro-batches, so a worker keeps its connections and metadata
like Spark's own consumer and producer pools. Nothing here is pickled; input partitions carry
only options, and each process builds its own clients from them.

- Driver side, :class:`AdminClusterView` answers planning's questions (partitions of a
  subscription, earliest/latest/by-timestamp offsets) with the Admin client.
- Executor side, :func:`read_range` reads one offset range with an assigned Consumer (no group,
  no commits, ``auto.offset.reset=none`` so a vanished offset is an error, not a silent jump) and
  yields Arrow batches.
- :func:`producer` gives the sink a cached Producer.
"""

from __future__ import annotations

import bisect
import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

from odradek.client import Admin, Consumer, ConsumerRecord, KafkaError, NoOffsetForPartition, Producer
from odradek.client.config import ROLE_KEYS

from .offsets import OffsetRange, data_loss
from .options import SinkOptions, SourceOptions, Subscription, TopicPartition
from .schema import ROWS_PER_BATCH, ArrowBatchBuilder

_ADMIN_KEYS = frozenset(k.name for k in ROLE_KEYS["admin"])
_CONSUMER_KEYS = frozenset(k.name for k in ROLE_KEYS["consumer"])
_PRODUCER_KEYS = frozenset(k.name for k in ROLE_KEYS["producer"])

#: Consumer settings the source needs whatever the user passes (Spark fixes the same ones).
_CONSUMER_OVERRIDES = {"auto.offset.reset": "none", "enable.auto.commit": "false", "group.id": ""}
#: For bulk range reads, unless the user sets them (kafka.max.partition.fetch.bytes ...): big fetches,
#: and a short broker-side wait, since a planned range is already written (a long-poll fetch in
#: flight would also hold up the next task's requests on the same connection).
_CONSUMER_DEFAULTS = {"max.partition.fetch.bytes": "8388608", "max.poll.records": "10000", "fetch.max.wait.ms": "20"}

_lock = threading.Lock()
_admins: dict[frozenset[tuple[str, str]], Admin] = {}
_consumers: dict[frozenset[tuple[str, str]], Consumer] = {}
_producers: dict[frozenset[tuple[str, str]], Producer] = {}


def check_client_config(config: Mapping[str, str], *, sink: bool) -> None:
    """Fail early (on the driver, naming the option) for ``kafka.*`` keys the client would reject."""
    allowed = _PRODUCER_KEYS if sink else _CONSUMER_KEYS
    role = "producer" if sink else "consumer"
    for key in config:
        if key not in allowed:
            raise ValueError(f"Option 'kafka.{key}' is not a {role} config key of odradek's client")


def _key(config: Mapping[str, str]) -> frozenset[tuple[str, str]]:
    return frozenset(config.items())


def _cached(cache: dict[frozenset[tuple[str, str]], Any], config: Mapping[str, str], factory: Any) -> Any:
    key = _key(config)
    with _lock:
        client = cache.get(key)
        if client is None:
            client = cache[key] = factory(dict(config))
        return client


def _drop(cache: dict[frozenset[tuple[str, str]], Any], config: Mapping[str, str]) -> None:
    with _lock:
        client = cache.pop(_key(config), None)
    if client is not None:
        try:
            client.close(timeout=0)
        except Exception:  # a broken client is being thrown away anyway
            pass


# -- driver side: planning -------------------------------------------------------------------------
def _admin_config(options: SourceOptions) -> dict[str, str]:
    return {k: v for k, v in options.client_config.items() if k in _ADMIN_KEYS}


class AdminClusterView:
    """:class:`odradek.plugins.spark.planning.ClusterView` over odradek's Admin client."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.admin: Admin = _cached(_admins, _admin_config(options), Admin)
        self.isolation_level = 1 if options.client_config.get("isolation.level") == "read_committed" else 0

    def _retrying(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        attempts = self.options.fetch_offset_num_retries + 1
        for attempt in range(attempts):
            try:
                return fn(*args, **kwargs)
            except KafkaError:
                if attempt + 1 >= attempts:
                    raise
                time.sleep(self.options.fetch_offset_retry_interval_ms / 1000)
        raise AssertionError("unreachable")

    def partitions(self, subscription: Subscription) -> list[TopicPartition]:
        if subscription.kind == "assign":
            return sorted(subscription.assigned)
        if subscription.kind == "subscribe":
            described = self._retrying(self.admin.describe_topics, list(subscription.topics))
            # A topic that does not exist yet has no partitions; it is picked up once created.
            return sorted(
                (name, p.partition)
                for name, desc in described.items()
                if not isinstance(desc, KafkaError)
                for p in desc.partitions
            )
        assert subscription.pattern is not None
        pattern = re.compile(subscription.pattern)
        topics = self._retrying(self.admin.list_topics)
        return sorted((t, p) for t, n in topics.items() if pattern.fullmatch(t) for p in range(n))

    def _list(self, specs: Mapping[TopicPartition, str | int]) -> dict[TopicPartition, int]:
        if not specs:
            return {}
        found = self._retrying(self.admin.list_offsets, dict(specs), isolation_level=self.isolation_level)
        return {(tp[0], tp[1]): int(result.offset) for tp, result in found.items()}

    def earliest_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return self._list({tp: "earliest" for tp in tps})

    def latest_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return self._list({tp: "latest" for tp in tps})

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        found = self._list(dict(timestamps))
        return {tp: (found[tp] if found.get(tp, -1) >= 0 else None) for tp in timestamps}


def cluster_view(options: SourceOptions) -> AdminClusterView:
    """The planning view for a query's options (its Admin client is cached per process)."""
    return AdminClusterView(options)


def release_view(options: SourceOptions) -> None:
    """Close the Admin client of a stopped streaming query."""
    _drop(_admins, _admin_config(options))


# -- executor side: reading a range ----------------------------------------------------------------
def _consumer_config(options: SourceOptions) -> dict[str, str]:
    config = {**_CONSUMER_DEFAULTS, **options.client_config, **_CONSUMER_OVERRIDES}
    return {k: v for k, v in config.items() if k in _CONSUMER_KEYS}


def _consumer(options: SourceOptions) -> Consumer:
    return _cached(_consumers, _consumer_config(options), Consumer)


def fetch_records(options: SourceOptions, rng: OffsetRange) -> Iterator[list[ConsumerRecord]]:
    """The records of ``[rng.from_offset, rng.until_offset)`` of one partition, in fetched chunks.

    Gaps (compaction, transaction markers) are normal; a position below the log start offset or
    an end beyond the log end offset is data loss, handled per failOnDataLoss. A fetch that makes
    no progress for ``kafkaConsumer.pollTimeoutMs`` fails the task.
    """
    if rng.size <= 0:
        return
    tp = (rng.topic, rng.partition)
    consumer = _consumer(options)
    try:
        consumer.assign([tp])
        consumer.seek(tp, rng.from_offset)
        position = rng.from_offset
        until = rng.until_offset
        timeout_s = options.poll_timeout_ms / 1000
        last_progress = time.monotonic()
        spurious = 0
        while position < until:
            try:
                polled = consumer.poll(timeout=min(1.0, timeout_s))
            except NoOffsetForPartition:
                position, spurious = _out_of_range(consumer, options, tp, position, until, spurious)
                last_progress = time.monotonic()
                continue
            records = polled.get(tp)
            if records:
                first = bisect.bisect_left(records, position, key=_offset_of)
                last = bisect.bisect_left(records, until, lo=first, key=_offset_of)
                if last < len(records):
                    position = until  # a record at or past the end: the range is complete
                elif last > first:
                    position = records[last - 1].offset + 1
                if last > first:
                    yield records[first:last] if first or last < len(records) else records
                last_progress = time.monotonic()
                continue
            new_position = consumer.position(tp)  # moves past control batches and aborted records
            if new_position > position:
                position = new_position
                last_progress = time.monotonic()
                continue
            end = consumer.end_offsets([tp])[tp]
            if end < until and end <= position:
                data_loss(
                    f"Cannot read {rng.topic}-{rng.partition} up to offset {until}: the log ends at {end}",
                    options.fail_on_data_loss,
                )
                break
            if time.monotonic() - last_progress > timeout_s:
                raise TimeoutError(
                    f"No records from {rng.topic}-{rng.partition} at offset {position} for "
                    f"{options.poll_timeout_ms} ms (option 'kafkaConsumer.pollTimeoutMs'); wanted up to {until}"
                )
        consumer.assign([])  # stop prefetching while the cached consumer waits for the next task
    except BaseException as exc:
        if not isinstance(exc, GeneratorExit):
            _drop(_consumers, _consumer_config(options))  # never reuse a consumer in an unknown state
        raise


def _offset_of(record: ConsumerRecord) -> int:
    return record.offset


def read_range(options: SourceOptions, rng: OffsetRange) -> Iterator[pa.RecordBatch]:
    """One task's range as Arrow batches of the source schema (about ``ROWS_PER_BATCH`` rows each)."""
    builder = ArrowBatchBuilder(rng.topic, rng.partition, include_headers=options.include_headers)
    for records in fetch_records(options, rng):
        builder.add(records)
        if len(builder) >= ROWS_PER_BATCH:
            yield builder.build()
    if len(builder):
        yield builder.build()


def _out_of_range(
    consumer: Consumer, options: SourceOptions, tp: TopicPartition, position: int, until: int, spurious: int
) -> tuple[int, int]:
    """After OFFSET_OUT_OF_RANGE: data loss (fail, or skip to what exists), or a stale error to retry."""
    earliest = consumer.beginning_offsets([tp])[tp]
    latest = consumer.end_offsets([tp])[tp]
    if earliest <= position <= latest and spurious < 3:
        consumer.seek(tp, position)  # the error predates our seek (assign() asks for a reset first)
        return position, spurious + 1
    if position < earliest:
        data_loss(
            f"Cannot read {tp[0]}-{tp[1]} from offset {position}: the log start offset moved to {earliest}",
            options.fail_on_data_loss,
        )
        new_position = min(earliest, until)
    else:
        data_loss(
            f"Cannot read {tp[0]}-{tp[1]} from offset {position}: the log ends at {latest}", options.fail_on_data_loss
        )
        new_position = until
    if new_position < until:
        consumer.seek(tp, new_position)
    return new_position, spurious


# -- the sink's producer ---------------------------------------------------------------------------
def _producer_config(options: SinkOptions) -> dict[str, str]:
    return dict(options.client_config)


def producer(options: SinkOptions) -> Producer:
    """The cached Producer for the sink's config (one per Python worker and config)."""
    return _cached(_producers, _producer_config(options), Producer)


def discard_producer(options: SinkOptions) -> None:
    """Throw away a producer after a failure, so the retried task starts with a fresh one."""
    _drop(_producers, _producer_config(options))
