"""Load generators behind ``odradek perf``: Kafka's producer/consumer perf tools, for any Kafka broker.

The load generator must not be the bottleneck, so the default client is librdkafka (through
confluent-kafka, installed with the ``bench`` or ``test`` extra): Python only hands it payloads and
counts delivery reports. ``--client odradek`` drives odradek's own client instead, to measure it.

Latency is measured the way Kafka's ``ProducerPerformance`` does it: from ``send`` to the delivery
report, per record (every ``latency_every``-th record, to keep callback overhead off the hot loop).
End-to-end latency embeds the send time (ns since the epoch) in the first 8 bytes of each payload
and subtracts it on receipt.
"""

from __future__ import annotations

import os
import struct
import threading
import time
import uuid
from array import array
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from .errors import OdradekError

ProgressFn = Callable[[int, int], None]  # (records done, bytes done)


class PerfError(OdradekError):
    """The perf run could not start or failed (missing client library, broker errors)."""


@dataclass
class PerfResult:
    """A perf run's summary; ``latency_ms`` holds avg/p50/p95/p99/p99.9/max when measured."""

    mode: str
    client: str
    records: int
    bytes: int
    seconds: float
    records_per_s: float = 0.0
    mb_per_s: float = 0.0
    latency_ms: dict[str, float] = field(default_factory=dict)
    errors: int = 0
    settings: dict[str, Any] = field(default_factory=dict)

    def finish(self, samples: array[float] | None) -> PerfResult:
        secs = max(self.seconds, 1e-9)
        self.records_per_s = self.records / secs
        self.mb_per_s = self.bytes / secs / 1e6
        if samples:
            self.latency_ms = latency_summary(samples)
        return self

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def latency_summary(samples: array[float]) -> dict[str, float]:
    """avg, p50, p95, p99, p99.9 and max of latency samples given in milliseconds."""
    ordered = sorted(samples)
    n = len(ordered)

    def pct(p: float) -> float:
        return ordered[min(n - 1, int(p / 100.0 * n))]

    return {
        "avg": sum(ordered) / n,
        "p50": pct(50),
        "p95": pct(95),
        "p99": pct(99),
        "p99.9": pct(99.9),
        "max": ordered[-1],
        "samples": float(n),
    }


class Throttle:
    """Keeps a loop at ``rate`` iterations/s (0 = unlimited) by sleeping in small steps."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.start = time.perf_counter()

    def wait(self, done: int) -> None:
        if self.rate <= 0:
            return
        ahead = done / self.rate - (time.perf_counter() - self.start)
        if ahead > 0.0005:
            time.sleep(ahead)


def _confluent() -> Any:
    try:
        import confluent_kafka
    except ImportError:
        raise PerfError("the librdkafka client needs confluent-kafka: pip install 'odradek[bench]'") from None
    return confluent_kafka


#: client properties the topic check's admin client shares with the measured client: how to
#: reach the broker (a TLS listener), not how to produce or consume
CONNECTION_PROPERTY_PREFIXES = ("security.", "ssl.", "sasl.")


def ensure_topic(
    bootstrap: str, topic: str, partitions: int, *, create: bool = True, properties: dict[str, str] | None = None
) -> None:
    """Create ``topic`` with ``partitions`` partitions unless it exists (CreateTopics); with
    ``create=False`` a missing topic is an error instead. ``properties``' connection settings
    (``security.protocol``, ``ssl.*``, ``sasl.*``) go to the admin client too."""
    ck = _confluent()
    # confluent_kafka.admin re-exports these without __all__, which strict mypy reports
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    connection = {k: v for k, v in (properties or {}).items() if k.startswith(CONNECTION_PROPERTY_PREFIXES)}
    admin = AdminClient({"bootstrap.servers": bootstrap, **connection})
    try:
        if topic in admin.list_topics(timeout=10).topics:
            return
    except ck.KafkaException as exc:  # no broker answered at bootstrap within the timeout
        raise PerfError(f"cannot reach a broker at {bootstrap}: {exc.args[0].str()}") from None
    if not create:
        raise PerfError(f"topic {topic!r} does not exist (perf consume reads an existing topic: fill it first)")
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    try:
        futures[topic].result(timeout=30)
    except ck.KafkaException as exc:
        if exc.args[0].code() != ck.KafkaError.TOPIC_ALREADY_EXISTS:
            raise PerfError(f"cannot create topic {topic!r}: {exc}") from None


def payload_for(record_size: int) -> bytes:
    """A record value of ``record_size`` bytes: random letters, like Kafka's perf tool."""
    alphabet = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    raw = os.urandom(record_size)
    return bytes(alphabet[b % len(alphabet)] for b in raw)


