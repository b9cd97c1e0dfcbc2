"""The producer against an in-memory broker under trio's MockClock: linger, batching, idempotent
retries that keep order and never duplicate, acks=0, buffer.memory backpressure, close; and the
clients' deadlines on blocking calls."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from client_fakes import FakeBroker

from odradek.client.aio import AsyncConsumer, AsyncProducer
from odradek.errors import ErrorCode, KafkaError
from odradek.interfaces import TopicPartition
from odradek.manager import Plugins, build_plugin_manager

PLUGINS = Plugins(
    build_plugin_manager(
        entry_points_enabled=False, extra=["odradek.plugins.compress.plugin", "odradek.default_partitioners"]
    )
)


def _producer(broker: FakeBroker, **config: object) -> AsyncProducer:
    conf = {"bootstrap.servers": "fake:9092", "retry.backoff.ms": 10, **config}
    return AsyncProducer(conf, plugins=PLUGINS, connector=broker.connector())


@pytest.fixture
def clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def test_linger_holds_a_batch_until_it_expires(autojump_clock: trio.testing.MockClock) -> None:
    broker = FakeBroker({"t": 1})
    async with _producer(broker, **{"linger.ms": 1000}) as producer:
        await producer.partitions_for("t")
        start = trio.current_time()
        futures = [await producer.send("t", b"v%d" % i) for i in range(5)]
        await trio.sleep(0.5)
        assert broker.produce_requests == 0  # still lingering
        metadata = [await f for f in futures]
        assert 1.0 <= trio.current_time() - start < 1.1
        assert broker.produce_requests == 1  # one batch, one request
        assert [m.offset for m in metadata] == [0, 1, 2, 3, 4]


async def test_full_batches_go_without_waiting_for_linger(autojump_clock: trio.testing.MockClock) -> None:
    broker = FakeBroker({"t": 1})
    async with _producer(broker, **{"linger.ms": 60000, "batch.size": 1000}) as producer:
        await producer.partitions_for("t")
        futures = [await producer.send("t", b"x" * 100) for _ in range(30)]
        await futures[20]  # full batches were sent long before linger.ms
        assert trio.current_time() < 60
        await producer.flush()
        assert [v for _, v in broker.logs[TopicPartition("t", 0)]] == [b"x" * 100] * 30


@pytest.mark.parametrize(
    "faults",
    [
        ["drop_after"],
        ["ok", "drop_before"],
        ["ok", "drop_after", "ok", "drop_before", "drop_after"],
        ["drop_after"] * 6,
    ],
)
async def test_retries_keep_order_and_never_duplicate(
    autojump_clock: trio.testing.MockClock, faults: list[str]
) -> None:
    broker = FakeBroker({"t": 2}, faults=faults)
    async with _producer(broker, **{"linger.ms": 1, "batch.size": 500}) as producer:
        await producer.partitions_for("t")
        futures = []
        for i in range(300):
            futures.append(await producer.send("t", b"%05d" % i, partition=i % 2))
            if i % 25 == 0:
                await trio.sleep(0.002)  # let several requests be in flight when the faults hit
        metadata = [await f for f in futures]
    for p in (0, 1):
        log = broker.logs[TopicPartition("t", p)]
        assert [v for _, v in log] == [b"%05d" % i for i in range(p, 300, 2)]  # once each, in order
        assert [m.offset for m in metadata[p::2]] == list(range(150))
    assert broker.connections > 1  # the faults really cut connections
    # a retry resends the very same batch: one sequence number, one content
    by_sequence: dict[tuple[TopicPartition, int], set[tuple[bytes | None, ...]]] = {}
    for tp, seq, values in broker.received:
        by_sequence.setdefault((tp, seq), set()).add(values)
    assert all(len(contents) == 1 for contents in by_sequence.values())
    if "drop_after" in faults:  # written but unacknowledged: the broker saw those batches twice
        assert len(broker.received) > len(by_sequence)


async def test_without_idempotence_acks_0_completes_without_offsets(autojump_clock: trio.testing.MockClock) -> None:
    broker = FakeBroker({"t": 1})
    async with _producer(broker, acks="0") as producer:
        assert producer.idempotent is False
        md = await producer.send_and_wait("t", b"fire-and-forget")
        assert md.offset == -1
    assert broker.logs[TopicPartition("t", 0)] == [(0, b"fire-and-forget")]


async def test_buffer_memory_backpressure_times_out_with_max_block(autojump_clock: trio.testing.MockClock) -> None:
    broker = FakeBroker({"t": 1})
    conf = {"linger.ms": 100000, "batch.size": 100000, "buffer.memory": 2000, "max.block.ms": 3000}
    async with _producer(broker, **conf) as producer:
        await producer.partitions_for("t")
        for _ in range(16):  # 16 records of 121 bytes fit in 2000, the 17th does not
            await producer.send("t", b"x" * 100)
        start = trio.current_time()
        with pytest.raises(KafkaError, match="buffer.memory") as info:
            await producer.send("t", b"x" * 100)
        assert info.value.code is ErrorCode.REQUEST_TIMED_OUT
        assert trio.current_time() - start == pytest.approx(3.0, abs=0.01)
        await producer.flush()  # sends the lingering batch; memory comes back
        await producer.send("t", b"after")


async def test_unknown_topic_waits_max_block_ms(autojump_clock: trio.testing.MockClock) -> None:
    broker = FakeBroker({"t": 1})
    async with _producer(broker, **{"max.block.ms": 2000}) as producer:
        with pytest.raises(KafkaError, match="not present in metadata after max.block.ms"):
            await producer.send("missing", b"v")


async def test_close_flushes_and_callbacks_run(autojump_clock: trio.testing.MockClock) -> None:
    broker = FakeBroker({"t": 3})
    seen: list[tuple[int, int]] = []
    async with _producer(broker, **{"linger.ms": 50}) as producer:
        for i in range(10):
            await producer.send(
                "t", b"v", key=b"k%d" % i, callback=lambda md, err: seen.append((md.partition, md.offset))
            )
    assert len(seen) == 10
    assert sum(len(log) for log in broker.logs.values()) == 10


async def test_sticky_partitioning_fills_one_batch_at_a_time(autojump_clock: trio.testing.MockClock) -> None:
    broker = FakeBroker({"t": 4})
    async with _producer(broker, **{"linger.ms": 100000, "batch.size": 1300}) as producer:
        await producer.partitions_for("t")
        futures = [await producer.send("t", b"x" * 100) for _ in range(40)]
        await producer.flush()
        parts = [f.result().partition for f in futures]
    # keyless records stick to a partition until its batch is full (10 records), then move on
    runs = [parts[i : i + 10] for i in range(0, 40, 10)]
    assert all(len(set(run)) == 1 for run in runs)
    assert all(runs[i][0] != runs[i + 1][0] for i in range(3))


async def test_blocking_calls_time_out_with_a_kafka_error(autojump_clock: trio.testing.MockClock) -> None:
    """A topic the cluster never reports: the consumer's partitions_for gives up after
    default.api.timeout.ms with REQUEST_TIMED_OUT saying what timed out (Kafka's
    TimeoutException), the producer's after max.block.ms, and a flush with a deadline that
    passes raises the same code; never trio's TooSlowError."""
    broker = FakeBroker({"t": 1}, faults=["drop_before"] * 1000)
    conf = {"bootstrap.servers": "fake:9092", "retry.backoff.ms": 10, "default.api.timeout.ms": 2000}
    async with AsyncConsumer(conf, plugins=PLUGINS, connector=broker.connector()) as consumer:
        start = trio.current_time()
        with pytest.raises(KafkaError, match=r"partitions of topic 'missing': timed out after 2000 ms") as err:
            await consumer.partitions_for("missing")
        assert err.value.code is ErrorCode.REQUEST_TIMED_OUT
        assert 2.0 <= trio.current_time() - start < 2.5
    async with _producer(broker, **{"max.block.ms": 1000}) as producer:
        with pytest.raises(KafkaError, match="not present in metadata") as err:
            await producer.partitions_for("missing")
        assert err.value.code is ErrorCode.REQUEST_TIMED_OUT
        await producer.send("t", b"never acknowledged")
        with pytest.raises(KafkaError, match=r"flush: records still unacknowledged after 500 ms") as err:
            await producer.flush(timeout=0.5)
        assert err.value.code is ErrorCode.REQUEST_TIMED_OUT