def _produce_result(
    client: str,
    conf: dict[str, Any],
    num_records: int,
    record_size: int,
    elapsed: float,
    errors: int,
    samples: array[float],
    progress: ProgressFn | None,
) -> PerfResult:
    """The summary both produce drivers end with (the final progress tick, the settings used)."""
    if progress is not None:
        progress(num_records, num_records * record_size)
    result = PerfResult("produce", client, num_records, num_records * record_size, elapsed, errors=errors)
    result.settings = {k: v for k, v in conf.items() if k != "bootstrap.servers"}
    return result.finish(samples)


def produce_confluent(
    bootstrap: str,
    topic: str,
    num_records: int,
    record_size: int,
    *,
    throughput: float = 0,
    acks: str = "1",
    compression: str = "none",
    batch_size: int = 1_000_000,
    linger_ms: float = 5,
    latency_every: int = 10,
    extra: dict[str, Any] | None = None,
    progress: ProgressFn | None = None,
) -> PerfResult:
    """Produce ``num_records`` records of ``record_size`` bytes through librdkafka."""
    ck = _confluent()
    conf = {
        "bootstrap.servers": bootstrap,
        "acks": acks,
        "compression.type": compression,
        "batch.size": batch_size,
        "linger.ms": linger_ms,
        "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 2_097_151,
        "enable.idempotence": False,
        **(extra or {}),
    }
    producer = ck.Producer(conf)
    value = payload_for(record_size)
    samples: array[float] = array("d")
    errors = [0]

    def on_delivery_timed(sent: float) -> Callable[[Any, Any], None]:
        def cb(err: Any, msg: Any) -> None:
            if err is not None:
                errors[0] += 1
            else:
                samples.append((time.perf_counter() - sent) * 1000.0)

        return cb

    def on_error_only(err: Any, msg: Any) -> None:
        if err is not None:
            errors[0] += 1

    throttle = Throttle(throughput)
    produce = producer.produce
    poll = producer.poll
    start = time.perf_counter()
    for i in range(num_records):
        cb = on_delivery_timed(time.perf_counter()) if i % latency_every == 0 else on_error_only
        while True:
            try:
                produce(topic, value, on_delivery=cb)
                break
            except BufferError:
                poll(0.005)
        if i % 2000 == 0:
            poll(0)
            throttle.wait(i)
            if progress is not None:
                progress(i, i * record_size)
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - start
    if remaining:
        raise PerfError(f"{remaining} records were not delivered within 120 s")
    return _produce_result("librdkafka", conf, num_records, record_size, elapsed, errors[0], samples, progress)


def consume_confluent(
    bootstrap: str,
    topic: str,
    num_records: int,
    *,
    timeout_s: float = 60.0,
    extra: dict[str, Any] | None = None,
    progress: ProgressFn | None = None,
) -> PerfResult:
    """Consume ``num_records`` from the beginning of every partition of ``topic`` through librdkafka."""
    ck = _confluent()
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": f"odradek-perf-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "fetch.max.bytes": 52_428_800,
        "max.partition.fetch.bytes": 10_485_760,
        "queued.max.messages.kbytes": 1_048_576,
        **(extra or {}),
    }
    consumer = ck.Consumer(conf)
    meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
    if meta is None or meta.error is not None:
        consumer.close()
        raise PerfError(f"topic {topic!r} is not available: {meta.error if meta else 'missing'}")
    consumer.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in meta.partitions])
    count = 0
    size = 0
    start = time.perf_counter()
    deadline = start + timeout_s
    try:
        while count < num_records:
            if time.perf_counter() > deadline:
                raise PerfError(f"consumed {count} of {num_records} records before the {timeout_s:.0f} s timeout")
            for msg in consumer.consume(num_messages=10_000, timeout=0.5):
                if msg.error() is not None:
                    continue
                count += 1
                size += len(msg.value() or b"")
            if progress is not None:
                progress(count, size)
    finally:
        consumer.close()
    elapsed = time.perf_counter() - start
    result = PerfResult("consume", "librdkafka", count, size, elapsed)
    return result.finish(None)


def e2e_confluent(
    bootstrap: str,
    topic: str,
    num_records: int,
    record_size: int,
    *,
    throughput: float = 10_000,
    acks: str = "1",
    linger_ms: float = 0,
    producer_extra: dict[str, Any] | None = None,
    consumer_extra: dict[str, Any] | None = None,
    progress: ProgressFn | None = None,
) -> PerfResult:
    """End-to-end latency at a fixed rate: the producer stamps, the consumer subtracts."""
    ck = _confluent()
    record_size = max(record_size, 8)
    filler = payload_for(record_size - 8)
    consumer = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"odradek-e2e-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 5,
            "fetch.min.bytes": 1,
            **(consumer_extra or {}),
        }
    )
    meta = consumer.list_topics(topic, timeout=10).topics[topic]
    lows_highs = [consumer.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=10) for p in meta.partitions]
    consumer.assign(
        [ck.TopicPartition(topic, p, high) for p, (_, high) in zip(meta.partitions, lows_highs, strict=True)]
    )
    samples: array[float] = array("d")
    received = [0]
    done = threading.Event()

    def consume_loop() -> None:
        # poll() returns as soon as one record is there; consume(n, timeout) would wait for n
        # records (100 ms at 10,000/s) and put that wait into every sample
        while received[0] < num_records and not done.is_set():
            first = consumer.poll(0.1)
            if first is None:
                continue
            now = time.time_ns()
            for msg in [first, *consumer.consume(num_messages=1000, timeout=0)]:
                if msg.error() is not None:
                    continue
                (sent,) = struct.unpack_from(">q", msg.value(), 0)
                samples.append((now - sent) / 1e6)
                received[0] += 1

    reader = threading.Thread(target=consume_loop, name="e2e-consumer", daemon=True)
    reader.start()
    producer_conf = {"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": linger_ms, **(producer_extra or {})}
    producer = ck.Producer(producer_conf)
    throttle = Throttle(throughput)
    start = time.perf_counter()
    for i in range(num_records):
        producer.produce(topic, struct.pack(">q", time.time_ns()) + filler)
        producer.poll(0)
        throttle.wait(i + 1)
        if progress is not None and i % 500 == 0:
            progress(received[0], received[0] * record_size)
    producer.flush(60)
    reader.join(timeout=60)
    done.set()
    reader.join(timeout=5)
    consumer.close()
    elapsed = time.perf_counter() - start
    if received[0] < num_records:
        raise PerfError(f"only {received[0]} of {num_records} records arrived end to end")
    result = PerfResult("e2e", "librdkafka", received[0], received[0] * record_size, elapsed)
    result.settings = {"throughput": throughput, "acks": acks, "linger.ms": linger_ms, **(producer_extra or {})}
    return result.finish(samples)


# -- odradek's own client (--client odradek) ------------------------------------------------------


def produce_odradek(
    bootstrap: str,
    topic: str,
    num_records: int,
    record_size: int,
    *,
    throughput: float = 0,
    acks: str = "1",
    compression: str = "none",
    batch_size: int = 1_000_000,
    linger_ms: float = 5,
    latency_every: int = 10,
    extra: dict[str, Any] | None = None,
    progress: ProgressFn | None = None,
) -> PerfResult:
    """Produce through :class:`odradek.client.Producer`: measures odradek's client, not the broker.

    Every record's future counts errors; every ``latency_every``-th is also timed from ``send``.
    """
    from .client import Producer

    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "acks": acks,
        "compression.type": compression,
        "batch.size": batch_size,
        "linger.ms": int(linger_ms),
        "enable.idempotence": False,
        "buffer.memory": 256 << 20,
        "max.request.size": max(1_048_576, batch_size + 4096),
        **(extra or {}),
    }
    value = payload_for(record_size)
    samples: array[float] = array("d")
    errors = [0]

    def timed(sent: float) -> Callable[[Any], None]:
        def done(future: Any) -> None:
            if future.exception() is not None:
                errors[0] += 1
            else:
                samples.append((time.perf_counter() - sent) * 1000.0)

        return done

    def untimed(future: Any) -> None:
        if future.exception() is not None:
            errors[0] += 1

    throttle = Throttle(throughput)
    with Producer(conf) as producer:
        producer.partitions_for(topic)  # metadata before the clock starts, as librdkafka's bootstrap
        send = producer.send
        start = time.perf_counter()
        for i in range(num_records):
            future = send(topic, value)
            future.add_done_callback(timed(time.perf_counter()) if i % latency_every == 0 else untimed)
            if i % 2000 == 0:
                throttle.wait(i)
                if progress is not None:
                    progress(i, i * record_size)
        producer.flush(120)
        elapsed = time.perf_counter() - start
    return _produce_result("odradek", conf, num_records, record_size, elapsed, errors[0], samples, progress)