async def test_offset_calls_without_a_group_id_fail_at_once(autojump_clock: trio.testing.MockClock) -> None:
    """commit(), commit_async() and committed() need a group.id, as in Kafka's consumer
    (InvalidGroupIdException): without one they raise INVALID_GROUP_ID at once, even when
    nothing is assigned, instead of committing nothing silently."""
    broker = FakeBroker({"t": 1})
    async with AsyncConsumer({"bootstrap.servers": "fake:9092"}, plugins=PLUGINS, connector=broker.connector()) as c:
        c.assign([TopicPartition("t", 0)])
        for call in (c.commit(), c.commit({TopicPartition("t", 0): 1}), c.committed([TopicPartition("t", 0)])):
            with pytest.raises(KafkaError, match="needs a group.id") as err:
                await call
            assert err.value.code is ErrorCode.INVALID_GROUP_ID
        with pytest.raises(KafkaError, match="needs a group.id"):
            c.commit_async()


def test_header_keys_must_be_strings() -> None:
    """A null header key is refused, as Kafka's producer refuses it (it was written as the text
    "None"; found through the Spark sink); so is a header that is not a (key, value) pair."""
    from odradek.client.producer import to_headers

    assert to_headers([("a", b"1"), ("b", None)]) == [("a", b"1"), ("b", None)]
    assert to_headers({"c": "x"}) == [("c", b"x")]
    with pytest.raises(TypeError, match="header key"):
        to_headers([(None, b"x")])
    with pytest.raises(TypeError, match="pair"):
        to_headers([None])  # type: ignore[list-item]