def consume_odradek(
    bootstrap: str,
    topic: str,
    num_records: int,
    *,
    timeout_s: float = 60.0,
    extra: dict[str, Any] | None = None,
    progress: ProgressFn | None = None,
) -> PerfResult:
    """Consume ``num_records`` from the beginning of every partition with :class:`odradek.client.Consumer`."""
    from .client import Consumer, TopicPartition

    conf = {
        "bootstrap.servers": bootstrap,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "max.partition.fetch.bytes": 10_485_760,
        "max.poll.records": 10_000,
        **(extra or {}),
    }
    count = 0
    size = 0
    with Consumer(conf) as consumer:
        parts = [TopicPartition(topic, p) for p in consumer.partitions_for(topic)]
        consumer.assign(parts)
        consumer.seek_to_beginning(parts)
        start = time.perf_counter()
        deadline = start + timeout_s
        while count < num_records:
            if time.perf_counter() > deadline:
                raise PerfError(f"consumed {count} of {num_records} records before the {timeout_s:.0f} s timeout")
            for records in consumer.poll(0.5).values():
                count += len(records)
                size += sum(len(r.value or b"") for r in records)
            if progress is not None:
                progress(count, size)
        elapsed = time.perf_counter() - start
    return PerfResult("consume", "odradek", count, size, elapsed).finish(None)


def e2e_odradek(
    bootstrap: str,
    topic: str,
    num_records: int,
    record_size: int,
    *,
    throughput: float = 10_000,
    acks: str = "1",
    linger_ms: float = 0,
    producer_extra: dict[str, Any] | None = None,
    consumer_extra: dict[str, Any] | None = None,
    progress: ProgressFn | None = None,
) -> PerfResult:
    """End-to-end latency at a fixed rate with odradek's producer and consumer (stamp in the value)."""
    from .client import Consumer, Producer, TopicPartition

    record_size = max(record_size, 8)
    filler = payload_for(record_size - 8)
    samples: array[float] = array("d")
    received = [0]
    done = threading.Event()
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "enable.auto.commit": False, "fetch.max.wait.ms": 5, **(consumer_extra or {})}
    )
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "linger.ms": int(linger_ms),
            "enable.idempotence": False,
            **(producer_extra or {}),
        }
    )
    try:
        parts = [TopicPartition(topic, p) for p in consumer.partitions_for(topic)]
        consumer.assign(parts)
        for tp, end in consumer.end_offsets(parts).items():
            consumer.seek(tp, end)
        producer.partitions_for(topic)

        def consume_loop() -> None:
            while received[0] < num_records and not done.is_set():
                for records in consumer.poll(0.1).values():
                    now = time.time_ns()
                    for r in records:
                        (sent,) = struct.unpack_from(">q", r.value or bytes(8), 0)
                        samples.append((now - sent) / 1e6)
                    received[0] += len(records)

        reader = threading.Thread(target=consume_loop, name="e2e-consumer", daemon=True)
        reader.start()
        throttle = Throttle(throughput)
        start = time.perf_counter()
        for i in range(num_records):
            producer.send(topic, struct.pack(">q", time.time_ns()) + filler)
            throttle.wait(i + 1)
            if progress is not None and i % 500 == 0:
                progress(received[0], received[0] * record_size)
        producer.flush(60)
        reader.join(timeout=60)
        done.set()
        reader.join(timeout=5)
        elapsed = time.perf_counter() - start
    finally:
        done.set()
        producer.close()
        consumer.close()
    if received[0] < num_records:
        raise PerfError(f"only {received[0]} of {num_records} records arrived end to end")
    result = PerfResult("e2e", "odradek", received[0], received[0] * record_size, elapsed)
    result.settings = {"throughput": throughput, "acks": acks, "linger.ms": linger_ms, **(producer_extra or {})}
    return result.finish(samples)
